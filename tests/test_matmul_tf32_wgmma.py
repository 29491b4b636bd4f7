"""float32 at precision "tf32" on the TMA + wgmma kernel (sm_90a): the rows tf32_wgmma128x256bt,
tf32_wgmma128x128bt, tf32_wgmma128x64bt, tf32_wgmma64x64bt, tf32_wgmma64x32bt and tf32_wgmma64x16bt, all
auto's (cuda/matmul_wgmma_kmajor.cu, entries matmul_wgmma<BM>x<BN>bt_tf32). wgmma reads TF32 operands
from shared memory K-major only, so every row reads B stored transposed (x @ W.T in place); a row-major B
is transposed into aligned scratch first; the rows of at most 64 columns also run a layer on few tokens
swapped (C written transposed). The atbt rows (tf32_wgmma128x128atbt, 128x64atbt, 64x64atbt, 64x32atbt, 64x16atbt:
entries matmul_wgmma<BM>x<BN>atbt_tf32) also read A stored transposed, through registers: X.T @ W.T in
place, and above all a product with a row-major B swapped (C^T = B^T @ A^T), B read in place. The rows,
the plans auto makes with them, the split of K, the
tensor maps the launcher encodes (element type, boxes) and the kernels' arguments run without a GPU;
the products run on one (an H100 or another sm_90 GPU).

Error bound, elementwise relative to the scale |A| |B| (the float64 product of the magnitudes): the copy
engine rounds each operand to TF32 (11 significant bits, to nearest: unit roundoff u = 2^-11; the
tensor-map element type TFLOAT32), so a product of two rounded operands is off by at most 2u + u^2 =
2^-10 + 2^-22 of |a| |b|; the tensor cores accumulate in float32 and may truncate as they add, at most
2^-23 relative a step, K * 2^-23 over K terms; C is float32 (no further rounding but the epilogue's few
float32 operations). Had the operands been truncated instead (a wgmma reading raw float32), u would be
2^-10 and the product bound 2^-9 + 2^-20: test_the_copy_engine_rounds_the_operands_to_nearest tells the
two apart directly. A kernel that drops or repeats a k tile, a row or a column is off by orders of
magnitude more.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import (
    A100,
    ALL_MODULES,
    H100,
    SM86,
    SM90A_MODULES,
    TURING,
    bound_run,
    built_entries,
    dims,
    epilogue_reference,
    fake_matrix,
    poison,
    product_error,
    rng,
    rows_left_out,
)

import gpumat as gm
from gpumat.matmul import algorithms, engine
from gpumat.matmul.engine import (
    IDENTITY,
    SWAP_MAX_M,
    TENSOR_MAPS_EXACT,
    VARIANTS,
    WGMMA_SMEM,
    Problem,
    Target,
    built_modules,
    c_map_args,
)
from gpumat.runtime import geometry, kernels, tensormaps
from gpumat.runtime.tensormaps import DATA_TYPES

TF32_WGMMA = ["tf32_wgmma128x256bt", "tf32_wgmma128x128bt"]
# the narrower tiles (those that write C transposed too: a swapped layer's)
TF32_NARROW = ["tf32_wgmma128x64bt", "tf32_wgmma64x64bt", "tf32_wgmma64x32bt", "tf32_wgmma64x16bt"]
# 128 x 128 and the narrower tiles reading A stored transposed too (into registers): a row-major B's product
# swapped, X.T @ W.T
TF32_ATBT = ["tf32_wgmma128x128atbt"] + [name.replace("bt", "atbt") for name in TF32_NARROW]
TILES = {(128, 256), (128, 128), (128, 64), (64, 64), (64, 32), (64, 16)}
MODULE = "matmul_wgmma_kmajor"
NO_WGMMA = ALL_MODULES - SM90A_MODULES  # a build without sm_90 skips the sm_90a modules
SOURCE = Path(__file__).resolve().parents[1] / "cuda" / f"{MODULE}.cu"  # the entries
TEMPLATE = SOURCE.with_name("matmul_wgmma.cuh")  # the kernel they instantiate


def tf32_plan(m, n, k, target=H100, algorithm="auto", aligned=True, b_trans=False, mode="tf32", batch=1):
    p = Problem(m, n, k, "f32", "f32", mode, aligned, aligned, batch=batch, b_trans=b_trans)
    return engine.plan(p, target, algorithm)


def tolerance(k: int) -> float:
    """The elementwise bound of the module docstring: TF32 operands rounded to nearest, float32 sums."""
    return 2.0**-10 + 2.0**-22 + k * 2.0**-23


# ---- without a GPU: the rows ----


def test_the_rows_declare_their_kernels():
    """Every tile: mode tf32, B stored transposed read in place, TMA (aligned operands, copies otherwise),
    persistent, sm_90a alone, auto's candidates (the 64 x 32 and 64 x 16 ones for C of one column of
    tiles), a memory term counting the zeros staged past C's edges; a k tile of
    32 floats (128 bytes, the 16-bit rows' stage in bytes, so the same shared memory and block), splits of
    at least 4 k tiles; float32 in and out through the argument list with the operands' storage (for the
    FP32 recomputation of non-finite outputs)."""
    assert [name for name, v in VARIANTS.items() if v.mode == "tf32" and v.tma] == TF32_WGMMA + TF32_NARROW + TF32_ATBT
    for name in TF32_WGMMA + TF32_NARROW + TF32_ATBT:
        v = VARIANTS[name]
        bm, bn = v.tile
        layout = "atbt" if name in TF32_ATBT else "bt"
        assert name == f"tf32_wgmma{bm}x{bn}{layout}" and (bm, bn) in TILES and v.reads_a_trans == (layout == "atbt")
        block = (128 * (1 + bm // 64), 1, 1)  # a producer warpgroup and a consumer for each 64 rows
        assert (v.mode, v.args, v.block, v.smem) == ("tf32", "tensor_maps_exact", block, WGMMA_SMEM[v.tile])
        assert (v.smem, v.block) == (VARIANTS[f"wgmma{bm}x{bn}bt"].smem, VARIANTS[f"wgmma{bm}x{bn}bt"].block)
        assert v.reads_b_trans and v.needs_aligned and v.persistent and v.tma
        assert (v.min_arch, v.only_arch, v.tier, v.auto_archs) == (90, 90, 1, None)
        assert v.auto_max_n == (bn if bn < 64 else None)
        assert (v.bandwidth, v.stages_padding) == (engine.TF32_WGMMA_BANDWIDTH, True)
        assert (v.k_align, v.min_k_chunk) == (32, 128) and v.rate > 0
        assert list(v.kernels) == [("f32", "f32")]
        kernel = v.kernels[("f32", "f32")]
        assert (kernel.module, kernel.name) == (MODULE, f"matmul_wgmma{bm}x{bn}{layout}_tf32")
        assert kernel.signature == TENSOR_MAPS_EXACT == "TTTPiiiqiiiqiPqqPqqddPqiii" and kernel.dynamic_smem == v.smem
        assert kernels.DECLARED[kernel.name] is kernel
        assert name in algorithms("float32")


def test_the_kernel_source_spells_the_tf32_instructions_and_entries():
    """The entries, the m64n<BN>k8 TF32 wgmma without transpose immediates (the .tf32 forms have none),
    a stage of 128 bytes of K and the k step of 32 bytes the descriptors advance by."""
    src = SOURCE.read_text() + TEMPLATE.read_text()
    for name in TF32_ATBT:  # A from registers: four of them, then B's descriptor, scale-d and the two scales
        bm, bn = VARIANTS[name].tile
        assert f"GPUMAT_WGMMA_TF32(matmul_wgmma{bm}x{bn}atbt_tf32, {bm}, {bn}, true)" in src
        acc = bn // 2
        regs = ", ".join(f"%{acc + i}" for i in range(4))
        assert re.search(rf"m64n{bn}k8\.f32\.tf32\.tf32 [^;]*\}}, \{{{regs}\}}, %{acc + 4}, 1, 1, 1;", src), bn
    for bm, bn in TILES:
        assert f"GPUMAT_WGMMA_TF32(matmul_wgmma{bm}x{bn}bt_tf32, {bm}, {bn}, false)" in src
        # the instruction's operands: accumulators, the two descriptors, scale-d and the two scales
        # (BN / 2 accumulators %0.., then the descriptors)
        assert re.search(rf"m64n{bn}k8\.f32\.tf32\.tf32 [^;]*\}}, %{bn // 2}, %{bn // 2 + 1}, 1, 1, 1;", src), bn
    assert "constexpr int BK_BYTES = 128;" in src and "constexpr int KSTEP_BYTES = 32;" in src


def test_the_built_entries_do_not_spill():
    """Where the kernels are built for sm_90 (ARCHS with 90), every entry exists for sm_90a alone, with
    no spill and no stack (tests/test_kernels_cpu.py checks every entry's parameters against PTX)."""
    try:
        manifest = kernels.manifest()
    except FileNotFoundError:
        pytest.skip("the kernels are not built")
    if MODULE not in manifest["modules"]:
        pytest.skip(f"{MODULE} is not in this build (ARCHS={' '.join(manifest['archs'])})")
    entries = built_entries()[MODULE]
    for bm, bn in TILES:
        r = entries[f"matmul_wgmma{bm}x{bn}bt_tf32"]["resources"]
        assert list(r) == ["sm_90a"]
        assert (r["sm_90a"]["spill_stores"], r["sm_90a"]["spill_loads"], r["sm_90a"]["stack"]) == (0, 0, 0)


# ---- without a GPU: the plans ----


def test_auto_takes_the_wgmma_rows_for_large_tf32_products_on_the_h100():
    """4096^3 and 8192^3 at tf32 on the H100: the 128 x 256 tile (whole waves), B row-major transposed
    into N x K scratch first (the model charges the copy), x @ W.T read in place; a mid-size product
    takes the 128 x 64 tile (1024^3: 32 tiles of 128 x 256 on 132 SMs, 64 of 128 x 128, 128 of 128 x 64;
    H200, 2026-11-29: 11.3 us on 128 x 64, 14.4 on 128 x 128)."""
    for side in (4096, 8192):
        row_major = tf32_plan(side, side, side)
        assert (row_major.algorithm, row_major.splits) == ("tf32_wgmma128x256bt", 1)
        assert (row_major.copy_a, row_major.copy_b) == (False, True) and row_major.copy_bytes == side * side * 4
        x_wt = tf32_plan(side, side, side, b_trans=True)
        assert (x_wt.algorithm, x_wt.splits) == ("tf32_wgmma128x256bt", 1)
        assert not (x_wt.copy_a or x_wt.copy_b) and x_wt.copy_bytes == 0
        # B row-major is transposed on the way
        charged = 2 * side * side * 4 / engine.COPY_BANDWIDTH + engine.TRANSPOSING_COPY_LAUNCH_S
        assert row_major.seconds == pytest.approx(x_wt.seconds + charged)
        unaligned = tf32_plan(side, side, side, aligned=False, b_trans=True)  # both copied, still the fastest
        assert unaligned.algorithm == "tf32_wgmma128x256bt" and unaligned.copy_a and unaligned.copy_b
    # 1024^3: the 128 x 64 tile; B row-major, swapped on its atbt row, read in place (H200, 2026-11-30,
    # benchmarks/results/probe-tf32-atbt-*: 13.5 us against 15.6 with B's copy first on the bt row)
    swapped = tf32_plan(1024, 1024, 1024)
    assert (swapped.algorithm, swapped.swap) == ("tf32_wgmma128x64atbt", True)
    assert not (swapped.copy_a or swapped.copy_b)
    assert tf32_plan(1024, 1024, 1024, b_trans=True).algorithm == "tf32_wgmma128x64bt"
    # 3072^3: both tiles measured the same (bench sweep, H100: 222.8 and 224.5 us): either; B row-major,
    # also the 128 x 128 tile swapped, B in place (H200, 2026-12-01, benchmarks/results/probe-tf32-rows-*:
    # 198.3 us against 191.9 on 128 x 128 after B's copy)
    assert tf32_plan(3072, 3072, 3072, b_trans=True).algorithm in TF32_WGMMA
    assert tf32_plan(3072, 3072, 3072).algorithm in TF32_WGMMA + ["tf32_wgmma128x128atbt"]
    # the plan says what it copies
    assert "B into the layouts the kernel reads (B as N rows of K)" in str(tf32_plan(4096, 4096, 4096))


def test_auto_swaps_a_row_major_b_onto_the_atbt_rows_where_it_measured_faster():
    """A row-major B at tf32 read in place, swapped on an atbt row, no copy, where the H200 measured that
    faster than the plans before them (benchmarks/results/sweep-float32-tf32-*-2026-11-30 and
    probe-tf32-*): layers of 128 and 256 tokens (128 x 14336 x 4096: 90.3 us against 158.6), attention's
    values of a batch at head size 64; one product of 64 columns and the large squares keep their plans
    (4096 x 64 x 4096: 26.9 us unswapped against 29.4; 4096^3: the 128 x 256 tile after B's copy)."""
    for m, n, k, batch in ((128, 14336, 4096, 1), (128, 4096, 4096, 1), (256, 4096, 4096, 1), (1024, 64, 1024, 128)):
        q = tf32_plan(m, n, k, batch=batch)
        assert q.algorithm in TF32_ATBT and q.swap and not (q.copy_a or q.copy_b), q
    # and large batches and layers on 128-512 tokens on the 128 x 128 tile (H200, 2026-12-01,
    # benchmarks/results/probe-tf32-rows-*: 16 x 512 x 4096 x 1024 247.3 us against 343.5 on 128 x 64;
    # 64 x 1024^3 482.1 against 521.2 on 128 x 256 after B's copy)
    for m, n, k, batch in ((512, 4096, 1024, 16), (1024, 1024, 1024, 64), (512, 8192, 8192, 1)):
        q = tf32_plan(m, n, k, batch=batch)
        assert (q.algorithm, q.swap, q.copy_a or q.copy_b) == ("tf32_wgmma128x128atbt", True, False), q
    # 2048^3: the two within 2-4% of each other (57.1 us against 59.5 there; 55.2 and 56.4 in the sweep of
    # 2026-12-02): either
    q = tf32_plan(2048, 2048, 2048)
    assert q.algorithm in ("tf32_wgmma128x128atbt", "tf32_wgmma128x256bt"), q
    for m, n, k in ((4096, 64, 4096), (4096, 4096, 4096)):
        q = tf32_plan(m, n, k)
        assert not q.swap and q.algorithm not in TF32_ATBT, q


@given(m=dims(20000, (128, 256)), n=dims(20000, (128, 256)), k=dims(70000, (32, 128, 1024)), b_trans=st.booleans())
def test_exact_float32_and_tf32x3_never_take_the_wgmma_rows(m, n, k, b_trans):
    for mode in ("float32", "tf32x3"):
        for aligned in (True, False):
            q = tf32_plan(m, n, k, aligned=aligned, b_trans=b_trans, mode=mode)
            # (one row or column of C: a matrix-vector row, which computes exact FP32, any mode asked)
            assert q.algorithm not in TF32_WGMMA + TF32_NARROW
            assert q.variant.computes("f32") in (mode, "float32")


@pytest.mark.parametrize(
    "target",
    [A100, SM86, TURING, Target(90, 132, 227 * 1024, NO_WGMMA), Target(100, 148, 227 * 1024, ALL_MODULES)],
    ids=["A100", "sm_86", "Turing", "H100 without sm_90a", "sm_100"],
)
def test_other_gpus_plan_as_before(target):
    """Where the rows cannot run (not sm_90, or a build without the sm_90a module) every tf32 plan is the
    one the table without them makes; named, a row runs exact FP32 and says why."""
    shapes = [(4096, 4096, 4096), (1024, 1024, 1024), (300, 200, 500), (1, 1, 1), (256, 256, 65536)]
    for shape in shapes:
        for b_trans in (False, True):
            p = Problem(*shape, "f32", "f32", "tf32", b_trans=b_trans)
            with_rows = engine.plan(p, target)
            with rows_left_out(TF32_WGMMA + TF32_NARROW + TF32_ATBT):  # the table the planner reads, without the rows
                assert engine.plan(p, target) == with_rows
    for name in TF32_WGMMA + TF32_NARROW + TF32_ATBT:
        named = tf32_plan(64, 64, 64, target, name)
        assert named.variant.computes("f32") == "float32" and name in named.reason and "exact FP32" in named.reason


def test_batched_tf32_products_run_on_the_wgmma_rows_too():
    """Issue 41: a batch runs on the TMA rows (the batch's tiles are the persistent grid's work items)."""
    for batch in (2, 64):
        q = tf32_plan(4096, 4096, 4096, batch=batch, b_trans=True)
        assert q.splits == 1 and q.algorithm in TF32_WGMMA and q.grid == (132, 1, 1)
        named = tf32_plan(256, 256, 256, algorithm="tf32_wgmma128x256bt", batch=batch, b_trans=True)
        assert named.grid == (min(2 * batch, 132), 1, 1) and not named.copy_b


# ---- without a GPU: the split of K ----


@given(
    m=dims(5000, (128, 256)),
    n=dims(5000, (128, 256)),
    k=dims(70000, (32, 128, 1024)),
    name=st.sampled_from(TF32_WGMMA + TF32_NARROW),
    sms=st.sampled_from([1, 8, 132]),
)
def test_splits_fall_on_whole_k_tiles(m, n, k, name, sms):
    p = tf32_plan(m, n, k, Target(90, sms, 227 * 1024, ALL_MODULES), name, b_trans=True)
    v = VARIANTS[name]
    assert p.variant is v and geometry.cdiv(k, p.k_chunk) == p.splits
    if p.splits > 1:
        assert p.k_chunk % 32 == 0 and p.k_chunk >= 128 and p.reduce.name == "matmul_splitk_reduce_f32_f32"
    else:
        assert p.k_chunk == k and p.reduce is None
    kernel = p.kernel_problem  # (a swapped plan's grid covers C^T)
    assert p.grid == v.grid(kernel.m, kernel.n, p.splits, sms) and 1 <= p.grid[0] <= sms and p.grid[1:] == (1, 1)


@pytest.mark.parametrize(
    "tokens, n, k, row, swap",
    [
        # H200, 2026-11-29 (benchmarks/results/probe-tf32-wgmma-*), x @ W.T against cuBLAS TF32:
        (8, 8192, 8192, "tf32_wgmma64x16bt", True),  # 67.5 us (cuBLAS 77.7; 128 x 256 at 4 splits 83)
        (16, 14336, 4096, "tf32_wgmma64x16bt", True),  # 64.0 (68.8)
        (32, 14336, 4096, "tf32_wgmma64x32bt", True),  # 65.2 (68.0); two columns of 64 x 16 tiles: 91
        (64, 8192, 8192, "tf32_wgmma64x64bt", False),  # 70.0 (71.9)
    ],
)
def test_layers_on_few_tokens_run_swapped_on_the_narrow_tiles(tokens, n, k, row, swap):
    """A layer on at most 32 tokens (x @ W.T, W read in place) runs swapped, the weight's rows on the
    tile's 64 and the tokens on its 16 or 32 columns (one column of tiles: auto_max_n); at 64 tokens the
    64 x 64 tile runs it plain. The 128-row tiles stage 120 rows of zeros beside 8 tokens, which the
    memory term counts (planner.padding)."""
    q = tf32_plan(tokens, n, k, b_trans=True)
    assert (q.algorithm, q.swap, q.splits) == (row, swap, 1), q
    assert not (q.copy_a or q.copy_b)
    if swap:
        assert q.kernel_problem.n == tokens <= q.variant.tile[1] and "swapped" in q.reason
    wide = VARIANTS["tf32_wgmma128x256bt"]
    p = q.problem
    assert engine.padding(wide, p) == (n // 256) * (128 - tokens) * k * 4  # rows past M, every column of tiles
    assert engine.padding(VARIANTS[row], engine.swapped(p) if swap else p) < engine.padding(wide, p)


def test_swapped_plans_are_for_few_rows_of_one_matrix_or_a_row_major_b_at_tf32():
    """swappable: one matrix, 2-64 rows of C, at least 128 columns; at precision "tf32" also where the exact
    matrix-vector rows compute the shape (2-16 rows: auto weighs them against the tiles), never one row;
    and at tf32 with B row-major, any number of rows (the atbt rows read such a B in place only swapped)."""
    p = Problem(8, 4096, 4096, "f32", "f32", "tf32", b_trans=True)
    assert engine.swappable(p) and engine.swappable(replace(p, m=2)) and engine.swappable(replace(p, m=64))
    assert not engine.swappable(replace(p, m=1)) and not engine.swappable(replace(p, m=65))
    assert not engine.swappable(replace(p, n=127)) and not engine.swappable(replace(p, batch=2))
    assert not engine.swappable(replace(p, mode="float32"))  # the exact rows' own shape
    # any number of rows, from 128 columns; a batch from 64 (a 64-row tile)
    row_major_b = replace(p, b_trans=False)
    assert engine.swappable(replace(row_major_b, m=65)) and engine.swappable(replace(row_major_b, m=8192))
    assert not engine.swappable(replace(row_major_b, m=4096, n=64))
    assert engine.swappable(replace(row_major_b, m=1024, n=64, batch=512))
    assert not engine.swappable(replace(row_major_b, m=1024, n=63, batch=512))
    assert not engine.swappable(replace(row_major_b, m=65, mode="float32"))


def test_skinny_products_split_k():
    """256 x 256 x 65536: few tiles, a long K split on k tiles until the blocks cover about the SMs (the H200's
    sweeps timed 256 x 256 x 16384 fastest on 128 blocks: the 128 x 64 tiles at 16 splits, 128 x 128 at 32)."""
    q = tf32_plan(256, 256, 65536, b_trans=True)
    tiles = -(-256 // q.variant.tile[0]) * -(-256 // q.variant.tile[1])
    assert q.algorithm in TF32_WGMMA + TF32_NARROW and tiles * q.splits >= 128 and q.k_chunk % 32 == 0, q


def test_a_forced_split_must_end_on_a_k_tile():
    """The copy engine reads whole boxes of 32 k: a split ending inside one would add the next split's
    first products twice, so the planner refuses it (the mma.sync rows take any chunk)."""
    p = Problem(300, 200, 1000, "f32", "f32", "tf32", b_trans=True)
    for name in TF32_WGMMA + TF32_NARROW:
        with pytest.raises(ValueError, match="multiples of 32"):
            engine.forced(p, H100, name, 3, 350)
        q = engine.forced(p, H100, name, 3, 352)
        assert (q.splits, q.k_chunk) == (3, 352)
        assert engine.forced(p, H100, name, 4, 1000).splits == 1  # one layer covers K: no split at all
    assert engine.forced(p, H100, "tf32_128x128", 3, 350).k_chunk == 350
    if MODULE not in built_modules():
        pytest.skip(f"{MODULE} is not built: the fake sm_90 GPU would run exact FP32")
    a, b = fake_matrix(300, 1000), fake_matrix(200, 1000, ptr=0x7F0010000000)
    forced = gm.matmul_plan(a, b.T, algorithm="tf32_wgmma128x128bt", splits=3)  # k_chunk by default: on k tiles
    assert (forced.splits, forced.k_chunk) == (3, 352) and not (forced.copy_a or forced.copy_b)


# ---- without a GPU: what the launcher encodes and launches ----


SCRATCH = 0x7F4000000000  # what the stand-in pool hands out


def described(encoded_map) -> tuple:
    """(element type, address, sizes, byte strides, box) of an encoded map's arguments."""
    elem, args = encoded_map
    return elem, args["globalAddress"], args["globalDim"], args["globalStrides"], args["boxDim"]


def record_launch(monkeypatch, q, a, b, c, epilogue=IDENTITY):
    """Run plan q with nothing encoded or launched: (encoded maps, launches, copies)."""
    return bound_run(monkeypatch, q, a, b, c, epilogue, SCRATCH)


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("name", TF32_WGMMA + TF32_NARROW)
def test_x_at_w_transposed_is_launched_in_place_with_tf32_maps(monkeypatch, name, splits):
    """W (N x K, row-major) read in place: A's and W's maps have element type tf32 (the copy engine
    rounds) and boxes one 128-byte row wide, 32 floats: A 32 x BM, W 32 x BN; C (or split-K's float32
    layers) float32 in 32 x 64 boxes, or by plain stores from a tile of 16 columns (64 bytes, narrower
    than a box). After tma_c come A's and W's addresses and row strides."""
    v = VARIANTS[name]
    bm, bn = v.tile
    m, n, k, lda, ldw, ldc = 300, 520, 1000, 1004, 1008, 524  # 16-byte aligned rows, wider than the views
    q = engine.forced(Problem(m, n, k, "f32", "f32", "tf32", b_trans=True), H100, name, splits, 352)
    assert q.variant is v and q.splits == splits and not (q.copy_a or q.copy_b)
    pa, pw, pc = 0x7F0000000000, 0x7F0010000000, 0x7F0020000000
    epilogue = (2.0, 0.0, 0x7F0030000000, 1, 1, 1, 1)  # alpha 2, a float32 row bias, relu
    encoded, launches, copies = record_launch(monkeypatch, q, (pa, lda, 0), (pw, ldw, 0), (pc, ldc, 0), epilogue)
    assert not copies
    by_tma = bn * 4 >= 128
    maps = [described(x) for x in encoded]  # C's map first (it decides TMA stores), where C has one
    c_map, a_map, b_map = maps if by_tma else (None, *maps)
    assert a_map == ("tf32", pa, (k, m, 1), (lda * 4, m * lda * 4), (32, bm, 1))  # one matrix: one layer
    assert b_map == ("tf32", pw, (k, n, 1), (ldw * 4, n * ldw * 4), (32, bn, 1))
    out, out_ld = (pc, ldc) if splits == 1 else (SCRATCH, n)
    if by_tma:
        assert c_map == ("f32", out, (n, m, splits), (out_ld * 4, m * out_ld * 4), (32, 64, 1))
    kernel, grid, block, args, smem = launches[0]
    assert (kernel, grid, block, smem) == (f"matmul_wgmma{bm}x{bn}bt_tf32", q.grid, v.block, v.smem)
    products = (1, m * out_ld, 0)  # one product; C's layers (split partials) m rows apart; no batched operand
    storage = (pa, lda, 0, pw, ldw, 0)
    assert args[3:] == (
        out,
        m,
        n,
        k,
        out_ld,
        q.k_chunk,
        int(by_tma),
        *products,
        *storage,
        *(IDENTITY if splits > 1 else epilogue),
    )
    assert len(args) == len(TENSOR_MAPS_EXACT)
    if splits > 1:  # the reduction adds the float32 layers into C and applies the caller's epilogue
        assert launches[1][0] == "matmul_splitk_reduce_f32_f32" and launches[1][3][:6] == (out, pc, m, n, ldc, 3)
        assert launches[1][3][6:] == epilogue
    assert len(launches) == (2 if splits > 1 else 1)


@pytest.mark.parametrize("name", TF32_WGMMA + TF32_NARROW)
def test_a_row_major_b_is_transposed_and_an_unaligned_a_copied_first(monkeypatch, name):
    """B row-major (K x N): transposed into N x K scratch with rows padded to 16 bytes, which the map and
    the kernel's W argument then describe; A with a 16-byte misaligned row stride: copied row-major."""
    v = VARIANTS[name]
    m, n, k = 129, 255, 97
    q = engine.plan(Problem(m, n, k, "f32", "f32", "tf32", a_aligned=False), H100, name)
    assert q.copy_a and q.copy_b and q.copy_bytes == (m * k + k * n) * 4
    pa, pb, pc = 0x7F0000000004, 0x7F0010000000, 0x7F0020000000
    encoded, launches, copies = record_launch(monkeypatch, q, (pa, 99, 0), (pb, 256, 0), (pc, 256, 0))
    aligned_k = 104  # 97 floats rounded up to whole 32-byte sectors
    assert [kind for kind, _ in copies] == ["copy", "transpose"]
    assert copies[0][1][:5] == (pa, SCRATCH, m, k, 99) and copies[0][1][5] == aligned_k
    # transposed on the way: the source is k x n (row stride 256), the copy n x k
    assert copies[1][1][:5] == (pb, SCRATCH, k, n, 256) and copies[1][1][5] == aligned_k
    a_map, b_map = (described(x) for x in encoded)  # no C map: 255 floats a row are not whole 16-byte pieces
    assert a_map == ("tf32", SCRATCH, (k, m, 1), (aligned_k * 4, m * aligned_k * 4), (32, v.tile[0], 1))
    assert b_map == ("tf32", SCRATCH, (k, n, 1), (aligned_k * 4, n * aligned_k * 4), (32, v.tile[1], 1))
    args = launches[0][3]
    assert args[2] == engine.NO_MAP and args[9] == 0  # C by plain stores
    assert args[13:19] == (SCRATCH, aligned_k, 0, SCRATCH, aligned_k, 0)


def test_of_the_k_major_tiles_only_those_of_at_most_64_columns_write_c_transposed():
    """The swapped plan (C^T = op(B)^T @ op(A)^T, written into C stored transposed) needs the strided
    epilogue, which the K-major TF32 bodies of 128 and 256 columns have no registers for; the atbt tiles,
    128 x 128 among them, write it."""
    assert {name for name in TF32_WGMMA + TF32_NARROW if VARIANTS[name].writes_c_trans} == set(TF32_NARROW)
    assert all(VARIANTS[name].writes_c_trans for name in TF32_ATBT)
    p = Problem(8, 4096, 4096, "f32", "f32", "tf32", b_trans=True)
    with pytest.raises(ValueError, match="swapped"):
        engine.forced(p, H100, "tf32_wgmma128x128bt", 1, swap=True)
    with pytest.raises(ValueError, match="swapped"):  # one row of C: the matrix-vector rows' shape alone
        engine.forced(replace(p, m=1), H100, "tf32_wgmma64x16bt", 1, swap=True)


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("name", TF32_NARROW)
def test_a_swapped_layer_launches_c_transposed_with_the_operands_exchanged(monkeypatch, name, splits):
    """x @ W.T on 8 tokens (8 x 520 x 1000), swapped: the kernel's A is W's storage (520 rows of K), its B
    x's (8 rows of K), both tf32 maps read in place; no C map, C leaves by plain stores into C stored
    transposed (c_store 2); the storage the maps describe follows them (W, then x) for the FP32
    recomputation of non-finite outputs; a bias over C's columns is one over the kernel's rows. Split:
    float32 partials laid out as C (m x n a split), reduced into C with the caller's epilogue."""
    v = VARIANTS[name]
    bm, bn = v.tile
    m, n, k = 8, 520, 1000
    q = engine.forced(Problem(m, n, k, "f32", "f32", "tf32", b_trans=True), H100, name, splits, 352, swap=True)
    assert q.swap and q.kernel_problem == Problem(n, m, k, "f32", "f32", "tf32", b_trans=True)
    assert not (q.copy_a or q.copy_b) and q.grid == v.grid(n, m, splits, 132)
    x, w, c = (0x7F0000000000, 1004, 0), (0x7F0010000000, 1008, 0), (0x7F0020000000, 524, 0)
    bias_over_columns = (1.0, 0.0, 0x7F0030000000, 1, 1, 1, 0)
    encoded, launches, copies = record_launch(monkeypatch, q, x, w, c, bias_over_columns)
    assert not copies
    a_map, b_map = (described(e) for e in encoded)  # no C map
    assert a_map == ("tf32", w[0], (k, n, 1), (w[1] * 4, n * w[1] * 4), (32, bm, 1))
    assert b_map == ("tf32", x[0], (k, m, 1), (x[1] * 4, m * x[1] * 4), (32, bn, 1))
    kernel, grid, _, args, _ = launches[0]
    assert kernel == f"matmul_wgmma{bm}x{bn}bt_tf32" and grid == q.grid
    out, out_ld = (c[0], c[1]) if splits == 1 else (SCRATCH, n)
    assert args[2] == engine.NO_MAP
    assert args[3:10] == (out, n, m, k, out_ld, q.k_chunk, engine.C_STORE["transposed"])
    assert args[13:19] == (w[0], w[1], 0, x[0], x[1], 0)
    if splits == 1:
        assert len(launches) == 1 and args[19:] == (1.0, 0.0, 0x7F0030000000, 1, 2, 1, 0)
    else:
        assert args[10:12] == (1, m * n) and args[19:] == IDENTITY
        reduce, _, _, rargs, _ = launches[1]
        assert len(launches) == 2 and reduce == "matmul_splitk_reduce_f32_f32"
        assert rargs == (SCRATCH, c[0], m, n, c[1], splits, *bias_over_columns)


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("name", TF32_ATBT)
def test_a_row_major_b_swaps_onto_the_atbt_rows_both_read_in_place(monkeypatch, name, batch):
    """A @ B with B row-major (300 x 520 x 1000, one product or a batch of three in strided layers), swapped
    on each atbt row: the kernel's A is B's storage read M-major (K rows of N, tf32 boxes of 32 floats of
    N x 32 k rows), its B is A's storage (M rows of K, 32 x BN boxes); no copy, no C map, C written
    transposed (c_store 2) with its layers C's batch stride apart; after the epilogue's place, the storage
    the maps describe, B's before A's (the recomputation of non-finite outputs reads them)."""
    v = VARIANTS[name]
    bm, bn = v.tile
    m, n, k, lda, ldb, ldc = 300, 520, 1000, 1004, 524, 528
    sa, sb, sc = (m * lda + 8, k * ldb + 4, m * ldc + 12) if batch > 1 else (0, 0, 0)
    q = engine.forced(Problem(m, n, k, "f32", "f32", "tf32", batch=batch), H100, name, 1, swap=True)
    assert q.swap and not (q.copy_a or q.copy_b) and q.kernel_problem.m == n and q.kernel_problem.n == m
    pa, pb, pc = 0x7F0000000000, 0x7F0010000000, 0x7F0020000000
    encoded, launches, copies = record_launch(monkeypatch, q, (pa, lda, sa), (pb, ldb, sb), (pc, ldc, sc))
    assert not copies and len(launches) == 1
    a_map, b_map = (described(e) for e in encoded)  # no C map
    assert a_map == ("tf32", pb, (n, k, batch), (ldb * 4, (sb or k * ldb) * 4), (32, 32, 1))
    assert b_map == ("tf32", pa, (k, m, batch), (lda * 4, (sa or m * lda) * 4), (32, bn, 1))
    kernel, grid, block, args, smem = launches[0]
    assert (kernel, grid, block, smem) == (f"matmul_wgmma{bm}x{bn}atbt_tf32", q.grid, v.block, v.smem)
    assert args[2] == engine.NO_MAP
    assert args[3:10] == (pc, n, m, k, ldc, k, engine.C_STORE["transposed"])
    assert args[10:13] == ((batch, sc, 3) if batch > 1 else (1, m * ldc, 0))
    assert args[13:19] == (pb, ldb, sb, pa, lda, sa) and args[19:] == IDENTITY


def test_tensor_map_boxes_are_one_128_byte_row_wide_for_every_element_type(monkeypatch):
    """One mechanism: a box's inner extent is 128 bytes (the kernels' swizzled shared-memory rows), 64
    16-bit elements or 32 float32, and the row stride is in bytes of the element type; tf32 is float32
    in memory (4 bytes) with the driver's TFLOAT32 type (rounds to nearest on the way in)."""
    encoded = []
    monkeypatch.setattr(tensormaps, "encode_tiled", lambda elem, args: encoded.append((elem, args)) or bytes(128))
    engine.tensor_map.cache_clear()
    try:
        for elem, width, size in (("f16", 64, 2), ("bf16", 64, 2), ("f32", 32, 4), ("tf32", 32, 4)):
            engine.tensor_map(elem, 0x7F0000000000, 300, 1000, 1008, 256)
            got, args = encoded[-1]
            assert got == elem and args["boxDim"] == (width, 256, 1) and args["globalStrides"][0] == 1008 * size
            assert args["boxDim"][0] * size == engine.SWIZZLE_BYTES == 128
        with pytest.raises(ValueError, match="16-byte"):
            engine.tensor_map("tf32", 0x7F0000000000, 4, 5, 5, 128)  # 20-byte rows
    finally:
        engine.tensor_map.cache_clear()
    assert DATA_TYPES["tf32"] == ("CU_TENSOR_MAP_DATA_TYPE_TFLOAT32", 4)
    assert DATA_TYPES["f32"] == ("CU_TENSOR_MAP_DATA_TYPE_FLOAT32", 4)
    driver = pytest.importorskip("cuda.bindings.driver")
    for name, _ in DATA_TYPES.values():
        assert hasattr(driver.CUtensorMapDataType, name)


# ---- on the GPU ----

# epilogues the by-name tests draw: (alpha, beta, bias: none, a row or a column, a float32 bias (else C's
# dtype: float32 too), activation)
EPILOGUES = st.tuples(
    st.sampled_from([1.0, -1.5]),  # alpha
    st.sampled_from([0.0, 0.0, 0.5]),  # beta
    st.sampled_from([None, "row", "column"]),  # bias
    st.booleans(),
    st.sampled_from([None, "relu", "gelu", "gelu_tanh"]),
)


# the few-token layers' columns and the K the swapped by-name tests draw
SWAPPED_N = st.one_of(st.sampled_from([128, 129, 191, 257]), st.integers(128, 700))
DRAWN_K = dims(900, (32, 128, 256))


def runnable(names=None) -> list[str]:
    target = Target.of(gm.device())
    names = TF32_WGMMA + TF32_NARROW if names is None else names
    return [name for name in names if engine.unavailable(VARIANTS[name], target) is None]


def need_rows(names=None) -> list[str]:
    names = runnable(names)
    if not names:
        pytest.skip(f"the TF32 wgmma rows need sm_90a; this GPU is sm_{gm.device().arch}")
    return names


def upload(host: np.ndarray, pad_left: int, pad_right: int):
    """host inside a wider random float32 matrix: (parent, view of host's place)."""
    h, w = host.shape
    parent = rng.uniform(-1, 1, (h, w + pad_left + pad_right)).astype(np.float32)
    parent[:, pad_left : pad_left + w] = host
    big = gm.Matrix.from_numpy(parent)
    return big, big[:, pad_left : pad_left + w]


def operands(m, n, k, b_trans: bool, pads=(0, 0, 0, 0)):
    """A (m x k) and op(B) (k x n) as views: B row-major, or W (n x k) row-major multiplied as W.T.
    Default paddings: rows of whole 16-byte pieces starting 16 bytes in (read in place). Returns
    (parents, A, B, a as float64, op(B) as float64)."""
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    pa, A = upload(a, *pads[:2])
    if b_trans:
        w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
        pb, W = upload(w, *pads[2:])
        return (pa, pb), A, W.T, a.astype(np.float64), w.T.astype(np.float64)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    pb, B = upload(b, *pads[2:])
    return (pa, pb), A, B, a.astype(np.float64), b.astype(np.float64)


def in_place_pads(k: int, n: int, b_trans: bool) -> tuple:
    return (4, -k % 4, 4, -(k if b_trans else n) % 4)


def round_tf32(x: np.ndarray, ties_away: bool = False) -> np.ndarray:
    """float32 rounded to TF32 (10 mantissa bits kept, the 13 low ones cleared), to nearest: ties to even,
    or away from zero. Finite, normal inputs whose rounding does not overflow."""
    bits = x.view(np.uint32).astype(np.uint64)
    if ties_away:
        bits = bits + 0x1000
    else:
        bits = bits + 0xFFF + ((bits >> 13) & 1)
    return (bits & 0xFFFFE000).astype(np.uint32).view(np.float32)


@pytest.mark.gpu
def test_the_copy_engine_rounds_the_operands_to_nearest():
    """X @ I.T with X's mantissas just below, at and just above half a TF32 unit, and carries into the
    exponent: the products by 1 and the sums with zeros are exact, so C is X as the tensor cores read it.
    It must be X rounded to nearest (ties either way), not X with the 13 low bits dropped: the bound of
    the module docstring rests on it (the tensor-map element type TFLOAT32)."""
    names = need_rows()
    m, k = 200, 64
    base = rng.uniform(1, 2, (m, k)).astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    low = np.array([0x0000, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x0001, 0x17FF, 0x0800], np.uint32)
    x = (base | low[rng.integers(0, len(low), (m, k))]).view(np.float32)
    x[0, :8] = np.float32(1.9999999)  # rounds up into the next binade
    x *= np.where(rng.random((m, k)) < 0.5, -1, 1).astype(np.float32) * np.float32(2.0**-3)
    even, away = round_tf32(x), round_tf32(x, ties_away=True)
    truncated = (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    assert not np.array_equal(even, truncated)
    X = gm.Matrix.from_numpy(x)
    identity = gm.Matrix.from_numpy(np.eye(k, dtype=np.float32))
    for name in names:
        plan = gm.matmul_plan(X, identity.T, algorithm=name)
        assert not (plan.copy_a or plan.copy_b), plan
        got = gm.matmul(X, identity.T, algorithm=name).to_numpy()
        assert ((got == even) | (got == away)).all(), (name, "not rounded to nearest")
        tie = (x.view(np.uint32) & 0x1FFF) == 0x1000
        assert np.array_equal(got[~tie], even[~tie]), name
    X.free()
    identity.free()


@pytest.mark.gpu
@pytest.mark.parametrize("name", TF32_WGMMA + TF32_NARROW)
@pytest.mark.parametrize("b_trans", [True, False], ids=["x_wt", "row_major_b"])
def test_each_row_matches_float64_on_shapes_around_its_tiles(name, b_trans):
    if name not in need_rows():
        pytest.skip(f"{name} does not run here")
    bm, bn = VARIANTS[name].tile
    shapes = [(1, 1, 1), (bm, bn, 32), (bm - 1, bn - 1, 31), (bm + 1, bn + 1, 33), (2 * bm + 1, 2 * bn + 1, 97)]
    shapes += [(300, 200, 1000), (2137, 108, 1055), (64, 64, 8192), (13, 31, 4099)]
    for m, n, k in shapes:
        parents, A, B, a64, b64 = operands(m, n, k, b_trans, in_place_pads(k, n, b_trans))
        C = gm.Matrix.empty(m, n)
        poison(C)
        plan = gm.matmul_plan(A, B, out=C, algorithm=name)
        assert plan.copy_b != b_trans and not plan.copy_a, plan  # a row-major B: transposed first
        gm.matmul(A, B, out=C, plan=plan)
        got = C.to_numpy().astype(np.float64)
        assert not np.isnan(got).any(), (name, m, n, k)
        err = np.abs(got - a64 @ b64) / np.maximum(np.abs(a64) @ np.abs(b64), 2.0**-100)
        assert err.max() <= tolerance(k), (name, m, n, k, err.max())
        for x in (*parents, C):
            x.free()


@pytest.mark.gpu
@given(
    m=dims(600, (128, 256)),
    n=dims(700, (128, 256)),
    k=dims(900, (32, 128, 256)),
    name=st.sampled_from(TF32_WGMMA + TF32_NARROW),
    b_trans=st.booleans(),
    splits=st.sampled_from([1, 2, 3]),
    c_tma=st.booleans(),
    epilogue=EPILOGUES,
)
def test_by_name_with_split_k_and_epilogues(m, n, k, name, b_trans, splits, c_tma, epilogue):
    """Each row by name, K split as drawn (on whole k tiles; the reduction then applies the epilogue)."""
    if name not in need_rows():
        pytest.skip(f"{name} does not run here")
    check_epilogue_product(name, m, n, k, b_trans, splits, c_tma, epilogue)


def swapped_draws(m, names):
    """The by-name swapped tests' draws: C's rows `m`, a few-token layer's columns, K, a row of `names`, W
    given transposed or not, splits, C by TMA or plain stores, an epilogue."""
    return given(
        m=m,
        n=SWAPPED_N,
        k=DRAWN_K,
        name=st.sampled_from(names),
        b_trans=st.booleans(),
        splits=st.sampled_from([1, 2, 3]),
        c_tma=st.booleans(),
        epilogue=EPILOGUES,
    )


@pytest.mark.gpu
@swapped_draws(dims(SWAP_MAX_M, (16, 32, 64)).filter(lambda m: m > 1), TF32_NARROW)
def test_swapped_layers_with_split_k_and_epilogues(m, n, k, name, b_trans, splits, c_tma, epilogue):
    """A layer on 2-64 tokens swapped by each row of at most 64 columns: C^T = op(B)^T @ op(A)^T with the
    weight on the tile's rows, written into C stored transposed by plain stores (a row-major W is first
    transposed, the kernel's A being its storage read K-major)."""
    if name not in need_rows():
        pytest.skip(f"{name} does not run here")
    check_epilogue_product(name, m, n, k, b_trans, splits, c_tma, epilogue, swap=True)


@pytest.mark.gpu
@given(
    m=st.integers(2, SWAP_MAX_M),
    n=st.integers(128, 400),
    k=dims(600, (32, 128)),
    b_trans=st.booleans(),
    pads=st.tuples(*[st.integers(0, 5)] * 6),
)
def test_swapped_layers_of_views_at_odd_offsets(m, n, k, b_trans, pads):
    """A swapped layer whose x, W or C the copy engine cannot read in place (odd offsets and strides): the
    kernel's operands (W's storage as its A, x's as its B) are copied into aligned scratch first, a
    row-major W transposed on the way; C, a view too, is written transposed in place and nothing around it."""
    names = [name for name in need_rows() if VARIANTS[name].writes_c_trans]
    check_views(names, m, n, k, b_trans, pads, swap=True)


def check_epilogue_product(name, m, n, k, b_trans, splits, c_tma, epilogue, swap=False):
    """act(alpha A B + beta C + bias) by the named row, K split as asked, swapped or not, against float64
    elementwise, relative to |alpha| |A| |B| + |beta| |C| + |bias|. C is a view inside a wider matrix,
    NaN-poisoned where beta is 0 (C is then never read): nothing outside it may change, no NaN stay. c_tma:
    C's rows start on 16 bytes and are whole 16-byte pieces (n rounded up to a multiple of 4), so it may
    leave by TMA stores (not from a tile of 16 columns, 64 bytes, narrower than a box, nor swapped); else by
    plain stores."""
    alpha, beta, bias_kind, _, activation = epilogue
    if c_tma:
        n += -n % 4
    left, right = (4, 4) if c_tma else (1, 2)
    parents, A, B, a64, b64 = operands(m, n, k, b_trans, in_place_pads(k, n, b_trans))
    pc, C = upload(rng.uniform(-1, 1, (m, n)).astype(np.float32), left, right)
    c64 = C.to_numpy().astype(np.float64)
    assert (c_map_args(C.elements, m, n, C.stride, 1, 4) is not None) == c_tma
    if not beta:
        poison(pc)
    bias, bias64 = None, 0.0
    if bias_kind:
        shape = (1, n) if bias_kind == "row" else (m, 1)
        bias = gm.Matrix.from_numpy(rng.uniform(-1, 1, shape).astype(np.float32))
        bias64 = bias.to_numpy().astype(np.float64)
    before = pc.to_numpy()
    if swap:
        plan = engine.forced(*engine.problem_of_call(A, B, C, name), name, splits, swap=True)
        # the kernel's A is op(B)'s storage: a bt row transposes a row-major B first, an atbt row one given as W.T
        assert plan.swap and plan.copy_a == (b_trans == VARIANTS[name].reads_a_trans) and not plan.copy_b, plan
    else:
        plan = gm.matmul_plan(A, B, out=C, algorithm=name, splits=splits)
        # A read in place (in_place_pads), unless the model runs the named row swapped (a row-major B of many
        # columns: C^T = B^T A^T, whose kernel A, B's storage, a bt row reads transposed into scratch)
        assert plan.swap or not plan.copy_a, plan
    assert plan.variant is VARIANTS[name], plan
    assert plan.splits == 1 or plan.k_chunk % 32 == 0, plan
    gm.matmul(A, B, out=C, plan=plan, alpha=alpha, beta=beta, bias=bias, activation=activation)
    after = pc.to_numpy()
    got = after[:, left : left + n].astype(np.float64)
    outside = np.r_[0:left, left + n : left + n + right]
    assert np.array_equal(after[:, outside], before[:, outside], equal_nan=True), "C's parent changed outside C"
    r, scale = epilogue_reference(a64, b64, alpha, beta, c64, None if bias is None else bias64, activation)
    assert not np.isnan(got).any(), (name, plan.splits, "an element of C not written, or poison read")
    # the bound (gelu's slope is at most 1.13) plus the epilogue's few float32 operations
    err = np.abs(got - r) / np.maximum(scale, 2.0**-100)
    assert err.max() <= 1.2 * tolerance(k) + 2.0**-20, (name, plan.splits, err.max())
    for x in (*parents, pc, *([bias] if bias is not None else [])):
        x.free()


@pytest.mark.gpu
@given(
    m=dims(300, (128,)),
    n=dims(300, (128, 256)),
    k=dims(300, (32, 128)),
    b_trans=st.booleans(),
    pads=st.tuples(*[st.integers(0, 5)] * 6),
)
def test_unaligned_views_are_copied_into_aligned_scratch(m, n, k, b_trans, pads):
    """Views at odd offsets and strides: an operand the copy engine cannot read is first copied (a row-major
    B transposed) into aligned scratch; C, a view too, is written in place and nothing around it."""
    check_views(need_rows(), m, n, k, b_trans, pads)


def check_views(names, m, n, k, b_trans, pads, swap=False):
    """A (m x k) and op(B) at odd offsets and strides (pads: left/right padding of A, B and C) into a
    NaN-filled C view, by each named row, swapped or not: an operand the copy engine cannot read in place
    (not 16-byte aligned, or a row-major W, which is transposed on the way) is copied into aligned scratch
    first, the kernel's A being W's storage where swapped; C holds the product and nothing around it
    changed."""
    parents, A, B, a64, b64 = operands(m, n, k, b_trans, pads[:4])
    pc, C = upload(np.full((m, n), np.nan, np.float32), *pads[4:])
    around = pc.to_numpy()
    storage_w = B.T if b_trans else B
    copies_x = A.elements % 16 != 0 or A.stride % 4 != 0
    unaligned_w = storage_w.elements % 16 != 0 or storage_w.stride % 4 != 0
    for name in names:
        # op(B)'s storage is read as it is where its layout is the one the kernel's operand has: N rows of K
        # (W, x @ W.T) for a plain plan's B and a bt row's swapped A, K rows of N (a row-major B) for an atbt one's
        copies_w = unaligned_w or b_trans == (swap and VARIANTS[name].reads_a_trans)
        if swap:
            plan = engine.forced(*engine.problem_of_call(A, B, C, name), name, 1, swap=True)
            assert plan.swap and (plan.copy_a, plan.copy_b) == (copies_w, copies_x), plan
        else:
            plan = gm.matmul_plan(A, B, out=C, algorithm=name)
            assert (plan.copy_a, plan.copy_b) == (copies_x, copies_w), plan
        gm.matmul(A, B, out=C, plan=plan)
        got = pc.to_numpy()
        assert product_error(got[:, pads[4] : pads[4] + n], a64, b64) < tolerance(k), name
        got[:, pads[4] : pads[4] + n] = around[:, pads[4] : pads[4] + n]
        np.testing.assert_array_equal(got, around)  # nothing outside the view was touched
    for x in (*parents, pc):
        x.free()


@pytest.mark.gpu
def test_x_at_w_transposed_reads_w_in_place():
    """A linear layer's x @ W.T: each row by name and auto (a TF32 wgmma row, where the model takes one)
    read W's storage by TMA, no copy; edges of the tiles, a poisoned C, relu fused bit for bit."""
    names = need_rows()
    target = Target.of(gm.device())
    for m, n, k in ((1, 1, 4), (128, 256, 32), (129, 257, 36), (127, 129, 132), (1024, 1024, 1024), (64, 520, 8192)):
        parents, X, WT, x64, wt64 = operands(m, n, k, True, in_place_pads(k, n, True))
        auto = gm.matmul_plan(X, WT, precision="tf32")
        modelled = engine.plan(Problem(m, n, k, "f32", "f32", "tf32", b_trans=True), target)
        assert auto.algorithm == modelled.algorithm
        if (m, n, k) == (1024, 1024, 1024) and target.sm_count == 132:  # H100 SXM / H200: 128 tiles, not 32
            assert auto.algorithm == "tf32_wgmma128x64bt"
        for name in (*names, "auto"):
            plan = gm.matmul_plan(X, WT, algorithm=name, precision=None if name != "auto" else "tf32")
            if plan.algorithm in TF32_WGMMA + TF32_NARROW:
                assert plan.variant.reads_b_trans and not (plan.copy_a or plan.copy_b), plan
            C = gm.Matrix.empty(m, n)
            poison(C)
            gm.matmul(X, WT, out=C, plan=plan)
            got = C.to_numpy()
            assert not np.isnan(got).any(), (name, m, n, k)
            assert product_error(got, x64, wt64) < tolerance(k), (name, m, n, k)
            relu = gm.matmul(X, WT, plan=plan, activation="relu").to_numpy()
            np.testing.assert_array_equal(relu, np.maximum(got, 0))
            C.free()
        for x in parents:
            x.free()


@pytest.mark.gpu
@pytest.mark.parametrize("name", TF32_WGMMA + TF32_NARROW)
def test_results_are_bitwise_deterministic(name):
    if name not in need_rows():
        pytest.skip(f"{name} does not run here")
    # odd strides (aligned copies first: the bits must not depend on where they land), a forced split-K,
    # x @ W.T in place, and (the rows that write C transposed) a layer on 24 tokens swapped, K split
    cases = [
        ((300, 129, 1001), False, None, (1, 2, 3, 0)),
        ((513, 296, 776), True, None, (4, 0, 4, 0)),
        ((96, 80, 20000), True, 8, (4, 0, 4, 0)),
    ]
    if VARIANTS[name].writes_c_trans:
        cases.append(((24, 1000, 3000), True, 3, (4, 0, 4, 0)))
    for (m, n, k), b_trans, splits, pads in cases:
        parents, A, B, _, _ = operands(m, n, k, b_trans, pads)
        if m <= SWAP_MAX_M:
            plan = engine.forced(*engine.problem_of_call(A, B, None, name), name, splits, swap=True)
        else:
            plan = gm.matmul_plan(A, B, algorithm=name, splits=splits)
        first = gm.matmul(A, B, plan=plan).to_numpy()
        gm.matmul(B.T, A.T, algorithm=name).free()  # other scratch in between
        for _ in range(2):
            np.testing.assert_array_equal(gm.matmul(A, B, plan=plan).to_numpy(), first)
        for x in parents:
            x.free()


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("swap", [False, True], ids=["plain", "swapped"])
def test_non_finite_outputs_are_what_fp32_gives(splits, swap):
    """NaN (the canonical 0x7fffffff too) and infinities in x and W propagate as in FP32, and a row whose
    only product is FLT_MAX * b (FLT_MAX rounds up to infinity in TF32) comes out finite and exact: the
    outputs the tensor cores leave non-finite are recomputed in FP32 (within each split of K). Two such
    rows: 17 (a tile's first consumer, the accumulators' upper half h = 0) and 89 (the 128-row tiles'
    second consumer, h = 1; a 64-row tile's second row of tiles). Swapped (the tiles of at most 64 columns,
    40 tokens): rows 17 and 34 of C, columns of the kernel's C^T, an odd and an even one (the accumulator
    pairs' second and first element), in other column tiles of the narrow rows. Unswapped, C is written
    twice: new (TMA stores) and into a view whose rows are off 16 bytes (plain stores from the
    accumulators, after the recomputation has used the consumer's buffers)."""
    names = [name for name in need_rows() if not swap or VARIANTS[name].writes_c_trans]
    m, n, k = (40, 300, 200) if swap else (140, 300, 200)
    exact_rows = (17, 34) if swap else (17, 89)
    x = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    plant_non_finite(x, w.T, exact_rows)
    parents = []
    pa, X = upload(x, 4, -k % 4)
    pw, W = upload(w, 4, -k % 4)
    pc, C = upload(np.full((m, n), np.nan, np.float32), 1, 2)  # rows off 16 bytes: C's plain stores
    parents += [pa, pw, pc]
    with np.errstate(invalid="ignore", over="ignore"):
        ref = x.astype(np.float64) @ w.T.astype(np.float64)
    for name in names:
        if swap:
            plan = engine.forced(*engine.problem_of_call(X, W.T, None, name), name, splits, swap=True)
        else:
            plan = gm.matmul_plan(X, W.T, algorithm=name, splits=splits)
        assert plan.splits == splits and plan.swap == swap and not (plan.copy_a or plan.copy_b)
        check_non_finite(gm.matmul(X, W.T, plan=plan).to_numpy(), ref, x, w.T, exact_rows)
        if not swap:  # (a swapped C is written transposed, by plain stores either way)
            gm.matmul(X, W.T, plan=plan, out=C)
            check_non_finite(C.to_numpy(), ref, x, w.T, exact_rows)
    for p in parents:
        p.free()


def plant_non_finite(x, b, exact_rows) -> None:
    """Into x (m x k) and op(B) = b (k x n; a transposed view writes W): the canonical NaN 0x7fffffff, a NaN
    and -inf in rows 5, 9 and 20 of x, +inf in column 11 of b; on each of exact_rows, x zero but FLT_MAX in
    column 8 or 40 and b's matching row positive and halved (FLT_MAX rounds up to infinity in TF32, the
    product does not)."""
    x.view(np.uint32)[5, 3] = 0x7FFFFFFF
    x[9, 150] = np.nan
    x[20, 0] = -np.inf
    b[7, 11] = np.inf
    for row, col in zip(exact_rows, (8, 40), strict=True):
        x[row, :] = 0
        x[row, col] = np.finfo(np.float32).max
        b[col, :] = np.abs(b[col, :]) * 0.5


def check_non_finite(got, ref, x, b, exact_rows) -> None:
    """C against the float64 reference of x (m x k) @ b (k x n) with the non-finite inputs the two tests
    plant (rows 5, 9 and 20 of x, column 11 of b): NaN and infinities where FP32 gives them, the exact rows
    (FLT_MAX times b) finite and within float32 rounding, the other elements within the TF32 bound."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))
    for row in exact_rows:
        np.testing.assert_allclose(got[row], ref[row], rtol=1e-6)
    rows = [r for r in range(x.shape[0]) if r not in (5, 9, 20, *exact_rows)]
    cols = [c for c in range(b.shape[1]) if c != 11]
    err = product_error(got[np.ix_(rows, cols)], x[rows].astype(np.float64), b[:, cols].astype(np.float64))
    assert err < tolerance(x.shape[1])


# ---- on the GPU: the atbt rows (A stored transposed, read into registers) ----


def need_atbt() -> list[str]:
    return need_rows(TF32_ATBT)


def transposed_operands(m, n, k, pads=(4, 0, 4, 0)):
    """X.T (m x k, X row-major k x m) and W.T (k x n, W row-major n x k) as views of padded parents, the
    layouts an atbt row reads unswapped. Returns (parents, A, B, a as float64, op(B) as float64)."""
    x = rng.uniform(-1, 1, (k, m)).astype(np.float32)
    w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    px, X = upload(x, pads[0], pads[1] if pads[1] else -m % 4)
    pw, W = upload(w, pads[2], pads[3] if pads[3] else -k % 4)
    return (px, pw), X.T, W.T, x.T.astype(np.float64), w.T.astype(np.float64)


@pytest.mark.gpu
@pytest.mark.parametrize("name", TF32_ATBT)
@pytest.mark.parametrize("layout", ["swapped_row_major_b", "xt_wt"])
def test_each_atbt_row_matches_float64_on_shapes_around_its_tiles(name, layout):
    """A @ B with B row-major, swapped (C^T = B^T A^T: B's storage is the kernel's M-major A, A's its K-major
    B, C written transposed), and X.T @ W.T plain: both read in place (no copy), C poisoned, on shapes of
    1, primes, the tile's sides and their neighbours, a long K and a C wider than one wave of tiles."""
    if name not in need_atbt():
        pytest.skip(f"{name} does not run here")
    bm, bn = VARIANTS[name].tile
    swap = layout == "swapped_row_major_b"
    # (m, n, k) of C; swapped, the kernel's tiles cover C^T: n on their rows (at least SWAP_MIN_N), m on
    # their columns
    around = [(bn, 128, 32), (bn - 1, 255, 31), (bn + 1, 129, 33), (2 * bn + 1, 2 * bm + 1, 97)]
    shapes = [(2, 128, 1), *around, (300, 200, 1000), (2137, 1080, 1055), (64, 4096, 257), (13, 389, 4099)]
    for m, n, k in shapes:
        if swap:
            parents, A, B, a64, b64 = operands(m, n, k, False, in_place_pads(k, n, False))
        else:
            parents, A, B, a64, b64 = transposed_operands(m, n, k)
        C = gm.Matrix.empty(m, n)
        poison(C)
        plan = engine.forced(*engine.problem_of_call(A, B, C, name), name, 1, swap=swap)
        assert plan.variant is VARIANTS[name] and plan.swap == swap and not (plan.copy_a or plan.copy_b), plan
        gm.matmul(A, B, out=C, plan=plan)
        got = C.to_numpy().astype(np.float64)
        assert not np.isnan(got).any(), (name, m, n, k, "an element of C not written")
        err = np.abs(got - a64 @ b64) / np.maximum(np.abs(a64) @ np.abs(b64), 2.0**-100)
        assert err.max() <= tolerance(k), (name, layout, m, n, k, err.max())
        for x in (*parents, C):
            x.free()


@pytest.mark.gpu
@swapped_draws(dims(600, (16, 32, 64, 128)).filter(lambda m: m > 1), TF32_ATBT)
def test_atbt_rows_swapped_with_split_k_and_epilogues(m, n, k, name, b_trans, splits, c_tma, epilogue):
    """Each atbt row swapped, K split as drawn, every epilogue, C a view: B row-major read in place (any
    number of rows of C), or given as W.T (at most 64 rows: swappable) and transposed into the kernel's
    M-major A first."""
    if name not in need_atbt():
        pytest.skip(f"{name} does not run here")
    if b_trans and m > SWAP_MAX_M:
        m = SWAP_MAX_M
    check_epilogue_product(name, m, n, k, b_trans, splits, c_tma, epilogue, swap=True)


@pytest.mark.gpu
@given(
    m=dims(400, (64, 128)).filter(lambda m: m > 1),
    n=st.integers(128, 400),
    k=dims(600, (32, 128)),
    b_trans=st.booleans(),
    pads=st.tuples(*[st.integers(0, 5)] * 6),
)
def test_atbt_rows_swapped_on_views_at_odd_offsets(m, n, k, b_trans, pads):
    """The atbt rows swapped on views the copy engine cannot read in place: the unaligned operands (and a
    B given as W.T) are copied first; C, a view, is written transposed in place and nothing around it."""
    if b_trans and m > SWAP_MAX_M:
        m = SWAP_MAX_M
    check_views(need_atbt(), m, n, k, b_trans, pads, swap=True)


@pytest.mark.gpu
def test_auto_reads_a_row_major_b_in_place_at_tf32():
    """auto on products whose B is row-major at tf32, where the model takes a swapped atbt row: no copy of
    B, the product within the bound; and the plan auto makes is the model's."""
    need_atbt()
    target = Target.of(gm.device())
    for m, n, k in ((1024, 1024, 1024), (128, 4096, 4096), (256, 4096, 4096), (97, 6007, 2049)):
        parents, A, B, a64, b64 = operands(m, n, k, False, in_place_pads(k, n, False))
        plan = gm.matmul_plan(A, B, precision="tf32")
        assert plan.algorithm == engine.plan(Problem(m, n, k, "f32", "f32", "tf32"), target).algorithm
        if plan.algorithm in TF32_ATBT:
            assert plan.swap and not (plan.copy_a or plan.copy_b), plan
        got = gm.matmul(A, B, plan=plan).to_numpy()
        assert product_error(got, a64, b64) < tolerance(k), (plan, m, n, k)
        for x in parents:
            x.free()


@pytest.mark.gpu
@pytest.mark.parametrize("name", TF32_ATBT)
def test_atbt_results_are_bitwise_deterministic(name):
    """The same bits call after call: swapped on a row-major B (K split, and not), X.T @ W.T plain, other
    scratch allocated in between."""
    if name not in need_atbt():
        pytest.skip(f"{name} does not run here")
    cases = [((300, 1001, 776), None), ((513, 296, 20000), 8), ((24, 1000, 3000), 3)]
    for (m, n, k), splits in cases:
        parents, A, B, _, _ = operands(m, n, k, False, (1, 2, 3, 0))
        plan = engine.forced(*engine.problem_of_call(A, B, None, name), name, splits or 1, swap=True)
        first = gm.matmul(A, B, plan=plan).to_numpy()
        gm.matmul(B.T, A.T, algorithm=name).free()
        for _ in range(2):
            np.testing.assert_array_equal(gm.matmul(A, B, plan=plan).to_numpy(), first)
        for x in parents:
            x.free()
    parents, A, B, _, _ = transposed_operands(333, 222, 1111)
    plan = engine.forced(*engine.problem_of_call(A, B, None, name), name, 1, swap=False)
    first = gm.matmul(A, B, plan=plan).to_numpy()
    np.testing.assert_array_equal(gm.matmul(A, B, plan=plan).to_numpy(), first)
    for x in parents:
        x.free()


@pytest.mark.gpu
@pytest.mark.parametrize("splits", [1, 3])
def test_atbt_non_finite_outputs_are_what_fp32_gives(splits):
    """As test_non_finite_outputs_are_what_fp32_gives, on the atbt rows swapped over a row-major B: the
    recomputation reads the kernel's A (B's storage, K rows of the kernel's M) down a column."""
    names = need_atbt()
    m, n, k = 140, 300, 200
    exact_rows = (17, 89)
    x = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    plant_non_finite(x, b, exact_rows)
    pa, X = upload(x, 4, -k % 4)
    pb, B = upload(b, 4, -n % 4)
    with np.errstate(invalid="ignore", over="ignore"):
        ref = x.astype(np.float64) @ b.astype(np.float64)
    for name in names:
        plan = engine.forced(*engine.problem_of_call(X, B, None, name), name, splits, swap=True)
        assert plan.splits == splits and plan.swap and not (plan.copy_a or plan.copy_b)
        check_non_finite(gm.matmul(X, B, plan=plan).to_numpy(), ref, x, b, exact_rows)
    for p in (pa, pb):
        p.free()


@pytest.mark.gpu
@pytest.mark.parametrize("shared", ["none", "a", "b"])
@pytest.mark.parametrize("batch", [1, 2, 3])
def test_atbt_rows_run_a_batch_with_a_row_major_b_swapped(batch, shared):
    """A batch whose B is row-major, swapped onto each atbt row (each matrix's C^T written into its layer of
    C stored transposed): A or B shared by the batch (batch stride 0), C a view in NaN-poisoned storage
    whose padding must come back unchanged, a bias over C's columns; each matrix bit for bit the 2-D
    swapped product by the same row."""
    names = need_atbt()
    m, n, k = 131, 136, 200
    a_host = rng.uniform(-1, 1, (m, k) if shared == "a" else (batch, m, k)).astype(np.float32)
    b_host = rng.uniform(-1, 1, (k, n) if shared == "b" else (batch, k, n)).astype(np.float32)
    bias_host = rng.uniform(-1, 1, (1, n)).astype(np.float32)
    A, B, bias = (gm.Matrix.from_numpy(x) for x in (a_host, b_host, bias_host))
    a64, b64 = a_host.astype(np.float64), b_host.astype(np.float64)
    ref = np.matmul(a64, b64) + bias_host
    scale = np.matmul(np.abs(a64), np.abs(b64)) + np.abs(bias_host)
    for name in names:
        store = gm.Matrix.from_numpy(np.full((batch, m + 3, n + 8), np.nan, np.float32))
        out = store[:, :m, :n]
        before = store.to_numpy()
        plan = engine.forced(*engine.problem_of_call(A, B, out, name), name, 1, swap=True)
        assert plan.swap and not (plan.copy_a or plan.copy_b), plan
        gm.matmul(A, B, out=out, plan=plan, bias=bias)
        after = store.to_numpy()
        product = after[:, :m, :n].copy()
        got = product.astype(np.float64)
        assert not np.isnan(got).any(), (name, "an element of C not written")
        assert (np.abs(got - np.broadcast_to(ref, got.shape)) / np.broadcast_to(scale, got.shape)).max() <= tolerance(k)
        after[:, :m, :n] = before[:, :m, :n]
        np.testing.assert_array_equal(after, before)  # nothing written outside the views
        for i in range(batch):
            ai, bi = (A if shared == "a" else A[i]), (B if shared == "b" else B[i])
            one = engine.forced(*engine.problem_of_call(ai, bi, None, name), name, 1, swap=True)
            with gm.matmul(ai, bi, plan=one, bias=bias) as ci:
                np.testing.assert_array_equal(ci.to_numpy(), product[i])
        store.free()
    for x in (A, B, bias):
        x.free()
