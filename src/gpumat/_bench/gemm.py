"""`python -m gpumat bench gemm`: the GEMM interface against PyTorch (cuBLAS / cuBLASLt, same process, same
inputs, PyTorch's current stream given to gpumat): batched products against torch.bmm, transposed
operands against the same layouts in PyTorch and against gpumat's own A @ B, alpha/beta against beta = 0,
and the fused bias + activation epilogue against the plain product and torch._addmm_activation.

Times are GPU microseconds a call with calls queued back to back (CUDA events, median of 5 samples of
~2 ms). Batched rows also give the HBM roofline: the bytes of A, B and C over the device-to-device copy
rate measured in the same run, as a fraction of gpumat's time.
"""

from __future__ import annotations

import gpumat as gm

from .common import copy_gbps, environment, print_table, write_json
from .sweep import _queued_us

BATCHED = ((4096, 64), (1024, 128), (256, 256), (64, 512), (8192, 32), (1, 16), (4, 64), (8, 128))
BATCH_DTYPES = ("float32", "bfloat16", "float64")


def _rand(torch, shape, dtype, g):
    return torch.rand(*shape, device="cuda", generator=g, dtype=torch.float32).mul_(2).sub_(1).to(dtype)


def run(args) -> dict:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    stream = torch.cuda.current_stream()
    quick = getattr(args, "quick", False)
    g = torch.Generator(device="cuda").manual_seed(7)
    gbps = copy_gbps(256 << 20)
    cases, rows = [], []

    def add(group, label, dtype, ours_us, theirs_us, anchor, extra=None):
        case = {"group": group, "case": label, "dtype": dtype, "gpumat_us": ours_us, "anchor_us": theirs_us}
        case["anchor"] = anchor
        case["ratio"] = theirs_us / ours_us
        case.update(extra or {})
        cases.append(case)
        rows.append([group, label, dtype, ours_us, theirs_us, anchor, case["ratio"], case.get("roofline")])

    # batched products against torch.bmm
    for dtype in BATCH_DTYPES[:1] if quick else BATCH_DTYPES:
        tdtype = getattr(torch, dtype)
        for batch, size in BATCHED[:3] if quick else BATCHED:
            ta, tb = _rand(torch, (batch, size, size), tdtype, g), _rand(torch, (batch, size, size), tdtype, g)
            tc = torch.empty(batch, size, size, device="cuda", dtype=tdtype)
            A, B, C = gm.from_dlpack(ta), gm.from_dlpack(tb), gm.from_dlpack(tc)
            ours = _queued_us(torch, lambda A=A, B=B, C=C: gm.matmul(A, B, out=C, stream=stream))
            theirs = _queued_us(torch, lambda ta=ta, tb=tb, tc=tc: torch.bmm(ta, tb, out=tc))
            nbytes = 3 * batch * size * size * ta.element_size()
            roof = nbytes / (gbps * 1e3) / ours  # copy time of the bytes (us) / our time
            add("batched", f"{batch} x {size}^3", dtype, ours, theirs, "torch.bmm", {"roofline": roof})
            for x in (A, B, C):
                x.free()

    # transposed operands: each layout against gpumat's A @ B and PyTorch's same layout
    for dtype in ("float32",) if quick else ("float32", "float16", "bfloat16"):
        tdtype = getattr(torch, dtype)
        for size in (1024,) if quick else (1024, 2048, 4096):
            ta, tb = _rand(torch, (size, size), tdtype, g), _rand(torch, (size, size), tdtype, g)
            tc = torch.empty(size, size, device="cuda", dtype=tdtype)
            A, B, C = gm.from_dlpack(ta), gm.from_dlpack(tb), gm.from_dlpack(tc)
            plain = _queued_us(torch, lambda A=A, B=B, C=C: gm.matmul(A, B, out=C, stream=stream))
            for name, (x, y, tx, ty) in {
                "A.T @ B": (A.T, B, ta.t(), tb),
                "A @ B.T": (A, B.T, ta, tb.t()),
                "A.T @ B.T": (A.T, B.T, ta.t(), tb.t()),
            }.items():
                ours = _queued_us(torch, lambda x=x, y=y, C=C: gm.matmul(x, y, out=C, stream=stream))
                theirs = _queued_us(torch, lambda tx=tx, ty=ty, tc=tc: torch.matmul(tx, ty, out=tc))
                add("layout", f"{name} {size}^3", dtype, ours, theirs, "torch.matmul", {"vs_plain": plain / ours})
            for x in (A, B, C):
                x.free()

    # alpha/beta and the fused epilogue
    shapes = ((4096, 4096, 4096),) if quick else ((4096, 4096, 4096), (8192, 4096, 4096))
    for dtype in ("float32",) if quick else ("float32", "float16", "bfloat16"):
        tdtype = getattr(torch, dtype)
        for m, n, k in shapes if dtype == "float32" else shapes[:1]:
            ta, tb = _rand(torch, (m, k), tdtype, g), _rand(torch, (k, n), tdtype, g)
            tc, bias = _rand(torch, (m, n), tdtype, g), _rand(torch, (n,), tdtype, g)
            A, B, C, bias_m = gm.from_dlpack(ta), gm.from_dlpack(tb), gm.from_dlpack(tc), gm.from_dlpack(bias)
            plain = _queued_us(torch, lambda: gm.matmul(A, B, out=C, stream=stream))
            label = f"{m}x{n}x{k}"
            accumulate = _queued_us(torch, lambda: gm.matmul(A, B, out=C, beta=1.0, stream=stream))
            add("alpha/beta", f"beta=1 {label}", dtype, accumulate, plain, "gpumat beta=0")
            for act, gelu in (("relu", False), ("gelu_tanh", True)):  # cuBLASLt's GELU is the tanh form
                ours = _queued_us(
                    torch, lambda act=act: gm.matmul(A, B, out=C, bias=bias_m, activation=act, stream=stream)
                )
                theirs = _queued_us(torch, lambda gelu=gelu: torch._addmm_activation(bias, ta, tb, use_gelu=gelu))
                add("epilogue", f"bias+{act} {label}", dtype, ours, theirs, "torch._addmm_activation")
                add("epilogue", f"bias+{act} {label}", dtype, ours, plain, "gpumat plain product")
            for x in (A, B, C, bias_m):
                x.free()

    print_table(
        "GEMM interface (ratio = anchor time / gpumat time; > 1: gpumat faster)",
        ["group", "case", "dtype", "gpumat us", "anchor us", "anchor", "ratio", "roofline"],
        rows,
    )
    payload = {
        "environment": environment(),
        "anchor": f"PyTorch {torch.__version__} (cuBLAS / cuBLASLt), same inputs, same stream, allow_tf32=False",
        "copy_gbps": gbps,
        "timing": "CUDA events on PyTorch's current stream; calls back to back, ~2 ms a sample, median of 5",
        "cases": cases,
    }
    write_json("gemm", payload)
    return payload
