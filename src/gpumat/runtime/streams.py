"""Streams and events, the registry of the streams gpumat made, and stream ordering.

Every operation takes `stream=`: a `Stream`, anything with `__cuda_stream__` (CuPy, PyTorch,
cuda.core), an object with a `cuda_stream`/`ptr` integer, a cuda.bindings `CUstream`, or a raw handle.
`with stream:` makes a stream current for the calling thread; without one, work goes to the legacy
default stream, which orders itself with every blocking stream.

The registry: `own_streams` holds the live streams gpumat made, `dead_streams` those it has closed
(drained, waiting in the spares), `collected_streams` those collected unclosed and not retired yet (still
in own_streams until then). A handle of either kind is refused (a ValueError) until a new Stream takes it
from the spares. A raw handle gpumat never made is taken as it is: no library can tell a destroyed
stream's handle from a live one without the driver, which crashes on it, so a raw handle must name a
live stream.
Memory remembers a stream handle only when it is trusted (one of gpumat's own, or the legacy default
stream, spelled 0 or 1). Another library's stream may be destroyed behind gpumat's back, a destroyed
handle must never reach the driver, and its handle may then name a new stream: such a stream is known by
a `Foreign`, one per stream (not per handle), whose event is recorded after the work gpumat queues
there. The per-thread default stream (handle 2) is a different stream in every thread, so it is known
by one Foreign per thread. `closed_generation` counts closes, so the memory layer can notice a closed
stream with one compare.

gpumat never destroys a stream it made: a closed Stream's driver stream goes to its device's spares
(`spare_streams`), and the next Stream of the same flags and priority takes it. So a handle gpumat
made always names a stream of the driver's: a stale one (kept past its Stream's close) is a ValueError
rather than a crash, and no other library's stream can be given that number meanwhile. A Stream
collected without close() is never retired in its finalizer (which must not take a lock or wait): it is
queued, and `close_abandoned(device)` (called by the next allocation on that device) waits for it and
retires it. During interpreter shutdown (`sys.is_finalizing()`), the finalizers of
streams, events and marks make no driver call: the modules they would call through may be half torn
down, and the process's end releases everything anyway. Each binds `sys.is_finalizing` as a default
argument, since module globals are cleared before the last objects go.
"""

from __future__ import annotations

import collections
import operator
import sys
import weakref

from .bindings import CUresult, driver
from .devices import Device, as_device, device_of_context, thread_state
from .errors import check

LEGACY_STREAM = 0  # the handle gpumat passes for the legacy default stream
CAI_LEGACY = 1  # how __cuda_array_interface__ and DLPack spell that stream
PER_THREAD_STREAM = 2  # CU_STREAM_PER_THREAD: each thread's own default stream
SPECIAL_STREAMS = frozenset({0, 1})  # the legacy default stream's two spellings (0, CU_STREAM_LEGACY): trusted

own_streams: set[int] = set()
dead_streams: set[int] = set()
collected_streams: set[int] = set()
closed_generation = 0
# (device, ptr, handle, kind) of Streams collected unclosed, and (device, None, event, None) of the events of
# foreign streams' marks collected (see Foreign.__del__): both let go of at the device's next allocation
abandoned: collections.deque = collections.deque()
# (device, non_blocking, priority) -> (ptr, driver handle) of retired streams, for the next Stream of that kind
spare_streams: dict[tuple, list] = {}


def trusted(stream: int) -> bool:
    """Whether a handle can be remembered and used later, from any thread: gpumat's own live streams and
    the legacy default stream."""
    return stream in SPECIAL_STREAMS or stream in own_streams


def _retire(dev: Device, ptr: int, handle, kind: tuple) -> None:
    """Wait for a gpumat stream, record that it is closed (memory tagged with it is then freed on the
    legacy stream: nothing on the closed stream can still use it) and keep its driver stream for the next
    Stream of its `kind` (non_blocking, priority)."""
    global closed_generation
    dev.activate()
    check(driver.cuStreamSynchronize(handle), "cuStreamSynchronize")
    dead_streams.add(ptr)
    own_streams.discard(ptr)
    collected_streams.discard(ptr)
    closed_generation += 1
    spare_streams.setdefault((dev, *kind), []).append((ptr, handle))


def close_abandoned(dev: Device) -> None:
    """Retire the streams of `dev` that were collected without close(), and destroy the events of its
    collected marks (caller holds the device lock)."""
    for _ in range(len(abandoned)):
        try:
            entry = abandoned.popleft()
        except IndexError:
            return
        owner, ptr, handle, kind = entry
        if owner is not dev:
            abandoned.append(entry)
        elif ptr is None:
            destroy_event(handle)
        else:
            _retire(dev, ptr, handle, kind)


