"""gpumat: matrix work on NVIDIA GPUs from pure Python.

Hand-written CUDA kernels, compiled ahead of time, launched through NVIDIA's driver API
(cuda.bindings.driver); numpy on the host. Nothing else at run time.
"""
from ._driver import CudaError, NoDeviceError, OutOfMemoryError, Stream, device, is_available, synchronize
from .dot import dot
from .matmul import matmul
from .matrix import FreedMatrixError, Matrix
from .sparse import CSRMatrix, spmm
from .transpose import transpose

__version__ = "0.1.0"
__all__ = [
    "Matrix", "matmul", "transpose", "dot", "CSRMatrix", "spmm", "Stream", "CudaError", "OutOfMemoryError", "NoDeviceError", "FreedMatrixError",
    "device", "is_available", "synchronize",
]
