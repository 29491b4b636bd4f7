"""A stand-in driver that keeps the order of the work gpumat queues, and checks gpumat's memory against it.

Run as `python tests/stream_model.py SCENARIO [--reuse-handles]` (tests/test_stream_order_cpu.py does, one process a
scenario: it replaces the driver for the whole process). It prints one JSON line: the scenario's facts
and the model's `violations`.

The model: every call that queues work (a launch, a copy, a fill, an event record, a wait for an event, an
allocation or a free) is a node on its stream, after the stream's previous node (a wait's node also
after the event's recording, so a host wait for the stream covers what it waited for); host waits
(stream, event, context synchronisation, synchronous copies) complete the nodes they wait for. A
node happens before another when it is an ancestor of it or was completed by the host before it was
queued (vector clocks, one entry a stream). Streams are not blocking: the legacy
stream orders itself with nothing, so nothing passes by an implicit synchronisation. Checked:
- a block's uses (kernels, copies, fills that reach into it) come after its allocation, and after
  every use of the block in its earlier lives (gpumat's free list hands blocks out again without the
  driver: each Pool.alloc starts a new life);
- a block's free comes after all its uses;
- no call names a stream after it was destroyed (until a new stream gets its handle) or a destroyed event.
Another library's streams are made with `foreign_stream()`; `destroy(handle)` destroys one with its
work still queued, and `recycle(handle)` gives the handle to a new stream, as the driver may; with
--reuse-handles every stream made (gpumat's or another library's) takes the handle destroyed last.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import json
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import python_path  # noqa: E402  (the stand-in driver this one extends)

real, OK = python_path.real, python_path.OK
DEVICE_BASE = 0x200000000000  # far from host addresses, so a host pointer is never taken for a block
FOREIGN_BASE = 0xABC000


class Node:
    __slots__ = ("index", "stream", "clock", "what")

    def __init__(self, index, stream, clock, what):
        self.index, self.stream, self.clock, self.what = index, stream, clock, what


class Stream:
    def __init__(self, key: int, sid: int, handle: int):
        self.key, self.sid, self.handle = key, sid, handle
        self.last: Node | None = None
        self.waits: list[Node] = []
        self.completed: list[tuple[int, int]] = []  # (node index completed up to, when): both increasing


class Block:
    def __init__(self, base: int, size: int, alloc: Node):
        self.base, self.size, self.alloc = base, size, alloc
        self.uses: list[Node] = [alloc]
        self.earlier: list[Node] = []  # uses in the block's earlier lives
        self.fresh, self.freed = True, False


class OrderingDriver(python_path.StandInDriver):
    def __init__(self, reuse_handles: bool = False):
        super().__init__()
        # as many drivers do: the next stream made (gpumat's or another library's) gets the handle of the
        # stream destroyed last
        self.reuse_handles, self.free_handles = reuse_handles, []
        self.nodes: list[Node] = []
        self.keys = itertools.count()
        self.sids = itertools.count(1000)
        self.legacy = self._stream(0)
        self.by_handle: dict[int, Stream] = {0: self.legacy, 1: self.legacy}
        self.per_thread: dict[int, Stream] = {}  # every thread's per-thread stream, in the order they came
        self.thread_streams = threading.local()
        self.all_streams: list[Stream] = [self.legacy]
        self.destroyed: set[int] = set()
        self.events: dict[int, Node | None] = {}
        self.dead_events: set[int] = set()
        self.blocks: dict[int, Block] = {}
        self.bases: list[int] = []
        self.next_address = DEVICE_BASE
        self.launching = threading.local()  # .uses: the block addresses the thread's next launch reaches
        self.lock = threading.RLock()  # one driver call at a time: threads see the model consistent
        self.violations: list[str] = []
        self.calls = collections.Counter()
        self.next_foreign = itertools.count(FOREIGN_BASE, 0x1000)

    # streams ---------------------------------------------------------------------------------
    def _stream(self, handle: int) -> Stream:
        s = Stream(next(self.keys), next(self.sids), handle)
        if handle:
            self.all_streams.append(s)
        return s

    def foreign_stream(self, handle: int | None = None) -> int:
        """Another library makes a stream (at `handle` when given: a handle reused for a new stream)."""
        if handle is None:
            handle = self.free_handles.pop() if self.free_handles else next(self.next_foreign)
        elif handle in self.free_handles:
            self.free_handles.remove(handle)
        self.destroyed.discard(handle)
        self.by_handle[handle] = self._stream(handle)
        return handle

    def destroy(self, handle: int) -> None:
        """Another library destroys its stream, its work still queued (as cuStreamDestroy allows)."""
        del self.by_handle[handle]
        self.destroyed.add(handle)
        if self.reuse_handles:
            self.free_handles.append(handle)

    recycle = foreign_stream

    def resolve(self, stream) -> Stream:
        handle = int(stream or 0)
        if handle == 2:  # each thread's own (a thread-local, not the thread's id: Python hands ids out again)
            s = getattr(self.thread_streams, "per_thread", None)
            if s is None:
                s = self.thread_streams.per_thread = self.per_thread[len(self.per_thread)] = self._stream(2)
            return s
        if handle in self.destroyed:
            self.violations.append(f"a destroyed stream's handle 0x{handle:x} reached the driver")
        s = self.by_handle.get(handle)
        if s is None:
            self.violations.append(f"unknown stream handle 0x{handle:x}")
            s = self.by_handle[handle] = self._stream(handle)
        return s

    def _node(self, stream: Stream, what: str) -> Node:
        clock: dict[int, int] = {}
        for pred in ([stream.last] if stream.last else []) + stream.waits:
            for key, index in pred.clock.items():
                if clock.get(key, -1) < index:
                    clock[key] = index
        node = Node(len(self.nodes), stream, clock, what)
        clock[stream.key] = node.index
        self.nodes.append(node)
        stream.last, stream.waits = node, []
        return node

    def _complete(self, clock: dict[int, int]) -> None:
        now = len(self.nodes)
        for s in self.all_streams + list(self.per_thread.values()):
            upto = clock.get(s.key)
            if upto is not None and (not s.completed or s.completed[-1][0] < upto):
                s.completed.append((upto, now))

    def before(self, u: Node, v: Node) -> bool:
        """Whether u happens before v."""
        if v.clock.get(u.stream.key, -1) >= u.index:
            return True
        marks = u.stream.completed
        i = bisect.bisect_left(marks, (u.index, -1))
        return i < len(marks) and marks[i][1] <= v.index

    # blocks ------------------------------------------------------------------------------------
    def block_of(self, address: int) -> Block | None:
        if not isinstance(address, int) or address < DEVICE_BASE:
            return None
        i = bisect.bisect_right(self.bases, address) - 1
        if i < 0:
            return None
        b = self.blocks[self.bases[i]]
        return b if address < b.base + b.size else None

    def _use(self, node: Node, addresses) -> None:
        for address in addresses:
            b = self.block_of(int(address))
            if b is None:
                continue
            if b.freed:
                self.violations.append(f"{node.what} uses block 0x{b.base:x} after its free")
            if b.alloc is not None and not self.before(b.alloc, node):
                self.violations.append(f"{node.what} uses block 0x{b.base:x} before its allocation")
            for earlier in b.earlier:
                if not self.before(earlier, node):
                    self.violations.append(
                        f"{node.what} on stream {node.stream.sid} uses block 0x{b.base:x} while its earlier "
                        f"life's {earlier.what} on stream {earlier.stream.sid} may still run"
                    )
                    break
            b.uses.append(node)

    def new_life(self, address: int) -> None:
        """Pool.alloc handed the block out: a new life (unless the driver has just allocated it)."""
        b = self.block_of(address)
        if b is None:
            return
        if b.fresh:
            b.fresh = False
            return
        b.earlier += b.uses
        b.uses, b.alloc = [], None

    # the driver ----------------------------------------------------------------------------------
    def cuStreamCreateWithPriority(self, flags, priority):
        handle = self.free_handles.pop() if self.free_handles else 0x6000 + next(self._ids)
        self.destroyed.discard(handle)
        self.by_handle[handle] = self._stream(handle)
        return (*OK, real.CUstream(handle))

    def cuStreamDestroy(self, stream):
        self.resolve(stream)
        self.destroy(int(stream))
        return OK

    def cuStreamGetId(self, stream):
        return (*OK, self.resolve(stream).sid)

    def cuStreamSynchronize(self, stream):
        s = self.resolve(stream)
        if s.last:
            self._complete(s.last.clock)
        return OK

    def cuCtxSynchronize(self):
        for s in self.all_streams + list(self.per_thread.values()):
            if s.last:
                self._complete(s.last.clock)
        return OK

    def cuEventCreate(self, flags):
        event = 0x5000 + next(self._ids)
        self.events[event] = None
        return (*OK, real.CUevent(event))

    def _event(self, event) -> int:
        e = int(event)
        if e in self.dead_events or e not in self.events:
            self.violations.append(f"event 0x{e:x} used after it was destroyed")
        return e

    def cuEventDestroy(self, event):
        e = self._event(event)
        self.dead_events.add(e)
        return OK

    def cuEventRecord(self, event, stream):
        e = self._event(event)
        self.events[e] = self._node(self.resolve(stream), "an event record")
        return OK

    def cuStreamWaitEvent(self, stream, event, flags):
        s, captured = self.resolve(stream), self.events.get(self._event(event))
        if captured is not None:  # a node of its own: a host wait for the stream waits for the event's work too
            s.waits.append(captured)
            self._node(s, "a wait")
        return OK

    def cuEventSynchronize(self, event):
        captured = self.events.get(self._event(event))
        if captured is not None:
            self._complete(captured.clock)
        return OK

    def cuMemAllocAsync(self, nbytes, stream):
        base = self.next_address
        self.next_address += (int(nbytes) + (1 << 20) - 1) & ~((1 << 20) - 1)
        node = self._node(self.resolve(stream), "an allocation")
        self.blocks[base] = Block(base, int(nbytes), node)
        bisect.insort(self.bases, base)
        return (*OK, real.CUdeviceptr(base))

    def cuMemFreeAsync(self, ptr, stream):
        b = self.block_of(int(ptr))
        node = self._node(self.resolve(stream), "a free")
        if b is not None:
            for use in b.earlier + b.uses:
                if not self.before(use, node):
                    self.violations.append(
                        f"block 0x{b.base:x} freed on stream {node.stream.sid} while its {use.what} on stream "
                        f"{use.stream.sid} may still run"
                    )
                    break
            b.freed = True
        return OK

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        uses, self.launching.uses = getattr(self.launching, "uses", []), []
        self._use(self._node(self.resolve(stream), "a kernel"), uses)
        return OK

    def cuLaunchKernelEx(self, config, f, params, extra):
        """A programmatic dependent launch (a product or split-K's reduction on sm_90) or a cluster launch:
        a dependent kernel waits in griddepcontrol.wait for the grid queued before it, so it is ordered on
        its stream as a launch is."""
        return self.cuLaunchKernel(f, 0, 0, 0, 0, 0, 0, 0, config.hStream, params, extra)

    def _queued(self, stream, what: str, *addresses) -> Node:
        node = self._node(self.resolve(stream), what)
        self._use(node, addresses)
        return node

    def cuMemsetD2D8Async(self, dst, pitch, value, width, height, stream):
        self._queued(stream, "a fill", dst)
        return OK

    cuMemsetD2D16Async = cuMemsetD2D8Async

    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):
        self._queued(stream, "a copy", dst, src)
        return OK

    def cuMemcpyHtoDAsync(self, dst, src, nbytes, stream):
        self._queued(stream, "an upload", dst)
        return OK

    def cuMemcpyDtoHAsync(self, dst, src, nbytes, stream):
        self._queued(stream, "a download", src)
        return OK

    def cuMemcpy2DAsync(self, p, stream):
        device = int(real.CUmemorytype.CU_MEMORYTYPE_DEVICE)
        ends = [int(p.srcDevice)] if int(p.srcMemoryType) == device else []
        ends += [int(p.dstDevice)] if int(p.dstMemoryType) == device else []
        if int(p.srcPitch) < int(p.WidthInBytes) or int(p.dstPitch) < int(p.WidthInBytes):
            self.violations.append("a 2-D copy with a pitch below its width (the driver refuses it)")
        self._queued(stream, "a 2-D copy", *ends)
        return OK

    def cuMemcpyHtoD(self, dst, src, nbytes):  # synchronous: on the legacy stream, waited for
        self._complete(self._queued(0, "an upload", dst).clock)
        return OK

    def cuPointerGetAttribute(self, attribute, ptr):  # the device ordinal of a block (GPU 0), else not ours
        if self.block_of(int(ptr)) is None:
            return (real.CUresult.CUDA_ERROR_INVALID_VALUE, 0)
        return (*OK, 0)

    def cuPointerGetAttributes(self, count, attributes, ptr):  # host memory the driver does not know
        return (*OK, [0] * count)

    def cuMemcpyDtoH(self, dst, src, nbytes):
        self._complete(self._queued(0, "a download", src).clock)
        return OK


class _Counted:
    """The model as gpumat's bindings see it: each driver function counted in model.calls (gpumat keeps
    the functions it has looked up, so the counting wraps them once, here)."""

    def __init__(self, model: OrderingDriver):
        self.model = model

    def __getattr__(self, name):
        target = getattr(self.model, name)
        if not name.startswith("cu") or not callable(target):
            return target
        calls, lock = self.model.calls, self.model.lock
        finalizing, write = sys.is_finalizing, os.write  # bound now: module globals go before the last objects

        def counted(*args, **kwargs):
            if finalizing():  # reported on stderr: no JSON line can be printed by then
                write(2, f"driver call during interpreter shutdown: {name}\n".encode())
            with lock:
                calls[name] += 1
                return target(*args, **kwargs)

        return counted


def install(reuse_handles: bool = False) -> OrderingDriver:
    """Put the model in place of the driver, and hook the two places where gpumat's memory changes hands
    without a driver call: a launch's operands, and a block handed out by the pool."""
    from gpumat.runtime import bindings

    model = OrderingDriver(reuse_handles)
    counted = _Counted(model)
    object.__setattr__(bindings.driver, "_load", lambda: counted)
    for name in list(vars(bindings.driver)):
        if name != "_load":
            object.__delattr__(bindings.driver, name)

    from gpumat.memory import pool
    from gpumat.runtime import kernels

    launch, fixed_launch, alloc = kernels.Kernel.__call__, kernels.FixedLaunch.__call__, pool.Pool.alloc

    def note_operands(args) -> None:
        with model.lock:
            model.launching.uses = [a for a in args if isinstance(a, int) and model.block_of(a) is not None]

    def launch_noting_operands(self, grid, block, *args, **kwargs):
        note_operands(args)
        return launch(self, grid, block, *args, **kwargs)

    def fixed_launch_noting_operands(self, dev, stream, *leading):
        note_operands(leading)  # the fixed tail holds no device addresses
        return fixed_launch(self, dev, stream, *leading)

    def alloc_noting_lives(self, *args, **kwargs):
        ptr = alloc(self, *args, **kwargs)
        with model.lock:
            model.new_life(ptr)
        return ptr

    kernels.Kernel.__call__ = launch_noting_operands
    kernels.FixedLaunch.__call__ = fixed_launch_noting_operands
    pool.Pool.alloc = alloc_noting_lives
    return model


