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


def splitk_reduce_grid(m: int, n: int, sm_count: int) -> tuple[int, int, int]:
    """Grid of a split-K reduction (block (256,1,1)): a thread adds the partials of a group of outputs
    (4 float32 or 2 float64, one 16-byte load a split; cuda/gpumat.cuh), blocks for the float32 groups
    up to 8 an SM (a full H100 SM), and a grid-stride loop takes the rest."""
    return flat_grid(cdiv(m * n, 4), 256, 8 * sm_count)
