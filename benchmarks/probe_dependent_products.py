"""Products queued as programmatic dependents of the launch before them (sm_90: each product kernel waits
for the grid before it, so its launch and set-up overlap that grid's end) against plain launches, in one
process, rounds interleaved, with torch.matmul in the same run: the GPU's time a call queued behind a spin
kernel (as bench sweep times it), one call from an idle GPU, a four-layer MLP's forward (bias and ReLU
fused) and the host's time a call (wall time of many calls, the host-bound small products).

    GPUMAT_RESULTS=DIR PYTHONPATH=src python3 benchmarks/probe_dependent_products.py [copies]

("copies": the transposes and conversions alone.)

"plain" turns the dependent launch off for the product kernels (Kernel.waits_for_previous of their
modules set false, the bound plans forgotten): what gpumat launched before the change; split-K's
reduction stays dependent either way. Writes probe-dependent-products-<device>-<date>.json.
"""

from __future__ import annotations

import statistics
import sys
import time

import gpumat as gm
from gpumat._bench.common import environment, write_json
from gpumat._bench.sweep import _idle_us, _queued_us
from gpumat.matmul import engine
from gpumat.runtime import kernels

# (class, dtype, precision, batch, M, N, K, layout: A and B stored as they are (N) or transposed (T))
CASES = [
    ("batched", "float16", None, 33, 257, 255, 129, "NN"),
    ("batched", "float16", None, 256, 128, 128, 128, "NN"),
    ("batched", "bfloat16", None, 64, 256, 256, 256, "NN"),
    ("batched", "bfloat16", None, 64, 256, 256, 256, "TT"),
    ("batched", "float16", None, 1536, 77, 77, 64, "NT"),
    ("batched", "float16", None, 1000, 64, 64, 64, "NN"),
    ("batched", "float16", None, 5000, 48, 48, 48, "NN"),
    ("batched", "float32", None, 10000, 32, 32, 32, "NN"),
    ("batched", "float32", "tf32", 33, 257, 255, 129, "NN"),
    ("batched", "float32", "tf32", 64, 256, 256, 256, "TN"),
    ("batched", "float64", None, 16, 1024, 64, 1024, "NN"),
    ("few tokens", "float16", None, 1, 1, 4096, 4096, "NT"),
    ("few tokens", "float16", None, 1, 16, 4096, 4096, "NT"),
    ("few tokens", "bfloat16", None, 1, 64, 4096, 4096, "NT"),
    ("few tokens", "float32", None, 1, 32, 4096, 4096, "NN"),
    ("few tokens", "float64", None, 1, 8, 4096, 4096, "NN"),
    ("mid size", "float16", None, 1, 2048, 768, 768, "NT"),
    ("mid size", "float16", None, 1, 1024, 1024, 1024, "NN"),
    ("mid size", "float32", None, 1, 1024, 1024, 1024, "NN"),
    ("mid size", "float32", "tf32", 1, 1536, 1536, 1536, "NN"),
    ("mid size", "float64", None, 1, 768, 768, 768, "NN"),
    ("small", "float32", None, 1, 64, 64, 64, "NN"),
    ("small", "float16", None, 1, 128, 128, 128, "NN"),
    ("small", "float16", None, 1, 256, 256, 256, "NN"),
    ("small", "float64", None, 1, 256, 256, 256, "NN"),
    ("large", "float16", None, 1, 4096, 4096, 4096, "NN"),
]
# two products queued in turn (a persistent wgmma grid whose blocks end unevenly, then a grid of many
# small blocks): where the second's blocks land while the first's last blocks still run
CHAINS = [
    (("float16", None, 256, 128, 128, 128, "NN"), ("float64", None, 16, 1024, 64, 1024, "NN")),
    (("float16", None, 1, 1024, 1024, 1024, "NN"), ("float32", None, 1, 32, 4096, 4096, "NN")),
    (("bfloat16", None, 64, 256, 256, 256, "NN"), ("float16", None, 1000, 64, 64, 64, "NN")),
]
MLP_WIDTHS = (1024, 4096, 4096, 4096, 1024)
HOST_CALLS = 2000


