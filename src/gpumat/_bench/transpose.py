"""`python -m gpumat bench transpose`: every variant against the device-to-device copy of the same
bytes (the ceiling) and, when importable, CuPy's transpose into a new C-order array.

GB/s counts bytes read plus bytes written (2 x the matrix), as the copy figure does. For a shape whose
sides are not multiples of 32, the variants also run on views of the same matrices with their row strides
padded to multiples of 32 (rows "name [lda L, ldb M]"): the same bytes with every row 128-byte aligned,
which separates the cost of misaligned rows from everything else.
"""

from __future__ import annotations

import numpy as np

from ..matrix import Matrix
from ..transpose import ALGORITHMS, VARIANTS, choose_algorithm, transpose
from .common import copy_gbps, cupy, cupy_time_ms, print_table, time_ms, write_json

SIZES = [(4096, 4096), (8192, 8192), (16384, 16384), (3001, 17011)]
CHECK_EVERY_VARIANT_UP_TO = 1 << 26  # elements; above, only auto and the newest variant are checked


def _round_up(n: int, k: int) -> int:
    return -(-n // k) * k


def _padded_strides(rows: int, cols: int, host: np.ndarray, repeat: int) -> dict:
    """Every variant on A and B as views with strides rounded up to multiples of 32 elements."""
    lda, ldb = _round_up(cols, 32), _round_up(rows, 32)
    padded = np.zeros((rows, lda), np.float32)
    padded[:, :cols] = host
    big_a, big_b = Matrix.from_numpy(padded), Matrix.empty(cols, ldb)
    del padded
    try:
        a, out = big_a[:, :cols], big_b[:, :rows]
        nbytes = rows * cols * 4
        found = {"lda": lda, "ldb": ldb, "variants": {}}
        for name in VARIANTS:
            transpose(a, out=out, algorithm=name)
            assert np.array_equal(out.to_numpy(), host.T), f"{name} gave a wrong result on padded strides"
            ms = time_ms(lambda: transpose(a, out=out, algorithm=name), repeat=repeat)
            found["variants"][name] = {"ms": ms, "gbps": 2 * nbytes / ms / 1e6}
        return found
    finally:
        big_a.free()
        big_b.free()


def _host(rows: int, cols: int) -> np.ndarray:
    return np.random.default_rng(0).random((rows, cols), dtype=np.float32) + np.float32(0.5)


def run(args=None) -> dict:
    repeat = int(getattr(args, "repeat", None) or 20)
    sizes = getattr(args, "sizes", None) or SIZES
    cp = cupy()
    results, rows_out = [], []
    for rows, cols in sizes:
        nbytes = rows * cols * 4
        host = _host(rows, cols)
        copy = copy_gbps(nbytes, repeat=repeat)
        entry = {
            "rows": rows,
            "cols": cols,
            "bytes_moved": 2 * nbytes,
            "copy_gbps": copy,
            "auto": choose_algorithm(rows, cols, 0, rows),
            "variants": {},
        }
        a = Matrix.from_numpy(host)
        out = Matrix.empty(cols, rows)
        try:
            transpose(a, out=out)
            assert np.array_equal(out.to_numpy(), host.T), "transpose gave a wrong result"
            for name in VARIANTS:
                if name == "sector_aligned" or rows * cols <= CHECK_EVERY_VARIANT_UP_TO:
                    transpose(a, out=out, algorithm=name)
                    assert np.array_equal(out.to_numpy(), host.T), f"{name} gave a wrong result"
                ms = time_ms(lambda: transpose(a, out=out, algorithm=name), repeat=repeat)
                entry["variants"][name] = {"ms": ms, "gbps": 2 * nbytes / ms / 1e6}

            def fresh():  # what a user of A.T pays: a new output each call (pool allocation) and its release
                transpose(a).free()

            ms = time_ms(fresh, repeat=repeat)
            entry["variants"]["auto (new out)"] = {"ms": ms, "gbps": 2 * nbytes / ms / 1e6}
        finally:
            a.free()
            out.free()
        if rows % 32 or cols % 32:
            entry["padded_strides"] = _padded_strides(rows, cols, host, repeat)
        if cp is not None:
            da = cp.asarray(host)
            ms = cupy_time_ms(cp, lambda: cp.ascontiguousarray(da.T), repeat=repeat)
            entry["cupy"] = {"ms": ms, "gbps": 2 * nbytes / ms / 1e6}
            del da
            cp.get_default_memory_pool().free_all_blocks()
        results.append(entry)
        for name, r in entry["variants"].items():
            rows_out.append([f"{rows}x{cols}", name, r["ms"], r["gbps"], r["gbps"] / copy])
        if "padded_strides" in entry:
            pad = entry["padded_strides"]
            for name, r in pad["variants"].items():
                rows_out.append(
                    [
                        f"{rows}x{cols}",
                        f"{name} [lda {pad['lda']}, ldb {pad['ldb']}]",
                        r["ms"],
                        r["gbps"],
                        r["gbps"] / copy,
                    ]
                )
        if "cupy" in entry:
            c = entry["cupy"]
            rows_out.append([f"{rows}x{cols}", "cupy a.T copy", c["ms"], c["gbps"], c["gbps"] / copy])
        rows_out.append([f"{rows}x{cols}", "copy (ceiling)", 2 * nbytes / copy / 1e6, copy, 1.0])
    print_table(
        "transpose, float32: GB/s = (bytes read + written) / time",
        ["shape", "variant", "ms", "GB/s", "x copy"],
        rows_out,
    )
    payload = {"algorithms": list(ALGORITHMS), "results": results}
    if not getattr(args, "no_json", False):
        write_json("transpose", payload)
    return payload
