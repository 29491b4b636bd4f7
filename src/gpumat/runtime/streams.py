"""Streams and events, the registry of the streams gpumat made, and stream ordering.

Every operation takes `stream=`: a `Stream`, anything with `__cuda_stream__` (CuPy, PyTorch,
cuda.core), an object with a `cuda_stream`/`ptr` integer, a cuda.bindings `CUstream`, or a raw handle.
`with stream:` makes a stream current for the calling thread; without one, work goes to the legacy
default stream, which orders itself with every blocking stream.

The registry: `own_streams` holds the live streams gpumat made, `dead_streams` those it has closed.
Memory remembers a stream only when it is trusted (one of gpumat's own, or the legacy default stream,
spelled 0 or 1): another library's stream may be destroyed behind gpumat's back, and a destroyed handle
must never reach the driver, so work on it is followed by an event instead. The per-thread default
stream (handle 2) is a different stream in every thread, so a handle remembered in one thread would
name another stream in the next: it is treated like another library's stream, its marks and kept
blocks keyed by the driver's id of the calling thread's stream.
`closed_generation` counts closes, so the memory layer can notice a closed stream with one compare.

A Stream collected without close() is never destroyed in its finalizer (which must not take a lock
or wait): it is queued, and `close_abandoned(device)` (called by the next allocation on that device)
waits for it and destroys it.
"""

from __future__ import annotations

import collections

from .bindings import CUresult, driver
from .devices import Device, as_device, thread_state
from .errors import check

LEGACY_STREAM = 0  # the handle gpumat passes for the legacy default stream
CAI_LEGACY = 1  # how __cuda_array_interface__ and DLPack spell that stream
PER_THREAD_STREAM = 2  # CU_STREAM_PER_THREAD: each thread's own default stream
SPECIAL_STREAMS = frozenset({0, 1})  # the legacy default stream's two spellings (0, CU_STREAM_LEGACY): trusted

own_streams: set[int] = set()
dead_streams: set[int] = set()
closed_generation = 0
abandoned: collections.deque = collections.deque()  # (device, ptr, handle) of Streams collected unclosed


def trusted(stream: int) -> bool:
    """Whether a handle can be remembered and used later, from any thread: gpumat's own live streams and
    the legacy default stream."""
    return stream in SPECIAL_STREAMS or stream in own_streams


def _close_handle(dev: Device, ptr: int, handle) -> None:
    """Wait for a gpumat stream, destroy it, and record that it is gone (memory tagged with it is then
    freed on the legacy stream: nothing on the dead stream can still use it)."""
    global closed_generation
    dev.activate()
    check(driver.cuStreamSynchronize(handle), "cuStreamSynchronize")
    dead_streams.add(ptr)
    own_streams.discard(ptr)
    closed_generation += 1
    check(driver.cuStreamDestroy(handle), "cuStreamDestroy")


def close_abandoned(dev: Device) -> None:
    """Close the streams of `dev` that were collected without close() (caller holds the device lock)."""
    for _ in range(len(abandoned)):
        try:
            owner, ptr, handle = abandoned.popleft()
        except IndexError:
            return
        if owner is dev:
            _close_handle(dev, ptr, handle)
        else:
            abandoned.append((owner, ptr, handle))


