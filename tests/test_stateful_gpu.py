"""A hypothesis state machine that drives gpumat on the GPU: random sequences of uploads, frees, products,
dots, transposes, conversions, zero-copy imports and exports, each on a stream of a random kind, with a
second thread now and then; every result is checked against NumPy in float64.

What it checks, and why a state machine: the operations are each tested on their own elsewhere; what they
share is the state between calls - the pool's blocks and its free list kept per stream, the streams a
block was used on (its free waits for them), the marks recorded on other libraries' streams, borrowed
memory handed back to its producer only once the work queued on it has run. Bugs there show only in
sequences: a block freed on one stream and handed to another before the first one's work ran, an import
given back while a kernel still reads it, memory never given back. So the machine keeps a set of live
matrices with the float64 values each must hold, and after every step:
  * each result equals the float64 reference, exactly where the bits move unchanged (uploads, transposes,
    conversions, exports), within a bound derived from the dtype and K for products and dots;
  * memory in use (gm.memory_info()["used"]) is exactly the bytes of the live matrices gpumat owns, and
    at teardown, with everything freed and collected, back where it started (0 in a fresh process).

Streams of several kinds: a gm.Stream passed as stream=, the thread's current stream (None: the legacy
stream, or a gm.Stream made current by `with`), the per-thread default stream (the raw handle 2), a
torch.cuda.Stream and a cupy.cuda.Stream(non_blocking=True). PyTorch and CuPy are optional: without them
(or without a GPU they can use) their stream kinds, imports and exports are left out (the import and
export rules' preconditions are then false); bfloat16 needs ml_dtypes on the host.

The short run is part of the suite (TestStateful, well under a minute on an H100). The long run, from the
repository's root:

    PYTHONPATH=src:tests python3 tests/test_stateful_gpu.py --seconds 600

runs the machine until the time is up (at the end of an example: hypothesis runs are sized to the time left),
then prints one line, `stateful: <steps> steps in <examples> examples over <seconds> s, <failures> failures`;
on a failure it prints the failing example (and the run's seed: --seed replays it) and exits 1. --steps sets
the most steps an example takes (50), --shrink shrinks a failing example first (minutes on a GPU), and
GPUMAT_STATEFUL_SECONDS gives --seconds a default.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import os
import random
import sys
import threading
import time
import traceback
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, seed, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test
from support import busy, epilogue_reference, what_holds_live_matrices

import gpumat as gm

pytestmark = pytest.mark.gpu


def _optional(name: str):
    """An optional module, or None when it is missing or fails to import."""
    try:
        return __import__(name)
    except Exception:
        return None


torch = _optional("torch")
cupy = _optional("cupy")
ml_dtypes = _optional("ml_dtypes")
if cupy is not None:
    import cupy.cuda  # noqa: F401  (cupy.cuda.Stream, cupy.cuda.runtime)

PER_THREAD_STREAM = 2  # CU_STREAM_PER_THREAD: the calling thread's own default stream
MAX_SIDE = 70
SIDES = st.one_of(
    st.sampled_from([1, 2, 3, 5, 7, 13, 15, 16, 17, 31, 32, 33, 37, 61, 63, 64, 65, 67, 70]),
    st.integers(1, MAX_SIDE),
)
MAX_LIVE = 12  # live matrices the machine keeps at most (operands beyond it are temporaries of one step)
BOUND = 16.0  # every live matrix holds values of at most this size: float16 products of them cannot overflow
DTYPES = {"float32": np.dtype(np.float32), "float64": np.dtype(np.float64), "float16": np.dtype(np.float16)}
if ml_dtypes is not None:
    DTYPES["bfloat16"] = np.dtype(ml_dtypes.bfloat16)
HALVES = [name for name in ("float16", "bfloat16") if name in DTYPES]
# unit roundoff of a result's rounding to its dtype
UNIT = {"float32": 2.0**-24, "float64": 2.0**-53, "float16": 2.0**-11, "bfloat16": 2.0**-8}


def name_of(dtype: np.dtype) -> str:
    return next(name for name, dt in DTYPES.items() if dt == dtype)


def rounded(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float64 values rounded once, to nearest even, to `dtype` (an array of that dtype). bfloat16 goes through
    float32 rounded to odd, which keeps the one rounding exact (ml_dtypes' own float64 -> bfloat16 rounds twice,
    through float32 rounded to nearest: 1 + 2^-8 + 2^-30 becomes 1, not 1 + 2^-7)."""
    values = np.asarray(values, np.float64)
    if name_of(dtype) != "bfloat16":
        return values.astype(dtype)
    single = values.astype(np.float32)
    inexact = single.astype(np.float64) != values
    bits = single.view(np.uint32).copy()
    bits[inexact & (np.abs(single.astype(np.float64)) > np.abs(values))] -= 1  # toward zero: truncated
    bits[inexact] |= 1  # sticky: odd marks inexact
    return bits.view(np.float32).astype(dtype)


def random_values(drawn_seed: int, shape, dtype: np.dtype) -> np.ndarray:
    """Uniform values in [-1, 1) from a drawn seed, in `dtype`."""
    return rounded(np.random.default_rng(drawn_seed).uniform(-1.0, 1.0, size=shape), dtype)


