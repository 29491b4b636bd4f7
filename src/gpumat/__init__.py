"""gpumat: matrix work on NVIDIA GPUs from pure Python.

Hand-written CUDA kernels, compiled ahead of time, launched through NVIDIA's driver API
(cuda.bindings.driver); numpy on the host. Nothing else at run time.
"""

# What Matrix methods hand their work to, loaded with the package so that a process's first A @ B,
# A.T or A.to(...) pays no import (matrix.py reaches it through its one declared late import)
from . import _operations  # noqa: F401
from ._interop import asmatrix, from_dlpack
from ._precision import get_matmul_precision, matmul_precision, set_matmul_precision
from ._version import __version__  # noqa: F401  (gpumat.__version__)
from .dot import dot
from .matmul import MatmulPlan, matmul, matmul_plan
from .matrix import FreedMatrixError, Matrix
from .memory import memory_info, pinned_empty, release_cached, reset_peak, set_cache_limit, set_memory_limit
from .runtime import (
    CudaError,
    Device,
    Event,
    NoDeviceError,
    OutOfMemoryError,
    Stream,
    current_device,
    device,
    device_count,
    is_available,
    synchronize,
)
from .sparse import CSRMatrix
from .spmm import spmm
from .transpose import transpose

__all__ = [
    "Matrix",
    "CSRMatrix",
    "matmul",
    "matmul_plan",
    "MatmulPlan",
    "transpose",
    "dot",
    "spmm",
    "Device",
    "Stream",
    "Event",
    "device",
    "current_device",
    "device_count",
    "is_available",
    "synchronize",
    "from_dlpack",
    "asmatrix",
    "pinned_empty",
    "memory_info",
    "release_cached",
    "reset_peak",
    "set_memory_limit",
    "set_cache_limit",
    "CudaError",
    "OutOfMemoryError",
    "NoDeviceError",
    "FreedMatrixError",
    "matmul_precision",
    "set_matmul_precision",
    "get_matmul_precision",
]
