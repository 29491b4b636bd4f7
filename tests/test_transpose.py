"""Transpose: argument checks and launch geometry on the CPU; every variant against numpy on the GPU."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import (
    built_entries,
    dims,
    fake_batch,
    fake_matrix,
    poison,
    poisoned,
    random,
    record_launches,
    strided_view,
)

import gpumat as gm
from gpumat import memory
from gpumat._dtypes import ITEMSIZE, SUFFIXES
from gpumat.matrix import Matrix
from gpumat.runtime import geometry, kernels

T = importlib.import_module("gpumat.transpose")  # the module (gpumat.transpose may name the function)
VARIANTS = list(T.VARIANTS)
# every tiled kernel's geometry: the family every dtype has, and the tiles of 2-byte elements alone
TILED = {**T.VARIANTS, **{name: T.KERNELS[(name, "f16")] for name in T.TWO_BYTE_TILES}}
SHAPES = [
    (1, 1),
    (1, 7),
    (7, 1),
    (33, 31),
    (1000, 3),
    (4096, 4096),
    (3001, 17011),
    (16384, 16384),
    (46341, 46341),
    (1, 2**31 - 1),
    (2**31 - 1, 1),
    (2**24 + 3, 5),
    (65535 * 64 + 1, 70),
    (10**6, 10**6),
]


# ---------------------------------------------------------------- CPU: declarations, geometry, checks
def test_declarations_match_ptx():
    entries = built_entries()["transpose"]
    for v in T.VARIANTS.values():
        k = v.kernel
        assert k.name in entries, k.name
        assert entries[k.name]["params"] == [kernels.PTX_TYPES[c] for c in k.signature]


def test_kernels_do_not_spill():
    entries = built_entries()["transpose"]
    for name, info in entries.items():
        for arch, res in info["resources"].items():
            assert res["spill_stores"] == 0 and res["spill_loads"] == 0, (name, arch, res)


@pytest.mark.parametrize("name", TILED)
def test_block_fits_tile(name):
    v = TILED[name]
    bx, by, bz = v.block
    assert bx * by * bz <= geometry.MAX_BLOCK_THREADS and bz == 1
    tr, tc = v.tile
    assert tc % bx == 0 and tr % by == 0  # each thread moves a whole number of elements


@pytest.mark.parametrize("name", TILED)
@pytest.mark.parametrize("shape", SHAPES)
def test_grid_covers_and_stays_in_limits(name, shape):
    rows, cols = shape
    v = TILED[name]
    gx, gy, gz = v.grid(rows, cols)
    tr, tc = v.tile
    assert 1 <= gx <= geometry.MAX_GRID_X and 1 <= gy <= geometry.MAX_GRID_YZ and gz == 1
    assert gx * tc >= cols and (gx - 1) * tc < cols  # every column tile, no idle column of blocks
    tiles = geometry.cdiv(rows + v.skew, tr)  # the kernels' row-tile count
    assert gy == min(tiles, geometry.MAX_GRID_YZ)
    # the kernels' row-tile loop: block row by visits by, by + gy, ... < tiles; each tile exactly once
    if tiles <= 10**6:
        assert sorted(geometry.row_tiles_visited(gy, tiles)) == list(range(tiles))


@given(rows=dims(1000, tiles=(8, 32, 64, 128)), cols=dims(1000, tiles=(8, 32, 64)), name=st.sampled_from(list(TILED)))
def test_grid_covers_drawn_shapes(rows, cols, name):
    v = TILED[name]
    gx, gy, _ = v.grid(rows, cols)
    tr, tc = v.tile
    tiles = geometry.cdiv(rows + v.skew, tr)
    covered = {(t, cx) for cx in range(gx) for t in geometry.row_tiles_visited(gy, tiles)}
    assert len(covered) == tiles * geometry.cdiv(cols, tc)
    assert gx * tc >= cols


@pytest.fixture
def no_gpu(monkeypatch):
    """Fail loudly if anything reaches the GPU: allocation or a launch."""
    launches = []

    def refuse(*args, **kwargs):
        raise AssertionError("argument checks must fail before any GPU call")

    monkeypatch.setattr(memory.Pool, "alloc", refuse)
    return record_launches(monkeypatch, launches)


def test_argument_errors_before_any_gpu_call(no_gpu):
    a = fake_matrix(4, 6)
    with pytest.raises(TypeError):
        T.transpose(np.zeros((4, 6), np.float32))
    with pytest.raises(TypeError):
        T.transpose(a, out=np.zeros((6, 4), np.float32))
    with pytest.raises(ValueError, match="algorithm"):
        T.transpose(a, out=fake_matrix(6, 4, ptr=0x7F1000000000), algorithm="fastest")
    with pytest.raises(ValueError, match="shape"):
        T.transpose(a, out=fake_matrix(4, 6, ptr=0x7F1000000000))
    with pytest.raises(ValueError, match="shape"):
        T.transpose(a, out=fake_matrix(6, 5, ptr=0x7F1000000000))
    with pytest.raises(ValueError, match="overlaps"):
        T.transpose(a, out=fake_matrix(6, 4, ptr=0x7F0000000000 + 8))
    with pytest.raises(ValueError, match="overlaps"):  # a square matrix onto itself
        sq = fake_matrix(5, 5)
        T.transpose(sq, out=sq)
    freed = fake_matrix(3, 3)
    freed._buffer = None
    with pytest.raises(ValueError):
        T.transpose(freed, out=fake_matrix(3, 3, ptr=0x7F1000000000))
    assert no_gpu == []


@pytest.mark.parametrize("name", ["auto", *VARIANTS])
def test_launch_arguments(no_gpu, name):
    a = fake_matrix(3001, 17011, stride=17100)
    out = fake_matrix(17011, 3001, stride=3010, ptr=0x7F1000000000)
    assert T.transpose(a, out=out, algorithm=name) is out
    ((kname, grid, block, args, _, _),) = no_gpu
    v = T.VARIANTS[T.choose_algorithm(3001, 17011, out.elements, 3010) if name == "auto" else name]
    assert kname == v.kernel.name and grid == v.grid(3001, 17011) and block == v.block
    assert args == (a.elements, out.elements, 3001, 17011, 17100, 3010, 1, 0, 0)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", ["auto", *T.TWO_BYTE_TILES])
def test_launch_arguments_of_the_2_byte_tiles(no_gpu, name, dt):
    """A 2-byte tile named or chosen goes through the same launch as every transpose; under auto, a large
    A written to rows of B off the sectors (an odd stride) takes sector_words128x64."""
    a = fake_matrix(3001, 17011, stride=17011, dtype=dt)
    out = fake_matrix(17011, 3001, stride=3001, ptr=0x7F1000000000, dtype=dt)
    assert T.transpose(a, out=out, algorithm=name) is out
    ((kname, grid, block, args, _, _),) = no_gpu
    suffix = {"float16": "f16", "bfloat16": "bf16"}[dt]
    v = T.KERNELS[("sector_words128x64" if name == "auto" else name, suffix)]
    assert kname == v.kernel.name and grid == v.grid(3001, 17011) and block == v.block
    assert args == (a.elements, out.elements, 3001, 17011, 17011, 3001, 1, 0, 0)


NAMES = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16", "s8": "int8"}


@pytest.mark.parametrize("dt", [*SUFFIXES, "s8"])
def test_repeated_calls_launch_what_auto_chooses_for_each_address(no_gpu, dt):
    """The launch path caches auto's (kernel, grid, block) by what the choice reads: a shape's calls at
    addresses of every alignment, again and again, each launch what choose_algorithm picks for its own
    (the strips, the chunked strip of a short A, tiled_rect64 and sector_aligned among them)."""
    base, out_base, step = 0x7F0000000000, 0x7F1000000000, ITEMSIZE[dt]
    # (1000, 30) and (1001, 30): an even width into a B of even and odd stride (2-byte: flat_even or not)
    shapes = ((40, 40, 41), (40, 40, 40), (1000, 30, 30), (1001, 30, 30), (20, 3000, 3002), (37, 3000, 3001))
    shapes = (*shapes, (63, 3000, 3000))
    for rows, cols, lda in (*shapes, (300, 301, 302), (600, 7001, 7001)):
        for _ in range(2):
            for shift in (0, 1, 2, 4, 8, 16, 31, 32):
                a = fake_matrix(rows, cols, stride=lda, ptr=base + shift * step, dtype=NAMES[dt])
                out = fake_matrix(cols, rows, ptr=out_base + shift * step, dtype=NAMES[dt])
                T.transpose(a, out=out)
                name, grid, block, args, _, _ = no_gpu.pop()
                v = T.resolve("auto", dt, rows, cols, a.elements, lda, out.elements, rows)
                assert (name, grid, block) == (v.kernel.name, v.grid(rows, cols), v.block), (rows, cols, shift)
                assert args == (a.elements, out.elements, rows, cols, lda, rows, 1, 0, 0)


@pytest.mark.parametrize("batch", [1, 2, 7, 70000])
def test_a_batch_is_one_launch(no_gpu, batch):
    """Every matrix of a batch in one launch, a block matrix blockIdx.z of it, where the transposes of a
    batch used to be one launch a matrix; a batch past the grid's 65535 layers in launches of 65535, each
    from its first matrix on."""
    a = fake_batch(batch, 40, 300, stride=301)
    out = fake_batch(batch, 300, 40, ptr=0x7F1000000000)
    T.transpose(a, out=out)
    v = T.resolve("auto", "f32", 40, 300, a.elements, 301, out.elements, 40)
    firsts = range(0, batch, 65535)
    assert len(no_gpu) == len(firsts)
    for (name, grid, block, args, _, _), first in zip(no_gpu, firsts, strict=True):
        assert name == v.kernel.name and grid == (*v.grid(40, 300)[:2], min(batch, 65535)) and block == v.block
        shift_a, shift_b = first * 40 * 301 * 4, first * 300 * 40 * 4
        count = min(65535, batch - first)  # the blocks past it in the last piece have no matrix
        assert args == (a.elements + shift_a, out.elements + shift_b, 40, 300, 301, 40, count, 40 * 301, 300 * 40)


def test_a_batch_takes_a_kernel_whose_alignment_holds_for_every_matrix(no_gpu):
    """auto reads the addresses modulo a sector; over a batch it reads the least aligned matrix's (the
    address's low bits ORed with the stride's): float16 strips that need 16-byte aligned rows are not
    launched on a batch whose second matrix starts 2 bytes past a 16-byte boundary."""
    rows, cols = 5000, 41  # narrow, odd width: narrow_cols_flat16k wants A packed and 16-byte aligned
    packed = fake_batch(2, rows, cols, bstride=rows * cols + 8, dtype="float16")
    out = fake_batch(2, cols, rows, ptr=0x7F1000000000, dtype="float16")
    T.transpose(packed, out=out)
    assert no_gpu.pop()[0] == "transpose_narrow_cols_flat16k_f16"  # 16 bytes between them: still aligned
    shifted = fake_batch(2, rows, cols, bstride=rows * cols + 1, dtype="float16")
    T.transpose(shifted, out=out)
    name = no_gpu.pop()[0]
    assert name != "transpose_narrow_cols_flat16k_f16"
    v = T.KERNELS[(name[len("transpose_") : -len("_f16")], "f16")]
    assert all(
        not isinstance(v, T.NarrowVariant)
        or v.accepts(rows, cols, 0x7F0000000000 + 2 * i * (rows * cols + 1), cols, 0x7F1000000000, rows)
        for i in range(2)
    )


@pytest.mark.parametrize("shape", [(0, 0), (0, 5), (5, 0)])
def test_empty_never_launches(no_gpu, shape):
    a = fake_matrix(*shape)
    out = fake_matrix(shape[1], shape[0], ptr=0x7F1000000000)
    assert T.transpose(a, out=out) is out
    assert no_gpu == []


def test_auto_is_a_kernel_of_the_dtype():
    for rows, cols in SHAPES:
        for dt in SUFFIXES:
            assert (T.choose_algorithm(rows, cols, 0x7F0000000000, rows, dt), dt) in T.KERNELS


def test_auto_takes_strip_kernels_for_narrow_matrices():
    """The strips for narrow matrices; but float32 of 24 columns or more, and 2-byte matrices of as many
    that no word strip takes, in sector_aligned's tiles; 2-byte rows of B off words (an odd number of rows
    into a packed B, B 2 bytes off a word) in the parity strips up to 16 columns, and up to 35 columns
    from 2^23 elements on."""
    base = 0x7F0000000000
    assert T.choose_algorithm(1 << 20, 17, base, 1 << 20) == "narrow_cols16k"
    assert T.choose_algorithm(1 << 20, 23, base, 1 << 20) == "narrow_cols16k"
    for cols in (24, 40, 63):
        assert T.choose_algorithm(1 << 20, cols, base, 1 << 20) == "sector_aligned"  # B on sectors or not
        assert T.choose_algorithm((1 << 20) + 1, cols, base, (1 << 20) + 1) == "sector_aligned"
    # float32 of an odd width up to 41, contiguous and 16-byte aligned, from 2^23 elements: the strip,
    # staged in 16-byte chunks
    for cols in (25, 37, T.FLAT_F32_MAX_COLS):
        rows = -(-T.FLAT_F32_MIN_ELEMENTS // cols)
        assert T.choose_algorithm(rows, cols, base, rows, "f32", base, cols) == "narrow_cols16k"
        assert T.choose_algorithm(rows - cols, cols, base, rows, "f32", base, cols) == "sector_aligned"  # smaller
        assert T.choose_algorithm(rows, cols, base, rows, "f32", base + 4, cols) == "sector_aligned"  # A off 16
        assert T.choose_algorithm(rows, cols, base, rows, "f32", base, cols + 2) == "sector_aligned"  # a view
        assert T.choose_algorithm(rows, cols + 1, base, rows, "f32", base, cols + 1) == "sector_aligned"  # even
    assert T.choose_algorithm(1 << 20, 43, base, 1 << 20, "f32", base, 43) == "sector_aligned"
    assert T.choose_algorithm(60, 40, base, 60) == "tiled_rect64"  # the skew would spread 60 rows over two tiles
    assert T.choose_algorithm(20, 1 << 20, base + 8, 20) == "narrow_rows16k"  # B off 16 bytes
    assert T.choose_algorithm(20, 1 << 20, base, 21) == "narrow_rows16k"  # B not packed
    assert T.choose_algorithm(1 << 20, 40, base, 1 << 20, "f64") == "narrow_cols"
    assert T.choose_algorithm(1 << 20, 40, base, 1 << 20, "f16", base, 40) == "narrow_cols_flat_even16k"
    assert T.choose_algorithm(1 << 20, 40, base, 1 << 20, "f16", base + 4, 40) == "narrow_cols_pairs16k"  # A off 16
    assert T.choose_algorithm(1 << 20, 40, base, 1 << 20, "f16", base, 42) == "narrow_cols_pairs16k"  # A not packed
    assert T.choose_algorithm((1 << 20) + 1, 40, base, (1 << 20) + 1, "f16", base, 40) == "narrow_cols_flat_parity16k"
    assert T.choose_algorithm((1 << 20) + 1, 48, base, (1 << 20) + 1, "f16", base, 48) == "sector_aligned"  # ldb odd
    assert T.choose_algorithm(1 << 20, 41, base, 1 << 20, "f16", base, 41) == "narrow_cols_flat16k"
    assert T.choose_algorithm(1 << 20, 41, base + 2, 1 << 20, "f16", base + 2, 41) == "sector_aligned"  # A off 16
    assert T.choose_algorithm(1 << 20, 9, base + 2, 1 << 20, "f16", base + 2, 9) == "narrow_cols16k"
    for dt in ("f16", "bf16"):
        for rows, cols in ((1398101, 24), (1082401, 31), ((1 << 18) + 1, 8), (1001, 16), (1001, 3)):
            name = "narrow_cols_flat_parity16k" if cols % 2 == 0 else "narrow_cols_flat_odd_parity16k"
            assert T.choose_algorithm(rows, cols, base, rows, dt, base, cols) == name, (rows, cols)
            assert T.choose_algorithm(rows - 1, cols, base + 2, rows, dt, base, cols) == name  # B off a word
        assert T.choose_algorithm(256001, 24, base, 256001, dt, base, 24) == "sector_aligned"  # 6 MiB
        for cols, name in ((36, "narrow_cols_flat_parity16k"), (47, "narrow_cols_flat_odd_parity16k")):
            assert T.choose_algorithm(1 << 20 | 1, cols, base, 1 << 20 | 1, dt, base, cols) == name
        for cols in (48, 49, 63):  # past PARITY_MAX_COLS the tiles lead
            assert T.choose_algorithm(1 << 20 | 1, cols, base, 1 << 20 | 1, dt, base, cols) == "sector_aligned"
    assert T.choose_algorithm(4096, 4096, base, 4096, "bf16", base, 4096) == "pairs128x64"


@pytest.mark.parametrize("dt", ["s8", "f16", "bf16", "f32", "f64"])
def test_auto_takes_the_chunked_strip_into_a_packed_b(dt):
    """A short A (2-byte: up to CHUNKS_2BYTE_MAX_ROWS rows, 1-byte: CHUNKS_1BYTE_MAX_ROWS, others
    NARROW_AUTO_ROWS) written into a packed, 16-byte aligned B takes narrow_rows_chunks at any alignment and
    stride of A, 2-byte 16 KB strips past 32 rows; float64 keeps narrow_rows (the same speed); a B not
    packed or off 16 bytes keeps the older strips."""
    base = 0x7F0000000000
    limit = {"f16": T.CHUNKS_2BYTE_MAX_ROWS, "bf16": T.CHUNKS_2BYTE_MAX_ROWS, "s8": T.CHUNKS_1BYTE_MAX_ROWS}
    limit = limit.get(dt, T.NARROW_AUTO_ROWS)
    for rows in (2, 3, 17, 24, 31, 32, 37, 40, 41, 63, 64):
        for a_address, lda in ((base, 1 << 20), (base + 3 * T.ITEMSIZE[dt], (1 << 20) + 5)):
            got = T.choose_algorithm(rows, 1 << 20, base, rows, dt, a_address, lda)
            if dt == "f64" or rows > limit:
                assert not got.startswith("narrow_rows_chunks"), (rows, got)
            elif dt == "s8" and rows not in (*T.ROWS_CHUNKS_LEAD, T.ROW_STRIP_BANK_ROWS):
                assert got == "narrow_rows_quads16k", rows  # the row strip leads there (the test below)
            else:
                assert got == ("narrow_rows_chunks" if rows <= 32 or dt == "s8" else "narrow_rows_chunks16k"), rows
        unpacked = T.choose_algorithm(rows, 1 << 20, base, rows + 1, dt, base, 1 << 20)
        assert not unpacked.startswith("narrow_rows_chunks")
    v = T.KERNELS[("narrow_rows_chunks", dt)]
    assert v.accepts(24, 1000, base + 1, 1001, base + 16, 24) and not v.accepts(24, 1000, base, 1000, base + 8, 24)
    assert v.strip(24, 1000) * T.ITEMSIZE[dt] == 16 * ((32768 // 24 - 16) // 16)  # the kernel's R


def test_the_even_flat_strip_stages_within_its_shared_memory():
    """narrow_cols_flat_even16k's strip (the kernel's R) and its second staging (B's cols rows of P words, P
    padded past R / 2 by under 16) fit the arrays the kernel declares, for every even width it takes; the
    grid covers A's rows; odd widths, views of A and odd strides of B are refused."""
    for dt in ("f16", "bf16"):
        v = T.KERNELS[("narrow_cols_flat_even16k", dt)]
        elems = v.nbytes // 2
        for cols in range(2, 127, 2):
            r = v.strip(1 << 20, cols)
            assert r % 16 == 0 and r * cols <= elems and r >= 16, cols
            assert cols * (r // 2 + 15) <= elems // 2 + 1920, cols  # the words array's bound
            assert v.grid(1 << 20, cols) == (1, min(-(-(1 << 20) // r), 65535), 1)
            assert v.accepts(1 << 20, cols, 0x7F0000000000, cols, 0x7F1000000004, 1 << 20)
        base = 0x7F0000000000
        assert not v.accepts(1000, 41, base, 41, base, 1000)  # odd width: narrow_cols_flat16k's
        assert not v.accepts(1000, 128, base, 128, base, 1000)  # past the widths it takes
        assert not v.accepts(1000, 40, base + 8, 40, base, 1000)  # A off 16 bytes
        assert not v.accepts(1000, 40, base, 42, base, 1000)  # A not contiguous
        assert not v.accepts(1000, 40, base, 40, base + 2, 1000)  # B off 4 bytes
        assert not v.accepts(1001, 40, base, 40, base, 1001)  # B's stride odd


def test_the_parity_strip_stages_within_its_shared_memory_and_takes_any_row_stride():
    """narrow_cols_flat_parity16k: the strip and B's staged words (P < R / 2 + 17) fit the kernel's arrays
    for every even width; it takes B 2-byte aligned at any row stride (the packed result of an odd number
    of rows: rows of B alternating parity), and refuses odd widths and views of A."""
    for dt in ("f16", "bf16"):
        v = T.KERNELS[("narrow_cols_flat_parity16k", dt)]
        elems = v.nbytes // 2
        for cols in range(2, 127, 2):
            r = v.strip(1 << 20, cols)
            assert r % 16 == 0 and r * cols <= elems and r >= 16, cols
            assert cols * (r // 2 + 16) <= elems // 2 + 2048, cols
        base = 0x7F0000000000
        assert v.accepts(1398101, 24, base, 24, base, 1398101)  # odd rows into a packed B
        assert v.accepts(1000, 24, base, 24, base + 2, 1001)  # B 2 bytes off a word, odd stride
        assert not v.accepts(1000, 41, base, 41, base, 1000)
        assert not v.accepts(1000, 24, base + 8, 24, base, 1000)
        assert not v.accepts(1000, 24, base, 26, base, 1000)
        assert not v.accepts(1000, 24, base, 24, base + 1, 1000)


def test_the_odd_parity_strip_takes_odd_widths_at_any_row_stride():
    """narrow_cols_flat_odd_parity16k: narrow_cols_flat16k's strip (R rows within the kernel's array) for B
    2-byte aligned at any row stride; even widths and views of A refused."""
    for dt in ("f16", "bf16"):
        v = T.KERNELS[("narrow_cols_flat_odd_parity16k", dt)]
        for cols in range(1, 128, 2):
            r = v.strip(1 << 20, cols)
            assert r % 16 == 0 and r * cols <= v.nbytes // 2 and r >= 16, cols
        base = 0x7F0000000000
        assert v.accepts(1082401, 31, base, 31, base, 1082401)  # odd rows into a packed B
        assert v.accepts(1000, 31, base, 31, base + 2, 1001)
        assert not v.accepts(1000, 24, base, 24, base, 1000)
        assert not v.accepts(1000, 31, base + 8, 31, base, 1000)
        assert not v.accepts(1000, 31, base, 33, base, 1000)
        assert not v.accepts(1000, 31, base, 31, base + 1, 1000)


def test_auto_moves_words_of_2_byte_elements_at_any_alignment():
    """pairs128x64 where the layout allows pairs (even strides, 4-byte aligned) and B's rows start on
    sectors, tiled_rect64 for the other layouts of B on sectors; where B's rows start inside sectors:
    sector_words128x64 on an A of at least SECTOR_2BYTE_MIN_ROWS rows and SECTOR_WORDS_MIN_ELEMENTS
    elements, sector_aligned on smaller ones; on a shorter A of at least SHORT_WORDS_MIN_ELEMENTS elements
    sector_words128x64 where one of its row tiles holds the shifted pieces (from
    SHORT_SECTOR_WORDS_MIN_ROWS rows), words256x64 on taller ones; tiled_rect64 on narrower or smaller
    ones."""
    base = 0x7F0000000000
    big = T.SECTOR_WORDS_MIN_ELEMENTS
    for dt in ("f16", "bf16"):
        assert T.choose_algorithm(4096, 4096, base, 4096, dt, base, 4096) == "pairs128x64"
        assert T.choose_algorithm(23170, 23170, base, 23170, dt, base, 23170) == "sector_words128x64"  # B off
        assert T.choose_algorithm(8192, 8192, base + 2, 8192, dt, base, 8192) == "sector_words128x64"  # a view
        assert T.choose_algorithm(4096, 4096, base + 2, 4096, dt, base, 4096) == "sector_aligned"  # smaller
        assert T.choose_algorithm(3001, 17011, base, 3001, dt, base, 17011) == "sector_words128x64"
        assert T.choose_algorithm(5000, 5003, base, 5000, dt, base, 5003) == "sector_aligned"  # 25.0 million
        assert T.choose_algorithm(700, 40001, base, 700, dt, base, 40001) == "sector_words128x64"  # 28.0 million
        assert T.choose_algorithm(2047, 2049, base, 2047, dt, base, 2049) == "tiled_rect64"  # the L2 holds it
        rows = T.SECTOR_2BYTE_MIN_ROWS + 1
        cols = -(-big // rows)
        assert T.choose_algorithm(rows, cols, base, rows, dt, base, cols) == "sector_words128x64"
        assert T.choose_algorithm(rows, cols - 1, base, rows, dt, base, cols - 1) == "sector_aligned"
        assert T.choose_algorithm(rows - 2, cols, base, rows - 2, dt, base, cols) == "words256x64"
        for shape in ((4096, 4095), (512, 65537), (16384, 16385), (6000, 6001)):  # B on sectors, odd lda
            assert T.choose_algorithm(*shape, base, shape[0], dt, base, shape[1]) == "tiled_rect64", shape
        # short A into a packed B off sectors (64 MiB, then 16 MiB)
        expected = {72: "tiled_rect64", 88: "sector_words128x64", 100: "sector_words128x64"}
        expected |= {113: "sector_words128x64", 114: "words256x64", 127: "words256x64", 200: "words256x64"}
        for rows, name in expected.items():
            cols = (1 << 25) // rows
            assert T.choose_algorithm(rows, cols, base, rows, dt, base, cols) == name, rows
            assert T.choose_algorithm(rows, cols // 4, base, rows, dt, base, cols // 4) == "tiled_rect64", rows
        rows = T.SHORT_SECTOR_WORDS_MIN_ROWS + 1
        cols = -(-T.SHORT_WORDS_MIN_ELEMENTS // rows)
        assert T.choose_algorithm(rows, cols, base, rows, dt, base, cols) == "sector_words128x64"
        assert T.choose_algorithm(rows, cols - 1, base, rows, dt, base, cols - 1) == "tiled_rect64"
        assert T.choose_algorithm(rows - 2, cols, base, rows - 2, dt, base, cols) == "tiled_rect64"
        assert T.choose_algorithm(1001, 1003, base, 1001, dt, base, 1003) == "tiled_rect64"  # small
        assert T.choose_algorithm(264208, 127, base, 264208, dt, base, 127) == "tiled_rect64"
        assert T.choose_algorithm(335544, 100, base, 335544, dt, base, 100) == "tiled_rect64"  # even, narrow
        assert T.choose_algorithm(262144, 128, base, 262144, dt, base, 128) == "pairs128x64"  # on sectors


def test_auto_writes_whole_sectors_when_rows_of_b_start_inside_them():
    base = 0x7F0000000000
    assert T.choose_algorithm(8192, 8192, base, 8192) == "tiled_rect64"
    assert T.choose_algorithm(17011, 3001, base, 3001) == "sector_aligned"  # odd stride
    assert T.choose_algorithm(300, 64, base + 4, 64) == "sector_aligned"  # a view starting mid-sector
    assert T.choose_algorithm(300, 64, base + 32, 64) == "tiled_rect64"
    assert T.choose_algorithm(37, 453438, base, 37) == "sector_aligned"  # one row tile either way
    assert T.choose_algorithm(63, 266305, base, 63) == "tiled_rect64"  # the shift would add a second
    assert T.choose_algorithm(61, 266305, base, 61, "f64") == "sector_aligned"  # float64 shifts by at most 3
    assert T.choose_algorithm(62, 266305, base, 62, "f64") == "tiled_rect64"


@pytest.mark.parametrize("dt", ["f32", "f64", "f16", "bf16"])
def test_auto_keeps_the_128_row_tiles_for_a_tall_enough_a(dt):
    """pairs128x64 stages 128 rows of A a block (words256x64 256): on an A of fewer rows (37 x 100000,
    64 x 262144) most of each block idled (measured 0.33-0.67 of the copy, against 0.71-0.94 for
    tiled_rect64). sector_aligned's 64-row tiles take short A too, unless their shift adds a row tile."""
    base = 0x7F0000000000
    half = dt in ("f16", "bf16")
    for rows in (32, 37, 63, 64, 127):
        if half and rows > 64:
            continue
        sector = 32 // {"f32": 4, "f64": 8, "f16": 2, "bf16": 2}[dt]
        two_tiles = rows <= 64 < rows + sector - 1
        expected = "tiled_rect64" if half or rows % sector == 0 or two_tiles else "sector_aligned"
        if half and rows <= T.CHUNKS_2BYTE_MAX_ROWS:  # a short A into a packed B: the chunked strip
            expected = "narrow_rows_chunks" if rows <= 32 else "narrow_rows_chunks16k"
        assert T.choose_algorithm(rows, 100000, base, rows, dt, base, 100000) == expected, rows
    tall = T.choose_algorithm(128, 100000, base, 128, dt, base, 100000)
    assert tall == ("pairs128x64" if half else "tiled_rect64")
    odd = T.choose_algorithm(129, 200001, base, 129, dt, base, 200001)
    assert odd == ("words256x64" if half else "sector_aligned")


@pytest.mark.parametrize(
    ("name", "itemsize", "unit"),
    [("sector_aligned", i, 32) for i in (1, 2, 4, 8)]
    + [("words256x64", 2, 4), ("sector_words128x64", 2, 32), ("sector_quads128", 1, 32)],
)
@pytest.mark.parametrize("rows", [1, 7, 8, 15, 16, 57, 63, 64, 65, 113, 121, 127, 128, 129, 143, 3001])
@pytest.mark.parametrize("ldb_mod", range(16))
def test_aligned_pieces_tile_each_row_of_b_once(name, itemsize, unit, rows, ldb_mod):
    """The kernels' index arithmetic, replayed on the host: for every row c of B, the pieces the row
    tiles write ([TR t - m, TR t + TR - m) clipped to [0, rows), m = B(c, TR t)'s element index mod the
    kernel's unit: a 32-byte sector, or a 4-byte word) cover each element exactly once, every piece starts
    on a unit unless clipped at 0, and the staged rows (TR t - skew ...) hold what it reads."""
    v = T.KERNELS[(name, {1: "s8", 2: "f16", 4: "f32", 8: "f64"}[itemsize])]
    tile_rows, sector = v.tile[0], unit // itemsize
    assert v.skew == sector - 1 and tile_rows % sector == 0  # a piece starts up to skew elements before its tile
    b_elem, ldb = 3, 3000 + ldb_mod + 16
    tiles = -(-(rows + v.skew) // tile_rows)
    assert v.grid(rows, 5)[1] == tiles
    for c in range(17):
        m = (b_elem + c * ldb) % sector
        seen = np.zeros(rows, int)
        for t in range(tiles):
            r = np.arange(tile_rows) + tile_rows * t - m
            staged_row = r - (tile_rows * t - v.skew)
            assert staged_row.min() >= 0 and staged_row.max() < tile_rows + v.skew
            keep = (r >= 0) & (r < rows)
            seen[r[keep]] += 1
            if keep.any() and r[keep][0] > 0:
                assert (b_elem + c * ldb + r[keep][0]) % sector == 0
        assert (seen == 1).all()


def test_two_byte_tiles_refuse_other_dtypes(no_gpu):
    a, out = fake_matrix(64, 64, dtype="float32"), fake_matrix(64, 64, ptr=0x7F1000000000, dtype="float32")
    for name in T.TWO_BYTE_TILES:
        with pytest.raises(ValueError, match="2-byte"):
            T.transpose(a, out=out, algorithm=name)
    for name in T.ONE_BYTE_TILES:
        with pytest.raises(ValueError, match="1-byte"):
            T.transpose(a, out=out, algorithm=name)
    assert no_gpu == []


@pytest.mark.parametrize("dt", ["int8", "float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("name", ["auto", *T.ONE_BYTE_TILES])
def test_launch_arguments_of_the_1_byte_tile(no_gpu, name, dt):
    """A 1-byte tile, named or chosen by auto (quads128 for a large A whose rows and B's start on words),
    goes through the same launch as every transpose (FP8 moves through the int8 entries)."""
    a = fake_matrix(4096, 8196, stride=8196, dtype=dt)
    out = fake_matrix(8196, 4096, stride=4096, ptr=0x7F1000000000, dtype=dt)
    assert T.transpose(a, out=out, algorithm=name) is out
    ((kname, grid, block, args, _, _),) = no_gpu
    v = T.KERNELS[("quads128" if name == "auto" else name, "s8")]
    assert kname == v.kernel.name == f"transpose_{v.kernel.name[len('transpose_') :]}" and grid == v.grid(4096, 8196)
    assert grid == ((65, 32, 1) if name != "sector_quads128" else (65, 33, 1))
    assert block == v.block == (32, 8, 1) and args == (a.elements, out.elements, 4096, 8196, 8196, 4096, 1, 0, 0)


def test_the_1_byte_strip_takes_any_b_and_stages_within_its_shared_memory():
    """narrow_cols_quads16k: the strip (R rows, a multiple of 16) and B's staged words (cols rows of P <
    R / 4 + 32 words) fit the kernel's arrays for every width to 127; it takes A contiguous and 16-byte
    aligned, B at any address and stride; auto takes it for 1-byte strips of up to 63 columns from 2^21
    elements and of 65-80 columns into rows of B off words from INT8_STRIP_MIN_ELEMENTS, the tiles under
    that, and narrow_cols (under 24 columns) or the tiles where A is a view; quads128 first where every row
    of A and B is on a word."""
    v = T.KERNELS[("narrow_cols_quads16k", "s8")]
    for cols in range(1, 128):
        r = v.strip(1 << 24, cols)
        assert r % 16 == 0 and r >= 16 and r * cols <= v.nbytes, cols
        assert cols * (r // 4 + 31) <= v.nbytes // 4 + 3968, cols  # the words array's bound
        assert v.grid(1 << 24, cols) == (1, min(-(-(1 << 24) // r), 65535), 1)
    base = 0x7F0000000000
    assert v.accepts(1 << 20 | 1, 24, base, 24, base + 3, (1 << 20) + 7)  # B off words, odd stride
    assert not v.accepts(1000, 24, base + 8, 24, base, 1000)  # A off 16 bytes
    assert not v.accepts(1000, 24, base, 25, base, 1000)  # A not contiguous
    assert not v.accepts(1000, 128, base, 128, base, 1000)  # past the widths it takes
    for dt in ("s8",):
        for rows, cols in (((1 << 26) // 3, 3), ((1 << 26) // 24, 24), (1 << 21, 1), (1 << 18, 8), (1 << 16, 63)):
            assert T.choose_algorithm(rows, cols, base + 1, rows + 3, dt, base, cols) == "narrow_cols_quads16k"
        assert T.choose_algorithm(1 << 16, 64, base, 1 << 16, dt, base, 64) == "quads128"  # past 63, on words
        tall = 1 << 18 | 1  # an odd number of rows: B's rows off words (tall - 1: on words); 2^24 elements and more
        for cols in (65, 72, 80):
            assert T.choose_algorithm(tall, cols, base, tall, dt, base, cols) == "narrow_cols_quads16k"
            assert T.choose_algorithm(tall - 1, cols, base, tall - 1, dt, base, cols) != "narrow_cols_quads16k"
        assert T.choose_algorithm(1 << 16 | 1, 72, base, 1 << 16 | 1, dt, base, 72) == "tiled_rect64"  # 4.7 M elements
        assert T.choose_algorithm(tall, 72, base, tall, dt, base + 1, 72) == "tiled_rect64"  # A off 16 bytes
        assert T.choose_algorithm(tall, 81, base, tall, dt, base, 81) == "tiled_rect64"  # past 80
        assert T.choose_algorithm(tall, 64, base, tall, dt, base, 64) == "tiled_rect64"  # whole tiles
        assert T.choose_algorithm(tall - 1, 72, base, tall - 1, dt, base, 72) == "quads128"  # all on words
        assert T.choose_algorithm(64001, 24, base, 64001, dt, base, 24) == "sector_aligned"  # 1.5 MiB
        assert T.choose_algorithm(16000, 8, base, 16000, dt, base, 8) == "sector_aligned"
        assert T.choose_algorithm(1 << 20, 8, base, 1 << 20, dt, base + 1, 8) == "narrow_cols"  # A off 16
        assert T.choose_algorithm(1 << 20, 40, base, 1 << 20, dt, base + 1, 40) == "sector_aligned"
        assert T.choose_algorithm(1 << 20, 64, base + 1, 1 << 20, dt, base, 64) == "tiled_rect64"  # past 63
    assert T.resolve("narrow_cols", "s8", 1 << 20, 8, base, 8, base, 1 << 20) is v


def test_auto_takes_the_quads_for_large_1_byte_matrices_on_words():
    """quads128 where every row of A and B starts on a word (addresses and strides multiples of 4), on an
    A of at least 96 rows, 64 columns and 2^22 elements; sector_quads128 for B's rows off sectors on an A
    of at least 512 rows, 128 columns and SECTOR_QUADS_MIN_ELEMENTS elements; the byte tiles elsewhere:
    tiled_rect64 from 64 columns on (but the column strip's 65-80 into rows of B off words), sector_aligned
    for tall strips of 24-63 columns."""
    base = 0x7F0000000000
    assert T.choose_algorithm(4096, 4096, base, 4096, "s8", base, 4096) == "quads128"
    assert T.choose_algorithm(2048, 2048, base, 2048, "s8", base, 2048) == "quads128"
    assert T.choose_algorithm(128, 1 << 15, base, 128, "s8", base, 1 << 15) == "quads128"
    assert T.choose_algorithm(100, 671088, base, 100, "s8", base, 671088) == "quads128"
    assert T.choose_algorithm(101, 671088, base, 102, "s8", base, 671088) == "tiled_rect64"  # B's rows off words
    assert T.choose_algorithm(3001, 17011, base, 3001, "s8", base, 17011) == "sector_quads128"
    assert T.choose_algorithm(8192, 8192, base + 1, 8192, "s8", base, 8192) == "sector_quads128"  # B a view
    assert T.choose_algorithm(16384, 16385, base, 16384, "s8", base, 16385) == "tiled_rect64"  # B on sectors
    rows = T.SECTOR_1BYTE_MIN_ROWS + 1
    cols = -(-T.SECTOR_QUADS_MIN_ELEMENTS // rows)
    assert T.choose_algorithm(rows, cols, base, rows, "s8", base, cols) == "sector_quads128"
    assert T.choose_algorithm(rows, cols - 1, base, rows, "s8", base, cols - 1) == "tiled_rect64"
    assert T.choose_algorithm(rows - 2, cols, base, rows - 2, "s8", base, cols) == "tiled_rect64"
    assert T.choose_algorithm(5000, 5003, base, 5000, "s8", base, 5003) == "tiled_rect64"
    assert T.choose_algorithm(1 << 20, 127, base, 1 << 20 | 1, "s8", base, 127) == "tiled_rect64"
    assert T.choose_algorithm(1 << 20, 64, base, 1 << 20, "s8", base, 64) == "quads128"  # from 64 columns
    assert T.choose_algorithm(671088, 100, base, 671088, "s8", base, 100) == "quads128"
    assert T.choose_algorithm(1 << 20, 64, base, 1 << 20 | 2, "s8", base, 64) == "tiled_rect64"  # B's stride
    assert T.choose_algorithm(1065220, 63, base, 1065220, "s8", base + 1, 63) == "sector_aligned"  # A off 16
    assert T.choose_algorithm(4096, 4096, base + 2, 4096, "s8", base, 4096) != "quads128"  # B off a word
    assert T.choose_algorithm(4096, 4096, base, 4098, "s8", base, 4096) != "quads128"  # B's stride
    assert T.choose_algorithm(4096, 4097, base, 4096, "s8", base, 4097) != "quads128"  # A's stride
    assert T.choose_algorithm(1000, 1004, base, 1000, "s8", base, 1004) != "quads128"  # the L2 holds it
    assert T.choose_algorithm(64, 1 << 16, base, 64, "s8", base, 1 << 16) != "quads128"  # 64 rows
    assert T.choose_algorithm(4096, 4096, base, 4096, "f32", base, 4096) == "tiled_rect64"


def test_auto_takes_the_row_strip_for_1_byte_matrices_of_65_to_128_rows_into_a_packed_b():
    """narrow_rows_quads16k for a 1-byte A of 65-128 rows at any alignment into a packed B (ldb == rows) at
    any size, where quads128 does not take it (every row of A and B on a word, 96 rows or more); 96 and 128
    rows (a warp's stores in one bank) from INT8_STRIP_MIN_ELEMENTS elements; 64 rows keep tiled_rect64."""
    base = 0x7F0000000000
    for rows in (65, 72, 96, 99, 127, 128):
        cols = (1 << 26) // rows | 1  # A's rows off words
        assert T.choose_algorithm(rows, cols, base, rows, "s8", base, cols) == "narrow_rows_quads16k"
        assert T.choose_algorithm(rows, cols, base + 3, rows, "s8", base + 1, cols + 2) == "narrow_rows_quads16k"
        assert T.choose_algorithm(rows, cols, base, rows + 1, "s8", base, cols) != "narrow_rows_quads16k"  # B padded
        small = T.choose_algorithm(rows, 1001, base, rows, "s8", base, 1001)
        assert (small == "narrow_rows_quads16k") == (rows % T.ROW_STRIP_BANK_ROWS != 0), (rows, small)
    small = T.INT8_STRIP_MIN_ELEMENTS // 128
    assert 128 * (small - 1) < T.INT8_STRIP_MIN_ELEMENTS <= 128 * small
    assert T.choose_algorithm(128, small - 1, base, 128, "s8", base, small - 1) != "narrow_rows_quads16k"
    assert T.choose_algorithm(128, small + 1, base, 128, "s8", base, small + 1) == "narrow_rows_quads16k"  # odd
    assert T.choose_algorithm(100, 671088, base, 100, "s8", base, 671088) == "quads128"  # all on words
    assert T.choose_algorithm(72, 932068, base, 72, "s8", base, 932068) == "narrow_rows_quads16k"  # under 96 rows
    assert T.choose_algorithm(64, 1 << 20, base, 64, "s8", base, 1 << 20) == "tiled_rect64"
    assert T.choose_algorithm(63, 1 << 20, base, 63, "s8", base, 1 << 20) == "narrow_rows_quads16k"
    assert T.choose_algorithm(129, 1 << 20, base, 129, "s8", base + 1, 1 << 20) != "narrow_rows_quads16k"
    assert T.choose_algorithm(100, 1 << 20, base, 100, "f16", base + 2, 1 << 20) != "narrow_rows_quads16k"
    for fp8 in ("e4m3", "e5m2"):  # the FP8 formats move through int8's kernels
        assert T.choose_algorithm(100, 1 << 20 | 1, base, 100, fp8, base, 1 << 20 | 1) == "narrow_rows_quads16k"


def test_auto_takes_the_row_strip_for_2_to_63_rows_into_a_packed_b():
    """A 1-byte A of 2-63 rows into a packed B: the row strip at any size and alignment, but for 32 rows
    (chunks into a B on 16 bytes, else the older strips or tiles) and, into a B on 16 bytes, for
    ROWS_CHUNKS_LEAD rows (chunks); the tiles at 64 rows."""
    base = 0x7F0000000000
    for rows in range(2, 64):
        for cols in (1001, -(-T.INT8_STRIP_MIN_ELEMENTS // rows)):
            off_16 = T.choose_algorithm(rows, cols, base + 1, rows, "s8", base, cols)
            on_16 = T.choose_algorithm(rows, cols, base, rows, "s8", base + 3, cols + 1)
            if rows == T.ROW_STRIP_BANK_ROWS:
                assert off_16 in ("narrow_rows", "tiled_rect64", "sector_aligned"), off_16
                assert on_16 == "narrow_rows_chunks"
            else:
                assert off_16 == "narrow_rows_quads16k", (rows, cols)
                assert on_16 == ("narrow_rows_chunks" if rows in T.ROWS_CHUNKS_LEAD else "narrow_rows_quads16k")
    assert T.choose_algorithm(64, 1 << 20, base + 1, 64, "s8", base, 1 << 20) == "tiled_rect64"


def test_narrow_rows_by_name_takes_autos_row_kernel_for_bytes():
    """algorithm="narrow_rows" on a 1-byte A into a packed B runs the row kernel auto would (the strip or
    chunks) where auto takes one; elsewhere the first strip that takes the operands (chunks to 64 rows into
    a 16-byte aligned B, then the row strip), and the 16 KB byte strip into a B that is not packed."""
    base = 0x7F0000000000
    strip, chunks = "narrow_rows_quads16k", "narrow_rows_chunks"
    want = {  # rows: (into a packed B on 16 bytes, one a byte in)
        1: (chunks, strip),
        2: (chunks, strip),
        5: (chunks, strip),
        24: (strip, strip),
        32: (chunks, strip),  # auto takes neither at 32 rows a byte in: the first that accepts
        37: (strip, strip),
        63: (strip, strip),
        64: (chunks, strip),
    }
    for rows, names in want.items():
        for b_address, name in zip((base, base + 1), names, strict=True):
            got = T.resolve("narrow_rows", "s8", rows, 4099, base, 4099, b_address, rows)
            assert got is T.KERNELS[(name, "s8")], (rows, b_address - base, got)
    assert T.resolve("narrow_rows", "s8", 24, 4099, base, 4099, base, 25) is T.KERNELS[("narrow_rows16k", "s8")]


def test_the_row_strip_of_bytes_takes_up_to_128_rows_into_a_packed_b_only():
    """Its contract: 1-128 rows, B packed (ldb == rows), any alignment of A and B; the strip is a multiple
    of 32 columns whose run of B fits in 16 KB."""
    v = T.KERNELS[("narrow_rows_quads16k", "s8")]
    assert v.accepts(1, 5, 3, 7, 1, 1) and v.accepts(128, 1000, 1, 1001, 3, 128)
    assert not v.accepts(129, 1000, 0, 1000, 0, 129)
    assert not v.accepts(100, 1000, 0, 1000, 0, 101)
    for rows in (1, 2, 3, 37, 64, 100, 127, 128):
        strip = v.strip(rows, 1 << 20)
        assert strip % 32 == 0 and 0 < strip * rows <= 16384 < (strip + 32) * rows
        assert v.grid(rows, 10 * strip + 1) == (11, 1, 1)


# ---------------------------------------------------------------- GPU
def _check_transposed(out: Matrix, host: np.ndarray) -> None:
    got = out.to_numpy()
    assert got.shape == host.T.shape
    assert np.array_equal(got, host.T), f"{np.count_nonzero(got != host.T)} wrong of {host.size}"


@pytest.mark.gpu
@given(
    rows=dims(1000, tiles=(8, 32, 64)), cols=dims(1000, tiles=(8, 32, 64)), name=st.sampled_from(["auto", *VARIANTS])
)
def test_variants_on_drawn_shapes(rows, cols, name):
    host = random((rows, cols))
    with gm.Matrix.from_numpy(host) as a, poisoned(cols, rows) as out:
        assert T.transpose(a, out=out, algorithm=name) is out
        _check_transposed(out, host)


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [4, 8, 16])
def test_the_chunked_float32_strip_moves_every_bit_pattern(cols):
    """float32 strips of 4, 8 or 16 columns of a packed, 16-byte aligned A, whose lanes each write one staged
    16-byte chunk to B: every bit pattern arrives as it is (NaN payloads, negative zero, subnormals: no
    numeric conversion on the way), at the strips' edges (816, 448 and 240 rows a strip) and with a last
    chunk shorter than a strip, into a poisoned B; auto takes the strip for them."""
    rng = np.random.default_rng(cols)
    for rows in (1, 3, 239, 240, 241, 447, 448, 449, 815, 816, 817, 100003):
        bits = rng.integers(0, 2**32, (rows, cols), dtype=np.uint64).astype(np.uint32)
        with gm.Matrix.from_numpy(bits.view(np.float32)) as a, poisoned(cols, rows) as out:
            auto = T.choose_algorithm(rows, cols, out.elements, out.stride, "f32", a.elements, a.stride)
            assert auto == "narrow_cols16k", (rows, cols, auto)
            T.transpose(a, out=out)
            np.testing.assert_array_equal(out.to_numpy().view(np.uint32), bits.T)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["auto", *VARIANTS])
@pytest.mark.parametrize(
    "shape",
    [(1, 1), (1, 1000), (1000, 1), (1, 70001), (70001, 1), (32, 32), (64, 64), (63, 65), (97, 251), (1024, 1), (2, 3)],
)
def test_edge_shapes(name, shape):
    host = random(shape)
    with gm.Matrix.from_numpy(host) as a, poisoned(shape[1], shape[0]) as out:
        T.transpose(a, out=out, algorithm=name)
        _check_transposed(out, host)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["auto", *VARIANTS])
def test_tall_matrix_walks_row_tiles_past_the_grid_cap(name):
    # more row tiles than gridDim.y can hold even for 8-row tiles: the grid-stride loop must cover them
    rows, cols = 65535 * 64 + 77, 3
    host = random((rows, cols))
    if name != "auto":  # auto takes a strip kernel here, whose grid is smaller
        assert T.VARIANTS[name].grid(rows, cols)[1] == 65535
    with gm.Matrix.from_numpy(host) as a, poisoned(cols, rows) as out:
        T.transpose(a, out=out, algorithm=name)
        _check_transposed(out, host)


@pytest.mark.gpu
@settings(max_examples=20)
@given(
    rows=dims(300, tiles=(32, 64)),
    cols=dims(300, tiles=(32, 64)),
    name=st.sampled_from(["auto", *VARIANTS]),
    pads=st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5), st.integers(0, 5)),
)
def test_views_in_and_out(rows, cols, name, pads):
    host = random((rows, cols))
    parent, a = strided_view(host, pads[0], pads[1] + 1)
    big = poisoned(cols + 2, rows + pads[2] + pads[3])
    try:
        out = big[1 : cols + 1, pads[2] : pads[2] + rows]
        assert out.stride == rows + pads[2] + pads[3]
        T.transpose(a, out=out, algorithm=name)
        _check_transposed(out, host)
        whole = big.to_numpy()
        mask = np.ones(whole.shape, bool)
        mask[1 : cols + 1, pads[2] : pads[2] + rows] = False
        assert np.isnan(whole[mask]).all(), "wrote outside the output view"
    finally:
        parent.free()
        big.free()


@pytest.mark.gpu
@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("shape", [(1, 70), (70, 1), (63, 65), (65, 127), (97, 251), (129, 129), (200, 64)])
def test_views_with_every_row_alignment(name, shape):
    # A and B as views whose first element and stride take every residue mod 8 words (every offset
    # within a 32-byte sector), so rows start everywhere in their sectors; nothing outside B's view written
    rows, cols = shape
    host = random(shape)
    for k in range(8):
        # lda = cols + k, ldb = rows + 3k (mod 8): both strides take every residue, and for odd
        # squares both are odd at even k
        a_left, a_right = k, 0
        b_top, b_left, b_right = 2, (5 * k + 3) % 8, (-2 * k - 3) % 8  # B's offset: 2 rows + 3k + 3 (mod 8)
        parent, a = strided_view(host, a_left, a_right)
        big = poisoned(cols + 3, rows + b_left + b_right)
        try:
            out = big[b_top : b_top + cols, b_left : b_left + rows]
            T.transpose(a, out=out, algorithm=name)
            _check_transposed(out, host)
            whole = big.to_numpy()
            mask = np.ones(whole.shape, bool)
            mask[b_top : b_top + cols, b_left : b_left + rows] = False
            assert np.isnan(whole[mask]).all(), ("wrote outside the output view", k)
        finally:
            parent.free()
            big.free()


@pytest.mark.gpu
def test_new_output_and_T_property():
    host = random((37, 129))
    with gm.Matrix.from_numpy(host) as a:
        b = T.transpose(a)
        c = a.T  # a view: same memory, read column-major
        try:
            assert b.shape == (129, 37) and not b.is_view and not b.is_transposed
            assert c.shape == (129, 37) and c.is_view and c.is_transposed and c.elements == a.elements
            _check_transposed(b, host)
            _check_transposed(c, host)
            assert c.T.shape == (37, 129) and not c.T.is_transposed
            # the transpose of a transposed view is a plain row-major copy of its storage
            d = T.transpose(c)
            assert not d.is_transposed and np.array_equal(d.to_numpy(), host)
            d.free()
        finally:
            b.free()


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(0, 0), (0, 5), (5, 0)])
def test_empty(shape):
    with gm.Matrix.empty(*shape) as a:
        b = T.transpose(a)
        assert b.shape == (shape[1], shape[0])
        assert b.to_numpy().shape == (shape[1], shape[0])
        b.free()


@pytest.mark.gpu
def test_out_overlapping_input_rejected():
    with gm.Matrix.from_numpy(random((8, 8))) as a:
        with pytest.raises(ValueError, match="overlaps"):
            T.transpose(a, out=a)
        with pytest.raises(ValueError, match="overlaps"):
            T.transpose(a[0:4, 0:4], out=a[2:6, 4:8])  # no shared element, but the address ranges interleave


@pytest.mark.gpu
@pytest.mark.whole_gpu
def test_huge_square_beyond_2_31_elements():
    """46341^2 > 2^31 elements: element offsets must be 64-bit everywhere. Checked on sampled rows/columns."""
    n = 46341
    need = 2 * n * n * 4
    memory.release_cached()  # earlier tests' blocks stay cached in the pool unless handed back
    free_bytes, _ = _free_memory()
    if free_bytes < need + 2**30:
        pytest.skip(f"needs {need / 2**30:.1f} GiB of GPU memory, {free_bytes / 2**30:.1f} free")
    # A[r, c] = (hr[r] + hc[c]) mod 2^24: exact in float32, and a misplaced element almost surely differs
    g = np.random.default_rng(1234)
    hr = g.integers(0, 2**24, n, dtype=np.int32)
    hc = g.integers(0, 2**24, n, dtype=np.int32)

    def expect(r, c):
        return ((hr[r] + hc[c]) & 0xFFFFFF).astype(np.float32)

    a = gm.Matrix.empty(n, n)
    b = gm.Matrix.empty(n, n)
    try:
        chunk = 1024
        buf = np.empty((chunk, n), np.int32)
        for r0 in range(0, n, chunk):
            k = min(chunk, n - r0)
            np.add(hr[r0 : r0 + k, None], hc[None, :], out=buf[:k])
            np.bitwise_and(buf[:k], 0xFFFFFF, out=buf[:k])
            memory.upload(a[r0 : r0 + k, :].elements, n * 4, buf[:k].astype(np.float32))
        del buf
        rng = np.random.default_rng()
        picks = sorted(
            {0, 1, 31, 32, 63, 64, n // 2, n - 65, n - 64, n - 33, n - 2, n - 1, *rng.integers(0, n, 6).tolist()}
        )
        everything = np.arange(n)
        for name in ["auto", *VARIANTS]:
            poison(b)
            T.transpose(a, out=b, algorithm=name)
            for j in picks:
                row = b[j : j + 1, :].to_numpy()[0]  # B[j, :] = A[:, j]
                assert np.array_equal(row, expect(everything, j)), (name, "row", j)
                col = b[:, j : j + 1].to_numpy()[:, 0]  # B[:, j] = A[j, :]
                assert np.array_equal(col, expect(j, everything)), (name, "column", j)
    finally:
        a.free()
        b.free()
        memory.release_cached()


def _free_memory():
    from cuda.bindings import driver

    from gpumat.runtime import check

    gm.device()
    return check(driver.cuMemGetInfo())
