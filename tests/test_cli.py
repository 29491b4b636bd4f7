"""`python -m gpumat`: one clear line and a non-zero exit without a GPU; a full report with one."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")


def gpumat(*args, hide_gpu: bool = False):
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if hide_gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the driver then reports no device, as on a machine without one
    return subprocess.run([sys.executable, "-m", "gpumat", *args], capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize("command", [["info"], ["demo"], ["bench", "matmul"]])
def test_without_a_gpu_every_command_fails_with_one_clear_line(command):
    result = gpumat(*command, hide_gpu=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpumat: no usable NVIDIA GPU")


@pytest.mark.gpu
def test_info_reports_the_device_and_loads_every_kernel():
    result = gpumat("info")
    assert result.returncode == 0, result.stderr
    assert "compute cap." in result.stdout and "running code  sm_" in result.stdout
    assert "FAILED" not in result.stdout and "loaded" in result.stdout


def test_the_demo_imports_no_benchmark_code():
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    probe = "import sys, gpumat._demo; print(sorted(m for m in sys.modules if m.startswith('gpumat._bench')))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_unknown_command_is_a_usage_error():
    result = gpumat("frobnicate")
    assert result.returncode == 2 and "usage" in result.stderr
