"""`python -m gpumat bench bmm [--dtype D | all] [--precision MODE]`: batched matrix products, gpumat's
`auto` against torch.bmm (cuBLAS strided-batched) in the same process, on the same storage and PyTorch's
current stream (which gpumat is given), over a fixed grid of the batches applications run, by class:

- attention scores: S = Q @ K^T, Q and K of shape (B, T, d), K read through a transposed view (NT);
- attention values: O = P @ V, P of shape (B, T, T), V of shape (B, T, d);
- grouped: a few to a few hundred large matrices (mixture-of-experts layers, a batch of two 2048^3);
- tiny: a thousand to a hundred thousand matrices of 2 to 64 a side, bound by memory: their bytes over
  the time, against the device-to-device copy rate measured at the start of the run;
- layouts: a few shapes in each of NN, NT, TN and TT (A and/or B a transposed view of its storage).

A transposed operand is allocated as its transpose's storage and read by both libraries through a view
(PyTorch's `.transpose(1, 2)`, gpumat's `.T`): neither is handed a copy. Each case is checked once before
it is timed (gpumat's result, over an output first filled with NaN, against torch's within a tolerance of
the dtype and mode); a case that fails the check, or raises, is recorded with its error and no times, the
run goes on, and the command fails at the end naming it. Each case is then timed as `bench sweep` times
(CUDA events on PyTorch's current stream): queued (calls back to back behind a spin kernel, the GPU's own
time) and idle (one call from an idle GPU, the Python path included); a call whose host path alone takes
tens of milliseconds (a launch a matrix) is timed one call at a time instead (see _timed).

ratio = torch time / gpumat time (above 1 gpumat is faster). The JSON keeps every case, auto's plan for
it, and the geometric mean and the minimum of the ratios overall and per class; `--dtype all` runs
float16, bfloat16, float32, float32 at tf32 and float64 in turn, one JSON each. benchmarks/plot_bmm.py
draws them.
"""

from __future__ import annotations

import math
import statistics
import time

import gpumat as gm

from .common import copy_gbps, environment, geometric_mean, print_table, warm_clocks, write_json
from .sweep import _idle_us, _queued_us

CLASSES = ("attention scores", "attention values", "grouped", "tiny", "layouts")
LAYOUTS = ("NN", "NT", "TN", "TT")  # A then B: N as stored, T a transposed view of its storage

# attention: sequence lengths (77: a CLIP text encoder's), head sizes, and the matrices a batch (batch x
# heads) at each length: a score matrix of 4 bytes an element stays at or under 512 MiB a batch
HEAD_DIMS = (64, 128)
SCORES_T = (77, 128, 256, 512, 1024, 2048, 4096)
VALUES_T = (77, 256, 1024, 4096)
ATTENTION_BATCH = {77: 1536, 128: 1024, 256: 512, 512: 256, 1024: 128, 2048: 32, 4096: 8}
# (batch, M, N, K): experts of a mixture-of-experts layer (up and down projections), squares, odd sides
GROUPED = (
    (2, 2048, 2048, 2048),
    (16, 2048, 2048, 2048),
    (64, 1024, 1024, 1024),
    (256, 128, 128, 128),
    (128, 512, 256, 1024),
    (16, 512, 4096, 1024),
    (16, 512, 1024, 4096),
    (24, 1000, 1000, 1000),
    (33, 257, 255, 129),
)
# (batch, side): square products of tiny matrices; 65537 is past the grid's 65535 layers
TINY = ((4096, 16), (100000, 2), (10000, 4), (65537, 8), (100000, 16), (20000, 24), (10000, 32), (5000, 48), (1000, 64))
LAYOUT_SHAPES = ((32, 512, 512, 64), (64, 256, 256, 256), (16, 1024, 64, 1024))
QUICK_STEP = 4  # --quick keeps every 4th case of each class (its first among them)

