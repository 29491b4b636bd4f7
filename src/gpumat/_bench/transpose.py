"""`python -m gpumat bench transpose`: every variant against the device-to-device copy of the same
bytes (the ceiling) and, when importable, CuPy's transpose into a new C-order array.

GB/s counts bytes read plus bytes written (2 x the matrix), as the copy figure does.
"""
from __future__ import annotations

import numpy as np

from ..matrix import Matrix
from ..transpose import ALGORITHMS, VARIANTS, choose_algorithm, transpose
from .common import copy_gbps, cupy, cupy_time_ms, print_table, time_ms, write_json

SIZES = [(4096, 4096), (8192, 8192), (16384, 16384), (3001, 17011)]


def _host(rows: int, cols: int) -> np.ndarray:
    return (np.random.default_rng(0).random((rows, cols), dtype=np.float32) + np.float32(0.5))


def run(args=None) -> dict:
    repeat = int(getattr(args, "repeat", None) or 20)
    sizes = getattr(args, "sizes", None) or SIZES
    cp = cupy()
    results, rows_out = [], []
    for rows, cols in sizes:
        nbytes = rows * cols * 4
        host = _host(rows, cols)
        copy = copy_gbps(nbytes, repeat=repeat)
        entry = {"rows": rows, "cols": cols, "bytes_moved": 2 * nbytes, "copy_gbps": copy,
                 "auto": choose_algorithm(rows, cols), "variants": {}}
        a = Matrix.from_numpy(host)
        out = Matrix.empty(cols, rows)
        try:
            transpose(a, out=out)
            assert np.array_equal(out.to_numpy(), host.T), "transpose gave a wrong result"
            for name in VARIANTS:
                ms = time_ms(lambda: transpose(a, out=out, algorithm=name), repeat=repeat)
                entry["variants"][name] = {"ms": ms, "gbps": 2 * nbytes / ms / 1e6}

            def fresh():  # what a user of A.T pays: a new output each call (pool allocation) and its release
                transpose(a).free()

            ms = time_ms(fresh, repeat=repeat)
            entry["variants"]["auto (new out)"] = {"ms": ms, "gbps": 2 * nbytes / ms / 1e6}
        finally:
            a.free()
            out.free()
        if cp is not None:
            da = cp.asarray(host)
            ms = cupy_time_ms(cp, lambda: cp.ascontiguousarray(da.T), repeat=repeat)
            entry["cupy"] = {"ms": ms, "gbps": 2 * nbytes / ms / 1e6}
            del da
            cp.get_default_memory_pool().free_all_blocks()
        results.append(entry)
        for name, r in entry["variants"].items():
            rows_out.append([f"{rows}x{cols}", name, r["ms"], r["gbps"], r["gbps"] / copy])
        if "cupy" in entry:
            c = entry["cupy"]
            rows_out.append([f"{rows}x{cols}", "cupy a.T copy", c["ms"], c["gbps"], c["gbps"] / copy])
        rows_out.append([f"{rows}x{cols}", "copy (ceiling)", 2 * nbytes / copy / 1e6, copy, 1.0])
    print_table("transpose, float32: GB/s = (bytes read + written) / time",
                ["shape", "variant", "ms", "GB/s", "x copy"], rows_out)
    payload = {"algorithms": list(ALGORITHMS), "results": results}
    if not getattr(args, "no_json", False):
        write_json("transpose", payload)
    return payload