class LibraryStream:
    """Another library's stream object, as CuPy, PyTorch and cuda.core hand theirs over."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return 0, self.handle


# ---------------------------------------------------------------------------------------------------
# scenarios: each returns its facts; the model's violations are added to them
# ---------------------------------------------------------------------------------------------------
def _operands(gm):
    import numpy as np

    a = np.random.default_rng(0).uniform(-1, 1, (64, 64)).astype(np.float32)
    return gm.Matrix.from_numpy(a), gm.Matrix.from_numpy(a)


def _free_all(gm, *matrices) -> None:
    """A scenario's end: free what it kept, then hand every cached block back (the model then checks
    that each block is freed after its last use)."""
    for m in matrices:
        m.free()
    gm.release_cached()


def _products_per_call(model, gm, A, B, stream) -> tuple[dict, list]:
    """300 products of A and B on `stream`, every seventh result kept and the others dropped at once:
    (the driver calls one product made, averaged over the middle hundred; the kept results)."""
    kept = []
    for i in range(300):
        if i == 100:
            before = collections.Counter(model.calls)
        if i == 200:
            per_call = {k: (v - before[k]) / 100 for k, v in model.calls.items() if v != before[k]}
        C = gm.matmul(A, B, stream=stream)
        if i % 7 == 0:
            kept.append(C)
    return per_call, kept


def steady(model, gm) -> dict:
    """Products on one library stream object, results mostly dropped at once: what each call costs, and
    the operands' and results' frees after their last use there."""
    import gc

    A, B = _operands(gm)
    f = LibraryStream(model.foreign_stream())
    per_call, kept = _products_per_call(model, gm, A, B, f)
    E = gm.transpose(kept[-1], stream=f)
    A.free()
    B.free()
    for m in (*kept, E):
        m.free()
    del kept, E
    gc.collect()
    gm.release_cached()
    return {"per_call": per_call, "cuStreamGetId": model.calls["cuStreamGetId"]}


class PyTorchOwnStream(LibraryStream):
    """One of PyTorch's own streams, as torch.cuda.Stream() hands it over: an odd id (runtime.streams._pytorch_own)."""

    stream_id = 0x23


