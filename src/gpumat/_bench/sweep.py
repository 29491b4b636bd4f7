"""`python -m gpumat bench sweep [--dtype D] [--precision MODE]`: gpumat's `auto` against cuBLAS (through
PyTorch, same process, same inputs, same mode) over a fixed grid of the shapes applications run, by
class: squares (powers of two, 1.5x steps, odd sides), skinny M and skinny N, long K, short K,
transformer layers, odd rectangles, and few-token layers (1-128 rows of x against a weight W of 1024-16384
a side, as `x @ W` and as `x @ W.T` with W stored N x K: the layer on few tokens, where it is a read of W).

Each shape is timed two ways, both with CUDA events on PyTorch's current stream, which gpumat is given:
queued (calls back to back behind a spin kernel that holds the stream while Python queues them: the
GPU's own time) and idle (one call from an idle
GPU, what a caller waits for, the Python path included). Every variant auto chooses among is also
timed by name (queued), so each case says which plan was fastest and how far auto's pick is from it.
The JSON keeps every case and, for the dtype
and mode, the geometric mean and the minimum of the ratios (cuBLAS time / gpumat time: above 1 gpumat
is faster); benchmarks/plot_sweep.py draws it as a heat map.

A mode takes minutes (every named plan of every shape is timed), so the cases are written after each one to
sweep-part-<dtype>[-<mode>], together with the cases an earlier run of the same day left there (a shape
measured again replaces its case): a run cut short by a time limit keeps what it measured, and
`--classes C` (repeated) runs some classes into the same part. When the part holds every shape of the grid
it becomes sweep-<dtype>[-<mode>], the file the docs' tables read. `--quick` (one shape in six) writes
sweep-quick-<dtype>[-<mode>] and touches neither.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import gpumat as gm

from .._precision import TENSOR_CORE_PRECISIONS
from ..matmul import algorithms
from .common import environment, geometric_mean, print_table, result_path, write_json

SQUARES = (128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 255, 257, 1023, 1025, 4095, 4097)
SKINNY = (1, 8, 16, 32, 64, 128, 256)
WIDE = (1024, 4096, 16384)
ODD = ((1000, 3001, 777), (2999, 515, 1531), (97, 6007, 2049), (5003, 61, 4099), (333, 333, 33333), (12289, 1201, 67))
TOKENS = (1, 8, 16, 32, 64, 128)
# (N, K) of W: projections of 1024-8192 wide layers, none of them a shape of another class (the transformer
# class has 1 and 128 rows against 4h x h and h x 4h for h = 1024, 4096)
WEIGHTS = ((3072, 1024), (8192, 8192), (14336, 4096), (4096, 14336))
FEW_TOKENS, FEW_TOKENS_WT = "few tokens", "few tokens, W.T"  # the second: B a transposed view of W (N x K)


def grid() -> list[tuple[str, int, int, int]]:
    """(class, M, N, K) of every case, in a fixed order."""
    cases = [("square", n, n, n) for n in SQUARES]
    cases += [("skinny M", m, w, w) for w in WIDE for m in SKINNY]
    cases += [("skinny N", w, n, w) for w in WIDE for n in SKINNY]
    cases += [("long K", s, s, k) for s in (64, 128, 256, 512) for k in (16384, 65536)]
    cases += [("short K", s, s, k) for s in (4096, 8192) for k in (16, 64, 256)]
    cases += [("transformer", t, 4 * h, h) for t in (1, 128, 2048, 8192) for h in (1024, 4096)]
    cases += [("transformer", t, h, 4 * h) for t in (1, 128, 2048, 8192) for h in (1024, 4096)]
    cases += [("odd", m, n, k) for m, n, k in ODD]
    cases += [(cls, t, n, k) for cls in (FEW_TOKENS, FEW_TOKENS_WT) for n, k in WEIGHTS for t in TOKENS]
    return cases


SPIN_HZ = 2.0e9  # the spin kernel counts clock cycles; at most the H100's boost clock, so it never ends early


def select(shapes: list[tuple[str, int, int, int]], classes: list[str] | None) -> list[tuple[str, int, int, int]]:
    """The shapes of the named classes (all of them for None or none named), in the grid's order."""
    if not classes:
        return shapes
    wanted = [c.strip() for c in classes]
    known = list(dict.fromkeys(c for c, *_ in shapes))
    unknown = [c for c in wanted if c not in known]
    if unknown:
        raise SystemExit(f"bench sweep: no class {', '.join(map(repr, unknown))}; the classes: {', '.join(known)}")
    return [s for s in shapes if s[0] in wanted]


def _key(case: dict) -> tuple:
    return case["class"], case["M"], case["N"], case["K"]


