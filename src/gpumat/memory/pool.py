"""Device memory: each GPU's pool of stream-ordered allocations, its limits, and the public memory API.

The memory policy (README, "Memory"):
- Blocks come from the device's default memory pool with cuMemAllocAsync on the operation's stream.
  The pool keeps freed memory for reuse up to its release threshold (the cache limit: 1/16 of the
  GPU's memory, at most 2 GiB, by default); past it, the driver hands memory back to the system at
  the next synchronisation, so an idle gpumat never sits on the whole GPU.
- Blocks up to 16 MiB (128 MiB in all, 32 MiB of one size for one stream) are also kept on a free list
  of their own, per stream, so a product's result or scratch of that size costs no driver call (each
  cuMemAllocAsync / cuMemFreeAsync pair also cost about 1 us of the stream's GPU time on the H200: a
  4 MiB transpose 4.5 -> 3.4 us, a split product's 2 MiB partials 8.6 -> 7.8); a block on it is
  reused only on the stream it was freed on, which keeps the reuse in stream order (for another
  library's stream: on that same stream, its Foreign, never a new stream behind a reused handle).
  Blocks of a stream gpumat has closed go back to the driver pool at the next allocation (the stream
  was drained when it closed).
- After an out-of-memory failure everything cached is handed back, and the allocation tried again.
- `release_cached()` hands back all cached memory now; `memory_info()` says what is used, cached and
  the peak; `set_memory_limit()` caps what gpumat may hold on a device.

Finalizers never take a lock: a block whose Matrix was collected goes on a queue (deque.append is
atomic) that the next allocation or free on that device drains. So the cycle collector, which can
run inside any allocation, never re-enters a lock a thread already holds.
"""

from __future__ import annotations

import collections

import numpy as np

from ..runtime import memops, streams
from ..runtime.devices import Device, as_device, device
from ..runtime.errors import OutOfMemoryError
from ..runtime.streams import LEGACY_STREAM, Foreign, abandoned, dead_streams, trusted

SMALL_BLOCK = 16 << 20
KEEP_PER_SIZE = 16
KEEP_BYTES = 128 << 20  # the most the small-block free list holds in all
# the most it holds of one size for one stream: eight live 16 MiB results of a stream, freed, would
# otherwise fill it, and every other size freed on that stream would go to the driver (eviction takes
# other streams' blocks, never the freeing stream's own)
KEEP_PER_KEY_BYTES = KEEP_BYTES // 4
MAX_BYTES = 2**63 - 1  # no request reaches the driver above this (its size argument is 64-bit)


