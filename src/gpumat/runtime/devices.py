"""GPUs: driver initialisation, one `Device` object a GPU, and the current device of each thread.

Initialisation is lazy (importing gpumat never touches the GPU). Each GPU is one `Device` that owns
everything gpumat keeps for it: its primary context, loaded modules and functions, the memory pool
(set by the memory layer on first allocation), per-operation scratch and an enqueue lock. The lock is
held from an operation's argument checks until its work is enqueued, and `free()` takes it too, so
memory can never be released and reused between the moment an operation checked a matrix and the
moment its kernel was queued. Finalizers never take it: they only queue work for the next
allocation (see gpumat.memory).
"""

from __future__ import annotations

import threading

from .bindings import driver
from .errors import CudaError, CUresult, NoDeviceError, check, raise_error

# -------------------------------------------------------------------------------------------------
# initialisation and the current device of each thread
# -------------------------------------------------------------------------------------------------
_init_lock = threading.Lock()
_count: int | None = None
_devices: dict[int, Device] = {}


class ThreadState(threading.local):
    """One thread's device and stream state. Every field has a class-level default, so a thread that
    never set it reads None at the cost of an attribute read (getattr with a default on a plain
    threading.local raises and catches an AttributeError inside: about 0.3 us on each call's path)."""

    stack: list | None = None  # the devices entered with `with` (or made current by use())
    ctx: Device | None = None  # the Device whose context is current in this thread
    streams: list | None = None  # the streams entered with `with` (gpumat.runtime.streams)
    per_thread_streams: dict | None = None  # Device -> Foreign of this thread's per-thread default stream


_tls = ThreadState()
_many_devices = False  # set once a second Device is initialised: then contexts are checked, not assumed


def thread_state() -> ThreadState:
    """The calling thread's device and stream state (the streams module keeps its `with` stack here)."""
    return _tls


def device_count() -> int:
    """How many GPUs this process sees (``CUDA_VISIBLE_DEVICES`` applies).

    Returns
    -------
    int
        The count; 0 without a driver or GPU.

    Examples
    --------
    >>> gm.device_count() >= 0
    True
    """
    try:
        return _driver_count()
    except CudaError:
        return 0


def gpu_count() -> int:
    """How many GPUs this process sees; NoDeviceError (saying what is missing) when there is none."""
    return _driver_count()


def _driver_count() -> int:
    global _count
    if _count is None:
        with _init_lock:
            if _count is None:
                try:
                    (err,) = driver.cuInit(0)
                except Exception as exc:  # cuda.pathfinder raises when libcuda.so cannot be found at all
                    raise NoDeviceError(f"no NVIDIA driver found ({type(exc).__name__}: {exc})") from None
                if err:
                    raise_error(err, "cuInit")
                _count = check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
    if _count == 0:
        raise NoDeviceError("the NVIDIA driver reports no GPU")
    return _count


def _get_device(ordinal: int) -> Device:
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


def device_of_context(ctx: int) -> Device | None:
    """The initialised Device whose primary context is `ctx` (a context handle as an int), or None."""
    for dev in list(_devices.values()):
        if dev._context_int == ctx:
            return dev
    return None


def device() -> Device:
    """The calling thread's current GPU, initialised on first use, its context current in this thread.

    Device 0 unless a ``with gm.Device(i):`` block (or ``gm.Device(i).use()``) says otherwise.
    ``gm.current_device`` is the same function.

    Returns
    -------
    Device
        The current device.

    Raises
    ------
    NoDeviceError
        No driver, no GPU, or a driver too old for the kernels.

    Examples
    --------
    >>> gm.device() is gm.Device(0)  # doctest: +GPU
    True
    """
    stack = _tls.stack
    dev = stack[-1] if stack else (_devices.get(0) or _get_device(0))
    if _many_devices or _tls.ctx is not dev:
        dev.activate()
    return dev


current_device = device


def is_available() -> bool:
    """Whether a GPU and a driver are usable; never raises.

    Returns
    -------
    bool
        True when :func:`device` would succeed.

    Examples
    --------
    >>> isinstance(gm.is_available(), bool)
    True
    """
    try:
        device()
        return True
    except CudaError:
        return False


def synchronize() -> None:
    """Wait for all work on the current device, on every stream.

    Raises
    ------
    NoDeviceError
        No usable GPU.
    CudaError
        A kernel or copy queued earlier failed (the driver reports it here).

    Examples
    --------
    >>> gm.synchronize()  # doctest: +GPU
    """
    device().synchronize()


