"""Kernels: each entry point is declared once, with its parameter types; fatbins load lazily.

Signatures use struct codes, one a parameter: P pointer, q int64, i int32, f float32, d float64, T a 128-byte
struct passed by value (a CUtensorMap, given as 128 bytes; 64-byte aligned like the kernel's). A CPU test
checks every declaration against the PTX parameter list that build_ptx.py records in the manifest.
The launch path packs arguments with a precompiled struct into a buffer the kernel-parameter
pointer array already points into, so a launch costs one pack_into and one cuLaunchKernel. A
FixedLaunch is a launch a cache repeats (a cached plan's): its geometry and trailing arguments are
settled once, so a call packs only the arguments that change.
"""

from __future__ import annotations

import ctypes
import os
import struct
import threading
from functools import cache

from .bindings import driver
from .devices import device
from .devices import device as _current
from .errors import NoDeviceError, check

# os.path, not pathlib: the manifest and fatbins are read at the first launch, and pathlib and json (about
# a sixth of gpumat's import time) are imported then, not with the package
KERNEL_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "kernels")
PTX_TYPES = {
    "P": "u64",
    "q": "u64",
    "i": "u32",
    "f": "f32",
    "d": "f64",
    "T": "b8[128]",
}  # what each code looks like in PTX
_FORMATS = {
    "P": ("Q", 8),
    "q": ("q", 8),
    "i": ("i", 4),
    "f": ("f", 4),
    "d": ("d", 8),
    "T": ("128s", 64),
}  # struct code, alignment
DECLARED: dict[str, Kernel] = {}


@cache
def manifest() -> dict:
    import json

    path = os.path.join(KERNEL_DIR, "manifest.json")
    if not os.path.exists(path):
        source_tree = os.path.dirname(os.path.dirname(os.path.dirname(KERNEL_DIR)))
        if os.path.exists(os.path.join(source_tree, "build_ptx.py")):
            raise FileNotFoundError(
                f"gpumat's kernels are not built ({path} is missing): run `make kernels` in "
                f"{source_tree} (it finds a CUDA compiler, or installs one from the package index)"
            )
        raise FileNotFoundError(
            f"this gpumat has no kernels ({path} is missing), so it cannot run: reinstall it from a wheel that "
            "carries them, or from the source (`pip install --force-reinstall --no-deps <sdist or source tree>` "
            "compiles them; it needs nvcc, or the package index to fetch one)"
        )
    with open(path) as f:
        return json.load(f)


def required_driver_version() -> int:
    major, minor = (int(x) for x in manifest()["cuda_version"].split("."))
    return major * 1000  # CUDA's minor-version compatibility: any driver of the same major runs the code


def load_module(name: str, dev=None):
    """The module in `dev`'s context (the current device by default), loaded on first use."""
    dev = dev or device()
    return dev.made_once(dev.modules, name, lambda d: _load_module(name, d))


def _load_module(name: str, dev):
    need = required_driver_version()
    if dev.driver_version < need:
        raise NoDeviceError(
            f"the NVIDIA driver supports CUDA {dev.driver_version_str}, but gpumat's kernels were built with "
            f"CUDA {manifest()['cuda_version']}: install a driver for CUDA {need // 1000}.0 or newer"
        )
    info = manifest()["modules"].get(name)
    if info is None:
        raise FileNotFoundError(f"kernel module {name!r} is not in the manifest: rebuild with `make`")
    with open(os.path.join(KERNEL_DIR, info["fatbin"]), "rb") as f:
        image = f.read()
    return check(driver.cuModuleLoadData(image), f"cuModuleLoadData({name})")


