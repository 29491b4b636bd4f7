"""The driver's memory calls, one thin function each: pool allocation, copies, fills, host memory.

Policy (what to cache, when to free, how to stage) lives in gpumat.memory; this module only speaks to
the driver and turns its results into Python values and exceptions.
"""

from __future__ import annotations

from functools import cache

from .bindings import CUresult, driver
from .errors import check, raise_error
from .streams import LEGACY_STREAM


@cache
def _stale_stream() -> frozenset:
    """What the driver answers for a stream another library owned and destroyed."""
    return frozenset(
        {
            CUresult.CUDA_ERROR_INVALID_HANDLE,
            CUresult.CUDA_ERROR_INVALID_RESOURCE_TYPE,
            CUresult.CUDA_ERROR_INVALID_CONTEXT,
        }
    )


# stream-ordered allocations from a device's default pool ---------------------------------------
def set_release_threshold(pool, nbytes: int) -> None:
    attr = driver.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
    check(driver.cuMemPoolSetAttribute(pool, attr, driver.cuuint64_t(int(nbytes))), "cuMemPoolSetAttribute")


def pool_attribute(pool, name: str) -> int:
    """A CUmemPool_attribute by name (e.g. CU_MEMPOOL_ATTR_USED_MEM_CURRENT) as an int."""
    attr = getattr(driver.CUmemPool_attribute, name)
    return int(check(driver.cuMemPoolGetAttribute(pool, attr), "cuMemPoolGetAttribute"))


def trim_pool(pool) -> None:
    check(driver.cuMemPoolTrimTo(pool, 0), "cuMemPoolTrimTo")


def alloc_async(nbytes: int, stream: int) -> int | None:
    """A block from the current context's default pool, ordered on `stream`; None when out of memory."""
    err, ptr = driver.cuMemAllocAsync(nbytes, stream)
    if err == CUresult.CUDA_ERROR_OUT_OF_MEMORY:
        return None
    if err:
        raise_error(err, "cuMemAllocAsync")
    return int(ptr)


def free_async(ptr: int, stream: int) -> None:
    """Free a pool block after the work queued on `stream`; when the stream has been destroyed behind
    gpumat's back, wait for the whole device and free it on the legacy stream instead."""
    (err,) = driver.cuMemFreeAsync(ptr, stream)
    if err in _stale_stream():
        check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
        (err,) = driver.cuMemFreeAsync(ptr, LEGACY_STREAM)
    if err:
        raise_error(err, "cuMemFreeAsync")


def mem_get_info() -> tuple[int, int]:
    """(free, total) bytes of the current context's GPU."""
    free_bytes, total = check(driver.cuMemGetInfo(), "cuMemGetInfo")
    return int(free_bytes), int(total)


def context_synchronize() -> None:
    check(driver.cuCtxSynchronize(), "cuCtxSynchronize")


def alloc_unpooled(nbytes: int) -> int:
    """A long-lived block outside the stream-ordered pool (per-device scratch that lives with the process)."""
    return int(check(driver.cuMemAlloc(nbytes), "cuMemAlloc"))


# copies and fills --------------------------------------------------------------------------------
def copy_2d_async(
    dst: int,
    dst_pitch: int,
    src: int,
    src_pitch: int,
    width_bytes: int,
    height: int,
    dst_on_host: bool,
    src_on_host: bool,
    stream: int,
) -> None:
    """Queue a copy of `height` rows of `width_bytes` between pitched host or device memory."""
    if width_bytes == 0 or height == 0:
        return
    p = driver.CUDA_MEMCPY2D()
    kind = driver.CUmemorytype
    p.srcMemoryType = kind.CU_MEMORYTYPE_HOST if src_on_host else kind.CU_MEMORYTYPE_DEVICE
    p.dstMemoryType = kind.CU_MEMORYTYPE_HOST if dst_on_host else kind.CU_MEMORYTYPE_DEVICE
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


def copy_device_2d(
    dst: int, dst_pitch: int, src: int, src_pitch: int, width_bytes: int, height: int, stream: int
) -> None:
    """Queue a device-to-device pitched copy (one contiguous copy when both sides are packed)."""
    if width_bytes == 0 or height == 0:
        return
    if (dst_pitch == width_bytes and src_pitch == width_bytes) or height == 1:
        check(
            driver.cuMemcpyDtoDAsync(dst, src, width_bytes * height if height > 1 else width_bytes, stream),
            "cuMemcpyDtoDAsync",
        )
    else:
        copy_2d_async(dst, dst_pitch, src, src_pitch, width_bytes, height, False, False, stream)


def copy_to_device(dst: int, src: int, nbytes: int, stream: int | None) -> None:
    """Host -> device, `nbytes` contiguous: at once and in order when stream is None, else queued."""
    if stream is None:
        check(driver.cuMemcpyHtoD(dst, src, nbytes), "cuMemcpyHtoD")
    else:
        check(driver.cuMemcpyHtoDAsync(dst, src, nbytes, stream), "cuMemcpyHtoDAsync")


