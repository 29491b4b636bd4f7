"""Device memory: each GPU's pool of stream-ordered allocations, and the host<->device copies.

The memory policy (README, "Memory"):
- Blocks come from the device's default memory pool with cuMemAllocAsync on the operation's stream.
  The pool keeps freed memory for reuse up to its release threshold (the cache limit: 1/16 of the
  GPU's memory, at most 2 GiB, by default); past it, the driver hands memory back to the system at
  the next synchronisation, so an idle gpumat never sits on the whole GPU.
- Small blocks (<= 1 MiB, 64 MiB in all) are also kept on a free list of their own, per stream, so a
  small product's result costs no driver call; a block on it is reused only on the stream it was
  freed on, which keeps the reuse in stream order.
- After an out-of-memory failure everything cached is handed back, and the allocation tried again.
- `release_cached()` hands back all cached memory now; `memory_info()` says what is used, cached and
  the peak; `set_memory_limit()` caps what gpumat may hold on a device.

Finalizers never take a lock: a block whose Matrix was collected goes on a queue (deque.append is
atomic) that the next allocation or free on that device drains. So the cycle collector, which can
run inside any allocation, never re-enters a lock a thread already holds.
"""
from __future__ import annotations

import collections
import ctypes
import os
import threading
import weakref

import numpy as np
from cuda.bindings import driver

from ._driver import LEGACY_STREAM, Device, OutOfMemoryError, check, device, raise_error

SMALL_BLOCK = 1 << 20
KEEP_PER_SIZE = 16
KEEP_BYTES = 64 << 20   # the most the small-block free list holds in all
MAX_BYTES = 2**63 - 1   # no request reaches the driver above this (its size argument is 64-bit)


# Streams gpumat closed: a block still tagged with one is freed on the legacy stream (the stream was
# synchronised when it closed, so nothing on it can still read the block). A new stream that happens
# to get the same handle takes it off the set.
dead_streams: set[int] = set()
# Streams gpumat made and has not closed. A buffer only ever remembers these and the legacy / per-thread
# default streams (0, 1, 2): another library's stream may be destroyed behind gpumat's back, and a
# destroyed handle must never reach the driver. Work on such a stream is followed by an event instead.
own_streams: set[int] = set()
SPECIAL_STREAMS = frozenset({0, 1, 2})


def trusted(stream: int) -> bool:
    return stream in SPECIAL_STREAMS or stream in own_streams
STALE_STREAM = frozenset({driver.CUresult.CUDA_ERROR_INVALID_HANDLE, driver.CUresult.CUDA_ERROR_INVALID_RESOURCE_TYPE,
                          driver.CUresult.CUDA_ERROR_INVALID_CONTEXT})


class _SmallBlocks:
    """The free list: blocks by (size, stream). Only called with the device's lock held."""

    def __init__(self):
        self.by_key: dict[tuple[int, int], list[int]] = {}
        self.bytes = 0

    def take(self, nbytes: int, stream: int) -> int:
        kept = self.by_key.get((nbytes, stream))
        if not kept:
            return 0
        self.bytes -= nbytes
        return kept.pop()

    def give(self, ptr: int, nbytes: int, stream: int) -> bool:
        """Keep the block if there is room; False means the caller frees it."""
        if self.bytes + nbytes > KEEP_BYTES:
            return False
        kept = self.by_key.get((nbytes, stream))
        if kept is None:
            kept = self.by_key[(nbytes, stream)] = []
        elif len(kept) >= KEEP_PER_SIZE:
            return False
        kept.append(ptr)
        self.bytes += nbytes
        return True

    def drain(self, stream: int | None = None) -> list[tuple[int, int, int]]:
        """Remove and return (ptr, nbytes, stream) of every kept block (of one stream, if given)."""
        out = []
        for (nbytes, s), kept in list(self.by_key.items()):
            if stream is None or s == stream:
                out += [(p, nbytes, s) for p in kept]
                self.bytes -= nbytes * len(kept)
                del self.by_key[(nbytes, s)]
        return out


