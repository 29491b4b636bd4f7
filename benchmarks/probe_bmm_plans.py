"""Every named plan of bench bmm's slow cases against torch.bmm, queued, in one process: whether a case is
slow because auto picks the wrong row (a faster named plan exists) or because no row is fast enough.

    GPUMAT_RESULTS=DIR PYTHONPATH=src python3 benchmarks/probe_bmm_plans.py [--below 0.9] RESULT.json ...

Each RESULT.json is a `bench bmm` result; its cases whose ratio is under --below are rerun here: torch.bmm,
auto, and each variant auto may choose from by name (bench sweep's _named), on operands made as bench bmm
makes them (a transposed operand a view of its transpose's storage). Writes probe-bmm-plans-<device>-<date>.json.
"""

from __future__ import annotations

import argparse
import json

import gpumat as gm
from gpumat._bench import bmm
from gpumat._bench.common import environment, warm_clocks, write_json
from gpumat._bench.sweep import _named, _queued_us
from gpumat.matmul import algorithms


def slow_cases(paths: list[str], below: float) -> list[dict]:
    out = []
    for path in paths:
        with open(path) as f:
            result = json.load(f)
        dtype, mode = result["dtype"], result.get("precision")
        for c in result["cases"]:
            if c.get("ratio", 0.0) < below:
                keep = {k: c[k] for k in ("class", "batch", "M", "N", "K", "layout", "ratio", "auto")}
                out.append({**keep, "dtype": dtype, "mode": mode if dtype == "float32" else None})
    return out


def probe(torch, case: dict, stream) -> dict:
    dtype, mode = case["dtype"], case["mode"]
    torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
    tdtype = getattr(torch, dtype)
    (ta, tb, tc, tg), (A, B, C, owned) = bmm.operands(torch, case, tdtype)
    try:
        auto = gm.matmul_plan(A, B, out=C, precision=mode)
        row = dict(case)
        row["torch_us"] = _queued_us(torch, lambda: torch.bmm(ta, tb, out=tc))
        row["auto_now"] = f"{auto.algorithm}/{auto.splits}" + (" swapped" if auto.swap else "")
        row["auto_us"] = _queued_us(torch, lambda: gm.matmul(A, B, out=C, plan=auto, stream=stream))
        row["named_us"] = _named(torch, algorithms(dtype), auto, A, B, C, mode, stream)
        best = min(row["named_us"], key=row["named_us"].get)
        row["best"], row["best_us"] = best, row["named_us"][best]
        row["ratio_auto"] = row["torch_us"] / row["auto_us"]
        row["ratio_best"] = row["torch_us"] / row["best_us"]
        return row
    finally:
        for x in owned:
            x.free()


def main() -> None:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("results", nargs="+")
    parser.add_argument("--below", type=float, default=0.9)
    args = parser.parse_args()
    stream = torch.cuda.current_stream()
    warm_clocks()
    rows = []
    for case in slow_cases(args.results, args.below):
        row = probe(torch, case, stream)
        torch.cuda.empty_cache()
        rows.append(row)
        print(
            f"{row['dtype']:9} {row['mode'] or '':7} {row['class']:16} {row['batch']:5} x "
            f"{row['M']}x{row['N']}x{row['K']} {row['layout']}  torch {row['torch_us']:8.1f}  "
            f"auto {row['auto_now']:28} {row['auto_us']:8.1f} ({row['ratio_auto']:.2f})  "
            f"best {row['best']:28} {row['best_us']:8.1f} ({row['ratio_best']:.2f})",
            flush=True,
        )
    write_json("probe-bmm-plans", {**environment(), "anchor": "torch.bmm, same process and stream", "cases": rows})


if __name__ == "__main__":
    main()
