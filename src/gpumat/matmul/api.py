"""The public face of the GEMM engine: `matmul` and `matmul_plan`.

A call checks its arguments (before anything is allocated or launched), describes the product as a
Problem, takes the plan (cached by problem, GPU and algorithm), allocates the result and hands the
plan to the launcher: one path for every dtype, precision mode and variant. Host (numpy) operands
go to gpumat.outofcore, which plans each tile product through this engine.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .. import _precision
from .._dtypes import name as dtype_name
from ..matrix import INT32_MAX, Matrix, as_matrix, check_out, done_on, operand_device, same_dtype, use_on
from ..runtime import memops
from ..runtime.geometry import cdiv
from ..runtime.streams import SPECIAL_STREAMS, own_streams, stream_handle
from . import planner
from .launcher import launch
from .plan import MatmulPlan
from .problem import Problem, Target, aligned
from .variants import VARIANTS, algorithms

_NAMES: dict[str, frozenset] = {}  # algorithm names by input dtype suffix
_PLANS: dict[tuple, object] = {}  # the launch path's own cache: a MatmulPlan, or plans by operand alignment
_PLAN_CACHE_SIZE = 4096


def _check(a, b, out, algorithm: str) -> tuple[int, int, int]:
    """Validate the operands and the algorithm's name; returns (M, N, K)."""
    a, b = as_matrix(a, "a"), as_matrix(b, "b")
    dt = same_dtype("matmul", (a, "a"), (b, "b"))
    names = _NAMES.get(a._sfx)
    if names is None:
        names = _NAMES[a._sfx] = frozenset(algorithms(a._sfx))
    if algorithm not in names:
        raise ValueError(
            f"unknown matmul algorithm {algorithm!r} for {dtype_name(dt)}; choose one of "
            f"{', '.join(algorithms(a._sfx))}"
        )
    if out is not None and out._sfx != a._sfx:
        half = a._sfx in ("f16", "bf16")
        if not (half and out._sfx == "f32"):
            raise TypeError(
                f"matmul: a and b are {dtype_name(dt)} and out is {dtype_name(out.dtype)}; out must be "
                f"{dtype_name(dt)}" + (" or float32" if half else "")
            )
        if algorithm != "auto" and (a._sfx, "f32") not in VARIANTS[algorithm].kernels:
            f32_out = [n for n in algorithms(a._sfx) if n == "auto" or (a._sfx, "f32") in VARIANTS[n].kernels]
            raise TypeError(
                "matmul: the teaching kernels write C in the input dtype; a float32 out takes "
                f"algorithm {', '.join(repr(x) for x in f32_out)}"
            )
    m, k, k2, n = a._height, a._width, b._height, b._width
    if k != k2:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned: a.width {k} != b.height {k2}")
    if m > INT32_MAX or n > INT32_MAX or k > INT32_MAX:
        raise ValueError(
            f"matmul: dimension {max(m, n, k)} of {m}x{k} @ {k}x{n} is over the kernels' limit "
            f"of 2^31 - 1 rows or columns"
        )
    if out is not None:
        check_out(out, (m, n), (a, b), "matmul")
    return m, n, k


def _mode(a: Matrix, algorithm: str, precision) -> str:
    """The precision mode a call computes at: a named variant's own (a contradicting `precision=` is a
    ValueError, never a silent change), else `precision`, else the current default for float32; the
    other dtypes compute in their own format and refuse a precision."""
    if a._sfx != "f32":
        if precision is not None:
            raise ValueError(f"matmul: precision= chooses among float32 modes; a and b are {dtype_name(a.dtype)}")
        return "native"
    if algorithm == "auto":
        return _precision.current() if precision is None else _precision.check_precision(precision)
    own = planner.computes(VARIANTS[algorithm], "f32")
    if precision is not None and _precision.check_precision(precision) != own:
        raise ValueError(f"matmul algorithm {algorithm!r} computes at precision {own!r}, not {precision!r}")
    return own


