#!/usr/bin/env python3
"""The Python side of one gpumat call, on any machine: the driver replaced by a stand-in whose calls do
nothing (no GPU needed), so what is timed is gpumat's own code, the argument packing of each launch
included. Prints microseconds a call for the common calls, median of several rounds.

    PYTHONPATH=src python3 benchmarks/python_path.py [--profile CASE | --driver-calls]

What a call costs on a GPU machine is this plus the driver's own time (a launch from Python is about
5.7 us on the H100 host, ANCHORS.md): use it to find and compare Python-side costs, not as a result.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import itertools
import statistics
import sys
import time

import numpy as np
from cuda.bindings import driver as real

OK = (real.CUresult.CUDA_SUCCESS,)
ATTRIBUTES = {  # an H100's answers
    "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR": 9,
    "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR": 0,
    "CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT": 132,
    "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448,
    "CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE": 50 << 20,
}


class StandInDriver:
    """cuda.bindings.driver with every cu* call answered at once: device addresses from a counter (never
    touched), pinned host memory real (gpumat writes into it), handles as plain objects, the device an
    H100. Types and enums are the real module's."""

    def __init__(self):
        self._addresses = itertools.count(0x7F0000000000, 1 << 20)
        self._ids = itertools.count(1)
        self._host: dict[int, ctypes.Array] = {}

    def __getattr__(self, name):
        if not name.startswith("cu") or name.startswith("cuuint"):  # (types: cuuint64_t, cuuint32_t)
            return getattr(real, name)
        return lambda *args, **kwargs: OK

    def cuDeviceGetCount(self):
        return (*OK, 1)

    def cuDeviceGet(self, ordinal):
        return (*OK, real.CUdevice(ordinal))

    def cuDevicePrimaryCtxRetain(self, handle):
        return (*OK, real.CUcontext(0x1000))

    def cuCtxGetCurrent(self):
        return (*OK, real.CUcontext(0x1000))

    def cuDeviceGetAttribute(self, attribute, handle):
        return (*OK, ATTRIBUTES.get(attribute.name, 1))

    def cuDeviceGetName(self, length, handle):
        return (*OK, b"stand-in H100\0")

    def cuDeviceTotalMem(self, handle):
        return (*OK, 80 << 30)

    def cuDriverGetVersion(self):
        return (*OK, 13000)

    def cuDeviceGetDefaultMemPool(self, handle):
        return (*OK, real.CUmemoryPool(0x2000))

    def cuMemPoolGetAttribute(self, pool, attribute):
        return (*OK, real.cuuint64_t(0))

    def cuMemGetInfo(self):
        return (*OK, 70 << 30, 80 << 30)

    def cuMemAllocAsync(self, nbytes, stream):
        return (*OK, real.CUdeviceptr(next(self._addresses)))

    def cuMemHostAlloc(self, nbytes, flags):  # host memory gpumat writes: real memory, kept until freed
        buffer = ctypes.create_string_buffer(nbytes + 4096)
        address = ctypes.addressof(buffer) + (-ctypes.addressof(buffer) % 4096)
        self._host[address] = buffer
        return (*OK, address)

    def cuMemHostGetDevicePointer(self, address, flags):  # unified addressing: the host's own address
        return (*OK, real.CUdeviceptr(int(address)))

    def cuMemFreeHost(self, address):
        self._host.pop(int(address), None)
        return OK

    def cuMemAlloc(self, nbytes):
        return (*OK, real.CUdeviceptr(next(self._addresses)))

    def cuModuleLoadData(self, image):
        return (*OK, real.CUmodule(0x3000))

    def cuModuleGetFunction(self, module, name):
        return (*OK, real.CUfunction(0x4000))

    def cuEventCreate(self, flags):
        return (*OK, real.CUevent(0x5000 + next(self._ids)))

    def cuStreamCreateWithPriority(self, flags, priority):
        return (*OK, real.CUstream(0x6000 + next(self._ids)))

    def cuTensorMapEncodeTiled(self, dtype, rank, address, dims, strides, box, element_strides, *rest):
        # the map's words say what it describes (address, rank, sizes, strides in bytes, box), so that
        # tests comparing two routes' launches compare what their maps would make the copy engine read
        m = real.CUtensorMap()
        words = [int(address), int(rank), *(int(x) for x in (*dims, *strides, *box))][:16]
        m.opaque = words + [0] * (16 - len(words))
        return (*OK, m)

    def cuStreamGetId(self, stream):
        return (*OK, int(stream))

    def cuStreamGetCtx(self, stream):  # every stream is the one device's
        return (*OK, real.CUcontext(0x1000))

    def cuPointerGetAttribute(self, attribute, pointer):  # every pointer is the one device's
        return (*OK, 0)

    def cuEventElapsedTime(self, start, end):  # every timed span a millisecond
        return (*OK, 1.0)


