"""The one place that talks to cuda.bindings.driver directly: init, the context, errors, device facts.

Initialisation is lazy (importing gpumat never touches the GPU). The device's primary context is
retained once and made current in whichever thread calls, so threads just work.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from cuda.bindings import driver

CUresult = driver.CUresult


class CudaError(RuntimeError):
    """A CUDA driver call failed. `code` is the CUresult value, `name` its symbolic name."""

    def __init__(self, code: int, name: str, message: str, call: str = ""):
        self.code, self.name, self.message, self.call = int(code), name, message, call
        where = f" in {call}" if call else ""
        super().__init__(f"{name} ({int(code)}){where}: {message}")


class OutOfMemoryError(CudaError, MemoryError):
    """The GPU has too little free memory for the request."""


class NoDeviceError(CudaError):
    """No usable NVIDIA GPU: no driver, no device, or a driver too old for the shipped kernels."""

    def __init__(self, message: str):
        super().__init__(CUresult.CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", message)


def _describe(code) -> tuple[str, str]:
    try:
        err, name = driver.cuGetErrorName(code)
        err2, text = driver.cuGetErrorString(code)
        name = name.decode() if not err else getattr(code, "name", str(code))
        return name, (text.decode() if not err2 else "unknown error")
    except Exception:  # the driver itself may be unusable when we get here (no libcuda: the enum still names it)
        return getattr(code, "name", str(code)), "unknown error"


# Results that mean "no usable GPU here" rather than a failed operation.
NO_GPU_RESULTS = frozenset({
    CUresult.CUDA_ERROR_NO_DEVICE, CUresult.CUDA_ERROR_STUB_LIBRARY, CUresult.CUDA_ERROR_SYSTEM_DRIVER_MISMATCH,
    CUresult.CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, CUresult.CUDA_ERROR_DEVICE_UNAVAILABLE,
})


def raise_error(code, call: str = "") -> None:
    name, text = _describe(code)
    if code in NO_GPU_RESULTS:
        raise NoDeviceError(f"{name}: {text}")
    cls = OutOfMemoryError if code == CUresult.CUDA_ERROR_OUT_OF_MEMORY else CudaError
    raise cls(code, name, text, call)


def check(result, call: str = ""):
    """Unpack a cuda.bindings result tuple (CUresult, *values), raising CudaError on failure."""
    err = result[0]
    if err:
        raise_error(err, call)
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


@dataclass(frozen=True)
class Device:
    ordinal: int
    handle: object
    context: object
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    total_memory: int
    max_smem_optin: int
    l2_bytes: int
    driver_version: int

    @property
    def arch(self) -> int:
        return self.compute_capability[0] * 10 + self.compute_capability[1]

    @property
    def driver_version_str(self) -> str:
        return f"{self.driver_version // 1000}.{self.driver_version % 1000 // 10}"


_lock = threading.Lock()
_device: Device | None = None
_thread = threading.local()


def _init() -> Device:
    try:
        err, = driver.cuInit(0)
    except Exception as exc:  # cuda.pathfinder raises when libcuda.so cannot be found at all
        raise NoDeviceError(f"no NVIDIA driver found ({type(exc).__name__}: {exc})") from None
    if err:
        raise_error(err, "cuInit")
    count = check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
    if count == 0:
        raise NoDeviceError("the NVIDIA driver reports no GPU")
    handle = check(driver.cuDeviceGet(0), "cuDeviceGet")
    context = check(driver.cuDevicePrimaryCtxRetain(handle), "cuDevicePrimaryCtxRetain")
    check(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent")

    def attr(a):
        return check(driver.cuDeviceGetAttribute(getattr(driver.CUdevice_attribute, a), handle))

    name = check(driver.cuDeviceGetName(256, handle)).split(b"\0", 1)[0].decode()
    return Device(
        ordinal=0, handle=handle, context=context, name=name,
        compute_capability=(attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
                            attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR")),
        sm_count=attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT"),
        total_memory=check(driver.cuDeviceTotalMem(handle)),
        max_smem_optin=attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN"),
        l2_bytes=attr("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE"),
        driver_version=check(driver.cuDriverGetVersion()),
    )


def device() -> Device:
    """The GPU gpumat works on, initialised on first use and current in the calling thread."""
    dev = _device
    if dev is None:
        dev = _initialise()
    if not getattr(_thread, "current", False):
        check(driver.cuCtxSetCurrent(dev.context), "cuCtxSetCurrent")
        _thread.current = True
    return dev


def _initialise() -> Device:
    global _device
    with _lock:
        if _device is None:
            _device = _init()
            _thread.current = True
    return _device


def is_available() -> bool:
    """True when a GPU and a driver are usable (never raises)."""
    try:
        device()
        return True
    except CudaError:
        return False


def synchronize() -> None:
    device()
    check(driver.cuCtxSynchronize(), "cuCtxSynchronize")


class Stream:
    """A CUDA stream owned by the caller. gpumat's operations run on the legacy default stream, which
    orders itself with every blocking stream such as this one; use it to order your own work."""

    def __init__(self):
        device()
        self.handle = check(driver.cuStreamCreate(0), "cuStreamCreate")

    def synchronize(self) -> None:
        check(driver.cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    def close(self) -> None:
        handle, self.handle = self.handle, None
        if handle is not None:
            check(driver.cuStreamDestroy(handle), "cuStreamDestroy")

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
