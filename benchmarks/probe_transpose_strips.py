"""1-byte strips (A of 64 MiB with 2-63 columns, contiguous, into a packed B) moved by each kernel that takes
them, against a device-to-device copy of the same bytes, queued, interleaved (bench's queued_ms): which one
auto should take at each width.

    GPUMAT_RESULTS=DIR PYTHONPATH=src python3 benchmarks/probe_transpose_strips.py

Writes probe-transpose-strips-<device>-<date>.json; `ratio` is the copy's time over the kernel's.
"""

from __future__ import annotations

import numpy as np

import gpumat as gm
from gpumat._bench.common import environment, queued_ms, write_json
from gpumat.runtime import memops

WIDTHS = (2, 3, 8, 17, 24, 31, 32, 37, 40, 48, 55, 56, 63)
ALGORITHMS = ("narrow_cols", "sector_aligned", "tiled_rect64", "auto")  # narrow_cols: narrow_cols_quads16k


def main() -> None:
    rows_out = []
    for w in WIDTHS:
        rows = (1 << 26) // w
        x = gm.Matrix.empty(rows, w, dtype=np.int8)
        out = gm.Matrix.empty(w, rows, dtype=np.int8)
        nbytes = rows * w
        fns = [lambda alg=alg: gm.transpose(x, out=out, algorithm=alg) for alg in ALGORITHMS]
        copy_ms, *times = queued_ms(
            lambda: memops.copy_device_2d(out.elements, nbytes, x.elements, nbytes, nbytes, 1, 0), *fns
        )
        row = {"rows": rows, "cols": w, "bytes": nbytes, "copy_ms": copy_ms}
        row.update({f"{alg}_ms": t for alg, t in zip(ALGORITHMS, times, strict=True)})
        row.update({f"{alg}_ratio": copy_ms / t for alg, t in zip(ALGORITHMS, times, strict=True)})
        row["ratio"] = row["auto_ratio"]
        rows_out.append(row)
        print(f"{w:3d} columns: " + ", ".join(f"{alg} {row[alg + '_ratio']:.3f}" for alg in ALGORITHMS), flush=True)
        x.free()
        out.free()
    write_json(
        "probe-transpose-strips",
        {
            **environment(),
            "anchor": "cuMemcpyDtoDAsync of the same bytes, queued, in the same run",
            "timing": "queued_ms: batches of back-to-back calls between CUDA events, median of 5, interleaved",
            "note": "int8; narrow_cols resolves to narrow_cols_quads16k (A contiguous and 16-byte aligned)",
            "cases": rows_out,
        },
    )


if __name__ == "__main__":
    main()
