"""The benchmarks' pure parts, without a GPU: the sweep's and bench bmm's shape grids, their summaries, the plots."""

import pytest

from gpumat._bench.common import geometric_mean
from gpumat._bench.sweep import grid


def test_the_sweep_grid_covers_every_class_once_per_shape():
    cases = grid()
    assert len(cases) == len(set(cases)) and 130 <= len(cases) <= 160
    classes = {c for c, *_ in cases}
    assert classes == {
        "square",
        "skinny M",
        "skinny N",
        "long K",
        "short K",
        "transformer",
        "odd",
        "few tokens",
        "few tokens, W.T",
    }
    # the few-token class: 1-128 rows against weights of 1024-16384 a side, in both of W's layouts, at
    # shapes no other class has (the tables key a shape by M, N, K)
    few = [(m, n, k) for c, m, n, k in cases if c.startswith("few tokens")]
    assert {m for m, *_ in few} == {1, 8, 16, 32, 64, 128} and len(few) == 2 * len(set(few))
    assert all(1024 <= n <= 16384 and 1024 <= k <= 16384 for _, n, k in few)
    others = {(m, n, k) for c, m, n, k in cases if not c.startswith("few tokens")}
    assert not others & set(few)
    assert all(m >= 1 and n >= 1 and k >= 1 for _, m, n, k in cases)
    squares = {m for c, m, n, k in cases if c == "square"}
    assert {128, 8192, 4095, 4097} <= squares  # powers of two and odd sizes either side
    assert {m for c, m, *_ in cases if c == "skinny M"} == {1, 8, 16, 32, 64, 128, 256}


def test_the_sweep_runs_the_classes_asked_for_and_names_an_unknown_one():
    import pytest

    from gpumat._bench.sweep import select

    cases = grid()
    assert select(cases, None) == cases and select(cases, []) == cases
    few = select(cases, ["few tokens, W.T", " square"])  # names as the JSON spells them
    assert few and {c for c, *_ in few} == {"few tokens, W.T", "square"}
    assert few == [s for s in cases if s[0] in ("square", "few tokens, W.T")]  # the grid's order kept
    with pytest.raises(SystemExit, match="no class 'squares'.*the classes: square, skinny M"):
        select(cases, ["squares"])


def test_a_sweep_part_gives_back_its_cases_for_the_same_dtype_and_mode_only(tmp_path):
    import json

    from gpumat._bench.sweep import earlier_cases

    case = {"class": "square", "M": 128, "N": 128, "K": 128, "ratio_queued": 0.9}
    part = tmp_path / "sweep-part-float32-tf32-nvidia-h200-2026-12-02.json"
    part.write_text(json.dumps({"dtype": "float32", "precision": "tf32", "cases": [case]}))
    assert earlier_cases(part, "float32", "tf32") == {("square", 128, 128, 128): case}
    assert earlier_cases(part, "float32", "tf32x3") == {} and earlier_cases(part, "float64", None) == {}
    part.write_text('{"dtype": "float32", "cases": [')  # cut short while written
    assert earlier_cases(part, "float32", "tf32") == {}
    assert earlier_cases(tmp_path / "absent.json", "float32", "tf32") == {}


def test_bench_takes_classes_for_the_sweep_only(capsys):
    import pytest

    from gpumat import __main__ as cli

    with pytest.raises(SystemExit) as stop:
        cli.main(["bench", "transpose", "--classes", "square"])
    assert stop.value.code == 2 and "--classes is for bench sweep" in capsys.readouterr().err


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
        device = {"transpose": tables.TRANSPOSE_DEVICE, "dot": tables.DOT_DEVICE}[op]  # the device each table reads
        data = {"op": op, "device": device, "date": "2099-01-01", **payload}
        (tmp_path / f"{op}-nvidia-h100-80gb-hbm3-2099-01-01.json").write_text(json.dumps(data))
    monkeypatch.setattr(tables, "RESULTS", tmp_path)
    text = tables.gen_memory_bound()
    assert "transpose, float16" in text and "dot, bfloat16" in text and "2099-01-01" in text


def _bmm():
    from gpumat._bench import bmm

    return bmm


