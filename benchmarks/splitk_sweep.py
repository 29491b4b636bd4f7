"""Split-K counts against measured time for the skinny tensor-core products, to check the cost models of
_matmul_half.plan_seconds and _matmul_f64.plan_seconds: `python3 benchmarks/splitk_sweep.py` prints one
JSON line per (dtype, shape, variant) with the modelled pick and the time of every count that covers K.
Timing as the bench's (CUDA events, warm-up, median)."""
from __future__ import annotations

import json

import numpy as np

SHAPES = [(256, 256, 65536), (2137, 108, 1055), (1024, 1024, 1024)]
COUNTS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)


def chunks(k: int, align: int, least: int):
    for splits in COUNTS:
        k_chunk = k if splits == 1 else -(-(-(-k // splits)) // align) * align
        if splits == 1 or (-(-k // k_chunk) == splits and k_chunk >= least):
            yield splits, k_chunk


def main() -> None:
    import gpumat as gm
    from gpumat import _matmul_f64 as f64, _matmul_half as half
    from gpumat._bench.common import time_ms
    dev, rng = gm.device(), np.random.default_rng(3)
    for dtype in ("float16", "float64"):
        for m, n, k in SHAPES:
            A = gm.Matrix.from_numpy(rng.uniform(-1, 1, (m, k)), dtype=dtype)
            B = gm.Matrix.from_numpy(rng.uniform(-1, 1, (k, n)), dtype=dtype)
            C = gm.Matrix.empty(m, n, dtype=dtype)
            if dtype == "float64":
                for name in f64.AUTO:
                    picked = f64.plan_seconds(m, n, k, name, dev.sm_count)[1]
                    times = {s: time_ms(lambda: f64.run_plan(f64.Plan(name, s, c), A, B, C), repeat=15)
                             for s, c in chunks(k, f64.K_ALIGN, f64.MIN_K_CHUNK)}
                    print(json.dumps({"dtype": dtype, "shape": [m, n, k], "variant": name, "model": picked.splits,
                                      "ms": times}), flush=True)
            else:
                real = half.plan
                for name in half.VARIANTS:
                    times = {}
                    for s, c in chunks(k, half.VARIANTS[name].k_align, 4 * half.VARIANTS[name].k_align):
                        half.plan = lambda *args, s=s, c=c: (s, c)
                        half._launch.cache_clear()
                        times[s] = time_ms(lambda: gm.matmul(A, B, out=C, algorithm=name), repeat=15)
                    half.plan = real
                    half._launch.cache_clear()
                    print(json.dumps({"dtype": dtype, "shape": [m, n, k], "variant": name,
                                      "model": real(m, n, k, dev.sm_count, name)[0], "ms": times}), flush=True)
            for x in (A, B, C):
                x.free()


if __name__ == "__main__":
    main()
