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
call after call, as every plan's is. `forget()` drops what was measured.
"""

from __future__ import annotations

import statistics
import time

from ..matrix import Matrix
from ..operands import operand_device
from ..runtime.streams import Event
from . import planner
from .plan import MatmulPlan
from .route import DEFAULT_ALPHA, DEFAULT_BETA, forget_bound_plans, plan_of_call, product, result_shape

TOP = 4  # the model's best candidates that are timed
BATCH_S = 1e-3  # GPU time a timed batch of calls spans at least
BATCHES = 3
MAX_CALLS = 200  # calls in a batch at most


def choose(plans: list[MatmulPlan], seconds_of) -> tuple[MatmulPlan, list[float]]:
    """The plan of least measured time (the first of equal ones: the model's order breaks ties) and every
    plan's time; `seconds_of(plan)` measures one."""
    times = [seconds_of(p) for p in plans]
    best = min(range(len(plans)), key=lambda i: (times[i], i))
    return plans[best], times


def _scratch_like(a: Matrix, b: Matrix, out: Matrix | None, dev) -> tuple[Matrix, Matrix]:
    """(the matrix to free, the result to write while timing): out's shape, dtype and layout (a transposed
    view of new storage where out is one), or the product's."""
    if out is None:
        new = Matrix.empty(result_shape(a, b), dtype=a.dtype, device=dev)
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


def tune(a, b, out, precision) -> MatmulPlan:
    """gm.matmul_plan(..., tune=True): the fastest of auto's top candidates, measured on these operands,
    remembered as auto's choice for the problem on this GPU. Returns its plan (its reason gives every
    candidate's time)."""
    base = plan_of_call(a, b, out, "auto", precision, None, None)
    p, t = base.problem, base.target
    options = planner.ranked(p, t)[:TOP]
    if base.problem != p or len(options) < 2:  # a fallback of the mode, or nothing to choose between
        return base
    dev = operand_device((a, "a"), (b, "b"), (out, "out"))
    owner, scratch = _scratch_like(a, b, out, dev)

    def seconds_of(q: MatmulPlan) -> float:
        return _seconds_a_call(
            lambda: product(a, b, scratch, "auto", precision, None, DEFAULT_ALPHA, DEFAULT_BETA, None, None, q), dev
        )

    began = time.perf_counter()
    try:
        best, times = choose(options, seconds_of)
    finally:
        owner.free()
    spent = time.perf_counter() - began
    measured = ", ".join(
        f"{q.variant.name} ({q.splits} splits) {s * 1e6:.1f} us" for q, s in zip(options, times, strict=True)
    )
    why = f"tuned: measured fastest of {measured} (tuning took {spent * 1e3:.0f} ms)"
    planner.remember(p, t, best, why)
    forget_bound_plans()
    return planner.plan(p, t)


def forget() -> None:
    """Drop every measured plan: auto is the cost model's choice again (the cached plans go too)."""
    planner.forget_tuning()
    forget_bound_plans()