class Stream:
    """A CUDA stream on one device.

    Non-blocking by default: it does not wait for the legacy default stream. ``with stream:`` makes it
    the current stream of the calling thread (it is not closed then); :meth:`close` waits for it and
    closes it; a Stream collected unclosed is closed by the device's next allocation. A closed stream's
    driver stream is kept for the next Stream of the same flags and priority, so its handle may come
    back as that Stream's (and is refused until then). Every gpumat operation takes ``stream=``: a
    Stream, any object with ``__cuda_stream__`` (CuPy, PyTorch, cuda.core) or a raw handle.

    Parameters
    ----------
    non_blocking : bool, optional
        Whether the stream runs independently of the legacy default stream (True by default).
    priority : int, optional
        Lower is more urgent; the driver clamps it to its range. 0 by default.
    device : Device or int, optional
        The GPU; the current device by default.

    Attributes
    ----------
    handle : cuda.bindings.driver.CUstream
        The driver's handle (None once closed).
    ptr : int
        The handle as an int (0 once closed): what ``__cuda_stream__`` gives.
    device : Device
        The stream's GPU.
    non_blocking : bool or None
        As made (None for :meth:`external` streams).
    priority : int or None
        As made (None for :meth:`external` streams).

    Raises
    ------
    TypeError
        A priority that is not an int.
    ValueError
        A priority beyond 32 bits.
    NoDeviceError
        No usable GPU.

    Examples
    --------
    >>> s = gm.Stream()  # doctest: +GPU
    >>> A = gm.Matrix.zeros(64, 64, stream=s)
    >>> C = gm.matmul(A, A, stream=s)
    >>> with s:
    ...     D = A @ A
    >>> s.synchronize()
    >>> s.query()
    True
    >>> s.close()
    """

    __slots__ = ("handle", "ptr", "device", "non_blocking", "priority", "_owned", "__weakref__")

    def __init__(self, non_blocking: bool = True, priority: int = 0, device=None):
        self._owned, self.ptr = False, 0  # a failed constructor leaves nothing for __del__ to do
        if isinstance(priority, bool) or not hasattr(type(priority), "__index__"):  # an int, or a numpy integer
            raise TypeError(f"a stream's priority is an int (lower is more urgent), got {type(priority).__name__}")
        priority = operator.index(priority)
        if not -(2**31) <= priority < 2**31:
            raise ValueError(f"a stream's priority is a 32-bit int (the driver clamps it to its range), got {priority}")
        dev = as_device(device).activate()
        non_blocking = bool(non_blocking)
        spare = spare_streams.get((dev, non_blocking, priority))
        try:
            self.ptr, self.handle = spare.pop()  # atomic: two threads never take one
        except (AttributeError, IndexError):  # no spare of this kind
            flags = (
                driver.CUstream_flags.CU_STREAM_NON_BLOCKING
                if non_blocking
                else driver.CUstream_flags.CU_STREAM_DEFAULT
            )
            self.handle = check(driver.cuStreamCreateWithPriority(flags, priority), "cuStreamCreateWithPriority")
            self.ptr = int(self.handle)
        self.device, self.non_blocking, self.priority, self._owned = dev, non_blocking, priority, True
        dead_streams.discard(self.ptr)
        collected_streams.discard(self.ptr)
        own_streams.add(self.ptr)

    @classmethod
    def external(cls, handle: int, device=None) -> Stream:
        """Wrap a stream some other code owns; gpumat never destroys it.

        Parameters
        ----------
        handle : int
            The raw stream handle (``cudaStream_t`` as an int). It must name a live stream.
        device : Device or int, optional
            The stream's GPU; the current device by default.

        Returns
        -------
        Stream
            A wrapper whose :meth:`close` does nothing.

        Raises
        ------
        NoDeviceError
            No usable GPU.

        Examples
        --------
        >>> owned = gm.Stream()  # doctest: +GPU
        >>> s = gm.Stream.external(owned.ptr)
        >>> s.ptr == owned.ptr
        True
        """
        s = object.__new__(cls)
        s.handle, s.ptr, s.device, s.non_blocking, s.priority, s._owned = (
            driver.CUstream(handle),
            int(handle),
            as_device(device),
            None,
            None,
            False,
        )
        return s

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol: (version, handle)."""
        return 0, self.ptr

    def _live(self):
        """The driver handle; a ValueError once close() has destroyed the stream (the driver would take the
        None left behind for the legacy stream). Read once: a close() meanwhile cannot slip None through."""
        handle = self.handle
        if handle is None:
            raise ValueError("that stream has been closed")
        return handle

    def synchronize(self) -> None:
        """Wait until all work queued on the stream has finished.

        Raises
        ------
        ValueError
            The stream has been closed.
        CudaError
            Queued work failed.

        Examples
        --------
        >>> gm.Stream().synchronize()  # doctest: +GPU
        """
        handle = self._live()
        self.device.activate()
        check(driver.cuStreamSynchronize(handle), "cuStreamSynchronize")

    def query(self) -> bool:
        """Whether all work queued on the stream has finished, without waiting.

        Returns
        -------
        bool
            True when the stream is idle.

        Raises
        ------
        ValueError
            The stream has been closed.
        CudaError
            Queued work failed.

        Examples
        --------
        >>> s = gm.Stream()  # doctest: +GPU
        >>> s.synchronize(); s.query()
        True
        """
        handle = self._live()
        self.device.activate()
        (err,) = driver.cuStreamQuery(handle)
        if err == CUresult.CUDA_ERROR_NOT_READY:
            return False
        check((err,), "cuStreamQuery")
        return True

    def wait(self, event: Event) -> None:
        """Make work queued on this stream from now on wait for ``event``.

        Parameters
        ----------
        event : Event
            A recorded event (of any stream, any GPU).

        Raises
        ------
        TypeError
            ``event`` is not an :class:`Event`.
        ValueError
            The stream or the event has been closed.

        Examples
        --------
        >>> s1, s2 = gm.Stream(), gm.Stream()  # doctest: +GPU
        >>> s2.wait(s1.record())
        """
        if not isinstance(event, Event):
            raise TypeError(f"Stream.wait takes a gpumat.Event, got {type(event).__name__}")
        check(driver.cuStreamWaitEvent(self._live(), event._live(), 0), "cuStreamWaitEvent")

    def record(self, event: Event | None = None) -> Event:
        """Record an event on the stream: it completes when the work queued so far has run.

        Parameters
        ----------
        event : Event, optional
            The event to record; a new one of the stream's GPU by default.

        Returns
        -------
        Event
            The recorded event.

        Raises
        ------
        ValueError
            The stream has been closed, or the event is of another GPU.

        Examples
        --------
        >>> s = gm.Stream()  # doctest: +GPU
        >>> e = s.record()
        >>> e.synchronize(); e.query()
        True
        """
        self._live()  # a closed stream makes no event
        event = event or Event(device=self.device)
        event.record(self)
        return event

    def close(self) -> None:
        """Wait for the stream's work and close it.

        The object is unusable afterwards, and its handle is refused until a new Stream takes the driver
        stream again. Closing twice, or closing an :meth:`external` stream, does nothing.

        Raises
        ------
        CudaError
            Queued work failed.

        Examples
        --------
        >>> s = gm.Stream()  # doctest: +GPU
        >>> s.close()
        >>> s.ptr
        0
        """
        if not self._owned or self.ptr == 0:
            return
        handle, ptr, self.handle, self.ptr = self.handle, self.ptr, None, 0
        dev = self.device
        dev.activate()
        check(driver.cuStreamSynchronize(handle), "cuStreamSynchronize")  # the long wait, outside the lock
        with dev.lock:  # no operation can queue on the stream between its last drain and its end
            _retire(dev, ptr, handle, (self.non_blocking, self.priority))

    def __del__(self, _finalizing=sys.is_finalizing):  # no lock, no wait: the next allocation closes it
        if _finalizing():  # interpreter shutdown: the process's end takes the stream with it
            return
        if getattr(self, "_owned", False) and self.ptr:
            kind = (self.non_blocking, self.priority)
            if self.device.memory is None:  # nothing of gpumat's was ever allocated there: a spare now
                # (set and list operations: no lock needed). No memory of gpumat's waits for it, so a next
                # Stream taking it before its work is done only starts behind that work
                own_streams.discard(self.ptr)
                dead_streams.add(self.ptr)
                spare_streams.setdefault((self.device, *kind), []).append((self.ptr, self.handle))
            else:  # retired by the device's next allocation; no new work may go there meanwhile
                collected_streams.add(self.ptr)
                abandoned.append((self.device, self.ptr, self.handle, kind))
            self.ptr = 0

    def __enter__(self) -> Stream:
        self._live()
        state = thread_state()
        stack = state.streams
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


_THREAD = thread_state()  # the threads' state object (one threading.local): read on every call


def checked_handle(handle: int) -> int:
    """A raw stream handle must be a pointer-sized non-negative integer. (Whether it names a live stream of
    the device no library can tell from the integer: a handle from outside gpumat must be one.)"""
    if not 0 <= handle < 2**64:
        raise ValueError(f"a stream handle is an integer in [0, 2**64), got {handle}")
    return int(handle)


def stream_handle(stream, dev: Device) -> int:  # noqa: C901 (each kind of stream object inline: every call)
    """The raw handle for an operation's `stream=` argument on device `dev` (see the module docstring):
    None is the thread's current stream for `dev`, else the legacy default stream (0). For another
    library's stream, which stream the handle names now is settled here (see `foreign`), so the rest of
    the operation finds its Foreign with foreign_of() and no driver call."""
    if stream is None:
        stack = _THREAD.streams
        if stack:
            s = stack[-1]
            if s.device is dev:
                ptr = s.ptr
                if s._owned:
                    if ptr:
                        return ptr
                    raise ValueError("the current stream (a `with stream:` block) has been closed")
                if not trusted(ptr):  # Stream.external: settled as when passed as stream=
                    foreign(ptr, dev)
                return ptr
        return LEGACY_STREAM
    if type(stream) is Stream:
        if stream.device is not dev:
            raise ValueError(
                f"the stream lives on GPU {stream.device.ordinal} and the work on GPU {dev.ordinal}: a stream "
                "takes work of its own GPU"
            )
        if stream._owned:
            if stream.ptr == 0:
                raise ValueError("that stream has been closed")
            return stream.ptr
        if not trusted(stream.ptr):  # Stream.external: a raw handle of another library's stream
            foreign(stream.ptr, dev)
        elif stream.ptr in collected_streams:
            refuse_closed(stream.ptr)
        return stream.ptr
    proto = getattr(stream, "__cuda_stream__", None)  # first: the common case of another library's stream
    if proto is not None:
        value = proto() if callable(proto) else proto
        handle = value[1] if type(value) is tuple and len(value) == 2 else None
        if type(handle) is not int or not 0 <= handle < 1 << 64:  # what _handle_of checks, without its call
            handle = _handle_of(stream)  # which says what is wrong
    elif isinstance(stream, int) and not isinstance(stream, bool):
        handle = checked_handle(stream)
        if handle not in SPECIAL_STREAMS and handle not in own_streams:
            foreign(handle, dev)  # a bare handle: nothing but the driver says which stream it names now
        elif handle in collected_streams:
            refuse_closed(handle)
        return handle
    else:
        handle = _handle_of(stream)
    if handle in SPECIAL_STREAMS or handle in own_streams:
        if handle in collected_streams:
            refuse_closed(handle)
        return handle
    f = foreign_streams.get(handle)
    if f is None or f.device is not dev or not f.lasting and ((ref := f.named_by) is None or ref() is not stream):
        foreign(handle, dev, stream)  # foreign()'s own first tests, inline: this is every such call
    return handle


def _handle_of(stream) -> int:
    """The handle a stream object names: the CUDA stream protocol, a cuda.bindings CUstream, or a
    `cuda_stream`/`ptr` integer (PyTorch streams, older CuPy streams)."""
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        if (
            not (isinstance(value, tuple) and len(value) == 2)
            or isinstance(value[1], bool)
            or not isinstance(value[1], int)
        ):
            raise TypeError(f"{type(stream).__name__}.__cuda_stream__ must give (version, handle), got {value!r}")
        return checked_handle(value[1])
    if isinstance(stream, driver.CUstream):
        return int(stream)
    for attr in ("cuda_stream", "ptr"):  # PyTorch streams / older CuPy streams
        value = getattr(stream, attr, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return checked_handle(value)
    raise TypeError(
        f"stream must be a gpumat.Stream, an object with __cuda_stream__, or a raw handle; got {type(stream).__name__}"
    )


class Event:
    """A CUDA event: record it on a stream, wait for it, or time the work between two.

    Parameters
    ----------
    timing : bool, optional
        Whether the event records a time (for :meth:`elapsed_time`); True by default.
    blocking : bool, optional
        Whether :meth:`synchronize` sleeps instead of spinning; False by default.
    device : Device or int, optional
        The GPU; the current device by default. An event records only on streams of its GPU.

    Attributes
    ----------
    handle : cuda.bindings.driver.CUevent
        The driver's handle (None once closed).
    device : Device
        The event's GPU.
    timing : bool
        As made.

    Raises
    ------
    NoDeviceError
        No usable GPU.

    Examples
    --------
    >>> s = gm.Stream()  # doctest: +GPU
    >>> start, end = gm.Event(), gm.Event()
    >>> A = gm.Matrix.zeros(256, 256, stream=s)
    >>> _ = start.record(s); C = gm.matmul(A, A, stream=s); _ = end.record(s)
    >>> end.synchronize()
    >>> start.elapsed_time(end) >= 0.0
    True
    """

    __slots__ = ("handle", "device", "timing", "__weakref__")

    def __init__(self, timing: bool = True, blocking: bool = False, device=None):
        self.handle = None
        dev = as_device(device).activate()
        flags = 0 if timing else int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        if blocking:
            flags |= int(driver.CUevent_flags.CU_EVENT_BLOCKING_SYNC)
        self.handle = check(driver.cuEventCreate(flags), "cuEventCreate")
        self.device, self.timing = dev, timing

    def _live(self):
        """The driver handle; a ValueError once close() has destroyed the event (read once)."""
        handle = self.handle
        if handle is None:
            raise ValueError("that event has been closed")
        return handle

    def record(self, stream=None) -> Event:
        """Record the event on a stream of its GPU.

        Parameters
        ----------
        stream : Stream or stream-like, optional
            The stream; the thread's current stream of the event's GPU by default.

        Returns
        -------
        Event
            This event.

        Raises
        ------
        ValueError
            A :class:`Stream` of another GPU, or the event has been closed.

        Examples
        --------
        >>> e = gm.Event().record()  # doctest: +GPU
        >>> e.synchronize()
        """
        event = self._live()
        if type(stream) is Stream and stream.device is not self.device:
            raise ValueError(
                f"the event lives on GPU {self.device.ordinal} and the stream on GPU {stream.device.ordinal}: "
                "an event is recorded on a stream of its own GPU"
            )
        dev = self.device.activate()
        check(driver.cuEventRecord(event, stream_handle(stream, dev)), "cuEventRecord")
        return self

    def synchronize(self) -> None:
        """Wait until the work before the event's record has run.

        Raises
        ------
        ValueError
            The event has been closed.
        CudaError
            That work failed.

        Examples
        --------
        >>> gm.Event().record().synchronize()  # doctest: +GPU
        """
        check(driver.cuEventSynchronize(self._live()), "cuEventSynchronize")

    def query(self) -> bool:
        """Whether the event has completed, without waiting.

        Returns
        -------
        bool
            True when the work before the event's record has run (or it was never recorded).

        Raises
        ------
        ValueError
            The event has been closed.
        CudaError
            That work failed.

        Examples
        --------
        >>> e = gm.Event().record()  # doctest: +GPU
        >>> e.synchronize(); e.query()
        True
        """
        (err,) = driver.cuEventQuery(self._live())
        if err == CUresult.CUDA_ERROR_NOT_READY:
            return False
        check((err,), "cuEventQuery")
        return True

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds from this event to ``end``.

        Parameters
        ----------
        end : Event
            The later event; both recorded and complete, both made with ``timing=True``.

        Returns
        -------
        float
            The time between the two records, in milliseconds.

        Raises
        ------
        TypeError
            ``end`` is not an :class:`Event`.
        ValueError
            An event without timing, or a closed one.
        CudaError
            An event not recorded or not complete yet.

        Examples
        --------
        >>> a, b = gm.Event(), gm.Event()  # doctest: +GPU
        >>> _ = a.record(); _ = b.record(); b.synchronize()
        >>> a.elapsed_time(b) >= 0.0
        True
        """
        if not isinstance(end, Event):
            raise TypeError(f"elapsed_time takes the end gpumat.Event, got {type(end).__name__}")
        if not (self.timing and end.timing):
            raise ValueError("elapsed_time needs two events made with timing=True")
        return float(check(driver.cuEventElapsedTime(self._live(), end._live()), "cuEventElapsedTime"))

    def close(self) -> None:
        """Destroy the event now (a collected event is destroyed too); closing twice does nothing.

        Raises
        ------
        CudaError
            The driver refused.

        Examples
        --------
        >>> e = gm.Event()  # doctest: +GPU
        >>> e.close()
        """
        handle, self.handle = self.handle, None
        if handle is not None:
            check(driver.cuEventDestroy(handle), "cuEventDestroy")

    def __del__(self, _finalizing=sys.is_finalizing):
        if _finalizing():
            return
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