class Device:
    """One GPU.

    ``gm.Device(i)`` is the same object every time for the same ``i`` (and ``gm.Device()`` the
    current device); ``with gm.Device(i):`` makes it the current device of the calling thread for the
    block (CuPy's convention). A Device converts to its index (``operator.index``).

    Parameters
    ----------
    ordinal : int or Device, optional
        The GPU's index among those the process sees; None: the current device.

    Attributes
    ----------
    ordinal : int
        The index (also :attr:`id`).
    name : str
        The GPU's name, as the driver reports it.
    compute_capability : tuple of int
        (major, minor), e.g. (9, 0) for an H100.
    sm_count : int
        Streaming multiprocessors.
    total_memory : int
        Bytes of device memory.
    max_smem_optin : int
        The most shared memory a block may opt in to, in bytes.
    l2_bytes : int
        L2 cache size, in bytes.
    driver_version : int
        The driver's CUDA version as the driver API gives it (13000 for 13.0).
    handle, context
        The driver's device handle and its primary context.
    lock : threading.RLock
        Held by gpumat while it changes the device's memory or loads its modules.
    modules, functions, scratch : dict
        Loaded kernel modules, kernel functions and operations' scratch objects (gpumat's).
    memory : object
        gpumat's memory pool of this device (None until the first allocation).

    Raises
    ------
    TypeError
        An index that is not an integer.
    NoDeviceError
        No usable GPU, or no GPU of that index.

    Examples
    --------
    >>> d = gm.Device(0)  # doctest: +GPU
    >>> d.id, d is gm.Device(0)
    (0, True)
    >>> with d:
    ...     A = gm.Matrix.zeros(2, 2)
    >>> A.device is d
    True
    """

    __slots__ = (
        "ordinal",
        "handle",
        "context",
        "name",
        "compute_capability",
        "sm_count",
        "total_memory",
        "max_smem_optin",
        "l2_bytes",
        "driver_version",
        "lock",
        "modules",
        "functions",
        "scratch",
        "memory",
        "_context_int",
        "_peers",
        "__weakref__",
    )

    def __new__(cls, ordinal: int | None = None):
        if type(ordinal) is int:  # the common call: a plain index, of a GPU met before at once
            dev = _devices.get(ordinal)
            if dev is not None:
                return dev
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
        self.compute_capability = (
            attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
            attr("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"),
        )
        self.sm_count = attr("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT")
        self.total_memory = check(driver.cuDeviceTotalMem(handle))
        self.max_smem_optin = attr("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
        self.l2_bytes = attr("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE")
        self.driver_version = check(driver.cuDriverGetVersion())
        # Reentrant: an operation holding it may allocate, and allocation takes it too. Finalizers never
        # take it (they only queue), so no re-entry can find a half-updated structure.
        self.lock = threading.RLock()
        self.modules: dict[str, object] = {}  # module name -> CUmodule in this device's context
        self.functions: dict[str, object] = {}  # kernel name -> CUfunction
        self.scratch: dict[str, object] = {}  # operation -> its per-device scratch object
        self.memory = None  # gpumat.memory.pool.Pool, made on first allocation
        self._peers: set[int] = set()

    # facts -----------------------------------------------------------------------------------
    @property
    def id(self) -> int:
        """The device's index (its ``ordinal``)."""
        return self.ordinal

    @property
    def arch(self) -> int:
        """The compute capability as one number: 90 for 9.0."""
        return self.compute_capability[0] * 10 + self.compute_capability[1]

    @property
    def driver_version_str(self) -> str:
        """The driver's CUDA version as text, such as ``"13.0"``."""
        return f"{self.driver_version // 1000}.{self.driver_version % 1000 // 10}"

    def __index__(self) -> int:
        return self.ordinal

    def __repr__(self) -> str:
        return f"<gpumat.Device {self.ordinal}: {self.name}, sm_{self.arch}>"

    # the context -----------------------------------------------------------------------------
    def activate(self) -> Device:
        """Make this device's context current in the calling thread (cheap when it already is).

        Unlike :meth:`use`, it does not change which device is the thread's current device for gpumat.

        Returns
        -------
        Device
            This device.

        Raises
        ------
        CudaError
            The driver could not make the context current.

        Examples
        --------
        >>> gm.Device(0).activate() is gm.Device(0)  # doctest: +GPU
        True
        """
        if _many_devices:  # another library may have switched the thread to another GPU's context
            current = check(driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
            if int(current) != self._context_int:
                check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        elif _tls.ctx is not self:
            check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        _tls.ctx = self
        return self

    def made_once(self, table: dict, name: str, make):
        """``table[name]``, made on first use by ``make(device)`` (gpumat's internal cache of per-device objects).

        Made with this device's context current and its lock held; later calls take no lock. gpumat keeps
        its loaded modules and its operations' scratch objects this way.

        Parameters
        ----------
        table : dict
            The cache (one of the device's dicts).
        name : str
            The key.
        make : callable
            ``make(device)`` builds the object.

        Returns
        -------
        object
            The cached object.

        Raises
        ------
        Exception
            Whatever ``make`` raises (nothing is cached then).

        Examples
        --------
        >>> d = gm.Device(0)  # doctest: +GPU
        >>> d.made_once({}, "answer", lambda dev: 42)
        42
        """
        item = table.get(name)
        if item is None:
            with self.lock:
                item = table.get(name)
                if item is None:
                    self.activate()
                    item = table[name] = make(self)
        return item

    def scratch_for(self, name: str, make):
        """The device's scratch object ``name`` (an operation's buffers), made once by ``make(device)``.

        Parameters
        ----------
        name : str
            The operation's key.
        make : callable
            ``make(device)`` builds the object on first use.

        Returns
        -------
        object
            The scratch object.

        Raises
        ------
        Exception
            Whatever ``make`` raises.

        Examples
        --------
        >>> d = gm.Device(0)  # doctest: +GPU
        >>> d.scratch_for("doc-example", lambda dev: [])
        []
        """
        return self.made_once(self.scratch, name, make)

    def use(self) -> Device:
        """Make this the current device of the calling thread, until another ``use()`` or a ``with`` block ends.

        Returns
        -------
        Device
            This device.

        Raises
        ------
        CudaError
            The driver could not make its context current.

        Examples
        --------
        >>> gm.Device(0).use() is gm.device()  # doctest: +GPU
        True
        """
        stack = _tls.stack
        if stack is None:
            stack = _tls.stack = []
        if stack:
            stack[-1] = self
        else:
            stack.append(self)
        return self.activate()

    def __enter__(self) -> Device:
        stack = _tls.stack
        if stack is None:
            stack = _tls.stack = []
        stack.append(self)
        return self.activate()

    def __exit__(self, *exc) -> None:
        _tls.stack.pop()
        device()  # the previous device's context is current again

    def synchronize(self) -> None:
        """Wait for all work on this device, on every stream.

        Raises
        ------
        CudaError
            A kernel or copy queued earlier failed.

        Examples
        --------
        >>> gm.Device(0).synchronize()  # doctest: +GPU
        """
        self.activate()
        check(driver.cuCtxSynchronize(), "cuCtxSynchronize")

    def default_mem_pool(self):
        """The driver's default memory pool of this GPU, where stream-ordered allocations come from.

        Returns
        -------
        cuda.bindings.driver.CUmemoryPool
            The pool's handle.

        Raises
        ------
        CudaError
            The driver call failed.

        Examples
        --------
        >>> pool = gm.Device(0).default_mem_pool()  # doctest: +GPU
        """
        return check(driver.cuDeviceGetDefaultMemPool(self.handle), "cuDeviceGetDefaultMemPool")

    def can_access_peer(self, other: Device) -> bool:
        """Whether this device can reach ``other``'s memory directly (peer to peer).

        Parameters
        ----------
        other : Device
            The other GPU.

        Returns
        -------
        bool
            The driver's answer.

        Raises
        ------
        CudaError
            The driver call failed.

        Examples
        --------
        >>> isinstance(gm.Device(0).can_access_peer(gm.Device(0)), bool)  # doctest: +GPU
        True
        """
        return bool(check(driver.cuDeviceCanAccessPeer(self.handle, other.handle), "cuDeviceCanAccessPeer"))

    def enable_peer_access(self, other: Device) -> bool:
        """Let kernels and copies on this device reach ``other``'s memory directly.

        Also grants access to ``other``'s stream-ordered pool, which context peer access does not cover.

        Parameters
        ----------
        other : Device
            The other GPU.

        Returns
        -------
        bool
            True when access is enabled (or already was); False where the GPUs cannot, or ``other`` is this device.

        Raises
        ------
        CudaError
            The driver refused.

        Examples
        --------
        >>> gm.Device(0).enable_peer_access(gm.Device(0))  # doctest: +GPU
        False
        """
        if other.ordinal in self._peers:
            return True
        if other is self or not self.can_access_peer(other):
            return False
        other_pool = other.default_mem_pool()  # before taking this device's lock: never hold two devices' locks
        with self.lock:
            self.activate()
            (err,) = driver.cuCtxEnablePeerAccess(other.context, 0)
            if err and err != CUresult.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
                raise_error(err, "cuCtxEnablePeerAccess")
            # stream-ordered pool allocations are not covered by context peer access: grant it on the pool
            desc = driver.CUmemAccessDesc()
            desc.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            desc.location.id = self.ordinal
            desc.flags = driver.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
            check(driver.cuMemPoolSetAccess(other_pool, [desc], 1), "cuMemPoolSetAccess")
            self._peers.add(other.ordinal)
        return True


def as_device(dev) -> Device:
    """A Device from a Device, an index, or None (the current device), its context current in this thread."""
    if dev is None:
        return device()
    return (dev if isinstance(dev, Device) else Device(dev)).activate()