def earlier_cases(path, dtype: str, mode: str | None) -> dict[tuple, dict]:
    """The cases a part at `path` holds for this dtype and mode, by (class, M, N, K): none if there is no
    part or it is another mode's or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if data.get("dtype") != dtype or data.get("precision") != mode:
        return {}
    return {_key(c): c for c in data.get("cases", [])}


def _summary(cases: list[dict]) -> dict:
    return {
        "geomean_queued": geometric_mean([c["ratio_queued"] for c in cases]),
        "min_queued": min(c["ratio_queued"] for c in cases),
        "geomean_idle": geometric_mean([c["ratio_idle"] for c in cases]),
        "min_idle": min(c["ratio_idle"] for c in cases),
        "geomean_auto_vs_best": geometric_mean([c["auto_vs_best"] for c in cases]),
        "min_auto_vs_best": min(c["auto_vs_best"] for c in cases),
    }


def _queued_us(torch, fn) -> float:
    """GPU microseconds a call, calls back to back with the host out of the way: a spin kernel
    (torch.cuda._sleep) holds the stream while the calls are queued behind it, so the events time the
    GPU's own work even where one call's Python path takes longer than its kernels (small products).
    Enough calls for ~2 ms of GPU work (at most 200), median of 5 samples."""
    fn()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    calls = max(1, min(200, int(2.0 / max(start.elapsed_time(stop), 1e-3))))
    queue_s = 0.0  # the longest time the host took to queue one sample's calls
    samples = []
    for _ in range(5):
        torch.cuda._sleep(int((2 * queue_s + calls * 100e-6 + 1e-3) * SPIN_HZ))
        start.record()
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        queue_s = max(queue_s, time.perf_counter() - began)
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1e3 / calls)
    return statistics.median(samples)


def _named(torch, names, auto, A, B, C, precision, stream) -> dict[str, float]:
    """Queued microseconds of every variant auto may choose from (tier 1 and its fallback, same precision
    mode as auto's plan), each at its own modelled split and, where that splits K, unsplit too: the
    data the planner's constants are fitted to, and how far auto is from the best of them. A float32
    tensor-core mode's auto weighs the exact FP32 rows too (it runs them where the model ranks them at least
    as fast): those are timed beside the mode's, each named at its own precision."""
    timed = {}
    modes, own = {auto.variant.computes(auto.problem.dtype)}, precision
    if precision in TENSOR_CORE_PRECISIONS:  # each row named at its own precision: the mode's, or exact FP32's
        modes, own = modes | {precision, "float32"}, None
    for name in names:
        if name == "auto":
            continue
        try:
            plan = gm.matmul_plan(A, B, out=C, algorithm=name, precision=own)
        except ValueError:  # not for this GPU or these operands
            continue
        mode = plan.variant.computes(plan.problem.dtype)
        if plan.variant.tier == 0 or mode not in modes:
            continue
        plans = [plan]
        if plan.splits > 1:
            plans.append(gm.matmul_plan(A, B, out=C, algorithm=name, precision=own, splits=1))
        for p in plans:
            timed[f"{name}/{p.splits}"] = _queued_us(torch, lambda p=p: gm.matmul(A, B, out=C, plan=p, stream=stream))
    # auto's own plan where no name above reaches it (a tensor-core mode on a few rows or columns runs the
    # exact FP32 matrix-vector rows, which a name at that precision refuses)
    mine = f"{auto.algorithm}/{auto.splits}"
    if mine not in timed:
        timed[mine] = _queued_us(torch, lambda: gm.matmul(A, B, out=C, plan=auto, stream=stream))
    return timed


def _idle_us(torch, fn) -> float:
    """Microseconds from an idle GPU to the end of one call (the host's path included), median of 5."""
    samples = []
    for _ in range(5):
        torch.cuda.synchronize()
        time.sleep(0.002)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(samples)


