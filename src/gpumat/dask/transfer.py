"""Chunks between processes on one host, GPU to GPU: CUDA IPC under distributed's host (TCP) transport.

When distributed sends a Matrix chunk to a process on the same host (a worker fetching a dependency, a
client scattering a chunk or gathering one), the message carries no data, only handles:

- **The sender** copies the chunk into a block made for export (cuMemAlloc; the stream-ordered pool's
  blocks cannot be exported) on a side stream of its GPU, which first waits for the chunk's *ready* mark
  (the event its task recorded after writing it), not for everything queued since; records an
  interprocess event after the copy; and writes an *offer*: an empty file in /dev/shm named after its
  process and a sequence number. The header carries the block's and the event's 64-byte handles and
  the offer's path. Nothing waits on the host.
- **The receiver** claims the offer by renaming it (an atomic step: a sender that withdrew the offer has
  renamed it first, and the receiver then fails with a clear error rather than read memory that may be
  reused), opens the block and the event, and on a side stream of its own GPU waits for the event and
  copies the block into a new chunk (peer to peer over NVLink or PCIe when the GPUs differ). The new
  chunk was allocated on that side stream, so its first use elsewhere waits for the copy. Once the copy
  has run, the block is unmapped and the claimed file deleted: the acknowledgement.
- A **sweeper** thread in each process settles what is pending: an importer's finished copies (unmap,
  acknowledge), an exporter's copies that have run (the chunk itself is let go then) and its
  acknowledged offers (the block is kept for the next export of that size, up to SPARE_BYTES a GPU, else
  freed), offers claimed by a process that died (its copies died with it), and offers nobody claimed
  within OFFER_TIMEOUT_S (withdrawn).

Used when the sender's and the recipient's addresses name one host and GPUMAT_DASK_IPC is not 0;
otherwise chunks travel as host frames (gpumat.dask.chunks.serialize_host).
"""

from __future__ import annotations

import atexit
import itertools
import os
import tempfile
import threading
import time
import weakref
from collections import deque

from ..matrix import Matrix
from ..runtime import ipc, memops
from ..runtime.devices import Device
from ..runtime.streams import LEGACY_STREAM, Stream, destroy_event, new_event, record_on

OFFER_TIMEOUT_S = 20.0  # an offer nobody claimed within this is withdrawn (its recipient is gone)
SPARE_BYTES = 2 << 30  # export blocks kept for reuse, a GPU
SWEEP_S = 0.002  # the sweeper's period while anything is pending
OFFER_PREFIX = "gpumat-ipc-"


def offer_dir() -> str:
    """Where offers are written: /dev/shm (memory, shared by the host's processes), else the temp dir."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else tempfile.gettempdir()


def enabled() -> bool:
    return os.environ.get("GPUMAT_DASK_IPC", "1") != "0"


def _host_of(address) -> str | None:
    if not isinstance(address, str) or "://" not in address:
        return None
    scheme, rest = address.split("://", 1)
    if scheme not in ("tcp", "tls"):
        return None
    host = rest.rsplit(":", 1)[0] if rest.count(":") == 1 or rest.startswith("[") else rest
    return host.strip("[]") or None


def same_host(context) -> bool:
    """Whether distributed's serialisation context names a sender and a recipient on one host (both ends
    of a TCP connection with one address), and IPC is allowed."""
    if not context or not enabled():
        return False
    sender = _host_of((context.get("sender") or {}).get("address"))
    recipient = _host_of((context.get("recipient") or {}).get("address"))
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


def mark_ready(chunk: Matrix, stream: int = LEGACY_STREAM) -> Matrix:
    """Record, on `stream` of the chunk's GPU, that the work writing `chunk` has been queued: a later export
    waits for this rather than for all the work queued since. Returns the chunk."""
    dev = chunk.device.activate()
    event = _event_for(dev)
    record_on(event, stream)
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
    __slots__ = ("path", "device", "ptr", "nbytes", "event", "memory_handle", "event_handle", "chunk", "made")


_exports: list[_Export] = []
counts = {"offered": 0, "received": 0, "withdrawn": 0}  # this process's IPC transfers so far
_spares: dict[tuple[int, int], list] = {}  # (device ordinal, nbytes) -> [(ptr, event, memory handle, event handle)]
_sequence = itertools.count()


def _export_block(dev: Device, nbytes: int) -> tuple:
    with _lock:
        spare = _spares.get((dev.ordinal, nbytes))
        if spare:
            return spare.pop()
    ptr = ipc.alloc_shareable(nbytes)
    event = ipc.shareable_event()
    return ptr, event, ipc.memory_handle(ptr), ipc.event_handle(event)


def offer(x: Matrix) -> dict:
    """Export a packed row-major 2-D chunk for a process on this host: the header's `ipc` entry."""
    dev = x.device.activate()
    height, width = x.shape
    isz = x.itemsize
    mark = _marks.get(x)
    side = side_stream(dev)
    ptr, event, memory_handle, event_handle = _export_block(dev, x.nbytes)
    if mark is not None:
        ipc.stream_wait(side.ptr, mark.event)
    else:  # a chunk this module never saw written: after everything queued on the legacy stream
        x = mark_ready(x)
        ipc.stream_wait(side.ptr, _marks[x].event)
    buf = x._operand()[-1]
    with dev.lock:
        src = x.elements
        buf.hold()  # kept (and kept alive below) until the copy has run
    memops.copy_2d_async(ptr, width * isz, src, x.stride * isz, width * isz, height, False, False, side.ptr)
    record_on(event, side.ptr)
    e = _Export()
    e.path = os.path.join(offer_dir(), f"{OFFER_PREFIX}{os.getpid()}-{next(_sequence)}")
    e.device, e.ptr, e.nbytes, e.event = dev, ptr, x.nbytes, event
    e.memory_handle, e.event_handle, e.chunk, e.made = memory_handle, event_handle, x, time.monotonic()
    with open(e.path, "x"):
        pass
    with _lock:
        _exports.append(e)
        counts["offered"] += 1
    _wake()
    return {"memory": memory_handle, "event": event_handle, "offer": e.path, "pid": os.getpid(), "device": dev.ordinal}


