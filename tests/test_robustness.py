"""The ways users break a GPU library: finalizers, frees racing operations, huge sizes, memory policy."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from support import FAKE_DEVICE, fake_matrix, random

import gpumat as gm
from gpumat import memory
from gpumat.matmul.engine import MatmulPlan, Problem, Target, aligned
from gpumat.matmul.engine import plan as plan_problem

gpu = pytest.mark.gpu


# -------------------------------------------------------------------------------------------------
# CPU: sizes the launch path or the driver cannot take are refused with the limit named
# -------------------------------------------------------------------------------------------------
def test_matmul_dimensions_past_int32_are_refused_with_the_limit():
    big = 2**31
    with pytest.raises(ValueError, match=r"2\^31 - 1"):
        gm.matmul(fake_matrix(big, 1), fake_matrix(1, 1, ptr=0x7F8000000000))
    with pytest.raises(ValueError, match=r"2\^31 - 1"):
        gm.matmul(fake_matrix(1, big), fake_matrix(big, 1, ptr=0x7F8000000000))


def test_sizes_over_what_a_gpu_allocation_can_ask_for():
    with pytest.raises(ValueError, match=r"2\^63 - 1"):
        memory.check_size(2**64, FAKE_DEVICE, "a matrix")
    with pytest.raises(gm.OutOfMemoryError, match="more than GPU 0 has"):
        memory.check_size(FAKE_DEVICE.total_memory + 1, FAKE_DEVICE, "a matrix")
    memory.check_size(FAKE_DEVICE.total_memory, FAKE_DEVICE, "a matrix")  # possible: the driver decides


def test_memory_limit_arguments():
    for bad in (-1, 1.5, "1G", True):
        with pytest.raises(ValueError):
            gm.set_memory_limit(bad)
        with pytest.raises(ValueError):
            gm.set_cache_limit(bad)


# -------------------------------------------------------------------------------------------------
# GPU
# -------------------------------------------------------------------------------------------------
@gpu
@pytest.mark.parametrize("shape", [(2**40, 2**40), (2**31, 2**31), (2**20, 2**20)])
def test_impossible_sizes_raise_gpumats_own_errors(shape):
    with pytest.raises((ValueError, gm.OutOfMemoryError)) as info:
        gm.Matrix.empty(*shape)
    assert not isinstance(info.value, OverflowError)
    with pytest.raises((ValueError, gm.OutOfMemoryError)):
        gm.Matrix.zeros(*shape)
    with gm.Matrix.from_numpy(np.ones((3, 3), np.float32)) as m:  # still working
        assert (m.to_numpy() == 1).all()


@gpu
def test_finalizers_never_wait_for_a_lock_another_thread_holds():
    """A Matrix collected while another thread holds the device lock: collection must not block."""
    dev = gm.device()
    gc.collect()
    gc.disable()  # the collector must run only where the test says (allocations would trigger it)
    try:
        for _ in range(50):  # reference cycles: only the cycle collector frees these
            box = [gm.Matrix.empty(64, 64)]
            box.append(box)
        del box
    finally:
        gc.enable()
    held, release = threading.Event(), threading.Event()

    def holder():
        with dev.lock:
            held.set()
            release.wait(30)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(10)
    try:
        done = threading.Event()
        c = threading.Thread(target=lambda: (gc.collect(), done.set()))
        c.start()
        assert done.wait(20), "collecting a Matrix blocked on the device lock"
        c.join()
        assert len(dev.memory.pending) >= 50  # the finalizers queued their blocks
    finally:
        release.set()
        t.join()
    # the queued blocks are released by the next allocation
    with gm.Matrix.empty(64, 64):
        assert not dev.memory.pending


@gpu
def test_collector_inside_allocation_does_not_deadlock():
    """Cycles collected while the allocator runs (gc threshold 1): the process finishes, memory returns."""
    code = textwrap.dedent("""
        import gc, numpy as np, gpumat as gm
        gm.release_cached()
        start = gm.memory_info()["used"]
        gc.set_threshold(1, 1, 1)
        for i in range(3000):
            m = gm.Matrix.empty(16, 16 + i % 7)
            cycle = [m]
            cycle.append(cycle)
            if i % 5 == 0:
                gm.Matrix.from_numpy(np.ones((4, 4), np.float32)).free()
        del m, cycle
        gc.set_threshold(700, 10, 10)
        gc.collect()
        gm.Matrix.empty(1, 1).free()  # drains what the finalizers queued
        assert gm.memory_info()["used"] == start, gm.memory_info()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-2000:]


@gpu
@pytest.mark.parametrize("op", ["to_numpy", "matmul", "dot", "transpose"])
def test_free_racing_an_operation_never_returns_another_matrixs_data(op):
    """One thread runs an operation on A while another frees A and fills new matrices of A's size with
    other values: every result is A's own or a FreedMatrixError, never the newcomers' data."""
    n = 256
    ones = np.ones((n, n), np.float32)
    wrong = 0
    for _ in range(60):
        a = gm.Matrix.from_numpy(ones)
        b = gm.Matrix.from_numpy(ones) if op in ("matmul", "dot") else None
        results, start = [], threading.Event()

        def user():
            start.wait()
            for _ in range(3):
                try:
                    if op == "to_numpy":
                        results.append(a.to_numpy())
                    elif op == "matmul":
                        results.append((gm.matmul(a, b)).to_numpy() / n)
                    elif op == "dot":
                        results.append(np.full((1, 1), gm.dot(a, b) / (n * n)))
                    else:
                        results.append(gm.transpose(a).to_numpy())
                except gm.FreedMatrixError:
                    results.append(None)

        t = threading.Thread(target=user)
        t.start()
        start.set()
        a.free()
        newcomers = [gm.Matrix.from_numpy(np.full((n, n), 7.0, np.float32)) for _ in range(3)]
        t.join()
        for r in results:
            if r is not None and not (r == 1.0).all():
                wrong += 1
        for m in newcomers:
            m.free()
        if b is not None:
            b.free()
    assert wrong == 0


