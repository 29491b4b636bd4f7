"""Chunks between processes on one host, GPU to GPU: CUDA IPC under distributed's host (TCP) transport.

When distributed sends a Matrix chunk to a process on the same host (a worker fetching a dependency, a
client scattering a chunk or gathering one), the message carries no data, only handles:

- **The sender** copies the chunk into a block made for export (cuMemAlloc; the stream-ordered pool's
  blocks cannot be exported) on a side stream of its GPU, which first waits for the chunk's *ready* mark
  (the event its task recorded after writing it), not for everything queued since; records an
  interprocess event after the copy; and writes an *offer*: an empty file in /dev/shm named after its
  process and a sequence number. The header carries the block's and the event's 64-byte handles and
  the offer's path. Nothing waits on the host.
- **The receiver** claims the offer: it locks the file (flock: the lock lasts while the process lives)
  and renames it to its `.claimed` name (an atomic step: a sender that withdrew the offer has renamed
  it first, and the receiver then fails with a clear error rather than read memory that may be reused).
  It opens the block and the event, and on a side stream of its own GPU waits for the event and copies
  the block into a new chunk (peer to peer over NVLink or PCIe when the GPUs differ). The new chunk was
  allocated on that side stream, so its first use elsewhere waits for the copy. Once the copy has run,
  the block is unmapped and the claimed file deleted and unlocked: the acknowledgement.
- A **sweeper** thread in each process settles what is pending, item by item: an importer's finished
  copies (unmap, acknowledge), an exporter's copies that have run (the chunk itself is let go then) and
  its acknowledged offers (the block is kept for the next export of that size, up to SPARE_BYTES a GPU,
  else freed). An offer is read by atomic lookups of its two names: claimed files whose lock is free
  belong to a process that died (its copies died with it); offers nobody claimed within
  OFFER_TIMEOUT_S are withdrawn.
- The header also names the sender's host (boot id): the scheduler forwards messages without reading
  them, so handles sent to it for a client elsewhere would reach a host that cannot open them; that
  client gets an error that says so (gather and scatter Matrix chunks with direct=True).

Used when the sender's and the recipient's addresses name one host and GPUMAT_DASK_IPC is not 0;
otherwise chunks travel as host frames (gpumat.dask.chunks.serialize_host).
"""

from __future__ import annotations

import atexit
import fcntl
import itertools
import logging
import os
import socket
import tempfile
import threading
import time
import uuid
import weakref
from collections import deque

from ..matrix import Matrix
from ..runtime import ipc, memops
from ..runtime.devices import Device
from ..runtime.streams import Stream, destroy_event, new_event, record_on, stream_handle

OFFER_TIMEOUT_S = 120.0  # an offer nobody claimed within this is withdrawn (its recipient is gone)
SPARE_BYTES = 2 << 30  # export blocks kept for reuse, a GPU
SWEEP_S = 0.002  # the sweeper's period while anything is pending
OFFER_PREFIX = "gpumat-ipc-"