def destroy_event(event) -> None:
    driver.cuEventDestroy(event)


# A buffer used on another library's stream by an operation that has not recorded its mark yet (it
# failed between the two): its free waits for the whole device, since that stream may be gone.
UNMARKED = "unmarked"
MAX_FOREIGN = 256  # other libraries' streams remembered by handle (each holds a driver event); the oldest goes first


class Foreign:
    """One stream of another library, as gpumat knows it: its handle, the driver's id of the stream (a
    handle is reused for a new stream once its stream is destroyed; an id never is), and its mark, one
    event recorded again after every gpumat operation queued there, so that its latest recording always
    stands after the last work gpumat queued on the stream. A buffer used there keeps the Foreign (a key
    of its `others`), and its free waits for the event instead of touching the handle, which may be
    destroyed by then; later recordings are still after the buffer's last use, since they follow it on
    this same stream (a new stream behind the same handle gets a Foreign and an event of its own). Small
    blocks that lived on the stream alone are kept for it on the free list, keyed by the Foreign."""

    __slots__ = ("handle", "sid", "device", "event", "named_by", "lasting")

    def __init__(self, handle: int, sid: int, dev: Device):
        self.handle, self.sid, self.device, self.named_by = handle, sid, dev, None
        # one of PyTorch's own streams, which live as long as the process (_pytorch_own): operations there
        # record no mark, a wait for its work records one then (mark_now)
        self.lasting = False
        self.event = new_event()  # dev's context is current (foreign() activates it)

    def __del__(self, _finalizing=sys.is_finalizing, _abandoned=abandoned):  # no lock, no wait, no driver call
        # The last buffer holding it is gone. Or it was only reachable from garbage in a reference cycle,
        # whose other finalizers may bring it back: a collected Matrix's block goes on the pool's pending
        # queue with its Foreign. So the event is not destroyed here but retired (the device's next
        # allocation destroys it), and a Foreign brought back has no event: waits for its mark then wait
        # for the whole device (wait_for_streams), as for an unmarked stream.
        event, self.event = self.event, None
        if event is not None and not _finalizing():
            _abandoned.append((self.device, None, event, None))

    def __repr__(self) -> str:
        return f"<gpumat foreign stream 0x{self.handle:x} (id {self.sid}) on device {self.device.ordinal}>"


