"""Queued GPU microseconds of products whose auto plan a change of the planner moves: the plan auto took before
(by name, at its split) against the one it takes now, with cuBLAS in the same process; and 2137 x 108 x 1055 on
each wide wgmma row unsplit and split. The cases file lists each shape with its old and new plan (made on any
machine by planning the shapes with the tree before and after the change).

    PYTHONPATH=src python3 benchmarks/probe_plan_change.py cases.json float16,bfloat16 out.json
"""

import json
import sys

import torch

import gpumat as gm
from gpumat._bench.sweep import _queued_us

cases = json.load(open(sys.argv[1]))  # [[[M, N, K, layout], [old variant, splits, swap], [new ...]], ...]
stream = torch.cuda.current_stream()
out = {"device": torch.cuda.get_device_name(), "cases": []}


def operands(m, n, k, lay, td, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    ta = torch.rand(m, k, device="cuda", generator=g, dtype=torch.float32).mul_(2).sub_(1).to(td)
    tb = (
        torch.rand((n, k) if lay == "NT" else (k, n), device="cuda", generator=g, dtype=torch.float32)
        .mul_(2)
        .sub_(1)
        .to(td)
    )
    if lay == "NT":
        tb = tb.t()
    tc = torch.empty(m, n, device="cuda", dtype=td)
    return ta, tb, tc


def named(A, B, C, name, s):
    p = gm.matmul_plan(A, B, out=C, algorithm=name, splits=s)
    return p, _queued_us(torch, lambda: gm.matmul(A, B, out=C, plan=p, stream=stream))


for dtype in sys.argv[2].split(","):
    td = getattr(torch, dtype)
    for (m, n, k, lay), old, new in cases:
        ta, tb, tc = operands(m, n, k, lay, td, m * 7 + n * 3 + k)
        A, B, C = gm.from_dlpack(ta), gm.from_dlpack(tb), gm.from_dlpack(tc)
        auto = gm.matmul_plan(A, B, out=C)
        row = {
            "dtype": dtype,
            "M": m,
            "N": n,
            "K": k,
            "layout": lay,
            "auto": f"{auto.algorithm}/{auto.splits}",
            "auto_swap": auto.swap,
        }
        row["new_wanted"] = f"{new[0]}/{new[1]}"
        row["auto_us"] = _queued_us(torch, lambda: gm.matmul(A, B, out=C, stream=stream))
        p, row["old_us"] = named(A, B, C, old[0], old[1])
        row["old"] = f"{p.algorithm}/{p.splits}"
        row["old_swap"] = p.swap
        row["old_wanted_swap"] = old[2]
        row["cublas_us"] = _queued_us(torch, lambda: torch.matmul(ta, tb, out=tc))
        out["cases"].append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        for x in (A, B, C):
            x.free()
    ta, tb, tc = operands(2137, 108, 1055, "NN", td, 1)
    A, B, C = gm.from_dlpack(ta), gm.from_dlpack(tb), gm.from_dlpack(tc)
    rows = {"cublas": _queued_us(torch, lambda: torch.matmul(ta, tb, out=tc))}
    for name in ("wgmma128x256", "wgmma128x128", "wgmma128x64", "wgmma64x64"):
        own = gm.matmul_plan(A, B, out=C, algorithm=name)
        for s in sorted({1, own.splits, 2, 3, 4}):
            p, t = named(A, B, C, name, s)
            rows[f"{p.algorithm}/{p.splits}"] = t
        rows[f"{name} own split"] = own.splits
    out[f"{dtype} 2137x108x1055"] = rows
    print(json.dumps(rows), file=sys.stderr, flush=True)
    for x in (A, B, C):
        x.free()
json.dump(out, open(sys.argv[3], "w"), indent=1)
