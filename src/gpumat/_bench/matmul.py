"""`python -m gpumat bench matmul`: every variant and cuBLAS (through CuPy) on the same inputs."""
from __future__ import annotations

import statistics
import subprocess
import time

import numpy as np

import gpumat as gm

from ..matmul import VARIANTS, choose_algorithm, plan
from .common import cupy, cupy_time_ms, print_table, time_ms, write_json

SHAPES = [  # (M, N, K)
    (1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (4097, 4097, 4097),
    (3001, 3011, 2999), (2137, 108, 1055), (16384, 16384, 256), (256, 256, 65536),
]
QUICK_SHAPES = [(1024, 1024, 1024), (2137, 108, 1055), (4097, 4097, 4097)]
TEACHING = ("naive", "tiled16", "tiled32", "tiled16x64")
TEACHING_MAX_FLOP = 2 * 4097**3  # the teaching kernels run at ~1-5% of the card: skip them on the largest shapes


def _latency_us(call, sync, calls: int = 2000, batches: int = 7) -> float:
    """End-to-end microseconds per call from Python (result allocation included), median of batches."""
    for _ in range(200):
        call()
    sync()
    per_call = []
    for _ in range(batches):
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        sync()
        per_call.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(per_call)


def sm_clock_mhz() -> int | None:
    """The SM clock nvidia-smi reports now (read right after a timed batch, while the GPU is still busy-clocked)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i",
                              str(gm.device().ordinal)], capture_output=True, text=True, timeout=10).stdout
        return int(out.split()[0])
    except Exception:
        return None


def cublas_kernels(cp, fn) -> list[str] | None:
    """Names of the kernels one call of fn launches, through PyTorch's profiler (CUPTI sees CuPy's launches
    too); None when PyTorch is not installed. Benchmarks only: it tells which cuBLAS kernel a ratio is against."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except Exception:
        return None
    try:
        cp.cuda.Device().synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            cp.cuda.Device().synchronize()
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        return list(dict.fromkeys(n for n in names if "memcpy" not in n.lower() and "memset" not in n.lower()))
    except Exception as err:  # a profiler that cannot start must not cost the benchmark
        return [f"unavailable: {type(err).__name__}"]


def run(args) -> dict:
    cp = cupy()
    quick = getattr(args, "quick", False)
    rng = np.random.default_rng(1)
    rows, records = [], []
    for m, n, k in (QUICK_SHAPES if quick else SHAPES):
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        flop = 2 * m * n * k
        repeat = 10
        cublas_ms = cublas_mhz = kernels = None
        if cp is not None:
            ca, cb = cp.asarray(a), cp.asarray(b)
            cublas_ms = cupy_time_ms(cp, lambda: cp.matmul(ca, cb), repeat=repeat)
            cublas_mhz = sm_clock_mhz()
            kernels = cublas_kernels(cp, lambda: cp.matmul(ca, cb))
            del ca, cb
            cp.get_default_memory_pool().free_all_blocks()
        p = plan(m, n, k, gm.device().sm_count)
        entry = {"M": m, "N": n, "K": k, "auto_picks": choose_algorithm(m, n, k), "auto_splits": p.splits,
                 "cublas_ms": cublas_ms, "cublas_tflops": flop / cublas_ms / 1e9 if cublas_ms else None,
                 "cublas_sm_mhz": cublas_mhz, "cublas_kernels": kernels, "variants": {}}
        names = ["auto"] + [v for v in VARIANTS if v not in TEACHING or flop <= TEACHING_MAX_FLOP]
        with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, gm.Matrix.empty(m, n) as C:
            for name in names:
                ms = time_ms(lambda: gm.matmul(A, B, out=C, algorithm=name), repeat=repeat)
                mhz = sm_clock_mhz() if name == "auto" else None
                tflops = flop / ms / 1e9
                ratio = cublas_ms / ms if cublas_ms else None
                entry["variants"][name] = {"ms": ms, "tflops": tflops, "ratio_cublas": ratio, "sm_mhz": mhz}
                rows.append([f"{m}x{n}x{k}", name, ms, tflops, entry["cublas_tflops"], ratio, mhz or cublas_mhz])
        records.append(entry)
    print_table("matmul float32 (TFLOP/s; ratio = cuBLAS time / gpumat time, >1 is faster than cuBLAS)",
                ["M x N x K", "variant", "ms", "TFLOP/s", "cuBLAS TFLOP/s", "ratio", "SM MHz"], rows)
    for r in records:
        print(f"cuBLAS kernel for {r['M']}x{r['N']}x{r['K']}: {r['cublas_kernels']} at {r['cublas_sm_mhz']} MHz")

    small = rng.uniform(-1, 1, (64, 64)).astype(np.float32)
    A = gm.Matrix.from_numpy(small)
    latency = {"gpumat_us": _latency_us(lambda: A @ A, gm.synchronize)}
    if cp is not None:
        ca = cp.asarray(small)
        latency["cupy_us"] = _latency_us(lambda: ca @ ca, cp.cuda.Device().synchronize)
    A.free()
    print_table("64 x 64 x 64 end to end from Python (result allocation included), us per call",
                ["gpumat", "CuPy"], [[latency["gpumat_us"], latency.get("cupy_us")]])
    payload = {"anchor": "cuBLAS FP32 via CuPy cupy.matmul (CUPY_TF32 unset), same process, same inputs",
               "timing": "CUDA events, 3 warm-ups, median of 10 runs",
               "clock": "sm_mhz: nvidia-smi's SM clock read right after the timed runs (cuBLAS and auto)",
               "cublas_kernels": "kernels one cupy.matmul launches, seen by torch.profiler (CUPTI)",
               "shapes": records, "latency_64": latency}
    write_json("matmul", payload)
    return payload