def product_kernels() -> list:
    """The product kernels that the launcher queues as dependents (every one that waits for the grid
    before it but split-K's reductions)."""
    return [k for k in kernels.DECLARED.values() if k.waits_for_previous and k.module not in NOT_PRODUCTS]


NOT_PRODUCTS = ("matmul_splitk", "transpose", "convert", "dot")
_RUNS_SM90_CODE = kernels.runs_sm90_code


def set_copies_dependent(on: bool) -> None:
    """The memory-bound kernels (transposes, conversions, gathers) launched as dependents (on) or plainly
    (off). Their launches are cached dependent (by their declaration), which a launch resolves against the device each
    time: off makes that resolution say no for every kernel launched meanwhile."""
    kernels.runs_sm90_code = _RUNS_SM90_CODE if on else (lambda arch: False)


PRODUCTS = []  # filled in main(), after gpumat has declared its kernels


def set_dependent(on: bool) -> None:
    """The product kernels launched as dependents (on) or plainly (off); the bound plans rebuilt."""
    for k in PRODUCTS:
        k.waits_for_previous = on
    engine.bound_plans.clear()


def operands(torch, dtype, batch, m, n, k, layout):
    t = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k + batch)

    def one(rows, cols, trans):
        shape = (cols, rows) if trans else (rows, cols)
        x = torch.rand((batch, *shape) if batch > 1 else shape, device="cuda", generator=g).mul_(2).sub_(1).to(t)
        return x.transpose(-1, -2) if trans else x

    ta, tb = one(m, k, layout[0] == "T"), one(k, n, layout[1] == "T")
    tc = torch.empty((batch, m, n) if batch > 1 else (m, n), device="cuda", dtype=t)
    return ta, tb, tc


def host_us(torch, fn) -> float:
    """Wall microseconds a call, HOST_CALLS calls then one synchronisation, median of 5."""
    samples = []
    for _ in range(5):
        torch.cuda.synchronize()
        began = time.perf_counter()
        for _ in range(HOST_CALLS):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - began) * 1e6 / HOST_CALLS)
    return statistics.median(samples)


def both_ways(torch, fn, idle: bool = False, toggle=None) -> dict:
    """Queued (and, with idle, one-call) microseconds of fn with the product kernels (or what `toggle`
    switches) launched plainly and as dependents, two rounds interleaved, the lower of each."""
    queued, alone = {"plain": [], "dependent": []}, {"plain": [], "dependent": []}
    for _ in range(2):
        for mode in queued:
            (toggle or set_dependent)(mode == "dependent")
            queued[mode].append(_queued_us(torch, fn))
            if idle:
                alone[mode].append(_idle_us(torch, fn))
    row = {f"{mode}_queued_us": min(v) for mode, v in queued.items()}
    if idle:
        row.update({f"{mode}_idle_us": min(v) for mode, v in alone.items()})
    row["ratio"] = row["plain_queued_us"] / row["dependent_queued_us"]  # above 1: the dependent launch faster
    return row


def with_anchor(torch, row: dict, theirs) -> dict:
    row["torch_queued_us"] = _queued_us(torch, theirs)
    row["torch_ratio_dependent"] = row["torch_queued_us"] / row["dependent_queued_us"]
    row["torch_ratio_plain"] = row["torch_queued_us"] / row["plain_queued_us"]
    return row


