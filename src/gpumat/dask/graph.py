"""The task graphs of gpumat.dask: uploads and downloads of chunks, and C = A @ B two ways.

- **Resident chunks** (Matrix chunks, from `from_array`): one task a block of C. It takes A's row of
  blocks and B's column of blocks (blockwise with the K index contracted, not concatenated) and adds
  the K products in order into one result with the GEMM's beta: C = A_i0 B_0j, then
  C = A_ik B_kj + 1.0 * C for k = 1, 2, ... on the GPU, on the worker's stream. float16 and bfloat16
  products are summed in a float32 block and rounded once at the end. Nothing leaves the GPU.
- **Host chunks** (numpy chunks): every block product is an ordinary `gm.matmul` of numpy blocks
  (host -> GPU -> host, out of core if a block is larger than the GPU), and the partial products of one
  C block are added by Dask's reduction on the CPU, each step in K order.

Both give the same bits for the same graph (fixed K order, no atomics).
"""

from __future__ import annotations

import functools

import numpy as np

from .. import _dtypes
from ..matrix import Matrix
from . import chunks


def is_resident(x) -> bool:
    """Whether a dask array's chunks are gpumat Matrices."""
    return isinstance(getattr(x, "_meta", None), Matrix)


def check_operands(a, b) -> None:
    """The checks of gpumat.dask.matmul, before any task exists."""
    import dask.array as da

    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, da.Array):
            raise TypeError(f"gpumat.dask.matmul: {name} must be a dask array, got {type(x).__name__}")
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"gpumat.dask.matmul takes 2-D arrays, got {a.ndim}-D and {b.ndim}-D")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"gpumat.dask.matmul: shapes {a.shape} and {b.shape} are not aligned")
    if a.dtype != b.dtype:
        raise TypeError(
            f"gpumat.dask.matmul: a is {a.dtype} and b is {b.dtype}; gpumat does not mix dtypes in one call"
        )
    _dtypes.as_dtype(a.dtype)  # a dtype gpumat has, else TypeError
    if is_resident(a) != is_resident(b):
        raise TypeError(
            "gpumat.dask.matmul: one operand has gpumat Matrix chunks and the other numpy chunks; "
            "upload both with gpumat.dask.from_array (or bring both back with gpumat.dask.to_numpy)"
        )


def _half(dtype) -> bool:
    return dtype == np.float16 or _dtypes.is_bfloat16(dtype)


# --- resident chunks --------------------------------------------------------------------------------------
def resident_block(a_row: list, b_col: list) -> Matrix:
    """A task: one block of C from A's blocks (i, k) and B's blocks (k, j), k in order, on the worker's GPU."""
    from ..matmul import matmul

    dev = chunks.worker_device()
    a_row = [chunks.to_worker_gpu(x, dev) for x in a_row]
    b_col = [chunks.to_worker_gpu(y, dev) for y in b_col]
    first = a_row[0]
    dtype = first.dtype
    shape = (first.shape[0], b_col[0].shape[1])
    wide = _half(dtype) and len(a_row) > 1  # halves: sum the K products in float32, round once
    acc = Matrix.empty(shape, dtype=np.float32 if wide else dtype, device=first.device)
    for k, (x, y) in enumerate(zip(a_row, b_col, strict=True)):
        if k == 0:
            matmul(x, y, out=acc)
        else:
            matmul(x, y, out=acc, beta=1.0)
    if not wide:
        return chunks.transfer.mark_ready(acc)
    with acc:
        return chunks.transfer.mark_ready(acc.astype(dtype))


def resident_matmul(a, b, name=None):
    import dask.array as da

    b = b.rechunk({0: a.chunks[1]})
    return da.blockwise(
        resident_block,
        "ij",
        a,
        "ik",
        b,
        "kj",
        dtype=a.dtype,
        concatenate=False,
        meta=chunks.meta(a.dtype),
        # `name` a prefix, as in dask.array; "gpumat" in every key: the scheduler's placement knows its tasks
        name=f"{name + '-gpumat' if name else 'gpumat-matmul-resident'}-{da.core.tokenize(a, b)}",
    )


# --- host chunks ------------------------------------------------------------------------------------------
def host_product(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """One block product on this worker's GPU (numpy in, numpy out; float16/bfloat16 blocks give float32
    partial products, rounded once after the K sum)."""
    from ..matmul import matmul

    dev = chunks.worker_device()
    out = np.empty((x.shape[0], y.shape[1]), np.float32) if _half(x.dtype) else None
    return matmul(x, y, out=out, devices=None if dev is None else [dev])  # views with contiguous rows go as they are


def _host_block(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # blockwise hands over A[i, k] and B[k, j]; the k axis stays a (length 1) axis of the result
    return host_product(x, y)[:, None, :]


def _keep(x, axis, keepdims):
    return x  # the per-block step of the reduction: the partial products as they are


def _add_up(parts, axis, keepdims, dtype=None):
    """Dask's combine and aggregate steps: the partial products of one C block, added in their K order
    (in place, no concatenation); `parts` is a (possibly nested) list of (rows, 1, cols) arrays. The
    last step (aggregate) rounds the sum to `dtype`."""
    flat = []

    def walk(p):
        if isinstance(p, list):
            for q in p:
                walk(q)
        else:
            flat.append(p)

    walk(parts)
    total = flat[0] + flat[1] if len(flat) > 1 else np.array(flat[0], copy=True)  # a new array: inputs stay as they are
    for p in flat[2:]:
        np.add(total, p, out=total)
    if total.shape[1] != 1:  # Dask's own trial calls on empty arrays
        total = total.sum(axis=1, keepdims=True)
    if dtype is not None:
        total = total.astype(dtype, copy=False)
    return total if keepdims else total[:, 0, :]


def host_matmul(a, b, name=None):
    import dask.array as da

    b = b.rechunk({0: a.chunks[1]})
    partial = da.blockwise(
        _host_block,
        "ikj",
        a,
        "ik",
        b,
        "kj",
        dtype=np.float32 if _half(a.dtype) else a.dtype,
        adjust_chunks={"k": 1},
        concatenate=False,
        name=None if name is None else f"{name}-products-{da.core.tokenize(a, b)}",  # a prefix: two products differ
    )
    # Dask's reduction over the k axis: each step adds the partial products in place, in K order, and the
    # last one rounds to the operands' dtype (halves are summed in float32)
    return da.reduction(
        partial,
        _keep,
        functools.partial(_add_up, dtype=a.dtype),
        combine=_add_up,
        axis=1,
        concatenate=False,
        dtype=a.dtype,
        name=name or "gpumat-matmul-ksum",
    )
