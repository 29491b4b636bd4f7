"""Products of host arrays through GPUs that hold only tiles of them (gpumat.outofcore)."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import product_error, random

import gpumat as gm
from gpumat import memory
from gpumat import outofcore as oc
from gpumat.outofcore import pipeline
from gpumat.runtime import memops

gpu = pytest.mark.gpu
two_gpus = pytest.mark.skipif(gm.device_count() < 2, reason="needs two GPUs (runs on the two-GPU machine)")


# -------------------------------------------------------------------------------------------------
# CPU: the tile plan, and argument checks
# -------------------------------------------------------------------------------------------------
@given(
    m=st.integers(1, 50000),
    n=st.integers(1, 50000),
    k=st.integers(1, 50000),
    budget=st.integers(1 << 16, 1 << 36),
    size=st.sampled_from([2, 4, 8]),
)
def test_tile_plans_fit_their_budget(m, n, k, budget, size):
    acc = max(size, 4)
    try:
        p = oc.plan_tiles(m, n, k, size, acc, size, budget)
    except gm.OutOfMemoryError:
        assert oc.smallest_plan(m, n, k).device_bytes(k, size, acc, size) > budget * (1 - oc.SCRATCH_SHARE)
        return
    assert min(m, oc.MIN_SIDE) <= p.tm <= m and min(n, oc.MIN_SIDE) <= p.tn <= n and min(k, oc.MIN_SIDE) <= p.tk <= k
    assert p.tn * size <= oc.STAGE_CHUNK and p.tk * size <= oc.STAGE_CHUNK  # a tile row fits a staging buffer
    assert p.device_bytes(k, size, acc, size) <= budget * (1 - oc.SCRATCH_SHARE)


def test_k_stays_whole_when_it_fits_and_is_split_when_not():
    assert oc.plan_tiles(4096, 4096, 4096, 4, 4, 4, 1 << 30).tk == 4096
    q = oc.plan_tiles(32768, 32768, 32768, 4, 4, 4, 3 << 30)
    assert q.tk < 32768 and q.tm >= 4096 and q.tn >= 4096
    with pytest.raises(gm.OutOfMemoryError, match="needs at least"):
        oc.plan_tiles(10, 10, 10, 4, 4, 4, 16)


def test_the_chosen_plan_is_the_cheapest_that_fits():
    m, n, k, budget = 20000, 30000, 50000, 2 << 30
    best = oc.plan_tiles(m, n, k, 4, 4, 4, budget)
    usable = budget * (1 - oc.SCRATCH_SHARE)
    cost = oc.plan_seconds(best, m, n, k, 4, 4, 4)
    for tm in (1024, 4096, 8192, 16384):
        for tn in (1024, 4096, 8192):
            for tk in (1024, 4096, 16384):
                p = oc.TilePlan(tm, tn, tk)
                if p.device_bytes(k, 4, 4, 4) <= usable:
                    assert cost <= oc.plan_seconds(p, m, n, k, 4, 4, 4) * (1 + 1e-9)


def test_the_model_weighs_transfers_against_compute():
    # compute-bound: the plan's modeled time is within a few percent of the product alone
    m = n = k = 32768
    p = oc.plan_tiles(m, n, k, 4, 4, 4, (m * k + k * n + m * n) * 4 // 4)
    assert oc.plan_seconds(p, m, n, k, 4, 4, 4) < 1.1 * 2 * m * n * k / oc.FLOPS["f32"]
    # transfer-bound (K = 256): C dominates, and two C tiles keep its download going all the time
    q = oc.plan_tiles(16384, 16384, 256, 4, 4, 4, 256 << 20)
    assert q.c_buffers == 2 and q.tk == 256
    assert oc.plan_seconds(q, 16384, 16384, 256, 4, 4, 4) < 1.2 * 16384 * 16384 * 4 / oc.STAGED_BPS
    assert (
        oc.plan_tiles(16384, 16384, 256, 4, 4, 4, 256 << 20, pinned_in=True, pinned_out=True).tn == 16384
    )  # whole rows


@given(
    m=st.integers(1, 3000), n=st.integers(1, 3000), side=st.sampled_from([7, 64, 100, 1024]), parts=st.integers(1, 5)
)
def test_tiles_cover_c_once_and_split_evenly(m, n, side, parts):
    plan = oc.TilePlan(max(1, min(side, m)), max(1, min(side, n)), 1)
    tiles = oc.tile_order(m, n, plan)
    cells = np.zeros((m, n), np.int32)
    for i0, j0 in tiles:
        cells[i0 : i0 + plan.tm, j0 : j0 + plan.tn] += 1
    assert (cells == 1).all()
    for before, after in itertools.pairwise(tiles):  # back and forth: the next tile shares a row or a column
        assert before[0] == after[0] or before[1] == after[1]
    shares = oc.split_work(tiles, parts)
    assert [t for share in shares for t in share] == tiles
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_host_views_keep_forward_rows_and_copy_the_rest():
    big = np.arange(40 * 30, dtype=np.float32).reshape(40, 30)
    view = pipeline._host_operand(big[3:20, 5:17], "a")
    assert view.base is not None and np.shares_memory(view, big)  # rows forward: used in place
    for other in (big[::-1], big[:, ::-1], np.broadcast_to(big[0], (40, 30)), big[::2, ::3]):
        got = pipeline._host_operand(other, "a")
        assert not np.shares_memory(got, big) and np.array_equal(got, other)
        assert got.strides[0] >= got.shape[1] * got.itemsize and got.strides[1] == got.itemsize


def test_the_locked_span_covers_every_row_of_a_view():
    big = np.zeros((64, 1000), np.float32)
    view = big[10:50, 100:300]
    start, end = memory.host._host_span(view)
    first, last = view.ctypes.data, view[-1, -1:].ctypes.data + 4
    assert start <= first and last <= end and start % 4096 == 0 and end % 4096 == 0
    assert end - start < 40 * 4000 + 2 * 4096  # the rows between, not the whole parent array


def test_host_operands_are_checked_before_any_gpu_work():
    a = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="not aligned"):
        gm.matmul(a, np.ones((5, 2), np.float32))
    with pytest.raises(TypeError, match="float32 and b is float64"):
        gm.matmul(a, np.ones((4, 2), np.float64))
    with pytest.raises(ValueError, match="streams"):
        gm.matmul(a, np.ones((4, 2), np.float32), stream=0)
    with pytest.raises(TypeError):
        gm.matmul(a, np.ones((4, 2), np.complex64))


class _FakeRegistry:
    """Stands in for cuMemHostRegister/Unregister: refuses a page locked twice, as the driver does."""

    def __init__(self, refuse=()):
        self.locked: dict[int, int] = {}
        self.refuse = set(refuse)

    def register(self, start, size, flags):
        if start in self.refuse or any(s < start + size and start < e for s, e in self.locked.items()):
            return (1,)
        self.locked[start] = start + size
        return (0,)

    def unregister(self, start):
        return (0,) if self.locked.pop(start, None) is not None else (1,)


@pytest.fixture
def fake_registry(monkeypatch):
    fake = _FakeRegistry()
    monkeypatch.setattr(memops.driver, "cuMemHostRegister", fake.register)
    monkeypatch.setattr(memops.driver, "cuMemHostUnregister", fake.unregister)
    return fake


def test_arrays_sharing_a_page_are_locked_as_one_range(fake_registry):
    buf = np.zeros(4 * 4096, np.uint8)  # room for three pages after the first page boundary
    base = -buf.ctypes.data % 4096  # page-aligned offsets inside buf
    x = buf[base : base + 1000].view(np.float32).reshape(10, 25)
    y = buf[base + 2000 : base + 6000].view(np.float32).reshape(10, 100)  # shares x's page, runs into the next
    z = buf[base + 8192 : base + 8292].view(np.float32).reshape(5, 5)  # a page of its own
    locked, ranges = memory.lock_host([x, y, z])
    assert locked == [True, True, True] and len(ranges) == 2
    assert sorted(fake_registry.locked.items()) == [
        (x.ctypes.data, x.ctypes.data + 8192),
        (z.ctypes.data, z.ctypes.data + 4096),
    ]
    assert not memory.is_pinned(y)  # locked for a call, so not pinned memory a later call can rely on
    # a second call over the same pages locks nothing and leaves the first call's ranges alone
    assert memory.lock_host([y]) == ([False], [])
    memory.unlock_host(ranges)
    assert fake_registry.locked == {} and memory.host._HOST_LOCKS == {}


def test_a_refused_range_leaves_its_arrays_pageable(fake_registry):
    buf = np.zeros(3 * 4096, np.uint8)
    base = -buf.ctypes.data % 4096
    x, y = buf[base : base + 400].reshape(4, 100), buf[base + 4096 : base + 4496].reshape(4, 100)
    fake_registry.refuse.add(x.ctypes.data)
    locked, ranges = memory.lock_host([x, y])
    assert locked == [False, True] and ranges == [y.ctypes.data]
    memory.unlock_host(ranges)
    assert fake_registry.locked == {}


# -------------------------------------------------------------------------------------------------
# GPU
# -------------------------------------------------------------------------------------------------
TOL = {np.float32: 1e-5, np.float64: 1e-13, np.float16: 2 * 2.0**-11}


@gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@settings(max_examples=8)  # each example runs a whole tiled product through staged copies
@given(
    m=st.sampled_from([1, 7, 97, 300, 1000]),
    n=st.sampled_from([1, 13, 128, 257, 700]),
    k=st.sampled_from([1, 31, 256, 1025, 5000]),
)
def test_results_match_float64_under_small_memory_limits(dtype, m, n, k):
    a = random((m, k)).astype(dtype)
    b = random((k, n)).astype(dtype)
    limit = max(1 << 20, (m * k + k * n + m * n) * 4 // 6)  # under what the operands need, once they are big
    got = gm.matmul(a, b, memory_limit=limit, devices=[0])
    assert got.dtype == dtype and got.shape == (m, n)
    assert product_error(got.astype(np.float64), a.astype(np.float64), b.astype(np.float64), dtype) < TOL[dtype]
    again = gm.matmul(a, b, memory_limit=limit, devices=[0])
    assert again.tobytes() == got.tobytes()  # deterministic


@gpu
def test_out_and_the_gpumat_memory_limit():
    a, b = random((600, 3000)), random((3000, 500))
    out = np.full((600, 500), np.nan, np.float32)
    gm.release_cached()
    base = gm.memory_info()["used"]
    gm.set_memory_limit(base + (2 << 20))  # 2 MiB: a few 128-wide tiles at a time
    try:
        assert gm.matmul(a, b, out=out) is out
    finally:
        gm.set_memory_limit(None)
    assert product_error(out, a, b) < 1e-5
    assert gm.memory_info()["used"] == base


@gpu
@pytest.mark.parametrize("pinned", ["a", "b", "out", "all"])
def test_pinned_host_arrays_are_copied_directly(pinned):
    """Pinned operands skip the staging buffers and a pinned out takes its tiles by queued copies."""
    m, k, n = 900, 1300, 1100

    def host(shape, name):
        x = gm.pinned_empty(shape, np.float32) if pinned in (name, "all") else np.empty(shape, np.float32)
        x[...] = random(shape) if name != "out" else np.nan
        return x

    a, b, out = host((m, k), "a"), host((k, n), "b"), host((m, n), "out")
    report = {}
    assert oc.matmul_host(a, b, out=out, memory_limit=3 << 20, devices=[0], register=False, report=report) is out
    assert report["pinned"] == tuple(pinned in (name, "all") for name in ("a", "b", "out"))
    assert product_error(out, a, b) < 1e-5
    again = host((m, n), "out")  # pinned or not, as out: the same call gives the same bits
    oc.matmul_host(a, b, out=again, memory_limit=3 << 20, devices=[0], register=False)
    assert again.tobytes() == out.tobytes()


@gpu
def test_registered_host_arrays_are_released_after_the_call():
    a, b = random((700, 1900)), random((1900, 650))
    out = np.full((700, 650), np.nan, np.float32)
    report = {}
    assert oc.matmul_host(a, b, out=out, memory_limit=4 << 20, devices=[0], register=True, report=report) is out
    assert report["registered"] == 3 and report["pinned"] == (True, True, True)
    assert product_error(out, a, b) < 1e-5
    assert not any(memory.is_pinned(x) for x in (a, b, out))  # page-locked for the call only
    assert oc.matmul_host(a, b, memory_limit=4 << 20, devices=[0], register=True).tobytes() == out.tobytes()


@gpu
def test_registered_views_and_a_split_k_with_edge_tiles():
    big_a, big_b = random((310, 2700)), random((2600, 450))
    a, b = big_a[7:300, 3:2503], big_b[50:2550, 11:444]  # rows forward with a longer stride: locked in place
    out = np.full((293, 433), np.nan, np.float32)
    report = {}
    oc.matmul_host(a, b, out=out, memory_limit=1 << 20, devices=[0], register=True, report=report)
    plan = report["plan"]
    assert isinstance(plan, oc.TilePlan)
    assert plan.tk < 2500 and (293 % plan.tm or 433 % plan.tn)  # K split, and tiles cut at an edge
    assert product_error(out, a, b) < 1e-5
    assert not any(memory.is_pinned(x) for x in (big_a, big_b, out))
    rev = oc.matmul_host(a[::-1], b, memory_limit=1 << 20, devices=[0], register=True)  # copied: rows go back
    assert product_error(rev, a[::-1], b) < 1e-5


@gpu
def test_a_failure_mid_product_leaves_nothing_behind(monkeypatch):
    a, b = random((700, 900)), random((900, 800))
    gm.release_cached()
    base = gm.memory_info()["used"]
    calls = []
    real = pipeline._product  # (a, b, out, mode, stream): one tile product

    def failing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise gm.OutOfMemoryError("injected", "test")
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "_product", failing)
    with pytest.raises(gm.OutOfMemoryError, match="injected"):
        gm.matmul(a, b, memory_limit=1 << 20, devices=[0])
    monkeypatch.undo()
    assert gm.memory_info()["used"] == base  # every tile buffer freed, and no worker thread left running:
    assert not [t for t in threading.enumerate() if t.name.startswith("gpumat-outofcore")]
    assert product_error(gm.matmul(a, b, memory_limit=1 << 20), a, b) < 1e-5  # and the next call works
    with pytest.raises(gm.OutOfMemoryError, match="needs at least"):
        gm.matmul(a, b, memory_limit=1024)  # not even the smallest tiles


@gpu
@two_gpus
def test_every_gpu_takes_a_share():
    a, b = random((1500, 2000)), random((2000, 1700))
    got = gm.matmul(a, b, memory_limit=4 << 20, devices=[0, 1])
    assert product_error(got, a, b) < 1e-5
    assert gm.matmul(a, b, memory_limit=4 << 20, devices=[1, 0]).tobytes() == got.tobytes()


@pytest.mark.parametrize("m,n,side,parts", [(32768, 32768, 12288, 2), (10000, 3000, 4096, 3), (5000, 7000, 3000, 4)])
def test_work_is_split_by_area_not_by_tile_count(m, n, side, parts):
    plan = oc.TilePlan(side, side, 1)
    tiles = oc.tile_order(m, n, plan)
    areas = dict(zip(tiles, oc.tile_areas(m, n, plan, tiles), strict=True))
    shares = [sum(areas[t] for t in share) for share in oc.split_work(tiles, parts, list(areas.values()))]
    assert sum(shares) == m * n
    # each cut is within half a tile of an even share, so no GPU gets more than a tile over its share
    assert max(shares) - m * n / parts <= max(areas.values())
    count_split = [sum(areas[t] for t in share) for share in oc.split_work(tiles, parts)]
    assert max(shares) <= max(count_split)  # never worse than cutting by tile count


@pytest.mark.parametrize(
    "bad, error", [(-1, ValueError), (True, TypeError), (float("inf"), TypeError), ("1", TypeError)]
)
def test_memory_limit_arguments_are_checked_first(bad, error):
    a = np.ones((4, 4), np.float32)
    with pytest.raises(error, match="memory_limit"):
        gm.matmul(a, a, memory_limit=bad)
