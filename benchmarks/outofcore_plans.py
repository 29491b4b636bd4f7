#!/usr/bin/env python3
"""Calibrate the out-of-core cost model: what page-locking host arrays in place costs, and how candidate
tile plans compare with the model's pick on pageable, registered and pinned host arrays.

    PYTHONPATH=src python3 benchmarks/outofcore_plans.py [out.json]
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from cuda.bindings import driver

import gpumat as gm
from gpumat import outofcore as oc
from gpumat._bench.common import environment, wall
from gpumat._bench.outofcore import operands

CASES = [  # (m, n, k, share of A + B + C allowed, candidate plans besides the model's)
    (16384, 16384, 256, 4, [(1024, 16384, 256, 2), (512, 16384, 256, 2), (4096, 4096, 256, 2), (2048, 1536, 256, 2)]),
    (
        16384,
        16384,
        16384,
        4,
        [
            (8192, 6144, 512, 2),
            (4096, 4096, 2048, 2),
            (8192, 4096, 1024, 2),
            (16384, 2048, 1024, 2),
            (6144, 6144, 1024, 2),
        ],
    ),
    (32768, 32768, 32768, 16, [(8192, 6144, 2048, 1), (8192, 4096, 2048, 2), (4096, 4096, 4096, 2)]),
]


def register_seconds(nbytes: int) -> tuple[float, float]:
    x = np.ones(nbytes // 4, np.float32)
    t0 = time.perf_counter()
    assert driver.cuMemHostRegister(x.ctypes.data, x.nbytes, driver.CU_MEMHOSTREGISTER_PORTABLE)[0] == 0
    t1 = time.perf_counter()
    driver.cuMemHostUnregister(x.ctypes.data)
    return t1 - t0, time.perf_counter() - t1


def main(path: str | None) -> None:
    gm.device().activate()
    out = {"environment": environment(), "register": [], "cases": []}
    for gib in (1, 4):
        reg, unreg = register_seconds(gib << 30)
        out["register"].append({"bytes": gib << 30, "register_s": reg, "unregister_s": unreg})
        print(f"register {gib} GiB: {reg * 1e3:.1f} ms, unregister {unreg * 1e3:.1f} ms", flush=True)
    for m, n, k, share, candidates in CASES:
        for memory in ("pageable", "registered", "pinned"):
            if memory == "pinned" and k > 4096:
                continue
            a, b, c = operands(m, n, k, pinned=memory == "pinned")
            limit = (a.nbytes + b.nbytes + c.nbytes) // share
            direct = memory != "pageable"
            model = oc.plan_tiles(m, n, k, 4, 4, 4, limit, pinned_in=direct, pinned_out=direct)
            plans = [model] + [oc.TilePlan(*p) for p in candidates if oc.TilePlan(*p) != model]
            for p in plans:
                if p.device_bytes(k, 4, 4, 4) > limit * (1 - oc.SCRATCH_SHARE):
                    continue
                t = wall(
                    lambda: oc.matmul_host(
                        a, b, out=c, memory_limit=limit, devices=[0], tiles=p, register=memory == "registered"
                    ),
                    repeat=2,
                )
                rec = {
                    "M": m,
                    "N": n,
                    "K": k,
                    "share": share,
                    "memory": memory,
                    "plan": [p.tm, p.tn, p.tk, p.c_buffers],
                    "model_pick": p == model,
                    "seconds": t,
                    "modeled_s": oc.plan_seconds(p, m, n, k, 4, 4, 4, pinned_in=direct, pinned_out=direct),
                }
                out["cases"].append(rec)
                print(json.dumps(rec), flush=True)
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
