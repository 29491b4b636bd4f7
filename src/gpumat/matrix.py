"""Matrix: the documents' struct {height, width, stride, elements}, row-major, on one GPU.

Element (r, c) lives at elements + (r * stride + c) * itemsize. A slice is a view: it shares the
owner's device memory and keeps its stride, so kernels that take a leading dimension use it without
a copy. A Matrix lives on one device (`.device`); its memory was allocated on one stream, and using it
on another stream orders that stream after the allocation (see gpumat.memory.buffers).

Two generalisations of the struct, both views of the same memory:
  * transposed (`A.T`, or an imported column-major array): element (r, c) lives at
    elements + (c * stride + r) * itemsize: the storage is a row-major width x height matrix of row
    stride `stride`, read as its transpose (BLAS's op(A) = A^T with leading dimension `stride`);
  * batched: shape (batch, height, width), matrix i starting `batch_stride` elements after matrix
    i - 1 (the 2-D struct is one matrix; A[i] is the i-th, a 2-D view).
"""

from __future__ import annotations

import numpy as np

from . import _dtypes, memory
from ._dtypes import FLOAT32
from .memory.ordering import done_on, finished_on, use_on
from .runtime import memops
from .runtime.devices import Device, as_device
from .runtime.streams import LEGACY_STREAM, foreign_of, stream_handle, trusted

INT32_MAX = 2**31 - 1


class FreedMatrixError(ValueError):
    """The matrix (or the matrix a view was taken from) has been freed.

    Raised by any operation given such a matrix; a ``ValueError``, so code that catches bad arguments
    catches it too.

    Examples
    --------
    >>> issubclass(gm.FreedMatrixError, ValueError)
    True
    """


