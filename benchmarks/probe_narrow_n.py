"""Queued GPU microseconds of products with few columns (N of 8, 16 and 32; M and K 1024-16384; B row-major and
stored transposed) on the rows auto weighs there, each at 1-16 splits by name, with auto and cuBLAS in the
same process. Each row's entry: [measured us, modelled us].

    PYTHONPATH=src python3 benchmarks/probe_narrow_n.py out.json float16
"""

import datetime
import json
import sys
import time

import torch

import gpumat as gm
from gpumat._bench.sweep import _queued_us

stream = torch.cuda.current_stream()
dtype = sys.argv[2] if len(sys.argv) > 2 else "float16"
out = {
    "device": torch.cuda.get_device_name(),
    "date": datetime.date.today().isoformat(),
    "dtype": dtype,
    "anchor": f"cuBLAS through PyTorch {torch.__version__} torch.matmul(out=), same inputs and stream",
    "cases": [],
}
ROWS = ["wgmma128x64", "wgmma64x64", "mma64x64", "mma128x64", "wgmma64x16bt", "wgmma64x32bt"]
t0 = time.time()
td = getattr(torch, dtype)
for lay in ("NN", "NT"):
    for m in (1024, 4096, 16384):
        for n in (8, 16, 32):
            for k in (1024, 4096, 16384):
                g = torch.Generator(device="cuda").manual_seed(m + n + k)
                ta = torch.rand(m, k, device="cuda", generator=g).sub_(0.5).to(td)
                tb = torch.rand((n, k) if lay == "NT" else (k, n), device="cuda", generator=g).sub_(0.5).to(td)
                if lay == "NT":
                    tb = tb.t()
                tc = torch.empty(m, n, device="cuda", dtype=td)
                A, B, C = gm.from_dlpack(ta), gm.from_dlpack(tb), gm.from_dlpack(tc)
                auto = gm.matmul_plan(A, B, out=C)
                row = {
                    "M": m,
                    "N": n,
                    "K": k,
                    "layout": lay,
                    "auto": f"{auto.algorithm}/{auto.splits}",
                    "auto_swap": auto.swap,
                    "auto_model_us": auto.seconds * 1e6,
                    "auto_us": _queued_us(torch, lambda: gm.matmul(A, B, out=C, stream=stream)),
                    "cublas_us": _queued_us(torch, lambda: torch.matmul(ta, tb, out=tc)),
                    "rows": {},
                }
                for name in ROWS:
                    for s in (1, 2, 3, 4, 6, 8, 12, 16):
                        try:
                            p = gm.matmul_plan(A, B, out=C, algorithm=name, splits=s)
                        except ValueError:
                            continue
                        key = f"{p.algorithm}/{p.splits}" + ("/swap" if p.swap else "")
                        if key in row["rows"]:
                            continue
                        us = _queued_us(torch, lambda: gm.matmul(A, B, out=C, plan=p, stream=stream))
                        row["rows"][key] = [us, p.seconds * 1e6]
                out["cases"].append(row)
                best = min(row["rows"].items(), key=lambda kv: kv[1][0])
                print(
                    lay,
                    m,
                    n,
                    k,
                    row["auto"],
                    f"{row['auto_us']:.1f}",
                    "cublas",
                    f"{row['cublas_us']:.1f}",
                    "best",
                    best[0],
                    f"{best[1][0]:.1f}",
                    f"{time.time() - t0:.0f}s",
                    file=sys.stderr,
                    flush=True,
                )
                for x in (A, B, C):
                    x.free()
json.dump(out, open(sys.argv[1], "w"), indent=1)
