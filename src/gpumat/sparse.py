"""Sparse CSR x dense, float32: CSRMatrix, and C = S @ B as SpMV (one column) or SpMM (several).

A CSRMatrix is validated on the host, then uploaded once: indptr as int64 (any nnz), indices as int32,
data as float32. At construction the host also computes the row-length statistics that "auto" reads,
and the long-row schedule: every row with more than `split` nonzeros is cut into chunks of `split`
nonzeros, which the kernels spread over many warps (partial rows into a scratch buffer, then a fixed-
order reduction), so one row of millions of nonzeros does not stall one warp. Results are deterministic:
no atomics anywhere.

Kernels (cuda/spmm.cu): "scalar" (one thread per row and column, the baseline), "vector" (a group of
2..32 lanes per row, the SpMV kernel), and "tile8" .. "tile128" (GE-SpMM-style row groups: a group owns
a row times a tile of B's columns, reads B's rows in coalesced float4 loads and reuses each staged
nonzero across the tile; one sweep over S per column tile).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from . import _memory
from ._geometry import MAX_GRID_X, MAX_GRID_YZ, cdiv
from ._kernels import Kernel
from .matrix import FreedMatrixError, Matrix, as_matrix, check_out

BLOCK = 256                     # threads per block in every kernel of cuda/spmm.cu
INT32_MAX = 2**31 - 1
SPLIT_MIN, SPLIT_MAX = 128, 4096
FEW_ROWS = 1 << 16              # below this many rows, cut rows at SPLIT_MIN: the rows alone cannot fill the GPU
TILES = (8, 16, 32, 64, 128)    # column tiles of the row-group kernels (float4 lanes)
TILES_SCALAR = (8, 16, 32)      # the same with one float per lane, for B or C not 16-byte aligned
VECTOR_LANES = (2, 4, 8, 16, 32)
AUTO_TILE_CAP = 64              # auto's widest column tile (measured on the H100, see choose_algorithm)

SPARSE_SIGNATURE = "PPPPPPPPiiqqqqii"  # indptr, indices, data, B, C, partial, chunk_row, chunk_start,
#                                        rows, N, ldb, ldc, ldp, split, n_chunks, chunk_blocks

# Every kernel exists for float32 and float64 values (data, B and C in one dtype): *_BY_DTYPE[dtype].
# float64's vec-4 tiles need B and C 16-byte aligned with even ldb, ldc (two 128-bit loads of 4 doubles).
DTYPES = ("f32", "f64")
SCALAR_BY_DTYPE = {dt: Kernel("spmm", f"spmm_csr_scalar_{dt}", "PPPPPiiqq") for dt in DTYPES}
VECTOR_BY_DTYPE = {dt: Kernel("spmm", f"spmv_csr_vector_{dt}", SPARSE_SIGNATURE + "i") for dt in DTYPES}
TILE_KERNELS_BY_DTYPE = {dt: {
    **{(t, 4): Kernel("spmm", f"spmm_csr_tile{t}_v4_{dt}", SPARSE_SIGNATURE) for t in TILES},
    **{(t, 1): Kernel("spmm", f"spmm_csr_tile{t}_v1_{dt}", SPARSE_SIGNATURE) for t in TILES_SCALAR},
} for dt in DTYPES}
REDUCE_BY_DTYPE = {dt: Kernel("spmm", f"spmm_csr_reduce_chunks_{dt}", "PPPPiiqq") for dt in DTYPES}
TO_DENSE_BY_DTYPE = {dt: Kernel("spmm", f"csr_to_dense_{dt}", "PPPPiq") for dt in DTYPES}
SCALAR = SCALAR_BY_DTYPE["f32"]
VECTOR = VECTOR_BY_DTYPE["f32"]
TILE_KERNELS = TILE_KERNELS_BY_DTYPE["f32"]
REDUCE = REDUCE_BY_DTYPE["f32"]
TO_DENSE = TO_DENSE_BY_DTYPE["f32"]

ALGORITHMS = ("auto", "scalar", "vector", *(f"vector{k}" for k in VECTOR_LANES), *(f"tile{t}" for t in TILES))


class CSRTypeError(TypeError, ValueError):
    """An index array is not integer, or the data is not real (both a TypeError and a ValueError)."""


# -------------------------------------------------------------------------------------------------
# host side: validation, conversions, statistics, the long-row schedule (all testable without a GPU)
# -------------------------------------------------------------------------------------------------
class HostCSR(NamedTuple):
    indptr: np.ndarray   # int64, rows + 1
    indices: np.ndarray  # int32, nnz
    data: np.ndarray     # float32, nnz
    shape: tuple[int, int]


def _check_shape(shape) -> tuple[int, int]:
    try:
        rows, cols = shape
    except (TypeError, ValueError):
        raise ValueError(f"shape must be a pair (rows, cols), got {shape!r}") from None
    for name, v in (("rows", rows), ("cols", cols)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise CSRTypeError(f"shape: {name} must be an integer, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"shape: {name} must be >= 0, got {v}")
        if v > INT32_MAX:
            raise ValueError(f"shape: {name} = {v} is over the limit of 2^31 - 1")
    return int(rows), int(cols)


def _integer_array(x, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {a.shape}")
    if a.dtype.kind not in "iu":
        if a.size == 0 and a.dtype.kind in "fiu":  # np.asarray([]) is float64: an empty list is fine
            return a.astype(np.int64)
        raise CSRTypeError(f"{name} must hold integers, got dtype {a.dtype}")
    return a


def validate_csr(indptr, indices, data, shape) -> HostCSR:
    """Check CSR arrays on the host and return them normalised; ValueError (or CSRTypeError) names the first problem."""
    rows, cols = _check_shape(shape)
    indptr = _integer_array(indptr, "indptr")
    indices = _integer_array(indices, "indices")
    data = np.asarray(data)
    if data.dtype.kind not in "fiu":
        raise CSRTypeError(f"data must hold real numbers, got dtype {data.dtype}")
    if data.ndim != 1:
        raise ValueError(f"data must be a 1-D array, got shape {data.shape}")
    if len(indptr) != rows + 1:
        raise ValueError(f"indptr has {len(indptr)} entries; a matrix of {rows} rows needs rows + 1 = {rows + 1}")
    if indptr[0] != 0:
        raise ValueError(f"indptr[0] must be 0, got {indptr[0]}")
    if indptr.dtype.kind == "u" and len(indptr) and int(indptr.max()) > np.iinfo(np.int64).max:
        raise ValueError("indptr holds values over 2^63 - 1")
    indptr = indptr.astype(np.int64, copy=False)
    steps = np.diff(indptr)
    if len(steps) and steps.min() < 0:
        r = int(np.argmax(steps < 0))
        raise ValueError(f"indptr decreases at row {r}: indptr[{r}] = {indptr[r]} > indptr[{r + 1}] = {indptr[r + 1]}")
    nnz = int(indptr[-1])
    if nnz != len(indices):
        raise ValueError(f"indptr[-1] = {nnz} but indices has {len(indices)} entries")
    if nnz != len(data):
        raise ValueError(f"indptr[-1] = {nnz} but data has {len(data)} entries")
    if nnz:
        bad = (indices < 0) | (indices >= cols)
        if bad.any():
            p = int(np.argmax(bad))
            row = int(np.searchsorted(indptr, p, side="right") - 1)
            raise ValueError(f"column index {indices[p]} (entry {p}, row {row}) is outside 0..{cols - 1}"
                             if cols else f"column index {indices[p]} (entry {p}, row {row}): the matrix has 0 columns")
    return HostCSR(np.ascontiguousarray(indptr), np.ascontiguousarray(indices, dtype=np.int32),
                   np.ascontiguousarray(data, dtype=np.float32), (rows, cols))


def dense_to_csr(array) -> HostCSR:
    """Host side of from_dense: the nonzeros of a 1-D (one row) or 2-D real array, row by row."""
    a = np.asarray(array)
    if a.dtype.kind not in "fiu":
        raise CSRTypeError(f"from_dense needs real numbers, got dtype {a.dtype}")
    if a.ndim == 1:
        a = a.reshape(1, -1)
    elif a.ndim != 2:
        raise ValueError(f"from_dense needs a 1-D or 2-D array, got {a.ndim}-D with shape {a.shape}")
    a = a.astype(np.float32)
    r, c = np.nonzero(a)
    indptr = np.zeros(a.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=a.shape[0]), out=indptr[1:])
    return validate_csr(indptr, c.astype(np.int32), a[r, c], a.shape)


def scipy_to_csr(m) -> HostCSR:
    """Host side of from_scipy: anything with indptr, indices, data and shape (other formats via tocsr())."""
    fmt = getattr(m, "format", None)
    if fmt is not None and fmt != "csr" and hasattr(m, "tocsr"):
        m = m.tocsr()
    missing = [a for a in ("indptr", "indices", "data", "shape") if not hasattr(m, a)]
    if missing:
        raise TypeError(f"from_scipy needs an object with indptr, indices, data and shape; "
                        f"{type(m).__name__} lacks {', '.join(missing)}")
    return validate_csr(m.indptr, m.indices, m.data, tuple(m.shape))


def split_length(rows: int, nnz: int) -> int:
    """Rows with more nonzeros than this are cut into chunks of this many (a power of two)."""
    if rows < FEW_ROWS or nnz == 0:
        return SPLIT_MIN
    target = 4 * nnz / rows
    return int(min(SPLIT_MAX, max(SPLIT_MIN, 2 ** math.ceil(math.log2(max(target, 1))))))


@dataclass(frozen=True)
class RowStats:
    """Row-length statistics of a CSR matrix, computed once on the host."""
    rows: int
    cols: int
    nnz: int
    mean: float        # nonzeros a row
    std: float
    max: int
    empty: int         # rows with no nonzeros
    split: int         # rows longer than this are cut into chunks of this many nonzeros
    long_rows: int
    long_nnz: int
    chunks: int
    short_mean: float  # mean length of the rows the row kernels take whole (<= split)


class Schedule(NamedTuple):
    long_rows: np.ndarray    # int32: the rows cut into chunks
    chunk_ptr: np.ndarray    # int32, len(long_rows) + 1: chunks of long_rows[i] are chunk_ptr[i] .. chunk_ptr[i+1]
    chunk_row: np.ndarray    # int32: the row of each chunk
    chunk_start: np.ndarray  # int64: its first nonzero; it ends at min(start + split, indptr[row + 1])


def long_row_schedule(indptr: np.ndarray, split: int) -> Schedule:
    lengths = np.diff(indptr)
    long_rows = np.flatnonzero(lengths > split)
    per_row = (lengths[long_rows] + split - 1) // split
    chunk_ptr = np.zeros(len(long_rows) + 1, dtype=np.int64)
    np.cumsum(per_row, out=chunk_ptr[1:])
    total = int(chunk_ptr[-1])
    if total > INT32_MAX:
        raise ValueError(f"{total} chunks of long rows is over the limit of 2^31 - 1")
    chunk_row = np.repeat(long_rows, per_row)
    within = np.arange(total, dtype=np.int64) - np.repeat(chunk_ptr[:-1], per_row)
    chunk_start = indptr[chunk_row] + within * split
    return Schedule(long_rows.astype(np.int32), chunk_ptr.astype(np.int32), chunk_row.astype(np.int32),
                    chunk_start.astype(np.int64))


def row_stats(indptr: np.ndarray, cols: int, split: int | None = None) -> RowStats:
    rows = len(indptr) - 1
    lengths = np.diff(indptr)
    nnz = int(indptr[-1])
    split = split_length(rows, nnz) if split is None else split
    long_mask = lengths > split
    short = lengths[~long_mask]
    long_lengths = lengths[long_mask]
    return RowStats(
        rows=rows, cols=cols, nnz=nnz,
        mean=float(lengths.mean()) if rows else 0.0, std=float(lengths.std()) if rows else 0.0,
        max=int(lengths.max()) if rows else 0, empty=int(np.count_nonzero(lengths == 0)),
        split=split, long_rows=int(long_mask.sum()), long_nnz=int(long_lengths.sum()),
        chunks=int(((long_lengths + split - 1) // split).sum()),
        short_mean=float(short.mean()) if len(short) else 0.0,
    )


# -------------------------------------------------------------------------------------------------
# what "auto" runs, and the launch geometry (pure functions)
# -------------------------------------------------------------------------------------------------
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


def tile_launch(tile: int, vec: int, rows: int, n: int, n_chunks: int) -> Launch:
    lanes = tile // vec
    groups = BLOCK // lanes
    chunk_blocks = cdiv(n_chunks, groups)
    gx = chunk_blocks + cdiv(rows, groups)
    if gx > MAX_GRID_X:
        raise ValueError(f"{rows} rows need {gx} blocks, over the grid limit {MAX_GRID_X}")
    return Launch(TILE_KERNELS[(tile, vec)], (max(gx, 1), min(max(cdiv(n, tile), 1), MAX_GRID_YZ), 1),
                  (BLOCK, 1, 1), chunk_blocks, ())


def vector_launch(lanes: int, rows: int, n: int, n_chunks: int) -> Launch:
    chunk_blocks = cdiv(n_chunks, BLOCK // 32)  # a warp per chunk
    gx = chunk_blocks + cdiv(rows, BLOCK // lanes)
    if gx > MAX_GRID_X:
        raise ValueError(f"{rows} rows need {gx} blocks, over the grid limit {MAX_GRID_X}")
    return Launch(VECTOR, (max(gx, 1), min(max(n, 1), MAX_GRID_YZ), 1), (BLOCK, 1, 1), chunk_blocks, (lanes,))


def reduce_grid(n_long: int, n: int) -> tuple[int, int, int]:
    return max(min(cdiv(n, 32), MAX_GRID_YZ), 1), max(min(cdiv(n_long, 8), MAX_GRID_YZ), 1), 1


def scalar_grid(rows: int, n: int) -> tuple[int, int, int]:
    return max(cdiv(rows, BLOCK), 1), min(max(n, 1), MAX_GRID_YZ), 1


def resolve(algorithm: str, n: int, stats: RowStats, vec4: bool):
    """(kind, parameter) the call runs: ("scalar", None), ("vector", lanes) or ("tile", (tile, vec))."""
    name = choose_algorithm(n, stats, vec4) if algorithm == "auto" else algorithm
    if name == "scalar":
        return "scalar", None
    if name.startswith("vector"):
        return "vector", int(name[6:]) if len(name) > 6 else vector_lanes(stats)
    tile = int(name[4:])
    return "tile", (tile, 4) if vec4 else (min(tile, TILES_SCALAR[-1]), 1)


def vec4_ok(b: Matrix, out: Matrix) -> bool:
    """float4 access needs 16-byte aligned rows of B and C."""
    return all(m.elements % 16 == 0 and m.stride % 4 == 0 for m in (b, out))


# -------------------------------------------------------------------------------------------------
# the device matrix
# -------------------------------------------------------------------------------------------------
def _to_device(a: np.ndarray) -> _memory.DeviceBuffer:
    a = np.ascontiguousarray(a)
    buf = _memory.DeviceBuffer(a.nbytes)
    _memory.upload_contiguous(buf.ptr, a)
    return buf


def _from_device(buf: _memory.DeviceBuffer, dtype, count: int) -> np.ndarray:
    host = np.empty(count, dtype=dtype)
    _memory.download_contiguous(host, buf.ptr)
    return host


class CSRMatrix:
    """A float32 CSR matrix on the GPU. S @ B multiplies it with a gpumat.Matrix; free() releases it."""

    __slots__ = ("_shape", "_nnz", "_stats", "_bufs", "__weakref__")

    def __init__(self, indptr, indices, data, shape):
        self._setup(validate_csr(indptr, indices, data, shape))

    @classmethod
    def _from_host(cls, host: HostCSR) -> "CSRMatrix":
        s = object.__new__(cls)
        s._setup(host)
        return s

    def _setup(self, host: HostCSR) -> None:
        self._bufs = None
        self._shape, self._nnz = host.shape, len(host.data)
        self._stats = row_stats(host.indptr, host.shape[1])
        sched = long_row_schedule(host.indptr, self._stats.split)
        bufs = {}
        try:
            for name, arr in (("indptr", host.indptr), ("indices", host.indices), ("data", host.data),
                              *zip(Schedule._fields, sched)):
                bufs[name] = _to_device(arr)
        except BaseException:
            for buf in bufs.values():
                buf.release()
            raise
        self._bufs = bufs

    # construction ----------------------------------------------------------------------------
    @classmethod
    def from_scipy(cls, m) -> "CSRMatrix":
        """From a scipy.sparse matrix or anything with indptr, indices, data and shape (scipy not needed)."""
        return cls._from_host(scipy_to_csr(m))

    @classmethod
    def from_dense(cls, array) -> "CSRMatrix":
        """The nonzeros of a gpumat.Matrix or a 1-D/2-D real array-like."""
        if isinstance(array, Matrix):
            array = as_matrix(array, "array").to_numpy()
        return cls._from_host(dense_to_csr(array))

    # facts -----------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return self._shape

    @property
    def nnz(self) -> int:
        return self._nnz

    @property
    def dtype(self):
        return np.dtype(np.float32)

    @property
    def stats(self) -> RowStats:
        return self._stats

    @property
    def is_freed(self) -> bool:
        return self._bufs is None

    def _ptr(self, name: str) -> int:
        bufs = self._bufs
        if bufs is None:
            raise FreedMatrixError(f"CSRMatrix {self._shape[0]}x{self._shape[1]} has been freed")
        return bufs[name].ptr

    # host copies -----------------------------------------------------------------------------
    def to_host(self) -> HostCSR:
        """(indptr int64, indices int32, data float32, shape) copied back from the GPU."""
        self._ptr("data")
        b = self._bufs
        return HostCSR(_from_device(b["indptr"], np.int64, self._shape[0] + 1),
                       _from_device(b["indices"], np.int32, self._nnz),
                       _from_device(b["data"], np.float32, self._nnz), self._shape)

    def to_scipy(self):
        """A scipy.sparse.csr_matrix copy (needs scipy)."""
        try:
            import scipy.sparse
        except ImportError:
            raise ImportError("CSRMatrix.to_scipy() needs scipy (pip install scipy); "
                              "to_host() and to_dense() work without it") from None
        h = self.to_host()
        index = np.int32 if h.indptr[-1] <= INT32_MAX else np.int64
        return scipy.sparse.csr_matrix((h.data, h.indices.astype(index), h.indptr.astype(index)), shape=h.shape)

    def to_dense(self) -> Matrix:
        """The matrix as a dense gpumat.Matrix (built on the GPU; repeated entries add up)."""
        rows, cols = self._shape
        self._ptr("data")
        out = Matrix.zeros(rows, cols)
        if rows and cols and self._nnz:
            TO_DENSE((cdiv(rows, BLOCK), 1, 1), (BLOCK, 1, 1), self._ptr("indptr"), self._ptr("indices"),
                     self._ptr("data"), out.elements, rows, out.stride)
        return out

    # lifetime --------------------------------------------------------------------------------
    def free(self) -> None:
        """Release the device arrays (the matrix and its long-row schedule) now."""
        bufs, self._bufs = self._bufs, None
        if bufs:
            for buf in bufs.values():
                buf.release()

    def __enter__(self) -> "CSRMatrix":
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    # arithmetic ------------------------------------------------------------------------------
    def __matmul__(self, other):
        if isinstance(other, Matrix):
            return spmm(self, other)
        return NotImplemented

    def __repr__(self) -> str:
        rows, cols = self._shape
        state = ", freed" if self.is_freed else ""
        s = self._stats
        return (f"<gpumat.CSRMatrix {rows}x{cols} float32, nnz={self._nnz} "
                f"({s.mean:.3g} a row, max {s.max}){state}>")


# -------------------------------------------------------------------------------------------------
# C = S @ B
# -------------------------------------------------------------------------------------------------
def check_operands(s, b, out, algorithm: str) -> tuple[int, int]:
    """Validate everything before any allocation or launch; returns (rows, N)."""
    if not isinstance(s, CSRMatrix):
        raise TypeError(f"s must be a gpumat.CSRMatrix, got {type(s).__name__}")
    s._ptr("data")
    b = as_matrix(b, "b")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown spmm algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    (rows, k), (k2, n) = s.shape, b.shape
    if k != k2:
        raise ValueError(f"spmm: shapes {s.shape} and {b.shape} are not aligned: S has {k} columns, B {k2} rows")
    if n > INT32_MAX:
        raise ValueError(f"spmm: B has {n} columns, over the limit of 2^31 - 1")
    check_out(out, (rows, n), (b,), "spmm")
    return rows, n


def spmm(s: CSRMatrix, b: Matrix, out: Matrix | None = None, algorithm: str = "auto") -> Matrix:
    """C = s @ b for a CSRMatrix s and a float32 Matrix b (views welcome). Returns out (new if None).

    algorithm: "auto", "scalar", "vector" (lanes from the row lengths) or "vector2" .. "vector32",
    "tile8" .. "tile128" (the row-group kernels; B and C not 16-byte aligned take one float a lane and
    tiles of at most 32)."""
    rows, n = check_operands(s, b, out, algorithm)
    if out is None:
        out = Matrix.empty(rows, n)
    if rows == 0 or n == 0:
        return out
    c = out.elements
    if s.nnz == 0:
        _memory.fill_2d(c, out.stride * 4, 0, n, rows)
        return out
    kind, param = resolve(algorithm, n, s.stats, vec4_ok(b, out))
    ptr = s._ptr
    if kind == "scalar":
        SCALAR(scalar_grid(rows, n), (BLOCK, 1, 1), ptr("indptr"), ptr("indices"), ptr("data"), b.elements, c,
               rows, n, b.stride, out.stride)
        return out
    stats = s.stats
    if kind == "vector":
        launch = vector_launch(param, rows, n, stats.chunks)
    else:
        launch = tile_launch(*param, rows, n, stats.chunks)
    ldp = cdiv(n, 4) * 4
    partial = _memory.alloc(stats.chunks * ldp * 4) if stats.chunks else 0
    try:
        launch.kernel(launch.grid, launch.block, ptr("indptr"), ptr("indices"), ptr("data"), b.elements, c, partial,
                      ptr("chunk_row"), ptr("chunk_start"), rows, n, b.stride, out.stride, ldp, stats.split,
                      stats.chunks, launch.chunk_blocks, *launch.extra)
        if stats.chunks:
            REDUCE(reduce_grid(stats.long_rows, n), (32, 8, 1), partial, ptr("long_rows"), ptr("chunk_ptr"), c,
                   stats.long_rows, n, ldp, out.stride)
    finally:
        if partial:
            _memory.free(partial)  # stream-ordered: released after the kernels that use it
    return out


# -------------------------------------------------------------------------------------------------
# `python -m gpumat demo`
# -------------------------------------------------------------------------------------------------
SPMM_TOLERANCE = 1e-5


def demo_examples(check) -> list[bool]:
    """Seed 002's CSR example (3x3 CSR times 3x2 dense, as through cuSPARSE), every algorithm."""
    dense = np.array([[1, 2, 0], [3, 0, 4], [0, 5, 6]], dtype=np.float32)
    b = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.float32)
    ref = dense.astype(np.float64) @ b
    results = []
    print("\nspmm, seed 002: CSR [[1,2,0],[3,0,4],[0,5,6]] @ [[1,2],[3,4],[5,6]]")
    with CSRMatrix([0, 2, 4, 6], [0, 1, 0, 2, 1, 2], [1, 2, 3, 4, 5, 6], (3, 3)) as S, \
            Matrix.from_numpy(b) as B:
        for name in ALGORITHMS:
            with spmm(S, B, algorithm=name) as C:
                results.append(check(name, C.to_numpy(), ref, SPMM_TOLERANCE))
        with S @ B[:, 0:1] as y:
            results.append(check("S @ v (SpMV)", y.to_numpy(), ref[:, :1], SPMM_TOLERANCE))
        with S @ B as C:
            print("  C =", C.to_numpy().tolist())
    return results
