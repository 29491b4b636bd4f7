"""gpumat.dask: dask.array collections with gpumat Matrix chunks kept on the GPUs, and products of numpy
chunks with each block product on a worker's GPU (skipped without dask)."""

from __future__ import annotations

import gc
import sys

import numpy as np
import pytest

da = pytest.importorskip(
    "dask.array", reason="dask is not installed (make test installs it; a wheel takes it as the dask extra)"
)

from support import HostChunk, product_error, what_holds_live_matrices  # noqa: E402

import gpumat as gm  # noqa: E402
from gpumat import _dtypes  # noqa: E402
from gpumat import dask as gmd  # noqa: E402
from gpumat.dask import chunks, graph  # noqa: E402

DTYPES = [np.float32, np.float64, np.float16, _dtypes.BFLOAT16]


def host_product(x, y):
    return x.astype(np.float64) @ y.astype(np.float64)


# -------------------------------------------------------------------------------------------------
# CPU: the numpy-chunk graph, with the block product replaced by numpy
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("chunk_shapes", [((5, 7), (7, 3)), ((13, 4), (6, 9)), ((40, 40), (40, 40))])
def test_host_chunks_multiply_blocks_and_sum_over_k(monkeypatch, chunk_shapes):
    calls = []

    def fake(x, y):
        calls.append((x.shape, y.shape))
        return host_product(x, y).astype(x.dtype)

    monkeypatch.setattr(graph, "host_product", fake)
    rng = np.random.default_rng(0)
    a, b = rng.uniform(-1, 1, (37, 29)), rng.uniform(-1, 1, (29, 23))
    A, B = da.from_array(a, chunks=chunk_shapes[0]), da.from_array(b, chunks=chunk_shapes[1])
    C = gmd.matmul(A, B)
    assert C.shape == (37, 23) and C.dtype == a.dtype
    got = C.compute(scheduler="sync")
    np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-12)
    assert calls and all(xs[1] == ys[0] for xs, ys in calls)  # every block pair shares its K extent
    assert C.compute(scheduler="sync").tobytes() == got.tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_host_chunks_through_every_reduction_level(monkeypatch, dtype):
    """9 K blocks with split_every=2 go through the combine step (nested lists) before the aggregate;
    float16 partial products are summed in float32 and rounded once at the end."""
    import dask

    monkeypatch.setattr(
        graph,
        "host_product",
        lambda x, y: host_product(x, y).astype(np.float32 if dtype == np.float16 else dtype),
    )
    rng = np.random.default_rng(5)
    a, b = rng.uniform(-1, 1, (24, 90)).astype(dtype), rng.uniform(-1, 1, (90, 17)).astype(dtype)
    with dask.config.set(split_every=2):
        C = gmd.matmul(da.from_array(a, chunks=(8, 10)), da.from_array(b, chunks=(10, 9)))
        got = C.compute(scheduler="sync")
        assert C.compute(scheduler="sync").tobytes() == got.tobytes()
    assert got.dtype == dtype
    ref = host_product(a, b)
    if dtype == np.float16:  # one rounding of a float32 sum: half a float16 unit, plus the float32 sums' error
        bound = np.abs(ref) * 2.0**-11 + a.shape[1] * 2.0**-24 * host_product(np.abs(a), np.abs(b))
        assert np.all(np.abs(got.astype(np.float64) - ref) <= bound)
    else:
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)


# -------------------------------------------------------------------------------------------------
# CPU: the resident graph, with uploads and the GPU block task replaced by numpy
# -------------------------------------------------------------------------------------------------
class Recorder:
    """Stands in for the GPU: uploads keep the numpy block; a C block is the K products added in order."""

    def __init__(self):
        self.calls = []

    def upload(self, block, dtype=None):
        return np.array(block, dtype=dtype)

    def block(self, a_row, b_col):
        self.calls.append(([x.shape for x in a_row], [y.shape for y in b_col]))
        total = np.zeros((a_row[0].shape[0], b_col[0].shape[1]))
        for x, y in zip(a_row, b_col, strict=True):
            total = host_product(x, y) + total
        return total.astype(a_row[0].dtype)


