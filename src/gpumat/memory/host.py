"""Host memory the GPUs copy at full speed: pinned arrays (`pinned_empty`), and numpy arrays page-locked
in place for the length of one call (the out-of-core product's `lock_host` / `unlock_host`)."""

from __future__ import annotations

import ctypes
import threading
import weakref

import numpy as np

from ..runtime import memops
from ..runtime.devices import Device, device
from ..runtime.errors import raise_error

SMALL_BLOCK = 1 << 20  # below this, is_pinned does not ask the driver


def address_of(a: np.ndarray) -> int:
    """The address of a host array's first byte. A ctypes view of a writable C-contiguous array's buffer
    gives it in a third of the time numpy's `a.ctypes.data` takes (0.3 against 0.9 us on the development
    machine), which every small copy pays; a read-only, strided or empty array takes numpy's way, and so
    does one of a dtype numpy cannot export as a buffer (bfloat16, from ml_dtypes: user-defined, not built in)."""
    if a.flags.writeable and a.flags.c_contiguous and a.nbytes and a.dtype.isbuiltin == 1:
        return ctypes.addressof(ctypes.c_char.from_buffer(a))
    return a.ctypes.data


# pinned host memory ----------------------------------------------------------------------------
class PinnedBlock:
    """Page-locked host memory from cuMemHostAlloc; freed when the last array over it is collected."""

    def __init__(self, nbytes: int, dev: Device | None = None):
        (dev or device()).activate()  # a context must be current (portable memory serves every GPU)
        self.ptr = memops.host_alloc(nbytes)
        self.nbytes = nbytes
        self._finalizer = weakref.finalize(self, memops.host_free, self.ptr)

    def array(self, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        raw = (ctypes.c_byte * max(count * dtype.itemsize, 1)).from_address(self.ptr)
        arr = np.frombuffer(raw, dtype=np.uint8, count=count * dtype.itemsize).view(dtype).reshape(shape)
        raw._gpumat_block = self  # the array's base: keeps the block alive as long as any array uses it
        return arr


def pinned_empty(shape, dtype=np.float32) -> np.ndarray:
    """An uninitialised numpy array in page-locked (pinned) host memory.

    Copies between it and the GPU run at the bus's full speed in one DMA, and asynchronously when
    given a ``stream=``. The memory is released when the array (and every view of it) is collected.

    Parameters
    ----------
    shape : int or tuple of int
        The array's shape.
    dtype : dtype, optional
        The element type; float32 by default.

    Returns
    -------
    numpy.ndarray
        The array, C-contiguous.

    Raises
    ------
    ValueError
        A negative dimension, or more than 2^63 - 1 bytes.
    OutOfMemoryError
        The driver could not page-lock that much host memory.
    NoDeviceError
        No usable driver (page-locked memory is the driver's).

    Examples
    --------
    >>> host = gm.pinned_empty((1024, 1024), np.float32)  # doctest: +GPU
    >>> host.shape, host.flags.c_contiguous
    ((1024, 1024), True)
    """
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"negative dimension in {shape}")
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if nbytes > 2**63 - 1:  # past what the driver's size (and numpy's index) can hold
        raise ValueError(f"a pinned array of shape {shape} needs {nbytes} bytes, over 2^63 - 1")
    return PinnedBlock(nbytes).array(shape, dtype)


# Host ranges gpumat page-locks in place for the length of one call (the out-of-core product): start ->
# end, rounded out to whole pages (the driver locks pages). Arrays in them do not count as pinned for
# anyone else, since the lock goes when that call ends.
_HOST_LOCKS: dict[int, int] = {}
_HOST_LOCKS_GUARD = threading.Lock()
_PAGE = 4096


def _host_span(a: np.ndarray) -> tuple[int, int]:
    """The pages under a host array whose rows go forward (row stride >= row bytes) or that is one row."""
    rows = a.shape[0] if a.ndim == 2 else 1
    row_bytes = a.shape[-1] * a.itemsize if a.ndim else a.itemsize
    span = (rows - 1) * a.strides[0] + row_bytes if a.ndim == 2 and rows > 1 else row_bytes
    start = a.ctypes.data
    return start // _PAGE * _PAGE, -(-(start + span) // _PAGE) * _PAGE


def _locked_for_a_call(a: np.ndarray) -> bool:
    start, end = _host_span(a)
    with _HOST_LOCKS_GUARD:
        return any(s < end and start < e for s, e in _HOST_LOCKS.items())


def lock_host(arrays) -> tuple[list[bool], list[int]]:
    """Page-lock host arrays (2-D, rows forward) in place for every GPU until unlock_host. Arrays whose
    pages touch (numpy may put two small arrays on one page) are locked as one range, since the driver
    refuses to lock a page twice. Returns which arrays are locked and the ranges to hand to unlock_host.
    An array is left as it is (and copied as pageable memory) when the driver refuses its range, or when
    that range overlaps one another call has locked."""
    spans = sorted((_host_span(x), i) for i, x in enumerate(arrays) if x.nbytes)
    groups: list[list] = []  # [start, end, [array indices]]
    for (start, end), i in spans:
        if groups and start < groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], end)
            groups[-1][2].append(i)
        else:
            groups.append([start, end, [i]])
    locked, ranges = [False] * len(arrays), []
    with _HOST_LOCKS_GUARD:
        for start, end, members in groups:
            if any(s < end and start < e for s, e in _HOST_LOCKS.items()):
                continue
            if not memops.host_register(start, end - start):
                continue
            _HOST_LOCKS[start] = end
            ranges.append(start)
            for i in members:
                locked[i] = True
    return locked, ranges


def unlock_host(ranges: list[int]) -> None:
    """Unlock what lock_host locked (every range, even when one fails; the first failure is raised)."""
    failure = None
    with _HOST_LOCKS_GUARD:
        for start in ranges:
            del _HOST_LOCKS[start]
            err = memops.host_unregister(start)
            if err and failure is None:
                failure = err
    if failure is not None:
        raise_error(failure, "cuMemHostUnregister")


def is_pinned(a: np.ndarray) -> bool:
    """Whether a host array lies in page-locked memory (gpumat's own, or registered by anyone) that stays
    locked: memory an out-of-core call has locked for its own length does not count."""
    if _HOST_LOCKS and a.ndim <= 2 and a.size and _locked_for_a_call(a):
        return False
    base = a
    while base is not None:
        if isinstance(base, ctypes.Array) and hasattr(base, "_gpumat_block"):
            return True
        base = getattr(base, "base", None)
    if a.nbytes < SMALL_BLOCK:
        return False  # not worth a driver query
    return memops.is_page_locked(a.ctypes.data)