PyTorchOwnStream.__module__ = "torch.cuda.streams"


def pytorch_own_stream(model, gm) -> dict:
    """Products on one of PyTorch's own streams, which it never destroys: the handle is settled once and no
    mark is recorded after each call; every wait that needs the stream's work (an operand freed and its
    block reused on the legacy stream, a result used there, the blocks kept for the stream handed back)
    records the mark then. What each call costs, and every free after its last use."""
    import gc

    A, B = _operands(gm)
    f = PyTorchOwnStream(model.foreign_stream())
    per_call, kept = _products_per_call(model, gm, A, B, f)
    D = gm.matmul(kept[-1], B)  # a result of the stream used on the legacy stream
    A.free()  # read there: its block goes back after the stream's work
    A = gm.Matrix.zeros(64, 64)  # takes that block on the legacy stream
    E = gm.matmul(A, B, stream=f)
    for m in (A, B, D, E, *kept):
        m.free()
    del kept
    gc.collect()
    gm.release_cached()
    return {"per_call": per_call, "cuStreamGetId": model.calls["cuStreamGetId"]}


def recycled_handle(model, gm) -> dict:
    """A library destroys its stream with gpumat's work still queued there, and the driver gives the
    handle to its next stream: nothing of the old stream (its kept blocks, its mark) may be taken for the
    new one, and no call may reach the destroyed stream."""
    import gc

    A, B = _operands(gm)
    handle = model.foreign_stream()
    old = LibraryStream(handle)
    kept = [gm.matmul(A, B, stream=old) for _ in range(3)]
    for _ in range(20):
        gm.matmul(A, B, stream=old)  # dropped: their blocks are kept for the old stream
    del old
    model.destroy(handle)
    gc.collect()
    gm.memory_info()  # the finalizers' queue drained while the handle names no stream
    model.recycle(handle)
    new = LibraryStream(handle)
    asked = model.calls["cuStreamGetId"]
    fresh = [gm.matmul(A, B, stream=new) for _ in range(20)]  # must not get the old stream's blocks unordered
    D = gm.matmul(kept[0], B, stream=new)  # a result of the old stream, used on the new one
    asked = model.calls["cuStreamGetId"] - asked
    for m in (A, B, D, *kept, *fresh):
        m.free()
    gc.collect()
    gm.release_cached()
    return {"asked_for_new_stream": asked}


