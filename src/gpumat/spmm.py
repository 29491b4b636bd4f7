"""Sparse CSR x dense, C = S @ B, float32 or float64: SpMV (one column) or SpMM (several).

This module owns the operation: argument checks, the variant table and "auto"'s choice, launch
geometry, and the kernels of cuda/spmm.cu except csr_to_dense (the container's, in gpumat.sparse).

Kernels (cuda/spmm.cu): "scalar" (one thread per row and column, the baseline), "vector" (a group of
2..32 lanes per row, the SpMV kernel), and "tile8" .. "tile128" (GE-SpMM-style row groups: a group owns
a row times a tile of B's columns, reads B's rows in coalesced 128-bit loads and reuses each staged
nonzero across the tile; one sweep over S per column tile). Rows longer than the matrix's split are
cut into chunks spread over many warps (partial rows into scratch, then a fixed-order reduction), so
one row of millions of nonzeros does not stall one warp. Deterministic: no atomics anywhere.
"""

from __future__ import annotations

from typing import NamedTuple

from . import memory
from ._csr import INT32_MAX, RowStats
from ._dtypes import name, suffix
from .matrix import Matrix, plain_2d
from .memory.ordering import mark_done, use_on
from .operands import as_matrix, check_out, operand_device
from .runtime.geometry import MAX_GRID_X, MAX_GRID_YZ, cdiv
from .runtime.kernels import Kernel
from .runtime.memops import zero_2d
from .runtime.streams import stream_handle
from .sparse import BLOCK, VALUE_SUFFIXES, CSRMatrix

TILES = (8, 16, 32, 64, 128)  # column tiles of the row-group kernels (four elements a lane)
TILES_SCALAR = (8, 16, 32)  # the same with one element a lane, for B or C not 16-byte aligned
VECTOR_LANES = (2, 4, 8, 16, 32)
AUTO_TILE_CAP = 64  # auto's widest column tile (measured on the H100, see choose_algorithm)

SPARSE_SIGNATURE = "PPPPPPPPiiqqqqii"  # indptr, indices, data, B, C, partial, chunk_row, chunk_start,
#                                        rows, N, ldb, ldc, ldp, split, n_chunks, chunk_blocks

# Every kernel exists for float32 and float64 values (data, B and C in one dtype): *_BY_DTYPE[dtype].
# float64's vec-4 tiles need B and C 16-byte aligned with even ldb, ldc (two 128-bit loads of 4 doubles).
SCALAR_BY_DTYPE = {dt: Kernel("spmm", f"spmm_csr_scalar_{dt}", "PPPPPiiqq") for dt in VALUE_SUFFIXES}
VECTOR_BY_DTYPE = {dt: Kernel("spmm", f"spmv_csr_vector_{dt}", SPARSE_SIGNATURE + "i") for dt in VALUE_SUFFIXES}
TILE_KERNELS_BY_DTYPE = {
    dt: {
        **{(t, 4): Kernel("spmm", f"spmm_csr_tile{t}_v4_{dt}", SPARSE_SIGNATURE) for t in TILES},
        **{(t, 1): Kernel("spmm", f"spmm_csr_tile{t}_v1_{dt}", SPARSE_SIGNATURE) for t in TILES_SCALAR},
    }
    for dt in VALUE_SUFFIXES
}
REDUCE_BY_DTYPE = {dt: Kernel("spmm", f"spmm_csr_reduce_chunks_{dt}", "PPPPiiqq") for dt in VALUE_SUFFIXES}

# The one table of variants: algorithm name -> (kind, parameter). "vector" takes its lanes from the
# row statistics; "tileN" falls back to one element a lane (and at most 32 columns) when B or C is not
# 16-byte aligned.
VARIANTS: dict[str, tuple[str, object]] = {
    "scalar": ("scalar", None),
    "vector": ("vector", None),
    **{f"vector{k}": ("vector", k) for k in VECTOR_LANES},
    **{f"tile{t}": ("tile", t) for t in TILES},
}
ALGORITHMS = ("auto", *VARIANTS)


