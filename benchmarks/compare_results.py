#!/usr/bin/env python3
"""Before/after from compare_trees.sh: every timing two bench runs share, as after/before time ratios.

    python3 benchmarks/compare_results.py DIR [--json OUT.json]

DIR holds before/ and after/, each with the bench JSON of one tree. A timing is any number whose key
ends in "ms" (or that sits in an "ms" table), named by its path with list entries labelled by their
shape fields. gpumat's timings and the anchors' (cuBLAS, cuSPARSE, CuPy, PyTorch, the copy ceiling) are
reported apart: the anchors run the same code in both runs, so their spread is the run-to-run noise
against which gpumat's ratios are read.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ANCHOR_WORDS = ("cublas", "cusparse", "cupy", "torch", "anchor", "copy", "ceiling", "gather")
LABEL_FIELDS = ("M", "N", "K", "rows", "cols", "n", "matrix", "inputs")
LONG_MS = 0.5  # timings this long are little moved by clocks and launch jitter: the kernels' own speed


def _label(entry: dict) -> str:
    return "x".join(str(entry[f]) for f in LABEL_FIELDS if f in entry and not isinstance(entry[f], (dict, list)))


def timings(node, path: str = "", in_ms_table: bool = False) -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(node, dict):
        for key, value in node.items():
            sub = f"{path}/{key}"
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if key == "ms" or key.endswith("_ms") or in_ms_table:
                    out[sub] = float(value)
            else:
                out.update(timings(value, sub, key == "ms"))
    elif isinstance(node, list):
        for i, entry in enumerate(node):
            label = _label(entry) if isinstance(entry, dict) else ""
            out.update(timings(entry, f"{path}[{label or i}]"))
    return out


def compare(directory: Path) -> dict:
    report = {}
    for after_file in sorted((directory / "after").glob("*.json")):
        before_file = directory / "before" / after_file.name
        if not before_file.exists():
            continue
        before = timings(json.loads(before_file.read_text()))
        after = timings(json.loads(after_file.read_text()))
        ratios = {key: after[key] / before[key] for key in sorted(before.keys() & after.keys()) if before[key] > 0}
        anchors = {k: r for k, r in ratios.items() if any(w in k.lower() for w in ANCHOR_WORDS)}
        ours = {k: r for k, r in ratios.items() if k not in anchors}
        long = {k: r for k, r in ours.items() if before[k] >= LONG_MS}
        report[after_file.name.split("-nvidia")[0]] = {"gpumat": ours, "gpumat_long": long, "anchors": anchors}
    return report


def _summary(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{len(values):4d} timings, median {statistics.median(values):.3f}, {min(values):.3f}-{max(values):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("directory", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = compare(args.directory)
    print("after/before time (under 1: faster after); the anchors' spread is the run-to-run noise")
    for op, parts in report.items():
        print(f"{op:18s} gpumat  {_summary(list(parts['gpumat'].values()))}")
        print(f"{'':18s} >= {LONG_MS} ms {_summary(list(parts['gpumat_long'].values()))}")
        print(f"{'':18s} anchors {_summary(list(parts['anchors'].values()))}")
        worst = sorted(parts["gpumat"].items(), key=lambda kv: -kv[1])[:3]
        for key, ratio in worst:
            print(f"{'':20s}slowest after: {ratio:.3f} {key}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
