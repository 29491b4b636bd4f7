"""`python -m gpumat bench dask`: one product C = A @ B on this machine's GPUs, several ways.

- direct: `gm.matmul` of device matrices in this process (the ceiling);
- resident: gpumat.dask with Matrix chunks, one worker process a GPU (1 worker; and, with two GPUs,
  2 workers on 2 GPUs);
- resident, 2 workers sharing GPU 0 (chunks move between the processes through the host over TCP);
- numpy chunks: gpumat.dask with numpy chunks (each block host -> GPU -> host, K sums on the CPU).

The operands are made on the workers (dask.array's random numbers, then uploaded there), persisted before
timing; a timed run is persist() of C, wait(), and every worker's GPU synchronised: wall seconds, the
median of the runs after one warm-up. Checked: C's first rows against the direct product.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import gpumat as gm

from .. import _dtypes
from .common import environment, print_table, write_json

SIZE, QUICK_SIZE = 16384, 4096
CHUNKS, QUICK_CHUNKS = (4096, 8192), (1024, 2048)
DTYPES = ("float32", "bfloat16")


def _wall(fn, repeat: int) -> float:
    fn()  # warm-up: worker start-up, module loads, the pool's first blocks
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _direct(a: np.ndarray, b: np.ndarray) -> tuple[float, np.ndarray]:
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        C = gm.matmul(A, B)

        def run():
            gm.matmul(A, B, out=C)
            gm.synchronize()

        seconds = _wall(run, repeat=5)
        first = C[:16, :].to_numpy()
        C.free()
    return seconds, first


def _dask_way(size, chunk, dtype, workers: int, share_gpu0: bool, resident: bool, repeat: int, operands: bool):
    """Seconds of one way through Dask, C's first 16 rows, and (if `operands`) A and B on the host."""
    import dask.array as da
    from distributed import Client, LocalCluster, wait

    import gpumat.dask as gmd

    env = {"CUDA_VISIBLE_DEVICES": "0"} if share_gpu0 else {}
    with (
        LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, env=env) as cl,
        Client(cl) as client,
    ):
        rng = da.random.default_rng(7)
        a = (rng.random((size, size), chunks=chunk, dtype=np.float32) - 0.5).astype(dtype)
        b = (rng.random((size, size), chunks=chunk, dtype=np.float32) - 0.5).astype(dtype)
        if resident:
            A, B = gmd.from_array(a).persist(), gmd.from_array(b).persist()
        else:
            A, B = a.persist(), b.persist()
        wait([A, B])
        host = (a.compute(), b.compute()) if operands else None  # the same random numbers in every cluster

        def run():
            C = gmd.matmul(A, B).persist()
            wait(C)
            if resident:
                gmd.synchronize(client)
            return C

        seconds = _wall(run, repeat)
        C = run()
        first = (gmd.to_numpy(C) if resident else C)[:16].compute()
    return seconds, first, host


def _error(got: np.ndarray, ref: np.ndarray) -> float:
    ref = ref.astype(np.float64)
    return float(np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref))


def run(args) -> dict:
    quick = getattr(args, "quick", False)
    size = QUICK_SIZE if quick else SIZE
    gpus = gm.device_count()
    records, rows = [], []
    for name in DTYPES:
        dtype = _dtypes.as_dtype(name)
        for chunk in QUICK_CHUNKS if quick else CHUNKS:
            ways = [("resident, 1 worker", 1, False, True, 5)]
            if gpus >= 2:
                ways.append(("resident, 2 workers on 2 GPUs", 2, False, True, 5))
            ways.append(("resident, 2 workers sharing GPU 0", 2, True, True, 3))
            ways.append(("numpy chunks, 1 worker", 1, False, False, 2))
            record = {"dtype": name, "M": size, "N": size, "K": size, "chunk": chunk, "ways": {}}
            direct = None
            for label, workers, share, resident, repeat in ways:
                seconds, first, host = _dask_way(size, chunk, dtype, workers, share, resident, repeat, direct is None)
                if direct is None:
                    host_a, host_b = host
                    direct, direct_first = _direct(host_a, host_b)
                    ref = host_a[:16].astype(np.float64) @ host_b.astype(np.float64)
                    del host, host_a, host_b
                    record["direct_seconds"] = direct
                    record["direct_rel_error_first_rows"] = _error(direct_first, ref)
                    rows.append([name, chunk, "direct gm.matmul", direct, 2 * size**3 / direct / 1e12, 1.0])
                record["ways"][label] = {
                    "workers": workers,
                    "seconds": seconds,
                    "over_direct": seconds / direct,
                    "tflops": 2 * size**3 / seconds / 1e12,
                    "rel_error_first_rows": _error(first, ref),
                }
                rows.append([name, chunk, label, seconds, 2 * size**3 / seconds / 1e12, seconds / direct])
            one = record["ways"]["resident, 1 worker"]["seconds"]
            record["numpy_over_resident"] = record["ways"]["numpy chunks, 1 worker"]["seconds"] / one
            record["shared_over_one_worker"] = record["ways"]["resident, 2 workers sharing GPU 0"]["seconds"] / one
            if gpus >= 2:
                record["two_gpu_speedup"] = one / record["ways"]["resident, 2 workers on 2 GPUs"]["seconds"]
            records.append(record)
    print_table(
        f"{size}^3 through gpumat.dask on {gpus} GPU(s): wall seconds (persist, wait, GPUs synchronised)",
        ["dtype", "chunk", "how", "seconds", "TFLOP/s", "over direct"],
        rows,
    )
    env = environment()
    print(f"\n{env['device']} x{gpus}, {env['date']}")
    return write_json("dask", {"gpus": gpus, "results": records})
