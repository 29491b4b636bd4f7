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

import numpy as np

import gpumat as gm

from .. import _dtypes
from .common import environment, print_table, wall, write_json

SIZE, QUICK_SIZE = 16384, 4096
CHUNKS, QUICK_CHUNKS = (4096, 8192), (1024, 2048)
DTYPES = ("float32", "bfloat16")


def _direct(a: np.ndarray, b: np.ndarray) -> tuple[float, np.ndarray]:
    with (
        gm.Matrix.from_numpy(a) as A,
        gm.Matrix.from_numpy(b) as B,
        gm.Matrix.empty(a.shape[0], b.shape[1], a.dtype) as C,
    ):

        def run():
            gm.matmul(A, B, out=C)
            gm.synchronize()

        seconds = wall(run, repeat=5)
        return seconds, C[:16, :].to_numpy()


# (label, workers, all on GPU 0, resident chunks, timed runs)
WAYS = (
    ("resident, 1 worker", 1, False, True, 3),
    ("numpy chunks, 1 worker", 1, False, False, 1),
    ("resident, 2 workers on 2 GPUs", 2, False, True, 3),
    ("resident, 2 workers sharing GPU 0", 2, True, True, 1),
)


def _cluster_ways(client, workers, resident, repeat, size, chunks_list, dtypes, host):
    """Every (dtype, chunk) case on one cluster: seconds and C's first rows. The operands are random numbers
    made on the workers in the largest chunks (the same numbers whatever the cluster), re-chunked."""
    import dask.array as da
    from distributed import wait

    import gpumat.dask as gmd

    out = {}
    for name in dtypes:
        dtype = _dtypes.as_dtype(name)
        rng = da.random.default_rng(7)
        big = max(chunks_list)
        a = (rng.random((size, size), chunks=big, dtype=np.float32) - 0.5).astype(dtype)
        b = (rng.random((size, size), chunks=big, dtype=np.float32) - 0.5).astype(dtype)
        if name not in host:
            host[name] = (a.compute(), b.compute())
        for chunk in chunks_list:
            A = a.rechunk(chunk)
            B = b.rechunk(chunk)
            A, B = (gmd.from_array(A), gmd.from_array(B)) if resident else (A, B)
            A, B = A.persist(), B.persist()
            wait([A, B])
            runs = iter(range(10**6))

            def run():
                # fresh keys every run: a persisted result of the same graph would be found, not computed
                C = gmd.matmul(A, B, name=f"bench-{name}-{chunk}-{next(runs)}").persist()
                wait(C)
                if resident:
                    gmd.synchronize(client)
                return C

            seconds = wall(run, repeat)
            C = run()
            first = (gmd.to_numpy(C) if resident else C)[:16].compute()
            out[(name, chunk)] = (seconds, first)

    return out


def _error(got: np.ndarray, ref: np.ndarray) -> float:
    ref = ref.astype(np.float64)
    return float(np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref))


def run(args) -> dict:
    from distributed import Client, LocalCluster

    quick = getattr(args, "quick", False)
    size = QUICK_SIZE if quick else SIZE
    chunks_list = QUICK_CHUNKS if quick else CHUNKS
    gpus = gm.device_count()
    host: dict[str, tuple] = {}
    measured = {}
    for label, workers, share, resident, repeat in WAYS:
        if workers > 1 and not share and gpus < 2:
            continue
        env = {"CUDA_VISIBLE_DEVICES": "0"} if share else {}
        with (
            LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, env=env
            ) as cl,
            Client(cl) as client,
        ):
            measured[label] = _cluster_ways(client, workers, resident, repeat, size, chunks_list, DTYPES, host)
        print(f"{label}: " + ", ".join(f"{k[0]} {k[1]} {v[0]:.4g} s" for k, v in measured[label].items()), flush=True)
    records, rows = [], []
    for name in DTYPES:
        a, b = host[name]
        direct, direct_first = _direct(a, b)
        ref = a[:16].astype(np.float64) @ b.astype(np.float64)
        for chunk in chunks_list:
            record = {"dtype": name, "M": size, "N": size, "K": size, "chunk": chunk, "ways": {}}
            record["direct_seconds"] = direct
            record["direct_rel_error_first_rows"] = _error(direct_first, ref)
            rows.append([name, chunk, "direct gm.matmul", direct, 2 * size**3 / direct / 1e12, 1.0])
            for label, by_case in measured.items():
                seconds, first = by_case[(name, chunk)]
                record["ways"][label] = {
                    "workers": next(w[1] for w in WAYS if w[0] == label),
                    "seconds": seconds,
                    "over_direct": seconds / direct,
                    "tflops": 2 * size**3 / seconds / 1e12,
                    "rel_error_first_rows": _error(first, ref),
                }
                rows.append([name, chunk, label, seconds, 2 * size**3 / seconds / 1e12, seconds / direct])
            ways = record["ways"]
            one = ways["resident, 1 worker"]["seconds"]
            record["numpy_over_resident"] = ways["numpy chunks, 1 worker"]["seconds"] / one
            record["shared_over_one_worker"] = ways["resident, 2 workers sharing GPU 0"]["seconds"] / one
            if "resident, 2 workers on 2 GPUs" in ways:
                record["two_gpu_speedup"] = one / ways["resident, 2 workers on 2 GPUs"]["seconds"]
            records.append(record)
    print_table(
        f"{size}^3 through gpumat.dask on {gpus} GPU(s): wall seconds (persist, wait, GPUs synchronised)",
        ["dtype", "chunk", "how", "seconds", "TFLOP/s", "over direct"],
        rows,
    )
    env = environment()
    print(f"\n{env['device']} x{gpus}, {env['date']}")
    return write_json("dask", {"gpus": gpus, "results": records})
