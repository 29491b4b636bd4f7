"""CSRMatrix: a float32 or float64 sparse matrix in compressed sparse row form on one GPU.

This module owns the container: validated on the host (see _csr), then uploaded once: indptr as int64
(any nnz), indices as int32, data as float32 or float64, plus the long-row schedule that spmm's kernels
use; its copies back (to_host, to_scipy, to_dense with cuda/spmm.cu's csr_to_dense kernel); its lifetime.

`S @ B` multiplies it with a dense gpumat.Matrix through gpumat.spmm, the operation built on this
container: __matmul__ imports it on first use, this module's one declared late import
(tests/test_import_graph.py lists it).
"""

from __future__ import annotations

import numpy as np

from . import memory
from ._csr import (  # noqa: F401  (re-exported: the host-side CSR helpers belong to this public module's API)
    INT32_MAX,
    SPLIT_MAX,
    SPLIT_MIN,
    VALUE_DTYPES,
    CSRTypeError,
    HostCSR,
    RowStats,
    Schedule,
    dense_to_csr,
    long_row_schedule,
    row_stats,
    scipy_to_csr,
    split_length,
    validate_csr,
)
from ._dtypes import suffix
from .matrix import FreedMatrixError, Matrix
from .memory.ordering import mark_done, use_on
from .operands import as_matrix
from .runtime.devices import as_device
from .runtime.geometry import cdiv
from .runtime.kernels import Kernel
from .runtime.streams import stream_handle

BLOCK = 256  # threads per block in every kernel of cuda/spmm.cu
VALUE_SUFFIXES = tuple(suffix(dt) for dt in VALUE_DTYPES)  # the CSR kernels exist for these value dtypes
TO_DENSE_BY_DTYPE = {dt: Kernel("spmm", f"csr_to_dense_{dt}", "PPPPiq") for dt in VALUE_SUFFIXES}


def _to_device(a: np.ndarray, dev) -> memory.DeviceBuffer:
    a = np.ascontiguousarray(a)
    buf = memory.DeviceBuffer(a.nbytes, dev=dev)
    memory.upload_contiguous(buf.ptr, a)
    return buf


def _from_device(buf: memory.DeviceBuffer, dtype, count: int) -> np.ndarray:
    host = np.empty(count, dtype=dtype)
    buf.device.activate()
    memory.download_contiguous(host, buf.ptr)
    return host


