"""gpumat on Dask: dask.array collections whose chunks stay on the workers' GPUs as gpumat Matrices.

    from dask.distributed import Client, LocalCluster
    import gpumat.dask as gmd
    client = Client(LocalCluster(n_workers=gm.device_count(), threads_per_worker=1))  # a worker process a GPU
    A = gmd.from_array(a, chunks=8192)    # numpy in: the chunks sent to the workers' GPUs now
    B = gmd.from_array(b, chunks=8192)
    C = gmd.matmul(A, B)                  # lazy; every block of C computed on a GPU, where its inputs are
    c = gmd.to_numpy(C).compute()         # only the result comes back to the host

- `from_array(x, chunks)`: chunks become Matrices on the workers' GPUs (gpumat.dask.upload).
- `matmul(a, b)`: with Matrix chunks, each block of C is one task that adds its K products on the GPU
  in a fixed order (the GEMM's beta = 1), so the same graph gives the same bits; it runs on the worker
  holding most of its inputs, the blocks shared evenly (gpumat.dask.placement). With numpy chunks,
  each block product goes host -> GPU -> host and Dask adds the partial products (the path for data
  that should stay in host memory).
- `matmul_plan(a, b)`: where matmul's blocks would run and the bytes that would move.
- `to_numpy(x)`: the chunks back as numpy arrays (`x.map_blocks(gm.Matrix.to_numpy)` does the same);
  `asnumpy(x)`: the whole array in this process now, chunks GPU to GPU and downloaded in place.

Which GPU a worker uses: gpumat.dask.chunks.worker_device (dask-cuda's CUDA_VISIBLE_DEVICES, else a
LocalCluster worker's number). Chunks move between processes on one host GPU to GPU through CUDA IPC
(gpumat.dask.transfer), between hosts through the host (TCP), or through distributed's `cuda` family
where the transport carries device memory (UCX).

Dask is an optional dependency (the `dask` extra); importing gpumat never imports it.
"""

from __future__ import annotations

import functools

import numpy as np

from .. import _dtypes
from . import chunks as _chunks
from . import graph, placement

_chunks.register()


def _current_client():
    """distributed's current client, or None (no distributed, or no client in this process)."""
    try:
        from distributed import default_client
    except ImportError:
        return None
    try:
        return default_client()
    except ValueError:
        return None


def from_array(x, chunks=None, dtype=None):
    """A dask array with gpumat Matrix chunks from a 2-D numpy array or dask array (numpy chunks),
    converted to `dtype` if given. `chunks` as dask.array takes it; None keeps a dask array's chunks and
    gives a numpy array Dask's "auto".

    - A dask array: each chunk is uploaded by the worker that makes it (lazy, as any dask array).
    - A numpy array with a distributed client current: sent to the workers now, chunk by chunk, not
      through the scheduler: row of blocks i to worker i mod W, GPU to GPU where this process has a GPU
      and the workers share its host (gpumat.dask.upload). The array returned is made of the futures.
    - A numpy array and no client: dask.array.from_array's graph, each chunk uploaded by its task."""
    import dask.array as da

    if isinstance(x, da.Array):
        if graph.is_resident(x):
            raise TypeError("gpumat.dask.from_array: the array's chunks are gpumat Matrices already")
        source = x if chunks is None else x.rechunk(chunks)
    elif isinstance(x, np.ndarray):
        if x.ndim != 2:
            raise ValueError(f"gpumat.dask works on 2-D arrays, got {x.ndim}-D")
        client = _current_client()
        if client is not None:
            from . import upload

            return upload.scatter(client, x, chunks, _dtypes.as_dtype(x.dtype if dtype is None else dtype))
        source = da.from_array(x, chunks="auto" if chunks is None else chunks)
    else:
        raise TypeError(f"gpumat.dask.from_array takes a numpy array or a dask array, got {type(x).__name__}")
    if source.ndim != 2:
        raise ValueError(f"gpumat.dask works on 2-D arrays, got {source.ndim}-D")
    dt = _dtypes.as_dtype(source.dtype if dtype is None else dtype)  # TypeError for dtypes gpumat lacks
    return source.map_blocks(
        functools.partial(_chunks.upload, dtype=dt),
        dtype=dt,
        meta=_chunks.meta(dt),
        name="gpumat-upload-" + da.core.tokenize(source, dt),
    )


