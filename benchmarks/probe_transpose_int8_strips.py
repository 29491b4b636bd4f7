"""1-byte strips the other kernels' contracts leave to the tiles or the byte strips, each kernel that takes
them against a device-to-device copy of the same bytes, queued, interleaved (bench's queued_ms):

  rows:    an A of 2-63 rows into a packed result that starts off 16 bytes (a view one row into a buffer),
           which narrow_rows_chunks refuses;
  columns: a contiguous A of 64-127 columns into a result whose rows start off 4-byte words (an odd
           number of rows), which quads128 refuses.

    GPUMAT_RESULTS=DIR PYTHONPATH=src python3 benchmarks/probe_transpose_int8_strips.py

"narrow_rows" and "narrow_cols" resolve to the fastest strip kernel that accepts the operands (here
narrow_rows_quads16k and narrow_cols_quads16k). Writes probe-transpose-int8-strips-<device>-<date>.json;
`ratio` is the copy's time over auto's.
"""

from __future__ import annotations

import gpumat as gm
from gpumat._bench.common import environment, ratios_text, transposes_against_copy, write_json

HEIGHTS = (2, 3, 8, 17, 24, 31, 32, 37, 48, 63)
WIDTHS = (64, 65, 72, 80, 96, 100, 112, 127)
SIZES = (1 << 26, 1 << 24)
ALGORITHMS = {
    "rows": ("auto", "narrow_rows", "tiled_rect64", "sector_aligned"),
    "columns": ("auto", "narrow_cols", "tiled_rect64", "sector_aligned", "sector_quads128"),
}


def _case(kind: str, rows: int, cols: int) -> dict:
    x = gm.Matrix.empty(rows, cols, dtype="int8")
    if kind == "rows":
        whole = gm.Matrix.empty(cols + 1, rows, dtype="int8")
        out = whole[1:, :]  # packed, `rows` bytes into the buffer
    else:
        whole = out = gm.Matrix.empty(cols, rows, dtype="int8")
    nbytes = rows * cols
    algorithms = ALGORITHMS[kind]
    row = {"kind": kind, "rows": rows, "cols": cols, "bytes": nbytes}
    row.update(transposes_against_copy(x, out, algorithms))
    print(
        f"{kind:7} {nbytes >> 20:3d} MiB {rows} x {cols}: " + ratios_text(row, algorithms),
        flush=True,
    )
    x.free()
    whole.free()
    return row


def main() -> None:
    cases = []
    for size in SIZES:
        for h in HEIGHTS:
            cases.append(_case("rows", h, size // h))
        for w in WIDTHS:
            rows = size // w
            cases.append(_case("columns", rows + (rows % 2 == 0), w))  # an odd number of rows
    write_json(
        "probe-transpose-int8-strips",
        {
            **environment(),
            "anchor": "cuMemcpyDtoDAsync of the same bytes, queued, in the same run",
            "timing": "queued_ms: batches of back-to-back calls between CUDA events, median of 5, interleaved",
            "cases": cases,
        },
    )


if __name__ == "__main__":
    main()