@gpu
@pytest.mark.whole_gpu
def test_memory_goes_back_after_running_out():
    """Run the GPU out of memory, free everything: the pool keeps at most its cache limit, and another
    process can allocate on the GPU while this one is still alive."""
    code = textwrap.dedent("""
        import subprocess, sys, numpy as np, gpumat as gm
        before = gm.memory_info()["gpu_free"]
        held = []
        try:
            while True:
                held.append(gm.Matrix.empty(1 << 14, 1 << 14))   # 1 GiB each
        except gm.OutOfMemoryError:
            pass
        assert len(held) > 4
        for m in held:
            m.free()
        gm.synchronize()
        info = gm.memory_info()
        assert info["used"] == 0, info
        assert info["gpu_free"] >= before - info["cache_limit"] - (256 << 20), (before, info)
        other = subprocess.run([sys.executable, "-c",
            "import gpumat as gm; m = gm.Matrix.empty(1 << 15, 1 << 15); m.free(); print('other ok')"],
            capture_output=True, text=True, timeout=120)
        assert "other ok" in other.stdout, other.stderr
        # and this process keeps working (the result freed explicitly: under compute-sanitizer, Python frames of
        # the call outlive it, held from outside Python's reach, and with them the Matrix objects they name)
        with gm.Matrix.from_numpy(np.ones((8, 8), np.float32)) as m, gm.matmul(m, m) as product:
            assert (product.to_numpy() == 8).all()
        gm.release_cached()
        assert gm.memory_info()["cached"] == 0, gm.memory_info()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]


@gpu
def test_memory_info_and_limit():
    gm.release_cached()
    gm.reset_peak()
    base = gm.memory_info()
    m = gm.Matrix.empty(1024, 1024)
    info = gm.memory_info()
    assert info["used"] == base["used"] + 4 * 2**20 and info["peak"] >= info["used"]
    m.free()
    assert gm.memory_info()["used"] == base["used"]
    gm.set_memory_limit(base["used"] + 6 * 2**20)
    try:
        keep = gm.Matrix.empty(1024, 1024)
        with pytest.raises(gm.OutOfMemoryError, match="memory limit"):
            gm.Matrix.empty(2048, 1024)
        with pytest.raises(gm.OutOfMemoryError, match="memory limit"):
            gm.matmul(keep, keep)  # the result would pass the limit too
        keep.free()
        with gm.Matrix.empty(1536, 1024):  # exactly the limit
            pass
    finally:
        gm.set_memory_limit(None)
    with gm.Matrix.empty(4096, 1024):
        pass


@gpu
def test_auto_plans_for_the_gpu_it_runs_on():
    dev = gm.device()
    for m, n, k in [(4096, 4096, 4096), (2137, 108, 1055), (256, 256, 65536), (64, 64, 64)]:
        with gm.Matrix.empty(m, k) as A, gm.Matrix.empty(k, n) as B:
            p: MatmulPlan = gm.matmul_plan(A, B)
            ok = [aligned(x.elements, x.stride, x.itemsize) for x in (A, B)]
        assert p.target == Target.of(dev) and (p.target.arch, p.target.sm_count) == (dev.arch, dev.sm_count)
        assert p.target.max_smem == dev.max_smem_optin
        assert p == plan_problem(Problem(m, n, k, "f32", "f32", "float32", *ok), Target.of(dev))
        assert p.kernel is p.variant.kernels[("f32", "f32")] and p.smem <= dev.max_smem_optin
        # the SGEMM entry points (matmul_sgemm_128x128, ...), or a small product's teaching tile (matmul_tiled16x64_f32)
        names = (f"matmul_{p.algorithm.replace('sgemm', 'sgemm_')}", f"matmul_{p.algorithm}_f32")
        assert p.kernel.name in names and (p.algorithm != "tiled16x64" or m == 64), p


@gpu
def test_eight_threads_share_one_gpu():
    a, b = random((200, 300)), random((300, 100))
    ref = a.astype(np.float64) @ b
    errors = []

    def work():
        try:
            for _ in range(20):
                with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, gm.matmul(A, B) as C:
                    got = C.to_numpy()
                    if np.abs(got - ref).max() > 1e-3:
                        errors.append("wrong result")
        except Exception as exc:  # report, don't hang
            errors.append(repr(exc))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors


def test_host_matmul_refuses_an_out_that_overlaps_an_input():
    """Out of core, C's tiles are written while later tiles still read A and B (issue 24 item 4)."""
    a = np.ones((64, 64), np.float32)
    with pytest.raises(ValueError, match="out overlaps a"):
        gm.matmul(a, np.ones((64, 64), np.float32), out=a)
    b = np.ones((64, 64), np.float32)
    with pytest.raises(ValueError, match="out overlaps b"):
        gm.matmul(np.ones((64, 64), np.float32), b, out=b)


def test_a_read_only_import_is_never_written():
    """A producer's read-only memory (DLPack 1.0's READ_ONLY flag, CAI's data[1]) is refused as out by every
    operation that writes one (issue 24 item 5)."""
    ro = fake_matrix(4, 4, ptr=0x7F3000000000)
    ro._buffer.readonly = True
    a, b = fake_matrix(4, 4), fake_matrix(4, 4, ptr=0x7F1000000000)
    with pytest.raises(ValueError, match="read-only"):
        gm.matmul(a, b, out=ro)
    with pytest.raises(ValueError, match="read-only"):
        gm.transpose(a, out=ro)