def test_the_bmm_grid_covers_every_class_and_layout_once_per_case():
    bmm = _bmm()
    cases = bmm.cases()
    keys = [(c["class"], c["batch"], c["M"], c["N"], c["K"], c["layout"]) for c in cases]
    assert len(keys) == len(set(keys)) and 45 <= len(cases) <= 60
    assert all(set(c) == {"class", "batch", "M", "N", "K", "layout"} for c in cases)
    assert all(type(v) is int and v >= 1 for c in cases for v in (c["batch"], c["M"], c["N"], c["K"]))
    assert {c["class"] for c in cases} == set(bmm.CLASSES)
    assert {c["layout"] for c in cases} == {c["layout"] for c in cases if c["class"] == "layouts"} == set(bmm.LAYOUTS)
    # no operand or result over 1.5 GiB even in float64
    assert max(max(m * k, k * n, m * n) * b * 8 for _, b, m, n, k, _ in keys) <= 3 << 29


def test_the_bmm_grid_holds_the_issues_cases():
    cases = _bmm().cases()
    tiny = {(c["batch"], c["M"], c["N"], c["K"]) for c in cases if c["class"] == "tiny"}
    assert (4096, 16, 16, 16) in tiny  # the issue's case
    assert any(b > 65535 for b, *_ in tiny)  # past the grid's 65535 layers
    assert all(m == n == k <= 64 and b >= 1000 for b, m, n, k in tiny)
    assert (2, 2048, 2048, 2048) in {(c["batch"], c["M"], c["N"], c["K"]) for c in cases if c["class"] == "grouped"}
    scores = [c for c in cases if c["class"] == "attention scores"]
    values = [c for c in cases if c["class"] == "attention values"]
    assert all(c["layout"] == "NT" and c["M"] == c["N"] for c in scores)  # Q @ K^T: K a transposed view
    assert all(c["layout"] == "NN" and c["M"] == c["K"] for c in values)  # P @ V
    assert {c["K"] for c in scores} == {c["N"] for c in values} == {64, 128}  # the head size d
    assert {77, 4096} <= {c["M"] for c in scores} and {c["M"] for c in values} <= {c["M"] for c in scores}
    assert min(c["batch"] for c in scores) >= 8 and max(c["batch"] for c in scores) <= 1536


def test_the_quick_bmm_grid_is_a_subset_with_every_class():
    bmm = _bmm()
    full, quick = bmm.cases(), bmm.cases(quick=True)
    assert quick and all(c in full for c in quick)
    assert {c["class"] for c in quick} == set(bmm.CLASSES)
    assert len(quick) <= len(full) // 3
    assert len({c["layout"] for c in quick if c["class"] == "layouts"}) > 1


def test_bmm_runs_each_dtype_and_mode_it_is_asked_for():
    import pytest

    bmm = _bmm()
    assert bmm.runs("all", False) == list(bmm.ALL)
    assert ("float32", "tf32") in bmm.ALL and ("float64", None) in bmm.ALL
    assert bmm.runs("float32", False) == bmm.runs("float32", True) == [("float32", "float32")]
    assert bmm.runs("float32", "tf32x3") == [("float32", "tf32x3")]
    assert bmm.runs("bfloat16", False) == [("bfloat16", None)]
    for dtype, precision in (("float16", "tf32"), ("all", "tf32")):
        with pytest.raises(SystemExit):
            bmm.runs(dtype, precision)


def test_the_bmm_summary_leaves_failed_cases_out_and_names_them():
    bmm = _bmm()
    records = [
        {"class": "tiny", "batch": 4096, "M": 16, "N": 16, "K": 16, "layout": "NN", "ratio": 0.5, "ratio_idle": 2.0},
        {"class": "tiny", "batch": 10, "M": 2, "N": 2, "K": 2, "layout": "NN", "ratio": 2.0, "ratio_idle": 2.0},
        {"class": "grouped", "batch": 2, "M": 8, "N": 8, "K": 8, "layout": "NN", "error": "AssertionError: off"},
    ]
    s = bmm._summary(records)
    assert s["cases"] == 2 and s["geomean"] == 1.0 and s["min"] == 0.5 and s["min_idle"] == 2.0
    assert s["failed"] == ["grouped 2 x 8x8x8 NN"]
    assert s["classes"]["tiny"]["geomean"] == 1.0 and s["classes"]["grouped"]["cases"] == 0
    assert s["classes"]["grouped"]["min"] is None and set(s["classes"]) == set(bmm.CLASSES)


def test_bench_names_bmm_only_by_name_and_takes_dtype_all_only_for_it(capsys):
    import pytest

    from gpumat import __main__ as cli

    assert "bmm" in cli.LONG_BENCHES and "bmm" not in cli.BENCHES
    with pytest.raises(SystemExit) as stop:
        cli.main(["bench", "sweep", "--dtype", "all"])
    assert stop.value.code == 2 and "--dtype all" in capsys.readouterr().err


