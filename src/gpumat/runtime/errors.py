"""CUDA errors as Python exceptions, and the one helper every driver call goes through.

`check(result, call)` unpacks a cuda.bindings result tuple (CUresult, *values) and turns a failure into
`CudaError` (code, symbolic name, text, and the call that failed); results that mean "no usable GPU"
become `NoDeviceError`, and out-of-memory becomes `OutOfMemoryError` (also a MemoryError).
"""

from __future__ import annotations

from functools import cache

from .bindings import CUresult, driver


class CudaError(RuntimeError):
    """A CUDA driver call failed.

    Its text: the error's name and number, the call that failed and the driver's description.

    Parameters
    ----------
    code : int
        The ``CUresult`` value.
    name : str
        Its symbolic name, such as ``"CUDA_ERROR_ILLEGAL_ADDRESS"``.
    message : str
        The driver's description.
    call : str, optional
        The driver function that failed.

    Attributes
    ----------
    code, name, message, call
        As given.

    Examples
    --------
    >>> e = gm.CudaError(700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered", "cuMemcpy")
    >>> str(e)
    'CUDA_ERROR_ILLEGAL_ADDRESS (700) in cuMemcpy: an illegal memory access was encountered'
    """

    def __init__(self, code: int, name: str, message: str, call: str = ""):
        self.code, self.name, self.message, self.call = int(code), name, message, call
        where = f" in {call}" if call else ""
        super().__init__(f"{name} ({int(code)}){where}: {message}")


class OutOfMemoryError(CudaError, MemoryError):
    """The GPU (or the memory limit set for gpumat) has too little free memory for the request.

    Both a :class:`CudaError` and a ``MemoryError``. gpumat has already handed every cached byte back
    and retried once before raising it.

    Parameters
    ----------
    message : str
        What was asked for and what was free.
    call : str, optional
        The driver function that failed.

    Examples
    --------
    >>> issubclass(gm.OutOfMemoryError, MemoryError), gm.OutOfMemoryError("x").name
    (True, 'CUDA_ERROR_OUT_OF_MEMORY')
    """

    def __init__(self, message: str, call: str = ""):
        super().__init__(2, "CUDA_ERROR_OUT_OF_MEMORY", message, call)  # CUresult's value: no driver needed


class NoDeviceError(CudaError):
    """No usable NVIDIA GPU: no driver, no device, or a driver too old for the shipped kernels.

    Its text is the line ``python -m gpumat`` prints: ``"no usable NVIDIA GPU: <what is missing>"``.

    Parameters
    ----------
    message : str
        What is missing.

    Examples
    --------
    >>> str(gm.NoDeviceError("no NVIDIA driver found"))
    'no usable NVIDIA GPU: no NVIDIA driver found'
    """

    def __init__(self, message: str):
        super().__init__(100, "CUDA_ERROR_NO_DEVICE", message)  # CUresult's value: raised when there is no driver

    def __str__(self) -> str:
        return f"no usable NVIDIA GPU: {self.message}"


def _describe(code) -> tuple[str, str]:
    try:
        err, name = driver.cuGetErrorName(code)
        err2, text = driver.cuGetErrorString(code)
        name = name.decode() if not err else getattr(code, "name", str(code))
        return name, (text.decode() if not err2 else "unknown error")
    except Exception:  # the driver itself may be unusable when we get here (no libcuda: the enum still names it)
        return getattr(code, "name", str(code)), "unknown error"


@cache
def no_gpu_results() -> frozenset:
    """Results that mean "no usable GPU here" rather than a failed operation."""
    return frozenset(
        {
            CUresult.CUDA_ERROR_NO_DEVICE,
            CUresult.CUDA_ERROR_STUB_LIBRARY,
            CUresult.CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
            CUresult.CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE,
            CUresult.CUDA_ERROR_DEVICE_UNAVAILABLE,
        }
    )


def raise_error(code, call: str = "") -> None:
    name, text = _describe(code)
    if code in no_gpu_results():
        raise NoDeviceError(f"{name}: {text}")
    if code == CUresult.CUDA_ERROR_OUT_OF_MEMORY:
        raise OutOfMemoryError(text, call)
    raise CudaError(code, name, text, call)


def check(result, call: str = ""):
    """Unpack a cuda.bindings result tuple (CUresult, *values), raising CudaError on failure."""
    err = result[0]
    if err:
        raise_error(err, call)
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]