def run(args) -> dict:
    import torch  # the anchor: cuBLAS through PyTorch (CuPy has no bfloat16)

    dtype = getattr(args, "dtype", "float32")
    mode = args.precision if isinstance(getattr(args, "precision", None), str) else None
    if dtype != "float32" and mode is not None:
        raise SystemExit("bench sweep: --precision chooses among float32 modes")
    mode = mode or ("float32" if dtype == "float32" else None)
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"  # tf32x3 and float32 against FP32 cuBLAS
    tdtype = getattr(torch, dtype)
    stream = torch.cuda.current_stream()
    quick = getattr(args, "quick", False)
    classes = getattr(args, "classes", None)
    cases, rows = [], []
    shapes = select(grid(), classes)[:: 6 if quick else 1]
    tag = dtype + ("" if mode in (None, "float32") else f"-{mode}")
    part = result_path(f"sweep-part-{tag}")  # one path for the whole run, even past midnight
    kept = {} if quick else earlier_cases(part, dtype, mode)
    anchor = (
        f"cuBLAS through PyTorch {torch.__version__} torch.matmul(out=), same inputs and stream, "
        f"allow_tf32={mode == 'tf32'}"
    )
    timing = (
        "CUDA events on PyTorch's current stream; queued: back-to-back calls queued behind a spin kernel "
        "(the GPU's own time), ~2 ms a sample, median of 5; idle: one call after 2 ms of idle, median of 5"
    )

    def held() -> list[dict]:
        """This run's cases and the part's others, in the grid's order."""
        found = {**kept, **{_key(c): c for c in cases}}
        return [found[key] for key in grid() if key in found]

    def payload(these: list[dict]) -> dict:
        return {
            "dtype": dtype,
            "precision": mode,
            "environment": environment(),
            "anchor": anchor,
            "timing": timing,
            "classes": list(dict.fromkeys(c["class"] for c in these)),
            "complete": len(these) == len(grid()),
            "summary": _summary(these),
            "cases": these,
        }

    for i, (cls, m, n, k) in enumerate(shapes):
        flop = 2.0 * m * n * k
        g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
        ta = torch.rand(m, k, device="cuda", generator=g, dtype=torch.float32).mul_(2).sub_(1).to(tdtype)
        b_shape = (n, k) if cls == FEW_TOKENS_WT else (k, n)
        tb = torch.rand(b_shape, device="cuda", generator=g, dtype=torch.float32).mul_(2).sub_(1).to(tdtype)
        if cls == FEW_TOKENS_WT:
            tb = tb.t()  # x @ W.T, W row-major: both libraries read the same transposed view
        tc = torch.empty(m, n, device="cuda", dtype=tdtype)
        A, B, C = gm.from_dlpack(ta), gm.from_dlpack(tb), gm.from_dlpack(tc)

        def ours():
            return gm.matmul(A, B, out=C, precision=mode if dtype == "float32" else None, stream=stream)

        def cublas():
            return torch.matmul(ta, tb, out=tc)

        precision = mode if dtype == "float32" else None
        plan = gm.matmul_plan(A, B, out=C, precision=precision)
        case = {
            "class": cls,
            "M": m,
            "N": n,
            "K": k,
            "layout": "NT" if cls == FEW_TOKENS_WT else "NN",
            "auto": plan.algorithm,
            "splits": plan.splits,
            "gpumat_queued_us": _queued_us(torch, ours),
            "cublas_queued_us": _queued_us(torch, cublas),
            "gpumat_idle_us": _idle_us(torch, ours),
            "cublas_idle_us": _idle_us(torch, cublas),
        }
        case["ratio_queued"] = case["cublas_queued_us"] / case["gpumat_queued_us"]
        case["ratio_idle"] = case["cublas_idle_us"] / case["gpumat_idle_us"]
        case["gpumat_tflops"] = flop / case["gpumat_queued_us"] / 1e6
        case["variants"] = _named(torch, algorithms(dtype), plan, A, B, C, precision, stream)
        best = min(case["variants"], key=case["variants"].get)
        case["best"] = best
        case["auto_vs_best"] = case["variants"][best] / case["gpumat_queued_us"]
        cases.append(case)
        # a line a case as it ends, on stderr: a run cut short (a time limit) still says what it measured
        print(
            f"sweep {i + 1}/{len(shapes)}: {cls} {m}x{n}x{k} auto {plan.algorithm}/{plan.splits} "
            f"{case['gpumat_queued_us']:.1f} us, cuBLAS {case['cublas_queued_us']:.1f}, best {best} "
            f"{case['variants'][best]:.1f}",
            file=sys.stderr,
            flush=True,
        )
        rows.append(
            [
                cls,
                f"{m}x{n}x{k}",
                f"{plan.algorithm}/{plan.splits}",
                best,
                case["auto_vs_best"],
                case["gpumat_tflops"],
                case["ratio_queued"],
                case["ratio_idle"],
            ]
        )
        for x in (A, B, C):
            x.free()
        if not quick:  # what a run cut short keeps
            write_json(f"sweep-part-{tag}", payload(held()), quiet=True, path=part)
    summary = _summary(cases)
    label = dtype + ("" if mode in (None, "float32") else f" {mode}")
    print_table(
        f"matmul sweep, {label} (ratio = cuBLAS time / gpumat time; > 1: gpumat faster)",
        ["class", "M x N x K", "auto/splits", "best named", "best/auto", "TFLOP/s", "ratio queued", "ratio idle"],
        rows,
    )
    print(
        f"\nauto against the best named plan (its time / auto's): geometric mean "
        f"{summary['geomean_auto_vs_best']:.3f}, minimum {summary['min_auto_vs_best']:.3f}"
    )
    print(
        f"geometric mean {summary['geomean_queued']:.3f} queued, {summary['geomean_idle']:.3f} idle; "
        f"minimum {summary['min_queued']:.3f} queued, {summary['min_idle']:.3f} idle"
    )
    if quick:
        smoke = payload(cases)
        write_json(f"sweep-quick-{tag}", smoke)
        return smoke
    whole = payload(held())
    if not whole["complete"]:  # some classes still to run: the part stays
        print(f"\nwrote {part} ({len(whole['cases'])} of {len(grid())} shapes)")
        return whole
    write_json(f"sweep-{tag}", whole)
    part.unlink(missing_ok=True)
    return whole
