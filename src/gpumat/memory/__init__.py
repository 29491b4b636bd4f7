"""gpumat's memory, by resource: the pool of device blocks and its limits (pool), device buffers and
their lifetime rule (buffers), pinned and page-locked host memory (host), and copies between numpy
arrays and the device, staged through pinned buffers where that is faster (staging)."""

from .buffers import BorrowedBuffer, DeviceBuffer
from .host import PinnedBlock, is_pinned, lock_host, pinned_empty, unlock_host
from .pool import (
    Pool,
    alloc,
    check_size,
    device_pool,
    free,
    memory_info,
    pool_used_bytes,
    release_cached,
    reset_peak,
    set_cache_limit,
    set_memory_limit,
)
from .staging import Staging, download, download_contiguous, staging, upload, upload_contiguous

__all__ = [
    "BorrowedBuffer",
    "DeviceBuffer",
    "PinnedBlock",
    "is_pinned",
    "lock_host",
    "pinned_empty",
    "unlock_host",
    "Pool",
    "alloc",
    "check_size",
    "device_pool",
    "free",
    "memory_info",
    "pool_used_bytes",
    "release_cached",
    "reset_peak",
    "set_cache_limit",
    "set_memory_limit",
    "Staging",
    "download",
    "download_contiguous",
    "staging",
    "upload",
    "upload_contiguous",
]
