#!/usr/bin/env python3
"""Plot a benchmark JSON written by `python -m gpumat bench <op>` as a PNG beside it.

    python3 benchmarks/plot.py benchmarks/results/matmul-nvidia-h100-80gb-hbm3-2026-11-22.json

matmul: TFLOP/s of every variant and of cuBLAS for each shape, sizes growing left to right.
transpose, dot: the copy's time over gpumat's for every shape and dtype (1 = the copy of the same bytes);
spmm: GFLOP/s against cuSPARSE and CuPy.

An anchor reading (cuBLAS, cuSPARSE, the copy, CuPy) below SUSPECT_FLOOR times the median of the same
anchor at the same case in the other results of this bench and device (the sibling JSONs beside it) is
a bad measurement of the anchor, not a gpumat result: it is left out of the anchor's line, drawn as a
red cross, and named in a caption under the plot.
Needs matplotlib (a plotting convenience, not a gpumat dependency).
"""

from __future__ import annotations

import json
import statistics
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


def _transpose_label(c) -> str:
    if c["class"] == "narrow columns":
        return f"N x {c['cols']}"
    if c["class"] == "narrow rows":
        return f"{c['rows']} x N"
    if c["class"] == "square":
        return f"square {c['bytes'] / 2**20:.0f} MiB"
    return f"{c['rows']} x {c['cols']}"


def series_transpose(data):
    """`bench transpose`: copy time / transpose time of every shape, queued (solid) and one call (dotted)."""
    dtypes = list(data["summary"])
    first = [c for c in data["results"] if c["dtype"] == dtypes[0]]
    labels = [_transpose_label(c) for c in first]
    series = {"copy": [1.0] * len(labels)}
    for dtype in dtypes:
        cases = [c for c in data["results"] if c["dtype"] == dtype]
        series[f"{dtype} queued"] = [c["ratio"] for c in cases]
        series[f"{dtype} one call"] = [c["ratio_one_call"] for c in cases]
    return labels, series, "copy time / transpose time (1 = the copy of the same bytes)"


def series_dot(data):
    """`bench dot`: copy time / dot time by size, every dtype."""
    dtypes = list(data["summary"])
    sizes = sorted({c["n"] for c in data["results"]})
    labels = [f"2^{n.bit_length() - 1}" for n in sizes]
    by = {(c["dtype"], c["n"]): c for c in data["results"]}
    series = {"copy": [1.0] * len(labels)}
    for dtype in dtypes:
        series[dtype] = [by[(dtype, n)]["ratio"] for n in sizes]
    return labels, series, "copy time / dot time (the copy moves the bytes the dot reads)"


def series_spmm(data):
    cases = [c for c in data["cases"] if c["N"] > 1]
    labels = [f"{c['matrix']} N={c['N']}" for c in cases]

    def gflops(c, ms):
        return 2 * c["nnz"] * c["N"] / ms / 1e6 if ms else None

    names = list(dict.fromkeys(v for c in cases for v in c["variants"] if v != "scalar"))
    series = {
        "cuSPARSE": [gflops(c, c.get("cusparse_best_ms")) for c in cases],
        "CuPy": [gflops(c, c.get("cupy_ms")) for c in cases],
    }
    for name in names:
        series[name] = [c["variants"].get(name, {}).get("gflops") for c in cases]
    return labels, series, "GFLOP/s (2 nnz N / time)"


def series_matmul_dtype(data):
    """`bench matmul --dtype`: cuBLAS in that dtype, `auto` and every variant timed, per shape."""
    cases = sorted(data["shapes"], key=lambda s: 2 * s["M"] * s["N"] * s["K"])
    labels = [f"{s['M']}x{s['N']}x{s['K']}" for s in cases]
    if "cublas_tflops" in cases[0]:  # float64: auto is one of the variants
        series = {"cuBLAS": [s["cublas_tflops"] for s in cases]}
    else:
        series = {"cuBLAS": [s.get("anchor_tflops") for s in cases], "auto": [s["gpumat_tflops"] for s in cases]}
    names = list(dict.fromkeys(v for s in cases for v in s.get("variants", {})))
    for name in names:
        series[name] = [s.get("variants", {}).get(name, {}).get("tflops") for s in cases]
    return labels, series, f"TFLOP/s ({data['dtype']})"


def series_outofcore(data):
    """Time over the floor (the in-device product, or the transfers when they are longer) against the limit."""
    cases = data["shapes"]
    labels = [f"1/{r['share']}" for r in cases[0]["runs"]]
    series = {f"{c['M']}x{c['N']}x{c['K']} {c['host_memory']}": [r["over_floor"] for r in c["runs"]] for c in cases}
    series["floor"] = [1.0] * len(labels)
    return labels, series, "time / floor (memory limit: share of A + B + C)"


def series_multigpu(data):
    r = data["result"]
    dask = r["dask"] if isinstance(r["dask"], list) else []
    counts = sorted({d["gpus"] for d in r["direct"]} | {d["workers"] for d in dask})
    labels = [f"{g} GPU" + ("s" if g > 1 else "") for g in counts]
    one_gpu = r["direct"][0]["seconds"]
    series = {
        "ideal": [float(g) for g in counts],
        "gm.matmul (out of core)": [{d["gpus"]: d["speedup"] for d in r["direct"]}.get(g) for g in counts],
    }
    for way in ("numpy_chunks", "resident_end_to_end", "resident_on_gpu"):
        by_workers = {d["workers"]: one_gpu / d[way]["seconds"] for d in dask if way in d}
        series[f"gpumat.dask, {way.replace('_', ' ')}"] = [by_workers.get(g) for g in counts]
    return labels, series, "speed-up over gm.matmul (out of core) on one GPU"