class Pool:
    """Everything gpumat's memory keeps for one device. Guarded by the device's lock."""

    def __init__(self, dev: Device):
        self.device = dev
        self.handle = check(driver.cuDeviceGetDefaultMemPool(dev.handle), "cuDeviceGetDefaultMemPool")
        self.small = _SmallBlocks()
        self.pending: collections.deque = collections.deque()   # (ptr, nbytes, stream) queued by finalizers
        self.used = 0          # bytes in live gpumat buffers (the free list's blocks are not counted)
        self.peak = 0
        self.limit: int | None = None
        self.cache_limit = 0
        self.set_cache_limit(min(dev.total_memory // 16, 2 << 30))
        self.staging: dict[str, Staging] = {}  # by role: plain copies, and out-of-core uploads / downloads

    def set_cache_limit(self, nbytes: int) -> None:
        attr = driver.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
        check(driver.cuMemPoolSetAttribute(self.handle, attr, driver.cuuint64_t(int(nbytes))), "cuMemPoolSetAttribute")
        self.cache_limit = int(nbytes)

    def _pool_attr(self, name: str) -> int:
        attr = getattr(driver.CUmemPool_attribute, name)
        return int(check(driver.cuMemPoolGetAttribute(self.handle, attr), "cuMemPoolGetAttribute"))

    # allocation ------------------------------------------------------------------------------
    def alloc(self, nbytes: int, stream: int) -> int:
        """A block of nbytes for use on `stream` (stream-ordered). Caller holds the device lock."""
        pending = self.pending
        if pending:
            # the common case on the launch path: the last result, dropped and collected, has just the
            # size and stream wanted; take it over directly (it is still counted as used)
            head = pending[0]
            if head[1] == nbytes and head[2] == stream and head[3] is None and head[0] is not None \
                    and nbytes <= SMALL_BLOCK and trusted(stream):
                pending.popleft()  # only drains (all under this lock) take from the left: this is `head`
                if pending:
                    self.drain_pending()
                return head[0]
            self.drain_pending()
        if nbytes <= SMALL_BLOCK and trusted(stream):
            ptr = self.small.take(nbytes, stream)
            if ptr:
                self._count(nbytes)
                return ptr
        if self.limit is not None and self.used + nbytes > self.limit:
            self.release_cached()  # the free list's blocks count against nothing, but hand them back anyway
            raise OutOfMemoryError(
                f"cannot allocate {_mib(nbytes)} on GPU {self.device.ordinal}: gpumat's memory limit is "
                f"{_mib(self.limit)} and {_mib(self.used)} is in use", "gpumat.set_memory_limit")
        err, ptr = driver.cuMemAllocAsync(nbytes, stream)
        if err == driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
            self.release_cached()  # cached blocks may be what is in the way: try once more without them
            err, ptr = driver.cuMemAllocAsync(nbytes, stream)
        if err == driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
            free_bytes, total = check(driver.cuMemGetInfo(), "cuMemGetInfo")
            raise OutOfMemoryError(f"cannot allocate {_mib(nbytes)} on GPU {self.device.ordinal} "
                                   f"({_mib(free_bytes)} free of {_mib(total)})", "cuMemAllocAsync")
        if err:
            raise_error(err, "cuMemAllocAsync")
        self._count(nbytes)
        return int(ptr)

    def _count(self, nbytes: int) -> None:
        self.used += nbytes
        if self.used > self.peak:
            self.peak = self.used

    def free(self, ptr: int, nbytes: int, stream: int) -> None:
        """Release a block from alloc after the work queued on `stream`. Caller holds the device lock."""
        self.used -= nbytes
        if stream in dead_streams:  # its stream was closed (and drained first): any stream orders the free
            stream = LEGACY_STREAM
        if nbytes <= SMALL_BLOCK and trusted(stream) and self.small.give(ptr, nbytes, stream):
            return
        err, = driver.cuMemFreeAsync(ptr, stream)
        if err in STALE_STREAM:  # a stream another library owned and destroyed: wait for everything instead
            check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
            err, = driver.cuMemFreeAsync(ptr, LEGACY_STREAM)
        if err:
            raise_error(err, "cuMemFreeAsync")

    def drain_pending(self) -> None:
        pending = self.pending
        while pending:
            try:
                ptr, nbytes, stream, others = pending.popleft()
            except IndexError:
                break
            if ptr is None:  # a Stream collected without close(): `others` is its handle
                close_stream(self.device, stream, others)
                continue
            if others:
                wait_for_streams(stream, others)
            self.free(ptr, nbytes, stream)

    def forget_stream(self, stream: int) -> None:
        """A stream is about to be destroyed: its free-list blocks go back to the pool first."""
        for ptr, _, s in self.small.drain(stream):
            check(driver.cuMemFreeAsync(ptr, s), "cuMemFreeAsync")

    def release_cached(self) -> None:
        """Hand every cached block back: the free list to the pool, then the pool to the system."""
        self.drain_pending()
        for ptr, _, s in self.small.drain():
            check(driver.cuMemFreeAsync(ptr, s), "cuMemFreeAsync")
        check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
        check(driver.cuMemPoolTrimTo(self.handle, 0), "cuMemPoolTrimTo")

    def info(self) -> dict:
        reserved = self._pool_attr("CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT")
        free_bytes, total = check(driver.cuMemGetInfo(), "cuMemGetInfo")
        return {"device": self.device.ordinal, "used": self.used, "cached": max(reserved - self.used, 0),
                "peak": self.peak, "limit": self.limit, "cache_limit": self.cache_limit,
                "gpu_free": int(free_bytes), "gpu_total": int(total)}


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def pool(dev: Device) -> Pool:
    p = dev.memory
    if p is None:
        with dev.lock:
            if dev.memory is None:
                dev.activate()
                dev.memory = Pool(dev)
            p = dev.memory
    return p


def alloc(nbytes: int, stream: int = LEGACY_STREAM, dev: Device | None = None) -> int:
    """A raw device block (0 for nbytes <= 0); release it with free() with the same size."""
    if nbytes <= 0:
        return 0
    dev = dev or device()
    p = dev.memory or pool(dev)
    with dev.lock:
        return p.alloc(nbytes, stream)


def free(ptr: int, stream: int = LEGACY_STREAM, nbytes: int = 0, dev: Device | None = None) -> None:
    if not ptr:
        return
    dev = dev or device()
    with dev.lock:
        dev.memory.free(ptr, nbytes, stream)


def forget_stream(dev: Device, stream: int) -> None:
    if dev.memory is not None:
        with dev.lock:
            dev.memory.forget_stream(stream)


def close_stream(dev: Device, ptr: int, handle) -> None:
    """Destroy a gpumat stream: wait for it, hand its free-list blocks back, and remember that it is gone
    (blocks still tagged with it are freed on the legacy stream)."""
    dev.activate()
    check(driver.cuStreamSynchronize(handle), "cuStreamSynchronize")
    forget_stream(dev, ptr)
    dead_streams.add(ptr)
    own_streams.discard(ptr)
    check(driver.cuStreamDestroy(handle), "cuStreamDestroy")


# -------------------------------------------------------------------------------------------------
# the public memory functions
# -------------------------------------------------------------------------------------------------
def _devices(dev) -> list[Device]:
    from ._driver import as_device
    return [as_device(dev)]


def release_cached(device=None) -> None:
    """Wait for the GPU, then hand every block gpumat keeps cached (its free list and the driver pool's
    reserve) back to the system, so other processes and libraries can use that memory."""
    for dev in _devices(device):
        p = pool(dev)
        with dev.lock:
            dev.activate()
            p.release_cached()


def memory_info(device=None) -> dict:
    """{'used', 'cached', 'peak', 'limit', 'cache_limit', 'gpu_free', 'gpu_total'} in bytes for a device
    (the current one by default). used: in live gpumat matrices and scratch; cached: held for reuse."""
    dev = _devices(device)[0]
    p = pool(dev)
    with dev.lock:
        dev.activate()
        p.drain_pending()
        return p.info()


def reset_peak(device=None) -> None:
    dev = _devices(device)[0]
    p = pool(dev)
    with dev.lock:
        p.peak = p.used


def set_memory_limit(nbytes: int | None, device=None) -> None:
    """Cap the bytes gpumat may hold in live buffers on a device (None: no cap). Past it, allocations
    raise OutOfMemoryError as if the GPU were that small."""
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0):
        raise ValueError(f"the memory limit is a number of bytes >= 0 or None, got {nbytes!r}")
    dev = _devices(device)[0]
    p = pool(dev)
    with dev.lock:
        p.limit = None if nbytes is None else int(nbytes)


def set_cache_limit(nbytes: int, device=None) -> None:
    """How many freed bytes the device's pool may keep for reuse past a synchronisation (the driver's
    release threshold)."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0:
        raise ValueError(f"the cache limit is a number of bytes >= 0, got {nbytes!r}")
    dev = _devices(device)[0]
    p = pool(dev)
    with dev.lock:
        p.set_cache_limit(int(nbytes))


def pool_used_bytes(device=None) -> int:
    """Bytes of the device pool handed out and not yet freed, free-list blocks included (what a leak grows)."""
    dev = _devices(device)[0]
    p = pool(dev)
    with dev.lock:
        p.drain_pending()
        return p._pool_attr("CU_MEMPOOL_ATTR_USED_MEM_CURRENT")


def check_size(nbytes: int, dev: Device, what: str) -> None:
    """Refuse requests no GPU can satisfy before they reach the driver (whose size is a 64-bit integer)."""
    if nbytes > MAX_BYTES:
        raise ValueError(f"{what} needs {nbytes} bytes, over the 2^63 - 1 that a GPU allocation can ask for")
    if nbytes > dev.total_memory:
        raise OutOfMemoryError(f"cannot allocate {what}: it needs {_mib(nbytes)}, more than GPU {dev.ordinal} "
                               f"has in all ({_mib(dev.total_memory)})", "gpumat")


# -------------------------------------------------------------------------------------------------
# buffers
# -------------------------------------------------------------------------------------------------
def wait_for_streams(stream: int, others) -> None:
    """Make `stream` wait for work on other streams: `others` maps a stream handle to an event already
    recorded on it (waited for, then destroyed) or to None (the work queued on it so far; a stream gpumat
    closed is skipped: it was drained when it closed). A plain iterable of handles means None for each."""
    if stream in dead_streams:
        stream = LEGACY_STREAM
    items = others.items() if isinstance(others, dict) else ((h, None) for h in others)
    temp = None
    try:
        for s, ev in items:
            if ev is not None:
                if s != stream:
                    check(driver.cuStreamWaitEvent(stream, ev, 0), "cuStreamWaitEvent")
                driver.cuEventDestroy(ev)
                continue
            if s == stream or s in dead_streams:
                continue
            if temp is None:
                temp = check(driver.cuEventCreate(int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)), "cuEventCreate")
            check(driver.cuEventRecord(temp, s), "cuEventRecord")
            check(driver.cuStreamWaitEvent(stream, temp, 0), "cuStreamWaitEvent")
    finally:
        if temp is not None:
            driver.cuEventDestroy(temp)


class _Buffer:
    """What every Matrix's memory shares: the device, the stream it belongs to, and the lifetime rule.
    A long host transfer holds the buffer (hold/unhold, outside the device lock); release() marks it dead
    at once, so no new operation can use it, and lets go of the memory when the last hold ends."""

    __slots__ = ("ptr", "nbytes", "device", "stream", "others", "alive", "holds", "__weakref__")

    def hold(self) -> None:
        """Keep the memory through a transfer that runs outside the device lock (lock held when called)."""
        self.holds += 1

    def unhold(self) -> None:
        with self.device.lock:
            self.holds -= 1
            after = self._let_go() if self.holds == 0 and not self.alive else None
        if after is not None:
            after()

    def release(self) -> None:
        """Mark the buffer dead and let go of its memory (now, or when the last hold ends)."""
        with self.device.lock:
            if not self.alive:
                return
            self.alive = False
            after = self._let_go() if self.holds == 0 else None
        if after is not None:
            after()

    def _let_go(self):
        """Under the device lock: give the memory up; may return a callable to run after the lock."""
        raise NotImplementedError


class DeviceBuffer(_Buffer):
    """A block of device memory with one owner; views of a Matrix share it.

    `stream` is the stream it was allocated on and is freed on. When an operation uses the block on
    another stream, that stream first waits for the allocation, and the eventual free waits for that
    stream (see use_on). A long host transfer holds the block (hold/unhold): a free() meanwhile marks it
    dead at once and releases the memory when the transfer lets go."""

    __slots__ = ()
    borrowed = False

    def __init__(self, nbytes: int, stream: int = LEGACY_STREAM, dev: Device | None = None):
        self.ptr, self.nbytes, self.others, self.alive, self.holds = 0, nbytes, None, True, 0
        dev = self.device = dev or device()
        # tagged with a stream that outlives the buffer; use_on orders another library's stream after it
        self.stream = stream if stream in SPECIAL_STREAMS or stream in own_streams else LEGACY_STREAM
        if nbytes > 0:
            p = dev.memory or pool(dev)
            with dev.lock:
                self.ptr = p.alloc(nbytes, stream)

    def use_on(self, stream: int) -> None:
        """Order `stream` after this block's allocation the first time it is used there (lock held)."""
        if stream == self.stream:
            return
        others = self.others
        if others is None:
            others = self.others = {}
        elif stream in others:
            return
        wait_for_streams(stream, (self.stream,))
        others[stream] = None

    def used_on(self, stream: int) -> None:
        """After queueing work on another library's stream: remember an event instead of the handle."""
        event = check(driver.cuEventCreate(int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)), "cuEventCreate")
        check(driver.cuEventRecord(event, stream), "cuEventRecord")
        others = self.others
        if others is None:
            others = self.others = {}
        old = others.get(stream)
        if old is not None:
            driver.cuEventDestroy(old)
        others[stream] = event

    def _let_go(self) -> None:
        """Free the block, stream-ordered after every stream that used it."""
        ptr, self.ptr = self.ptr, 0
        if ptr:
            self.device.activate()  # events and frees below belong to this device's context
            if self.others:
                wait_for_streams(self.stream, self.others)
                self.others = None
            self.device.memory.free(ptr, self.nbytes, self.stream)
        return None

    def __del__(self):  # the safety net: only queue the block, never take a lock here
        if self.ptr:
            try:
                self.device.memory.pending.append((self.ptr, self.nbytes, self.stream, self.others))
            except Exception:  # interpreter shutdown: nothing useful left to do
                pass
            self.ptr = 0


