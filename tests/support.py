"""Test helpers: random data, float64 references, poisoned outputs, fake device buffers for CPU tests."""

from __future__ import annotations

import gc
import math
import os
import sys
import threading
import types
from contextlib import contextmanager

import numpy as np
from hypothesis import strategies as st

import gpumat as gm
from gpumat.matmul.engine import REDUCE, VARIANTS, Target, plan
from gpumat.matrix import Matrix
from gpumat.runtime import devices, kernels, memops

# tools/sanitize.py sets GPUMAT_SANITIZE: under compute-sanitizer every kernel runs 10-1000x slower
# (racecheck follows each shared-memory access), so sizes whose only job is to keep a stream busy while
# the test races work against it shrink; the kernels still run far longer than the host side of the race.
UNDER_SANITIZER = bool(os.environ.get("GPUMAT_SANITIZE"))


@contextmanager
def rows_left_out(names):
    """The GEMM table without these rows for the moment (plans made anew from the smaller table), then the
    table as it was, in its order: a row taken out and put back must not move to the end, where it would
    lose the ties the table's order decides."""
    saved = dict(VARIANTS)
    for name in names:
        del VARIANTS[name]
    plan.cache_clear()
    try:
        yield
    finally:
        VARIANTS.clear()
        VARIANTS.update(saved)
        plan.cache_clear()