class CSRMatrix:
    """A float32 or float64 CSR (compressed sparse row) matrix on the GPU.

    ``S @ B`` multiplies it with a dense :class:`Matrix` (:func:`gpumat.spmm`); :meth:`free` releases
    it. The host arrays are validated (the first problem is named) and uploaded; row statistics and a
    schedule for long rows are computed once, on the host.

    Parameters
    ----------
    indptr : array_like of int
        Row pointers, ``shape[0] + 1`` of them, non-decreasing, from 0 to the number of nonzeros.
    indices : array_like of int
        The column of each nonzero, in ``[0, shape[1])``.
    data : array_like
        The values: float64 stays float64, float32 stays float32, integers become float64 when exact.
    shape : tuple of int
        ``(rows, columns)``.
    device : Device or int, optional
        The GPU; the current device by default.
    dtype : dtype, optional
        float32 or float64: convert the values.

    Raises
    ------
    TypeError
        Index arrays that are not integers, or values that are not real.
    ValueError
        Arrays that do not describe a CSR matrix of that shape.
    OutOfMemoryError
        No room on the GPU.

    Examples
    --------
    >>> S = gm.CSRMatrix([0, 1, 2], [1, 0], [2.0, 1.0], (2, 2))  # doctest: +GPU
    >>> S.shape, S.nnz, S.dtype
    ((2, 2), 2, dtype('float64'))
    >>> (S @ gm.Matrix.from_numpy(np.eye(2))).to_numpy().tolist()
    [[0.0, 2.0], [1.0, 0.0]]
    """

    __slots__ = ("_shape", "_nnz", "_stats", "_bufs", "_device", "_dtype", "__weakref__")
    __array_ufunc__ = None  # numpy leaves x @ S to Python, which refuses it, rather than making S an array

    def __init__(self, indptr, indices, data, shape, device=None, dtype=None):
        """Host arrays, validated (ValueError / CSRTypeError naming the first problem) and uploaded to
        `device`. Values are float32 or float64: float64 data stays float64, integers become float64
        when exact (the Matrix rule); dtype= converts."""
        self._setup(validate_csr(indptr, indices, data, shape, dtype), device)

    @classmethod
    def _from_host(cls, host: HostCSR, device=None) -> CSRMatrix:
        s = object.__new__(cls)
        s._setup(host, device)
        return s

    def _setup(self, host: HostCSR, device=None) -> None:
        self._bufs = None
        dev = self._device = as_device(device)
        self._dtype = host.data.dtype
        self._shape, self._nnz = host.shape, len(host.data)
        self._stats = row_stats(host.indptr, host.shape[1])
        sched = long_row_schedule(host.indptr, self._stats.split)
        bufs = {}
        try:
            for name, arr in (
                ("indptr", host.indptr),
                ("indices", host.indices),
                ("data", host.data),
                *zip(Schedule._fields, sched, strict=True),
            ):
                bufs[name] = _to_device(arr, dev)
        except BaseException:
            for buf in bufs.values():
                buf.release()
            raise
        self._bufs = bufs

    # construction ----------------------------------------------------------------------------
    @classmethod
    def from_scipy(cls, m, device=None, dtype=None) -> CSRMatrix:
        """From a scipy.sparse matrix, or anything with ``indptr``, ``indices``, ``data`` and ``shape``.

        scipy itself is not needed.

        Parameters
        ----------
        m : object
            A ``scipy.sparse`` matrix or array (converted to CSR), or an object with the four fields.
        device : Device or int, optional
            The GPU; the current device by default.
        dtype : dtype, optional
            float32 or float64: convert the values.

        Returns
        -------
        CSRMatrix
            The matrix on the GPU.

        Raises
        ------
        TypeError
            Index arrays that are not integers, or values that are not real.
        ValueError
            Fields that do not describe a CSR matrix.

        Examples
        --------
        >>> import scipy.sparse as sp
        >>> S = gm.CSRMatrix.from_scipy(sp.eye(3, format="csr"))  # doctest: +GPU
        >>> S.nnz
        3
        """
        return cls._from_host(scipy_to_csr(m, dtype), device)

    @classmethod
    def from_dense(cls, array, device=None, dtype=None) -> CSRMatrix:
        """The nonzeros of a dense matrix.

        Parameters
        ----------
        array : Matrix or array_like
            A gpumat Matrix (the result lives on its device) or a 1-D/2-D real array-like.
        device : Device or int, optional
            The GPU; the Matrix's, else the current device, by default.
        dtype : dtype, optional
            float32 or float64: convert the values.

        Returns
        -------
        CSRMatrix
            The matrix on the GPU.

        Raises
        ------
        TypeError
            Values that are not real.
        ValueError
            More than two dimensions.

        Examples
        --------
        >>> S = gm.CSRMatrix.from_dense(np.array([[0.0, 3.0], [0.0, 0.0]]))  # doctest: +GPU
        >>> S.nnz
        1
        """
        if isinstance(array, Matrix):
            device = array.device if device is None else device
            array = as_matrix(array, "array").to_numpy()
        return cls._from_host(dense_to_csr(array, dtype), device)

    # facts -----------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, columns)``."""
        return self._shape

    @property
    def nnz(self) -> int:
        """The number of stored entries."""
        return self._nnz

    @property
    def dtype(self):
        """The values' dtype: float32 or float64."""
        return self._dtype

    @property
    def device(self):
        """The GPU the matrix lives on, a :class:`Device`."""
        return self._device

    @property
    def stats(self) -> RowStats:
        """Row-length statistics computed once on the host (rows, nonzeros a row, the longest row, how long
        rows are split), which the kernels' choice reads.
        """
        return self._stats

    @property
    def is_freed(self) -> bool:
        """Whether :meth:`free` was called."""
        return self._bufs is None

    def _live_bufs(self) -> dict:
        """The device buffers of the matrix and its schedule, by name (FreedMatrixError once freed)."""
        bufs = self._bufs
        if bufs is None:
            raise FreedMatrixError(f"CSRMatrix {self._shape[0]}x{self._shape[1]} has been freed")
        return bufs

    def _arrays(self) -> list:
        return list(self._live_bufs().values())

    def _ptr(self, name: str) -> int:
        return self._live_bufs()[name].ptr

    # host copies -----------------------------------------------------------------------------
    def to_host(self) -> HostCSR:
        """The CSR arrays copied back from the GPU.

        Returns
        -------
        HostCSR
            A named tuple ``(indptr, indices, data, shape)``: int64 row pointers, int32 column indices,
            float32/float64 values.

        Raises
        ------
        ValueError
            The matrix has been freed.

        Examples
        --------
        >>> S = gm.CSRMatrix.from_dense(np.eye(2))  # doctest: +GPU
        >>> S.to_host().indptr.tolist()
        [0, 1, 2]
        """
        self._ptr("data")
        b = self._bufs
        return HostCSR(
            _from_device(b["indptr"], np.int64, self._shape[0] + 1),
            _from_device(b["indices"], np.int32, self._nnz),
            _from_device(b["data"], self._dtype, self._nnz),
            self._shape,
        )

    def to_scipy(self):
        """A ``scipy.sparse.csr_matrix`` copy.

        Returns
        -------
        scipy.sparse.csr_matrix
            The matrix on the host.

        Raises
        ------
        ImportError
            scipy is not installed.
        ValueError
            The matrix has been freed.

        Examples
        --------
        >>> S = gm.CSRMatrix.from_dense(np.eye(2))  # doctest: +GPU
        >>> S.to_scipy().toarray().tolist()
        [[1.0, 0.0], [0.0, 1.0]]
        """
        try:
            import scipy.sparse
        except ImportError:
            raise ImportError(
                "CSRMatrix.to_scipy() needs scipy (pip install scipy); to_host() and to_dense() work without it"
            ) from None
        h = self.to_host()
        index = np.int32 if h.indptr[-1] <= INT32_MAX else np.int64
        return scipy.sparse.csr_matrix((h.data, h.indices.astype(index), h.indptr.astype(index)), shape=h.shape)

    def to_dense(self) -> Matrix:
        """The matrix as a dense :class:`Matrix`, built on the GPU; repeated entries add up.

        Returns
        -------
        Matrix
            A packed matrix of the same shape and dtype.

        Raises
        ------
        ValueError
            The matrix has been freed.
        OutOfMemoryError
            No room on the GPU.

        Examples
        --------
        >>> S = gm.CSRMatrix([0, 1, 1], [1], [5.0], (2, 2))  # doctest: +GPU
        >>> S.to_dense().to_numpy().tolist()
        [[0.0, 5.0], [0.0, 0.0]]
        """
        rows, cols = self._shape
        self._ptr("data")
        dev = self._device.activate()
        st = stream_handle(None, dev)  # the thread's current stream, where zeros() fills the result too
        out = Matrix.zeros(rows, cols, dtype=self._dtype, device=dev, stream=st)
        with dev.lock:
            if rows and cols and self._nnz:
                buffers = (out._operand()[-1], *self._arrays())
                f = use_on(st, *buffers)
                to_dense = TO_DENSE_BY_DTYPE[suffix(self._dtype)]
                to_dense(
                    (cdiv(rows, BLOCK), 1, 1),
                    (BLOCK, 1, 1),
                    self._ptr("indptr"),
                    self._ptr("indices"),
                    self._ptr("data"),
                    out.elements,
                    rows,
                    out.stride,
                    stream=st,
                    device=dev,
                )
                if f is not None:  # its one mark orders every buffer's free
                    mark_done(f, st, *buffers)
        return out

    # lifetime --------------------------------------------------------------------------------
    def free(self) -> None:
        """Release the device arrays (the matrix and its long-row schedule) now, stream-ordered.

        Raises
        ------
        CudaError
            The driver failed to queue the release.

        Examples
        --------
        >>> S = gm.CSRMatrix.from_dense(np.eye(2))  # doctest: +GPU
        >>> S.free()
        >>> S.is_freed
        True
        """
        with self._device.lock:  # not while an operation is between its checks and its launches
            bufs, self._bufs = self._bufs, None
            if bufs:
                for buf in bufs.values():
                    buf.release()

    def __enter__(self) -> CSRMatrix:
        return self

    def __exit__(self, *exc) -> None:
        self.free()

    # arithmetic ------------------------------------------------------------------------------
    def __matmul__(self, other):
        """``S @ B``: :func:`gpumat.spmm` with its defaults.

        Parameters
        ----------
        other : Matrix
            The dense right operand.

        Returns
        -------
        Matrix
            The product.

        Raises
        ------
        TypeError
            ``other`` is not a Matrix (a numpy array must be uploaded first).

        Examples
        --------
        >>> S = gm.CSRMatrix.from_dense(np.eye(2))  # doctest: +GPU
        >>> (S @ gm.Matrix.from_numpy(np.ones((2, 3)))).shape
        (2, 3)
        """
        if isinstance(other, Matrix):
            from .spmm import spmm  # the declared late import (see the module docstring)

            return spmm(self, other)
        if isinstance(other, np.ndarray):  # numpy would try to make S an array; say what to do instead
            raise TypeError("S @ x takes a gpumat.Matrix; upload a numpy array first (gm.Matrix.from_numpy(x))")
        return NotImplemented

    def __repr__(self) -> str:
        rows, cols = self._shape
        state = ", freed" if self.is_freed else ""
        s = self._stats
        return (
            f"<gpumat.CSRMatrix {rows}x{cols} {self._dtype}, nnz={self._nnz} ({s.mean:.3g} a row, max {s.max}){state}>"
        )
