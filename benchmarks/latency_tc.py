"""Per-call cost of the tensor-core matmul paths from Python, against cuBLAS through PyTorch in the same
process: `python3 benchmarks/latency_tc.py` prints one JSON line. Each figure is the wall time of many
calls into a preallocated C followed by one synchronisation (the bench's _latency_us): on a tiny
product it is the launch path's cost, on a small one the larger of that and the GPU's time."""

from __future__ import annotations

import json

import numpy as np

SHAPES = [(64, 64, 64), (2137, 108, 1055), (256, 256, 65536), (1024, 1024, 1024)]


def main() -> None:
    import gpumat as gm
    from gpumat._bench.matmul import _latency_us as per_call_us

    try:
        import torch
    except ImportError:
        torch = None
    rng = np.random.default_rng(0)
    out = []
    for dtype in ("float16", "bfloat16", "float64"):
        for m, n, k in SHAPES:
            a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
            b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
            A, B = gm.Matrix.from_numpy(a, dtype=dtype), gm.Matrix.from_numpy(b, dtype=dtype)
            C = gm.Matrix.empty(m, n, dtype=dtype)
            row = {
                "dtype": dtype,
                "shape": [m, n, k],
                "gpumat_us": per_call_us(lambda: gm.matmul(A, B, out=C), gm.synchronize, calls=300),
            }
            if torch is not None:
                ta, tb = torch.from_dlpack(A), torch.from_dlpack(B)
                tc = torch.empty(m, n, dtype=getattr(torch, dtype), device="cuda")
                row["torch_us"] = per_call_us(lambda: torch.matmul(ta, tb, out=tc), torch.cuda.synchronize, calls=300)
            out.append(row)
            for x in (A, B, C):
                x.free()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
