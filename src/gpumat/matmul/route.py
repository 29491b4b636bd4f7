"""The one route of a matmul call, from the checks to the launch:

    check -> Problem -> plan -> BoundPlan -> run

`product` checks every argument (before anything is allocated or launched), describes the product as
the kernels see it (problem.kernel_view: a transposed result swapped, a batch folded), takes its
BoundPlan from the one cache (keyed by `_key`: the problem without the operands' alignment, the
algorithm or given plan, and the GPU), allocates the result, orders the stream (gpumat.memory.ordering)
and runs the bound plan. `cached_product`, the common call's fast lookup (live matrices of the pool, 2-D
or batches, into a row-major C, an epilogue or none, the default algorithm and precision), vouches for
the call with a few field tests and looks up the same key; whatever it cannot vouch for takes
`product`. gpumat.matmul.api is the public face over this.
"""

from __future__ import annotations

import numpy as np

from .. import _precision
from .._dtypes import DTYPE_NAMES, FP8_SUFFIXES
from .._dtypes import name as dtype_name
from ..matrix import Matrix
from ..memory import DeviceBuffer
from ..memory.ordering import mark_done, use_on
from ..operands import as_matrix, check_out, matrices_apart, operand_device, same_dtype
from ..runtime.devices import thread_state
from ..runtime.streams import LEGACY_STREAM, stream_handle
from . import planner
from .epilogue import epilogue_of
from .launcher import BoundPlan
from .ozaki import OZAKI_MAX_K
from .plan import MatmulPlan
from .problem import INT32_MAX, Problem, Target, kernel_view, problem_of, swapped
from .variants import FP8_OUTPUTS, IDENTITY, INT8_FLOAT_OUTPUTS, INT8_MAX_K, VARIANTS, algorithms


class PlanCache(dict):
    """The launch path's one cache: _key(...) -> BoundPlan, at most `limit` entries (the oldest goes)."""

    limit = 4096


_BOUND = PlanCache()
DEFAULT_ALPHA, DEFAULT_BETA = 1.0, 0.0  # matmul's defaults, recognised by identity on the launch path
_THREAD = thread_state()  # each thread's state (its `with stream:` stack), one object for all threads
_NAMES: dict[str, frozenset] = {}  # algorithm names by input dtype suffix
# the result's dtype suffix by the operands' where they differ: int8 products sum in int32 (as
# torch._int_mm; numpy's int8 @ int8 would wrap in int8); FP8 products accumulate in float32, which C keeps
# unless out= asks for bfloat16 or float16
PRODUCT_SUFFIX = {"s8": "s32", **{s: "f32" for s in FP8_SUFFIXES}}
# the dtypes C may have by the operands' suffix (the others: the operands' own alone)
OUT_SUFFIXES = {"f16": ("f16", "f32"), "bf16": ("bf16", "f32"), "s8": ("s32", *INT8_FLOAT_OUTPUTS)}
OUT_SUFFIXES.update(dict.fromkeys(FP8_SUFFIXES, FP8_OUTPUTS))
_PRODUCT_DTYPE = {s: np.dtype(DTYPE_NAMES[d]) for s, d in PRODUCT_SUFFIX.items()}


def result_dtype(a: Matrix):
    """The dtype of a @ b when no out is given: the operands', or PRODUCT_SUFFIX's (int32 for int8)."""
    return _PRODUCT_DTYPE.get(a._sfx, a._dtype)


def _key(m: int, n: int, k: int, batch: int, a_trans: bool, b_trans: bool, sfx: str, out_sfx: str, mode: str,
         choice, dev) -> tuple:  # fmt: skip
    """The cache key of a product as the kernels see it: the Problem's fields but the operands' alignment
    (the BoundPlan picks by that), the algorithm (or a given plan's launches) and the GPU."""
    return m, n, k, batch, a_trans, b_trans, sfx, out_sfx, mode, choice, dev