class BorrowedBuffer(_Buffer):
    """Device memory that another library owns (imported through DLPack or the CUDA array interface).
    gpumat never frees it; releasing it drops the reference that keeps the producer alive (for DLPack,
    by calling the producer's deleter)."""

    __slots__ = ("owner", "_release")
    borrowed = True

    def __init__(self, ptr: int, nbytes: int, dev: Device, owner, release=None, stream: int = LEGACY_STREAM):
        self.ptr, self.nbytes, self.device, self.stream, self.others = ptr, nbytes, dev, stream, None
        self.alive, self.holds, self.owner, self._release = True, 0, owner, release

    def use_on(self, stream: int) -> None:
        pass  # the producer's stream order was settled at import; later uses are the caller's to order

    def used_on(self, stream: int) -> None:
        pass

    def _let_go(self):
        return self._drop  # the producer's deleter runs after the device lock is let go

    def _drop(self) -> None:
        owner, release, self.owner, self._release, self.ptr = self.owner, self._release, None, None, 0
        if release is not None:
            release(owner)

    def __del__(self):
        if self._release is not None:
            try:
                self._release(self.owner)
            except Exception:
                pass
            self._release = None


# -------------------------------------------------------------------------------------------------
# host <-> device copies
# -------------------------------------------------------------------------------------------------
HOST, DEV = driver.CUmemorytype.CU_MEMORYTYPE_HOST, driver.CUmemorytype.CU_MEMORYTYPE_DEVICE


