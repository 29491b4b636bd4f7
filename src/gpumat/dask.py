"""gpumat on Dask: products of dask.array operands, every block product on the GPU of the worker that
computes it, the K sums done by Dask's own reduction.

    from dask.distributed import Client, LocalCluster
    import gpumat as gm, gpumat.dask as gmd
    cluster = LocalCluster(n_workers=gm.device_count(), threads_per_worker=1)   # one worker a GPU
    client = Client(cluster)
    C = gmd.matmul(A, B)          # A, B: dask.array; C: a lazy dask.array
    c = C.compute()

Dask is an optional dependency (the `dask` extra); importing gpumat never imports it. A worker named
by an integer (LocalCluster names its workers 0, 1, ...) uses GPU `name % device_count()`; any other
worker, and Dask's local schedulers, use the current GPU. A block product is an ordinary
`gm.matmul` of numpy blocks, so a block larger than its GPU runs out of core. No scheduler or transport
of gpumat's own: Dask plans, moves and reduces.
"""

from __future__ import annotations

import functools

import numpy as np


def _worker_device():
    """The GPU of the Dask worker running this task (its integer name modulo the GPUs), else None."""
    try:
        from distributed import get_worker

        name = get_worker().name
    except (ImportError, ValueError):  # no distributed, or not inside a worker
        return None
    try:
        index = int(name)
    except (TypeError, ValueError):
        return None
    from .runtime.devices import device_count

    return index % max(device_count(), 1)


def _half(dtype) -> bool:
    from ._dtypes import is_bfloat16

    return dtype == np.float16 or is_bfloat16(dtype)


def _gpu_product(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """One block product on this worker's GPU (numpy in, numpy out; float16/bfloat16 blocks give float32
    partial products, rounded once after the K sum)."""
    from .matmul import matmul

    dev = _worker_device()
    out = np.empty((x.shape[0], y.shape[1]), np.float32) if _half(x.dtype) else None
    return matmul(x, y, out=out, devices=None if dev is None else [dev])  # views with contiguous rows go as they are


def _block(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    # blockwise hands over A[i, k] and B[k, j]; the k axis stays a (length 1) axis of the result
    return _gpu_product(x, y)[:, None, :]


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


def matmul(a, b):
    """C = a @ b for two 2-D dask arrays (any chunking; b's row chunks are aligned to a's column chunks).
    Returns a lazy dask array; each block product runs on a GPU, and the partial products of one C
    block are summed by dask.array's reduction (a fixed tree, each step adding in K order, so the same
    graph gives the same bits)."""
    import dask.array as da

    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"gpumat.dask.matmul takes 2-D arrays, got {a.ndim}-D and {b.ndim}-D")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned")
    if a.dtype != b.dtype:
        raise TypeError(f"matmul: a is {a.dtype} and b is {b.dtype}; gpumat does not mix dtypes in one call")
    b = b.rechunk({0: a.chunks[1]})
    partial = da.blockwise(
        _block,
        "ikj",
        a,
        "ik",
        b,
        "kj",
        dtype=np.float32 if _half(a.dtype) else a.dtype,
        adjust_chunks={"k": 1},
        concatenate=False,
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
        name="gpumat-matmul-ksum",
    )
