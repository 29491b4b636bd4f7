"""Probe the FP8 wgmma rows on the shapes the planner chooses among: every fp8_wgmma row forced at 1-8
splits, plain and (the rows that write C transposed) swapped, beside auto's plan and torch._scaled_mm, on
layers of 8-256 tokens, mid-size and large squares, a skinny N and a long K. x @ W.T, e4m3 operands, a
bfloat16 C, per-tensor scales (gpumat: alpha). Times queued (the benches' CUDA-event method).

    PYTHONPATH=src python benchmarks/probe_fp8.py [--quick]

Writes benchmarks/results/probe-fp8-wgmma-<device>-<date>.json: per shape cublas_us (the anchor), auto and
auto_us, and variants {"row/splits[s]": us}; the fastest forced plan against auto's says where the model's
constants for the FP8 rows are off.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

import gpumat as gm
from gpumat._bench.sweep import _queued_us
from gpumat.matmul import engine
from gpumat.matmul.engine import VARIANTS

ROOT = Path(__file__).resolve().parent
SHAPES = [
    *((m, n, k) for m in (8, 16, 32, 64, 128, 256) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))),
    (512, 512, 512),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (3072, 3072, 3072),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (16384, 64, 16384),
    (1024, 1024, 16384),
]
QUICK = [(32, 4096, 4096), (1024, 1024, 1024), (4096, 4096, 4096)]
SPLITS = (1, 2, 4, 8)


def main() -> int:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    stream = torch.cuda.current_stream()
    rows = [name for name in engine.algorithms("float8_e4m3fn") if name != "auto"]
    cases = []
    for m, n, k in QUICK if args.quick else SHAPES:
        g = torch.Generator(device="cuda").manual_seed(m + n + k)
        x = (torch.randn(m, k, device="cuda", generator=g) * 4).to(torch.float8_e4m3fn)
        w = (torch.randn(n, k, device="cuda", generator=g) * 4).to(torch.float8_e4m3fn)
        scale = torch.tensor(0.25, device="cuda")
        tc = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        tg = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        A, W, C = gm.from_dlpack(x), gm.from_dlpack(w), gm.from_dlpack(tg)
        B = W.T
        case = {"M": m, "N": n, "K": k}
        if m >= 16:  # (_scaled_mm takes M in multiples of 16)
            case["cublas_us"] = _queued_us(
                torch, lambda: torch._scaled_mm(x, w.t(), scale, scale, out_dtype=torch.bfloat16, out=tc)
            )
        case["auto"] = gm.matmul_plan(A, B, out=C).algorithm
        case["auto_us"] = _queued_us(torch, lambda: gm.matmul(A, B, out=C, alpha=0.0625, stream=stream))
        problem = engine.problem_of_call(A, B, C)
        variants = {}
        for name in rows:
            for swap in (False, True) if VARIANTS[name].writes_c_trans else (False,):
                for splits in SPLITS:
                    try:
                        plan = engine.forced(*problem, name, splits, swap=swap)
                    except ValueError:
                        continue
                    us = _queued_us(torch, lambda p=plan: gm.matmul(A, B, out=C, alpha=0.0625, plan=p, stream=stream))
                    variants[f"{name}/{plan.splits}{'s' if swap else ''}"] = round(us, 2)
        case["variants"] = variants
        best = min(variants, key=variants.get)
        case["best"], case["best_us"] = best, variants[best]
        cases.append(case)
        anchor = f", _scaled_mm {case['cublas_us']:.1f} us" if "cublas_us" in case else ""
        print(
            f"{m}x{n}x{k}: auto {case['auto']} {case['auto_us']:.1f} us, best {best} {variants[best]:.1f} us{anchor}",
            file=sys.stderr,
            flush=True,
        )
        for t in (A, W, C):
            t.free()
    dev = gm.device()
    out = {
        "op": "probe: FP8 (e4m3 -> bfloat16, x @ W.T, alpha) on the fp8_wgmma rows, forced at 1-8 splits, plain and "
        "swapped ('s')",
        "device": dev.name,
        "date": datetime.date.today().isoformat(),
        "timing": "queued (CUDA events, calls back to back behind a spin kernel, median of 5 samples)",
        "anchor": f"torch._scaled_mm e4m3 -> bfloat16 (PyTorch {torch.__version__}) in the same process (cublas_us)",
        "cases": cases,
    }
    path = ROOT / "results" / f"probe-fp8-wgmma-{dev.name.lower().replace(' ', '-')}-{out['date']}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