def code_arch(arch: int) -> str:
    """Which code in the fatbins a GPU of compute capability `arch` (e.g. 90) runs."""
    built = [int(a) for a in manifest()["archs"]]
    if arch in built:
        return f"sm_{arch}"
    same_major = [a for a in built if a // 10 == arch // 10 and a <= arch]
    return f"sm_{max(same_major)}" if same_major else f"compute_{min(built)} PTX (JIT)"


@cache
def runs_sm90_code(arch: int) -> bool:
    """Whether a GPU of compute capability `arch` runs machine code built for sm_90 or later (code_arch), not
    PTX of an older target compiled on the fly, whose sm_90 parts (griddepcontrol.wait) were left out."""
    code = code_arch(arch)
    return code.startswith("sm_") and int(code[3:]) >= 90


def _layout(signature: str) -> tuple[list[str], list[int], int]:
    """Each parameter at its natural alignment, as C lays out a parameter list: its struct format with
    explicit padding bytes before it, its offset, and the list's size."""
    pieces, offsets, end = [], [], 0
    for code in signature:
        code_fmt, align = _FORMATS[code]
        pad = -end % align
        pieces.append(f"{pad}x" * bool(pad) + code_fmt)
        offsets.append(end + pad)
        end += pad + struct.calcsize("=" + code_fmt)
    return pieces, offsets, end


def _argument_buffer(offsets: list[int], size: int):
    """A buffer for a parameter list, the offset in it where the list starts (64 bytes aligned, for the T
    ones) and the kernel-parameter pointer array into it."""
    buf = ctypes.create_string_buffer(max(size, 1) + 64)
    base = -ctypes.addressof(buf) % 64
    ptrs = (ctypes.c_void_p * max(len(offsets), 1))(*[ctypes.addressof(buf) + base + off for off in offsets])
    return buf, base, ptrs


class Kernel:
    """One extern "C" entry point: `kernel(grid, block, *args, smem=0, stream=0, device=None)` launches it
    on `stream` (a raw handle) of `device` (the current one by default)."""

    __slots__ = (
        "module",
        "name",
        "signature",
        "dynamic_smem",
        "_pack",
        "_buf",
        "_base",
        "_ptrs",
        "_ptrs_addr",
        "_lock",
        "_configs",
        "waits_for_previous",
    )

    def __init__(self, module: str, name: str, signature: str, dynamic_smem: int = 0, waits_for_previous: bool = False):
        """waits_for_previous: the kernel waits for the grid before it (gpumat::wait_for_previous_grid, on sm_90
        and later) before it touches global memory, so it may be launched as a programmatic dependent of the
        kernel before it (`dependent=True`); tests/test_kernels_cpu.py checks the declaration against the
        compiled code."""
        if name in DECLARED:
            raise ValueError(f"kernel {name} declared twice")
        self.module, self.name, self.signature, self.dynamic_smem = module, name, signature, dynamic_smem
        self.waits_for_previous = waits_for_previous
        self._pack = self._buf = self._base = self._ptrs = self._ptrs_addr = None  # laid out at the first launch
        self._lock = threading.Lock()
        self._configs: dict = {}  # (*grid, *block, smem, cluster, dependent) -> its cuLaunchKernelEx configuration
        DECLARED[name] = self

    def _lay_out(self):
        """The argument buffer, laid out once, at the first launch (a program uses few of the declared
        kernels, and laying out all of them would add to the import). Returns the packer."""
        pieces, offsets, size = _layout(self.signature)
        self._buf, self._base, self._ptrs = _argument_buffer(offsets, size)
        self._ptrs_addr = ctypes.addressof(self._ptrs)
        self._pack = struct.Struct("=" + "".join(pieces)).pack_into  # set last: a launch that sees it sees the rest
        return self._pack

    def launched_dependent(self, dependent=None) -> bool:
        """Whether a launch that asks `dependent` goes out as a programmatic dependent (where the device runs
        sm_90 code): None, as the kernel is declared (waits_for_previous); True only for a kernel declared
        so, a ValueError otherwise. The one rule Kernel.__call__ and FixedLaunch follow."""
        if dependent is None:
            return self.waits_for_previous
        if dependent and not self.waits_for_previous:
            raise ValueError(f"{self.name} does not wait for the kernel before it: it cannot be launched dependent")
        return bool(dependent)

    def function(self, dev=None):
        """The CUfunction in `dev`'s context (current device by default), looked up once per device."""
        dev = dev or device()
        fn = dev.functions.get(self.name)
        if fn is None:
            fn = check(driver.cuModuleGetFunction(load_module(self.module, dev), self.name.encode()), self.name)
            if self.dynamic_smem > 48 * 1024:
                # (capped at what the GPU gives: a kernel whose launches size their shared memory asks the
                # most any of them may; the planner refuses a plan that needs more than the GPU has)
                check(
                    driver.cuFuncSetAttribute(
                        fn,
                        driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        min(self.dynamic_smem, dev.max_smem_optin),
                    ),
                    f"cuFuncSetAttribute({self.name})",
                )
            dev.functions[self.name] = fn
        return fn

    def __call__(
        self, grid, block, *args, smem: int = 0, stream: int = 0, device=None, dependent=None, cluster: int = 1
    ) -> None:
        """Launch; `dependent`: where the GPU runs sm_90 machine code or later (runs_sm90_code), as a programmatic
        dependent of the kernel queued before it on `stream`: its launch need not wait for that grid's
        completion and memory flush, only for its blocks to exit. Only for a kernel declared
        waits_for_previous, whose griddepcontrol.wait then holds it until the earlier grid has completed
        and its memory is visible; elsewhere a plain launch. None (the default): as the kernel is declared,
        so every kernel that waits is launched dependent. `cluster`: blocks a thread-block cluster along x
        (sm_90 and later; the grid's x a multiple of it)."""
        dependent = self.launched_dependent(dependent)
        dev = device or _current()
        fn = dev.functions.get(self.name)
        if fn is None:
            fn = self.function(dev)
        with self._lock:
            pack = self._pack
            if pack is None:
                pack = self._lay_out()
            pack(self._buf, self._base, *args)
            dependent = dependent and runs_sm90_code(dev.arch)
            if dependent or cluster > 1:
                key = (*grid, *block, smem, cluster, dependent)
                config = self._configs.get(key)
                if config is None:
                    config = self._configs[key] = launch_config(grid, block, smem, cluster, dependent)
                config.hStream = stream
                (err,) = driver.cuLaunchKernelEx(config, fn, self._ptrs_addr, 0)
            else:
                (err,) = driver.cuLaunchKernel(
                    fn, grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, stream, self._ptrs_addr, 0
                )
        if err:
            call = "cuLaunchKernelEx" if dependent or cluster > 1 else "cuLaunchKernel"
            check((err,), f"{call}({self.name}, grid={tuple(grid)}, block={tuple(block)})")

    def __repr__(self) -> str:
        return f"Kernel({self.module}.{self.name}({self.signature}))"


def launch_config(grid, block, smem: int, cluster: int = 1, dependent: bool = False):
    """A cuLaunchKernelEx configuration (its stream set at each launch): clusters of `cluster` blocks along x,
    and/or a programmatic dependent launch. Made once a geometry: building one took 12 us of Python."""
    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = smem
    attrs = []
    if dependent:
        serialize = driver.CUlaunchAttribute()
        serialize.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        serialize.value.programmaticStreamSerializationAllowed = 1
        attrs.append(serialize)
    if cluster > 1:
        dims = driver.CUlaunchAttribute()
        dims.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        dims.value.clusterDim.x, dims.value.clusterDim.y, dims.value.clusterDim.z = cluster, 1, 1
        attrs.append(dims)
    config.attrs = attrs
    config.numAttrs = len(attrs)
    return config


def max_active_clusters(kernel: Kernel, block, smem: int, cluster: int, dev=None) -> int:
    """How many clusters of `cluster` blocks of `kernel` (block, shared memory) the GPU runs at once."""
    dev = dev or _current()
    config = launch_config((cluster, 1, 1), block, smem, cluster)
    err, count = driver.cuOccupancyMaxActiveClusters(kernel.function(dev), config)
    check((err,), f"cuOccupancyMaxActiveClusters({kernel.name})")
    return count


class FixedLaunch:
    """A launch that a cache repeats (a cached matmul plan's): one kernel with its geometry and its
    trailing arguments fixed. The trailing arguments are packed once into the launch's own buffer, so a
    call packs only the leading ones: `launch(dev, stream, *leading)`, with no keyword arguments to parse
    and nothing looked up but the device's function. `dependent`: as Kernel.__call__'s, a programmatic
    dependent of the kernel before it where the device runs sm_90 machine code (runs_sm90_code), a
    plain launch elsewhere; only for a kernel declared waits_for_previous, and by default for every such
    kernel."""

    __slots__ = (
        "kernel",
        "dims",
        "cluster",
        "tail",
        "_pack",
        "_buf",
        "_base",
        "_ptrs",
        "_ptrs_addr",
        "_lock",
        "_config",
        "_dependent_config",
        "dependent",
    )

    def __init__(
        self, kernel: Kernel, grid, block, smem: int, leading: int, tail: tuple, cluster: int = 1, dependent=None
    ):
        signature = kernel.signature
        if leading + len(tail) != len(signature):
            raise ValueError(f"{kernel.name} takes {len(signature)} arguments, not {leading} + {len(tail)}")
        dependent = kernel.launched_dependent(dependent)
        self.kernel, self.dims, self.cluster, self.tail = kernel, (*grid, *block, smem), cluster, tuple(tail)
        self.dependent = bool(dependent)
        pieces, offsets, size = _layout(signature)
        self._buf, self._base, self._ptrs = _argument_buffer(offsets, size)
        placeholders = (bytes(128) if code == "T" else 0 for code in signature[:leading])  # packed each call
        struct.pack_into("=" + "".join(pieces), self._buf, self._base, *placeholders, *tail)
        self._pack = struct.Struct("=" + "".join(pieces[:leading])).pack_into
        self._ptrs_addr = ctypes.addressof(self._ptrs)
        self._lock = threading.Lock()
        # a cluster or dependent launch goes through cuLaunchKernelEx, its configurations made once
        self._config = launch_config(grid, block, smem, cluster) if cluster > 1 else None
        self._dependent_config = launch_config(grid, block, smem, cluster, True) if dependent else None

    def __call__(self, dev, stream: int, *leading) -> None:
        kernel = self.kernel
        fn = dev.functions.get(kernel.name) or kernel.function(dev)
        dependent = self.dependent and runs_sm90_code(dev.arch)
        with self._lock:
            self._pack(self._buf, self._base, *leading)
            config = self._dependent_config if dependent else self._config
            if config is None:
                (err,) = driver.cuLaunchKernel(fn, *self.dims, stream, self._ptrs_addr, 0)
            else:
                config.hStream = stream
                (err,) = driver.cuLaunchKernelEx(config, fn, self._ptrs_addr, 0)
        if err:
            check((err,), f"launch of {kernel.name} (dims={self.dims})")

    def __repr__(self) -> str:
        dims, cluster = self.dims, f", cluster={self.cluster}" if self.cluster > 1 else ""
        dependent = ", dependent" if self.dependent else ""
        return (
            f"FixedLaunch({self.kernel.name}, grid={dims[:3]}, block={dims[3:6]}, smem={dims[6]}{cluster}{dependent})"
        )
