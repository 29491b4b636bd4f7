#!/usr/bin/env python3
"""Draw a `bench gemm` result: one horizontal bar a case, the ratio anchor time / gpumat time (log scale,
1 = parity), coloured by group (batched, layout, alpha/beta, epilogue).

    python3 benchmarks/plot_gemm.py benchmarks/results/gemm-*.json     # writes the .png beside it
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
    cases = data["cases"]
    colours = {"batched": "tab:blue", "layout": "tab:orange", "alpha/beta": "tab:green", "epilogue": "tab:purple"}
    labels = [f"{c['case']} {c['dtype']} vs {c['anchor']}" for c in cases]
    fig, ax = plt.subplots(figsize=(10, 0.22 * len(cases) + 1.5))
    ax.barh(range(len(cases)), [c["ratio"] for c in cases], color=[colours[c["group"]] for c in cases])
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_yticks(range(len(cases)), labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("anchor time / gpumat time (> 1: gpumat faster)")
    ax.set_title(f"gpumat GEMM interface on {data['device']}, {data['date']}")
    fig.tight_layout()
    save_beside(fig, path, dpi=120)


if __name__ == "__main__":
    main()