# the check: max |gpumat - torch| / max |torch| over the batch. Loose on purpose (the two libraries round
# and sum in different orders; cuBLAS may reduce halves in half precision): a wrong result is off by O(1)
TOLERANCE = {"float16": 2e-2, "bfloat16": 6e-2, "float32": 1e-4, "tf32x3": 1e-4, "tf32": 2e-2, "float64": 1e-9}
# --dtype all: (dtype, float32 mode) in turn
ALL = (("float16", None), ("bfloat16", None), ("float32", "float32"), ("float32", "tf32"), ("float64", None))
# PyTorch's flags that let cuBLAS reduce halves in half precision (named in the JSON's anchor, left as they are)
REDUCED_PRECISION_FLAGS = ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction")
ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
LARGE_BYTES = 256 << 20  # after a case with more than this in its tensors, both libraries' caches go back
CHECK_ELEMENTS = 1 << 25  # the check compares this many elements at a time (bounds its temporaries)
HOST_BOUND_S = 0.05  # a call whose host path takes longer is timed one call at a time (_timed)
HOST_BOUND_SAMPLES = 3


def cases(quick: bool = False) -> list[dict]:
    """Every case of the grid in a fixed order, class by class: {"class", "batch", "M", "N", "K",
    "layout"}, layout the letters of A and B ("N" as stored, "T" a transposed view). With quick=True every
    QUICK_STEP-th case of each class, its first among them."""
    grid = []

    def add(cls, batch, m, n, k, layout="NN"):
        grid.append({"class": cls, "batch": batch, "M": m, "N": n, "K": k, "layout": layout})

    for d in HEAD_DIMS:
        for t in SCORES_T:
            add("attention scores", ATTENTION_BATCH[t], t, t, d, "NT")  # Q @ K^T
    for d in HEAD_DIMS:
        for t in VALUES_T:
            add("attention values", ATTENTION_BATCH[t], t, d, t)  # P @ V
    for batch, m, n, k in GROUPED:
        add("grouped", batch, m, n, k)
    for batch, side in TINY:
        add("tiny", batch, side, side, side)
    for layout in LAYOUTS:  # layout by layout, so that --quick's picks differ in layout
        for batch, m, n, k in LAYOUT_SHAPES:
            add("layouts", batch, m, n, k, layout)
    if not quick:
        return grid
    return [c for cls in CLASSES for c in [c for c in grid if c["class"] == cls][::QUICK_STEP]]


def label(case: dict) -> str:
    return f"{case['batch']} x {case['M']}x{case['N']}x{case['K']}"


def tensor_bytes(case: dict, itemsize: int) -> int:
    """Bytes of A, B and C of a case."""
    b, m, n, k = case["batch"], case["M"], case["N"], case["K"]
    return b * (m * k + k * n + m * n) * itemsize


def _seed(case: dict) -> int:
    b, m, n, k = case["batch"], case["M"], case["N"], case["K"]
    return (b * 7919 + m * 131 + n * 31 + k * 7 + LAYOUTS.index(case["layout"])) % (1 << 31)


def _rand(torch, shape, dtype, g):
    """Uniform in [-1, 1), drawn in float32 and rounded to dtype."""
    return torch.rand(*shape, device="cuda", generator=g, dtype=torch.float32).mul_(2).sub_(1).to(dtype)


def _mismatch(torch, got, want) -> float:
    """max |got - want| / max |want| over a batch, compared in float32 (float64 for float64) a few matrices
    at a time; infinite where got holds a NaN or an infinity (a result not written, or a wrong one)."""
    wide = torch.float64 if want.dtype == torch.float64 else torch.float32
    per = max(1, CHECK_ELEMENTS // max(1, want[0].numel()))
    err = scale = 0.0
    for i in range(0, want.shape[0], per):
        w, g = want[i : i + per].to(wide), got[i : i + per].to(wide)
        if not torch.isfinite(g).all().item():
            return math.inf
        d = (g - w).abs().amax().item()
        err, scale = max(err, d), max(scale, w.abs().amax().item())
    return err / scale if scale > 0 else err


def _timed(torch, fn) -> tuple[float, float, str]:
    """(queued, idle) microseconds of a call, and how they were taken: sweep's two timings, except for a call
    whose host path alone takes more than HOST_BOUND_S (a launch a matrix over a large batch), which would
    fill the driver's launch queue behind sweep's spin kernel, so that each sample's spin, sized by the
    last sample's queueing time, doubles: its calls timed one at a time from an idle GPU (what a caller
    waits for, both figures), median of HOST_BOUND_SAMPLES."""
    torch.cuda.synchronize()
    began = time.perf_counter()
    fn()
    host_s = time.perf_counter() - began
    torch.cuda.synchronize()
    if host_s <= HOST_BOUND_S:
        return _queued_us(torch, fn), _idle_us(torch, fn), "queued"
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(HOST_BOUND_SAMPLES):
        torch.cuda.synchronize()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) * 1e3)
    us = statistics.median(samples)
    return us, us, "host-bound"


