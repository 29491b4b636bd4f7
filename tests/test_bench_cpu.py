"""The benchmarks' pure parts, without a GPU: the sweep's shape grid and its summary."""

from gpumat._bench.common import geometric_mean
from gpumat._bench.sweep import grid


def test_the_sweep_grid_covers_every_class_once_per_shape():
    cases = grid()
    assert len(cases) == len(set(cases)) and 80 <= len(cases) <= 110
    classes = {c for c, *_ in cases}
    assert classes == {"square", "skinny M", "skinny N", "long K", "short K", "transformer", "odd"}
    assert all(m >= 1 and n >= 1 and k >= 1 for _, m, n, k in cases)
    squares = {m for c, m, n, k in cases if c == "square"}
    assert {128, 8192, 4095, 4097} <= squares  # powers of two and odd sizes either side
    assert {m for c, m, *_ in cases if c == "skinny M"} == {1, 8, 16, 32, 64, 128, 256}


def test_geometric_mean_of_ratios():
    assert geometric_mean([1.0, 4.0]) == 2.0
    assert abs(geometric_mean([0.5, 2.0, 1.0]) - 1.0) < 1e-12
    assert geometric_mean([]) is None


def test_the_transpose_sweep_covers_every_width_class_and_size_in_every_dtype():
    from gpumat._bench import transpose

    for itemsize in (2, 4, 8):
        cases = transpose.shapes(itemsize)
        narrow_cols = {c for kind, r, c in cases if kind == "narrow columns"}
        narrow_rows = {r for kind, r, c in cases if kind == "narrow rows"}
        assert narrow_cols == narrow_rows == set(transpose.WIDTHS)
        assert {1, 2, 17, 31, 37, 127, 128} <= narrow_cols  # one, odd, and the tile size +-1
        strips = [r * c * itemsize for kind, r, c in cases if kind.startswith("narrow")]
        assert all(transpose.STRIP_BYTES - 128 * itemsize <= b <= transpose.STRIP_BYTES for b in strips)
        squares = [r * c * itemsize for kind, r, c in cases if kind == "square"]
        assert min(squares) <= 1 << 20 and max(squares) > 3 << 30  # 1 MiB to 4 GiB
        assert ("odd", 3001, 17011) in cases


def test_the_dot_sweep_runs_from_2_to_the_10_to_2_to_the_28():
    from gpumat._bench import dot

    assert dot.POWERS[0] == 10 and dot.POWERS[-1] == 28
    for p in dot.POWERS:
        rows, cols = dot._shape(1 << p)
        assert rows * cols == 1 << p and rows <= cols


SWEEPS_ON_THE_STAND_IN = r"""
import json, sys, types
sys.path.insert(0, sys.argv[1])
import python_path
python_path.install()
import gpumat._bench.common as common
import gpumat._bench.dot as dot
import gpumat._bench.transpose as transpose
common.IDLE_GAP_S = 0
transpose._checked = dot._checked = lambda *args: None  # the stand-in's memory holds no values
args = types.SimpleNamespace(quick=True, no_json=True)
json.dump({"transpose": transpose.run(args), "dot": dot.run(args)}, open(sys.argv[2], "w"))
"""


def test_the_docs_tables_read_what_the_transpose_and_dot_sweeps_write(tmp_path, monkeypatch):
    """The sweeps run on the stand-in driver (every path through them, nothing timed for real), and the
    memory-bound table of docs/performance.md is generated from what they wrote: a change to either side's
    fields fails here, not on the next device run."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    if not (root / "src" / "gpumat" / "kernels" / "manifest.json").exists():
        import pytest

        pytest.skip("the kernels are not built (no manifest.json): `make kernels` builds them")
    out = tmp_path / "sweeps.json"
    run = subprocess.run(
        [sys.executable, "-c", SWEEPS_ON_THE_STAND_IN, str(root / "benchmarks"), str(out)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root / "src")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    sys.path.insert(0, str(root / "benchmarks"))
    try:
        import tables
    finally:
        sys.path.remove(str(root / "benchmarks"))
    for op, payload in json.loads(out.read_text()).items():
        data = {"op": op, "device": tables.DEVICE, "date": "2099-01-01", **payload}
        (tmp_path / f"{op}-nvidia-h100-80gb-hbm3-2099-01-01.json").write_text(json.dumps(data))
    monkeypatch.setattr(tables, "RESULTS", tmp_path)
    text = tables.gen_memory_bound()
    assert "transpose, float16" in text and "dot, bfloat16" in text and "2099-01-01" in text
