"""Dtype conversion kernels (cuda/convert.cu): dst = src converted, over a strided 2-D region.

CONVERT_KERNELS[(src, dst)] for every ordered pair of distinct dtypes among DTYPES; arguments
(src, dst, rows, cols, lds, ldd), strides in elements. Rounding is to nearest even, once (values go
through double, exact for every source); NaN and +-Inf are preserved. Same-dtype copies are cuMemcpy2D.
"""
from __future__ import annotations

from ._geometry import MAX_GRID_YZ, cdiv
from ._kernels import Kernel

DTYPES = ("f32", "f64", "f16", "bf16")
SIGNATURE = "PPqqqq"  # src, dst, rows, cols, lds, ldd
BLOCK = (32, 8, 1)
COLS_PER_BLOCK = 128  # each thread converts four elements 32 columns apart

CONVERT_KERNELS: dict[tuple[str, str], Kernel] = {
    (s, d): Kernel("convert", f"convert_{s}_{d}", SIGNATURE) for s in DTYPES for d in DTYPES if s != d}


def grid(rows: int, cols: int) -> tuple[int, int, int]:
    """Launch grid for a rows x cols region (rows beyond 65535 x 8 are walked in a grid-stride loop)."""
    return max(cdiv(cols, COLS_PER_BLOCK), 1), max(min(cdiv(rows, BLOCK[1]), MAX_GRID_YZ), 1), 1


def launch(src_dtype: str, dst_dtype: str, src: int, dst: int, rows: int, cols: int, lds: int, ldd: int,
           stream=0) -> None:
    """Convert a rows x cols region from src (row stride lds) into dst (row stride ldd), on the device."""
    if rows and cols:
        CONVERT_KERNELS[(src_dtype, dst_dtype)](grid(rows, cols), BLOCK, src, dst, rows, cols, lds, ldd,
                                                stream=stream)
