"""`python -m gpumat bench dot`: gm.dot from 2^10 to 2^28 elements in every dtype, against a device-to-device
copy of the same bytes (the ceiling) and, where importable, PyTorch's `(x * y).sum().item()` (cuBLAS-free
and as a user writes it) for the cost of one call.

- `ratio`: the copy's time over the dot's (GPU time between two CUDA events, the result's trip to the host
  included), where the copy moves as many bytes as the dot reads (half read, half written);
- `wall_us` and `pytorch_wall_us`: one call from Python to a float in hand, median of many;
  `ratio_pytorch` is PyTorch's over gpumat's (>= 1: gpumat is no slower).
The cases of up to 2^20 elements are checked against a float64 dot first.
"""

from __future__ import annotations

import numpy as np

from .. import _dtypes
from ..dot import dot
from ..matrix import Matrix
from ..runtime import memops
from .common import geometric_mean, print_table, queued_ms, time_ms, wall, write_json

DTYPES = ("float32", "float64", "float16", "bfloat16")
POWERS = tuple(range(10, 29, 2))
QUICK_POWERS = (10, 20, 24, 28)  # --quick: the sizes the docs' table shows, and the smallest
CHECK_UP_TO = 1 << 20


def _torch():
    try:
        import torch

        return torch if torch.cuda.is_available() else None
    except Exception:
        return None


def _shape(n: int) -> tuple[int, int]:
    side = 1 << ((n.bit_length() - 1) // 2)
    return n // side, side


def _checked(x: Matrix, y: Matrix, shape, dtype: np.dtype) -> None:
    g = np.random.default_rng(shape[0])
    hx, hy = (g.uniform(-1, 1, shape).astype(dtype) for _ in range(2))
    with Matrix.from_numpy(hx) as cx, Matrix.from_numpy(hy) as cy:
        got = dot(cx, cy)
    ref = float(np.dot(hx.astype(np.float64).ravel(), hy.astype(np.float64).ravel()))
    assert abs(got - ref) <= 1e-9 * max(np.abs(hx.astype(np.float64)).sum(), 1.0), f"dot {shape} {dtype}: {got} {ref}"


def run_case(dtype_name: str, n: int, torch) -> dict:
    dtype = _dtypes.as_dtype(dtype_name)
    shape = _shape(n)
    nbytes = n * dtype.itemsize
    with Matrix.empty(*shape, dtype=dtype) as x, Matrix.empty(*shape, dtype=dtype) as y:
        if n <= CHECK_UP_TO:
            _checked(x, y, shape, dtype)
        ms = time_ms(lambda: dot(x, y))
        (copy_ms,) = queued_ms(lambda: memops.copy_device_2d(y.elements, nbytes, x.elements, nbytes, nbytes, 1, 0))
        wall_us = wall(lambda: dot(x, y), repeat=15) * 1e6
    entry = {
        "dtype": dtype_name,
        "n": n,
        "shape": list(shape),
        "bytes_read": 2 * nbytes,
        "ms": ms,
        "copy_ms": copy_ms,
        "read_gbps": 2 * nbytes / ms / 1e6,
        "ratio": copy_ms / ms,
        "wall_us": wall_us,
    }
    if torch is not None:
        tdtype = getattr(torch, dtype_name)
        tx, ty = (torch.rand(n, device="cuda", dtype=tdtype) for _ in range(2))
        entry["pytorch_wall_us"] = wall(lambda: (tx * ty).sum().item(), repeat=15) * 1e6
        entry["ratio_pytorch"] = entry["pytorch_wall_us"] / wall_us
        del tx, ty
        torch.cuda.empty_cache()
    return entry


def run(args=None) -> dict:
    quick = bool(getattr(args, "quick", False))
    torch = _torch()
    powers = QUICK_POWERS if quick else POWERS
    results = [run_case(dt, 1 << p, torch) for dt in DTYPES for p in powers]
    print_table(
        "dot: ratio = copy time / dot time (the copy moves as many bytes as the dot reads); "
        "wall = one call from Python, the float in hand",
        ["dtype", "n", "us", "read GB/s", "ratio", "wall us", "PyTorch wall us", "PyTorch / gpumat"],
        [
            [
                r["dtype"],
                f"2^{r['n'].bit_length() - 1}",
                r["ms"] * 1e3,
                r["read_gbps"],
                r["ratio"],
                r["wall_us"],
                r.get("pytorch_wall_us"),
                r.get("ratio_pytorch"),
            ]
            for r in results
        ],
    )
    summary = {
        dtype: {
            "geometric_mean_ratio": geometric_mean([r["ratio"] for r in results if r["dtype"] == dtype]),
            "geometric_mean_ratio_pytorch": geometric_mean(
                [r.get("ratio_pytorch") for r in results if r["dtype"] == dtype]
            ),
        }
        for dtype in DTYPES
    }
    payload = {
        "timing": "ms: median of single calls between CUDA events (the result's way to the host included); "
        "copy: queued, median per call; wall: median of 15 calls from Python",
        "anchor": "cuMemcpyDtoDAsync moving as many bytes as the dot reads, and PyTorch's (x * y).sum().item(), "
        "in the same run",
        "summary": summary,
        "results": results,
    }
    if not getattr(args, "no_json", False):
        write_json("dot", payload)
    return payload
