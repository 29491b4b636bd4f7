"""`python -m gpumat bench transpose`: gm.transpose against a device-to-device copy of the same bytes (the
ceiling), over the shapes users transpose, in every dtype (int8 standing for the 1-byte ones, FP8 too):

- strips: 1-128 columns (and the same as rows), odd widths among them, 64 MiB each;
- squares from 1 MiB to 4 GiB, and odd shapes: 3001 x 17011, 8191 x 8193, 1001 x 1003 (rows of B off the
  32-byte sectors, and one in the L2 cache).

Each case is timed two ways, the copy alike and interleaved with it: queued (calls back to back between
two CUDA events, per call) and one call on an idle GPU (nothing queued before it; an event before and
after). `ratio` is the
copy's time over the transpose's, queued (>= 1 beats the copy); `ratio_one_call` the same for one call.
GB/s counts bytes read plus bytes written. The cases of up to 4 MiB are checked against numpy first.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _dtypes
from ..matrix import Matrix
from ..runtime import memops
from ..transpose import choose_algorithm, transpose
from .common import geometric_mean, idle_call_ms, print_table, queued_ms, warm_clocks, write_json

DTYPES = ("float32", "float64", "float16", "bfloat16", "int8")
WIDTHS = (1, 2, 3, 8, 17, 24, 31, 32, 37, 63, 64, 100, 127, 128)
STRIP_BYTES = 64 << 20
SQUARE_BYTES = (1 << 20, 16 << 20, 256 << 20, 1 << 30, 4 << 30)
ODD = ((3001, 17011), (8191, 8193), (1001, 1003))
CHECK_UP_TO = 4 << 20  # bytes: cases this small are checked against numpy before they are timed


def shapes(itemsize: int, quick: bool = False) -> list[tuple[str, int, int]]:
    """(shape class, rows, cols) of A for one dtype."""
    widths = (1, 17, 64) if quick else WIDTHS
    strip = (STRIP_BYTES >> 3 if quick else STRIP_BYTES) // itemsize
    found = []
    for w in widths:
        found += [("narrow columns", strip // w, w), ("narrow rows", w, strip // w)]
    for nbytes in SQUARE_BYTES[:2] if quick else SQUARE_BYTES:
        side = math.isqrt(nbytes // itemsize)
        found.append(("square", side, side))
    found += [("odd", *shape) for shape in (ODD[:1] if quick else ODD)]
    return found


def _checked(a: Matrix, out: Matrix, rows: int, cols: int, dtype: np.dtype) -> None:
    host = np.random.default_rng(rows * 131 + cols).standard_normal((rows, cols)).astype(dtype)
    with Matrix.from_numpy(host, dtype=dtype) as src:
        transpose(src, out=out)
        assert np.array_equal(out.to_numpy().view(np.uint8), np.ascontiguousarray(host.T).view(np.uint8)), (
            f"transpose {rows} x {cols} {dtype} gave a wrong result"
        )
    transpose(a, out=out)


def run_case(dtype_name: str, kind: str, rows: int, cols: int) -> dict:
    dtype = _dtypes.as_storage_dtype(dtype_name)
    nbytes = rows * cols * dtype.itemsize
    with Matrix.empty(rows, cols, dtype=dtype) as a, Matrix.empty(cols, rows, dtype=dtype) as out:
        if nbytes <= CHECK_UP_TO:
            _checked(a, out, rows, cols, dtype)

        def copy():  # the same bytes, A's block into B's
            memops.copy_device_2d(out.elements, nbytes, a.elements, nbytes, nbytes, 1, 0)

        def call():
            transpose(a, out=out)

        queued, one_call = queued_ms(call, copy), idle_call_ms(call, copy)
        times = {
            "transpose_ms": queued[0],
            "copy_ms": queued[1],
            "transpose_one_call_ms": one_call[0],
            "copy_one_call_ms": one_call[1],
        }
        auto = choose_algorithm(rows, cols, out.elements, rows, _dtypes.suffix(dtype), a.elements, cols)
    return {
        "dtype": dtype_name,
        "class": kind,
        "rows": rows,
        "cols": cols,
        "bytes": nbytes,
        "auto": auto,
        **times,
        "gbps": 2 * nbytes / times["transpose_ms"] / 1e6,
        "copy_gbps": 2 * nbytes / times["copy_ms"] / 1e6,
        "ratio": times["copy_ms"] / times["transpose_ms"],
        "ratio_one_call": times["copy_one_call_ms"] / times["transpose_one_call_ms"],
    }


def run(args=None) -> dict:
    quick = bool(getattr(args, "quick", False))
    warm_clocks()
    results = []
    for dtype_name in DTYPES:
        itemsize = _dtypes.as_storage_dtype(dtype_name).itemsize
        results += [run_case(dtype_name, *shape) for shape in shapes(itemsize, quick)]
    rows_out = [
        [
            r["dtype"],
            f"{r['rows']} x {r['cols']}",
            r["auto"],
            r["transpose_ms"] * 1e3,
            r["gbps"],
            r["ratio"],
            r["transpose_one_call_ms"] * 1e3,
            r["ratio_one_call"],
        ]
        for r in results
    ]
    print_table(
        "transpose (auto) against a device-to-device copy of the same bytes: ratio = copy time / transpose time",
        ["dtype", "A", "kernel", "queued us", "GB/s", "ratio", "one call us", "ratio one call"],
        rows_out,
    )
    summary = {
        dtype: {
            "geometric_mean_ratio": geometric_mean([r["ratio"] for r in results if r["dtype"] == dtype]),
            "min_ratio": min(r["ratio"] for r in results if r["dtype"] == dtype),
            "geometric_mean_ratio_one_call": geometric_mean(
                [r["ratio_one_call"] for r in results if r["dtype"] == dtype]
            ),
            "min_ratio_one_call": min(r["ratio_one_call"] for r in results if r["dtype"] == dtype),
        }
        for dtype in DTYPES
    }
    payload = {
        "timing": "queued: median per call over batches of back-to-back calls between CUDA events; one call: "
        "median of single calls on an idle GPU, between CUDA events",
        "anchor": "cuMemcpyDtoDAsync of the same bytes, timed the same two ways in the same run",
        "summary": summary,
        "results": results,
    }
    if not getattr(args, "no_json", False):
        write_json("transpose", payload)
    return payload