def _bmm_result(dtype, precision, failed=False) -> dict:
    cases = [
        {"class": "attention scores", "batch": 8, "M": 4096, "N": 4096, "K": 64, "layout": "NT", "ratio": 0.9},
        {"class": "tiny", "batch": 4096, "M": 16, "N": 16, "K": 16, "layout": "NN", "ratio": 0.05},
        {"class": "layouts", "batch": 16, "M": 1024, "N": 64, "K": 1024, "layout": "TT", "ratio": 1.3},
    ]
    for c in cases:
        c["ratio_idle"] = c["ratio"] * 1.1
    if failed:
        cases.append({"class": "grouped", "batch": 2, "M": 2048, "N": 2048, "K": 2048, "layout": "NN", "error": "x"})
    return {
        "dtype": dtype,
        "precision": precision,
        "environment": {"device": "NVIDIA H100 80GB HBM3", "date": "2099-01-01"},
        "summary": {"geomean": 0.36, "min": 0.05, "failed": ["grouped 2 x 2048x2048x2048 NN"] if failed else []},
        "cases": cases,
    }


def test_plot_bmm_draws_a_panel_per_json_beside_it(tmp_path):
    import json
    import runpy
    from pathlib import Path

    import pytest

    pytest.importorskip("matplotlib")
    script = Path(__file__).resolve().parents[1] / "benchmarks" / "plot_bmm.py"
    plot = runpy.run_path(str(script), run_name="plot_bmm")
    one = tmp_path / "bmm-float16-nvidia-h100-80gb-hbm3-2099-01-01.json"
    two = tmp_path / "bmm-float32-tf32-nvidia-h100-80gb-hbm3-2099-01-01.json"
    one.write_text(json.dumps(_bmm_result("float16", None, failed=True)))
    two.write_text(json.dumps(_bmm_result("float32", "tf32")))
    out = plot["main"]([str(one)])
    assert out == one.with_suffix(".png") and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    both = plot["main"]([str(one), str(two)])
    assert both == tmp_path / "bmm-nvidia-h100-80gb-hbm3-2099-01-01.png" and both.stat().st_size > 0


def test_plot_emulated_draws_the_committed_run_beside_its_json(tmp_path):
    import runpy
    import shutil
    from pathlib import Path

    import pytest

    pytest.importorskip("matplotlib")
    root = Path(__file__).resolve().parents[1]
    runs = sorted((root / "benchmarks" / "results").glob("emulated-nvidia-*.json"))
    assert runs, "no bench emulated result committed"
    copy = tmp_path / runs[-1].name
    shutil.copy(runs[-1], copy)
    plot = runpy.run_path(str(root / "benchmarks" / "plot_emulated.py"), run_name="plot_emulated")
    out = plot["main"](str(copy))
    assert out == copy.with_suffix(".png") and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_emulated_is_named_only_and_measures_error_against_the_absolute_product():
    import numpy as np

    from gpumat import __main__ as cli
    from gpumat._bench import emulated

    assert "emulated" in cli.LONG_BENCHES and "emulated" not in cli.BENCHES
    assert {c[3] for c in emulated.CASES} == {"normal", "spread"} and set(emulated.QUICK) <= set(emulated.CASES)
    rng = np.random.default_rng(3)
    for dtype in (np.float64, np.float32):
        a, b = rng.standard_normal((6, 40)).astype(dtype), rng.standard_normal((40, 5)).astype(dtype)
        rows = np.array([4, 1])
        exact = (a[rows].astype(np.longdouble) @ b.astype(np.longdouble)).astype(dtype)
        off = exact.copy()
        scale = (np.abs(a[rows]).astype(np.float64) @ np.abs(b).astype(np.float64))[1, 2]
        off[1, 2] += dtype(2.0**-10 * scale)  # one element off by 2^-10 of its |A| |B|
        got = emulated._errors(a, b, rows, {"exact": exact, "off": off})
        assert got["exact"] <= np.finfo(dtype).eps and abs(got["off"] / 2.0**-10 - 1) < 1e-3


def test_bench_int8_is_named_only_and_its_cases_are_ones_int_mm_takes():
    from gpumat import __main__ as cli
    from gpumat._bench import int8

    assert "int8" in cli.LONG_BENCHES and "int8" not in cli.BENCHES
    assert set(int8.QUICK) <= set(int8.CASES)
    # torch._int_mm takes M > 16 and K, N multiples of 8; both layouts of B appear
    assert all(m > 16 and k % 8 == 0 and n % 8 == 0 for m, n, k, *_ in int8.CASES)
    assert {bt for *_, bt, _ in int8.CASES} == {True, False}
    assert {out for *_, out in int8.CASES} == {"int32", "bfloat16"}  # the sums, and dequantised