class Stream:
    """A CUDA stream on one device. Non-blocking by default: it does not wait for the legacy default
    stream. `with stream:` makes it the current stream of the calling thread (it is not closed then);
    `close()` waits for it and destroys it; a Stream collected unclosed is closed by the device's next
    allocation."""

    __slots__ = ("handle", "ptr", "device", "non_blocking", "_owned", "__weakref__")

    def __init__(self, non_blocking: bool = True, priority: int = 0, device=None):
        self._owned, self.ptr = False, 0  # a failed constructor leaves nothing for __del__ to do
        dev = as_device(device).activate()
        flags = (
            driver.CUstream_flags.CU_STREAM_NON_BLOCKING if non_blocking else driver.CUstream_flags.CU_STREAM_DEFAULT
        )
        self.handle = check(driver.cuStreamCreateWithPriority(flags, priority), "cuStreamCreateWithPriority")
        self.ptr, self.device, self.non_blocking, self._owned = int(self.handle), dev, non_blocking, True
        dead_streams.discard(self.ptr)
        own_streams.add(self.ptr)

    @classmethod
    def external(cls, handle: int, device=None) -> Stream:
        """Wrap a stream some other code owns (never destroyed by gpumat)."""
        s = object.__new__(cls)
        s.handle, s.ptr, s.device, s.non_blocking, s._owned = (
            driver.CUstream(handle),
            int(handle),
            as_device(device),
            None,
            False,
        )
        return s

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol: (version, handle)."""
        return 0, self.ptr

    def synchronize(self) -> None:
        self.device.activate()
        check(driver.cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    def query(self) -> bool:
        """True when all work queued on the stream has finished."""
        self.device.activate()
        (err,) = driver.cuStreamQuery(self.handle)
        if err == CUresult.CUDA_ERROR_NOT_READY:
            return False
        check((err,), "cuStreamQuery")
        return True

    def wait(self, event: Event) -> None:
        """Work queued on this stream from now on waits for `event`."""
        if not isinstance(event, Event):
            raise TypeError(f"Stream.wait takes a gpumat.Event, got {type(event).__name__}")
        check(driver.cuStreamWaitEvent(self.handle, event.handle, 0), "cuStreamWaitEvent")

    def record(self, event: Event | None = None) -> Event:
        event = event or Event(device=self.device)
        event.record(self)
        return event

    def close(self) -> None:
        if not self._owned or self.ptr == 0:
            return
        handle, ptr, self.handle, self.ptr = self.handle, self.ptr, None, 0
        dev = self.device
        dev.activate()
        check(driver.cuStreamSynchronize(handle), "cuStreamSynchronize")  # the long wait, outside the lock
        with dev.lock:  # no operation can queue on the stream between its last drain and its end
            _close_handle(dev, ptr, handle)

    def __del__(self):  # never takes a lock or waits: the device's next allocation closes the stream
        if getattr(self, "_owned", False) and self.ptr:
            if self.device.memory is None:  # nothing of gpumat's was ever allocated there: destroy it now
                try:
                    driver.cuStreamDestroy(self.handle)
                except Exception:  # interpreter shutdown
                    pass
            else:
                abandoned.append((self.device, self.ptr, self.handle))
            self.ptr = 0

    def __enter__(self) -> Stream:
        state = thread_state()
        stack = getattr(state, "streams", None)
        if stack is None:
            stack = state.streams = []
        stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        thread_state().streams.pop()

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other.ptr == self.ptr

    def __hash__(self) -> int:
        return hash(self.ptr)

    def __repr__(self) -> str:
        return f"<gpumat.Stream 0x{self.ptr:x} on device {self.device.ordinal}>"


def _checked_handle(handle: int) -> int:
    """A raw stream handle must be a pointer-sized non-negative integer. (Whether it names a live stream of
    the device no library can tell from the integer: a handle from outside gpumat must be one.)"""
    if not 0 <= handle < 2**64:
        raise ValueError(f"a stream handle is an integer in [0, 2**64), got {handle}")
    return int(handle)


def stream_handle(stream, dev: Device) -> int:
    """The raw handle for an operation's `stream=` argument on device `dev` (see the module docstring):
    None is the thread's current stream for `dev`, else the legacy default stream (0)."""
    if stream is None:
        stack = getattr(thread_state(), "streams", None)
        if stack:
            s = stack[-1]
            if s.device is dev:
                return s.ptr
        return LEGACY_STREAM
    if type(stream) is Stream:
        if stream.device is not dev:
            raise ValueError(f"the stream lives on GPU {stream.device.ordinal}, the operands on GPU {dev.ordinal}")
        if stream.ptr == 0 and stream._owned:
            raise ValueError("that stream has been closed")
        return stream.ptr
    if isinstance(stream, int) and not isinstance(stream, bool):
        return _checked_handle(stream)
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        if (
            not (isinstance(value, tuple) and len(value) == 2)
            or isinstance(value[1], bool)
            or not isinstance(value[1], int)
        ):
            raise TypeError(f"{type(stream).__name__}.__cuda_stream__ must give (version, handle), got {value!r}")
        return _checked_handle(value[1])
    if isinstance(stream, driver.CUstream):
        return int(stream)
    for attr in ("cuda_stream", "ptr"):  # PyTorch streams / older CuPy streams
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    raise TypeError(
        f"stream must be a gpumat.Stream, an object with __cuda_stream__, or a raw handle; got {type(stream).__name__}"
    )


