#!/usr/bin/env python3
"""Measure every fast matmul kernel at every sensible split-K count, with cuBLAS in the same run.

The timings are what the cost model in gpumat.matmul.plan is fitted to: each kernel's relative
efficiency, and where split-K starts to pay. Writes benchmarks/results/matmul-tuning[-TAG]-<device>-<date>.json
(GPUMAT_RESULTS=dir to write elsewhere).

    PYTHONPATH=src python3 benchmarks/tune_matmul.py [--quick] [--tag TAG]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import gpumat as gm
from gpumat._bench import common
from gpumat._bench.common import cupy, cupy_time_ms, print_table, time_ms, write_json
from gpumat._bench.matmul import SHAPES, sm_clock_mhz
from gpumat._geometry import cdiv
from gpumat.matmul import FAST, K_ALIGN, SPLIT_CHOICES, Plan, plan, run_plan

EXTRA_SHAPES = [(512, 512, 512), (2048, 512, 8192), (1000, 1000, 50000), (6000, 200, 3000), (64, 64, 64),
                (6144, 6144, 6144), (2500, 2500, 2500)]
QUICK_SHAPES = [(4096, 4096, 4096), (4097, 4097, 4097), (3001, 3011, 2999), (2137, 108, 1055), (256, 256, 65536)]


def candidates(m: int, n: int, k: int):
    sms = gm.device().sm_count
    for name, v in FAST.items():
        tiles = cdiv(m, v.tile[0]) * cdiv(n, v.tile[1])
        for splits in SPLIT_CHOICES:
            k_chunk = k if splits == 1 else cdiv(cdiv(k, splits), K_ALIGN) * K_ALIGN
            if splits > 1 and (cdiv(k, k_chunk) != splits or k_chunk < 128
                               or tiles * splits > 4 * sms * v.blocks_per_sm):
                continue
            yield Plan(name, splits, k_chunk)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    cp = cupy()
    rng = np.random.default_rng(2)
    sms = gm.device().sm_count
    # One long warm-up so the clocks are up, then short ones per measurement (hundreds of plans).
    with gm.Matrix.from_numpy(rng.uniform(-1, 1, (4096, 4096)).astype(np.float32)) as w:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 1.0:
            gm.matmul(w, w)
            gm.synchronize()
    common.WARMUP_SECONDS = 0.03
    rows, records = [], []
    for m, n, k in QUICK_SHAPES if args.quick else SHAPES + EXTRA_SHAPES:
        a_h = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b_h = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        flop = 2 * m * n * k
        cublas_ms = cublas_mhz = None
        if cp is not None:
            ca, cb = cp.asarray(a_h), cp.asarray(b_h)
            cublas_ms = cupy_time_ms(cp, lambda: cp.matmul(ca, cb), repeat=7)
            cublas_mhz = sm_clock_mhz()
            del ca, cb
            cp.get_default_memory_pool().free_all_blocks()
        a, b, c = gm.Matrix.from_numpy(a_h), gm.Matrix.from_numpy(b_h), gm.Matrix.empty(m, n)
        chosen = plan(m, n, k, sms)
        timings = []
        for p in sorted({*candidates(m, n, k), chosen}, key=lambda p: (p.algorithm, p.splits)):
            ms = time_ms(lambda: run_plan(p, a, b, c), warmup=2, repeat=7)
            timings.append({"algorithm": p.algorithm, "splits": p.splits, "k_chunk": p.k_chunk, "ms": ms,
                            "tflops": flop / ms / 1e9, "ratio_cublas": cublas_ms / ms if cublas_ms else None})
        best = min(timings, key=lambda t: t["ms"])
        picked = next(t for t in timings if (t["algorithm"], t["splits"]) == (chosen.algorithm, chosen.splits))
        mhz = sm_clock_mhz()
        rows.append([f"{m}x{n}x{k}", f"{best['algorithm']}/{best['splits']}", best["tflops"],
                     f"{chosen.algorithm}/{chosen.splits}", picked["tflops"], best["ms"] / picked["ms"],
                     flop / cublas_ms / 1e9 if cublas_ms else None, cublas_ms / best["ms"] if cublas_ms else None,
                     cublas_mhz, mhz])
        records.append({"M": m, "N": n, "K": k, "model_pick": [chosen.algorithm, chosen.splits],
                        "cublas_ms": cublas_ms, "cublas_sm_mhz": cublas_mhz, "sm_mhz_after": mhz, "timings": timings})
        for x in (a, b, c):
            x.free()
        per_kernel = {}
        for t in timings:
            if t["ms"] < per_kernel.get(t["algorithm"], (1e9,))[0]:
                per_kernel[t["algorithm"]] = (t["ms"], t["splits"])
        print(f"{m}x{n}x{k}: " + ", ".join(f"{name}/{s} {flop / ms / 1e9:.1f}" for name, (ms, s) in per_kernel.items())
              + (f" | cuBLAS {flop / cublas_ms / 1e9:.1f}" if cublas_ms else ""), flush=True)
    print_table("fast matmul: best measured plan vs the model's pick (TFLOP/s)",
                ["M x N x K", "best", "TFLOP/s", "model", "TFLOP/s", "model/best", "cuBLAS", "best/cuBLAS",
                 "cuBLAS MHz", "MHz"], rows)
    write_json("matmul-tuning" + (f"-{args.tag}" if args.tag else ""), {
        "anchor": "cuBLAS FP32 via CuPy cupy.matmul, same process, same inputs",
        "timing": "CUDA events, 30 ms warm-up, median of 7 runs", "shapes": records})


if __name__ == "__main__":
    main()