def _plan_fields(plan) -> dict:
    """What auto's plan says of the case: the kernel, the split of K, the operands it copies first."""
    return {
        "auto": plan.algorithm,
        "splits": plan.splits,
        "copies": [x for x, copied in (("A", plan.copy_a), ("B", plan.copy_b)) if copied],
        "copy_bytes": plan.copy_bytes,
        "grid": list(plan.grid),
        "kernel_batch": plan.problem.batch,  # 1 where the batch folds into one tall product
        "modelled_us": plan.seconds * 1e6,
        "plan": str(plan),
    }


def operands(torch, case: dict, tdtype) -> tuple:
    """A case's operands, on fresh random data seeded by the case: torch's (A, B, its result, gpumat's result
    first poisoned by the caller) and gpumat's (A, B, C over the same storage, and the matrices to free). A
    transposed operand is its transpose's storage, read by both libraries through a view of it."""
    batch, m, n, k, layout = case["batch"], case["M"], case["N"], case["K"], case["layout"]
    g = torch.Generator(device="cuda").manual_seed(_seed(case))
    sa = _rand(torch, (batch, k, m) if layout[0] == "T" else (batch, m, k), tdtype, g)
    sb = _rand(torch, (batch, n, k) if layout[1] == "T" else (batch, k, n), tdtype, g)
    ta = sa.transpose(1, 2) if layout[0] == "T" else sa
    tb = sb.transpose(1, 2) if layout[1] == "T" else sb
    tc = torch.empty(batch, m, n, device="cuda", dtype=tdtype)  # torch's result
    tg = torch.empty(batch, m, n, device="cuda", dtype=tdtype)  # gpumat's
    SA, SB, C = gm.from_dlpack(sa), gm.from_dlpack(sb), gm.from_dlpack(tg)
    A = SA.T if layout[0] == "T" else SA
    B = SB.T if layout[1] == "T" else SB
    return (ta, tb, tc, tg), (A, B, C, (A, B, SA, SB, C))


