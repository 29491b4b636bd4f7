"""The one place that talks to cuda.bindings.driver for devices, contexts, streams and events.

Initialisation is lazy (importing gpumat never touches the GPU). Each GPU is one `Device` object that
owns everything gpumat keeps for it: its primary context, loaded modules, memory pool, scratch
buffers and an enqueue lock. The lock is held from an operation's argument checks until its work is
enqueued, and `free()` takes it too, so memory can never be released and reused between the moment
an operation checked a matrix and the moment its kernel was queued. Finalizers never take it: they
only queue their blocks for the next allocation to release (see _memory).

Streams: every operation takes `stream=`, a `Stream`, anything with `__cuda_stream__`, or a raw
handle; `with stream:` makes a stream current for the calling thread, and the current stream is the
default. Without one, work goes to the legacy default stream, which orders itself with every
blocking stream.
"""
from __future__ import annotations

import threading

from cuda.bindings import driver

CUresult = driver.CUresult
LEGACY_STREAM = 0   # the handle gpumat passes for the legacy default stream
CAI_LEGACY = 1      # how __cuda_array_interface__ and DLPack spell that stream


class CudaError(RuntimeError):
    """A CUDA driver call failed. `code` is the CUresult value, `name` its symbolic name."""

    def __init__(self, code: int, name: str, message: str, call: str = ""):
        self.code, self.name, self.message, self.call = int(code), name, message, call
        where = f" in {call}" if call else ""
        super().__init__(f"{name} ({int(code)}){where}: {message}")


