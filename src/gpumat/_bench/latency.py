"""`python -m gpumat bench latency`: what one small call costs from Python, gpumat beside PyTorch and
CuPy in the same process: the wall time of many calls and one synchronisation, per call (the GPU keeps
up, so this is the host's path: argument checks, allocation, launch). Each case is also timed on
another library's stream, the way an application that runs gpumat inside PyTorch or CuPy code calls it.
"""

from __future__ import annotations

import numpy as np

import gpumat as gm

from .common import cupy, environment, interleaved_us, print_table, write_json

SIDE = 64
MIB4 = (1024, 1024)  # float32: 4 MiB
IMPORT = "import a PyTorch 64x64 (DLPack)"  # gm.from_dlpack against cupy.from_dlpack of the same kind of tensor


def _torch():
    try:
        import torch

        return torch if torch.cuda.is_available() else None
    except Exception:  # not installed, or a CPU build
        return None


def _gpumat_cases(torch, cp) -> dict:
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (SIDE, SIDE)).astype(np.float32)
    big = rng.uniform(-1, 1, MIB4).astype(np.float32)
    A, C, Big = gm.Matrix.from_numpy(a), gm.Matrix.empty(SIDE, SIDE), gm.Matrix.from_numpy(big)
    H, Bf = gm.Matrix.from_numpy(a, dtype=np.float16), gm.Matrix.from_numpy(a, dtype="bfloat16")
    back, big_back = np.empty_like(a), np.empty_like(big)
    own = gm.Stream()
    sync = gm.synchronize
    cases = {
        "matmul 64^3": (lambda: A @ A, sync),
        "matmul 64^3, stream=gm.Stream()": (lambda: gm.matmul(A, A, stream=own), own.synchronize),
        "matmul 64^3 into out=": (lambda: gm.matmul(A, A, out=C), sync),
        "matmul 64^3 float16": (lambda: H @ H, sync),
        "matmul 64^3 bfloat16": (lambda: Bf @ Bf, sync),
        "transpose 64x64, new result": (lambda: gm.transpose(A), sync),
        "dot 64x64": (lambda: gm.dot(A, A), sync),
        "astype float16 64x64": (lambda: A.astype(np.float16), sync),
        "upload 64x64 (from_numpy)": (lambda: gm.Matrix.from_numpy(a), sync),
        "download 64x64 (to_numpy, new array)": (lambda: A.to_numpy(), sync),
        "upload 4 MiB": (lambda: gm.Matrix.from_numpy(big), sync),
        "download 4 MiB into out": (lambda: Big.to_numpy(out=big_back), sync),
    }
    if torch is not None:
        ts = torch.cuda.Stream()
        cases["matmul 64^3, stream=a PyTorch stream"] = (lambda: gm.matmul(A, A, stream=ts), ts.synchronize)
        t = torch.rand(SIDE, SIDE, device="cuda")
        cases[IMPORT] = (lambda: gm.from_dlpack(t), sync)
    if cp is not None:
        cs = cp.cuda.Stream(non_blocking=True)
        cases["matmul 64^3, stream=a CuPy stream"] = (lambda: gm.matmul(A, A, stream=cs), cs.synchronize)
    del back
    return cases


def _torch_cases(torch) -> dict:
    a = torch.rand(SIDE, SIDE, device="cuda")
    c = torch.empty(SIDE, SIDE, device="cuda")
    h, bf = a.half(), a.bfloat16()
    host, big = (
        np.random.default_rng(0).uniform(-1, 1, (SIDE, SIDE)).astype(np.float32),
        torch.rand(*MIB4, device="cuda"),
    )
    big_host = np.random.default_rng(0).uniform(-1, 1, MIB4).astype(np.float32)
    big_back = torch.empty(*MIB4)
    ts = torch.cuda.Stream()
    sync = torch.cuda.synchronize

    def on_stream():
        with torch.cuda.stream(ts):
            return a @ a

    return {
        "matmul 64^3": (lambda: a @ a, sync),
        "matmul 64^3 into out=": (lambda: torch.mm(a, a, out=c), sync),
        "matmul 64^3 float16": (lambda: h @ h, sync),
        "matmul 64^3 bfloat16": (lambda: bf @ bf, sync),
        "matmul 64^3, stream=a PyTorch stream": (on_stream, ts.synchronize),
        "transpose 64x64, new result": (lambda: a.t().contiguous(), sync),
        "dot 64x64": (lambda: torch.dot(a.view(-1), a.view(-1)).item(), sync),
        "astype float16 64x64": (lambda: a.half(), sync),
        "upload 64x64 (from_numpy)": (lambda: torch.from_numpy(host).cuda(), sync),
        "download 64x64 (to_numpy, new array)": (lambda: a.cpu().numpy(), sync),
        "upload 4 MiB": (lambda: torch.from_numpy(big_host).cuda(), sync),
        "download 4 MiB into out": (lambda: big_back.copy_(big), sync),
    }