# handle -> the Foreign of the stream it named when last settled (for handle 2, see _per_thread). The hot
# paths look a handle up here directly (`foreign_streams.get(s) or foreign_of(s, dev)`): never rebound.
foreign_streams: dict[int, Foreign] = {}


def _stream_id(handle: int) -> int:
    return int(check(driver.cuStreamGetId(handle), "cuStreamGetId"))


def _stream_context(handle: int) -> int:
    return int(check(driver.cuStreamGetCtx(handle), "cuStreamGetCtx"))


def foreign(handle: int, dev: Device, named_by=None) -> Foreign:
    """Settle which stream another library's `handle` names now, by the driver's id of it (one driver
    call), and return its Foreign; `named_by`: the object that gave the handle.

    stream_handle asks only when nothing cheaper can tell: an object that named this stream before and
    is still alive names it still, since a library destroys its stream only when its object is closed
    or collected (a closed object names no stream, or another handle) - except a wrapper of a raw handle
    (a CUstream, an ExternalStream) and PyTorch's stream objects (see _life_says_nothing), which are
    taken like the bare handle. One of PyTorch's own streams, never destroyed, is asked once and then
    known by its handle alone (`lasting`; see _pytorch_own). So a call with the same stream object costs
    a dict lookup and a weak reference, and a bare handle, or a new object for the stream, costs the id."""
    if handle == PER_THREAD_STREAM:
        return _per_thread(dev)
    f = foreign_streams.get(handle)
    if f is not None and f.lasting and f.device is dev:
        return f  # one of PyTorch's own streams: never destroyed, so its handle names it for good
    if handle in dead_streams:  # a handle of a stream gpumat closed: kept by it, so no other stream has it
        refuse_closed(handle)
    dev.activate()
    sid = _stream_id(handle)
    if f is None or f.sid != sid or f.device is not dev:  # a stream not seen before, or a new one behind the handle
        _check_same_device(handle, dev)  # once a stream: a stream's id is never given to another
        f = Foreign(handle, sid, dev)
        foreign_streams[handle] = f
        if len(foreign_streams) > MAX_FOREIGN:  # buffers holding an evicted Foreign keep it alive until they are freed
            try:
                foreign_streams.pop(next(iter(foreign_streams)), None)
            except (RuntimeError, StopIteration):  # another thread changed the dict meanwhile: next time
                pass
    if named_by is not None and (f.named_by is None or f.named_by() is None):
        # the first live object to name it (a long-lived stream object is not displaced by the short-lived
        # ones some libraries make on each call, e.g. torch.cuda.current_stream())
        f.named_by = _named_by(named_by)
    if named_by is not None and _pytorch_own(named_by):
        f.lasting = True
    return f


