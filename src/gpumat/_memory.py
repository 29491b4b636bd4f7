"""Device memory: stream-ordered allocations from the device's memory pool, and host<->device copies.

The pool's release threshold is raised so freed blocks stay cached in the pool: allocating and
freeing in a loop then costs a few microseconds instead of a trip to the OS driver each time.
"""
from __future__ import annotations

import threading

import numpy as np
from cuda.bindings import driver

from ._driver import OutOfMemoryError, check, device, raise_error

_pool = None

# Small blocks are kept on a free list of their own: every operation runs in stream order on the
# default stream, so a block freed after a launch can serve the next allocation at once, without the
# two driver calls (about 3.5 us) that a pool allocation and its release cost.
SMALL_BLOCK = 1 << 20
KEEP_PER_SIZE = 16
KEEP_BYTES = 64 << 20   # the most the free list holds in all


class _SmallBlocks:
    def __init__(self):
        self.by_size: dict[int, list[int]] = {}
        self.bytes = 0
        self.lock = threading.Lock()

    def take(self, nbytes: int) -> int:
        """A kept block of exactly nbytes, or 0."""
        if not self.by_size.get(nbytes):  # the common miss, without the lock
            return 0
        with self.lock:
            kept = self.by_size[nbytes]
            if not kept:
                return 0
            self.bytes -= nbytes
            return kept.pop()

    def give(self, ptr: int, nbytes: int) -> bool:
        """Keep the block if there is room; False means the caller frees it."""
        with self.lock:
            kept = self.by_size.setdefault(nbytes, [])
            if len(kept) >= KEEP_PER_SIZE or self.bytes + nbytes > KEEP_BYTES:
                return False
            kept.append(ptr)
            self.bytes += nbytes
            return True

    def drain(self) -> list[int]:
        with self.lock:
            blocks = [ptr for kept in self.by_size.values() for ptr in kept]
            self.by_size.clear()
            self.bytes = 0
        return blocks


small_blocks = _SmallBlocks()


def _mempool():
    global _pool
    if _pool is None:
        dev = device()
        pool = check(driver.cuDeviceGetDefaultMemPool(dev.handle), "cuDeviceGetDefaultMemPool")
        check(driver.cuMemPoolSetAttribute(pool, driver.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                           driver.cuuint64_t(2**64 - 1)), "cuMemPoolSetAttribute")
        _pool = pool
    return _pool


def release_cached() -> None:
    """Wait for the GPU, then hand the free list's and the pool's cached blocks back to the driver,
    so that other libraries (and cuMemGetInfo) see that memory as free again."""
    pool = _mempool()
    for ptr in small_blocks.drain():
        free(ptr)
    check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
    check(driver.cuMemPoolTrimTo(pool, 0), "cuMemPoolTrimTo")


def pool_used_bytes() -> int:
    """Bytes of the device pool handed out and not yet freed (what a leak would grow)."""
    attr = driver.CUmemPool_attribute.CU_MEMPOOL_ATTR_USED_MEM_CURRENT
    return int(check(driver.cuMemPoolGetAttribute(_mempool(), attr), "cuMemPoolGetAttribute"))


def alloc(nbytes: int, stream=0) -> int:
    if nbytes <= 0:
        return 0
    if nbytes <= SMALL_BLOCK and stream == 0:
        ptr = small_blocks.take(nbytes)
        if ptr:
            return ptr
    if _pool is None:
        _mempool()
    else:
        device()
    err, ptr = driver.cuMemAllocAsync(nbytes, stream)
    if err == driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
        release_cached()  # blocks cached in the pool may be what is in the way: try once more without them
        err, ptr = driver.cuMemAllocAsync(nbytes, stream)
    if err == driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY:
        free_bytes, total = check(driver.cuMemGetInfo(), "cuMemGetInfo")
        raise OutOfMemoryError(err, "CUDA_ERROR_OUT_OF_MEMORY",
                               f"cannot allocate {nbytes / 2**20:.1f} MiB on the GPU "
                               f"({free_bytes / 2**20:.1f} MiB free of {total / 2**20:.1f} MiB)", "cuMemAllocAsync")
    if err:
        raise_error(err, "cuMemAllocAsync")
    return int(ptr)


