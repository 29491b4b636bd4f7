#!/usr/bin/env python3
"""Fit a streamed row's STREAM_COST (gpumat/matmul/variants.py: small_stream or small_stream_in_place) to a
probe's timings (benchmarks/probe_small_stream.py's JSON): nonnegative least squares of each queued time
against the model's terms (planner.stream_terms: the matrices an SM pays for, times one matrix, its staged
rows, its units of arithmetic and its outputs over 32) and a constant (the launch's own cost and its
warps' first chunk), then each time against the fit. No GPU needed. small_stream_in_place's costs are this
fit of results/probe-stream-in-place-nvidia-h200-2026-12-01.json (tests/test_matmul_small.py checks it);
small_stream's were fitted without the constant to results/probe-stream-nvidia-h200-2026-12-01.json, and
this script's --no-constant fit of that JSON comes within 3% of them for the halves and 7% for float32 (how
that fit differed was not recorded). small_stream_block's are the --relative --past-side 32 fit (each timing
weighted by its inverse, so that the fit minimises relative errors, not the long batches' absolute ones; the
products auto gives the row, a side past 32) of results/probe-stream-block-nvidia-h200-2026-12-01.json.
small_stream's float32 and float64 costs are the --relative --row-constant fit (the row's own fixed_s +
wave_floor_s held, the costs fitted to what is left of each timing) of
results/probe-stream-sliced-nvidia-h200-2026-12-01.json, the timings of the products it launches
(stream_launch: float64 to about 21^3).

    PYTHONPATH=src python3 benchmarks/fit_stream_costs.py RESULT.json ROW [--itemsize 2] [--no-constant]
        [--relative] [--past-side S] [--row-constant]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from scipy.optimize import nnls

from gpumat.matmul.engine import VARIANTS, Problem, Target, stream_launch, stream_terms

SUFFIX = {
    "float16": ("f16", "native", 2),
    "bfloat16": ("bf16", "native", 2),
    "float32": ("f32", "float32", 4),
    "float64": ("f64", "native", 8),
}


def cases(result: dict, row: str, itemsize: int, past_side: int = 0):
    """(problem, seconds) of each case the row ran, of the element size asked, with a side past past_side
    (small_stream: a product it launches, stream_launch)."""
    for c in result["cases"]:
        sfx, mode, size = SUFFIX[c["dtype"]]
        if row not in c or size != itemsize or max(c["M"], c["N"], c["K"]) <= past_side:
            continue
        if row == "small_stream" and stream_launch(c["M"], c["N"], c["K"], size) is None:
            continue
        layout = c["layout"]
        p = Problem(
            c["M"], c["N"], c["K"], sfx, sfx, mode, batch=c["batch"], a_trans=layout[0] == "T", b_trans=layout[1] == "T"
        )
        yield p, c[row]["us"] * 1e-6


def fit(
    result: dict,
    row: str,
    itemsize: int,
    constant: bool = True,
    sm_count: int = 132,
    relative: bool = False,
    past_side: int = 0,
    row_constant: bool = False,
):
    """The fitted (costs, constant), and each case with its measured and fitted seconds (on an H200's 132 SMs);
    `relative`: each timing's equation divided by it; past_side: the cases with a side past it alone;
    row_constant: the constant held at the row's fixed_s + wave_floor_s (not fitted), the costs fitted to
    what is left of each timing."""
    v, t = VARIANTS[row], Target(90, sm_count, 232448, frozenset({"matmul_small"}))
    found = list(cases(result, row, itemsize, past_side))
    columns = []
    for p, _ in found:
        count, terms = stream_terms(v, p, t)
        columns.append([count * term for term in terms] + [1.0] * constant)
    a, seconds = np.array(columns), np.array([s for _, s in found])
    weights = 1.0 / seconds if relative else np.ones_like(seconds)
    held = v.fixed_s + v.wave_floor_s if row_constant else 0.0
    if row_constant:
        a = a[:, :4]
    x, _ = nnls(a * weights[:, None], (seconds - held) * weights)
    fitted = [(p, s, float(row_ @ x) + held) for (p, s), row_ in zip(found, a, strict=True)]
    return x[:4], (held if row_constant else x[4] if constant else 0.0), fitted


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result")
    parser.add_argument("row", choices=["small_stream", "small_stream_in_place", "small_stream_block"])
    parser.add_argument("--itemsize", type=int, default=2, choices=[2, 4, 8])
    parser.add_argument("--no-constant", action="store_true", help="fit the four costs alone")
    parser.add_argument("--relative", action="store_true", help="minimise relative errors, not absolute ones")
    parser.add_argument("--past-side", type=int, default=0, help="fit the products with a side past this alone")
    parser.add_argument("--row-constant", action="store_true", help="hold the constant at the row's own")
    opts = parser.parse_args()
    with open(opts.result) as f:
        result = json.load(f)
    costs, constant, fitted = fit(
        result,
        opts.row,
        opts.itemsize,
        not opts.no_constant,
        relative=opts.relative,
        past_side=opts.past_side,
        row_constant=opts.row_constant,
    )
    print(f"{opts.row}, {opts.itemsize}-byte elements, {len(fitted)} timings:")
    print("  costs (a matrix, a staged row, a unit, 32 outputs):", ", ".join(f"{c:.3g}" for c in costs))
    print(f"  constant: {constant * 1e6:.2f} us")
    for p, measured, model in fitted:
        layout = ("T" if p.a_trans else "N") + ("T" if p.b_trans else "N")
        shape = f"{p.batch} x {p.m}x{p.n}x{p.k} {layout}"
        print(f"  {shape}: {measured * 1e6:.1f} us, fit {model * 1e6:.1f} ({measured / model:.2f})")


if __name__ == "__main__":
    main()