def _case(torch, record: dict, dtype: str, mode: str | None, stream, gbps: float) -> None:
    """One case, its record (the case's fields) filled in as it goes (what a failure leaves shows how far it
    got): inputs made, auto's plan, gpumat's result checked against torch's, both timed."""
    case = dict(record)
    batch, m, n, k = case["batch"], case["M"], case["N"], case["K"]
    precision = mode if dtype == "float32" else None
    (ta, tb, tc, tg), (A, B, C, owned) = operands(torch, case, getattr(torch, dtype))
    try:

        def ours():
            return gm.matmul(A, B, out=C, precision=precision, stream=stream)

        def theirs():
            return torch.bmm(ta, tb, out=tc)

        record.update(_plan_fields(gm.matmul_plan(A, B, out=C, precision=precision)))
        tg.fill_(math.nan)  # an element gpumat leaves unwritten fails the check
        ours()
        theirs()
        record["mismatch"] = _mismatch(torch, tg, tc)
        record["tolerance"] = TOLERANCE[mode or dtype]
        if not record["mismatch"] <= record["tolerance"]:
            raise AssertionError(
                f"gpumat's result differs from torch.bmm's by {record['mismatch']:.3g} of its largest element "
                f"(tolerance {record['tolerance']:.3g})"
            )
        record["gpumat_queued_us"], record["gpumat_idle_us"], record["gpumat_timing"] = _timed(torch, ours)
        record["torch_queued_us"], record["torch_idle_us"], record["torch_timing"] = _timed(torch, theirs)
    finally:
        for x in owned:
            x.free()
    record["ratio"] = record["torch_queued_us"] / record["gpumat_queued_us"]
    record["ratio_idle"] = record["torch_idle_us"] / record["gpumat_idle_us"]
    flop = 2.0 * batch * m * n * k
    record["gpumat_tflops"] = flop / record["gpumat_queued_us"] / 1e6
    record["torch_tflops"] = flop / record["torch_queued_us"] / 1e6
    if case["class"] == "tiny":  # memory-bound: the bytes of A, B and C over the time, against the copy's rate
        nbytes = tensor_bytes(case, ITEMSIZE[dtype])
        record["bytes"] = nbytes
        record["gpumat_gbps"] = nbytes / record["gpumat_queued_us"] / 1e3
        record["torch_gbps"] = nbytes / record["torch_queued_us"] / 1e3
        record["roofline_fraction"] = record["gpumat_gbps"] / gbps
        record["torch_roofline_fraction"] = record["torch_gbps"] / gbps


def _summary(records: list[dict]) -> dict:
    """Geometric mean and minimum of the ratios, overall and per class (cases that failed left out)."""

    def of(rs):
        timed = [r for r in rs if "ratio" in r]
        return {
            "cases": len(timed),
            "geomean": geometric_mean([r["ratio"] for r in timed]),
            "min": min((r["ratio"] for r in timed), default=None),
            "geomean_idle": geometric_mean([r["ratio_idle"] for r in timed]),
            "min_idle": min((r["ratio_idle"] for r in timed), default=None),
        }

    summary = of(records)
    summary["failed"] = [f"{r['class']} {label(r)} {r['layout']}" for r in records if "error" in r]
    summary["classes"] = {cls: of([r for r in records if r["class"] == cls]) for cls in CLASSES}
    return summary


