"""Matrix without a GPU: input conversion rules and view arithmetic are host-side and checked here."""

import numpy as np
import pytest
from support import fake_matrix

import gpumat as gm
from gpumat.matrix import as_float32_2d, as_host_2d
from gpumat.operands import overlaps


@pytest.mark.parametrize(
    "bad", [np.array([1 + 2j]), np.array([True, False]), np.array(["a"]), np.array([object()], dtype=object)]
)
def test_non_real_dtypes_are_type_errors(bad):
    with pytest.raises(TypeError, match="real numbers"):
        gm.Matrix.from_numpy(bad)


@pytest.mark.parametrize("shape", [(), (2, 2, 2, 2)])
def test_wrong_ranks_are_value_errors(shape):
    with pytest.raises(ValueError, match="1-D, 2-D or 3-D"):
        gm.Matrix.from_numpy(np.ones(shape))


def test_conversion_makes_c_order_float32_and_rows_from_vectors():
    a = np.arange(12, dtype=np.int64).reshape(3, 4).T  # Fortran-ordered int input
    host = as_float32_2d(a)
    assert host.dtype == np.float32 and host.flags.c_contiguous and host.shape == (4, 3)
    np.testing.assert_array_equal(host, a)
    assert as_float32_2d([1, 2, 3]).shape == (1, 3)


@pytest.mark.parametrize(
    "src, expected",
    [
        (np.float32, np.float32),
        (np.float64, np.float64),
        (np.float16, np.float16),
        (np.int8, np.float64),
        (np.int32, np.float64),
        (np.uint32, np.float64),
        (np.int64, np.float64),
    ],
)
def test_the_dtype_rule(src, expected):
    host, dt = as_host_2d(np.arange(6, dtype=src).reshape(2, 3))
    assert dt == expected and host.dtype == expected and host.flags.c_contiguous
    np.testing.assert_array_equal(host, np.arange(6).reshape(2, 3))


def test_integers_beyond_float64s_exact_range_need_an_explicit_dtype():
    big = np.array([2**53 + 1, 0], dtype=np.int64)
    with pytest.raises(TypeError, match="2\\^53"):
        as_host_2d(big)
    host, dt = as_host_2d(big, np.float64)
    assert dt == np.float64 and host[0, 0] == float(2**53)
    host, dt = as_host_2d(np.array([2**31 - 1], dtype=np.int64))
    assert host[0, 0] == 2**31 - 1  # exact, unlike float32's 2147483648.0


@pytest.mark.parametrize("bad", [np.array([True]), np.array([1 + 2j]), np.array(["x"]), np.array([object()])])
def test_non_real_data_is_refused(bad):
    with pytest.raises(TypeError):
        as_host_2d(bad)


def test_bfloat16_conversion_on_the_host_rounds_to_nearest_even():
    from gpumat import _dtypes

    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, np.inf, np.nan, 3.4e38], np.float32)
    bits = _dtypes.float32_to_bfloat16_bits(x)
    back = _dtypes.bfloat16_bits_to_float32(bits)
    assert back[0] == 1.0 and back[1] == 1.0 and back[2] == 1.015625 and back[3] == -2.5  # ties to even
    assert np.isinf(back[4]) and np.isnan(back[5]) and np.isinf(back[6])


def test_dtype_names():
    from gpumat import _dtypes

    assert _dtypes.as_dtype("bfloat16") is _dtypes.BFLOAT16 and _dtypes.suffix(_dtypes.BFLOAT16) == "bf16"
    assert _dtypes.suffix(np.dtype(np.float64)) == "f64" and _dtypes.name(_dtypes.BFLOAT16) == "bfloat16"
    for bad in (np.int32, "complex64", object):
        with pytest.raises(TypeError):
            _dtypes.as_dtype(bad)


def test_the_suffix_table_never_takes_a_plain_uint16_for_bfloat16():
    """suffix() remembers the dtypes it has named; the tagged uint16 that stands in for bfloat16 without
    ml_dtypes names bf16 each time but is never remembered (numpy compares dtypes without metadata, so a
    plain uint16 would then pass for bfloat16)."""
    from gpumat import _dtypes

    tagged = np.dtype(np.uint16, metadata={"gpumat": "bfloat16"})
    for _ in range(2):
        assert _dtypes.suffix(tagged) == "bf16"
        with pytest.raises(TypeError):
            _dtypes.suffix(np.dtype(np.uint16))
    assert _dtypes.suffix(_dtypes.bfloat16()) == "bf16" and _dtypes.suffix(np.dtype(np.float16)) == "f16"


