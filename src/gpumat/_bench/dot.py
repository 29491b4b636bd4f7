"""`python -m gpumat bench dot`: gpumat.dot end to end (launch + the 8-byte result back to Python)
against the device-to-device copy and, when importable, cupy.dot (cuBLAS sdot).

GB/s counts bytes read (2 x 4 x n); "x copy" divides that by the copy's read+write GB/s, the ratio
ANCHORS.md uses. CuPy's dot leaves its result on the device, so its time has no device->host copy.
"""

from __future__ import annotations

import numpy as np

from ..dot import dot
from ..matrix import Matrix
from .common import copy_gbps, cupy, cupy_time_ms, print_table, time_ms, write_json

SIZES = [2**20, 2**24, 2**28]


def _shape(n: int) -> tuple[int, int]:
    side = 1 << ((n.bit_length() - 1) // 2)
    return (n // side, side) if side * (n // side) == n else (1, n)


def run(args=None) -> dict:
    repeat = int(getattr(args, "repeat", None) or 20)
    sizes = getattr(args, "sizes", None) or SIZES
    cp = cupy()
    g = np.random.default_rng(0)
    results, rows_out = [], []
    for n in sizes:
        shape = _shape(n)
        hx = g.random(shape, dtype=np.float32) + np.float32(0.5)
        hy = g.random(shape, dtype=np.float32) + np.float32(0.5)
        read = 2 * 4 * n
        copy = copy_gbps(4 * n, repeat=repeat)
        entry = {"n": n, "shape": list(shape), "bytes_read": read, "copy_gbps": copy}
        with Matrix.from_numpy(hx) as x, Matrix.from_numpy(hy) as y:
            got = dot(x, y)
            ref = float(np.dot(hx.astype(np.float64).ravel(), hy.astype(np.float64).ravel())) if n <= 2**24 else None
            entry["rel_error_vs_float64"] = abs(got - ref) / abs(ref) if ref else None
            ms = time_ms(lambda: dot(x, y), repeat=repeat)
            entry["gpumat"] = {"ms": ms, "gbps": read / ms / 1e6}
        if cp is not None:
            dx, dy = cp.asarray(hx.ravel()), cp.asarray(hy.ravel())
            ms = cupy_time_ms(cp, lambda: cp.dot(dx, dy), repeat=repeat)
            entry["cupy"] = {"ms": ms, "gbps": read / ms / 1e6}
            del dx, dy
            cp.get_default_memory_pool().free_all_blocks()
        results.append(entry)
        label = f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)
        rows_out.append(
            [
                label,
                "gpumat.dot",
                entry["gpumat"]["ms"],
                entry["gpumat"]["gbps"],
                entry["gpumat"]["gbps"] / copy,
                entry.get("cupy", {}).get("ms"),
            ]
        )
        if "cupy" in entry:
            rows_out.append(
                [label, "cupy.dot", entry["cupy"]["ms"], entry["cupy"]["gbps"], entry["cupy"]["gbps"] / copy, None]
            )
    print_table(
        "dot, float32: GB/s = bytes read / time; x copy = that / copy GB/s (read + written)",
        ["n", "impl", "ms", "GB/s", "x copy", "cupy ms"],
        rows_out,
    )
    payload = {"results": results}
    if not getattr(args, "no_json", False):
        write_json("dot", payload)
    return payload