def freed_after_use(model, gm) -> dict:
    """An operand freed right after a product that reads it on another library's stream: its block goes
    back (to the legacy stream's free list) and is handed to the next legacy allocation of its size."""
    A, B = _operands(gm)
    f = LibraryStream(model.foreign_stream())
    for _ in range(3):
        C = gm.matmul(A, B, stream=f)
        A.free()
        A = gm.Matrix.zeros(64, 64)  # reuses the freed block on the legacy stream
        Z = gm.matmul(A, B)
        C.free()
        Z.free()
    return {"cuCtxSynchronize": model.calls["cuCtxSynchronize"]}


def per_thread_streams(model, gm) -> dict:
    """One matrix used on two threads' per-thread default streams (handle 2, another stream in each
    thread), then freed: the free waits for both."""
    A, B = _operands(gm)
    results = []

    def work():
        results.append(gm.matmul(A, B, stream=2))

    for _ in range(2):
        t = threading.Thread(target=work)
        t.start()
        t.join()
    A.free()
    for m in results:
        m.free()
    gm.release_cached()
    return {}


def made_there_used_here(model, gm) -> dict:
    """A result made on another library's stream and then used on the legacy stream and on a gpumat
    stream: each first waits for the block's allocation on the library's stream."""
    A, B = _operands(gm)
    f = LibraryStream(model.foreign_stream())
    own = gm.Stream()
    C = gm.matmul(A, B, stream=f)
    D = gm.matmul(C, B)
    C2 = gm.matmul(A, B, stream=f)
    E = gm.matmul(C2, B, stream=own)
    for m in (C, D, C2, E):
        m.free()
    own.close()
    return {}


