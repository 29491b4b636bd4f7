"""matmul without a GPU: argument checks happen before any device call; launch geometry covers C."""

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import ALL_MODULES, fake_matrix

import gpumat as gm
from gpumat.matmul.engine import VARIANTS, Problem, Target, plan
from gpumat.runtime import geometry

SGEMM = {name: v for name, v in VARIANTS.items() if v.mode == "float32"}  # the fast exact FP32 kernels


def f32_plan(m, n, k, sm_count=132, only=None, max_smem=227 * 1024):
    """What float32 at precision "float32" runs on an sm_90 GPU with these facts."""
    return plan(Problem(m, n, k, "f32", "f32", "float32"), Target(90, sm_count, max_smem, ALL_MODULES), only or "auto")


def test_shape_mismatch_is_rejected():
    with pytest.raises(ValueError, match="not aligned"):
        gm.matmul(fake_matrix(3, 4), fake_matrix(5, 2))


def test_out_of_wrong_shape_is_rejected():
    with pytest.raises(ValueError, match="out has shape"):
        gm.matmul(fake_matrix(3, 4), fake_matrix(4, 2, ptr=0x7F0010000000), out=fake_matrix(2, 3, ptr=0x7F0020000000))


def test_out_overlapping_an_input_is_rejected():
    a = fake_matrix(4, 4)
    b = fake_matrix(4, 4, ptr=0x7F0010000000)
    out = fake_matrix(4, 4, ptr=a.elements + 4 * 5)  # starts inside a
    with pytest.raises(ValueError, match="overlaps"):
        gm.matmul(a, b, out=out)


def test_unknown_algorithm_is_rejected():
    with pytest.raises(ValueError, match="unknown matmul algorithm"):
        gm.matmul_plan(fake_matrix(2, 2), fake_matrix(2, 2), algorithm="fastest")
    with pytest.raises(ValueError, match="unknown matmul algorithm"):
        gm.matmul(fake_matrix(2, 2), fake_matrix(2, 2, ptr=0x7F0010000000), algorithm="fastest")


@pytest.mark.parametrize("bad", [None, 3.0, [[1.0]], "A"])
def test_non_matrix_operands_are_rejected(bad):
    with pytest.raises(TypeError, match="gpumat.Matrix"):
        gm.matmul(bad, fake_matrix(1, 1))
    with pytest.raises(TypeError, match="gpumat.Matrix"):
        gm.matmul(fake_matrix(1, 1), bad)


def test_matmul_operator_declines_foreign_types():
    with pytest.raises(TypeError):
        fake_matrix(2, 2) @ 3