def copy_2d_async(dst: int, dst_pitch: int, src: int, src_pitch: int, width_bytes: int, height: int,
                  dst_on_host: bool, src_on_host: bool, stream: int) -> None:
    """Queue a copy of `height` rows of `width_bytes` between pitched host or device memory."""
    if width_bytes == 0 or height == 0:
        return
    p = driver.CUDA_MEMCPY2D()
    p.srcMemoryType = HOST if src_on_host else DEV
    p.dstMemoryType = HOST if dst_on_host else DEV
    if src_on_host:
        p.srcHost = src
    else:
        p.srcDevice = src
    if dst_on_host:
        p.dstHost = dst
    else:
        p.dstDevice = dst
    p.srcPitch, p.dstPitch, p.WidthInBytes, p.Height = src_pitch, dst_pitch, width_bytes, height
    check(driver.cuMemcpy2DAsync(p, stream), "cuMemcpy2DAsync")


def copy_2d(dst: int, dst_pitch: int, src: int, src_pitch: int, width_bytes: int, height: int,
            dst_on_host: bool, src_on_host: bool, stream: int = LEGACY_STREAM) -> None:
    """Copy and wait for the copy."""
    copy_2d_async(dst, dst_pitch, src, src_pitch, width_bytes, height, dst_on_host, src_on_host, stream)
    check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")