# what "auto" runs, and the launch geometry (pure functions) ------------------------------------
def vector_lanes(stats: RowStats) -> int:
    """Lanes per row for the vector kernel: about two nonzeros a lane on the rows it takes whole."""
    typical = round(stats.short_mean)
    lanes = 2
    while lanes < 32 and lanes * 4 <= typical:
        lanes *= 2
    return lanes


def choose_algorithm(n: int, stats: RowStats, vec4: bool = True) -> str:
    """What "auto" runs for S (with these row statistics) times a B of n columns.

    One column: the vector SpMV kernel. Several: the row-group kernel with the narrowest column tile
    that covers n, capped at 64 columns (32 without 128-bit access), except that matrices whose
    nonzeros sit mostly in long (chunked) rows take the 128-column tile past 64 columns. Measured on
    the H100 with 2^20 x 2^20 matrices of 16 nonzeros a row: at N = 8 tile8 and tile16 tie; at
    N = 32 tile32 wins by 1.2-2x over tile16 and tile64; at N = 128 tile32, tile64 and tile128 come
    within 10% of each other, uniform and banded rows running best at tile32/tile64 and power-law
    rows (70% of nonzeros in chunked rows) at tile128, which sweeps S once instead of twice.
    """
    if n <= 1:
        return "vector"
    if vec4 and n > AUTO_TILE_CAP and stats.long_nnz * 2 > stats.nnz:
        return "tile128"
    tiles = [t for t in (TILES if vec4 else TILES_SCALAR) if t <= AUTO_TILE_CAP]
    return f"tile{next((t for t in tiles if t >= n), tiles[-1])}"


class Launch(NamedTuple):
    kernel: Kernel
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    chunk_blocks: int
    extra: tuple  # trailing kernel arguments (the vector kernel's lane count)


def tile_launch(tile: int, vec: int, rows: int, n: int, n_chunks: int, dtype: str = "f32") -> Launch:
    lanes = tile // vec
    groups = BLOCK // lanes
    chunk_blocks = cdiv(n_chunks, groups)
    gx = chunk_blocks + cdiv(rows, groups)
    if gx > MAX_GRID_X:
        raise ValueError(f"{rows} rows need {gx} blocks, over the grid limit {MAX_GRID_X}")
    grid = (max(gx, 1), min(max(cdiv(n, tile), 1), MAX_GRID_YZ), 1)
    return Launch(TILE_KERNELS_BY_DTYPE[dtype][(tile, vec)], grid, (BLOCK, 1, 1), chunk_blocks, ())


