"""Bad input to gpumat's public API, run against the stream-order model (tests/stream_model.py) in place of
the driver: each case must raise the expected exception, with a message, before any GPU work (an
allocation from the pool, a launch, a copy, a fill or an event recorded); afterwards the library still
works, nothing is left allocated, and the model saw nothing out of order.

Run as `python tests/bad_input.py` (tests/test_bad_input_cpu.py does): prints one JSON line, each case's
outcome and the checks after them all.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stream_model  # noqa: E402

model = stream_model.install()

import numpy as np  # noqa: E402

import gpumat as gm  # noqa: E402
from gpumat import _interop  # noqa: E402
from gpumat.memory import pool  # noqa: E402

WORK = ("cuMemAllocAsync", "cuLaunchKernel", "cuMemcpy2DAsync", "cuMemcpyDtoDAsync", "cuMemsetD2D8Async")
WORK += ("cuMemsetD2D16Async", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuEventRecord")
pool_allocs = [0]
_alloc = pool.Pool.alloc


def _counting_alloc(self, *args, **kwargs):
    pool_allocs[0] += 1
    return _alloc(self, *args, **kwargs)


pool.Pool.alloc = _counting_alloc


def work_done() -> tuple:
    return (*(model.calls[name] for name in WORK), pool_allocs[0])


class Interface:
    """Another library's array, as its __cuda_array_interface__ says (what a malformed one says too)."""

    def __init__(self, cai):
        self.__cuda_array_interface__ = cai


class Capsule:
    """A DLPack producer whose capsule comes from a gpumat export, its tensor edited first."""

    def __init__(self, matrix: gm.Matrix, edit):
        self.capsule = matrix.__dlpack__(max_version=(1, 0))
        address = _interop._api.PyCapsule_GetPointer(self.capsule, _interop.NAME_V)
        edit(_interop.DLManagedTensorVersioned.from_address(address).dl_tensor)

    def __dlpack_device__(self):
        return 2, 0

    def __dlpack__(self, stream=None, max_version=None):
        return self.capsule


class StreamObject:
    """A stream object of another library that names its handle by an attribute (as PyTorch's do)."""

    def __init__(self, **attributes):
        self.__dict__.update(attributes)


