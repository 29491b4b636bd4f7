"""Every piece of device work an operation queues goes to that operation's stream: its kernels, its copies and
fills, and the internal copies it makes first (a transposed operand copied row-major, a conversion, split-K
scratch). Checked on the CPU with the stand-in driver (benchmarks/python_path.py), which records the stream
of each launch, asynchronous copy, fill and wait. An internal copy on the thread's current stream instead
of the operation's ran before work already queued on the operation's stream had written its input: dot
and spmm of a transposed view read the wrong values (issue 43, item 1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
import python_path
python_path.install()
import numpy as np
import scipy.sparse
import gpumat as gm
from gpumat.runtime import bindings

driver = bindings.driver
QUEUED = {  # driver calls that queue work, and where their stream argument sits
    "cuLaunchKernel": 8, "cuMemcpy2DAsync": 1, "cuMemcpyDtoDAsync": 3, "cuMemcpyHtoDAsync": 3,
    "cuMemcpyDtoHAsync": 3, "cuMemsetD2D8Async": 5, "cuMemsetD2D16Async": 5, "cuStreamWaitEvent": 0,
    "cuMemcpyPeerAsync": 5, "cuMemcpy3DPeerAsync": 1,
}
seen = []
for name, where in QUEUED.items():
    real = getattr(driver, name)
    def recording(*args, _real=real, _name=name, _where=where):
        seen.append((_name, int(args[_where])))
        return _real(*args)
    object.__setattr__(driver, name, recording)
def recording_ex(config, *args, _real=driver.cuLaunchKernelEx):  # (a dependent or cluster launch: its stream in config)
    seen.append(("cuLaunchKernelEx", int(config.hStream)))
    return _real(config, *args)
object.__setattr__(driver, "cuLaunchKernelEx", recording_ex)

rng = np.random.default_rng(0)
def data(*shape, dtype=np.float32):
    return rng.uniform(-1, 1, shape).astype(dtype)

csr = scipy.sparse.random(40, 24, density=0.2, format="csr", dtype=np.float32, random_state=0)
S = gm.CSRMatrix.from_scipy(csr)
streams = {"a gm.Stream": gm.Stream(), "another library's stream": python_path.ForeignStream()}
failures, checked = [], 0
for kind, stream in streams.items():
    handle = stream.ptr if isinstance(stream, gm.Stream) else stream.__cuda_stream__()[1]
    up = lambda *shape, dtype=np.float32: gm.Matrix.from_numpy(data(*shape, dtype=dtype), stream=stream)
    X, W, Wt = up(24, 16), up(16, 24), up(24, 16)  # W.T and Wt: 24 x 16
    H, G = up(64, 48, dtype=np.float16), up(64, 80, dtype=np.float16)
    batch, shared = up(3, 24, 16), up(24, 16)
    bias = up(1, 16)
    operations = {
        "dot(X, W.T)": lambda: gm.dot(X, W.T, stream=stream),
        "dot(X.T, W)": lambda: gm.dot(W, X.T, stream=stream),
        "spmm(S, W.T)": lambda: gm.spmm(S, W.T, stream=stream),
        "matmul(X.T, Wt)": lambda: gm.matmul(X.T, Wt, stream=stream),
        "matmul(X, W, alpha, bias)": lambda: gm.matmul(X, W, alpha=0.5, bias=up(1, 24), stream=stream),
        "matmul(batch.T, shared)": lambda: gm.matmul(batch.T, shared, stream=stream),
        "matmul(H.T, G) float16": lambda: gm.matmul(H.T, G, stream=stream),
        "matmul(X, W) split-K": lambda: gm.matmul(up(4, 4096), up(4096, 4), stream=stream),
        "matmul(X, W, bias, relu)": lambda: gm.matmul(X, up(16, 16), bias=bias, activation="relu", stream=stream),
        "transpose(X)": lambda: gm.transpose(X, stream=stream),
        "transpose(batch)": lambda: gm.transpose(batch, stream=stream),
        "transpose(X.T)": lambda: gm.transpose(X.T, stream=stream),
        "astype(X.T)": lambda: X.T.astype(np.float64, stream=stream),
        "astype(batch)": lambda: batch.astype(np.float16, stream=stream),
        "copy(X.T)": lambda: X.T.copy(stream=stream),
        "to_numpy(X.T, dtype)": lambda: X.T.to_numpy(stream=stream, dtype=np.float64),
        "zeros": lambda: gm.Matrix.zeros(5, 7, stream=stream),
    }
    for what, run in operations.items():
        seen.clear()
        run()
        wrong = [(call, hex(s)) for call, s in seen if s != handle]
        if not seen:
            failures.append(f"{kind}: {what} queued nothing")
        elif wrong:
            failures.append(f"{kind}: {what} queued work on other streams than {handle:#x}: {wrong}")
        checked += 1
print(checked)
print("\n".join(failures))
"""


def test_every_operation_queues_all_its_work_on_its_stream():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(ROOT / "benchmarks")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    checked, *failures = out.stdout.strip().split("\n")
    assert int(checked) == 34
    assert not [line for line in failures if line], "\n".join(failures)