# --- the importer ----------------------------------------------------------------------------------------------
class WithdrawnOfferError(RuntimeError):
    pass


_imports: list[tuple] = []  # (device, done event, opened block, opened event, claimed path)


def receive(info: dict, shape: tuple, dtype, dev: Device) -> Matrix:
    """A chunk offered by another process on this host, copied into a new Matrix on `dev` (queued on this
    process's side stream; the Matrix's first use elsewhere waits for the copy)."""
    path = info["offer"]
    claimed = f"{path}.{os.getpid()}"
    try:
        os.rename(path, claimed)
    except FileNotFoundError:
        raise WithdrawnOfferError(
            f"gpumat.dask: the chunk offered through CUDA IPC ({path}) was withdrawn before it was read: "
            "its sender gave up waiting, or the two processes do not share /dev/shm. Set GPUMAT_DASK_IPC=0 "
            "on every process to move chunks through the host instead."
        ) from None
    dev.activate()
    try:
        src = ipc.open_memory(info["memory"])
    except BaseException:
        os.unlink(claimed)  # the acknowledgement: the sender may reuse its block
        raise
    try:
        sent = ipc.open_event(info["event"])
    except BaseException:
        ipc.close_memory(src)
        os.unlink(claimed)
        raise
    side = side_stream(dev)
    try:
        out = Matrix.empty(shape, dtype=dtype, device=dev, stream=side)
        height, width = shape
        row = width * out.itemsize
        ipc.stream_wait(side.ptr, sent)
        if out.size:
            memops.copy_2d_async(out.elements, out.stride * out.itemsize, src, row, row, height, False, False, side.ptr)
        done = new_event()
        record_on(done, side.ptr)
    except BaseException:
        dev.synchronize()
        ipc.close_memory(src)
        destroy_event(sent)
        os.unlink(claimed)
        raise
    mark_ready(out, side.ptr)
    with _lock:
        _imports.append((dev, done, src, sent, claimed))
        counts["received"] += 1
    _wake()
    return out


# --- the sweeper ---------------------------------------------------------------------------------------------------
_wakeup = threading.Condition()
_sweeper: threading.Thread | None = None


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
            sweep()
        except Exception:  # a failed driver call here must not end the thread: try again next period
            pass
        time.sleep(SWEEP_S)


def pending() -> int:
    with _lock:
        return len(_exports) + len(_imports)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep() -> None:
    """Settle what is pending, once (the sweeper's step; callable directly)."""
    with _lock:
        imports = list(_imports)
    for item in imports:
        dev, done, src, sent, claimed = item
        dev.activate()
        if not ipc.event_done(done):
            continue
        ipc.close_memory(src)
        destroy_event(sent)
        destroy_event(done)
        try:
            os.unlink(claimed)
        except FileNotFoundError:
            pass
        with _lock:
            _imports.remove(item)
    with _lock:
        exports = list(_exports)
    if not exports:
        return
    names = set(os.listdir(offer_dir()))
    now = time.monotonic()
    for e in exports:
        e.device.activate()
        if e.chunk is not None and ipc.event_done(e.event):  # the copy has run: the chunk may go
            e.chunk._operand()[-1].unhold()
            e.chunk = None
        base = os.path.basename(e.path)
        if base in names:  # not claimed yet
            if now - e.made < OFFER_TIMEOUT_S:
                continue
            try:
                os.rename(e.path, e.path + ".withdrawn")
            except FileNotFoundError:  # claimed meanwhile: settled on a later sweep
                continue
            os.unlink(e.path + ".withdrawn")
            counts["withdrawn"] += 1
        else:
            claims = [n for n in names if n.startswith(base + ".")]
            if claims and all(_alive(int(n.rsplit(".", 1)[1])) for n in claims if n.rsplit(".", 1)[1].isdigit()):
                continue  # being copied
            for n in claims:
                try:
                    os.unlink(os.path.join(offer_dir(), n))
                except FileNotFoundError:
                    pass
        if e.chunk is not None:  # withdrawn or its receiver died before our copy ran: wait for it now
            side_stream(e.device).synchronize()
            e.chunk._operand()[-1].unhold()
            e.chunk = None
        _retire(e)


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
