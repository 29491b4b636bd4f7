"""Dot product: argument checks, grid and the kernels' index walks on the CPU; accuracy, determinism,
views and special values on the GPU."""

from __future__ import annotations

import importlib
import struct
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import built_entries, dims, fake_matrix, random, record_launches, strided_view

import gpumat as gm
from gpumat import memory
from gpumat.runtime import kernels

D = importlib.import_module("gpumat.dot")  # the module (gpumat.dot may name the function)


# ---------------------------------------------------------------- CPU: declarations and geometry
def test_declarations_match_ptx():
    entries = built_entries()["dot"]
    for k in (*D.FLAT_KERNELS.values(), *D.STRIDED_KERNELS.values()):
        assert k.name in entries, k.name
        assert entries[k.name]["params"] == [kernels.PTX_TYPES[c] for c in k.signature]
    for name, info in entries.items():
        for arch, res in info["resources"].items():
            assert res["spill_stores"] == 0 and res["spill_loads"] == 0, (name, arch, res)


@pytest.mark.parametrize("sm_count", [1, 8, 108, 132, 170, 2000])
@pytest.mark.parametrize("n", [1, 2, 255, 2048, 2049, 2**20, 2**24, 2**28, 3 * 2**31, 10**12])
def test_grid_blocks(n, sm_count):
    blocks = D.grid_blocks(n, sm_count)
    assert 1 <= blocks <= min(D.MAX_BLOCKS, D.BLOCKS_PER_SM * sm_count)
    assert blocks == D.grid_blocks(n, sm_count)  # a pure function of n and the GPU: deterministic
    per_block = D.THREADS * D.ELEMENTS_PER_THREAD["f32"]
    assert n > (blocks - 1) * per_block, "more blocks than the elements need"


def test_small_sizes_fit_one_pass():
    # 2^20 elements on an H100 (132 SMs): every thread does a single step of the flat loop
    assert D.grid_blocks(2**20, 132) * D.THREADS * D.ELEMENTS_PER_THREAD["f32"] >= 2**20


def model_flat(n: int, nthreads: int, x_addr: int, y_addr: int) -> Counter:
    """The element indices dot_flat's threads read, replaying the kernel's index arithmetic."""
    seen = Counter()
    if ((x_addr ^ y_addr) & 15) == 0:
        head = min(((16 - (x_addr & 15)) & 15) >> 2, n)
        n4 = (n - head) >> 2
        for tid in range(nthreads):
            seen.update(range(tid, head, nthreads))
            i = tid
            while i + nthreads < n4:
                for v in (i, i + nthreads):
                    seen.update(head + 4 * v + k for k in range(4))
                i += 2 * nthreads
            if i < n4:
                seen.update(head + 4 * i + k for k in range(4))
            seen.update(range(head + 4 * n4 + tid, n, nthreads))
    else:
        for tid in range(nthreads):
            i = tid
            while i + 3 * nthreads < n:
                seen.update(i + k * nthreads for k in range(4))
                i += 4 * nthreads
            while i < n:
                seen[i] += 1
                i += nthreads
    return seen


def model_strided(rows: int, cols: int, nthreads: int) -> Counter:
    """The (row, column) pairs dot_strided's threads read, replaying the kernel's cursor arithmetic."""
    n = rows * cols
    dr, dc = divmod(nthreads, cols)
    seen = Counter()
    for tid in range(nthreads):
        r, c = divmod(tid, cols)
        i = tid

        def step():
            nonlocal r, c
            r += dr
            c += dc
            if c >= cols:
                c -= cols
                r += 1

        while i + 3 * nthreads < n:
            for _ in range(4):
                seen[(r, c)] += 1
                step()
            i += 4 * nthreads
        while i < n:
            seen[(r, c)] += 1
            step()
            i += nthreads
    return seen


@given(
    n=st.integers(1, 3000),
    nthreads=st.sampled_from([1, 3, 32, 64, 256, 512]),
    ox=st.integers(0, 7),
    oy=st.integers(0, 7),
)
def test_flat_walk_reads_every_element_once(n, nthreads, ox, oy):
    base = 0x7F0000000000
    seen = model_flat(n, nthreads, base + 4 * ox, base + 1024 + 4 * oy)
    assert seen == Counter(range(n))


@given(rows=dims(200), cols=dims(200), nthreads=st.sampled_from([1, 5, 32, 256, 1024]))
def test_strided_walk_reads_every_element_once(rows, cols, nthreads):
    seen = model_strided(rows, cols, nthreads)
    assert seen == Counter((r, c) for r in range(rows) for c in range(cols))


# ---------------------------------------------------------------- CPU: argument checks and the launch
class FakeScratch:
    sm_count, dev, result = 132, 0x7E0000000000, 0x7D0000000000

    def __init__(self):
        import threading

        self.lock = threading.Lock()

    def value(self, stream):
        return 42.0


