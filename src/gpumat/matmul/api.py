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
from .._dtypes import ITEMSIZE
from .._dtypes import name as dtype_name
from ..matrix import INT32_MAX, Matrix
from ..memory import DeviceBuffer
from ..memory.ordering import mark_done, use_on
from ..operands import as_matrix, check_out, operand_device, same_dtype
from ..runtime import memops
from ..runtime.devices import thread_state
from ..runtime.geometry import MAX_GRID_YZ
from ..runtime.streams import LEGACY_STREAM, stream_handle
from . import planner
from .launcher import launch, launch_plain
from .plan import MatmulPlan
from .problem import Problem, Target, aligned
from .variants import ACTIVATIONS, IDENTITY, VARIANTS, algorithms

_NAMES: dict[str, frozenset] = {}  # algorithm names by input dtype suffix
_PLANS: dict[tuple, object] = {}  # the launch path's own cache: a MatmulPlan, or plans by operand alignment
_PLAN_CACHE_SIZE = 4096
_ALPHA, _BETA = 1.0, 0.0  # matmul's defaults, recognised by identity on the launch path
_THREAD = thread_state()  # each thread's state (its `with stream:` stack), one object for all threads


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
        shape = (m, n) if a._batch is None and b._batch is None else _result_shape(a, b, m, n)
        check_out(out, shape, (a, b), "matmul")
    return m, n, k


def _result_shape(a: Matrix, b: Matrix, m: int, n: int) -> tuple[int, ...]:
    """(m, n), or (batch, m, n) by NumPy's matmul rule: equal batches, or a batch of 1 (or a 2-D operand)
    broadcast over the other's; a ValueError naming both otherwise."""
    ba, bb = a._batch, b._batch
    if ba is None and bb is None:
        return m, n
    if ba is None or bb is None:
        return (ba if bb is None else bb), m, n
    if ba == bb or bb == 1:
        return ba, m, n
    if ba == 1:
        return bb, m, n
    raise ValueError(f"matmul: the batches of a {a.shape} and b {b.shape} do not broadcast ({ba} against {bb})")


def _number(x, name: str) -> float:
    if type(x) is float:  # the common case, without the checks below
        return x
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"matmul: {name} must be a real number, got {type(x).__name__}")
    try:
        return float(x)
    except OverflowError:  # an int beyond float64's range
        raise ValueError(f"matmul: {name} = {x} is beyond float64's range") from None


def _epilogue(alpha, beta, bias, activation, out, a: Matrix, shape: tuple) -> tuple:
    """The kernels' epilogue arguments (alpha, beta, bias, bias_step, bias_along, bias_f32, activation) for
    C's own orientation; ValueError/TypeError for bad values before anything is launched."""
    alpha, beta = _number(alpha, "alpha"), _number(beta, "beta")
    if beta != 0.0 and out is None:
        raise ValueError("matmul: beta != 0 adds beta * out to the product: pass out=")
    if activation not in ACTIVATIONS:
        raise ValueError(
            f"matmul: unknown activation {activation!r}; choose one of "
            + ", ".join(repr(x) for x in ACTIVATIONS if x is not None)
            + " (or None)"
        )
    bias_ptr = bias_step = along = bias_f32 = 0
    if bias is not None:
        as_matrix(bias, "bias")
        m, n = shape[-2], shape[-1]
        out_sfx = out._sfx if out is not None else a._sfx
        if bias._sfx not in (out_sfx, "f32"):
            raise TypeError(
                f"matmul: bias is {dtype_name(bias.dtype)}; it must be the result's dtype "
                f"({dtype_name(out.dtype if out is not None else a.dtype)}) or float32"
            )
        if bias._batch is not None:
            raise ValueError(f"matmul: bias must be a (1, n) row or an (m, 1) column, got shape {bias.shape}")
        # the step between consecutive elements of the row (or column), in elements: 1 along a row of a
        # row-major matrix, the row stride down its column (the other way round for a transposed one)
        height, width, stride = bias._height, bias._width, bias._stride
        if height == 1 and width == n:
            along, bias_step = 1, stride if bias._trans else 1
        elif height == m and width == 1:
            along, bias_step = 2, 1 if bias._trans else stride
        else:
            raise ValueError(
                f"matmul: bias has shape {bias.shape}; for a {m}x{n} result it is a (1, {n}) row (added to every "
                f"row) or a ({m}, 1) column (added to every column)"
            )
        if bias._buffer.device is not a._buffer.device:  # both live (checked above and by the caller)
            raise ValueError(f"matmul: bias is on GPU {bias.device.ordinal} and a on GPU {a.device.ordinal}")
        bias_ptr, bias_f32 = bias.elements, int(bias._sfx == "f32")
    return alpha, beta, bias_ptr, bias_step, along, bias_f32, ACTIVATIONS[activation]