class Matrix:
    """A float32, float64, float16, bfloat16, int8, int32 or FP8 (float8_e4m3fn, float8_e5m2) matrix (or a
    batch of matrices) in GPU memory.

    A Matrix mirrors the classic CUDA struct: ``height``, ``width``, ``stride`` (elements between the
    starts of rows) and ``elements`` (the device address), plus ``dtype`` and ``device``. Slices
    (``A[r0:r1, c0:c1]``, ``A[i]`` of a batch) are views that share memory and keep the stride;
    ``A.T`` is a transposed view. It owns its memory explicitly: ``free()``, or a ``with`` block; a
    finalizer is the safety net. Make one with :meth:`from_numpy`, :meth:`empty`, :meth:`zeros` or
    :func:`gpumat.from_dlpack`; calling ``Matrix(...)`` itself is a ``TypeError`` that names them.

    Attributes
    ----------
    T : Matrix
        The transpose as a view.

    See Also
    --------
    gpumat.matmul, gpumat.transpose, gpumat.from_dlpack

    Examples
    --------
    >>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> A = gm.Matrix.from_numpy(a)  # doctest: +GPU
    >>> A.shape, A.dtype
    ((2, 3), dtype('float32'))
    >>> (A @ A.T).to_numpy().tolist()
    [[5.0, 14.0], [14.0, 50.0]]
    >>> A.free()
    """

    __slots__ = (
        "_buffer",
        "_offset",
        "_height",
        "_width",
        "_stride",
        "_owner",
        "_dtype",
        "_sfx",
        "_batch",  # None: one 2-D matrix; else the number of matrices (shape (batch, height, width))
        "_bstride",  # elements from one matrix of a batch to the next
        "_trans",  # stored transposed (column-major): element (r, c) at (c * stride + r)
        "_view",  # what _operand() returns, once made (None after free())
        "__weakref__",
    )

    def __init__(self, *args, **kwargs):
        raise TypeError(
            "make a Matrix with Matrix.from_numpy(a), Matrix.empty(h, w), Matrix.zeros(h, w) or gpumat.from_dlpack(x)"
        )

    @classmethod
    def _wrap(
        cls,
        buffer,
        offset: int,
        height: int,
        width: int,
        stride: int,
        owner: bool = False,
        dtype=FLOAT32,
        trans: bool = False,
        batch: int | None = None,
        bstride: int = 0,
    ) -> Matrix:
        m = object.__new__(cls)
        m._buffer, m._offset, m._height, m._width, m._stride = buffer, offset, height, width, stride
        m._owner, m._dtype, m._sfx = owner, dtype, _dtypes.suffix(dtype)
        m._trans, m._batch, m._bstride, m._view = trans, batch, bstride, None
        return m

    # construction -------------------------------------------------------------------------
    @classmethod
    def empty(cls, height, width=None, dtype=None, device=None, stream=None) -> Matrix:
        """A new matrix of ``dtype``, its contents uninitialised.

        Parameters
        ----------
        height : int or tuple of int
            The number of rows; or the whole shape, ``(height, width)`` or ``(batch, height, width)``,
            with ``width`` left out.
        width : int, optional
            The number of columns (with an int ``height``).
        dtype : dtype, optional
            float32 (the default), float64, float16, bfloat16; or int8, int32, or ml_dtypes'
            float8_e4m3fn or float8_e5m2 (held and moved, and multiplied by matmul alone).
        device : Device or int, optional
            The GPU; the thread's current device by default.
        stream : Stream or stream-like, optional
            The stream the allocation is ordered on; the thread's current stream by default.

        Returns
        -------
        Matrix
            A packed, row-major matrix.

        Raises
        ------
        TypeError
            A dtype gpumat does not hold, or a shape that is not integers.
        ValueError
            A negative dimension.
        OutOfMemoryError
            The GPU (or gpumat's memory limit) has no room.
        NoDeviceError
            No usable GPU.

        Examples
        --------
        >>> X = gm.Matrix.empty((8, 128, 64), dtype=np.float16)  # doctest: +GPU
        >>> X.shape, X.batch, X.dtype
        ((8, 128, 64), 8, dtype('float16'))
        """
        batch, height, width = _check_shape(height, width)
        dtype = FLOAT32 if dtype is None else _dtypes.as_storage_dtype(dtype)
        dev = as_device(device)
        count = (1 if batch is None else batch) * height * width
        what = "x".join(str(d) for d in _shape_of(batch, height, width))
        memory.check_size(count * dtype.itemsize, dev, f"a {what} {dtype} matrix")
        s = stream_handle(stream, dev)
        m = cls._allocate(height, width, dev, s, dtype, batch)
        if not trusted(s) and m._buffer.ptr:  # another library's stream: mark it after the allocation, or
            with dev.lock:  # the free, not knowing whether the stream still exists, waits for the device
                done_on(s, m._buffer)
        return m

    @classmethod
    def _allocate(
        cls,
        height: int,
        width: int,
        dev: Device | None = None,
        stream: int = LEGACY_STREAM,
        dtype=FLOAT32,
        batch: int | None = None,
        trans: bool = False,
    ) -> Matrix:
        """empty() for arguments already known to be valid (the operations' result path): packed, row-major,
        or stored transposed when `trans` (a width x height storage)."""
        m = object.__new__(cls)
        count = 1 if batch is None else batch
        m._buffer = _DeviceBuffer(count * height * width * dtype.itemsize, stream, dev)
        m._offset, m._height, m._width, m._owner, m._dtype = 0, height, width, True, dtype
        m._stride = (height if trans else width) or 1
        m._sfx = _SUFFIX.get(dtype) or _dtypes.suffix(dtype)  # the kernel-name suffix, compared on hot paths
        m._trans, m._batch, m._bstride = trans, batch, height * width
        buf = m._buffer  # a new result's storage view, ready for the operation that made it
        m._view = (buf.ptr, m._stride, 0 if batch is None else m._bstride, trans, batch, height, width, m._sfx, buf)
        return m

    @classmethod
    def _allocate_like(cls, m: Matrix, dev: Device, stream: int, dtype=None) -> Matrix:
        """A packed matrix of m's shape and layout (transposed or not), of `dtype` (m's by default)."""
        return cls._allocate(m._height, m._width, dev, stream, dtype or m._dtype, m._batch, m._trans)

    @classmethod
    def zeros(cls, height, width=None, dtype=None, device=None, stream=None) -> Matrix:
        """A new matrix of ``dtype`` filled with zeros: :meth:`empty`, then a fill on the device.

        Parameters
        ----------
        height : int or tuple of int
            The number of rows, or the whole shape (see :meth:`empty`).
        width : int, optional
            The number of columns (with an int ``height``).
        dtype : dtype, optional
            float32 (the default), float64, float16, bfloat16; or int8, int32, or ml_dtypes'
            float8_e4m3fn or float8_e5m2 (held and moved, and multiplied by matmul alone).
        device : Device or int, optional
            The GPU; the thread's current device by default.
        stream : Stream or stream-like, optional
            The stream the fill is queued on; the thread's current stream by default.

        Returns
        -------
        Matrix
            A packed, row-major matrix of zeros.

        Raises
        ------
        TypeError
            A dtype gpumat does not hold, or a shape that is not integers.
        ValueError
            A negative dimension.
        OutOfMemoryError
            The GPU (or gpumat's memory limit) has no room.
        NoDeviceError
            No usable GPU.

        Examples
        --------
        >>> Z = gm.Matrix.zeros(2, 3)  # doctest: +GPU
        >>> Z.to_numpy().tolist()
        [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
        """
        m = cls.empty(height, width, dtype, device, stream)
        buf = m._buffer
        s = stream_handle(stream, buf.device)  # the stream the block was allocated on: the fill is ordered there
        rows = m._height * (1 if m._batch is None else m._batch)
        memops.zero_2d(buf.ptr, m._stride * m._dtype.itemsize, m._width * m._dtype.itemsize, rows, s)
        if not trusted(s):
            with buf.device.lock:
                done_on(s, buf)
        return m

    @classmethod
    def from_numpy(cls, array, dtype=None, device=None, stream=None) -> Matrix:
        """Copy a 1-D (one row), 2-D or 3-D (a batch of matrices) real array-like to the GPU.

        ``dtype=None`` keeps float32, float64, float16 and bfloat16 (ml_dtypes) as they are; integer
        arrays become float64 when every value is exact there (else a ``TypeError`` asks for ``dtype=``);
        ``dtype=`` converts (on the host, rounding to nearest). ``dtype=np.int8`` or ``np.int32`` takes
        integer arrays whose values fit (a ``ValueError`` otherwise; float arrays are a ``TypeError``:
        rounding and clipping to integers is the caller's choice). An FP8 ``dtype=`` (ml_dtypes'
        float8_e4m3fn, float8_e5m2) keeps FP8 arrays and rounds others once to nearest even, saturated to the
        format's finite range. Large pageable arrays are staged through
        pinned buffers on several threads; a pinned array (see :func:`gpumat.pinned_empty`) is copied by
        one DMA.

        Parameters
        ----------
        array : array_like
            The data: a numpy array or anything ``numpy.asarray`` takes. Bool, complex and object arrays
            are refused.
        dtype : dtype, optional
            The matrix's dtype; by default the array's (see above).
        device : Device or int, optional
            The GPU; the thread's current device by default.
        stream : Stream or stream-like, optional
            The stream the copy is ordered on; the thread's current stream by default.

        Returns
        -------
        Matrix
            A packed, C-order matrix holding a copy of the data, there when the call returns.

        Raises
        ------
        TypeError
            A dtype gpumat does not hold (bool, complex, object), an integer array not exact in float64,
            or a Matrix (it is already on the GPU).
        ValueError
            An array of more than three dimensions.
        OutOfMemoryError
            The GPU (or gpumat's memory limit) has no room.
        NoDeviceError
            No usable GPU.

        Examples
        --------
        >>> A = gm.Matrix.from_numpy(np.ones((2, 2)))  # doctest: +GPU
        >>> A.dtype
        dtype('float64')
        >>> gm.Matrix.from_numpy(np.arange(4).reshape(2, 2), dtype=np.float32).dtype
        dtype('float32')
        """
        host, dt = as_host_2d(array, dtype, allow_batch=True, tile_ok=True, storage=True)
        dev = as_device(device)
        s = stream_handle(stream, dev)
        if not host.size:
            return cls.empty(host.shape, dtype=dt, device=dev)
        batch = host.shape[0] if host.ndim == 3 else None
        m = cls._allocate(host.shape[-2], host.shape[-1], dev, s, dt, batch)
        rows = host.reshape(-1, host.shape[-1])  # a packed batch is one tall matrix
        memory.upload(m._buffer.ptr, m._stride * host.itemsize, rows, s, dev)  # returns once uploaded
        if not trusted(s):  # another library's stream: the upload has run there, no mark to record
            with dev.lock:
                finished_on(foreign_of(s, dev), m._buffer)
        return m

    # the struct's fields ---------------------------------------------------------------------
    @property
    def height(self) -> int:
        """The number of rows of each matrix."""
        return self._height

    @property
    def width(self) -> int:
        """The number of columns of each matrix."""
        return self._width

    @property
    def stride(self) -> int:
        """Elements between the starts of consecutive rows (>= width; larger for column slices)."""
        return self._stride

    @property
    def elements(self) -> int:
        """The device address of element (0, 0), as an int."""
        buf = self._buffer
        if buf is None or not buf.alive:
            raise FreedMatrixError(f"{self._describe()} has been freed")
        return buf.ptr + self._offset * self._dtype.itemsize if buf.ptr else 0

    @property
    def dtype(self) -> np.dtype:
        """The element type, a numpy dtype (bfloat16: ``ml_dtypes.bfloat16``, or a tagged uint16 without it)."""
        return self._dtype

    def _operand(self) -> tuple:
        """What gpumat's operations read of a matrix, in one call (no property reads on their hot paths):
        (address of element (0, 0), row stride of the storage, batch stride (0 for one 2-D matrix), stored
        transposed, batch (None for one 2-D matrix), height, width, dtype suffix, buffer), strides in
        elements. The first three are the (address, row stride, batch stride) the kernels take. Of a freed
        matrix the buffer is None (or no longer alive): the callers check that under the device lock.
        Made once a matrix (its fields never change, a buffer's address never moves while it lives)."""
        view = self._view
        if view is not None:
            return view
        buf, batch = self._buffer, self._batch
        if buf is None:
            return 0, self._stride, 0, self._trans, batch, self._height, self._width, self._sfx, None
        self._view = view = (
            buf.ptr + self._offset * self._dtype.itemsize,
            self._stride,
            0 if batch is None else self._bstride,
            self._trans,
            batch,
            self._height,
            self._width,
            self._sfx,
            buf,
        )
        return view

    @property
    def itemsize(self) -> int:
        """Bytes an element: 4, 8 or 2."""
        return self._dtype.itemsize

    @property
    def device(self) -> Device:
        """The GPU the matrix lives on, a :class:`Device`."""
        buf = self._buffer
        if buf is None:
            raise FreedMatrixError(f"{self._describe()} has been freed")
        return buf.device

    @property
    def shape(self) -> tuple[int, ...]:
        """``(height, width)``, or ``(batch, height, width)`` for a batch."""
        if self._batch is None:
            return self._height, self._width
        return self._batch, self._height, self._width

    @property
    def ndim(self) -> int:
        """2, or 3 for a batch."""
        return 2 if self._batch is None else 3

    @property
    def batch(self) -> int:
        """The number of matrices: 1 for a 2-D matrix."""
        return 1 if self._batch is None else self._batch

    @property
    def batch_stride(self) -> int:
        """Elements from the start of one matrix of a batch to the next (0 for a 2-D matrix)."""
        return 0 if self._batch is None else self._bstride

    @property
    def is_transposed(self) -> bool:
        """Whether the matrix is stored transposed (column-major: element (r, c) at c * stride + r), as
        ``A.T`` of a row-major matrix or an imported column-major array is.
        """
        return self._trans

    @property
    def strides(self) -> tuple[int, ...]:
        """Bytes between consecutive elements along each dimension (numpy's convention)."""
        isz = self._dtype.itemsize
        two = (isz, self._stride * isz) if self._trans else (self._stride * isz, isz)
        return two if self._batch is None else (self._bstride * isz, *two)

    @property
    def size(self) -> int:
        """The number of elements (of every matrix of a batch)."""
        return self.batch * self._height * self._width

    @property
    def nbytes(self) -> int:
        """The bytes of the elements (``size * itemsize``; a view's padding not counted)."""
        return self.size * self._dtype.itemsize

    @property
    def is_view(self) -> bool:
        """Whether this Matrix is a view of another's memory (a slice, an index, ``.T``)."""
        return not self._owner

    @property
    def is_borrowed(self) -> bool:
        """Whether the memory belongs to another library (imported without a copy)."""
        return bool(self._buffer is not None and self._buffer.borrowed)

    @property
    def is_freed(self) -> bool:
        """Whether :meth:`free` was called on this matrix or the one it views."""
        return self._buffer is None or not self._buffer.alive

    @property
    def is_contiguous(self) -> bool:
        """C-contiguous: the elements one after another in C order (row by row, matrix by matrix)."""
        expected = self._dtype.itemsize
        for size, stride in reversed(tuple(zip(self.shape, self.strides, strict=True))):
            if size > 1 and stride != expected:
                return False
            expected *= size
        return True

    @property
    def T(self) -> Matrix:
        """The transpose as a view: the same memory read column-major, no copy and no kernel.

        Of a batch, each matrix is transposed. :func:`gpumat.transpose` makes a transposed copy.
        """
        _ = self.elements  # views of freed memory are refused up front
        return Matrix._wrap(
            self._buffer,
            self._offset,
            self._width,
            self._height,
            self._stride,
            dtype=self._dtype,
            trans=not self._trans,
            batch=self._batch,
            bstride=self._bstride,
        )

    # host <-> device -----------------------------------------------------------------------
    def to_numpy(self, out: np.ndarray | None = None, stream=None, dtype=None) -> np.ndarray:
        """Copy the matrix back to the host.

        Parameters
        ----------
        out : numpy.ndarray, optional
            An array of the matrix's shape and dtype (pinned or not) to fill instead of a new one:
            C-contiguous, or for a 2-D matrix that is not a transposed view, a tile of a bigger array
            whose rows are contiguous (``big[r0:r1, c0:c1]``), filled where it lies.
        stream : Stream or stream-like, optional
            The stream the copy is ordered on; the thread's current stream by default.
        dtype : dtype, optional
            Convert on the GPU to this dtype first (``np.float32`` brings bfloat16 back without ml_dtypes).

        Returns
        -------
        numpy.ndarray
            The data, in the matrix's shape and C order, there when the call returns (``out`` if given).

        Raises
        ------
        TypeError
            An ``out`` that is not a numpy array; bfloat16 without ml_dtypes and no ``dtype=``.
        ValueError
            An ``out`` of another shape or dtype, not writeable, or neither C-contiguous nor (where
            allowed) a tile with contiguous rows.
        FreedMatrixError
            The matrix has been freed.

        Examples
        --------
        >>> A = gm.Matrix.from_numpy(np.eye(2, dtype=np.float32))  # doctest: +GPU
        >>> A.to_numpy().tolist()
        [[1.0, 0.0], [0.0, 1.0]]
        >>> host = gm.pinned_empty((2, 2), np.float32)
        >>> A.to_numpy(out=host) is host
        True
        """
        if dtype is not None and _dtypes.as_storage_dtype(dtype) != self._dtype:
            if out is not None:  # checked before the conversion runs
                _check_host_out(out, self.shape, _dtypes.as_storage_dtype(dtype))
            with self.astype(dtype, stream=stream) as converted:
                return converted.to_numpy(out, stream)
        if _dtypes.is_bfloat16(self._dtype) and _dtypes.ML_BFLOAT16 is None:
            raise TypeError(
                "a bfloat16 matrix comes to numpy as ml_dtypes.bfloat16: pip install ml_dtypes, "
                "or ask for another dtype with to_numpy(dtype=np.float32)"
            )
        if self._buffer.__class__ is _NoMemory:  # a stand-in: empty, and no GPU to ask
            return np.empty(self.shape, self._dtype) if out is None else _check_host_out(out, self.shape, self._dtype)
        dev = self.device.activate()
        s = stream_handle(stream, dev)
        plain = self._batch is None and not self._trans  # the common call: one row-major matrix, one piece
        if out is None:
            host = np.empty(self.shape, dtype=self._dtype)
        else:
            host = _check_host_out(out, self.shape, self._dtype, tile_ok=plain)
        buf = self._buffer
        with dev.lock:
            first = self.elements  # a freed matrix (empty or not) reports that it was freed
            if host.size == 0:
                return host
            # addresses read under the lock: a free() from another thread during the copies below marks the
            # buffer dead at once (the hold keeps its memory until they end)
            pieces = () if plain else [(p.elements, p._height, p._width) for p in storage_pieces(self)]
            use_on(s, buf)
            buf.hold()
        try:
            pitch = self._stride * self._dtype.itemsize
            if plain:
                memory.download(host, first, pitch, s, dev)
            else:
                self._download_pieces(host, pieces, pitch, s, dev)
            if not trusted(s):  # another library's stream: the copies have run there, no mark to record
                with dev.lock:
                    finished_on(foreign_of(s, dev), buf)
        finally:
            buf.unhold()
        return host

    def _download_pieces(self, host: np.ndarray, pieces: list, pitch: int, s: int, dev) -> None:
        """to_numpy's copies of a batch or a transposed matrix: each storage piece's rows arrive into a host
        array of its shape; a transposed matrix is then transposed on the host (one more pass there, none
        on the GPU)."""
        targets = [host] if len(pieces) == 1 else list(host)
        for (src, height, width), target in zip(pieces, targets, strict=True):
            if self._trans:
                staged = np.empty((height, width), dtype=self._dtype)
                memory.download(staged, src, pitch, s, dev)
                if target.ndim == 3:
                    target[...] = staged.reshape(target.shape[0], target.shape[2], target.shape[1]).transpose(0, 2, 1)
                else:
                    target[...] = staged.T
            else:
                memory.download(target.reshape(-1, target.shape[-1]), src, pitch, s, dev)

    def __array__(self, dtype=None, copy=None):
        # numpy's implicit conversion (np.asarray(A), np.array(A), numpy functions given a Matrix) would copy
        # the whole matrix to the host behind the caller's back: refused, as CuPy and PyTorch refuse it
        raise TypeError(
            "gpumat does not copy a Matrix to the host implicitly (np.asarray, np.array, numpy functions): "
            "call .to_numpy() for a numpy copy"
        )

    def copy(self, stream=None) -> Matrix:
        """A new, packed matrix with the same contents, shape and layout, on the same device.

        A transposed view's copy is stored transposed too; ``gm.transpose(A.T)`` gives a row-major one.

        Parameters
        ----------
        stream : Stream or stream-like, optional
            The stream the copy is queued on; the thread's current stream by default.

        Returns
        -------
        Matrix
            The copy.

        Raises
        ------
        FreedMatrixError
            The matrix has been freed.
        OutOfMemoryError
            The GPU (or gpumat's memory limit) has no room.

        Examples
        --------
        >>> A = gm.Matrix.from_numpy(np.ones((4, 4), np.float32))  # doctest: +GPU
        >>> B = A[1:3, 1:3].copy()
        >>> B.is_view, B.stride
        (False, 2)
        """
        return self.to(self.device, stream=stream)

    def astype(self, dtype, stream=None) -> Matrix:
        """A new matrix of ``dtype`` on the same device, converted there.

        Rounds to nearest even; NaN and infinities are kept; values beyond a half type's range become
        infinities; int8 and int32 convert exactly where the target holds the value (int32 to float32 and
        the half types rounds); into FP8 saturated to its finite range, out of FP8 exactly, and one FP8
        format into the other through float32 (rounded once). The same dtype gives a copy.

        Parameters
        ----------
        dtype : dtype
            float32, float64, float16 or bfloat16 (from any dtype), int32 (from int8), or float8_e4m3fn or
            float8_e5m2 (from the floats and from each other): nothing converts into the integers from floats.
        stream : Stream or stream-like, optional
            The stream the conversion is queued on; the thread's current stream by default.

        Returns
        -------
        Matrix
            The converted matrix, in the same layout.

        Raises
        ------
        TypeError
            A dtype gpumat does not hold, or a conversion from floats into the integers.
        FreedMatrixError
            The matrix has been freed.

        Examples
        --------
        >>> A = gm.Matrix.from_numpy(np.array([[1.0, 2.5]]))  # doctest: +GPU
        >>> A.astype(np.float16).to_numpy().tolist()
        [[1.0, 2.5]]
        """
        return _operations().astype(self, dtype, stream=stream)

    def to(self, device, stream=None) -> Matrix:
        """A copy on another GPU.

        Peer to peer where the GPUs allow, else through the driver's staging; on the same GPU, a packed
        copy. When the source is on another device, the call waits for the copy to finish.

        Parameters
        ----------
        device : Device or int
            The destination GPU.
        stream : Stream or stream-like, optional
            A stream of the destination the copy is ordered on; its current stream by default.

        Returns
        -------
        Matrix
            The copy, on ``device``.

        Raises
        ------
        ValueError
            A stream of another device.
        FreedMatrixError
            The matrix has been freed.
        NoDeviceError
            No GPU of that index.

        Examples
        --------
        >>> A = gm.Matrix.from_numpy(np.ones((2, 2)))  # doctest: +GPU
        >>> A.to(0).device == gm.Device(0)
        True
        """
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
        """A Matrix over another library's device array through ``__cuda_array_interface__``.

        Without a copy when the rows (or, for a transposed view, the columns) are contiguous; the same
        rules as :func:`gpumat.from_dlpack`.

        Parameters
        ----------
        obj : object
            Anything with ``__cuda_array_interface__`` (CuPy, Numba, PyTorch).
        copy : bool, optional
            True: always copy. None or False: never copy (a layout gpumat cannot view is a ``ValueError``).
        stream : Stream or stream-like, optional
            The stream gpumat's use of the memory is ordered on.

        Returns
        -------
        Matrix
            A view of the memory (``is_borrowed``), or a copy.

        Raises
        ------
        TypeError
            No interface, a malformed field, or a dtype gpumat does not hold.
        ValueError
            A layout gpumat cannot view without ``copy=True`` (negative strides among them), or an
            interface that describes no memory.

        Examples
        --------
        >>> A = gm.Matrix.from_numpy(np.ones((2, 3), np.float32))  # doctest: +GPU
        >>> B = gm.Matrix.from_cuda_array(A)
        >>> B.elements == A.elements
        True
        """
        return _operations().from_cuda_array(obj, copy=copy, stream=stream)

    # views ---------------------------------------------------------------------------------
    def __getitem__(self, key) -> Matrix:
        """Views: A[r0:r1, c0:c1] of a matrix; of a batch, A[i] (the i-th matrix), A[i:j] (a batch), and
        A[i or i:j, r0:r1, c0:c1]. Slices take step 1."""
        _ = self.elements  # views of freed memory are refused up front
        if self._batch is not None:
            return self._batch_item(key if isinstance(key, tuple) else (key,))
        if not isinstance(key, tuple):
            key = (key, slice(None))
        if len(key) != 2 or not all(isinstance(k, slice) for k in key):
            raise TypeError("index a Matrix with two slices, A[r0:r1, c0:c1]; element access goes through to_numpy()")
        (r0, r1, rs), (c0, c1, cs) = key[0].indices(self._height), key[1].indices(self._width)
        if rs != 1 or cs != 1:
            raise ValueError("Matrix views take contiguous slices only (step 1)")
        rows, cols = max(r1 - r0, 0), max(c1 - c0, 0)
        start = (c0 * self._stride + r0) if self._trans else (r0 * self._stride + c0)
        offset = self._offset + (start if rows and cols else 0)
        return Matrix._wrap(self._buffer, offset, rows, cols, self._stride, dtype=self._dtype, trans=self._trans)

    def _batch_item(self, key: tuple) -> Matrix:
        first, rest = key[0], key[1:]
        if len(rest) not in (0, 2):
            raise TypeError("index a batch with A[i], A[i:j], or A[i or i:j, r0:r1, c0:c1]")
        if isinstance(first, (int, np.integer)) and not isinstance(first, (bool, np.bool_)):
            i = int(first) + (self._batch if first < 0 else 0)
            if not 0 <= i < self._batch:
                raise IndexError(f"index {int(first)} is out of range for a batch of {self._batch}")
            one = self._same_layout(self._offset + i * self._bstride)
            return one[rest] if rest else one
        if not isinstance(first, slice):
            raise TypeError(f"index a batch with an integer or a slice, got {type(first).__name__}")
        b0, b1, step = first.indices(self._batch)
        if step != 1:
            raise ValueError("Matrix views take contiguous slices only (step 1)")
        count = max(b1 - b0, 0)
        first_matrix = self._same_layout(self._offset + (b0 * self._bstride if count else 0))
        part = first_matrix[rest] if rest else first_matrix  # the region of each matrix
        return part._same_layout(part._offset, count, self._bstride)

    def _same_layout(self, offset: int, batch: int | None = None, bstride: int = 0) -> Matrix:
        """A view of this one's shape, stride and layout at `offset`: one matrix, or a batch."""
        return Matrix._wrap(
            self._buffer,
            offset,
            self._height,
            self._width,
            self._stride,
            dtype=self._dtype,
            trans=self._trans,
            batch=batch,
            bstride=bstride,
        )

    # lifetime ------------------------------------------------------------------------------
    def free(self) -> None:
        """Release the device memory now.

        Stream-ordered: work already queued that reads the memory finishes first. Views of the matrix
        become unusable; freeing a view detaches only the view. An operation that already checked the
        matrix completes; one that starts afterwards raises ``FreedMatrixError``. Freeing twice does nothing.

        Raises
        ------
        CudaError
            The driver failed to queue the release.

        Examples
        --------
        >>> A = gm.Matrix.zeros(2, 2)  # doctest: +GPU
        >>> A.free()
        >>> A.is_freed
        True
        """
        buf = self._buffer
        if buf is None:
            return
        if buf.__class__ is _NoMemory:  # a stand-in: nothing to release
            self._buffer = self._view = None
            return
        with buf.device.lock:  # an operation between its checks and its enqueue still sees the buffer
            self._buffer = self._view = None
        if self._owner:
            buf.release()

    def __reduce__(self):
        """Pickling goes through the host: the values (to_numpy) are pickled, and unpickling uploads them to
        the current GPU as a packed row-major matrix (what moves a Matrix between processes). A stand-in
        (Matrix._stand_in) pickles as one, with no GPU at either end."""
        if self._buffer.__class__ is _NoMemory:
            return Matrix._stand_in, (_dtypes.name(self._dtype), self.ndim)
        return _from_host, (self.to_numpy(),)

    @staticmethod
    def _stand_in(dtype, ndim: int = 2) -> Matrix:
        """An empty Matrix of `dtype` that owns no memory and needs no GPU: a stand-in for the type, shape
        rank and dtype of matrices to come (what Dask keeps as a collection's `_meta`)."""
        return Matrix._wrap(
            _NoMemory(), 0, 0, 0, 1, dtype=_dtypes.as_storage_dtype(dtype), batch=None if ndim == 2 else 0
        )

    def __enter__(self) -> Matrix:
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    # arithmetic ----------------------------------------------------------------------------
    # numpy's operators defer to the Matrix's own instead of converting it to a host array and computing on
    # the CPU behind the caller's back (CuPy's rule: no implicit host/device mixing)
    __array_ufunc__ = None

    def __matmul__(self, other):
        """``A @ B``: :func:`gpumat.matmul` with its defaults.

        Parameters
        ----------
        other : Matrix
            The right operand.

        Returns
        -------
        Matrix
            The product.

        Raises
        ------
        TypeError
            ``other`` is a numpy array: gpumat never moves data to or from the host behind your back.

        Examples
        --------
        >>> A = gm.Matrix.from_numpy(np.eye(2, dtype=np.float32))  # doctest: +GPU
        >>> (A @ A).shape
        (2, 2)
        """
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
        shape = "x".join(str(d) for d in self.shape)
        buf = self._buffer  # read once: another thread may free the matrix meanwhile
        if buf is None or not buf.alive:
            return f"<gpumat.Matrix {shape} {dt}, freed>"
        if buf.__class__ is _NoMemory:
            return f"<gpumat.Matrix {shape} {dt}, a stand-in with no memory>"
        view = f", view stride={self._stride}" if self.is_view else ""
        layout = ", transposed" if self._trans else ""
        address = buf.ptr + self._offset * self._dtype.itemsize if buf.ptr else 0
        return f"<gpumat.Matrix {shape} {dt}{view}{layout} on GPU {buf.device.ordinal} at 0x{address:x}>"

    def _describe(self) -> str:
        return "Matrix " + "x".join(str(d) for d in self.shape)


