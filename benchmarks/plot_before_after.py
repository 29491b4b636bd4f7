#!/usr/bin/env python3
"""Draw a before/after result (benchmarks/results/refactor-before-after-*.json): for each benchmark, the
after/before time ratio of every gpumat timing, the long ones (>= 0.5 ms) marked, beside the anchors'
ratios (the same library code run twice: the noise), and the per-call A/B medians.

    python3 benchmarks/plot_before_after.py RESULT.json      # writes RESULT.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from plot import save_beside


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(sys.argv[1])
    data = json.loads(path.read_text())
    benches = data["benchmarks"]
    fig, (ax, lat) = plt.subplots(1, 2, figsize=(14, 5.5), gridspec_kw={"width_ratios": [3, 1.3]})
    for i, parts in enumerate(benches.values()):
        ours, long, anchors = parts["gpumat"], parts["gpumat_long"], parts["anchors"]
        ax.scatter(
            [i - 0.15] * len(ours),
            list(ours.values()),
            s=9,
            color="tab:blue",
            alpha=0.5,
            label="gpumat, every timing" if i == 0 else None,
        )
        ax.scatter(
            [i - 0.15] * len(long),
            list(long.values()),
            s=16,
            color="tab:blue",
            marker="D",
            label="gpumat, >= 0.5 ms" if i == 0 else None,
        )
        ax.scatter(
            [i + 0.15] * len(anchors),
            list(anchors.values()),
            s=14,
            color="tab:orange",
            marker="x",
            label="anchors (cuBLAS, cuSPARSE, CuPy, copy): the noise" if i == 0 else None,
        )
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_yscale("log")
    ax.set_ylim(0.3, 10)
    ax.set_xticks(range(len(benches)), list(benches), rotation=30, ha="right")
    ax.set_ylabel("after / before time (log)")
    ax.set_title(f"Same benchmarks, old tree then new, one run ({data['device']}, {data['date']})")
    ax.legend(fontsize=8, loc="upper left")
    cases = data["latency_ab"]["cases"]
    names = list(cases)
    lat.barh(range(len(names)), [cases[n]["after_over_before"] for n in names], color="tab:blue")
    lat.axvline(1.0, color="gray", lw=0.8)
    lat.set_yticks(range(len(names)), names, fontsize=8)
    lat.set_xlim(0.6, 1.2)
    lat.set_xlabel("after / before, median per call")
    lat.set_title("Per call from Python (A/B, one process)")
    fig.tight_layout()
    save_beside(fig, path)


if __name__ == "__main__":
    main()