def _plan_for(a: Matrix, b: Matrix, out_sfx: str, m: int, n: int, k: int, mode: str, algorithm: str, dev) -> MatmulPlan:
    """The plan of a call, from the launch path's cache. Most plans do not depend on the operands'
    alignment: those are cached under the product alone, so the common call looks at no address."""
    key = (m, n, k, a._sfx, out_sfx, mode, algorithm, dev)
    entry = _PLANS.get(key)
    if entry is None:
        entry = _PLANS[key] = _plans_by_alignment(Problem(m, n, k, a._sfx, out_sfx, mode), Target.of(dev), algorithm)
        if len(_PLANS) > _PLAN_CACHE_SIZE:
            try:  # the oldest entry; another device's thread may be evicting at the same time
                _PLANS.pop(next(iter(_PLANS)), None)
            except (StopIteration, RuntimeError):
                pass
    if entry.__class__ is MatmulPlan:
        return entry
    return entry[aligned(a.elements, a._stride, a._dtype.itemsize), aligned(b.elements, b._stride, b._dtype.itemsize)]


def _plans_by_alignment(p: Problem, t: Target, algorithm: str):
    """One plan when the four alignments of A and B plan alike, else the plans by (A aligned, B aligned).
    When no row the call may run reads alignment (copy-engine variants, or ones auto takes only for aligned
    operands), one plan is made: the common first call of a process plans once, not four times."""
    rows = (
        [VARIANTS[algorithm]]
        if algorithm != "auto"
        else [
            v
            for v in VARIANTS.values()
            if (p.dtype, p.out_dtype) in v.kernels and planner.computes(v, p.dtype) == p.mode
        ]
    )
    if not any(v.needs_aligned or v.auto_needs_aligned for v in rows):
        return planner.plan(p, t, algorithm)
    plans = {
        (x, y): planner.plan(replace(p, a_aligned=x, b_aligned=y), t, algorithm)
        for x in (True, False)
        for y in (True, False)
    }
    first = plans[True, True]
    same = all(
        (q.variant, q.splits, q.k_chunk, q.copy_a, q.copy_b)
        == (first.variant, first.splits, first.k_chunk, first.copy_a, first.copy_b)
        for q in plans.values()
    )
    return first if same else plans


def matmul_plan(
    a: Matrix,
    b: Matrix,
    out: Matrix | None = None,
    algorithm: str = "auto",
    precision: str | None = None,
    *,
    splits: int | None = None,
    k_chunk: int | None = None,
) -> MatmulPlan:
    """The plan gm.matmul would run for these operands: the kernel, the split of K, the launch grid, the
    scratch and copies it needs, the cost model's time and the reason for the choice (print it). Give
    `splits` (and `k_chunk`, default: K cut evenly on the variant's alignment) to force a split-K plan
    of a variant that splits K. Pass the result as gm.matmul(a, b, plan=...) to run it. Nothing is
    allocated or launched."""
    dev = operand_device((a, "a"), (b, "b"), (out, "out"))
    m, n, k = _check(a, b, out, algorithm)
    mode = _mode(a, algorithm, precision)
    out_sfx = out._sfx if out is not None else a._sfx
    a_al, b_al = (aligned(x.elements, x._stride, x._dtype.itemsize) for x in (a, b))
    p = planner.plan(Problem(m, n, k, a._sfx, out_sfx, mode, a_al, b_al), Target.of(dev), algorithm)
    if splits is None and k_chunk is None:
        return p
    if splits is None:
        raise ValueError("matmul_plan: k_chunk= needs splits=")
    if k_chunk is None:
        k_chunk = cdiv(cdiv(k, splits), p.variant.k_align) * p.variant.k_align
    return planner.forced(p.problem, p.target, p.algorithm, splits, k_chunk)