def _operands(a: Matrix, b: Matrix, out: Matrix, m: int, n: int, k: int, epilogue: tuple):
    """The engine's view of a general call: (m, n, k, batch, A, B, C, a_trans, b_trans, epilogue), where A,
    B and C are (address, row stride, batch stride) of their storages and C is row-major. A transposed
    out is written as C^T = op(B)^T @ op(A)^T (operands swapped, each read the other way round); a batch
    whose A matrices and results lie one after another, with one B for all, folds into one tall product."""
    batch = out._batch
    shared = (None, 1)
    A = (a.elements, a._stride, 0 if a._batch in shared else a._bstride, a._trans)
    B = (b.elements, b._stride, 0 if b._batch in shared else b._bstride, b._trans)
    C = (out.elements, out._stride, 0 if batch is None else out._bstride)
    if out._trans:  # C^T (n x m, row-major storage) = op(B)^T @ op(A)^T
        A, B = (B[0], B[1], B[2], not B[3]), (A[0], A[1], A[2], not A[3])
        m, n = n, m
        if epilogue[4]:
            epilogue = (*epilogue[:4], 3 - epilogue[4], *epilogue[5:])
    count = 1 if batch is None else batch
    if (
        count > 1
        and B[2] == 0
        and not A[3]
        and A[2] == m * A[1]
        and C[2] == m * C[1]
        and epilogue[4] != 2
        and m * count <= INT32_MAX  # the kernels' M is a 32-bit int
    ):
        m, count = m * count, 1  # one tall product: the batch's rows one after another
    return m, n, k, count, A[:3], B[:3], C, A[3], B[3], epilogue


def _mode(a: Matrix, algorithm: str, precision) -> str:
    """The precision mode a call computes at: a named variant's own (a contradicting `precision=` is a
    ValueError, never a silent change), else `precision`, else the current default for float32; the
    other dtypes compute in their own format and refuse a precision."""
    if a._sfx != "f32":
        if precision is not None:
            raise ValueError(f"matmul: precision= chooses among float32 modes; a and b are {dtype_name(a.dtype)}")
        return "native"
    if algorithm == "auto":
        return _precision.get_matmul_precision() if precision is None else _precision.check_precision(precision)
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
        _evict_oldest()
    return entry if entry.__class__ is MatmulPlan else _by_alignment(entry, a, b)


def _by_alignment(plans: dict, a: Matrix, b: Matrix) -> MatmulPlan:
    """The plan of a cache entry planned by the operands' alignment, for live a and b (a buffer's address
    never moves while it lives)."""
    size = a._dtype.itemsize
    a_aligned = aligned(a._buffer.ptr + a._offset * size, a._stride, size)
    return plans[a_aligned, aligned(b._buffer.ptr + b._offset * size, b._stride, size)]


