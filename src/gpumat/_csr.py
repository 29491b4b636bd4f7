"""CSR on the host: validation, conversions, row-length statistics and the long-row schedule.

Everything here runs without a GPU. A CSR matrix is normalised to indptr int64 (any nnz), indices
int32 and float32 or float64 data (the Matrix dtype rule: float64 stays, integers become float64 when
exact); the statistics feed spmm's `auto`, and the schedule cuts every row with more than `split`
nonzeros into chunks of `split`, which the kernels spread over many warps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from . import _dtypes

INT32_MAX = 2**31 - 1
VALUE_DTYPES = (_dtypes.FLOAT32, _dtypes.FLOAT64)  # what a CSR matrix's values may be (and its kernels take)
SPLIT_MIN, SPLIT_MAX = 128, 4096
FEW_ROWS = 1 << 16  # below this many rows, cut rows at SPLIT_MIN: the rows alone cannot fill the GPU


class CSRTypeError(TypeError, ValueError):
    """An index array is not integer, or the data is not real (both a TypeError and a ValueError)."""


class HostCSR(NamedTuple):
    indptr: np.ndarray  # int64, rows + 1
    indices: np.ndarray  # int32, nnz
    data: np.ndarray  # float32 or float64, nnz
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


def validate_csr(indptr, indices, data, shape, dtype=None) -> HostCSR:
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
            raise ValueError(
                f"column index {indices[p]} (entry {p}, row {row}) is outside 0..{cols - 1}"
                if cols
                else f"column index {indices[p]} (entry {p}, row {row}): the matrix has 0 columns"
            )
    return HostCSR(
        np.ascontiguousarray(indptr),
        np.ascontiguousarray(indices, dtype=np.int32),
        np.ascontiguousarray(data, dtype=value_dtype(data, dtype)),
        (rows, cols),
    )


def value_dtype(data: np.ndarray, dtype=None) -> np.dtype:
    """float32 or float64 for CSR values, by the Matrix rule (see _dtypes); halves are refused."""
    try:
        dt = _dtypes.host_dtype_for(data, dtype)
    except TypeError as exc:
        raise CSRTypeError(str(exc)) from None
    if dt not in VALUE_DTYPES:
        raise CSRTypeError(f"CSR values are float32 or float64, not {_dtypes.name(dt)}")
    return dt


def dense_to_csr(array, dtype=None) -> HostCSR:
    """Host side of from_dense: the nonzeros of a 1-D (one row) or 2-D real array, row by row."""
    a = np.asarray(array)
    if a.dtype.kind not in "fiu":
        raise CSRTypeError(f"from_dense needs real numbers, got dtype {a.dtype}")
    if a.ndim == 1:
        a = a.reshape(1, -1)
    elif a.ndim != 2:
        raise ValueError(f"from_dense needs a 1-D or 2-D array, got {a.ndim}-D with shape {a.shape}")
    a = a.astype(value_dtype(a, dtype))
    r, c = np.nonzero(a)
    indptr = np.zeros(a.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=a.shape[0]), out=indptr[1:])
    return validate_csr(indptr, c.astype(np.int32), a[r, c], a.shape)


def scipy_to_csr(m, dtype=None) -> HostCSR:
    """Host side of from_scipy: anything with indptr, indices, data and shape (other formats via tocsr())."""
    fmt = getattr(m, "format", None)
    if fmt is not None and fmt != "csr" and hasattr(m, "tocsr"):
        m = m.tocsr()
    missing = [a for a in ("indptr", "indices", "data", "shape") if not hasattr(m, a)]
    if missing:
        raise TypeError(
            f"from_scipy needs an object with indptr, indices, data and shape; "
            f"{type(m).__name__} lacks {', '.join(missing)}"
        )
    return validate_csr(m.indptr, m.indices, m.data, tuple(m.shape), dtype)


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
    mean: float  # nonzeros a row
    std: float
    max: int
    empty: int  # rows with no nonzeros
    split: int  # rows longer than this are cut into chunks of this many nonzeros
    long_rows: int
    long_nnz: int
    chunks: int
    short_mean: float  # mean length of the rows the row kernels take whole (<= split)


class Schedule(NamedTuple):
    long_rows: np.ndarray  # int32: the rows cut into chunks
    chunk_ptr: np.ndarray  # int32, len(long_rows) + 1: chunks of long_rows[i] are chunk_ptr[i] .. chunk_ptr[i+1]
    chunk_row: np.ndarray  # int32: the row of each chunk
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
    return Schedule(
        long_rows.astype(np.int32), chunk_ptr.astype(np.int32), chunk_row.astype(np.int32), chunk_start.astype(np.int64)
    )


def row_stats(indptr: np.ndarray, cols: int, split: int | None = None) -> RowStats:
    rows = len(indptr) - 1
    lengths = np.diff(indptr)
    nnz = int(indptr[-1])
    split = split_length(rows, nnz) if split is None else split
    long_mask = lengths > split
    short = lengths[~long_mask]
    long_lengths = lengths[long_mask]
    return RowStats(
        rows=rows,
        cols=cols,
        nnz=nnz,
        mean=float(lengths.mean()) if rows else 0.0,
        std=float(lengths.std()) if rows else 0.0,
        max=int(lengths.max()) if rows else 0,
        empty=int(np.count_nonzero(lengths == 0)),
        split=split,
        long_rows=int(long_mask.sum()),
        long_nnz=int(long_lengths.sum()),
        chunks=int(((long_lengths + split - 1) // split).sum()),
        short_mean=float(short.mean()) if len(short) else 0.0,
    )
