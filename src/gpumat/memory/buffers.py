"""Device buffers and their lifetime rule: the memory a Matrix (and its views) shares.

A `DeviceBuffer` is a block of gpumat's pool with one owner; a `BorrowedBuffer` is another library's
memory imported without a copy. Both follow one rule: `release()` marks the buffer dead at once (no new
operation can use it) and lets go of the memory when the last `hold()` (a long host transfer running
outside the device lock) ends. A DeviceBuffer is freed stream-ordered after every stream that used it:
it remembers the streams (or, for another library's stream, its Foreign, whose event is recorded after
the last use).
Finalizers only queue the block for the device's next allocation (see gpumat.memory.pool). A
BorrowedBuffer's release hands the memory back to its producer only after the work gpumat queued on it
has run (it waits for the streams, or their marks, that used it).
"""

from __future__ import annotations

import sys

from ..runtime.devices import Device, device
from ..runtime.streams import (
    LEGACY_STREAM,
    SPECIAL_STREAMS,
    UNMARKED,
    Foreign,
    foreign_of,
    foreign_streams,
    mark_now,
    own_streams,
    record_after,
    synchronize_event,
    synchronize_stream,
    trusted,
    wait_for_streams,
)
from .pool import device_pool


class _Buffer:
    """What every Matrix's memory shares: the device, the stream it belongs to, and the lifetime rule.
    A long host transfer holds the buffer (hold/unhold, outside the device lock); release() marks it dead
    at once, so no new operation can use it, and lets go of the memory when the last hold ends."""

    __slots__ = ("ptr", "nbytes", "device", "stream", "others", "alive", "holds", "__weakref__")

    def hold(self) -> None:
        """Keep the memory through a transfer that runs outside the device lock (lock held when called)."""
        self.holds += 1

    def unhold(self) -> None:
        with self.device.lock:
            self.holds -= 1
            after = self._let_go() if self.holds == 0 and not self.alive else None
        if after is not None:
            after()

    def release(self) -> None:
        """Mark the buffer dead and let go of its memory (now, or when the last hold ends)."""
        with self.device.lock:
            if not self.alive:
                return
            self.alive = False
            after = self._let_go() if self.holds == 0 else None
        if after is not None:
            after()

    def _let_go(self):
        """Under the device lock: give the memory up; may return a callable to run after the lock."""
        raise NotImplementedError


class DeviceBuffer(_Buffer):
    """A block of device memory with one owner; views of a Matrix share it.

    `stream` is the stream it was allocated on and is freed on: one of gpumat's streams or the legacy
    stream, or for another library's stream its Foreign (freed on the legacy stream after the stream's
    mark, or kept on the free list for that stream). When an operation uses the block on another stream,
    that stream first waits for the allocation, and the eventual free waits for that stream (see use_on).
    A long host transfer holds the block (hold/unhold): a free() meanwhile marks it dead at once and
    releases the memory when the transfer lets go."""

    __slots__ = ()
    borrowed = False

    def __init__(self, nbytes: int, stream: int = LEGACY_STREAM, dev: Device | None = None):
        self.ptr, self.nbytes, self.others, self.alive, self.holds = 0, nbytes, None, True, 0
        dev = self.device = dev or device()
        self.stream, home = stream, None
        if stream not in SPECIAL_STREAMS and stream not in own_streams:  # not trusted(stream), inline
            # allocated on another library's stream (as stream_handle settled it for this operation), the
            # block is ordered there already; the operation's mark (done_on) will say when its use ends
            home = self.stream = foreign_streams.get(stream) or foreign_of(stream, dev)
            self.others = {home: UNMARKED}
        if nbytes > 0:
            p = dev.memory or device_pool(dev)
            with dev.lock:
                self.ptr = p.alloc(nbytes, stream, home)

    def use_on(self, stream: int, f: Foreign | None = None) -> None:
        """Order `stream` (f: its Foreign, for another library's stream) after this block's allocation the
        first time it is used there (lock held)."""
        key = stream if f is None else f
        if key == self.stream:
            return
        others = self.others
        if others is None:
            others = self.others = {}
        elif key in others:
            return
        allocated_on = self.stream
        if allocated_on.__class__ is Foreign:  # after its mark there (the whole device, if none was recorded)
            wait_for_streams(stream, {allocated_on: others[allocated_on]})
        else:
            wait_for_streams(stream, (allocated_on,))
        others[key] = None if f is None else UNMARKED

    def _let_go(self) -> None:
        """Free the block, stream-ordered after every stream that used it."""
        ptr, self.ptr = self.ptr, 0
        if ptr:
            self.device.activate()  # events and frees below belong to this device's context
            others, self.others = self.others, None
            self.device.memory.release(ptr, self.nbytes, self.stream, others)
        return None

    def __del__(self):  # the safety net: only queue the block, never take a lock here
        if self.ptr:
            try:
                self.device.memory.pending.append((self.ptr, self.nbytes, self.stream, self.others))
            except Exception:  # interpreter shutdown: nothing useful left to do
                pass
            self.ptr = 0