def offer_dir() -> str:
    """Where offers are written: /dev/shm (memory, shared by the host's processes), else the temp dir."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()


def enabled() -> bool:
    return os.environ.get("GPUMAT_DASK_IPC", "1") != "0"


def host_of(address) -> str | None:
    """The host of a distributed TCP or TLS address (distributed's own parsing); None for any other."""
    from distributed.comm.addressing import get_address_host, parse_address

    try:
        scheme, _ = parse_address(address)
    except (TypeError, ValueError):
        return None
    return get_address_host(address) if scheme in ("tcp", "tls") else None


def same_host(context) -> bool:
    """Whether distributed's serialisation context names a sender and a recipient on one host (both ends
    of a TCP connection with one address), and IPC is allowed."""
    if not context or not enabled():
        return False
    sender = host_of((context.get("sender") or {}).get("address"))
    recipient = host_of((context.get("recipient") or {}).get("address"))
    return sender is not None and sender == recipient


# --- ready marks: the event recorded after the work that wrote a chunk ---------------------------------
class _Mark:
    """A chunk's ready event; when the chunk goes, the event goes to the spares (no lock, no driver call)."""

    __slots__ = ("event", "device", "__weakref__")

    def __init__(self, event, dev: Device):
        self.event, self.device = event, dev

    def __del__(self):
        try:
            _spare_events.append((self.device, self.event))
        except Exception:  # interpreter shutdown: the module's globals may be gone
            pass


_spare_events: deque = deque()  # (device, event) of marks let go of, for the next mark on that device
_marks: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # chunk -> _Mark


def _event_for(dev: Device):
    for _ in range(len(_spare_events)):
        try:
            owner, event = _spare_events.popleft()
        except IndexError:
            break
        if owner is dev:
            return event
        _spare_events.append((owner, event))
    return new_event()


def mark_ready(chunk: Matrix, stream: int | None = None) -> Matrix:
    """Record, on `stream` of the chunk's GPU (the thread's current stream by default, where the task that
    wrote it queued its work), that the work writing `chunk` has been queued: a later export waits for
    this rather than for all the work queued since. Returns the chunk."""
    dev = chunk.device.activate()
    event = _event_for(dev)
    record_on(event, stream_handle(None, dev) if stream is None else stream)
    _marks[chunk] = _Mark(event, dev)
    return chunk


# --- side streams ------------------------------------------------------------------------------------------
_side: dict[int, Stream] = {}
_lock = threading.Lock()


def side_stream(dev: Device) -> Stream:
    """This process's stream for transfers on `dev` (non-blocking: it waits for no other work)."""
    with _lock:
        s = _side.get(dev.ordinal)
        if s is None:
            s = _side[dev.ordinal] = Stream(non_blocking=True, device=dev)
        return s


# --- the exporter --------------------------------------------------------------------------------------------
class _Export:
    __slots__ = ("path", "device", "ptr", "nbytes", "event", "memory_handle", "event_handle", "buffer", "made")


_exports: list[_Export] = []
counts = {"offered": 0, "received": 0, "withdrawn": 0, "failed": 0}  # this process's IPC transfers so far
_spares: dict[tuple[int, int], list] = {}  # (device ordinal, nbytes) -> [(ptr, event, memory handle, event handle)]
_sequence = itertools.count()
_token = uuid.uuid4().hex[:8]  # in every offer's name: a later process given this pid never meets our files


def _export_block(dev: Device, nbytes: int) -> tuple:
    with _lock:
        spare = _spares.get((dev.ordinal, nbytes))
        if spare:
            return spare.pop()
    ptr = ipc.alloc_shareable(nbytes)
    try:
        event = ipc.shareable_event()
    except BaseException:
        ipc.free_shareable(ptr)
        raise
    try:
        return ptr, event, ipc.memory_handle(ptr), ipc.event_handle(event)
    except BaseException:
        ipc.free_shareable(ptr)
        destroy_event(event)
        raise


def _give_back(dev: Device, nbytes: int, block: tuple) -> None:
    """An export block not used after all, back to the spares."""
    with _lock:
        _spares.setdefault((dev.ordinal, nbytes), []).append(block)


def offer(x: Matrix) -> dict:
    """Export a packed row-major 2-D chunk for a process on this host: the header's `ipc` entry. Raises
    (a CudaError, OSError) with nothing held when the chunk cannot be exported; the caller then sends its
    bytes instead."""
    dev = x.device.activate()
    height, width = x.shape
    isz = x.itemsize
    side = side_stream(dev)
    block = _export_block(dev, x.nbytes)
    ptr, event, memory_handle, event_handle = block
    buf, held, queued = None, False, False
    try:
        buf = x._operand()[-1]
        mark = _marks.get(x)
        if mark is not None:
            ipc.stream_wait(side.ptr, mark.event)
        else:  # a chunk this module never saw written (it may have been written on any stream): wait for all
            dev.synchronize()
        with dev.lock:
            src = x.elements  # FreedMatrixError for a freed chunk
            buf.hold()  # its memory kept until the copy has run (the sweeper lets go)
            held = True
        memops.copy_2d_async(ptr, width * isz, src, x.stride * isz, width * isz, height, False, False, side.ptr)
        queued = True
        record_on(event, side.ptr)
        e = _Export()
        e.path = os.path.join(offer_dir(), f"{OFFER_PREFIX}{os.getpid()}-{_token}-{next(_sequence)}")
        with open(e.path, "x"):
            pass
    except BaseException:
        if queued:
            side.synchronize()
        if held:
            buf.unhold()
        _give_back(dev, x.nbytes, block)
        raise
    e.device, e.ptr, e.nbytes, e.event = dev, ptr, x.nbytes, event
    e.memory_handle, e.event_handle, e.buffer, e.made = memory_handle, event_handle, buf, time.monotonic()
    with _lock:
        _exports.append(e)
        counts["offered"] += 1
    _wake()
    host = _host_id()
    return {"memory": memory_handle, "event": event_handle, "offer": e.path, "host": host, "device": dev.ordinal}


def _host_id() -> str:
    """This host's identity for a receiver to compare: the kernel's boot id (and the host name)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


# --- the importer ----------------------------------------------------------------------------------------------
class WithdrawnOfferError(RuntimeError):
    pass


_imports: list[tuple] = []  # (device, done event, opened block, opened event, claimed path, claim's locked fd)


def _claim(path: str) -> tuple[str, int]:
    """Claim an offer: lock its file (the lock says "being copied" for as long as this process lives), then
    rename it to its claimed name. Returns (claimed path, the locked descriptor)."""
    claimed = path + ".claimed"
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        fd = -1
    if fd >= 0:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(path, claimed)
            return claimed, fd
        except FileNotFoundError:  # withdrawn between the open and the rename
            os.close(fd)
    raise WithdrawnOfferError(
        f"gpumat.dask: the chunk offered through CUDA IPC ({path}) is not there to claim: its sender withdrew "
        "it (nobody claimed it in time), or this process does not share the sender's host or /dev/shm (a "
        "message forwarded by the scheduler to another host: gather or scatter Matrix chunks with "
        "direct=True). Set GPUMAT_DASK_IPC=0 on every process to move chunks through the host instead."
    )


def _acknowledge(claimed: str, fd: int) -> None:
    try:
        os.unlink(claimed)
    except FileNotFoundError:
        pass
    os.close(fd)  # the lock goes with it


def receive(info: dict, shape: tuple, dtype, dev: Device) -> Matrix:
    """A chunk offered by another process on this host, copied into a new Matrix on `dev` (queued on this
    process's side stream; the Matrix's first use elsewhere waits for the copy)."""
    host = info.get("host")
    if host is not None and host != _host_id():
        raise WithdrawnOfferError(
            f"gpumat.dask: a chunk's CUDA IPC handles reached another host (sent from {host}, read on "
            f"{_host_id()}): a message forwarded by the scheduler. Gather or scatter Matrix chunks with "
            "direct=True, or set GPUMAT_DASK_IPC=0 on every process."
        )
    claimed, fd = _claim(info["offer"])
    dev.activate()
    src = sent = None
    try:
        src = ipc.open_memory(info["memory"])
        sent = ipc.open_event(info["event"])
        side = side_stream(dev)
        out = Matrix.empty(shape, dtype=dtype, device=dev, stream=side)
        height, width = shape
        row = width * out.itemsize
        ipc.stream_wait(side.ptr, sent)
        if out.size:
            memops.copy_2d_async(out.elements, out.stride * out.itemsize, src, row, row, height, False, False, side.ptr)
        done = new_event()
        record_on(done, side.ptr)
        mark_ready(out, side.ptr)
    except BaseException:
        try:
            dev.synchronize()  # nothing of ours may still read the block once the sender may reuse it
            if src is not None:
                ipc.close_memory(src)
            if sent is not None:
                destroy_event(sent)
        finally:
            _acknowledge(claimed, fd)
        raise
    with _lock:
        _imports.append((dev, done, src, sent, claimed, fd))
        counts["received"] += 1
    _wake()
    return out


# --- the sweeper ---------------------------------------------------------------------------------------------------
_wakeup = threading.Condition()
_sweeper: threading.Thread | None = None
_sweeping = threading.Lock()  # one sweep at a time (the thread's, or a direct call)
log = logging.getLogger("gpumat.dask.transfer")


def _wake() -> None:
    global _sweeper
    with _wakeup:
        if _sweeper is None or not _sweeper.is_alive():
            _sweeper = threading.Thread(target=_sweep_forever, name="gpumat-ipc-sweeper", daemon=True)
            _sweeper.start()
        _wakeup.notify()


def _sweep_forever() -> None:
    while True:
        with _wakeup:
            if not pending():
                _wakeup.wait(timeout=1.0)
        try:
            background_step()
        except Exception:  # sweep() settles item by item; this is a last guard for the thread itself
            log.exception("gpumat.dask: the IPC sweeper failed")
        time.sleep(SWEEP_S)


def pending() -> int:
    with _lock:
        return len(_exports) + len(_imports)


def _claim_state(path: str) -> str:
    """An offer's state, read from its files with atomic lookups: "offered" (not claimed yet), "copying" (a
    live process holds the claim's lock), "done" (acknowledged: no file left), or "orphaned" (claimed by a
    process that has gone: its lock went with it)."""
    if os.path.exists(path):
        return "offered"
    claimed = path + ".claimed"
    try:
        fd = os.open(claimed, os.O_RDONLY)
    except FileNotFoundError:
        return "done"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return "copying"
    finally:
        os.close(fd)
    try:  # the lock was free: its holder has gone (or has just acknowledged)
        os.unlink(claimed)
    except FileNotFoundError:
        pass
    return "orphaned"


def _settle_import(item: tuple) -> bool:
    dev, done, src, sent, claimed, fd = item
    dev.activate()
    if not ipc.event_done(done):
        return False
    try:
        ipc.close_memory(src)
        destroy_event(sent)
        destroy_event(done)
    finally:
        _acknowledge(claimed, fd)
    return True


def _settle_export(e: _Export, now: float) -> bool:
    e.device.activate()
    if e.buffer is not None and ipc.event_done(e.event):  # the copy has run: the chunk may go
        e.buffer.unhold()
        e.buffer = None
    state = _claim_state(e.path)
    if state == "copying":
        return False
    if state == "offered":
        if now - e.made < OFFER_TIMEOUT_S:
            return False
        try:
            os.rename(e.path, e.path + ".withdrawn")
        except FileNotFoundError:  # claimed meanwhile: settled on a later sweep
            return False
        os.unlink(e.path + ".withdrawn")
        counts["withdrawn"] += 1
    if e.buffer is not None:  # withdrawn, or its receiver died, before our copy ran: wait for it now
        side_stream(e.device).synchronize()
        e.buffer.unhold()
        e.buffer = None
    _retire(e)
    return True


def sweep() -> None:
    """Settle what is pending, once (the sweeper's step; callable directly). An item whose settling fails
    is dropped (its memory stays with the process) and logged, so that it cannot stop the others."""
    with _sweeping:
        with _lock:
            imports, exports = list(_imports), list(_exports)
        for item in imports:
            try:
                settled = _settle_import(item)
            except Exception:
                log.exception("gpumat.dask: an IPC import could not be settled; dropped")
                settled = True
                counts["failed"] += 1
            if settled:
                with _lock:
                    _imports.remove(item)
        now = time.monotonic()
        for e in exports:
            try:
                _settle_export(e, now)
            except Exception:
                log.exception("gpumat.dask: an IPC export could not be settled; dropped")
                counts["failed"] += 1
                with _lock:
                    if e in _exports:
                        _exports.remove(e)


background_step = sweep  # what the sweeper thread runs (tests that sweep by hand stand it down)


def _retire(e: _Export) -> None:
    key = (e.device.ordinal, e.nbytes)
    with _lock:
        _exports.remove(e)
        kept = sum(k[1] * len(v) for k, v in _spares.items() if k[0] == key[0])
        if kept + e.nbytes <= SPARE_BYTES:
            _spares.setdefault(key, []).append((e.ptr, e.event, e.memory_handle, e.event_handle))
            return
    ipc.free_shareable(e.ptr)
    destroy_event(e.event)


def _remove_own_offers() -> None:
    """At exit: this process's offers go (the memory goes with the process)."""
    prefix = f"{OFFER_PREFIX}{os.getpid()}-"
    try:
        for n in os.listdir(offer_dir()):
            if n.startswith(prefix):
                os.unlink(os.path.join(offer_dir(), n))
    except OSError:
        pass


atexit.register(_remove_own_offers)