def _bound(key: tuple, t: Target, plan: MatmulPlan | None) -> BoundPlan:
    """The cached BoundPlan of a key, made on first use (the cache bounded: its oldest entry goes)."""
    bound = _BOUND.get(key)
    if bound is None:
        m, n, k, batch, a_trans, b_trans, sfx, out_sfx, mode, choice, dev = key
        # where a plan was tuned while this one was bound, bind again; stored first and checked after, so
        # a tuning's emptying of the cache cannot fall between the check and the store
        while True:
            generation = planner.tuning_generation()
            if plan is not None:
                bound = BoundPlan(plan, dev)
            else:
                p = Problem(m, n, k, sfx, out_sfx, mode, True, True, batch, a_trans, b_trans)
                bound = BoundPlan.for_problem(p, t, choice, dev)
            _BOUND[key] = bound
            if generation == planner.tuning_generation():
                break
            _BOUND.pop(key, None)
        if len(_BOUND) > _BOUND.limit:
            try:  # another device's thread may be evicting at the same time
                _BOUND.pop(next(iter(_BOUND)), None)
            except (StopIteration, RuntimeError):
                pass
    return bound


def bound_for(p: Problem, t: Target, dev, algorithm: str = "auto") -> BoundPlan:
    """The launch path's cached BoundPlan of problem p (its alignment aside: the BoundPlan picks by the
    operands') on dev, made on first use, as the full route makes it."""
    key = _key(p.m, p.n, p.k, p.batch, p.a_trans, p.b_trans, p.dtype, p.out_dtype, p.mode, algorithm, dev)
    return _bound(key, t, None)


def forget_bound_plans() -> None:
    """Empty the cache of bound plans (after auto's choice changed: a plan was tuned or forgotten)."""
    _BOUND.clear()


def bind(plan: MatmulPlan, dev) -> BoundPlan:
    """The BoundPlan of a given plan on dev, from the one cache (what gm.matmul(..., plan=plan) runs, and
    what the out-of-core pipeline runs its tiles with): plans of the same launches share it."""
    q = plan.problem
    choice = ("plan", plan.variant.name, plan.splits, plan.k_chunk, plan.copy_a, plan.copy_b, plan.swap)
    key = _key(q.m, q.n, q.k, q.batch, q.a_trans, q.b_trans, q.dtype, q.out_dtype, q.mode, choice, dev)
    return _bound(key, plan.target, plan)


# the emulated mode each dtype may ask for with precision= (gpumat.matmul.ozaki): a call's own choice only,
# never a default (it refuses batches), by kernel suffix
EMULATED = {
    sfx: mode for mode, dt in _precision.PER_CALL_PRECISIONS.items() for sfx, n in DTYPE_NAMES.items() if n == dt
}


def _mode(sfx: str, algorithm: str = "auto", precision=None) -> str:
    """The precision mode a call computes at: a named variant's own (a contradicting `precision=` is a
    ValueError, never a silent change), else `precision`, else the current default for float32; the
    other dtypes compute in their own format ("native"); float64 and float32 also emulated on INT8
    ("fp64_int8", "fp32_int8", asked for by the call)."""
    if sfx != "f32":
        own = "native" if algorithm == "auto" else VARIANTS[algorithm].computes(sfx)
        if precision is None:
            return own
        if precision != EMULATED.get(sfx):
            also = f", or {EMULATED[sfx]!r}" if sfx in EMULATED else ""
            raise ValueError(
                f"matmul: precision= chooses among float32 modes{also}; a and b are {DTYPE_NAMES[sfx]}, "
                f"got {precision!r}"
            )
        if algorithm != "auto" and own != precision:
            raise ValueError(f"matmul algorithm {algorithm!r} computes at precision {own!r}, not {precision!r}")
        return precision
    if precision is not None and precision != EMULATED["f32"]:
        precision = _precision.check_precision(precision, also=(EMULATED["f32"],))
    if algorithm == "auto":
        return _precision.get_matmul_precision() if precision is None else precision
    own = VARIANTS[algorithm].computes("f32")
    if precision is not None and precision != own:
        raise ValueError(f"matmul algorithm {algorithm!r} computes at precision {own!r}, not {precision!r}")
    return own


