"""Tasks placed by their data: each block of a product on the worker that holds most of its inputs.

`assign` is the rule, a pure function: given each task's inputs (bytes, and the workers holding them)
and the workers (with their threads), every task goes to a worker holding most of its input bytes,
while no worker takes more than its share of the tasks (the tasks split by threads, rounded up): the
tasks with the most to lose are placed first. What moves is each input to each worker that lacks it,
once (a worker keeps what it fetched while a task there needs it).

`Placement` applies it on the scheduler (a distributed SchedulerPlugin, registered by gpumat.dask.matmul
when a distributed client is current): when a graph arrives, its gpumat tasks (a key naming gpumat)
whose inputs are all in memory get worker restrictions from `assign`, loose ones, so a task whose
worker has gone runs elsewhere. Dask's own rule (the worker with the earliest estimated start) would
put blocks there too, but does not balance them: with the inputs spread unevenly, one GPU ends up with
more blocks than the other.

`explain` gives the same figures for a product of persisted operands, from the client (what
gpumat.dask.matmul_plan prints).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

try:  # the scheduler plugin's base class; gpumat.dask works without distributed (local schedulers)
    from distributed.diagnostics.plugin import SchedulerPlugin
except ImportError:  # pragma: no cover - distributed is part of the dask extra
    SchedulerPlugin = object


def assign(tasks: dict, workers: dict) -> tuple[dict, int]:
    """tasks: {task: {input: (nbytes, holders)}}; workers: {worker: threads}. Returns ({task: worker},
    bytes moved). Deterministic: ties go to the worker with fewer tasks, then the first in `workers`."""
    if not workers:
        return {}, 0
    order = list(workers)
    total_threads = sum(max(int(t), 1) for t in workers.values())
    cap = {w: math.ceil(len(tasks) * max(int(workers[w]), 1) / total_threads) for w in order}
    held: dict = {}
    for t, inputs in tasks.items():
        by_worker = dict.fromkeys(order, 0)
        for nbytes, holders in inputs.values():
            for w in holders:
                if w in by_worker:
                    by_worker[w] += nbytes
        held[t] = by_worker

    def margin(t):
        ranked = sorted(held[t].values(), reverse=True) + [0, 0]
        return ranked[0] - ranked[1]

    count = dict.fromkeys(order, 0)
    placed = {}
    for t in sorted(tasks, key=lambda t: (-margin(t), str(t))):
        free = [w for w in order if count[w] < cap[w]] or order
        best = max(free, key=lambda w: (held[t][w], -count[w], -order.index(w)))
        placed[t] = best
        count[best] += 1
    moved = set()
    for t, w in placed.items():
        for name, (nbytes, holders) in tasks[t].items():
            if w not in holders:
                moved.add((name, w, nbytes))
    return placed, sum(m[2] for m in moved)


def _is_ours(key) -> bool:
    name = key[0] if isinstance(key, tuple) else key
    return isinstance(name, str) and "gpumat" in name


class Placement(SchedulerPlugin):
    """The scheduler side: restrict each arriving gpumat task whose inputs are in memory to the worker
    `assign` picks (loosely)."""

    name = "gpumat-placement"

    def update_graph(self, scheduler, *, tasks=(), **kwargs):
        workers = {ws.address: ws.nthreads for ws in scheduler.running}
        if len(workers) < 2:
            return
        by_group: dict = {}
        for key in tasks:
            ts = scheduler.tasks.get(key)
            if ts is None or ts.state not in ("released", "waiting") or not _is_ours(key):
                continue
            if ts.worker_restrictions or ts.host_restrictions or ts.resource_restrictions:
                continue  # the user placed it (dask.annotate, workers=): theirs to decide
            deps = ts.dependencies
            if not deps or not all(d.state == "memory" and d.who_has for d in deps):
                continue
            inputs = {d.key: (d.get_nbytes(), {w.address for w in d.who_has}) for d in deps}
            by_group.setdefault(ts.group_key, {})[key] = inputs
        for group in by_group.values():
            if len(group) < 2:
                continue
            placed, _ = assign(group, workers)
            for key, address in placed.items():
                ts = scheduler.tasks[key]
                ts.worker_restrictions = {address}
                ts.loose_restrictions = True


try:
    from distributed.diagnostics.plugin import WorkerPlugin
except ImportError:  # pragma: no cover
    WorkerPlugin = object


class WorkerSetup(WorkerPlugin):
    """Every worker (and every worker that joins later) registers the Matrix chunk's serialisation, as
    importing gpumat.dask does: a chunk scattered to a worker before any gpumat task ran there can be
    read."""

    name = "gpumat-dask-worker"

    def setup(self, worker):
        from . import chunks

        chunks.register()


_registered: set = set()


def register(client) -> None:
    """Give the client's cluster gpumat's plugins (the scheduler's Placement, the workers' WorkerSetup),
    once a scheduler."""
    address = getattr(client.scheduler, "address", None)
    if address in _registered:
        return
    client.register_plugin(WorkerSetup(), name=WorkerSetup.name)  # needed: without it a scatter cannot be read
    try:
        client.register_plugin(Placement(), name=Placement.name)
    except Exception as e:  # e.g. a scheduler without gpumat installed: Dask's own placement then
        warnings.warn(f"gpumat.dask: blocks are placed by Dask alone, the placement plugin failed: {e}", stacklevel=3)
    _registered.add(address)


@dataclass
class MatmulPlan:
    """Where gpumat.dask.matmul's blocks of C would run, and what would move between workers."""

    blocks: dict = field(default_factory=dict)  # (i, j) -> worker address
    moved_bytes: int = 0
    input_bytes: int = 0
    unknown: bool = False  # the operands are not all in memory: Dask places the blocks as they come

    @property
    def blocks_per_worker(self) -> dict:
        out: dict = {}
        for w in self.blocks.values():
            out[w] = out.get(w, 0) + 1
        return out

    def __str__(self) -> str:
        if self.unknown:
            return "gpumat.dask.matmul: the operands are not all in memory (persist them); Dask places the blocks"
        per = ", ".join(f"{w}: {n}" for w, n in sorted(self.blocks_per_worker.items()))
        moved, total = self.moved_bytes / 2**20, self.input_bytes / 2**20
        return (
            f"gpumat.dask.matmul: {len(self.blocks)} blocks of C ({per}); "
            f"{moved:.3f} MiB of the {total:.3f} MiB of A and B move between workers"
        )


