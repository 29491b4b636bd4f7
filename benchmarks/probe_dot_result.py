"""gm.dot's result written by its kernel into mapped host memory against the kernel writing device memory
and an 8-byte copy to a pinned host double queued after it (how gm.dot fetched the result before), in one
process, rounds interleaved: one call's wall time from Python, and its GPU time between two CUDA events
(the result's way to the host included), float32 and float64, 2^10-2^26 elements, with PyTorch's
`(x * y).sum().item()` in the same run.

    GPUMAT_RESULTS=DIR PYTHONPATH=src python3 benchmarks/probe_dot_result.py

Writes probe-dot-result-<device>-<date>.json.
"""

from __future__ import annotations

import ctypes
import importlib
import statistics
import time

import numpy as np

import gpumat as gm
from gpumat._bench.common import environment, time_ms, write_json
from gpumat.runtime import memops
from gpumat.runtime.streams import synchronize_stream

D = importlib.import_module("gpumat.dot")  # the module (gpumat.dot is also the function)

POWERS = (10, 14, 18, 20, 22, 24, 26)
CALLS = 200  # one wall sample: the median of this many single calls


class CopiedResult:
    """gm.dot's scratch as it was: the kernel writes the double to device memory, then a queued 8-byte
    copy into a pinned host double, then the wait (swapped in for the mapped one, the rest of gm.dot
    unchanged)."""

    def __init__(self, mapped):
        self.sm_count, self.lock, self.dev = mapped.sm_count, mapped.lock, mapped.dev
        self.result = memops.alloc_unpooled(8)
        self.host = memops.host_alloc(8)

    def value(self, stream: int) -> float:
        memops.copy_to_host(self.host, self.result, 8, stream)
        synchronize_stream(stream)
        return ctypes.c_double.from_address(self.host).value


def alternated_wall_us(fns: dict) -> dict:
    """Median wall microseconds of one call of each fn, the fns called in turn CALLS times."""
    times = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(CALLS):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) * 1e6 for name, t in times.items()}


def with_scratch(scratch, fn):
    """fn with gm.dot using `scratch` (the mapped one or the copied one)."""

    def call():
        D._scratch = lambda dev: scratch
        try:
            return fn()
        finally:
            D._scratch = ORIGINAL_SCRATCH

    return call


ORIGINAL_SCRATCH = D._scratch


def main() -> None:
    import torch

    mapped_scratch = D._scratch(gm.device())
    copied_scratch = CopiedResult(mapped_scratch)
    rows = []
    for dtype in ("float32", "float64"):
        for p in POWERS:
            n = 1 << p
            side = 1 << (p // 2)
            hx, hy = (np.random.default_rng(p + k).uniform(-1, 1, (n // side, side)).astype(dtype) for k in (0, 1))
            x, y = gm.Matrix.from_numpy(hx), gm.Matrix.from_numpy(hy)
            mapped = with_scratch(mapped_scratch, lambda x=x, y=y: gm.dot(x, y, stream=0))
            copied = with_scratch(copied_scratch, lambda x=x, y=y: gm.dot(x, y, stream=0))
            assert mapped() == copied(), f"{dtype} 2^{p}: the two ways gave different bits"
            tx, ty = (torch.from_numpy(h).cuda() for h in (hx, hy))
            theirs = lambda tx=tx, ty=ty: (tx * ty).sum().item()  # noqa: E731
            samples = {"mapped": [], "copied": [], "torch": []}
            events = {"mapped": [], "copied": []}
            for _ in range(3):
                for name, us in alternated_wall_us({"mapped": mapped, "copied": copied, "torch": theirs}).items():
                    samples[name].append(us)
                for name, fn in (("mapped", mapped), ("copied", copied)):
                    events[name].append(time_ms(fn) * 1e3)
            row = {"dtype": dtype, "n": n, **{f"{k}_wall_us": min(v) for k, v in samples.items()}}
            row.update({f"{k}_event_us": min(v) for k, v in events.items()})
            row["ratio"] = row["copied_wall_us"] / row["mapped_wall_us"]  # above 1: the mapped result faster
            rows.append(row)
            print(
                f"{dtype} 2^{p}: wall mapped {row['mapped_wall_us']:.1f} copied {row['copied_wall_us']:.1f} torch"
                f" {row['torch_wall_us']:.1f} us; events mapped {row['mapped_event_us']:.1f} copied"
                f" {row['copied_event_us']:.1f} us",
                flush=True,
            )
            x.free()
            y.free()
    write_json(
        "probe-dot-result",
        {
            **environment(),
            "anchor": "gm.dot with the kernel writing device memory then an 8-byte copy to pinned host memory "
            "(as before), and PyTorch's (x * y).sum().item(), in the same process",
            "timing": f"wall: median of {CALLS} single calls from Python, the three taking turns call by call, lowest "
            "of 3 rounds; event: "
            "bench's time_ms (median of 20 calls between CUDA events), lowest of 3",
            "note": "ratio = copied / mapped wall time (above 1: writing the result into mapped host memory is faster)",
            "cases": rows,
        },
    )


if __name__ == "__main__":
    main()