def vector_launch(lanes: int, rows: int, n: int, n_chunks: int, dtype: str = "f32") -> Launch:
    chunk_blocks = cdiv(n_chunks, BLOCK // 32)  # a warp per chunk
    gx = chunk_blocks + cdiv(rows, BLOCK // lanes)
    if gx > MAX_GRID_X:
        raise ValueError(f"{rows} rows need {gx} blocks, over the grid limit {MAX_GRID_X}")
    return Launch(
        VECTOR_BY_DTYPE[dtype], (max(gx, 1), min(max(n, 1), MAX_GRID_YZ), 1), (BLOCK, 1, 1), chunk_blocks, (lanes,)
    )


def reduce_grid(n_long: int, n: int) -> tuple[int, int, int]:
    return max(min(cdiv(n, 32), MAX_GRID_YZ), 1), max(min(cdiv(n_long, 8), MAX_GRID_YZ), 1), 1


def scalar_grid(rows: int, n: int) -> tuple[int, int, int]:
    return max(cdiv(rows, BLOCK), 1), min(max(n, 1), MAX_GRID_YZ), 1


def resolve(algorithm: str, n: int, stats: RowStats, vec4: bool):
    """(kind, parameter) the call runs: ("scalar", None), ("vector", lanes) or ("tile", (tile, vec))."""
    kind, param = VARIANTS[choose_algorithm(n, stats, vec4) if algorithm == "auto" else algorithm]
    if kind == "scalar":
        return "scalar", None
    if kind == "vector":
        return "vector", param or vector_lanes(stats)
    return "tile", (param, 4) if vec4 else (min(param, TILES_SCALAR[-1]), 1)


def vec4_ok(b: Matrix, out: Matrix) -> bool:
    """The vector tiles' 128-bit access needs 16-byte aligned rows of B and C."""
    return all(m.elements % 16 == 0 and m.stride * m.itemsize % 16 == 0 for m in (b, out))


# C = S @ B --------------------------------------------------------------------------------------
def check_operands(s, b, out, algorithm: str) -> tuple[int, int]:
    """Validate everything before any allocation or launch; returns (rows, N)."""
    if not isinstance(s, CSRMatrix):
        raise TypeError(f"s must be a gpumat.CSRMatrix, got {type(s).__name__}")
    s._ptr("data")
    b = as_matrix(b, "b")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown spmm algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    for m, label in ((b, "b"), (out, "out")):
        if m is not None and m.ndim != 2:
            raise ValueError(
                f"spmm takes a 2-D {label}, got a batch of shape {m.shape}; index it (B[i]) for one matrix"
            )
    if out is not None and out.is_transposed:
        raise ValueError("spmm: out must be row-major (not a transposed view); write into out.T's owner instead")
    (rows, k), (k2, n) = s.shape, b.shape
    if k != k2:
        raise ValueError(f"spmm: shapes {s.shape} and {b.shape} are not aligned: S has {k} columns, B {k2} rows")
    if n > INT32_MAX:
        raise ValueError(f"spmm: B has {n} columns, over the limit of 2^31 - 1")
    check_out(out, (rows, n), (b,), "spmm")
    if b.dtype != s.dtype:
        raise TypeError(
            f"spmm: S is {s.dtype} and b is {name(b.dtype)}; gpumat does not mix dtypes in one call "
            f"(convert one with .astype())"
        )
    if out is not None and out.dtype != s.dtype:
        raise TypeError(f"spmm: S is {s.dtype} and out is {name(out.dtype)}; gpumat does not mix dtypes in one call")
    return rows, n


def spmm(s: CSRMatrix, b: Matrix, out: Matrix | None = None, algorithm: str = "auto", stream=None) -> Matrix:
    """C = s @ b for a CSR matrix and a dense matrix of the same dtype (float32 or float64).

    A transposed view of ``b`` (``B.T``) is first copied row-major (one pass over it); a batch is a
    ``ValueError``. No atomics: long rows are split and their parts added in a fixed order.

    Parameters
    ----------
    s : CSRMatrix
        The sparse matrix (m x k).
    b : Matrix
        The dense matrix (k x n), views welcome.
    out : Matrix, optional
        Where C (m x n) goes; new if None.
    algorithm : str, optional
        ``"auto"``, ``"scalar"``, ``"vector"`` (lanes from the row lengths) or ``"vector2"`` ..
        ``"vector32"``, ``"tile8"`` .. ``"tile128"`` (the row-group kernels).
    stream : Stream or stream-like, optional
        Where the work is queued; the thread's current stream by default.

    Returns
    -------
    Matrix
        ``out``, or the new matrix.

    Raises
    ------
    TypeError
        ``s`` not a CSRMatrix, ``b`` not a Matrix, or different dtypes.
    ValueError
        Shapes that do not match, a batch, an unknown algorithm, or an ``out`` of the wrong shape.
    FreedMatrixError
        An operand has been freed.

    Examples
    --------
    >>> S = gm.CSRMatrix.from_dense(np.array([[0.0, 2.0], [1.0, 0.0]]))  # doctest: +GPU
    >>> B = gm.Matrix.from_numpy(np.array([[1.0, 2.0], [3.0, 4.0]]))
    >>> gm.spmm(S, B).to_numpy().tolist()
    [[6.0, 8.0], [1.0, 2.0]]
    """
    if not isinstance(s, CSRMatrix):
        raise TypeError(f"s must be a gpumat.CSRMatrix, got {type(s).__name__}")
    dev = operand_device((b, "b"), (out, "out"))
    if s.device is not dev:
        raise ValueError(
            f"S is on GPU {s.device.ordinal} and b on GPU {dev.ordinal}: the operands of one "
            f"operation must live on one device"
        )
    st = stream_handle(stream, dev)
    check_operands(s, b, out, algorithm)
    rows_b = plain_2d(b, "spmm", st)  # a transposed view of B is first copied row-major (one pass)
    try:
        return _spmm(s, rows_b, out, algorithm, dev, st)
    finally:
        if rows_b is not b:  # the copy is freed here (stream-ordered after the product), not by a finalizer
            rows_b.free()


def _spmm(s: CSRMatrix, b: Matrix, out: Matrix | None, algorithm: str, dev, st: int) -> Matrix:
    with dev.lock:
        rows, n = check_operands(s, b, out, algorithm)
        if out is None:
            out = Matrix._allocate(rows, n, dev, st, s.dtype)
        if rows == 0 or n == 0:
            return out
        # S's own memory too: its free must wait for this product
        buffers = (b._operand()[-1], out._operand()[-1], *s._arrays())
        f = use_on(st, *buffers)
        _launch(s, b, out, algorithm, dev, st)
        if f is not None:  # its one mark orders every buffer's free
            mark_done(f, st, *buffers)
    return out


def _launch(s: CSRMatrix, b: Matrix, out: Matrix, algorithm: str, dev, st: int) -> None:
    rows, n = out.shape
    c = out.elements
    isz, dt = out.itemsize, suffix(out.dtype)
    if s.nnz == 0:
        zero_2d(c, out.stride * isz, n * isz, rows, st)
        return
    kind, param = resolve(algorithm, n, s.stats, vec4_ok(b, out))
    ptr = s._ptr
    if kind == "scalar":
        SCALAR_BY_DTYPE[dt](
            scalar_grid(rows, n),
            (BLOCK, 1, 1),
            ptr("indptr"),
            ptr("indices"),
            ptr("data"),
            b.elements,
            c,
            rows,
            n,
            b.stride,
            out.stride,
            stream=st,
            device=dev,
        )
        return
    stats = s.stats
    if kind == "vector":
        launch = vector_launch(param, rows, n, stats.chunks, dt)
    else:
        launch = tile_launch(*param, rows, n, stats.chunks, dt)
    ldp = cdiv(n, 4) * 4
    pool = dev.memory or memory.device_pool(dev)
    nbytes = stats.chunks * ldp * isz
    partial = pool.alloc(nbytes, st) if stats.chunks else 0
    try:
        launch.kernel(
            launch.grid,
            launch.block,
            ptr("indptr"),
            ptr("indices"),
            ptr("data"),
            b.elements,
            c,
            partial,
            ptr("chunk_row"),
            ptr("chunk_start"),
            rows,
            n,
            b.stride,
            out.stride,
            ldp,
            stats.split,
            stats.chunks,
            launch.chunk_blocks,
            *launch.extra,
            stream=st,
            device=dev,
        )
        if stats.chunks:
            REDUCE_BY_DTYPE[dt](
                reduce_grid(stats.long_rows, n),
                (32, 8, 1),
                partial,
                ptr("long_rows"),
                ptr("chunk_ptr"),
                c,
                stats.long_rows,
                n,
                ldp,
                out.stride,
                stream=st,
                device=dev,
            )
    finally:
        if partial:
            pool.free(partial, nbytes, st)  # stream-ordered: released after the kernels that use it
