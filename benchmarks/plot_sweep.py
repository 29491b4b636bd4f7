#!/usr/bin/env python3
"""Draw a `bench sweep` result as a heat map: shape classes down, cases of a class across in grid order,
colour the ratio cuBLAS time / gpumat time (queued), numbers written in the cells.

    python3 benchmarks/plot_sweep.py benchmarks/results/sweep-float32-*.json     # writes the .png beside it
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
    import numpy as np

    path = Path(sys.argv[1])
    data = json.loads(path.read_text())
    classes: dict[str, list] = {}
    for case in data["cases"]:
        classes.setdefault(case["class"], []).append(case)
    width = max(len(v) for v in classes.values())
    ratios = np.full((len(classes), width), np.nan)
    for row, cases in enumerate(classes.values()):
        for col, case in enumerate(cases):
            ratios[row, col] = case["ratio_queued"]
    fig, ax = plt.subplots(figsize=(max(8, width * 0.7), 1 + 0.8 * len(classes)))
    image = ax.imshow(np.log2(ratios), cmap="RdYlGn", vmin=-1, vmax=1, aspect="auto")
    for row, cases in enumerate(classes.values()):
        for col, case in enumerate(cases):
            ax.text(
                col,
                row,
                f"{case['ratio_queued']:.2f}\n{case['M']}x{case['N']}x{case['K']}",
                ha="center",
                va="center",
                fontsize=5,
            )
    ax.set_yticks(range(len(classes)), list(classes))
    ax.set_xticks([])
    summary = data["summary"]
    env = data["environment"]
    ax.set_title(
        f"matmul {data['dtype']} {data.get('precision') or ''} vs cuBLAS, {env['device']}, {env['date']}: "
        f"geometric mean {summary['geomean_queued']:.2f}, minimum {summary['min_queued']:.2f}"
    )
    fig.colorbar(image, ax=ax, label="log2(cuBLAS time / gpumat time)")
    fig.tight_layout()
    save_beside(fig, path, dpi=120)


if __name__ == "__main__":
    main()