def split_products(model, gm) -> dict:
    """Products that split K, the reduction queued as the product's programmatic dependent (the stand-in is
    an sm_90 GPU), on another library's stream, a gpumat stream and the legacy stream in turn, results
    dropped: each call's launches, and every block (the partials among them) freed after its last use."""
    import collections

    import numpy as np

    rng = np.random.default_rng(0)
    A = gm.Matrix.from_numpy(rng.uniform(-1, 1, (32, 4096)).astype(np.float32))
    B = gm.Matrix.from_numpy(rng.uniform(-1, 1, (4096, 1024)).astype(np.float32))
    if gm.matmul_plan(A, B).splits < 2:
        raise AssertionError("the scenario's product no longer splits K")
    f, own = LibraryStream(model.foreign_stream()), gm.Stream()
    streams = (f, own, None)
    before = collections.Counter(model.calls)
    for i in range(30):
        C = gm.matmul(A, B, stream=streams[i % 3])
        del C
    per_call = {k: (v - before[k]) / 30 for k, v in model.calls.items() if v != before[k]}
    own.close()
    _free_all(gm, A, B)
    return {"per_call": per_call}


def waited_for(model, gm) -> dict:
    """dot, to_numpy and from_numpy on another library's stream wait for their own work: their matrices'
    frees then need no mark recorded and never wait for the whole device; nor does the free of a matrix
    made with empty() there and never used."""
    import numpy as np

    A, B = _operands(gm)
    f = LibraryStream(model.foreign_stream())
    gm.dot(A, B, stream=f)  # A's and B's first use there: the stream waits for their allocation
    records = model.calls["cuEventRecord"]
    gm.dot(A, B, stream=f)
    A.to_numpy(stream=f)
    U = gm.Matrix.from_numpy(np.ones((64, 64), np.float32), stream=f)
    records = model.calls["cuEventRecord"] - records
    E = gm.Matrix.empty(64, 64, stream=f)
    for m in (A, B, U, E):
        m.free()
    gm.memory_info()  # every free done
    return {"records": records, "cuCtxSynchronize": model.calls["cuCtxSynchronize"]}


def destroyed_with_work_queued(model, gm) -> dict:
    """The GPU suite's sequence on other libraries' streams, in one process: a long-lived library stream
    (PyTorch's pool) with results kept, dropped and collected; then library streams destroyed with
    gpumat's work still queued on them, each followed by new streams (never given the old handle),
    products, frees, fills and transposes into blocks kept for the destroyed streams; then the cache
    handed back. No call may name a destroyed stream, now or when the kept blocks leave."""
    import gc

    import numpy as np

    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, (64, 64)).astype(np.float32)
    big = gm.Matrix.from_numpy(rng.uniform(-1, 1, (256, 256)))
    A, B = gm.Matrix.from_numpy(a), gm.Matrix.from_numpy(a)
    for _ in range(2):  # a library's pooled streams: they live on
        pooled = LibraryStream(model.foreign_stream())
        kept = [gm.matmul(A, B, stream=pooled) for _ in range(30)][::7]
        E = gm.transpose(kept[-1], stream=pooled)
        for m in (*kept, E):
            m.free()
        del pooled, kept, E
    gc.collect()
    gm.release_cached()

    def busy(stream):
        return [gm.matmul(big, big, stream=stream) for _ in range(3)]

    def fill_then_read(C, *others):
        """The legacy stream's next matrices filled at once (in a freed operand's block, if it came back
        too soon), then the product read, and everything freed."""
        filler = [gm.Matrix.zeros(64, 64) for _ in range(4)]
        gm.synchronize()
        C.to_numpy()
        for m in (C, *others, *filler):
            m.free()

    # a transpose freed at once (its block kept for the stream), the stream destroyed, a new one
    handle = model.foreign_stream()
    old = LibraryStream(handle)
    queued = busy(old)
    for _ in range(3):
        gm.transpose(A, stream=old).free()
    del old
    model.destroy(handle)
    gc.collect()
    new_handle = model.foreign_stream()
    new = LibraryStream(new_handle)
    zeros = [gm.Matrix.zeros(64, 64, stream=new) for _ in range(3)]
    gm.synchronize()
    for m in (*zeros, *queued):
        m.free()
    del new
    model.destroy(new_handle)

    # a product read on a destroyed stream, its operand freed after a new stream did work
    handle = model.foreign_stream()
    old = LibraryStream(handle)
    queued = busy(old)
    A2 = gm.Matrix.from_numpy(a)
    C = gm.matmul(A2, B, stream=old)
    del old
    model.destroy(handle)
    new_handle = model.foreign_stream()
    new = LibraryStream(new_handle)
    D = gm.matmul(B, B, stream=new)
    A2.free()
    fill_then_read(C, D, *queued)
    del new
    model.destroy(new_handle)

    # operands freed right after use there; results kept for the stream, which is then destroyed
    handle = model.foreign_stream()
    s = LibraryStream(handle)
    for _ in range(3):
        A3, B3 = gm.Matrix.from_numpy(a), gm.Matrix.from_numpy(a)
        queued = busy(s)
        C = gm.matmul(A3, B3, stream=s)
        A3.free()
        fill_then_read(C, B3, *queued)
    del s
    model.destroy(handle)

    # a block kept for the stream handed back by empty() there, written from the legacy stream
    handle = model.foreign_stream()
    s = LibraryStream(handle)
    X, Y = gm.Matrix.from_numpy(a), gm.Matrix.from_numpy(a)
    for _ in range(3):
        queued = busy(s)
        gm.transpose(X, stream=s).free()
        E = gm.Matrix.empty(64, 64, stream=s)
        gm.transpose(Y, out=E)
        gm.synchronize()
        E.to_numpy()
        for m in (E, *queued):
            m.free()
    for m in (X, Y):
        m.free()
    gm.synchronize()
    del s
    model.destroy(handle)

    # later work of every size on the legacy stream, then the cache handed back
    later = [gm.Matrix.zeros(64, 64) for _ in range(40)] + [gm.matmul(big, big) for _ in range(3)]
    for m in (*later, A, B, big):
        m.free()
    gc.collect()
    gm.memory_info()
    gm.release_cached()
    return {}


