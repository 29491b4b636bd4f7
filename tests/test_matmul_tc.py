"""matmul on the tensor cores (precision "tf32x3" and "tf32"): accuracy against float64, views,
split-K, determinism, and the precision setting itself (the argument checks run without a GPU).

Error bounds, as ||C - A B||_F / || |A| |B| ||_F (the scale that rounding the operands is bounded by):
  * tf32: each operand rounded to 11 significant bits (u = 2^-11), so each product is off by at most
    2u + u^2 of |a||b|; plus the FP32 accumulation, K * 2^-23 at worst. About 1e-3, whatever K.
  * tf32x3: big + small keeps ~22 bits of each operand and only small * small (~2^-22) is dropped,
    so the error is that of the FP32 accumulation: the exact kernels' bound, 1e-5 here. Against the
    exact kernels themselves: within 2x of their relative error for K >= 256 (uniform inputs).
"""

import re
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import (
    ALL_MODULES,
    H100,
    check_view_product,
    dims,
    fake_matrix,
    poisoned,
    product_error,
    random,
    rel_error,
    strided_view,
)

import gpumat as gm
from gpumat.matmul.engine import VARIANTS, Problem, Target, mode_of, plan
from gpumat.runtime import geometry

MODES = ("tf32x3", "tf32")
TC_VARIANTS = {mode: {name: v for name, v in VARIANTS.items() if v.mode == mode} for mode in MODES}  # by precision
TC_ALGORITHMS = {name: mode for mode, names in TC_VARIANTS.items() for name in names}  # name -> mode
TC = list(TC_ALGORITHMS)  # every tensor-core kernel by name
FIRST = {mode: next(iter(names)) for mode, names in TC_VARIANTS.items()}  # the register-split kernel of each mode
# the TF32 rows of the TMA + wgmma kernel (sm_90a; tests/test_matmul_tf32_wgmma.py): on the H100, auto takes
# them for the larger tf32 products, copies of unaligned operands counted
TF32_WGMMA = {name for name, v in TC_VARIANTS["tf32"].items() if v.tma}
TF32X3_TOL = 1e-5


def matmul_mode(algorithm: str, precision) -> str:
    """The precision a float32 call with this algorithm and precision= runs at."""
    return mode_of("f32", algorithm, precision)


def tc_plan(mode: str, shape, target: Target, algorithm: str = "auto", aligned: bool = False):
    return plan(Problem(*shape, "f32", "f32", mode, aligned, aligned), target, algorithm)


def tolerance(algorithm: str, k: int) -> float:
    if TC_ALGORITHMS[algorithm] == "tf32":
        return 2.0**-10 + 2.0**-22 + k * 2.0**-23
    return TF32X3_TOL


# ---- without a GPU: the precision setting and its argument checks ----


@pytest.mark.parametrize("bad", ["fp32", "TF32", "highest", "", None, 3, "tf32x2"])
def test_bad_precision_names_are_rejected(bad):
    if bad is None:
        return  # None is valid: the default
    with pytest.raises(ValueError, match="unknown matmul precision"):
        gm.matmul(fake_matrix(2, 3), fake_matrix(3, 2, ptr=0x7F0010000000), precision=bad)
    with pytest.raises(ValueError, match="unknown matmul precision"):
        gm.set_matmul_precision(bad)
    with pytest.raises(ValueError, match="unknown matmul precision"):
        with gm.matmul_precision(bad):
            pass
    assert gm.get_matmul_precision() == "float32"


def test_a_precision_contradicting_the_named_kernel_is_rejected():
    a, b = fake_matrix(2, 3), fake_matrix(3, 2, ptr=0x7F0010000000)
    with pytest.raises(ValueError, match="computes at precision"):
        gm.matmul(a, b, algorithm="sgemm128x128", precision="tf32")
    with pytest.raises(ValueError, match="computes at precision"):
        gm.matmul(a, b, algorithm="tf32_128x128", precision="float32")
    with pytest.raises(ValueError, match="unknown matmul algorithm"):
        gm.matmul(a, b, algorithm="tf32_32x32")