def wide(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def swapped(x: np.ndarray) -> np.ndarray:
    return np.swapaxes(x, -1, -2)


# the accumulator's unit roundoff in each float32 precision mode (float32 for the half types), and the error of
# the operands' rounding in the tensor-core modes (TF32: 2u + u^2 of |a| |b| with u = 2^-11; tf32x3: the dropped
# low halves), both relative to |a| |b|
ACCUMULATION = {None: 2.0**-24, "float32": 2.0**-24, "tf32x3": 2.0**-22, "tf32": 2.0**-24}
OPERAND_ROUNDING = {None: 0.0, "float32": 0.0, "tf32x3": 2.0**-19, "tf32": 2.0**-9}


def product_tolerance(dtype: np.dtype, out_dtype: np.dtype, precision, k: int) -> float:
    """A bound on |got - reference| / scale elementwise, scale = |alpha| |A| |B| + |beta| |C| + |bias| (what
    epilogue_reference gives): K roundings of the accumulator (twice the worst case gamma_K, for the tensor
    cores' additions), the operands' rounding in the tensor-core modes, one rounding of the result to its dtype
    and a few of the epilogue's float32 (float64) operations."""
    if name_of(dtype) == "float64":
        return 2 * k * 2.0**-53 + 17 * 2.0**-53
    return 2 * k * ACCUMULATION[precision] + OPERAND_ROUNDING[precision] + UNIT[name_of(out_dtype)] + 16 * 2.0**-24


def mismatch(got, ref: np.ndarray, scale: np.ndarray, tol: float) -> str | None:
    """None when |got - ref| <= tol * max(scale, 2^-14) everywhere (the floor: float16's smallest normal
    number, below which it rounds to a fixed spacing), else what is wrong and where."""
    got = wide(got)
    if got.shape != ref.shape:
        return f"shape {got.shape}, expected {ref.shape}"
    if np.isnan(got).any():
        return f"NaN at {np.argwhere(np.isnan(got))[:3].tolist()} (an element not written, or a NaN out read)"
    ratio = np.abs(got - ref) / (tol * np.maximum(scale, 2.0**-14))
    if ratio.size and ratio.max() > 1:
        at = np.unravel_index(int(np.argmax(ratio)), ratio.shape)
        return f"{ratio.max():.3g} x the bound at {tuple(int(i) for i in at)}: got {got[at]!r}, expected {ref[at]!r}"
    return None


def exact_mismatch(got, expected: np.ndarray) -> str | None:
    got = wide(got)
    if got.shape != expected.shape:
        return f"shape {got.shape}, expected {expected.shape}"
    if np.array_equal(got, expected):
        return None
    wrong = np.argwhere(got != expected)
    first = tuple(int(i) for i in wrong[0])
    return f"{len(wrong)} elements differ, first at {first}: got {got[first]!r}, expected {expected[first]!r}"


def dot_tolerance(x: np.ndarray, y: np.ndarray) -> float:
    """gm.dot keeps products and sums in double: at most n + 1 roundings of sum |x y| (twice that, of margin)."""
    return 2 * (x.size + 1) * 2.0**-53 * float(np.sum(np.abs(x * y))) + 2.0**-1000


@dataclass
class Entry:
    """A matrix the machine holds (a live one, or a temporary of one step) and the float64 values the GPU
    holds in it, exactly: results are kept as they came back, once checked."""

    matrix: gm.Matrix
    value: np.ndarray
    origin: str
    writable: bool = True
    kind: str = "legacy"  # the stream kind its memory was allocated on


@dataclass
class View:
    """An operand: a view of an entry's matrix (the whole, a region, one matrix or a run of a batch; maybe
    transposed) and its values. write() puts new values of the view into the entry's values."""

    matrix: gm.Matrix
    value: np.ndarray
    entry: Entry
    index: tuple
    transposed: bool

    def write(self, new: np.ndarray) -> None:
        self.entry.value[self.index] = swapped(new) if self.transposed else new


def _libraries() -> tuple[str, ...]:
    """The GPU libraries this machine can use: PyTorch and CuPy where they import and see a GPU."""
    found = []
    if torch is not None:
        try:
            if torch.cuda.is_available():
                found.append("torch")
        except Exception:
            pass
    if cupy is not None:
        try:
            if cupy.cuda.runtime.getDeviceCount() > 0:
                found.append("cupy")
        except Exception:
            pass
    return tuple(found)


def holders() -> str:
    """What holds gpumat's live matrices (support.what_holds_live_matrices), in the final report of a failing
    example only: it walks every object's referrers, too slow for each replay while hypothesis shrinks."""
    try:
        if not current_build_context().is_final:
            return "(what holds the matrices: in the final report)"
    except Exception:  # outside a hypothesis run
        pass
    return what_holds_live_matrices()


class GpumatMachine(RuleBasedStateMachine):
    """gpumat's state between calls, driven by random sequences of operations (see the module docstring)."""

    steps = 0  # rules run, all machines of the process together
    examples = 0  # machines torn down

    def __init__(self):
        super().__init__()
        gc.collect()  # other tests' garbage goes before the baseline is read
        self.baseline = gm.memory_info()["used"]
        self.failed = False
        self.live: list[Entry] = []
        self.temporaries: list[Entry] = []
        self.kind_now = "legacy"  # the stream kind of the `on` block the step is in
        self.libraries = _libraries()
        self.own, self.entered, self.thread_stream = gm.Stream(), gm.Stream(), gm.Stream()
        self.stream_kinds = ["own", "legacy", "entered", "per_thread"]
        self.torch_stream = self.cupy_stream = self.torch_busy = self.cupy_busy = None
        if "torch" in self.libraries:
            self.torch_stream = torch.cuda.Stream()
            self.torch_busy = torch.rand(busy(2048), busy(2048), device="cuda")
            self.stream_kinds.append("torch")
        if "cupy" in self.libraries:
            self.cupy_stream = cupy.cuda.Stream(non_blocking=True)
            self.cupy_busy = cupy.random.rand(busy(2048), busy(2048), dtype=cupy.float32)
            self.stream_kinds.append("cupy")
        # a float32 product of this with itself keeps a stream busy for about a third of a millisecond
        self.busy = gm.Matrix.from_numpy(random_values(0, (busy(2048), busy(2048)), DTYPES["float32"]))

    # --- bookkeeping -------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _step(self):
        """Every rule runs in this: it counts the step, notes a step that did not end (a failure, or hypothesis
        stopping a draw): teardown then skips its memory check, which that step's frames, kept by the traceback,
        would spoil; and it frees the step's temporaries."""
        GpumatMachine.steps += 1
        try:
            yield
        except BaseException:
            self.failed = True
            raise
        finally:
            for e in self.temporaries:
                e.matrix.free()
            self.temporaries.clear()

    def keep(self, matrix: gm.Matrix, value: np.ndarray, origin: str, writable: bool = True) -> None:
        """Keep a result as a live matrix when there is room and its values stay within BOUND; else free it."""
        if len(self.live) < MAX_LIVE and np.all(np.abs(value) <= BOUND):
            self.live.append(Entry(matrix, value, origin, writable, self.kind_now))
        else:
            matrix.free()

    def forget(self, entry: Entry) -> None:
        self.live[:] = [e for e in self.live if e is not entry]

    def is_live(self, entry: Entry) -> bool:
        return any(e is entry for e in self.live)

    @contextlib.contextmanager
    def on(self, kind: str):
        """The stream= argument of a stream kind (for "entered", None inside `with` a gm.Stream); what is
        allocated meanwhile is noted as allocated on that kind."""
        before, self.kind_now = self.kind_now, kind
        try:
            if kind == "entered":
                with self.entered:
                    yield None
                return
            yield {
                "own": self.own,
                "legacy": None,
                "per_thread": PER_THREAD_STREAM,
                "torch": self.torch_stream,
                "cupy": self.cupy_stream,
            }[kind]
        finally:
            self.kind_now = before

    def draw_kind(self, data, label: str = "stream", kinds=None) -> str:
        return data.draw(st.sampled_from(kinds or self.stream_kinds), label=label)

    def draw_dtype(self, data, label: str = "dtype", names=None) -> np.dtype:
        return DTYPES[data.draw(st.sampled_from(names or list(DTYPES)), label=label)]

    def make_busy(self, data, stream) -> None:
        """Queue 0-2 long products on `stream` first, so that what follows is still queued when the step
        moves on (frees, imports handed back, other streams' allocations)."""
        for _ in range(data.draw(st.integers(0, 2), label="long products queued first")):
            gm.matmul(self.busy, self.busy, stream=stream).free()

    def upload(self, data, stream, dtype, shape, label: str, fill=None, temporary: bool = False) -> Entry:
        """A new matrix from random values (or `fill`); live when there is room, else a temporary."""
        if fill is None:
            host = random_values(data.draw(st.integers(0, 2**32 - 1), label=f"{label}: seed"), shape, dtype)
        else:
            host = np.full(shape, fill, dtype=dtype)
        entry = Entry(gm.Matrix.from_numpy(host, stream=stream), wide(host), f"{label} upload", kind=self.kind_now)
        if temporary or fill is not None or len(self.live) >= MAX_LIVE:
            self.temporaries.append(entry)
        else:
            self.live.append(entry)
        return entry

    def pick_view(
        self, data, stream, dtype, *, rows=None, cols=None, batch="any", exclude=(), writable=False, fill=None, label
    ) -> View:
        """An operand of `dtype`, rows x cols where given (else any), 2-D (batch="2d"), a batch of exactly
        `batch` matrices (an int), or either ("any"): a view of a live matrix (the whole or a region, of one
        matrix or a run of a batch, maybe transposed), or a fresh upload (stored transposed or not)."""
        candidates = []
        for e in self.live:
            if e.matrix.dtype != dtype or any(e is x for x in exclude) or (writable and not e.writable):
                continue
            count = e.value.shape[0] if e.value.ndim == 3 else None
            if isinstance(batch, int) and (count is None or count < batch):
                continue
            for transposed in (False, True):
                h, w = e.value.shape[-2:][::-1] if transposed else e.value.shape[-2:]
                if (rows is None or rows <= h) and (cols is None or cols <= w):
                    candidates.append((e, transposed))
        if fill is not None or not candidates or data.draw(st.booleans(), label=f"{label}: fresh upload"):
            return self._fresh_view(data, stream, dtype, rows, cols, batch, fill, label)
        e, transposed = candidates[data.draw(st.integers(0, len(candidates) - 1), label=f"{label}: which matrix")]
        h, w = e.value.shape[-2:][::-1] if transposed else e.value.shape[-2:]
        r = rows or data.draw(st.one_of(st.just(h), st.integers(1, h)), label=f"{label}: rows")
        c = cols or data.draw(st.one_of(st.just(w), st.integers(1, w)), label=f"{label}: columns")
        r0 = data.draw(st.integers(0, h - r), label=f"{label}: first row")
        c0 = data.draw(st.integers(0, w - c), label=f"{label}: first column")
        view_rows, view_cols = slice(r0, r0 + r), slice(c0, c0 + c)
        region = (view_cols, view_rows) if transposed else (view_rows, view_cols)
        if e.value.ndim == 2:
            index = region
        else:
            count = e.value.shape[0]
            if batch == "2d" or (batch == "any" and data.draw(st.booleans(), label=f"{label}: one of the batch")):
                index = (data.draw(st.integers(0, count - 1), label=f"{label}: which of the batch"), *region)
            else:
                n = batch if isinstance(batch, int) else data.draw(st.integers(1, count), label=f"{label}: batch")
                b0 = data.draw(st.integers(0, count - n), label=f"{label}: first of the batch")
                index = (slice(b0, b0 + n), *region)
        whole = len(index) == e.value.ndim and all(
            isinstance(i, slice) and (i.start, i.stop) == (0, size)
            for i, size in zip(index, e.value.shape, strict=True)
        )
        matrix = e.matrix if whole else e.matrix[index]
        value = e.value[index]
        if transposed:
            matrix, value = matrix.T, swapped(value)
        return View(matrix, value.copy(), e, index, transposed)

    def _fresh_view(self, data, stream, dtype, rows, cols, batch, fill, label) -> View:
        if batch == "any":
            batch = data.draw(st.sampled_from(["2d", 1, 2, 3, 4]), label=f"{label}: shape")
        r = rows or data.draw(SIDES, label=f"{label}: rows")
        c = cols or data.draw(SIDES, label=f"{label}: columns")
        transposed = data.draw(st.booleans(), label=f"{label}: stored transposed")
        shape = (c, r) if transposed else (r, c)
        if batch != "2d":
            shape = (batch, *shape)
        entry = self.upload(data, stream, dtype, shape, label, fill)
        matrix, value = (entry.matrix.T, swapped(entry.value)) if transposed else (entry.matrix, entry.value)
        return View(matrix, value.copy(), entry, (slice(None),) * len(shape), transposed)

    def reuse_after_free(self, data, entry: Entry) -> list:
        """Free `entry` (work that reads it still queued) and ask at once for blocks of its size on the stream
        its memory was allocated on (whose free list it may go to) or another, each written with 7s on a third
        stream: gpumat must not hand the block out, or let the write run, before the queued work has read it.
        Returns [(matrix, the stream kind it was written on)], temporaries of the step: read them back in
        `self.on(kind)`, since "entered" is stream=None only inside the gm.Stream's `with`."""
        self.forget(entry)
        entry.matrix.free()
        shape, dtype = entry.value.shape, entry.matrix.dtype
        kinds = [entry.kind, *self.stream_kinds]
        with self.on(data.draw(st.sampled_from(kinds), label="stream of the allocations after the free")) as s1:
            made = [gm.Matrix.empty(shape, dtype=dtype, stream=s1) for _ in range(2)]
        self.temporaries += [Entry(x, np.full(shape, 7.0), "allocated after a free") for x in made]
        writer = self.draw_kind(data, label="stream that writes them")
        with self.on(writer) as s2:
            sevens = self.upload(data, s2, dtype, swapped(np.empty(shape)).shape, "sevens", fill=7.0)
            for x in made:
                gm.transpose(sevens.matrix, out=x, stream=s2)
        return [(x, writer) for x in made]

    def check_region(self, view: View, got: np.ndarray, stream) -> np.ndarray:
        """After a write into `view`: the whole matrix it lies in comes back, and nothing outside the view has
        changed. Returns the new values of the whole matrix."""
        whole = wide(view.entry.matrix.to_numpy(stream=stream))
        expected = view.entry.value.copy()
        expected[view.index] = swapped(got) if view.transposed else got
        problem = exact_mismatch(whole, expected)
        assert problem is None, f"a write into a view of {view.entry.origin} changed elements outside it: {problem}"
        return whole

    # --- operations (each a rule, and what the main thread runs beside a second thread) ---------------------
    def do_product(self, data) -> None:
        """gm.matmul (or A @ B) of views of live matrices or fresh uploads: 2-D, batched (NumPy's broadcasting),
        transposed views, alpha/beta into out= (a view, maybe transposed; float32 for half inputs), a bias row
        or column and an activation, float32 at each precision; the operand A is sometimes freed while the
        product is queued and its block asked for at once (see reuse_after_free)."""
        dtype = self.draw_dtype(data)
        kind = self.draw_kind(data)
        with self.on(kind) as s:
            a = self.pick_view(data, s, dtype, label="a")
            m, k = a.value.shape[-2:]
            a_count = a.value.shape[0] if a.value.ndim == 3 else None
            forms = ["2d", 1, 2, 3] if a_count in (None, 1) else ["2d", 1, a_count]
            b_batch = data.draw(st.sampled_from(forms), label="b: shape")
            b = self.pick_view(data, s, dtype, rows=k, batch=b_batch, label="b")
            shape = np.broadcast_shapes(a.value.shape[:-2], b.value.shape[:-2]) + (m, b.value.shape[-1])
            kwargs, out, bias = self.product_arguments(data, s, dtype, a, b, shape)
            self.make_busy(data, s)
            if not kwargs and kind in ("legacy", "entered") and data.draw(st.booleans(), label="A @ B"):
                c = a.matrix @ b.matrix
            else:
                c = gm.matmul(a.matrix, b.matrix, stream=s, **kwargs)
            if out is not None:
                assert c is out.matrix, "matmul(out=) returns out"
            else:
                assert c.shape == shape and c.dtype == dtype, (c.shape, c.dtype, shape, dtype)
            fillers = []
            if self.is_live(a.entry) and (out is None or out.entry is not a.entry):
                if data.draw(st.booleans(), label="free a while the product is queued"):
                    fillers = self.reuse_after_free(data, a.entry)
            got = wide(c.to_numpy(stream=s))
            ref, scale = epilogue_reference(
                a.value,
                b.value,
                kwargs.get("alpha", 1.0),
                kwargs.get("beta", 0.0),
                out.value if kwargs.get("beta") else None,
                None if bias is None else bias.value,
                kwargs.get("activation"),
            )
            tol = product_tolerance(dtype, c.dtype, kwargs.get("precision"), k)
            problem = mismatch(got, ref, scale, tol)
            assert problem is None, f"product {a.value.shape} @ {b.value.shape} on {kind} stream, {kwargs}: {problem}"
            for filler, writer in fillers:
                with self.on(writer) as s2:
                    written = filler.to_numpy(stream=s2)
                problem = exact_mismatch(written, np.full(filler.shape, 7.0))
                assert problem is None, f"a matrix written after the free of {a.entry.origin}: {problem}"
            if out is None:
                self.keep(c, got, f"product on {kind}")
            else:
                out.entry.value = self.check_region(out, got, s)
                if self.is_live(out.entry) and not np.all(np.abs(out.entry.value) <= BOUND):
                    self.forget(out.entry)
                    out.entry.matrix.free()

    def product_arguments(self, data, s, dtype, a: View, b: View, shape: tuple) -> tuple[dict, View, View]:
        """(gm.matmul's keyword arguments, the out view or None, the bias view or None): a plain product (the
        launch path's fast route: no precision, alpha, beta, bias or activation; maybe out=), or any of them."""
        kwargs = {}
        m, n = shape[-2:]
        plain = data.draw(st.booleans(), label="plain product (no precision, alpha, beta, bias, activation)")
        if name_of(dtype) == "float32" and not plain:
            precision = data.draw(st.sampled_from([None, "float32", "tf32x3", "tf32"]), label="precision")
            if precision is not None:
                kwargs["precision"] = precision
        alpha = None if plain else data.draw(st.sampled_from([None, 1.0, 0.5, -2.0, 0.0]), label="alpha")
        if alpha is not None:
            kwargs["alpha"] = alpha
        out = None
        if data.draw(st.booleans(), label="into out="):
            out_dtype = dtype
            if name_of(dtype) in HALVES and data.draw(st.booleans(), label="float32 out"):
                out_dtype = DTYPES["float32"]
            beta = 0.0 if plain else data.draw(st.sampled_from([0.0, 1.0, -0.5]), label="beta")
            out = self.pick_view(
                data,
                s,
                out_dtype,
                rows=m,
                cols=n,
                batch=shape[0] if len(shape) == 3 else "2d",
                exclude=(a.entry, b.entry),
                writable=True,
                fill=None if beta else (np.nan if data.draw(st.booleans(), label="NaN out") else None),
                label="out",
            )
            kwargs["out"] = out.matrix
            if beta or (not plain and data.draw(st.booleans(), label="pass beta=0.0")):
                kwargs["beta"] = beta
        bias = None
        side = None if plain else data.draw(st.sampled_from([None, "row", "column"]), label="bias")
        if side is not None:
            bias_dtype = out.matrix.dtype if out is not None else dtype
            if name_of(bias_dtype) != "float32" and data.draw(st.booleans(), label="float32 bias"):
                bias_dtype = DTYPES["float32"]
            rows, cols = (1, n) if side == "row" else (m, 1)
            exclude = () if out is None else (out.entry,)
            bias = self.pick_view(data, s, bias_dtype, rows=rows, cols=cols, batch="2d", exclude=exclude, label="bias")
            kwargs["bias"] = bias.matrix
        activations = [None, "relu", "relu", "gelu", "gelu_tanh"]
        activation = None if plain else data.draw(st.sampled_from(activations), label="activation")
        if activation is not None:
            kwargs["activation"] = activation
        return kwargs, out, bias

    def do_dot(self, data) -> None:
        """gm.dot of two 2-D views of one shape (regions, transposed views, one matrix of a batch, the same
        matrix twice) against a float64 sum; the same call twice gives the same bits."""
        dtype = self.draw_dtype(data)
        kind = self.draw_kind(data)
        with self.on(kind) as s:
            x = self.pick_view(data, s, dtype, batch="2d", label="x")
            if data.draw(st.booleans(), label="dot(x, x)"):
                y = x
            else:
                rows, cols = x.value.shape
                y = self.pick_view(data, s, dtype, rows=rows, cols=cols, batch="2d", label="y")
            got = gm.dot(x.matrix, y.matrix, stream=s)
            again = gm.dot(x.matrix, y.matrix, stream=s)
        assert isinstance(got, float)
        assert got == again or (math.isnan(got) and math.isnan(again)), f"dot gave {got!r}, then {again!r}"
        ref = math.fsum((x.value * y.value).ravel())
        assert abs(got - ref) <= dot_tolerance(x.value, y.value), f"dot {x.value.shape} on {kind}: {got!r}, {ref!r}"

    def do_transpose(self, data) -> None:
        """gm.transpose of a view (any layout, batches too), into a new matrix or into out= (a view of another
        live matrix, maybe transposed), by "auto" or a named variant: the bits move unchanged."""
        dtype = self.draw_dtype(data)
        kind = self.draw_kind(data)
        with self.on(kind) as s:
            a = self.pick_view(data, s, dtype, label="a")
            h, w = a.value.shape[-2:]
            out = None
            if data.draw(st.booleans(), label="into out="):
                count = a.value.shape[0] if a.value.ndim == 3 else "2d"
                out = self.pick_view(
                    data, s, dtype, rows=w, cols=h, batch=count, exclude=(a.entry,), writable=True, label="out"
                )
            algorithms = ["auto", "naive", "tiled", "tiled_padded", "tiled_rect", "tiled_rect64", "sector_aligned"]
            algorithms.append("narrow_cols")
            if (w if a.matrix.is_transposed else h) <= 64:  # narrow_rows takes storages of at most 64 rows
                algorithms.append("narrow_rows")
            algorithm = data.draw(st.sampled_from(algorithms), label="algorithm")
            self.make_busy(data, s)
            t = gm.transpose(a.matrix, out=None if out is None else out.matrix, algorithm=algorithm, stream=s)
            got = wide(t.to_numpy(stream=s))
            problem = exact_mismatch(got, swapped(a.value))
            assert problem is None, f"transpose of {a.value.shape} by {algorithm} on {kind}: {problem}"
            if out is None:
                assert not t.is_transposed and t.dtype == dtype
                self.keep(t, got, f"transpose on {kind}")
            else:
                assert t is out.matrix
                whole = self.check_region(out, got, s)
                out.entry.value = whole

    def do_astype(self, data) -> None:
        """A.astype(dtype) of a view into every dtype (its own: a copy), rounded once to nearest even as
        NumPy rounds from float64; the result keeps the view's shape and layout."""
        dtype = self.draw_dtype(data)
        target = self.draw_dtype(data, label="to dtype")
        kind = self.draw_kind(data)
        with self.on(kind) as s:
            a = self.pick_view(data, s, dtype, label="a")
            self.make_busy(data, s)
            converted = a.matrix.astype(target, stream=s)
            assert converted.dtype == target and converted.shape == a.matrix.shape
            assert converted.is_transposed == a.matrix.is_transposed, "astype keeps the layout"
            got = wide(converted.to_numpy(stream=s))
        problem = exact_mismatch(got, wide(rounded(a.value, target)))
        assert problem is None, f"astype {name_of(dtype)} -> {name_of(target)} of {a.value.shape} on {kind}: {problem}"
        self.keep(converted, got, f"astype on {kind}")

    OPERATIONS = ("product", "dot", "transpose", "astype")

    # --- rules ---------------------------------------------------------------------------------------------
    @precondition(lambda self: len(self.live) < MAX_LIVE)
    @rule(data=st.data())
    def allocate(self, data):
        """Matrix.from_numpy (keeping the array's dtype, or converting with dtype=) or Matrix.zeros, 2-D or a
        batch, on a stream of any kind; what comes back is exactly what went up."""
        with self._step():
            dtype = self.draw_dtype(data)
            shape = (data.draw(SIDES, label="rows"), data.draw(SIDES, label="columns"))
            if data.draw(st.booleans(), label="a batch"):
                shape = (data.draw(st.integers(1, 4), label="batch"), *shape)
            how = data.draw(st.sampled_from(["from_numpy", "from_numpy(dtype=)", "zeros"]), label="how")
            kind = self.draw_kind(data)
            drawn_seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
            with self.on(kind) as s:
                if how == "zeros":
                    expected = np.zeros(shape)
                    m = gm.Matrix.zeros(shape, dtype=dtype, stream=s)
                elif how == "from_numpy":
                    host = random_values(drawn_seed, shape, dtype)
                    expected = wide(host)
                    m = gm.Matrix.from_numpy(host, stream=s)
                else:  # converted on the host, rounding to nearest
                    host = np.random.default_rng(drawn_seed).uniform(-1.0, 1.0, size=shape)
                    if name_of(dtype) == "bfloat16":  # float32 data: ml_dtypes, which converts on the host, rounds
                        host = host.astype(np.float32)  # float64 to bfloat16 twice (through float32), not to nearest
                    expected = wide(rounded(host, dtype))
                    m = gm.Matrix.from_numpy(host, dtype=name_of(dtype), stream=s)
                assert m.shape == shape and m.dtype == dtype and not m.is_view
                if name_of(dtype) in HALVES and data.draw(st.booleans(), label="to_numpy(dtype=np.float32)"):
                    got = m.to_numpy(stream=s, dtype=np.float32)
                    assert got.dtype == np.float32
                else:
                    got = m.to_numpy(stream=s)
                    assert got.dtype == dtype
            problem = exact_mismatch(got, expected)
            assert problem is None, f"{how} {name_of(dtype)} {shape} on {kind}: {problem}"
            self.live.append(Entry(m, expected, f"{how} on {kind}", kind=kind))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data):
        """Free a live matrix, by free() (its views then refuse to be made) or by dropping the last reference
        (the finalizer queues it for the next allocation); then maybe gm.release_cached(), which hands every
        cached block back (the free lists of every stream too) and changes nothing live."""
        with self._step():
            entry = self.live.pop(data.draw(st.integers(0, len(self.live) - 1), label="which"))
            if data.draw(st.booleans(), label="free() rather than drop"):
                entry.matrix.free()
                assert entry.matrix.is_freed
                try:
                    _ = entry.matrix.T
                except gm.FreedMatrixError:
                    pass
                else:
                    raise AssertionError("a view of a freed matrix was made")
            del entry
            if data.draw(st.booleans(), label="release_cached()"):
                gm.release_cached()

    @rule(data=st.data())
    def product(self, data):
        with self._step():
            self.do_product(data)

    @rule(data=st.data())
    def dot(self, data):
        with self._step():
            self.do_dot(data)

    @rule(data=st.data())
    def transpose(self, data):
        with self._step():
            self.do_transpose(data)

    @rule(data=st.data())
    def astype(self, data):
        with self._step():
            self.do_astype(data)

    @precondition(lambda self: self.libraries)
    @rule(data=st.data())
    def import_from_library(self, data):
        """gm.from_dlpack of a PyTorch tensor or a CuPy array (or Matrix.from_cuda_array of a CuPy array), made
        on the library's current stream or a stream of its own by a kernel still queued there: row-major,
        column-major (a transposed view) or a column slice of a wider array (a padded stride), zero-copy or
        copy=True. Work queued on the import (a transpose) may still be running when the producer's array is
        dropped, the import freed or dropped, and the producer asked for memory of that size; the transpose
        and the import's values stay right."""
        with self._step():
            lib = data.draw(st.sampled_from(self.libraries), label="library")
            names = list(DTYPES) if lib == "torch" else [x for x in DTYPES if x != "bfloat16"]
            dtype = self.draw_dtype(data, names=names)
            shape = (data.draw(SIDES, label="rows"), data.draw(SIDES, label="columns"))
            if data.draw(st.booleans(), label="a batch"):
                shape = (data.draw(st.integers(1, 3), label="batch"), *shape)
            layout = data.draw(st.sampled_from(["rows", "columns", "padded"]), label="layout")
            pad = data.draw(st.integers(1, 9), label="padding")
            copy = data.draw(st.sampled_from([None, True]), label="copy")
            route = "dlpack" if lib == "torch" else data.draw(st.sampled_from(["dlpack", "cai"]), label="route")
            own_stream = data.draw(st.booleans(), label="made on the library's own stream")
            producer_busy = data.draw(st.booleans(), label="the library's stream busy first")
            # on the per-thread default stream, which PyTorch's __dlpack__ refuses, gpumat asks for the legacy one
            kind = self.draw_kind(data)
            values = random_values(data.draw(st.integers(0, 2**32 - 1), label="seed"), shape, dtype)
            with self.on(kind) as s, self.producer(lib, own_stream):
                if producer_busy:
                    self.library_busy(lib)
                x, store_shape = self.library_array(lib, values, layout, pad)
                address = x.data_ptr() if lib == "torch" else x.data.ptr
                if route == "dlpack":
                    m = gm.from_dlpack(x, copy=copy, stream=s)
                else:
                    m = gm.Matrix.from_cuda_array(x, copy=copy, stream=s)
                assert m.shape == shape and m.dtype == dtype, (m.shape, m.dtype, shape, dtype)
                if copy:  # gpumat's copy, or the producer's own (DLPack 1.0's copy=True), which gpumat keeps
                    assert m.elements != address, "copy=True shares the array's memory"
                else:
                    assert m.is_borrowed and m.elements == address, "a zero-copy import copied"
                    if min(shape[-2:]) > 1:
                        assert m.is_transposed == (layout == "columns"), f"a {layout} import's layout"
                self.make_busy(data, s)
                t = gm.transpose(m, stream=s)  # queued, maybe behind the long products
                if data.draw(st.booleans(), label="drop the producer's array"):
                    x = None
                fate = data.draw(st.sampled_from(["keep", "free", "drop"]), label="the import")
                writable = not m.__cuda_array_interface__["data"][1]
                if fate == "free":
                    m.free()
                elif fate == "drop":
                    m = None
                filler = self.library_filler(lib, store_shape, dtype)  # may take memory given back just now
                problem = exact_mismatch(t.to_numpy(stream=s), swapped(wide(values)))
                t.free()
                assert problem is None, f"transpose of a {lib} {layout} import on {kind}: {problem}"
                if fate == "keep":
                    problem = exact_mismatch(m.to_numpy(stream=s), wide(values))
                    assert problem is None, f"a {lib} {layout} import on {kind}: {problem}"
                    self.keep(m, wide(values), f"{lib} import ({layout}, copy={copy}) on {kind}", writable)
                del filler, x

    @precondition(lambda self: self.libraries)
    @rule(data=st.data())
    def export_to_library(self, data):
        """torch.from_dlpack(M), cupy.from_dlpack(M) or cupy.asarray(M) (the CUDA array interface) of a view of
        a live matrix (zero-copy, its strides kept), or of a transpose still queued on gpumat's current stream
        (the consumer's stream must wait for it); the values arrive unchanged, and where the consumer negates
        them in place, gpumat reads the negated values."""
        with self._step():
            lib = data.draw(st.sampled_from(self.libraries), label="library")
            names = list(DTYPES) if lib == "torch" else [x for x in DTYPES if x != "bfloat16"]
            dtype = self.draw_dtype(data, names=names)
            queued = data.draw(st.booleans(), label="export a transpose still queued")
            kind = self.draw_kind(data, kinds=["legacy", "entered"])  # the export waits for the current stream
            with self.on(kind) as s:
                if queued:
                    source = self.pick_view(data, s, dtype, label="transposed")
                    self.make_busy(data, s)
                    matrix = gm.transpose(source.matrix)
                    self.temporaries.append(Entry(matrix, swapped(source.value), "queued transpose", kind=kind))
                    view = View(matrix, swapped(source.value), self.temporaries[-1], (Ellipsis,), False)
                else:
                    view = self.pick_view(data, s, dtype, label="exported")
                route = "dlpack" if lib == "torch" else data.draw(st.sampled_from(["dlpack", "cai"]), label="route")
                if lib == "torch":
                    y = torch.from_dlpack(view.matrix)
                    address = y.data_ptr()
                    got = y.to(torch.float64).cpu().numpy()
                else:
                    y = cupy.from_dlpack(view.matrix) if route == "dlpack" else cupy.asarray(view.matrix)
                    address = y.data.ptr
                    got = cupy.asnumpy(y)
                assert address == view.matrix.elements, f"the {lib} export copied"
                problem = exact_mismatch(got, view.value)
                assert problem is None, f"{lib} export ({route}) of {view.value.shape} on {kind}: {problem}"
                if view.entry.writable and data.draw(st.booleans(), label="the consumer negates it"):
                    if lib == "torch":
                        y.neg_()
                        torch.cuda.current_stream().synchronize()
                    else:
                        cupy.negative(y, out=y)
                        cupy.cuda.get_current_stream().synchronize()
                    view.write(-view.value)
                    problem = exact_mismatch(view.entry.matrix.to_numpy(stream=s), view.entry.value)
                    assert problem is None, f"gpumat reading what {lib} wrote into an export: {problem}"
                y = None

    @rule(data=st.data())
    def two_threads_at_once(self, data):
        """A second thread runs a burst of products, transposes and dots on fresh matrices of its own, on a
        gm.Stream of its own or its per-thread default stream, while this thread runs one operation on the
        live matrices; both threads' results are checked once the second has ended."""
        with self._step():
            stream = data.draw(st.sampled_from(["gm.Stream", "per-thread"]), label="the second thread's stream")
            stream = self.thread_stream if stream == "gm.Stream" else PER_THREAD_STREAM
            burst = data.draw(st.lists(BURST_OPERATIONS, min_size=1, max_size=6), label="the second thread's work")
            operation = data.draw(st.sampled_from(self.OPERATIONS), label="this thread's operation")
            outcomes: list = []
            start = threading.Barrier(2)
            second = threading.Thread(target=run_burst, args=(burst, stream, outcomes, start), daemon=True)
            second.start()
            try:
                start.wait(timeout=60)
                getattr(self, f"do_{operation}")(data)
            finally:
                second.join(timeout=300)
            assert not second.is_alive(), "the second thread did not end"
            problems = [f"{spec}: {problem}" for spec, problem in outcomes if problem is not None]
            assert len(outcomes) == len(burst) and not problems, "\n".join(problems) or outcomes

    # --- the libraries' side ------------------------------------------------------------------------------
    def producer(self, lib: str, own_stream: bool):
        """The library's own stream made current, or its current stream as it is."""
        if not own_stream:
            return contextlib.nullcontext()
        return torch.cuda.stream(self.torch_stream) if lib == "torch" else self.cupy_stream

    def library_busy(self, lib: str) -> None:
        if lib == "torch":
            torch.matmul(self.torch_busy, self.torch_busy)
        else:
            cupy.matmul(self.cupy_busy, self.cupy_busy)

    @staticmethod
    def library_array(lib: str, values: np.ndarray, layout: str, pad: int):
        """(array, the shape of its storage): `values` in the library's memory, written there by a copy kernel
        queued on the library's current stream, laid out as asked: row-major, column-major (the transpose of a
        row-major array) or the middle columns of a wider array."""
        if layout == "columns":
            store = np.ascontiguousarray(swapped(values))
        elif layout == "padded":
            store = np.concatenate([np.full((*values.shape[:-1], pad), 9, values.dtype), values], axis=-1)
            store = np.concatenate([store, np.full((*values.shape[:-1], 2), 9, values.dtype)], axis=-1)
        else:
            store = values
        if lib == "torch":
            if name_of(values.dtype) == "bfloat16":
                staged = torch.from_numpy(store.view(np.int16)).to("cuda").view(torch.bfloat16)
            else:
                staged = torch.from_numpy(np.ascontiguousarray(store)).to("cuda")
            made = staged.clone()
            array = made.transpose(-1, -2) if layout == "columns" else made
        else:
            made = cupy.asarray(store).copy()
            array = made.swapaxes(-1, -2) if layout == "columns" else made
        if layout == "padded":
            array = array[..., pad : pad + values.shape[-1]]
        return array, store.shape

    @staticmethod
    def library_filler(lib: str, shape, dtype: np.dtype) -> list:
        """Arrays of the import's storage size, filled with 7: the producer's allocator may hand them memory
        it got back."""
        if lib == "torch":
            kind = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16}
            kind["bfloat16"] = torch.bfloat16
            return [torch.full(shape, 7.0, dtype=kind[name_of(dtype)], device="cuda") for _ in range(3)]
        return [cupy.full(shape, 7.0, dtype=dtype) for _ in range(3)]

    # --- invariants and teardown --------------------------------------------------------------------------
    @invariant()
    def memory_in_use_is_what_the_live_matrices_hold(self):
        """gpumat's memory in use is exactly the bytes of the live matrices it owns (imports share another
        library's memory), the long products' operand and what was in use before the machine started."""
        owned = self.busy.nbytes + sum(e.matrix.nbytes for e in self.live if not e.matrix.is_borrowed)
        used = gm.memory_info()["used"]
        if used != self.baseline + owned:
            self.failed = True
            raise AssertionError(
                f"{used} bytes in use, the live matrices hold {owned} (and {self.baseline} before the start)\n"
                + holders()
            )

    def teardown(self):
        """Free everything, close the streams, collect: memory in use is back where it was at the start."""
        for e in self.live + self.temporaries:
            e.matrix.free()
        self.live.clear()
        self.temporaries.clear()
        self.busy.free()
        for s in (self.own, self.entered, self.thread_stream):
            s.close()
        for s in (self.torch_stream, self.cupy_stream):
            if s is not None:
                s.synchronize()
        self.torch_stream = self.cupy_stream = self.torch_busy = self.cupy_busy = None
        gc.collect()
        GpumatMachine.examples += 1
        if not self.failed:  # after a failure, the failing step's frames may still hold its matrices
            used = gm.memory_info()["used"]
            if used != self.baseline:
                raise AssertionError(f"{used} bytes in use after teardown, {self.baseline} before\n" + holders())


