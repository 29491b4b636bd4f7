"""Matrix: the documents' struct {height, width, stride, elements}, row-major, on one GPU.

Element (r, c) lives at elements + (r * stride + c) * itemsize. A slice is a view: it shares the
owner's device memory and keeps its stride, so kernels that take a leading dimension use it without
a copy. A Matrix lives on one device (`.device`); its memory was allocated on one stream, and using it
on another stream orders that stream after the allocation (see gpumat.memory.buffers).
"""

from __future__ import annotations

import numpy as np

from . import _dtypes, memory
from ._dtypes import FLOAT32
from .runtime import memops
from .runtime.devices import Device, as_device
from .runtime.streams import LEGACY_STREAM, mark_after, stream_handle, trusted

INT32_MAX = 2**31 - 1


class FreedMatrixError(ValueError):
    """The matrix (or the matrix a view was taken from) has been freed."""


class Matrix:
    """A float32, float64, float16 or bfloat16 matrix in GPU memory. Make one with from_numpy, empty, zeros
    or from_dlpack; release it with free()."""

    __slots__ = ("_buffer", "_offset", "_height", "_width", "_stride", "_owner", "_dtype", "_sfx", "__weakref__")

    def __init__(self, *args, **kwargs):
        raise TypeError(
            "make a Matrix with Matrix.from_numpy(a), Matrix.empty(h, w), Matrix.zeros(h, w) or gpumat.from_dlpack(x)"
        )

    @classmethod
    def _wrap(
        cls, buffer, offset: int, height: int, width: int, stride: int, owner: bool = False, dtype=FLOAT32
    ) -> Matrix:
        m = object.__new__(cls)
        m._buffer, m._offset, m._height, m._width, m._stride = buffer, offset, height, width, stride
        m._owner, m._dtype, m._sfx = owner, dtype, _dtypes.suffix(dtype)
        return m

    # construction -------------------------------------------------------------------------
    @classmethod
    def empty(cls, height: int, width: int, dtype=None, device=None, stream=None) -> Matrix:
        """Uninitialised (height, width) matrix of `dtype` (float32 by default) on `device` (the current one)."""
        height, width = _check_dims(height, width)
        dtype = FLOAT32 if dtype is None else _dtypes.as_dtype(dtype)
        dev = as_device(device)
        memory.check_size(height * width * dtype.itemsize, dev, f"a {height}x{width} {dtype} matrix")
        return cls._allocate(height, width, dev, stream_handle(stream, dev), dtype)

    @classmethod
    def _allocate(
        cls, height: int, width: int, dev: Device | None = None, stream: int = LEGACY_STREAM, dtype=FLOAT32
    ) -> Matrix:
        """empty() for arguments already known to be valid (the operations' result path)."""
        m = object.__new__(cls)
        m._buffer = memory.DeviceBuffer(height * width * dtype.itemsize, stream, dev)
        m._offset, m._height, m._width, m._stride, m._owner, m._dtype = 0, height, width, width or 1, True, dtype
        m._sfx = _SUFFIX.get(dtype) or _dtypes.suffix(dtype)  # the kernel-name suffix, compared on hot paths
        return m

    @classmethod
    def zeros(cls, height: int, width: int, dtype=None, device=None, stream=None) -> Matrix:
        m = cls.empty(height, width, dtype, device, stream)
        buf = m._buffer
        s = stream_handle(stream, buf.device)  # the stream the block was allocated on: the fill is ordered there
        memops.zero_2d(buf.ptr, m._stride * m._dtype.itemsize, width * m._dtype.itemsize, height, s)
        if not trusted(s):
            with buf.device.lock:
                done_on(s, m)
        return m

    @classmethod
    def from_numpy(cls, array, dtype=None, device=None, stream=None) -> Matrix:
        """Copy a 1-D (one row) or 2-D real array-like to the GPU as a C-order matrix.

        dtype=None keeps float32, float64, float16 and bfloat16 (ml_dtypes) as they are; integer arrays
        become float64 when every value is exact there (else TypeError: pass dtype=); dtype= converts
        (on the host, rounding to nearest). Large pageable arrays are staged through pinned buffers; a
        pinned array (see pinned_empty) is copied by one DMA. Returns once the data is on the GPU."""
        host, dt = as_host_2d(array, dtype)
        dev = as_device(device)
        s = stream_handle(stream, dev)
        if not host.size:
            return cls.empty(*host.shape, dtype=dt, device=dev)
        m = cls._allocate(*host.shape, dev, s, dt)
        m._buffer.use_on(s)
        memory.upload(m._buffer.ptr, m._stride * host.itemsize, host, s, dev)  # returns once uploaded
        if not trusted(s):  # another library's stream: its mark says the upload is done there
            with dev.lock:
                done_on(s, m)
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
        return buf.ptr + self._offset * self._dtype.itemsize if buf.ptr else 0

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def device(self) -> Device:
        """The GPU the matrix lives on."""
        buf = self._buffer
        if buf is None:
            raise FreedMatrixError(f"{self._describe()} has been freed")
        return buf.device

    @property
    def shape(self) -> tuple[int, int]:
        return self._height, self._width

    @property
    def size(self) -> int:
        return self._height * self._width

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    @property
    def is_view(self) -> bool:
        return not self._owner

    @property
    def is_borrowed(self) -> bool:
        """Whether the memory belongs to another library (imported without a copy)."""
        return bool(self._buffer is not None and self._buffer.borrowed)

    @property
    def is_freed(self) -> bool:
        return self._buffer is None or not self._buffer.alive

    @property
    def is_contiguous(self) -> bool:
        return self._height <= 1 or self._stride == self._width

    @property
    def T(self) -> Matrix:
        return _operations().transpose(self)

    # host <-> device -----------------------------------------------------------------------
    def to_numpy(self, out: np.ndarray | None = None, stream=None, dtype=None) -> np.ndarray:
        """A numpy copy (height, width) in the matrix's dtype, or in `dtype` (converted on the GPU first);
        into `out` (C-contiguous, right shape and dtype, pinned or not) when given. Returns once the data
        has arrived. bfloat16 needs ml_dtypes on the host, or dtype=np.float32."""
        if dtype is not None and _dtypes.as_dtype(dtype) != self._dtype:
            with self.astype(dtype, stream=stream) as converted:
                return converted.to_numpy(out, stream)
        if _dtypes.is_bfloat16(self._dtype) and _dtypes.ML_BFLOAT16 is None:
            raise TypeError(
                "a bfloat16 matrix comes to numpy as ml_dtypes.bfloat16: pip install ml_dtypes, "
                "or ask for another dtype with to_numpy(dtype=np.float32)"
            )
        dev = self.device.activate()
        s = stream_handle(stream, dev)
        if out is None:
            host = np.empty(self.shape, dtype=self._dtype)
        else:
            host = _check_host_out(out, self.shape, self._dtype)
        buf = self._buffer
        with dev.lock:
            src = self.elements  # a freed matrix (empty or not) reports that it was freed
            if host.size == 0:
                return host
            buf.use_on(s)
            buf.hold()
        try:
            memory.download(host, src, self._stride * self._dtype.itemsize, s, dev)
            if not trusted(s):
                with dev.lock:
                    done_on(s, self)
        finally:
            buf.unhold()
        return host

    def __array__(self, dtype=None, copy=None):
        out = self.to_numpy()
        return out if dtype is None else out.astype(dtype, copy=False)

    def copy(self, stream=None) -> Matrix:
        """A new, packed matrix with the same contents on the same device."""
        return self.to(self.device, stream=stream)

    def astype(self, dtype, stream=None) -> Matrix:
        """A new matrix of `dtype` on the same device, converted there (round to nearest even; NaN and
        infinities kept; values beyond a half type's range become infinities). Same dtype: a copy."""
        return _operations().astype(self, dtype, stream=stream)

    def to(self, device, stream=None) -> Matrix:
        """A copy on another GPU (peer-to-peer where the GPUs allow, else through the driver's staging);
        on the same GPU, a packed copy. Ordered on `stream` of the destination (waits for it to finish
        when the source is on another device)."""
        return _operations().copy_matrix(self, as_device(device), stream)

    # interop -------------------------------------------------------------------------------
    @property
    def __cuda_array_interface__(self) -> dict:
        return _operations().cuda_array_interface(self)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return _operations().export_dlpack(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        return KDL_CUDA, self.device.ordinal

    @classmethod
    def from_cuda_array(cls, obj, copy: bool | None = None, stream=None) -> Matrix:
        """A Matrix over another library's device array (anything with __cuda_array_interface__), without
        a copy when its rows are contiguous; see gpumat.from_dlpack."""
        return _operations().from_cuda_array(obj, copy=copy, stream=stream)

    # views ---------------------------------------------------------------------------------
    def __getitem__(self, key) -> Matrix:
        if not isinstance(key, tuple):
            key = (key, slice(None))
        if len(key) != 2 or not all(isinstance(k, slice) for k in key):
            raise TypeError("index a Matrix with two slices, A[r0:r1, c0:c1]; element access goes through to_numpy()")
        _ = self.elements  # views of freed memory are refused up front
        (r0, r1, rs), (c0, c1, cs) = key[0].indices(self._height), key[1].indices(self._width)
        if rs != 1 or cs != 1:
            raise ValueError("Matrix views take contiguous slices only (step 1)")
        rows, cols = max(r1 - r0, 0), max(c1 - c0, 0)
        offset = self._offset + (r0 * self._stride + c0 if rows and cols else 0)
        return Matrix._wrap(self._buffer, offset, rows, cols, self._stride, dtype=self._dtype)

    # lifetime ------------------------------------------------------------------------------
    def free(self) -> None:
        """Release the device memory now (stream-ordered: work already queued that reads it finishes
        first). Views of it become unusable; freeing a view detaches only the view. An operation that
        already checked the matrix completes; one that starts afterwards raises FreedMatrixError."""
        buf = self._buffer
        if buf is None:
            return
        with buf.device.lock:  # an operation between its checks and its enqueue still sees the buffer
            self._buffer = None
        if self._owner:
            buf.release()

    def __enter__(self) -> Matrix:
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    # arithmetic ----------------------------------------------------------------------------
    # numpy's operators defer to the Matrix's own instead of converting it to a host array and computing on
    # the CPU behind the caller's back (CuPy's rule: no implicit host/device mixing)
    __array_ufunc__ = None

    def __matmul__(self, other):
        if isinstance(other, Matrix):
            return _operations().matmul(self, other)
        if isinstance(other, np.ndarray):
            raise TypeError(_HOST_OPERAND)
        return NotImplemented

    def __rmatmul__(self, other):
        if isinstance(other, np.ndarray):
            raise TypeError(_HOST_OPERAND)
        return NotImplemented

    def __repr__(self) -> str:
        dt = _dtypes.name(self._dtype)
        if self.is_freed:
            return f"<gpumat.Matrix {self._height}x{self._width} {dt}, freed>"
        view = f", view stride={self._stride}" if self.is_view else ""
        return (
            f"<gpumat.Matrix {self._height}x{self._width} {dt}{view} on GPU {self.device.ordinal} "
            f"at 0x{self.elements:x}>"
        )

    def _describe(self) -> str:
        return f"Matrix {self._height}x{self._width}"


_SUFFIX = {_dtypes.FLOAT32: "f32", _dtypes.FLOAT64: "f64", _dtypes.FLOAT16: "f16"}
KDL_CUDA = 2  # DLPack's device type of GPU memory
_HOST_OPERAND = (
    "matmul of a gpumat.Matrix and a numpy array: gpumat does not move data between host and GPU behind your "
    "back; upload the array with gm.Matrix.from_numpy(x), or bring the Matrix back with .to_numpy()"
)
_DeviceBuffer = memory.DeviceBuffer
_ops = None


def _operations():
    """The operations Matrix methods hand their work to (matmul, transpose, astype, copies, DLPack and the
    CUDA array interface). Those modules are built on this one, so they are imported on first use: the
    one declared late import of this module (tests/test_import_graph.py lists it)."""
    global _ops
    if _ops is None:
        from . import _operations as ops

        _ops = ops
    return _ops


def _check_dims(height, width) -> tuple[int, int]:
    for name, v in (("height", height), ("width", width)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    return int(height), int(width)


def _check_host_out(out, shape, dtype) -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, got {type(out).__name__}")
    if out.shape != shape or out.dtype != dtype or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(
            f"out must be a writeable C-contiguous {dtype} array of shape {shape}, got "
            f"{out.dtype} {out.shape}{'' if out.flags.c_contiguous else ', not C-contiguous'}"
        )
    return out


def as_host_2d(array, dtype=None) -> tuple[np.ndarray, np.dtype]:
    """Host side of from_numpy: (a C-contiguous 2-D array in the storage dtype, the Matrix dtype), or
    TypeError/ValueError. The dtype rule is _dtypes.host_dtype_for's."""
    a = np.asarray(array)
    if dtype is None and a.dtype.kind not in "fiuV" and not _dtypes.is_bfloat16(a.dtype):
        what = f"a {type(array).__name__}" if a.dtype.kind == "O" and a.ndim == 0 else f"dtype {a.dtype}"
        raise TypeError(
            f"gpumat matrices hold real numbers; got {what} (convert bool/complex/object data explicitly first)"
        )
    if a.ndim == 1:
        a = a.reshape(1, -1)
    elif a.ndim != 2:
        raise ValueError(f"expected a 1-D or 2-D array, got {a.ndim}-D with shape {a.shape}")
    dt = _dtypes.host_dtype_for(a, dtype)
    return _dtypes.to_host_array(a, dt), dt


def as_float32_2d(array) -> np.ndarray:
    """A C-contiguous float32 2-D copy of a real array-like (what from_numpy(a, dtype=np.float32) uploads)."""
    return as_host_2d(array, FLOAT32)[0]


def same_dtype(op: str, *named) -> np.dtype:
    """The one dtype of an operation's operands; TypeError naming both when they differ (no promotion)."""
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
    return dt


def as_matrix(x, name: str) -> Matrix:
    if not isinstance(x, Matrix):
        raise TypeError(f"{name} must be a gpumat.Matrix, got {type(x).__name__} (use Matrix.from_numpy)")
    _ = x.elements  # raises FreedMatrixError for freed matrices
    return x


def operand_device(*named) -> Device:
    """The one device all the given matrices live on; (matrix, name) pairs, None entries skipped.
    TypeError for non-matrices, FreedMatrixError for freed ones, ValueError naming the devices when
    they differ."""
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
    return dev.activate()


def check_out(out, shape: tuple[int, int], inputs, op: str) -> None:
    """An optional `out`: a live Matrix of the result's shape sharing no memory with the inputs."""
    if out is None:
        return
    as_matrix(out, "out")
    if out.shape != shape:
        raise ValueError(f"{op}: out has shape {out.shape}, the result needs {shape}")
    out_block = out._buffer
    for x in inputs:
        block = x._buffer
        # two different blocks of gpumat's pool never share a byte; views of one block, and other
        # libraries' memory, are compared by address
        if (
            block is out_block or type(block) is not _DeviceBuffer or type(out_block) is not _DeviceBuffer
        ) and overlaps(out, x):
            raise ValueError(f"{op}: out overlaps an input; the kernels read the inputs while they write out")


def address_range(m: Matrix) -> tuple[int, int]:
    """[first byte, last byte + 1) that the matrix's elements span in device memory."""
    h, w = m._height, m._width
    if h == 0 or w == 0:
        return 0, 0
    start = m.elements
    return start, start + ((h - 1) * m._stride + w) * m._dtype.itemsize


def overlaps(a: Matrix, b: Matrix) -> bool:
    (a0, a1), (b0, b1) = address_range(a), address_range(b)
    return a0 < b1 and b0 < a1


def use_on(stream: int, *matrices) -> None:
    """Before queueing work on `stream`: order it after the allocation of each matrix's memory (device
    lock held)."""
    for m in matrices:
        buf = m._buffer
        if buf.stream != stream:
            buf.use_on(stream)


def done_on(stream: int, *matrices) -> None:
    """After queueing work on `stream`: when it is another library's stream, its mark is recorded once
    (runtime.streams.StreamMark) and each matrix's eventual free waits for it (the stream itself may be
    gone by then)."""
    if trusted(stream):
        return
    mark = mark_after(matrices[0]._buffer.device, stream)
    for m in matrices:
        m._buffer.used_on(stream, mark)
