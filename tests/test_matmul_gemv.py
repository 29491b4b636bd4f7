"""The matrix-vector kernels (cuda/matmul_gemv.cu; the table's gemv_* rows): matmul's products with C of
one column (A @ x) or one row (x @ B, x @ W.T), and of up to R = 8 or 16 columns (gemv_n<R>) or rows
(gemv_m<R>, gemv_m<R>bt), which read the matrix operand once for all R vectors.

Without a GPU: auto takes the one-vector rows for those shapes in every dtype, the R rows in float32 alone
(in the other dtypes the GEMM tiles measured faster), and never for others (past 16 rows and columns
every plan is what it was without the R rows), a named call on another shape is refused before
anything is launched, the cost model's memory term ranks them and its compute term charges R, their grids
cover C once, split-K plans are sound, and the build exports every entry point without spills.
On the GPU: every row and dtype against a float64 reference (bounds from tests/test_gemm_gpu.py), sides
of 1, 2, R - 1, R and primes, lengths of 1, primes and 31/32/33, views at odd offsets and strides into
NaN-filled outputs, batches, forced split-K, every epilogue, and bitwise determinism (also across aligned
and unaligned views of the same data).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import (
    ALL_MODULES,
    H100,
    TARGETS,
    built_entries,
    dims,
    epilogue_reference,
    fake_matrix,
    poison,
    rows_left_out,
    wide,
)
from test_gemm_gpu import DTYPES, check_close, host_random, tolerance, upload

import gpumat as gm
from gpumat._dtypes import ITEMSIZE
from gpumat.matmul import engine
from gpumat.matmul.engine import (
    DMMA_TILES,
    FEW_ROW_MEMORY,
    FULL_RUN_BYTES,
    GEMV_BANDWIDTH,
    GEMV_R,
    H100_SMS,
    K_CHUNK,
    REDUCE,
    ROUND_TRIP_S,
    SHORT_RUN_DRAW,
    SM_DRAW,
    TF32_WGMMA_BANDWIDTH,
    VARIANTS,
    WGMMA_BANDWIDTH,
    Problem,
    Target,
    accumulator,
    best_split,
    candidates,
    forced,
    model,
    plan,
    ranked,
    traffic,
)
from gpumat.runtime import geometry

GEMV = {name: v for name, v in VARIANTS.items() if name.startswith("gemv_")}
PAIRS = [("f32", "f32"), ("f64", "f64"), ("f16", "f16"), ("f16", "f32"), ("bf16", "bf16"), ("bf16", "f32")]
NUMPY = {"f32": np.float32, "f64": np.float64, "f16": np.float16}
FAMILIES = ("n", "m", "mbt")  # C of few columns (A @ B), of few rows (x @ B), of few rows with B as W.T
NARROW = "gemv_m1x32"  # one row times B on strips of 32 columns (gemv_m1's are 128)
ONE = ("gemv_n1", "gemv_m1", NARROW, "gemv_m1bt")  # the one-vector rows
M1_ROWS = ("gemv_m1", NARROW)  # the rows of x @ B with B row-major


def mode(sfx: str) -> str:
    return "float32" if sfx == "f32" else "native"


def problem(m, n, k, pair=("f32", "f32"), aligned=True, **kw) -> Problem:
    return Problem(m, n, k, pair[0], pair[1], mode(pair[0]), aligned, aligned, **kw)


def row_name(family: str, r: int) -> str:
    """The table's row of a family for R = r: gemv_n<r>, gemv_m<r>, gemv_m<r>bt."""
    return {"n": f"gemv_n{r}", "m": f"gemv_m{r}", "mbt": f"gemv_m{r}bt"}[family]


def rows_for(m: int, n: int) -> set[str]:
    """The matrix-vector rows that compute an m x n C (empty past 16 rows and 16 columns)."""
    return {name for name, v in GEMV.items() if v.computes_shape(m, n)}


def smallest_r(side: int) -> int:
    return min(r for r in (1, *GEMV_R) if side <= r)


def auto_may_take(v, sfx: str, n: int = 1) -> bool:
    """Whether auto may plan the row for input dtype `sfx` (the R rows: float32 alone) and a C of n columns
    (gemv_m1x32: at most auto_max_n)."""
    return (v.auto_dtypes is None or sfx in v.auto_dtypes) and (v.auto_max_n is None or n <= v.auto_max_n)


# ---- without a GPU ----


def test_the_rows_cover_every_dtype_with_the_k_chunk_signature():
    assert set(GEMV) == {row_name(f, r) for f in FAMILIES for r in (1, *GEMV_R)} | {NARROW}
    assert (GEMV[NARROW].max_m, GEMV[NARROW].max_n, GEMV[NARROW].reads_b_trans) == (1, None, False)
    for name, v in GEMV.items():
        assert set(v.kernels) == set(PAIRS) and v.tier == 1 and v.splits_k and not v.tma
        assert v.block == (256, 1, 1) and v.smem == 0 and v.min_arch == 0 and not v.any_shape
        assert v.bandwidth == GEMV_BANDWIDTH and v.rate > 0
        for (s, d), kernel in v.kernels.items():
            assert kernel.module == "matmul_gemv" and kernel.signature == K_CHUNK
            assert kernel.name == f"matmul_{name}_{s}" + ("_f32out" if d != s else "")
    for r in (1, *GEMV_R):
        assert (GEMV[f"gemv_n{r}"].max_m, GEMV[f"gemv_n{r}"].max_n) == (None, r)
        assert (GEMV[f"gemv_m{r}"].max_m, GEMV[f"gemv_m{r}"].max_n) == (r, None)
        assert (GEMV[f"gemv_m{r}bt"].max_m, GEMV[f"gemv_m{r}bt"].max_n) == (r, None)
        assert GEMV[f"gemv_m{r}bt"].reads_b_trans and not GEMV[f"gemv_m{r}"].reads_b_trans
        assert not GEMV[f"gemv_n{r}"].reads_b_trans
    # the one-vector rows first, then smaller R first: of equal modelled times auto takes the first
    names = list(VARIANTS)
    for f in FAMILIES:
        at = [names.index(row_name(f, r)) for r in (1, *GEMV_R)]
        assert at == sorted(at) and max(names.index(n) for n in ONE) < at[1]
    # every other row computes every shape, and has no memory term but the wgmma rows, 16-bit
    # (WGMMA_BANDWIDTH) and TF32 (TF32_WGMMA_BANDWIDTH), which count the zeros they stage past C's edges (a
    # layer on few tokens is a read of its weight, beside the tile's rows past its tokens), and the few-row
    # DMMA tiles (FEW_ROW_MEMORY: the weight's bytes, and the SMs with the most blocks at an SM's draw) and
    # the tiny DMMA tile (the operands' bytes: a batch of tiny products is a read of them)
    tiny_bandwidth = DMMA_TILES["dmma32x32"][-1]["bandwidth"]
    for v in VARIANTS.values():
        if v.name not in GEMV and not v.packs:  # (the small-products row: tests/test_matmul_small.py)
            wgmma = v.args.startswith("tensor_maps")
            few_rows = v.name.startswith(("dmma16x128", "dmma32x128"))
            drawn = (TF32_WGMMA_BANDWIDTH if v.mode == "tf32" else WGMMA_BANDWIDTH) if wgmma else 0
            drawn = FEW_ROW_MEMORY["bandwidth"] if few_rows else drawn
            drawn = tiny_bandwidth if v.name.startswith("dmma32x32") else drawn
            assert v.any_shape and v.bandwidth == drawn and v.stages_padding == wgmma, v.name
            assert v.sm_bandwidth == (FEW_ROW_MEMORY["sm_bandwidth"] if few_rows else 0), v.name