BURST_OPERATIONS = st.fixed_dictionaries(
    {
        "operation": st.sampled_from(["product", "transpose", "dot"]),
        "dtype": st.sampled_from(list(DTYPES)),
        "m": SIDES,
        "n": SIDES,
        "k": SIDES,
        "batch": st.sampled_from([None, None, 2, 3]),
        "transposed": st.booleans(),
        "seed": st.integers(0, 2**32 - 1),
    }
)


def run_burst(burst: list, stream, outcomes: list, start: threading.Barrier) -> None:
    """The second thread: each operation of the burst on fresh matrices, on `stream`; appends (spec, None)
    for a right result, else (spec, what is wrong)."""
    start.wait(timeout=60)
    for spec in burst:
        try:
            outcomes.append((spec, burst_operation(spec, stream)))
        except Exception:
            outcomes.append((spec, traceback.format_exc()))


def burst_operation(spec: dict, stream) -> str | None:
    dtype, m, n, k = DTYPES[spec["dtype"]], spec["m"], spec["n"], spec["k"]
    lead = () if spec["batch"] is None or spec["operation"] == "dot" else (spec["batch"],)
    a = random_values(spec["seed"], (*lead, m, k), dtype)
    matrices = []
    try:
        stored = np.ascontiguousarray(swapped(a)) if spec["transposed"] else a
        A = gm.Matrix.from_numpy(stored, stream=stream)
        matrices.append(A)
        op_a = A.T if spec["transposed"] else A
        if spec["operation"] == "transpose":  # op(A) holds `a` either way
            t = gm.transpose(op_a, stream=stream)
            matrices.append(t)
            return exact_mismatch(t.to_numpy(stream=stream), swapped(wide(a)))
        if spec["operation"] == "dot":
            other = random_values(spec["seed"] + 1, a.shape, dtype)
            B = gm.Matrix.from_numpy(other, stream=stream)
            matrices.append(B)
            got = gm.dot(op_a, B, stream=stream)
            x, y = wide(a), wide(other)
            ref = math.fsum((x * y).ravel())
            return None if abs(got - ref) <= dot_tolerance(x, y) else f"dot {got!r}, expected {ref!r}"
        b = random_values(spec["seed"] + 1, (k, n), dtype)
        B = gm.Matrix.from_numpy(b, stream=stream)
        matrices.append(B)
        c = gm.matmul(op_a, B, stream=stream)
        matrices.append(c)
        ref, scale = epilogue_reference(a, b, 1.0, 0.0, None, None, None)
        return mismatch(c.to_numpy(stream=stream), ref, scale, product_tolerance(dtype, dtype, None, k))
    finally:
        for x in matrices:
            x.free()