class Event:
    """A CUDA event: `record(stream)`, `synchronize()`, `query()`, `elapsed_time(end)` in milliseconds."""

    __slots__ = ("handle", "device", "timing", "__weakref__")

    def __init__(self, timing: bool = True, blocking: bool = False, device=None):
        self.handle = None
        dev = as_device(device).activate()
        flags = 0 if timing else int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        if blocking:
            flags |= int(driver.CUevent_flags.CU_EVENT_BLOCKING_SYNC)
        self.handle = check(driver.cuEventCreate(flags), "cuEventCreate")
        self.device, self.timing = dev, timing

    def record(self, stream=None) -> Event:
        check(driver.cuEventRecord(self.handle, stream_handle(stream, self.device)), "cuEventRecord")
        return self

    def synchronize(self) -> None:
        check(driver.cuEventSynchronize(self.handle), "cuEventSynchronize")

    def query(self) -> bool:
        (err,) = driver.cuEventQuery(self.handle)
        if err == CUresult.CUDA_ERROR_NOT_READY:
            return False
        check((err,), "cuEventQuery")
        return True

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event to `end` (both recorded and complete, both with timing)."""
        if not isinstance(end, Event):
            raise TypeError(f"elapsed_time takes the end gpumat.Event, got {type(end).__name__}")
        if not (self.timing and end.timing):
            raise ValueError("elapsed_time needs two events made with timing=True")
        return float(check(driver.cuEventElapsedTime(self.handle, end.handle), "cuEventElapsedTime"))

    def close(self) -> None:
        handle, self.handle = self.handle, None
        if handle is not None:
            check(driver.cuEventDestroy(handle), "cuEventDestroy")

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


# ---------------------------------------------------------------------------------------------------
# stream ordering with raw handles (the memory layer's lifetime rule and the copies use these)
# ---------------------------------------------------------------------------------------------------
def new_event():
    """A raw timing-free event (destroy it with destroy_event)."""
    return check(driver.cuEventCreate(int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)), "cuEventCreate")


def record_on(event, stream: int) -> None:
    check(driver.cuEventRecord(event, stream), "cuEventRecord")


def record_event(stream: int):
    """A new timing-free event recorded on `stream` now (destroy it with destroy_event)."""
    event = new_event()
    record_on(event, stream)
    return event


def destroy_event(event) -> None:
    driver.cuEventDestroy(event)


# A buffer used on another library's stream by an operation that has not recorded its mark yet (it
# failed between the two): its free waits for the whole device, since that stream may be gone.
UNMARKED = "unmarked"
MAX_MARKS = 256  # marks kept for other libraries' streams (each a driver event); the oldest goes first


class StreamMark:
    """One reusable event per (device, stream handle) of another library: after every gpumat operation on
    that stream it is recorded again, so it always stands after the last work gpumat queued there. A
    buffer used on the stream keeps the mark, and its free waits for the mark's latest recording (which
    is at or after the buffer's last use, since recordings on one stream follow that stream's order)
    instead of touching the handle, which may be destroyed by then. One event record a call, where an
    event a buffer cost a create, a record and a destroy."""

    __slots__ = ("event", "__weakref__")

    def __init__(self):
        self.event = new_event()

    def __del__(self):  # the last buffer holding it is gone: no lock, nothing to wait for
        try:
            destroy_event(self.event)
        except Exception:
            pass


_marks: dict[tuple, StreamMark] = {}


def foreign_key(stream: int) -> tuple[int, int]:
    """(handle, the driver's id of the stream): what gpumat's free list keys another library's stream by.
    A handle can be reused once its stream is destroyed; the id of a stream is never reused, so a block
    kept for (handle, id) is handed out again only on that same stream, in its order."""
    return stream, int(check(driver.cuStreamGetId(stream), "cuStreamGetId"))


def mark_after(dev: Device, stream: int) -> StreamMark:
    """Record the mark of another library's stream after the work just queued on it (device current)."""
    # the per-thread default stream's handle names another stream in every thread: key its mark by
    # the driver's id of this thread's stream, so one thread's recording never stands for another's
    key = (dev, stream) if stream != PER_THREAD_STREAM else (dev, foreign_key(stream))
    mark = _marks.get(key)
    if mark is None:
        mark = _marks[key] = StreamMark()
        if len(_marks) > MAX_MARKS:  # buffers holding an evicted mark keep it alive until they are freed
            _marks.pop(next(iter(_marks)), None)
    check(driver.cuEventRecord(mark.event, stream), "cuEventRecord")
    return mark


def wait_for_streams(stream: int, others) -> None:
    """Make `stream` wait for work on other streams. `others` maps a stream handle to None (one of
    gpumat's own or a default stream: the work queued on it so far; a stream gpumat closed is skipped, it
    was drained when it closed), to the StreamMark of another library's stream, or to UNMARKED; a plain
    iterable of handles means None for each."""
    if stream in dead_streams:
        stream = LEGACY_STREAM
    items = others.items() if isinstance(others, dict) else ((h, None) for h in others)
    temp = None
    try:
        for s, mark in items:
            if mark is UNMARKED:
                check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
                continue
            if mark is not None:
                if s != stream:
                    check(driver.cuStreamWaitEvent(stream, mark.event, 0), "cuStreamWaitEvent")
                continue
            if s == stream or s in dead_streams:
                continue
            if temp is None:
                temp = new_event()
            record_on(temp, s)
            check(driver.cuStreamWaitEvent(stream, temp, 0), "cuStreamWaitEvent")
    finally:
        if temp is not None:
            destroy_event(temp)


def wait_across_devices(stream: int, dev: Device, other: int, other_dev: Device) -> None:
    """Make `stream` (on dev) wait for the work queued so far on `other` (on other_dev)."""
    other_dev.activate()
    event = record_event(other)
    try:
        dev.activate()
        check(driver.cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent")
    finally:
        destroy_event(event)


def synchronize_stream(stream: int) -> None:
    check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")


def synchronize_event(event) -> None:
    check(driver.cuEventSynchronize(event), "cuEventSynchronize")
