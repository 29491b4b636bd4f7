#!/usr/bin/env python3
"""Measure every matmul variant the planner may choose at every split count it allows, against the plan
it picks, for one dtype and precision mode: the data the cost model's per-variant constants (rate,
wave slack, split costs in gpumat/matmul/variants.py) are fitted to.

    PYTHONPATH=src python3 benchmarks/tune_matmul.py [--dtype float16] [--precision tf32] [--quick] [--tag TAG]

Plans come from gm.matmul_plan (splits= forces a split), and run through gm.matmul(plan=...): only the
public API and the plan object. Writes benchmarks/results/matmul-tuning[-TAG]-<device>-<date>.json.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gpumat as gm
from gpumat._bench import common
from gpumat._bench.common import print_table, time_ms, write_json
from gpumat._bench.matmul import SHAPES
from gpumat.matmul import algorithms
from gpumat.matmul.engine import split_options

EXTRA_SHAPES = [
    (512, 512, 512),
    (2048, 512, 8192),
    (1000, 1000, 50000),
    (6000, 200, 3000),
    (64, 64, 64),
    (6144, 6144, 6144),
    (2500, 2500, 2500),
]
QUICK_SHAPES = [(4096, 4096, 4096), (4097, 4097, 4097), (3001, 3011, 2999), (2137, 108, 1055), (256, 256, 65536)]


def candidate_plans(A, B, C, precision):
    """Every (variant, split) of auto's candidates for these operands: the variants whose own plan is at
    the requested precision and is one auto considers (tier 1), each at every split count it allows."""
    for name in algorithms(A.dtype)[1:]:
        try:
            own = gm.matmul_plan(A, B, out=C, algorithm=name, precision=precision)
        except ValueError:  # not at this precision, or not on this GPU
            continue
        if not own.variant.auto_may_take(own.problem.dtype) or own.algorithm != name:
            continue
        for splits, k_chunk in split_options(own.variant, B.height):
            yield gm.matmul_plan(A, B, out=C, algorithm=name, precision=precision, splits=splits, k_chunk=k_chunk)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--precision", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    if args.precision is None and args.dtype == "float32":
        args.precision = "float32"  # a named tensor-core variant would otherwise run at its own precision
    rng = np.random.default_rng(2)
    with gm.Matrix.from_numpy(rng.uniform(-1, 1, (4096, 4096)).astype(np.float32)) as w:
        t0 = time.perf_counter()  # one long warm-up so the clocks are up, then short ones per plan
        while time.perf_counter() - t0 < 1.0:
            gm.matmul(w, w)
            gm.synchronize()
    common.WARMUP_SECONDS = 0.03
    rows, records = [], []
    for m, n, k in QUICK_SHAPES if args.quick else SHAPES + EXTRA_SHAPES:
        flop = 2 * m * n * k
        A = gm.Matrix.from_numpy(rng.uniform(-1, 1, (m, k)), dtype=args.dtype)
        B = gm.Matrix.from_numpy(rng.uniform(-1, 1, (k, n)), dtype=args.dtype)
        C = gm.Matrix.empty(m, n, dtype=args.dtype)
        chosen = gm.matmul_plan(A, B, out=C, precision=args.precision)
        timings = []
        for p in candidate_plans(A, B, C, args.precision):
            ms = time_ms(lambda: gm.matmul(A, B, out=C, plan=p), warmup=2, repeat=7)
            timings.append(
                {
                    "algorithm": p.algorithm,
                    "splits": p.splits,
                    "k_chunk": p.k_chunk,
                    "ms": ms,
                    "modelled_ms": p.seconds * 1e3,
                    "tflops": flop / ms / 1e9,
                }
            )
        best = min(timings, key=lambda t: t["ms"])
        picked = next((t for t in timings if (t["algorithm"], t["splits"]) == (chosen.algorithm, chosen.splits)), None)
        rows.append(
            [
                f"{m}x{n}x{k}",
                f"{best['algorithm']}/{best['splits']}",
                best["tflops"],
                f"{chosen.algorithm}/{chosen.splits}",
                picked["tflops"] if picked else None,
                best["ms"] / picked["ms"] if picked else None,
            ]
        )
        records.append({"M": m, "N": n, "K": k, "model_pick": [chosen.algorithm, chosen.splits], "timings": timings})
        for x in (A, B, C):
            x.free()
    print_table(
        f"matmul {args.dtype} {args.precision or ''}: best measured plan vs the planner's pick (TFLOP/s)",
        ["M x N x K", "best", "TFLOP/s", "planner", "TFLOP/s", "planner/best"],
        rows,
    )
    tag = "-".join(
        x
        for x in (
            args.dtype if args.dtype != "float32" else "",
            args.precision if args.precision not in (None, "float32") else "",
            args.tag,
        )
        if x
    )
    write_json(
        "matmul-tuning" + (f"-{tag}" if tag else ""),
        {
            "dtype": args.dtype,
            "precision": args.precision,
            "timing": "CUDA events, 30 ms warm-up, median of 7 runs",
            "shapes": records,
        },
    )


if __name__ == "__main__":
    main()