@pytest.mark.parametrize(
    "a_chunks, b_chunks",
    [((8, 10), (10, 9)), ((13, 4), (6, 9)), ((40, 40), (40, 40)), ((5, (3, 20, 7)), ((11, 19), 6))],
)
def test_resident_graph_one_task_a_block_with_its_k_blocks_in_order(monkeypatch, a_chunks, b_chunks):
    rec = Recorder()
    monkeypatch.setattr(chunks, "upload", rec.upload)
    monkeypatch.setattr(graph, "resident_block", rec.block)
    rng = np.random.default_rng(7)
    a, b = rng.uniform(-1, 1, (37, 30)), rng.uniform(-1, 1, (30, 23))
    A, B = gmd.from_array(a, chunks=a_chunks), gmd.from_array(b, chunks=b_chunks)
    assert graph.is_resident(A) and isinstance(A._meta, gm.Matrix) and "Matrix" in repr(A)
    C = gmd.matmul(A, B)
    assert graph.is_resident(C) and C.shape == (37, 23) and C.dtype == np.float64
    assert C.chunks[0] == A.chunks[0] and C.chunks[1] == B.chunks[1]
    got = C.compute(scheduler="sync")
    np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-12)
    assert len(rec.calls) == len(C.chunks[0]) * len(C.chunks[1])  # one task a block of C
    for a_shapes, b_shapes in rec.calls:  # every K block of A's row, in order, against B's aligned blocks
        assert [s[1] for s in a_shapes] == list(A.chunks[1]) == [s[0] for s in b_shapes]
    assert C.compute(scheduler="sync").tobytes() == got.tobytes()


def test_a_name_is_a_prefix_two_products_named_alike_keep_their_own_keys(monkeypatch):
    """name= as dask.array's functions take it: the keys' prefix. Two different products given one name,
    computed together, each come back right (host chunks and GPU-resident chunks alike)."""
    monkeypatch.setattr(graph, "host_product", lambda x, y: host_product(x, y))
    rec = Recorder()
    monkeypatch.setattr(chunks, "upload", rec.upload)
    monkeypatch.setattr(graph, "resident_block", rec.block)
    rng = np.random.default_rng(3)
    a1, a2, b = rng.uniform(-1, 1, (20, 12)), rng.uniform(-1, 1, (20, 12)), rng.uniform(-1, 1, (12, 9))
    for make in (lambda x: da.from_array(x, chunks=5), lambda x: gmd.from_array(x, chunks=5)):
        c1 = gmd.matmul(make(a1), make(b), name="product")
        c2 = gmd.matmul(make(a2), make(b), name="product")
        assert c1.name != c2.name and c1.name.startswith("product")
        r1, r2 = da.compute(c1, c2, scheduler="sync")
        np.testing.assert_allclose(r1, a1 @ b, rtol=1e-12)
        np.testing.assert_allclose(r2, a2 @ b, rtol=1e-12)


def test_bad_input_raises_before_any_task(monkeypatch):
    def no_tasks(*args, **kwargs):
        raise AssertionError("a task ran")

    monkeypatch.setattr(chunks, "upload", no_tasks)
    monkeypatch.setattr(graph, "resident_block", no_tasks)
    monkeypatch.setattr(graph, "host_product", no_tasks)
    A = gmd.from_array(np.ones((4, 5)), chunks=2)
    with pytest.raises(ValueError, match="not aligned"):
        gmd.matmul(A, gmd.from_array(np.ones((4, 5)), chunks=2))
    with pytest.raises(TypeError, match="mix dtypes"):
        gmd.matmul(A, gmd.from_array(np.ones((5, 3), np.float32), chunks=2))
    with pytest.raises(TypeError, match="numpy chunks"):
        gmd.matmul(A, da.ones((5, 3), chunks=2))
    with pytest.raises(TypeError, match="numpy chunks"):
        gmd.matmul(da.ones((4, 5), chunks=2), gmd.from_array(np.ones((5, 3)), chunks=2))
    with pytest.raises(ValueError, match="2-D"):
        gmd.matmul(da.ones(4, chunks=2), da.ones((4, 3), chunks=2))
    with pytest.raises(ValueError, match="2-D"):
        gmd.matmul(da.ones((2, 4, 5), chunks=2), da.ones((5, 3), chunks=2))
    with pytest.raises(TypeError, match="dask array"):
        gmd.matmul(np.ones((4, 5)), A)
    with pytest.raises(TypeError, match="gpumat matrices hold"):
        gmd.matmul(da.ones((4, 5), chunks=2, dtype=np.int32), da.ones((5, 3), chunks=2, dtype=np.int32))
    with pytest.raises(ValueError, match="2-D"):
        gmd.from_array(np.ones((2, 3, 4)))
    with pytest.raises(TypeError, match="gpumat matrices hold"):
        gmd.from_array(np.ones((3, 4), np.int64))
    with pytest.raises(TypeError, match="numpy array or a dask array"):
        gmd.from_array([[1.0, 2.0]])
    with pytest.raises(TypeError, match="Matrices already"):
        gmd.from_array(A)
    with pytest.raises(TypeError, match="Matrix chunks"):
        gmd.to_numpy(da.ones((4, 5), chunks=2))


