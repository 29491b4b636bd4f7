"""gpumat Matrices as dask.array chunks: the worker's GPU, the chunk type's meta, uploads and downloads,
joining chunks on the GPU, and moving a chunk between worker processes.

Registered with Dask and distributed when gpumat.dask is imported (the tasks of a gpumat.dask graph
import it on every worker that runs one):
- `dask.array.register_chunk_type(Matrix)`: Dask wraps Matrix chunks instead of deferring to them.
- `concatenate_lookup`: Dask joins Matrix chunks (rechunking, `compute()`) with copies on the GPU.
- distributed's `cuda` family (UCX and other transports that carry device memory): a header from the
  chunk's interface dictionary and one device frame, the packed chunk itself; and its `dask` family
  (TCP): to a process on the same host, a header of CUDA IPC handles and no frame (the chunk goes GPU
  to GPU, gpumat.dask.transfer); to another host, the same header and one host frame. A Matrix also
  pickles through the host (Matrix.__reduce__).
- `dask.sizeof`: a chunk weighs its bytes, so the scheduler places tasks by where their inputs' bytes
  are (as for CuPy chunks).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import weakref

import numpy as np

from .. import _dtypes
from .._transfer import copy_into
from ..matrix import Matrix
from ..memory import BorrowedBuffer
from ..runtime.devices import as_device, device_count
from ..runtime.errors import CudaError
from . import transfer


def worker_device(worker=None):
    """The GPU of a Dask worker (by default the one running this code): an integer, or None (the current
    GPU).

    - Under dask-cuda (LocalCUDACluster, dask-cuda-worker), each worker's CUDA_VISIBLE_DEVICES lists its
      own GPU first: GPU 0 as gpumat counts them.
    - A worker named by an integer (LocalCluster names its workers 0, 1, ...) uses GPU `name % GPUs`.
    - Any other worker, and Dask's local schedulers, use the current GPU.
    """
    if worker is None:
        try:
            from distributed import get_worker

            worker = get_worker()
        except (ImportError, ValueError):  # no distributed, or not inside a worker
            return None
    keep_log_tracebacks_as_text(worker)
    name = worker.name
    if "dask_cuda" in sys.modules and os.environ.get("CUDA_VISIBLE_DEVICES"):
        return 0
    try:
        index = int(name)
    except (TypeError, ValueError):
        return None
    return index % max(device_count(), 1)


class TracebackAsText(logging.Filter):
    """A log handler's filter that keeps a record's traceback as text and lets go of its frames.

    A distributed worker keeps its last `distributed.admin.log-length` (10000) log records in memory. The
    record of a failed transfer (a peer that died while chunks were being sent to it) carries the
    exception's traceback, whose frames hold the message being sent, and so the chunks in it: GPU memory
    that would stay allocated, with no key left to release it, until 10000 later records pushed the
    record out. Rendered as text when it is logged, the traceback reads the same in the worker's logs.

    The exceptions the logged one was raised from (its cause and context) are let go of their frames too:
    the socket error under a failed send is also kept by the connection's stream (tornado's
    `IOStream.error`), which its comm's finalizer keeps until the comm is collected, and the comm is among
    the locals of the very frames that error's traceback reaches: a cycle through a global registry that
    the garbage collector cannot free, holding the message's chunks for the life of the worker."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = self._formatter.formatException(record.exc_info)
            _drop_chained_tracebacks(record.exc_info[1])
            record.exc_info = None
        return True


def _drop_chained_tracebacks(exc: BaseException | None) -> None:
    """Drop the tracebacks of the exceptions `exc` was raised from or while handling (not exc's own: it may
    still be propagating, and its frames go when it does)."""
    seen = {id(exc)}
    chained = [exc.__cause__, exc.__context__] if exc is not None else []
    while chained:
        e = chained.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        e.__traceback__ = None
        chained += [e.__cause__, e.__context__]


def keep_log_tracebacks_as_text(worker) -> None:
    """Give the worker's in-memory log a TracebackAsText filter, once (gpumat.dask's tasks call it through
    worker_device, so every worker that holds gpumat chunks has it)."""
    handler = getattr(worker, "_deque_handler", None)  # distributed's Node keeps its log records there
    if handler is not None and not any(isinstance(f, TracebackAsText) for f in handler.filters):
        handler.addFilter(TracebackAsText())


