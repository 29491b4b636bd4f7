"""The runtime: the only code in gpumat that imports cuda.bindings.driver.

errors (CudaError and the `check` helper every driver call goes through), devices (initialisation,
one Device a GPU, the current device of each thread), streams (Stream, Event, the registry of
gpumat's streams, stream ordering), kernels (entry points declared once, modules loaded lazily,
the launch), geometry (launch grids as pure functions), memops (the driver's memory calls), ipc
(memory and events another process opens), tensormaps (TMA descriptors).
"""

from .devices import Device, as_device, current_device, device, device_count, is_available, synchronize
from .errors import CudaError, NoDeviceError, OutOfMemoryError, check
from .streams import LEGACY_STREAM, Event, Stream, stream_handle

__all__ = [
    "Device",
    "as_device",
    "current_device",
    "device",
    "device_count",
    "is_available",
    "synchronize",
    "CudaError",
    "NoDeviceError",
    "OutOfMemoryError",
    "check",
    "LEGACY_STREAM",
    "Event",
    "Stream",
    "stream_handle",
]
