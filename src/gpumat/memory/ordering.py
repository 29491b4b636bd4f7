"""The stream-ordering contract: what an operation does around queueing its work, so that memory is used
and freed in order whatever the streams.

The rule: a buffer (gpumat's block or an imported array) is used on a stream only after its allocation
(or import) there, and is freed only after every use; and work gpumat queues on another library's
stream can be waited for later even when that stream is gone by then. So an operation on `stream`,
holding its device's lock:

1. before queueing: `f = use_on(stream, *buffers)` orders the stream after each buffer's allocation the
   first time the buffer is used there, and returns the stream's Foreign (another library's stream) or
   None (one of gpumat's streams, or a default stream);
2. after queueing, on another library's stream: `mark_done(f, stream, *buffers)` records the stream's
   mark and has each buffer's free wait for it (`done_on` does both steps' second half when the caller
   has not kept f); where the operation itself waited for its work to finish (a copy to the host, a dot's
   result), `finished_on(f, *buffers)` has the frees wait for the mark with no new recording.

The buffers are gpumat.memory.buffers' (DeviceBuffer, BorrowedBuffer); the Foreign, marks and handles
are gpumat.runtime.streams'.
"""

from __future__ import annotations

from ..runtime.streams import SPECIAL_STREAMS, foreign_of, foreign_streams, own_streams, record_after


def use_on(stream: int, *buffers):
    """Before queueing work on `stream` (device lock held): order it after each buffer's allocation, the
    first time the buffer is used there. Returns the stream's Foreign when it is another library's stream
    (for mark_done after the work), else None."""
    if stream in SPECIAL_STREAMS or stream in own_streams:
        for buf in buffers:
            # a block of gpumat's own on its allocation stream has nothing to order; imported memory on its
            # import stream nothing either, but its release waits there only once gpumat has queued work
            if buf.stream != stream or buf.borrowed:
                others = buf.others  # used there before: nothing to order (what buf.use_on would find)
                if others is None or stream not in others:
                    buf.use_on(stream)
        return None
    # another library's stream, as stream_handle settled it for this operation
    f = foreign_streams.get(stream) or foreign_of(stream, buffers[0].device)
    for buf in buffers:
        others = buf.others
        if others is None or f not in others:
            buf.use_on(stream, f)
    return f


def done_on(stream: int, *buffers) -> None:
    """After queueing work on `stream` (device lock held): when it is another library's stream, mark_done."""
    if stream in SPECIAL_STREAMS or stream in own_streams:
        return
    mark_done(foreign_streams.get(stream) or foreign_of(stream, buffers[0].device), stream, *buffers)


def mark_done(f, stream: int, *buffers) -> None:
    """After queueing work on another library's stream (f, handle `stream`; device lock held): its mark is
    recorded once (runtime.streams.Foreign) and each buffer's eventual free waits for it (the stream itself
    may be gone by then). This recording is the one driver call such an operation adds: the free of a
    buffer used there, or its block leaving the free list kept for the stream, may come after the stream
    is destroyed, when nothing else can order it after this work."""
    if not f.lasting:  # one of PyTorch's own streams records its mark only when something waits for it
        record_after(f, stream)
    for buf in buffers:  # finished_on's loop, inline: this is every operation on another library's stream
        others = buf.others
        if others is None:
            buf.others = {f: f}
        else:
            others[f] = f


def finished_on(f, *buffers) -> None:
    """After an operation on another library's stream (f) that waited for its own work there (device lock
    held), or once its mark is recorded: each buffer's free waits for f's mark."""
    for buf in buffers:
        others = buf.others
        if others is None:
            buf.others = {f: f}
        else:
            others[f] = f