def _check(a, b, out, algorithm: str, precision, alpha, beta, bias, activation) -> tuple:
    """Every check of a Matrix call, before anything is allocated or launched. Returns the call's
    (operand tuples A, B, C (C: the layout of a result still to be made), mode, epilogue)."""
    a, b = as_matrix(a, "a"), as_matrix(b, "b")
    dt = same_dtype("matmul", (a, "a"), (b, "b"), integers=("s8", *FP8_SUFFIXES))
    A, B = a._operand(), b._operand()
    sfx, m, k, k2, n = A[7], A[5], A[6], B[5], B[6]
    names = _NAMES.get(sfx) or _NAMES.setdefault(sfx, frozenset(algorithms(sfx)))
    if algorithm not in names:
        choices = ", ".join(algorithms(sfx))
        raise ValueError(f"unknown matmul algorithm {algorithm!r} for {dtype_name(dt)}; choose one of {choices}")
    product_sfx = PRODUCT_SUFFIX.get(sfx, sfx)
    out_sfx = product_sfx if out is None else as_matrix(out, "out")._operand()[7]
    if out_sfx not in OUT_SUFFIXES.get(sfx, (sfx,)):
        wanted = " or ".join(DTYPE_NAMES[x] for x in OUT_SUFFIXES.get(sfx, (sfx,)))
        raise TypeError(f"matmul: a and b are {dtype_name(dt)} and out is {DTYPE_NAMES[out_sfx]}; out must be {wanted}")
    if out_sfx != sfx and sfx in ("f16", "bf16"):
        if algorithm != "auto" and (sfx, "f32") not in VARIANTS[algorithm].kernels:
            f32_out = [x for x in algorithms(sfx) if x == "auto" or (sfx, "f32") in VARIANTS[x].kernels]
            raise TypeError(
                "matmul: the teaching kernels write C in the input dtype; a float32 out takes "
                f"algorithm {', '.join(repr(x) for x in f32_out)}"
            )
    if k != k2:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned: a.width {k} != b.height {k2}")
    if max(m, n, k) > INT32_MAX:
        raise ValueError(
            f"matmul: dimension {max(m, n, k)} of {m}x{k} @ {k}x{n} is over the kernels' limit "
            f"of 2^31 - 1 rows or columns"
        )
    sums = out_sfx == "s32"  # an int8 product's int32 sums (no epilogue)
    if sfx == "s8":
        _check_int8(k, sums, alpha, beta, bias, activation)
    shape = _result_shape(a, b, A[4], B[4], m, n)
    check_out(out, shape, (a, b) if bias is None else (a, b, bias), "matmul")
    # (the int32 sums' epilogue is the identity, however its arguments were spelled: _check_int8)
    plain = sums or alpha is DEFAULT_ALPHA and beta is DEFAULT_BETA and bias is None and activation is None
    epilogue = IDENTITY if plain else epilogue_of(alpha, beta, bias, activation, out, out_sfx, shape, a)
    mode = _mode(sfx, algorithm, precision)
    batch = shape[0] if len(shape) == 3 else None
    if mode == EMULATED.get(sfx):
        if batch is not None:
            raise ValueError(f"matmul: precision={mode!r} takes 2-D products (a batch: one call a matrix)")
        if k > OZAKI_MAX_K:
            raise ValueError(f"matmul: precision={mode!r} takes K up to {OZAKI_MAX_K}, where its INT8 "
                             f"products stay exact in int32; K is {k}")  # fmt: skip
    C = out._operand() if out is not None else (0, n, m * n if batch else 0, False, batch, m, n, out_sfx, None)
    return A, B, C, mode, epilogue


def _check_int8(k: int, sums: bool, alpha, beta, bias, activation) -> None:
    """An int8 product's own rules (C's dtype is checked with out's): exact sums (K <= INT8_MAX_K); into the
    int32 sums (`sums`) no epilogue (a float C takes one)."""
    if k > INT8_MAX_K:
        raise ValueError(
            f"matmul: int8 products sum in int32, exact for K up to {INT8_MAX_K}; K is {k} (split K into "
            "several products and add them in a wider type)"
        )
    if sums and not (alpha == DEFAULT_ALPHA and beta == DEFAULT_BETA and bias is None and activation is None):
        raise TypeError(
            "matmul: an int8 product into int32 takes no alpha, beta, bias or activation: C is the exact sums "
            "(pass a float32, bfloat16 or float16 out= for the sums scaled, with the epilogue)"
        )


def _result_shape(a: Matrix, b: Matrix, ba, bb, m: int, n: int) -> tuple[int, ...]:
    """(m, n), or (batch, m, n) by NumPy's matmul rule: equal batches, or a batch of 1 (or a 2-D operand)
    broadcast over the other's; a ValueError naming both otherwise."""
    if ba is None or bb is None:
        return (m, n) if ba is None and bb is None else ((ba if bb is None else bb), m, n)
    if ba == bb or bb == 1:
        return ba, m, n
    if ba == 1:
        return bb, m, n
    raise ValueError(f"matmul: the batches of a {a.shape} and b {b.shape} do not broadcast ({ba} against {bb})")