def series_dask(data):
    labels = [f"{r['dtype']} {r['M']}^3, chunk {r['chunk']}" for r in data["results"]]
    series = {"direct gm.matmul, 1 GPU": [1.0] * len(labels)}
    for w in (1, 2):
        key = f"workers_{w}"
        if any(key in r for r in data["results"]):
            series[f"gpumat.dask, {w} worker(s)"] = [
                r["direct_seconds"] / r[key]["product_seconds"] if key in r else None for r in data["results"]
            ]
    if any("outofcore_2_gpus_seconds" in r for r in data["results"]):
        series["gm.matmul(numpy, devices=[0, 1])"] = [
            r["direct_seconds"] / r["outofcore_2_gpus_seconds"] if "outofcore_2_gpus_seconds" in r else None
            for r in data["results"]
        ]
    return labels, series, "speed over the direct product on one GPU (higher is faster)"


ANCHORS = ("cuBLAS", "copy", "cuSPARSE", "CuPy", "cupy.dot")
# An anchor's runs on one machine move by a few percent (benchmarks/NOTES.md); one at less than half its
# other runs was disturbed (e.g. cuBLAS at 2137x108x1055 in the 2026-11-22 float32 run: 0.88 TFLOP/s,
# against 10.6 on 2026-11-24), and plotted as it is it would read as gpumat 13x faster.
SUSPECT_FLOOR = 0.5


def suspect_anchor_readings(path: Path, data, labels, series) -> dict[tuple[str, str], str]:
    """{(anchor, case label): why} for the anchor readings below SUSPECT_FLOOR x their median elsewhere."""
    others: dict[tuple[str, str], list[float]] = {}
    for sibling in sorted(path.parent.glob("*.json")):
        if sibling.resolve() == path.resolve():
            continue
        try:
            other = json.loads(sibling.read_text())
            if other.get("op") != data["op"] or other.get("device") != data["device"]:
                continue
            other_labels, other_series = SERIES[data["op"]](other)[:2]
        except (ValueError, KeyError, TypeError, IndexError):
            continue  # another bench's layout, or an older one: nothing to compare with
        for name in ANCHORS:
            for label, value in zip(other_labels, other_series.get(name, [None] * len(other_labels)), strict=True):
                if value:
                    others.setdefault((name, label), []).append(value)
    suspects = {}
    for name in ANCHORS:
        for label, value in zip(labels, series.get(name, [None] * len(labels)), strict=True):
            elsewhere = others.get((name, label))
            if value and elsewhere and value < SUSPECT_FLOOR * statistics.median(elsewhere):
                suspects[(name, label)] = (
                    f"{name} at {label}: {value:.3g}, against a median of {statistics.median(elsewhere):.3g} "
                    f"over {len(elsewhere)} other run{'s' * (len(elsewhere) > 1)}"
                )
    return suspects


SERIES = {
    "matmul": series_matmul,
    "matmul-float16": series_matmul_dtype,
    "matmul-bfloat16": series_matmul_dtype,
    "matmul-float64": series_matmul_dtype,
    "outofcore": series_outofcore,
    "multigpu": series_multigpu,
    "dask": series_dask,
    "transpose": series_transpose,
    "dot": series_dot,
    "spmm": series_spmm,
}


def main(path: str) -> Path:
    data = json.loads(Path(path).read_text())
    if data["op"] not in SERIES:
        sys.exit(f"plot.py: no plot for {data['op']!r} results (plotted: {', '.join(SERIES)})")
    labels, series, unit = SERIES[data["op"]](data)
    suspects = suspect_anchor_readings(Path(path), data, labels, series)
    fig, ax = plt.subplots(figsize=(min(max(8, 1.2 * len(labels)), 22), 5))
    left_out = []
    for name, label in suspects:
        i = labels.index(label)
        left_out.append((i, series[name][i]))
        series[name][i] = None
    if left_out:
        ax.plot(
            [i for i, _ in left_out],
            [v for _, v in left_out],
            linestyle="none",
            marker="x",
            markersize=10,
            markeredgewidth=2.5,
            color="red",
            label="anchor reading left out",
        )
    for name, values in series.items():
        xs = [i for i, v in enumerate(values) if v is not None]
        style = (
            dict(color="black", linewidth=2.5, linestyle="--")
            if name in ("cuBLAS", "copy", "cuSPARSE", "floor", "ideal", "direct gm.matmul")
            else {}
        )
        if name in ("CuPy", "cupy.dot"):
            style = dict(color="gray", linewidth=2, linestyle=":")
        ax.plot(xs, [values[i] for i in xs], marker="o", label=name, **style)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right")
    ax.set_ylabel(unit)
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(f"gpumat {data['op']} on {data['device']} ({data['date']})")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    if suspects:
        caption = (
            f"x: anchor reading left out, below {SUSPECT_FLOOR:g}x the same anchor's median in this bench's "
            f"other results on this device, in {unit}: " + "; ".join(suspects.values())
        )
        fig.subplots_adjust(bottom=fig.subplotpars.bottom + 0.06)
        fig.text(0.01, 0.01, caption, fontsize=8, color="red", wrap=True)
    return save_beside(fig, path)


def save_beside(fig, json_path, dpi: int = 110) -> Path:
    """Write the figure as a PNG beside the JSON it plots (every plot script here does), and say so."""
    out = Path(json_path).with_suffix(".png")
    fig.savefig(out, dpi=dpi)
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        main(arg)
