"""1-byte matrices of 2-128 rows into a packed B: each row kernel of the transpose table that accepts the
operands, and the byte tiles, launched by their rows (the plan objects gm.transpose resolves to), against a
device-to-device copy of the same bytes, queued, interleaved (bench's queued_ms): which one auto should take.

    GPUMAT_RESULTS=DIR PYTHONPATH=src python3 benchmarks/probe_transpose_int8_row_kernels.py

Layouts: "packed" (A contiguous, B packed and 16-byte aligned: both strips take it), "b_view" (B one byte into
its buffer: narrow_rows_chunks refuses it). Every height of 2-63 and some past it at 64 and 16 MiB into the
packed B; a selection of heights at 64 MiB into the other, and at 4 MiB, 1 MiB and 256 KiB into both. Writes
probe-transpose-int8-row-kernels-<device>-<date>.json; each kernel's `<name>_ratio` is the copy's time over
the kernel's, `ratio` auto's (the kernel choose_algorithm names).
"""

from __future__ import annotations

import gpumat as gm
from gpumat._bench.common import environment, queued_ms, ratios_text, write_json
from gpumat.runtime import memops
from gpumat.transpose import KERNELS, choose_algorithm

EVERY_HEIGHT = (*range(2, 64), 65, 72, 80, 96, 100, 112, 127, 128)
SOME_HEIGHTS = (2, 3, 4, 5, 7, 8, 13, 16, 24, 31, 32, 37, 47, 48, 63, 65, 72, 96, 100, 127, 128)
ROW_KERNELS = ("narrow_rows_chunks", "narrow_rows_quads16k", "narrow_rows")
TILES = ("tiled_rect64", "sector_aligned")  # take any operands


def _case(layout: str, rows: int, nbytes_wanted: int) -> dict:
    cols = nbytes_wanted // rows
    lda = cols
    b_offset = int(layout == "b_view")
    x = gm.Matrix.empty(rows, lda, dtype="int8")
    y = gm.Matrix.empty(1, rows * cols + 16, dtype="int8")
    try:
        a, b, nbytes = x.elements, y.elements + b_offset, rows * cols
        kernels = [k for k in ROW_KERNELS if KERNELS[(k, "s8")].accepts(rows, cols, a, lda, b, rows)]
        if rows > 64 and "narrow_rows" in kernels:  # the byte strip's limit is its own
            kernels.remove("narrow_rows")
        kernels += TILES
        fns = [lambda: memops.copy_device_2d(b, nbytes, a, nbytes, nbytes, 1, 0)]
        for name in kernels:
            v = KERNELS[(name, "s8")]
            fns.append(lambda v=v: v.kernel(v.grid(rows, cols), v.block, a, b, rows, cols, lda, rows, 1, 0, 0))
        auto = choose_algorithm(rows, cols, b, rows, "s8", a, lda)
        v_auto = KERNELS[(auto, "s8")]
        fns.append(lambda: v_auto.kernel(v_auto.grid(rows, cols), v_auto.block, a, b, rows, cols, lda, rows, 1, 0, 0))
        copy_ms, *times = queued_ms(*fns)
    finally:
        x.free()
        y.free()
    row = {"layout": layout, "rows": rows, "cols": cols, "bytes": nbytes, "auto": auto, "copy_ms": copy_ms}
    for name, t in zip([*kernels, "auto"], times, strict=True):
        row[f"{name}_ms"] = t
        row[f"{name}_ratio"] = copy_ms / t
    row["ratio"] = row["auto_ratio"]
    print(
        f"{layout:7} {nbytes >> 20:3d} MiB {rows:4d} rows: "
        + ratios_text(row, kernels)
        + f"; auto ({auto}) {row['ratio']:.3f}",
        flush=True,
    )
    return row


def main() -> None:
    cases = [_case("packed", rows, size) for size in (1 << 26, 1 << 24) for rows in EVERY_HEIGHT]
    cases += [_case("b_view", rows, 1 << 26) for rows in SOME_HEIGHTS]
    for size in (1 << 22, 1 << 20, 1 << 18):
        cases += [_case(layout, rows, size) for layout in ("packed", "b_view") for rows in SOME_HEIGHTS]
    write_json(
        "probe-transpose-int8-row-kernels",
        {
            **environment(),
            "anchor": "cuMemcpyDtoDAsync of the same bytes, queued, in the same run",
            "timing": "queued_ms: batches of back-to-back calls between CUDA events, median of 5, interleaved",
            "cases": cases,
        },
    )


if __name__ == "__main__":
    main()
