"""Transpose, B = A^T, float32: argument checks, variant choice, launch.

Every variant reads A (rows x cols, stride lda) and writes B (cols x rows, stride ldb); see
cuda/transpose.cu. The grid puts A's column tiles on x and A's row tiles on y (capped at 65535; the
kernels walk the rest in a grid-stride loop).
"""
from __future__ import annotations

from dataclasses import dataclass

from ._driver import stream_handle
from ._geometry import tiled_grid
from ._kernels import Kernel
from .matrix import Matrix, as_matrix, check_out, done_on, operand_device, use_on

SIGNATURE = "PPqqqq"  # A, B, rows, cols, lda, ldb


@dataclass(frozen=True)
class Variant:
    kernel: Kernel
    block: tuple[int, int, int]
    tile: tuple[int, int]  # rows x cols of A one block covers per step of its row-tile loop
    skew: int = 0          # extra rows the row tiles span (sector_aligned shifts B's row pieces by up to 7)

    def grid(self, rows: int, cols: int) -> tuple[int, int, int]:
        """Grid for transposing a rows x cols matrix A."""
        return tiled_grid(rows + self.skew, cols, *self.tile)


def _variant(name: str, block: tuple[int, int], tile: tuple[int, int], skew: int = 0) -> Variant:
    return Variant(Kernel("transpose", f"transpose_{name}", SIGNATURE), (*block, 1), tile, skew)


VARIANTS: dict[str, Variant] = {
    "naive": _variant("naive", (32, 8), (8, 32)),                # one element a thread, scattered writes
    "tiled": _variant("tiled", (32, 32), (32, 32)),              # seed 001's shared-memory tile
    "tiled_padded": _variant("tiled_padded", (32, 32), (32, 32)),  # tile padded to 32 x 33
    "tiled_rect": _variant("tiled_rect", (32, 8), (32, 32)),     # 32 x 8 threads, 4 elements each
    "tiled_rect64": _variant("tiled_rect64", (32, 8), (64, 64)),  # 32 x 8 threads, 64 x 64 tile, 16 each
    # the 64 x 64 tile with each row piece of B shifted to start on a 32-byte sector
    "sector_aligned": _variant("sector_aligned", (32, 8), (64, 64), skew=7),
}
ALGORITHMS = ("auto", *VARIANTS)
SECTOR_FLOATS = 8  # 32 bytes


def choose_algorithm(rows: int, cols: int, out_address: int = 0, ldb: int = 0) -> str:
    """What "auto" runs for a rows x cols A written to B at out_address with row stride ldb.

    B's alignment decides (measured on the H100 at 3001 x 17011): when every row of B starts on a
    32-byte sector, tiled_rect64 (0.94-0.95 of the copy ceiling); otherwise rows of B start inside
    sectors and sector_aligned writes whole sectors anyway."""
    if ldb % SECTOR_FLOATS == 0 and out_address % (4 * SECTOR_FLOATS) == 0:
        return "tiled_rect64"
    return "sector_aligned"


def check_operands(a, out, algorithm: str) -> tuple[int, int]:
    """Validate everything before any allocation or launch; returns A's (rows, cols)."""
    a = as_matrix(a, "a")
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise ValueError(f"unknown transpose algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    rows, cols = a.shape
    check_out(out, (cols, rows), (a,), "transpose")  # so no in-place transpose either
    return rows, cols


def transpose(a: Matrix, out: Matrix | None = None, algorithm: str = "auto", stream=None) -> Matrix:
    """B = a^T for a float32 matrix of any shape (views welcome). Returns out (new if None).
    `stream`: where the work is queued (default: the thread's current stream)."""
    dev = operand_device((a, "a"), (out, "out"))
    s = stream_handle(stream, dev)
    with dev.lock:
        rows, cols = check_operands(a, out, algorithm)
        if out is None:
            out = Matrix._allocate(cols, rows, dev, s)
        if rows == 0 or cols == 0:
            return out
        use_on(s, a, out)
        if algorithm == "auto":
            algorithm = choose_algorithm(rows, cols, out.elements, out.stride)
        variant = VARIANTS[algorithm]
        variant.kernel(variant.grid(rows, cols), variant.block, a.elements, out.elements, rows, cols, a.stride,
                       out.stride, stream=s, device=dev)
        done_on(s, a, out)
    return out
