"""The source documents' worked examples, run on the GPU and checked against numpy (`python -m gpumat demo`).

Each variant is also timed, by gpumat's own events; the demo imports no benchmark code.
"""

from __future__ import annotations

import statistics

import numpy as np

import gpumat as gm

from .matmul import algorithms as matmul_algorithms
from .matmul.engine import VARIANTS as MATMUL_VARIANTS
from .spmm import ALGORITHMS as SPMM_ALGORITHMS
from .transpose import VARIANTS as TRANSPOSE_VARIANTS
from .transpose import choose_algorithm as transpose_auto_choice

MATMUL_TOLERANCE = 1e-5
# the documents' teaching kernels and the fast exact-FP32 ones: what float32 runs without precision= (the
# matrix-vector kernels compute only C of at most 16 rows or columns)
MATMUL_FLOAT32_VARIANTS = tuple(
    name
    for name in matmul_algorithms("f32")
    if "tf32" not in name and (name == "auto" or MATMUL_VARIANTS[name].any_shape)
)
SPMM_TOLERANCE = 1e-5
TIMED_RUNS = 5


def _time_ms(run) -> float:
    """Median milliseconds of run() over TIMED_RUNS runs, each between two events on the thread's current
    stream (where the operations queue their work), after one untimed run that loads the kernel."""
    run()
    start, stop = gm.Event(), gm.Event()
    times = []
    for _ in range(TIMED_RUNS):
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


def _check(label: str, got, ref, tolerance: float, detail: str = "") -> bool:
    ref = np.asarray(ref, dtype=np.float64)
    err = float(np.linalg.norm(np.asarray(got, dtype=np.float64) - ref) / max(np.linalg.norm(ref), 1e-300))
    ok = bool(np.isfinite(err) and err <= tolerance)
    bound = f"<= {tolerance:.0e}" if tolerance else "exact"
    print(f"  {'ok  ' if ok else 'FAIL'} {label:<34} rel. error {err:.2e} ({bound}){detail}")
    return ok


def matmul_examples() -> list[bool]:
    rng = np.random.default_rng(0)
    idx = np.arange(4, dtype=np.float32)
    examples = [
        ("seed 000: 2137x1055 @ 1055x108", rng.uniform(-1, 1, (2137, 1055)), rng.uniform(-1, 1, (1055, 108))),
        ("seed 003: 4x4, a[i][j]=i, b[i][j]=j", np.repeat(idx[:, None], 4, 1), np.repeat(idx[None, :], 4, 0)),
        ("seed 004: 1024x1024 @ 1024x1024", rng.uniform(-1, 1, (1024, 1024)), rng.uniform(-1, 1, (1024, 1024))),
    ]
    results = []
    for title, a, b in examples:
        a, b = a.astype(np.float32), b.astype(np.float32)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        m, k = a.shape
        n = b.shape[1]
        with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, gm.Matrix.empty(m, n) as C:
            print(f"\nmatmul, {title} (auto runs {gm.matmul_plan(A, B, out=C).algorithm})")
            for name in MATMUL_FLOAT32_VARIANTS:
                ms = _time_ms(lambda: gm.matmul(A, B, out=C, algorithm=name))
                detail = f"  {ms:8.3f} ms  {2 * m * n * k / ms / 1e6:8.1f} GFLOP/s"
                results.append(_check(name, C.to_numpy(), ref, MATMUL_TOLERANCE, detail))
        if title.startswith("seed 003"):
            print("  C =", gm.matmul(gm.Matrix.from_numpy(a), gm.Matrix.from_numpy(b)).to_numpy().tolist())
    return results


def transpose_examples() -> list[bool]:
    results = []
    for h, w in [(1024, 1024), (37, 1000)]:  # seed 001's square case, and a non-square one
        host = np.arange(h * w, dtype=np.float32).reshape(h, w)
        print(f"\ntranspose, {h}x{w} -> {w}x{h} (auto runs {transpose_auto_choice(h, w, 0, h)})")
        with gm.Matrix.from_numpy(host) as A, gm.Matrix.empty(w, h) as B:
            for name in ("auto", *TRANSPOSE_VARIANTS):
                ms = _time_ms(lambda: gm.transpose(A, out=B, algorithm=name))
                detail = f"  {ms:8.3f} ms  {2 * A.nbytes / ms / 1e6:8.1f} GB/s"
                results.append(_check(name, B.to_numpy(), host.T, 0.0, detail))
    return results


def dot_examples() -> list[bool]:
    n = 1024  # seed 003: a[i] = i, b[i] = 2, so the sum is 2 * (0 + 1 + ... + N-1) = N (N - 1)
    print("\ndot, seed 003: N = 1024, a[i] = i, b[i] = 2, closed form N(N-1)")
    with (
        gm.Matrix.from_numpy(np.arange(n, dtype=np.float32)) as a,
        gm.Matrix.from_numpy(np.full(n, 2.0, np.float32)) as b,
    ):
        got = gm.dot(a, b)
    print(f"  computed {got:.1f}, closed form {n * (n - 1)}")
    return [_check("dot", [got], [n * (n - 1)], 0.0)]


def sparse_examples() -> list[bool]:
    """Seed 002's CSR example (3x3 CSR times 3x2 dense, as through cuSPARSE), every algorithm."""
    dense = np.array([[1, 2, 0], [3, 0, 4], [0, 5, 6]], dtype=np.float32)
    b = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.float32)
    ref = dense.astype(np.float64) @ b
    results = []
    print("\nspmm, seed 002: CSR [[1,2,0],[3,0,4],[0,5,6]] @ [[1,2],[3,4],[5,6]]")
    with (
        gm.CSRMatrix([0, 2, 4, 6], [0, 1, 0, 2, 1, 2], np.float32([1, 2, 3, 4, 5, 6]), (3, 3)) as S,
        gm.Matrix.from_numpy(b) as B,
    ):
        for name in SPMM_ALGORITHMS:
            with gm.spmm(S, B, algorithm=name) as C:
                results.append(_check(name, C.to_numpy(), ref, SPMM_TOLERANCE))
        with S @ B[:, 0:1] as y:
            results.append(_check("S @ v (SpMV)", y.to_numpy(), ref[:, :1], SPMM_TOLERANCE))
        with S @ B as C:
            print("  C =", C.to_numpy().tolist())
    return results


def run_demos() -> int:
    dev = gm.device()
    print(f"gpumat demo on {dev.name} (compute capability {dev.compute_capability[0]}.{dev.compute_capability[1]})")
    results = matmul_examples() + transpose_examples() + dot_examples() + sparse_examples()
    passed = sum(results)
    print(f"\ndemo: {passed} of {len(results)} checks passed")
    return 0 if passed == len(results) else 1
