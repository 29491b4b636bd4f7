"""Every common call path of gpumat, run on the CPU with the driver replaced by a stand-in that answers
at once (benchmarks/python_path.py): CI has no GPU, and this is where a Python error in a path the GPU
tests cover (batches, epilogues, transposed operands, other libraries' streams) shows before the device
run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    """A Python process over this tree's gpumat (the stand-in driver is installed by what it runs)."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_call_path_runs_through_the_stand_in_driver():
    out = _run(str(ROOT / "benchmarks" / "python_path.py"), "--calls", "5")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 20 and all(line.endswith(" us") for line in lines), out.stdout
    assert all(float(line.split()[-2]) > 0 for line in lines)


CONSISTENCY = r"""
import sys
sys.path.insert(0, sys.argv[1])
import python_path
python_path.install()
import numpy as np
import gpumat as gm
from gpumat.matmul import api

seen = []
real_launch = api.launch
def capture(p, *args, **kwargs):
    seen.append(p)
    return real_launch(p, *args, **kwargs)
api.launch = capture

rng = np.random.default_rng(int(sys.argv[2]))
dtypes = [np.float32, np.float16, np.float64]
checked = 0
for case in range(300):
    dt = dtypes[case % 3]
    m, n, k = (int(x) for x in rng.choice([1, 7, 16, 63, 64, 65, 129, 300], 3))
    batch = [None, 1, 3][case % 3 if case % 7 else 0]
    shared_b = case % 2 == 0
    a_t, b_t, out_t = (bool(rng.integers(2)) for _ in range(3))
    def make(h, w, t, bt):
        shape = (w, h) if t else (h, w)
        x = gm.Matrix.empty(shape if bt is None else (bt, *shape), dtype=dt)
        return x.T if t else x
    a = make(m, k, a_t, batch)
    b = make(k, n, b_t, None if shared_b else batch)
    out = make(m, n, out_t, batch) if case % 4 else None
    seen.clear()
    gm.matmul(a, b, out=out, alpha=0.5)  # alpha: every call takes the general path
    if not seen:
        continue
    want = gm.matmul_plan(a, b, out)
    got = seen[0]
    fields = ("variant", "splits", "k_chunk", "copy_a", "copy_b", "grid")
    assert all(getattr(got, f) == getattr(want, f) for f in fields), (case, m, n, k, batch, a_t, b_t, out_t, got, want)
    checked += 1
print(checked)
"""


def test_the_general_path_runs_the_plan_matmul_plan_shows():
    """gm.matmul's general path (batches, transposed views, a transposed out, an epilogue) keys its plan
    cache its own way; whatever it runs must be the plan gm.matmul_plan describes for the same operands."""
    for seed in (1, 2):
        out = _run("-c", CONSISTENCY, str(ROOT / "benchmarks"), str(seed))
        assert out.returncode == 0, out.stderr[-3000:]
        assert int(out.stdout.strip()) > 100  # most cases launch (K = 0 and empty results do not)


