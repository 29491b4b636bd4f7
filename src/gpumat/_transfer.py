"""Copies of whole matrices between GPUs (and within one): Matrix.to(device) and Matrix.copy()."""

from __future__ import annotations

from .matrix import Matrix, paired_pieces
from .memory.ordering import done_on, finished_on, use_on
from .runtime import memops
from .runtime.devices import Device
from .runtime.streams import foreign_of, stream_handle, synchronize_stream, trusted, wait_across_devices


def copy_matrix(m: Matrix, dst_dev: Device, stream=None) -> Matrix:
    """A packed copy of m (same shape and layout) on dst_dev, queued on `stream` of dst_dev. Across GPUs
    the copy goes peer to peer (NVLink or PCIe) where the GPUs allow it, else the driver stages it
    through the host; the destination stream first waits for the source device's current stream, and
    the call returns once the copy is done (so the source may be freed at once)."""
    src_dev = m.device
    s = stream_handle(stream, dst_dev)
    _ = m.elements  # a freed source raises FreedMatrixError before anything is allocated
    out = Matrix._allocate_like(m, dst_dev.activate(), s)
    if out.size == 0:
        return out
    try:
        _copy(m, out, src_dev, dst_dev, s)
    except BaseException:  # e.g. the source freed by another thread meanwhile: the result goes now
        out.free()
        raise
    return out


def _copy(m: Matrix, out: Matrix, src_dev: Device, dst_dev: Device, s: int) -> None:
    if src_dev is dst_dev:
        with dst_dev.lock:
            _copy_pieces(m, out, s)
        return
    isz = m.itemsize
    dst_dev.enable_peer_access(src_dev)  # both ways: the copy engines of either GPU may do the move
    src_dev.enable_peer_access(dst_dev)
    src_stream = stream_handle(None, src_dev)
    with src_dev.lock:  # addresses read under the lock; the hold keeps the memory through the copies
        pieces = [(x.elements, x.stride, y.elements, y.stride, x.shape) for x, y in paired_pieces(m, out)]
        buf = m._operand()[-1]
        buf.hold()
    try:
        src_dev.activate()
        wait_across_devices(s, dst_dev, src_stream, src_dev)
        dst_dev.activate()
        for src, src_ld, dst, dst_ld, (h, w) in pieces:
            memops.copy_peer_2d_async(
                dst, dst_dev.context, dst_ld * isz, src, src_dev.context, src_ld * isz, w * isz, h, s
            )
        synchronize_stream(s)
    finally:
        buf.unhold()
    if not trusted(s):  # another library's stream: the copies have run there, no mark to record
        with dst_dev.lock:
            finished_on(foreign_of(s, dst_dev), out._operand()[-1])


def copy_into(src: Matrix, dst: Matrix, stream=None) -> None:
    """dst[...] = src for two matrices of one shape, dtype and layout on one GPU (views and batches alike;
    queued on `stream`). What gathers Dask chunks into one matrix."""
    if src.shape != dst.shape or src.dtype != dst.dtype or src.is_transposed != dst.is_transposed:
        raise ValueError(f"copy_into: {src!r} does not fit {dst!r} (same shape, dtype and layout wanted)")
    dev = src.device
    if dst.device is not dev:
        raise ValueError(f"copy_into: the source is on GPU {dev.ordinal}, the destination on GPU {dst.device.ordinal}")
    if dst.is_borrowed and dst._operand()[-1].readonly:
        raise ValueError("copy_into: the destination is a read-only import")
    s = stream_handle(stream, dev)
    with dev.lock:
        _copy_pieces(src, dst, s)


def _copy_pieces(src: Matrix, dst: Matrix, s: int) -> None:
    """The same-device copy, piece by piece of the storage (device lock held)."""
    _ = src.elements, dst.elements  # freed matrices raise FreedMatrixError here
    if not src.size:
        return
    isz = src.itemsize
    buffers = src._operand()[-1], dst._operand()[-1]
    use_on(s, *buffers)
    for a, b in paired_pieces(src, dst):
        h, w = a.shape
        memops.copy_device_2d(b.elements, b.stride * isz, a.elements, a.stride * isz, w * isz, h, s)
    done_on(s, *buffers)
