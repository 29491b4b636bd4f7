"""Measured plans: `gm.matmul_plan(a, b, ..., tune=True)` times auto's top candidates on the operands and
makes the fastest auto's choice for that problem on that GPU (in this process).

The cost model ranks the table's rows for a problem; where its figures are close, or off for this GPU,
the model's choice may not be the fastest. Tuning runs the model's best TOP candidates (each with its
best split), every one on the caller's operands into a scratch result (the caller's `out` is not
written), on the thread's current stream: one call first (it loads the kernel), then batches of calls
between two events, each batch at least BATCH_S of GPU time, the median of BATCHES batches a call. The
fastest is remembered (planner.remember): later `gm.matmul` calls of the same problem (shape, dtypes,
layouts, alignment, batch, precision) on the same kind of GPU run it. The result of such a call can
differ in its last bits from the untuned plan's (another kernel sums in another order), and is the same
call after call, as every plan's is. `forget()` drops what was measured; `save()` writes it to a file
under the user's cache directory and `load()` takes it back in a later process (only when asked).
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import tempfile
import threading
import time
from dataclasses import asdict

from ..matrix import Matrix
from ..operands import operand_device
from ..runtime.streams import Event, stream_handle
from . import planner
from .plan import MatmulPlan
from .problem import Problem, Target
from .route import bind, call_view, enqueue, forget_bound_plans, problem_of_call, result_dtype, result_shape

TOP = 4  # the model's best candidates that are timed
BATCH_S = 1e-3  # GPU time a timed batch of calls spans at least
BATCHES = 3
MAX_CALLS = 200  # calls in a batch at most
MARGIN = 0.03  # the model's choice stays unless another candidate measured this much faster
# one tuning (or load, or save) at a time in a process: two tunings at once would time each other's work
_serial = threading.Lock()


def _one_at_a_time(f):
    @functools.wraps(f)
    def serialised(*args, **kwargs):
        with _serial:
            return f(*args, **kwargs)

    return serialised


def choose(plans: list[MatmulPlan], seconds_of, margin: float = MARGIN) -> tuple[MatmulPlan, list[float]]:
    """The plan to keep and every plan's measured time (`seconds_of(plan)` measures one): the first plan
    (the model's choice) unless another ran more than `margin` faster, then the fastest (the first of
    equal times)."""
    times = [seconds_of(p) for p in plans]
    best = min(range(len(plans)), key=lambda i: (times[i], i))
    if times[best] > times[0] * (1 - margin):
        best = 0
    return plans[best], times


def _scratch_like(a: Matrix, b: Matrix, out: Matrix | None, dev) -> tuple[Matrix, Matrix]:
    """(the matrix to free, the result to write while timing): out's shape, dtype and layout (a transposed
    view of new storage where out is one), or the product's."""
    if out is None:
        new = Matrix.empty(result_shape(a, b), dtype=result_dtype(a), device=dev)
        return new, new
    if out.is_transposed:
        new = Matrix.empty(out.T.shape, dtype=out.dtype, device=dev)
        return new, new.T
    new = Matrix.empty(out.shape, dtype=out.dtype, device=dev)
    return new, new


def _seconds_a_call(run, dev) -> float:
    """Median seconds of one call of `run` queued back to back on the thread's current stream of `dev`
    (after one call that loads its kernel)."""
    start, stop = Event(device=dev), Event(device=dev)
    try:
        run()
        start.record()
        run()
        stop.record()
        stop.synchronize()
        one = max(start.elapsed_time(stop) / 1e3, 1e-7)
        calls = max(1, min(MAX_CALLS, int(BATCH_S / one)))
        times = []
        for _ in range(BATCHES):
            start.record()
            for _ in range(calls):
                run()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / 1e3 / calls)
        return statistics.median(times)
    finally:
        start.close()
        stop.close()


def remember(p: Problem, t: Target, chosen: MatmulPlan, why: str) -> None:
    """Make `chosen` auto's plan for p on t (planner.remember), and drop the bound plans made before."""
    planner.remember(p, t, chosen, why)
    forget_bound_plans()


