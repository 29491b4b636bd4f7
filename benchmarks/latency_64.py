"""64 x 64 x 64 matmul end to end from Python (result allocation included), against CuPy in the same
process: the launch path's cost. `python3 benchmarks/latency_64.py [label]` prints one JSON line.

Each figure is the bench's: the median over batches of the wall time of 2000 calls followed by one
synchronisation, so it measures what a caller pays per call when the GPU keeps up."""

from __future__ import annotations

import json
import sys

import numpy as np


def main() -> None:
    import gpumat as gm
    from gpumat._bench.matmul import _latency_us as per_call_us  # the bench's own method, in either tree

    a = np.random.default_rng(0).uniform(-1, 1, (64, 64)).astype(np.float32)
    A = gm.Matrix.from_numpy(a)
    out = {
        "label": sys.argv[1] if len(sys.argv) > 1 else "gpumat",
        "gpumat_us": per_call_us(lambda: A @ A, gm.synchronize),
    }
    if hasattr(gm, "Stream") and "stream" in gm.matmul.__code__.co_varnames:
        s = gm.Stream()
        out["gpumat_explicit_stream_us"] = per_call_us(lambda: gm.matmul(A, A, stream=s), s.synchronize)
    C = gm.Matrix.empty(64, 64)
    out["gpumat_out_us"] = per_call_us(lambda: gm.matmul(A, A, out=C), gm.synchronize)
    H = gm.Matrix.from_numpy(a, dtype=np.float16)
    out["gpumat_float16_us"] = per_call_us(lambda: H @ H, gm.synchronize)
    D = gm.Matrix.from_numpy(a, dtype=np.float64)
    out["gpumat_float64_us"] = per_call_us(lambda: D @ D, gm.synchronize)
    try:
        import cupy as cp

        x = cp.asarray(a)
        out["cupy_us"] = per_call_us(lambda: x @ x, cp.cuda.Device().synchronize)
    except ImportError:
        pass
    print(json.dumps(out))


if __name__ == "__main__":
    main()