def install() -> None:
    from gpumat.runtime import bindings

    stand_in = StandInDriver()
    object.__setattr__(bindings.driver, "_load", lambda: stand_in)
    for name in list(vars(bindings.driver)):
        if name != "_load":
            object.__delattr__(bindings.driver, name)


class ForeignStream:
    """Another library's stream, as CuPy and PyTorch hand theirs over."""

    def __cuda_stream__(self):
        return (0, 0xABC000)


class TorchLikeStream(ForeignStream):
    """A PyTorch stream object from torch.cuda.Stream(): one of PyTorch's pooled streams (an odd id), which
    PyTorch never destroys, so gpumat asks the driver which stream its handle names once."""

    stream_id = 0x23


class TorchLikeExternal(ForeignStream):
    """A PyTorch stream object naming a stream PyTorch does not own (torch.cuda.current_stream() inside a
    torch.cuda.stream(ExternalStream(h)) block; the id is the handle): asked each call."""

    stream_id = 0xDEF000

    def __cuda_stream__(self):
        return (0, self.stream_id)


TorchLikeStream.__module__ = TorchLikeExternal.__module__ = "torch.cuda.streams"


class DLPackProducer:
    """Another library's 64 x 64 float32 GPU array as DLPack 1.0 hands it over: a new capsule a call, over
    the same (fake) memory, with a deleter that does nothing."""

    def __init__(self):
        from gpumat import _interop

        self.interop = _interop
        self.shape = (ctypes.c_int64 * 2)(64, 64)
        self.strides = (ctypes.c_int64 * 2)(64, 1)
        self.deleter = _interop.DELETER(lambda address: None)
        self.live = collections.deque(maxlen=64)  # the managed tensors of the last calls, kept alive

    def __dlpack_device__(self):
        return self.interop.KDL_CUDA, 0

    def __dlpack__(self, stream=None, max_version=None, copy=None):
        i = self.interop
        managed = i.DLManagedTensorVersioned()
        managed.version, managed.deleter = i.DLPackVersion(1, 0), self.deleter
        t = managed.dl_tensor
        t.data, t.ndim, t.shape, t.strides, t.byte_offset = 0x7E0000000000, 2, self.shape, self.strides, 0
        t.device, t.dtype = i.DLDevice(i.KDL_CUDA, 0), i.DLDataType(2, 32, 1)
        self.live.append(managed)
        return i._api.PyCapsule_New(ctypes.addressof(managed), i.NAME_V, i.CAPSULE_DESTRUCTOR())