_SUFFIX = _dtypes.SUFFIX_OF
KDL_CUDA = 2  # DLPack's device type of GPU memory
_HOST_OPERAND = (
    "matmul of a gpumat.Matrix and a numpy array: gpumat does not move data between host and GPU behind your "
    "back; upload the array with gm.Matrix.from_numpy(x), or bring the Matrix back with .to_numpy()"
)
_DeviceBuffer = memory.DeviceBuffer
_ops = None


class _NoMemory:
    """The buffer of a stand-in Matrix: no memory and no device."""

    __slots__ = ()
    ptr, nbytes, device, alive, borrowed, readonly = 0, 0, None, True, False, False


def _from_host(array: np.ndarray) -> Matrix:
    """Unpickle a Matrix (see Matrix.__reduce__): in its own dtype (an int8 or int32 one too)."""
    return Matrix.from_numpy(array, dtype=array.dtype if _dtypes.is_integer(array.dtype) else None)


def _operations():
    """The operations Matrix methods hand their work to (matmul, transpose, astype, copies, DLPack and the
    CUDA array interface). Those modules are built on this one, so they are imported on first use: the
    one declared late import of this module (tests/test_import_graph.py lists it)."""
    global _ops
    if _ops is None:
        from . import _operations as ops

        _ops = ops
    return _ops