def refuse_closed(handle: int) -> None:
    """The ValueError for a handle of a stream gpumat closed, or collected unclosed."""
    raise ValueError(
        f"stream handle 0x{handle:x} names a gpumat Stream that was closed or garbage-collected: keep the "
        "gm.Stream object alive (or close it only after its last use) rather than its raw handle"
    )


def _check_same_device(handle: int, dev: Device) -> None:
    """A ValueError, before anything is queued, when another library's stream belongs to another GPU's
    context than `dev`'s (the device's context current): the driver refuses work and events across
    contexts (CUDA_ERROR_INVALID_HANDLE)."""
    ctx = _stream_context(handle)
    if ctx == int(dev.context):
        return
    other = device_of_context(ctx)
    where = f"GPU {other.ordinal}" if other is not None else "another CUDA context"
    raise ValueError(
        f"the stream 0x{handle:x} belongs to {where} and the work to GPU {dev.ordinal}: pass a stream of "
        f"GPU {dev.ordinal} (or make that GPU current when the work is queued)"
    )


def _pytorch_own(obj) -> bool:
    """Whether a PyTorch stream object names one of PyTorch's own streams: its default stream or one of
    its pooled streams, which PyTorch creates once a device and never destroys. PyTorch numbers its own
    streams with odd ids and an external stream (a wrapped raw handle, which its owner may destroy) by
    its handle, an even address; an object without that id, or of another library, is never taken as one."""
    wrapper, pytorch = _kind_of(type(obj))
    if wrapper or not pytorch:
        return False
    sid = getattr(obj, "stream_id", None)
    return type(sid) is int and sid & 1 == 1