def meta(dtype, ndim: int = 2) -> Matrix:
    """The chunk type's meta (Dask's `_meta`): a Matrix._stand_in, which owns no memory and needs no GPU
    (graphs are built, and pickled to the scheduler, where there may be none)."""
    return Matrix._stand_in(dtype, ndim)


def synchronize_worker(dask_worker=None) -> None:
    """Wait until this worker's GPU has run the work its tasks queued (for Client.run)."""
    as_device(worker_device(dask_worker)).synchronize()


def worker_memory(dask_worker=None) -> dict:
    """gm.memory_info of this worker's GPU (for Client.run)."""
    from ..memory import memory_info

    return memory_info(worker_device(dask_worker))


def upload(block: np.ndarray, dtype=None) -> Matrix:
    """A task: one numpy block to this worker's GPU."""
    return transfer.mark_ready(Matrix.from_numpy(block, dtype=dtype, device=worker_device()))


def download(block: Matrix) -> np.ndarray:
    """A task: one Matrix block back to the host."""
    return block.to_numpy()


# Copies of chunks that reached a worker on another GPU (workers in one process hand each other the
# Matrix itself), kept while the chunk lives: every later task of this worker that reads the chunk uses
# the copy instead of moving the chunk across the GPUs again (Dask never changes a chunk in place).
_copies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # chunk -> {device ordinal: its copy there}
_copies_lock = threading.Lock()


def to_worker_gpu(block: Matrix, dev: int | None) -> Matrix:
    """A chunk on GPU `dev` (this worker's, from worker_device; None: wherever it is): itself, or its copy
    there when it lives on another GPU (made once while the chunk lives)."""
    if dev is None or block.device is as_device(dev):
        return block
    with _copies_lock:
        copy = _copies.get(block, {}).get(dev)
    if copy is None or copy.is_freed or block.is_freed:
        copy = block.to(dev)
        with _copies_lock:
            _copies.setdefault(block, {})[dev] = copy
    return copy


def concatenate(blocks, axis: int = 0) -> Matrix:
    """Dask's concatenate for Matrix chunks: one new matrix on the first chunk's GPU, each chunk copied into
    its place on the GPU (chunks from other GPUs are brought over first)."""
    blocks = list(blocks)
    first = blocks[0]
    if len(blocks) == 1:
        return first.copy()
    if first.ndim != 2:
        raise ValueError("gpumat.dask joins 2-D chunks only")
    axis = axis + 2 if axis < 0 else axis
    if any(b.dtype != first.dtype for b in blocks):
        raise TypeError("gpumat.dask: chunks of one collection have one dtype")
    dev = first.device
    shape = list(first.shape)
    shape[axis] = sum(b.shape[axis] for b in blocks)
    out = Matrix.empty(tuple(shape), dtype=first.dtype, device=dev)
    start = 0
    for b in blocks:
        end = start + b.shape[axis]
        if b.size:
            b = b if b.device is dev else b.to(dev)
            copy_into(_row_major(b) if b.is_transposed else b, out[start:end, :] if axis == 0 else out[:, start:end])
        start = end
    return transfer.mark_ready(out)


def _row_major(b: Matrix) -> Matrix:
    from ..transpose import transpose

    return transpose(b.T)  # the storage of a transposed view, transposed: the values row-major


def _chunk_bytes(x: Matrix) -> int:
    return int(x.nbytes)


# --- moving a chunk between workers ---------------------------------------------------------------------
def serialize_device(x: Matrix):
    """distributed's `cuda` family: the header (shape, dtype, the interface dictionary's typestr) and one
    device frame, the chunk itself when packed and row-major, else a packed copy."""
    if x.is_transposed or not x.is_contiguous:
        x = _row_major(x) if x.is_transposed else x.copy()
    header = {"shape": list(x.shape), "dtype": _dtypes.name(x.dtype), "nbytes": x.nbytes}
    return header, [x]