def matmul(
    a: Matrix,
    b: Matrix,
    out: Matrix | None = None,
    algorithm: str = "auto",
    precision: str | None = None,
    stream=None,
    *,
    plan: MatmulPlan | None = None,
    devices=None,
    memory_limit=None,
) -> Matrix:
    """C = a @ b for two matrices of one dtype and any shape (views welcome) on their device. Returns out
    (new if None, in the inputs' dtype; for float16/bfloat16 a float32 out is allowed). `stream`: where the
    work is queued (default: the thread's current stream). Deterministic: the same inputs give the same
    bits on the same GPU (no atomics; split-K partial sums are added in a fixed order).

    algorithm: "auto" (the planner's choice; see gm.matmul_plan for what it picks and why) or a variant's
    name (gpumat.matmul.algorithms(dtype) lists them). plan: a plan from gm.matmul_plan for operands of
    this shape, dtype, alignment and device, run as it is.

    precision (float32 operands): "float32" (exact FP32 kernels), "tf32x3" (FP32-level accuracy on the
    tensor cores) or "tf32" (one TF32 pass, ~1e-3 relative error); None takes the current default
    (gm.matmul_precision block, else gm.set_matmul_precision, else "float32"). A named algorithm runs at
    its own precision. Below compute capability 8.0, and on GPUs that give a block less shared memory
    than the tensor-core kernels need (99 KiB parts), the tensor-core modes run the exact FP32 kernels.
    Other dtypes ignore a precision of None and refuse a tensor-core one.

    Host operands (numpy arrays, both) of any size that fits in host memory run out of core: tiles move
    through each GPU in `devices` (default: all visible), within `memory_limit` bytes a GPU (default: its
    free memory or gpumat's memory limit), and C comes back as a numpy array (or fills `out`); see
    gpumat.outofcore."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            raise TypeError("matmul: give both operands as numpy arrays (out of core) or both as gpumat Matrix")
        if stream is not None or algorithm != "auto" or plan is not None:
            raise ValueError("matmul: host operands run on each GPU's own streams with algorithm 'auto'")
        from ..outofcore import matmul_host  # the host path is a layer above the engine

        return matmul_host(a, b, out=out, precision=precision, devices=devices, memory_limit=memory_limit)
    if devices is not None or memory_limit is not None:
        raise ValueError(
            "matmul: devices= and memory_limit= apply to host (numpy) operands; Matrix operands "
            "compute on their own device"
        )
    dev = operand_device((a, "a"), (b, "b"), (out, "out"))
    s = stream_handle(stream, dev)
    with dev.lock:  # from the checks to the enqueue, no free() can slip in between
        m, n, k = _check(a, b, out, algorithm)
        out_sfx = out._sfx if out is not None else a._sfx
        if plan is None:
            if algorithm == "auto" and precision is None:  # the common call, without a function call
                mode = _precision.current() if a._sfx == "f32" else "native"
            else:
                mode = _mode(a, algorithm, precision)
            if m and n and k:
                plan = _PLANS.get((m, n, k, a._sfx, out_sfx, mode, algorithm, dev))
                if plan.__class__ is not MatmulPlan:
                    plan = _plan_for(a, b, out_sfx, m, n, k, mode, algorithm, dev)
        else:
            _check_plan(plan, a, b, out_sfx, m, n, k, dev)
        if out is None:
            out = Matrix._allocate(m, n, dev, s, a._dtype)
        if m == 0 or n == 0:
            return out
        if a._buffer.stream != s or b._buffer.stream != s or out._buffer.stream != s:
            use_on(s, a, b, out)
        if k == 0:
            memops.zero_2d(out.elements, out.stride * out.itemsize, n * out.itemsize, m, s)
        else:
            launch(plan, a, b, out, dev, s)
        if s not in SPECIAL_STREAMS and s not in own_streams:  # another library's stream
            done_on(s, a, b, out)
    return out


def _check_plan(p, a: Matrix, b: Matrix, out_sfx: str, m: int, n: int, k: int, dev) -> None:
    """A given plan must be for this product on this GPU, and a TMA plan that reads an operand in place
    needs that operand aligned."""
    if not isinstance(p, MatmulPlan):
        raise TypeError(f"matmul: plan= takes a plan from gm.matmul_plan, got {type(p).__name__}")
    q = p.problem
    in_place = [x for x, copied in ((a, p.copy_a), (b, p.copy_b)) if p.variant.needs_aligned and not copied]
    if (
        (q.m, q.n, q.k, q.dtype, q.out_dtype) != (m, n, k, a._sfx, out_sfx)
        or p.target != Target.of(dev)
        or not all(aligned(x.elements, x._stride, x._dtype.itemsize) for x in in_place)
    ):
        raise ValueError(
            f"matmul: the plan is for {q.describe()} on sm_{p.target.arch}; these operands are "
            f"{m}x{k} @ {k}x{n} {a._sfx} -> {out_sfx} on GPU {dev.ordinal}"
        )