def free(ptr: int, stream=0, nbytes: int = 0) -> None:
    """Release a block from alloc; with its size, a small block goes to the free list instead."""
    if ptr and 0 < nbytes <= SMALL_BLOCK and stream == 0 and small_blocks.give(ptr, nbytes):
        return
    if ptr:
        device()  # a finalizer may run in a thread where the context is not yet current
        err, = driver.cuMemFreeAsync(ptr, stream)
        if err:
            raise_error(err, "cuMemFreeAsync")


class DeviceBuffer:
    """A block of device memory with one owner; views of a Matrix share it."""

    __slots__ = ("ptr", "nbytes")

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self.ptr = 0
        self.ptr = alloc(nbytes)

    @property
    def alive(self) -> bool:
        return self.ptr != 0 or self.nbytes == 0

    def release(self) -> None:
        ptr, nbytes, self.ptr, self.nbytes = self.ptr, self.nbytes, 0, -1
        if ptr:
            free(ptr, nbytes=nbytes)

    def __del__(self):  # the safety net; explicit release() is the normal path
        if self.ptr:
            try:
                free(self.ptr, nbytes=self.nbytes)
            except Exception:  # interpreter shutdown or a dead context: nothing useful left to do
                pass
            self.ptr = 0


def copy_2d(dst: int, dst_pitch: int, src: int, src_pitch: int, width_bytes: int, height: int,
            dst_on_host: bool, src_on_host: bool) -> None:
    """Copy `height` rows of `width_bytes` between pitched host or device memory (synchronous)."""
    if width_bytes == 0 or height == 0:
        return
    host, dev = driver.CUmemorytype.CU_MEMORYTYPE_HOST, driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
    p = driver.CUDA_MEMCPY2D()
    p.srcMemoryType = host if src_on_host else dev
    p.dstMemoryType = host if dst_on_host else dev
    if src_on_host:
        p.srcHost = src
    else:
        p.srcDevice = src
    if dst_on_host:
        p.dstHost = dst
    else:
        p.dstDevice = dst
    p.srcPitch, p.dstPitch, p.WidthInBytes, p.Height = src_pitch, dst_pitch, width_bytes, height
    check(driver.cuMemcpy2D(p), "cuMemcpy2D")


def upload_contiguous(dst: int, host: np.ndarray) -> None:
    """Copy a C-contiguous host array of any dtype to dst, byte for byte."""
    if host.nbytes:
        device()
        check(driver.cuMemcpyHtoD(dst, host.ctypes.data, host.nbytes), "cuMemcpyHtoD")


def download_contiguous(host: np.ndarray, src: int) -> None:
    """Fill a C-contiguous host array of any dtype from src, byte for byte (waits for the GPU)."""
    if host.nbytes:
        device()
        check(driver.cuMemcpyDtoH(host.ctypes.data, src, host.nbytes), "cuMemcpyDtoH")


def upload(dst: int, dst_pitch: int, host: np.ndarray) -> None:
    """host: C-contiguous 2-D array, its rows going to dst dst_pitch bytes apart."""
    rows, row_bytes = host.shape[0], host.shape[1] * host.itemsize
    if dst_pitch == row_bytes or rows <= 1:
        upload_contiguous(dst, host)
    else:
        copy_2d(dst, dst_pitch, host.ctypes.data, row_bytes, row_bytes, rows, dst_on_host=False, src_on_host=True)


def download(host: np.ndarray, src: int, src_pitch: int) -> None:
    rows, row_bytes = host.shape[0], host.shape[1] * host.itemsize
    if src_pitch == row_bytes or rows <= 1:
        download_contiguous(host, src)
    else:
        copy_2d(host.ctypes.data, row_bytes, src, src_pitch, row_bytes, rows, dst_on_host=True, src_on_host=False)


def fill_2d(dst: int, pitch_bytes: int, value_bits: int, width: int, height: int, stream=0) -> None:
    """Set a pitched 2-D region of 32-bit words to `value_bits` (e.g. 0, or a NaN pattern to poison)."""
    if width and height:
        device()
        check(driver.cuMemsetD2D32Async(dst, pitch_bytes, value_bits, width, height, stream), "cuMemsetD2D32Async")