def test_bench_fp8_is_named_only_and_its_cases_are_ones_scaled_mm_takes():
    from gpumat import __main__ as cli
    from gpumat._bench import fp8

    assert "fp8" in cli.LONG_BENCHES and "fp8" not in cli.BENCHES
    assert set(fp8.QUICK) <= set(fp8.CASES)
    # torch._scaled_mm takes M, N and K in multiples of 16; both formats and a float32 C appear
    assert all(m % 16 == 0 and n % 16 == 0 and k % 16 == 0 for m, n, k, *_ in fp8.CASES)
    assert {f for *_, f, _ in fp8.CASES} == {"e4m3", "e5m2"} and "float32" in {o for *_, o in fp8.CASES}
    assert fp8.SCALE_A * fp8.SCALE_B == 0.125  # powers of two: alpha is their product exactly


def test_a_probes_transposes_are_timed_against_the_copy_of_their_bytes(monkeypatch):
    """transposes_against_copy (the transpose probes' rows): the copy is timed first, over the matrix's bytes
    (rows x cols x itemsize), then each named algorithm; every ratio is the copy's time over the
    algorithm's, and `ratio` is auto's."""
    from types import SimpleNamespace

    import gpumat._bench.common as common

    copies, algorithms = [], []
    monkeypatch.setattr(common.memops, "copy_device_2d", lambda *args: copies.append(args))
    monkeypatch.setattr(common.gm, "transpose", lambda x, out, algorithm: algorithms.append(algorithm))

    def queued(*fns):
        for fn in fns:
            fn()
        return [3.0, 1.5, 6.0]

    monkeypatch.setattr(common, "queued_ms", queued)
    x = SimpleNamespace(height=3, width=5, itemsize=2, elements=4096)
    out = SimpleNamespace(elements=8192)
    row = common.transposes_against_copy(x, out, ("auto", "tiled_rect64"))
    assert copies == [(8192, 30, 4096, 30, 30, 1, 0)] and algorithms == ["auto", "tiled_rect64"]
    assert row == {
        "copy_ms": 3.0,
        "auto_ms": 1.5,
        "tiled_rect64_ms": 6.0,
        "auto_ratio": 2.0,
        "tiled_rect64_ratio": 0.5,
        "ratio": 2.0,
    }
    assert common.ratios_text(row, ("tiled_rect64", "auto")) == "tiled_rect64 0.500, auto 2.000"


