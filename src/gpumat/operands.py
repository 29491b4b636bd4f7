"""What every operation checks of its matrix operands before anything is allocated or queued: that they are
live matrices (as_matrix), of one dtype (same_dtype), on one device (operand_device), and that an `out`
fits the result and shares no memory with the inputs (check_out: the kernels read the inputs while they
write out; two blocks of gpumat's pool never share a byte, views of one block and other libraries'
memory are compared by address range)."""

from __future__ import annotations

import numpy as np

from . import _dtypes
from .matrix import FreedMatrixError, Matrix
from .memory import DeviceBuffer
from .runtime.devices import Device


def same_dtype(op: str, *named, integers: tuple[str, ...] = ()) -> np.dtype:
    """The one dtype of an operation's operands; TypeError naming both when they differ (no promotion), and
    the one gate of the storage-only dtypes: an operation computes in the four float dtypes, and in int8,
    int32 or FP8 only where it names them in `integers` (kernel suffixes: the INT8 product "s8", the moves
    all of them)."""
    dt, sfx, first = None, None, None
    for m, name in named:
        if m is None:
            continue
        if dt is None:
            dt, sfx, first = m._dtype, m._sfx, name
        elif m._sfx != sfx:
            raise TypeError(
                f"{op}: {first} is {_dtypes.name(dt)} and {name} is {_dtypes.name(m._dtype)}; gpumat does "
                f"not mix dtypes in one call (convert one with .astype())"
            )
    if sfx in _dtypes.STORAGE_ONLY_SUFFIXES and sfx not in integers:
        names = [_dtypes.DTYPE_NAMES[x] for x in integers]
        takes = " and ".join(names) if len(names) < 3 else ", ".join(names[:-1]) + " and " + names[-1]
        raise TypeError(
            f"{op}: {first} is {_dtypes.name(dt)}; {op} computes in float32, float64, float16 or bfloat16"
            + (f" (and {takes})" if takes else "")
            + " (convert with .astype(), e.g. .astype(np.float32))"
        )
    return dt


def as_matrix(x, name: str) -> Matrix:
    if not isinstance(x, Matrix):
        raise TypeError(f"{name} must be a gpumat.Matrix, got {type(x).__name__} (use Matrix.from_numpy)")
    _ = x.elements  # raises FreedMatrixError for freed matrices
    return x


def operand_device(*named) -> Device:
    """The one device all the given matrices live on; (matrix, name) pairs, None entries skipped (the
    operation checks which it needs), but not all of them. TypeError for non-matrices, FreedMatrixError
    for freed ones, ValueError naming the devices when they differ."""
    dev = None
    first = None
    for x, name in named:
        if x is None:
            continue
        if not isinstance(x, Matrix):
            raise TypeError(f"{name} must be a gpumat.Matrix, got {type(x).__name__} (use Matrix.from_numpy)")
        buf = x._buffer
        if buf is None:
            raise FreedMatrixError(f"{name} ({x._describe()}) has been freed")
        d = buf.device
        if dev is None:
            dev, first = d, name
        elif d is not dev:
            raise ValueError(
                f"{first} is on GPU {dev.ordinal} and {name} on GPU {d.ordinal}: the operands of one "
                f"operation must live on one device (copy with .to(device))"
            )
    if dev is None:
        raise TypeError(f"{named[0][1]} must be a gpumat.Matrix, got None")
    return dev.activate()


def check_out(out, shape: tuple[int, ...], inputs, op: str) -> None:
    """An optional `out`: a live Matrix of the result's shape sharing no memory with the inputs."""
    if out is None:
        return
    as_matrix(out, "out")
    if getattr(out._buffer, "readonly", False):
        raise ValueError(f"{op}: out is read-only (its producer exported it so); write into a writeable matrix")
    if out.shape != shape:
        raise ValueError(f"{op}: out has shape {out.shape}, the result needs {shape}")
    if not matrices_apart(out):
        # e.g. another library's broadcast view (batch stride 0): each result would overwrite the last
        raise ValueError(f"{op}: the matrices of out overlap each other (batch stride {out._bstride} elements)")
    out_block = out._buffer
    for x in inputs:
        block = x._buffer
        # two different blocks of gpumat's pool never share a byte; views of one block, and other
        # libraries' memory, are compared by address
        if (block is out_block or type(block) is not DeviceBuffer or type(out_block) is not DeviceBuffer) and overlaps(
            out, x
        ):
            raise ValueError(f"{op}: out overlaps an input; the kernels read the inputs while they write out")


def matrices_apart(m: Matrix) -> bool:
    """Whether no two matrices of m share an element (so for a 2-D matrix, a batch of one, empty matrices)."""
    return not (m._batch and m._batch > 1) or m._bstride * m._dtype.itemsize >= _one_matrix_bytes(m)


def address_range(m: Matrix) -> tuple[int, int]:
    """[first byte, last byte + 1) that the matrix's elements span in device memory."""
    one = _one_matrix_bytes(m)
    if one == 0 or m._batch == 0:
        return 0, 0
    start = m.elements
    return start, start + one + ((m._batch - 1) * m._bstride * m._dtype.itemsize if m._batch else 0)


def _one_matrix_bytes(m: Matrix) -> int:
    """The bytes one matrix of m spans, from its first element to past its last."""
    if m._height == 0 or m._width == 0:
        return 0
    rows, cols = (m._width, m._height) if m._trans else (m._height, m._width)  # the storage's
    return ((rows - 1) * m._stride + cols) * m._dtype.itemsize


def overlaps(a: Matrix, b: Matrix) -> bool:
    (a0, a1), (b0, b1) = address_range(a), address_range(b)
    return a0 < b1 and b0 < a1
