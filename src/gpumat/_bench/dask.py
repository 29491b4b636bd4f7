"""`python -m gpumat bench dask`: the README's Dask recipe, timed, on one GPU and on two.

The recipe: `LocalCluster(n_workers=W, threads_per_worker=1)` (worker processes, one a GPU), numpy
operands made in this process. Each case (dtype, size, chunk) is timed in three parts, wall seconds:

- upload: `gmd.from_array` of A and B (numpy) until both are on the workers' GPUs (and GB/s of the two);
  a small upload and product before the first case pays the cluster's first use (`first_use_seconds`);
- product: `gmd.matmul(A, B).persist()`, wait, every worker's GPU synchronised: the median of the runs
  after a warm-up (fresh keys each run);
- download: `gmd.to_numpy(C).compute()` (numpy chunks over TCP, joined here), and `gmd.asnumpy(C)`
  (chunks GPU to GPU to this process, each downloaded in place), C whole in this process.

Anchors in the same run: the direct `gm.matmul` of the same operands resident on one GPU (its GPU
time, CUDA events), and with two GPUs the direct out-of-core call `gm.matmul(a, b, devices=[0, 1])`
(numpy in and out, wall). `speedup_2_workers` is the product's time on one worker over two. Checked:
C's first rows against a float64 product.
"""

from __future__ import annotations

import time

import numpy as np

import gpumat as gm

from .. import _dtypes
from .common import environment, print_table, time_ms, wall, write_json

# (dtype, size, chunk): the cases; --quick: small ones that show the paths work
CASES = (
    ("float32", 32768, 8192),
    ("float32", 16384, 8192),
    ("float32", 16384, 4096),
    ("bfloat16", 32768, 8192),
)
QUICK_CASES = (("float32", 4096, 2048), ("float32", 4096, 1024), ("bfloat16", 4096, 2048))
CHECK_ROWS = 16


def _operands(name: str, size: int, cache: dict):
    key = (name, size)
    if key not in cache:
        rng = np.random.default_rng(7)
        dtype = _dtypes.as_dtype(name)
        a = (rng.random((size, size), dtype=np.float32) - 0.5).astype(dtype)
        b = (rng.random((size, size), dtype=np.float32) - 0.5).astype(dtype)
        ref = a[:CHECK_ROWS].astype(np.float64) @ b.astype(np.float64)
        cache[key] = (a, b, ref)
    return cache[key]


def _error(got: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref))


def _direct(a: np.ndarray, b: np.ndarray) -> float:
    """The one-GPU product of resident operands: GPU seconds (CUDA events, median)."""
    with (
        gm.Matrix.from_numpy(a) as A,
        gm.Matrix.from_numpy(b) as B,
        gm.Matrix.empty(a.shape[0], b.shape[1], a.dtype) as C,
    ):
        return time_ms(lambda: gm.matmul(A, B, out=C), warmup=1, repeat=3) / 1e3


def _first_use(client) -> float:
    """A small upload and product on a fresh cluster, timed: what the first call pays once (each worker's
    CUDA context and kernels, gpumat's plugins, the first IPC transfers), kept out of the timed cases."""
    from distributed import wait

    import gpumat.dask as gmd

    x = np.ones((2048, 2048), np.float32)
    t0 = time.perf_counter()
    X = gmd.from_array(x, chunks=1024)
    wait(gmd.matmul(X, X).persist())
    gmd.synchronize(client)
    return time.perf_counter() - t0