def test_the_tiles_are_the_kernels_own():
    """The rows' tiles (rows or columns of C a block covers) are the kernel file's constants, and the file
    instantiates the R of the table."""
    src = (Path(__file__).resolve().parents[1] / "cuda" / "matmul_gemv.cu").read_text()
    const = {name: int(value) for name, value in re.findall(r"constexpr int (\w+) = (\d+);", src)}
    assert re.search(r"constexpr int THREADS = 256, WARPS = THREADS / 32;", src)
    assert "TILE_ROWS = WARPS * ROWS" in src and "STRIP = 32 * COLS" in src
    assert GEMV["gemv_n1"].tile == (8 * const["ROWS"], 1)
    assert GEMV["gemv_m1bt"].tile == (1, 8 * const["ROWS"])
    assert GEMV["gemv_m1"].tile == (1, 32 * const["COLS"])
    # one template, its column lanes a warp the row's: 32 (gemv_m1, STRIP / COLS) or NARROW_LANES
    assert "ROW_LANES = 32 / LANES, SLICES = WARPS * ROW_LANES, COLUMNS = LANES * COLS" in src
    assert "row_times_matrix<T, OUT, STRIP / COLS>" in src and "row_times_matrix<T, OUT, NARROW_LANES>" in src
    assert GEMV[NARROW].tile == (1, const["NARROW_LANES"] * const["COLS"])
    # a step of a slice keeps 128 bytes a lane in flight: 32 / itemsize rows of 4 columns, so the block's
    # slices cover 32 x 32 bytes of K
    slices = 8 * 32 // const["NARROW_LANES"]
    assert GEMV[NARROW].round_bytes == slices * 128 // const["COLS"]
    assert tuple(int(r) for r in re.findall(r"GPUMAT_GEMV_R\(T, OUT, SFX, (\d+)\)", src)) == GEMV_R
    for r in GEMV_R:
        assert GEMV[f"gemv_n{r}"].tile == (8 * const["ROWS"], r)
        assert GEMV[f"gemv_m{r}"].tile == (r, 32 * const["COLS"])
        assert GEMV[f"gemv_m{r}bt"].tile == (r, 8 * const["ROWS"])


@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(p) for p in PAIRS])
@pytest.mark.parametrize("aligned", [True, False])
def test_auto_takes_them_for_one_column_or_one_row_on_an_h100(pair, aligned):
    assert plan(problem(16384, 1, 16384, pair, aligned), H100).algorithm == "gemv_n1"
    assert plan(problem(1, 4096, 16384, pair, aligned), H100).algorithm == "gemv_m1"
    assert plan(problem(1, 4096, 16384, pair, aligned, b_trans=True), H100).algorithm == "gemv_m1bt"
    # a batch of matrix-vector products: one launch, a grid layer each
    q = plan(problem(4096, 1, 4096, pair, aligned, batch=7), H100)
    assert (q.algorithm, q.splits, q.grid[2]) == ("gemv_n1", 1, 7)
    q = plan(problem(1, 4096, 4096, pair, aligned, batch=7), H100)
    m1 = NARROW if pair[0] in ("f32", "f64") else "gemv_m1"  # (16-bit rows in runs of 64 bytes draw less)
    assert (q.algorithm, q.splits, q.grid[2]) == (m1, 1, 7)


@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(p) for p in PAIRS])
@pytest.mark.parametrize("side", [2, 3, 5, 7, 8, 9, 13, 15, 16])
def test_auto_takes_the_smallest_r_that_covers_a_few_rows_or_columns(pair, side):
    """Memory-bound at these sizes: every row that computes the shape models the same bytes, and the
    smallest R computes least (the first of equal times besides). float32 alone: the other dtypes go to
    the GEMM tiles, which measured faster there."""
    r = smallest_r(side)
    if pair[0] != "f32":
        for p in (problem(16384, side, 16384, pair), problem(side, 16384, 16384, pair, b_trans=True)):
            assert plan(p, H100).algorithm not in GEMV
        return
    assert plan(problem(16384, side, 16384, pair), H100).algorithm == f"gemv_n{r}"
    assert plan(problem(side, 16384, 16384, pair), H100).algorithm == f"gemv_m{r}"
    assert plan(problem(side, 16384, 16384, pair, b_trans=True), H100).algorithm == f"gemv_m{r}bt"
    # aligned or not, batched or not: the same rows (a batch in one launch, a grid layer each)
    assert plan(problem(4096, side, 16384, pair, False), H100).algorithm == f"gemv_n{r}"
    q = plan(problem(side, 4096, 4096, pair, batch=7), H100)
    assert (q.algorithm, q.splits, q.grid) == (f"gemv_m{r}", 1, (32, 1, 7))
    q = plan(problem(4096, side, 4096, pair, batch=7), H100)
    assert (q.algorithm, q.splits, q.grid) == (f"gemv_n{r}", 1, (1, 128, 7))


SIDES = st.one_of(dims(30000, (32, 128)), st.sampled_from([4, 8, 9, 15, 16, 17, 18]))


@pytest.mark.parametrize("target", list(TARGETS), ids=list(TARGETS))
@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(p) for p in PAIRS])
@given(m=SIDES, n=SIDES, k=dims(60000, (32, 256, 1024)), bt=st.booleans())
def test_auto_takes_them_exactly_for_up_to_16_rows_or_columns(target, pair, m, n, k, bt):
    t, p = TARGETS[target], problem(m, n, k, pair, b_trans=bt)
    q = plan(p, t)
    thin = min(m, n) <= (max(GEMV_R) if pair[0] == "f32" else 1)  # the R rows: float32 alone
    assert (q.algorithm in GEMV) == thin, (p, q.algorithm)
    assert q.variant.computes_shape(m, n)
    if thin:  # the least modelled time among the matrix-vector rows that compute the shape
        rows = [v for v in GEMV.values() if v.computes_shape(m, n) and auto_may_take(v, pair[0], n)]
        assert set(candidates(p, t, 1)) == set(rows)
        assert q.seconds == min(plan(p, t, v.name).seconds for v in rows)


