"""Transpose, B = A^T, of a matrix of any dtype gpumat holds: argument checks, variant choice, launch.

Every variant reads A (rows x cols, stride lda) and writes B (cols x rows, stride ldb), for each of a
batch of matrices (A's bsa and B's bsb elements apart); see cuda/transpose.cu. The grid puts A's column
tiles on x, A's row tiles on y (capped at 65535; the kernels walk the rest in a grid-stride loop) and the
batch on z, a matrix a layer: a batch is one launch, or one per 65535 matrices past that
(transpose_region launches the pieces). The kernels move bits: KERNELS[(variant, suffix)] holds
every variant of every width and type of _dtypes.MOVE_SUFFIXES (int32 moves through the float32
entries: _dtypes.MOVE_SUFFIX), strip kernels for narrow matrices and the 2-byte kernels included;
VARIANTS is the tiled family by name (the same names for every dtype).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._dtypes import ITEMSIZE, MOVE_SUFFIX, MOVE_SUFFIXES, STORAGE_ONLY_SUFFIXES
from .matrix import Matrix, matrices, storage
from .memory import DeviceBuffer
from .memory.ordering import done_on, mark_done, use_on
from .operands import as_matrix, check_out, operand_device, same_dtype
from .runtime.devices import thread_state
from .runtime.geometry import MAX_GRID_X, MAX_GRID_YZ, cdiv, tiled_grid
from .runtime.kernels import FixedLaunch, Kernel
from .runtime.memops import copy_device_2d
from .runtime.streams import LEGACY_STREAM, stream_handle

SIGNATURE = "PPqqqqqqq"  # A, B, rows, cols, lda, ldb, batch, bsa, bsb (the matrices' strides in elements)


@dataclass(frozen=True)
class Variant:
    kernel: Kernel
    block: tuple[int, int, int]
    tile: tuple[int, int]  # rows x cols of A one block covers per step of its row-tile loop
    skew: int = 0  # extra rows the row tiles span (sector_aligned shifts B's row pieces by up to 7 (float32),
    # words256x64 by 1, sector_words128x64 by 15)

    def grid(self, rows: int, cols: int) -> tuple[int, int, int]:
        """Grid for transposing a rows x cols matrix A."""
        return tiled_grid(rows + self.skew, cols, *self.tile)


# 2-byte elements have kernels of their own that move pairs of elements as 4-byte words
TWO_BYTE_SUFFIXES = tuple(dt for dt in MOVE_SUFFIXES if ITEMSIZE[dt] == 2)


def _variant(name: str, dtype: str, block: tuple[int, int], tile: tuple[int, int], skew: int = 0) -> Variant:
    return Variant(
        Kernel("transpose", f"transpose_{name}_{dtype}", SIGNATURE, waits_for_previous=True), (*block, 1), tile, skew
    )


def _family(dtype: str) -> dict[str, Variant]:
    sector = 32 // ITEMSIZE[dtype]  # elements a 32-byte sector
    return {
        "naive": _variant("naive", dtype, (32, 8), (8, 32)),  # one element a thread, scattered writes
        "tiled": _variant("tiled", dtype, (32, 32), (32, 32)),  # seed 001's shared-memory tile
        "tiled_padded": _variant("tiled_padded", dtype, (32, 32), (32, 32)),  # tile rows padded to odd words
        "tiled_rect": _variant("tiled_rect", dtype, (32, 8), (32, 32)),  # 32 x 8 threads, 4 elements each
        "tiled_rect64": _variant("tiled_rect64", dtype, (32, 8), (64, 64)),  # 32 x 8 threads, 64 x 64 tile, 16 each
        # the 64 x 64 tile with each row piece of B shifted to start on a 32-byte sector
        "sector_aligned": _variant("sector_aligned", dtype, (32, 8), (64, 64), skew=sector - 1),
    }


@dataclass(frozen=True)
class NarrowVariant:
    """A strip kernel for narrow matrices: axis "cols" takes A with 1..NARROW_COLS_MAX columns (strips of
    whole rows), axis "rows" takes A with 1..NARROW_ROWS_MAX rows (strips of whole columns), with `nbytes`
    of shared memory. 2-byte dtypes have two more modes with 4-byte (and 16-byte) accesses:
      "pairs": A and B 4-byte aligned with even lda and ldb; axis "cols" needs an even width <= 126;
      "flat":  an odd narrow dimension; axis "cols": A contiguous (lda == cols) and 16-byte aligned, B
               4-byte aligned with even ldb; axis "rows": B contiguous (ldb == rows) and 16-byte aligned,
               A 4-byte aligned with even lda;
      "flat_even": axis "cols" only, an even width <= 126, A and B as "flat" asks (the raw strip staged,
               then B's words staged a second time: `nbytes` is the raw strip's share);
      "flat_parity": "flat_even" for B 2-byte aligned at any ldb (rows of B starting on either half of
               a word);
      "flat_odd_parity": "flat" (odd widths) for B 2-byte aligned at any ldb.
    1-byte elements have one more on each axis:
      "quads": axis "cols": A contiguous (lda == cols) and 16-byte aligned, B at any alignment and ldb (its
               rows written as aligned words, the bytes before a row's first word boundary one by one);
               axis "rows": up to QUADS_ROWS_MAX rows, B contiguous (ldb == rows) at any alignment, A at any
               alignment and stride (4 x 4 blocks of bytes read as words, B's run built in shared memory).
    Every dtype has one more mode, axis "rows" only:
      "chunks": B contiguous (ldb == rows) and 16-byte aligned, A at any alignment and stride (its rows
               read as the aligned 16-byte chunks that cover them)."""

    kernel: Kernel
    axis: str  # "cols" or "rows": which dimension of A is narrow
    itemsize: int
    nbytes: int = 32768
    mode: str = "plain"  # "plain", "pairs", "flat", "flat_even", "flat_parity", "flat_odd_parity", "quads", "chunks"
    block: tuple[int, int, int] = (256, 1, 1)

    def strip(self, rows: int, cols: int) -> int:
        """What one block moves per step (the kernel's R): rows of A (axis "cols"; row pairs in mode
        "pairs") or columns of A (axis "rows")."""
        if self.mode == "pairs":
            words = self.nbytes // 4
            if self.axis == "cols":
                return (words // (cols + 1)) & ~15
            return (words // cdiv(rows, 2) - 1) & ~15
        if self.mode == "chunks":
            return 16 * ((self.nbytes // rows - 16) // 16) // self.itemsize
        if self.mode == "quads" and self.axis == "rows":
            return (self.nbytes // rows) & ~31
        elems = self.nbytes // self.itemsize
        if self.mode in ("flat", "flat_even", "flat_parity", "flat_odd_parity", "quads"):
            return (elems // (cols if self.axis == "cols" else rows)) & ~15
        if self.axis == "cols":
            return (elems // (cols | 1)) & ~15
        return (elems // rows - 1) & ~15

    def accepts(self, rows: int, cols: int, a_address: int, lda: int, b_address: int, ldb: int) -> bool:
        """Whether the kernel may run on these operands (its contract)."""
        if self.axis == "rows" and self.mode == "quads":
            return 1 <= rows <= QUADS_ROWS_MAX and ldb == rows
        if (
            self.axis == "cols"
            and not 1 <= cols <= NARROW_COLS_MAX
            or self.axis == "rows"
            and not 1 <= rows <= NARROW_ROWS_MAX
        ):
            return False
        if self.mode == "pairs":
            return (
                (a_address | b_address) % 4 == 0
                and lda % 2 == 0
                and ldb % 2 == 0
                and (self.axis == "rows" or cols % 2 == 0)
            )
        if self.mode == "chunks":
            return ldb == rows and b_address % 16 == 0
        if self.axis == "cols" and self.mode in FLAT_COLS:  # A contiguous and 16-byte aligned, then B's rule
            width_parity, b_alignment, even_ldb = FLAT_COLS[self.mode]
            if lda != cols or a_address % 16 or width_parity is not None and cols % 2 != width_parity:
                return False
            return b_address % b_alignment == 0 and not (even_ldb and ldb % 2)
        if self.mode == "flat":
            return rows % 2 == 1 and ldb == rows and b_address % 16 == 0 and a_address % 4 == 0 and lda % 2 == 0
        return True

    def grid(self, rows: int, cols: int) -> tuple[int, int, int]:
        r = self.strip(rows, cols)
        if self.axis == "cols":
            return 1, max(min(cdiv(cdiv(rows, 2) if self.mode == "pairs" else rows, r), MAX_GRID_YZ), 1), 1
        return max(min(cdiv(cols, r), MAX_GRID_X), 1), 1, 1


# The strips of a contiguous, 16-byte aligned A (axis "cols"), by mode: (the width's parity, or None for any
# width; B's alignment in bytes; whether B's ldb must be even, so that with a 4-byte aligned B every row of
# B starts on a word)
FLAT_COLS = {
    "flat": (1, 4, True),
    "flat_even": (0, 4, True),
    "flat_parity": (0, 2, False),
    "flat_odd_parity": (1, 2, False),
    "quads": (None, 1, False),  # 1-byte elements
}
NARROW_COLS_MAX = 127  # transpose_narrow_cols_*: A's width limit (the kernel writes nothing beyond it)
NARROW_ROWS_MAX = 64  # transpose_narrow_rows_*: A's height limit
QUADS_ROWS_MAX = 128  # transpose_narrow_rows_quads16k_s8's height limit


def _narrow(axis: str, dtype: str, suffix: str = "", nbytes: int = 32768, mode: str = "plain") -> NarrowVariant:
    name = f"transpose_narrow_{axis}{suffix}_{dtype}"
    return NarrowVariant(
        Kernel("transpose", name, SIGNATURE, waits_for_previous=True), axis, ITEMSIZE[dtype], nbytes, mode
    )


KERNELS: dict[tuple[str, str], Variant | NarrowVariant] = {
    **{(name, dt): v for dt in MOVE_SUFFIXES for name, v in _family(dt).items()},
    **{(f"narrow_{axis}", dt): _narrow(axis, dt) for dt in MOVE_SUFFIXES for axis in ("cols", "rows")},
    **{(f"narrow_{axis}16k", dt): _narrow(axis, dt, "16k", 16384) for dt in MOVE_SUFFIXES for axis in ("cols", "rows")},
    **{
        (f"narrow_{axis}_pairs{sfx}", dt): _narrow(axis, dt, f"_pairs{sfx}", nbytes, "pairs")
        for dt in TWO_BYTE_SUFFIXES
        for axis in ("cols", "rows")
        for sfx, nbytes in (("", 32768), ("16k", 16384))
    },
    **{
        (f"narrow_{axis}_flat16k", dt): _narrow(axis, dt, "_flat16k", 16384, "flat")
        for dt in TWO_BYTE_SUFFIXES
        for axis in ("cols", "rows")
    },
    **{
        ("narrow_cols_flat_even16k", dt): _narrow("cols", dt, "_flat_even16k", 16384, "flat_even")
        for dt in TWO_BYTE_SUFFIXES
    },
    **{
        ("narrow_cols_flat_parity16k", dt): _narrow("cols", dt, "_flat_parity16k", 16384, "flat_parity")
        for dt in TWO_BYTE_SUFFIXES
    },
    **{
        ("narrow_cols_flat_odd_parity16k", dt): _narrow("cols", dt, "_flat_odd_parity16k", 16384, "flat_odd_parity")
        for dt in TWO_BYTE_SUFFIXES
    },
    ("narrow_cols_quads16k", "s8"): _narrow("cols", "s8", "_quads16k", 16384, "quads"),
    ("narrow_rows_quads16k", "s8"): _narrow("rows", "s8", "_quads16k", 16384, "quads"),
    **{
        (f"narrow_rows_chunks{sfx}", dt): _narrow("rows", dt, f"_chunks{sfx}", nbytes, "chunks")
        for dt in MOVE_SUFFIXES
        for sfx, nbytes in (("", 32768), ("16k", 16384))
    },
    # 2 x 2 blocks moved as 4-byte words (A, B 4-byte aligned, lda, ldb even; element by element otherwise)
    **{("pairs128x64", dt): _variant("pairs128x64", dt, (32, 8), (128, 64)) for dt in TWO_BYTE_SUFFIXES},
    # A read and B written as aligned 4-byte words at any alignment and strides (B's rows start a row early
    # where their parity asks)
    **{("words256x64", dt): _variant("words256x64", dt, (32, 8), (256, 64), skew=1) for dt in TWO_BYTE_SUFFIXES},
    # the same words, 128-row tiles, each row piece of B shifted to start on a 32-byte sector
    **{
        ("sector_words128x64", dt): _variant("sector_words128x64", dt, (32, 8), (128, 64), skew=15)
        for dt in TWO_BYTE_SUFFIXES
    },
    # 1-byte elements (int8, the FP8 formats): 4 x 4 blocks moved as 4-byte words (A, B 4-byte aligned, lda,
    # ldb multiples of 4; byte by byte otherwise)
    ("quads128", "s8"): _variant("quads128", "s8", (32, 8), (128, 128)),
    # the same 128 x 128 tiles at any alignment and strides, moved as words, each row piece of B shifted to
    # start on a 32-byte sector
    ("sector_quads128", "s8"): _variant("sector_quads128", "s8", (32, 8), (128, 128), skew=31),
}

VARIANTS: dict[str, Variant] = {name: v for (name, dt), v in KERNELS.items() if dt == "f32" and isinstance(v, Variant)}
# The tiles of 2-byte elements alone and of 1-byte elements alone (ValueError for other dtypes)
TWO_BYTE_TILES = tuple(
    name for (name, dt), v in KERNELS.items() if dt == "f16" and isinstance(v, Variant) and name not in VARIANTS
)
ONE_BYTE_TILES = tuple(
    name for (name, dt), v in KERNELS.items() if dt == "s8" and isinstance(v, Variant) and name not in VARIANTS
)
# What `algorithm=` takes: the tiled family (every dtype), the 2- and 1-byte tiles, and the two strip kernels
# for narrow matrices (the best strip variant of the dtype; ValueError when the shape is not narrow).
ALGORITHMS = ("auto", *VARIANTS, *TWO_BYTE_TILES, *ONE_BYTE_TILES, "narrow_cols", "narrow_rows")
SECTOR_BYTES = 32
NARROW_AUTO_COLS = 63  # auto's narrow-columns threshold (measured on the H100, benchmarks/NOTES.md)
NARROW_AUTO_ROWS = 31
# Rows of B that do not start on 32-byte sectors cost every tile that writes them as 64-element pieces: a
# partial sector at each end, the rest of it written by another block at another time. sector_aligned
# shifts each row's pieces onto sectors (its row tiles stage SECTOR - 1 extra rows of A). Measured on the
# H200 (benchmarks/NOTES.md, thirty-second session; copy time / kernel time, tiled_rect64 -> sector_aligned):
# float32 11585^2 0.64 -> 0.84, 3001 x 17011 0.64 -> 0.85, 8192^2 into a B of odd stride 0.68 -> 0.86,
# 37 x 453438 0.78 -> 0.90, 127 x 132104 0.57 -> 0.67, 16777 x 1000 0.77 -> 0.92; float64 0.73-0.85 ->
# 0.79-0.90. The exception: an A of at most 64 rows that the skew spreads over two row tiles (float32 63 x
# 266305: 0.92 against 0.64; float64 63 x 133152: 0.96 against 0.84), which keeps tiled_rect64.
# The 128-row tiles of the 2-byte family (pairs128x64) leave most of a block idle on an A of fewer rows
# (H100: float16 32 x 524288 0.33 against tiled_rect64's 0.71, 64 x 262144 0.38 against 0.91).
TALL_TILE_MIN_ROWS = 128
# 2-byte elements (H200, benchmarks/results/transpose-variants-nvidia-h200-2026-11-28.json and
# transpose-nvidia-h200-2026-11-28.json, copy time / kernel time): words256x64 reads and writes aligned
# words whatever the rows' alignment, where pairs128x64 needs even strides and tiled_rect64 moves single
# elements. Odd strides of B: 3001 x 17011 0.51 -> 0.57, 11585^2 0.50 -> 0.61, 100 x 335544 0.41 -> 0.58,
# 127 x 132104 0.56 -> 0.71. Even strides keep pairs128x64 where B's rows start on sectors (8192^2 0.91
# against 0.83). On fewer than 256 columns every tile of words256x64 is an edge tile (264208 x 127: 0.48)
# and tiled_rect64 leads (0.82; 335544 x 100: 0.75 where pairs128x64 had 0.54); on an A of 64 rows or fewer
# the 256-row tile idles (64 x 262144: 0.38 against 0.78; 65-127 rows: below).
# Under 2^22 elements its 256-row tiles are too few blocks for the GPU (1001 x 1003: 0.85 against
# tiled_rect64's 2.0, the matrix in L2). Where B's rows start on sectors and pairs128x64 cannot run (an odd
# stride of A), tiled_rect64 leads (thirty-fifth session: 512 x 65537 0.83, 2048 x 16385 0.80, 4096 x 4097
# 0.80, 16384 x 2049 0.79, against words256x64's 0.52-0.65 and sector_words128x64's 0.65-0.79; the one
# exception measured, 16384 x 16385, 0.78 against sector_words128x64's 0.84).
WORDS_MIN_COLS = 256
WORDS_MIN_ELEMENTS = 1 << 22
# Where B's rows do not start on sectors, sector_aligned beats words256x64 on an A of at least 512
# rows and 2^22 elements (H200, thirty-second session): 11585^2 0.62 -> 0.74, 3001 x 17011 0.58 -> 0.74,
# 1000 x 33554 0.68 -> 0.75, 33554 x 1000 0.64 -> 0.79; on 100-200 rows its first and last row tiles
# dominate (200 x 167772: 0.53 against words256x64's 0.77, where pairs128x64 had 0.46). From about 26
# million elements sector_words128x64 (the word kernel with sector_aligned's shift, 128-row tiles) leads
# (H200, thirty-fifth session, `.devc/tsector_words`): 700 x 40001 0.62 -> 0.75, 3001 x 17011 0.72 ->
# 0.77, 9000 x 9001 0.73 -> 0.79, 11585^2 0.73 -> 0.81, 23170^2 0.71 -> 0.82, 46340^2 0.68 -> 0.77,
# 33554 x 1000 0.77 -> 0.88, 8192^2 into a B one element off 0.72 -> 0.85; at 25.0 million (5000 x 5003)
# sector_aligned still leads, 0.77 against 0.75, and at 16.8 million the two are even (4095 x 4097
# 0.73 / 0.74, 2895 x 5801 0.76 / 0.70). On 200 rows its tiles lose to words256x64 (0.64 against 0.75).
# On an A of fewer rows than that, 64 MiB into a packed B (thirty-fifth session, `.devc/tshort_words`):
# sector_words128x64 leads where one of its row tiles holds every shifted piece (rows + 15 <= 128), from
# 88 rows (88: 0.59 against tiled_rect64's 0.41 and words256x64's 0.53; 97-113: 0.62-0.68 against
# words256x64's 0.55-0.61; 72: 0.48 against tiled_rect64's 0.47); from 120 rows words256x64 (0.67-0.70
# against 0.42-0.43). At 16 MiB tiled_rect64 leads both (100 x 83886: 0.69 against 0.52 and 0.47;
# 113 x 74235: 0.74 against 0.49 and 0.44): the short A's word tiles from 2^24 elements on.
SECTOR_2BYTE_MIN_ROWS = 512
SECTOR_WORDS_MIN_ELEMENTS = 26 << 20
SHORT_WORDS_MIN_ELEMENTS = 1 << 24
SHORT_SECTOR_WORDS_MIN_ROWS = 80
SHORT_SECTOR_WORDS_MAX_ROWS = 128 - 15  # one row tile of sector_words128x64 holds the pieces, shifted by up to 15
# An A of at most 31 rows (2-byte: 40) written into a packed, 16-byte aligned B takes narrow_rows_chunks,
# which reads A's rows as aligned 16-byte chunks at any stride and writes B's run as 16-byte vectors
# (H200, thirty-second session, 64 MiB strips, copy time / kernel time): 2-byte 2-32 rows 0.81-0.88
# where the strip kernels had 0.37-0.51 (and tiled_rect64 0.51 at 32), 37 rows 0.73 with 16 KB strips
# (tiled_rect64 0.57; 63 rows 0.66-0.70 against its 0.69: not taken); float32 2-31 rows 0.89-0.94
# against narrow_rows16k's 0.80-0.84 (37 and 63 rows: sector_aligned and tiled_rect64 lead); int8 3-24
# rows 0.57-0.61 against 0.22; float64 keeps narrow_rows (0.94-1.00, the same).
CHUNKS_2BYTE_MAX_ROWS = 40
# A tall 2-byte A of an even width up to NARROW_AUTO_COLS, contiguous and 16-byte aligned, into a B of even
# stride takes narrow_cols_flat_even16k (H200, thirty-third session, 64 MiB strips, copy time / kernel
# time): 2-64 columns 0.73-0.79 where narrow_cols_pairs16k had 0.52-0.66; since each thread keeps a word
# column and a warp writes a row of B (fifty-fourth session, results/probe-transpose-strips-float16-*),
# 2-8 columns 0.95-0.96, 24-40 0.88-0.89 (36: 0.75), 48-62 0.81-0.85. Past 63 columns auto keeps
# tiled_rect64 (0.81 at 64 against 0.73; at 100 the two are even, 0.75 and 0.76).
# Rows of B off 4-byte words (an odd number of rows into a packed B, an odd ldb, B 2 bytes off a word) take
# the parity strips, which write B's words whichever half a row starts on (H200, thirty-fourth session,
# benchmarks/NOTES.md, copy time / kernel time): 64 MiB, 2-24 columns 0.57-0.63 and odd widths 0.71-0.72,
# where auto's narrow_cols16k had 0.36-0.42 and sector_aligned 0.06-0.49. Walked as the even strips are
# (fifty-fourth session, results/probe-transpose-strips-*-odd-rows-*; NOTES for the widths forced): 2-32
# columns 0.79-1.04, 36, 37 and 40 columns 0.71-0.77 against sector_aligned's 0.59-0.67, 41 and 47 (forced)
# 0.84 against 0.65 and 0.72; from 48 columns the two are even or the tiles lead (56 and 62, forced:
# 0.70-0.72 against 0.77-0.81): auto takes them up to PARITY_MAX_COLS columns (was 35). Below 2^23 elements
# on 24-31 columns (6-8 MiB even, 3 MiB sector_aligned 20% ahead: a strip's blocks are too few), not on 8
# (2-byte, 4 MiB: 6.9 us against 11.9). A tall A that no fast strip takes moves in the tiles from 24 columns
# on (sector_aligned: 24 columns 0.49, 32 0.57, 40 0.65 against narrow_cols16k's 0.38-0.41; 16 0.35 against
# 0.38). float32 of 24-63 columns likewise (64 MiB: 24 columns 0.86 against narrow_cols16k's 0.83, 63 0.93
# against 0.84; 48 MiB and 6 MiB of 24 columns 58.0 and 16.4 us against 61.5 and 18.9, B on sectors, where
# tiled_rect64 has 69.9 and 20.3; 17 columns keep the strip, 0.83 against 0.77). A contiguous, 16-byte
# aligned A of an odd width is staged by the strip in 16-byte chunks (thirty-fifth session,
# `.devc/tflat32`): 3 columns 0.83 -> 0.95, 17 0.82 -> 0.88 (64 MiB), and from 25 to 41 columns it overtakes
# sector_aligned from 32 MiB (64 MiB: 25 0.96 against 0.86, 31 0.96 / 0.90, 37 0.89 / 0.81, 41 0.95 / 0.82;
# 32 MiB: 0.93-1.01 against 0.87-0.96); at 16 MiB and less the L2 holds the matrix and sector_aligned leads
# (37 columns: 1.06 against 0.93), and from 45 columns the two alternate (45, 53, 57: 0.79-0.80 against
# 0.86-0.90; 49: 0.94 against 0.86).
# 1-byte elements (H200, thirty-fourth session, `.devc/tquads` and `.devc/tquads2`, copy time / kernel time):
# quads128 moves 4 x 4 blocks of bytes as words where A's and B's rows start on words: 2048^2 0.93, 4096^2
# 0.94, 16384^2 0.88, 128-512 rows or columns of 64 MiB 0.90-0.94, where tiled_rect64 had 0.43-0.78
# (sector_aligned 0.21-0.60); on 100-300 rows 0.37-0.42 against 0.28-0.31. On 64 rows or columns its tiles
# idle (0.33 against tiled_rect64's 0.55), its fallback (rows off words) moves bytes more slowly than the
# byte tiles (4101 x 4103: 0.40 against 0.51), and under 2^22 elements its tiles are too few (1000 x 1004:
# 7.6 us against 4.6). sector_aligned loses to tiled_rect64 on 1-byte A of 100-300 rows (0.14-0.24 against
# 0.28-0.31) and leads from 1000 (0.40 against 0.37). narrow_rows_chunks takes 1-byte A of up to 63 rows
# into a packed B (32-63 rows: 0.47-0.58 against tiled_rect64's 0.23-0.39), and the tiles 1-byte strips of
# 24-63 columns (sector_aligned: 63 columns 0.48, 24 0.26, against narrow_cols' 0.24-0.25).
# narrow_cols_quads16k (the strip of 1-byte elements as words, B at any alignment): 64 MiB strips of 1-127
# columns 0.43-0.47 of the copy (`.devc/tquads3`), where narrow_cols had 0.22-0.25 and the tiles 0.01-0.48
# (sector_aligned 0.48 at 63 columns; from 64 columns tiled_rect64 leads, 0.52-0.57); under 2^21 elements
# the tiles lead (64001 x 24: 0.97-1.22 against 0.90; 16000 x 8: 1.16 against 0.64; narrow_cols 0.30-0.78),
# from 2^21 on the strip (256000 x 8: 0.56 against 0.33, 256001 x 24: 0.65 against 0.49). bench transpose:
# 1-37 columns 0.43-0.46 against 0.23-0.31; at 63 columns sector_aligned kept its lead (0.48 against 0.46).
# The kernel was issue-bound (about 30 instructions a byte, the SMs issuing 80% of cycles): since the
# fifty-third session each thread keeps one column and walks its words (four byte loads, three byte
# permutes, a store and three adds a word) and a warp writes a row of B: 64 MiB strips of 2-32 columns
# 0.44-0.46 -> 0.71-0.88, 37 columns 0.43 -> 0.55 (bench transpose, H200), and against the tiles
# (benchmarks/probe_transpose_strips.py) 17-63 columns 0.55-0.76 against sector_aligned's 0.19-0.49: it
# takes strips to 63 columns (64 and more not measured against tiled_rect64's 0.58 at 64).
# sector_quads128 (quads128's tiles at any alignment, B's pieces on sectors; thirty-fifth session,
# `.devc/tsector_quads`): where B's rows start inside sectors, from 512 rows, 128 columns and 2^25 elements,
# 3001 x 17011 0.47 -> 0.59, 17011 x 3001 0.48 -> 0.58, 8191 x 8193 0.46 -> 0.60, 23170 x 23171 0.44 ->
# 0.65, 46341^2 0.43 -> 0.65, 8192^2 into a B one byte off 0.45 -> 0.62 (sector_aligned before); under
# that tiled_rect64 leads (5000 x 5003: 0.57 against 0.52 and sector_aligned's 0.49; 4095 x 4097 0.52
# against 0.40 and 0.41; 1001 x 1003 0.96 against 0.79), and on 127 columns (528416 x 127: 0.52 against
# 0.31). With B on sectors (A's rows off words) it ties with tiled_rect64 at 64 MiB (8192 x 8193, 4096 x
# 16385, 2048 x 32769: 0.56-0.59 both), loses on short or tall A (512 x 131073 0.49 against 0.57, 32768 x
# 2049 0.52 against 0.55) and at 32 MiB and less (4096 x 4097 0.30 against 0.42), and leads from 128 MiB
# (8192 x 16383 0.60 against 0.55, 16384 x 16385 0.64 against 0.55): with two shapes on that side,
# tiled_rect64 keeps B on sectors.
# Since the fifty-fifth session quads128 moves tiles that stick out of A as words too (checked), where it
# moved them byte by byte (results/transpose-nvidia-h200-2026-12-02.json against the run before it, B on
# words, 64 MiB): 100 x 671088 0.42 -> 0.81, 671088 x 100 0.44 -> 0.83 (tiled_rect64 before), 1048576 x 64
# 0.58 -> 0.63: it takes A from 64 columns (was 128).
# narrow_rows_quads16k (4 x 4 blocks of an A of up to 128 rows at any alignment, B's packed run built in
# shared memory; results/probe-transpose-int8-rows-*, copy time / kernel time): 65-127 rows where quads128
# cannot run (A's rows off words) 0.50-0.60 at 64 MiB and 0.54-1.00 at 16 MiB, where the tiles had
# 0.24-0.40 and 0.30-0.73; quads128 keeps its aligned shapes from 96 rows (0.79-0.99 there at 64 MiB),
# tiled_rect64 64 rows. Into a packed, 16-byte aligned B narrow_rows_chunks keeps 2-63 rows
# (benchmarks/NOTES.md, fifty-fifth session: even at 64 MiB, the strip ahead at 16 MiB from 24 rows).
# The same session's second probe (results/probe-transpose-int8-strips-*, 64 and 16 MiB): into a packed
# result off 16 bytes (a view), which narrow_rows_chunks refuses, the row strip moves 2-63 rows at 0.58-0.86
# of the copy where auto's byte strips and tiles had 0.23-0.61; and the column strip (narrow_cols_quads16k)
# leads the tiles on 65-80 columns into rows off words (0.40-0.51 against 0.30-0.38), trails from 96
# (0.31-0.39 against 0.41-0.50) and at 64, whole tiles (16 MiB: 0.66 against tiled_rect64's 0.76). The row
# strip also takes 65-95 rows on words, which quads128 leaves (QUADS_MIN_ROWS): 72 rows 0.58 against
# quads128's 0.61 at 64 MiB, 0.79 against 0.59 at 16 MiB; 65 rows 0.52 and 0.59 against 0.34 and 0.37. Both
# strips past what the earlier kernels took start at the smallest size measured, 16 MiB less a row.
# Since the row strip stores a row's bytes as widely as their address allows (fifty-sixth session) it leads wherever its
# stores do not share banks (results/probe-transpose-int8-row-kernels-*: every height of 2-63 at 64 and 16 MiB into a
# packed, aligned B, some heights to 128 at 64 MiB to 256 KiB into that B and one a byte in): against narrow_rows_chunks
# 0.58-0.75 for 0.39-0.64 at 64 MiB (behind it by at most 0.03 at 6, 9, 11, 17 and 45 rows, even or ahead at the others)
# and 0.47-1.05 for 0.28-0.78 at 16 MiB, but at 2 and 5 rows (0.54 and 0.53 against 0.60 and 0.63), and at 1 row even in
# bench transpose's runs (1 x 67108864: chunks 1.00 before, the strip 0.99); against the tiles at 65-127 rows under 15
# MiB 1.26-1.36 for 1.00-1.30 at 4 MiB, and within 0.05 of them either way at 1 MiB and 256 KiB, where both wait on the
# launch. At a multiple of 32 rows every lane of a warp stores into one bank: 32 rows 0.40 against chunks' 0.58 and, a
# byte in, 0.26 against tiled_rect64's 0.39 at 64 MiB; 96 and 128 still lead the tiles from 16 MiB (packed, 0.64 and
# 0.54 against 0.39 and 0.45) but trail them at 4 MiB a byte in (0.89 and 1.25 against 1.30 and 1.30). So the row strip
# takes a packed B at every size and height to 128 but 64; 1, 2 and 5 rows into a B chunks takes, 32 rows, and 96 and
# 128 rows under INT8_STRIP_MIN_ELEMENTS elements stay with the kernels before it.
INT8_STRIP_MIN_ELEMENTS = 15 << 20
ROWS_CHUNKS_LEAD = (1, 2, 5)
ROW_STRIP_BANK_ROWS = 32  # rows a multiple of it put a warp's stores of the run in one bank
TILE64 = 64  # tiled_rect64's tile edge: an A of 64 rows or columns is whole tiles
QUADS_STRIP_MIN_ELEMENTS = 1 << 21
QUADS_STRIP_MAX_COLS = 80
QUADS_MIN_ROWS = 96
QUADS_MIN_COLS = 64
SECTOR_QUADS_MIN_COLS = 128
QUADS_MIN_ELEMENTS = 1 << 22
SECTOR_1BYTE_MIN_ROWS = 512
SECTOR_QUADS_MIN_ELEMENTS = 1 << 25
CHUNKS_1BYTE_MAX_ROWS = 63
PARITY_ANY_SIZE_MAX_COLS = 16
PARITY_MAX_COLS = 47
PARITY_MIN_ELEMENTS = 1 << 23
TILES_MIN_COLS = 24
FLAT_F32_MAX_COLS = 41
FLAT_F32_MIN_ELEMENTS = 1 << 23


def _b_on_sectors(address: int, ld: int, isz: int) -> bool:
    """Whether every row of B (row stride ld elements, at `address`) starts on a 32-byte sector."""
    return address % SECTOR_BYTES == 0 and ld * isz % SECTOR_BYTES == 0


def choose_algorithm(
    rows: int, cols: int, out_address: int = 0, ldb: int = 0, dtype: str = "f32", a_address: int = 0, lda: int = 0
) -> str:
    """The kernel (a KERNELS key's name for `dtype`) "auto" runs for a rows x cols A at a_address
    (row stride lda) written to B at out_address (row stride ldb).

    Narrow matrices (<= 63 columns or <= 31 rows) go through strip kernels that read and write long
    contiguous runs (measured on the H100), but for float32 of TILES_MIN_COLS columns or more, which
    sector_aligned moves faster (measured on the H200), unless A is contiguous, 16-byte aligned, of an odd
    width up to FLAT_F32_MAX_COLS and at least FLAT_F32_MIN_ELEMENTS elements (the strip stages it in
    16-byte chunks); a short A into a packed, 16-byte aligned B through
    narrow_rows_chunks (2-byte elements up to CHUNKS_2BYTE_MAX_ROWS rows; not float64). Otherwise B's
    alignment decides (measured on the H200): rows
    of B that start on 32-byte sectors take tiled_rect64; others sector_aligned, which writes whole
    sectors anyway, unless A has at most 64 rows and the shift would spread them over two row tiles.
    2-byte elements move as 4-byte words: the pair/flat strip kernels where alignment allows,
    pairs128x64 where strides are even and B's rows start on sectors (tiled_rect64 for the other layouts
    with B on sectors). Where B's rows do not start on sectors, on an A of at least WORDS_MIN_COLS
    columns: sector_words128x64 (words at any alignment, B's pieces on sectors) on an A of at least
    SECTOR_2BYTE_MIN_ROWS rows and SECTOR_WORDS_MIN_ELEMENTS elements, sector_aligned on smaller ones down
    to WORDS_MIN_ELEMENTS; on a shorter A of at least SHORT_WORDS_MIN_ELEMENTS elements,
    sector_words128x64 from SHORT_SECTOR_WORDS_MIN_ROWS to SHORT_SECTOR_WORDS_MAX_ROWS rows and
    words256x64 from there to SECTOR_2BYTE_MIN_ROWS rows. 1-byte elements
    move as 4 x 4 blocks of words (quads128) where every row of A and B starts on a word, on an A of at
    least QUADS_MIN_ROWS rows, QUADS_MIN_COLS columns and QUADS_MIN_ELEMENTS elements, elsewhere as words
    with B's pieces on sectors (sector_quads128) where B's rows start inside sectors, on an A of at least
    SECTOR_1BYTE_MIN_ROWS rows, SECTOR_QUADS_MIN_COLS columns and SECTOR_QUADS_MIN_ELEMENTS elements; their strips
    of up to NARROW_AUTO_COLS columns in narrow_cols_quads16k where A allows (to QUADS_STRIP_MAX_COLS, but
    TILE64, into rows of B off words, from INT8_STRIP_MIN_ELEMENTS elements),
    of TILES_MIN_COLS columns or more in the tiles otherwise; up to QUADS_ROWS_MAX rows (but TILE64) into a
    packed B at any alignment in narrow_rows_quads16k, but ROWS_CHUNKS_LEAD rows into a 16-byte aligned B and
    multiples of ROW_STRIP_BANK_ROWS (32 in narrow_rows_chunks where it takes B; 96 and 128 from
    INT8_STRIP_MIN_ELEMENTS elements), and the rest of up to CHUNKS_1BYTE_MAX_ROWS rows into a packed,
    16-byte aligned B in narrow_rows_chunks."""
    dtype = MOVE_SUFFIX.get(dtype, dtype)  # the FP8 formats move through int8's kernels, int32 float32's
    isz = ITEMSIZE[dtype]
    lda = lda or cols
    if isz == 2:
        return _choose_2byte(rows, cols, a_address, lda, out_address, ldb or rows, dtype)
    if isz == 1:
        return _choose_1byte(rows, cols, a_address, lda, out_address, ldb or rows, dtype)
    if cols <= NARROW_AUTO_COLS and (isz == 8 or cols < TILES_MIN_COLS):
        return "narrow_cols16k" if isz == 4 else "narrow_cols"
    if isz == 4 and cols % 2 and cols <= FLAT_F32_MAX_COLS and rows * cols >= FLAT_F32_MIN_ELEMENTS:
        if lda == cols and a_address % 16 == 0:  # staged in 16-byte chunks
            return "narrow_cols16k"
    if rows <= NARROW_AUTO_ROWS:
        if isz < 8 and KERNELS[("narrow_rows_chunks", dtype)].accepts(rows, cols, a_address, lda, out_address, ldb):
            return "narrow_rows_chunks"
        return "narrow_rows16k" if isz == 4 else "narrow_rows"
    return _tiles(rows, cols, out_address, ldb, isz)


def _tiles(rows: int, cols: int, b_address: int, ldb: int, isz: int) -> str:
    """The byte-moving tiles: tiled_rect64 where B's rows start on sectors (or the skew would spread an A of
    at most 64 rows over two row tiles), sector_aligned elsewhere and for strips of up to NARROW_AUTO_COLS
    columns that reach here."""
    if rows <= 64 < rows + SECTOR_BYTES // isz - 1:
        return "tiled_rect64"
    if cols <= NARROW_AUTO_COLS or not _b_on_sectors(b_address, ldb, isz):
        return "sector_aligned"
    return "tiled_rect64"


def _choose_1byte(rows, cols, a_address, lda, b_address, ldb, dtype) -> str:
    args = (rows, cols, a_address, lda, b_address, ldb)
    if rows >= QUADS_MIN_ROWS and cols >= QUADS_MIN_COLS and rows * cols >= QUADS_MIN_ELEMENTS:
        if (a_address | b_address | lda | ldb) % 4 == 0:  # every row of A and B on a word
            return "quads128"
    # words where A allows; under 2^21 elements the tiles. Past 63 columns (but 64, whole tiles) only where it
    # was measured ahead: into rows of B off words, from INT8_STRIP_MIN_ELEMENTS elements
    past_63 = cols <= QUADS_STRIP_MAX_COLS and cols != TILE64 and (b_address | ldb) % 4 != 0
    large_strip = rows * cols >= QUADS_STRIP_MIN_ELEMENTS and (
        cols <= NARROW_AUTO_COLS or past_63 and rows * cols >= INT8_STRIP_MIN_ELEMENTS
    )
    if large_strip:
        if KERNELS[("narrow_cols_quads16k", dtype)].accepts(*args):
            return "narrow_cols_quads16k"
        if cols < TILES_MIN_COLS:
            return "narrow_cols"
    row_kernel = _row_kernel_1byte(args, dtype)
    if row_kernel:
        return row_kernel
    if rows <= NARROW_AUTO_ROWS:
        return "narrow_rows"
    if cols > NARROW_AUTO_COLS:
        large = (
            rows >= SECTOR_1BYTE_MIN_ROWS and cols >= SECTOR_QUADS_MIN_COLS and rows * cols >= SECTOR_QUADS_MIN_ELEMENTS
        )
        return "sector_quads128" if large and not _b_on_sectors(b_address, ldb, 1) else "tiled_rect64"
    return _tiles(rows, cols, b_address, ldb, 1)


def _row_kernel_1byte(args: tuple, dtype: str) -> str | None:
    """The faster of the 1-byte row kernels into a packed B (narrow_rows_quads16k, narrow_rows_chunks) that
    accept the operands (see ROWS_CHUNKS_LEAD), or None."""
    rows, cols = args[:2]
    chunks = rows <= CHUNKS_1BYTE_MAX_ROWS and KERNELS[("narrow_rows_chunks", dtype)].accepts(*args)
    strip = rows != TILE64 and KERNELS[("narrow_rows_quads16k", dtype)].accepts(*args)  # a packed B, any alignment
    if strip and rows % ROW_STRIP_BANK_ROWS == 0:
        strip = rows > TILE64 and rows * cols >= INT8_STRIP_MIN_ELEMENTS
    if strip and not (chunks and rows in ROWS_CHUNKS_LEAD):
        return "narrow_rows_quads16k"
    return "narrow_rows_chunks" if chunks else None


def _choose_2byte(rows, cols, a_address, lda, b_address, ldb, dtype) -> str:
    args = (rows, cols, a_address, lda, b_address, ldb)
    if cols <= NARROW_AUTO_COLS:
        for name in ("narrow_cols_flat16k",) if cols % 2 else ("narrow_cols_flat_even16k", "narrow_cols_pairs16k"):
            if KERNELS[(name, dtype)].accepts(*args):
                return name
        parity = "narrow_cols_flat_odd_parity16k" if cols % 2 else "narrow_cols_flat_parity16k"
        large = cols <= PARITY_MAX_COLS and rows * cols >= PARITY_MIN_ELEMENTS
        if (cols <= PARITY_ANY_SIZE_MAX_COLS or large) and KERNELS[(parity, dtype)].accepts(*args):
            return parity
        return "sector_aligned" if cols >= TILES_MIN_COLS else "narrow_cols16k"
    if rows <= CHUNKS_2BYTE_MAX_ROWS and KERNELS[("narrow_rows_chunks", dtype)].accepts(*args):
        return "narrow_rows_chunks" if rows <= 32 else "narrow_rows_chunks16k"
    if rows <= NARROW_AUTO_ROWS:
        order = ("narrow_rows_flat16k",) if rows % 2 else (("narrow_rows_pairs",) if rows <= 8 else ())
        for name in order:
            if KERNELS[(name, dtype)].accepts(*args):
                return name
        return "narrow_rows16k"
    return _tiles_2byte(rows, cols, a_address, lda, b_address, ldb)


def _tiles_2byte(rows, cols, a_address, lda, b_address, ldb) -> str:
    """The tiles of a 2-byte A that no strip takes: pairs and element tiles where B's rows start on
    sectors, word tiles (shifted onto sectors, or onto words for a short A) where they do not."""
    sector = SECTOR_BYTES // 2
    pairs = rows >= TALL_TILE_MIN_ROWS and (a_address | b_address) % 4 == 0 and lda % 2 == 0 and ldb % 2 == 0
    b_on_sectors = _b_on_sectors(b_address, ldb, 2)
    if pairs and b_on_sectors and a_address % SECTOR_BYTES == 0 and lda % sector == 0:
        return "pairs128x64"
    if cols < WORDS_MIN_COLS:
        return "tiled_rect64"
    elements = rows * cols
    if b_on_sectors:
        return "pairs128x64" if pairs else "tiled_rect64"
    if rows >= SECTOR_2BYTE_MIN_ROWS:
        if elements >= SECTOR_WORDS_MIN_ELEMENTS:
            return "sector_words128x64"
        return "sector_aligned" if elements >= WORDS_MIN_ELEMENTS else "tiled_rect64"
    if elements < SHORT_WORDS_MIN_ELEMENTS:
        return "tiled_rect64"
    if SHORT_SECTOR_WORDS_MIN_ROWS <= rows <= SHORT_SECTOR_WORDS_MAX_ROWS:
        return "sector_words128x64"
    return "words256x64" if rows > SHORT_SECTOR_WORDS_MAX_ROWS else "tiled_rect64"


def _check_narrow(algorithm: str, rows: int, cols: int) -> None:
    """A named strip kernel writes nothing beyond its limit: a wider (taller) A is a ValueError."""
    axis = algorithm[len("narrow_") :]
    limit, size = (NARROW_COLS_MAX, cols) if axis == "cols" else (NARROW_ROWS_MAX, rows)
    if size > limit:
        raise ValueError(f"transpose: {algorithm} takes A with at most {limit} {axis}, got {size}")


def resolve(algorithm: str, dtype: str, rows: int, cols: int, a_address: int, lda: int, b_address: int, ldb: int):
    """The Variant or NarrowVariant a call runs."""
    if algorithm == "auto":
        name = choose_algorithm(rows, cols, b_address, ldb, dtype, a_address, lda)
    elif algorithm in ("narrow_cols", "narrow_rows"):
        _check_narrow(algorithm, rows, cols)
        isz = ITEMSIZE[dtype]
        name = algorithm if isz == 8 else f"{algorithm}16k"
        args = (rows, cols, a_address, lda, b_address, ldb)
        row_kernel = _row_kernel_1byte(args, dtype) if isz == 1 and algorithm == "narrow_rows" else None
        if row_kernel:  # the row kernel auto would take, where it takes one
            name = row_kernel
        elif isz < 8:
            for fast in (
                f"{algorithm}_chunks",
                f"{algorithm}_flat16k",
                f"{algorithm}_flat_even16k",
                f"{algorithm}_pairs16k",
                f"{algorithm}_quads16k",
            ):
                if (fast, dtype) in KERNELS and KERNELS[(fast, dtype)].accepts(*args):
                    name = fast
                    break
    else:
        name = algorithm
    return KERNELS[(name, dtype)]


def check_operands(a, out, algorithm: str) -> tuple[int, ...]:
    """Validate everything before any allocation or launch; returns the result's shape."""
    a = as_matrix(a, "a")
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise ValueError(f"unknown transpose algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    if algorithm in TWO_BYTE_TILES and a.itemsize != 2:
        raise ValueError(f"transpose: {algorithm} moves 2-byte elements (float16, bfloat16), not {a.dtype}")
    if algorithm in ONE_BYTE_TILES and a.itemsize != 1:
        raise ValueError(f"transpose: {algorithm} moves 1-byte elements (int8, FP8), not {a.dtype}")
    shape = (*a.shape[:-2], a.shape[-1], a.shape[-2])
    check_out(out, shape, (a,), "transpose")  # so no in-place transpose either
    if algorithm in ("narrow_cols", "narrow_rows") and a.is_transposed == (out is not None and out.is_transposed):
        # a kernel runs (one side stored transposed is a plain copy), on the storages: its limit, checked now
        rows, cols = (a.width, a.height) if a.is_transposed else (a.height, a.width)
        _check_narrow(algorithm, rows, cols)
    return shape


def transpose(a: Matrix, out: Matrix | None = None, algorithm: str = "auto", stream=None) -> Matrix:
    """B = a^T, a transposed copy: the bits move unchanged, through shared-memory tile kernels.

    For a matrix of any shape and dtype (views welcome). Of a batch, each matrix is transposed. A
    transposed view (``a.T``) is already stored as its transpose's rows: its transpose is a plain
    copy, and so is a transpose into a transposed ``out``. For a transposed view without a copy, use
    ``a.T``.

    Parameters
    ----------
    a : Matrix
        The matrix.
    out : Matrix, optional
        Where the result goes: shape (width, height) of ``a``'s dtype. New if None (packed, row-major).
    algorithm : str, optional
        ``"auto"``, or one of ``naive``, ``tiled``, ``tiled_padded``, ``tiled_rect``, ``tiled_rect64``,
        ``sector_aligned``, ``narrow_cols``, ``narrow_rows``, for float16 and bfloat16 also
        ``pairs128x64``, ``words256x64`` and ``sector_words128x64``, and for int8 and FP8 also
        ``quads128`` and ``sector_quads128``.
    stream : Stream or stream-like, optional
        Where the work is queued; the thread's current stream by default.

    Returns
    -------
    Matrix
        ``out``, or the new matrix.

    Raises
    ------
    TypeError
        ``a`` is not a Matrix, or ``out`` of another dtype.
    ValueError
        An ``out`` of the wrong shape or overlapping ``a``, an unknown algorithm, or a stream of another device.
    FreedMatrixError
        ``a`` or ``out`` has been freed.

    Examples
    --------
    >>> A = gm.Matrix.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))  # doctest: +GPU
    >>> gm.transpose(A).to_numpy().tolist()
    [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    """
    if algorithm == "auto":
        done = _common_transpose(a, out, stream)
        if done is not None:
            return done
    dev = operand_device((a, "a"), (out, "out"))
    s = stream_handle(stream, dev)
    with dev.lock:
        shape = check_operands(a, out, algorithm)
        src, lds, a_bstride, trans, batch, rows, cols, dt, a_buffer = a._operand()
        if out is None:
            out = Matrix._allocate(shape[-2], shape[-1], dev, s, a.dtype, batch)
        else:
            same_dtype("transpose", (a, "a"), (out, "out"), integers=STORAGE_ONLY_SUFFIXES)
        if out.size == 0:
            return out
        dst, ldd, out_bstride, out_trans, *_, out_buffer = out._operand()
        use_on(s, a_buffer, out_buffer)
        if not trans and not out_trans:  # row-major storages (the common call): one launch, batch or not
            transpose_region(src, dst, rows, cols, lds, ldd, dt, s, dev, algorithm, batch or 1, a_bstride, out_bstride)
        else:
            for x, y in zip(matrices(a), matrices(out), strict=True):
                _transpose_one(x, y, dt, algorithm, s, dev)
        done_on(s, a_buffer, out_buffer)
    return out


_THREAD = thread_state()  # each thread's state (its `with stream:` stack)


def _common_transpose(a, out, stream) -> Matrix | None:
    """The common call, auto's transpose of one live, row-major 2-D matrix of gpumat's pool (into a new
    matrix or a row-major `out` of another block), in as few steps as it takes: what the full route's
    checks would pass, tested directly; None for anything else (views stored transposed, batches, imported
    or freed operands, empty matrices), which then takes the full route and its messages."""
    if a.__class__ is not Matrix or out is not None and out.__class__ is not Matrix:
        return None
    src, lds, _, trans, batch, rows, cols, dt, ab = a._operand()
    if trans or batch is not None or ab.__class__ is not DeviceBuffer or not rows or not cols:
        return None
    dev = ab.device
    if out is not None:
        dst, ldd, _, out_trans, out_batch, out_rows, out_cols, out_dt, ob = out._operand()
        if (
            ob.__class__ is not DeviceBuffer  # (also a freed one: None)
            or ob is ab  # two blocks of the pool never share a byte; one block may
            or ob.device is not dev
            or out_dt != dt
            or out_trans
            or out_batch is not None
            or out_rows != cols
            or out_cols != rows
        ):
            return None
    dev.activate()
    s = LEGACY_STREAM if stream is None and not _THREAD.streams else stream_handle(stream, dev)
    with dev.lock:  # from the liveness test to the enqueue, no free() can slip in between
        if not (ab.alive and (out is None or ob.alive)):
            return None
        if out is None:
            out = Matrix._allocate(cols, rows, dev, s, a.dtype)
            dst, ldd, *_, ob = out._operand()
        foreign = use_on(s, ab, ob)
        transpose_region(src, dst, rows, cols, lds, ldd, dt, s, dev)
        if foreign is not None:
            mark_done(foreign, s, ab, ob)
    return out


def _transpose_one(x: Matrix, y: Matrix, dt: str, algorithm: str, s: int, dev) -> None:
    """y = x^T for one matrix of each; either may be stored transposed (then the move is a plain copy, or
    a transpose of the two storages)."""
    src, dst = storage(x), storage(y)
    if x.is_transposed != y.is_transposed:  # y's storage holds exactly x's storage
        isz = x.itemsize
        copy_device_2d(dst.elements, dst.stride * isz, src.elements, src.stride * isz, src.width * isz, src.height, s)
        return
    rows, cols = src.shape
    transpose_region(src.elements, dst.elements, rows, cols, src.stride, dst.stride, dt, s, dev, algorithm)


def transpose_region(
    src: int,
    dst: int,
    rows: int,
    cols: int,
    lds: int,
    ldd: int,
    dt: str,
    s: int,
    dev,
    algorithm: str = "auto",
    batch: int = 1,
    bsa: int = 0,
    bsb: int = 0,
) -> None:
    """dst (cols x rows, row stride ldd) = src (rows x cols, row stride lds)^T, for each of `batch` matrices
    (src's bsa and dst's bsb elements apart), one launch (a batch past the grid's 65535 layers: one a
    65535 matrices) queued on stream s (device lock held; operands already ordered on s): what
    gm.transpose and the matmul engine's transposed operands run."""
    dt = MOVE_SUFFIX[dt]  # the kernels move bits: int32 as float32's words
    isz = ITEMSIZE[dt]
    if algorithm == "auto" and batch == 1 and rows == 1:  # a vector: its transpose is a copy; 1 x cols -> cols x 1
        copy_device_2d(dst, ldd * isz, src, isz, isz, cols, s)
        return
    if algorithm == "auto" and batch == 1 and cols == 1:  # rows x 1 -> 1 x rows
        copy_device_2d(dst, isz, src, lds * isz, isz, rows, s)
        return
    # auto's choice reads the addresses only modulo a 32-byte sector: the launch is cached on what it reads.
    # Over a batch, an address's low bits ORed with its stride's are the least aligned any matrix has.
    a_low, b_low = (src | bsa * isz) & 31, (dst | bsb * isz) & 31
    key = (rows, cols, lds, ldd, dt, a_low, b_low, algorithm, min(batch, MAX_GRID_YZ))
    launch = _LAUNCHES.get(key)
    if launch is None:
        v = resolve(algorithm, dt, rows, cols, a_low, lds, b_low, ldd)
        gx, gy, _ = v.grid(rows, cols)
        launch = FixedLaunch(v.kernel, (gx, gy, key[-1]), v.block, 0, len(SIGNATURE), ())
        if len(_LAUNCHES) >= _LAUNCH_CACHE_SIZE:
            _LAUNCHES.clear()
        _LAUNCHES[key] = launch
    for first in range(0, batch, MAX_GRID_YZ):  # a kernel block takes matrix blockIdx.z
        n = min(MAX_GRID_YZ, batch - first)
        launch(dev, s, src + first * bsa * isz, dst + first * bsb * isz, rows, cols, lds, ldd, n, bsa, bsb)


_LAUNCHES: dict[tuple, FixedLaunch] = {}  # transpose_region's launches by what decides them
_LAUNCH_CACHE_SIZE = 1024