class OutOfMemoryError(CudaError, MemoryError):
    """The GPU (or the memory limit set for gpumat) has too little free memory for the request."""

    def __init__(self, message: str, call: str = ""):
        super().__init__(CUresult.CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", message, call)


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


# -------------------------------------------------------------------------------------------------
# initialisation and the current device of each thread
# -------------------------------------------------------------------------------------------------
_init_lock = threading.Lock()
_count: int | None = None
_devices: dict[int, "Device"] = {}
_tls = threading.local()     # .stack: devices entered with `with`; .ctx: the Device whose context is current
_many_devices = False        # set once a second Device is initialised: then contexts are checked, not assumed


def device_count() -> int:
    """How many GPUs this process sees (CUDA_VISIBLE_DEVICES applies); 0 without a driver or GPU."""
    try:
        return _driver_count()
    except CudaError:
        return 0


def _driver_count() -> int:
    global _count
    if _count is None:
        with _init_lock:
            if _count is None:
                try:
                    err, = driver.cuInit(0)
                except Exception as exc:  # cuda.pathfinder raises when libcuda.so cannot be found at all
                    raise NoDeviceError(f"no NVIDIA driver found ({type(exc).__name__}: {exc})") from None
                if err:
                    raise_error(err, "cuInit")
                _count = check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
    if _count == 0:
        raise NoDeviceError("the NVIDIA driver reports no GPU")
    return _count


def _get_device(ordinal: int) -> "Device":
    dev = _devices.get(ordinal)
    if dev is None:
        count = _driver_count()
        if not 0 <= ordinal < count:
            raise ValueError(f"no GPU {ordinal}: this process sees {count} (0..{count - 1})")
        with _init_lock:
            dev = _devices.get(ordinal)
            if dev is None:
                global _many_devices
                dev = object.__new__(Device)
                dev._setup(ordinal)
                _devices[ordinal] = dev
                _many_devices = len(_devices) > 1
    return dev


def device() -> "Device":
    """The calling thread's current GPU (device 0 unless a `with gm.Device(i):` block says otherwise),
    initialised on first use, with its context current in this thread."""
    stack = getattr(_tls, "stack", None)
    dev = stack[-1] if stack else (_devices.get(0) or _get_device(0))
    if _many_devices or getattr(_tls, "ctx", None) is not dev:
        dev.activate()
    return dev


current_device = device


def is_available() -> bool:
    """True when a GPU and a driver are usable (never raises)."""
    try:
        device()
        return True
    except CudaError:
        return False


def synchronize() -> None:
    """Wait for all work on the current device."""
    device().synchronize()


class Device:
    """One GPU. `gm.Device(i)` is the same object every time for the same i; `with gm.Device(i):`
    makes it the current device of the calling thread for the block (CuPy's convention)."""

    __slots__ = ("ordinal", "handle", "context", "name", "compute_capability", "sm_count", "total_memory",
                 "max_smem_optin", "l2_bytes", "driver_version", "lock", "modules", "functions", "scratch",
                 "memory", "_context_int", "_peers", "__weakref__")

    def __new__(cls, ordinal: int | None = None):
        if ordinal is None:
            return device()
        if isinstance(ordinal, Device):
            return ordinal
        if isinstance(ordinal, bool) or not isinstance(ordinal, int) and not hasattr(ordinal, "__index__"):
            raise TypeError(f"a device is given by its integer index, got {type(ordinal).__name__}")
        return _get_device(int(ordinal.__index__()))

    def _setup(self, ordinal: int) -> None:
        handle = check(driver.cuDeviceGet(ordinal), "cuDeviceGet")
        self.ordinal, self.handle = ordinal, handle
        self.context = check(driver.cuDevicePrimaryCtxRetain(handle), "cuDevicePrimaryCtxRetain")
        self._context_int = int(self.context)

        def attr(a):
            return check(driver.cuDeviceGetAttribute(getattr(driver.CUdevice_attribute, a), handle))

        self.name = check(driver.cuDeviceGetName(256, handle)).split(b"\0", 1)[0].decode()
        self.compute_capability = (attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
                                   attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"))
        self.sm_count = attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
        self.total_memory = check(driver.cuDeviceTotalMem(handle))
        self.max_smem_optin = attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
        self.l2_bytes = attr("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE")
        self.driver_version = check(driver.cuDriverGetVersion())
        # Reentrant: an operation holding it may allocate, and allocation takes it too. Finalizers never
        # take it (they only queue), so no re-entry can find a half-updated structure.
        self.lock = threading.RLock()
        self.modules: dict[str, object] = {}       # module name -> CUmodule in this device's context
        self.functions: dict[str, object] = {}     # kernel name -> CUfunction
        self.scratch: dict[str, object] = {}       # operation -> its per-device scratch object
        self.memory = None                         # _memory.Pool, made on first allocation
        self._peers: set[int] = set()

    # facts -----------------------------------------------------------------------------------
    @property
    def id(self) -> int:
        return self.ordinal

    @property
    def arch(self) -> int:
        return self.compute_capability[0] * 10 + self.compute_capability[1]

    @property
    def driver_version_str(self) -> str:
        return f"{self.driver_version // 1000}.{self.driver_version % 1000 // 10}"

    def __index__(self) -> int:
        return self.ordinal

    def __repr__(self) -> str:
        return f"<gpumat.Device {self.ordinal}: {self.name}, sm_{self.arch}>"

    # the context -----------------------------------------------------------------------------
    def activate(self) -> "Device":
        """Make this device's context current in the calling thread (cheap when it already is)."""
        if _many_devices:  # another library may have switched the thread to another GPU's context
            current = check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
            if int(current) != self._context_int:
                check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        elif getattr(_tls, "ctx", None) is not self:
            check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        _tls.ctx = self
        return self

    def use(self) -> "Device":
        """Make this the current device of the calling thread (until another use() or a `with` block ends)."""
        stack = getattr(_tls, "stack", None)
        if stack is None:
            stack = _tls.stack = []
        if stack:
            stack[-1] = self
        else:
            stack.append(self)
        return self.activate()

    def __enter__(self) -> "Device":
        stack = getattr(_tls, "stack", None)
        if stack is None:
            stack = _tls.stack = []
        stack.append(self)
        return self.activate()

    def __exit__(self, *exc) -> None:
        _tls.stack.pop()
        device()  # the previous device's context is current again

    def synchronize(self) -> None:
        self.activate()
        check(driver.cuCtxSynchronize(), "cuCtxSynchronize")

    def can_access_peer(self, other: "Device") -> bool:
        return bool(check(driver.cuDeviceCanAccessPeer(self.handle, other.handle), "cuDeviceCanAccessPeer"))

    def enable_peer_access(self, other: "Device") -> bool:
        """Let kernels and copies on this device reach `other`'s memory directly; False where the GPUs cannot."""
        if other.ordinal in self._peers:
            return True
        if other is self or not self.can_access_peer(other):
            return False
        from ._memory import pool
        other_pool = pool(other)  # before taking this device's lock: never hold two devices' locks at once
        with self.lock:
            self.activate()
            err, = driver.cuCtxEnablePeerAccess(other.context, 0)
            if err and err != CUresult.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
                raise_error(err, "cuCtxEnablePeerAccess")
            # stream-ordered pool allocations are not covered by context peer access: grant it on the pool
            desc = driver.CUmemAccessDesc()
            desc.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            desc.location.id = self.ordinal
            desc.flags = driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            check(driver.cuMemPoolSetAccess(other_pool.handle, [desc], 1), "cuMemPoolSetAccess")
            self._peers.add(other.ordinal)
        return True


def as_device(dev) -> Device:
    """A Device from a Device, an index, or None (the current device), its context current in this thread."""
    if dev is None:
        return device()
    return (dev if isinstance(dev, Device) else Device(dev)).activate()


# -------------------------------------------------------------------------------------------------
# streams and events
# -------------------------------------------------------------------------------------------------
class Stream:
    """A CUDA stream on one device. Non-blocking by default: it does not wait for the legacy default
    stream. `with stream:` makes it the current stream of the calling thread (it is not closed then);
    `close()` destroys it, and so does the finalizer."""

    __slots__ = ("handle", "ptr", "device", "non_blocking", "_owned", "__weakref__")

    def __init__(self, non_blocking: bool = True, priority: int = 0, device=None):
        dev = as_device(device).activate()
        flags = driver.CUstream_flags.CU_STREAM_NON_BLOCKING if non_blocking else driver.CUstream_flags.CU_STREAM_DEFAULT
        self.handle = check(driver.cuStreamCreateWithPriority(flags, priority), "cuStreamCreateWithPriority")
        self.ptr, self.device, self.non_blocking, self._owned = int(self.handle), dev, non_blocking, True
        from ._memory import dead_streams, own_streams
        dead_streams.discard(self.ptr)
        own_streams.add(self.ptr)

    @classmethod
    def external(cls, handle: int, device=None) -> "Stream":
        """Wrap a stream some other code owns (never destroyed by gpumat)."""
        s = object.__new__(cls)
        s.handle, s.ptr, s.device, s.non_blocking, s._owned = driver.CUstream(handle), int(handle), as_device(device), None, False
        return s

    def __cuda_stream__(self) -> tuple[int, int]:
        """The CUDA stream protocol: (version, handle)."""
        return 0, self.ptr

    def synchronize(self) -> None:
        self.device.activate()
        check(driver.cuStreamSynchronize(self.handle), "cuStreamSynchronize")

    def query(self) -> bool:
        """True when all work queued on the stream has finished."""
        self.device.activate()
        err, = driver.cuStreamQuery(self.handle)
        if err == CUresult.CUDA_ERROR_NOT_READY:
            return False
        check((err,), "cuStreamQuery")
        return True

    def wait(self, event: "Event") -> None:
        """Work queued on this stream from now on waits for `event`."""
        check(driver.cuStreamWaitEvent(self.handle, event.handle, 0), "cuStreamWaitEvent")

    def record(self, event: "Event | None" = None) -> "Event":
        event = event or Event(device=self.device)
        event.record(self)
        return event

    def close(self) -> None:
        if not self._owned or self.ptr == 0:
            return
        from . import _memory  # blocks cached for this stream go back to the pool before it disappears
        handle, ptr, self.handle, self.ptr = self.handle, self.ptr, None, 0
        _memory.close_stream(self.device, ptr, handle)

    def __del__(self):  # never takes a lock: the device's next allocation closes the stream
        if self._owned and self.ptr:
            try:
                pool = self.device.memory
                if pool is None:
                    check(driver.cuStreamDestroy(self.handle))
                else:
                    pool.pending.append((None, 0, self.ptr, self.handle))
            except Exception:  # interpreter shutdown or a dead context: nothing useful left to do
                pass
            self.ptr = 0

    def __enter__(self) -> "Stream":
        stack = getattr(_tls, "streams", None)
        if stack is None:
            stack = _tls.streams = []
        stack.append(self)
        return self

    def __exit__(self, *exc) -> None:
        _tls.streams.pop()

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other.ptr == self.ptr

    def __hash__(self) -> int:
        return hash(self.ptr)

    def __repr__(self) -> str:
        return f"<gpumat.Stream 0x{self.ptr:x} on device {self.device.ordinal}>"


def current_stream(dev: Device | None = None) -> int:
    """The handle of the calling thread's current stream for `dev` (the legacy default stream if none)."""
    stack = getattr(_tls, "streams", None)
    if stack:
        s = stack[-1]
        if dev is None or s.device is dev:
            return s.ptr
    return LEGACY_STREAM


def stream_handle(stream, dev: Device) -> int:
    """The raw handle for an operation's `stream=` argument on device `dev`.

    None: the thread's current stream; a gpumat Stream (of the same device); any object with
    __cuda_stream__ (the CUDA stream protocol: CuPy, PyTorch, cuda.core streams); an object with a
    `cuda_stream` or `ptr` integer attribute; a cuda.bindings CUstream; or a raw integer handle
    (0 is the legacy default stream)."""
    if stream is None:
        stack = getattr(_tls, "streams", None)
        if stack:
            s = stack[-1]
            if s.device is dev:
                return s.ptr
        return LEGACY_STREAM
    if type(stream) is Stream:
        if stream.device is not dev:
            raise ValueError(f"the stream lives on GPU {stream.device.ordinal}, the operands on GPU {dev.ordinal}")
        if stream.ptr == 0 and stream._owned:
            raise ValueError("that stream has been closed")
        return stream.ptr
    if isinstance(stream, int) and not isinstance(stream, bool):
        if stream < 0:
            raise ValueError(f"a stream handle is a non-negative integer, got {stream}")
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None:
        value = proto() if callable(proto) else proto
        if not (isinstance(value, tuple) and len(value) == 2):
            raise TypeError(f"{type(stream).__name__}.__cuda_stream__ must give (version, handle), got {value!r}")
        return int(value[1])
    if isinstance(stream, driver.CUstream):
        return int(stream)
    for attr in ("cuda_stream", "ptr"):  # PyTorch streams / older CuPy streams
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value
    raise TypeError(f"stream must be a gpumat.Stream, an object with __cuda_stream__, or a raw handle; "
                    f"got {type(stream).__name__}")


class Event:
    """A CUDA event: `record(stream)`, `synchronize()`, `query()`, `elapsed_time(end)` in milliseconds."""

    __slots__ = ("handle", "device", "timing", "__weakref__")

    def __init__(self, timing: bool = True, blocking: bool = False, device=None):
        dev = as_device(device).activate()
        flags = 0 if timing else int(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        if blocking:
            flags |= int(driver.CUevent_flags.CU_EVENT_BLOCKING_SYNC)
        self.handle = check(driver.cuEventCreate(flags), "cuEventCreate")
        self.device, self.timing = dev, timing

    def record(self, stream=None) -> "Event":
        check(driver.cuEventRecord(self.handle, stream_handle(stream, self.device)), "cuEventRecord")
        return self

    def synchronize(self) -> None:
        check(driver.cuEventSynchronize(self.handle), "cuEventSynchronize")

    def query(self) -> bool:
        err, = driver.cuEventQuery(self.handle)
        if err == CUresult.CUDA_ERROR_NOT_READY:
            return False
        check((err,), "cuEventQuery")
        return True

    def elapsed_time(self, end: "Event") -> float:
        """Milliseconds from this event to `end` (both recorded and complete, both with timing)."""
        if not (self.timing and end.timing):
            raise ValueError("elapsed_time needs two events made with timing=True")
        return float(check(driver.cuEventElapsedTime(self.handle, end.handle), "cuEventElapsedTime"))

    def close(self) -> None:
        handle, self.handle = self.handle, None
        if handle is not None:
            check(driver.cuEventDestroy(handle), "cuEventDestroy")

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
