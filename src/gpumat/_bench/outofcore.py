"""`python -m gpumat bench outofcore`: products of host arrays larger than the memory allowed on the GPU.

For each shape (float32, numpy in, numpy out): the same product fully in device memory (operands
already there: the compute floor), and gpumat's out-of-core product under memory limits of 1/2 .. 1/16
of what the operands and the result need, on one GPU, with pageable (plain numpy) arrays and, for the
transfer-bound shape, with pinned ones (`gm.pinned_empty`; pageable ones may be page-locked for the call where the
cost model says it pays); and the transfer floor (A, B and C once each
over the pinned copy bandwidth measured in the same run). The target ratio is against the larger of
the two floors.
"""

from __future__ import annotations

import numpy as np

import gpumat as gm
from gpumat import outofcore as oc

from .common import environment, print_table, time_ms, wall, write_json

SHAPES = [(32768, 32768, 32768), (16384, 16384, 16384), (16384, 16384, 256)]
QUICK_SHAPES = [(8192, 8192, 8192), (8192, 8192, 256)]
SHARES = (2, 4, 8, 16)


def pinned_gbps(nbytes: int = 1 << 30) -> float:
    host = gm.pinned_empty((nbytes // 4,), np.float32)
    host[...] = 1
    m = gm.Matrix.from_numpy(host)
    t = wall(lambda: m.to_numpy(out=host.reshape(1, -1)), repeat=5)
    m.free()
    return nbytes / t / 1e9


def operands(m: int, n: int, k: int, seed: int = 3, pinned: bool = False):
    rng = np.random.default_rng(seed)
    make = (lambda shape: gm.pinned_empty(shape, np.float32)) if pinned else (lambda shape: np.empty(shape, np.float32))
    a, b, out = make((m, k)), make((k, n)), make((m, n))
    for i in range(0, m, 4096):  # in slices: no float64 temporary the size of the operand
        a[i : i + 4096] = rng.random((min(4096, m - i), k), dtype=np.float32) - 0.5
    for i in range(0, k, 4096):
        b[i : i + 4096] = rng.random((min(4096, k - i), n), dtype=np.float32) - 0.5
    return a, b, out


def in_device_seconds(a, b) -> float:
    m, n = a.shape[0], b.shape[1]
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, gm.Matrix.empty(m, n) as C:
        return time_ms(lambda: gm.matmul(A, B, out=C), repeat=5) / 1e3


def first_rows_error(a, b, out, rows: int = 16) -> float:
    ref = a[:rows].astype(np.float64) @ b.astype(np.float64)
    return float(np.linalg.norm(out[:rows] - ref) / np.linalg.norm(ref))


def run(args) -> dict:
    quick = getattr(args, "quick", False)
    bandwidth = pinned_gbps()
    records, rows = [], []
    for m, n, k in QUICK_SHAPES if quick else SHAPES:
        transfer_bound = 2 * m * n * k / 50e12 < (m * k + k * n + m * n) * 4 / (bandwidth * 1e9)
        for pinned in (False, True) if transfer_bound else (False,):
            a, b, out = operands(m, n, k, pinned=pinned)
            data = a.nbytes + b.nbytes + out.nbytes
            compute = in_device_seconds(a, b)
            transfer = data / (bandwidth * 1e9)
            floor = max(compute, transfer)
            entry = {
                "M": m,
                "N": n,
                "K": k,
                "host_memory": "pinned" if pinned else "pageable",
                "data_bytes": data,
                "in_device_s": compute,
                "transfer_floor_s": transfer,
                "floor_s": floor,
                "pinned_gbps": bandwidth,
                "runs": [],
            }
            for share in SHARES:
                limit = data // share
                report: dict = {}  # what the call did: its tile plan, and how many arrays it page-locked
                t = wall(lambda: oc.matmul_host(a, b, out=out, memory_limit=limit, devices=[0], report=report))
                plan, locked = report["plan"], report["registered"]
                entry["runs"].append(
                    {
                        "limit_bytes": limit,
                        "share": share,
                        "seconds": t,
                        "over_in_device": t / compute,
                        "over_floor": t / floor,
                        "plan": [plan.tm, plan.tn, plan.tk, plan.c_buffers],
                        "arrays_page_locked": locked,
                    }
                )
                rows.append(
                    [
                        f"{m}x{n}x{k}",
                        entry["host_memory"],
                        f"1/{share}",
                        f"{plan.tm}x{plan.tn}x{plan.tk}/{plan.c_buffers}" + (f" +{locked} locked" if locked else ""),
                        t,
                        compute,
                        transfer,
                        t / compute,
                        t / floor,
                    ]
                )
            entry["rel_error_first_rows"] = first_rows_error(a, b, out)
            records.append(entry)
    print_table(
        f"out-of-core float32 matmul (numpy in, numpy out), one GPU; pinned copies {bandwidth:.1f} GB/s",
        [
            "M x N x K",
            "host",
            "limit",
            "tiles (m x n x k / C bufs)",
            "seconds",
            "in-device s",
            "transfer s",
            "over in-device",
            "over floor",
        ],
        rows,
    )
    env = environment()
    print(f"\n{env['device']}, {env['date']}")
    return write_json("outofcore", {"shapes": records})