@_one_at_a_time
def tune(a, b, out, precision) -> MatmulPlan:
    """gm.matmul_plan(..., tune=True): the fastest of auto's top candidates, measured on these operands,
    remembered as auto's choice for the problem on this GPU. Returns its plan (its reason gives every
    candidate's time). A problem the mode does not run itself (a tf32 product planned as exact FP32),
    with fewer than two candidates, or whose result layout a scratch result cannot pose, is not tuned:
    its plan is returned as it is."""
    p, t = problem_of_call(a, b, out, "auto", precision)
    base = planner.plan(p, t)
    options = planner.ranked(p, t)[:TOP]
    if base.problem != p or len(options) < 2:
        return base
    dev = operand_device((a, "a"), (b, "b"), (out, "out"))
    owner, scratch = _scratch_like(a, b, out, dev)
    try:
        if problem_of_call(a, b, scratch, "auto", precision)[0] != p:  # e.g. a batch out with gaps
            return base
        # each candidate bound and run as a plain call runs its bound plan: no checks between launches
        _, _, _, _, av, bv, cv, _, _, epilogue = call_view(a, b, scratch)
        buffers = (a._operand()[8], b._operand()[8], scratch._operand()[8])
        s = stream_handle(None, dev)

        def seconds_of(q: MatmulPlan) -> float:
            bound = bind(q, dev)

            def run():
                with dev.lock:
                    enqueue(bound, s, av, bv, cv, epilogue, *buffers)

            return _seconds_a_call(run, dev)

        began = time.perf_counter()
        best, times = choose(options, seconds_of)
        spent = time.perf_counter() - began
    finally:
        owner.free()
    measured = ", ".join(
        f"{q.variant.name} ({q.splits} splits{', swapped' if q.swap else ''}) {s * 1e6:.1f} us"
        for q, s in zip(options, times, strict=True)
    )
    kept = "the model's choice kept" if best is options[0] else "measured fastest"
    why = f"tuned: {kept} of {measured} (tuning took {spent * 1e3:.0f} ms)"
    remember(p, t, best, why)
    return planner.plan(p, t)


def forget() -> None:
    """Drop every measured plan: auto is the cost model's choice again (plans cached before are not served)."""
    planner.forget_tuning()
    forget_bound_plans()


def default_path() -> str:
    """Where save() and load() keep measured plans by default: gpumat/tuned-plans.json under the user's
    cache directory ($XDG_CACHE_HOME, else ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "gpumat", "tuned-plans.json")


def _target_record(t: Target) -> dict:
    return {"arch": t.arch, "sm_count": t.sm_count, "max_smem": t.max_smem, "modules": sorted(t.modules)}


@_one_at_a_time
def save(path: str | None = None) -> str:
    """Write this process's measured plans to `path` (default_path()), merged with what the file holds
    (an entry of this process wins); returns the path. Each entry names its problem, its GPU (compute
    capability, SMs, shared memory, the build's modules) and its plan."""
    path = path or default_path()
    entries = {
        json.dumps([e["problem"], e["target"]], sort_keys=True): e
        for e in _read(path)
        if isinstance(e, dict) and "problem" in e and "target" in e
    }
    for (p, t), (name, splits, k_chunk, why, swap) in planner.TUNED.copy().items():
        entry = {"problem": asdict(p), "target": _target_record(t), "variant": name, "splits": splits}
        entry.update(k_chunk=k_chunk, why=why, swap=swap)
        entries[json.dumps([entry["problem"], entry["target"]], sort_keys=True)] = entry
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=".tuned-plans-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"gpumat_tuned_plans": 1, "entries": list(entries.values())}, f, indent=1)
        os.replace(temporary, path)  # whole or not at all, for a reader in another process
    except BaseException:
        os.unlink(temporary)
        raise
    return path


def _read(path: str) -> list[dict]:
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:
        raise ValueError(f"gpumat: {path} is not a file of measured plans ({e})") from None
    if not isinstance(data, dict) or data.get("gpumat_tuned_plans") != 1 or not isinstance(data.get("entries"), list):
        raise ValueError(f"gpumat: {path} is not a file of measured plans")
    return data["entries"]


@_one_at_a_time
def load(path: str | None = None) -> int:
    """Make the measured plans saved in `path` (default_path()) auto's choices in this process, where their
    variant is still in the table and runs on their GPU (the others are skipped); returns how many were
    taken. A missing file takes none."""
    taken = 0
    for e in _read(path or default_path()):
        try:
            p = Problem(**e["problem"])
            tr = e["target"]
            t = Target(tr["arch"], tr["sm_count"], tr["max_smem"], frozenset(tr["modules"]))
            v = planner.VARIANTS[e["variant"]]
            splits, k_chunk = int(e["splits"]), int(e["k_chunk"])
            swap = e.get("swap", False)  # (absent from the files of earlier versions: never swapped)
        except (KeyError, TypeError, ValueError):
            continue
        if not isinstance(swap, bool):
            continue
        if planner.unavailable(v, t) is not None or (p.dtype, p.out_dtype) not in v.kernels:
            continue
        if v.computes(p.dtype) != p.mode or not v.computes_shape(p.m, p.n, p.k):
            continue
        try:  # the split must be one the variant can make for the problem (a file may have been edited)
            made = planner.forced(p, t, v.name, splits, k_chunk, swap)
        except (ValueError, TypeError):
            continue
        planner.TUNED[(p, t)] = (v.name, made.splits, made.k_chunk, str(e.get("why", "tuned (loaded)")), swap)
        taken += 1
    planner.tunings_loaded()
    forget_bound_plans()
    return taken
