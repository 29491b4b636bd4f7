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

WORK = ("cuMemAllocAsync", "cuLaunchKernel", "cuLaunchKernelEx", "cuMemcpy2DAsync", "cuMemcpyDtoDAsync")
WORK += ("cuMemsetD2D8Async",)
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


def cases(A, B, V, P, kept: list):
    """(name, expected exception or None for a call that must work, a word its message must hold, call).
    A and B: 8 x 8 float32; V: a 3 x 8 x 8 batch; P: 512^2 float32. `kept`: matrices to free at the end."""
    cai = A.__cuda_array_interface__
    closed_stream, closed_event = gm.Stream(), gm.Event()
    closed_stream.close()
    closed_event.close()
    owner = gm.Matrix.zeros(8, 8)
    view = owner[0:4, :]
    owner.free()
    base = gm.Matrix.empty(8, 8)  # what another library's broadcast view (batch stride 0) describes
    broadcast = dict(base.__cuda_array_interface__, shape=(3, 8, 8), strides=(0, 32, 4))
    tf32_plan = gm.matmul_plan(P, P, precision="tf32")
    naive_plan = gm.matmul_plan(P, P, algorithm="naive")
    row = gm.Matrix.empty(1, 512)
    row_plan = gm.matmul_plan(row, P, precision="tf32")  # a matrix-vector shape: exact FP32 runs it
    row_tf32_plan = gm.matmul_plan(row, P, algorithm="tf32_128x128", precision="tf32")  # named: TF32 runs it
    wide, tall = gm.Matrix.empty(100, 200), gm.Matrix.empty(200, 100)
    wide_out = gm.Matrix.empty(200, 100).T  # a transposed out: the kernel moves storage to storage
    kept += [base, row, wide, tall, wide_out]

    def dlpack(edit):
        return lambda: gm.from_dlpack(Capsule(A, edit))

    def shape0(value):
        def edit(t):
            t.shape[0] = value

        return edit

    def null(t):
        t.data = None

    def dimensions(value):
        def edit(t):
            t.ndim = value

        return edit

    def no_shape(t):
        t.shape = None

    def imported(**changes):
        return lambda: gm.Matrix.from_cuda_array(Interface({**cai, **changes}))

    def into_broadcast(op, *operands):
        return lambda: op(*operands, out=gm.Matrix.from_cuda_array(Interface(broadcast)))

    def raw(value):
        return lambda: gm.Matrix.from_cuda_array(Interface(value))

    def works(call):
        return lambda: kept.append(call())

    f64_empty = gm.Matrix.empty(0, 4, dtype=np.float64)
    S = gm.CSRMatrix.from_dense(np.eye(8, dtype=np.float32))
    kept.append(S)
    host = np.ones((8, 8), np.float32)
    reversed_row = np.ones((3, 8), np.float32)[::-1][:1]  # one row, a negative row stride
    pinned_row = gm.pinned_empty(8)
    pinned_row[:] = 1
    complex_data = np.ones((2, 2), complex)
    f32_out = np.zeros((8, 8), np.float32)
    return [
        # imports that describe memory wrongly
        ("CAI: NULL data, 8 x 8", ValueError, "NULL", imported(data=(0, False))),
        ("CAI: typestr None", TypeError, "typestr", imported(typestr=None)),
        ("CAI: negative shape", ValueError, "negative", imported(shape=(-8, 8))),
        ("CAI: float shape", TypeError, "integers", imported(shape=(8.9, 8))),
        ("CAI: no shape", TypeError, "no shape", raw({"typestr": "<f4", "data": (0, False)})),
        ("CAI: not a dict", TypeError, "dict", raw([1, 2])),
        ("CAI: data address a float", TypeError, "address", imported(data=(1.5, False))),
        ("CAI: strides of another rank", ValueError, "strides", imported(strides=(4,))),
        ("CAI: stream -7", ValueError, "stream handle", imported(stream=-7)),
        ("CAI: stream True", TypeError, "stream", imported(stream=True)),
        ("DLPack: NULL data, 8 x 8", ValueError, "NULL", dlpack(null)),
        ("DLPack: negative shape", ValueError, "negative", dlpack(shape0(-3))),
        ("DLPack: 40 dimensions", ValueError, "dimensions", dlpack(dimensions(40))),
        ("DLPack: 2 dimensions, no shape", ValueError, "no shape", dlpack(no_shape)),
        # outputs and operands
        ("transpose into a broadcast batch", ValueError, "overlap", into_broadcast(gm.transpose, V)),
        ("matmul into a broadcast batch", ValueError, "overlap", into_broadcast(gm.matmul, V, A)),
        (
            "plan, contradicting precision",
            ValueError,
            "precision",
            lambda: gm.matmul(P, P, plan=tf32_plan, precision="float32"),
        ),
        (
            "plan, contradicting algorithm",
            ValueError,
            "algorithm",
            lambda: gm.matmul(P, P, plan=naive_plan, algorithm="sgemm64x64"),
        ),
        (
            "plan, its own precision, run exact",
            None,
            "",
            works(lambda: gm.matmul(row, P, plan=row_plan, precision="tf32")),
        ),
        (
            "plan of a named TF32 row on a matrix-vector shape, its own precision",
            None,
            "",
            works(lambda: gm.matmul(row, P, plan=row_tf32_plan, precision="tf32")),
        ),
        (
            "plan of a named TF32 row on a matrix-vector shape, exact FP32 asked",
            ValueError,
            "precision",
            lambda: gm.matmul(row, P, plan=row_tf32_plan, precision="float32"),
        ),
        ("plan, its own algorithm", None, "", works(lambda: gm.matmul(P, P, plan=naive_plan, algorithm="naive"))),
        (
            "narrow_cols on a wide matrix",
            ValueError,
            "at most 127",
            lambda: gm.transpose(wide, algorithm="narrow_cols"),
        ),
        ("narrow_rows on a tall matrix", ValueError, "at most 64", lambda: gm.transpose(tall, algorithm="narrow_rows")),
        (
            "narrow_cols, wide storage, .T to .T",
            ValueError,
            "at most",
            lambda: gm.transpose(wide.T, out=wide_out, algorithm="narrow_cols"),
        ),
        (
            "narrow_cols on a .T of narrow storage",
            None,
            "",
            works(lambda: gm.transpose(tall.T, algorithm="narrow_cols")),
        ),
        ("copy of a freed view", gm.FreedMatrixError, "freed", lambda: view.copy()),
        ("astype of a freed view", gm.FreedMatrixError, "freed", lambda: view.astype(np.float32)),
        (
            "to_numpy(dtype=) into a wrong out",
            ValueError,
            "out must",
            lambda: A.to_numpy(dtype=np.float64, out=f32_out),
        ),
        ("matmul(None, None)", TypeError, "a must be", lambda: gm.matmul(None, None)),
        ("matmul_plan(None, None)", TypeError, "a must be", lambda: gm.matmul_plan(None, None)),
        ("transpose(None)", TypeError, "a must be", lambda: gm.transpose(None)),
        ("dot(None, None)", TypeError, "x must be", lambda: gm.dot(None, None)),
        ("dot of empty matrices of two dtypes", TypeError, "float64", lambda: gm.dot(gm.Matrix.empty(0, 4), f64_empty)),
        ("__dlpack__(stream=True)", TypeError, "stream", lambda: A.__dlpack__(stream=True)),
        ("__dlpack__(stream=1.5)", TypeError, "stream", lambda: A.__dlpack__(stream=1.5)),
        ("__dlpack__(stream=2**64)", ValueError, "stream handle", lambda: A.__dlpack__(stream=2**64)),
        ("__dlpack__(max_version=())", TypeError, "max_version", lambda: A.__dlpack__(max_version=())),
        ("S @ numpy array", TypeError, "Matrix", lambda: S @ host),
        ("numpy array @ S", TypeError, "CSRMatrix", lambda: host @ S),
        (
            "host product, empty, precision='bogus'",
            ValueError,
            "precision",
            lambda: gm.matmul(host[:0], host, precision="bogus"),
        ),
        ("host product, one row, negative stride", None, "", lambda: gm.matmul(reversed_row, host)),
        ("host product, one pinned row, zero stride", None, "", lambda: gm.matmul(pinned_row[None, :], host)),
        # numbers
        ("alpha = 10**400", ValueError, "alpha", lambda: gm.matmul(A, B, alpha=10**400)),
        ("splits = 0", ValueError, "positive", lambda: gm.matmul_plan(P, P, algorithm="sgemm128x128", splits=0)),
        ("splits = True", TypeError, "splits", lambda: gm.matmul_plan(P, P, algorithm="sgemm128x128", splits=True)),
        ("set_cache_limit(2**64)", ValueError, "cache limit", lambda: gm.set_cache_limit(2**64)),
        ("pinned_empty(2**62) float32", ValueError, "2^63", lambda: gm.pinned_empty(2**62)),
        ("Stream(priority='high')", TypeError, "priority", lambda: gm.Stream(priority="high")),
        ("Stream(priority=10**30)", ValueError, "priority", lambda: gm.Stream(priority=10**30)),
        ("Stream(priority=np.int32(0))", None, "", works(lambda: gm.Stream(priority=np.int32(0)))),
        # dtypes
        ("astype(None)", TypeError, "dtype", lambda: A.astype(None)),
        (
            "from_numpy(complex, dtype=float32)",
            TypeError,
            "complex",
            lambda: gm.Matrix.from_numpy(complex_data, dtype=np.float32),
        ),
        ("zeros(dtype='>f4')", TypeError, "byte order", lambda: gm.Matrix.zeros(2, 2, dtype=">f4")),
        # streams and events
        (
            "stream object with ptr -1",
            ValueError,
            "stream handle",
            lambda: gm.matmul(A, B, stream=StreamObject(ptr=-1)),
        ),
        (
            "stream object, cuda_stream True",
            TypeError,
            "stream must",
            lambda: gm.matmul(A, B, stream=StreamObject(cuda_stream=True)),
        ),
        ("closed stream: synchronize", ValueError, "closed", closed_stream.synchronize),
        ("closed stream: query", ValueError, "closed", closed_stream.query),
        ("closed stream: wait", ValueError, "closed", lambda: closed_stream.wait(gm.Event())),
        ("closed stream: with", ValueError, "closed", lambda: closed_stream.__enter__()),
        ("closed event: synchronize", ValueError, "closed", closed_event.synchronize),
        ("closed event: record", ValueError, "closed", lambda: closed_event.record()),
    ]


