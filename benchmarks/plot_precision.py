#!/usr/bin/env python3
"""Plot `python -m gpumat bench matmul --precision` results as a PNG beside the JSON.

    python3 benchmarks/plot_precision.py benchmarks/results/matmul-precision-nvidia-h100-80gb-hbm3-2026-11-22.json

Left: TFLOP/s per shape of gpumat's exact / tf32x3 / tf32 modes and cuBLAS FP32 / TF32.
Right: relative error against a float64 product over K, one line per method and input kind.
Needs matplotlib (a plotting convenience, not a gpumat dependency).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from plot import save_beside  # noqa: E402

ANCHORS = {
    "cublas_fp32": ("cuBLAS FP32", dict(color="black", linestyle="--")),
    "cublas_tf32": ("cuBLAS TF32", dict(color="gray", linestyle="--")),
}


def methods(data) -> dict:
    """cuBLAS anchors dashed, gpumat's exact kernels in blue, tf32x3 kernels green, tf32 kernels red."""
    out = dict(ANCHORS)
    greens, reds = iter(["tab:green", "tab:olive", "lime"]), iter(["tab:red", "tab:orange", "salmon"])
    for key in data["shapes"][0]["tflops"]:
        if key in ANCHORS:
            continue
        if key == "exact":
            out[key] = ("gpumat exact FP32", dict(color="tab:blue"))
        else:
            color = next(greens) if key.startswith("tf32x3") else next(reds)
            out[key] = (f"gpumat {key}", dict(color=color, linestyle=":" if "oneacc" in key else "-"))
    return out


KIND_MARKERS = {"uniform": "o", "wide": "s", "cancel": "^"}


def main(path: str) -> Path:
    data = json.loads(Path(path).read_text())
    fig, (speed, acc) = plt.subplots(1, 2, figsize=(16, 6))
    METHODS = methods(data)
    shapes = data["shapes"]
    labels = [f"{s['M']}x{s['N']}x{s['K']}" for s in shapes]
    for key, (label, style) in METHODS.items():
        values = [s["tflops"].get(key) for s in shapes]
        xs = [i for i, v in enumerate(values) if v is not None]
        speed.plot(xs, [values[i] for i in xs], marker="o", label=label, **style)
    speed.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    speed.set_ylabel("TFLOP/s (float32 in and out)")
    speed.set_yscale("log")
    speed.grid(True, which="both", alpha=0.3)
    speed.legend(fontsize=8)
    speed.set_title(f"{data['device']}, {data['date']}")
    for kind, marker in KIND_MARKERS.items():
        rows = [r for r in data["accuracy"] if r["inputs"] == kind]
        ks = [r["K"] for r in rows]
        for key, (label, style) in METHODS.items():
            errs = [r["error"].get(key, {}).get("rel") for r in rows]
            if None in errs:
                continue
            acc.plot(ks, errs, marker=marker, label=f"{label}, {kind}" if kind == "uniform" else None, **style)
    acc.set_xscale("log", base=2)
    acc.set_yscale("log")
    acc.set_xlabel("K (256 x 256 x K; markers: o uniform [-1, 1], s wide exponents, ^ cancelling)")
    acc.set_ylabel("||C - AB||_F / ||AB||_F against float64")
    acc.grid(True, which="both", alpha=0.3)
    acc.legend(fontsize=7, loc="center left")
    fig.tight_layout()
    return save_beside(fig, path)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
