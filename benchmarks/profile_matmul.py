#!/usr/bin/env python3
"""One fast-matmul launch to profile: `ncu --kernel-name regex:sgemm python3 benchmarks/profile_matmul.py M N K [algorithm]`."""
import sys

import numpy as np

import gpumat as gm

m, n, k = (int(x) for x in sys.argv[1:4])
algorithm = sys.argv[4] if len(sys.argv) > 4 else "auto"
rng = np.random.default_rng(0)
A = gm.Matrix.from_numpy(rng.uniform(-1, 1, (m, k)).astype(np.float32))
B = gm.Matrix.from_numpy(rng.uniform(-1, 1, (k, n)).astype(np.float32))
C = gm.Matrix.empty(m, n)
for _ in range(3):
    gm.matmul(A, B, out=C, algorithm=algorithm)
gm.synchronize()
