"""tools/devenv.py without a GPU: which targets ask the driver first, the probe's reading of the driver's
answers, and what a target builds given a GPU or none and kernels built or not."""

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEVENV = ROOT / "tools" / "devenv.py"
_spec = importlib.util.spec_from_file_location("devenv", DEVENV)
devenv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(devenv)

CUDA_SUCCESS, CUDA_ERROR_NO_DEVICE = 0, 100


class FakeDriver:
    """Answers like libcuda.so.1 would, through the same pointers the probe passes."""

    def __init__(self, init_result=CUDA_SUCCESS, count=1, count_result=CUDA_SUCCESS, names=True):
        self.init_result, self.count, self.count_result, self.names = init_result, count, count_result, names

    def cuInit(self, flags):
        assert flags == 0
        return self.init_result

    def cuDeviceGetCount(self, count_ptr):
        count_ptr[0] = self.count
        return self.count_result

    def cuGetErrorName(self, result, name_ptr):
        if not self.names:
            return 1  # CUDA_ERROR_INVALID_VALUE: a driver that does not know the number
        name_ptr[0] = b"CUDA_ERROR_NO_DEVICE" if result == CUDA_ERROR_NO_DEVICE else b"CUDA_ERROR_UNKNOWN"
        return CUDA_SUCCESS

    def cuGetErrorString(self, result, text_ptr):
        text_ptr[0] = b"no CUDA-capable device is detected"
        return CUDA_SUCCESS


def loader(driver):
    def load(name):
        assert name == "libcuda.so.1"
        return driver

    return load


def missing_library(name):
    raise OSError(f"{name}: cannot open shared object file: No such file or directory")


def test_a_driver_that_sees_a_gpu_is_no_problem():
    assert devenv.gpu_problem(loader(FakeDriver(count=2))) is None


def test_no_driver_library_says_no_driver_and_names_the_library():
    problem = devenv.gpu_problem(missing_library)
    assert problem.startswith("no NVIDIA driver found") and "libcuda.so.1" in problem


def test_a_failing_cuinit_is_named_as_the_cli_names_it():
    problem = devenv.gpu_problem(loader(FakeDriver(init_result=CUDA_ERROR_NO_DEVICE)))
    assert problem == "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected"


def test_an_error_the_driver_cannot_name_still_gives_its_number():
    problem = devenv.gpu_problem(loader(FakeDriver(count_result=999, names=False)))
    assert problem == "cuDeviceGetCount failed with CUDA error 999"


def test_a_driver_with_no_gpu():
    assert devenv.gpu_problem(loader(FakeDriver(count=0))) == "the NVIDIA driver reports no GPU"


@pytest.mark.parametrize("kernels", ["no", "build", "if-absent"])
@pytest.mark.parametrize("built", [False, True])
def test_without_a_gpu_a_target_that_needs_one_stops_before_building(kernels, built):
    decision = devenv.decide(needs_gpu=True, problem="no NVIDIA driver found (x)", kernels=kernels, built=built)
    assert decision.stop == "gpumat: no usable NVIDIA GPU: no NVIDIA driver found (x)"
    assert not decision.build_kernels


@pytest.mark.parametrize(
    "kernels, built, builds",
    [
        ("no", False, False),
        ("no", True, False),
        ("build", False, True),
        ("build", True, True),  # build_ptx.py decides what is stale, with a compiler
        ("if-absent", False, True),
        ("if-absent", True, False),  # make info with built kernels: no compiler, no build
    ],
)
def test_what_is_built(kernels, built, builds):
    for needs_gpu, problem in [(True, None), (False, None), (False, "no NVIDIA driver found (x)")]:
        decision = devenv.decide(needs_gpu=needs_gpu, problem=problem, kernels=kernels, built=built)
        assert decision == devenv.Decision(None, builds)


