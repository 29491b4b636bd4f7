#!/usr/bin/env python3
"""Plot a benchmark JSON written by `python -m gpumat bench <op>` as a PNG beside it.

    python3 benchmarks/plot.py benchmarks/results/matmul-nvidia-h100-80gb-hbm3-2026-11-22.json

matmul: TFLOP/s of every variant and of cuBLAS for each shape, sizes growing left to right.
transpose / dot / spmm: the figure of merit of each variant and anchor, per case.
Needs matplotlib (a plotting convenience, not a gpumat dependency).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def series_matmul(data):
    cases = sorted(data["shapes"], key=lambda s: 2 * s["M"] * s["N"] * s["K"])
    labels = [f"{s['M']}x{s['N']}x{s['K']}" for s in cases]
    names = list(dict.fromkeys(v for s in cases for v in s["variants"]))
    series = {"cuBLAS": [s["cublas_tflops"] for s in cases]}
    for name in names:
        series[name] = [s["variants"].get(name, {}).get("tflops") for s in cases]
    return labels, series, "TFLOP/s (float32)"


def series_generic(data):
    cases = data["cases"]
    labels = [c["label"] for c in cases]
    names = list(dict.fromkeys(n for c in cases for n in c["figures"]))
    return labels, {n: [c["figures"].get(n) for c in cases] for n in names}, data["unit"]


def main(path: str) -> Path:
    data = json.loads(Path(path).read_text())
    labels, series, unit = series_matmul(data) if data["op"] == "matmul" else series_generic(data)
    fig, ax = plt.subplots(figsize=(max(8, 1.2 * len(labels)), 5))
    for name, values in series.items():
        xs = [i for i, v in enumerate(values) if v is not None]
        style = dict(color="black", linewidth=2.5, linestyle="--") if name in ("cuBLAS", "copy", "cuSPARSE") else {}
        ax.plot(xs, [values[i] for i in xs], marker="o", label=name, **style)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_ylabel(unit)
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"gpumat {data['op']} on {data['device']} ({data['date']})")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    out = Path(path).with_suffix(".png")
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        main(arg)
