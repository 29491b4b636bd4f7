"""Bad input to the public API, on the CPU (tests/bad_input.py, against the stream-order model): each case
raises the expected exception, its message naming the problem, before any GPU work, and the valid calls
beside them work; afterwards the library still works, nothing is left allocated and nothing was queued
out of order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def report() -> dict:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "bad_input.py")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_every_bad_input_is_refused_with_the_expected_exception_before_any_gpu_work(report):
    right = {"outcome": "expected", "gpu work before it": False}
    wrong = {name: r for name, r in report["cases"].items() if r != right}
    assert len(report["cases"]) >= 40
    assert wrong == {}


def test_the_library_works_after_them_and_nothing_is_left_allocated(report):
    assert report["after"] == {
        "batch beyond a 32-bit M runs": "expected",
        "it runs as a batch": True,
        "works after": True,
        "used back to its start": True,
        "exports handed back": True,
        "violations": [],
    }
