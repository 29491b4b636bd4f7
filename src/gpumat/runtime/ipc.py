"""The driver's interprocess calls: device memory and events that another process on this host can open.

One thin function each (policy, who frees what and when, lives in gpumat.dask.transfer). Memory to be
shared is a plain cuMemAlloc block (the stream-ordered pool's blocks cannot be exported this way); its
64-byte handle opens it in another process, which maps it into its own context (peer access enabled on
the way where the GPUs differ). An interprocess event (timing-free) orders the other process's stream
after the work recorded here, with no host wait on either side.
"""

from __future__ import annotations

from .bindings import driver
from .errors import check

HANDLE_BYTES = 64  # CU_IPC_HANDLE_SIZE


def alloc_shareable(nbytes: int) -> int:
    """A block of the current context's GPU that IpcGetMemHandle can export (cuMemAlloc, not the pool)."""
    return int(check(driver.cuMemAlloc(nbytes), "cuMemAlloc"))


def free_shareable(ptr: int) -> None:
    """Free a block from alloc_shareable (the driver waits for the work queued on it)."""
    check(driver.cuMemFree(ptr), "cuMemFree")


def memory_handle(ptr: int) -> bytes:
    """The interprocess handle of an alloc_shareable block, as bytes."""
    handle = check(driver.cuIpcGetMemHandle(ptr), "cuIpcGetMemHandle")
    return bytes(handle.reserved)


def open_memory(handle: bytes) -> int:
    """Map another process's block into the current context: its address here."""
    h = driver.CUipcMemHandle()
    h.reserved = handle
    flags = int(driver.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
    return int(check(driver.cuIpcOpenMemHandle(h, flags), "cuIpcOpenMemHandle"))


def close_memory(ptr: int) -> None:
    """Unmap a block from open_memory (the exporting process still owns it)."""
    check(driver.cuIpcCloseMemHandle(ptr), "cuIpcCloseMemHandle")


def shareable_event():
    """A timing-free event of the current context that another process can open and wait for."""
    flags = int(driver.CUevent_flags.CU_EVENT_INTERPROCESS) | int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    return check(driver.cuEventCreate(flags), "cuEventCreate")


def event_handle(event) -> bytes:
    """The interprocess handle of a shareable_event, as bytes."""
    handle = check(driver.cuIpcGetEventHandle(event), "cuIpcGetEventHandle")
    return bytes(handle.reserved)


def open_event(handle: bytes):
    """Another process's event, opened in the current context (destroy it with destroy_event)."""
    h = driver.CUipcEventHandle()
    h.reserved = handle
    return check(driver.cuIpcOpenEventHandle(h), "cuIpcOpenEventHandle")


def stream_wait(stream: int, event) -> None:
    """Queue on `stream` a wait for the last work recorded on `event` (no host wait)."""
    check(driver.cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent")


def event_done(event) -> bool:
    """Whether the work recorded on `event` has run (cuEventQuery; never waits)."""
    (err,) = driver.cuEventQuery(event)
    if err == driver.CUresult.CUDA_ERROR_NOT_READY:
        return False
    check((err,), "cuEventQuery")
    return True