def test_meta_needs_no_gpu_and_slices_like_a_chunk():
    for dtype in DTYPES:
        m = chunks.meta(dtype)
        assert isinstance(m, gm.Matrix) and m.shape == (0, 0) and m.dtype == dtype and m.ndim == 2
        assert m[0:0, 0:0].shape == (0, 0)


# -------------------------------------------------------------------------------------------------
# CPU: moving a chunk between workers (the header and frames, GPU stood in for)
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_host_frames_round_trip_bit_for_bit(monkeypatch, dtype):
    values = np.random.default_rng(3).standard_normal((7, 5)).astype(dtype)
    header, frames = chunks.serialize_host(HostChunk(values))
    assert header == {"shape": [7, 5], "dtype": _dtypes.name(np.dtype(dtype)), "nbytes": values.nbytes}
    assert len(frames) == 1 and frames[0].nbytes == values.nbytes
    uploaded = []
    monkeypatch.setattr(
        gm.Matrix, "from_numpy", classmethod(lambda cls, x, dtype=None, device=None: uploaded.append(x) or x)
    )
    monkeypatch.setattr(chunks.transfer, "mark_ready", lambda chunk, stream=0: chunk)  # no GPU to record on
    back = chunks.deserialize_host(header, [bytes(frames[0])])
    assert back.dtype == values.dtype and back.shape == values.shape and back.tobytes() == values.tobytes()


def test_the_chunk_type_is_registered_with_dask_and_distributed():
    from dask.array.chunk_types import is_valid_chunk_type
    from dask.array.dispatch import concatenate_lookup

    assert is_valid_chunk_type(gm.Matrix)
    assert concatenate_lookup.dispatch(gm.Matrix) is chunks.concatenate
    pytest.importorskip("distributed", reason="distributed is not installed")
    from distributed.protocol.cuda import cuda_deserialize, cuda_serialize
    from distributed.protocol.serialize import dask_deserialize, dask_serialize

    assert dask_serialize.dispatch(gm.Matrix) is chunks.serialize_host
    assert dask_deserialize.dispatch(gm.Matrix) is chunks.deserialize_host
    assert cuda_serialize.dispatch(gm.Matrix) is chunks.serialize_device
    assert cuda_deserialize.dispatch(gm.Matrix) is chunks.deserialize_device


def test_workers_are_bound_to_gpus(monkeypatch):
    distributed = pytest.importorskip("distributed", reason="distributed is not installed")
    import gpumat.dask.chunks as chunk_module

    monkeypatch.setattr(chunk_module, "device_count", lambda: 2)
    monkeypatch.delitem(sys.modules, "dask_cuda", raising=False)
    with (
        distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        distributed.Client(cluster) as client,
    ):
        workers = client.scheduler_info()["workers"]

        def seen():
            return {
                info["name"]: client.submit(chunks.worker_device, workers=[address], pure=False).result()
                for address, info in workers.items()
            }

        assert seen() == {0: 0, 1: 1, 2: 0}  # workers 0, 1, 2 on GPUs 0, 1, 0
        # dask-cuda lists each worker's own GPU first in its CUDA_VISIBLE_DEVICES
        monkeypatch.setitem(sys.modules, "dask_cuda", object())
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
        assert set(seen().values()) == {0}
    assert chunks.worker_device() is None  # outside a worker: the current GPU


