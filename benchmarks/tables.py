#!/usr/bin/env python3
"""Write the generated tables and figures of README.md and docs/performance.md from the JSON results.

Every number the README and the docs give about speed or size comes from here: each table is written
from the newest run of its bench on the H100 (DEVICE) under benchmarks/results/, with that run's date,
its anchor (measured in the same run) and its file named under the table. In the markdown a generated
block sits between two markers, which this script owns; never edit what is between them by hand:

    <!-- gen:NAME -->
    ...
    <!-- /gen:NAME -->

    python3 benchmarks/tables.py            # rewrite every block
    python3 benchmarks/tables.py --check    # exit 1, naming the stale blocks, when a block differs

tests/test_docs_cpu.py runs the check, so a new result (or a hand edit) without the tables
regenerated fails `make test`. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DEVICE = "NVIDIA H100 80GB HBM3"
TARGETS = [ROOT / "README.md", ROOT / "docs" / "performance.md"]
BLOCK = re.compile(r"(<!-- gen:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /gen:(?P=name) -->)", re.S)
FILE = re.compile(r"^(?P<bench>.+?)-(?P<where>nvidia-.+|linux-.+)-(?P<date>\d{4}-\d\d-\d\d)$")


# ---------------------------------------------------------------------------------------------- results


def newest(bench: str, device: str | None = DEVICE) -> tuple[str, dict]:
    """(the file's name, its data) of the newest run of `bench` on `device` (None: a run on no GPU)."""
    found = []
    for path in RESULTS.glob(f"{bench}-*.json"):
        m = FILE.match(path.stem)
        if not m or m.group("bench") != bench:
            continue
        data = json.loads(path.read_text())
        if data.get("device") == device:
            found.append((data.get("date") or m.group("date"), path.name, data))
    if not found:
        raise SystemExit(f"benchmarks/tables.py: no {bench} result for {device} under {RESULTS}")
    date, name, data = max(found)
    return name, data


def source(*runs: tuple[str, dict], anchor: str | None = None) -> str:
    """The line under a table: where its numbers come from."""
    files = ", ".join(f"`benchmarks/results/{name}`" for name, _ in runs)
    dates = sorted({data.get("date") for _, data in runs})
    device = runs[0][1].get("device") or runs[0][1].get("platform")
    anchor = anchor or runs[0][1].get("anchor")
    line = f"*{device}, {', '.join(dates)}; from {files}"
    return line + (f". Anchor, in the same run: {anchor}.*" if anchor else ".*")


def x(ratio: float | None) -> str:
    return "" if ratio is None or not math.isfinite(ratio) else f"{ratio:.2f}x"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def shape(s: dict) -> str:
    m, n, k = s["M"], s["N"], s["K"]
    return f"{m}^3" if m == n == k else f"{m} x {n} x {k}"


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


# ----------------------------------------------------------------------------------------------- tables

SWEEP_MODES = [  # (bench, label, anchor)
    ("sweep-float16", "float16", "cuBLAS"),
    ("sweep-bfloat16", "bfloat16", "cuBLAS"),
    ("sweep-float32", "float32", "cuBLAS FP32"),
    ("sweep-float32-tf32", 'float32, `precision="tf32"`', "cuBLAS TF32"),
    ("sweep-float32-tf32x3", 'float32, `precision="tf32x3"`', "cuBLAS FP32"),
    ("sweep-float64", "float64", "cuBLAS DGEMM"),
]


def sweep_runs() -> list[tuple[str, str, tuple[str, dict]]]:
    return [(label, anchor, newest(bench)) for bench, label, anchor in SWEEP_MODES]


def gen_sweep() -> str:
    runs = sweep_runs()
    rows = []
    for label, anchor, (_, data) in runs:
        s = data["summary"]
        rows.append(
            [
                label,
                anchor,
                str(len(data["cases"])),
                x(s["geomean_queued"]),
                x(s["min_queued"]),
                x(s["geomean_auto_vs_best"]),
            ]
        )
    header = ["dtype / mode", "against", "shapes", "geometric mean", "minimum", "`auto` / fastest named plan"]
    timing = runs[0][2][1].get("timing", "")
    few = any(c["class"].startswith("few tokens") for _, _, (_, data) in runs for c in data["cases"])
    note = (
        "Ratio = the anchor's time / gpumat's time on the same shape: above 1 gpumat is faster. The shapes: "
        "squares 128-8192 and odd sides, skinny M and N from 1 to 256, long and short K, transformer "
        "layers, odd rectangles"
        + (", few-token layers (1-128 rows, `x @ W` and `x @ W.T`)" if few else "")
        + f" (`python -m gpumat bench sweep`). Timing: {timing}."
    )
    return "\n".join([table(header, rows), "", note, "", source(*(r for _, _, r in runs), anchor=sweep_anchor(runs))])


def sweep_anchor(runs) -> str:
    base = runs[0][2][1]["anchor"].split(", allow_tf32")[0]
    return f"{base}; cuBLAS may use TF32 only against the `tf32` mode"


# the newest sweeps with every class, few-token layers included (the H100's predate that class)
SWEEP_CLASS_DEVICE = "NVIDIA H200"


def gen_sweep_classes() -> str:
    runs = [(label, anchor, newest(bench, SWEEP_CLASS_DEVICE)) for bench, label, anchor in SWEEP_MODES]
    classes = list(dict.fromkeys(c["class"] for _, _, (_, data) in runs for c in data["cases"]))
    rows = []
    for name in classes:
        row = [name]
        for _, _, (_, data) in runs:
            ratios = [c["ratio_queued"] for c in data["cases"] if c["class"] == name and c.get("ratio_queued")]
            row.append(f"{x(geomean(ratios))} ({x(min(ratios))})" if ratios else "")
        rows.append(row)
    everything = ["all"]
    for _, _, (_, data) in runs:
        everything.append(f"{x(data['summary']['geomean_queued'])} ({x(data['summary']['min_queued'])})")
    header = ["class", *(f"{label} / {anchor}" for label, anchor, _ in runs)]
    note = (
        "Each cell: the geometric mean of the anchor's time / gpumat's `auto` time over the class's shapes "
        "(the worst shape in brackets), calls queued. Few tokens: 1-128 rows of x against weights of "
        "3072 x 1024 to 14336 x 4096, as `x @ W` and, in the next class, `x @ W.T` with W stored N x K."
    )
    sources = source(*(r for _, _, r in runs), anchor=sweep_anchor(runs))
    return "\n".join([table(header, [*rows, everything]), "", note, "", sources])


SELECTED = [  # shapes of the sweep shown one by one (M, N, K)
    (256, 256, 256),
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (1000, 3001, 777),
    (5003, 61, 4099),
    (1, 4096, 4096),
    (16, 4096, 4096),
    (4096, 4096, 256),
    (64, 64, 65536),
    (2048, 16384, 4096),
]


def sweep_ratios() -> dict[str, dict[tuple[int, int, int], float]]:
    """{mode label: {(M, N, K): anchor time / gpumat time, GPU time queued}} from the newest sweeps."""
    return {  # B row-major (the few-token class times x @ W.T at the same M, N, K too)
        label: {(c["M"], c["N"], c["K"]): c["ratio_queued"] for c in data["cases"] if c.get("layout", "NN") == "NN"}
        for label, _, (_, data) in sweep_runs()
    }


def gen_large() -> str:
    runs = sweep_runs()
    ratios = sweep_ratios()
    header = ["M x N x K", *(f"{label} / {anchor}" for label, anchor, _ in runs)]
    rows = [
        [shape({"M": m, "N": n, "K": k})] + [x(ratios[label].get((m, n, k))) for label, _, _ in runs]
        for m, n, k in SELECTED
    ]
    note = "Ratio = the anchor's time / gpumat's `auto` time on that shape, from the same sweeps as above."
    return "\n".join([table(header, rows), "", note, "", source(*(r for _, _, r in runs), anchor=sweep_anchor(runs))])


def gen_accuracy() -> str:
    run = newest("matmul-precision")
    modes = [("exact", "`float32`"), ("tf32x3 auto", "`tf32x3`"), ("tf32 auto", "`tf32`")]
    modes += [("cublas_fp32", "cuBLAS FP32"), ("cublas_tf32", "cuBLAS TF32")]
    rows = []
    for a in run[1]["accuracy"]:
        err = a["error"]
        rows.append([f"{a['inputs']}, {shape(a)}"] + [f"{err[m]['rel']:.1e}" if m in err else "" for m, _ in modes])
    note = f"Relative error against the product computed in float64 ({run[1]['error']})."
    return "\n".join([table(["inputs, M x N x K", *(label for _, label in modes)], rows), "", note, "", source(run)])


def gen_latency() -> str:
    run = newest("latency")
    rows = []
    for case, r in run[1]["cases"].items():
        us = lambda key: f"{r[key]:.1f}" if r.get(key) is not None else ""  # noqa: E731
        rows.append(
            [case, us("gpumat_us"), us("pytorch_us"), us("cupy_us"), x(r.get("ratio_pytorch")), x(r.get("ratio_cupy"))]
        )
    header = ["call (from Python)", "gpumat us", "PyTorch us", "CuPy us", "PyTorch / gpumat", "CuPy / gpumat"]
    note = f"Timing: {run[1]['timing']}."
    return "\n".join([table(header, rows), "", note, "", source(run)])


BMM_MODES = [  # (bench, label): bench bmm's runs, on the H200 (the one GPU it has run on)
    ("bmm-float16", "float16"),
    ("bmm-bfloat16", "bfloat16"),
    ("bmm-float32", "float32"),
    ("bmm-float32-tf32", 'float32, `precision="tf32"`'),
    ("bmm-float64", "float64"),
]
BMM_DEVICE = "NVIDIA H200"
BMM_CLASSES = ("attention scores", "attention values", "grouped", "tiny", "layouts")


def bmm_runs() -> list[tuple[str, tuple[str, dict]]]:
    return [(label, newest(bench, BMM_DEVICE)) for bench, label in BMM_MODES]


def gen_bmm() -> str:
    runs = bmm_runs()

    def cell(ratios: list[float]) -> str:
        return f"{x(geomean(ratios))} ({x(min(ratios))})"

    rows = []
    for label, (_, data) in runs:
        timed = [c for c in data["cases"] if c.get("ratio")]
        by_class = [cell([c["ratio"] for c in timed if c["class"] == cls]) for cls in BMM_CLASSES]
        rows.append([label, *by_class, cell([c["ratio"] for c in timed])])
    header = ["dtype / mode", *BMM_CLASSES, "every case"]
    cases = len(runs[0][1][1]["cases"])
    note = (
        f"torch.bmm's time / gpumat's time, geometric mean (worst) over each class of `python -m gpumat bench "
        f"bmm`'s {cases} batches: attention scores Q @ K^T and values P @ V at head sizes 64 and 128, 77-4096 "
        "tokens, 8-1536 matrices; grouped products of 2-256 matrices of 128-2048 a side; 1,000-100,000 tiny "
        "matrices of 2-64 a side; a few shapes in each of the four layouts. A transposed operand is a view of "
        "the same storage for both libraries. Timed queued (the GPU's own time)."
    )
    torch = runs[0][1][1]["anchor"].split(" through ")[1].split(",")[0]
    anchor = (
        f"torch.bmm (cuBLAS strided-batched) through {torch}, out=, the same storage and stream; cuBLAS may use "
        "TF32 only against the `tf32` row"
    )
    return "\n".join([table(header, rows), "", note, "", source(*(run for _, run in runs), anchor=anchor)])


TRANSPOSE_DEVICE = "NVIDIA H200"  # the transpose kernels of 2026-11-29 have run on the H200 only
DOT_DEVICE = "NVIDIA H200"  # the result written into mapped host memory (2026-12-02) has run on the H200 only


def gen_memory_bound() -> str:
    tr, dot = newest("transpose", device=TRANSPOSE_DEVICE), newest("dot", device=DOT_DEVICE)
    counts = {d: sum(r["dtype"] == d for r in tr[1]["results"]) for d in tr[1]["summary"]}
    rows = [
        [
            f"transpose, {dtype} ({counts[dtype]} shapes)",
            x(s["geometric_mean_ratio"]),
            x(s["min_ratio"]),
            x(s["geometric_mean_ratio_one_call"]),
            x(s["min_ratio_one_call"]),
        ]
        for dtype, s in tr[1]["summary"].items()
    ]
    header = ["", "queued: geometric mean", "queued: worst", "one call: geometric mean", "one call: worst"]
    transposes = table(header, rows)
    by = {(r["dtype"], r["n"]): r for r in dot[1]["results"]}
    powers = (20, 24, 28)

    def one_call(r: dict) -> str:  # gpumat's wall time and PyTorch's, where PyTorch ran
        theirs = r.get("pytorch_wall_us")
        return f"{r['wall_us']:.0f} / " + (f"{theirs:.0f}" if theirs is not None else "-")

    rows = [
        [
            f"dot, {dtype}",
            *(x(by[(dtype, 1 << p)]["ratio"]) for p in powers),
            one_call(by[(dtype, 1 << 10)]),
            x(s["geometric_mean_ratio_pytorch"]),
        ]
        for dtype, s in dot[1]["summary"].items()
    ]
    header = [
        "",
        *(f"2^{p}: / copy" for p in powers),
        "one call at 2^10, us (gpumat / PyTorch)",
        "PyTorch time / gpumat time, 2^10-2^28",
    ]
    dots = table(header, rows)
    note = (
        "Ratios are the copy's time over gpumat's (above 1.00x gpumat is faster). Transpose: strips of 1-128 "
        "columns or rows, squares of 1 MiB-4 GiB, odd shapes (3001 x 17011, 8191 x 8193, and 1001 x 1003, "
        "which the L2 cache holds), queued and one call on an idle GPU, against a device-to-device copy of "
        "the same bytes timed the same way, interleaved; on the H200. Dot: on the H200, against a copy moving "
        "as many bytes as the dot reads, queued, where the dot's time is one call's with the result's way to the "
        "host (about 20 us a call: launch, wait and Python, which caps the ratio below 2^24); and one call "
        "from Python against PyTorch's `(x * y).sum().item()`."
    )
    return "\n".join(
        [
            transposes,
            "",
            dots,
            "",
            note,
            "",
            source(tr, anchor="the device-to-device copy"),
            "",
            source(dot, anchor="the device-to-device copy and PyTorch"),
        ]
    )


def gen_spmm() -> str:
    run = newest("spmm")
    rows = []
    for c in run[1]["cases"]:
        auto = c["variants"]["auto"]["ms"]
        best = c.get("cusparse_best_ms")
        rows.append(
            [
                c["matrix"],
                str(c["N"]),
                f"{c['nnz']:,}",
                f"{auto:.3f}",
                f"{best:.3f}" if best else "",
                x(best / auto if best else None),
                x(c["cupy_ms"] / auto),
            ]
        )
    header = [
        "matrix (1M rows)",
        "columns of B",
        "nonzeros",
        "gpumat ms",
        "best cuSPARSE ms",
        "cuSPARSE / gpumat",
        "CuPy / gpumat",
    ]
    note = f"Timing: {run[1]['timing']}; blank where cuSPARSE's SpMM did not run (one column: SpMV)."
    return "\n".join([table(header, rows), "", note, "", source(run)])


def gen_cold_start() -> str:
    run = newest("cold-start")
    ours = next(iter(run[1]["runs"].values()))
    a = run[1]["anchors"]
    rows = [
        [
            "gpumat",
            f"{ours['import_gpumat_ms']:.1f}",
            f"{ours['context_and_upload_ms']:.0f}",
            f"{ours['first_matmul_ms']:.2f}",
        ],
        [
            "CuPy",
            f"{a['cupy']['import_ms']:.1f}",
            f"{a['cupy']['context_and_upload_ms']:.0f}",
            f"{a['cupy']['first_matmul_ms']:.2f}",
        ],
        [
            "PyTorch",
            f"{a['torch']['import_ms']:.1f}",
            f"{a['torch']['context_and_upload_ms']:.0f}",
            f"{a['torch']['first_matmul_ms']:.2f}",
        ],
    ]
    header = ["library", "import ms", "context + upload ms", "first 64^3 matmul ms"]
    return "\n".join([table(header, rows), "", f"Method: {run[1]['method']}.", "", source(run)])


def gen_outofcore() -> str:
    run = newest("outofcore")
    rows = []
    for s in run[1]["shapes"]:
        for r in s["runs"]:
            rows.append([shape(s), s["host_memory"], f"1/{r['share']}", f"{r['seconds']:.3f}", x(r["over_floor"])])
    header = ["float32 M x N x K", "host arrays", "of the data allowed on the GPU", "seconds", "/ the floor"]
    note = (
        "numpy in and out. The floor: the same product with A, B and C already in device memory, or the "
        "pinned copy time of A, B and C where that is longer (a transfer-bound product), measured in the same run."
    )
    return "\n".join(
        [table(header, rows), "", note, "", source(run, anchor="the in-device product and the pinned copy")]
    )


DASK_DEVICE = "NVIDIA H200"  # the two-GPU machine the Dask runs are taken on


def gen_dask() -> str:
    run = newest("dask", device=DASK_DEVICE)

    def both(r, field, fmt):  # one worker's figure, and two workers' where the run had two GPUs
        one, two = r["workers_1"], r.get("workers_2")
        return f"{one[field]:{fmt}} / {two[field]:{fmt}}" if two else f"{one[field]:{fmt}}"

    gathered = "asnumpy_gbps" in run[1]["results"][0]["workers_1"]
    rows = []
    for r in run[1]["results"]:
        one, two = r["workers_1"], r.get("workers_2")
        row = [
            f"{r['dtype']}, {shape(r)}, chunks of {r['chunk']}",
            f"{r['direct_seconds']:.3f}",
            f"{one['product_seconds']:.3f} ({x(one['over_direct'])})",
            f"{two['product_seconds']:.3f}" if two else "",
            x(r["speedup_2_workers"]) if two else "",
            f"{r['outofcore_2_gpus_seconds']:.3f}" if two else "",
            both(r, "upload_gbps", ".1f"),
            both(r, "download_seconds", ".2f"),
        ]
        rows.append(row + ([both(r, "asnumpy_gbps", ".1f")] if gathered else []))
    header = [
        "product",
        "direct `gm.matmul`, 1 GPU, s",
        "1 worker, s (over direct)",
        "2 workers, s",
        "2 workers over 1",
        "`gm.matmul(a, b, devices=[0, 1])`, s",
        "upload GB/s, 1 / 2 workers",
        "`to_numpy(C).compute()` s, 1 / 2 workers",
    ] + (["`gmd.asnumpy(C)` GB/s, 1 / 2 workers"] if gathered else [])
    note = (
        f"The README's recipe, {run[1].get('recipe', 'LocalCluster')} (worker processes, one a GPU), numpy "
        "operands in the client. Product: wall seconds of persist + wait + every GPU synchronised, A and B "
        "already on the workers (median of 3 after a warm-up). Upload: gmd.from_array of A and B until both "
        "are on the GPUs. Back to the client: gmd.to_numpy(C).compute() moves numpy chunks over TCP; "
        "gmd.asnumpy(C) brings the chunks GPU to GPU and downloads each in place. Direct: the same product "
        "of device matrices on one GPU (GPU time); out of core: numpy in and out over both GPUs (wall)."
    )
    return "\n".join([table(header, rows), "", note, "", source(run, anchor="the direct gm.matmul of the same arrays")])


def gen_gemm() -> str:
    run = newest("gemm")
    rows = [
        [
            c["group"],
            c["case"],
            c["dtype"],
            f"{c['gpumat_us']:.1f}",
            f"{c['anchor_us']:.1f}",
            c["anchor"],
            x(c["ratio"]),
        ]
        for c in run[1]["cases"]
    ]
    header = ["group", "case", "dtype", "gpumat us", "anchor us", "anchor", "anchor / gpumat"]
    return "\n".join([table(header, rows), "", f"Timing: {run[1]['timing']}.", "", source(run)])


def gen_transfers() -> str:
    run = newest("transfers")
    rows = []
    for c in run[1]["host_copies"]:
        rows.append(
            [
                f"{c['bytes'] / 2**20:g} MiB",
                x(c["up_vs_cupy"]),
                x(c["down_vs_cupy"]),
                x(c["up_pinned_vs_ceiling"]),
                x(c["down_pinned_vs_ceiling"]),
            ]
        )
    header = ["size", "upload / CuPy", "download / CuPy", "pinned upload / ceiling", "pinned download / ceiling"]
    note = (
        "From and to plain numpy arrays against CuPy's `asarray` / `get(out=)`, and from and to pinned arrays "
        "(`gm.pinned_empty`) against the pinned copy ceiling (one `cuMemcpy` of pinned memory), same run."
    )
    return "\n".join([table(header, rows), "", note, "", source(run, anchor="CuPy and the pinned copy")])


def gen_multigpu() -> str:
    run = newest("multigpu")
    r = run[1]["result"]
    rows = [
        [
            f"`gm.matmul` of numpy arrays, {d['gpus']} GPU(s)",
            f"{d['seconds']:.3f}",
            x(d["speedup"]),
            x(d["over_in_device"]),
        ]
        for d in r["direct"]
    ]
    rows += [
        [
            f"Dask, chunks resident on the GPUs, {d['workers']} worker(s)",
            f"{d['resident_on_gpu']['seconds']:.3f}",
            x(d["resident_on_gpu"]["speedup"]),
            "",
        ]
        for d in r["dask"]
    ]
    share = f"1/{round(r['data_bytes'] / r['limit_bytes_per_gpu'])}"
    header = [
        f"float32 {shape(r)}, {share} of the data allowed a GPU",
        "seconds",
        "speedup",
        "/ in-device, one GPU",
    ]
    note = f"{run[1]['gpus']} GPUs of one host; the in-device time is the same product with everything on one GPU."
    return "\n".join([table(header, rows), "", note, "", source(run, anchor="the in-device product on one GPU")])


def gen_install() -> str:
    run = newest("install-size", device=None)
    rows = []
    for name, p in run[1]["packages"].items():
        rows.append([name, f"{p['download_bytes'] / 1e6:,.1f}", f"{p['installed_bytes'] / 1e6:,.1f}"])
    note = f"{run[1]['platform']}, CPython {run[1]['python']}. Method: {run[1]['method']}."
    return "\n".join([table(["install", "MB to download", "MB installed"], rows), "", note, "", source(run)])


# ------------------------------------------------------------------------------------ README's first screen


def gen_summary() -> str:
    """The README's claims, one line each, with their numbers."""
    inst = newest("install-size", device=None)
    ours = next(p for name, p in inst[1]["packages"].items() if name.startswith("gpumat"))
    others = [(name.split(" (")[0], p) for name, p in inst[1]["packages"].items() if not name.startswith("gpumat")]
    cold = newest("cold-start")
    first = next(iter(cold[1]["runs"].values()))
    anchors = cold[1]["anchors"]
    sweep = sweep_runs()
    means = [data["summary"]["geomean_queued"] for _, _, (_, data) in sweep]
    big = [r[(n, n, n)] for r in sweep_ratios().values() for n in (4096, 8192)]
    bmm = bmm_runs()
    bmm_means = [(label, [c["ratio"] for c in data["cases"] if c.get("ratio")]) for label, (_, data) in bmm]
    mb = lambda n: f"{n / 1e6:,.0f} MB"  # noqa: E731
    lines = [
        f"- **Small to install**: {mb(ours['download_bytes'])} to download with its dependencies and "
        f"{mb(ours['installed_bytes'])} installed, against "
        + " and ".join(f"{mb(p['download_bytes'])} and {mb(p['installed_bytes'])} for {name}" for name, p in others)
        + f" with their CUDA libraries ({inst[1]['platform']}, {inst[1]['date']}).",
        "- **No JIT, quick to start**: kernels compiled ahead of time; "
        f"`import gpumat` {first['import_gpumat_ms']:.0f} ms, a process's first 64^3 matmul "
        f"{first['first_matmul_ms']:.1f} ms (CuPy {anchors['cupy']['first_matmul_ms']:.0f} ms, "
        f"PyTorch {anchors['torch']['first_matmul_ms']:.0f} ms; H100, {cold[1]['date']}).",
        "- **Deterministic**: the same inputs give the same bits on the same GPU, call after call "
        "(no atomics; split sums are added in a fixed order).",
        f"- **Near cuBLAS on large products**: {min(big):.2f}-{max(big):.2f}x cuBLAS at 4096^3 and 8192^3 over "
        f"every dtype and precision mode (H100, {sweep[0][2][1]['date']}).",
        f"- **Behind it on small ones**: over {len(sweep[0][2][1]['cases'])} shapes a dtype (squares, skinny, long K, "
        f"odd sizes) the geometric means are {min(means):.2f}-{max(means):.2f}x cuBLAS "
        f"(H100, {sweep[0][2][1]['date']}).",
        f"- **Batches in one launch, every layout**: against torch.bmm over {len(bmm[0][1][1]['cases'])} batches "
        "(attention scores and values, grouped, tiny, transposed) the geometric means are "
        + ", ".join(
            f"{geomean(r):.2f}x {label.split(',')[0] if 'tf32' not in label else 'tf32'}" for label, r in bmm_means
        )
        + f" (H200, {', '.join(sorted({data['date'] for _, (_, data) in bmm}))}).",
        emulated_summary(),
        int8_summary(),
        fp8_summary(),
    ]
    return "\n".join(lines)


def int8_summary() -> str:
    """The line of the int8 product: its squares of 4096 and 8192 with B given transposed against
    torch._int_mm (`bench int8`, the H200's run)."""
    _, run = newest("int8", device="NVIDIA H200")
    big = [
        c
        for c in run["cases"]
        if c["M"] == c["N"] == c["K"] and c["M"] >= 4096 and c["b_transposed"] and c.get("out", "int32") == "int32"
    ]
    tops = ", ".join(f"{c['gpumat_tops']:,.0f} TOPS against {c['int_mm_tops']:,.0f}" for c in big)
    low, high = x(min(c["ratio"] for c in big)), x(max(c["ratio"] for c in big))
    return (
        "- **int8 @ int8 -> int32 on the INT8 tensor cores**: "
        f"{low if low == high else f'{low[:-1]}-{high}'} `torch._int_mm` at {' and '.join(shape(c) for c in big)} "
        f"({tops}), the same bits (H200, {run['date']})."
    )


def gen_int8() -> str:
    """`bench int8`: int8 @ int8 -> int32 against torch._int_mm, every case."""
    name, run = newest("int8", device="NVIDIA H200")
    sums = [c for c in run["cases"] if c.get("out", "int32") == "int32"]
    rows = [
        [
            shape(c),
            ("`x @ W.T`" if c["b_transposed"] else "`A @ B`")
            + ("" if c.get("out", "int32") == "int32" else f" into {c['out']}, scaled"),
            f"`{c['auto']}`",
            f"{c['gpumat_tops']:,.0f}",
            f"{c['int_mm_tops']:,.0f}",
            x(c["ratio"]),
            x(c["ratio_idle"]),
            "yes" if c["equal"] and c["repeat_bits"] else "NO",
        ]
        for c in run["cases"]
    ]
    header = ["M x N x K", "layout", "auto's plan", "TOPS", "_int_mm TOPS", "queued", "one call", "same bits"]
    note = (
        "`torch._int_mm`'s time / gpumat's time (above 1x gpumat is faster), queued and one call from an idle GPU; "
        "TOPS: 2 M N K over the queued time; same bits: gpumat's C equals `_int_mm`'s and repeats on a second call. "
        "Into bfloat16, scaled: gpumat's one call (`alpha`) against `(torch._int_mm(a, b) * scale).to(torch.bfloat16)` "
        "(three kernels, the same float32 operations). "
        f"Geometric mean of the queued ratios, the int32 sums: {x(geomean([c['ratio'] for c in sums]))}; "
        f"into bfloat16: {x(geomean([c['ratio'] for c in run['cases'] if c not in sums]))}."
    )
    return "\n".join([table(header, rows), "", note, "", source((name, run))])


def fp8_summary() -> str:
    """The line of the FP8 product: e4m3 and e5m2 squares of 4096 and 8192 into bfloat16 against
    torch._scaled_mm (`bench fp8`, the H200's run)."""
    _, run = newest("fp8", device="NVIDIA H200")
    big = [c for c in run["cases"] if c["M"] == c["N"] == c["K"] >= 4096 and c["out"] == "bfloat16"]
    low, high = x(min(c["ratio"] for c in big)), x(max(c["ratio"] for c in big))
    e4m3 = [c for c in big if c["format"] == "e4m3"]
    tflops = ", ".join(f"{c['gpumat_tflops']:,.0f} TFLOP/s against {c['scaled_mm_tflops']:,.0f}" for c in e4m3)
    return (
        "- **FP8 (e4m3, e5m2) on the tensor cores**, float32 accumulation, a bfloat16, float16 or float32 C "
        f"with the epilogue: {low if low == high else f'{low[:-1]}-{high}'} `torch._scaled_mm` at 4096^3 and "
        f"8192^3 (e4m3: {tflops}; H200, {run['date']})."
    )


def gen_fp8() -> str:
    """`bench fp8`: FP8 products against torch._scaled_mm, every case, time and accuracy."""
    name, run = newest("fp8", device="NVIDIA H200")
    rows = [
        [
            shape(c),
            f"{c['format']} -> {c['out']}",
            f"`{c['auto']}`",
            f"{c['gpumat_tflops']:,.0f}",
            f"{c['scaled_mm_tflops']:,.0f}",
            x(c["ratio"]),
            x(c["ratio_fast"]),
            x(c["ratio_idle"]),
            f"{c['err_gpumat']:.1e}",
            f"{c['err_scaled_mm']:.1e} / {c['err_scaled_mm_fast']:.1e}",
        ]
        for c in run["cases"]
    ]
    header = ["M x N x K", "dtypes", "auto's plan", "TFLOP/s", "_scaled_mm", "queued", "fast accum.", "one call",
              "error", "_scaled_mm error (fast)"]  # fmt: skip
    note = (
        "`torch._scaled_mm`'s time / gpumat's time (above 1x gpumat is faster), queued against its default and "
        "against `use_fast_accum=True`, and one call from an idle GPU (default); TFLOP/s: 2 M N K over the queued "
        "time; error: the largest |C - ref| / (|A| @ |B|) over C, ref the float64 product of the same FP8 values. "
        "x @ W.T with per-tensor scales (gpumat: alpha); the e5m2 cases' anchor multiplies e5m2 by e4m3 (it has no "
        f"e5m2 @ e5m2). gpumat's C repeats bit for bit "
        f"{'in every case' if all(c['repeat_bits'] for c in run['cases']) else 'NOT in every case'}. "
        "Geometric mean of the queued ratios: "
        f"{x(run['geomean'])}."
    )
    return "\n".join([table(header, rows), "", note, "", source((name, run))])


def emulated_summary() -> str:
    """The line of the emulated precision modes: each one's 8192^3 product on standard normal operands against
    cuBLAS in its dtype, time and largest error over |A| |B| (`bench emulated`, the H200's run)."""
    _, run = newest("emulated", device="NVIDIA H200")
    r64, r32 = (
        next(c for c in run["modes"][mode]["cases"] if c["M"] == c["N"] == c["K"] == 8192 and c["operands"] == "normal")
        for mode in ("fp64_int8", "fp32_int8")
    )
    return (
        '- **Float64 and float32 emulated on the INT8 tensor cores** (`precision="fp64_int8"`, `"fp32_int8"`): '
        f"{x(r64['ratio'])} cuBLAS DGEMM and {x(r32['ratio'])} cuBLAS SGEMM at 8192^3, and more accurate than either "
        f"(largest error over |A| |B| {r64['gpumat_error']:.1e} against {r64['cublas_error']:.1e}, "
        f"{r32['gpumat_error']:.1e} against {r32['cublas_error']:.1e}; H200, {run['date']})."
    )


def gen_emulated() -> str:
    """`bench emulated`: both emulated modes against cuBLAS in their dtype, time and accuracy, every case."""
    name, run = newest("emulated", device="NVIDIA H200")
    rows = []
    for mode, data in run["modes"].items():
        for c in data["cases"]:
            spread = run["operands"]["spread"][data["dtype"]] if c["operands"] == "spread" else "standard normal"
            rows.append(
                [
                    f"`{mode}`",
                    shape(c),
                    spread,
                    x(c["ratio"]),
                    x(c["ratio_idle"]),
                    f"{c['gpumat_tflops']:.1f}",
                    f"{c['gpumat_error']:.1e}",
                    f"{c['cublas_error']:.1e}",
                ]
            )
    header = ["mode", "M x N x K", "operands", "queued", "one call", "TFLOP/s", "error", "cuBLAS error"]
    cases = [c for data in run["modes"].values() for c in data["cases"]]
    repeats = sum(c["repeat_bits"] for c in cases)
    note = (
        "cuBLAS's time / gpumat's time (above 1x gpumat is faster), queued and one call from an idle GPU; "
        "TFLOP/s of the emulated product (2 M N K over its time); error: the largest |C - ref| / (|A| |B|), "
        f"{run['accuracy'].split(':')[0]}, and cuBLAS's on the same inputs. The bits repeated on a second call "
        f"in {repeats} of the {len(cases)} cases."
    )
    return "\n".join([table(header, rows), "", note, "", source((name, run))])


GENERATORS: dict[str, Callable[[], str]] = {
    "summary": gen_summary,
    "install": gen_install,
    "sweep": gen_sweep,
    "sweep-classes": gen_sweep_classes,
    "large-matmul": gen_large,
    "accuracy": gen_accuracy,
    "latency": gen_latency,
    "memory-bound": gen_memory_bound,
    "bmm": gen_bmm,
    "emulated": gen_emulated,
    "int8": gen_int8,
    "fp8": gen_fp8,
    "spmm": gen_spmm,
    "cold-start": gen_cold_start,
    "outofcore": gen_outofcore,
    "dask": gen_dask,
    "gemm": gen_gemm,
    "transfers": gen_transfers,
    "multigpu": gen_multigpu,
}


def render(text: str, path: Path) -> str:
    def fill(m: re.Match) -> str:
        name = m.group("name")
        if name not in GENERATORS:
            raise SystemExit(f"benchmarks/tables.py: {path.name} has a block gen:{name} that no generator writes")
        return m.group(1) + GENERATORS[name]() + "\n" + m.group(4)

    return BLOCK.sub(fill, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated block is stale")
    opts = parser.parse_args(argv)
    stale = []
    for path in TARGETS:
        text = path.read_text()
        new = render(text, path)
        if new != text:
            stale.append(path.relative_to(ROOT))
            if not opts.check:
                path.write_text(new)
    if opts.check and stale:
        print(
            f"stale generated tables in {', '.join(map(str, stale))}: run python3 benchmarks/tables.py", file=sys.stderr
        )
        return 1
    if not opts.check:
        print(f"wrote {', '.join(map(str, stale))}" if stale else "tables up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