def without_r_rows():
    """The planner with the table as it was before the R rows (gemv_n8 ... gemv_m16bt), for the moment."""
    return rows_left_out([name for name in VARIANTS if name in GEMV and name not in ONE])


@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(p) for p in PAIRS])
@settings(max_examples=60)
@given(
    m=st.one_of(st.just(1), st.integers(17, 5000), st.sampled_from([17, 32, 33, 4096])),
    n=st.one_of(st.just(1), st.integers(17, 5000), st.sampled_from([17, 32, 33, 4096])),
    k=dims(60000, (32, 256, 1024)),
    bt=st.booleans(),
    aligned=st.booleans(),
)
def test_nothing_changes_for_one_row_or_column_or_past_16(pair, m, n, k, bt, aligned):
    """For C of one row or column, or of 17 and more rows and columns, every plan is what it was before the R
    rows: their compute term is never below the one-vector rows' on the same bytes and blocks, and past 16
    they compute nothing."""
    p = problem(m, n, k, pair, aligned, b_trans=bt)
    engine.plan.cache_clear()
    try:
        now = plan(p, H100)
        with without_r_rows():
            before = plan(p, H100)
    finally:
        engine.plan.cache_clear()
    assert (now.algorithm, now.splits, now.k_chunk, now.grid, now.seconds) == (
        before.algorithm,
        before.splits,
        before.k_chunk,
        before.grid,
        before.seconds,
    )


@pytest.mark.parametrize("tc_mode", ["tf32", "tf32x3"])
@pytest.mark.parametrize(
    "m, n, k", [(16384, 1, 16384), (1, 4096, 16384), (1024, 1, 1024), (1, 1, 7), (16, 1024, 512), (4096, 9, 1000)]
)
def test_a_tensor_core_mode_on_one_row_or_column_or_a_short_k_runs_the_exact_fp32_rows(tc_mode, m, n, k):
    """Memory-bound, so TF32 tensor cores gain nothing there and lose accuracy: auto plans exact FP32
    (the matrix-vector rows) and says why; a named tensor-core row still runs as named."""
    p = Problem(m, n, k, "f32", "f32", tc_mode)
    q = plan(p, H100)
    assert q.algorithm in GEMV and q.problem.mode == "float32" and "exact FP32" in q.reason, q
    exact = plan(Problem(m, n, k, "f32", "f32", "float32"), H100)
    assert (q.algorithm, q.splits, q.k_chunk, q.grid) == (exact.algorithm, exact.splits, exact.k_chunk, exact.grid)
    named = plan(p, H100, tc_mode + "_128x128")
    assert named.variant.mode == tc_mode
    # past 16 rows and columns the mode's tiles run, or the exact ones where the model ranks those at least
    # as fast (the operands are aligned)
    wide_p = Problem(max(m, 17), max(n, 17), k, "f32", "f32", tc_mode)
    wide, wide_exact = plan(wide_p, H100), plan(replace(wide_p, mode="float32"), H100)
    if wide_exact.seconds <= ranked(wide_p, H100)[0].seconds:  # (the mode's plan: ranked's first)
        assert wide.problem.mode == "float32" and wide.algorithm == wide_exact.algorithm, wide
    else:
        assert wide.variant.mode == tc_mode, wide


@pytest.mark.parametrize(
    "m, n, k, b_trans, row, swap",
    [
        # x @ W.T: gemv_m16bt measured 158 us, this row swapped 67.5 (tf32_wgmma128x256bt 83)
        (16, 8192, 8192, True, "tf32_wgmma64x16bt", True),
        (8, 14336, 4096, True, "tf32_wgmma64x16bt", True),  # gemv_m8bt 122, this row swapped 68
        (16, 4096, 14336, False, "tf32_64x64", False),  # x @ W: gemv_m16 100, this row 70
        # A @ x: gemv_n16 161, tf32_64x64 91; this row 25.8 against tf32_64x64's 32.1 at 4096 x 16 x 4096 and
        # 261 against 306 at 16384 x 16 x 16384 (results/sweep-float32-tf32-nvidia-h200-2026-11-29.json)
        (8192, 16, 8192, False, "tf32_wgmma64x16bt", False),
    ],
)
def test_tf32_on_2_to_16_rows_or_columns_of_a_large_weight_runs_the_tensor_cores(m, n, k, b_trans, row, swap):
    """With 2-16 rows or columns the exact rows do up to 16 FMAs an element of the weight and fell behind
    the TF32 tiles on the H200 (times above, 2026-11-28 and 29): at precision="tf32" the tiles, swapped
    where a row writes C transposed, compete by the model and win these; tf32x3 (three passes) keeps the
    exact rows, and so does a batch."""
    p = Problem(m, n, k, "f32", "f32", "tf32", b_trans=b_trans)
    q = plan(p, H100)
    assert q.algorithm == row and q.problem.mode == "tf32" and "exact FP32 matrix-vector plan" in q.reason, q
    assert q.swap == swap, q
    assert plan(replace(p, mode="tf32x3"), H100).problem.mode == "float32"
    assert plan(replace(p, batch=3), H100).problem.mode == "float32"


@pytest.mark.parametrize("m, n", [(17, 17), (17, 4096), (4096, 17), (32, 4096), (4096, 32), (18, 19)])
@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(p) for p in PAIRS])
def test_never_past_16_rows_and_16_columns(m, n, pair):
    for k in (1, 64, 16384):
        for bt in (False, True):
            q = plan(problem(m, n, k, pair, b_trans=bt), H100)
            assert q.algorithm not in GEMV and q.variant.any_shape, (m, n, k, pair)


def test_a_named_row_on_another_shape_is_refused_before_any_launch():
    for name, v in GEMV.items():
        if v.max_n is not None:
            shapes = [(300, 200), (2, v.max_n + 1), (v.max_n + 1, v.max_n + 1)]
        else:
            shapes = [(300, 200), (v.max_m + 1, 2), (v.max_m + 1, v.max_m + 1)]
        for m, n in shapes:
            with pytest.raises(ValueError, match=f"{name}.*only.*{m} x {n}"):
                plan(problem(m, n, 64), H100, name)
            with pytest.raises(ValueError, match="only"):
                forced(problem(m, n, 64), H100, name, 2, 32)
    with pytest.raises(ValueError, match="one column .N == 1. only"):
        plan(problem(2, 2, 64), H100, "gemv_n1")
    with pytest.raises(ValueError, match="at most 8 rows .M <= 8. only"):
        plan(problem(9, 2, 64), H100, "gemv_m8")
    # through the API, with fake operands: FakeBuffer.use_on fails the test if anything were launched
    a, b = fake_matrix(300, 500), fake_matrix(500, 17, ptr=0x7F0010000000)
    for name in GEMV:
        with pytest.raises(ValueError, match="only"):
            gm.matmul(a, b, algorithm=name)
        with pytest.raises(ValueError, match="only"):
            gm.matmul_plan(a, b, algorithm=name)
    x = fake_matrix(500, 1, ptr=0x7F0010000000)
    assert gm.matmul_plan(a, x).algorithm == "gemv_n1"
    with pytest.raises(ValueError, match="only"):
        gm.matmul(a, x, algorithm="gemv_m1")
    x3 = fake_matrix(500, 3, ptr=0x7F0010000000)
    assert gm.matmul_plan(a, x3).algorithm == "gemv_n8"
    with pytest.raises(ValueError, match="only"):
        gm.matmul(a, x3, algorithm="gemv_n1")


