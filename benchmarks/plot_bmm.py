#!/usr/bin/env python3
"""Draw `bench bmm` results: one bar a case, the ratio torch.bmm time / gpumat time (queued; log scale, a line
at 1 = parity and one at 0.8), the cases grouped by class left to right and coloured by it, the idle ratio a
dot on each bar, a failed case a red cross; one panel a JSON (one JSON a dtype and mode).

    python3 benchmarks/plot_bmm.py benchmarks/results/bmm-float16-*.json      # bmm-float16-....png beside it
    python3 benchmarks/plot_bmm.py benchmarks/results/bmm-*-2026-12-01.json   # every dtype, one panel each:
                                                                                # bmm-<device>-<date>.png
Needs matplotlib (a plotting convenience, not a gpumat dependency).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

COLOURS = {
    "attention scores": "tab:blue",
    "attention values": "tab:cyan",
    "grouped": "tab:orange",
    "tiny": "tab:green",
    "layouts": "tab:purple",
}
GAP = 1  # empty slots between two classes' cases


def _slug(text: str) -> str:
    """A device name as the results' file names spell it (gpumat._bench.common.write_json)."""
    return "".join(ch if ch.isalnum() else "-" for ch in text).strip("-").lower()


def output_path(paths: list[Path], datas: list[dict]) -> Path:
    """One JSON: the PNG beside it, same stem. Several: one figure beside the first, bmm-<device>-<date> (the
    newest run's date)."""
    if len(paths) == 1:
        return paths[0].with_suffix(".png")
    env = datas[0].get("environment", datas[0])
    newest = max(d.get("environment", d).get("date", "undated") for d in datas)
    return paths[0].with_name(f"bmm-{_slug(env.get('device', 'gpu'))}-{newest}.png")


def _positions(cases: list[dict]) -> tuple[list[float], list[tuple[str, float, float]]]:
    """x of each case (classes in the order they come, GAP slots apart) and (class, first x, last x) of each."""
    xs, spans, x, last = [], [], 0.0, None
    for case in cases:
        if last is not None and case["class"] != last:
            x += GAP
        if case["class"] != last:
            spans.append([case["class"], x, x])
        spans[-1][2] = x
        xs.append(x)
        last, x = case["class"], x + 1
    return xs, [tuple(s) for s in spans]


def _title(data: dict) -> str:
    env = data.get("environment", data)
    mode = data.get("precision")
    name = data["dtype"] + ("" if mode in (None, "float32") else f" {mode}")
    s = data.get("summary", {})
    figures = ""
    if s.get("geomean") is not None:
        figures = f": geometric mean {s['geomean']:.2f}, minimum {s['min']:.2f} (queued)"
    failed = len(s.get("failed", []))
    return f"bmm {name} vs torch.bmm, {env.get('device', '?')}, {env.get('date', '?')}{figures}" + (
        f"; {failed} failed" if failed else ""
    )


def _panel(ax, data: dict) -> None:
    cases = data["cases"]
    xs, spans = _positions(cases)
    timed = [(x, c) for x, c in zip(xs, cases, strict=True) if c.get("ratio")]
    failed = [x for x, c in zip(xs, cases, strict=True) if not c.get("ratio")]
    ratios = [c["ratio"] for _, c in timed]
    low = min([0.5, *ratios]) / 1.5
    high = max([2.0, *ratios]) * 1.5
    ax.set_yscale("log")
    ax.set_ylim(low, high)
    colours = [COLOURS.get(c["class"], "grey") for _, c in timed]
    # bars from the axis' floor up to the ratio (a log axis has no zero to start from)
    ax.bar([x for x, _ in timed], [r - low for r in ratios], bottom=low, width=0.8, color=colours)
    idle = [(x, c["ratio_idle"]) for x, c in timed if c.get("ratio_idle")]
    if idle:
        ax.plot([x for x, _ in idle], [r for _, r in idle], "o", color="black", markersize=2.5, label="idle ratio")
    if failed:
        ax.plot(failed, [low * 1.2] * len(failed), "x", color="red", markersize=6, label="failed (no times)")
    right = max(xs, default=0) + 1
    for level, style in ((1.0, "-"), (0.8, "--")):
        ax.axhline(level, color="black", linewidth=0.8, linestyle=style)
        ax.text(right, level, f" {level:g}", va="center", ha="left", fontsize=6)
    for cls, first, last in spans:
        ax.text((first + last) / 2, high / 1.15, cls, ha="center", va="top", fontsize=7, color=COLOURS.get(cls, "grey"))
    labels = [
        f"{c['batch']}x{c['M']}x{c['N']}x{c['K']}" + (f" {c['layout']}" if c["layout"] != "NN" else "") for c in cases
    ]
    ax.set_xticks(xs, labels, rotation=90, fontsize=5)
    ax.set_xlim(min(xs, default=0) - 1, right)
    ax.set_ylabel("torch time / gpumat time")
    ax.set_title(_title(data), fontsize=9)
    if idle or failed:
        ax.legend(loc="lower right", fontsize=6)


def main(argv: list[str] | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    args = sys.argv[1:] if argv is None else argv
    if not args:
        raise SystemExit("usage: plot_bmm.py RESULT.json [RESULT.json ...] (bench bmm's JSON, one a dtype)")
    paths = [Path(a) for a in args]
    datas = [json.loads(p.read_text()) for p in paths]
    width = max(10.0, 0.2 * max(len(d["cases"]) for d in datas) + 2)
    fig, axes = plt.subplots(len(datas), 1, figsize=(width, 3.6 * len(datas)), squeeze=False)
    for ax, data in zip(axes[:, 0], datas, strict=True):
        _panel(ax, data)
    fig.tight_layout()
    out = output_path(paths, datas)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    main()
