"""`python -m gpumat bench outofcore`: products of host arrays larger than the memory allowed on the GPU.

For each shape (float32, numpy in, numpy out): the same product fully in device memory (operands
already there: the compute floor), gpumat's out-of-core product under memory limits of 1/2 .. 1/16 of
what the operands and the result need, on one GPU and, where there are several, on all of them; and the
transfer floor (A, B and C over the pinned copy bandwidth measured in the same run).
"""
from __future__ import annotations

import statistics
import time

import numpy as np

import gpumat as gm

from .common import environment, print_table, time_ms, write_json

SHAPES = [(16384, 16384, 16384), (16384, 16384, 256)]
QUICK_SHAPES = [(8192, 8192, 8192), (8192, 8192, 256)]


def _wall(fn, repeat: int = 3) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _pinned_gbps(nbytes: int = 1 << 30) -> float:
    host = gm.pinned_empty((nbytes // 4,), np.float32)
    host[...] = 1
    m = gm.Matrix.from_numpy(host)
    t = _wall(lambda: m.to_numpy(out=host.reshape(1, -1)), repeat=5)
    m.free()
    return nbytes / t / 1e9


def run(args) -> dict:
    quick = getattr(args, "quick", False)
    rng = np.random.default_rng(3)
    gpus = gm.device_count()
    bandwidth = _pinned_gbps()
    records, rows = [], []
    for m, n, k in QUICK_SHAPES if quick else SHAPES:
        a = rng.random((m, k), dtype=np.float32)
        b = rng.random((k, n), dtype=np.float32)
        out = np.empty((m, n), np.float32)
        data = (a.nbytes + b.nbytes + out.nbytes)
        with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, gm.Matrix.empty(m, n) as C:
            compute = time_ms(lambda: gm.matmul(A, B, out=C), repeat=5) / 1e3
        floor = max(compute, data / (bandwidth * 1e9))
        entry = {"M": m, "N": n, "K": k, "data_bytes": data, "in_device_s": compute,
                 "transfer_floor_s": data / (bandwidth * 1e9), "pinned_gbps": bandwidth, "runs": []}
        for share in (2, 4, 8, 16):
            limit = data // share
            for devices in ([0], list(range(gpus))) if gpus > 1 else ([0],):
                t = _wall(lambda: gm.matmul(a, b, out=out, memory_limit=limit, devices=devices))
                entry["runs"].append({"limit_bytes": limit, "share": share, "gpus": len(devices), "seconds": t,
                                      "over_in_device": t / compute, "over_floor": t / floor})
                rows.append([f"{m}x{n}x{k}", f"1/{share}", len(devices), t, compute, t / compute, t / floor])
        ref = a[:64].astype(np.float64) @ b.astype(np.float64)
        entry["rel_error_first_rows"] = float(np.linalg.norm(out[:64] - ref) / np.linalg.norm(ref))
        records.append(entry)
    print_table(f"out-of-core float32 matmul (numpy in, numpy out); pinned copies {bandwidth:.1f} GB/s",
                ["M x N x K", "limit", "GPUs", "seconds", "in-device s", "over in-device", "over floor"], rows)
    env = environment()
    print(f"\n{env['device']} x{gpus}, {env['date']}")
    return write_json("outofcore" if gpus == 1 else f"outofcore-{gpus}gpu", {"shapes": records})