def load_script(relative: str, name: str | None = None) -> types.ModuleType:
    """A script of the source tree that is not a package module (build_ptx.py, tools/*.py, benchmarks/*.py),
    loaded from its path relative to the tree's root, as a module of `name` (its file name by default)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / relative
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def built_entries() -> dict:
    """The build's report (kernels/entries.json): {module: {entry point: {params, resources}}}, where
    resources are ptxas's figures by arch. A test that reads it skips, with the reason, when the kernels
    are not built."""
    import json

    import pytest

    from gpumat.runtime.kernels import KERNEL_DIR

    try:
        with open(os.path.join(KERNEL_DIR, "entries.json")) as f:
            return json.load(f)
    except FileNotFoundError:
        pytest.skip("the kernels are not built (no entries.json): `make kernels` builds them")


def record_launches(monkeypatch, sink: list) -> list:
    """Replace every kernel launch, by a Kernel call or a FixedLaunch alike, with a record appended to
    `sink`: (kernel name, grid, block, arguments, shared memory, stream). Returns sink."""

    def kernel_call(self, grid, block, *args, smem=0, stream=0, device=None, dependent=None, cluster=1):
        sink.append((self.name, tuple(grid), tuple(block), args, smem, stream))

    def fixed_call(self, dev, stream, *leading):
        dims = self.dims
        sink.append((self.kernel.name, dims[:3], dims[3:6], (*leading, *self.tail), dims[6], stream))

    monkeypatch.setattr(kernels.Kernel, "__call__", kernel_call)
    monkeypatch.setattr(kernels.FixedLaunch, "__call__", fixed_call)
    return sink


def bound_run(monkeypatch, plan, a: tuple, b: tuple, c: tuple, epilogue: tuple | None = None, scratch=0x7F4000000000):
    """Run `plan` bound to a stand-in device on (address, row stride, batch stride) operands with nothing
    encoded or launched: (the tensor maps' (element type, arguments) in the order encoded, the launches
    (kernel name, grid, block, arguments, shared memory), the copies into scratch ("transpose" or "copy",
    the copy kernel's arguments)). Scratch comes from a pool that hands out `scratch`."""
    from gpumat.matmul import engine
    from gpumat.runtime import tensormaps

    class Pool:
        def alloc(self, nbytes, stream):
            return scratch

        def free(self, ptr, nbytes, stream):
            pass

    encoded, launched = [], []
    record_launches(monkeypatch, launched)
    monkeypatch.setattr(tensormaps, "encode_tiled", lambda elem, args: encoded.append((elem, args)) or bytes(128))
    engine.tensor_map.cache_clear()
    engine.c_map.cache_clear()
    try:
        engine.BoundPlan(plan, types.SimpleNamespace(memory=Pool())).run(0, a, b, c, epilogue or engine.IDENTITY)
    finally:  # the fake maps must not outlive the test
        engine.tensor_map.cache_clear()
        engine.c_map.cache_clear()
    copying = ("transpose_", "copy_")
    copies = [(name.split("_")[0], args) for name, _, _, args, _, _ in launched if name.startswith(copying)]
    launches = [
        (name, grid, block, args, smem) for name, grid, block, args, smem, _ in launched if not name.startswith(copying)
    ]
    return encoded, launches, copies


def busy(n: int) -> int:
    """A matrix side that keeps a stream busy: n, or n / 8 (at least 128) under the sanitizer."""
    return max(n // 8, 128) if UNDER_SANITIZER else n


NAN_BITS = 0x7FC00000  # a quiet NaN: any element a kernel fails to write stays NaN and fails the check
rng = np.random.default_rng()


def random(shape, low=-1.0, high=1.0) -> np.ndarray:
    return rng.uniform(low, high, size=shape).astype(np.float32)


def rel_error(got, ref) -> float:
    """Relative Frobenius error of got against a float64 reference (NaN in got gives NaN, which fails)."""
    got, ref = np.asarray(got, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(got - ref) / (denom if denom else 1.0))


def product_error(got, a, b, out_dtype=None) -> float:
    """||got - A B|| / || |A| |B| ||: the scale that float32 rounding of a product is bounded by, so
    results that cancel to near zero (a 1 x 1 product can) are judged by the same yardstick. A float16
    C (out_dtype) is measured against at least 2^-14 an element, float16's smallest normal number:
    below it the format rounds to a fixed spacing of 2^-24, not to 11 bits of the value."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    scale = np.linalg.norm(np.abs(a64) @ np.abs(b64))
    if out_dtype is not None and np.dtype(out_dtype) == np.float16:
        scale = max(scale, 2.0**-14 * np.sqrt(np.asarray(got).size))
    return float(np.linalg.norm(np.asarray(got, np.float64) - a64 @ b64) / (scale if scale else 1.0))


def wide(x) -> np.ndarray:
    return np.asarray(x.to_numpy(), dtype=np.float64) if isinstance(x, Matrix) else np.asarray(x, np.float64)


def epilogue_reference(a, b, alpha, beta, c0, bias, activation):
    """float64: act(alpha * a @ b + beta * c0 + bias), and the scale its error is measured against."""
    a64, b64 = wide(a), wide(b)
    prod = np.matmul(a64, b64)
    scale = abs(alpha) * np.matmul(np.abs(a64), np.abs(b64))
    r = alpha * prod
    if beta:
        r = r + beta * c0
        scale = scale + abs(beta) * np.abs(c0)
    if bias is not None:
        r = r + bias
        scale = scale + np.abs(bias)
    if activation == "relu":
        r = np.maximum(r, 0)
    elif activation == "gelu":
        erf = np.vectorize(math.erf)
        r = 0.5 * r * (1 + erf(r / math.sqrt(2)))
    elif activation == "gelu_tanh":
        r = 0.5 * r * (1 + np.tanh(math.sqrt(2 / math.pi) * (r + 0.044715 * r**3)))
    return r, scale


def poisoned(height: int, width: int, dtype=np.float32) -> Matrix:
    m = Matrix.empty(height, width, dtype=dtype)
    poison(m)
    return m


def poison(m: Matrix) -> None:
    """NaN in every element, whatever the dtype (0x7FF8 repeated is a NaN in all four)."""
    memops.fill_bytes_2d(m.elements, m.stride * m.itemsize, 0x7FF8, m.width * m.itemsize, m.height)


def strided_view(host: np.ndarray, pad_left: int = 1, pad_right: int = 2):
    """Upload host inside a wider random matrix and return (parent, view of host's place): odd offsets and strides."""
    h, w = host.shape
    parent = random((h, w + pad_left + pad_right))
    parent[:, pad_left : pad_left + w] = host
    big = gm.Matrix.from_numpy(parent)
    return big, big[:, pad_left : pad_left + w]


class FakeDevice:
    """Stands in for a GPU in CPU tests: it has the facts and the lock, and activating it does nothing."""

    def __init__(self, ordinal: int = 0):
        self.ordinal, self.sm_count, self.max_smem_optin, self.total_memory = ordinal, 132, 227 * 1024, 80 << 30
        self.context = 0xC000 + ordinal  # its CUDA context, as an int
        self.scratch: dict = {}  # per-device objects (the matmul engine keeps the device's Target here)
        self.arch = 90
        self.lock = threading.RLock()
        self.memory = None

    @property
    def arch(self) -> int:
        return self._arch

    @arch.setter
    def arch(self, value: int) -> None:
        """A test that changes the fake GPU's compute capability makes it another GPU: the facts the
        matmul engine cached for the old one (its Target, the plans of its launch path, which that path
        keys by device ordinal) must not be used for the new one."""
        from gpumat.matmul.engine import bound_plans

        self._arch = value
        self.scratch.clear()
        bound_plans.clear()

    def activate(self):
        return self

    def synchronize(self) -> None:
        """Nothing is ever queued on a fake GPU."""


FAKE_DEVICE = FakeDevice()


class FakeBuffer:
    """Stands in for device memory in CPU tests: argument checks must reject bad input before any GPU call."""

    def __init__(self, ptr: int = 0x7F0000000000, nbytes: int = 1 << 40, device: FakeDevice = FAKE_DEVICE):
        self.ptr, self.nbytes, self.device = ptr, nbytes, device

    alive = True
    borrowed = False
    stream = 0

    def use_on(self, stream):
        raise AssertionError("a CPU test reached the point of using device memory")


def fake_matrix(
    height: int, width: int, stride: int | None = None, ptr: int = 0x7F0000000000, dtype=np.float32
) -> Matrix:
    from gpumat import _dtypes

    return Matrix._wrap(
        FakeBuffer(ptr), 0, height, width, stride or max(width, 1), owner=False, dtype=_dtypes.as_storage_dtype(dtype)
    )


def fake_batch(batch, height, width, stride=None, bstride=None, ptr=0x7F0000000000, dtype=np.float32, trans=False):
    """A batch of fake matrices (nothing on a GPU): `batch` matrices `bstride` elements apart (by default
    packed one after another), each height x width with row stride `stride`, maybe stored transposed."""
    from gpumat import _dtypes

    stride = stride or max(height if trans else width, 1)
    bstride = (width if trans else height) * stride if bstride is None else bstride
    return Matrix._wrap(
        FakeBuffer(ptr),
        0,
        height,
        width,
        stride,
        dtype=_dtypes.as_storage_dtype(dtype),
        trans=trans,
        batch=batch,
        bstride=bstride,
    )


# The matmul engine's planner is pure: CPU tests plan for these GPUs by hand (gpumat.matmul.problem.Target).
ALL_MODULES = frozenset(
    {k.module for v in VARIANTS.values() for k in v.kernels.values()} | {k.module for k in REDUCE.values()}
)
H100 = Target(90, 132, 227 * 1024, ALL_MODULES)
# the modules built for sm_90a alone (cuda/matmul_wgmma.cuh's two halves): a build without sm_90 has neither
SM90A_MODULES = frozenset({"matmul_wgmma_half", "matmul_wgmma_kmajor"})
A100 = Target(80, 108, 163 * 1024, ALL_MODULES - SM90A_MODULES)
SM86 = Target(86, 84, 99 * 1024, ALL_MODULES)
TURING = Target(75, 40, 64 * 1024, ALL_MODULES)
TARGETS = {"H100": H100, "A100": A100, "sm_86": SM86, "Turing": TURING}


def dims(max_value: int = 300, tiles=(16, 32, 64, 128)):
    """Sizes that matter: 1, primes, tile sizes and their neighbours, and anything up to max_value."""
    special = sorted({1, 2, 3, 5, 7, 13, 31, 97, 127, 251, *[t + d for t in tiles for d in (-1, 0, 1)]})
    return st.one_of(st.sampled_from([s for s in special if s <= max_value]), st.integers(1, max_value))


def check_view_product(algorithm: str, m: int, n: int, k: int, pads, tolerance: float) -> None:
    """matmul of views at odd offsets and strides (pads: left/right padding of A, B and C) into a
    NaN-filled C view: the view holds the product, and nothing around it was written."""
    a, b = random((m, k)), random((k, n))
    pa, A = strided_view(a, pads[0], pads[1])
    pb, B = strided_view(b, pads[2], pads[3])
    pc, C = strided_view(np.full((m, n), np.nan, np.float32), pads[4], pads[5])
    around = pc.to_numpy()
    gm.matmul(A, B, out=C, algorithm=algorithm)
    got = pc.to_numpy()
    assert product_error(got[:, pads[4] : pads[4] + n], a, b) < tolerance
    got[:, pads[4] : pads[4] + n] = around[:, pads[4] : pads[4] + n]
    np.testing.assert_array_equal(got, around)  # nothing outside the view was touched
    for x in (pa, pb, pc):
        x.free()


def what_holds_live_matrices(limit: int = 60) -> str:
    """This process's live gpumat matrices (a Dask worker's, run there), and the chain of objects that
    refer to the first of them (frames, containers, objects; depth-first, each object once), as text for
    a failure message."""
    gc.collect()
    live = [o for o in gc.get_objects() if isinstance(o, gm.Matrix) and not o.is_freed and o.size]
    pending = sum(len(d.memory.pending) for d in list(devices._devices.values()) if d.memory is not None)
    lines = [f"{len(live)} live matrices; {pending} blocks queued by finalizers"]
    skip = {id(live), id(lines)}

    running = set()  # the frames of every thread's stack now: any other frame is kept by something
    for top in sys._current_frames().values():
        while top is not None:
            running.add(id(top))
            top = top.f_back

    def describe(obj) -> str:
        if isinstance(obj, types.FrameType):
            where = f"frame {obj.f_code.co_filename.rsplit('/', 1)[-1]}:{obj.f_lineno} in {obj.f_code.co_name}"
            return where if id(obj) in running else where + " (finished; kept alive)"
        if isinstance(obj, dict):
            return f"dict with keys {str(list(obj)[:6])[:200]}"
        if isinstance(obj, (list, tuple, set, frozenset)):
            return f"{type(obj).__name__} of {len(obj)}"
        return f"{type(obj).__module__}.{type(obj).__qualname__} {repr(obj)[:150]}"

    def walk(obj, depth: int, seen: set) -> None:
        referrers = gc.get_referrers(obj)
        skip.add(id(referrers))
        for r in referrers:
            if len(lines) > limit or id(r) in skip or id(r) in seen:
                continue
            if isinstance(r, types.FrameType) and r.f_code in own_code:  # this search's own frames
                continue
            seen.add(id(r))
            lines.append("  " * depth + describe(r))
            if isinstance(r, types.FrameType) and id(r) not in running and not _python_referrers(r, skip):
                lines.append("  " * (depth + 1) + "held by no Python object: by C code (an extension, a tool)")
            if depth < 10 and not isinstance(r, (type, types.ModuleType)):
                walk(r, depth + 1, seen)

    own_code = {walk.__code__, what_holds_live_matrices.__code__}
    if live:
        walk(live[0], 0, set())
    return "\n".join(lines)


def _python_referrers(obj, skip: set) -> list:
    referrers = gc.get_referrers(obj)
    skip.add(id(referrers))
    return [r for r in referrers if id(r) not in skip and not isinstance(r, types.FrameType)]


class HostChunk:
    """A stand-in Matrix chunk for gpumat.dask's serialisation on the CPU: its values on the host."""

    def __init__(self, values):
        self.values, self.dtype, self.shape = values, values.dtype, values.shape
        self.ndim, self.size, self.nbytes = values.ndim, values.size, values.nbytes
        self.is_transposed, self.is_contiguous = False, True

    def to_numpy(self):
        return self.values
