"""Matrix: the documents' struct {height, width, stride, elements}, float32, row-major, on the GPU.

Element (r, c) lives at elements + (r * stride + c) * 4. A slice is a view: it shares the owner's
device memory and keeps its stride, so kernels that take a leading dimension use it without a copy.
"""
from __future__ import annotations

import numpy as np

from . import _memory

FLOAT32 = np.dtype(np.float32)


# The operation modules import this one, so gpumat/__init__.py hands their entry points back here
# for `A @ B` and `A.T` (a plain global: these run on every call).
_matmul = _transpose = None


class FreedMatrixError(ValueError):
    """The matrix (or the matrix a view was taken from) has been freed."""


class Matrix:
    """A float32 matrix in GPU memory. Make one with from_numpy, empty or zeros; release it with free()."""

    __slots__ = ("_buffer", "_offset", "_height", "_width", "_stride", "_owner", "__weakref__")
    dtype = FLOAT32

    def __init__(self, *args, **kwargs):
        raise TypeError("make a Matrix with Matrix.from_numpy(a), Matrix.empty(h, w) or Matrix.zeros(h, w)")

    @classmethod
    def _wrap(cls, buffer, offset: int, height: int, width: int, stride: int, owner: bool = False) -> "Matrix":
        m = object.__new__(cls)
        m._buffer, m._offset, m._height, m._width, m._stride = buffer, offset, height, width, stride
        m._owner = owner
        return m

    # construction -------------------------------------------------------------------------
    @classmethod
    def empty(cls, height: int, width: int) -> "Matrix":
        """Uninitialised (height, width) matrix."""
        return cls._allocate(*_check_dims(height, width))

    @classmethod
    def _allocate(cls, height: int, width: int) -> "Matrix":
        """empty() for dimensions already known to be valid (the operations' result path)."""
        m = object.__new__(cls)
        m._buffer, m._offset, m._height, m._width, m._stride = _memory.DeviceBuffer(height * width * 4), 0, height, width, width or 1
        m._owner = True
        return m

    @classmethod
    def zeros(cls, height: int, width: int) -> "Matrix":
        m = cls.empty(height, width)
        _memory.fill_2d(m._buffer.ptr, m._stride * 4, 0, width, height)
        return m

    @classmethod
    def from_numpy(cls, array) -> "Matrix":
        """Copy a 1-D (one row) or 2-D real array-like to the GPU as C-order float32."""
        host = as_float32_2d(array)
        m = cls.empty(*host.shape)
        _memory.upload(m._buffer.ptr, m._stride * 4, host)
        return m

    # the struct's fields ---------------------------------------------------------------------
    @property
    def height(self) -> int:
        return self._height

    @property
    def width(self) -> int:
        return self._width

    @property
    def stride(self) -> int:
        """Elements between the starts of consecutive rows (>= width; larger for column slices)."""
        return self._stride

    @property
    def elements(self) -> int:
        """Device address of element (0, 0)."""
        buf = self._buffer
        if buf is None or not buf.alive:
            raise FreedMatrixError(f"{self._describe()} has been freed")
        return buf.ptr + self._offset * 4 if buf.ptr else 0

    @property
    def shape(self) -> tuple[int, int]:
        return self._height, self._width

    @property
    def size(self) -> int:
        return self._height * self._width

    @property
    def nbytes(self) -> int:
        return self.size * 4

    @property
    def is_view(self) -> bool:
        return not self._owner

    @property
    def is_freed(self) -> bool:
        return self._buffer is None or not self._buffer.alive

    @property
    def T(self) -> "Matrix":
        return _transpose(self)

    # host <-> device -----------------------------------------------------------------------
    def to_numpy(self) -> np.ndarray:
        host = np.empty(self.shape, dtype=FLOAT32)
        if host.size:
            _memory.download(host, self.elements, self._stride * 4)
        else:
            self.elements  # a freed empty matrix still reports that it was freed
        return host

    def __array__(self, dtype=None, copy=None):
        out = self.to_numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    # views ---------------------------------------------------------------------------------
    def __getitem__(self, key) -> "Matrix":
        if not isinstance(key, tuple):
            key = (key, slice(None))
        if len(key) != 2 or not all(isinstance(k, slice) for k in key):
            raise TypeError("index a Matrix with two slices, A[r0:r1, c0:c1]; element access goes through to_numpy()")
        self.elements  # views of freed memory are refused up front
        (r0, r1, rs), (c0, c1, cs) = key[0].indices(self._height), key[1].indices(self._width)
        if rs != 1 or cs != 1:
            raise ValueError("Matrix views take contiguous slices only (step 1)")
        rows, cols = max(r1 - r0, 0), max(c1 - c0, 0)
        offset = self._offset + (r0 * self._stride + c0 if rows and cols else 0)
        return Matrix._wrap(self._buffer, offset, rows, cols, self._stride)

    # lifetime ------------------------------------------------------------------------------
    def free(self) -> None:
        """Release the device memory now. Views of it become unusable; freeing a view detaches only the view."""
        buf, self._buffer = self._buffer, None
        if buf is not None and self._owner:
            buf.release()

    def __enter__(self) -> "Matrix":
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    # arithmetic ----------------------------------------------------------------------------
    def __matmul__(self, other):
        if isinstance(other, Matrix):
            return _matmul(self, other)
        return NotImplemented

    def __repr__(self) -> str:
        if self.is_freed:
            return f"<gpumat.Matrix {self._height}x{self._width} float32, freed>"
        view = f", view stride={self._stride}" if self.is_view else ""
        return f"<gpumat.Matrix {self._height}x{self._width} float32{view} at 0x{self.elements:x}>"

    def _describe(self) -> str:
        return f"Matrix {self._height}x{self._width}"


def _check_dims(height, width) -> tuple[int, int]:
    for name, v in (("height", height), ("width", width)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    return int(height), int(width)


def as_float32_2d(array) -> np.ndarray:
    """Host side of from_numpy: a C-contiguous float32 2-D array, or TypeError/ValueError."""
    a = np.asarray(array)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"gpumat matrices hold real numbers; got dtype {a.dtype} "
                        "(convert bool/complex/object data explicitly first)")
    if a.ndim == 1:
        a = a.reshape(1, -1)
    elif a.ndim != 2:
        raise ValueError(f"expected a 1-D or 2-D array, got {a.ndim}-D with shape {a.shape}")
    return np.ascontiguousarray(a, dtype=FLOAT32)


def as_matrix(x, name: str) -> Matrix:
    if not isinstance(x, Matrix):
        raise TypeError(f"{name} must be a gpumat.Matrix, got {type(x).__name__} (use Matrix.from_numpy)")
    x.elements  # raises FreedMatrixError for freed matrices
    return x


def check_out(out, shape: tuple[int, int], inputs, op: str) -> None:
    """An optional `out`: a live Matrix of the result's shape sharing no memory with the inputs."""
    if out is None:
        return
    as_matrix(out, "out")
    if out.shape != shape:
        raise ValueError(f"{op}: out has shape {out.shape}, the result needs {shape}")
    if any(overlaps(out, x) for x in inputs):
        raise ValueError(f"{op}: out overlaps an input; the kernels read the inputs while they write out")


def address_range(m: Matrix) -> tuple[int, int]:
    """[first byte, last byte + 1) that the matrix's elements span in device memory."""
    if m.size == 0:
        return 0, 0
    start = m.elements
    return start, start + ((m.height - 1) * m.stride + m.width) * 4


def overlaps(a: Matrix, b: Matrix) -> bool:
    (a0, a1), (b0, b1) = address_range(a), address_range(b)
    return a0 < b1 and b0 < a1