def test_a_logged_failure_keeps_its_traceback_as_text_and_lets_its_frames_go():
    """A worker's in-memory log holds every record it takes: with the filter, a record of a failure keeps
    the traceback's text and not its frames, whose locals (chunks being sent) could then be freed. The
    socket error the failure was raised from is also kept by the connection's stream (as tornado's
    IOStream.error is): its traceback reaches the sending frames too, so it must let go of them."""
    import logging
    import weakref

    from distributed.utils import DequeHandler

    class Chunk:  # stands in for a Matrix the failing frame holds
        pass

    class Stream:  # stands in for the connection's stream, kept alive elsewhere
        error = None

    stream = Stream()
    handler = DequeHandler(n=10)
    handler.addFilter(chunks.TracebackAsText())
    log = logging.getLogger("gpumat-test-traceback-as-text")
    log.addHandler(handler)
    log.propagate = False

    def write_to_socket(chunk):
        raise BrokenPipeError(32, "Broken pipe")

    def send(chunk):
        try:
            write_to_socket(chunk)
        except OSError as e:
            stream.error = e
            raise ConnectionError("the peer went away") from e

    def failed_transfer():
        chunk = Chunk()
        try:
            send(chunk)
        except OSError:
            log.exception("failed during get data")
        return weakref.ref(chunk)

    try:
        gone = failed_transfer()
        (record,) = handler.deque
        assert record.exc_info is None and "ConnectionError: the peer went away" in record.exc_text
        assert "Broken pipe" in record.exc_text and "in write_to_socket" in handler.format(record)
        assert stream.error is not None and stream.error.__traceback__ is None
        assert gone() is None  # nothing keeps the frames' locals
    finally:
        log.removeHandler(handler)


def test_every_worker_log_gets_the_filter_once():
    from distributed.utils import DequeHandler

    class Worker:
        name = "a"
        _deque_handler = DequeHandler(n=10)

    worker = Worker()
    chunks.worker_device(worker)
    chunks.worker_device(worker)
    assert [type(f) for f in worker._deque_handler.filters] == [chunks.TracebackAsText]


# -------------------------------------------------------------------------------------------------
# GPU
# -------------------------------------------------------------------------------------------------
def _tolerance(dtype, k):
    eps = {np.dtype(np.float32): 2.0**-23, np.dtype(np.float64): 2.0**-52}.get(np.dtype(dtype), 2.0**-8)
    return 4 * eps * max(k, 1) ** 0.5 + (eps if eps > 2.0**-20 else 0)


def _local_cluster(workers=None, processes=False):
    distributed = pytest.importorskip("distributed", reason="distributed is not installed")
    cluster = distributed.LocalCluster(
        n_workers=workers or gm.device_count(), threads_per_worker=1, processes=processes, dashboard_address=None
    )
    return cluster, distributed.Client(cluster)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: _dtypes.name(np.dtype(d)))
def test_resident_product_against_numpy_and_the_same_bits_twice(dtype):
    rng = np.random.default_rng(11)
    a = rng.uniform(-1, 1, (301, 257)).astype(dtype)
    b = rng.uniform(-1, 1, (257, 129)).astype(dtype)
    gc.collect()
    start = gm.memory_info()["used"]
    cluster, client = _local_cluster()
    with cluster, client:
        A = gmd.from_array(a, chunks=(128, 100)).persist()
        B = gmd.from_array(b, chunks=(64, 50)).persist()  # rows re-chunked on the GPU to A's columns
        C = gmd.matmul(A, B)
        first = gmd.to_numpy(C).compute()
        second = gmd.to_numpy(C).compute()
        whole = C.compute()  # Matrix chunks joined on the GPU
        assert isinstance(whole, gm.Matrix) and whole.to_numpy().tobytes() == first.tobytes()
        whole.free()
        del A, B, C
    assert first.dtype == np.dtype(dtype) and first.tobytes() == second.tobytes()
    ref = host_product(a, b)
    scale = host_product(np.abs(a), np.abs(b))
    assert np.all(np.abs(first.astype(np.float64) - ref) <= _tolerance(dtype, a.shape[1]) * scale + 1e-300)
    gc.collect()
    assert gm.memory_info()["used"] == start  # every chunk freed once the cluster let it go