def test_kernels_count_as_built_only_with_every_fatbin_the_manifest_lists(tmp_path):
    manifest = tmp_path / "manifest.json"
    assert not devenv.kernels_built(manifest)
    manifest.write_text(json.dumps({"modules": {"dot": {"fatbin": "dot.fatbin"}, "mm": {"fatbin": "mm.fatbin"}}}))
    (tmp_path / "dot.fatbin").write_bytes(b"\0")
    assert not devenv.kernels_built(manifest)
    (tmp_path / "mm.fatbin").write_bytes(b"\0")
    assert devenv.kernels_built(manifest)
    manifest.write_text("{ half written")
    assert not devenv.kernels_built(manifest)


def makefile_recipes() -> dict[str, str]:
    text = (ROOT / "Makefile").read_text()
    return {m.group(1): m.group(2) for m in re.finditer(r"^(\w+):[^\n]*\n((?:\t[^\n]*\n)+)", text, re.M)}


def test_only_the_targets_that_run_on_the_gpu_ask_for_one():
    recipes = makefile_recipes()
    for target in ("demo", "info", "bench", "sanitize"):
        assert "--gpu" in recipes[target], target
    for target in ("test", "kernels", "wheel", "lint", "plot"):
        assert "--gpu" not in recipes[target], target  # CI builds and tests without a GPU
    assert "--kernels-if-absent" in recipes["info"]


def test_without_a_gpu_devenv_stops_at_once_with_one_line():
    # CUDA_VISIBLE_DEVICES="" hides every GPU from the driver, so this runs the same with or without one
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    env.pop("VIRTUAL_ENV", None)
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(DEVENV), "--gpu", "--deps", "--kernels", "--", "-c", "print('ran')"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert time.monotonic() - start < 10
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpumat: no usable NVIDIA GPU: "), result.stderr


def test_the_probe_needs_nothing_beyond_the_standard_library():
    imported = re.findall(r"^(?:import|from) (\w+)", DEVENV.read_text(), re.M)
    assert set(imported) <= set(sys.stdlib_module_names) | {"cuda_compiler"}, imported


def _collected(env: dict, *files: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
        cwd=ROOT,
        # the caller's own shard settings (a sharded run of this test) must not leak into the collections
        env={**{k: v for k, v in os.environ.items() if k not in ("GPUMAT_SHARD", "GPUMAT_WHOLE_GPU")}, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return [line for line in out.stdout.splitlines() if "::" in line]


def test_sanitize_shards_split_the_suite_and_the_whole_gpu_tests_run_apart():
    """tools/sanitize.py's shards (GPUMAT_SHARD=i/n, read by conftest) cover every test once between them,
    the tests that fill a GPU's memory are only in the part run alone."""
    files = ("tests/test_robustness.py", "tests/test_transpose.py")
    every = _collected({}, *files)
    alone = _collected({"GPUMAT_WHOLE_GPU": "only"}, *files)
    shards = [_collected({"GPUMAT_SHARD": f"{i}/3", "GPUMAT_WHOLE_GPU": "without"}, *files) for i in range(3)]
    assert len(alone) == 2 and all("huge_square" in t or "running_out" in t for t in alone)
    together = [t for shard in shards for t in shard]
    assert all(shards) and len(together) == len(set(together))
    assert sorted(together + alone) == sorted(every)


def test_sanitize_fails_a_selection_that_runs_no_test(tmp_path):
    """A shard whose tests are all deselected exits 5 and is fine beside shards that ran; a selection that
    runs no GPU test anywhere checks nothing, and tools/sanitize.py says so instead of reporting 0 errors.
    (compute-sanitizer stood in for by a script that runs the command it wraps.)"""
    import stat

    fake = tmp_path / "compute-sanitizer"
    fake.write_text(f'#!/bin/sh\nwhile [ "$#" -gt 0 ] && [ "$1" != "{sys.executable}" ]; do shift; done\nexec "$@"\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    spec = importlib.util.spec_from_file_location("sanitize_under_test", ROOT / "tools" / "sanitize.py")
    sanitize = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sanitize)
    selection = ["tests/test_devenv.py", "-k", "no_test_is_named_like_this"]
    (tmp_path / "logs").mkdir()
    ok, ran, empty = sanitize.run_tool(str(fake), "memcheck", 2, selection, str(tmp_path / "logs"), 120)
    assert ok and not ran and empty == 3  # the two shards and the whole-GPU run