def closed_handle_reused(model, gm) -> dict:
    """gpumat closes a stream of its own: the stream is kept (never destroyed), its raw handle is refused
    while it is closed, and the next gm.Stream of its kind takes it back, where work is ordered like on
    any new stream (after its operands' fills on the legacy stream). A library stream made meanwhile never
    gets the closed stream's handle, even from a driver that hands destroyed handles out again."""
    A0, B = _operands(gm)
    own = gm.Stream()
    gm.matmul(A0, B, stream=own).free()
    handle = own.ptr
    own.close()
    refused = []
    for stale in (handle, LibraryStream(handle)):
        try:
            gm.matmul(A0, B, stream=stale)
        except ValueError as e:
            refused.append("closed or garbage-collected" in str(e))
    library = LibraryStream(model.foreign_stream())
    again = gm.Stream()
    A = gm.Matrix.zeros(64, 64)  # filled on the legacy stream, not waited for by the host
    C = gm.matmul(A, B, stream=again)  # must wait for that fill
    D = gm.transpose(C, stream=library)  # and the library's stream, for the product
    facts = {"refused": refused, "taken_back": again.ptr == handle, "library_differs": library.handle != handle}
    _free_all(gm, A, A0, B, C, D)
    again.close()
    return facts


def out_of_core_calls(model, gm) -> dict:
    """Out-of-core products (numpy in and out: tiles through gpumat's own upload, compute and download
    streams, made and closed each call) one after another, then a stream collected unclosed between
    products on the legacy stream: with handles handed out again, each call's streams get the last
    call's handles."""
    import gc

    import numpy as np

    rng = np.random.default_rng(2)
    a = rng.standard_normal((700, 300)).astype(np.float32)
    b = rng.standard_normal((300, 500)).astype(np.float32)
    for _ in range(3):
        gm.matmul(a, b, memory_limit=1 << 20)
    A, B = _operands(gm)
    for _ in range(3):
        s = gm.Stream()
        C = gm.matmul(A, B, stream=s)
        del s  # collected unclosed: closed by the next allocation
        gc.collect()
        D = gm.matmul(C, B)
        C.free()
        D.free()
    _free_all(gm, A, B)
    return {}


class Producer:
    """Another library's 64 x 64 float32 array (__cuda_array_interface__ v3), allocated on its stream. When
    the object goes, its allocator takes the memory back on that stream (as PyTorch's and CuPy's caching
    allocators do, with no wait): gpumat's last use must come before."""

    def __init__(self, model, stream: int):
        self.model, self.stream = model, stream
        with model.lock:  # as a driver call through gpumat's bindings is (threads may share the model)
            self.ptr = int(model.cuMemAllocAsync(64 * 64 * 4, stream)[1])
        self.__cuda_array_interface__ = {
            "shape": (64, 64),
            "typestr": "<f4",
            "data": (self.ptr, False),
            "version": 3,
            "strides": None,
            "stream": stream,
        }

    def __del__(self):
        with self.model.lock:
            self.model.cuMemFreeAsync(self.ptr, self.stream)


def borrowed_memory(model, gm) -> dict:
    """Zero-copy imports of another library's arrays: used on a third library's stream and dropped at
    once, freed explicitly right after a use (a transpose, a product reading it, one writing it, on the
    import stream), and copied (copy=True) behind work on the producer's stream;
    each time the producer frees its memory as soon as gpumat lets go of it."""
    import gc

    _, B = _operands(gm)
    producer_stream = model.foreign_stream()
    other = LibraryStream(model.foreign_stream())
    results = []
    for _ in range(3):
        M = gm.Matrix.from_cuda_array(Producer(model, producer_stream))
        results.append(gm.matmul(M, B, stream=other))  # read on another stream, queued
        del M  # the producer's object goes with it: its free must wait for that product
        gc.collect()
        M = gm.Matrix.from_cuda_array(Producer(model, producer_stream))
        results.append(gm.transpose(M))  # on the legacy stream
        M.free()
        gc.collect()
        M = gm.Matrix.from_cuda_array(Producer(model, producer_stream))
        results.append(gm.matmul(M, B))  # a product on the import stream (legacy), M dropped after it
        del M
        gc.collect()
        M = gm.Matrix.from_cuda_array(Producer(model, producer_stream))
        gm.matmul(B, B, out=M)  # written there
        M.free()
        gc.collect()
        results.append(gm.Matrix.from_cuda_array(Producer(model, producer_stream), copy=True))
        gc.collect()
    _free_all(gm, *results, B)
    return {}


