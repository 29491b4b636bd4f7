"""A batch times a shared 2-D matrix (x @ W and x @ W.T, x of (batch, tokens, features)) against
torch.matmul in the same process: gpumat folds such a batch into one tall product, and this times it
(queued behind a spin kernel, the GPU's own time, as bench sweep times it; gpumat makes a new result
each call, as a layer does, torch writes into out=), with auto's plan and the result's largest error
relative to the float64 product's largest element.

    GPUMAT_RESULTS=DIR PYTHONPATH=src python3 benchmarks/probe_folded_batches.py

Writes probe-folded-batches-<device>-<date>.json.
"""

from __future__ import annotations

import gpumat as gm
from gpumat._bench.common import environment, write_json
from gpumat._bench.sweep import _queued_us

# (batch, tokens, features, outputs)
CASES = [
    (8, 128, 256, 512),
    (8, 128, 4096, 4096),
    (4, 512, 1024, 4096),
    (32, 64, 768, 768),
    (16, 77, 768, 3072),
    (2, 1024, 4096, 1024),
    (64, 16, 1024, 1024),
]


def main() -> None:
    import torch

    rows = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for batch, tokens, features, outputs in CASES:
            for layout in ("W", "W.T"):
                x = torch.randn(batch, tokens, features, device="cuda", dtype=dtype)
                if layout == "W":
                    w = torch.randn(features, outputs, device="cuda", dtype=dtype) / features**0.5
                    gw = gm.from_dlpack(w).copy()
                else:  # W stored as outputs x features, read through its transpose
                    stored = torch.randn(outputs, features, device="cuda", dtype=dtype) / features**0.5
                    w, gw = stored.T, gm.from_dlpack(stored).copy().T
                gx = gm.from_dlpack(x).copy()
                out = torch.empty(batch, tokens, outputs, device="cuda", dtype=dtype)
                torch.cuda.synchronize()
                plan = gm.matmul_plan(gx, gw)
                exact = x.double() @ w.double()
                got = torch.from_dlpack(gm.matmul(gx, gw)).double()
                torch.cuda.synchronize()
                row = {
                    "dtype": str(dtype).removeprefix("torch."),
                    "batch": batch,
                    "tokens": tokens,
                    "features": features,
                    "outputs": outputs,
                    "layout": layout,
                    "plan": plan.algorithm,
                    "splits": plan.splits,
                    "error": float((got - exact).abs().max() / exact.abs().max()),
                    "torch_us": _queued_us(torch, lambda: torch.matmul(x, w, out=out)),
                    "gpumat_us": _queued_us(torch, lambda: gm.matmul(gx, gw)),
                }
                row["ratio"] = row["torch_us"] / row["gpumat_us"]
                rows.append(row)
                print(row, flush=True)
    anchor = "torch.matmul (cuBLAS) on the same operands, same process, queued"
    write_json("probe-folded-batches", {**environment(), "anchor": anchor, "cases": rows})


if __name__ == "__main__":
    main()