def _check_shape(height, width) -> tuple[int | None, int, int]:
    """(batch or None, height, width) from empty()'s arguments: (height, width) or one shape tuple."""
    if width is None:
        if not isinstance(height, (tuple, list)) or len(height) not in (2, 3):
            raise TypeError(f"give a shape (height, width) or (batch, height, width), or two integers; got {height!r}")
        dims = tuple(height)
    else:
        dims = (height, width)
    names = ("height", "width") if len(dims) == 2 else ("batch", "height", "width")
    for name, v in zip(names, dims, strict=True):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{name} must be an integer, got {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name} must be >= 0, got {v}")
    dims = tuple(int(v) for v in dims)
    return (None, *dims) if len(dims) == 2 else dims


def _shape_of(batch, height: int, width: int) -> tuple[int, ...]:
    return (height, width) if batch is None else (batch, height, width)


def _is_row_tile(a: np.ndarray) -> bool:
    """A 2-D array whose rows are contiguous, increasing and apart (a tile of a bigger C-order array)."""
    return a.ndim == 2 and a.strides[1] == a.itemsize and a.strides[0] >= a.shape[1] * a.itemsize


def _check_host_out(out, shape, dtype, tile_ok: bool = False) -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, got {type(out).__name__}")
    layout_ok = out.flags.c_contiguous or (tile_ok and _is_row_tile(out))
    if out.shape != shape or out.dtype != dtype or not layout_ok or not out.flags.writeable:
        raise ValueError(
            f"out must be a writeable C-contiguous {dtype} array of shape {shape}, got "
            f"{out.dtype} {out.shape}{'' if out.flags.c_contiguous else ', not C-contiguous'}"
        )
    return out


