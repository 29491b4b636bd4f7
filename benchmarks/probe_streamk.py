"""Queued GPU microseconds of mid-size and skinny 16-bit products on the stream-K rows and the plain wgmma rows
by name (each at its own modelled split), with auto and cuBLAS in the same process; each row's entry is
[measured us, modelled us], and `auto` names the plan auto made. Also: whether each stream-K result equals,
bit for bit, a second call of the same plan (determinism) and its largest error against cuBLAS's result.

    PYTHONPATH=src python3 benchmarks/probe_streamk.py out.json float16,bfloat16
"""

import datetime
import json
import sys

import torch

import gpumat as gm
from gpumat._bench.sweep import _queued_us

SHAPES = [
    (512, 512, 512, "NN"),
    (768, 768, 768, "NN"),
    (1024, 1024, 1024, "NN"),
    (1280, 1280, 1280, "NN"),
    (1536, 1536, 1536, "NN"),
    (2048, 2048, 2048, "NN"),
    (2560, 2560, 2560, "NN"),
    (3072, 3072, 3072, "NN"),
    (4096, 4096, 4096, "NN"),
    (4096, 256, 4096, "NN"),
    (4096, 512, 4096, "NN"),
    (1024, 4096, 1024, "NN"),
    (8192, 1024, 1024, "NN"),
    (256, 256, 16384, "NN"),
    (1536, 1536, 1536, "NT"),
    (128, 4096, 4096, "NT"),
    (512, 4096, 4096, "NT"),
    (2048, 2048, 2048, "NT"),
]
PLAIN = {
    "NN": ["wgmma128x256", "wgmma128x128", "wgmma128x64"],
    "NT": ["wgmma128x256bt", "wgmma128x128bt", "wgmma128x64bt"],
}
STREAMK = {"NN": ["wgmma128x256sk", "wgmma128x128sk"], "NT": ["wgmma128x256btsk", "wgmma128x128btsk"]}

stream = torch.cuda.current_stream()
out = {
    "device": torch.cuda.get_device_name(),
    "date": datetime.date.today().isoformat(),
    "anchor": f"cuBLAS through PyTorch {torch.__version__} torch.matmul(out=), same inputs and stream",
    "cases": [],
}
for dtype in sys.argv[2].split(","):
    td = getattr(torch, dtype)
    for m, n, k, lay in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(m + 3 * n + 7 * k)
        ta = torch.rand(m, k, device="cuda", generator=g).sub_(0.5).to(td)
        tb = torch.rand((n, k) if lay == "NT" else (k, n), device="cuda", generator=g).sub_(0.5).to(td)
        tb = tb.t() if lay == "NT" else tb
        tc = torch.empty(m, n, device="cuda", dtype=td)
        A, B, C = gm.from_dlpack(ta), gm.from_dlpack(tb), gm.from_dlpack(tc)
        auto = gm.matmul_plan(A, B, out=C)
        row = {"dtype": dtype, "M": m, "N": n, "K": k, "layout": lay, "auto": f"{auto.algorithm}/{auto.splits}"}
        row["auto_us"] = _queued_us(torch, lambda: gm.matmul(A, B, out=C, stream=stream))
        row["cublas_us"] = _queued_us(torch, lambda: torch.matmul(ta, tb, out=tc))
        ref = tc.float().clone()
        row["rows"] = {}
        for name in PLAIN[lay] + STREAMK[lay]:
            p = gm.matmul_plan(A, B, out=C, algorithm=name)
            us = _queued_us(torch, lambda: gm.matmul(A, B, out=C, plan=p, stream=stream))
            row["rows"][f"{p.algorithm}/{p.splits}"] = [us, p.seconds * 1e6]
            if name in STREAMK[lay]:
                gm.matmul(A, B, out=C, plan=p, stream=stream)
                first = tc.clone()
                gm.matmul(A, B, out=C, plan=p, stream=stream)
                row[f"{name} repeats"] = bool(torch.equal(first, tc))
                row[f"{name} max_error"] = float((first.float() - ref).abs().max() / ref.abs().max())
        out["cases"].append(row)
        best = min(row["rows"].items(), key=lambda kv: kv[1][0])
        print(
            dtype,
            m,
            n,
            k,
            lay,
            row["auto"],
            f"{row['auto_us']:.1f}",
            f"cublas {row['cublas_us']:.1f}",
            "best",
            best[0],
            f"{best[1][0]:.1f}",
            {k: round(v[0], 1) for k, v in row["rows"].items()},
            file=sys.stderr,
            flush=True,
        )
        for x in (A, B, C):
            x.free()
json.dump(out, open(sys.argv[1], "w"), indent=1)