class BorrowedBuffer(_Buffer):
    """Device memory that another library owns (imported through DLPack or the CUDA array interface).
    gpumat never frees it; releasing it drops the reference that keeps the producer alive (for DLPack,
    by calling the producer's deleter)."""

    __slots__ = ("owner", "_release", "readonly", "home")
    borrowed = True

    def __init__(
        self,
        ptr: int,
        nbytes: int,
        dev: Device,
        owner,
        release=None,
        stream: int = LEGACY_STREAM,
        readonly: bool = False,
    ):
        self.ptr, self.nbytes, self.device, self.stream, self.others = ptr, nbytes, dev, stream, None
        self.alive, self.holds, self.owner, self._release = True, 0, owner, release
        self.readonly = readonly  # the producer flagged it read-only (DLPack READ_ONLY, CAI's data[1])
        # imported on another library's stream (which may be destroyed before a later use elsewhere): its
        # mark, recorded now, stands after the producer's work that the import waited for
        self.home = None
        if ptr and not trusted(stream):
            # the import stream is known by its Foreign from here on, as a DeviceBuffer's allocation stream
            # is: its handle may name a new stream later, which must not pass for the import's
            self.home = self.stream = foreign_of(stream, dev)
            record_after(self.home, stream)
            self.others = {self.home: self.home}

    def use_on(self, stream: int, f: Foreign | None = None) -> None:
        """The producer's stream order was settled at import, on the import stream: the first use on
        another stream waits for the import (the import stream itself where it is gpumat's own or the
        legacy one, else the mark recorded there at import), as a block of gpumat's waits for its
        allocation; and the stream is remembered (f: its Foreign, for another library's stream), so that
        the release waits for the work gpumat queues there (lock held)."""
        key, state = (stream, None) if f is None else (f, UNMARKED)
        others = self.others
        if others is None:
            others = self.others = {}
        elif key in others:
            return
        if self.home is not None:
            if key is not self.home:  # another stream than the import's (a new one behind its handle too)
                wait_for_streams(stream, {self.home: self.home})  # after the import's mark there
        elif stream != self.stream and trusted(self.stream):
            wait_for_streams(stream, (self.stream,))
        others[key] = state

    def _let_go(self):
        return self._drop  # the producer's deleter runs after the device lock is let go

    def _wait_for_queued_work(self) -> None:
        """Before the producer gets its memory back: wait until the work gpumat queued on it has run, on
        every stream that used it (a mark for another library's stream; the whole device for one whose
        work is not marked), or the producer's allocator could hand the memory to its next tensor while a
        gpumat kernel still reads or writes it."""
        others, self.others = self.others or {}, None
        if not others or not self.ptr:  # (nothing queued: no wait, not even on the import stream)
            return
        self.device.activate()
        for stream, mark in others.items():
            mark = mark_now(stream, mark)
            event = mark.event if mark.__class__ is Foreign else None  # None: brought back without one
            if event is not None:
                synchronize_event(event)
            elif mark is None and trusted(stream):
                synchronize_stream(stream)
            else:  # another library's stream without a mark (an operation failed before recording it)
                self.device.synchronize()
                return

    def _drop(self) -> None:
        try:
            self._wait_for_queued_work()
        finally:  # the producer gets its memory back even when a wait fails
            owner, release, self.owner, self._release, self.ptr = self.owner, self._release, None, None, 0
            if release is not None:
                release(owner)

    def __del__(self, _finalizing=sys.is_finalizing):
        # collected without free(): the producer gets its memory back once the work queued on it has run
        # (for the CUDA array interface, by the reference to the producer going with this object). During
        # interpreter shutdown no wait and no producer's deleter runs: either may call into a module already
        # torn down, and the process's end frees the memory.
        if _finalizing():
            self._release = None
            return
        if self.ptr or self._release is not None:  # (an empty import has no memory, but may have a deleter)
            try:
                self._wait_for_queued_work()  # no lock taken: only driver waits
                if self._release is not None:
                    self._release(self.owner)
            except Exception:
                pass
            self._release = None