def time_cases(torch, stream) -> list:
    rows = []
    for cls, dtype, precision, batch, m, n, k, layout in CASES:
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        ta, tb, tc = operands(torch, dtype, batch, m, n, k, layout)
        A, B, C = gm.from_dlpack(ta), gm.from_dlpack(tb), gm.from_dlpack(tc)
        ours = lambda: gm.matmul(A, B, out=C, precision=precision, stream=stream)  # noqa: E731
        theirs = lambda: torch.matmul(ta, tb, out=tc)  # noqa: E731
        plan = gm.matmul_plan(A, B, out=C, precision=precision)
        row = {"class": cls, "dtype": dtype, "precision": precision, "batch": batch, "M": m, "N": n, "K": k}
        row.update(layout=layout, plan=plan.algorithm, splits=plan.splits)
        row.update(both_ways(torch, ours, idle=True))
        ours()
        torch.cuda.synchronize()
        expect = torch.matmul(ta.double(), tb.double())
        row["error"] = float((tc.double() - expect).abs().max() / expect.abs().max().clamp(min=1e-300))
        with_anchor(torch, row, theirs)
        row["torch_idle_us"] = _idle_us(torch, theirs)
        if cls == "small":
            for mode in ("plain", "dependent"):
                set_dependent(mode == "dependent")
                row[f"{mode}_host_us"] = host_us(torch, ours)
            row["torch_host_us"] = host_us(torch, theirs)
        rows.append(row)
        print(
            f"{cls:10s} {dtype:8s} {precision or '':4s} {batch:5d} x {m}x{n}x{k} {layout} {plan.algorithm:24s}"
            f" plain {row['plain_queued_us']:8.2f} dependent {row['dependent_queued_us']:8.2f} us"
            f" ({row['ratio']:.3f}x) torch {row['torch_queued_us']:8.2f}"
            f" idle {row['plain_idle_us']:.1f}/{row['dependent_idle_us']:.1f}",
            flush=True,
        )
    torch.backends.cuda.matmul.allow_tf32 = False
    return rows


def time_chains(torch, stream) -> list:
    rows = []
    for chain in CHAINS:
        calls, torch_calls, names = [], [], []
        for dtype, precision, batch, m, n, k, layout in chain:
            ta, tb, tc = operands(torch, dtype, batch, m, n, k, layout)
            A, B, C = gm.from_dlpack(ta), gm.from_dlpack(tb), gm.from_dlpack(tc)
            calls.append(lambda A=A, B=B, C=C, p=precision: gm.matmul(A, B, out=C, precision=p, stream=stream))
            torch_calls.append(lambda ta=ta, tb=tb, tc=tc: torch.matmul(ta, tb, out=tc))
            names.append(f"{dtype} {batch} x {m}x{n}x{k} {layout} {gm.matmul_plan(A, B, out=C).algorithm}")
        row = {"class": "chain", "products": names, **both_ways(torch, lambda: [f() for f in calls])}
        rows.append(with_anchor(torch, row, lambda: [f() for f in torch_calls]))
        print(
            f"chain {' then '.join(names)}: plain {row['plain_queued_us']:.1f} dependent"
            f" {row['dependent_queued_us']:.1f} torch {row['torch_queued_us']:.1f}",
            flush=True,
        )
    return rows


# memory-bound operations queued back to back: (label, dtype, rows, cols, what)
COPIES = [
    ("transpose", "float32", 1024, 1024, "transpose"),
    ("transpose", "float16", 24, 200000, "transpose"),
    ("transpose", "float32", 100000, 37, "transpose"),
    ("transpose", "float64", 64, 64, "transpose"),
    ("astype", "float32", 64, 64, "float16"),
    ("astype", "float16", 4096, 4096, "float32"),
]