def cases(A, B, V, P):
    """(name, expected exception, call). A and B: 8 x 8 float32; V: a 3 x 8 x 8 batch; P: 512^2 float32."""
    cai = A.__cuda_array_interface__
    closed_stream, closed_event = gm.Stream(), gm.Event()
    closed_stream.close()
    closed_event.close()
    owner = gm.Matrix.zeros(8, 8)
    view = owner[0:4, :]
    owner.free()
    broadcast = dict(gm.Matrix.empty(8, 8).__cuda_array_interface__, shape=(3, 8, 8), strides=(0, 32, 4))
    tf32_plan = gm.matmul_plan(P, P, precision="tf32")
    naive_plan = gm.matmul_plan(P, P, algorithm="naive")
    wide, tall = gm.Matrix.empty(100, 200), gm.Matrix.empty(200, 100)

    def dlpack(edit):
        return lambda: gm.from_dlpack(Capsule(A, edit))

    def shape0(value):
        def edit(t):
            t.shape[0] = value

        return edit

    def null(t):
        t.data = None

    def imported(**changes):
        return lambda: gm.Matrix.from_cuda_array(Interface({**cai, **changes}))

    def into_broadcast(op, *operands):
        return lambda: op(*operands, out=gm.Matrix.from_cuda_array(Interface(broadcast)))

    def raw(value):
        return lambda: gm.Matrix.from_cuda_array(Interface(value))

    f64_empty = gm.Matrix.empty(0, 4, dtype=np.float64)
    complex_data = np.ones((2, 2), complex)
    f32_out = np.zeros((8, 8), np.float32)
    return [
        # imports that describe memory wrongly
        ("CAI: NULL data, 8 x 8", ValueError, imported(data=(0, False))),
        ("CAI: typestr None", TypeError, imported(typestr=None)),
        ("CAI: negative shape", ValueError, imported(shape=(-8, 8))),
        ("CAI: float shape", TypeError, imported(shape=(8.9, 8))),
        ("CAI: no shape", TypeError, raw({"typestr": "<f4", "data": (0, False)})),
        ("CAI: not a dict", TypeError, raw([1, 2])),
        ("CAI: strides of another rank", ValueError, imported(strides=(4,))),
        ("CAI: stream -7", ValueError, imported(stream=-7)),
        ("CAI: stream True", TypeError, imported(stream=True)),
        ("DLPack: NULL data, 8 x 8", ValueError, dlpack(null)),
        ("DLPack: negative shape", ValueError, dlpack(shape0(-3))),
        # outputs and operands
        ("transpose into a broadcast batch", ValueError, into_broadcast(gm.transpose, V)),
        ("matmul into a broadcast batch", ValueError, into_broadcast(gm.matmul, V, A)),
        ("plan, contradicting precision", ValueError, lambda: gm.matmul(P, P, plan=tf32_plan, precision="float32")),
        ("plan, contradicting algorithm", ValueError, lambda: gm.matmul(P, P, plan=naive_plan, algorithm="sgemm64x64")),
        ("narrow_cols on a wide matrix", ValueError, lambda: gm.transpose(wide, algorithm="narrow_cols")),
        ("narrow_rows on a tall matrix", ValueError, lambda: gm.transpose(tall, algorithm="narrow_rows")),
        ("copy of a freed view", gm.FreedMatrixError, lambda: view.copy()),
        ("astype of a freed view", gm.FreedMatrixError, lambda: view.astype(np.float32)),
        ("to_numpy(dtype=) into a wrong out", ValueError, lambda: A.to_numpy(dtype=np.float64, out=f32_out)),
        ("matmul(None, None)", TypeError, lambda: gm.matmul(None, None)),
        ("matmul_plan(None, None)", TypeError, lambda: gm.matmul_plan(None, None)),
        ("transpose(None)", TypeError, lambda: gm.transpose(None)),
        ("dot(None, None)", TypeError, lambda: gm.dot(None, None)),
        ("dot of empty matrices of two dtypes", TypeError, lambda: gm.dot(gm.Matrix.empty(0, 4), f64_empty)),
        # numbers
        ("alpha = 10**400", ValueError, lambda: gm.matmul(A, B, alpha=10**400)),
        ("splits = 0", ValueError, lambda: gm.matmul_plan(P, P, algorithm="sgemm128x128", splits=0)),
        ("splits = True", ValueError, lambda: gm.matmul_plan(P, P, algorithm="sgemm128x128", splits=True)),
        ("set_cache_limit(2**64)", ValueError, lambda: gm.set_cache_limit(2**64)),
        ("Stream(priority='high')", TypeError, lambda: gm.Stream(priority="high")),
        ("Stream(priority=10**30)", ValueError, lambda: gm.Stream(priority=10**30)),
        # dtypes
        ("astype(None)", TypeError, lambda: A.astype(None)),
        ("from_numpy(complex, dtype=float32)", TypeError, lambda: gm.Matrix.from_numpy(complex_data, dtype=np.float32)),
        ("zeros(dtype='>f4')", TypeError, lambda: gm.Matrix.zeros(2, 2, dtype=">f4")),
        # streams and events
        ("stream object with ptr -1", ValueError, lambda: gm.matmul(A, B, stream=StreamObject(ptr=-1))),
        ("stream object, cuda_stream True", TypeError, lambda: gm.matmul(A, B, stream=StreamObject(cuda_stream=True))),
        ("closed stream: synchronize", ValueError, closed_stream.synchronize),
        ("closed stream: query", ValueError, closed_stream.query),
        ("closed stream: wait", ValueError, lambda: closed_stream.wait(gm.Event())),
        ("closed stream: with", ValueError, lambda: closed_stream.__enter__()),
        ("closed event: synchronize", ValueError, closed_event.synchronize),
        ("closed event: record", ValueError, lambda: closed_event.record()),
    ]


def _outcome(call, expected) -> str:
    try:
        call()
    except Exception as e:  # every kind is reported: the test compares it with the expected one
        kind = "expected" if type(e) is expected else type(e).__name__
        return kind if str(e) else f"{kind}, without a message"
    return "no exception"


def main() -> int:
    rng = np.random.default_rng(0)
    A, B = (gm.Matrix.from_numpy(rng.uniform(-1, 1, (8, 8)).astype(np.float32)) for _ in range(2))
    V = gm.Matrix.from_numpy(rng.uniform(-1, 1, (3, 8, 8)).astype(np.float32))
    P = gm.Matrix.from_numpy(rng.uniform(-1, 1, (512, 512)).astype(np.float32))
    gm.synchronize()
    used = gm.memory_info()["used"]
    outcomes = {}
    for name, expected, call in cases(A, B, V, P):
        before = work_done()
        outcome = _outcome(call, expected)
        outcomes[name] = {"outcome": outcome, "gpu work before it": work_done() != before}
    # a batch of contiguous products whose rows together pass the kernels' 32-bit M: each product is one of
    # the launch's batch, not one tall product (no exception expected)
    tall, one = gm.Matrix.empty((2**16, 2**15 + 1, 1)), gm.Matrix.empty(1, 1)
    after = {"batch beyond a 32-bit M runs": _outcome(lambda: gm.matmul(tall, one).free(), None)}
    tall.free()
    one.free()
    # the library still works, and nothing is left allocated
    C = gm.matmul(A, B)
    T = gm.transpose(V)
    after["works after"] = C.shape == (8, 8) and T.shape == (3, 8, 8)
    for m in (C, T):
        m.free()
    import gc

    gc.collect()
    gm.synchronize()
    gm.release_cached()
    after["used back to its start"] = gm.memory_info()["used"] == used
    for m in (A, B, V, P):
        m.free()
    gm.synchronize()
    after["violations"] = sorted(set(model.violations))
    print(json.dumps({"cases": outcomes, "after": after}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