def deserialize_device(header: dict, frames: list) -> Matrix:
    """A `cuda`-family frame (any object with __cuda_array_interface__ over the bytes) copied into a new
    Matrix on this worker's GPU."""
    (frame,) = frames
    here = worker_device()
    if isinstance(frame, Matrix):
        return to_worker_gpu(frame, here)
    dtype = _dtypes.as_storage_dtype(header["dtype"])
    shape = tuple(header["shape"])
    ptr = int(frame.__cuda_array_interface__["data"][0])
    dev = as_device(here)
    out = Matrix.empty(shape, dtype=dtype, device=dev)
    if out.size:  # the frame seen as a matrix of the chunk's shape, copied on the GPU, then let go
        batch = shape[0] if len(shape) == 3 else None
        height, width = shape[-2:]
        frame_buffer = BorrowedBuffer(ptr, header["nbytes"], dev, frame)
        borrowed = Matrix._wrap(frame_buffer, 0, height, width, width, dtype=dtype, batch=batch, bstride=height * width)
        copy_into(borrowed, out)
        frame_buffer.release()  # waits for the copy: the frame's memory is the transport's once we return
    return out


def serialize_host(x: Matrix, context=None):
    """distributed's `dask` family (TCP and other host transports): to a process on this host (as
    distributed's `context` names the two ends), the header with CUDA IPC handles and no frame; else the
    header and one host frame."""
    if transfer.same_host(context) and x.ndim == 2 and x.size:  # (an empty chunk has nothing to export)
        if x.is_transposed or not x.is_contiguous:
            x = transfer.mark_ready(_row_major(x) if x.is_transposed else x.copy())
        header = {"shape": list(x.shape), "dtype": _dtypes.name(x.dtype), "nbytes": x.nbytes}
        try:
            header["ipc"] = transfer.offer(x)
            return header, []
        except (CudaError, OSError) as e:  # no export block (out of memory), no /dev/shm: the bytes instead
            transfer.log.warning("gpumat.dask: a chunk goes through the host, CUDA IPC failed: %s", e)
    values = x.to_numpy()
    header = {"shape": list(values.shape), "dtype": _dtypes.name(x.dtype), "nbytes": values.nbytes}
    return header, [memoryview(np.ascontiguousarray(values).reshape(-1).view(np.uint8))]


def deserialize_host(header: dict, frames: list) -> Matrix:
    """The chunk on this worker's GPU: copied GPU to GPU from the sender's IPC offer, or the host frame
    uploaded."""
    dtype = _dtypes.as_storage_dtype(header["dtype"])
    if "ipc" in header:
        here = worker_device()
        if here is None:  # not a worker (the client): the sender's GPU if this process sees it (a local copy)
            sent_from = header["ipc"].get("device")
            here = sent_from if isinstance(sent_from, int) and sent_from < device_count() else None
        return transfer.receive(header["ipc"], tuple(header["shape"]), dtype, as_device(here))
    (frame,) = frames
    values = np.frombuffer(frame, dtype=np.uint8, count=header["nbytes"]).view(dtype).reshape(header["shape"])
    return transfer.mark_ready(Matrix.from_numpy(values, dtype=dtype, device=worker_device()))


def register() -> None:
    """Tell Dask and distributed about the Matrix chunk type (idempotent)."""
    import dask.array as da
    from dask.array.dispatch import concatenate_lookup
    from dask.sizeof import sizeof

    if Matrix not in concatenate_lookup._lookup:
        da.register_chunk_type(Matrix)
        concatenate_lookup.register(Matrix, concatenate)
        sizeof.register(Matrix, _chunk_bytes)
    try:
        from distributed.protocol.cuda import cuda_deserialize, cuda_serialize
        from distributed.protocol.serialize import dask_deserialize, dask_serialize
    except ImportError:  # dask without distributed: the local schedulers move nothing
        return
    cuda_serialize.register(Matrix, serialize_device)
    cuda_deserialize.register(Matrix, deserialize_device)
    dask_serialize.register(Matrix, serialize_host)
    dask_deserialize.register(Matrix, deserialize_host)