def copy_device_2d(dst: int, dst_pitch: int, src: int, src_pitch: int, width_bytes: int, height: int,
                   stream: int) -> None:
    """Queue a device-to-device pitched copy (one contiguous copy when both sides are packed)."""
    if width_bytes == 0 or height == 0:
        return
    if (dst_pitch == width_bytes and src_pitch == width_bytes) or height == 1:
        check(driver.cuMemcpyDtoDAsync(dst, src, width_bytes * height if height > 1 else width_bytes, stream),
              "cuMemcpyDtoDAsync")
    else:
        copy_2d_async(dst, dst_pitch, src, src_pitch, width_bytes, height, False, False, stream)


def fill_2d(dst: int, pitch_bytes: int, value_bits: int, width: int, height: int, stream: int = LEGACY_STREAM) -> None:
    """Set a pitched 2-D region of 32-bit words to `value_bits` (e.g. 0, or a NaN pattern to poison)."""
    if width and height:
        check(driver.cuMemsetD2D32Async(dst, pitch_bytes, value_bits, width, height, stream), "cuMemsetD2D32Async")


def fill_bytes_2d(dst: int, pitch_bytes: int, value16: int, width_bytes: int, height: int,
                  stream: int = LEGACY_STREAM) -> None:
    """Set a pitched region to a repeated 16-bit pattern (width_bytes even), for any element size."""
    if width_bytes and height:
        check(driver.cuMemsetD2D16Async(dst, pitch_bytes, value16, width_bytes // 2, height, stream),
              "cuMemsetD2D16Async")


# pinned host memory ----------------------------------------------------------------------------
class PinnedBlock:
    """Page-locked host memory from cuMemHostAlloc; freed when the last array over it is collected."""

    def __init__(self, nbytes: int, dev: Device | None = None):
        (dev or device()).activate()  # a context must be current (portable memory serves every GPU)
        flags = driver.CU_MEMHOSTALLOC_PORTABLE
        self.ptr = int(check(driver.cuMemHostAlloc(max(nbytes, 1), flags), "cuMemHostAlloc"))
        self.nbytes = nbytes
        self._finalizer = weakref.finalize(self, _free_host, self.ptr)

    def array(self, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        raw = (ctypes.c_byte * max(count * dtype.itemsize, 1)).from_address(self.ptr)
        arr = np.frombuffer(raw, dtype=np.uint8, count=count * dtype.itemsize).view(dtype).reshape(shape)
        raw._gpumat_block = self  # the array's base: keeps the block alive as long as any array uses it
        return arr


def _free_host(ptr: int) -> None:
    try:
        driver.cuMemFreeHost(ptr)
    except Exception:
        pass


def pinned_empty(shape, dtype=np.float32) -> np.ndarray:
    """An uninitialised numpy array in page-locked (pinned) host memory: copies to and from the GPU
    run at the bus's full speed and can be asynchronous (`stream=`)."""
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"negative dimension in {shape}")
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
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
            flags = driver.CU_MEMHOSTREGISTER_PORTABLE
            if driver.cuMemHostRegister(start, end - start, flags)[0] != driver.CUresult.CUDA_SUCCESS:
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
            err = driver.cuMemHostUnregister(start)[0]
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
    # the plural query answers "unknown" for plain host memory instead of failing (a failed driver call
    # would be an API error under compute-sanitizer, and costs more)
    attr = driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    err, values = driver.cuPointerGetAttributes(1, [attr], a.ctypes.data)
    return err == driver.CUresult.CUDA_SUCCESS and int(values[0] or 0) == int(HOST)


# staged copies from and into pageable memory ----------------------------------------------------
STAGE_CHUNK = 8 << 20        # bytes a staging buffer holds
STAGE_BUFFERS = 6            # staging buffers in flight per device
STAGE_MIN = 4 << 20          # smaller pageable copies go straight through the driver (as fast up to here)
STAGE_THREADS = max(2, min(8, (os.cpu_count() or 2)))
STAGE_PIECE_MIN = 1 << 20    # a staged transfer is cut into pieces of at least this much, one a thread


class Staging:
    """Pinned buffers and host threads that move pageable arrays at more than the driver's pageable rate:
    host threads copy chunks into pinned buffers (numpy releases the GIL) while the copy engine moves
    the previous chunks; each buffer is reused only after its event says the DMA is done."""

    def __init__(self, dev: Device, chunk: int = STAGE_CHUNK, buffers: int = STAGE_BUFFERS):
        from concurrent.futures import ThreadPoolExecutor
        self.device = dev.activate()  # the events belong to this device's context
        self.chunk, self.count = chunk, buffers
        self.block = PinnedBlock(chunk * buffers, dev)
        self.events = [check(driver.cuEventCreate(int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)))
                       for _ in range(buffers)]
        self.busy = [False] * buffers
        self.lock = threading.Lock()    # one staged transfer at a time per Staging
        self.pool = ThreadPoolExecutor(STAGE_THREADS, thread_name_prefix="gpumat-stage")

    def host(self, i: int) -> int:
        return self.block.ptr + i * self.chunk

    def _wait(self, i: int) -> None:
        if self.busy[i]:
            check(driver.cuEventSynchronize(self.events[i]), "cuEventSynchronize")
            self.busy[i] = False

    def _plan(self, host: np.ndarray, dev_pitch: int):
        """How to cut a transfer: (byte view of host, row bytes, whole-bytes pieces?, step). A host array
        whose rows follow each other and a packed device side go as byte ranges; anything else (a
        tile of a bigger host matrix, a device view) goes as whole rows through 2-D copies. Pieces are
        at most a buffer, and small enough that every host thread gets one (a single thread copies
        pageable memory at a fraction of what several do), but not below STAGE_PIECE_MIN."""
        rows, row_bytes = host.shape[0], host.shape[1] * host.itemsize
        u8 = host.view(np.uint8)  # (rows, row_bytes); no copy: the rows themselves are contiguous
        piece = min(self.chunk, max(STAGE_PIECE_MIN, -(-rows * row_bytes // STAGE_THREADS)))
        if host.flags.c_contiguous and (dev_pitch == row_bytes or rows == 1):
            return u8.reshape(-1), row_bytes, True, -(-piece // 4096) * 4096
        if row_bytes > self.chunk:
            raise ValueError(f"a staged copy moves whole rows of at most {self.chunk} bytes, not {row_bytes}")
        return u8, row_bytes, False, max(1, min(self.chunk // row_bytes, -(-piece // row_bytes)))

    def _pieces(self, total: int, step: int, start_piece) -> None:
        """Cut [0, total) into pieces of `step`, piece n going through buffer n % count once the buffer's
        previous piece is done; start_piece(i, start, count) starts one and returns the future of its
        host work. Returns (or raises the first failure) after every piece's host work has finished."""
        with self.lock:
            self.device.activate()
            futures: list = [None] * self.count
            try:
                for n, start in enumerate(range(0, total, step)):
                    i = n % self.count
                    if futures[i] is not None:
                        futures[i].result()
                    futures[i] = start_piece(i, start, min(step, total - start))
            finally:
                _settle(futures)

    def upload(self, dst: int, dst_pitch: int, host: np.ndarray, stream: int) -> None:
        """host: 2-D with contiguous rows; its rows go to dst, dst_pitch bytes apart. Returns once `host`
        has been read (the last DMAs may still be in flight; the buffers wait for them before reuse)."""
        view, row_bytes, flat, step = self._plan(host, dst_pitch)

        def start_piece(i: int, start: int, count: int):
            self._wait(i)  # the buffer's last DMA has drained it
            return self.pool.submit(self._stage_in, i, view, start, count, dst, dst_pitch, row_bytes, flat, stream)
        self._pieces(view.shape[0], step, start_piece)

    def _stage_in(self, i, view, start, count, dst, dst_pitch, row_bytes, flat, stream) -> None:
        self.device.activate()
        nbytes = count if flat else count * row_bytes
        buf = np.frombuffer((ctypes.c_byte * nbytes).from_address(self.host(i)), dtype=np.uint8)
        if flat:
            np.copyto(buf, view[start:start + count])
            check(driver.cuMemcpyHtoDAsync(dst + start, self.host(i), count, stream), "cuMemcpyHtoDAsync")
        else:
            np.copyto(buf.reshape(count, row_bytes), view[start:start + count])
            copy_2d_async(dst + start * dst_pitch, dst_pitch, self.host(i), row_bytes, row_bytes, count,
                          dst_on_host=False, src_on_host=True, stream=stream)
        check(driver.cuEventRecord(self.events[i], stream), "cuEventRecord")
        self.busy[i] = True

    def download(self, host: np.ndarray, src: int, src_pitch: int, stream: int) -> None:
        """Fill a 2-D host array with contiguous rows from pitched device memory; returns when complete."""
        view, row_bytes, flat, step = self._plan(host, src_pitch)

        def start_piece(i: int, start: int, count: int):
            # queue the DMA into the buffer; a host thread drains it once its event completes
            if flat:
                check(driver.cuMemcpyDtoHAsync(self.host(i), src + start, count, stream), "cuMemcpyDtoHAsync")
            else:
                copy_2d_async(self.host(i), row_bytes, src + start * src_pitch, src_pitch, row_bytes, count,
                              dst_on_host=True, src_on_host=False, stream=stream)
            check(driver.cuEventRecord(self.events[i], stream), "cuEventRecord")
            return self.pool.submit(self._stage_out, i, view, start, count, row_bytes, flat)
        self._pieces(view.shape[0], step, start_piece)

    def _stage_out(self, i, view, start, count, row_bytes, flat) -> None:
        check(driver.cuEventSynchronize(self.events[i]), "cuEventSynchronize")
        nbytes = count if flat else count * row_bytes
        buf = np.frombuffer((ctypes.c_byte * nbytes).from_address(self.host(i)), dtype=np.uint8)
        np.copyto(view[start:start + count], buf if flat else buf.reshape(count, row_bytes))


def _settle(futures: list) -> None:
    """Wait for every piece of a staged transfer, then raise the first failure: on an error no host thread
    is left copying or queueing copies after the transfer has returned."""
    first = None
    for f in futures:
        if f is None:
            continue
        try:
            f.result()
        except BaseException as exc:
            first = first or exc
    if first is not None:
        raise first


def staging(dev: Device, role: str = "copies", chunk: int = STAGE_CHUNK, buffers: int = STAGE_BUFFERS) -> Staging:
    """The device's staging pipeline for `role` (made on first use, kept for the process): plain copies
    share one; the out-of-core product has one for uploads and one for downloads, so both run at once."""
    p = pool(dev)
    s = p.staging.get(role)
    if s is None:
        with dev.lock:
            s = p.staging.get(role)
            if s is None:
                s = p.staging[role] = Staging(dev, chunk, buffers)
    return s


def upload(dst: int, dst_pitch: int, host: np.ndarray, stream: int = LEGACY_STREAM, dev: Device | None = None,
           sync: bool = True) -> None:
    """host: a 2-D array whose rows are contiguous (C-contiguous, or a tile of a bigger array); its rows
    go to dst, dst_pitch bytes apart.

    Pinned sources are one DMA (asynchronous when sync is False); large pageable ones go through the
    staging pipeline; small ones through the driver."""
    if host.size == 0:
        return
    dev = dev or device()
    rows, row_bytes = host.shape[0], host.shape[1] * host.itemsize
    if host.nbytes >= STAGE_MIN and not is_pinned(host) and row_bytes <= STAGE_CHUNK:
        staging(dev).upload(dst, dst_pitch, host, stream)
        if sync:
            check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")
        return
    dev.activate()
    packed = host.flags.c_contiguous and (dst_pitch == row_bytes or rows == 1)
    if packed and sync and stream == LEGACY_STREAM:
        check(driver.cuMemcpyHtoD(dst, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")  # one call, in order
        return
    if packed:
        check(driver.cuMemcpyHtoDAsync(dst, host.ctypes.data, host.nbytes, stream), "cuMemcpyHtoDAsync")
    else:
        copy_2d_async(dst, dst_pitch, host.ctypes.data, host.strides[0] if rows > 1 else row_bytes, row_bytes, rows,
                      False, True, stream)
    if sync:
        check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")


def download(host: np.ndarray, src: int, src_pitch: int, stream: int = LEGACY_STREAM, dev: Device | None = None,
             sync: bool = True) -> None:
    """Fill a C-contiguous 2-D host array from pitched device memory (waits unless sync is False and the
    array is pinned)."""
    if host.size == 0:
        return
    dev = dev or device()
    rows, row_bytes = host.shape[0], host.shape[1] * host.itemsize
    if host.nbytes >= STAGE_MIN and not is_pinned(host) and row_bytes <= STAGE_CHUNK:
        staging(dev).download(host, src, src_pitch, stream)
        return
    dev.activate()
    packed = host.flags.c_contiguous and (src_pitch == row_bytes or rows == 1)
    if packed and sync and stream == LEGACY_STREAM:
        check(driver.cuMemcpyDtoH(host.ctypes.data, src, host.nbytes), "cuMemcpyDtoH")  # one call, in order
        return
    if packed:
        check(driver.cuMemcpyDtoHAsync(host.ctypes.data, src, host.nbytes, stream), "cuMemcpyDtoHAsync")
    else:
        copy_2d_async(host.ctypes.data, host.strides[0] if rows > 1 else row_bytes, src, src_pitch, row_bytes, rows,
                      True, False, stream)
    if sync:
        check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")


def upload_contiguous(dst: int, host: np.ndarray, stream: int = LEGACY_STREAM) -> None:
    """Copy a C-contiguous host array of any dtype and shape to dst, byte for byte, and wait."""
    if host.nbytes:
        flat = np.ascontiguousarray(host).reshape(1, -1).view(np.uint8)
        upload(dst, flat.nbytes, flat, stream)


def download_contiguous(host: np.ndarray, src: int, stream: int = LEGACY_STREAM) -> None:
    """Fill a C-contiguous host array of any dtype and shape from src, byte for byte (waits)."""
    if host.nbytes:
        download(host.reshape(1, -1).view(np.uint8), src, host.nbytes, stream)


def wait_for_streams_across(stream: int, other: int, other_dev: Device, dev: Device) -> None:
    """Make `stream` (on dev) wait for the work queued so far on `other` (on other_dev)."""
    other_dev.activate()
    event = check(driver.cuEventCreate(int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)), "cuEventCreate")
    try:
        check(driver.cuEventRecord(event, other), "cuEventRecord")
        dev.activate()
        check(driver.cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent")
    finally:
        driver.cuEventDestroy(event)


def zero_2d(dst: int, pitch_bytes: int, width_bytes: int, height: int, stream: int = LEGACY_STREAM) -> None:
    """Set a pitched region to zero bytes (any element size)."""
    if width_bytes and height:
        check(driver.cuMemsetD2D8Async(dst, pitch_bytes, 0, width_bytes, height, stream), "cuMemsetD2D8Async")