def as_host_2d(
    array, dtype=None, allow_batch: bool = False, tile_ok: bool = False, storage: bool = False
) -> tuple[np.ndarray, np.dtype]:
    """Host side of from_numpy: (a C-contiguous 2-D array in the storage dtype, or 3-D where a batch is
    allowed; the Matrix dtype), or TypeError/ValueError. The dtype rule is _dtypes.host_dtype_for's.
    tile_ok: a 2-D tile of a bigger array (its rows contiguous, increasing, not overlapping) that needs
    no conversion comes back as it is, not copied: the upload moves its rows where they are (a Dask
    chunk of a 32768-wide array is such a tile, and a packed copy of it ran at a few GB/s). storage:
    dtype= may name int8, int32 or an FP8 type, and FP8 arrays are kept (from_numpy)."""
    a = np.asarray(array)
    if dtype is None and a.dtype.kind not in "fiuV" and not _dtypes.is_bfloat16(a.dtype):
        if a.dtype.kind in "OUSM" and a.ndim == 0:  # not numbers at all: a dict, a string, None, ...
            what = f"a {type(array).__name__}"
        elif a.dtype.kind == "b":
            what = "booleans (convert them explicitly, e.g. .astype(np.float32))"
        elif a.dtype.kind == "c":
            what = f"complex numbers (dtype {a.dtype}; take .real or abs() first)"
        else:
            what = f"an array of dtype {a.dtype}"
        raise TypeError(
            "a gpumat Matrix is made from real numbers: a 1-D, 2-D or 3-D numpy array (float32, float64, "
            f"float16, bfloat16 or integers) or nested lists of numbers; got {what}"
        )
    if a.dtype.kind == "c":  # a dtype= would drop the imaginary parts without a word
        raise TypeError(f"gpumat matrices hold real numbers; got dtype {a.dtype} (take .real or abs() first)")
    if a.ndim == 1:
        a = a.reshape(1, -1)
    elif a.ndim != 2 and not (allow_batch and a.ndim == 3):
        what = "1-D, 2-D or 3-D (a batch)" if allow_batch else "1-D or 2-D"
        raise ValueError(f"expected a {what} array, got {a.ndim}-D with shape {a.shape}")
    dt = _dtypes.host_dtype_for(a, dtype, storage)
    # (the bfloat16 stand-in, uint16 bits, has metadata: to_host_array re-views it)
    if tile_ok and a.ndim == 2 and a.dtype == dt and a.dtype.metadata is None and a.shape[0] > 1 and _is_row_tile(a):
        return a, dt
    return _dtypes.to_host_array(a, dt), dt


