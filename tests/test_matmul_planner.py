"""The GEMM engine's planner without a GPU: for every dtype and precision mode, on GPUs of four kinds
(Targets by hand), over shapes from 1 to tens of thousands, the plan exists, runs on the GPU, computes
the problem's dtypes at its mode, its grid covers C once, its split of K is sound, its scratch is what
the split needs, and it is cached. Named variants: their own plan where they run, a ValueError where
they do not (float32's TF32 names run exact FP32 there instead). And the public matmul_plan / plan=."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from support import FAKE_DEVICE, H100, TARGETS, dims, fake_matrix

import gpumat as gm
from gpumat.matmul.engine import (
    REDUCE,
    STREAM_SLICE,
    SWAP_MARGIN,
    SWAP_MAX_M,
    TF32_MV_ARCHS,
    TF32_MV_MARGIN,
    TF32_MV_MIN_K,
    VARIANTS,
    MatmulPlan,
    Problem,
    Target,
    accumulator,
    aligned,
    best_split,
    candidates,
    forced,
    matrix_vector,
    model,
    plan,
    problem_of_call,
    ranked,
    stream_fits,
    swappable,
    swapped,
    unavailable,
)
from gpumat.runtime import geometry

# (input, output, mode, operands aligned): every kind of problem the engine takes
KINDS = {
    "f32": ("f32", "f32", "float32", True),
    "f32-unaligned": ("f32", "f32", "float32", False),
    "tf32": ("f32", "f32", "tf32", True),
    "tf32-unaligned": ("f32", "f32", "tf32", False),
    "tf32x3": ("f32", "f32", "tf32x3", True),
    "tf32x3-unaligned": ("f32", "f32", "tf32x3", False),
    "f16": ("f16", "f16", "native", True),
    "f16-unaligned": ("f16", "f16", "native", False),
    "f16-f32out": ("f16", "f32", "native", True),
    "bf16": ("bf16", "bf16", "native", True),
    "bf16-unaligned": ("bf16", "bf16", "native", False),
    "bf16-f32out": ("bf16", "f32", "native", True),
    "f64": ("f64", "f64", "native", True),
    "f64-unaligned": ("f64", "f64", "native", False),
    "s8": ("s8", "s32", "native", True),
    "s8-unaligned": ("s8", "s32", "native", False),
}
ITEMSIZE = {"f32": 4, "f64": 8}
TILES = (16, 32, 64, 128, 256)
TALL = (65535 * 16 + 37, 65535 * 128 + 77)  # more row tiles than gridDim.y holds: the grid-stride loop
SIDES = st.one_of(dims(30000, TILES), st.sampled_from(TALL))
DEPTHS = dims(60000, (*TILES, 1024))


def problem(kind: str, m: int, n: int, k: int, a_trans: bool = False, b_trans: bool = False) -> Problem:
    dtype, out, mode, ok = KINDS[kind]
    return Problem(m, n, k, dtype, out, mode, ok, ok, a_trans=a_trans, b_trans=b_trans)


def fell_back(p: Problem, q: MatmulPlan) -> bool:
    """A float32 tensor-core mode planned as exact FP32 (no tensor-core kernel on the GPU, a matrix-vector
    shape the exact rows run, or exact FP32 modelled at least as fast for aligned operands)."""
    return p.mode in ("tf32", "tf32x3") and q.problem.mode == "float32"


@cache
def rows_covered_once(grid_y: int, row_tiles: int) -> bool:
    """The kernels' grid-stride loop over row tiles visits each exactly once (memoized: tall shapes repeat)."""
    return sorted(geometry.row_tiles_visited(grid_y, row_tiles)) == list(range(row_tiles))