def _named_by(obj):
    """A weak reference to the object that named a stream, or None where the object's life says nothing
    about the stream's: a wrapper of a raw handle, an object that takes no weak reference, or any of
    PyTorch's stream objects (see _life_says_nothing)."""
    if _life_says_nothing(type(obj)):
        return None
    try:
        return weakref.ref(obj)
    except TypeError:
        return None


_stream_types: dict[type, tuple[bool, bool]] = {}  # stream object type -> (a wrapper of a raw handle, PyTorch's)


def _kind_of(kind: type) -> tuple[bool, bool]:
    """(whether the type wraps a raw handle: a CUstream, PyTorch's or CuPy's ExternalStream; whether it is
    one of PyTorch's), read once a type."""
    known = _stream_types.get(kind)
    if known is None:
        mro = kind.__mro__
        wrapper = issubclass(kind, driver.CUstream) or any(k.__name__ == "ExternalStream" for k in mro)
        pytorch = any(str(getattr(k, "__module__", "")).split(".")[0] == "torch" for k in mro)
        known = _stream_types[kind] = (wrapper, pytorch)
    return known


def _life_says_nothing(kind: type) -> bool:
    """Whether an object of this type may stay alive while the stream it names is destroyed, or may not
    be weakly referenced safely: a wrapper of a raw handle (a CUstream, PyTorch's and CuPy's ExternalStream), and
    every PyTorch stream type. A plain torch.cuda.Stream is what torch.cuda.current_stream() returns
    inside a `torch.cuda.stream(ExternalStream(h))` block, so it can name a stream its owner destroys;
    and PyTorch's CUDA stream type frees its objects without clearing their weak references (the
    releases before pytorch#183403), so a reference kept past the object reads freed memory - the
    interpreter crashed at exit clearing one. Their streams are settled by the driver's id each call."""
    wrapper, pytorch = _kind_of(kind)
    return wrapper or pytorch