def problem_of_call(a, b, out, algorithm: str = "auto", precision=None, bias=None) -> tuple[Problem, Target]:
    """The Problem a matmul call poses and its GPU's Target, after the call's checks (a bias of one value a
    row keeps a batch from folding into one tall product: problem.kernel_view)."""
    dev = operand_device((a, "a"), (b, "b"), (out, "out"), (bias, "bias"))
    A, B, C, mode, epilogue = _check(a, b, out, algorithm, precision, DEFAULT_ALPHA, DEFAULT_BETA, bias, None)
    return problem_of(kernel_view(A, B, C, epilogue), A[7], C[7], mode), Target.of(dev)


def plan_of_call(a, b, out, algorithm: str, precision, splits, k_chunk, bias=None) -> MatmulPlan:
    """gm.matmul_plan: the plan the call would run (see its docstring)."""
    p = planner.plan(*problem_of_call(a, b, out, algorithm, precision, bias), algorithm)
    if splits is None and k_chunk is None:
        return p
    if splits is None:
        raise ValueError("matmul_plan: k_chunk= needs splits=")
    return planner.forced(p.problem, p.target, p.algorithm, splits, k_chunk)


def product(a, b, out, algorithm: str, precision, stream, alpha, beta, bias, activation, plan) -> Matrix:
    """gm.matmul's full route for Matrix operands (see its docstring)."""
    dev = operand_device((a, "a"), (b, "b"), (out, "out"), (bias, "bias"))
    s = stream_handle(stream, dev)
    with dev.lock:  # from the checks to the enqueue, no free() can slip in between
        A, B, C, mode, epilogue = _check(a, b, out, algorithm, precision, alpha, beta, bias, activation)
        view = kernel_view(A, B, C, epilogue)
        m, n, k, batch, av, bv, cv, ta, tb, epilogue = view
        if plan is None:
            bound = _bound(_key(m, n, k, batch, ta, tb, A[7], C[7], mode, algorithm, dev), Target.of(dev), None)
        else:
            _check_plan(plan, problem_of(view, A[7], C[7], mode), algorithm, precision, mode, dev)
            bound = bind(plan, dev)
        if out is None:
            out = Matrix._allocate(A[5], B[6], dev, s, result_dtype(a), C[4])
            cv = (out._operand()[0], *cv[1:])  # laid out as _check said; its address is known now
            C = out._operand()
        if bound.launches:
            bias_buffer = None if bias is None else bias._operand()[8]
            enqueue(bound, s, av, bv, cv, epilogue, A[8], B[8], C[8], bias_buffer)
    return out


_NO_BROADCAST = -1


def _batch_of(batch_a, batch_b):
    """The batch of a @ b by NumPy's rule (as _result_shape) from the operands' (None for a 2-D one), or
    _NO_BROADCAST."""
    if batch_a is None or batch_b is None:
        return batch_b if batch_a is None else batch_a
    if batch_a == batch_b or batch_b == 1:
        return batch_a
    return batch_b if batch_a == 1 else _NO_BROADCAST


def _result_operand(out, ab, bb, out_sfx: str, m: int, n: int, batch) -> tuple | None | bool:
    """C's operand tuple for the fast lookup: out's where it can vouch for it as the result of a plain call (a
    block of gpumat's pool on the operands' device, neither operand's block, of the product's dtype and
    shape, row-major, its matrices apart), else False; with no out, the layout of a batch's result still
    to be made (as the full route lays it out; its address not known yet), or None for a 2-D one."""
    if out is None:
        return None if batch is None else (0, n, m * n, False, batch, m, n, out_sfx, None)
    C = out._operand()
    _, _, _, tc, batch_c, mc, nc, sfx_c, cb = C
    if (
        cb.__class__ is not DeviceBuffer  # not gpumat's own block: may be read-only or overlap the inputs
        or cb is ab
        or cb is bb  # two blocks of the pool never share a byte; one block may
        or cb.device is not ab.device
        or sfx_c != out_sfx  # (a float32 out for float16 inputs: the full route)
        or mc != m
        or nc != n
        or tc
        or batch_c != batch
        or not matrices_apart(out)  # (check_out's test)
    ):
        return False
    return C