def _evict_oldest() -> None:
    """Keep the launch path's plan cache bounded: drop its oldest entry past _PLAN_CACHE_SIZE."""
    if len(_PLANS) > _PLAN_CACHE_SIZE:
        try:  # another device's thread may be evicting at the same time
            _PLANS.pop(next(iter(_PLANS)), None)
        except (StopIteration, RuntimeError):
            pass


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
    allocated or launched. (The epilogue, alpha/beta/bias/activation, does not change the plan.)"""
    dev = operand_device((a, "a"), (b, "b"), (out, "out"))
    m, n, k = _check(a, b, out, algorithm)
    mode = _mode(a, algorithm, precision)
    p = planner.plan(_problem(a, b, out, m, n, k, mode), Target.of(dev), algorithm)
    if splits is None and k_chunk is None:
        return p
    if splits is None:
        raise ValueError("matmul_plan: k_chunk= needs splits=")
    return planner.forced(p.problem, p.target, p.algorithm, splits, k_chunk)


def _problem(a: Matrix, b: Matrix, out, m: int, n: int, k: int, mode: str, epilogue: tuple = IDENTITY) -> Problem:
    """The Problem of a call (the shape the kernels see: after a transposed out's swap and a batch's fold,
    which a column bias prevents)."""
    out_sfx = out._sfx if out is not None else a._sfx
    layout = out if out is not None else _new_result(_result_shape(a, b, m, n))
    return Problem(*_problem_fields(a, out_sfx, mode, _operands(a, b, layout, m, n, k, epilogue)))


def _new_result(shape: tuple) -> _Shape:
    """The layout a result still to be made will have: row-major, of the broadcast batch `shape`."""
    m, n = shape[-2], shape[-1]
    return _Shape(shape[0] if len(shape) == 3 else None, m * n, False, n)


def _problem_fields(a: Matrix, out_sfx: str, mode: str, operands: tuple) -> tuple:
    """Problem's fields, in order, from _operands' result: a plain tuple is also the general path's plan
    cache key (a tuple hashes and compares in a tenth of the time a frozen dataclass takes)."""
    m2, n2, k2, batch, A, B, _, ta, tb, _ = operands
    size = a._dtype.itemsize
    # each operand's storage, transposed or not: a transposed A or B may be read in place (a row with
    # reads_a_trans or reads_b_trans), and a row that reads it the other way copies it into aligned
    # scratch whatever its alignment (the planner knows which)
    a_al = aligned(A[0], A[1], size) and A[2] * size % 16 == 0
    b_al = aligned(B[0], B[1], size) and B[2] * size % 16 == 0
    return m2, n2, k2, a._sfx, out_sfx, mode, a_al, b_al, batch, ta, tb


class _Shape:
    """What _operands reads of a result that does not exist yet (matmul_plan without out)."""

    __slots__ = ("_batch", "_bstride", "_trans", "_stride", "elements")

    def __init__(self, batch, bstride: int, trans: bool, stride: int):
        self._batch, self._bstride, self._trans, self._stride, self.elements = batch, bstride, trans, stride, 0


def matmul(
    a: Matrix,
    b: Matrix,
    out: Matrix | None = None,
    algorithm: str = "auto",
    precision: str | None = None,
    stream=None,
    *,
    alpha=_ALPHA,
    beta=_BETA,
    bias: Matrix | None = None,
    activation: str | None = None,
    plan: MatmulPlan | None = None,
    devices=None,
    memory_limit=None,
) -> Matrix:
    """C = act(alpha * op(a) @ op(b) + beta * out + bias) for matrices of one dtype on their device: the
    BLAS GEMM with a fused epilogue. Returns out (new if None, in the inputs' dtype; for float16/bfloat16
    a float32 out is allowed). `stream`: where the work is queued (default: the thread's current stream).
    Deterministic: the same inputs give the same bits on the same GPU (no atomics; split-K partial sums
    are added in a fixed order).

    Shapes follow NumPy's matmul: 2-D a (m x k) and b (k x n), or batches (batch, m, k) @ (batch, k, n),
    where a batch of 1 or a 2-D operand is shared by every product of the other's batch; the batch runs
    in one launch (a batch whose a matrices lie one after another, with one b, as one tall product).
    Operands may be views, transposed views (a.T: read in place, or copied row-major in one pass where
    the chosen kernel needs it; gm.matmul_plan says which) and a transposed out (written as its
    transpose's product).

    Epilogue, applied to each element in float32 (float64 for float64) before rounding to out's dtype,
    with no extra pass over C: alpha and beta (real numbers; beta != 0 needs out, and with beta == 0 out
    is never read, so NaN there does not leak), bias (a (1, n) row added to every row or an (m, 1) column
    added to every column; out's dtype or float32) and activation: None, "relu" (max(x, 0); NaN stays
    NaN), "gelu" (0.5 x (1 + erf(x / sqrt 2))) or "gelu_tanh" (0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715
    x^3)))). With split-K the epilogue runs in the reduction.

    algorithm: "auto" (the planner's choice; see gm.matmul_plan for what it picks and why) or a variant's
    name (`from gpumat.matmul import algorithms` lists them). plan: a plan from gm.matmul_plan for operands of
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
    gpumat.outofcore. Matrix @ numpy array is a TypeError: gpumat never moves data behind your back."""
    plain_epilogue = (  # the defaults' own objects: one identity test each (a 1.0 passed in takes the long way)
        alpha is _ALPHA and beta is _BETA and bias is None and activation is None
    )
    if plain_epilogue and plan is None and algorithm == "auto" and precision is None:
        product = _plain_product(a, b, out, stream)
        if product is not None:
            return product
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            raise TypeError("matmul: give both operands as numpy arrays (out of core) or both as gpumat Matrix")
        if stream is not None or algorithm != "auto" or plan is not None:
            raise ValueError("matmul: host operands run on each GPU's own streams with algorithm 'auto'")
        if not plain_epilogue:
            raise ValueError("matmul: alpha, beta, bias and activation apply to Matrix operands, not host arrays")
        from ..outofcore import matmul_host  # the host path is a layer above the engine

        return matmul_host(a, b, out=out, precision=precision, devices=devices, memory_limit=memory_limit)
    if devices is not None or memory_limit is not None:
        raise ValueError(
            "matmul: devices= and memory_limit= apply to host (numpy) operands; Matrix operands "
            "compute on their own device"
        )
    dev = operand_device((a, "a"), (b, "b"), (out, "out"), (bias, "bias"))
    s = stream_handle(stream, dev)
    with dev.lock:  # from the checks to the enqueue, no free() can slip in between
        m, n, k = _check(a, b, out, algorithm)
        general = a._batch is not None or b._batch is not None or a._trans or b._trans
        if out is not None:
            general = general or out._batch is not None or out._trans
        if general or not plain_epilogue or plan is not None:
            return _general(a, b, out, m, n, k, algorithm, precision, alpha, beta, bias, activation, plan, dev, s)
        out_sfx = out._sfx if out is not None else a._sfx
        if algorithm == "auto" and precision is None:  # the common call, without a function call
            mode = _precision.get_matmul_precision() if a._sfx == "f32" else "native"
        else:
            mode = _mode(a, algorithm, precision)
        if m and n and k:
            plan = _plan_for(a, b, out_sfx, m, n, k, mode, algorithm, dev)
        if out is None:
            out = Matrix._allocate(m, n, dev, s, a._dtype)
        if m == 0 or n == 0:
            return out
        foreign = None  # use_on is needed, and says so, whenever s is another library's stream
        if a._buffer.stream != s or b._buffer.stream != s or out._buffer.stream != s:
            foreign = use_on(s, a._buffer, b._buffer, out._buffer)
        if k == 0:
            memops.zero_2d(out.elements, out.stride * out.itemsize, n * out.itemsize, m, s)
        else:
            launch_plain(plan, a, b, out, dev, s)
        if foreign is not None:
            mark_done(foreign, s, a._buffer, b._buffer, out._buffer)
    return out


def _plain_product(a, b, out, stream) -> Matrix | None:
    """The most common call, a @ b (or into out) of two live row-major 2-D matrices with a plan already
    cached, in as few steps as it takes; None for any other call, and for anything this cannot vouch for
    (a freed or imported operand, a first call), which then takes matmul's full path: its checks say what
    is wrong. The one error raised here is the stream's, which the full path would raise the same."""
    if a.__class__ is not Matrix or b.__class__ is not Matrix or out is not None and out.__class__ is not Matrix:
        return None
    ab, bb = a._buffer, b._buffer
    if ab.__class__ is not DeviceBuffer or bb.__class__ is not DeviceBuffer:  # also a freed one (None)
        return None
    dev, sfx, m, k, n = ab.device, a._sfx, a._height, a._width, b._width
    if (
        bb.device is not dev
        or b._sfx != sfx
        or b._height != k
        or a._batch is not None
        or b._batch is not None
        or a._trans
        or b._trans
    ):
        return None
    if out is not None:
        ob = out._buffer
        if (
            ob.__class__ is not DeviceBuffer  # not gpumat's own block: may be read-only or overlap the inputs
            or ob is ab
            or ob is bb  # two blocks of the pool never share a byte; one block may
            or ob.device is not dev
            or out._sfx != sfx  # (a float32 out for float16 inputs: the full path)
            or out._height != m
            or out._width != n
            or out._batch is not None
            or out._trans
        ):
            return None
    plan = _PLANS.get(_plan_key(a, b, out))
    if plan is None:  # not planned yet: the full path plans (and checks the sizes: a cached plan's passed)
        return None
    if plan.__class__ is not MatmulPlan:
        plan = _by_alignment(plan, a, b)
    dev.activate()
    # no stream given and none entered with `with`: the legacy stream, without stream_handle's call
    s = LEGACY_STREAM if stream is None and not _THREAD.streams else stream_handle(stream, dev)
    with dev.lock:  # from the liveness test to the enqueue, no free() can slip in between
        if not (ab.alive and bb.alive and (out is None or out._buffer.alive)):
            return None
        if out is None:
            out = Matrix._allocate(m, n, dev, s, a._dtype)
        foreign = None  # use_on says so whenever s is another library's stream
        if ab.stream != s or bb.stream != s or out._buffer.stream != s:
            foreign = use_on(s, a._buffer, b._buffer, out._buffer)
        launch_plain(plan, a, b, out, dev, s)
        if foreign is not None:
            mark_done(foreign, s, a._buffer, b._buffer, out._buffer)
    return out


def _plan_key(a: Matrix, b: Matrix, out) -> tuple:
    """The launch path's plan-cache key of a plain call with algorithm "auto" and the default precision."""
    sfx = a._sfx
    out_sfx = sfx if out is None else out._sfx
    mode = _precision.get_matmul_precision() if sfx == "f32" else "native"
    return a._height, b._width, a._width, sfx, out_sfx, mode, "auto", a._buffer.device


def _general(a, b, out, m, n, k, algorithm, precision, alpha, beta, bias, activation, plan, dev, s) -> Matrix:
    """matmul beyond one plain 2-D product: batches, transposed operands or out, an epilogue, a given plan
    (device lock held, operands checked)."""
    shape = _result_shape(a, b, m, n)
    if alpha is _ALPHA and beta is _BETA and bias is None and activation is None:
        epilogue = IDENTITY  # a batch or a transposed operand, no epilogue
    else:
        epilogue = _epilogue(alpha, beta, bias, activation, out, a, shape)
    if bias is not None:
        check_out(out, shape, (a, b, bias), "matmul")
    mode = _mode(a, algorithm, precision)
    # the kernels' view of the call, with the result's layout (a new result's address comes below)
    operands = _operands(a, b, out if out is not None else _new_result(shape), m, n, k, epilogue)
    out_sfx = out._sfx if out is not None else a._sfx
    if plan is None and m and n and k and (len(shape) == 2 or shape[0]):
        fields = _problem_fields(a, out_sfx, mode, operands)
        key = (fields, algorithm, dev)
        plan = _PLANS.get(key)
        if plan is None:
            plan = _PLANS[key] = planner.plan(Problem(*fields), Target.of(dev), algorithm)
            _evict_oldest()
    elif plan is not None:
        problem = Problem(*_problem_fields(a, out_sfx, mode, operands))
        _check_plan(plan, problem, a, b, dev)
        if algorithm != "auto" or precision is not None:
            # what the call asks for, planned as it would be without plan= (fallbacks included: a tf32
            # request on a matrix-vector shape runs exact FP32): the given plan must agree with it
            asked = planner.plan(problem, plan.target, algorithm)
            if algorithm != "auto" and asked.variant.name != plan.variant.name:
                raise ValueError(f"matmul: algorithm {algorithm!r} contradicts the plan's {plan.variant.name!r}")
            if asked.problem.mode != plan.problem.mode:
                raise ValueError(
                    f"matmul: precision {mode!r} contradicts the plan's {plan.problem.mode!r} "
                    f"(the plan was made for another precision)"
                )
    if out is None:
        out = Matrix._allocate(m, n, dev, s, a._dtype, shape[0] if len(shape) == 3 else None)
    if out.size == 0:
        return out
    matrices = (a, b, out) if bias is None else (a, b, out, bias)
    foreign = use_on(s, *(x._buffer for x in matrices))
    m2, n2, k2, batch, A, B, C, _, _, epilogue = operands
    C = (out.elements, *C[1:])  # a new result is laid out as _new_result said; its address is known now
    if k == 0:
        _empty_product(a._sfx, out._sfx, m2, n2, batch, C, epilogue, dev, s)
    else:
        launch(plan, A, B, C, epilogue, dev, s)
    if foreign is not None:
        mark_done(foreign, s, *(x._buffer for x in matrices))
    return out


def _empty_product(sfx: str, out_sfx: str, m: int, n: int, batch: int, C: tuple, epilogue: tuple, dev, s) -> None:
    """K = 0: the product is zero, so C = act(beta * C + bias): a plain zero fill, or for an epilogue the
    naive kernel (the SIMT one for a float32 result of halves) with K = 0."""
    ptr, ld, bstride = C
    size = ITEMSIZE[out_sfx]
    if epilogue[1] == 0.0 and epilogue[4] == 0:  # every activation maps 0 to 0
        if bstride == m * ld or batch == 1:
            memops.zero_2d(ptr, ld * size, n * size, m * batch, s)
        else:
            for i in range(batch):
                memops.zero_2d(ptr + i * bstride * size, ld * size, n * size, m, s)
        return
    v = VARIANTS["naive"] if sfx == out_sfx else VARIANTS["simt64x64"]
    grid = v.grid(m, n, 1, 1)
    for first in range(0, batch, MAX_GRID_YZ):
        layers = min(MAX_GRID_YZ, batch - first)
        v.kernels[(sfx, out_sfx)](
            (grid[0], grid[1], layers),
            v.block,
            0,
            0,
            ptr + first * bstride * size,
            m,
            n,
            0,
            0,
            0,
            ld,
            0,
            0,
            bstride,
            *epilogue,
            stream=s,
            device=dev,
        )


def _check_plan(p, problem: Problem, a: Matrix, b: Matrix, dev) -> None:
    """A given plan must be for this product on this GPU, and a TMA plan that reads an operand in place
    needs that operand aligned."""
    if not isinstance(p, MatmulPlan):
        raise TypeError(f"matmul: plan= takes a plan from gm.matmul_plan, got {type(p).__name__}")
    q = p.problem
    in_place = [ok for ok, copied in ((problem.a_aligned, p.copy_a), (problem.b_aligned, p.copy_b)) if not copied]
    fields = ("m", "n", "k", "dtype", "out_dtype", "batch", "a_trans", "b_trans")
    if (
        any(getattr(q, f) != getattr(problem, f) for f in fields)
        or p.target != Target.of(dev)
        or (p.variant.needs_aligned and not all(in_place))
    ):
        raise ValueError(
            f"matmul: the plan is for {q.describe()} on sm_{p.target.arch}; these operands are "
            f"{problem.describe()} on GPU {dev.ordinal}"
        )
