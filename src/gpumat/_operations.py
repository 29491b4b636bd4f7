"""What Matrix methods call: the operations built on gpumat.matrix, gathered for its one late import."""

from ._interop import cuda_array_interface, export_dlpack, from_cuda_array
from ._transfer import copy_matrix
from .convert import astype
from .matmul import matmul
from .transpose import transpose

__all__ = ["astype", "copy_matrix", "cuda_array_interface", "export_dlpack", "from_cuda_array", "matmul", "transpose"]