def check_plan(q: MatmulPlan, p: Problem, t: Target, algorithm: str = "auto") -> None:
    """Everything a plan must satisfy, whoever chose its variant."""
    v, (m, n, k), asked = q.variant, (p.m, p.n, p.k), p
    assert q.target == t
    # it runs here and computes these dtypes at the problem's mode (exact FP32 for a degraded TF32 mode)
    assert unavailable(v, t) is None, (v.name, unavailable(v, t))
    mode = "float32" if p.mode in ("tf32", "tf32x3") and v.computes(p.dtype) == "float32" else p.mode
    assert v.computes(p.dtype) == mode and q.problem == replace(p, mode=mode)
    assert (p.dtype, p.out_dtype) in v.kernels
    # K: one chunk, or splits on the variant's alignment, each with work, together covering K
    assert 1 <= q.splits <= v.max_splits
    if q.splits == 1:
        assert q.k_chunk == k and q.reduce is None and q.scratch_bytes == 0
    else:
        assert v.splits_k
        assert q.k_chunk % v.k_align == 0 and q.k_chunk >= v.min_k_chunk
        assert geometry.cdiv(k, q.k_chunk) == q.splits and (q.splits - 1) * q.k_chunk < k <= q.splits * q.k_chunk
        acc = accumulator(p.dtype)
        assert q.reduce is REDUCE[(acc, p.out_dtype)]
        assert q.scratch_bytes == q.splits * m * n * ITEMSIZE[acc]
        launch = geometry.splitk_reduce_launch(m, n, q.splits, ITEMSIZE[acc], t.sm_count)
        assert (q.reduce_grid, q.reduce_block) == launch
    acc_or_out = accumulator(p.dtype) if q.splits > 1 else p.out_dtype
    assert q.kernel is v.kernels[(p.dtype, acc_or_out)]
    # a swapped plan: one matrix of few rows, by a row that writes C transposed; its kernel computes C^T =
    # op(B)^T @ op(A)^T, from here on the problem its grid, copies and time are of
    if q.swap:
        # (few rows, or any number at tf32 with B row-major: the TF32 atbt rows read it in place)
        few_rows = p.batch == 1 and p.m <= SWAP_MAX_M < 128 or (p.mode == "tf32" and not p.b_trans)
        assert v.writes_c_trans and swappable(q.problem) and few_rows
        assert q.kernel_problem == swapped(q.problem) and "swapped" in str(q)
        p = swapped(p)
        m, n = p.m, p.n
    else:
        assert q.kernel_problem is q.problem
    # the grid covers C once
    gx, gy, gz = q.grid
    assert q.grid == v.grid(m, n, q.splits, t.sm_count)
    tile_m, tile_n = v.tile
    if v.packs:  # several whole matrices a block
        assert q.grid == (1, 1, 1) and m <= v.max_m and n <= v.max_n
    elif v.persistent:  # one block a slot; blocks walk the work items (a cluster's: pairs of row tiles)
        c = v.cluster
        works = c * geometry.cdiv(geometry.cdiv(m, tile_m), c) * geometry.cdiv(n, tile_n) * q.splits
        assert 1 <= gx <= works and gx <= t.sm_count * v.blocks_per_sm and (gy, gz) == (1, 1)
        assert gx % c == 0
    else:
        assert gz == q.splits and 1 <= gy <= geometry.MAX_GRID_YZ and gx <= geometry.MAX_GRID_X
        assert gx * tile_n >= n > (gx - 1) * tile_n
        assert rows_covered_once(gy, geometry.cdiv(m, tile_m))
    # copies of the operands the copy engine cannot read in place (TMA variants), and of those not stored
    # in the layout the variant reads (A row-major, or transposed for reads_a_trans; B row-major, or
    # transposed for reads_b_trans)
    copy_a = p.a_trans != v.reads_a_trans or (v.needs_aligned and not p.a_aligned)
    copy_b = p.b_trans != v.reads_b_trans or (v.needs_aligned and not p.b_aligned)
    if v.reads_either_layout:  # either layout in place
        copy_a, copy_b = v.needs_aligned and not p.a_aligned, v.needs_aligned and not p.b_aligned
    assert (q.copy_a, q.copy_b) == (copy_a, copy_b)
    assert q.seconds == model(v, q.kernel_problem, t, q.splits, q.k_chunk) > 0
    # cached: the same plan object, and an equal plan from equal arguments
    assert plan(replace(asked), replace(t), algorithm) == q