@pytest.fixture
def launches(monkeypatch):
    seen = []

    def refuse(*args, **kwargs):
        raise AssertionError("argument checks must fail before any GPU call")

    scratch = FakeScratch()
    monkeypatch.setattr(memory.Pool, "alloc", refuse)
    monkeypatch.setattr(D, "_scratch", lambda dev: scratch)
    return record_launches(monkeypatch, seen)


def test_argument_errors_before_any_gpu_call(launches, monkeypatch):
    monkeypatch.setattr(D, "_scratch", lambda dev: pytest.fail("touched the GPU"))
    x = fake_matrix(3, 4)
    with pytest.raises(ValueError, match="differ"):
        D.dot(x, fake_matrix(4, 3, ptr=0x7F1000000000))
    with pytest.raises(ValueError, match="differ"):
        D.dot(x, fake_matrix(3, 5, ptr=0x7F1000000000))
    with pytest.raises(TypeError):
        D.dot(x, np.ones((3, 4), np.float32))
    with pytest.raises(TypeError):
        D.dot([1.0], x)
    freed = fake_matrix(3, 4)
    freed._buffer = None
    with pytest.raises(ValueError):
        D.dot(x, freed)
    assert D.dot(fake_matrix(0, 4), fake_matrix(0, 4, ptr=0x7F1000000000)) == 0.0
    assert D.dot(fake_matrix(5, 0), fake_matrix(5, 0, ptr=0x7F1000000000)) == 0.0
    assert launches == []


def test_contiguous_goes_flat(launches):
    x, y = fake_matrix(1024, 1024), fake_matrix(1024, 1024, ptr=0x7F1000000000)
    assert D.dot(x, y) == 42.0
    ((name, grid, block, args, _, _),) = launches
    assert name == "dot_flat_f32" and block == (D.THREADS, 1, 1) and grid == (D.grid_blocks(2**20, 132), 1, 1)
    assert args == (x.elements, y.elements, 2**20, FakeScratch.dev, FakeScratch.result)


def test_one_row_view_goes_flat(launches):
    x, y = fake_matrix(1, 100, stride=300), fake_matrix(1, 100, stride=7, ptr=0x7F1000000000)
    D.dot(x, y)
    assert launches[0][0] == "dot_flat_f32"


def test_views_go_strided(launches):
    x, y = fake_matrix(30, 40, stride=41), fake_matrix(30, 40, ptr=0x7F1000000000)
    D.dot(x, y)
    ((name, grid, block, args, _, _),) = launches
    assert name == "dot_strided_f32" and grid == (D.grid_blocks(1200, 132), 1, 1)
    assert args == (x.elements, y.elements, 30, 40, 41, 40, FakeScratch.dev, FakeScratch.result)


# ---------------------------------------------------------------- GPU
def ref_dot(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """float64 dot and sum |x*y| (the scale the rounding error is measured against)."""
    x64, y64 = x.astype(np.float64).ravel(), y.astype(np.float64).ravel()
    return float(np.dot(x64, y64)), float(np.abs(x64 * y64).sum())


def assert_close(got: float, x: np.ndarray, y: np.ndarray, tol: float = 1e-12) -> None:
    ref, scale = ref_dot(x, y)
    assert abs(got - ref) <= tol * max(scale, 1e-300), (got, ref, scale)


def bits(v: float) -> bytes:
    return struct.pack("<d", v)


@pytest.mark.gpu
@given(rows=dims(1500), cols=dims(1500))
def test_contiguous_against_float64(rows, cols):
    x, y = random((rows, cols)), random((rows, cols))
    with gm.Matrix.from_numpy(x) as dx, gm.Matrix.from_numpy(y) as dy:
        got = D.dot(dx, dy)
    assert isinstance(got, float)
    assert_close(got, x, y)


@pytest.mark.gpu
@settings(max_examples=25)
@given(
    rows=dims(700),
    cols=dims(700),
    pads=st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5), st.integers(0, 5)),
)
def test_views_against_float64(rows, cols, pads):
    x, y = random((rows, cols)), random((rows, cols))
    px, vx = strided_view(x, pads[0], pads[1] + 1)
    py, vy = strided_view(y, pads[2], pads[3])
    try:
        assert_close(D.dot(vx, vy), x, y)
        with gm.Matrix.from_numpy(y) as dy:  # a view with a contiguous partner
            assert_close(D.dot(vx, dy), x, y)
            assert_close(D.dot(dy, vx), y, x)
    finally:
        px.free()
        py.free()