def to_numpy(x):
    """The dask array with its gpumat Matrix chunks brought back to the host as numpy chunks."""
    import dask.array as da

    if not isinstance(x, da.Array) or not graph.is_resident(x):
        raise TypeError("gpumat.dask.to_numpy takes a dask array with gpumat Matrix chunks (from gpumat.dask)")
    return x.map_blocks(
        _chunks.download,
        dtype=x.dtype,
        meta=np.empty((0,) * x.ndim, x.dtype),
        name="gpumat-download-" + da.core.tokenize(x),  # a gpumat key: placed by its inputs (placement)
    )


def asnumpy(x, out=None) -> np.ndarray:
    """The whole dask array with gpumat Matrix chunks as one numpy array, now (eager, as cupy.asnumpy).

    With a distributed client current, the chunks are computed (or taken where they are already) and
    brought to this process, GPU to GPU from workers on this host (gpumat.dask.transfer), each downloaded
    straight into its place in `out`, one thread a worker: no chunk goes through host memory twice. That
    is the fast way back for a large C; `to_numpy(x).compute()` moves numpy chunks over TCP and joins
    them here. Without a client, it is that. `out`: a writeable C-contiguous array of x's shape and dtype
    to fill."""
    import dask.array as da

    if not isinstance(x, da.Array) or not graph.is_resident(x):
        raise TypeError("gpumat.dask.asnumpy takes a dask array with gpumat Matrix chunks (from gpumat.dask)")
    if x.ndim != 2:
        raise ValueError(f"gpumat.dask works on 2-D arrays, got {x.ndim}-D")
    if out is None:
        out = np.empty(x.shape, x.dtype)
    elif not isinstance(out, np.ndarray):
        raise TypeError(f"gpumat.dask.asnumpy: out must be a numpy array, got {type(out).__name__}")
    elif out.shape != x.shape or out.dtype != x.dtype or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(
            f"gpumat.dask.asnumpy: out must be a writeable C-contiguous {x.dtype} array of shape {x.shape}, "
            f"got {out.dtype} {out.shape}"
        )
    client = _current_client()
    if client is None:
        np.copyto(out, to_numpy(x).compute())
        return out
    from . import upload

    return upload.gather(client, x, out)


def matmul(a, b, name=None):
    """C = a @ b for two 2-D dask arrays of one dtype (any chunking: b's row chunks are aligned to a's
    column chunks). Both with gpumat Matrix chunks (from_array): C has Matrix chunks and stays on the
    GPUs; both with numpy chunks: C has numpy chunks. Returns a lazy dask array; bad input raises here,
    before any task runs. `name`: the keys' prefix (as dask.array's functions take it; by default a
    token of the operands, so the same product is the same keys)."""
    graph.check_operands(a, b)
    if not graph.is_resident(a):
        return graph.host_matmul(a, b, name)
    client = _current_client()
    if client is not None:
        placement.register(client)
    return graph.resident_matmul(a, b, name)


def matmul_plan(a, b, client=None) -> placement.MatmulPlan:
    """Where matmul(a, b)'s blocks of C would run and how many bytes of a and b would move between the
    workers, for operands persisted on a distributed cluster (`print()` it). Each block goes to the
    worker holding most of its inputs, the blocks shared out by the workers' threads."""
    graph.check_operands(a, b)
    client = client or _current_client()
    if client is None:
        raise ValueError("gpumat.dask.matmul_plan: no distributed client (pass client=, or make one)")
    return placement.explain(client, a, b)


def synchronize(client) -> None:
    """Wait until every worker's GPU has run the work queued so far. A task with Matrix results ends when
    its work is queued on the GPU, not when the GPU has done it: time a graph with persist(), wait() and
    then this."""
    client.run(_chunks.synchronize_worker)


def memory_info(client) -> dict:
    """gm.memory_info of every worker's GPU, by worker address: what gpumat holds there (`used`), cached
    and the peak."""
    return client.run(_chunks.worker_memory)


__all__ = ["from_array", "to_numpy", "asnumpy", "matmul", "matmul_plan", "synchronize", "memory_info"]