def _outcome(call, expected, word: str) -> str:
    """ "expected" when the call raised `expected` with `word` in its message (or, for None, raised nothing);
    else what happened."""
    try:
        call()
    except Exception as e:  # every kind is reported: the test compares it with the expected one
        if type(e) is not expected:
            return f"{type(e).__name__}: {e}"
        return "expected" if word in str(e) else f"message without {word!r}: {e}"
    return "expected" if expected is None else "no exception"


def main() -> int:
    rng = np.random.default_rng(0)
    A, B = (gm.Matrix.from_numpy(rng.uniform(-1, 1, (8, 8)).astype(np.float32)) for _ in range(2))
    V = gm.Matrix.from_numpy(rng.uniform(-1, 1, (3, 8, 8)).astype(np.float32))
    P = gm.Matrix.from_numpy(rng.uniform(-1, 1, (512, 512)).astype(np.float32))
    gm.synchronize()
    used = gm.memory_info()["used"]
    outcomes, kept = {}, []
    for name, expected, word, call in cases(A, B, V, P, kept):
        before = work_done()
        outcome = _outcome(call, expected, word)
        refused_after_work = expected is not None and work_done() != before
        outcomes[name] = {"outcome": outcome, "gpu work before it": refused_after_work}
    for m in kept:
        if isinstance(m, (gm.Matrix, gm.CSRMatrix)):
            m.free()
    # a batch of contiguous products whose rows together pass the kernels' 32-bit M: each product is one of
    # the launch's batch, not one tall product
    tall, one = gm.Matrix.empty((2**16, 2**15 + 1, 1)), gm.Matrix.empty(1, 1)
    after = {"batch beyond a 32-bit M runs": _outcome(lambda: gm.matmul(tall, one).free(), None, "")}
    after["it runs as a batch"] = gm.matmul_plan(tall, one).problem.batch == 2**16
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
    # every DLPack tensor a refused import took was handed back to its producer (gpumat's own exports here)
    after["exports handed back"] = not _interop._exports
    for m in (A, B, V, P):
        m.free()
    gm.synchronize()
    after["violations"] = sorted(set(model.violations))
    print(json.dumps({"cases": outcomes, "after": after}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
