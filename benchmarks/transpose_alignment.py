#!/usr/bin/env python3
"""Why odd strides slow the transpose: which side (reads of A, writes of B), at which alignment.

Transposes the same 3001 x 17011 matrix held in views whose row strides are chosen to make rows of A
and of B start at 4-, 16-, 32- or 128-byte boundaries, and runs tiled_rect64 with fewer row-tile
blocks (each block then walks neighbouring row tiles, writing neighbouring pieces of B's rows).

    PYTHONPATH=src python3 benchmarks/transpose_alignment.py
"""

import gpumat as gm
from gpumat._bench.common import copy_gbps, print_table, time_ms
from gpumat.transpose import VARIANTS

ROWS, COLS = 3001, 17011
STRIDES = {"4 B (odd)": (17011, 3001), "16 B": (17012, 3004), "32 B": (17016, 3016), "128 B": (17024, 3008)}


def view(rows, cols, stride):
    parent = gm.Matrix.empty(rows, stride)
    return parent, parent[:, :cols]


def main():
    ceiling = copy_gbps(ROWS * COLS * 4)
    rows = []
    cases = [
        (f"A {a_name}, B {b_name}", STRIDES[a_name][0], STRIDES[b_name][1])
        for a_name, b_name in [
            ("4 B (odd)", "4 B (odd)"),
            ("128 B", "4 B (odd)"),
            ("4 B (odd)", "128 B"),
            ("16 B", "16 B"),
            ("32 B", "32 B"),
            ("128 B", "128 B"),
        ]
    ]
    for label, lda, ldb in cases:
        pa, a = view(ROWS, COLS, lda)
        pb, b = view(COLS, ROWS, ldb)
        for name in ("tiled_rect64", "sector_aligned"):
            ms = time_ms(lambda: gm.transpose(a, out=b, algorithm=name))
            rows.append([label, name, "-", ms, 2 * a.nbytes / ms / 1e6 / ceiling])
        v = VARIANTS["tiled_rect64"]
        gx, gy, _ = v.grid(ROWS, COLS)
        for blocks_y in (1, 2, 4, 8):
            args = (a.elements, b.elements, ROWS, COLS, a.stride, b.stride)
            ms = time_ms(lambda: v.kernel((gx, blocks_y, 1), v.block, *args))
            rows.append([label, "tiled_rect64", blocks_y, ms, 2 * a.nbytes / ms / 1e6 / ceiling])
        pa.free()
        pb.free()
    print_table(
        f"transpose {ROWS}x{COLS}: fraction of the copy ceiling ({ceiling:.0f} GB/s) by row alignment",
        ["row starts aligned to", "variant", "grid y", "ms", "x copy"],
        rows,
    )


if __name__ == "__main__":
    main()
