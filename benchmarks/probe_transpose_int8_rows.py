"""1-byte matrices of 65-128 rows (64 and 16 MiB) into a packed B, A's rows on 4-byte words or off them: auto
(narrow_rows_quads16k where quads128 does not take the shape) against the byte and word tiles and a
device-to-device copy of the same bytes, queued, interleaved (bench's queued_ms).

    GPUMAT_RESULTS=DIR PYTHONPATH=src python3 benchmarks/probe_transpose_int8_rows.py

Writes probe-transpose-int8-rows-<device>-<date>.json; `ratio` is the copy's time over auto's.
"""

from __future__ import annotations

import gpumat as gm
from gpumat._bench.common import environment, ratios_text, transposes_against_copy, write_json

HEIGHTS = (65, 72, 96, 100, 127, 128)
ALGORITHMS = ("auto", "tiled_rect64", "sector_aligned", "quads128", "sector_quads128")
SIZES = (1 << 26, 1 << 24)


def main() -> None:
    cases = []
    for nbytes_wanted in SIZES:
        for rows in HEIGHTS:
            for on_words in (True, False):
                cols = nbytes_wanted // rows
                cols += (-cols % 4) if on_words else (cols % 2 == 0)  # a multiple of 4, or odd
                x = gm.Matrix.empty(rows, cols, dtype="int8")
                out = gm.Matrix.empty(cols, rows, dtype="int8")
                nbytes = rows * cols
                row = {"rows": rows, "cols": cols, "bytes": nbytes, "a_rows_on_words": on_words}
                row.update(transposes_against_copy(x, out, ALGORITHMS))
                cases.append(row)
                print(
                    f"{nbytes >> 20:3d} MiB {rows:4d} rows {'on' if on_words else 'off'} words: "
                    + ratios_text(row, ALGORITHMS),
                    flush=True,
                )
                x.free()
                out.free()
    write_json(
        "probe-transpose-int8-rows",
        {
            **environment(),
            "anchor": "cuMemcpyDtoDAsync of the same bytes, queued, in the same run",
            "timing": "queued_ms: batches of back-to-back calls between CUDA events, median of 5, interleaved",
            "cases": cases,
        },
    )


if __name__ == "__main__":
    main()