def _cluster(client, cases, host: dict, repeat: int) -> dict:
    from distributed import wait

    import gpumat.dask as gmd

    out = {"first_use_seconds": _first_use(client)}
    for run_no, (name, size, chunk) in enumerate(cases):
        a, b, ref = _operands(name, size, host)
        t0 = time.perf_counter()
        A = gmd.from_array(a, chunks=chunk)
        B = gmd.from_array(b, chunks=chunk)
        wait([A, B])
        gmd.synchronize(client)
        upload = time.perf_counter() - t0
        plan = gmd.matmul_plan(A, B, client)
        runs = iter(range(10**6))

        def product(A=A, B=B):
            C = gmd.matmul(A, B, name=f"bench-{run_no}-{next(runs)}").persist()
            wait(C)
            gmd.synchronize(client)
            return C

        seconds = wall(product, repeat)
        C = product()
        t0 = time.perf_counter()
        c = gmd.to_numpy(C).compute()
        download = time.perf_counter() - t0
        t0 = time.perf_counter()
        whole = gmd.asnumpy(C)
        gathered = time.perf_counter() - t0
        if whole.tobytes() != c.tobytes():
            raise AssertionError("gmd.asnumpy and gmd.to_numpy(...).compute() disagree")
        del whole
        out[(name, size, chunk)] = {
            "upload_seconds": upload,
            "upload_gbps": (a.nbytes + b.nbytes) / upload / 1e9,
            "product_seconds": seconds,
            "download_seconds": download,
            "asnumpy_seconds": gathered,
            "asnumpy_gbps": c.nbytes / gathered / 1e9,
            "tflops": 2 * size**3 / seconds / 1e12,
            "moved_mib_planned": plan.moved_bytes / 2**20,
            "rel_error_first_rows": _error(c[:CHECK_ROWS], ref),
        }
        figures = ", ".join(f"{k} {v:.4g}" for k, v in out[(name, size, chunk)].items())
        print(f"  {name} {size}^3 in {chunk}: {figures}", flush=True)
        del A, B, C, c
    return out


def run(args) -> dict:
    from distributed import Client, LocalCluster

    quick = getattr(args, "quick", False)
    cases = QUICK_CASES if quick else CASES
    gpus = gm.device_count()
    host: dict = {}
    by_workers = {}
    for workers in (1, 2) if gpus >= 2 else (1,):
        print(f"LocalCluster(n_workers={workers}, threads_per_worker=1), worker processes", flush=True)
        with (
            LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cl,
            Client(cl) as client,
        ):
            by_workers[workers] = _cluster(client, cases, host, repeat=3)
    first_use = {f"workers_{w}": m.pop("first_use_seconds") for w, m in by_workers.items()}
    records, rows = [], []
    for name, size, chunk in cases:
        a, b, _ = _operands(name, size, host)
        direct = _direct(a, b)
        record = {"dtype": name, "M": size, "N": size, "K": size, "chunk": chunk, "direct_seconds": direct}
        rows.append([name, size, chunk, "direct gm.matmul, 1 GPU", "", direct, "", "", 1.0])
        if gpus >= 2:
            record["outofcore_2_gpus_seconds"] = wall(lambda a=a, b=b: gm.matmul(a, b, devices=[0, 1]), repeat=1)
            ooc = record["outofcore_2_gpus_seconds"]
            rows.append([name, size, chunk, "gm.matmul(numpy, devices=[0, 1])", "", ooc, "", "", ""])
        for workers, measured in by_workers.items():
            m = measured[(name, size, chunk)]
            record[f"workers_{workers}"] = {**m, "over_direct": m["product_seconds"] / direct}
            rows.append(
                [
                    name,
                    size,
                    chunk,
                    f"gpumat.dask, {workers} worker(s)",
                    m["upload_gbps"],
                    m["product_seconds"],
                    m["download_seconds"],
                    m["asnumpy_gbps"],
                    m["product_seconds"] / direct,
                ]
            )
        if 2 in by_workers:
            two = record["workers_2"]["product_seconds"]
            record["speedup_2_workers"] = record["workers_1"]["product_seconds"] / two
            record["two_workers_over_outofcore"] = two / record["outofcore_2_gpus_seconds"]
        records.append(record)
    print_table(
        f"gpumat.dask on {gpus} GPU(s), worker processes: upload GB/s, product and download wall seconds",
        ["dtype", "size", "chunk", "how", "upload GB/s", "product s", "download s", "asnumpy GB/s", "over direct"],
        rows,
    )
    for r in records:
        if "speedup_2_workers" in r:
            print(f"{r['dtype']} {r['M']}^3 in {r['chunk']}: two workers {r['speedup_2_workers']:.2f}x one")
    env = environment()
    print(f"\n{env['device']} x{gpus}, {env['date']}")
    recipe = "LocalCluster(n_workers=W, threads_per_worker=1)"
    payload = {"gpus": gpus, "recipe": recipe, "first_use_seconds": first_use, "results": records}
    return write_json("dask", payload)
