"""Narrow strips (A of 64 MiB with 2-63 columns, contiguous, into a packed B) moved by each kernel that takes
them, against a device-to-device copy of the same bytes, queued, interleaved (bench's queued_ms): which one
auto should take at each width.

    GPUMAT_RESULTS=DIR PYTHONPATH=src python3 benchmarks/probe_transpose_strips.py [--dtype D] [--odd-rows]

--dtype: int8 (the default), float16 or bfloat16. --odd-rows gives A an odd number of rows, so that B's rows
(packed) fall off 4-byte words every other row: the 2-byte parity strips' case. Writes
probe-transpose-strips-<dtype>[-odd-rows]-<device>-<date>.json; `ratio` is the copy's time over the kernel's.
"""

from __future__ import annotations

import argparse

import gpumat as gm
from gpumat._bench.common import environment, ratios_text, transposes_against_copy, write_json

WIDTHS = (2, 3, 8, 17, 24, 31, 32, 36, 37, 40, 48, 55, 56, 62, 63)
ALGORITHMS = ("narrow_cols", "sector_aligned", "tiled_rect64", "auto")
STRIP_BYTES = 1 << 26


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", default="int8", choices=("int8", "float16", "bfloat16"))
    parser.add_argument("--odd-rows", action="store_true", help="an odd number of rows: B's rows off words")
    args = parser.parse_args()
    itemsize = 1 if args.dtype == "int8" else 2
    rows_out = []
    for w in WIDTHS:
        rows = STRIP_BYTES // (w * itemsize)
        rows += (rows % 2 == 0) if args.odd_rows else -(rows % 2)
        x = gm.Matrix.empty(rows, w, dtype=args.dtype)
        out = gm.Matrix.empty(w, rows, dtype=args.dtype)
        nbytes = rows * w * itemsize
        row = {"rows": rows, "cols": w, "bytes": nbytes}
        row.update(transposes_against_copy(x, out, ALGORITHMS))
        rows_out.append(row)
        print(f"{w:3d} columns: " + ratios_text(row, ALGORITHMS), flush=True)
        x.free()
        out.free()
    write_json(
        f"probe-transpose-strips-{args.dtype}" + ("-odd-rows" if args.odd_rows else ""),
        {
            **environment(),
            "dtype": args.dtype,
            "odd_rows": args.odd_rows,
            "anchor": "cuMemcpyDtoDAsync of the same bytes, queued, in the same run",
            "timing": "queued_ms: batches of back-to-back calls between CUDA events, median of 5, interleaved",
            "note": "narrow_cols resolves to the fastest strip kernel that accepts the operands",
            "cases": rows_out,
        },
    )


if __name__ == "__main__":
    main()