def _vouched_epilogue(alpha, beta, bias, activation, out, out_sfx: str, m: int, n: int, a, buffers) -> tuple | None:
    """(epilogue, bias buffer) of a call with an epilogue where the fast lookup can vouch for it: a bias (if
    any) a matrix of gpumat's pool on the operands' device sharing no block with out (`buffers`: the
    operands' and out's), and every value valid; None otherwise (the full route then says what is wrong,
    in its own order of checks)."""
    if a._sfx == "s8":  # int8's own rules for an epilogue (route._check_int8)
        return None
    bias_buffer = None
    if bias is not None:
        if bias.__class__ is not Matrix:
            return None
        bias_buffer = bias._operand()[8]
        if bias_buffer.__class__ is not DeviceBuffer or bias_buffer.device is not buffers[0].device:
            return None
        if bias_buffer is buffers[2]:  # out and bias in one block: the full route checks their overlap
            return None
    try:
        return epilogue_of(alpha, beta, bias, activation, out, out_sfx, (m, n), a), bias_buffer
    except (TypeError, ValueError):
        return None


def _cached_bound(A: tuple, B: tuple, C: tuple, batch, epilogue: tuple, out_sfx: str, dev) -> tuple:
    """(the cached BoundPlan or None, the kernel view or None) of a call the fast lookup vouches for, by the
    key product() makes: of 2-D operands into a row-major C, their own m, n, k and layouts (the operand
    tuples' first three fields are what run() reads either way); of a batch, its kernel view's (a broadcast
    operand's batch stride 0, a batch folded into one tall product)."""
    sfx = A[7]
    if batch is None:
        key = _key(A[5], B[6], A[6], 1, A[3], B[3], sfx, out_sfx, _mode(sfx), "auto", dev)
        return _BOUND.get(key), None
    view = kernel_view(A, B, C, epilogue)
    m, n, k, count, _, _, _, ta, tb, _ = view
    return _BOUND.get(_key(m, n, k, count, ta, tb, sfx, out_sfx, _mode(sfx), "auto", dev)), view


def cached_product(a, b, out, stream, alpha=DEFAULT_ALPHA, beta=DEFAULT_BETA, bias=None, activation=None):
    """The common call, act(alpha * a @ b + beta * out + bias) (or a @ b) of live matrices of gpumat's pool,
    2-D or batches (NumPy's broadcast: equal batches, a batch of 1 or a 2-D operand shared), either of them a
    transposed view (x @ W.T), into a row-major C, whose BoundPlan is cached, in as few steps as it takes;
    None for anything it cannot vouch for (a freed or imported operand, a first call, a bad value, int8's
    epilogue), which then takes the full route, whose checks say what is wrong. The one error raised here is
    the stream's, which the full route would raise the same."""
    if a.__class__ is not Matrix or b.__class__ is not Matrix or out is not None and out.__class__ is not Matrix:
        return None
    A, B = a._operand(), b._operand()
    _, _, _, ta, batch_a, m, k, sfx, ab = A
    _, _, _, tb, batch_b, k2, n, sfx_b, bb = B
    if ab.__class__ is not DeviceBuffer or bb.__class__ is not DeviceBuffer:  # also a freed one (None)
        return None
    dev = ab.device
    if bb.device is not dev or sfx_b != sfx or k2 != k:
        return None
    batch = None if batch_a is None and batch_b is None else _batch_of(batch_a, batch_b)  # (2-D: the common call)
    if batch == _NO_BROADCAST:  # the full route says why
        return None
    out_sfx = PRODUCT_SUFFIX.get(sfx, sfx)
    C = _result_operand(out, ab, bb, out_sfx, m, n, batch)
    if C is False:
        return None
    cb = None if out is None else C[8]
    epilogue, bias_buffer = IDENTITY, None
    if not (alpha is DEFAULT_ALPHA and beta is DEFAULT_BETA and bias is None and activation is None):
        vouched = _vouched_epilogue(alpha, beta, bias, activation, out, out_sfx, m, n, a, (ab, bb, cb))
        if vouched is None:
            return None
        epilogue, bias_buffer = vouched
    bound, view = _cached_bound(A, B, C, batch, epilogue, out_sfx, dev)
    if bound is None:  # not planned yet: the full route plans (and checks the sizes: a cached plan's passed)
        return None
    dev.activate()
    # no stream given and none entered with `with`: the legacy stream, without stream_handle's call
    s = LEGACY_STREAM if stream is None and not _THREAD.streams else stream_handle(stream, dev)
    with dev.lock:  # from the liveness test to the enqueue, no free() can slip in between
        if not (ab.alive and bb.alive and (cb is None or cb.alive) and (bias_buffer is None or bias_buffer.alive)):
            return None
        if out is None:
            out = Matrix._allocate(m, n, dev, s, result_dtype(a), batch)
            C = out._operand()
            cb = C[8]
        if not bound.launches:  # an empty result: nothing to queue, nothing to order (as product())
            return out
        if view is not None:  # the kernels' operands: the view's, C's address now known
            A, B, C = view[4], view[5], (C[0], *view[6][1:])
        # enqueue's steps, inline (this is every plain call): ordered, run, marked
        if ab.stream == s and bb.stream == s and cb.stream == s and bias_buffer is None:
            bound.run(s, A, B, C, epilogue)
        else:
            buffers = (ab, bb, cb) if bias_buffer is None else (ab, bb, cb, bias_buffer)
            foreign = use_on(s, *buffers)
            bound.run(s, A, B, C, epilogue)
            if foreign is not None:
                mark_done(foreign, s, *buffers)
    return out