def imported_on_a_library_stream(model, gm) -> dict:
    """Imports made on another library's stream (the import waits there for the producer), then used on
    the legacy stream and on a third library's stream, the import stream destroyed in between: each
    first use elsewhere follows the producer's work, and each free follows the uses."""
    import gc

    _, B = _operands(gm)
    producer_stream = model.foreign_stream()
    results = []
    for _ in range(3):
        handle = model.foreign_stream()
        import_stream = LibraryStream(handle)
        M = gm.Matrix.from_cuda_array(Producer(model, producer_stream), stream=import_stream)
        N = gm.Matrix.from_cuda_array(Producer(model, producer_stream), stream=import_stream)
        del import_stream
        model.destroy(handle)  # the import stream goes before the arrays are used
        results.append(gm.matmul(M, B))
        results.append(gm.matmul(N, B, stream=LibraryStream(model.foreign_stream())))
        M.free()
        del N
        gc.collect()
    _free_all(gm, *results, B)
    return {}


def import_stream_handle_reused(model, gm) -> dict:
    """Memory imported on another library's stream (the import waits there for the producer), that stream
    destroyed and its handle given to the library's next stream, where the import is then used: the use
    must wait for the import's mark, the new stream being another stream than the import's."""
    _, B = _operands(gm)
    producer_stream = model.foreign_stream()
    results = []
    for _ in range(3):
        handle = model.foreign_stream()
        M = gm.Matrix.from_cuda_array(Producer(model, producer_stream), stream=LibraryStream(handle))
        model.destroy(handle)
        model.foreign_stream(handle)  # the library's next stream, behind the same handle
        results.append(gm.matmul(M, B, stream=LibraryStream(handle)))
        results.append(gm.transpose(M, stream=LibraryStream(handle)))
        M.free()
    _free_all(gm, *results, B)
    return {}


def collected_in_a_cycle(model, gm) -> dict:
    """Matrices used on a library's stream and then left in a reference cycle, after the library's stream
    was destroyed and a new stream took its handle (so the old stream's Foreign is held by nothing but the
    matrices). The garbage collector finalizes the Foreign with them, and the matrices' finalizers bring it
    back (their blocks go on the pool's queue with it): the later frees must not wait on an event already
    destroyed."""
    import gc

    A, B = _operands(gm)
    for _ in range(3):
        handle = model.foreign_stream()
        library = LibraryStream(handle)
        X = gm.Matrix.zeros(64, 64, stream=library)  # allocated on the library's stream
        kept = [X, *(gm.matmul(X, X, stream=library) for _ in range(3))]  # nothing outside uses that stream
        kept.append(kept)  # a cycle: collected only by the garbage collector
        del X
        del kept
        model.destroy(handle)
        model.foreign_stream(handle)
        gm.matmul(A, B, stream=LibraryStream(handle)).free()  # the new stream's Foreign replaces the old one
        gc.collect()
        gm.matmul(A, B).free()  # the next allocation releases the collected blocks
    gm.release_cached()
    _free_all(gm, A, B)
    return {}


def sparse_on_other_streams(model, gm) -> dict:
    """A CSR matrix multiplied on a gpumat stream and on another library's stream, behind long work there,
    then freed at once: its arrays go back to the pool only after those products (a CSR matrix of the same
    size, uploaded next on the legacy stream, gets the same blocks); and densified inside a `with` block,
    where the result's fill and the kernel share the block's stream."""
    import numpy as np

    rng = np.random.default_rng(0)
    dense = rng.uniform(-1, 1, (48, 40)).astype(np.float32) * (rng.uniform(size=(48, 40)) < 0.2)
    B = gm.Matrix.from_numpy(rng.uniform(-1, 1, (40, 8)).astype(np.float32))
    own, library = gm.Stream(), LibraryStream(model.foreign_stream())
    results = []
    for stream in (own, library, None):
        S = gm.CSRMatrix.from_dense(dense)
        results.append(gm.spmm(S, B, stream=stream))
        S.free()  # the product may not have run yet
        results.append(gm.CSRMatrix.from_dense(dense))  # same sizes: the freed blocks come back
    with own:
        results.append(results[-1].to_dense())
    for r in results:
        r.free()
    B.free()
    own.close()
    gm.release_cached()
    return {}