def cases(gm) -> dict:
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (64, 64)).astype(np.float32)
    A, B, C = gm.Matrix.from_numpy(a), gm.Matrix.from_numpy(a), gm.Matrix.empty(64, 64)
    batch = gm.Matrix.from_numpy(rng.uniform(-1, 1, (8, 64, 64)).astype(np.float32))
    H = gm.Matrix.from_numpy(rng.uniform(-1, 1, (256, 256)).astype(np.float16))
    D = gm.Matrix.from_numpy(rng.uniform(-1, 1, (64, 64)))
    T = gm.Matrix.empty(64, 64)
    int8 = gm.Matrix.from_numpy(rng.integers(-128, 128, (256, 256)), dtype=np.int8)
    bias = gm.Matrix.from_numpy(rng.uniform(-1, 1, (1, 64)).astype(np.float32))
    own, foreign, torch_stream, torch_external = gm.Stream(), ForeignStream(), TorchLikeStream(), TorchLikeExternal()
    producer = DLPackProducer()
    return {
        "matmul 64^3": lambda: gm.matmul(A, B),
        "matmul 64^3 into out=": lambda: gm.matmul(A, B, out=C),
        "A @ B": lambda: A @ B,
        "matmul 64^3, gm.Stream": lambda: gm.matmul(A, B, stream=own),
        "matmul 64^3, another library's stream": lambda: gm.matmul(A, B, stream=foreign),
        "matmul 64^3, a PyTorch stream": lambda: gm.matmul(A, B, stream=torch_stream),
        "matmul 64^3, a PyTorch object for an external stream": lambda: gm.matmul(A, B, stream=torch_external),
        "matmul A.T @ B": lambda: gm.matmul(A.T, B),
        "matmul + bias + relu": lambda: gm.matmul(A, B, bias=bias, activation="relu"),
        "matmul alpha, beta into out=": lambda: gm.matmul(A, B, out=C, alpha=0.5, beta=1.0),
        "batched 8 x 64^3": lambda: gm.matmul(batch, batch),
        "batched 8 x 64^3 @ shared 2-D": lambda: gm.matmul(batch, B),
        "matmul 256^3 float16 (TMA descriptors)": lambda: gm.matmul(H, H),
        "matmul H.T @ H float16 (A read transposed in place)": lambda: gm.matmul(H.T, H),
        "matmul 64^3 float64": lambda: gm.matmul(D, D),
        "matmul 256^3 int8 -> int32, x @ W.T (TMA descriptors)": lambda: int8 @ int8.T,
        "matmul 256^3 int8, B row-major (transposed into scratch)": lambda: int8 @ int8,
        "transpose 64x64": lambda: gm.transpose(A),
        "transpose 64x64 into out=": lambda: gm.transpose(A, out=T),
        "astype float64": lambda: A.astype(np.float64),
        "dot 64x64": lambda: gm.dot(A, B),
        "from_dlpack of another library's 64x64": lambda: gm.from_dlpack(producer),
        "upload 64x64 (from_numpy)": lambda: gm.Matrix.from_numpy(a),
        "download 64x64 (to_numpy)": lambda: A.to_numpy(),
    }


def driver_calls(call, calls: int = 100) -> dict[str, float]:
    """The driver functions one call makes, on average over `calls` (after a warm-up that resolves every
    name the call uses): on a GPU machine each costs about a microsecond from Python."""
    from gpumat.runtime import bindings

    for _ in range(3):
        call()
    module, counts = bindings.driver, collections.Counter()
    resolved = {name: f for name, f in vars(module).items() if name.startswith("cu") and callable(f)}

    def counting(name, f):
        def counted(*args, **kwargs):
            counts[name] += 1
            return f(*args, **kwargs)

        return counted

    for name, f in resolved.items():
        object.__setattr__(module, name, counting(name, f))
    try:
        for _ in range(calls):
            call()
    finally:
        for name, f in resolved.items():
            object.__setattr__(module, name, f)
    return {name: count / calls for name, count in sorted(counts.items())}


def per_call_us(call, calls: int = 3000, rounds: int = 5) -> float:
    for _ in range(min(200, calls)):
        call()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="a case to run under cProfile instead of timing every case")
    parser.add_argument("--calls", type=int, default=3000, help="calls a round (default 3000)")
    parser.add_argument("--driver-calls", action="store_true", help="print the driver calls each case makes")
    args = parser.parse_args()
    install()
    import gpumat as gm

    table = cases(gm)
    if args.profile:
        import cProfile
        import pstats

        call = table[args.profile]
        cProfile.runctx("for _ in range(20000): call()", globals(), {"call": call}, "/tmp/python_path.prof")
        pstats.Stats("/tmp/python_path.prof").sort_stats("tottime").print_stats(25)
        return 0
    width = max(map(len, table))
    if args.driver_calls:
        for name, call in table.items():
            made = ", ".join(f"{fn} {count:g}" for fn, count in driver_calls(call).items())
            print(f"{name:<{width}}  {made}", flush=True)
        return 0
    for name, call in table.items():
        print(f"{name:<{width}}  {per_call_us(call, args.calls):6.2f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
