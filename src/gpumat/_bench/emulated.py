"""`python -m gpumat bench emulated [--quick]`: the products emulated on the INT8 tensor cores (Ozaki scheme II,
gpumat.matmul.ozaki), float64 at `precision="fp64_int8"` and float32 at `precision="fp32_int8"`, against
cuBLAS in the same dtype through PyTorch (DGEMM; SGEMM with TF32 off), in the same process, on the same
storage and PyTorch's current stream (which gpumat is given), with their accuracy.

Cases (CASES): squares of 1024 to 8192 and a few rectangles on standard normal operands, and a square of
4096 whose elements are standard normal times 2^e, e uniform in [-S, S] elementwise (S: SPREAD, 30 for
float64 and 10 for float32): the emulation keeps each line's elements to one scale, so its accuracy depends
on how many binades a line spans.

Timing as `bench sweep` times: CUDA events on PyTorch's current stream, calls queued back to back behind a
spin kernel (the GPU's own time) and one call from an idle GPU (the Python path included). Accuracy: ROWS
rows of C against the same rows of the product on the host (float64 operands: in numpy's long double;
float32 operands: in float64, each product exact), the largest |C - ref| / (|A| |B|) of gpumat's result and
of cuBLAS's; and whether gpumat's bits repeat on a second call.

ratio = cuBLAS time / gpumat time, queued (above 1 gpumat is faster). One JSON for both modes.
"""

from __future__ import annotations

import sys

import numpy as np

import gpumat as gm

from .common import geometric_mean, print_table, write_json
from .sweep import _idle_us, _queued_us

MODES = (("float64", "fp64_int8"), ("float32", "fp32_int8"))
# (M, N, K, operands): "normal", or "spread" (elements times 2^[-SPREAD, SPREAD])
CASES = (
    (1024, 1024, 1024, "normal"),
    (2048, 2048, 2048, "normal"),
    (4096, 4096, 4096, "normal"),
    (8192, 8192, 8192, "normal"),
    (4096, 4096, 1024, "normal"),
    (1024, 4096, 4096, "normal"),
    (8192, 8192, 2048, "normal"),
    (4096, 4096, 4096, "spread"),
)
QUICK = (CASES[0], CASES[1], CASES[-1])
SPREAD = {"float64": 30, "float32": 10}
ROWS = 8