class _SmallBlocks:
    """The free list: blocks by (size, stream), the stream a handle of gpumat's or the legacy stream, or
    another library's stream's Foreign. Only called with the device's lock held."""

    def __init__(self):
        self.by_key: dict[tuple, list[int]] = {}
        self.bytes = 0

    def take(self, nbytes: int, stream: int) -> int:
        key = (nbytes, stream)
        kept = self.by_key.get(key)
        if not kept:
            return 0
        self.bytes -= nbytes
        ptr = kept.pop()
        if not kept:  # no empty lists: the keys of streams never seen again would pile up
            del self.by_key[key]
        return ptr

    def give(self, ptr: int, nbytes: int, stream: int) -> bool:
        """Keep the block if there is room; False means the caller frees it."""
        if self.bytes + nbytes > KEEP_BYTES:
            return False
        kept = self.by_key.get((nbytes, stream))
        if kept is None:
            kept = self.by_key[(nbytes, stream)] = []
        elif len(kept) >= KEEP_PER_SIZE or (len(kept) + 1) * nbytes > KEEP_PER_KEY_BYTES:
            return False
        kept.append(ptr)
        self.bytes += nbytes
        return True

    def evict(self, room: int, keep) -> list[tuple[int, int, int]]:
        """Remove whole keys' blocks, those given first first, other than `keep`'s, until `room` more bytes
        fit under KEEP_BYTES; return them (ptr, nbytes, stream) for the caller to free. The free list is
        keyed by stream, and another library's stream may never come back (a new PyTorch stream a step):
        without this its blocks would hold the list full, and every other small free would go to the
        driver."""
        out = []
        for key in list(self.by_key):
            if self.bytes + room <= KEEP_BYTES:
                break
            if key[1] == keep:
                continue
            nbytes = key[0]
            kept = self.by_key.pop(key)
            out += [(p, nbytes, key[1]) for p in kept]
            self.bytes -= nbytes * len(kept)
        return out

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
        self.handle = dev.default_mem_pool()
        self.small = _SmallBlocks()
        self.pending: collections.deque = collections.deque()  # (ptr, nbytes, stream, others) from finalizers
        self.closed_seen = streams.closed_generation  # stream closes already swept from the free list
        self.used = 0  # bytes in live gpumat buffers (the free list's blocks are not counted)
        self.peak = 0
        self.limit: int | None = None
        self.cache_limit = 0
        self.set_cache_limit(min(dev.total_memory // 16, 2 << 30))

    def set_cache_limit(self, nbytes: int) -> None:
        memops.set_release_threshold(self.handle, nbytes)
        self.cache_limit = int(nbytes)

    def _pool_attr(self, name: str) -> int:
        return memops.pool_attribute(self.handle, name)

    # allocation ------------------------------------------------------------------------------
    def alloc(self, nbytes: int, stream: int, f: Foreign | None = None) -> int:
        """A block of nbytes for use on `stream` (stream-ordered). Caller holds the device lock. `f`: for
        another library's stream, its Foreign (small blocks kept for that stream are reused)."""
        if self.closed_seen != streams.closed_generation:
            self.sweep_closed_streams()
        pending = self.pending
        if pending or abandoned:
            # the common case on the launch path: the last result, dropped and collected, has just the
            # size and stream wanted; take it over directly (it is still counted as used). On another
            # library's stream: a block allocated and used on that same stream alone (its Foreign, so
            # not a new stream behind a reused handle), as the free list would hand it back.
            head = pending[0] if pending else None
            if (
                head is not None
                and head[1] == nbytes
                and nbytes <= SMALL_BLOCK
                and (
                    (head[3] is None and head[2] == stream and trusted(stream))
                    or (f is not None and head[2] is f and len(head[3]) == 1 and head[3].get(f) is f)
                )
            ):
                pending.popleft()  # only drains (all under this lock) take from the left: this is `head`
                if pending:
                    self.drain_pending()
                return head[0]
            self.drain_pending()
        if self.limit is not None and self.used + nbytes > self.limit:  # kept blocks count against it too
            self.release_cached()  # the free list's blocks count against nothing, but hand them back anyway
            raise OutOfMemoryError(
                f"cannot allocate {_mib(nbytes)} on GPU {self.device.ordinal}: gpumat's memory limit is "
                f"{_mib(self.limit)} and {_mib(self.used)} is in use",
                "gpumat.set_memory_limit",
            )
        if nbytes <= SMALL_BLOCK and (f is not None or trusted(stream)):
            ptr = self.small.take(nbytes, stream if f is None else f)
            if ptr:
                self._count(nbytes)
                return ptr
        ptr = memops.alloc_async(nbytes, stream)
        if ptr is None:
            self.release_cached()  # cached blocks may be what is in the way: try once more without them
            ptr = memops.alloc_async(nbytes, stream)
        if ptr is None:
            free_bytes, total = memops.mem_get_info()
            raise OutOfMemoryError(
                f"cannot allocate {_mib(nbytes)} on GPU {self.device.ordinal} "
                f"({_mib(free_bytes)} free of {_mib(total)})",
                "cuMemAllocAsync",
            )
        self._count(nbytes)
        return ptr

    def _count(self, nbytes: int) -> None:
        self.used += nbytes
        if self.used > self.peak:
            self.peak = self.used

    def free(self, ptr: int, nbytes: int, stream: int) -> None:
        """Release a block from alloc after the work queued on `stream`. Caller holds the device lock."""
        self.used -= nbytes
        if stream in dead_streams:  # its stream was closed (and drained first): any stream orders the free
            stream = LEGACY_STREAM
        if (
            nbytes <= SMALL_BLOCK
            and trusted(stream)
            and (self.small.give(ptr, nbytes, stream) or self._keep_making_room(ptr, nbytes, stream))
        ):
            return
        memops.free_async(ptr, stream)

    def _keep_making_room(self, ptr: int, nbytes: int, stream) -> bool:
        """After the free list refused a small block for `stream` (lock held): where it refused for want of
        room, hand back the blocks kept longest for other streams and keep this one; False: the caller
        frees it. (Only a refused block gets here: the common free is the one give() call.)"""
        small = self.small
        if small.bytes + nbytes <= KEEP_BYTES:  # its size's list is full: that is no lack of room
            return False
        for old_ptr, _, old_stream in small.evict(nbytes, stream):
            self._dispose(old_ptr, old_stream)
        return small.give(ptr, nbytes, stream)

    def release(self, ptr: int, nbytes: int, stream, others) -> None:
        """Free a buffer's block after every stream that used it (lock held). `stream`: its allocation
        stream, or for another library's stream its Foreign: a small block used on that stream alone is
        kept for it, since its next use there follows this one in the stream's own order (nothing waits);
        any other goes to the legacy stream after the stream's mark."""
        if stream.__class__ is Foreign:
            used_there_alone = len(others) == 1 and others.get(stream) is stream  # and marked after it
            if (
                nbytes <= SMALL_BLOCK
                and used_there_alone
                and (self.small.give(ptr, nbytes, stream) or self._keep_making_room(ptr, nbytes, stream))
            ):
                self.used -= nbytes
                return
            stream = LEGACY_STREAM
        if others:
            if stream in dead_streams:  # a closed stream of gpumat's (drained when it closed): the legacy one
                stream = LEGACY_STREAM  # waits (its handle may name another library's stream now), as free() frees
            streams.wait_for_streams(stream, others)
        self.free(ptr, nbytes, stream)

    def _dispose(self, ptr: int, stream) -> None:
        """Hand a free-list block back to the driver pool (lock held)."""
        if stream.__class__ is Foreign:  # kept for another library's stream: after its last use there
            streams.wait_for_streams(LEGACY_STREAM, {stream: stream})
            memops.free_async(ptr, LEGACY_STREAM)
        else:
            memops.free_async(ptr, LEGACY_STREAM if stream in dead_streams else stream)

    def drain_pending(self) -> None:
        """Free the blocks finalizers queued, and close the streams collected unclosed (lock held)."""
        pending = self.pending
        while pending:
            try:
                ptr, nbytes, stream, others = pending.popleft()
            except IndexError:
                break
            self.release(ptr, nbytes, stream, others)
        streams.close_abandoned(self.device)

    def sweep_closed_streams(self) -> None:
        """Hand the free-list blocks of streams gpumat has closed back to the driver pool (lock held):
        each stream was drained before it was destroyed, so the legacy stream orders the free."""
        self.closed_seen = streams.closed_generation
        for ptr, nbytes, s in self.small.drain():
            if s in dead_streams or not self.small.give(ptr, nbytes, s):
                self._dispose(ptr, s)

    def release_cached(self) -> None:
        """Hand every cached block back: the free list to the pool, then the pool to the system."""
        self.drain_pending()
        for ptr, _, s in self.small.drain():
            self._dispose(ptr, s)
        memops.context_synchronize()
        memops.trim_pool(self.handle)

    def info(self) -> dict:
        reserved = self._pool_attr("CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT")
        free_bytes, total = memops.mem_get_info()
        return {
            "device": self.device.ordinal,
            "used": self.used,
            "cached": max(reserved - self.used, 0),
            "peak": self.peak,
            "limit": self.limit,
            "cache_limit": self.cache_limit,
            "gpu_free": int(free_bytes),
            "gpu_total": int(total),
        }


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def device_pool(dev: Device) -> Pool:
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
    p = dev.memory or device_pool(dev)
    with dev.lock:
        return p.alloc(nbytes, stream)


def free(ptr: int, stream: int = LEGACY_STREAM, nbytes: int = 0, dev: Device | None = None) -> None:
    if not ptr:
        return
    dev = dev or device()
    with dev.lock:
        dev.memory.free(ptr, nbytes, stream)


# -------------------------------------------------------------------------------------------------
# the public memory functions
# -------------------------------------------------------------------------------------------------
def release_cached(device=None) -> None:
    """Wait for the GPU, then hand every block gpumat keeps cached back to the system.

    Its free list of small blocks and the driver pool's reserve go back, so other processes and
    libraries can use that memory. Live matrices are untouched.

    Parameters
    ----------
    device : Device or int, optional
        The GPU; the current device by default.

    Raises
    ------
    NoDeviceError
        No usable GPU.

    Examples
    --------
    >>> gm.release_cached()  # doctest: +GPU
    """
    dev = as_device(device)
    p = device_pool(dev)
    with dev.lock:
        dev.activate()
        p.release_cached()


def memory_info(device=None) -> dict:
    """What gpumat holds on a device, in bytes.

    Parameters
    ----------
    device : Device or int, optional
        The GPU; the current device by default.

    Returns
    -------
    dict
        ``device`` (its index); ``used`` (live matrices and scratch); ``cached`` (freed, kept for
        reuse); ``peak`` (the most ``used`` since the start or :func:`reset_peak`); ``limit`` (see
        :func:`set_memory_limit`, None for none); ``cache_limit`` (see :func:`set_cache_limit`);
        ``gpu_free`` and ``gpu_total`` (the driver's view of the whole GPU).

    Raises
    ------
    NoDeviceError
        No usable GPU.

    Examples
    --------
    >>> info = gm.memory_info()  # doctest: +GPU
    >>> sorted(info)
    ['cache_limit', 'cached', 'device', 'gpu_free', 'gpu_total', 'limit', 'peak', 'used']
    """
    dev = as_device(device)
    p = device_pool(dev)
    with dev.lock:
        dev.activate()
        p.drain_pending()
        return p.info()


def reset_peak(device=None) -> None:
    """Start the peak of :func:`memory_info` again from what is in use now.

    Parameters
    ----------
    device : Device or int, optional
        The GPU; the current device by default.

    Raises
    ------
    NoDeviceError
        No usable GPU.

    Examples
    --------
    >>> gm.reset_peak()  # doctest: +GPU
    >>> info = gm.memory_info()
    >>> info["peak"] == info["used"]
    True
    """
    dev = as_device(device)
    p = device_pool(dev)
    with dev.lock:
        p.peak = p.used


def set_memory_limit(nbytes: int | None, device=None) -> None:
    """Cap the bytes gpumat may hold in live buffers on a device.

    Past it, allocations raise :class:`OutOfMemoryError` as if the GPU were that small.

    Parameters
    ----------
    nbytes : int or None
        The cap in bytes; None removes it.
    device : Device or int, optional
        The GPU; the current device by default.

    Raises
    ------
    ValueError
        A negative number, or not a number of bytes.
    NoDeviceError
        No usable GPU.

    Examples
    --------
    >>> gm.set_memory_limit(1 << 20)  # doctest: +GPU
    >>> try:
    ...     gm.Matrix.empty(1024, 1024)
    ... except gm.OutOfMemoryError:
    ...     print("over the limit")
    over the limit
    >>> gm.set_memory_limit(None)
    """
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 0):
        raise ValueError(f"the memory limit is a number of bytes >= 0, or None, got {nbytes!r}")
    dev = as_device(device)
    p = device_pool(dev)
    with dev.lock:
        p.limit = None if nbytes is None else int(nbytes)


def set_cache_limit(nbytes: int, device=None) -> None:
    """How many freed bytes the device's pool may keep for reuse past a synchronisation.

    The driver's release threshold: above it, the driver hands memory back at the next
    synchronisation, so an idle gpumat never sits on the GPU. By default 1/16 of the GPU's memory, at
    most 2 GiB.

    Parameters
    ----------
    nbytes : int
        Bytes, in [0, 2**64).
    device : Device or int, optional
        The GPU; the current device by default.

    Raises
    ------
    ValueError
        A number out of range, or not a number of bytes.
    NoDeviceError
        No usable GPU.

    Examples
    --------
    >>> before = gm.memory_info()["cache_limit"]  # doctest: +GPU
    >>> gm.set_cache_limit(256 << 20)
    >>> gm.memory_info()["cache_limit"]
    268435456
    >>> gm.set_cache_limit(before)
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or not 0 <= nbytes < 2**64:
        raise ValueError(f"the cache limit is a number of bytes in [0, 2**64), got {nbytes!r}")
    dev = as_device(device)
    p = device_pool(dev)
    with dev.lock:
        p.set_cache_limit(int(nbytes))


def pool_used_bytes(device=None) -> int:
    """Bytes of the device pool handed out and not yet freed, free-list blocks included (what a leak grows)."""
    dev = as_device(device)
    p = device_pool(dev)
    with dev.lock:
        p.drain_pending()
        return p._pool_attr("CU_MEMPOOL_ATTR_USED_MEM_CURRENT")


def check_size(nbytes: int, dev: Device, what: str) -> None:
    """Refuse requests no GPU can satisfy before they reach the driver (whose size is a 64-bit integer)."""
    if nbytes > MAX_BYTES:
        raise ValueError(f"{what} needs {nbytes} bytes, over the 2^63 - 1 that a GPU allocation can ask for")
    if nbytes > dev.total_memory:
        raise OutOfMemoryError(
            f"cannot allocate {what}: it needs {_mib(nbytes)}, more than GPU {dev.ordinal} "
            f"has in all ({_mib(dev.total_memory)})",
            "gpumat",
        )
