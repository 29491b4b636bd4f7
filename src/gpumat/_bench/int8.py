"""`python -m gpumat bench int8 [--quick]`: int8 @ int8 -> int32 against `torch._int_mm` (cuBLASLt's INT8
GEMM) in the same process, on the same storage and PyTorch's current stream (which gpumat is given).

Cases (CASES): squares of 1024 to 8192, rectangles, and layers on few tokens (32 and 128 rows: _int_mm
takes at least 17), each with B given transposed (x @ W.T for a row-major N x K W: the layout both
libraries read in place; torch._int_mm's fast path) and, for the squares, row-major (gpumat transposes
it into scratch first; _int_mm is given the same tensor). The dequantising cases (out "bfloat16") write
the sums times a per-tensor scale into a bfloat16 C: gpumat in one call (alpha), PyTorch as its users
write it, `(torch._int_mm(a, b) * scale).to(torch.bfloat16)` (three kernels); the same float32 operations
either way, so the same bits.

Timing as `bench sweep` times: CUDA events on PyTorch's current stream, calls queued back to back behind a
spin kernel (the GPU's own time) and one call from an idle GPU (the Python path included). Both results
are exact integers, so gpumat's C must equal _int_mm's bit for bit ("equal"), and repeat ("repeat_bits").

ratio = _int_mm time / gpumat time, queued (above 1 gpumat is faster); TOPS = 2 M N K / time.
"""

from __future__ import annotations

import sys

import gpumat as gm

from .common import geometric_mean, print_table, write_json
from .sweep import _idle_us, _queued_us

# (M, N, K, B given transposed, C's dtype)
CASES = (
    (1024, 1024, 1024, True, "int32"),
    (2048, 2048, 2048, True, "int32"),
    (4096, 4096, 4096, True, "int32"),
    (8192, 8192, 8192, True, "int32"),
    (4096, 4096, 4096, False, "int32"),
    (8192, 8192, 8192, False, "int32"),
    (8192, 8192, 2048, True, "int32"),
    (4096, 14336, 4096, True, "int32"),
    (32, 4096, 4096, True, "int32"),
    (128, 14336, 4096, True, "int32"),
    (4096, 4096, 4096, True, "bfloat16"),
    (32, 4096, 4096, True, "bfloat16"),
)
QUICK = (CASES[1], CASES[2], CASES[8])
SCALE = 2.0**-12  # the dequantising cases' per-tensor scale


def _case(torch, m: int, n: int, k: int, b_trans: bool, out: str, stream) -> dict:
    g = torch.Generator(device="cuda").manual_seed(m + 3 * n + 7 * k + b_trans)
    ta = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8, generator=g)
    # B (K x N): the transpose of a row-major N x K W, or row-major itself
    tb = (
        torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8, generator=g).t()
        if b_trans
        else torch.randint(-128, 128, (k, n), device="cuda", dtype=torch.int8, generator=g)
    )
    sums = out == "int32"
    tc = torch.empty(m, n, device="cuda", dtype=torch.int32)  # _int_mm's result
    tg = torch.empty(m, n, device="cuda", dtype=getattr(torch, out))  # gpumat's
    A, B, C = gm.from_dlpack(ta), gm.from_dlpack(tb), gm.from_dlpack(tg)
    try:

        def ours():
            return gm.matmul(A, B, out=C, stream=stream) if sums else gm.matmul(A, B, out=C, alpha=SCALE, stream=stream)

        def anchor():
            if sums:
                return torch._int_mm(ta, tb, out=tc)
            return (torch._int_mm(ta, tb, out=tc) * SCALE).to(torch.bfloat16)

        case = {"M": m, "N": n, "K": k, "b_transposed": b_trans, "out": out}
        case["auto"] = gm.matmul_plan(A, B, out=C).algorithm
        case["gpumat_queued_us"], case["int_mm_queued_us"] = _queued_us(torch, ours), _queued_us(torch, anchor)
        case["gpumat_idle_us"], case["int_mm_idle_us"] = _idle_us(torch, ours), _idle_us(torch, anchor)
        tg.fill_(-0x5A5A5A5B if sums else float("nan"))  # an element gpumat leaves unwritten shows
        ours()
        first = tg.clone()
        theirs = anchor()
        case["equal"] = bool(torch.equal(first.view(torch.uint8), theirs.view(torch.uint8)))
        ours()
        case["repeat_bits"] = bool(torch.equal(first.view(torch.uint8), tg.view(torch.uint8)))
    finally:
        for x in (A, B, C):
            x.free()
    case["ratio"] = case["int_mm_queued_us"] / case["gpumat_queued_us"]
    case["ratio_idle"] = case["int_mm_idle_us"] / case["gpumat_idle_us"]
    case["gpumat_tops"] = 2.0 * m * n * k / case["gpumat_queued_us"] / 1e6
    case["int_mm_tops"] = 2.0 * m * n * k / case["int_mm_queued_us"] / 1e6
    return case


def run(args) -> dict:
    import torch  # the anchor: torch._int_mm (cuBLASLt)

    stream = torch.cuda.current_stream()
    cases = QUICK if getattr(args, "quick", False) else CASES
    records, rows = [], []
    for i, (m, n, k, b_trans, out) in enumerate(cases):
        case = _case(torch, m, n, k, b_trans, out, stream)
        records.append(case)
        layout = ("x @ W.T" if b_trans else "A @ B") + ("" if out == "int32" else f" -> {out}")
        print(
            f"int8 {i + 1}/{len(cases)}: {m}x{n}x{k} {layout} {case['ratio']:.2f}x _int_mm "
            f"({case['gpumat_tops']:.0f} against {case['int_mm_tops']:.0f} TOPS), equal {case['equal']}",
            file=sys.stderr,
            flush=True,
        )
        rows.append(
            [
                f"{m}x{n}x{k}",
                layout,
                case["auto"],
                case["gpumat_tops"],
                case["int_mm_tops"],
                case["ratio"],
                case["equal"],
            ]
        )
        torch.cuda.empty_cache()
    print_table(
        "int8 @ int8 -> int32 against torch._int_mm (ratio = _int_mm time / gpumat time, queued)",
        ["M x N x K", "layout", "gpumat plan", "TOPS", "_int_mm TOPS", "ratio", "equal"],
        rows,
    )
    payload = {
        "anchor": f"torch._int_mm (cuBLASLt) through PyTorch {torch.__version__}, out=, same inputs and stream",
        "timing": "CUDA events on PyTorch's current stream; queued: calls back to back behind a spin kernel, median "
        "of 5 samples; idle: one call after 2 ms of idle, median of 5",
        "operands": "uniform int8 in [-128, 127]; B the transpose of a row-major N x K W (b_transposed) or row-major; "
        f"out bfloat16: the sums times {SCALE} (gpumat: alpha; the anchor: (_int_mm * scale).to(bfloat16))",
        "cases": records,
        # the int32 sums against _int_mm, and apart, the dequantised cases against PyTorch's three kernels
        "geomean": geometric_mean([c["ratio"] for c in records if c["out"] == "int32"]),
        "geomean_dequantised": geometric_mean([c["ratio"] for c in records if c["out"] != "int32"] or [1.0]),
    }
    write_json("int8", payload)
    return payload