def test_plans_through_the_api_read_views_in_place():
    a = fake_matrix(300, 500, stride=503)  # rows not 16-byte aligned
    x = fake_matrix(500, 1, stride=7, ptr=0x7F0010000004)  # a column of a wider matrix, odd base
    q = gm.matmul_plan(a, x)
    assert (q.algorithm, q.copy_a, q.copy_b) == ("gemv_n1", False, False)
    x3 = fake_matrix(500, 3, stride=7, ptr=0x7F0010000004)  # three columns of it
    q = gm.matmul_plan(a, x3)
    assert (q.algorithm, q.copy_a, q.copy_b) == ("gemv_n8", False, False)
    row = fake_matrix(1, 500, ptr=0x7F0020000002, dtype=np.float16)
    w = fake_matrix(800, 500, stride=509, ptr=0x7F0030000000, dtype=np.float16)  # x @ W.T: W read in place
    q = gm.matmul_plan(row, w.T)
    assert (q.algorithm, q.copy_a, q.copy_b) == ("gemv_m1bt", False, False)
    rows = fake_matrix(11, 500, stride=503, ptr=0x7F0020000002, dtype=np.float32)
    w32 = fake_matrix(800, 500, stride=509, ptr=0x7F0030000000, dtype=np.float32)
    q = gm.matmul_plan(rows, w32.T)
    assert (q.algorithm, q.copy_a, q.copy_b) == ("gemv_m16bt", False, False)
    q = gm.matmul_plan(row, fake_matrix(500, 800, stride=801, ptr=0x7F0030000000, dtype=np.float16))
    assert (q.algorithm, q.copy_a, q.copy_b) == (NARROW, False, False)  # 800 columns: 25 strips of 32
    text = str(q)
    assert NARROW in text and q.kernel.name in text and "1x32 tiles" in text
    w16 = fake_matrix(500, 800, stride=801, ptr=0x7F0030000000, dtype=np.float16)
    q = gm.matmul_plan(row, w16, algorithm="gemv_m1")
    assert (q.algorithm, q.copy_a, q.copy_b) == ("gemv_m1", False, False)
    assert "1x128 tiles" in str(q)
    q = gm.matmul_plan(rows[:5], fake_matrix(500, 800, stride=801, ptr=0x7F0030000000, dtype=np.float32))
    assert (q.algorithm, q.copy_a, q.copy_b) == ("gemv_m8", False, False)
    assert "8x128 tiles" in str(q) and "matmul_gemv_m8_f32" in str(q)


@given(rows=st.integers(1, 10**8), splits=st.integers(1, 128), sms=st.sampled_from([40, 108, 132]))
def test_grids_cover_c_once(rows, splits, sms):
    n1, m1, m1bt = GEMV["gemv_n1"], GEMV["gemv_m1"], GEMV["gemv_m1bt"]
    gx, gy, gz = n1.grid(rows, 1, splits, sms)  # a block 32 rows; row tiles past 65535 in the grid-stride loop
    tiles = geometry.cdiv(rows, 32)
    assert (gx, gz) == (1, splits) and gy == min(tiles, geometry.MAX_GRID_YZ)
    if tiles <= 200_000:
        assert sorted(geometry.row_tiles_visited(gy, tiles)) == list(range(tiles))
    assert m1.grid(1, rows, splits, sms) == (geometry.cdiv(rows, 128), 1, splits)  # a block 128 columns
    assert m1bt.grid(1, rows, splits, sms) == (geometry.cdiv(rows, 32), 1, splits)  # a block 32 columns
    assert max(m1bt.grid(1, rows, splits, sms)[0], gx) <= geometry.MAX_GRID_X
    # the R rows: the same grids for any side up to R (one block covers all R columns or rows)
    for r in GEMV_R:
        for side in (1, 2, r - 1, r):
            assert GEMV[f"gemv_n{r}"].grid(rows, side, splits, sms) == (gx, gy, gz)
            assert GEMV[f"gemv_m{r}"].grid(side, rows, splits, sms) == m1.grid(1, rows, splits, sms)
            assert GEMV[f"gemv_m{r}bt"].grid(side, rows, splits, sms) == m1bt.grid(1, rows, splits, sms)


@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(p) for p in PAIRS])
def test_split_k_where_the_grid_would_not_fill_the_gpu(pair):
    acc = accumulator(pair[0])
    few = (problem(1024, 5, 65536, pair), problem(9, 512, 65536, pair), problem(16, 16, 1 << 18, pair))
    for p in (
        problem(1024, 1, 65536, pair),
        problem(1, 512, 65536, pair),
        problem(1, 1, 1 << 20, pair),
        *(few if pair[0] == "f32" else ()),  # the R rows: float32's alone
    ):
        q = plan(p, H100)
        assert q.algorithm in GEMV and q.splits > 1, q
        assert geometry.cdiv(p.k, q.k_chunk) == q.splits and q.k_chunk % q.variant.k_align == 0
        assert q.kernel is q.variant.kernels[(pair[0], acc)] and q.reduce is REDUCE[(acc, pair[1])]
        assert q.scratch_bytes == q.splits * p.m * p.n * (8 if acc == "f64" else 4)
        assert q.grid[2] == q.splits
    wide = (problem(16384, 16, 16384, pair),) if pair[0] == "f32" else ()
    for p in (problem(16384, 1, 16384, pair), problem(1, 65536, 4096, pair), *wide):
        assert plan(p, H100).splits == 1  # enough blocks already
    q = forced(problem(100, 1, 1000, pair), H100, "gemv_n1", 3, 352)
    assert (q.splits, q.k_chunk, q.grid) == (3, 352, (1, 4, 3))
    q = forced(problem(100, 7, 1000, pair), H100, "gemv_n8", 3, 352)
    assert (q.splits, q.k_chunk, q.grid) == (3, 352, (1, 4, 3))
    q = forced(problem(13, 300, 1000, pair), H100, "gemv_m16bt", 3, 352)
    assert (q.splits, q.k_chunk, q.grid) == (3, 352, (10, 1, 3))