def time_copies(torch, stream) -> list:
    """Transposes and conversions into out= / new results, plain against dependent, beside torch's."""
    rows = []
    for label, dtype, r, c, what in COPIES:
        t = torch.rand(r, c, device="cuda").to(getattr(torch, dtype))
        x = gm.from_dlpack(t)
        if what == "transpose":
            tout = torch.empty(c, r, device="cuda", dtype=t.dtype)
            out = gm.from_dlpack(tout)
            ours = lambda x=x, out=out: gm.transpose(x, out=out, stream=stream)  # noqa: E731
            theirs = lambda t=t, tout=tout: tout.copy_(t.T)  # noqa: E731
        else:
            ours = lambda x=x, what=what: x.astype(getattr(gm, what, what), stream=stream)  # noqa: E731
            theirs = lambda t=t, what=what: t.to(getattr(torch, what))  # noqa: E731
        timed = both_ways(torch, ours, toggle=set_copies_dependent)
        row = {"class": label, "dtype": dtype, "rows": r, "cols": c, "to": what, **timed}
        rows.append(with_anchor(torch, row, theirs))
        print(
            f"{label} {dtype} {r}x{c} {what}: plain {row['plain_queued_us']:.2f} dependent"
            f" {row['dependent_queued_us']:.2f} torch {row['torch_queued_us']:.2f}",
            flush=True,
        )
    return rows


def time_mlps(torch, stream) -> list:
    """A four-layer MLP forward on 256 and 4096 tokens, float16 and bfloat16: bias and ReLU fused, new
    results each layer (torch: linear then relu)."""
    rows = []
    for dtype in ("float16", "bfloat16"):
        for tokens in (256, 4096):
            t = getattr(torch, dtype)
            x = torch.randn(tokens, MLP_WIDTHS[0], device="cuda", dtype=t)
            pairs = zip(MLP_WIDTHS, MLP_WIDTHS[1:], strict=False)
            ws = [torch.randn(o, i, device="cuda", dtype=t) / i**0.5 for i, o in pairs]
            bs = [torch.randn(o, device="cuda", dtype=t) for o in MLP_WIDTHS[1:]]
            gx, gws, gbs = gm.from_dlpack(x), [gm.from_dlpack(w).T for w in ws], [gm.from_dlpack(b) for b in bs]

            def forward():
                h = gx
                for w, b in zip(gws, gbs, strict=True):
                    h = gm.matmul(h, w, bias=b, activation="relu", stream=stream)
                return h

            def torch_forward():
                h = x
                for w, b in zip(ws, bs, strict=True):
                    h = torch.relu(torch.nn.functional.linear(h, w, b))
                return h

            row = {"class": "mlp", "dtype": dtype, "tokens": tokens, "widths": list(MLP_WIDTHS)}
            rows.append(with_anchor(torch, {**row, **both_ways(torch, forward)}, torch_forward))
            r = rows[-1]
            print(
                f"mlp {dtype} {tokens} plain {r['plain_queued_us']:.1f} dependent {r['dependent_queued_us']:.1f}"
                f" torch {r['torch_queued_us']:.1f}",
                flush=True,
            )
    return rows


def main() -> None:
    import torch

    stream = torch.cuda.current_stream()
    PRODUCTS.extend(product_kernels())
    copies_only = sys.argv[1:] == ["copies"]
    if copies_only:
        rows = time_copies(torch, stream)
    else:
        rows = time_cases(torch, stream) + time_chains(torch, stream) + time_mlps(torch, stream)
        rows += time_copies(torch, stream)
    set_dependent(True)
    set_copies_dependent(True)
    write_json(
        "probe-dependent-copies" if copies_only else "probe-dependent-products",
        {
            **environment(),
            "anchor": "torch.matmul (out=) and an eager PyTorch MLP in the same process",
            "timing": "queued: bench sweep's _queued_us (calls behind a spin kernel, median of 5 samples), idle: "
            "_idle_us (one call after 2 ms idle, median of 5), the lower of two interleaved rounds each; host: wall "
            f"time of {HOST_CALLS} calls and one synchronisation, median of 5",
            "note": "ratio = plain / dependent queued time (above 1: the dependent launch faster); plain is the "
            "product kernels launched plainly, as before the change (split-K's reduction dependent in both)",
            "cases": rows,
        },
    )


if __name__ == "__main__":
    main()