@pytest.mark.gpu
def test_a_chunk_moves_between_two_worker_processes_bit_for_bit():
    """Two worker processes on one GPU: a chunk made on one is read by the other (distributed's host
    frames over TCP), and a resident product whose chunks are spread over both is right."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((300, 200)).astype(_dtypes.BFLOAT16)
    a = rng.uniform(-1, 1, (256, 192)).astype(np.float32)
    b = rng.uniform(-1, 1, (192, 160)).astype(np.float32)
    distributed = pytest.importorskip("distributed", reason="distributed is not installed")
    cluster, client = _local_cluster(workers=2, processes=True)
    with cluster, client:
        first, second = list(client.scheduler_info()["workers"])
        made = client.submit(chunks.upload, x, workers=[first], pure=False)
        back = client.submit(chunks.download, made, workers=[second], pure=False).result()
        assert back.dtype == x.dtype and back.tobytes() == x.tobytes()
        del made
        # lazy uploads (of dask arrays), placed: A on one worker, B on the other, so every block moves chunks
        A = client.persist(gmd.from_array(da.from_array(a, chunks=64)), workers=[first])
        B = client.persist(gmd.from_array(da.from_array(b, chunks=64)), workers=[second])
        distributed.wait([A, B])

        def holders(x):
            return {w for ws in client.who_has(distributed.futures_of(x)).values() for w in ws}

        assert holders(A) == {first} and holders(B) == {second}
        got = gmd.to_numpy(gmd.matmul(A, B)).compute()
    assert product_error(got, a, b) < 1e-5


def _ipc_counts(dask_worker=None):
    return dict(chunks.transfer.counts, pending=chunks.transfer.pending())


@pytest.mark.gpu
@pytest.mark.parametrize("ipc", ["on", "off"])
def test_worker_processes_on_every_gpu_give_the_bits_of_one_worker(ipc, monkeypatch):
    """The README's recipe (a worker process a GPU; with one GPU, two processes share it): a product
    whose chunks move between the processes gives the bits one worker gives. With IPC on, chunks move GPU
    to GPU (the receivers count their imports) and every offer is settled afterwards; with
    GPUMAT_DASK_IPC=0 they move through the host."""
    import time

    pytest.importorskip("distributed", reason="distributed is not installed")
    rng = np.random.default_rng(21)
    a = rng.uniform(-1, 1, (515, 389)).astype(np.float32)
    b = rng.uniform(-1, 1, (389, 261)).astype(np.float32)
    if ipc == "off":
        monkeypatch.setenv("GPUMAT_DASK_IPC", "0")  # the workers inherit it; so does this process
    results = []
    for workers in (1, max(gm.device_count(), 2)):
        cluster, client = _local_cluster(workers=workers, processes=True)
        with cluster, client:
            A = gmd.from_array(a, chunks=(128, 97))
            B = gmd.from_array(b, chunks=(97, 64))
            results.append(gmd.to_numpy(gmd.matmul(A, B)).compute())
            if workers > 1:
                plan = gmd.matmul_plan(A, B)
                assert sum(plan.blocks_per_worker.values()) == 5 * 5 and max(plan.blocks_per_worker.values()) <= 13
            del A, B
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                counts = client.run(_ipc_counts)
                if all(c["pending"] == 0 for c in counts.values()):
                    break
                time.sleep(0.1)
            assert all(c["pending"] == 0 for c in counts.values()), counts
            received = sum(c["received"] for c in counts.values())
            assert received > 0 if ipc == "on" else received == 0, counts
            assert all(c["withdrawn"] == 0 for c in counts.values()), counts
    assert results[0].tobytes() == results[1].tobytes()
    assert product_error(results[0], a, b) < 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("processes", [True, False])
def test_asnumpy_brings_the_whole_array_back_with_the_bits_of_to_numpy(processes):
    """gmd.asnumpy: chunks to this process GPU to GPU, downloaded in place; the same bytes as
    to_numpy(...).compute(), with worker processes (a worker a GPU, two at least) and workers in this
    process, into a new array and into `out`; a bfloat16 array too."""
    pytest.importorskip("distributed", reason="distributed is not installed")
    rng = np.random.default_rng(23)
    a = rng.uniform(-1, 1, (515, 389)).astype(np.float32)
    b = rng.uniform(-1, 1, (389, 261)).astype(np.float32)
    cluster, client = _local_cluster(workers=max(gm.device_count(), 2), processes=processes)
    with cluster, client:
        C = gmd.matmul(gmd.from_array(a, chunks=(128, 97)), gmd.from_array(b, chunks=(97, 64)))
        via_dask = gmd.to_numpy(C).compute()
        got = gmd.asnumpy(C)
        out = np.full(C.shape, np.nan, np.float32)
        assert gmd.asnumpy(C.persist(), out=out) is out
        x = rng.standard_normal((300, 200)).astype(_dtypes.BFLOAT16)
        X = gmd.from_array(x, chunks=(64, 90))
        assert gmd.asnumpy(X).tobytes() == x.tobytes()
    assert got.tobytes() == via_dask.tobytes() == out.tobytes()
    assert product_error(got, a, b) < 1e-5


def test_asnumpy_refuses_what_it_cannot_fill():
    x = da.ones((4, 4), chunks=2)
    with pytest.raises(TypeError, match="gpumat Matrix chunks"):
        gmd.asnumpy(x)
    resident = gmd.from_array(da.ones((4, 4), chunks=2, dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        gmd.asnumpy(resident, out=np.empty((4, 5), np.float32))
    with pytest.raises(ValueError, match="float32"):
        gmd.asnumpy(resident, out=np.empty((4, 4), np.float64))
    with pytest.raises(TypeError, match="numpy array"):
        gmd.asnumpy(resident, out=[[0.0] * 4] * 4)


@pytest.mark.gpu
def test_device_frames_round_trip():
    """distributed's cuda family: the header and the chunk as its device frame, read back from a frame of
    raw bytes in another library's memory (as UCX hands it over)."""
    cupy = pytest.importorskip("cupy")
    x = np.random.default_rng(4).standard_normal((33, 17)).astype(np.float16)
    with gm.Matrix.from_numpy(x) as X:
        header, (frame,) = chunks.serialize_device(X.T)  # a transposed view travels packed, row-major
        assert header["shape"] == [17, 33] and frame.is_contiguous and not frame.is_transposed
        raw = cupy.asarray(frame).view(cupy.uint8).ravel().copy()  # the bytes somewhere else
        back = chunks.deserialize_device(header, [raw])
        assert back.to_numpy().tobytes() == np.ascontiguousarray(x.T).tobytes()
        back.free()