def _cupy_cases(cp, torch) -> dict:
    a = cp.random.rand(SIDE, SIDE, dtype=cp.float32)
    c = cp.empty((SIDE, SIDE), cp.float32)
    h = a.astype(cp.float16)  # CuPy has no bfloat16
    host = np.random.default_rng(0).uniform(-1, 1, (SIDE, SIDE)).astype(np.float32)
    big_host = np.random.default_rng(0).uniform(-1, 1, MIB4).astype(np.float32)
    big = cp.asarray(big_host)
    big_back = np.empty_like(big_host)
    cs = cp.cuda.Stream(non_blocking=True)
    sync = cp.cuda.Device().synchronize

    def on_stream():
        with cs:
            return a @ a

    cases = {
        "matmul 64^3": (lambda: a @ a, sync),
        "matmul 64^3 into out=": (lambda: cp.matmul(a, a, out=c), sync),
        "matmul 64^3 float16": (lambda: h @ h, sync),
        "matmul 64^3, stream=a CuPy stream": (on_stream, cs.synchronize),
        "transpose 64x64, new result": (lambda: cp.ascontiguousarray(a.T), sync),
        "dot 64x64": (lambda: float(cp.vdot(a, a)), sync),
        "astype float16 64x64": (lambda: a.astype(cp.float16), sync),
        "upload 64x64 (from_numpy)": (lambda: cp.asarray(host), sync),
        "download 64x64 (to_numpy, new array)": (lambda: cp.asnumpy(a), sync),
        "upload 4 MiB": (lambda: cp.asarray(big_host), sync),
        "download 4 MiB into out": (lambda: big.get(out=big_back), sync),
    }
    if torch is not None:
        t = torch.rand(SIDE, SIDE, device="cuda")
        cases[IMPORT] = (lambda: cp.from_dlpack(t), sync)
    return cases


def run(args) -> dict:
    quick = getattr(args, "quick", False)
    calls = 300 if quick else 2000
    torch, cp = _torch(), cupy()
    libraries = {"gpumat": _gpumat_cases(torch, cp)}
    if torch is not None:
        libraries["pytorch"] = _torch_cases(torch)
    if cp is not None:
        libraries["cupy"] = _cupy_cases(cp, torch)
    results: dict[str, dict] = {}
    for name in libraries["gpumat"]:
        n = max(calls // 20, 20) if "4 MiB" in name else calls
        takers = {lib: cases[name] for lib, cases in libraries.items() if name in cases}
        for library, us in interleaved_us(takers, n).items():
            results.setdefault(name, {})[f"{library}_us"] = us
    rows = []
    for name, r in results.items():
        for anchor in ("pytorch", "cupy"):
            if f"{anchor}_us" in r and "gpumat_us" in r:
                r[f"ratio_{anchor}"] = r[f"{anchor}_us"] / r["gpumat_us"]
        rows.append(
            [
                name,
                r.get("gpumat_us"),
                r.get("pytorch_us"),
                r.get("cupy_us"),
                r.get("ratio_pytorch"),
                r.get("ratio_cupy"),
            ]
        )
    print_table(
        "per call from Python, us (ratio = anchor time / gpumat time, > 1: gpumat is cheaper)",
        ["case", "gpumat", "PyTorch", "CuPy", "ratio PyTorch", "ratio CuPy"],
        rows,
    )
    payload = {
        "anchor": "PyTorch and CuPy in the same process, same sizes",
        "environment": environment(),
        "timing": f"wall time of {calls} calls (100 for the 4 MiB copies) and one synchronisation, "
        "per call, median of 7 batches after 200 warm-up calls; the libraries take turns batch by batch",
        "cases": results,
    }
    write_json("latency", payload)
    return payload
