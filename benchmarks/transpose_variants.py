#!/usr/bin/env python3
"""Every transpose kernel on the shapes where `auto` falls short of the copy, in every dtype: the data
behind the planner's choices (gpumat.transpose.choose_algorithm).

For each (dtype, shape), each algorithm `gm.transpose(..., algorithm=name)` takes is timed queued,
interleaved with the copy of the same bytes (as in `bench transpose`); `ratio` is the copy's time over
the kernel's.
Prints a table, and writes the cases (each with every algorithm's ratio and auto's pick) as JSON to the
file named.

    PYTHONPATH=src python3 benchmarks/transpose_variants.py transpose-variants.json [DTYPE ...]
"""

from __future__ import annotations

import json
import sys

import numpy as np

import gpumat as gm
from gpumat._bench.common import environment, print_table, queued_ms, warm_clocks
from gpumat._dtypes import suffix
from gpumat.runtime import memops
from gpumat.transpose import ALGORITHMS, choose_algorithm

SHAPES = [
    (3001, 17011),
    (2048, 2048),
    (11585, 11585),
    (8192, 8192),
    (200000, 24),
    (24, 200000),
    (100000, 37),
    (37, 100000),
    (63, 266305),
    (64, 262144),
    (127, 132104),
    (32, 524288),
    (23170, 23170),
    (335544, 100),
    (100, 335544),
    (264208, 127),
]
DTYPES = ("float32", "float64", "float16")  # bfloat16 runs float16's code (the kernels move bits)
CHECK_UP_TO = 4 << 20  # bytes: smaller cases are checked against numpy for every kernel first


def case(dtype: str, rows: int, cols: int) -> dict:
    a = gm.Matrix.empty(rows, cols, dtype=dtype)
    out = gm.Matrix.empty(cols, rows, dtype=dtype)
    nbytes = rows * cols * a.itemsize
    host = np.random.default_rng(0).standard_normal((rows, cols)).astype(a.dtype) if nbytes <= CHECK_UP_TO else None
    try:

        def copy():
            memops.copy_device_2d(out.elements, nbytes, a.elements, nbytes, nbytes, 1, 0)

        found = {}
        for name in ALGORITHMS:
            try:
                gm.transpose(a, out=out, algorithm=name)
            except ValueError:  # a strip kernel on a shape it does not take
                continue
            if host is not None:
                with gm.Matrix.from_numpy(host) as src:
                    gm.transpose(src, out=out, algorithm=name)
                    expected = np.ascontiguousarray(host.T).view(np.uint8)
                    assert np.array_equal(out.to_numpy().view(np.uint8), expected), name
            kernel_ms, copy_ms = queued_ms(lambda name=name: gm.transpose(a, out=out, algorithm=name), copy)
            found[name] = copy_ms / kernel_ms
        pick = choose_algorithm(rows, cols, out.elements, rows, suffix(a.dtype), a.elements, cols)
        return {"dtype": dtype, "rows": rows, "cols": cols, "auto_picks": pick, "ratio": found}
    finally:
        a.free()
        out.free()


def main() -> None:
    warm_clocks()
    cases = [case(dt, r, c) for dt in sys.argv[2:] or DTYPES for r, c in SHAPES]
    names = list(ALGORITHMS)
    print_table(
        "transpose kernels: copy time / kernel time, queued",
        ["dtype", "A", "auto picks", *names],
        [[c["dtype"], f"{c['rows']}x{c['cols']}", c["auto_picks"], *(c["ratio"].get(n) for n in names)] for c in cases],
    )
    with open(sys.argv[1], "w") as f:
        json.dump({**environment(), "cases": cases}, f, indent=1)


if __name__ == "__main__":
    main()
