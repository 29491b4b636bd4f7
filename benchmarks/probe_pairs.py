"""The 16-bit wgmma rows of 128 x 256 and 128 x 128 one block a tile against the same rows launched as pairs
(clusters of two blocks sharing B's stages), by name, with torch (cuBLAS) in the same process: bench bmm's
16-bit cases and square products of 1024-8192. Each plan's result is checked against torch's first.

    GPUMAT_RESULTS=DIR PYTHONPATH=src python3 benchmarks/probe_pairs.py [bfloat16|float16] [--quick] [--odd]
"""

from __future__ import annotations

import sys

import gpumat as gm
from gpumat._bench import bmm
from gpumat._bench.common import environment, warm_clocks, write_json
from gpumat._bench.sweep import _queued_us

SQUARES = (1024, 1536, 2048, 3072, 4096, 8192)
# --odd: rows whose bytes are not a multiple of 128 (2000 bytes and the like), batches and single products,
# beside multiples of 128 bytes of the same sizes
ODD = (
    (24, 1000, 1000, 1000),
    (8, 1000, 1000, 4000),
    (16, 1000, 3000, 700),
    (64, 500, 500, 500),
    (4, 2000, 2000, 2000),
    (2, 3000, 3000, 3000),
    (1, 1000, 1000, 1000),
    (1, 2000, 2000, 2000),
    (1, 3000, 3000, 3000),
    (1, 4000, 4000, 4000),
    (1, 6000, 6000, 6000),
    (1, 1000, 3000, 780),
    (1, 2136, 1000, 1056),
    (1, 4096, 4000, 4096),
    (1, 4000, 4096, 4096),
    (1, 4096, 4096, 4000),
    (24, 1024, 1024, 1024),
    (4, 2048, 2048, 2048),
)


def names(layout: str) -> list[str]:
    suffix = ("at" if layout[0] == "T" else "") + ("bt" if layout[1] == "T" else "")
    return [f"wgmma128x{bn}{pair}{suffix}" for bn in (256, 128) for pair in ("", "pair")]


def probe(torch, case: dict, tdtype, stream) -> dict:
    (ta, tb, tc, tg), (A, B, C, owned) = bmm.operands(torch, case, tdtype)
    try:
        torch.bmm(ta, tb, out=tc)
        row = dict(case, torch_us=_queued_us(torch, lambda: torch.bmm(ta, tb, out=tc)), plans={})
        auto = gm.matmul_plan(A, B, out=C)
        row["auto"] = auto.algorithm
        row["auto_us"] = _queued_us(torch, lambda: gm.matmul(A, B, out=C, plan=auto, stream=stream))
        for name in names(case["layout"]):
            plan = gm.matmul_plan(A, B, out=C, algorithm=name, splits=1)
            tg.fill_(float("nan"))
            gm.matmul(A, B, out=C, plan=plan, stream=stream)
            err = bmm._mismatch(torch, tg, tc)
            us = _queued_us(torch, lambda p=plan: gm.matmul(A, B, out=C, plan=p, stream=stream))
            row["plans"][name] = {"us": us, "mismatch": err, "grid": list(plan.grid), "copies": plan.copy_bytes}
        return row
    finally:
        for x in owned:
            x.free()


def main() -> None:
    import torch

    dtype = next((a for a in sys.argv[1:] if not a.startswith("--")), "bfloat16")
    if "--odd" in sys.argv:
        cases = [
            {"class": "odd", "batch": b, "M": m, "N": n, "K": k, "layout": lay}
            for b, m, n, k in ODD
            for lay in ("NN", "NT")
        ]
    else:
        cases = [c for c in bmm.cases() if c["class"] != "tiny"]
        cases += [{"class": "square", "batch": 1, "M": s, "N": s, "K": s, "layout": "NN"} for s in SQUARES]
    if "--quick" in sys.argv:
        cases = cases[::3]
    stream = torch.cuda.current_stream()
    tdtype = getattr(torch, dtype)
    warm_clocks()
    rows = []
    for case in cases:
        row = probe(torch, case, tdtype, stream)
        torch.cuda.empty_cache()
        rows.append(row)
        timing = "  ".join(
            f"{nm} {r['us']:7.1f}" + ("" if r["mismatch"] <= 6e-2 else f" WRONG {r['mismatch']:.2g}")
            for nm, r in row["plans"].items()
        )
        shape = f"{case['batch']:5} x {case['M']}x{case['N']}x{case['K']} {case['layout']}"
        print(f"{case['class']:16} {shape}  torch {row['torch_us']:7.1f}  {timing}", flush=True)
    write_json(
        f"probe-pairs-{dtype}" + ("-odd" if "--odd" in sys.argv else ""),
        {**environment(), "anchor": "torch.bmm / torch.matmul", "cases": rows},
    )


if __name__ == "__main__":
    main()
