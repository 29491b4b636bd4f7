"""Launch geometry as small pure functions, testable without a GPU.

Grids put the long dimension (columns, or a flat element count) on x, whose limit is 2^31 - 1, and
cap y and z at 65535; kernels walk any row tiles beyond the cap in a grid-stride loop.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535
MAX_BLOCK_THREADS = 1024


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Plan:
    """A matmul kernel and its split-K: `splits` blocks along z, each over k_chunk of K (K when 1)."""

    algorithm: str
    splits: int = 1
    k_chunk: int = 0


def tiled_grid(rows: int, cols: int, tile_rows: int, tile_cols: int, layers: int = 1) -> tuple[int, int, int]:
    """Grid of (column tiles, row tiles capped at 65535, layers) for a rows x cols output."""
    gx = cdiv(cols, tile_cols)
    if gx > MAX_GRID_X:
        raise ValueError(f"{cols} columns need {gx} blocks, over the grid limit {MAX_GRID_X}")
    if not 1 <= layers <= MAX_GRID_YZ:
        raise ValueError(f"{layers} grid layers is outside 1..{MAX_GRID_YZ}")
    return max(gx, 1), max(min(cdiv(rows, tile_rows), MAX_GRID_YZ), 1), layers


def row_tiles_visited(grid_y: int, tiles: int) -> list[int]:
    """The row tiles block row `by` visits for each by < grid_y (the kernels' grid-stride loop), flattened."""
    return [t for by in range(grid_y) for t in range(by, tiles, grid_y)]


def flat_grid(n: int, threads: int, blocks_cap: int) -> tuple[int, int, int]:
    """1-D grid for a grid-stride loop over n items: enough blocks to cover n, at most blocks_cap."""
    return max(min(cdiv(n, threads), blocks_cap), 1), 1, 1


SPLITK_SLICES = 8  # cuda/gpumat.cuh's SPLITK_SLICES: the runs a small plane's splits are cut into


def splitk_slices(m: int, n: int, splits: int) -> int:
    """The runs of splits a split-K reduction adds separately before adding their sums (cuda/gpumat.cuh,
    splitk_reduce): SPLITK_SLICES for a plane of at most 2^18 outputs and at least 16 splits (there a
    thread a group leaves most SMs idle and each thread with many loads one after another: 64 x 64 from
    128 splits is 1024 threads), else 1. A function of the problem alone: the order of the sums, and so
    the bits, is the same on every GPU."""
    return SPLITK_SLICES if splits >= 16 and m * n <= 1 << 18 else 1


def splitk_reduce_launch(m: int, n: int, splits: int, acc_bytes: int, sm_count: int):
    """(grid, block) of a split-K reduction: a thread adds the partials of a group of 16 / acc_bytes
    outputs (4 float32 or 2 float64, one 16-byte load a split); block (256, 1, 1) with a thread a group,
    or (32, SPLITK_SLICES, 1) with 32 groups a block (splitk_slices); blocks up to 8 an SM (a full H100
    SM), and a grid-stride loop takes the rest."""
    groups = cdiv(m * n, 16 // acc_bytes)
    slices = splitk_slices(m, n, splits)
    per_block = 256 // slices
    return flat_grid(groups, per_block, 8 * sm_count), (per_block, slices, 1)