@pytest.mark.gpu
@pytest.mark.parametrize("cols", [1, 2, 3, 5, 7, 8, 1001])
@pytest.mark.parametrize("rx, ry", [(1, 1), (1, 2), (2, 5), (3, 3), (0, 1)])
def test_row_slices_any_alignment(cols, rx, ry):
    # full-width row slices are contiguous but may start at any 4-byte offset: same misalignment in
    # x and y takes the peeled float4 path, different misalignment the scalar path
    rows = 37
    hx, hy = random((rows + 8, cols)), random((rows + 8, cols))
    with gm.Matrix.from_numpy(hx) as px, gm.Matrix.from_numpy(hy) as py:
        for h in (1, 2, 3, 4, 5, rows):
            vx, vy = px[rx : rx + h, :], py[ry : ry + h, :]
            assert D.is_flat(h, cols, vx.stride) and D.is_flat(h, cols, vy.stride)
            assert_close(D.dot(vx, vy), hx[rx : rx + h], hy[ry : ry + h])


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1), (1, 2**20), (2**20, 1), (1024, 1024), (4097, 4099)])
def test_deterministic_over_20_runs(shape):
    x, y = random(shape), random(shape)
    with gm.Matrix.from_numpy(x) as dx, gm.Matrix.from_numpy(y) as dy:
        first = D.dot(dx, dy)
        assert all(bits(D.dot(dx, dy)) == bits(first) for _ in range(19))
        if shape[1] > 2:  # the strided kernel too
            vx, vy = dx[:, 1:], dy[:, 1:]
            first = D.dot(vx, vy)
            assert all(bits(D.dot(vx, vy)) == bits(first) for _ in range(19))
            x, y = x[:, 1:], y[:, 1:]
    assert_close(first, x, y)


@pytest.mark.gpu
def test_accuracy_at_2_28_elements():
    n = 2**14
    g = np.random.default_rng()
    x = g.random((n, n), dtype=np.float32) + np.float32(0.5)  # all positive: the relative error is meaningful
    y = g.random((n, n), dtype=np.float32) + np.float32(0.5)
    ref = 0.0
    for r0 in range(0, n, 1024):
        ref += float(np.dot(x[r0 : r0 + 1024].astype(np.float64).ravel(), y[r0 : r0 + 1024].astype(np.float64).ravel()))
    with gm.Matrix.from_numpy(x) as dx, gm.Matrix.from_numpy(y) as dy:
        del x, y
        got = D.dot(dx, dy)
        again = D.dot(dx, dy)
    assert bits(got) == bits(again)
    rel = abs(got - ref) / ref
    assert rel < 1e-9, rel  # float32 accumulation would sit near 1e-4 .. 1e-7 here


@pytest.mark.gpu
def test_closed_form_seed_example():
    n = 1024  # seed 003: a[i] = i, b[i] = 2 -> N (N - 1)
    with (
        gm.Matrix.from_numpy(np.arange(n, dtype=np.float32)) as a,
        gm.Matrix.from_numpy(np.full(n, 2, np.float32)) as b,
    ):
        assert D.dot(a, b) == n * (n - 1)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(1, 1), (1, 5), (33, 77), (1000, 1000)])
def test_nan_and_inf_propagate(shape):
    x, y = random(shape), random(shape) + np.float32(2.0)  # y > 0 everywhere
    where = (shape[0] // 2, shape[1] - 1)
    for value, check in [(np.nan, np.isnan), (np.inf, lambda v: v == np.inf), (-np.inf, lambda v: v == -np.inf)]:
        xx = x.copy()
        xx[where] = value
        with gm.Matrix.from_numpy(xx) as dx, gm.Matrix.from_numpy(y) as dy:
            assert check(D.dot(dx, dy)), value
            if shape[1] > 1:
                assert check(D.dot(dx[:, 1:], dy[:, 1:])), value
    if x.size > 1:  # inf + (-inf) -> nan
        xx = x.copy()
        xx.flat[0], xx.flat[-1] = np.inf, -np.inf
        with gm.Matrix.from_numpy(xx) as dx, gm.Matrix.from_numpy(y) as dy:
            assert np.isnan(D.dot(dx, dy))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(0, 0), (0, 7), (7, 0)])
def test_empty(shape):
    with gm.Matrix.empty(*shape) as x, gm.Matrix.empty(*shape) as y:
        assert D.dot(x, y) == 0.0


@pytest.mark.gpu
def test_shape_mismatch():
    with gm.Matrix.from_numpy(random((3, 4))) as x, gm.Matrix.from_numpy(random((4, 3))) as y:
        with pytest.raises(ValueError):
            D.dot(x, y)


@pytest.mark.gpu
def test_no_pool_growth_across_calls():
    x = random((513, 1027))
    with gm.Matrix.from_numpy(x) as dx:
        D.dot(dx, dx)
        before = memory.pool_used_bytes()
        for _ in range(50):
            D.dot(dx, dx)
            D.dot(dx[1:, 1:], dx[1:, 1:])
        assert memory.pool_used_bytes() == before