def _per_thread(dev: Device) -> Foreign:
    """The Foreign of the calling thread's per-thread default stream on `dev`: that stream lives as long
    as the thread, so its id is asked once a thread (the thread's state keeps it)."""
    state = thread_state()
    mine = state.per_thread_streams
    if mine is None:
        mine = state.per_thread_streams = {}
    f = mine.get(dev)
    if f is None:
        dev.activate()
        f = mine[dev] = Foreign(PER_THREAD_STREAM, _stream_id(PER_THREAD_STREAM), dev)
    return f


def foreign_of(handle: int, dev: Device) -> Foreign:
    """The Foreign of another library's `handle`, as stream_handle settled it for this operation (a dict
    lookup: no driver call)."""
    if handle == PER_THREAD_STREAM:
        return _per_thread(dev)
    f = foreign_streams.get(handle)
    if f is None or f.device is not dev:  # a handle that did not come through stream_handle
        f = foreign(handle, dev)
    return f


def mark_now(key, mark):
    """What a wait for the work gpumat queued on a buffer's stream `key` (a handle, or a Foreign) waits for,
    given the buffer's `mark` for it (None, UNMARKED or the Foreign): unchanged, except for one of
    PyTorch's own streams (`lasting`: their operations record no mark), whose mark is recorded now, after
    all the work queued there so far (the device current), and returned as the Foreign."""
    if key.__class__ is Foreign and key.lasting:
        record_after(key, key.handle)
        return key
    return mark


