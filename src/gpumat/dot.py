"""Dot product, sum(x * y) over all elements of two equal-shape matrices of one dtype (float32, float64,
float16 or bfloat16) -> Python float.

One launch (cuda/dot.cu): threads keep double partial sums in a grid-stride loop, blocks reduce in a
fixed order, and the last block to finish adds the blocks' sums in block order on the device and
writes the double straight into page-locked host memory mapped for the device (no copy after the
kernel: one launch and one wait a call). The grid depends only on the size and the GPU, so the same
inputs give the same bits every run. Contiguous operands are read as flat vectors (128-bit loads when
aligned); views with a row stride go through a row-aware kernel.
"""

from __future__ import annotations

import ctypes
import threading
from functools import lru_cache

from ._dtypes import ITEMSIZE, SUFFIXES
from .matrix import Matrix, plain_2d, storage
from .memory.ordering import finished_on, use_on
from .operands import as_matrix, operand_device, same_dtype
from .runtime import memops
from .runtime.devices import Device
from .runtime.geometry import cdiv
from .runtime.kernels import Kernel
from .runtime.streams import LEGACY_STREAM, foreign_of, stream_handle, synchronize_stream, trusted

THREADS = 256  # threads a block (the kernels' THREADS)
BLOCKS_PER_SM = 4  # grid cap: enough loads in flight to saturate HBM (= the kernels' launch-bounds hint)
MAX_BLOCKS = 4096  # partial-sum slots in the scratch buffer
SCRATCH_BYTES = 8 + 8 * MAX_BLOCKS  # [ticket counter][partials]