@given(rows=st.integers(1, 10**7), cols=st.integers(1, 10**7), sms=st.sampled_from([1, 46, 132, 148]))
def test_tiled_grid_covers_every_tile_within_limits(rows, cols, sms):
    for variant in VARIANTS.values():
        tile_rows, tile_cols = variant.tile
        gx, gy, gz = variant.grid(rows, cols, 1, sms)
        if variant.packs:  # several whole matrices a block: one product, one block
            assert (gx, gy, gz) == (1, 1, 1)
            continue
        if variant.persistent:  # one block a slot, up to the work items; blocks walk the rest
            # (a cluster's blocks share a work item, pairs of row tiles: whole clusters, at least one)
            c = variant.cluster
            works = geometry.cdiv(geometry.cdiv(rows, tile_rows), c) * geometry.cdiv(cols, tile_cols)
            assert gx % c == 0 and (gy, gz) == (1, 1)
            assert gx == c * max(1, min(works, sms * variant.blocks_per_sm // c))  # no idle slot while work is left
            continue
        assert 1 <= gx <= geometry.MAX_GRID_X and 1 <= gy <= geometry.MAX_GRID_YZ and gz == 1
        assert gx * tile_cols >= cols and (gx - 1) * tile_cols < cols
        tiles = geometry.cdiv(rows, tile_rows)
        if tiles <= 200_000:  # the grid-stride loop over row tiles visits each exactly once
            assert sorted(geometry.row_tiles_visited(gy, tiles)) == list(range(tiles))
        else:
            assert gy == min(tiles, geometry.MAX_GRID_YZ)


@given(
    m=st.integers(1, 10**6),
    n=st.integers(1, 10**6),
    splits=st.integers(2, 128),
    acc_bytes=st.sampled_from([4, 8]),
    sms=st.sampled_from([1, 46, 132, 148]),
)
def test_split_k_reduction_launch_gives_every_block_a_share_of_the_outputs(m, n, splits, acc_bytes, sms):
    (blocks, gy, gz), block = geometry.splitk_reduce_launch(m, n, splits, acc_bytes, sms)
    slices = geometry.splitk_slices(m, n, splits)
    assert block == (256 // slices, slices, 1) and block[0] * block[1] == 256
    assert (gy, gz) == (1, 1) and 1 <= blocks <= 8 * sms
    groups = geometry.cdiv(m * n, 16 // acc_bytes)  # a thread's (or a run's) 16 bytes of outputs
    assert blocks == min(geometry.cdiv(groups, block[0]), 8 * sms)  # no idle block; the grid-stride loop takes the rest


def test_split_k_runs_depend_on_the_problem_alone():
    # the order of the sums (and so the bits) must not change with the GPU: the rule reads M, N, splits
    assert geometry.splitk_slices(64, 64, 128) == geometry.SPLITK_SLICES  # 4096 outputs, 128 splits
    assert geometry.splitk_slices(64, 64, 8) == 1  # few splits: one thread a group has enough loads
    assert geometry.splitk_slices(4096, 4096, 128) == 1  # a big plane fills the GPU without runs
    assert geometry.splitk_slices(512, 512, 16) == geometry.SPLITK_SLICES and geometry.splitk_slices(512, 513, 16) == 1
    # the CUDA side reads the run count from the block; its constant is the same
    header = (Path(__file__).resolve().parents[1] / "cuda" / "gpumat.cuh").read_text()
    assert f"constexpr int SPLITK_SLICES = {geometry.SPLITK_SLICES};" in header


def test_block_shapes_are_legal():
    for variant in VARIANTS.values():
        threads = variant.block[0] * variant.block[1] * variant.block[2]
        assert 32 <= threads <= geometry.MAX_BLOCK_THREADS and threads % 32 == 0


def test_a_kernel_past_48_kib_of_shared_memory_asks_the_driver_for_it():
    """A launch past 48 KiB of dynamic shared memory fails (CUDA_ERROR_INVALID_VALUE) unless the function's
    attribute was raised first, which the Kernel does for the dynamic_smem it is declared with."""
    for variant in VARIANTS.values():
        if variant.smem > 48 * 1024:
            for kernel in variant.kernels.values():
                # (a sliced row's launches size their memory: its kernels ask for the most any launch may)
                most = kernel.dynamic_smem if variant.sliced and kernel.dynamic_smem > variant.smem else variant.smem
                assert kernel.dynamic_smem == most, (variant.name, kernel.name)


@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 200000))
def test_plans_cover_k_exactly_and_fit_the_grid(m, n, k):
    for only in (None, *SGEMM):
        p = f32_plan(m, n, k, 132, only)
        # auto: the SGEMM kernels or, for a small product, the one-output-a-thread tiles; for C of up to 16 rows or
        # columns the matrix-vector kernels
        thin = only is None and min(m, n) <= 16
        tiles = (*SGEMM, "tiled16x64") if only is None else SGEMM
        assert (p.algorithm.startswith("gemv_") if thin else p.algorithm in tiles) and only in (None, p.algorithm)
        if p.splits == 1:
            assert p.k_chunk == k
        else:  # every split has work, together they cover K, and boundaries keep 128-bit loads
            assert p.k_chunk % p.variant.k_align == 0 and geometry.cdiv(k, p.k_chunk) == p.splits
        gx, gy, gz = p.variant.grid(m, n, p.splits, 132)
        assert p.grid == (gx, gy, gz)
        assert gz == p.splits <= geometry.MAX_GRID_YZ and gx <= geometry.MAX_GRID_X


def test_plan_prefers_split_k_only_when_tiles_cannot_fill_the_gpu():
    assert f32_plan(8192, 8192, 8192).splits == 1
    assert f32_plan(256, 256, 65536).splits > 1


def test_plan_never_picks_a_kernel_the_gpu_cannot_hold():
    for shape in [(8192, 8192, 8192), (3001, 3011, 2999), (256, 256, 65536), (64, 64, 64)]:
        for max_smem in (48 * 1024, 64 * 1024, 99 * 1024, 227 * 1024):
            assert VARIANTS[f32_plan(*shape, 132, None, max_smem).algorithm].smem <= max_smem


def test_the_fast_kernels_are_the_exact_float32_candidates():
    """The fast rows for exact FP32: the seven SGEMM kernels, and the 128 x 128, 128 x 64 and few-row 64 x 128 and
    32 x 128 tiles reading A, B or both stored transposed, each splitting K (auto also takes the documents'
    16 x 16 tiles for small products: test_matmul_planner)."""
    plain = {"sgemm128x256k16", "sgemm128x256", "sgemm128x128", "sgemm128x64", "sgemm64x128", "sgemm64x64"}
    plain.add("sgemm32x128")
    tiles = ("128x128", "128x64", "64x128", "32x128")
    layouts = {f"sgemm{tile}{t}" for tile in tiles for t in ("at", "bt", "atbt")}
    assert set(SGEMM) == plain | layouts
    for name in layouts:
        v = SGEMM[name]
        assert (v.reads_a_trans, v.reads_b_trans) == ("at" in name, "bt" in name)
    for v in SGEMM.values():
        assert v.tier == 1 and v.splits_k and set(v.kernels) == {("f32", "f32")}
        assert v.kernels[("f32", "f32")].name == "matmul_" + v.name.replace("sgemm", "sgemm_")


def _sgemm_tiles() -> dict[str, dict[str, int]]:
    """cuda/matmul_fast.cu's tile shapes by name (Tile128x128, ...): BM, BN, BK, TM, STAGES, BPAD, THREADS, BS,
    and whether an entry reads B stored transposed (GPUMAT_SGEMM_LAYOUTS), read from the source itself."""
    src = (Path(__file__).resolve().parents[1] / "cuda" / "matmul_fast.cu").read_text()
    tiles = {}
    for name, args in re.findall(r"using (Tile\w+) = Tile<([\d, ]+)>;", src):
        bm, bn, bk, tm, stages, *pad = (int(x) for x in args.split(","))
        bpad = pad[0] if pad else 0
        tiles[name] = {
            "BM": bm,
            "BN": bn,
            "BK": bk,
            "THREADS": (bm // (4 * tm)) * (bn // 64) * 32,
            "BS": bn + bpad,
            "layouts": bool(re.search(rf"GPUMAT_SGEMM_LAYOUTS\(\w+, {name}, \d+\)", src)),
        }
    return tiles


def test_sgemm_transposed_b_copies_hit_every_shared_memory_bank_once():
    """The *bt entries copy B stored transposed (N rows of K) into Bs[k][n]: lane t of a warp writes k = t % BK
    of column n0 = t / BK (to its pair partner n0 ^ 1), one float each. With Bs rows a multiple of 32 banks
    apart those 32 floats fell in 4 banks (8-way conflicts: x @ W.T ran 1.15-1.3x slower than x @ W on the
    H200); the row padding (BS) spreads them over all 32. Replayed from the source's tile shapes, so a tile
    added or changed without its padding fails here."""
    tiles = {name: t for name, t in _sgemm_tiles().items() if t["layouts"]}
    assert {"Tile128x128", "Tile128x64", "Tile64x128", "Tile32x128"} <= set(tiles)
    for name, t in tiles.items():
        for warp in range(t["THREADS"] // 32):
            banks = set()
            for tid in range(32 * warp, 32 * warp + 32):
                k, n0 = tid % t["BK"], tid // t["BK"]
                banks.add((k * t["BS"] + (n0 ^ 1)) % 32)
            assert len(banks) == 32, (name, warp, sorted(banks))
        # the fragments' float4 reads of a Bs row stay 16-byte aligned
        assert t["BS"] % 4 == 0, name