def _fit_planner():
    """benchmarks/fit_planner.py as a module (benchmarks/ is not a package)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "fit_planner.py"
    spec = importlib.util.spec_from_file_location("fit_planner", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_planner_fit_replans_each_case_with_its_operands_alignment():
    """The fit replans a case as the library planned it on the device: rows of A and B (fresh allocations)
    off 16 bytes make the problem unaligned (the rows that need a copy first are charged for it), B's rows
    being K long where it is a transposed view; a probe's `timings` count as a sweep's `variants`, and a
    probe that names no dtype is float64."""
    fp = _fit_planner()
    shapes = [(255, 255, 255, "NN"), (64, 256, 4096, "NN"), (64, 255, 4096, "NN"), (64, 255, 4096, "NT")]
    env = {"compute_capability": "9.0", "sms": 132}
    cases = [{"M": m, "N": n, "K": k, "layout": lay, "variants": {"x/1": 1.0}} for m, n, k, lay in shapes]
    got = fp.cases_of({"dtype": "float16", "precision": None, "environment": env, "cases": cases})
    assert [(p.a_aligned, p.b_aligned, p.b_trans) for p, _, _ in got] == [
        (False, False, False),
        (True, True, False),
        (True, False, False),
        (True, True, True),
    ]
    probe = {"environment": env, "cases": [{"M": 2, "N": 4, "K": 6, "layout": "NN", "timings": {"x/1": 2.0}}]}
    ((p, _, timed),) = fp.cases_of(probe)
    assert (p.dtype, p.a_aligned, p.b_aligned, timed) == ("f64", True, True, {"x/1": 2.0})  # rows of 48, 32 bytes


def test_the_planner_fit_moves_a_row_with_its_layout_copies_and_pairs_in_proportion():
    """A 16-bit wgmma row's copies have rates of their own (the row reading B transposed is slower) and its
    pair rows are built from it: a step on the row scales them all alike, and the pair rows are never
    fitted on their own."""
    from gpumat.matmul.engine import VARIANTS, plan

    fp = _fit_planner()
    saved = dict(VARIANTS)
    try:
        rows = fp.family("wgmma128x128")
        assert {"wgmma128x128bt", "wgmma128x128pair", "wgmma128x128pairbt"} <= set(rows)
        assert "wgmma128x128pair" not in fp.bases(["wgmma128x128*"])
        rates = {n: VARIANTS[n].rate for n in rows}
        assert len(set(rates.values())) > 1  # not one shared value: proportions to keep
        fp.set_constant("wgmma128x128", "rate", rates["wgmma128x128"] * 1.1)
        assert all(VARIANTS[n].rate == pytest.approx(rates[n] * 1.1) for n in rows)
        fp.set_constant("wgmma128x128", "rate", rates["wgmma128x128"])
        assert all(VARIANTS[n].rate == pytest.approx(rates[n]) for n in rows)
    finally:
        VARIANTS.clear()
        VARIANTS.update(saved)
        plan.cache_clear()


def test_the_planner_fit_moves_constants_until_auto_picks_the_fastest_timed_plan():
    """benchmarks/fit_planner.py on a made-up float64 sweep: at 512^3 and 384^3 auto models dmma16x128
    unsplit fastest, but the cases say dmma32x128 at its split runs in 0.7 of the time. Fitting the two
    rows moves their constants until auto picks it (every score 1.0), restores nothing it did not move,
    and leaves the table's other rows alone."""
    from gpumat.matmul.engine import VARIANTS, plan

    fp = _fit_planner()
    saved = dict(VARIANTS)  # the fit writes rows of the table: put back below
    try:
        timed = {"dmma16x128/1": 14.0, **{f"dmma32x128/{s}": 10.0 for s in (1, 2, 3, 4, 6, 8)}}
        result = {
            "dtype": "float64",
            "precision": None,
            "environment": {"compute_capability": "9.0", "sms": 132},
            "cases": [{"M": n, "N": n, "K": n, "layout": "NN", "variants": timed} for n in (384, 512)],
        }
        # a step is kept for a higher mean that costs no case its score (minimum, cases scored), or for a
        # smaller gap at the same score
        assert fp.better((0.99, 0.9, 9, 10, 0.0), (0.98, 0.9, 9, 10, 0.0))
        assert not fp.better((0.99, 0.89, 9, 10, 0.0), (0.98, 0.9, 9, 10, 0.0))
        assert not fp.better((0.99, 0.9, 9, 9, 0.0), (0.98, 0.9, 9, 10, 0.0))  # a pick left the timed plans
        assert fp.better((0.98, 0.9, 9, 10, 0.1), (0.98, 0.9, 9, 10, 0.2))
        # against the score the fit started from: no case more than CASE_DROP below its own start
        start = (0.95, 0.9, 1, 2, 0.0, (0.9, 1.0))
        assert fp.better((0.99, 0.9, 2, 2, 0.0, (0.99, 0.99)), start, start)
        dropped = (0.96, 0.92, 1, 2, 0.0, (1.0, 0.92))  # a higher mean, one case 8% below its start
        assert fp.better(dropped, start) and not fp.better(dropped, start, start)
        cases = fp.cases_of(result)
        assert fp.score(cases)[:2] == (10.0 / 14.0, 10.0 / 14.0)  # auto's pick today: dmma16x128/1
        others = {n: v for n, v in VARIANTS.items() if not n.startswith(("dmma16x128", "dmma32x128"))}
        moved, before, after = fp.fit(cases, fp.bases(["dmma16x128", "dmma32x128"]), ["rate", "fixed_s"])
        assert before[0] < 0.72 and after[:2] == (1.0, 1.0) and after[3] == 2
        assert moved and all(name.startswith(("dmma16x128", "dmma32x128")) for name, _ in moved)
        for (name, param), (old, new) in moved.items():  # each row listed, its layout copies too
            assert old == getattr(saved[name], param) and new == getattr(VARIANTS[name], param) != old
        for name, param in [key for key in moved if key[0] in ("dmma16x128", "dmma32x128")]:
            copies = fp.family(name)  # these rows' copies share their constants: they end equal
            assert len(copies) == 4 and all((n, param) in moved for n in copies)
            assert all(getattr(VARIANTS[n], param) == pytest.approx(moved[name, param][1]) for n in copies)
        assert all(VARIANTS[n] is v for n, v in others.items())
    finally:
        VARIANTS.clear()
        VARIANTS.update(saved)
        plan.cache_clear()
