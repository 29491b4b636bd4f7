"""float32 products at precision "tf32" against cuBLAS TF32 (torch.matmul, same process and stream), every
TF32 row timed by name beside auto: where auto stands against the fastest row, and how far each row's
model is from its time (the data its constants are fitted to). The layouts are bench bmm's (a transposed
operand a view of its transpose's storage); most have B row-major, which wgmma's TF32 reads only swapped, A
from registers (the atbt rows), or after a transposing copy of B (the bt rows).

    GPUMAT_RESULTS=DIR PYTHONPATH=src python3 benchmarks/probe_tf32_rows.py

Rows modelled at more than three times auto's time are left out (auto is far from choosing them). Each
case also checks the 128 x 128 atbt row's result against float64, relative to |A| |B|. Writes
probe-tf32-rows-<device>-<date>.json.
"""

from __future__ import annotations

import gpumat as gm
from gpumat._bench import bmm
from gpumat._bench.common import environment, warm_clocks, write_json
from gpumat._bench.sweep import _queued_us
from gpumat.matmul import algorithms

# (batch, M, N, K, layout): squares and mid sizes, layers on few tokens (x @ W, W row-major), odd shapes,
# and bench bmm's batches
CASES = [
    *((1, s, s, s, "NN") for s in (1024, 1536, 2048, 3072, 4096)),
    (1, 4096, 4096, 4096, "TN"),
    (1, 4096, 1024, 4096, "NN"),
    *((1, m, n, k, "NN") for m, n, k in ((64, 4096, 4096), (128, 4096, 4096), (256, 4096, 4096), (128, 14336, 4096))),
    *((1, m, n, k, "NN") for m, n, k in ((128, 4096, 16384), (256, 16384, 16384), (512, 8192, 8192))),
    *((1, m, n, k, "NN") for m, n, k in ((2137, 108, 1055), (2137, 1080, 1055), (97, 6007, 2049), (12289, 1201, 67))),
    (16, 512, 4096, 1024, "NN"),
    (16, 512, 1024, 4096, "NN"),
    (64, 1024, 1024, 1024, "NN"),
    (16, 2048, 2048, 2048, "NN"),
    (64, 256, 256, 256, "NN"),
    (64, 256, 256, 256, "TN"),
    (32, 512, 512, 64, "TN"),
    (256, 128, 128, 128, "NN"),
    (8, 4096, 64, 4096, "NN"),
    (128, 1024, 128, 1024, "NN"),
    (8, 4096, 4096, 64, "NT"),
    (1536, 77, 128, 77, "NN"),
]
ROWS = [name for name in algorithms("float32") if name.startswith("tf32_")]  # the rows of mode tf32
CHECKED = "tf32_wgmma128x128atbt"
LEAVE_OUT = 3.0  # rows modelled at more than this many times auto's time


def probe(torch, shape, stream) -> dict:
    batch, m, n, k, layout = shape
    case = {"batch": batch, "M": m, "N": n, "K": k, "layout": layout}
    (ta, tb, tc, tg), (A, B, C, owned) = bmm.operands(torch, case, torch.float32)
    if batch == 1:  # one matrix: the 2-D product
        ta, tb, tc, tg, A, B, C = ta[0], tb[0], tc[0], tg[0], A[0], B[0], C[0]
    try:
        row = dict(case)
        row["torch_us"] = _queued_us(torch, lambda: torch.matmul(ta, tb, out=tc))
        auto = gm.matmul_plan(A, B, out=C, precision="tf32")
        row["auto"] = f"{auto.algorithm}/{auto.splits}" + ("s" if auto.swap else "")
        row["auto_modelled_us"] = auto.seconds * 1e6
        row["auto_us"] = _queued_us(torch, lambda: gm.matmul(A, B, out=C, plan=auto, stream=stream))
        row["rows"] = {}
        for name in ROWS:
            try:
                plan = gm.matmul_plan(A, B, out=C, algorithm=name, precision="tf32")
            except ValueError:  # not for these operands
                continue
            if plan.seconds > LEAVE_OUT * auto.seconds:
                continue
            us = _queued_us(torch, lambda p=plan: gm.matmul(A, B, out=C, plan=p, stream=stream))
            key = f"{name}/{plan.splits}" + ("s" if plan.swap else "")
            row["rows"][key] = {"us": us, "modelled_us": plan.seconds * 1e6, "copies": bool(plan.copy_a or plan.copy_b)}
            if name == CHECKED:
                tg.fill_(float("nan"))
                gm.matmul(A, B, out=C, plan=plan, stream=stream)
                torch.cuda.synchronize()
                exact = ta.double() @ tb.double()
                scale = (ta.double().abs() @ tb.double().abs()).clamp_min(1e-300)
                row[f"error_{CHECKED}"] = float(((tg.double() - exact).abs() / scale).max())
        best = min(row["rows"], key=lambda key: row["rows"][key]["us"])
        row["best"], row["best_us"] = best, row["rows"][best]["us"]
        row["ratio"] = row["torch_us"] / row["auto_us"]
        row["auto_vs_best"] = row["best_us"] / row["auto_us"]
        return row
    finally:
        for x in owned:
            x.free()


def main() -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    stream = torch.cuda.current_stream()
    warm_clocks()
    rows = []
    for shape in CASES:
        row = probe(torch, shape, stream)
        torch.cuda.empty_cache()
        rows.append(row)
        print(
            f"{row['batch']:5} x {row['M']}x{row['N']}x{row['K']} {row['layout']}  torch {row['torch_us']:8.1f}  "
            f"auto {row['auto']:28} {row['auto_us']:8.1f} ({row['ratio']:.2f})  "
            f"best {row['best']:28} {row['best_us']:8.1f} ({row['auto_vs_best']:.2f})",
            flush=True,
        )
    anchor = "torch.matmul at TF32 (cuBLAS), same process and stream"
    write_json("probe-tf32-rows", {**environment(), "anchor": anchor, "cases": rows})


if __name__ == "__main__":
    main()