def explain(client, a, b) -> MatmulPlan:
    """The plan of C = a @ b (persisted dask arrays with Matrix chunks, b's row chunks a's column chunks):
    each block's worker by `assign`, and the bytes that move."""
    import numpy as np
    from dask.core import flatten
    from distributed import futures_of

    if b.chunks[0] != a.chunks[1]:
        return MatmulPlan(unknown=True)
    futures = futures_of(a) + futures_of(b)
    who = client.who_has(futures)
    a_keys, b_keys = a.__dask_keys__(), b.__dask_keys__()
    if any(not who.get(k) for k in (*flatten(a_keys), *flatten(b_keys))):
        return MatmulPlan(unknown=True)
    isz = np.dtype(a.dtype).itemsize
    rows, inner, cols = a.chunks[0], a.chunks[1], b.chunks[1]
    tasks = {}
    for i, m in enumerate(rows):
        for j, n in enumerate(cols):
            inputs = {}
            for k, kk in enumerate(inner):
                inputs[a_keys[i][k]] = (m * kk * isz, set(who[a_keys[i][k]]))
                inputs[b_keys[k][j]] = (kk * n * isz, set(who[b_keys[k][j]]))
            tasks[(i, j)] = inputs
    workers = {w: info.get("nthreads", 1) for w, info in client.scheduler_info()["workers"].items()}
    placed, moved = assign(tasks, workers)
    total = (sum(rows) * sum(inner) + sum(inner) * sum(cols)) * isz
    return MatmulPlan(blocks=placed, moved_bytes=moved, input_bytes=total)
