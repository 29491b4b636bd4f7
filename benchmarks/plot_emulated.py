#!/usr/bin/env python3
"""Plot `python -m gpumat bench emulated` results as a PNG beside the JSON.

    python3 benchmarks/plot_emulated.py benchmarks/results/emulated-nvidia-h200-2026-11-29.json

Left: each case's cuBLAS time over gpumat's, queued and one call from an idle GPU, one bar pair a case and
mode (above the line at 1, the emulated product is the faster). Right: the largest error over |A| |B| of the
emulated product and of cuBLAS on the same inputs, on a log scale.
Needs matplotlib (a plotting convenience, not a gpumat dependency).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

MODE_COLORS = {"fp64_int8": "tab:blue", "fp32_int8": "tab:green"}
ANCHOR_NAMES = {"fp64_int8": "cuBLAS DGEMM", "fp32_int8": "cuBLAS SGEMM"}


def label(case: dict) -> str:
    m, n, k = case["M"], case["N"], case["K"]
    size = f"{m}^3" if m == n == k else f"{m}x{n}x{k}"
    return size + (" wide" if case["operands"] == "spread" else "")


def main(path: str) -> Path:
    """Draw the run at `path` and write the PNG beside it; the PNG's path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads(Path(path).read_text())
    fig, (speed, acc) = plt.subplots(1, 2, figsize=(16, 6))
    rows = [(mode, c) for mode, d in data["modes"].items() for c in d["cases"]]
    xs = range(len(rows))
    for i, (mode, c) in enumerate(rows):
        color = MODE_COLORS.get(mode, "tab:gray")
        speed.bar(i - 0.2, c["ratio"], width=0.4, color=color)
        speed.bar(i + 0.2, c["ratio_idle"], width=0.4, color=color, alpha=0.45)
        acc.scatter(i, c["gpumat_error"], color=color, marker="o")
        acc.scatter(i, c["cublas_error"], color="black", marker="x")
    names = [f"{mode.split('_')[0]} {label(c)}" for mode, c in rows]
    for ax in (speed, acc):
        ax.set_xticks(list(xs), names, rotation=40, ha="right", fontsize=8)
        ax.grid(True, axis="y", which="both", alpha=0.3)
    speed.axhline(1.0, color="black", linewidth=1)
    speed.set_ylabel("cuBLAS time / gpumat time (solid: queued, pale: one call)")
    speed.set_title(f"{data['device']}, {data['date']}: emulated on INT8 against cuBLAS in the same dtype")
    handles = [plt.Rectangle((0, 0), 1, 1, color=MODE_COLORS[m]) for m in data["modes"] if m in MODE_COLORS]
    speed.legend(handles, [f"{m} vs {ANCHOR_NAMES[m]}" for m in data["modes"] if m in MODE_COLORS], fontsize=8)
    acc.set_yscale("log")
    acc.set_ylabel("largest |C - ref| / (|A| |B|) (o: gpumat, x: cuBLAS)")
    acc.set_title("accuracy on the same inputs (wide: elements times 2^[-S, S])")
    fig.tight_layout()
    out = Path(path).with_suffix(".png")
    fig.savefig(out, dpi=110)
    plt.close(fig)
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
