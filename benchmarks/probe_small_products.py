"""Queued GPU microseconds of small float32 and float64 products on every row by name (unsplit and at the row's
own split, the documents' teaching tiles among them), with auto's plan and cuBLAS in the same process: the data
the small-product rows' constants are fitted to. With --auto-only, auto and cuBLAS alone.

    PYTHONPATH=src python3 benchmarks/probe_small_products.py out.json [--auto-only]
"""

import json
import sys

import torch

import gpumat as gm
from gpumat._bench.sweep import _queued_us
from gpumat.matmul import algorithms

SHAPES = [(s, s, s) for s in (32, 64, 96, 128, 160, 192, 255, 256, 257, 320, 384, 512, 768)] + [
    (64, 256, 256),
    (256, 64, 256),
    (128, 128, 512),
    (100, 200, 300),
    (33, 65, 129),
    (256, 256, 64),
    (512, 512, 128),
    (1, 1, 1),
    (1000, 1000, 64),
]
stream = torch.cuda.current_stream()
out = {"device": torch.cuda.get_device_name(), "cases": []}
for dtype in ("float32", "float64"):
    td = getattr(torch, dtype)
    for m, n, k in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
        ta = torch.rand(m, k, device="cuda", generator=g, dtype=td)
        tb = torch.rand(k, n, device="cuda", generator=g, dtype=td)
        tc = torch.empty(m, n, device="cuda", dtype=td)
        A, B, C = gm.from_dlpack(ta), gm.from_dlpack(tb), gm.from_dlpack(tc)
        auto = gm.matmul_plan(A, B, out=C)
        row = {
            "dtype": dtype,
            "M": m,
            "N": n,
            "K": k,
            "auto": f"{auto.algorithm}/{auto.splits}",
            "auto_us": _queued_us(torch, lambda: gm.matmul(A, B, out=C, stream=stream)),
            "cublas_us": _queued_us(torch, lambda: torch.matmul(ta, tb, out=tc)),
            "named": {},
        }
        names = [] if "--auto-only" in sys.argv else algorithms(A.dtype)[1:]
        for name in names:
            if name.startswith(("gemv", "small", "ozaki")):  # matrix-vector, batch and emulation rows
                continue
            splits = {1}
            try:
                own = gm.matmul_plan(A, B, out=C, algorithm=name, precision="float32" if dtype == "float32" else None)
            except ValueError:  # not on this GPU, or not at this precision
                continue
            if own.copy_a or own.copy_b or own.variant.tier > 1 and name != "simt64x64":
                continue
            splits.add(own.splits)
            for s in sorted(splits):
                try:
                    p = gm.matmul_plan(
                        A, B, out=C, algorithm=name, splits=s, precision="float32" if dtype == "float32" else None
                    )
                except ValueError:
                    continue
                row["named"][f"{p.algorithm}/{p.splits}"] = _queued_us(
                    torch, lambda p=p: gm.matmul(A, B, out=C, plan=p, stream=stream)
                )
        fastest = sorted(row["named"].items(), key=lambda kv: kv[1])[:6]
        print(
            f"{dtype} {m}x{n}x{k} auto {row['auto']} {row['auto_us']:.1f} cublas {row['cublas_us']:.1f} fastest "
            + " ".join(f"{a}:{b:.1f}" for a, b in fastest),
            file=sys.stderr,
            flush=True,
        )
        out["cases"].append(row)
        for x in (A, B, C):
            x.free()
json.dump(out, open(sys.argv[1], "w"), indent=1)
