"""`python -m gpumat bench fp8 [--quick]`: FP8 products against `torch._scaled_mm` (cuBLASLt's FP8 GEMM)
in the same process, on the same storage and PyTorch's current stream (which gpumat is given).

Cases (CASES): squares of 1024 to 8192, a rectangle, an MLP shape and layers on few tokens (32 and 128
rows), x @ W.T (B the transpose of a row-major N x K W: the one layout _scaled_mm takes, and the one both
libraries read in place), e4m3 operands and a bfloat16 C with per-tensor scales (gpumat folds them into
alpha); at 4096^3 also e5m2 operands and a float32 C. _scaled_mm has no e5m2 @ e5m2: its e5m2 rows
multiply an e5m2 A by an e4m3 B (the same instruction rate), gpumat's e5m2 by e5m2.

The anchor runs twice: as `torch._scaled_mm` runs by default (use_fast_accum=False: cuBLASLt adds the
tensor cores' partial sums into float32 accumulators every few k steps) and with use_fast_accum=True (the
sums stay in the tensor cores' accumulators, as gpumat's do). `ratio` is against the default, `ratio_fast`
against fast accumulation. Accuracy: each result's largest error against a float64 product of the same
FP8 values, over |A| @ |B| at that element ("err_*").

Timing as `bench sweep` times: CUDA events on PyTorch's current stream, calls queued back to back behind a
spin kernel, and one call from an idle GPU (the Python path included). gpumat's C must repeat bit for bit
("repeat_bits"). TFLOP/s = 2 M N K / time.
"""

from __future__ import annotations

import sys

import gpumat as gm

from .common import geometric_mean, print_table, write_json
from .sweep import _idle_us, _queued_us

# (M, N, K, operands' format, C's dtype)
CASES = (
    (1024, 1024, 1024, "e4m3", "bfloat16"),
    (2048, 2048, 2048, "e4m3", "bfloat16"),
    (4096, 4096, 4096, "e4m3", "bfloat16"),
    (8192, 8192, 8192, "e4m3", "bfloat16"),
    (4096, 4096, 4096, "e5m2", "bfloat16"),
    (8192, 8192, 8192, "e5m2", "bfloat16"),
    (4096, 4096, 4096, "e4m3", "float32"),
    (8192, 8192, 2048, "e4m3", "bfloat16"),
    (4096, 14336, 4096, "e4m3", "bfloat16"),
    (32, 4096, 4096, "e4m3", "bfloat16"),
    (128, 14336, 4096, "e4m3", "bfloat16"),
)
QUICK = (CASES[1], CASES[2], CASES[9])
SCALE_A, SCALE_B = 0.5, 0.25  # per-tensor scales (powers of two: alpha = their product exactly)


def _error(torch, c, ref, scale) -> float:
    return float(((c.double() - ref).abs() / scale.clamp_min(1e-300)).max())


