"""One 4096^3 float64 product per named gpumat variant, then cuBLAS DGEMM through CuPy, for Nsight Compute:

    ncu --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
        -k regex:"dmma|xmma" python3 benchmarks/profile_f64.py dmma128x64 dmma128x128
"""
import sys

import numpy as np

import gpumat as gm

n = 4096
rng = np.random.default_rng(0)
a, b = rng.uniform(-1, 1, (n, n)), rng.uniform(-1, 1, (n, n))
with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, gm.Matrix.empty(n, n, dtype=np.float64) as C:
    for name in sys.argv[1:]:
        gm.matmul(A, B, out=C, algorithm=name)
    gm.synchronize()
try:
    import cupy as cp
    ca, cb = cp.asarray(a), cp.asarray(b)
    cp.matmul(ca, cb)
    cp.cuda.Device().synchronize()
except ImportError:
    pass