def enqueue(bound: BoundPlan, s: int, a: tuple, b: tuple, c: tuple, epilogue: tuple, ab, bb, cb, bias=None) -> None:
    """Run a bound plan on stream s between the stream-ordering contract's two steps (device lock held):
    the operands' buffers (ab, bb, cb and a bias's) ordered on s (use_on, where one was last used
    elsewhere), and on another library's stream the mark that their frees wait for."""
    if ab.stream == s and bb.stream == s and cb.stream == s and bias is None:  # nothing to order, unless
        if not (ab.borrowed or bb.borrowed or cb.borrowed):  # imported memory: its release waits for s
            bound.run(s, a, b, c, epilogue)
            return
    buffers = (ab, bb, cb) if bias is None else (ab, bb, cb, bias)
    foreign = use_on(s, *buffers)  # says so whenever s is another library's stream
    bound.run(s, a, b, c, epilogue)
    if foreign is not None:
        mark_done(foreign, s, *buffers)


def _check_plan(p, problem: Problem, algorithm: str, precision, mode: str, dev) -> None:
    """A given plan must be for this product on this GPU (a TMA plan that reads an operand in place needs
    that operand aligned), and agree with the algorithm and precision the call names."""
    if not isinstance(p, MatmulPlan):
        raise TypeError(f"matmul: plan= takes a plan from gm.matmul_plan, got {type(p).__name__}")
    q = p.problem
    # the operands the kernel reads in place: of a swapped plan, B's storage is its A and A's its B
    kernel = swapped(problem) if p.swap else problem
    in_place = [ok for ok, copied in ((kernel.a_aligned, p.copy_a), (kernel.b_aligned, p.copy_b)) if not copied]
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
    if algorithm != "auto" or precision is not None:
        # what the call asks for, planned as it would be without plan= (fallbacks included: a tf32
        # request on a matrix-vector shape, or where exact FP32 is modelled at least as fast, runs exact
        # FP32): the given plan must agree with it, or compute
        # at the precision asked for itself (a TF32 row named for that shape, whose plan is TF32)
        asked = planner.plan(problem, p.target, algorithm)
        if algorithm != "auto" and asked.variant.name != p.variant.name:
            raise ValueError(f"matmul: algorithm {algorithm!r} contradicts the plan's {p.variant.name!r}")
        if p.problem.mode not in (mode, asked.problem.mode):
            raise ValueError(
                f"matmul: precision {mode!r} contradicts the plan's {p.problem.mode!r} (the plan was made for "
                "another precision)"
            )


def call_view(a: Matrix, b: Matrix, out: Matrix | None = None, epilogue: tuple = IDENTITY) -> tuple:
    """The product gm.matmul(a, b, out=out) describes to the kernels (problem.kernel_view), after its checks."""
    A, B, C, _, _ = _check(a, b, out, "auto", None, DEFAULT_ALPHA, DEFAULT_BETA, None, None)
    return kernel_view(A, B, C, epilogue)


def result_shape(a: Matrix, b: Matrix) -> tuple[int, ...]:
    """The shape of a @ b by NumPy's matmul rule (a ValueError when the batches do not broadcast)."""
    return _result_shape(a, b, a._operand()[4], b._operand()[4], a.height, b.width)