def memory_time(v, p, k_chunk, drawn):
    """The planner's memory term: the bytes at the bandwidth drawn, met by the block's round trips."""
    trips = -(-k_chunk * ITEMSIZE[p.dtype] // v.round_bytes) * ROUND_TRIP_S
    return (traffic(p) ** 2 / drawn**2 + trips**2) ** 0.5


def test_the_memory_term_ranks_them():
    """Memory-bound: a grid with blocks_per_sm blocks on every SM draws the whole bandwidth, a grid on few
    SMs SM_DRAW times their share; the time is at least the operands' bytes at that rate, met by the round
    trips a block waits on (plus the split's cost)."""
    n1, m1 = GEMV["gemv_n1"], GEMV["gemv_m1"]
    p = problem(16384, 1, 16384)  # 512 blocks of 32 rows: every SM busy
    assert traffic(p) == (16384 * 16384 + 16384 + 16384) * 4
    assert model(n1, p, H100, 1, p.k) == pytest.approx(memory_time(n1, p, p.k, GEMV_BANDWIDTH))
    small = problem(32 * 33, 1, 16384)  # 33 blocks: a quarter of the SMs, drawing twice their share
    drawn = GEMV_BANDWIDTH * SM_DRAW * 33 / H100_SMS
    assert model(n1, small, H100, 1, small.k) == pytest.approx(memory_time(n1, small, small.k, drawn))
    q = problem(1, 4096, 16384, ("f16", "f16"))  # 32 strips of 128 columns
    drawn = GEMV_BANDWIDTH * SM_DRAW * 32 / H100_SMS
    assert model(m1, q, H100, 1, q.k) == pytest.approx(memory_time(m1, q, q.k, drawn))
    assert plan(q, H100).seconds < model(m1, q, H100, 1, q.k)  # so auto splits K
    # a smaller GPU draws less
    a100 = Target(80, 108, 163 * 1024, ALL_MODULES)
    assert model(n1, p, a100, 1, p.k) == pytest.approx(memory_time(n1, p, p.k, GEMV_BANDWIDTH * 108 / H100_SMS))
    # float64 reads twice the bytes of float32, float16 half (and walks K in as many more or fewer steps)
    for sfx, ratio in (("f64", 2.0), ("f16", 0.5)):
        other = problem(16384, 1, 16384, (sfx, sfx))
        assert model(n1, other, H100, 1, other.k) == pytest.approx(ratio * model(n1, p, H100, 1, p.k), rel=1e-3)


def test_round_trips_make_a_long_k_split():
    """A block walks its K in steps that each wait on a memory round trip: 1 x 4096 x 4096 bfloat16 unsplit
    is 32 steps of gemv_m1 a block (25.6 us on an H100 against 10.8 at 8 splits), so where gemv_m1 runs it
    auto splits K until the bytes' time dominates (gemv_m1x32, 8 steps unsplit, is taken out for this), and
    a row without the term (round_bytes None) is charged the bytes alone."""
    m1 = GEMV["gemv_m1"]
    q = problem(1, 4096, 4096, ("bf16", "bf16"))
    assert m1.round_bytes and -(-q.k * 2 // m1.round_bytes) == 32
    unsplit = model(m1, q, H100, 1, q.k)
    assert unsplit == pytest.approx(memory_time(m1, q, q.k, GEMV_BANDWIDTH * SM_DRAW * 32 / H100_SMS))
    assert unsplit > 1.5 * traffic(q) / GEMV_BANDWIDTH
    with rows_left_out([NARROW]):
        chosen = plan(q, H100)
    assert chosen.algorithm == "gemv_m1" and chosen.splits >= 4
    assert [v.name for v in GEMV.values() if not v.round_bytes] == []  # every matrix-vector row has the term


@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(p) for p in PAIRS])
def test_a_narrow_b_takes_the_strips_of_32_columns(pair):
    """x @ B with B of 1024-4096 columns: gemv_m1's strips of 128 columns leave most SMs idle (8-32 blocks)
    unless K is split, which costs a second launch; gemv_m1x32 puts four times the blocks on it unsplit
    (H200, 2026-11-30: 1 x 1024 x 1024 float16 3.8 us against gemv_m1's 6.1 at 4 splits). float64, twice
    float32's bytes a column, may still split a narrow one: at 1 x 1024 x 1024 the model's round trips split
    it four ways (6.6 us) where unsplit measured 5.4, a known misfit (benchmarks/NOTES.md)."""
    for n in (1024, 3072, 4096):
        q = plan(problem(1, n, 1024, pair), H100)
        assert q.algorithm == NARROW and (q.splits == 1 or pair[0] == "f64"), (n, q)