def _case(torch, m: int, n: int, k: int, fmt: str, out: str, stream) -> dict:
    g = torch.Generator(device="cuda").manual_seed(m + 3 * n + 7 * k + len(fmt + out))
    fp8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    out_t = getattr(torch, out)
    ta = (torch.randn(m, k, device="cuda", generator=g) * 4).to(fp8[fmt])
    w = (torch.randn(n, k, device="cuda", generator=g) * 4).to(fp8[fmt])
    w_anchor = w if fmt == "e4m3" else w.to(torch.float32).to(fp8["e4m3"])  # _scaled_mm: no e5m2 @ e5m2
    sa = torch.tensor(SCALE_A, device="cuda")
    sb = torch.tensor(SCALE_B, device="cuda")
    tc = torch.empty(m, n, device="cuda", dtype=out_t)  # _scaled_mm's result (out=, as gpumat's)
    wt = w_anchor.t()
    tg = torch.empty(m, n, device="cuda", dtype=out_t)  # gpumat's
    A, W, C = gm.from_dlpack(ta), gm.from_dlpack(w), gm.from_dlpack(tg)
    B = W.T
    alpha = SCALE_A * SCALE_B
    try:

        def ours():
            return gm.matmul(A, B, out=C, alpha=alpha, stream=stream)

        def anchor(fast=False):
            return torch._scaled_mm(ta, wt, sa, sb, out_dtype=out_t, use_fast_accum=fast, out=tc)

        case = {"M": m, "N": n, "K": k, "format": fmt, "out": out, "auto": gm.matmul_plan(A, B, out=C).algorithm}
        case["anchor_pair"] = f"{fmt} @ e4m3"
        case["gpumat_queued_us"], case["scaled_mm_queued_us"] = _queued_us(torch, ours), _queued_us(torch, anchor)
        case["scaled_mm_fast_queued_us"] = _queued_us(torch, lambda: anchor(True))
        case["gpumat_idle_us"], case["scaled_mm_idle_us"] = _idle_us(torch, ours), _idle_us(torch, anchor)
        tg.fill_(float("nan"))  # an element gpumat leaves unwritten shows
        ours()
        first = tg.clone()
        ours()
        case["repeat_bits"] = bool(torch.equal(first.view(torch.uint8), tg.view(torch.uint8)))
        case["finite"] = bool(torch.isfinite(first).all())
        a64, w64, wa64 = ta.double(), w.double(), w_anchor.double()
        ref, scale = alpha * (a64 @ w64.t()), alpha * (a64.abs() @ w64.abs().t())
        case["err_gpumat"] = _error(torch, first, ref, scale)
        ref, scale = alpha * (a64 @ wa64.t()), alpha * (a64.abs() @ wa64.abs().t())
        case["err_scaled_mm"] = _error(torch, anchor().clone(), ref, scale)
        case["err_scaled_mm_fast"] = _error(torch, anchor(True).clone(), ref, scale)
        del a64, w64, wa64, ref, scale
    finally:
        for x in (A, W, C):
            x.free()
    case["ratio"] = case["scaled_mm_queued_us"] / case["gpumat_queued_us"]
    case["ratio_fast"] = case["scaled_mm_fast_queued_us"] / case["gpumat_queued_us"]
    case["ratio_idle"] = case["scaled_mm_idle_us"] / case["gpumat_idle_us"]
    flop = 2.0 * m * n * k
    case["gpumat_tflops"] = flop / case["gpumat_queued_us"] / 1e6
    case["scaled_mm_tflops"] = flop / case["scaled_mm_queued_us"] / 1e6
    case["scaled_mm_fast_tflops"] = flop / case["scaled_mm_fast_queued_us"] / 1e6
    return case


def run(args) -> dict:
    import torch  # the anchor: torch._scaled_mm (cuBLASLt)

    stream = torch.cuda.current_stream()
    cases = QUICK if getattr(args, "quick", False) else CASES
    records, rows = [], []
    for i, (m, n, k, fmt, out) in enumerate(cases):
        case = _case(torch, m, n, k, fmt, out, stream)
        records.append(case)
        print(
            f"fp8 {i + 1}/{len(cases)}: {m}x{n}x{k} {fmt}->{out} {case['ratio']:.2f}x _scaled_mm "
            f"({case['gpumat_tflops']:.0f} against {case['scaled_mm_tflops']:.0f} TFLOP/s, fast accumulation "
            f"{case['scaled_mm_fast_tflops']:.0f}), errors {case['err_gpumat']:.1e} / {case['err_scaled_mm']:.1e}",
            file=sys.stderr,
            flush=True,
        )
        rows.append(
            [
                f"{m}x{n}x{k}",
                f"{fmt} -> {out}",
                case["auto"],
                case["gpumat_tflops"],
                case["scaled_mm_tflops"],
                case["ratio"],
                case["ratio_fast"],
                f"{case['err_gpumat']:.1e}",
                f"{case['err_scaled_mm']:.1e}",
            ]
        )
        torch.cuda.empty_cache()
    print_table(
        "FP8 x @ W.T against torch._scaled_mm (ratio = _scaled_mm time / gpumat time, queued; fast: its "
        "use_fast_accum=True)",
        ["M x N x K", "dtypes", "gpumat plan", "TFLOP/s", "_scaled_mm", "ratio", "ratio fast", "err", "err anchor"],
        rows,
    )
    payload = {
        "anchor": f"torch._scaled_mm (cuBLASLt) through PyTorch {torch.__version__}, per-tensor scales, same inputs "
        "and stream; e5m2 cases: the anchor multiplies e5m2 by e4m3 (it has no e5m2 @ e5m2)",
        "timing": "CUDA events on PyTorch's current stream; queued: calls back to back behind a spin kernel, median "
        "of 5 samples; idle: one call after 2 ms of idle, median of 5",
        "operands": "4 x standard normal rounded into FP8; B the transpose of a row-major N x K W; scales 0.5 and "
        "0.25 (gpumat: alpha = 0.125)",
        "errors": "max over C of |C - ref| / (|A| @ |B|) at that element, ref the float64 product of the FP8 values",
        "cases": records,
        "geomean": geometric_mean([c["ratio"] for c in records]),
    }
    write_json("fp8", payload)
    return payload