def as_float32_2d(array) -> np.ndarray:
    """A C-contiguous float32 2-D copy of a real array-like (what from_numpy(a, dtype=np.float32) uploads)."""
    return as_host_2d(array, FLOAT32)[0]


# --- the storage under a matrix: what kernels that take a row-major (rows, cols, stride) region see ----
def storage(m: Matrix) -> Matrix:
    """The row-major 2-D matrix over m's memory (one matrix, not a batch): m itself, or for a transposed
    matrix its width x height storage."""
    if not m._trans:
        return m
    return Matrix._wrap(m._buffer, m._offset, m._width, m._height, m._stride, dtype=m._dtype)


def matrices(m: Matrix) -> list[Matrix]:
    """The 2-D matrices of a batch (views), or [m] for a 2-D matrix."""
    if m._batch is None:
        return [m]
    return [m._same_layout(m._offset + i * m._bstride) for i in range(m._batch)]


def folded(m: Matrix) -> Matrix | None:
    """A batch whose matrices' storages sit one after another at the row stride, as one tall row-major
    storage matrix (batch x storage rows, storage columns); None when they do not."""
    rows, cols = (m._width, m._height) if m._trans else (m._height, m._width)
    count = 1 if m._batch is None else m._batch
    if count > 1 and m._bstride != rows * m._stride:
        return None
    return Matrix._wrap(m._buffer, m._offset, count * rows, cols, m._stride, dtype=m._dtype)


def storage_pieces(m: Matrix) -> list[Matrix]:
    """m's elements as row-major 2-D storage pieces: one when the batch folds, else one a matrix."""
    whole = folded(m)
    return [whole] if whole is not None else [storage(x) for x in matrices(m)]


def paired_pieces(src: Matrix, dst: Matrix) -> list[tuple[Matrix, Matrix]]:
    """Matching storage pieces of two matrices of one shape and layout (a copy's source and result)."""
    a, b = folded(src), folded(dst)
    if a is not None and b is not None:
        return [(a, b)]
    return [(storage(x), storage(y)) for x, y in zip(matrices(src), matrices(dst), strict=True)]


def plain_2d(m: Matrix, op: str, stream: int) -> Matrix:
    """For operations that take one row-major 2-D matrix: a batch is a ValueError; a transposed matrix is
    materialised row-major in one pass (gm.transpose of its storage) on the operation's `stream`, so it
    reads m after the work already queued there; the caller owns the copy."""
    if m._batch is not None:
        raise ValueError(f"{op} takes 2-D matrices, got a batch of shape {m.shape}; index it (A[i]) for one matrix")
    if not m._trans:
        return m
    return _operations().transpose(storage(m), stream=stream)
