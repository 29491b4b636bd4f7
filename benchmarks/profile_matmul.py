#!/usr/bin/env python3
"""Fast-matmul launches to profile, one per algorithm (and one cuBLAS call through CuPy with --cublas):

ncu --kernel-name regex:gemm python3 benchmarks/profile_matmul.py M N K [alg1,alg2,...] [--cublas]
"""

import sys

import numpy as np

import gpumat as gm

args = [x for x in sys.argv[1:] if not x.startswith("--")]
m, n, k = (int(x) for x in args[:3])
algorithms = args[3].split(",") if len(args) > 3 else ["auto"]
rng = np.random.default_rng(0)
a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
A, B, C = gm.Matrix.from_numpy(a), gm.Matrix.from_numpy(b), gm.Matrix.empty(m, n)
for algorithm in algorithms:
    gm.matmul(A, B, out=C, algorithm=algorithm)
gm.synchronize()
if "--cublas" in sys.argv:
    import cupy as cp

    ca, cb = cp.asarray(a), cp.asarray(b)
    cp.matmul(ca, cb)
    cp.cuda.Device().synchronize()
