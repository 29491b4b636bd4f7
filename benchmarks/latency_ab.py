"""Per-call cost of small operations from Python, two gpumat trees in one process, interleaved:

    python3 benchmarks/latency_ab.py OLD_TREE [ROUNDS]

The old tree's package is imported as `gpumat_before` (its imports are relative, so it loads beside
this tree's `gpumat`: two libraries sharing the GPU's primary context, like CuPy beside PyTorch). Each
round times every case in both, one after the other: the wall time of 2000 calls and one
synchronisation, per call. Rounds alternate which tree goes first. Prints one JSON line: the median
over rounds of each case, in microseconds, and the after/before ratio.
"""

from __future__ import annotations

import importlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CALLS = 2000


def per_call_us(call, sync) -> float:
    call()
    sync()
    t0 = time.perf_counter()
    for _ in range(CALLS):
        call()
    sync()
    return (time.perf_counter() - t0) / CALLS * 1e6


def _torch():
    try:
        import torch

        return torch if torch.cuda.is_available() else None
    except ImportError:
        return None


def cases(gm) -> dict:
    """name -> (call, sync) for one library."""
    a = np.random.default_rng(0).uniform(-1, 1, (64, 64)).astype(np.float32)
    A, C = gm.Matrix.from_numpy(a), gm.Matrix.empty(64, 64)
    H, D = gm.Matrix.from_numpy(a, dtype=np.float16), gm.Matrix.from_numpy(a, dtype=np.float64)
    batch = gm.Matrix.from_numpy(np.stack([a] * 8))
    halves = gm.Matrix.from_numpy(np.stack([a] * 64), dtype=np.float16)  # 64 x 64^3: the TMA rows' batch
    bias = gm.Matrix.from_numpy(a[:1])
    s = gm.Stream()
    sync = gm.synchronize
    torch = _torch()
    on_torch = {}
    if torch is not None:  # one of PyTorch's pooled streams, as an application inside PyTorch code passes it
        ts, t = torch.cuda.Stream(), torch.rand(64, 64, device="cuda")
        on_torch["matmul 64^3 float32 on a PyTorch stream"] = (lambda: gm.matmul(A, A, stream=ts), ts.synchronize)
        on_torch["import a PyTorch 64x64 (DLPack)"] = (lambda: gm.from_dlpack(t), sync)
    return {
        **on_torch,
        "matmul 64^3 float32": (lambda: A @ A, sync),
        "matmul 64^3 float32 on a gm.Stream": (lambda: gm.matmul(A, A, stream=s), s.synchronize),
        "matmul 64^3 float32 into out=": (lambda: gm.matmul(A, A, out=C), sync),
        "matmul 8 x 64^3 float32 (batched)": (lambda: batch @ batch, sync),
        "matmul 8 x 64^3 float32 @ a shared 2-D B": (lambda: batch @ A, sync),
        "matmul 8 x 64^3 float32, B a transposed view": (lambda: batch @ batch.T, sync),
        "matmul 64 x 64^3 float16 (batched)": (lambda: halves @ halves, sync),
        "matmul 64^3 float32 + bias + relu": (lambda: gm.matmul(A, A, bias=bias, activation="relu"), sync),
        "matmul 64^3 float32, alpha and beta into out=": (lambda: gm.matmul(A, A, out=C, alpha=0.5, beta=1.0), sync),
        "matmul 8 x 64^3 float32 + bias (batched)": (lambda: gm.matmul(batch, batch, bias=bias), sync),
        "matmul 64^3 float16": (lambda: H @ H, sync),
        "matmul 64^3 float64": (lambda: D @ D, sync),
        "transpose 64x64": (lambda: gm.transpose(A), sync),
        "transpose 64x64 into out=": (lambda: gm.transpose(A, out=C), sync),
        "dot 64x64": (lambda: gm.dot(A, A), sync),
        "astype float16 64x64": (lambda: A.astype(np.float16), sync),
        "upload 64x64 (from_numpy)": (lambda: gm.Matrix.from_numpy(a), sync),
        "download 64x64 (to_numpy)": (lambda: A.to_numpy(), sync),
    }


def main() -> None:
    old_src = Path(sys.argv[1]).resolve() / "src" / "gpumat"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    links = Path(tempfile.mkdtemp())
    (links / "gpumat_before").symlink_to(old_src)
    sys.path.insert(0, str(links))
    libraries = {"before": importlib.import_module("gpumat_before"), "after": importlib.import_module("gpumat")}
    table = {label: cases(gm) for label, gm in libraries.items()}
    times: dict = {label: {name: [] for name in table[label]} for label in table}
    for r in range(rounds):
        order = ("before", "after") if r % 2 == 0 else ("after", "before")
        for name in table["after"]:
            for label in order:
                times[label][name].append(per_call_us(*table[label][name]))
    out = {"calls": CALLS, "rounds": rounds}
    for name in table["after"]:
        before, after = (statistics.median(times[label][name]) for label in ("before", "after"))
        out[name] = {
            "before_us": before,
            "after_us": after,
            "after_over_before": after / before,
            "before_spread_us": [min(times["before"][name]), max(times["before"][name])],
            "after_spread_us": [min(times["after"][name]), max(times["after"][name])],
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