@pytest.mark.parametrize(
    "h,w,exc", [(-1, 2, ValueError), (2, -3, ValueError), (2.0, 2, TypeError), (True, 2, TypeError)]
)
def test_bad_dimensions(h, w, exc):
    with pytest.raises(exc):
        gm.Matrix.empty(h, w)


def test_direct_construction_is_refused():
    with pytest.raises(TypeError, match="from_numpy"):
        gm.Matrix()


def test_views_keep_stride_and_offset():
    m = fake_matrix(10, 8)
    v = m[2:5, 3:7]
    assert v.shape == (3, 4) and v.stride == 8 and v.is_view
    assert v.elements == m.elements + (2 * 8 + 3) * 4
    vv = v[1:, 1:3]
    assert vv.shape == (2, 2) and vv.elements == m.elements + (3 * 8 + 4) * 4
    assert m[:, -2:].shape == (10, 2) and m[7:].shape == (3, 8)
    assert m[5:2, :].shape == (0, 8)


def test_view_index_errors():
    m = fake_matrix(4, 4)
    with pytest.raises(TypeError):
        m[1, 2]
    with pytest.raises(ValueError, match="step"):
        m[::2, :]


def test_overlap_is_by_address_range():
    m = fake_matrix(10, 10)
    assert overlaps(m[0:5, :], m[4:6, :])
    assert not overlaps(m[0:5, :], m[5:10, :])
    assert overlaps(m[:, 0:5], m[:, 5:10])  # interleaved rows share the span
    assert not overlaps(m[0:0, :], m)


def test_driver_results_map_to_the_right_exceptions():
    from cuda.bindings import driver

    from gpumat.runtime.errors import raise_error

    for code, exc in [
        (driver.CUresult.CUDA_ERROR_NO_DEVICE, gm.NoDeviceError),
        (driver.CUresult.CUDA_ERROR_OUT_OF_MEMORY, gm.OutOfMemoryError),
        (driver.CUresult.CUDA_ERROR_INVALID_VALUE, gm.CudaError),
    ]:
        with pytest.raises(exc) as info:
            raise_error(code, "cuTest")
        assert isinstance(info.value, gm.CudaError) and info.value.code == int(code)
    with pytest.raises(gm.CudaError, match="CUDA_ERROR_INVALID_VALUE.*cuTest") as info:
        raise_error(driver.CUresult.CUDA_ERROR_INVALID_VALUE, "cuTest")
    assert not isinstance(info.value, gm.NoDeviceError)


def test_small_block_free_list_is_bounded_and_exact_in_size():
    from gpumat import memory

    blocks = memory.pool._SmallBlocks()
    assert blocks.take(256, 0) == 0
    assert blocks.give(0x1000, 256, 0) and blocks.take(512, 0) == 0 and blocks.take(256, 0) == 0x1000
    kept = [blocks.give(0x2000 + i * 256, 256, 0) for i in range(memory.pool.KEEP_PER_SIZE + 3)]
    assert kept.count(True) == memory.pool.KEEP_PER_SIZE and blocks.bytes == memory.pool.KEEP_PER_SIZE * 256
    big = memory.pool.SMALL_BLOCK
    assert sum(blocks.give(0x9000000 + i * big, big, 0) for i in range(200)) * big <= memory.pool.KEEP_BYTES
    drained = blocks.drain()
    assert len(drained) == len(set(drained)) and blocks.bytes == 0 and blocks.take(256, 0) == 0
    # one stream's blocks of one size hold at most KEEP_PER_KEY_BYTES: eight 16 MiB results freed on a
    # stream leave room for its other sizes (eviction never takes the freeing stream's own blocks)
    kept = [blocks.give(0xA000000 + i * big, big, 0) for i in range(8)]
    assert kept.count(True) == memory.pool.KEEP_PER_KEY_BYTES // big < 8
    assert blocks.give(0x1000, 4096, 0) and blocks.take(4096, 0) == 0x1000
    blocks.drain()


def test_small_blocks_are_reused_only_on_the_stream_they_were_freed_on():
    from gpumat import memory

    blocks = memory.pool._SmallBlocks()
    assert blocks.give(0x1000, 256, 0x77)
    assert blocks.take(256, 0) == 0 and blocks.take(256, 0x78) == 0
    assert blocks.give(0x2000, 256, 0)
    assert blocks.drain(0x77) == [(0x1000, 256, 0x77)] and blocks.bytes == 256
    assert blocks.take(256, 0) == 0x2000 and blocks.bytes == 0


