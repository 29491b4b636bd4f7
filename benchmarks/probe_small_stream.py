"""Batches of tiny products (1-64 a side, 100-300000 matrices, every layout): each small-products row by name
(small, small_wide, small_stream, and small_stream_in_place, small_stream_block, mma64x64, dmma64x64 and
dmma32x32 where they compute the shape; float64 also on a few products of N up to 64) and auto against
torch.bmm in the same process, queued GPU microseconds (CUDA events on PyTorch's stream), each checked
against a float64 torch.bmm, with the plan's modelled time and the bytes' share of the device-to-device
copy rate. What the streamed rows' cost constants (STREAM_COST) were fitted to. Usage: python
benchmarks/probe_small_stream.py float16 float32 bfloat16 (JSON into $OUT or /tmp); PROBE_ROWS=a,b,... times
those rows alone."""

import json
import os
import sys
import time

import torch

import gpumat as gm
from gpumat._bench.common import copy_gbps
from gpumat._bench.sweep import _queued_us

ROWS = ("small", "small_wide", "small_stream", "small_stream_in_place", "small_stream_block", "mma64x64", "dmma64x64")
ROWS = (*ROWS, "dmma32x32")
ROWS = (*ROWS, "auto")
ROWS = tuple(os.environ.get("PROBE_ROWS", ",".join(ROWS)).split(","))
SHAPES = [
    *((4096, 16, 16, 16), (100000, 2, 2, 2), (10000, 4, 4, 4), (65537, 8, 8, 8), (100000, 16, 16, 16)),
    *((20000, 24, 24, 24), (10000, 32, 32, 32), (1000, 32, 32, 32), (200, 16, 16, 16), (50000, 12, 12, 12)),
    *((20000, 8, 32, 16), (20000, 32, 8, 32), (30000, 7, 13, 29), (100000, 1, 32, 32), (100000, 32, 1, 32)),
    *((20000, 20, 20, 20), (50000, 12, 20, 8), (20000, 32, 16, 8), (3000, 24, 24, 24), (300000, 4, 4, 4)),
]
LAYOUT_SHAPES = [(10000, 32, 32, 32), (100000, 16, 16, 16), (20000, 20, 20, 20)]
# the halves past 32 a side (small_stream_block against the tiles), with layouts of their own
SHAPES64 = [
    *((5000, 48, 48, 48), (1000, 64, 64, 64), (3000, 64, 64, 64), (10000, 40, 40, 40), (2000, 56, 56, 56)),
    *((20000, 64, 32, 64), (10000, 32, 64, 48), (200, 64, 64, 64), (100, 48, 48, 48), (50000, 16, 64, 16)),
    *((5000, 64, 8, 64), (30000, 48, 16, 32), (500, 40, 64, 56)),
]
LAYOUT_SHAPES64 = [(5000, 48, 48, 48), (3000, 64, 64, 64)]
# float64's products that dmma32x32 may take beside the batches: few or single products of N up to 64
FEW64 = [
    (1, 64, 64, 64),
    (1, 256, 64, 256),
    (1, 2048, 32, 2048),
    (1, 64, 64, 4096),
    (8, 64, 64, 64),
    (100, 128, 64, 64),
]
FEW64 += [(1, 1000, 40, 1000), (16, 96, 48, 96)]


def case(dtype, b, m, n, k, layout, gbps, stream) -> dict:
    g = torch.Generator(device="cuda").manual_seed(b + m + n + k)
    a = torch.rand((b, k, m) if layout[0] == "T" else (b, m, k), device="cuda", dtype=dtype, generator=g) - 0.5
    bb = torch.rand((b, n, k) if layout[1] == "T" else (b, k, n), device="cuda", dtype=dtype, generator=g) - 0.5
    ta = a.transpose(1, 2) if layout[0] == "T" else a
    tb = bb.transpose(1, 2) if layout[1] == "T" else bb
    c = torch.empty((b, m, n), device="cuda", dtype=dtype)
    A, B, C = gm.from_dlpack(ta), gm.from_dlpack(tb), gm.from_dlpack(c)
    ref = torch.bmm(ta.double(), tb.double())
    nbytes = b * (m * k + k * n + m * n) * ta.element_size()
    row = {"dtype": str(dtype).split(".")[1], "batch": b, "M": m, "N": n, "K": k, "layout": layout, "bytes": nbytes}
    row["torch_us"] = _queued_us(torch, lambda: torch.bmm(ta, tb, out=c))
    for name in ROWS:
        try:
            p = gm.matmul_plan(A, B, out=C, algorithm=name)
        except ValueError:
            continue
        c.fill_(float("nan"))
        gm.matmul(A, B, out=C, plan=p, stream=stream)
        torch.cuda.synchronize()
        err = ((c.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
        us = _queued_us(torch, lambda p=p: gm.matmul(A, B, out=C, plan=p, stream=stream))
        row[name] = {
            "us": us,
            "err": err,
            "roof": nbytes / (us * 1e-6) / (gbps * 1e9),
            "ratio": row["torch_us"] / us,
            "modelled_us": p.seconds * 1e6,
            "algorithm": p.algorithm,
            "grid": list(p.grid),
        }
    return row


def main():
    gbps = copy_gbps(256 << 20)
    stream = torch.cuda.current_stream()
    out = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "copy_gbps": gbps, "cases": []}
    for name in sys.argv[1:]:
        dtype = getattr(torch, name)
        cases = [(s, "NN") for s in SHAPES] + [(s, lay) for s in LAYOUT_SHAPES for lay in ("NT", "TN", "TT")]
        if dtype.itemsize in (2, 8):
            cases += [(s, "NN") for s in SHAPES64] + [(s, lay) for s in LAYOUT_SHAPES64 for lay in ("NT", "TN", "TT")]
        if dtype.itemsize == 8:
            cases += [(s, "NN") for s in FEW64]
        for (b, m, n, k), layout in cases:
            row = case(dtype, b, m, n, k, layout, gbps, stream)
            out["cases"].append(row)
            timed = " ".join(f"{r} {row[r]['us']:.1f} ({row[r]['modelled_us']:.1f})" for r in ROWS if r in row)
            print(name, b, m, n, k, layout, f"torch {row['torch_us']:.1f}", timed, row["auto"]["algorithm"], flush=True)
            torch.cuda.empty_cache()
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "probe-stream.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
