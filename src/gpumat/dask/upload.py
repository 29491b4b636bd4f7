"""A numpy array to the workers' GPUs and back, with a distributed client, not through the graph.

`scatter` (gpumat.dask.from_array of a numpy array) and `gather` (gpumat.dask.asnumpy).


A numpy array given to dask.array.from_array travels inside the task graph, through the scheduler (a
graph of gigabytes, pickled and unpickled on the way). Here the client sends each chunk to its worker
itself, before any graph exists, and the dask array is made from the futures:

- Chunk (i, j) goes to worker i mod W (workers in the order of their names): a product's rows of blocks
  are then spread over the workers, and each row of A stays where it is (gpumat.dask.placement).
- Where this process has GPUs, it uploads each chunk to the GPU of the worker that will hold it and
  scatters the Matrix: a worker on this host takes it GPU to GPU (gpumat.dask.transfer), one thread a
  worker, so the uploads of several GPUs overlap. At most BATCH_BYTES of a worker's chunks are in
  flight at once, so this process never holds more than that on a GPU.
- Without a GPU here, the numpy chunks are scattered and uploaded by a task on their worker.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..matrix import Matrix
from ..runtime.devices import device_count
from . import chunks as _chunks
from . import placement, transfer

BATCH_BYTES = 1 << 30


def _worker_order(client) -> list[tuple[str, object]]:
    """(address, name) of the client's workers, ordered by name (LocalCluster's 0, 1, ...), then address."""
    info = client.scheduler_info()["workers"]
    return sorted(((a, w.get("name")) for a, w in info.items()), key=lambda p: (str(type(p[1])), str(p[1]), p[0]))


def _client_host(client) -> str | None:
    """The host of this process's end of its connection to the scheduler (None when it cannot tell)."""
    try:
        return transfer.host_of(client.scheduler_comm.comm.local_address)
    except AttributeError:
        return None


def _gpu_of(name) -> int:
    """The GPU a worker of this name uses, as gpumat.dask.chunks.worker_device decides (0 if it cannot tell)."""
    try:
        return int(name) % max(device_count(), 1)
    except (TypeError, ValueError):
        return 0


def scatter(client, x: np.ndarray, chunks, dtype):
    """A dask array of Matrix chunks made from `x` on the client's workers (see the module's note)."""
    import dask.array as da
    from dask.array.core import normalize_chunks
    from dask.highlevelgraph import HighLevelGraph

    chunks = normalize_chunks("auto" if chunks is None else chunks, x.shape, dtype=x.dtype)
    placement.register(client)  # the workers read Matrix chunks before any gpumat task ran there
    workers = _worker_order(client)
    if not workers:
        raise RuntimeError("gpumat.dask.from_array: the distributed client has no workers")
    name = f"gpumat-upload-{uuid.uuid4().hex}"
    rows = np.cumsum((0, *chunks[0]))
    cols = np.cumsum((0, *chunks[1]))
    mine: dict[int, list] = {}
    for i in range(len(chunks[0])):
        for j in range(len(chunks[1])):
            mine.setdefault(i % len(workers), []).append((i, j))
    here = _client_host(client)
    gpus_here = device_count() > 0 and transfer.enabled()

    def block(i, j):
        return x[rows[i] : rows[i + 1], cols[j] : cols[j + 1]]

    def send(w: int) -> dict:
        address, wname = workers[w]
        # a worker on this host takes a Matrix GPU to GPU; one elsewhere, numpy (a Matrix would come back
        # through this host's memory on its way there)
        use_gpu = gpus_here and (here is None or transfer.host_of(address) == here)
        futures = {}
        batch, size = {}, 0
        for i, j in mine.get(w, []):
            key = (name, i, j) if use_gpu else (name + "-host", i, j)
            if use_gpu:
                batch[key] = transfer.mark_ready(Matrix.from_numpy(block(i, j), dtype=dtype, device=_gpu_of(wname)))
            else:
                batch[key] = np.ascontiguousarray(block(i, j))
            size += batch[key].nbytes
            if size >= BATCH_BYTES:
                futures.update(client.scatter(batch, workers=[address], broadcast=False, direct=True))
                batch, size = {}, 0
        if batch:
            futures.update(client.scatter(batch, workers=[address], broadcast=False, direct=True))
        if not use_gpu:  # numpy chunks there: each uploaded by a task on its worker
            futures = {
                (name, i, j): client.submit(_chunks.upload, f, dtype=dtype, workers=[address], key=(name, i, j))
                for (_, i, j), f in futures.items()
            }
        return futures

    with ThreadPoolExecutor(len(workers), thread_name_prefix="gpumat-scatter") as pool:
        parts = list(pool.map(send, range(len(workers))))
    futures = {k: f for part in parts for k, f in part.items()}
    dsk = {(name, i, j): futures[(name, i, j)] for i in range(len(chunks[0])) for j in range(len(chunks[1]))}
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=())
    return da.Array(graph, name, chunks, meta=_chunks.meta(dtype), dtype=dtype)


def gather(client, x, out: np.ndarray) -> np.ndarray:
    """Fill `out` with the dask array `x` of Matrix chunks: the chunks computed (or found in memory), each
    brought to this process (GPU to GPU from a worker on this host) and downloaded into its place, one
    thread a worker that holds chunks."""
    from dask.core import flatten
    from distributed import futures_of, wait

    placement.register(client)
    persisted = client.persist(x)
    futures = {f.key: f for f in futures_of(persisted)}
    wait(list(futures.values()))
    keys = list(flatten(persisted.__dask_keys__()))
    rows = np.cumsum((0, *x.chunks[0]))
    cols = np.cumsum((0, *x.chunks[1]))
    who = client.who_has([futures[k] for k in keys])
    by_worker: dict = {}
    for key in keys:
        by_worker.setdefault((who.get(key) or ["?"])[0], []).append(key)

    def fetch(mine: list) -> None:
        for key in mine:
            _, i, j = key
            # (not freed here: with workers in this process the chunk is the worker's own; a copy brought
            # over goes when it is collected)
            (chunk,) = client.gather([futures[key]], direct=True)  # from its worker, not through the scheduler
            chunk.to_numpy(out=out[rows[i] : rows[i + 1], cols[j] : cols[j + 1]])

    with ThreadPoolExecutor(max(len(by_worker), 1), thread_name_prefix="gpumat-gather") as pool:
        list(pool.map(fetch, by_worker.values()))
    return out
