"""`python -m gpumat bench multigpu`: one out-of-core product on 1, 2, ... GPUs of this host, and the
same product through gpumat.dask on a LocalCluster of 1, 2, ... workers (one GPU each; skipped without
dask and distributed): numpy chunks, resident (Matrix) chunks end to end, and resident chunks already
on the GPUs.

float32 host operands (numpy in, numpy out), each GPU limited to 1/4 of what A, B and C need (so the
product is out of core on one GPU). Dask: 8192-square chunks, the block products by gpumat.dask, the K
sums by Dask; its time against the direct call on as many GPUs is the overhead of the engine.
"""

from __future__ import annotations

import numpy as np

import gpumat as gm

from .common import environment, print_table, wall, write_json
from .outofcore import first_rows_error, in_device_seconds, operands

SHAPE = (32768, 32768, 32768)
QUICK_SHAPE = (8192, 8192, 8192)
SHARE = 4
CHUNK = 8192


_HOST: dict[str, np.ndarray] = {}  # the operands, by name, for the tasks that read their blocks


def _read_block(name: str, block_info=None) -> np.ndarray:
    """A Dask task: one block of a host operand (a view: its rows are contiguous, so nothing is copied)."""
    (r0, r1), (c0, c1) = block_info[None]["array-location"]
    return _HOST[name][r0:r1, c0:c1]


def dask_seconds(a, b, workers: int, chunk: int) -> dict | None:
    """Seconds of the product through gpumat.dask on `workers` workers (one GPU each), three ways:
    numpy chunks (each block host -> GPU -> host, K sums on the CPU); resident chunks end to end (A and
    B uploaded chunk by chunk, C's chunks stored into a host array); resident chunks with A and B already
    on the GPUs and C left there. Also C (from the end-to-end run)."""
    try:
        import dask.array as da
        from distributed import Client, LocalCluster, wait
    except ImportError:
        return None
    from gpumat import dask as gmd

    # threads, not processes: the workers share the host arrays, and tasks read their blocks by name
    # (the arrays are not put into the graph); each worker is still bound to its own GPU by its name
    _HOST.update(a=a, b=b)
    out = np.empty((a.shape[0], b.shape[1]), a.dtype)
    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, processes=False, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        A = da.map_blocks(_read_block, "a", chunks=da.core.normalize_chunks(chunk, a.shape), dtype=a.dtype)
        B = da.map_blocks(_read_block, "b", chunks=da.core.normalize_chunks(chunk, b.shape), dtype=b.dtype)
        numpy_chunks = wall(lambda: da.store(gmd.matmul(A, B), out, lock=False), repeat=2)
        end_to_end = wall(
            lambda: da.store(gmd.to_numpy(gmd.matmul(gmd.from_array(A), gmd.from_array(B))), out, lock=False),
            repeat=2,
        )
        on_gpu_a, on_gpu_b = gmd.from_array(A).persist(), gmd.from_array(B).persist()
        wait([on_gpu_a, on_gpu_b])

        runs = iter(range(10**6))

        def resident():  # fresh keys every run: a persisted result of the same graph would be found, not computed
            C = gmd.matmul(on_gpu_a, on_gpu_b, name=f"bench-resident-{next(runs)}").persist()
            wait(C)
            gmd.synchronize(client)

        resident_only = wall(resident, repeat=3)
    _HOST.clear()
    return {"numpy_chunks": numpy_chunks, "resident_end_to_end": end_to_end, "resident_on_gpu": resident_only, "c": out}


def run(args) -> dict:
    quick = getattr(args, "quick", False)
    m, n, k = QUICK_SHAPE if quick else SHAPE
    chunk = CHUNK if not quick else CHUNK // 4
    gpus = gm.device_count()
    a, b, out = operands(m, n, k)
    data = a.nbytes + b.nbytes + out.nbytes
    limit = data // SHARE
    compute = in_device_seconds(a, b)
    record = {
        "M": m,
        "N": n,
        "K": k,
        "data_bytes": data,
        "limit_bytes_per_gpu": limit,
        "in_device_s_one_gpu": compute,
        "direct": [],
        "dask": [],
        "dask_chunk": chunk,
    }
    rows = []
    direct = {}
    for g in range(1, gpus + 1):
        t = wall(lambda: gm.matmul(a, b, out=out, memory_limit=limit, devices=list(range(g))))
        direct[g] = t
        record["direct"].append(
            {
                "gpus": g,
                "seconds": t,
                "speedup": direct[1] / t,
                "over_in_device": t / compute,
                "rel_error_first_rows": first_rows_error(a, b, out),
            }
        )
        rows.append(["gm.matmul", g, t, direct[1] / t, t * g / compute])
    for w in sorted({1, gpus}):
        got = dask_seconds(a, b, w, chunk)
        if got is None:
            record["dask"] = "not run: dask or distributed is not installed"
            break
        c = got.pop("c")
        one = record["dask"][0] if record["dask"] else None
        entry = {"workers": w, "rel_error_first_rows": first_rows_error(a, b, c)}
        for way, t in got.items():
            entry[way] = {
                "seconds": t,
                "speedup": (one[way]["seconds"] if one else t) / t,
                "over_direct": t / direct[w],
            }
            rows.append([f"dask {way.replace('_', ' ')}", w, t, entry[way]["speedup"], t / direct[w]])
        record["dask"].append(entry)
        del c
    print_table(
        f"{m}x{n}x{k} float32, host arrays, each GPU limited to 1/{SHARE} of the data; in device "
        f"memory on one GPU: {compute:.3f} s",
        ["how", "GPUs", "seconds", "speedup", "direct: GPUs x time / in-device; dask: over direct"],
        rows,
    )
    env = environment()
    print(f"\n{env['device']} x{gpus}, {env['date']}")
    return write_json("multigpu", {"gpus": gpus, "result": record})