def exports_to_another_library(model, gm) -> dict:
    """DLPack exports read by another library on its stream: a copy=True export, and a plain one asked for
    with no stream inside a `with` block (DLPack's None: the legacy stream). The consumer's read, queued
    as soon as __dlpack__ returns, must come after gpumat's work on the exported memory (4 MiB blocks: not
    from the free list, so each has an allocation the read must follow)."""
    from gpumat import _interop

    capsules = []  # held until the consumer's work is done (when a consumer lets the tensor go is its own affair)

    def read_on(stream: int, capsule) -> None:  # the consumer's first kernel over the tensor
        capsules.append(capsule)
        managed = _interop.DLManagedTensor.from_address(_interop._api.PyCapsule_GetPointer(capsule, _interop.NAME))
        with model.lock:
            model._queued(stream, "the consumer's kernel", managed.dl_tensor.data)

    own, consumer = gm.Stream(), model.foreign_stream()
    with own:
        A = gm.Matrix.zeros(1024, 1024)
        read_on(consumer, A.__dlpack__(stream=consumer, copy=True))
        B = gm.Matrix.zeros(1024, 1024)
        read_on(0, B.__dlpack__())
    gm.synchronize()
    capsules.clear()
    for m in (A, B):
        m.free()
    own.close()
    gm.release_cached()
    return {}


LEFT_AT_EXIT: list = []  # what left_at_exit keeps for the interpreter's shutdown to collect


class _Sentinel:
    """Says on stderr whether it was collected during interpreter shutdown (so a test of what happens
    then knows the objects beside it were collected then, not before)."""

    def __del__(self, finalizing=sys.is_finalizing, write=os.write):
        write(2, f"left_at_exit collected during shutdown: {finalizing()}\n".encode())


def left_at_exit(model, gm) -> dict:
    """gpumat objects alive when the program ends, collected by the interpreter's shutdown: a stream never
    closed, an event, a matrix used on another library's stream (its mark lives with it), and memory
    imported from another library, used on a third library's stream. Their finalizers must make no
    driver call then (stderr says which did)."""
    A, B = _operands(gm)
    library = LibraryStream(model.foreign_stream())
    producer_stream = model.foreign_stream()
    M = gm.Matrix.from_cuda_array(Producer(model, producer_stream))
    LEFT_AT_EXIT.extend(
        [gm.Stream(), gm.Event(), gm.matmul(A, B, stream=library), gm.matmul(M, B, stream=library), M, _Sentinel()]
    )
    cycle = [gm.Event(), gm.Matrix.from_cuda_array(Producer(model, producer_stream))]
    cycle.append(cycle)  # collected by the shutdown's last garbage collection
    LEFT_AT_EXIT.append(cycle)
    return {}


def external_stream_behind_a_reused_handle(model, gm) -> dict:
    """Another library's stream made current with `with gm.Stream.external(handle):`, after the library
    destroyed the stream that handle named and its next stream got the handle: the operations in the
    block must know the new stream for a new one (not reuse blocks kept for the old one unordered), as
    when the same wrapper is passed as stream=."""
    handle = model.foreign_stream()
    for _ in range(3):
        gm.Matrix.zeros(64, 64, stream=LibraryStream(handle)).free()  # a block kept for that stream
        model.destroy(handle)
        handle = model.foreign_stream(handle)  # the library's next stream, behind the same handle
        with gm.Stream.external(handle):
            M = gm.Matrix.zeros(64, 64)
            N = gm.transpose(M)
        for m in (M, N):
            m.free()
    gm.release_cached()
    return {}


def threads_on_many_streams(model, gm) -> dict:
    """Threads at once, each on its own kind of stream (a gpumat stream, the per-thread default stream,
    another library's stream, the legacy stream), sharing operands; each passes some results to the next
    thread, which transposes them on its stream and frees them; dropped results are collected anywhere."""
    import gc
    import queue

    A, B = _operands(gm)
    kinds = ["own", "per-thread", "library", "legacy"]
    handoff = [queue.Queue() for _ in kinds]
    failures = []

    def work(i: int) -> None:
        try:
            kind = kinds[i]
            stream = {"own": gm.Stream(), "per-thread": 2, "library": LibraryStream(model.foreign_stream())}.get(kind)
            for j in range(40):
                C = gm.matmul(A, B, stream=stream)
                if j % 5 == 0:
                    handoff[(i + 1) % len(kinds)].put(C)  # to the next thread
                if j % 9 == 0:
                    gc.collect()
                try:
                    theirs = handoff[i].get_nowait()
                except queue.Empty:
                    continue
                gm.transpose(theirs, stream=stream).free()
                theirs.free()
            if kind == "own":
                stream.close()
        except Exception as e:  # reported in the facts: the scenario must not fail quietly
            failures.append(repr(e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(kinds))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for q in handoff:
        while not q.empty():
            q.get().free()
    for m in (A, B):
        m.free()
    gc.collect()
    gm.release_cached()
    return {"failures": failures}


SCENARIOS = {
    f.__name__: f
    for f in (
        steady,
        pytorch_own_stream,
        recycled_handle,
        freed_after_use,
        per_thread_streams,
        made_there_used_here,
        split_products,
        waited_for,
        destroyed_with_work_queued,
        closed_handle_reused,
        out_of_core_calls,
        borrowed_memory,
        imported_on_a_library_stream,
        threads_on_many_streams,
        external_stream_behind_a_reused_handle,
        import_stream_handle_reused,
        collected_in_a_cycle,
        sparse_on_other_streams,
        exports_to_another_library,
        left_at_exit,
    )
}


def main() -> int:
    model = install(reuse_handles="--reuse-handles" in sys.argv[2:])
    import gpumat as gm

    facts = SCENARIOS[sys.argv[1]](model, gm)
    before = model.calls["cuCtxSynchronize"]
    gm.synchronize()
    model.calls["cuCtxSynchronize"] = before
    facts["violations"] = sorted(set(model.violations))
    print(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