TestStateful = GpumatMachine.TestCase
TestStateful.settings = settings(
    max_examples=15,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# --- the long run ---------------------------------------------------------------------------------------------
def run_for(seconds: float, steps: int = 50, shrink: bool = False, first_seed: int | None = None) -> int:
    """Run the machine again and again for about `seconds`, then print one line; 1 on a failure, after the
    failing example. Each hypothesis run is seeded (first_seed, first_seed + 1, ...: --seed replays one's
    examples) and given half the examples that the ones so far say fit in the time left, so that the last ends
    close to the deadline: a run is never cut in the middle (hypothesis would take that for flaky generation)."""
    first_seed = random.randrange(2**32) if first_seed is None else first_seed
    GpumatMachine.steps = GpumatMachine.examples = 0
    started = time.monotonic()
    deadline = started + seconds
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    failures, run = 0, 0
    while True:
        left = deadline - time.monotonic()
        done = GpumatMachine.examples
        each = (time.monotonic() - started) / done if done else None  # seconds an example, so far
        if left <= 0 or (each is not None and left < each):
            break
        count = 3 if each is None else max(1, min(100, int(left / each / 2)))  # smaller runs near the end
        run_settings = settings(
            max_examples=count,
            stateful_step_count=steps,
            deadline=None,
            database=None,
            phases=phases,
            print_blob=True,
            suppress_health_check=list(HealthCheck),
        )

        def machine():
            return GpumatMachine()

        try:
            run_state_machine_as_test(seed(first_seed + run)(machine), settings=run_settings)
        except Exception:
            failures = 1
            traceback.print_exc()  # with the failing example (the exception's notes)
            print(f"stateful: the failing run's seed is {first_seed + run} (--seed replays it)", flush=True)
            break
        run += 1
    gc.collect()
    used = gm.memory_info()["used"]
    if not failures and used:
        failures = 1
        print(f"stateful: {used} bytes of gpumat memory still in use at the end\n{what_holds_live_matrices()}")
    print(
        f"stateful: {GpumatMachine.steps} steps in {GpumatMachine.examples} examples over "
        f"{time.monotonic() - started:.0f} s, {failures} failures",
        flush=True,
    )
    return 1 if failures else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Run gpumat's state machine for a while (see the docstring).")
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("GPUMAT_STATEFUL_SECONDS", 600)))
    parser.add_argument("--steps", type=int, default=50, help="the most steps of one example")
    parser.add_argument("--seed", type=int, default=None, help="the first hypothesis run's seed")
    parser.add_argument("--shrink", action="store_true", help="shrink a failing example (may take minutes)")
    args = parser.parse_args(argv)
    if not gm.is_available():
        print("stateful: no usable NVIDIA GPU", file=sys.stderr)
        return 2
    print(f"stateful: libraries {', '.join(_libraries()) or 'none'}; dtypes {', '.join(DTYPES)}", flush=True)
    return run_for(args.seconds, args.steps, args.shrink, args.seed)


if __name__ == "__main__":
    raise SystemExit(main())