def copy_to_host(dst: int, src: int, nbytes: int, stream: int | None) -> None:
    """Device -> host, `nbytes` contiguous: at once and in order when stream is None, else queued."""
    if stream is None:
        check(driver.cuMemcpyDtoH(dst, src, nbytes), "cuMemcpyDtoH")
    else:
        check(driver.cuMemcpyDtoHAsync(dst, src, nbytes, stream), "cuMemcpyDtoHAsync")


def copy_peer_2d_async(
    dst: int,
    dst_context,
    dst_pitch: int,
    src: int,
    src_context,
    src_pitch: int,
    width_bytes: int,
    height: int,
    stream: int,
) -> None:
    """Queue a copy between two GPUs' memory (peer to peer where they allow, else staged by the driver)."""
    if (dst_pitch == width_bytes and src_pitch == width_bytes) or height == 1:
        check(
            driver.cuMemcpyPeerAsync(dst, dst_context, src, src_context, width_bytes * height, stream),
            "cuMemcpyPeerAsync",
        )
        return
    p = driver.CUDA_MEMCPY3D_PEER()
    p.srcMemoryType = p.dstMemoryType = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
    p.srcDevice, p.srcContext, p.srcPitch, p.srcHeight = src, src_context, src_pitch, height
    p.dstDevice, p.dstContext, p.dstPitch, p.dstHeight = dst, dst_context, dst_pitch, height
    p.WidthInBytes, p.Height, p.Depth = width_bytes, height, 1
    check(driver.cuMemcpy3DPeerAsync(p, stream), "cuMemcpy3DPeerAsync")


def zero_2d(dst: int, pitch_bytes: int, width_bytes: int, height: int, stream: int = LEGACY_STREAM) -> None:
    """Set a pitched region to zero bytes (any element size)."""
    if width_bytes and height:
        check(driver.cuMemsetD2D8Async(dst, pitch_bytes, 0, width_bytes, height, stream), "cuMemsetD2D8Async")


def fill_bytes_2d(
    dst: int, pitch_bytes: int, value16: int, width_bytes: int, height: int, stream: int = LEGACY_STREAM
) -> None:
    """Set a pitched region to a repeated 16-bit pattern (width_bytes even), for any element size."""
    if width_bytes and height:
        check(
            driver.cuMemsetD2D16Async(dst, pitch_bytes, value16, width_bytes // 2, height, stream), "cuMemsetD2D16Async"
        )


def zero(dst: int, nbytes: int) -> None:
    check(driver.cuMemsetD8(dst, 0, nbytes), "cuMemsetD8")


# host memory -------------------------------------------------------------------------------------
def host_alloc(nbytes: int) -> int:
    """Page-locked host memory usable by every GPU (portable), for DMA at the bus's full speed."""
    return int(check(driver.cuMemHostAlloc(max(nbytes, 1), driver.CU_MEMHOSTALLOC_PORTABLE), "cuMemHostAlloc"))


def host_alloc_mapped(nbytes: int) -> tuple[int, int]:
    """Page-locked host memory that kernels on the current context's device read and write in place (mapped
    into the device's address space; portable): (the host's pointer, the device's pointer to it)."""
    flags = driver.CU_MEMHOSTALLOC_PORTABLE | driver.CU_MEMHOSTALLOC_DEVICEMAP
    host = int(check(driver.cuMemHostAlloc(max(nbytes, 1), flags), "cuMemHostAlloc"))
    try:
        device = int(check(driver.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer"))
    except BaseException:
        host_free(host)
        raise
    return host, device


def host_free(ptr: int) -> None:
    """Free host_alloc memory (from finalizers: errors at interpreter shutdown are ignored)."""
    try:
        driver.cuMemFreeHost(ptr)
    except Exception:
        pass


def host_register(start: int, nbytes: int) -> bool:
    """Page-lock an existing host range for every GPU; False when the driver refuses it."""
    (err,) = driver.cuMemHostRegister(start, nbytes, driver.CU_MEMHOSTREGISTER_PORTABLE)
    return err == CUresult.CUDA_SUCCESS


def host_unregister(start: int):
    """Undo host_register; returns the CUresult (0 on success) so callers can unlock every range first."""
    return driver.cuMemHostUnregister(start)[0]


def is_page_locked(ptr: int) -> bool:
    """Whether the driver knows `ptr` as page-locked host memory. The plural query answers "unknown" for
    plain host memory instead of failing (a failed call would be an API error under compute-sanitizer)."""
    attr = driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    err, values = driver.cuPointerGetAttributes(1, [attr], ptr)
    return err == CUresult.CUDA_SUCCESS and int(values[0] or 0) == int(driver.CUmemorytype.CU_MEMORYTYPE_HOST)


def pointer_device_ordinal(ptr: int) -> int | None:
    """The GPU a device pointer belongs to, or None when the driver does not know it as GPU memory."""
    attr = driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    err, ordinal = driver.cuPointerGetAttribute(attr, ptr)
    return None if err else int(ordinal)