# One flat and one strided kernel per dtype (cuda/dot.cu); every dtype accumulates in double.
# x, y, n, scratch, result (the device's pointer to the mapped host double)
FLAT_KERNELS = {dt: Kernel("dot", f"dot_flat_{dt}", "PPqPP", waits_for_previous=True) for dt in SUFFIXES}
# x, y, rows, cols, ldx, ldy, scratch, result
STRIDED_KERNELS = {dt: Kernel("dot", f"dot_strided_{dt}", "PPqqqqPP", waits_for_previous=True) for dt in SUFFIXES}
# elements a thread handles per grid-stride step of the flat kernel: two 16-byte loads of each operand
ELEMENTS_PER_THREAD = {dt: 2 * 16 // ITEMSIZE[dt] for dt in SUFFIXES}


@lru_cache(maxsize=1024)  # called on every dot: the few sizes a program uses, computed once
def grid_blocks(n: int, sm_count: int, dtype: str = "f32") -> int:
    """Blocks for n elements: enough for every thread to get a full step, at most BLOCKS_PER_SM a SM.
    Fixed by n, the dtype and the GPU alone, which is what makes the result deterministic."""
    return max(1, min(cdiv(n, THREADS * ELEMENTS_PER_THREAD[dtype]), BLOCKS_PER_SM * max(sm_count, 1), MAX_BLOCKS))


def is_flat(rows: int, cols: int, stride: int) -> bool:
    """Whether a row-major rows x cols region of row stride `stride` is one contiguous run (a flat vector)."""
    return rows <= 1 or stride == cols


def check_operands(x, y) -> tuple[int, int]:
    """Validate before any GPU call; returns the common shape."""
    x, y = as_matrix(x, "x"), as_matrix(y, "y")
    if x.shape != y.shape:
        raise ValueError(f"dot: shapes {x.shape} and {y.shape} differ")
    for m in (x, y):
        if m.ndim != 2:
            raise ValueError(f"dot takes 2-D matrices, got a batch of shape {m.shape}; index it (A[i]) for one matrix")
    return x.shape


class _Scratch:
    """One device's buffer for the partial sums, and a page-locked host double, mapped for the device, that
    the kernel writes the result into.
    Allocated once a device (outside the stream-ordered pool, so pool accounting never sees it); the
    lock serialises dot() calls from different threads, which would otherwise share it."""

    def __init__(self, dev: Device):  # made by Device.scratch_for: the device's context is current
        self.sm_count = dev.sm_count
        self.lock = threading.Lock()
        self.dev = memops.alloc_unpooled(SCRATCH_BYTES)
        memops.zero(self.dev, SCRATCH_BYTES)  # the ticket counter starts at 0
        # cuMemsetD8 may return before the device is written (the driver's "synchronous" memsets are not
        # synchronous with the host for device memory: they run on the legacy stream), and the first dot may
        # run on a stream that does not wait for the legacy stream, its kernel reading the counter unset.
        # Once a device: wait for the legacy stream here.
        synchronize_stream(LEGACY_STREAM)
        self.host, self.result = memops.host_alloc_mapped(8)
        self._value = ctypes.c_double.from_address(self.host)

    def value(self, stream: int) -> float:
        synchronize_stream(stream)
        return float(self._value.value)


def _scratch(dev: Device) -> _Scratch:
    return dev.scratch_for("dot", _Scratch)


def dot(x: Matrix, y: Matrix, stream=None) -> float:
    """sum(x * y) over all elements of two equal-shape matrices of one dtype, as a float.

    Products and sums are kept in double on the GPU (every dtype); empty matrices give 0.0; NaN and
    Inf propagate. When one operand is a transposed view (``A.T``) and the other is not, the
    transposed one is first copied row-major (one pass over it). Deterministic: the same inputs give
    the same bits on every call on the same GPU. The call waits for the result.

    Parameters
    ----------
    x, y : Matrix
        2-D matrices (views welcome) of one shape and dtype.
    stream : Stream or stream-like, optional
        Where the work is queued; the thread's current stream by default.

    Returns
    -------
    float
        The sum.

    Raises
    ------
    TypeError
        An operand that is not a Matrix, or different dtypes.
    ValueError
        Different shapes, or a batch.
    FreedMatrixError
        An operand has been freed.

    Examples
    --------
    >>> A = gm.Matrix.from_numpy(np.ones((2, 2)))  # doctest: +GPU
    >>> gm.dot(A, A)
    4.0
    """
    dev = operand_device((x, "x"), (y, "y"))
    s = stream_handle(stream, dev)
    empty = check_operands(x, y) == (0, 0) or 0 in x.shape  # shapes first: bad input never touches the GPU
    same_dtype("dot", (x, "x"), (y, "y"))
    if empty:
        return 0.0
    if x.is_transposed == y.is_transposed:  # both row-major, or both transposed: the storages' products agree
        return _dot(storage(x), storage(y), dev, s)
    # one transposed view is first copied row-major (one pass); the copy is freed here, not left to a finalizer
    copies = []
    try:
        rows_x, rows_y = (_row_major(m, copies, s) for m in (x, y))
        return _dot(rows_x, rows_y, dev, s)
    finally:
        for m in copies:
            m.free()


def _row_major(m: Matrix, copies: list, s: int) -> Matrix:
    rows = plain_2d(m, "dot", s)
    if rows is not m:
        copies.append(rows)
    return rows


def _dot(x: Matrix, y: Matrix, dev, s: int) -> float:
    """dot of two row-major 2-D matrices of one shape and dtype, on stream s of dev."""
    scratch = _scratch(dev)
    with scratch.lock:
        with dev.lock:
            # the buffers, read once: a free() from another thread may detach the matrices below
            x_ptr, ldx, _, _, _, rows, cols, dt, x_buffer = x._operand()
            y_ptr, ldy, *_, y_buffer = y._operand()  # the caller checked that the shapes and dtypes match
            if x_buffer is None or y_buffer is None or not (x_buffer.alive and y_buffer.alive):
                _ = x.elements, y.elements  # freed by another thread meanwhile: FreedMatrixError says which
            n = rows * cols
            if n == 0:
                return 0.0
            use_on(s, x_buffer, y_buffer)
            grid, block = (grid_blocks(n, scratch.sm_count, dt), 1, 1), (THREADS, 1, 1)
            if is_flat(rows, cols, ldx) and is_flat(rows, cols, ldy):
                FLAT_KERNELS[dt](grid, block, x_ptr, y_ptr, n, scratch.dev, scratch.result, stream=s, device=dev)
            else:
                args = (x_ptr, y_ptr, rows, cols, ldx, ldy, scratch.dev, scratch.result)
                STRIDED_KERNELS[dt](grid, block, *args, stream=s, device=dev)
        value = scratch.value(s)  # waits outside the device lock: other threads may queue work meanwhile
    if not trusted(s):  # another library's stream: the work has run there, no mark to record
        with dev.lock:
            finished_on(foreign_of(s, dev), x_buffer, y_buffer)
    return value