@pytest.mark.gpu
def test_joining_and_rechunking_matrix_chunks_on_the_gpu():
    x = np.random.default_rng(8).standard_normal((50, 41))
    X = gmd.from_array(x, chunks=(16, 9))
    assert X.compute(scheduler="sync").to_numpy().tobytes() == x.tobytes()
    Y = X.rechunk((25, 20))
    assert gmd.to_numpy(Y).compute(scheduler="sync").tobytes() == x.tobytes()
    with gm.Matrix.from_numpy(x) as M:
        joined = chunks.concatenate([M[:, :20].T, M[:, 20:].T], axis=0)  # transposed views joined row-major
        assert joined.to_numpy().tobytes() == np.ascontiguousarray(x.T).tobytes()
        joined.free()


@pytest.mark.gpu
def test_numpy_chunks_on_the_gpu_with_a_local_cluster():
    rng = np.random.default_rng(1)
    a, b = rng.uniform(-1, 1, (700, 500)).astype(np.float32), rng.uniform(-1, 1, (500, 300)).astype(np.float32)
    cluster, client = _local_cluster()
    with cluster, client:
        got = gmd.matmul(da.from_array(a, chunks=(256, 128)), da.from_array(b, chunks=(128, 128))).compute()
    assert product_error(got, a, b) < 1e-5


