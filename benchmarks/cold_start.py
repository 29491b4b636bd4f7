"""Cold start, each figure from fresh processes: `import gpumat` (numpy imported first, and alone), the
context and the first upload, the first 64^3 matmul, and the load of each kernel module; CuPy's and
PyTorch's first matmul beside it. `python3 benchmarks/cold_start.py [RUNS]` prints one JSON line of medians.

gpumat's modules are compiled to bytecode first, as `pip install` does for an installed package (CuPy's
and PyTorch's are, in their installs): a source tree copied without `__pycache__`, under
PYTHONDONTWRITEBYTECODE, would otherwise compile every module in every run (on the development machine:
57-61 ms against 32.5 with the bytecode there).
"""

from __future__ import annotations

import compileall
import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

GPUMAT = """
import time, json
t0 = time.perf_counter()
import numpy as np
t1 = time.perf_counter()
import gpumat as gm
t2 = time.perf_counter()
a = np.ones((64, 64), np.float32)
A = gm.Matrix.from_numpy(a); gm.synchronize()
t3 = time.perf_counter()
C = A @ A; gm.synchronize()
t4 = time.perf_counter()
loads = {}
try:
    from gpumat.runtime import kernels
except ImportError:  # a tree from before the runtime package: no module figures
    kernels = None
dev = gm.device()
for name in sorted(kernels.manifest()["modules"]) if kernels else ():
    if name in dev.modules:
        continue
    s = time.perf_counter(); kernels.load_module(name, dev); loads[name] = (time.perf_counter() - s) * 1e3
print(json.dumps({"numpy_ms": (t1 - t0) * 1e3, "import_gpumat_ms": (t2 - t1) * 1e3,
                  "context_and_upload_ms": (t3 - t2) * 1e3, "first_matmul_ms": (t4 - t3) * 1e3,
                  "module_load_ms": loads}))
"""

ANCHOR = """
import time, json
import numpy as np
t0 = time.perf_counter()
import {lib} as x
t1 = time.perf_counter()
a = {upload}
{sync}
t2 = time.perf_counter()
c = a @ a
{sync}
t3 = time.perf_counter()
print(json.dumps({{"import_ms": (t1 - t0) * 1e3, "context_and_upload_ms": (t2 - t1) * 1e3,
                  "first_matmul_ms": (t3 - t2) * 1e3}}))
"""
ANCHORS = {
    "cupy": {
        "lib": "cupy",
        "upload": "x.asarray(np.ones((64, 64), np.float32))",
        "sync": "x.cuda.Device().synchronize()",
    },
    "torch": {"lib": "torch", "upload": "x.ones(64, 64, device='cuda')", "sync": "x.cuda.synchronize()"},
}


def runs(code: str, count: int) -> list[dict]:
    out = []
    for _ in range(count):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if result.returncode == 0:
            out.append(json.loads(result.stdout.strip().splitlines()[-1]))
    return out


def medians(rows: list[dict]) -> dict:
    if not rows:
        return {}
    out = {}
    for key, value in rows[0].items():
        if isinstance(value, dict):
            out[key] = {k: statistics.median(r[key][k] for r in rows) for k in value}
        else:
            out[key] = statistics.median(r[key] for r in rows)
    return out


def compile_gpumat() -> None:
    """Bytecode for every module of the gpumat that the runs import (quietly; nothing if it is there)."""
    spec = importlib.util.find_spec("gpumat")
    if spec is not None and spec.origin:
        compileall.compile_dir(str(Path(spec.origin).parent), quiet=1)


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    compile_gpumat()
    result = {"runs": count, "gpumat": medians(runs(GPUMAT, count))}
    for name, spec in ANCHORS.items():
        result[name] = medians(runs(ANCHOR.format(**spec), count))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