def record_after(f: Foreign, stream: int) -> None:
    """Record f's mark after the work just queued on its stream (device current)."""
    event = f.event
    if event is None:  # a Foreign brought back after its finalizer ran (see Foreign.__del__): a new event
        event = f.event = new_event()
    (err,) = driver.cuEventRecord(event, stream)
    if err:  # check()'s work, only on failure: this is every operation on another library's stream
        check((err,), "cuEventRecord")


MAX_SPARE = 8  # events a device keeps for record-then-wait orderings
_spare_events: dict = {}  # Device -> timing-free events of its context, free for the next record-then-wait


def _borrow_event(dev: Device | None):
    """An event of `dev`'s context (the current one) to record and wait for once. A cuStreamWaitEvent
    waits for the recording the event had when the wait was queued, so the event may be recorded again at
    once: it goes back to the device's spares (give_back) rather than being destroyed and made again, two
    driver calls saved a wait. None (no gpumat context current yet): a new event, destroyed after."""
    spare = _spare_events.get(dev)
    if spare:
        try:
            return spare.pop()  # atomic: two threads never get one event
        except IndexError:
            pass
    return new_event()


def _give_back(dev: Device | None, event) -> None:
    spare = _spare_events.setdefault(dev, []) if dev is not None else None
    if spare is not None and len(spare) < MAX_SPARE:
        spare.append(event)
    else:
        destroy_event(event)


def wait_for_streams(stream: int, others) -> None:
    """Make `stream` wait for work on other streams (the device current). `others` maps a stream handle to
    None (one of gpumat's own or a default stream: the work queued on it so far; a stream gpumat closed is
    skipped, it was drained when it closed), or a Foreign to itself (its mark: the work gpumat queued
    there) or to UNMARKED; a plain iterable of handles means None for each.

    `stream` is live: the stream of the operation being queued, or the legacy stream. It may have the
    handle of a stream gpumat closed (the driver gives a destroyed stream's handle to the next stream
    made, here another library's), so being in dead_streams says nothing of it (the memory pool sends the
    frees of blocks tagged with a closed stream to the legacy stream itself)."""
    items = others.items() if isinstance(others, dict) else ((h, None) for h in others)
    dev, temp = None, None
    for s, mark in items:
        mark = mark_now(s, mark)
        if mark is UNMARKED:
            check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
            continue
        if mark is not None:
            event = mark.event
            if event is None:  # a Foreign brought back after its finalizer (see Foreign.__del__): no mark left
                check(driver.cuCtxSynchronize(), "cuCtxSynchronize")
            else:
                check(driver.cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent")
            continue
        if s == stream or s in dead_streams:
            continue
        if temp is None:
            dev = _THREAD.ctx
            temp = _borrow_event(dev)
        try:
            record_on(temp, s)
            check(driver.cuStreamWaitEvent(stream, temp, 0), "cuStreamWaitEvent")
        except BaseException:
            destroy_event(temp)  # in whatever state the failure left it: not for another wait
            raise
    if temp is not None:
        _give_back(dev, temp)


def wait_across_devices(stream: int, dev: Device, other: int, other_dev: Device) -> None:
    """Make `stream` (on dev) wait for the work queued so far on `other` (on other_dev)."""
    other_dev.activate()
    event = _borrow_event(other_dev)
    try:
        record_on(event, other)
        dev.activate()
        check(driver.cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent")
    except BaseException:
        destroy_event(event)
        raise
    _give_back(other_dev, event)


def synchronize_stream(stream: int) -> None:
    check(driver.cuStreamSynchronize(stream), "cuStreamSynchronize")


def synchronize_event(event) -> None:
    check(driver.cuEventSynchronize(event), "cuEventSynchronize")