def test_each_tf32_row_launches_its_kernels_tile_block_and_shared_memory():
    """The mma.sync TF32 rows against cuda/matmul_tc.cu: the tile each entry is instantiated with, its
    threads (32 a warp tile of WM x 32), its launch bounds' blocks an SM, and for the entries of the plain
    loop (3 stages of a BM x 36 A tile and a 32 x BN B tile) the shared memory, which the kernel file pins."""
    src = (Path(__file__).resolve().parents[1] / "cuda" / "matmul_tc.cu").read_text()
    tiles = {
        name: tuple(map(int, args)) for name, *args in re.findall(r"using (\w+) = Tile<(\d+), (\d+), (\d+)>;", src)
    }
    entries = {
        name: (tile, stages, int(blocks))
        for name, tile, stages, blocks in re.findall(r"GPUMAT_TF32_ENTRY\((\w+), Mode::\w+, (\w+), (\w+), (\d+),", src)
    }
    rows = {name: v for name, v in VARIANTS.items() if v.mode in MODES and not v.tma}
    assert {v.kernels[("f32", "f32")].name for v in rows.values()} == set(entries)
    for name, v in rows.items():
        kernel = v.kernels[("f32", "f32")]
        tile, stages, blocks = entries[kernel.name]
        bm, bn, wm = tiles[tile]
        assert v.tile == (bm, bn) and v.block == (32 * (bm // wm) * (bn // 32), 1, 1), name
        assert v.blocks_per_sm == blocks and kernel.dynamic_smem == v.smem, name
        if "splitsmem" not in name:
            smem = 3 * (bm * 36 + 32 * bn) * 4
            assert stages == "STAGES" and v.smem == smem and f"{tile}::SMEM_BYTES == {smem}" in src, name


def test_mode_resolution():
    assert matmul_mode("auto", None) == "float32"
    assert matmul_mode("auto", "tf32") == "tf32"
    assert matmul_mode("tiled16", None) == "float32"
    assert matmul_mode("tf32x3_128x128", None) == matmul_mode("tf32x3_128x128", "tf32x3") == "tf32x3"
    with gm.matmul_precision("tf32x3"):
        assert matmul_mode("auto", None) == "tf32x3"
        assert matmul_mode("auto", "float32") == "float32"  # the call's own argument wins
        assert matmul_mode("sgemm64x64", None) == "float32"  # a named kernel keeps its precision
    assert matmul_mode("auto", None) == "float32"


def test_defaults_nest_restore_and_stay_in_their_thread():
    assert gm.get_matmul_precision() == "float32"
    try:
        gm.set_matmul_precision("tf32")
        assert gm.get_matmul_precision() == "tf32"
        seen = []
        with gm.matmul_precision("tf32x3"):
            with gm.matmul_precision("float32"):
                assert gm.get_matmul_precision() == "float32"
            assert gm.get_matmul_precision() == "tf32x3"
            worker = threading.Thread(target=lambda: seen.append(gm.get_matmul_precision()))
            worker.start()
            worker.join()
        assert seen == ["tf32"]  # another thread sees the process default, not this thread's block
        with pytest.raises(RuntimeError):
            with gm.matmul_precision("tf32x3"):
                raise RuntimeError
        assert gm.get_matmul_precision() == "tf32"
    finally:
        gm.set_matmul_precision("float32")


def test_tensor_cores_need_sm80_and_the_shared_memory():
    h100, a100, rtx = 227 * 1024, 163 * 1024, 99 * 1024
    turing, consumer = Target(75, 40, h100, ALL_MODULES), Target(86, 84, rtx, ALL_MODULES)
    a100_gpu = Target(80, 108, a100, ALL_MODULES)
    assert FIRST == {"tf32x3": "tf32x3_128x128", "tf32": "tf32_128x128"}
    for mode in MODES:
        for shape in [(4096, 4096, 4096), (4097, 4097, 4097), (1, 1, 1)]:
            for aligned in (False, True):
                # Turing: the exact kernels run; consumer Ampere/Ada (99 KiB a block): the one TF32 tile that
                # fits (tf32_64x64, 51 KiB), and for tf32x3 (its tiles need 102-166 KiB) the exact kernels
                p = tc_plan(mode, shape, turing, aligned=aligned)
                assert p.variant.computes("f32") == "float32" and "exact FP32" in p.reason, mode
                p = tc_plan(mode, shape, consumer, aligned=aligned)
                if mode == "tf32" and shape != (1, 1, 1):
                    assert p.algorithm == "tf32_64x64", p.reason
                else:
                    assert p.variant.computes("f32") == "float32" and "exact FP32" in p.reason, mode
            if shape == (1, 1, 1):  # one row and column of C, memory-bound: exact FP32 wherever it runs
                for target in (H100, a100_gpu):
                    p = tc_plan(mode, shape, target)
                    assert p.variant.computes("f32") == "float32" and "exact FP32" in p.reason, (mode, target.arch)
                continue
            unaligned = {FIRST[mode]} | (TF32_WGMMA if mode == "tf32" else set())
            assert tc_plan(mode, shape, H100, aligned=False).algorithm in unaligned
            assert tc_plan(mode, shape, H100, aligned=True).algorithm in TC_VARIANTS[mode]
            assert tc_plan(mode, shape, a100_gpu).algorithm in TC_VARIANTS[mode]
        for name, v in TC_VARIANTS[mode].items():
            p = tc_plan(mode, (64, 64, 64), a100_gpu, name)
            if v.smem <= a100:
                assert p.algorithm == name
            else:  # a named tensor-core kernel the GPU cannot hold runs exact FP32, and says so
                assert p.variant.computes("f32") == "float32" and name in p.reason


@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 200000))
def test_tc_plans_cover_k_exactly_and_fit_the_grid(m, n, k):
    for name in TC:
        p = tc_plan(TC_ALGORITHMS[name], (m, n, k), H100, name)
        assert p.algorithm == name
        if p.splits == 1:
            assert p.k_chunk == k
        else:
            assert p.k_chunk % 32 == 0 and p.k_chunk % p.variant.k_align == 0
            assert geometry.cdiv(k, p.k_chunk) == p.splits
        v = TC_VARIANTS[TC_ALGORITHMS[name]][name]
        kernel = p.kernel_problem  # (a swapped plan's grid covers C^T)
        gx, gy, gz = v.grid(kernel.m, kernel.n, p.splits, 132)
        assert p.grid == (gx, gy, gz)
        if v.persistent:  # one block a slot, walking the (tile, split) work items
            assert 1 <= gx <= 132 * v.blocks_per_sm and (gy, gz) == (1, 1)
        else:
            assert gz == p.splits and gx <= geometry.MAX_GRID_X and gy <= geometry.MAX_GRID_YZ