def _row(r: dict) -> list:
    plan = None
    if "auto" in r:
        plan = f"{r['auto']}/{r['splits']}" + (f" +copy {'&'.join(r['copies'])}" if r["copies"] else "")
    if "error" in r:
        return [r["class"], label(r), r["layout"], plan, None, None, None, None, "FAILED"]
    return [
        r["class"],
        label(r),
        r["layout"],
        plan,
        r["gpumat_tflops"],
        r["torch_tflops"],
        r.get("roofline_fraction"),
        r["ratio"],
        r["ratio_idle"],
    ]


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def run_one(torch, dtype: str, mode: str | None, quick: bool, gbps: float) -> dict:
    """The grid in one dtype (and float32 mode): printed, written as bmm-<dtype>[-<mode>] JSON, returned."""
    matmul_flags = torch.backends.cuda.matmul
    matmul_flags.allow_tf32 = mode == "tf32"  # tf32x3 and float32 against FP32 cuBLAS
    stream = torch.cuda.current_stream()
    began = time.perf_counter()
    grid = cases(quick)
    records = []
    for i, case in enumerate(grid):
        record = dict(case)
        try:
            _case(torch, record, dtype, mode, stream, gbps)
            note = f"ratio {record['ratio']:.3f} queued, {record['ratio_idle']:.3f} idle"
        except Exception as exc:  # recorded, the run goes on; the command fails at the end (run())
            record["error"] = f"{type(exc).__name__}: {exc}"
            note = f"FAILED: {record['error']}"
        records.append(record)
        print(f"  [{i + 1}/{len(grid)}] {case['class']} {label(case)} {case['layout']}: {note}", flush=True)
        if tensor_bytes(case, ITEMSIZE[dtype]) > LARGE_BYTES:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            gm.release_cached()
    summary = _summary(records)
    name = dtype + ("" if mode in (None, "float32") else f" {mode}")
    print_table(
        f"batched matmul, {name}, against torch.bmm (ratio = torch time / gpumat time; > 1: gpumat faster)",
        [
            "class",
            "batch x M x N x K",
            "layout",
            "auto/splits",
            "TFLOP/s",
            "torch TFLOP/s",
            "of copy BW",
            "ratio",
            "ratio idle",
        ],
        [_row(r) for r in records],
    )
    for cls, s in summary["classes"].items():
        print(
            f"{cls:>17}: geometric mean {_fmt(s['geomean'])} queued, {_fmt(s['geomean_idle'])} idle; "
            f"minimum {_fmt(s['min'])} queued, {_fmt(s['min_idle'])} idle ({s['cases']} cases)"
        )
    print(
        f"{'all':>17}: geometric mean {_fmt(summary['geomean'])} queued, {_fmt(summary['geomean_idle'])} idle; "
        f"minimum {_fmt(summary['min'])} queued, {_fmt(summary['min_idle'])} idle ({summary['cases']} cases)"
    )
    if summary["failed"]:
        print(f"FAILED ({len(summary['failed'])}): " + "; ".join(summary["failed"]))
    payload = {
        "dtype": dtype,
        "precision": mode,
        "environment": environment(),
        "anchor": f"torch.bmm (cuBLAS strided-batched) through PyTorch {torch.__version__}, out=, the same storage "
        f"(a transposed operand a transposed view in both), the same stream, allow_tf32={mode == 'tf32'}, "
        + ", ".join(f"{flag}={getattr(matmul_flags, flag, None)}" for flag in REDUCED_PRECISION_FLAGS),
        "timing": "CUDA events on PyTorch's current stream; queued: back-to-back calls queued behind a spin kernel "
        "(the GPU's own time), ~2 ms a sample, median of 5; idle: one call after 2 ms of idle, median of 5; a call "
        f"whose host path takes over {HOST_BOUND_S * 1e3:.0f} ms (a case's gpumat_timing or torch_timing "
        f"'host-bound'): one call at a time from an idle GPU, median of {HOST_BOUND_SAMPLES}, for both figures",
        "check": "before timing, max |gpumat - torch| / max |torch| of one call each (gpumat's output filled "
        "with NaN first) at most the case's tolerance",
        "copy_gbps": gbps,
        "wall_s": time.perf_counter() - began,
        "summary": summary,
        "cases": records,
    }
    tag = dtype + ("" if mode in (None, "float32") else f"-{mode}")
    write_json(f"bmm-{tag}", payload)
    return payload


def runs(dtype: str, precision) -> list[tuple[str, str | None]]:
    """(dtype, float32 mode) of each run the arguments ask for (SystemExit for a contradiction)."""
    mode = precision if isinstance(precision, str) else None
    if dtype == "all":
        if mode is not None:
            raise SystemExit("bench bmm: --dtype all runs float32 exact and at tf32; leave --precision out")
        return list(ALL)
    if dtype != "float32" and mode is not None:
        raise SystemExit("bench bmm: --precision chooses among float32 modes")
    return [(dtype, mode or ("float32" if dtype == "float32" else None))]


def run(args) -> dict:
    import torch  # the anchor: cuBLAS through PyTorch (CuPy has no bfloat16)

    todo = runs(getattr(args, "dtype", "float32"), getattr(args, "precision", None))
    quick = getattr(args, "quick", False)
    warm_clocks()
    gbps = copy_gbps(256 << 20)  # the memory's ceiling, for the tiny class
    print(f"device-to-device copy: {gbps:.0f} GB/s (bytes read + written)")
    payloads = {}
    for dtype, mode in todo:
        payloads[dtype + ("" if mode in (None, "float32") else f"-{mode}")] = run_one(torch, dtype, mode, quick, gbps)
    failed = [f"{tag}: {case}" for tag, p in payloads.items() for case in p["summary"]["failed"]]
    if failed:
        raise SystemExit(f"bench bmm: {len(failed)} case(s) failed (recorded without times): " + "; ".join(failed))
    return payloads[next(iter(payloads))] if len(payloads) == 1 else payloads
