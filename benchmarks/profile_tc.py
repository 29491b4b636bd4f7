"""One tensor-core product per named gpumat variant, then the same product in cuBLAS, for Nsight Compute:

    ncu --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis \
        -k regex:"dmma|mma|gemm|xmma|sm90" python3 benchmarks/profile_tc.py float64 4096 dmma128x64 dmma128x128

The first two arguments are the dtype (float16, bfloat16, float64) and the shape (N for N^3, or M,N,K);
the rest name gpumat variants. cuBLAS runs through PyTorch (CuPy has no bfloat16), when it is installed.
"""

import sys

import numpy as np

import gpumat as gm

dtype_name, shape = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
m, n, k = shape * 3 if len(shape) == 1 else shape
rng = np.random.default_rng(0)
a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
with (
    gm.Matrix.from_numpy(a, dtype=dtype_name) as A,
    gm.Matrix.from_numpy(b, dtype=dtype_name) as B,
    gm.Matrix.empty(m, n, dtype=dtype_name) as C,
):
    for name in sys.argv[3:]:
        gm.matmul(A, B, out=C, algorithm=name)
    gm.synchronize()
try:
    import torch

    ta = torch.from_numpy(a).to("cuda", getattr(torch, dtype_name))
    tb = torch.from_numpy(b).to("cuda", getattr(torch, dtype_name))
    torch.matmul(ta, tb)
    torch.cuda.synchronize()
except ImportError:
    pass