def _operands(torch, dtype: str, m: int, n: int, k: int, kind: str, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    ta = torch.randn(m, k, device="cuda", generator=g, dtype=torch.float64)
    tb = torch.randn(k, n, device="cuda", generator=g, dtype=torch.float64)
    if kind == "spread":
        s = SPREAD[dtype]
        for t in (ta, tb):
            e = torch.randint(-s, s + 1, t.shape, device="cuda", generator=g, dtype=torch.int32)
            t.mul_(torch.pow(2.0, e.to(torch.float64)))
    return ta.to(getattr(torch, dtype)), tb.to(getattr(torch, dtype))


def _errors(a: np.ndarray, b: np.ndarray, rows: np.ndarray, results: dict[str, np.ndarray]) -> dict[str, float]:
    """The largest |C - ref| / (|A| |B|) over the sampled rows, for each result (its rows only)."""
    wide = np.longdouble if a.dtype == np.float64 else np.float64
    ar, bw = a[rows].astype(wide), b.astype(wide)
    ref, scale = ar @ bw, np.abs(ar) @ np.abs(bw)
    scale[scale == 0] = 1
    return {name: float(np.max(np.abs(c.astype(wide) - ref) / scale)) for name, c in results.items()}


def _case(torch, dtype: str, mode: str, m: int, n: int, k: int, kind: str, stream) -> dict:
    ta, tb = _operands(torch, dtype, m, n, k, kind, seed=m * 7 + n * 3 + k + (1 if kind == "spread" else 0))
    tc = torch.empty(m, n, device="cuda", dtype=ta.dtype)  # cuBLAS's result
    tg = torch.empty(m, n, device="cuda", dtype=ta.dtype)  # gpumat's
    A, B, C = gm.from_dlpack(ta), gm.from_dlpack(tb), gm.from_dlpack(tg)
    try:

        def ours():
            return gm.matmul(A, B, out=C, precision=mode, stream=stream)

        def cublas():
            return torch.matmul(ta, tb, out=tc)

        case = {"M": m, "N": n, "K": k, "operands": kind, "auto": gm.matmul_plan(A, B, out=C, precision=mode).algorithm}
        case["gpumat_queued_us"], case["cublas_queued_us"] = _queued_us(torch, ours), _queued_us(torch, cublas)
        case["gpumat_idle_us"], case["cublas_idle_us"] = _idle_us(torch, ours), _idle_us(torch, cublas)
        rows = np.random.default_rng(m + n + k).choice(m, min(ROWS, m), replace=False)
        index = torch.from_numpy(rows).cuda()
        tg.fill_(float("nan"))  # an element gpumat leaves unwritten shows as a NaN error
        ours()
        first = tg[index].cpu().numpy()
        ours()
        case["repeat_bits"] = bool(first.tobytes() == tg[index].cpu().numpy().tobytes())
        cublas()
        errors = _errors(ta.cpu().numpy(), tb.cpu().numpy(), rows, {"gpumat": first, "cublas": tc[index].cpu().numpy()})
    finally:
        for x in (A, B, C):
            x.free()
    case["gpumat_error"], case["cublas_error"] = errors["gpumat"], errors["cublas"]
    case["ratio"] = case["cublas_queued_us"] / case["gpumat_queued_us"]
    case["ratio_idle"] = case["cublas_idle_us"] / case["gpumat_idle_us"]
    case["gpumat_tflops"] = 2.0 * m * n * k / case["gpumat_queued_us"] / 1e6
    return case


def run(args) -> dict:
    import torch  # the anchor: cuBLAS through PyTorch

    torch.backends.cuda.matmul.allow_tf32 = False  # float32 against exact FP32 SGEMM
    stream = torch.cuda.current_stream()
    cases = QUICK if getattr(args, "quick", False) else CASES
    modes, rows = {}, []
    for dtype, mode in MODES:
        records = []
        for i, (m, n, k, kind) in enumerate(cases):
            case = _case(torch, dtype, mode, m, n, k, kind, stream)
            records.append(case)
            print(
                f"emulated {mode} {i + 1}/{len(cases)}: {m}x{n}x{k} {kind} {case['ratio']:.2f}x cuBLAS, error "
                f"{case['gpumat_error']:.2g} (cuBLAS {case['cublas_error']:.2g})",
                file=sys.stderr,
                flush=True,
            )
            rows.append([mode, f"{m}x{n}x{k}", kind, case["ratio"], case["gpumat_error"], case["cublas_error"]])
            torch.cuda.empty_cache()
        normal = [c["ratio"] for c in records if c["operands"] == "normal"]
        modes[mode] = {"dtype": dtype, "cases": records, "geomean_normal": geometric_mean(normal)}
    print_table(
        "emulated precision modes against cuBLAS (ratio = cuBLAS time / gpumat time, queued)",
        ["mode", "M x N x K", "operands", "ratio", "error", "cuBLAS error"],
        rows,
    )
    payload = {
        "anchor": f"cuBLAS through PyTorch {torch.__version__} torch.matmul(out=) in the operands' dtype (float32: "
        "allow_tf32=False), same inputs and stream",
        "timing": "CUDA events on PyTorch's current stream; queued: calls back to back behind a spin kernel, median "
        "of 5 samples; idle: one call after 2 ms of idle, median of 5",
        "accuracy": f"{ROWS} rows of C against the host product of those rows (float64 operands in long double, "
        "float32 in float64): max |C - ref| / (|A| |B|)",
        "operands": {
            "normal": "standard normal",
            "spread": {d: f"standard normal times 2^[-{s}, {s}]" for d, s in SPREAD.items()},
        },  # fmt: skip
        "modes": modes,
    }
    write_json("emulated", payload)
    return payload