def test_the_narrow_strips_pay_for_short_runs_and_many_blocks():
    """gemv_m1x32 reads each row of B in runs of 32 columns: 64 bytes in 16-bit types, which draw
    SHORT_RUN_DRAW of the bandwidth (float32's 128 bytes draw it all), and each of its blocks costs block_s
    a wave beyond its loads: a large 16-bit B and a wide B over a short K stay on gemv_m1, each term
    deciding it (without it the narrow row would model faster)."""
    narrow, m1 = GEMV[NARROW], GEMV["gemv_m1"]
    assert FULL_RUN_BYTES == 128 and 0 < SHORT_RUN_DRAW < 1 and narrow.block_s > 0 and m1.block_s == 0
    assert narrow.b_runs and m1.b_runs and all(GEMV[f"gemv_m{r}"].b_runs for r in GEMV_R)
    assert not any(v.b_runs for name, v in VARIANTS.items() if not name.startswith("gemv_m"))
    big16, big32 = problem(1, 16384, 16384, ("f16", "f16")), problem(1, 16384, 16384)
    blocks = 16384 // 32
    extra = -(-blocks // H100_SMS) * narrow.block_s
    trips = -(-16384 * 2 // narrow.round_bytes) * ROUND_TRIP_S
    bytes_at = traffic(big16) / (GEMV_BANDWIDTH * SHORT_RUN_DRAW)
    assert model(narrow, big16, H100, 1, big16.k) == pytest.approx(np.hypot(bytes_at, trips) + extra)
    trips32 = -(-16384 * 4 // narrow.round_bytes) * ROUND_TRIP_S
    bytes32 = traffic(big32) / GEMV_BANDWIDTH
    assert model(narrow, big32, H100, 1, big32.k) == pytest.approx(np.hypot(bytes32, trips32) + extra)
    # within auto_max_n, where the terms decide: a 16-bit 8192^2 weight (the runs), 8192 columns over K = 64
    # (the blocks)
    for p, term in (
        (problem(1, 8192, 8192, ("f16", "f16")), "b_runs"),
        (problem(1, 8192, 64, ("f64", "f64")), "block_s"),
    ):
        assert plan(p, H100).algorithm == "gemv_m1"
        without = replace(narrow, **{term: type(getattr(narrow, term))()})
        assert best_split(without, p, H100)[0] < best_split(m1, p, H100)[0] < best_split(narrow, p, H100)[0]
    for pair in PAIRS:
        assert plan(problem(1, 65536, 64, pair), H100).algorithm == "gemv_m1", pair


@pytest.mark.parametrize("pair", PAIRS, ids=["-".join(p) for p in PAIRS])
def test_the_narrow_strips_are_autos_up_to_8192_columns(pair):
    """Past 8192 columns gemv_m1's strips already fill the GPU and its longer runs read faster (the bench
    sweeps on the H200: 1 x 16384 x 16384 float64 514 us against 481), where the model still gives
    gemv_m1x32 the edge in float32 and float64; by name it runs any width."""
    assert GEMV[NARROW].auto_max_n == 8192
    assert plan(problem(1, 8192, 1024, pair), H100).algorithm == NARROW
    for n in (8193, 16384):
        assert plan(problem(1, n, 1024, pair), H100).algorithm == "gemv_m1"
    assert plan(problem(1, 16384, 1024, pair), H100, NARROW).algorithm == NARROW


@pytest.mark.parametrize("r", GEMV_R)
def test_the_r_rows_read_the_matrix_once_and_compute_r(r):
    """The R rows' bytes are the matrix once, the R vectors and C (the same as one vector's rows would read
    for each of them: no more); their compute term is R columns or rows of the FP32 pipes' rate, whatever
    the side asked (zeros past it), which decides where it exceeds the memory term."""
    n_r, m_r = GEMV[f"gemv_n{r}"], GEMV[f"gemv_m{r}"]
    p = problem(16384, r, 16384)
    assert traffic(p) == (16384 * 16384 + 16384 * r + 16384 * r) * 4
    assert model(n_r, p, H100, 1, p.k) == pytest.approx(memory_time(n_r, p, p.k, GEMV_BANDWIDTH))  # memory-bound
    for side in (1, 2, r):
        # compute-bound: K long, few bytes of C per block; two waves of 133 strips
        q = problem(side, 133 * 128, 1 << 16, ("f16", "f16"))
        per_block = 2.0 * r * 128 * q.k / (m_r.rate / H100_SMS)
        assert model(m_r, q, H100, 1, q.k) == pytest.approx(
            max(2 * per_block, memory_time(m_r, q, q.k, GEMV_BANDWIDTH))
        )
    # the smaller R computes less: at a side both compute, the compute-bound model prefers it
    if r != min(GEMV_R):
        q = problem(min(GEMV_R), 133 * 128, 1 << 16, ("f16", "f16"))
        assert model(GEMV[f"gemv_m{min(GEMV_R)}"], q, H100, 1, q.k) < model(m_r, q, H100, 1, q.k)


def test_the_build_exports_every_entry_point_without_spills():
    from gpumat.runtime import kernels

    entries = built_entries()["matmul_gemv"]
    declared = {k.name for v in GEMV.values() for k in v.kernels.values()}
    assert set(entries) == declared and len(declared) == 6 * (3 * (1 + len(GEMV_R)) + 1)
    for name, info in entries.items():
        params = [t.replace("s32", "u32").replace("b64", "u64").replace("s64", "u64") for t in info["params"]]
        assert params == [kernels.PTX_TYPES[c] for c in K_CHUNK], name
        # __launch_bounds__(256, 3) for one vector (80 registers), (256, 1) for 8 and 16 (255)
        r = int(re.match(r"matmul_gemv_[nm](\d+)", name).group(1))
        for arch, res in info["resources"].items():
            assert res["spill_stores"] == res["spill_loads"] == res["stack"] == 0, (name, arch, res)
            assert 0 < res["registers"] <= (80 if r == 1 else 255), (name, arch, res)


# ---- on the GPU ----

KINDS = ["float32", "float64", "float16", "bfloat16", "float16>f32", "bfloat16>f32"]


def dtypes(kind: str):
    """(input dtype, output dtype, tolerance kind) of a test kind: 'float16>f32' writes a float32 C."""
    base, _, out = kind.partition(">")
    dtype = DTYPES[base][0]
    return dtype, (np.float32 if out else dtype), base


def assert_auto_takes_a_matrix_vector_row(plan_, m: int, n: int):
    """auto's row for an m x n C: one of the matrix-vector rows that compute the shape, never a GEMM tile
    (which one is the cost model's choice: for M == 1 with a row-major B, gemv_m1, gemv_m1x32 or gemv_m1bt after
    transposing B into scratch, float32 1 x 101 x 671 takes the latter; for a few rows or columns the R
    that covers them, or a larger one). The R rows are auto's for float32 alone: the other dtypes' few rows
    or columns go to the GEMM tiles. A batch of products that the small-products rows compute (C of at
    most 64 x 64 a matrix) goes to the rows made for such batches, or to the GEMM tiles, not to these: the
    matrix-vector rows ran such batches several times slower (tests/test_matmul_small.py)."""
    if plan_.problem.batch > 1 and VARIANTS["small_wide"].computes_shape(m, n):
        assert plan_.algorithm not in GEMV, plan_
        return
    rows = {name for name in rows_for(m, n) if auto_may_take(GEMV[name], plan_.problem.dtype, n)}
    if not rows:
        assert min(m, n) > 1 and plan_.problem.dtype != "f32" and plan_.algorithm not in GEMV, plan_
        return
    assert plan_.algorithm in rows, (plan_.algorithm, m, n, sorted(rows))


def operands(kind, m, n, k, b_trans, pads, x_contiguous, batch=None):
    """Host A and B and their GPU views: A at column offset pads[0] of wider storage; B likewise, or stored
    transposed (b_trans: N rows of K, read through .T), or for x_contiguous a plain contiguous matrix (for
    N == 1 a column); C a NaN-filled view at pads[2]. Returns (a, b, A, B, C, parents, C's parent, its host
    copy, C's columns)."""
    dtype, out_dtype, _ = dtypes(kind)
    lead = () if batch is None else (batch,)
    a, b = host_random((*lead, m, k), dtype), host_random((*lead, k, n), dtype)
    A, pa, _, _ = upload(a, False, pads[0])
    if x_contiguous and not b_trans:
        B = pb = gm.Matrix.from_numpy(b)
    else:
        B, pb, _, _ = upload(b, b_trans, pads[1])
    C, pc, pc_host, cols = upload(np.full((*lead, m, n), np.nan, out_dtype), False, pads[2])
    return a, b, A, B, C, [pa, pb, pc], pc, pc_host, cols


def untouched_outside(pc, pc_host, cols) -> bool:
    after = pc.to_numpy()
    outside = np.ones(after.shape[-1], bool)
    outside[cols] = False
    return np.array_equal(
        np.ascontiguousarray(after[..., outside]).view(np.uint8),
        np.ascontiguousarray(pc_host[..., outside]).view(np.uint8),
    )


def side_values(r: int) -> list[int]:
    """The sides of C an R row is tried on: 1, 2, R - 1, R and the primes up to R."""
    return sorted({1, min(2, r), max(r - 1, 1), r, *(p for p in (3, 5, 7, 11, 13) if p <= r)})


def shape_of(family: str, side: int, length: int) -> tuple[int, int]:
    """(M, N) of a family's C: `side` columns for gemv_n<R>, `side` rows for the others."""
    return (length, side) if family == "n" else (side, length)


@st.composite
def cases(draw):
    family = draw(st.sampled_from(FAMILIES))
    r = draw(st.sampled_from((1, *GEMV_R)))
    m, n = shape_of(family, draw(st.sampled_from(side_values(r))), draw(dims(700, (32, 128))))
    name = row_name(family, r)
    if name == "gemv_m1":
        name = draw(st.sampled_from(M1_ROWS))
    return {
        "kind": draw(st.sampled_from(KINDS)),
        "name": name,
        "m": m,
        "n": n,
        "k": draw(dims(3000, (8, 32, 128, 256, 1024))),
        "b_trans": family == "mbt",
        "pads": [draw(st.integers(0, 3)) for _ in range(3)],
        "x_contiguous": draw(st.booleans()),
    }


@pytest.mark.gpu
@settings(max_examples=300)
@given(cases())
def test_against_a_float64_epilogue_reference(case):
    """The named kernel and auto (which may split K, or take another matrix-vector row), on views at odd
    offsets and strides (element loads) or aligned ones (16-byte loads), into NaN-filled C: every element
    written, nothing around it."""
    m, n, k, b_trans, name = case["m"], case["n"], case["k"], case["b_trans"], case["name"]
    a, b, A, B, C, parents, pc, pc_host, cols = operands(
        case["kind"], m, n, k, b_trans, case["pads"], case["x_contiguous"]
    )
    try:
        ref, scale = epilogue_reference(a, b, 1.0, 0.0, None, None, None)
        tol = tolerance(dtypes(case["kind"])[2], k)
        assert_auto_takes_a_matrix_vector_row(gm.matmul_plan(A, B, out=C), m, n)
        for algorithm in (name, "auto"):
            gm.matmul(A, B, out=C, algorithm=algorithm)
            check_close(C.to_numpy(), ref, scale, tol, f"{algorithm} {case}")
            assert untouched_outside(pc, pc_host, cols), f"{algorithm} wrote outside C {case}"
            poison(C)  # NaN again for the next run
    finally:
        for x in parents:
            x.free()


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(GEMV))
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=12)
@given(
    length=dims(300, (32, 128)),
    k=st.integers(1, 5000),
    splits=st.sampled_from([2, 3, 5, 8]),
    chunk=st.integers(1, 40),
    odd=st.booleans(),
    pick=st.integers(0, 10),
)
def test_forced_split_k(name, kind, length, k, splits, chunk, odd, pick):
    """Any chunking: an odd chunk starts every other split off the 16-byte alignment (element loads)."""
    v = GEMV[name]
    sides = side_values(v.max_n or v.max_m)
    family = "n" if v.max_n is not None else ("mbt" if v.reads_b_trans else "m")
    m, n = shape_of(family, sides[pick % len(sides)], length)
    k_chunk = chunk * 32 - (3 if odd else 0)
    splits = max(min(splits, -(-k // k_chunk) + 1), 2)
    if splits * k_chunk < k:
        k_chunk = -(-k // splits)
    a, b, A, B, C, parents, pc, pc_host, cols = operands(kind, m, n, k, v.reads_b_trans, [1, 2, 0], False)
    try:
        p = gm.matmul_plan(A, B, out=C, algorithm=name, splits=splits, k_chunk=k_chunk)
        layers = min(splits, -(-k // k_chunk))
        assert (p.algorithm, p.splits, p.k_chunk) == (name, layers, k_chunk if layers > 1 else k)
        gm.matmul(A, B, out=C, plan=p)
        ref, scale = epilogue_reference(a, b, 1.0, 0.0, None, None, None)
        check_close(C.to_numpy(), ref, scale, tolerance(dtypes(kind)[2], k), f"{name} {kind} {p}")
        assert untouched_outside(pc, pc_host, cols)
    finally:
        for x in parents:
            x.free()


# alpha, beta, bias ("row": (1, n), "column": (m, 1); float32 or C's dtype), activation: each option once
EPILOGUES = [
    (2.0, 0.5, "row", True, "relu"),
    (-1.0, 0.0, "column", False, "gelu"),
    (0.5, -1.0, None, False, "gelu_tanh"),
    (3.0, 1.0, "row", False, None),
    (1.0, 0.0, "column", True, "relu"),
]


def epilogue_shape(name: str) -> tuple[int, int]:
    """A C for the epilogue tests: 203 long, the R rows one short of R (a vector past C's side)."""
    v = GEMV[name]
    side = max((v.max_n or v.max_m) - 1, 1)
    return (203, side) if v.max_n is not None else (side, 203)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(GEMV))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("splits", [1, 4])
def test_every_epilogue(name, kind, splits):
    """In the kernel (one split) and in split-K's reduction. With beta == 0 C is NaN and never read."""
    _, out_dtype, base = dtypes(kind)
    (m, n), k = epilogue_shape(name), 1500
    for alpha, beta, along, bias_f32, activation in EPILOGUES:
        a, b, A, B, C, parents, pc, pc_host, cols = operands(kind, m, n, k, GEMV[name].reads_b_trans, [3, 1, 2], True)
        try:
            c0 = host_random((m, n), out_dtype)
            if beta:  # C holds c0, at an odd offset
                C, pc2, _, _ = upload(c0, False, 1)
                parents.append(pc2)
            bias = bias_host = None
            if along:
                bias_host = host_random((1, n) if along == "row" else (m, 1), np.float32 if bias_f32 else out_dtype)
                bias = gm.Matrix.from_numpy(bias_host)
                parents.append(bias)
            p = gm.matmul_plan(A, B, out=C, algorithm=name, splits=splits)
            assert p.splits == splits
            gm.matmul(A, B, out=C, plan=p, alpha=alpha, beta=beta, bias=bias, activation=activation)
            ref, scale = epilogue_reference(
                a, b, alpha, beta, wide(c0), None if bias_host is None else wide(bias_host), activation
            )
            check_close(C.to_numpy(), ref, scale, tolerance(base, k), f"{name} {kind} {alpha, beta, along}")
        finally:
            for x in parents:
                x.free()


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "m, n, form",
    [
        (77, 1, "both"),
        (77, 1, "a_one"),
        (1, 77, "both"),
        (1, 77, "a_one"),
        (1, 77, "b_trans"),
        (77, 3, "both"),
        (77, 16, "a_one"),
        (5, 77, "both"),
        (16, 77, "a_one"),
        (13, 77, "b_trans"),
    ],
)
def test_batches(kind, m, n, form):
    """Batched products: one launch, matrix z of the batch on grid layer z (a shared operand has batch
    stride 0); a batch past the grid's 65535 layers takes more launches."""
    dtype, out_dtype, base = dtypes(kind)
    batch, k = 5, 333
    a = host_random((1 if form == "a_one" else batch, m, k), dtype)
    b = host_random((batch, k, n), dtype)
    if form == "b_trans":
        B, pb, _, _ = upload(b, True, 1)
    else:
        B = pb = gm.Matrix.from_numpy(b)
    with gm.Matrix.from_numpy(a) as A:
        p = gm.matmul_plan(A, B)
        assert_auto_takes_a_matrix_vector_row(p, m, n)
        assert p.splits == 1
        if not (p.variant.persistent or p.variant.packs):  # (those walk the batch in one grid dimension)
            assert p.grid[2] == batch
        with gm.Matrix.empty((batch, m, n), dtype=out_dtype) as C:
            gm.matmul(A, B, out=C)
            ref, scale = epilogue_reference(a, b, 1.0, 0.0, None, None, None)
            check_close(C.to_numpy(), ref, scale, tolerance(base, k))
    pb.free()
    if kind == "float32" and form == "both" and m == 77:  # (77 x 1 and 77 x 3)
        many, side = 65535 + 3, n
        a, b = host_random((many, 2, 3), dtype), host_random((many, 3, side), dtype)
        with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, gm.matmul(A, B) as C:
            assert_auto_takes_a_matrix_vector_row(gm.matmul_plan(A, B), 2, side)
            ref, scale = epilogue_reference(a, b, 1.0, 0.0, None, None, None)
            check_close(C.to_numpy(), ref, scale, tolerance(base, 3))


def place(host: np.ndarray, offset: int, width: int):
    """host inside a zero matrix of `width` columns at column `offset`: (parent, view)."""
    parent = np.zeros((host.shape[0], width), host.dtype)
    parent[:, offset : offset + host.shape[1]] = host
    big = gm.Matrix.from_numpy(parent)
    return big, big[:, offset : offset + host.shape[1]]


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(GEMV))
@pytest.mark.parametrize("kind", ["float32", "float64", "float16", "bfloat16"])
def test_bitwise_deterministic_and_the_same_bits_from_any_view(name, kind):
    """Two runs give the same bits; an aligned view (16-byte loads) and an odd one (element loads) of the
    same data give the same bits too: both paths form each sum in the same order."""
    dtype, _, _ = dtypes(kind)
    v = GEMV[name]
    length, k = 1000, 4099
    side = v.max_n or v.max_m  # all R vectors (for R = 1 the one)
    m, n = (length, side) if v.max_n is not None else (side, length)
    a, b = host_random((m, k), dtype), host_random((k, n), dtype)
    store = b.T if v.reads_b_trans else b
    per16 = 16 // np.dtype(dtype).itemsize
    results = []
    for offset in (0, 1):  # 0: aligned base and row stride (a multiple of 16 bytes); 1: neither
        width_a = -(-(k + 1) // per16) * per16 + offset
        width_b = -(-(store.shape[1] + 1) // per16) * per16 + offset
        (pa, A), (pb, S) = place(a, offset, width_a), place(np.ascontiguousarray(store), offset, width_b)
        B = S.T if v.reads_b_trans else S
        if v.max_n is not None and offset == 0:  # B contiguous and aligned: 16-byte loads of x for gemv_n1
            pb.free()
            pb = B = gm.Matrix.from_numpy(b)
        for splits in (1, 3):
            p = gm.matmul_plan(A, B, algorithm=name, splits=splits)
            runs = [gm.matmul(A, B, plan=p) for _ in range(2)]
            got = [r.to_numpy() for r in runs]
            assert np.array_equal(got[0].view(np.uint8), got[1].view(np.uint8)), (name, kind, offset, splits)
            results.append(got[0])
            for r in runs:
                r.free()
        pa.free()
        pb.free()
    for aligned, unaligned in zip(results[:2], results[2:], strict=True):
        assert np.array_equal(aligned.view(np.uint8), unaligned.view(np.uint8)), (name, kind)
    ref, scale = epilogue_reference(a, b, 1.0, 0.0, None, None, None)
    check_close(results[0], ref, scale, tolerance(kind, k))


@pytest.mark.gpu
@pytest.mark.parametrize("name, side", [("gemv_n1", 1), ("gemv_n8", 3), ("gemv_n16", 16)])
def test_many_row_tiles_walk_the_grid_stride_loop(name, side):
    m, k = 65535 * 32 + 77, 3
    a, b = host_random((m, k), np.float32), host_random((k, side), np.float32)
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        assert gm.matmul_plan(A, B, algorithm=name).grid[1] == 65535
        with gm.matmul(A, B, algorithm=name) as C:
            ref, scale = epilogue_reference(a, b, 1.0, 0.0, None, None, None)
            check_close(C.to_numpy(), ref, scale, tolerance("float32", k))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["float32", "float16", "bfloat16"])
def test_the_h100_shapes_run_on_their_kernels(kind):
    """The shapes the kernels were written for, through auto: C of one column and of one row, and of a few
    rows or columns (the R rows)."""
    dtype, _, _ = dtypes(kind)
    shapes = [
        ((16384, 1, 16384), "gemv_n1"),
        ((1, 4096, 16384), "gemv_m1"),
        ((8, 4096, 4096), "gemv_m8"),
        ((4096, 8, 4096), "gemv_n8"),
        ((16, 4096, 4096), "gemv_m16"),
        ((4096, 16, 4096), "gemv_n16"),
    ]
    for (m, n, k), name in shapes:
        a, b = host_random((m, k), dtype), host_random((k, n), dtype)
        with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, gm.matmul(A, B) as C:
            if name in ONE or kind == "float32":  # the R rows are auto's for float32 alone
                assert gm.matmul_plan(A, B).algorithm == name
            ref, scale = epilogue_reference(a, b, 1.0, 0.0, None, None, None)
            check_close(C.to_numpy(), ref, scale, tolerance(kind, k))
            again = gm.matmul(A, B)
            assert np.array_equal(again.to_numpy().view(np.uint8), C.to_numpy().view(np.uint8))
            again.free()