PLAIN = r"""
import sys
sys.path.insert(0, sys.argv[1])
import python_path
python_path.install()
import numpy as np
import gpumat as gm
from gpumat.matmul import api
from gpumat.runtime import kernels

launches = []
def record(name, grid, block, args, smem, stream):
    launches.append((name, tuple(grid), tuple(block), args[:2], args[3:], smem, stream))
kernels.Kernel.__call__ = lambda self, grid, block, *args, smem=0, stream=0, device=None: record(
    self.name, grid, block, args, smem, stream)
kernels.FixedLaunch.__call__ = lambda self, dev, stream, *leading: record(
    self.kernel.name, self.dims[:3], self.dims[3:6], (*leading, *self.tail), self.dims[6], stream)
fast = api._plain_product
taken = []
def noting(a, b, out, stream):
    result = fast(a, b, out, stream)
    taken.append(result is not None)
    return result
api._plain_product = noting

rng = np.random.default_rng(int(sys.argv[2]))
streams = [None, gm.Stream(), python_path.ForeignStream(), python_path.TorchLikeStream()]
checked = 0
for case in range(200):
    dt = (np.float32, np.float16, np.float64, "bfloat16")[case % 4]
    m, n, k = (int(x) for x in rng.choice([1, 7, 16, 63, 64, 65, 129, 300, 4096], 3))
    # operands as matrices of their own or as views one column in (unaligned for the copy engine), where
    # the plan may depend on alignment
    shift_a, shift_b = (int(x) for x in rng.integers(2, size=2))
    a = gm.Matrix.empty((m, k + shift_a), dtype=dt)[:, shift_a:]
    b = gm.Matrix.empty((k, n + shift_b), dtype=dt)[:, shift_b:]
    out = gm.Matrix.empty((m, n), dtype=dt) if case % 2 else None
    stream = streams[(case // 2) % 4]
    runs = []
    for how in ("full", "plain", "plain"):  # the first call plans by the full path; then the short one
        launches.clear(); taken.clear()
        api._plain_product = (lambda *args: None) if how == "full" else noting
        result = gm.matmul(a, b, out=out, stream=stream)
        names = {a.elements: "A", b.elements: "B", result.elements: "C"}
        named = [(n, g, bl, tuple(names.get(x, x) for x in ab), *more) for n, g, bl, ab, *more in launches]
        runs.append((named, taken[:], result))
    (full, _, r0), (first, t1, r1), (again, t2, r2) = runs
    if out is not None:
        assert r0 is r1 is r2 is out
    # a second call takes the short path, also where the plan depends on the operands' alignment
    assert t2 == [True] and full and len(full) == len(again), (case, m, n, k, t1, t2)
    # A, B and C by name; other device addresses (split-K scratch, aligned copies) differ call to call and
    # are compared as "address"; kernels, grids, blocks, sizes, strides, epilogue arguments, shared memory
    # and stream exactly
    bare = lambda args: tuple("address" if type(x) is int and x >= 1 << 40 else x for x in args)
    strip = lambda ls: [(name, g, bl, bare(ab), bare(rest), smem, st) for name, g, bl, ab, rest, smem, st in ls]
    assert strip(full) == strip(first) == strip(again), (case, m, n, k, full, again)
    checked += t2[0]
print(checked)
"""


def test_the_short_path_of_a_plain_product_launches_what_the_full_path_does():
    """gm.matmul's short path for the common call (two row-major 2-D matrices, a plan cached) launches
    exactly what the full path launches for the same operands, on every kind of stream: kernel, grid,
    block, sizes, strides, epilogue arguments, shared memory and stream."""
    for seed in (1, 2):
        out = _run("-c", PLAIN, str(ROOT / "benchmarks"), str(seed))
        assert out.returncode == 0, out.stderr[-3000:]
        assert int(out.stdout.strip()) == 200  # every case: the short path taken


# Each driver call costs about a microsecond from Python on the H100's host, so a call path that gains
# one gets measurably slower: these are the only ones each common call may make.
DRIVER_CALLS = {
    "dot 64x64": "cuLaunchKernel 1, cuMemcpyDtoHAsync 1, cuStreamSynchronize 1",
    "upload 64x64 (from_numpy)": "cuMemcpyHtoD 1",
    "download 64x64 (to_numpy)": "cuMemcpyDtoH 1",
    # the stream's mark, recorded after the work: what orders the frees of the operands and the result
    # after it once the stream may be gone. Which stream the handle names is known without asking the
    # driver, the same stream object having named it before (runtime.streams.foreign)
    "matmul 64^3, another library's stream": "cuEventRecord 1, cuLaunchKernel 1",
    # a PyTorch stream object keeps no weak reference (runtime.streams._life_says_nothing); one of PyTorch's
    # own streams (torch.cuda.Stream(), an odd id) is never destroyed, so its handle is settled once and its
    # mark recorded only when a free waits for it (runtime.streams.mark_now); one naming another's stream
    # (an even id: the handle) is asked of the driver each call
    "matmul 64^3, a PyTorch stream": "cuLaunchKernel 1",
    "matmul 64^3, a PyTorch object for an external stream": "cuEventRecord 1, cuLaunchKernel 1, cuStreamGetId 1",
    # a transposed float32 A is copied row-major first (one kernel): only the 16-bit wgmma rows read A
    # stored transposed in place (the H.T @ H case: one launch)
    "matmul A.T @ B": "cuLaunchKernel 2",
}


def test_each_common_call_makes_only_the_driver_calls_it_needs():
    out = _run(str(ROOT / "benchmarks" / "python_path.py"), "--driver-calls")
    assert out.returncode == 0, out.stderr[-3000:]
    made = dict(line.split("  ", 1) for line in out.stdout.splitlines())
    made = {case.strip(): calls.strip() for case, calls in made.items()}
    assert len(made) == 20, out.stdout
    for case, calls in made.items():
        assert calls == DRIVER_CALLS.get(case, "cuLaunchKernel 1"), (case, calls)
