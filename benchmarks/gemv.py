"""The matrix-vector kernels (gemv_n1, gemv_m1, gemv_m1bt, and for a few rows or columns gemv_n8/16,
gemv_m8/16, gemv_m8bt/16bt) against cuBLAS (CuPy's matmul), GPU time per
call (CUDA events, median), and the bandwidth each reaches (A or B read + C written): the figures that
replace the rows' provisional `bandwidth` (src/gpumat/matmul/variants.py). For each shape and dtype:
auto's plan, then the chosen row at every split count it allows (what blocks_per_sm and the split's
cost are fitted to). `python3 benchmarks/gemv.py [REPEAT]` prints a table and one JSON line."""

from __future__ import annotations

import json
import sys

import numpy as np

SHAPES = [  # (M, N, K, B given as W.T)
    (16384, 1, 16384, False),
    (4096, 1, 4096, False),
    (1024, 1, 16384, False),
    (1, 4096, 16384, False),
    (1, 16384, 16384, False),
    (1, 4096, 16384, True),
    (1, 1, 1 << 22, False),
    # a few rows or columns (the R rows); 32 rows stay on the GEMM tiles (auto's plan shows it)
    (8, 16384, 16384, False),
    (4096, 8, 4096, False),
    (16, 4096, 4096, False),
    (4096, 16, 4096, False),
    (3, 4096, 4096, False),
    (13, 12288, 4096, True),
    (32, 4096, 4096, False),
]
DTYPES = ("float32", "float16", "float64")


def main() -> None:
    import gpumat as gm
    from gpumat._bench.common import cupy, cupy_time_ms, print_table, time_ms
    from gpumat.matmul.engine import split_options, traffic

    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    cp = cupy()
    rng = np.random.default_rng(7)
    rows, out = [], []
    for m, n, k, trans in SHAPES:
        for dtype in DTYPES:
            a = rng.uniform(-1, 1, (m, k)).astype(dtype)
            w = rng.uniform(-1, 1, (n, k) if trans else (k, n)).astype(dtype)
            A, W = gm.Matrix.from_numpy(a), gm.Matrix.from_numpy(w)
            B = W.T if trans else W
            C = gm.Matrix.empty(m, n, dtype=dtype)
            auto = gm.matmul_plan(A, B, out=C)
            nbytes = traffic(auto.problem)
            cublas = None
            if cp is not None:
                ca, cw = cp.asarray(a), cp.asarray(w)
                cb = cw.T if trans else cw
                cublas = 1e3 * cupy_time_ms(cp, lambda: cp.matmul(ca, cb), repeat=repeat)
                del ca, cw, cb
            record = {"shape": [m, n, k], "b_trans": trans, "dtype": dtype, "auto": auto.algorithm}
            record.update(auto_splits=auto.splits, bytes=nbytes, cublas_us=cublas, splits={})
            for splits, k_chunk in split_options(auto.variant, k):
                p = gm.matmul_plan(A, B, out=C, algorithm=auto.algorithm, splits=splits, k_chunk=k_chunk)
                us = 1e3 * time_ms(lambda: gm.matmul(A, B, out=C, plan=p), repeat=repeat)
                record["splits"][splits] = {"us": us, "modelled_us": p.seconds * 1e6, "grid": p.grid}
                mark = "*" if splits == auto.splits else ""
                ratio = cublas / us if cublas else None
                rows.append(
                    [
                        f"{m}x{n}x{k}{' W.T' if trans else ''}",
                        dtype,
                        f"{auto.algorithm}{mark}",
                        splits,
                        us,
                        p.seconds * 1e6,
                        nbytes / us / 1e3,
                        cublas,
                        ratio,
                    ]
                )
            out.append(record)
            for x in (A, W, C):
                x.free()
    print_table(
        "matrix-vector products (* auto's split; GB/s: bytes read and written / time; ratio = cuBLAS / gpumat)",
        ["M x N x K", "dtype", "kernel", "splits", "us", "modelled us", "GB/s", "cuBLAS us", "ratio"],
        rows,
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