@pytest.mark.parametrize("target", list(TARGETS), ids=list(TARGETS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_an_empty_result_plans_nothing_to_launch(kind, target):
    """A batch of no matrices (or of empty ones) is an empty result: auto plans nothing to launch (an empty
    batch's plan used to fail on its grid of 0 layers)."""
    t = TARGETS[target]
    for batch, m, n, k in ((0, 8, 8, 8), (0, 64, 64, 0), (3, 0, 8, 8), (3, 8, 0, 8), (0, 1, 4096, 4096)):
        p = replace(problem(kind, m, n, k), batch=batch)
        q = plan(p, t)
        assert q.problem.batch == batch and "nothing to launch" in q.reason, (batch, m, n, k, q)
        # a split asked for: nothing to split (an empty batch with K = 0 used to refuse k_chunk = 0)
        assert forced(p, t, "auto", 1) == q and forced(p, t, "auto", 4).splits == 1
    p = problem(kind, 64, 64, 0)  # K = 0: C = act(beta C + bias), no product to split either
    assert forced(p, t, "auto", 1) == plan(p, t) and forced(p, t, "auto", 8).splits == 1


@pytest.mark.parametrize("target", list(TARGETS), ids=list(TARGETS))
@pytest.mark.parametrize("kind", list(KINDS))
@given(m=SIDES, n=dims(30000, TILES), k=DEPTHS, a_trans=st.booleans(), b_trans=st.booleans())
def test_auto_plans_every_problem_on_every_gpu(kind, target, m, n, k, a_trans, b_trans):
    t, p = TARGETS[target], problem(kind, m, n, k, a_trans, b_trans)
    q = plan(p, t)
    assert plan(p, t) is q
    check_plan(q, p, t)
    exact = replace(p, mode="float32")
    tier1 = candidates(exact if fell_back(p, q) else p, t, 1)
    # auto's variant: a candidate of tier 1 where any runs (else the fallback), of least modelled time
    pool = tier1 or candidates(p, t, 2)
    if q.swap:  # a swapped plan's row: one of auto's candidates for the swapped product
        assert q.variant in candidates(q.kernel_problem, t, 1)
    else:
        assert q.variant in pool
    assert q.seconds <= min(best_split(v, q.problem, t)[0] for v in pool)
    assert q.seconds == best_split(q.variant, q.kernel_problem, t)[0]
    # swapped exactly where a row that writes C transposed models the swapped product SWAP_MARGIN faster
    # (at tf32 also on 2-16 rows, where the tiles won over the exact matrix-vector rows)
    swap_rows = [v for v in candidates(swapped(q.problem), t, 1) if v.writes_c_trans] if swappable(p) else []
    if swap_rows and not fell_back(p, q):
        best_swap = min(best_split(v, swapped(q.problem), t)[0] for v in swap_rows)
        plain = min(best_split(v, q.problem, t)[0] for v in pool)
        assert q.swap == (best_swap * SWAP_MARGIN < plain)
    else:
        assert not q.swap
    if fell_back(p, q):
        assert "exact FP32" in q.reason
        # no kernel of the mode runs here, a matrix-vector row's shape, or the exact plan modelled at least
        # as fast as the mode's for the operands aligned
        aligned = replace(p, a_aligned=True, b_aligned=True)
        exact_aligned = plan(replace(aligned, mode="float32"), t).seconds
        assert not candidates(p, t, 1) or matrix_vector(p) or exact_aligned <= ranked(aligned, t)[0].seconds
    elif p.mode in ("tf32", "tf32x3") and not matrix_vector(p):
        # the mode's plan (ranked's first), modelled faster than the exact one for the operands aligned
        aligned = replace(p, a_aligned=True, b_aligned=True)
        assert ranked(aligned, t)[0].seconds < plan(replace(aligned, mode="float32"), t).seconds
    elif p.mode in ("tf32", "tf32x3") and matrix_vector(p):
        # 2-16 rows or columns of C, where the mode's tiles were modelled well ahead of the exact rows (for
        # the operands aligned: the precision does not depend on where they lie)
        assert min(p.m, p.n) >= 2 and p.batch == 1 and p.k >= TF32_MV_MIN_K and t.arch in TF32_MV_ARCHS
        aligned = replace(p, a_aligned=True, b_aligned=True)
        assert plan(aligned, t).seconds * TF32_MV_MARGIN < plan(replace(aligned, mode="float32"), t).seconds
    if p.mode in ("tf32", "tf32x3"):  # the mode a call runs at is the same whatever its operands' alignment
        layouts = [replace(p, a_aligned=x, b_aligned=y) for x in (True, False) for y in (True, False)]
        assert len({plan(each, t).problem.mode for each in layouts}) == 1


@pytest.mark.parametrize("target", list(TARGETS), ids=list(TARGETS))
@pytest.mark.parametrize("kind", list(KINDS))
@given(m=SIDES, n=dims(30000, TILES), k=DEPTHS, a_trans=st.booleans(), b_trans=st.booleans())
@example(m=32, n=32, k=64, a_trans=False, b_trans=False)  # past small_stream's stages, inside the block row's
def test_named_variants_plan_where_they_run_and_refuse_where_they_do_not(kind, target, m, n, k, a_trans, b_trans):
    t, p = TARGETS[target], problem(kind, m, n, k, a_trans, b_trans)
    for name, v in VARIANTS.items():
        if (p.dtype, p.out_dtype) not in v.kernels:
            with pytest.raises(ValueError, match="has no kernel"):
                plan(p, t, name)
            continue
        if v.computes(p.dtype) != p.mode:
            continue  # a named kernel runs at its own mode (float32's, float64's fp64_int8): the API sets it
        if not v.computes_shape(m, n, k):  # a matrix-vector row, for C of another shape (small_stream: K too)
            with pytest.raises(ValueError, match="cannot run .* only"):
                plan(p, t, name)
            continue
        # the warps' stages of small_stream and small_stream_in_place (small_stream_block's hold all it computes)
        # (small_stream's at the most shared memory the target gives it, the in-place row's at its own 14 KiB)
        itemsize = {"f16": 2, "bf16": 2, "f64": 8}.get(p.dtype, 4)
        fits = stream_fits(m, n, k, itemsize, t.max_smem if v.sliced else 4 * STREAM_SLICE)
        if v.packs and v.persistent and not v.block_chunks and not fits:
            with pytest.raises(ValueError, match="copy stages hold no"):
                plan(p, t, name)
            continue
        why = unavailable(v, t)
        if why is None:
            q = plan(p, t, name)
            assert q.variant is v and q.algorithm == name
            check_plan(q, p, t, name)
            assert (q.seconds, q.splits, q.k_chunk) == best_split(v, q.kernel_problem, t)
            # swapped where the model gives the row's swapped product SWAP_MARGIN
            can = v.writes_c_trans and swappable(p) and v.computes_shape(p.n, p.m)
            assert q.swap == (can and best_split(v, swapped(p), t)[0] * SWAP_MARGIN < best_split(v, p, t)[0])
        elif p.dtype == "f32" and v.mode in ("tf32", "tf32x3"):
            q = plan(p, t, name)  # the tensor-core modes degrade to exact FP32, and say why
            assert q.variant.computes("f32") == "float32" and name in q.reason and why in q.reason
            check_plan(q, p, t, name)
        else:
            with pytest.raises(ValueError, match="cannot run on this GPU"):
                plan(p, t, name)


@given(
    m=dims(3000, TILES),
    n=dims(3000, TILES),
    k=dims(20000, TILES),
    splits=st.integers(1, 200),
    chunk=st.integers(1, 25000),
)
def test_forced_splits_cover_k_or_are_refused(m, n, k, splits, chunk):
    p = problem("f32", m, n, k)
    if splits > 1 and geometry.cdiv(k, chunk) > splits:
        with pytest.raises(ValueError, match="do not cover"):
            forced(p, H100, "sgemm128x128", splits, chunk)
        return
    q = forced(p, H100, "sgemm128x128", splits, chunk)
    # layers that would start past K are dropped: the kernels count ceil(K / k_chunk) splits a matrix
    layers = min(splits, geometry.cdiv(k, chunk))
    assert (q.algorithm, q.splits, q.k_chunk) == ("sgemm128x128", layers, chunk if layers > 1 else k)
    assert q.grid == VARIANTS["sgemm128x128"].grid(m, n, layers, H100.sm_count) and q.splits * q.k_chunk >= k
    assert q.scratch_bytes == (layers * m * n * 4 if layers > 1 else 0)
    assert (q.reduce is None) == (layers == 1)


def test_kernels_that_do_not_split_k_refuse_a_split():
    for name, v in VARIANTS.items():
        if ("f32", "f32") in v.kernels and not v.splits_k:
            k = v.max_k or 4096  # (small_stream: K of at most 32)
            p = problem("f32", 16, 16, k) if v.packs else problem("f32", 256, 256, k)
            with pytest.raises(ValueError, match="does not split K"):
                forced(p, H100, name, 2, k // 2)
            assert forced(p, H100, name, 1, k).splits == 1
    with pytest.raises(ValueError, match="does not split K"):
        gm.matmul_plan(fake_matrix(256, 4096), fake_matrix(4096, 256, ptr=0x7F0010000000), algorithm="naive", splits=2)
    with pytest.raises(ValueError, match="positive integers"):
        forced(p, H100, "sgemm64x64", 0, 128)


def test_the_printed_plan_names_the_kernel_the_split_and_the_reason():
    for p, name in [
        (Problem(256, 256, 65536, "f32", "f32", "float32"), "auto"),
        (Problem(4096, 4096, 4096, "f16", "f16", "native", False, True), "wgmma128x256"),
        (Problem(64, 64, 64, "f64", "f64", "native"), "dmma128x64"),
    ]:
        q = plan(p, H100, name)
        text = str(q)
        assert q.kernel.name in text and q.algorithm in text and q.reason in text and p.describe() in text
        if q.splits > 1:
            assert f"{q.splits} splits of {q.k_chunk}" in text and q.reduce.name in text
        else:
            assert "split-K    none" in text
        if q.copy_a or q.copy_b:
            assert f"({q.copy_bytes} bytes)" in text
    assert plan(Problem(256, 256, 65536, "f32", "f32", "float32"), H100).splits > 1


# ---- the public face, with fake operands (nothing is launched) ----


def test_matmul_plan_is_the_planners_plan_for_these_operands():
    a = fake_matrix(300, 500, stride=501)  # rows of 2004 bytes: not 16-byte aligned
    b = fake_matrix(500, 200, ptr=0x7F0010000000)
    c = fake_matrix(300, 200, ptr=0x7F0020000000)
    ok = [aligned(x.elements, x.stride, x.itemsize) for x in (a, b)]
    assert ok == [False, True]
    for precision in ("float32", "tf32", "tf32x3"):
        q = gm.matmul_plan(a, b, out=c, precision=precision)
        assert isinstance(q, MatmulPlan)
        assert q == plan(Problem(300, 200, 500, "f32", "f32", precision, *ok), Target.of(FAKE_DEVICE))
    forced_plan = gm.matmul_plan(a, b, algorithm="sgemm64x64", splits=3)
    assert (forced_plan.algorithm, forced_plan.splits) == ("sgemm64x64", 3)
    assert forced_plan.k_chunk % forced_plan.variant.k_align == 0 and 2 * forced_plan.k_chunk < 500
    with pytest.raises(ValueError, match="k_chunk= needs splits="):
        gm.matmul_plan(a, b, k_chunk=64)
    h = fake_matrix(64, 64, dtype=np.float16), fake_matrix(64, 64, ptr=0x7F0010000000, dtype=np.float16)
    with pytest.raises(ValueError, match="precision"):
        gm.matmul_plan(*h, precision="tf32")


def test_a_plan_for_other_operands_is_refused_before_any_launch():
    a, b = fake_matrix(300, 500), fake_matrix(500, 200, ptr=0x7F0010000000)
    c = fake_matrix(300, 200, ptr=0x7F0020000000)
    q = gm.matmul_plan(a, b, out=c)
    b2 = fake_matrix(500, 201, ptr=0x7F0010000000)
    with pytest.raises(ValueError, match="the plan is for"):
        gm.matmul(a, b2, out=fake_matrix(300, 201, ptr=0x7F0020000000), plan=q)
    with pytest.raises(TypeError, match="plan= takes a plan"):
        gm.matmul(a, b, out=c, plan=(q.algorithm, q.splits, q.k_chunk))
    h = (fake_matrix(128, 64, stride=72, dtype=np.float16), fake_matrix(64, 128, ptr=0x7F0010000000, dtype=np.float16))
    odd = fake_matrix(128, 64, stride=72, ptr=0x7F0030000002, dtype=np.float16)  # not 16-byte aligned
    tma = gm.matmul_plan(*h, out=fake_matrix(128, 128, ptr=0x7F0020000000, dtype=np.float16), algorithm="wgmma128x256")
    assert not (tma.copy_a or tma.copy_b)  # this plan reads A in place: an unaligned A cannot take it
    with pytest.raises(ValueError, match="the plan is for"):
        gm.matmul(odd, h[1], out=fake_matrix(128, 128, ptr=0x7F0020000000, dtype=np.float16), plan=tma)


def test_a_swapped_plan_is_refused_for_an_operand_it_would_read_unaligned():
    """A swapped plan's kernel reads B's storage as its A and A's as its B: x @ W by wgmma128x64bt swapped
    transposes W into aligned scratch (the row reads its A K-major) and reads x in place, so an x that
    is not 16-byte aligned cannot take it (the check once paired x's alignment with W's copy)."""
    x = fake_matrix(16, 512, dtype=np.float16)
    w = fake_matrix(512, 4096, ptr=0x7F0010000000, dtype=np.float16)
    c = fake_matrix(16, 4096, ptr=0x7F0020000000, dtype=np.float16)
    p, t = problem_of_call(x, w, c, "wgmma128x64bt")
    q = forced(p, t, "wgmma128x64bt", 1, swap=True)
    assert q.swap and (q.copy_a, q.copy_b) == (True, False)  # W copied (transposed), x read in place
    odd_x = fake_matrix(16, 512, stride=520, ptr=0x7F0030000002, dtype=np.float16)
    with pytest.raises(ValueError, match="the plan is for"):
        gm.matmul(odd_x, w, out=c, plan=q)


def test_every_row_carries_its_measured_rate_and_blocks_an_sm():
    """The cost model divides by the rate: a row without its measured figure cannot be planned."""
    for name, v in VARIANTS.items():
        assert v.rate > 0 and v.blocks_per_sm >= 1, name


def test_a_wave_of_tile_blocks_costs_more_the_longer_their_k_loop():
    """A batch of products smaller than the tile: every row with a wave floor charges each whole wave of
    blocks wave_floor_s plus wave_k_s a unit of K, so doubling K (at least a wave, the same grid) adds at
    least the waves' share of the longer loop."""
    for name, v in VARIANTS.items():
        if not v.wave_floor_s or v.packs or v.persistent:
            continue
        sfx = next(iter(v.kernels))[0]
        mode = v.computes(sfx)
        bm, bn = v.tile
        batch = 20 * 132 * v.blocks_per_sm  # twenty whole waves of one block a product
        short, long_ = (Problem(bm // 2, bn // 2, k, sfx, sfx, mode, batch=batch) for k in (32, 64))
        gain = model(v, long_, H100, 1, 64) - model(v, short, H100, 1, 32)
        assert model(v, short, H100, 1, 32) >= 20 * (v.wave_floor_s + 32 * v.wave_k_s), name
        assert gain >= 20 * 32 * v.wave_k_s * (1 - 1e-9), name


def test_whole_blocks_decide_whether_a_grid_fills_a_wave():
    """1000 products of 64^3 on 128 x 128 tiles: a quarter of each tile is live, but the 1000 blocks are
    four waves of two blocks an SM, each walking its k loop, not the one wave their live work would fill."""
    v = VARIANTS["sgemm128x128"]
    p = Problem(64, 64, 64, "f32", "f32", "float32", batch=1000)
    waves = -(-1000 // (132 * v.blocks_per_sm))
    assert waves == 4
    assert model(v, p, H100, 1, 64) >= waves * (v.wave_floor_s + 64 * v.wave_k_s)


def test_plans_do_not_depend_on_the_order_of_the_tables_keys():
    """Of equal modelled times auto takes the row the table lists first (TF32 at 1024^3 x @ W.T on 132 SMs:
    128 x 64 and 64 x 64 wgmma tiles model alike; the first ran 11.4 us and the second 14.4 on the H200), also
    after the table's keys were reordered (a test that takes rows out and puts them back appends them)."""
    problems = [Problem(1024, 1024, 1024, "f32", "f32", "tf32", b_trans=True)] + [
        Problem(m, n, k, *KINDS[kind], KINDS[kind][3])
        for kind in sorted(KINDS)
        for m, n, k in ((1, 4096, 4096), (24, 4096, 4096), (300, 200, 500), (1024, 1024, 1024), (4096, 64, 8192))
    ]
    targets = [TARGETS[name] for name in sorted(TARGETS)]
    before = [plan(p, t) for p in problems for t in targets]
    saved = dict(VARIANTS)
    try:
        VARIANTS.clear()
        VARIANTS.update(reversed(list(saved.items())))
        plan.cache_clear()
        after = [plan(p, t) for p in problems for t in targets]
    finally:
        VARIANTS.clear()
        VARIANTS.update(saved)
        plan.cache_clear()
    assert [(q.algorithm, q.splits, q.swap) for q in after] == [(q.algorithm, q.splits, q.swap) for q in before]
    assert plan(problems[0], H100).algorithm == "tf32_wgmma128x64bt"


# --- measured plans (gm.matmul_plan(..., tune=True)) ------------------------------------------------------------------
@given(st.sampled_from(sorted(KINDS)), st.sampled_from(sorted(TARGETS)), SIDES, SIDES, DEPTHS)
def test_auto_candidates_are_ranked_by_the_model_and_the_first_is_autos_choice(kind, target, m, n, k):
    from gpumat.matmul.engine import ranked

    dtype, out_dtype, mode, is_aligned = KINDS[kind]
    p = Problem(m, n, k, dtype, out_dtype, mode, is_aligned, is_aligned)
    t = TARGETS[target]
    options = ranked(p, t)
    chosen = plan(p, t)
    if chosen.problem != p:  # a mode's fallback (exact FP32): not among this mode's candidates
        return
    assert options, "auto planned this problem, so it had candidates"
    # a swapped plan ranked by its time over the margin plan() asks of it
    weighed = [o.seconds * (SWAP_MARGIN if o.swap else 1) for o in options]
    assert weighed == sorted(weighed)
    # each row once, with its best split (and once more swapped, where the problem may swap)
    assert len({(o.variant.name, o.swap) for o in options}) == len(options)
    assert all(swappable(p) and o.variant.writes_c_trans for o in options if o.swap)
    if chosen.reason.startswith("auto:"):  # the model chose among the rows (not a fallback of the mode)
        first = options[0]
        assert (first.variant, first.splits, first.k_chunk, first.swap) == (
            chosen.variant,
            chosen.splits,
            chosen.k_chunk,
            chosen.swap,
        )


def test_a_measured_plan_becomes_autos_choice_until_forgotten():
    from gpumat.matmul.engine import forget_tuning, ranked, remember

    p = Problem(1536, 1536, 1536, "f16", "f16", "native")
    t = H100
    before = plan(p, t)
    options = ranked(p, t)
    assert len(options) >= 2 and before.variant == options[0].variant
    other = options[1]  # the model's second choice, as a measurement might pick it
    try:
        remember(p, t, other, "tuned: measured fastest (a test)")
        after = plan(p, t)
        assert (after.variant, after.splits, after.k_chunk) == (other.variant, other.splits, other.k_chunk)
        assert after.reason == "tuned: measured fastest (a test)" and after.problem == p
        assert plan(p, t, before.variant.name).variant == before.variant  # a named algorithm is not tuned
        assert plan(replace(p, k=1537), t).variant == plan(replace(p, k=1537), t).variant  # others unchanged
        assert plan(replace(p, k=1537), t).reason.startswith("auto")
    finally:
        forget_tuning()
    assert plan(p, t) == before


def test_the_fastest_measured_candidate_wins_by_a_margin_and_ties_keep_the_models_order():
    from gpumat.matmul.engine import choose, ranked

    options = ranked(Problem(2048, 2048, 2048, "f32", "f32", "float32"), H100)[:4]
    assert len(options) >= 3
    measured = dict(zip((o.variant.name for o in options), (3.0, 2.0, 1.0, 5.0), strict=False))
    best, times = choose(options, lambda o: measured[o.variant.name])
    assert best is options[2] and times == [measured[o.variant.name] for o in options]
    best, _ = choose(options, lambda o: 1.0)
    assert best is options[0]
    close = dict(zip((o.variant.name for o in options), (1.0, 0.98, 0.99, 2.0), strict=False))
    best, _ = choose(options, lambda o: close[o.variant.name])
    assert best is options[0]  # 2% faster is within the margin: the model's choice stays


def test_tune_takes_auto_alone():
    with pytest.raises(ValueError, match="tune=True"):
        gm.matmul_plan(fake_matrix(8, 8), fake_matrix(8, 8), algorithm="naive", tune=True)
    with pytest.raises(ValueError, match="tune=True"):
        gm.matmul_plan(fake_matrix(8, 8), fake_matrix(8, 8), splits=2, tune=True)


def test_measured_plans_saved_and_loaded_in_a_later_process(tmp_path):
    """tuning.save writes the table (merged with the file's), tuning.load takes back what still runs:
    an entry whose variant left the table, or does not run on its GPU, or whose split the variant cannot
    make, is skipped; a file that is not one of measured plans is a ValueError; a missing one takes none."""
    import json

    from gpumat.matmul.engine import forget_tuning, load_tuning, ranked, remember, save_tuning

    p = Problem(1536, 1536, 1536, "f16", "f16", "native")
    q = Problem(3000, 200, 777, "f64", "f64", "native")
    path = str(tmp_path / "plans.json")
    try:
        chosen_p, chosen_q = ranked(p, H100)[1], ranked(q, TARGETS["A100"])[-1]
        remember(p, H100, chosen_p, "tuned: a test")
        remember(q, TARGETS["A100"], chosen_q, "tuned: another")
        assert save_tuning(path) == path
        forget_tuning()
        assert plan(p, H100).reason.startswith("auto")
        data = json.loads(open(path).read())
        data["entries"].append({**data["entries"][0], "variant": "no_such_kernel"})
        data["entries"].append({**data["entries"][0], "k_chunk": 0})
        wgmma = next(n for n, v in VARIANTS.items() if v.tma and ("f16", "f16") in v.kernels)
        turing = {"arch": 75, "sm_count": 40, "max_smem": 65536, "modules": sorted(TARGETS["Turing"].modules)}
        data["entries"].append({**data["entries"][0], "variant": wgmma, "target": turing})
        open(path, "w").write(json.dumps(data))
        assert load_tuning(path) == 2
        got_p, got_q = plan(p, H100), plan(q, TARGETS["A100"])
        assert (got_p.variant, got_p.splits, got_p.reason) == (chosen_p.variant, chosen_p.splits, "tuned: a test")
        assert (got_q.variant, got_q.k_chunk) == (chosen_q.variant, chosen_q.k_chunk)
    finally:
        forget_tuning()
    assert load_tuning(str(tmp_path / "missing.json")) == 0
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(ValueError, match="not a file of measured plans"):
        load_tuning(str(tmp_path / "bad.json"))


def test_a_plan_bound_while_a_tuning_lands_is_bound_again(monkeypatch):
    """A thread binding a problem's plans while another tunes it must not leave the plans from before the
    tuning in the launch path's cache: the binding sees the tuning table change and binds again."""
    from gpumat.matmul.engine import BoundPlan, bound_for, bound_plans, forget_tuning, ranked, remember

    p = Problem(1536, 1536, 1536, "f16", "f16", "native")
    made = []

    def stand_in(cls, q, t, choice, dev):
        made.append(plan(q, t))
        if len(made) == 1:  # the other thread's tuning lands while this binding runs
            remember(p, t, ranked(p, t)[1], "tuned: a test")
        return made[-1]

    monkeypatch.setattr(BoundPlan, "for_problem", classmethod(stand_in))
    bound_plans.clear()
    try:
        bound = bound_for(p, H100, FAKE_DEVICE)
        assert len(made) == 2 and made[0].reason.startswith("auto")
        assert bound is made[1] and bound.reason == "tuned: a test"
        assert bound_for(p, H100, FAKE_DEVICE) is bound and len(made) == 2  # cached: made once more, not again
    finally:
        bound_plans.clear()
        forget_tuning()


def test_a_modes_exact_fallback_follows_a_tuning_of_the_exact_problem():
    """A tf32 call on one column of C runs the exact FP32 problem's plan: tuning that problem (or forgetting
    its tuning) changes what the tf32 call runs too, though its own plan was cached before."""
    from gpumat.matmul.engine import forget_tuning, ranked, remember

    tf32 = Problem(8192, 1, 8192, "f32", "f32", "tf32")
    exact = replace(tf32, mode="float32")
    before = plan(tf32, H100)
    assert before.problem == exact and before.variant == plan(exact, H100).variant
    other = next(o for o in ranked(exact, H100) if o.variant != before.variant)
    try:
        remember(exact, H100, other, "tuned: a test")
        assert plan(tf32, H100).variant == other.variant
        forget_tuning()
        assert plan(tf32, H100).variant == before.variant
    finally:
        forget_tuning()


@pytest.mark.parametrize("side, splits", [(192, 3), (256, 4), (384, 6)])
def test_small_float32_squares_split_k_in_chunks_of_64(side, splits):
    """A small float32 product on the SGEMM tiles is a few blocks that each walk all of K; splits of 64
    went on paying on the H200 (192^3 13.9 us unsplit, 10.1 at 3 splits), so the SGEMM rows' splits go
    down to 64 (the default floor, 128, stopped auto at 2-3 splits). (auto itself takes the one-output-a-
    thread tiles up to 257^3: test_small_float32_products_take_one_output_a_thread.)"""
    p = Problem(side, side, side, "f32", "f32", "float32", True, True)
    q = min((plan(p, H100, name) for name in VARIANTS if name.startswith("sgemm")), key=lambda q: q.seconds)
    assert q.algorithm.startswith("sgemm") and q.variant.min_k_chunk == 64
    assert (q.splits, q.k_chunk) == (splits, 64)
    assert all(v.min_k_chunk == 64 for name, v in VARIANTS.items() if name.startswith("sgemm"))


@pytest.mark.parametrize(
    "shape, expected",
    [
        ((32, 32, 32), True),
        ((128, 128, 128), True),
        ((100, 200, 300), True),
        ((257, 257, 257), True),
        ((384, 384, 384), False),
        ((512, 512, 128), False),
        ((128, 128, 512), False),
    ],
)
def test_small_float32_products_take_one_output_a_thread(shape, expected):
    """A float32 product of a few SGEMM blocks waits on each thread's long chain of multiply-adds; up to about
    257^3 the 16 x 16 tiles of one output a thread ran fastest of every row (H200, 2026-11-30,
    benchmarks/results/probe-small-products-*: 128^3 4.1 us against sgemm32x128's 9.6), from 384^3 or a long K
    the SGEMM tiles did. Batches and float64 keep their rows (not measured / slower there)."""
    p = Problem(*shape, "f32", "f32", "float32", True, True)
    assert (plan(p, H100).algorithm == "tiled16x64") == expected
    assert plan(replace(p, batch=2), H100).algorithm != "tiled16x64"
    assert plan(replace(p, dtype="f64", out_dtype="f64", mode="native"), H100).algorithm != "tiled16x64"


def test_a_forced_split_of_a_small_float32_product_takes_auto_s_fastest_splitting_row():
    """matmul_plan(a, b, splits=4) of a product auto runs on tiled16x64 (which does not split K) forces the
    split on the fastest of auto's candidates that splits, instead of refusing a variant the caller never
    named."""
    p = Problem(128, 128, 128, "f32", "f32", "float32", True, True)
    assert plan(p, H100).algorithm == "tiled16x64"
    q = forced(p, H100, "auto", 4)
    assert q.splits == 4 and q.variant.splits_k and q.algorithm.startswith("sgemm")
    with pytest.raises(ValueError, match="does not split K"):
        forced(p, H100, "tiled16x64", 4)  # named, it is the caller's to refuse


@pytest.mark.parametrize("a_trans, b_trans", [(True, False), (False, True), (True, True)])
def test_small_float32_products_with_a_transposed_operand_read_it_in_place(a_trans, b_trans):
    """tiled16x64 reads row-major operands only; auto does not take it where a transposed operand would be
    copied first (not measured), but the SGEMM tile that reads that layout in place."""
    for side in (64, 128, 200):
        q = plan(Problem(side, side, side, "f32", "f32", "float32", True, True, 1, a_trans, b_trans), H100)
        assert q.algorithm.startswith("sgemm") and not (q.copy_a or q.copy_b), q


def test_the_dmma_split_costs_more_where_the_reduction_launches_plainly():
    """The DMMA rows' split cost was fitted with the reduction queued as the product's programmatic dependent
    (sm_90 and later); before sm_90 it launches plainly and the model charges the difference."""
    p = Problem(256, 256, 256, "f64", "f64", "native", True, True)
    v = VARIANTS["dmma64x64"]
    older = Target(80, H100.sm_count, H100.max_smem, H100.modules)
    gap = model(v, p, older, 4, 64) - model(v, p, H100, 4, 64)
    assert gap == pytest.approx(v.split_launch_before_sm90_s - v.split_launch_s) and gap > 0
    assert model(v, p, older, 1, 256) == model(v, p, H100, 1, 256)


def test_auto_s_float32_candidates_compute_at_one_mode_and_only_float32_takes_the_teaching_tile():
    """bench sweep times, beside auto's plan, the rows computing at auto's precision: for a small float32
    product the teaching tile (mode "any") and the SGEMM rows (mode "float32") both compute exact FP32 and are
    timed together; the 16-bit and float64 benchmarks leave the teaching tile out (auto_dtypes)."""
    p = Problem(128, 128, 128, "f32", "f32", "float32", True, True)
    rows = candidates(p, H100, 1)
    assert "tiled16x64" in [v.name for v in rows] and any(v.name.startswith("sgemm") for v in rows)
    assert {v.computes("f32") for v in rows} == {"float32"}
    teaching = VARIANTS["tiled16x64"]
    assert teaching.auto_may_take("f32") and not any(teaching.auto_may_take(d) for d in ("f16", "bf16", "f64"))
    assert teaching.computes("f16") == "native" and teaching.computes("f32") == "float32"


@pytest.mark.parametrize("sfx", ["f16", "bf16"])
@pytest.mark.parametrize("a_trans", [False, True])
@given(m=st.integers(17, 20000), n=st.integers(2, 24), k=dims(20000, TILES))
def test_a_c_of_at_most_8_columns_is_not_given_to_the_wgmma_rows_that_read_b_row_major(sfx, a_trans, m, n, k):
    """Those rows ran 8-column products 1.2-2.3x over their model (auto_min_n): auto leaves such a C to the
    other rows; from 9 columns they are candidates again (C of more than 16 rows: fewer go to the matrix-vector
    rows)."""
    p = Problem(m, n, k, sfx, sfx, "native", True, True, 1, a_trans, False)
    row_major_b = {v.name for v in VARIANTS.values() if v.tma and v.tier == 1 and v.auto_min_n is not None}
    assert {"wgmma128x64", "wgmma64x64", "wgmma128x256at"} <= row_major_b
    assert not any(VARIANTS[name].reads_b_trans for name in row_major_b)
    names = {v.name for v in candidates(p, H100, 1)}
    assert bool(names & row_major_b) == (n >= 9), (names, n)
    q = plan(p, H100)
    assert q.swap or (q.algorithm in row_major_b) <= (n >= 9)


@pytest.mark.parametrize("mode", ["tf32", "tf32x3"])
def test_a_tensor_core_mode_binds_the_plan_matmul_plan_shows_for_each_alignment(mode):
    """auto at a tensor-core mode may run exact FP32, whose rows slow down on unaligned operands unlike the
    mode's: the bound plan for each alignment of A and B is the planner's for it (what matmul_plan shows)."""
    from gpumat.matmul.engine import BoundPlan

    differs = 0
    for m, n, k in ((32, 1024, 512), (300, 500, 200), (128, 128, 128), (64, 4096, 4096), (1000, 3001, 777)):
        p = Problem(m, n, k, "f32", "f32", mode)
        bound = BoundPlan.for_problem(p, H100, "auto", FAKE_DEVICE)
        made = {key: plan(replace(p, a_aligned=key[0], b_aligned=key[1]), H100) for key in ALIGNMENTS}
        for key, want in made.items():
            got = (bound._by_alignment[key] if bound._by_alignment else bound).plan
            assert (got.algorithm, got.splits, got.copy_a, got.copy_b) == (
                want.algorithm,
                want.splits,
                want.copy_a,
                want.copy_b,
            ), (m, n, k, key)
        differs += len({(q.algorithm, q.splits) for q in made.values()}) > 1
    assert differs  # the case the binding must see: plans that differ by alignment


ALIGNMENTS = [(x, y) for x in (True, False) for y in (True, False)]
