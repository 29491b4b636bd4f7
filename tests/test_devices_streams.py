"""Devices, streams and events; host transfers (pinned and staged); copies between GPUs."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import FAKE_DEVICE, busy, product_error, random, what_holds_live_matrices

import gpumat as gm
from gpumat import memory
from gpumat.runtime import streams

gpu = pytest.mark.gpu
two_gpus = pytest.mark.skipif(gm.device_count() < 2, reason="needs two GPUs (runs on the two-GPU machine)")


# -------------------------------------------------------------------------------------------------
# CPU: the stream argument
# -------------------------------------------------------------------------------------------------
class ProtocolStream:
    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


@pytest.fixture
def stream_ids(monkeypatch):
    """The driver's side of another library's streams, without a GPU: `ids[handle]` is the id of the
    stream the handle names now (the handle itself unless set; the per-thread stream's is the calling
    thread's), and `asked` lists the handles whose id gpumat asked for (cuStreamGetId)."""
    import threading

    ids, asked = {}, []

    def stream_id(handle):
        asked.append(handle)
        if handle == streams.PER_THREAD_STREAM:
            return -threading.get_ident()
        return ids.get(handle, handle)

    monkeypatch.setattr(streams, "_stream_id", stream_id)
    monkeypatch.setattr(streams, "_stream_context", lambda handle: FAKE_DEVICE.context)  # all of one GPU
    monkeypatch.setattr(streams, "new_event", object)
    monkeypatch.setattr(streams, "destroy_event", lambda event: None)
    monkeypatch.setattr(streams.thread_state(), "per_thread_streams", {}, raising=False)
    known = dict(streams.foreign_streams)  # the dict the hot paths hold: emptied and refilled, never rebound
    streams.foreign_streams.clear()
    yield ids, asked
    streams.foreign_streams.clear()
    streams.foreign_streams.update(known)


def test_stream_arguments_resolve_to_handles(stream_ids):
    assert streams.stream_handle(None, FAKE_DEVICE) == streams.LEGACY_STREAM
    assert streams.stream_handle(0, FAKE_DEVICE) == 0
    assert streams.stream_handle(0x1234, FAKE_DEVICE) == 0x1234
    assert streams.stream_handle(ProtocolStream(0x5678), FAKE_DEVICE) == 0x5678

    class TorchLike:
        cuda_stream = 0x9ABC

    assert streams.stream_handle(TorchLike(), FAKE_DEVICE) == 0x9ABC
    for bad in ("stream", 1.5, object(), True):
        with pytest.raises(TypeError):
            streams.stream_handle(bad, FAKE_DEVICE)
    with pytest.raises(ValueError):
        streams.stream_handle(-1, FAKE_DEVICE)
    assert stream_ids[1] == [0x1234, 0x5678, 0x9ABC]  # each foreign stream's id, once; none for the legacy one


def test_a_foreign_stream_is_known_by_its_object_or_by_the_drivers_id(stream_ids):
    """Which stream another library's handle names is asked of the driver (cuStreamGetId) only when
    nothing cheaper tells: the same live stream object names the same stream, so it is asked once; a bare
    handle, a new object, or a wrapper of a raw handle are asked each time. A handle that names a new
    stream (the old one destroyed) gets a Foreign of its own: its own mark, its own kept blocks."""
    ids, asked = stream_ids
    handle = 0xABC000
    s = ProtocolStream(handle)
    first = [streams.stream_handle(s, FAKE_DEVICE) for _ in range(5)]
    f = streams.foreign_of(handle, FAKE_DEVICE)
    assert first == [handle] * 5 and asked == [handle]
    assert streams.foreign_of(handle, FAKE_DEVICE) is f and f.sid == handle  # a lookup, no driver call
    streams.stream_handle(handle, FAKE_DEVICE)  # the bare handle: asked, and the same stream
    streams.stream_handle(ProtocolStream(handle), FAKE_DEVICE)  # another object for it: asked
    assert len(asked) == 3 and streams.foreign_of(handle, FAKE_DEVICE) is f
    streams.stream_handle(s, FAKE_DEVICE)  # the first object, still alive, is still the one known
    assert len(asked) == 3

    class ExternalStream(ProtocolStream):  # PyTorch's and CuPy's wrappers of a raw handle
        pass

    class NoWeakref:
        __slots__ = ()

        def __cuda_stream__(self):
            return 0, handle

    class TorchStream(ProtocolStream):  # any of PyTorch's stream types: may wrap an external stream, and
        pass  # frees its objects without clearing weak references to them (streams._life_says_nothing)

    TorchStream.__module__ = "torch.cuda.streams"

    external = object.__new__(gm.Stream)  # gm.Stream.external(handle): gpumat's wrapper of a raw handle
    external.handle, external.ptr, external.device, external.non_blocking, external._owned = (
        None,
        handle,
        FAKE_DEVICE,
        None,
        False,
    )
    torch_stream = TorchStream(handle)
    for wrapper in (ExternalStream(handle), NoWeakref(), external, torch_stream):
        streams.stream_handle(wrapper, FAKE_DEVICE)
        streams.stream_handle(wrapper, FAKE_DEVICE)
    assert len(asked) == 11 and f.named_by() is s and streams.foreign_of(handle, FAKE_DEVICE) is f

    del s
    ids[handle] = 99  # the stream was destroyed, and the handle now names a new one
    streams.stream_handle(ProtocolStream(handle), FAKE_DEVICE)
    g = streams.foreign_of(handle, FAKE_DEVICE)
    assert g is not f and g.sid == 99 and g.event is not f.event and len(asked) == 12


def test_pytorchs_own_streams_are_settled_once_and_others_each_call(stream_ids):
    """PyTorch never destroys its own streams (its default and pooled ones, odd ids), so once an object of
    PyTorch's names one, its handle is settled for good: later calls with that object, another object or
    the bare handle ask the driver nothing. A PyTorch object with an even id names a stream PyTorch does
    not own (the id is its handle), and neither it nor PyTorch's ExternalStream is ever taken as one."""
    _, asked = stream_ids

    def torch_type(name: str, stream_id: int | None):
        kind = type(name, (ProtocolStream,), {} if stream_id is None else {"stream_id": stream_id})
        kind.__module__ = "torch.cuda.streams"
        return kind

    pooled, external = torch_type("Stream", 0x23), torch_type("Stream", 0xDEF000)
    for _ in range(3):
        assert streams.stream_handle(pooled(0xABC000), FAKE_DEVICE) == 0xABC000
    streams.stream_handle(0xABC000, FAKE_DEVICE)
    streams.stream_handle(ProtocolStream(0xABC000), FAKE_DEVICE)
    assert asked == [0xABC000] and streams.foreign_of(0xABC000, FAKE_DEVICE).lasting
    for kind, handle in (
        (external, 0xDEF000),
        (torch_type("ExternalStream", 0x25), 0x123000),  # PyTorch's wrapper of a raw handle, whatever its id
        (torch_type("Stream", None), 0x456000),  # no id to read
        (type("Stream", (ProtocolStream,), {"stream_id": 0x27}), 0x789000),  # not PyTorch's
    ):
        before = len(asked)
        for _ in range(3):
            streams.stream_handle(kind(handle), FAKE_DEVICE)
        assert asked[before:] == [handle] * 3 and not streams.foreign_of(handle, FAKE_DEVICE).lasting, kind


def test_the_per_thread_default_stream_is_known_apart_in_each_thread(stream_ids):
    """Handle 2 is another stream in every thread: it is not trusted (so no block is kept for the bare
    handle), and its Foreign (its mark, the key of blocks kept for it) is the calling thread's, its id
    asked once a thread."""
    import threading

    _, asked = stream_ids
    assert not streams.trusted(streams.PER_THREAD_STREAM)
    assert streams.trusted(0) and streams.trusted(streams.CAI_LEGACY)
    for _ in range(3):
        assert streams.stream_handle(streams.PER_THREAD_STREAM, FAKE_DEVICE) == streams.PER_THREAD_STREAM
    mine = streams.foreign_of(streams.PER_THREAD_STREAM, FAKE_DEVICE)
    theirs = []
    other = threading.Thread(target=lambda: theirs.append(streams.foreign_of(streams.PER_THREAD_STREAM, FAKE_DEVICE)))
    other.start()
    other.join()
    assert asked == [2, 2] and theirs[0] is not mine and theirs[0].sid != mine.sid
    assert theirs[0].event is not mine.event
    assert streams.foreign_of(streams.PER_THREAD_STREAM, FAKE_DEVICE) is mine


def test_stream_handles_out_of_range_and_wrong_events_are_clear_errors():
    class Protocol:
        def __init__(self, handle):
            self.handle = handle

        def __cuda_stream__(self):
            return 0, self.handle

    for bad in (2**64, -1, Protocol(-5), Protocol(2**70)):
        with pytest.raises(ValueError, match="stream handle"):
            streams.stream_handle(bad, FAKE_DEVICE)
    for bad in (Protocol(1.5), Protocol(True)):
        with pytest.raises(TypeError, match="__cuda_stream__"):
            streams.stream_handle(bad, FAKE_DEVICE)
    event = object.__new__(gm.Event)
    event.handle, event.device, event.timing = None, FAKE_DEVICE, True
    for bad in (5, None):
        with pytest.raises(TypeError, match="gpumat.Event"):
            event.elapsed_time(bad)
    stream = object.__new__(gm.Stream)
    with pytest.raises(TypeError, match="gpumat.Event"):
        stream.wait(5)


def test_an_event_that_orders_two_streams_is_kept_for_the_next_such_wait(monkeypatch):
    """Ordering a stream after another's queued work is a record and a wait; the event is then free at once
    (the wait holds the recording it saw) and kept for the next one, not destroyed and made again."""
    made, destroyed, calls = [], [], []

    class Driver:
        @staticmethod
        def cuEventRecord(event, stream):
            calls.append(("record", event, stream))
            return (0,)

        @staticmethod
        def cuStreamWaitEvent(stream, event, flags):
            calls.append(("wait", stream, event))
            return (0,)

    monkeypatch.setattr(streams, "driver", Driver)
    monkeypatch.setattr(streams, "new_event", lambda: made.append(object()) or made[-1])
    monkeypatch.setattr(streams, "destroy_event", destroyed.append)
    monkeypatch.setattr(streams, "_spare_events", {})
    monkeypatch.setattr(streams.thread_state(), "ctx", FAKE_DEVICE, raising=False)
    streams.wait_for_streams(0x5000, (0, 0x6000))
    streams.wait_for_streams(0x6000, (0,))
    event = made[0]
    assert len(made) == 1 and not destroyed
    assert calls == [
        ("record", event, 0),
        ("wait", 0x5000, event),
        ("record", event, 0x6000),
        ("wait", 0x5000, event),
        ("record", event, 0),
        ("wait", 0x6000, event),
    ]


def _collect_own_stream(handle: int, device) -> None:
    """A gm.Stream of `device` (a stand-in) with `handle` registered as gpumat's own, then collected unclosed."""
    s = object.__new__(gm.Stream)
    s.handle, s.ptr, s.device, s.non_blocking, s.priority, s._owned = "its handle", handle, device, True, 0, True
    streams.own_streams.add(handle)
    del s
    gc.collect()


def test_a_stream_collected_before_gpumat_allocated_anything_becomes_a_spare(monkeypatch):
    """A Stream collected unclosed on a device where gpumat never allocated is retired at once, with no
    driver call from the finalizer: its handle leaves gpumat's own streams, is refused from then on (a
    crash in the driver before: the stream had been destroyed) and waits as a spare for the next Stream of
    its kind."""

    class NoDriver:
        def __getattr__(self, name):
            raise AssertionError(f"a finalizer called the driver: {name}")

    class NoMemoryYet:
        memory = None

    monkeypatch.setattr(streams, "driver", NoDriver())
    handle, device = 0x7F00, NoMemoryYet()
    try:
        _collect_own_stream(handle, device)
        assert not streams.trusted(handle) and handle in streams.dead_streams
        assert streams.spare_streams[(device, True, 0)] == [(handle, "its handle")]
        for stale in (handle, ProtocolStream(handle)):
            with pytest.raises(ValueError, match="closed or garbage-collected"):
                streams.stream_handle(stale, FAKE_DEVICE)
    finally:
        streams.own_streams.discard(handle)
        streams.dead_streams.discard(handle)
        streams.spare_streams.pop((device, True, 0), None)


def _external(handle: int, device) -> gm.Stream:
    """gm.Stream.external(handle) on a stand-in device."""
    s = object.__new__(gm.Stream)
    s.handle, s.ptr, s.device, s.non_blocking, s.priority, s._owned = handle, handle, device, None, None, False
    return s


def test_a_collected_streams_handle_is_refused_before_the_stream_is_retired():
    """A Stream collected unclosed on a device with gpumat memory waits for the device's next allocation to
    be retired (that allocation may come inside an operation given the stale handle, which would then
    queue work on a retired stream): its raw handle is refused from the collection on."""

    class WithMemory:
        memory = object()

    handle, device = 0x7F10, WithMemory()
    try:
        _collect_own_stream(handle, device)
        assert streams.abandoned[-1] == (device, handle, "its handle", (True, 0))
        for stale in (handle, ProtocolStream(handle), _external(handle, FAKE_DEVICE)):
            with pytest.raises(ValueError, match="closed or garbage-collected"):
                streams.stream_handle(stale, FAKE_DEVICE)
    finally:
        streams.abandoned.remove((device, handle, "its handle", (True, 0)))
        streams.own_streams.discard(handle)
        streams.collected_streams.discard(handle)


def test_another_gpus_stream_is_refused_before_anything_is_queued(stream_ids, monkeypatch):
    """A library's stream of another GPU's context, handed to work on this GPU, is a ValueError naming both
    GPUs when gpumat first sees the stream (it used to fail inside the operation: CUDA_ERROR_INVALID_HANDLE
    from cuEventRecord, with work half queued); a gm.Stream or gm.Event of another GPU likewise."""
    from support import FakeDevice

    other = FakeDevice(1)
    monkeypatch.setattr(streams, "_stream_context", lambda handle: other.context)
    monkeypatch.setattr(streams, "device_of_context", lambda ctx: other if ctx == other.context else None)
    for stream in (ProtocolStream(0x4440), 0x4440):
        with pytest.raises(ValueError, match="belongs to GPU 1 and the work to GPU 0"):
            streams.stream_handle(stream, FAKE_DEVICE)
    assert 0x4440 not in streams.foreign_streams  # nothing settled, nothing to record a mark on
    monkeypatch.setattr(streams, "device_of_context", lambda ctx: None)
    with pytest.raises(ValueError, match="another CUDA context"):
        streams.stream_handle(ProtocolStream(0x4448), FAKE_DEVICE)
    theirs = _external(0x4450, FAKE_DEVICE)
    with pytest.raises(ValueError, match="lives on GPU 0 and the work on GPU 1"):
        streams.stream_handle(theirs, other)
    event = object.__new__(gm.Event)
    event.handle, event.device, event.timing = "an event", other, False
    with pytest.raises(ValueError, match="event lives on GPU 1 and the stream on GPU 0"):
        event.record(theirs)


def test_operations_refuse_bad_streams_before_any_gpu_call():
    from support import fake_matrix

    a, b = fake_matrix(4, 4), fake_matrix(4, 4, ptr=0x7F8000000000)
    for op in (
        lambda s: gm.matmul(a, b, stream=s),
        lambda s: gm.transpose(a, stream=s),
        lambda s: gm.dot(a, b, stream=s),
    ):
        with pytest.raises(TypeError, match="stream must be"):
            op("not a stream")


def test_device_arguments():
    with pytest.raises(TypeError):
        gm.Device("0")
    with pytest.raises(TypeError):
        gm.Device(1.0)


# -------------------------------------------------------------------------------------------------
# GPU: devices
# -------------------------------------------------------------------------------------------------
@gpu
def test_devices_are_objects_with_one_identity():
    n = gm.device_count()
    assert n >= 1
    assert gm.Device(0) is gm.Device(0) is gm.device()
    assert gm.Device() is gm.device()
    with pytest.raises(ValueError, match=f"no GPU {n}"):
        gm.Device(n)
    with gm.Device(0) as d:
        assert gm.device() is d
        m = gm.Matrix.empty(2, 2)
        assert m.device is d
        m.free()


@gpu
@two_gpus
def test_operations_on_each_gpu_and_mixing_refused():
    a, b = random((130, 70)), random((70, 90))
    on = []
    for i in range(gm.device_count()):
        with gm.Device(i):
            A, B = gm.Matrix.from_numpy(a), gm.Matrix.from_numpy(b)
            assert A.device.ordinal == i
            C = A @ B
            assert C.device.ordinal == i
            assert product_error(C.to_numpy(), a, b) < 1e-5
            assert gm.transpose(A).to_numpy().tobytes() == np.ascontiguousarray(a.T).tobytes()
            assert abs(gm.dot(A, A) - float((a.astype(np.float64) ** 2).sum())) < 1e-6 * a.size
            on.append((A, B))
    (A0, _), (A1, B1) = on[0], on[1]
    with pytest.raises(ValueError, match="GPU 0 and b on GPU 1"):
        gm.matmul(A0, B1)
    with pytest.raises(ValueError, match="GPU"):
        gm.dot(A0, A1)
    with pytest.raises(ValueError, match="GPU"):
        gm.transpose(A0, out=gm.Matrix.empty(70, 130, device=1))
    # a copy across GPUs (peer to peer where possible), of a packed matrix and of a view
    assert np.array_equal(A0.to(1).to_numpy(), a)
    view = A0[3:100, 5:60]
    moved = view.to(gm.Device(1))
    assert moved.device.ordinal == 1 and np.array_equal(moved.to_numpy(), a[3:100, 5:60])
    assert product_error((moved @ B1[0:55, :]).to_numpy(), a[3:100, 5:60], b[0:55, :]) < 1e-5
    # staged host copies (over 16 MiB) to and from the second GPU while the first is current
    big = random((2048, 1500))
    with gm.Matrix.from_numpy(big, device=1) as G:
        assert G.device.ordinal == 1 and np.array_equal(G.to_numpy(), big)
        with G.to(0) as H:
            assert np.array_equal(H.to_numpy(), big)
    with gm.Device(1):
        s = gm.Stream()
        back = moved.to(0)
        assert back.device.ordinal == 0 and np.array_equal(back.to_numpy(), a[3:100, 5:60])
        s.close()


# -------------------------------------------------------------------------------------------------
# GPU: streams and events
# -------------------------------------------------------------------------------------------------
@gpu
def test_every_operation_on_a_non_default_stream():
    a, b = random((257, 129)), random((129, 65))
    s = gm.Stream()
    try:
        A = gm.Matrix.from_numpy(a, stream=s)
        B = gm.Matrix.from_numpy(b, stream=s)
        C = gm.matmul(A, B, stream=s)
        assert product_error(C.to_numpy(stream=s), a, b) < 1e-5
        assert np.array_equal(gm.transpose(A, stream=s).to_numpy(stream=s), a.T)
        assert abs(gm.dot(A, A, stream=s) - float((a.astype(np.float64) ** 2).sum())) < 1e-9 * a.size
        from gpumat.sparse import CSRMatrix

        S = CSRMatrix.from_dense(np.where(a > 0.5, a, 0))
        D = gm.spmm(S, B, stream=s)
        ref = np.where(a > 0.5, a, 0).astype(np.float64) @ b
        assert product_error(D.to_numpy(stream=s), np.where(a > 0.5, a, 0), b) < 1e-5
        with s:  # the current stream is the default
            assert streams.stream_handle(None, gm.device()) == s.ptr
            E = A @ B
        assert streams.stream_handle(None, gm.device()) == streams.LEGACY_STREAM
        assert product_error(E.to_numpy(), a, b) < 1e-5 and ref.shape == D.shape
    finally:
        s.synchronize()
        s.close()


@gpu
def test_streams_of_other_libraries_are_accepted():
    cp = pytest.importorskip("cupy")
    a = random((64, 64))
    with gm.Matrix.from_numpy(a) as A:
        cs = cp.cuda.Stream(non_blocking=True)
        C = gm.matmul(A, A, stream=cs)
        cs.synchronize()
        assert product_error(C.to_numpy(), a, a) < 1e-5
        torch = pytest.importorskip("torch")
        ts = torch.cuda.Stream()
        D = gm.matmul(A, A, stream=ts)
        ts.synchronize()
        assert product_error(D.to_numpy(), a, a) < 1e-5


@gpu
def test_events_time_work_and_order_streams():
    s1, s2 = gm.Stream(), gm.Stream()
    a = random((1024, 1024))
    A = gm.Matrix.from_numpy(a)
    start, stop = gm.Event(), gm.Event()
    start.record(s1)
    C = gm.matmul(A, A, stream=s1)
    stop.record(s1)
    done = s1.record()
    s2.wait(done)  # work on s2 now follows the product
    D = gm.transpose(C, stream=s2)
    stop.synchronize()
    assert stop.query() and start.elapsed_time(stop) > 0
    assert product_error(D.to_numpy(stream=s2).T, a, a) < 1e-5
    with pytest.raises(ValueError):
        gm.Event(timing=False).elapsed_time(stop)
    s1.close()
    s2.close()


@gpu
def test_memory_freed_on_one_stream_and_reused_on_another_is_not_raced():
    """A long product reads A on stream 1; A is freed on stream 1 right away and a new matrix of the same
    size is written on stream 2. The product must still see A's values."""
    n = busy(2048)
    s1, s2 = gm.Stream(), gm.Stream()
    a = random((n, n))
    for _ in range(3):
        A = gm.Matrix.from_numpy(a, stream=s1)
        C = gm.matmul(A, A, stream=s1)
        A.free()
        for _ in range(4):  # small and large blocks both
            B = gm.Matrix.zeros(n, n, stream=s2)
            B.free()
            small = gm.Matrix.zeros(8, 8, stream=s2)
            small.free()
        s1.synchronize()
        assert product_error(C.to_numpy(), a, a) < 1e-5
    s1.close()
    s2.close()


@gpu
def test_a_block_freed_on_one_threads_default_stream_is_not_handed_to_another_thread():
    """Thread A queues a long product and then a transpose into a small result on its per-thread default
    stream (handle 2) and frees the result at once; thread B then makes a zero matrix of that size on
    its own per-thread stream, which runs at once. Had B been given A's block, A's transpose would
    overwrite B's zeros once A's stream gets to it."""
    import threading

    x = random((64, 64))
    big = random((busy(6000),) * 2).astype(np.float64)
    freed, zeroed = threading.Event(), threading.Event()
    results = {}

    def thread_a():
        with gm.Matrix.from_numpy(big) as G, gm.Matrix.from_numpy(x) as X:
            for _ in range(3):
                gm.matmul(G, G, stream=streams.PER_THREAD_STREAM).free()  # queued, runs for tens of ms
            gm.transpose(X, stream=streams.PER_THREAD_STREAM).free()  # its block freed before it is written
            freed.set()
            zeroed.wait(30)
            gm.synchronize()  # A's stream has run: its transpose wrote wherever its block was

    def thread_b():
        freed.wait(30)
        Z = gm.Matrix.zeros(64, 64, stream=streams.PER_THREAD_STREAM)
        results["before"] = Z.to_numpy(stream=streams.PER_THREAD_STREAM)
        zeroed.set()
        a.join()
        results["after"] = Z.to_numpy(stream=streams.PER_THREAD_STREAM)
        Z.free()

    a, b = threading.Thread(target=thread_a), threading.Thread(target=thread_b)
    a.start()
    b.start()
    a.join()
    b.join()
    assert not results["before"].any()
    assert not results["after"].any()


@gpu
def test_a_matrix_made_on_one_stream_is_ordered_before_use_on_another():
    s1, s2 = gm.Stream(), gm.Stream()
    n = busy(1500)
    for _ in range(5):
        a = random((n, n))
        A = gm.Matrix.from_numpy(a, stream=s1)
        Z = gm.Matrix.zeros(n, n, stream=s1)
        C = gm.matmul(A, Z, stream=s2)  # must wait for the zero fill on s1
        assert np.count_nonzero(C.to_numpy(stream=s2)) == 0
        for m in (A, Z, C):
            m.free()
    s1.close()
    s2.close()


# -------------------------------------------------------------------------------------------------
# GPU: host transfers
# -------------------------------------------------------------------------------------------------
@gpu
@given(
    rows=st.integers(1, 700),
    cols=st.sampled_from([1, 3, 64, 1000, 2**21 + 3]),
    pad=st.integers(0, 5),
    pinned=st.booleans(),
)
def test_uploads_and_downloads_are_exact_at_every_size(rows, cols, pad, pinned):
    if rows * cols > 2**24:
        rows = max(2**24 // cols, 1)
    host = random((rows, cols))
    src = gm.pinned_empty(host.shape, np.float32) if pinned else host.copy()
    src[...] = host
    assert memory.is_pinned(src) == pinned
    with gm.Matrix.from_numpy(src) as A:
        assert np.array_equal(A.to_numpy(), host)
        out = gm.pinned_empty(host.shape, np.float32) if pinned else np.empty_like(host)
        A.to_numpy(out=out)
        assert np.array_equal(out, host)
        # a view with an odd offset and stride, both ways
        with gm.Matrix.zeros(rows + 1, cols + pad + 1) as P:
            V = P[1:, 1 : cols + 1]
            assert V.shape == host.shape
            view_data = gm.Matrix.from_numpy(host)
            gm.transpose(gm.transpose(view_data), out=V)
            assert np.array_equal(V.to_numpy(), host)
            view_data.free()


@gpu
def test_pinned_arrays_copy_asynchronously_on_a_stream():
    s = gm.Stream()
    host = gm.pinned_empty((2048, 2048))
    host[...] = random((2048, 2048))
    A = gm.Matrix.from_numpy(host, stream=s)
    back = gm.pinned_empty((2048, 2048))
    A.to_numpy(out=back, stream=s)
    assert np.array_equal(back, host)
    s.close()
    with pytest.raises(ValueError):
        A.to_numpy(out=np.empty((2048, 2047), np.float32))
    with pytest.raises(TypeError):
        A.to_numpy(out=[1, 2, 3])


@gpu
def test_blocks_kept_for_another_librarys_stream_give_right_results_and_come_back():
    """Results made on a PyTorch stream reuse blocks kept for that stream (keyed by the stream, its handle
    and driver id, so a new stream that gets a destroyed one's handle never sees them); kept, dropped and
    collected results stay right, and the memory goes back."""
    torch = pytest.importorskip("torch")
    a, b = random((64, 64)), random((64, 64))
    start = memory.memory_info()["used"]
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        for _ in range(2):  # the second stream may get the first one's handle
            ts = torch.cuda.Stream()
            kept = []
            for i in range(200):
                C = gm.matmul(A, B, stream=ts)
                if i % 7 == 0:
                    kept.append(C)  # the others are dropped at once and collected
            E = gm.transpose(kept[-1], stream=ts)
            ts.synchronize()
            for C in kept:
                assert product_error(C.to_numpy(), a, b) < 1e-5
            assert product_error(E.to_numpy().T, a, b) < 1e-5
            for C in (*kept, E):
                C.free()
            del ts, kept, C, E
    gc.collect()
    gm.release_cached()
    assert memory.memory_info()["used"] == start, what_holds_live_matrices()


@gpu
def test_pytorchs_own_streams_are_told_apart_from_the_streams_it_wraps():
    """The rule runtime.streams._pytorch_own reads from PyTorch's stream ids, against the installed PyTorch:
    torch.cuda.Stream() is one of PyTorch's own streams (settled once, then trusted); a stream it wraps
    (ExternalStream, and current_stream() inside a block of one) is not, whatever object names it."""
    torch = pytest.importorskip("torch")
    a = random((64, 64))
    ts = torch.cuda.Stream()
    raw = gm.Stream()  # a stream PyTorch does not own, wrapped by it below
    external = torch.cuda.ExternalStream(raw.ptr)
    with torch.cuda.stream(external):
        current = torch.cuda.current_stream()
    assert streams._pytorch_own(ts) and current.cuda_stream == raw.ptr
    assert not streams._pytorch_own(external) and not streams._pytorch_own(current)
    with gm.Matrix.from_numpy(a) as A:
        C = gm.matmul(A, A, stream=ts)
        ts.synchronize()
        assert product_error(C.to_numpy(), a, a) < 1e-5 and streams.foreign_streams[ts.cuda_stream].lasting
        C.free()
    raw.close()


_TORCH_STREAMS_THEN_EXIT = """
import gc, sys
import numpy as np
import torch
import gpumat as gm
from gpumat.runtime import streams

a = np.ones((32, 32), np.float32)
with gm.Matrix.from_numpy(a) as A:
    for i in range(40):
        ts = torch.cuda.Stream()  # a pool stream, its object dropped at once
        with torch.cuda.stream(ts):
            C = gm.matmul(A, A, stream=torch.cuda.current_stream())  # a new object each call
        C = gm.matmul(C, A, stream=ts)
        ts.synchronize()
        assert float(C.to_numpy()[0, 0]) == 32.0 * 32.0, i
        f = streams.foreign_streams[ts.cuda_stream]
        assert f.named_by is None, "a weak reference kept to a PyTorch stream object"
        del ts, C
        gc.collect()
        junk = [torch.cuda.Stream() for _ in range(8)] + [object() for _ in range(64)]  # reuse the freed memory
        del junk
print("done")
"""


_STALE_STREAM_HANDLES = r"""
import gc
import numpy as np
import gpumat as gm

class Protocol:
    def __init__(self, handle):
        self.handle = handle
    def __cuda_stream__(self):
        return 0, self.handle

A = gm.Matrix.from_numpy(np.ones((64, 64), np.float32))
refused = 0
for how in ("collected", "closed"):
    s = gm.Stream()
    gm.matmul(A, A, stream=s).free()
    handle = int(s.handle)
    if how == "closed":
        s.close()
    del s
    gc.collect()
    for stale in (handle, Protocol(handle)):
        for _ in range(2):  # before and after the next allocation retires a collected stream
            try:
                gm.matmul(A, A, stream=stale)
            except ValueError as e:
                refused += "closed or garbage-collected" in str(e)
            gm.Matrix.empty(8, 8).free()
again = gm.Stream()  # takes a retired stream back: its handle names a live stream again
C = gm.matmul(A, A, stream=int(again.ptr))
print(refused, float(C.to_numpy(stream=again)[0, 0]))
"""


@gpu
def test_the_handle_of_a_collected_or_closed_stream_is_a_value_error_not_a_crash():
    """Issue 43 item 3: a raw handle (or a __cuda_stream__ object giving it) kept after its gm.Stream was
    collected or closed killed the process (SIGSEGV in cuStreamGetId on the destroyed stream). gpumat now
    keeps the streams it closes and refuses their handles until a new Stream takes one back. Run in a fresh
    process, whose exit status is part of the test."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", _STALE_STREAM_HANDLES], capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, (result.returncode, result.stderr[-2000:])
    assert result.stdout.split() == ["8", "64.0"]


@gpu
@two_gpus
def test_streams_and_events_of_another_gpu_are_refused_or_ordered():
    """Issue 43 item 6: another GPU's stream (gpumat's or a library's) handed to work on this GPU is a
    ValueError naming both GPUs before anything is queued; an event is recorded only on its own GPU's
    streams; a stream may wait for another GPU's event (CUDA orders that), and the wait holds."""
    torch = pytest.importorskip("torch")
    A0 = gm.Matrix.from_numpy(np.ones((64, 64), np.float32), device=0)
    s1, t1 = gm.Stream(device=1), torch.cuda.Stream(device=1)
    for stream in (s1, t1, t1.cuda_stream):
        with pytest.raises(ValueError, match="GPU 1"):
            gm.matmul(A0, A0, stream=stream)
    with pytest.raises(ValueError, match="GPU 1"):
        gm.from_dlpack(torch.ones((4, 4), device="cuda:0"), stream=t1)
    with pytest.raises(ValueError, match="event lives on GPU 1 and the stream on GPU 0"):
        gm.Event(device=1).record(gm.Stream(device=0))
    # a wait across GPUs: GPU 0's stream waits for a long product queued on GPU 1
    big = gm.Matrix.from_numpy(np.random.rand(busy(4096), busy(4096)), device=1)
    results = [gm.matmul(big, big, stream=s1) for _ in range(3)]
    src = gm.Matrix.from_numpy(np.full((64, 64), 2.0, np.float32), device=1)
    gm.transpose(src, out=gm.Matrix.empty(64, 64, device=1), stream=s1).free()
    done = s1.record()
    s0 = gm.Stream(device=0)
    s0.wait(done)
    C = gm.matmul(A0, A0, stream=s0)
    assert float(C.to_numpy(stream=s0)[0, 0]) == 64.0
    assert done.query()  # the wait on GPU 0 held until GPU 1's work was done
    for m in (*results, big, src, C, A0):
        m.free()


@gpu
def test_pytorch_stream_objects_are_not_weakly_referenced_and_the_process_exits_cleanly():
    """PyTorch's CUDA stream type frees its objects without clearing weak references to them (its releases
    before pytorch#183403), so gpumat keeps none: a dangling one made the interpreter crash at exit. Run in
    a fresh process, whose exit status is the test."""
    pytest.importorskip("torch")
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", _TORCH_STREAMS_THEN_EXIT], capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 0 and result.stdout.strip() == "done", (result.returncode, result.stderr[-2000:])


# -------------------------------------------------------------------------------------------------
# GPU: another library's streams, played by raw driver streams (no PyTorch or CuPy needed)
# -------------------------------------------------------------------------------------------------
class LibraryStream:
    """Another library's stream: made and destroyed through the driver, handed over by __cuda_stream__."""

    def __init__(self):
        from cuda.bindings import driver

        gm.device().activate()
        err, handle = driver.cuStreamCreate(int(driver.CUstream_flags.CU_STREAM_NON_BLOCKING))
        assert not err
        self.handle = int(handle)

    def __cuda_stream__(self):
        return 0, self.handle

    def destroy(self) -> None:
        """What the library does when its stream object goes: the work queued there still runs."""
        from cuda.bindings import driver

        (err,) = driver.cuStreamDestroy(self.handle)
        assert not err


def _keep_busy(stream, big) -> list:
    """Tens of milliseconds of work queued on `stream` ahead of what follows. The results are returned, to
    be freed once the test has looked: a free now would make the legacy stream wait for this work, and
    hide a missing wait."""
    return [gm.matmul(big, big, stream=stream) for _ in range(3)]


def _next_stream(handle: int) -> LibraryStream:
    """The library's next stream, with `handle` when the driver can be led to give it (some drivers hand a
    destroyed stream's handle to the next stream at once, others never do). Either way the test's ordering
    claims must hold, so it runs on whatever stream comes; the bookkeeping for a reused handle is also
    played through a stand-in driver that always reuses (test_stream_order_cpu.py)."""
    for _ in range(20):
        new = LibraryStream()
        if new.handle == handle:
            return new
        new.destroy()
    return LibraryStream()


@gpu
def test_a_library_stream_made_after_one_is_destroyed_is_not_taken_for_the_old_one():
    """A library's stream has a transpose queued behind long work, into a result freed at once (its block
    kept for that stream); the library destroys the stream, and its next stream (given the same handle
    where the driver reuses handles) makes matrices.
    A zero matrix made on the new stream runs at once: had it been given the old stream's block, the old
    transpose would overwrite the zeros when that stream gets to it."""
    x = random((64, 64))
    with gm.Matrix.from_numpy(random((busy(4096),) * 2).astype(np.float64)) as big, gm.Matrix.from_numpy(x) as X:
        old = LibraryStream()
        busy_results = _keep_busy(old, big)
        for _ in range(3):
            gm.transpose(X, stream=old).free()  # written once the long work is done
        handle = old.handle
        old.destroy()
        del old
        gc.collect()
        new = _next_stream(handle)
        zeros = [gm.Matrix.zeros(64, 64, stream=new) for _ in range(3)]
        gm.synchronize()  # the old stream's transposes have written wherever their blocks were
        assert all(not z.to_numpy().any() for z in zeros)
        for m in (*zeros, *busy_results):
            m.free()
        new.destroy()


@gpu
def test_a_matrix_used_on_a_destroyed_stream_is_freed_after_that_use_though_a_new_stream_came_after_it():
    """A product reads A behind long work on a library's stream; the library destroys the stream, its next
    stream comes (with the same handle where the driver reuses handles), and gpumat works there before A
    is freed. A's free must still wait for the
    old stream's product (the new stream's mark says nothing of it), or the legacy stream's next matrix,
    filled at once in A's block, is what the product reads."""
    a, b = random((64, 64)), random((64, 64))
    with gm.Matrix.from_numpy(random((busy(4096),) * 2).astype(np.float64)) as big:
        old = LibraryStream()
        busy_results = _keep_busy(old, big)
        A, B = gm.Matrix.from_numpy(a), gm.Matrix.from_numpy(b)
        C = gm.matmul(A, B, stream=old)
        handle = old.handle
        old.destroy()
        del old
        new = _next_stream(handle)
        D = gm.matmul(B, B, stream=new)
        A.free()
        filler = [gm.Matrix.zeros(64, 64) for _ in range(4)]
        gm.synchronize()
        assert product_error(C.to_numpy(), a, b) < 1e-5
        for m in (B, C, D, *filler, *busy_results):
            m.free()
        new.destroy()


@gpu
def test_an_operand_freed_after_use_on_another_librarys_stream_is_not_reused_before_that_use():
    """A product on a library's stream reads A behind long work; A is freed at once and its block goes
    to the legacy stream's next matrix of that size, which is filled right away. The product must still
    read A's values."""
    a, b = random((64, 64)), random((64, 64))
    with gm.Matrix.from_numpy(random((busy(4096),) * 2).astype(np.float64)) as big:
        s = LibraryStream()
        for _ in range(3):
            A, B = gm.Matrix.from_numpy(a), gm.Matrix.from_numpy(b)
            busy_results = _keep_busy(s, big)
            C = gm.matmul(A, B, stream=s)
            A.free()
            filler = [gm.Matrix.zeros(64, 64) for _ in range(4)]
            gm.synchronize()
            assert product_error(C.to_numpy(), a, b) < 1e-5
            for m in (B, C, *filler, *busy_results):
                m.free()
        s.destroy()


@gpu
def test_a_block_of_another_librarys_stream_is_ordered_before_its_first_use_elsewhere():
    """A library's stream transposes into a result behind long work, the result is freed and its block
    kept for that stream; empty() on that stream gets it back, and a transpose on the legacy stream
    writes it. That write must wait for the block's allocation on the library's stream (after the old
    transpose), or the old transpose overwrites it."""
    x, y = random((64, 64)), random((64, 64))
    with gm.Matrix.from_numpy(random((busy(4096),) * 2).astype(np.float64)) as big:
        s = LibraryStream()
        X, Y = gm.Matrix.from_numpy(x), gm.Matrix.from_numpy(y)
        for _ in range(3):
            busy_results = _keep_busy(s, big)
            gm.transpose(X, stream=s).free()
            E = gm.Matrix.empty(64, 64, stream=s)
            gm.transpose(Y, out=E)
            gm.synchronize()
            assert np.array_equal(E.to_numpy(), y.T)
            for m in (E, *busy_results):
                m.free()
        for m in (X, Y):
            m.free()
        gm.synchronize()
        s.destroy()
