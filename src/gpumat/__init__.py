"""gpumat: matrix work on NVIDIA GPUs from pure Python.

Hand-written CUDA kernels, compiled ahead of time, launched through NVIDIA's driver API
(cuda.bindings.driver); numpy on the host. Nothing else at run time.
"""
from . import matrix as _matrix
from ._driver import CudaError, NoDeviceError, OutOfMemoryError, Stream, device, is_available, synchronize
from .dot import dot
from ._precision import get_matmul_precision, matmul_precision, set_matmul_precision
from .matmul import matmul
from .matrix import FreedMatrixError, Matrix
from .sparse import CSRMatrix, spmm
from .transpose import transpose

_matrix._matmul, _matrix._transpose = matmul, transpose  # for A @ B and A.T (matrix.py cannot import them)

__version__ = "0.1.0"
__all__ = [
    "Matrix", "CSRMatrix", "matmul", "transpose", "dot", "spmm",
    "matmul_precision", "set_matmul_precision", "get_matmul_precision",
    "Stream", "CudaError", "OutOfMemoryError", "NoDeviceError", "FreedMatrixError",
    "device", "is_available", "synchronize",
]
