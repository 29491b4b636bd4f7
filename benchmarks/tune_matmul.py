#!/usr/bin/env python3
"""Measure every fast matmul kernel at every sensible split-K count on the benchmark shapes.

The timings are what the cost model in gpumat.matmul.plan is fitted to: each kernel's relative
efficiency, and where split-K starts to pay. Writes benchmarks/results/matmul-tuning-<device>-<date>.json.

    PYTHONPATH=src python3 benchmarks/tune_matmul.py
"""
from __future__ import annotations

import numpy as np

import gpumat as gm
from gpumat._bench.common import print_table, time_ms, write_json
from gpumat._bench.matmul import SHAPES
from gpumat._geometry import cdiv
from gpumat.matmul import FAST, K_ALIGN, SPLIT_CHOICES, Plan, plan, run_plan

EXTRA_SHAPES = [(512, 512, 512), (2048, 512, 8192), (1000, 1000, 50000), (6000, 200, 3000), (64, 64, 64)]


def candidates(m: int, n: int, k: int):
    sms = gm.device().sm_count
    for name, v in FAST.items():
        tiles = cdiv(m, v.tile[0]) * cdiv(n, v.tile[1])
        for splits in SPLIT_CHOICES:
            k_chunk = k if splits == 1 else cdiv(cdiv(k, splits), K_ALIGN) * K_ALIGN
            if splits > 1 and (cdiv(k, k_chunk) != splits or tiles * splits > 8 * sms * v.blocks_per_sm):
                continue
            yield Plan(name, splits, k_chunk)


def main() -> None:
    rng = np.random.default_rng(2)
    rows, records = [], []
    for m, n, k in SHAPES + EXTRA_SHAPES:
        a = gm.Matrix.from_numpy(rng.uniform(-1, 1, (m, k)).astype(np.float32))
        b = gm.Matrix.from_numpy(rng.uniform(-1, 1, (k, n)).astype(np.float32))
        c = gm.Matrix.empty(m, n)
        chosen = plan(m, n, k, gm.device().sm_count)
        timings = []
        for p in {*candidates(m, n, k), chosen}:
            ms = time_ms(lambda: run_plan(p, a, b, c), warmup=2, repeat=7)
            timings.append({"algorithm": p.algorithm, "splits": p.splits, "k_chunk": p.k_chunk, "ms": ms,
                            "tflops": 2 * m * n * k / ms / 1e9})
        best = min(timings, key=lambda t: t["ms"])
        picked = next(t for t in timings if (t["algorithm"], t["splits"]) == (chosen.algorithm, chosen.splits))
        rows.append([f"{m}x{n}x{k}", f"{best['algorithm']}/{best['splits']}", best["tflops"],
                     f"{chosen.algorithm}/{chosen.splits}", picked["tflops"], best["ms"] / picked["ms"]])
        records.append({"M": m, "N": n, "K": k, "model_pick": [chosen.algorithm, chosen.splits], "timings": timings})
        for x in (a, b, c):
            x.free()
    print_table("fast matmul: best measured plan vs the model's pick (TFLOP/s)",
                ["M x N x K", "best", "TFLOP/s", "model", "TFLOP/s", "model/best"], rows)
    write_json("matmul-tuning", {"shapes": records})


if __name__ == "__main__":
    main()