@pytest.mark.gpu
def test_a_pickled_matrix_comes_back_with_its_values():
    import pickle

    x = np.random.default_rng(6).standard_normal((9, 13)).astype(np.float32)
    with gm.Matrix.from_numpy(x) as X:
        for m in (X, X.T, X[2:5, 3:11]):
            back = pickle.loads(pickle.dumps(m))
            assert back.to_numpy().tobytes() == m.to_numpy().tobytes()
            back.free()


@pytest.mark.gpu
def test_a_worker_that_dies_mid_graph_leaves_no_memory_held_on_the_others():
    """Two worker processes; while a product runs, one of them dies (its process exits). Dask recomputes
    what was lost on the workers left; once the results are dropped, the surviving worker's GPU holds
    what it held before the graph."""
    import os
    import time

    distributed = pytest.importorskip("distributed", reason="distributed is not installed")
    a = np.random.default_rng(9).uniform(-1, 1, (1024, 768)).astype(np.float32)
    b = np.random.default_rng(10).uniform(-1, 1, (768, 512)).astype(np.float32)
    cluster, client = _local_cluster(workers=2, processes=True)
    with cluster, client:
        first, second = list(client.scheduler_info()["workers"])
        before = gmd.memory_info(client)[first]["used"]
        # placed on one worker each, but free to be made again elsewhere once that worker is gone
        A = client.persist(gmd.from_array(da.from_array(a, chunks=128)), workers=[first], allow_other_workers=True)
        B = client.persist(gmd.from_array(da.from_array(b, chunks=128)), workers=[second], allow_other_workers=True)
        distributed.wait([A, B])
        C = gmd.matmul(A, B).persist()
        # the worker holding B goes away (the future kept, so that Dask does not cancel the task)
        kill = client.submit(os._exit, 1, workers=[second], pure=False)
        got = gmd.to_numpy(C).compute()  # lost chunks are made again where Dask can
        assert product_error(got, a, b) < 1e-5
        deadline = time.monotonic() + 30
        while second in client.scheduler_info()["workers"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert second not in client.scheduler_info()["workers"]  # it did die (a nanny's restart has a new address)
        del A, B, C, kill
        deadline = time.monotonic() + 30
        # what the failed transfers' exceptions held is garbage in reference cycles (tracebacks, tasks) once
        # Dask lets go: an idle worker's garbage collector may not run for minutes, so run it
        while time.monotonic() < deadline:
            client.run(gc.collect, workers=[first])
            if gmd.memory_info(client).get(first, {}).get("used") == before:
                break
            time.sleep(0.1)
        held = gmd.memory_info(client)[first]["used"]
        if held != before:  # say what the worker still keeps: keys Dask did not release, and what holds them
            kept = client.run(lambda dask_worker: sorted(map(str, dask_worker.data)), workers=[first])
            holders = client.run(what_holds_live_matrices, workers=[first])[first]
            pytest.fail(f"the surviving worker holds {held - before} bytes more than before; keys {kept}\n{holders}")


@pytest.mark.gpu
@pytest.mark.skipif(gm.device_count() < 2, reason="needs two GPUs (runs on the two-GPU machine)")
def test_a_chunk_from_another_gpu_is_copied_once_while_it_lives():
    x = np.random.default_rng(12).standard_normal((64, 48)).astype(np.float32)
    block = gm.Matrix.from_numpy(x, device=0)
    first = chunks.to_worker_gpu(block, 1)  # a worker on GPU 1
    assert first.device.ordinal == 1 and first.to_numpy().tobytes() == x.tobytes()
    assert chunks.to_worker_gpu(block, 1) is first  # the second task on this worker reuses the copy
    del block, first
    gc.collect()
    assert len(chunks._copies) == 0  # gone with the chunk


def test_the_meta_pickles_prints_and_reads_without_a_gpu():
    """The meta travels with the graph (to a scheduler that may have no GPU) and shows in reprs."""
    import pickle

    for dtype in DTYPES:
        m = chunks.meta(dtype)
        back = pickle.loads(pickle.dumps(m))
        assert isinstance(back, gm.Matrix) and back.shape == (0, 0) and back.dtype == m.dtype
        assert "stand-in" in repr(back) and back.to_numpy().shape == (0, 0)
        back.free()
        assert back.is_freed