# ---- on the GPU ----


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", TC)
@given(m=dims(), n=dims(), k=dims())
def test_matches_float64_reference(algorithm, m, n, k):
    a, b = random((m, k)), random((k, n))
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, poisoned(m, n) as C:
        gm.matmul(A, B, out=C, algorithm=algorithm)
        assert product_error(C.to_numpy(), a, b) < tolerance(algorithm, k)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["tf32x3", "tf32"])
@given(m=dims(), n=dims(), k=dims())
def test_auto_in_each_mode_matches_float64_reference(mode, m, n, k):
    a, b = random((m, k)), random((k, n))
    name = FIRST[mode]
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, poisoned(m, n) as C:
        gm.matmul(A, B, out=C, precision=mode)
        assert product_error(C.to_numpy(), a, b) < tolerance(name, k)


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", TC)
@given(m=st.integers(1, 200), n=st.integers(1, 200), k=st.integers(1, 200), pads=st.tuples(*[st.integers(0, 5)] * 6))
def test_views_with_odd_offsets_and_strides(algorithm, m, n, k, pads):
    check_view_product(algorithm, m, n, k, pads, tolerance(algorithm, k))


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", TC)
@given(m=dims(300), n=dims(300), k=dims(300), quads=st.tuples(*[st.integers(0, 2)] * 3))
def test_aligned_views_take_the_wide_copies_with_ragged_edges(algorithm, m, n, k, quads):
    """Strides padded to multiples of 4 floats and 16-byte aligned starts: the 16-byte copy path,
    with partial chunks wherever K or N is not a multiple of 4."""
    a, b = random((m, k)), random((k, n))
    views = []
    for host, q in zip((a, b, np.full((m, n), np.nan, np.float32)), quads, strict=True):
        w = host.shape[1]
        views.append(strided_view(host, 4 * q, (-w) % 4 + 4))
    (pa, A), (pb, B), (pc, C) = views
    assert A.stride % 4 == 0 and A.elements % 16 == 0 and B.stride % 4 == 0 and B.elements % 16 == 0
    gm.matmul(A, B, out=C, algorithm=algorithm)
    assert product_error(C.to_numpy(), a, b) < tolerance(algorithm, k)
    for x in (pa, pb, pc):
        x.free()


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", TC)
@given(
    m=dims(200),
    n=dims(200),
    k=st.integers(1, 3000),
    splits=st.sampled_from([2, 3, 5, 8]),
    chunk_tiles=st.integers(1, 12),
    odd_chunk=st.booleans(),
)
def test_split_k_matches_reference_for_any_chunking(algorithm, m, n, k, splits, chunk_tiles, odd_chunk):
    k_chunk = chunk_tiles * 32 - (3 if odd_chunk else 0)  # odd chunks move every split but the first to 4-byte copies
    tile = VARIANTS[algorithm].k_align if VARIANTS[algorithm].tma else 1  # TMA rows split on whole k tiles
    k_chunk = geometry.cdiv(k_chunk, tile) * tile
    splits = max(min(splits, -(-k // k_chunk) + 1), 2)
    if splits * k_chunk < k:
        k_chunk = geometry.cdiv(geometry.cdiv(k, splits), tile) * tile
    a, b = random((m, k)), random((k, n))
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, poisoned(m, n) as C:
        p = gm.matmul_plan(A, B, out=C, algorithm=algorithm, splits=splits, k_chunk=k_chunk)
        layers = min(splits, -(-k // k_chunk))  # layers that would start past K are dropped
        assert (p.algorithm, p.splits, p.k_chunk) == (algorithm, layers, k_chunk if layers > 1 else k)
        gm.matmul(A, B, out=C, plan=p)
        assert product_error(C.to_numpy(), a, b) < tolerance(algorithm, k)


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", TC)
def test_bitwise_deterministic_with_and_without_split_k(algorithm):
    for m, n, k in [(256, 256, 16384), (1000, 1100, 900)]:
        a, b = random((m, k)), random((k, n))
        with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
            first = gm.matmul(A, B, algorithm=algorithm).to_numpy()
            for _ in range(3):
                np.testing.assert_array_equal(gm.matmul(A, B, algorithm=algorithm).to_numpy(), first)
            assert product_error(first, a, b) < tolerance(algorithm, k)
            if (m, n, k) == (256, 256, 16384):
                assert gm.matmul_plan(A, B, algorithm=algorithm).splits > 1


@pytest.mark.gpu
def test_the_default_routes_calls_and_the_operator():
    a, b = random((300, 500)), random((500, 200))
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        exact = (A @ B).to_numpy()
        tf32 = gm.matmul(A, B, precision="tf32").to_numpy()
        assert not np.array_equal(exact, tf32)
        with gm.matmul_precision("tf32"):
            np.testing.assert_array_equal((A @ B).to_numpy(), tf32)
            np.testing.assert_array_equal(gm.matmul(A, B, precision="float32").to_numpy(), exact)
        np.testing.assert_array_equal((A @ B).to_numpy(), exact)


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", [name for name in TC_VARIANTS["tf32x3"] if "oneacc" not in name])
@pytest.mark.parametrize("k", [256, 1024, 4096, 16384])
def test_tf32x3_is_within_twice_the_exact_kernels_error(algorithm, k):
    """(The one-accumulator variant, the published scheme, is not: 1.8e-6 against 2e-7 at K = 256.)"""
    a, b = random((256, k)), random((k, 256))
    ref = a.astype(np.float64) @ b.astype(np.float64)
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        exact = rel_error(gm.matmul(A, B, precision="float32").to_numpy(), ref)
        tf32x3 = rel_error(gm.matmul(A, B, algorithm=algorithm).to_numpy(), ref)
        tf32 = rel_error(gm.matmul(A, B, precision="tf32").to_numpy(), ref)
    assert tf32x3 <= 2 * exact, (k, tf32x3, exact)
    assert tf32 > 10 * tf32x3  # the one-pass mode really is the coarse one


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", TC)
def test_nan_and_inf_propagate_like_numpy(algorithm):
    a, b = random((37, 19)), random((19, 41))
    a[3, 5], b[7, 11], a[20, 0] = np.nan, np.inf, -np.inf
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        got = gm.matmul(A, B, algorithm=algorithm).to_numpy()
    with np.errstate(invalid="ignore"):
        ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))
    finite = np.isfinite(ref)
    assert rel_error(got[finite], ref[finite]) < 2e-3


@pytest.mark.gpu
def test_many_row_tiles_walk_the_grid_stride_loop():
    m, n, k = 65535 * 128 + 77, 5, 3
    a, b = random((m, k)), random((k, n))
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, poisoned(m, n) as C:
        gm.matmul(A, B, out=C, precision="tf32x3")
        assert product_error(C.to_numpy(), a, b) < TF32X3_TOL


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", TC)
def test_canonical_nan_and_values_near_float32_max(algorithm):
    """0x7fffffff (the NaN CUDA itself makes) and FLT_MAX, which rounds up to infinity in TF32: the
    results are what FP32 gives (NaN rows stay NaN, finite products near the top stay finite)."""
    a, b = random((40, 70)), random((70, 50))
    a.view(np.uint32)[5, 3] = 0x7FFFFFFF
    a.view(np.uint32)[9, 3] = 0xFFFFFFFF
    a[17, :] = 0
    a[17, 8] = np.finfo(np.float32).max
    b[8, :] = np.abs(b[8, :]) * 0.5
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        got = gm.matmul(A, B, algorithm=algorithm).to_numpy()
    ref = a.astype(np.float64) @ b.astype(np.float64)
    assert np.isnan(got[5]).all() and np.isnan(got[9]).all()
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(ref))
    rows = [r for r in range(40) if r not in (5, 9, 17)]
    assert product_error(got[rows], a[rows], b) < tolerance(algorithm, 70)
    np.testing.assert_allclose(got[17], ref[17], rtol=1e-6)