def test_a_full_free_list_hands_back_the_blocks_of_streams_kept_longest(monkeypatch):
    """Blocks kept for another library's streams that never come back (a new PyTorch stream every step) used
    to hold the free list full for good, every later small free going to the driver; and every stream
    left a key behind. A full list now hands back the blocks kept longest for other streams (after their
    stream's mark, on the legacy stream) to keep the new one, and an emptied key goes."""
    from collections import deque

    from support import FakeDevice

    from gpumat.memory import pool as pool_module
    from gpumat.runtime import memops, streams

    freed, waited = [], []
    monkeypatch.setattr(memops, "free_async", lambda ptr, stream: freed.append((ptr, stream)))
    monkeypatch.setattr(streams, "wait_for_streams", lambda stream, others: waited.append((stream, others)))
    p = object.__new__(pool_module.Pool)
    p.device, p.small, p.pending, p.used, p.peak = FakeDevice(), pool_module._SmallBlocks(), deque(), 0, 0
    p.limit, p.closed_seen, p.handle = None, streams.closed_generation, None

    def foreign(sid):
        f = object.__new__(streams.Foreign)
        f.handle, f.sid, f.event, f.named_by = 0xABC000, sid, None, None
        return f

    size = pool_module.SMALL_BLOCK
    gone = [foreign(sid) for sid in range(pool_module.KEEP_BYTES // size)]  # streams that never come back
    for i, f in enumerate(gone):
        p.used += size
        p.release(0x7E0000000000 + i * size, size, f, {f: f})
    assert p.small.bytes == pool_module.KEEP_BYTES and not freed
    p.used += 4096
    p.free(0x7F0000000000, 4096, 0)  # the legacy stream's block: kept, the first stream's block handed back
    assert p.small.take(4096, 0) == 0x7F0000000000 and (0, 4096) not in p.small.by_key
    assert freed == [(0x7E0000000000, 0)] and waited == [(0, {gone[0]: gone[0]})]
    assert (size, gone[0]) not in p.small.by_key and p.small.take(size, gone[1]) == 0x7E0000000000 + size
    assert p.used == 0  # blocks on the free list count as used by nothing


def test_a_dict_is_a_type_error_and_big_endian_arrays_convert_exactly():
    with pytest.raises(TypeError, match="dict"):
        as_host_2d({"a": 1})
    for dt in (">f4", ">f8", ">i4", "<f4"):
        x = (np.arange(12).reshape(3, 4) * 1.25 if dt[1] == "f" else np.arange(12).reshape(3, 4)).astype(dt)
        host, matrix_dtype = as_host_2d(x)
        assert host.dtype.isnative and matrix_dtype.isnative
        assert np.array_equal(host.astype(np.float64), x.astype(np.float64))


def test_the_memory_limit_counts_blocks_kept_for_reuse(monkeypatch):
    """A block on the free list is not a way past gm.set_memory_limit."""
    from collections import deque

    from support import FakeDevice

    from gpumat.memory import pool as pool_module
    from gpumat.runtime import memops, streams

    for name in ("free_async", "context_synchronize", "trim_pool"):
        monkeypatch.setattr(memops, name, lambda *args: None)
    p = object.__new__(pool_module.Pool)
    p.device, p.small, p.pending, p.used, p.peak = FakeDevice(), pool_module._SmallBlocks(), deque(), 0, 0
    p.limit, p.closed_seen, p.handle = 1 << 20, streams.closed_generation, None
    assert p.small.give(0x7F0000000000, 64 << 10, 0)  # a kept 64 KiB block
    p.used = (1 << 20) - 1024  # just under the limit
    with pytest.raises(gm.OutOfMemoryError, match="memory limit"):
        p.alloc(64 << 10, 0)
    assert p.used == (1 << 20) - 1024


def test_a_matrix_and_a_numpy_array_do_not_mix_silently():
    """A @ x and x @ A with a numpy x are a TypeError that says how to upload, never a product on the CPU."""
    A = fake_matrix(2, 2)
    x = np.ones((2, 2), np.float32)
    with pytest.raises(TypeError, match="from_numpy"):
        A @ x
    with pytest.raises(TypeError, match="from_numpy"):
        x @ A
    with pytest.raises(TypeError):
        np.add(x, A)  # numpy defers to the Matrix, which has no addition


def test_free_waits_for_an_operation_that_holds_the_device_lock():
    """free() from another thread detaches the matrix only after an operation that already checked it has
    queued its work (it used to drop the buffer under the operation: AttributeError on None)."""
    import threading

    from support import FAKE_DEVICE

    m = fake_matrix(4, 4)
    with FAKE_DEVICE.lock:  # an operation between its checks and its enqueue
        freeing = threading.Thread(target=m.free)
        freeing.start()
        freeing.join(timeout=0.2)
        assert freeing.is_alive() and m._buffer is not None and m.elements  # still usable inside the operation
    freeing.join(timeout=5)
    assert not freeing.is_alive() and m.is_freed


def test_a_dropped_result_is_taken_over_only_by_the_same_stream(monkeypatch):
    """The launch path's shortcut: the block of the last result, dropped and queued by its finalizer, goes
    to the next allocation of its size directly when that allocation is on the stream the block was used
    on: the same gpumat stream, or the same stream of another library (its Foreign: the same handle and
    driver id), used there alone. Any other allocation gets a new block, and the dropped one goes through
    the free list."""
    from collections import deque

    from support import FakeDevice

    from gpumat.memory import pool as pool_module
    from gpumat.runtime import memops, streams

    fresh = iter(range(0x7E0000000000, 0x7F0000000000, 1 << 20))
    monkeypatch.setattr(memops, "alloc_async", lambda nbytes, stream: next(fresh))
    monkeypatch.setattr(memops, "free_async", lambda ptr, stream: None)
    monkeypatch.setattr(streams, "wait_for_streams", lambda stream, others: None)
    monkeypatch.setattr(streams, "close_abandoned", lambda dev: None)

    def pool():
        p = object.__new__(pool_module.Pool)
        p.device, p.small, p.pending, p.used, p.peak = FakeDevice(), pool_module._SmallBlocks(), deque(), 0, 0
        p.limit, p.closed_seen, p.handle = None, streams.closed_generation, None
        return p

    def foreign(handle, sid):
        f = object.__new__(streams.Foreign)
        f.handle, f.sid, f.event, f.named_by = handle, sid, None, None
        return f

    dropped, size = 0x7F0000000000, 64 << 10
    own = 0x5000  # one of gpumat's streams
    monkeypatch.setattr(streams, "own_streams", {own})
    p = pool()
    p.pending.append((dropped, size, own, None))
    assert p.alloc(size, own) == dropped  # same stream, same size: taken over
    p = pool()
    p.pending.append((dropped, size, own, None))
    assert p.alloc(size, 0) != dropped  # another stream: a new block
    f, g = foreign(0xABC000, 7), foreign(0xABC000, 8)  # one handle, two streams (the first one destroyed)
    p = pool()
    p.pending.append((dropped, size, f, {f: f}))
    assert p.alloc(size, f.handle, f) == dropped  # the same foreign stream
    p = pool()
    p.pending.append((dropped, size, g, {g: g}))
    assert p.alloc(size, f.handle, f) != dropped  # a new stream behind a reused handle
    assert p.small.take(size, f) == 0 and p.small.take(size, g) == dropped  # kept for the old stream alone
    p = pool()
    p.pending.append((dropped, size, f, {f: f, own: None}))
    assert p.alloc(size, f.handle, f) != dropped  # also used on another stream: not ordered by this one
    p = pool()
    p.pending.append((dropped, size, f, {f: streams.UNMARKED}))
    assert p.alloc(size, f.handle, f) != dropped  # its use there was never marked (an operation failed)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "uint8"])
def test_a_host_arrays_address_is_numpys_for_every_array_a_copy_takes(dtype):
    """memory.host.address_of, which every host copy reads, against numpy's own answer: writable and
    read-only arrays, row slices, column slices (strided), empty arrays, and bfloat16 (from ml_dtypes,
    which numpy cannot export as a buffer)."""
    from gpumat import _dtypes
    from gpumat.memory.host import address_of

    base = np.zeros((7, 9), _dtypes.as_dtype(dtype) if dtype == "bfloat16" else np.dtype(dtype))
    frozen = base.copy()
    frozen.flags.writeable = False
    for a in (base, base[2:5], base[:, 1:4], base[3], base[:0], frozen, frozen[1:], base.T):
        assert address_of(a) == a.ctypes.data


@pytest.mark.parametrize(
    "bad, named",
    [({}, "got a dict"), ("text", "got a str"), (None, "got a NoneType"), ([True], "booleans"), ([2j], "complex")],
)
def test_what_from_numpy_cannot_take_is_named_with_what_it_takes(bad, named):
    """Issue 43 item 5: a dict or a string was reported as bool/complex/object data; the error names the
    type it got and what a Matrix is made from."""
    with pytest.raises(TypeError, match="made from real numbers: a 1-D, 2-D or 3-D numpy array") as info:
        gm.Matrix.from_numpy(bad)
    assert named in str(info.value)


def test_numpy_never_copies_a_matrix_to_the_host_implicitly():
    """Issue 43 item 4: np.asarray(A) (and np.array, numpy functions) copied the matrix to the host
    silently; it is a TypeError naming to_numpy(), as in CuPy and PyTorch. Printing still works."""
    A = fake_matrix(3, 4)
    for implicit in (np.asarray, np.array, np.ascontiguousarray, lambda x: np.stack([x, x])):
        with pytest.raises(TypeError, match=r"\.to_numpy\(\)"):
            implicit(A)
    assert repr(A).startswith("<gpumat.Matrix 3x4 float32") and str(A) == repr(A)


def test_host_operands_have_their_arguments_checked_before_the_gpus_are_looked_for(monkeypatch):
    """Issue 43 item 5: with no GPU, gm.matmul of two numpy arrays said "devices must name one or more
    distinct GPUs, got []" and hid a bad precision=; the arguments are checked first, and a missing GPU
    is a NoDeviceError worded as `python -m gpumat` words it."""
    from gpumat.outofcore import pipeline

    def no_gpu():
        raise gm.NoDeviceError("the NVIDIA driver reports no GPU")

    monkeypatch.setattr(pipeline, "gpu_count", no_gpu)
    a = np.ones((3, 3), np.float32)
    for kwargs, error, words in (
        ({"precision": "fp8"}, ValueError, "unknown matmul precision 'fp8'"),
        ({"memory_limit": -1}, ValueError, "memory_limit must be >= 0"),
        ({"devices": [0, 0]}, ValueError, "distinct GPUs"),
        ({"devices": "0"}, TypeError, "GPU indices"),
        ({"out": np.ones((2, 2), np.float32)}, ValueError, "out must be"),
        ({}, gm.NoDeviceError, "^no usable NVIDIA GPU: the NVIDIA driver reports no GPU$"),
    ):
        with pytest.raises(error, match=words):
            gm.matmul(a, a, **kwargs)
    with pytest.raises(ValueError, match="not aligned"):
        gm.matmul(a, np.ones((2, 2), np.float32))


def test_float64_to_bfloat16_on_the_host_rounds_once():
    """from_numpy(float64 data, dtype=bfloat16) went through float32 and rounded twice: 1 + 2^-8 + 2^-30
    became 1.0, where the nearest bfloat16 is 1 + 2^-7 (and the GPU's astype said so). Checked against
    an exact rounding (integers) on ties and near-ties, both signs, subnormals and overflow."""
    import math

    pytest.importorskip("ml_dtypes")
    from gpumat import _dtypes

    def nearest_bfloat16(x: float) -> float:
        if math.isnan(x) or math.isinf(x) or x == 0:
            return x
        m, e = math.frexp(abs(x))  # |x| = m 2^e, m in [0.5, 1)
        e = max(e, -125)  # bfloat16's subnormals: a fixed spacing of 2^-133
        scaled = abs(x) * 2.0 ** (8 - e)  # 8 significant bits above the point (exact: a power of two)
        whole = math.floor(scaled)
        rest = scaled - whole
        whole += rest > 0.5 or (rest == 0.5 and whole % 2 == 1)
        y = whole * 2.0 ** (e - 8)
        return math.copysign(math.inf if y > 3.3895313892515355e38 else y, x)

    rng = np.random.default_rng(7)
    base = rng.uniform(1, 2, 400)
    ties = np.floor(base * 2**7) / 2**7 + 2.0**-8  # exactly halfway
    values = np.concatenate(
        [ties, ties + 2.0**-30, ties - 2.0**-30, -ties, ties * 2.0**-128, [3.39e38, 3.4e38, 1e39, 1e-46, 0.0]]
    )
    got = _dtypes.to_host_array(values, _dtypes.bfloat16()).astype(np.float64)
    want = np.array([nearest_bfloat16(float(v)) for v in values])
    np.testing.assert_array_equal(got, want)
