"""Every common call path of gpumat, run on the CPU with the driver replaced by a stand-in that answers
at once (benchmarks/python_path.py): CI has no GPU, and this is where a Python error in a path the GPU
tests cover (batches, epilogues, transposed operands, other libraries' streams) shows before the device
run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_call_path_runs_through_the_stand_in_driver():
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "python_path.py"), "--calls", "5"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 17 and all(line.endswith(" us") for line in lines), out.stdout
    assert all(float(line.split()[-2]) > 0 for line in lines)
