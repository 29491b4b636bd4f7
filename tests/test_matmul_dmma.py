"""float64 matmul on the FP64 tensor cores (cuda/matmul_dmma.cu, the engine's dmma rows).

References and bounds:
  * exact: integer-valued inputs with |a|, |b| <= 2^10 and K <= 2^12, so every product and every
    partial sum is an integer below 2^33, exact in FP64 whatever the order of the additions: the
    result must equal numpy's int64 product bit for bit.
  * random doubles (full 53-bit significands): against the product in np.longdouble (x87 extended,
    64-bit significand: its own error is about K * 2^-64 of |A||B|, far below the bound). An FP64 dot
    product of length K in any order of fused multiply-adds and additions is within
    gamma_K = K u / (1 - K u) of |A||B| elementwise (u = 2^-53); split-K adds one rounding per split.
    The tests use (K + splits + 1) u |A||B| elementwise. A float32-grade result (1e-7) fails it by
    six orders of magnitude.
CPU tests check the variant choice, the launch geometry, the split plans and the build report.
"""

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import ALL_MODULES, H100, built_entries, dims, fake_matrix, poison, poisoned

import gpumat as gm
from gpumat.matmul.engine import REDUCE, VARIANTS, Problem, Target, algorithms, model, plan, traffic
from gpumat.runtime import geometry

# the FP64 tensor-core rows (cuda/matmul_dmma.cu; small_stream has a float64 kernel of its own too)
DMMA = {n: v for n, v in VARIANTS.items() if getattr(v.kernels.get(("f64", "f64")), "module", "") == "matmul_dmma"}
NAMES = list(DMMA)
AUTO = [name for name, v in DMMA.items() if v.tier == 1]  # what auto chooses among
MIN_ARCH = min(v.min_arch for v in DMMA.values())
U = 2.0**-53


def f64_plan(m, n, k, arch, sm_count, max_smem, algorithm="auto"):
    return plan(Problem(m, n, k, "f64", "f64", "native"), Target(arch, sm_count, max_smem, ALL_MODULES), algorithm)


def auto_dmma(m, n, k, arch, sm_count, max_smem):
    """auto's float64 plan, or None where it runs the SIMT kernel."""
    p = f64_plan(m, n, k, arch, sm_count, max_smem)
    return None if p.algorithm == "simt64x64" else p


H100_FACTS = (H100.arch, H100.sm_count, H100.max_smem)
EXTENDED = np.finfo(np.longdouble).nmant >= 63
rng = np.random.default_rng()


def bound(a, b, splits: int = 1) -> np.ndarray:
    k = a.shape[1]
    return (k + splits + 1) * U * (np.abs(a) @ np.abs(b)) + np.finfo(np.float64).tiny


def reference(a, b) -> np.ndarray:
    if not EXTENDED:
        pytest.skip("np.longdouble has no extended precision on this platform (the reference needs it)")
    return np.asarray(a, np.longdouble) @ np.asarray(b, np.longdouble)


def assert_fp64_product(got, a, b, splits: int = 1):
    err = np.abs(np.asarray(got, np.longdouble) - reference(a, b))
    tol = bound(a, b, splits)
    assert np.all(err <= tol), f"max error {float(np.max(err / tol)):.3g} x the FP64 bound"


def integers(shape, top=1024):
    return rng.integers(-top, top + 1, size=shape).astype(np.float64)


# ---- without a GPU ----


def test_float64_lists_the_tensor_core_variants_and_keeps_the_others():
    names = algorithms("f64")
    assert set(NAMES) <= set(names) and {"auto", "simt64x64", "naive", "tiled16"} <= set(names)
    assert not set(NAMES) & set(algorithms("f32")) and not set(NAMES) & set(algorithms("f16"))
    a, b = fake_matrix(2, 3), fake_matrix(3, 2, ptr=0x7F0010000000)
    with pytest.raises(ValueError, match="unknown matmul algorithm"):
        gm.matmul(a, b, algorithm="dmma128x128")  # float32 operands: no such kernel


def test_shared_memory_of_each_variant_matches_the_kernel_source():
    """The byte counts the launches ask for are the kernel file's own (its static_assert)."""
    src = (Path(__file__).resolve().parents[1] / "cuda" / "matmul_dmma.cu").read_text()
    cfgs = dict(re.findall(r"using (\w+) = Cfg<([\w, ]+)>;", src))
    sizes = {}
    for name, args in cfgs.items():
        warps_m, warps_n, mt, bk, stages = (int(x) for x in args.split(",")[:5])
        bm, bn = warps_m * mt * 16, warps_n * 32
        sizes[name] = (bm, bn, warps_m * warps_n * 32, stages * (bm * (bk + 4) + bk * (bn + 4)) * 8)
    by_kernel = {
        "dmma128x128k16": "Big",
        "dmma128x128k32": "BigK32",
        "dmma64x128k16": "Half",
        "dmma128x64k16": "Narrow",
        "dmma64x64k16": "Small",
        "dmma32x128k16": "Rows32",
        "dmma16x128k16": "Rows16",
        "dmma32x32k16": "Tiny",
        "dmma128x128k16pipe": "BigPipe",
        "dmma128x64k16pipe": "NarrowPipe",
    }
    for name, v in DMMA.items():
        kernel = v.kernels[("f64", "f64")]
        stem = kernel.name[len("matmul_") : -len("_f64")]
        for layout in ("atbt", "at", "bt"):  # the entries reading a transposed operand share their tile's config
            stem = stem.removesuffix(layout) if stem.endswith("k16" + layout) else stem
        cfg = by_kernel[stem]
        bm, bn, threads, smem = sizes[cfg]
        assert v.tile == (bm, bn) and v.smem == smem and v.block == (threads, 1, 1), name
        assert kernel.dynamic_smem == smem, name
        assert f"SMEM_BYTES == {smem}" in src, (name, smem)  # the kernel file pins the same number


def test_auto_keeps_the_simt_kernel_where_there_are_no_fp64_tensor_cores():
    # (17 x 19: the smallest C past the matrix-vector rows' 16 rows or columns)
    for shape in [(17, 19, 1), (4096, 4096, 4096), (256, 256, 65536)]:
        assert auto_dmma(*shape, 75, 40, 64 * 1024) is None  # Turing
        assert auto_dmma(*shape, 86, 84, 99 * 1024) is None  # FP64 at 1/64 rate: the SIMT kernel
        assert auto_dmma(*shape, 90, 132, 16 * 1024) is None  # too little shared memory a block for any tile
        assert auto_dmma(*shape, 80, 108, 163 * 1024).algorithm in AUTO
        assert auto_dmma(*shape, *H100_FACTS).algorithm in AUTO
    for facts in [(75, 40, 64 * 1024), (86, 84, 99 * 1024), H100_FACTS]:  # C of one column: matrix-vector
        assert f64_plan(4096, 1, 4096, *facts).algorithm == "gemv_n1"
    with pytest.raises(ValueError, match="sm_80 or newer"):
        f64_plan(64, 64, 64, 75, 40, 64 * 1024, "dmma128x128")
    with pytest.raises(ValueError, match="shared memory"):
        f64_plan(64, 64, 64, 86, 84, 99 * 1024, "dmma128x128")


def test_the_few_row_tiles_wait_on_the_weight_and_on_the_sms_with_the_most_blocks():
    """dmma16x128 at 8 x 8192 x 8192 (64 column tiles): memory-bound at 2-8 splits, its time the longer of the
    bytes at the row's bandwidth and the fullest SM's share at its sm_bandwidth, plus the split's pass (at one
    split each of its 64 blocks walks all of K, and its arithmetic may take longer)."""
    v = VARIANTS["dmma16x128"]
    p = Problem(8, 8192, 8192, "f64", "f64", "native")
    nbytes = traffic(p)
    assert nbytes == (8 + 8192) * 8192 * 8 + 8 * 8192 * 8
    for splits, fullest in ((1, 1), (2, 1), (3, 2), (4, 2), (8, 4)):
        blocks = 64 * splits
        memory = max(nbytes / v.bandwidth, fullest * nbytes / blocks / v.sm_bandwidth)
        split = 0.0 if splits == 1 else (2 * splits + 1) * 8 * 8192 * 8 / v.scratch_bandwidth + v.split_launch_s
        k_chunk = 8192 // splits if splits != 3 else 2736
        if splits == 1:
            assert model(v, p, H100, splits, k_chunk) >= memory
        else:
            assert model(v, p, H100, splits, k_chunk) == pytest.approx(memory + split), splits
    # one block an SM at 2 splits: the weight's bytes at the row's bandwidth; 3 splits leave 60 SMs two blocks
    assert model(v, p, H100, 3, 2736) > model(v, p, H100, 2, 4096)


@pytest.mark.parametrize("b_trans", [False, True])
def test_auto_runs_a_few_rows_on_the_few_row_tiles(b_trans):
    """x @ W and x @ W.T (B read in place) in float64 on 2-32 rows: the 16- and 32-row tiles, never a 64-row
    one (which runs 2-32 times the mmas asked for: on the probe's 70 products of at most 32 rows a few-row tile
    was the fastest plan in 69; benchmarks/results/probe-dmma-few-rows-*)."""
    for m in (2, 8, 16, 24, 32):
        for n, k in ((3072, 1024), (8192, 8192), (14336, 4096), (4096, 14336)):
            p = plan(Problem(m, n, k, "f64", "f64", "native", b_trans=b_trans), H100)
            assert p.variant.tile in ((16, 128), (32, 128)), (m, n, k, p.algorithm)
            assert p.variant.reads_b_trans == b_trans, (m, n, k, p.algorithm)


def test_auto_splits_k_only_where_the_tiles_do_not_fill_the_gpu():
    for shape in [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 256), (4097, 4097, 4097)]:
        assert auto_dmma(*shape, *H100_FACTS).splits == 1, shape
    for shape in [(256, 256, 65536), (2137, 108, 1055), (128, 128, 100000)]:
        p = auto_dmma(*shape, *H100_FACTS)
        assert p.splits > 1 and p.k_chunk % 16 == 0, (shape, p)
        assert p.reduce is REDUCE[("f64", "f64")] and p.scratch_bytes == p.splits * shape[0] * shape[1] * 8


@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 200000))
def test_plans_cover_k_exactly_and_fit_the_grid(m, n, k):
    for name in NAMES:
        p = f64_plan(m, n, k, *H100_FACTS, name)
        assert p.algorithm == name
        if p.splits == 1:
            assert p.k_chunk == k
        else:
            assert p.k_chunk % DMMA[name].k_align == 0 and geometry.cdiv(k, p.k_chunk) == p.splits
        gx, gy, gz = DMMA[name].grid(m, n, p.splits, H100.sm_count)
        assert p.grid == (gx, gy, gz)
        assert gz == p.splits and gx <= geometry.MAX_GRID_X and gy <= geometry.MAX_GRID_YZ
        assert gx * DMMA[name].tile[1] >= n


def test_auto_picks_within_the_tiny_tile_probe_s_fastest_timed_plans():
    """On the committed probe of float64 batches of 1-64 a side and a few products of N up to 64 (every row auto
    may take timed by name, and auto itself, the tiles' in-place layout rows among its picks), auto's plan is
    one whose timing is within 25% of the fastest (but for 500 products of 40 x 64 x 56 on dmma64x128, 1.46x
    dmma64x64's time: that row's model, not this tile's) and within 3% on average; it takes dmma32x32 for the
    batches of 20-32 a side, where it ran 1.2-2.5x faster than any other row."""
    probe = (
        Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "probe-dmma32x32-nvidia-h200-2026-12-01.json"
    )
    slowdowns = []
    for c in json.loads(probe.read_text())["cases"]:
        layout = c["layout"]
        p = Problem(c["M"], c["N"], c["K"], "f64", "f64", "native", batch=c["batch"], a_trans=layout[0] == "T")
        p = dataclasses.replace(p, b_trans=layout[1] == "T")
        timed = {r: c[r]["us"] for r in c if isinstance(c[r], dict) and r != "auto"}
        timed.setdefault(c["auto"]["algorithm"], c["auto"]["us"])  # the in-place layout rows, as auto ran them
        timed = {r: us for r, us in timed.items() if VARIANTS[r].auto_may_take("f64")}
        chosen = plan(p, Target(*H100_FACTS, ALL_MODULES)).algorithm
        if chosen not in timed:  # a layout row the probe did not time: not this test's
            continue
        slowdowns.append(timed[chosen] / min(timed.values()))
        known = (c["batch"], c["M"], c["N"], c["K"], chosen) == (500, 40, 64, 56, "dmma64x128")
        assert slowdowns[-1] < (1.5 if known else 1.25), (c["batch"], c["M"], c["N"], c["K"], layout, chosen, timed)
        if c["batch"] >= 3000 and layout == "NN" and 20 <= min(c["M"], c["N"], c["K"]) <= c["K"] <= 32:
            assert chosen == "dmma32x32", (c["batch"], c["M"], c["N"], c["K"], timed)
    assert len(slowdowns) >= 55 and sum(slowdowns) / len(slowdowns) < 1.03


def test_the_build_has_no_spills_and_the_two_block_kernel_fits_its_registers():
    modules = built_entries()
    reduce = REDUCE[("f64", "f64")]
    for k in [v.kernels[("f64", "f64")] for v in DMMA.values()] + [reduce]:
        for arch, r in modules[k.module][k.name]["resources"].items():
            # the one known exception: dmma64x128's copy of its loop for a non-identity epilogue spills 24
            # bytes on sm_90 (the plain product's loop does not; see test_kernels_cpu.py)
            allowed = 24 if (k.name, arch) == ("matmul_dmma64x128k16_f64", "sm_90") else 0
            assert max(r["spill_stores"], r["spill_loads"], r["stack"]) <= allowed, (k.name, arch, r)
    for v in DMMA.values():
        k = v.kernels[("f64", "f64")]
        r = modules[k.module][k.name]["resources"].get("sm_90")
        if r:
            assert r["registers"] * v.block[0] * v.blocks_per_sm <= 65536, k.name


# ---- on the GPU ----


@pytest.fixture(autouse=True)
def _fp64_tensor_cores(request):
    """GPU tests need a GPU whose FP64 tensor cores every variant can use (sm_80+, 208 KiB a block)."""
    if "gpu" in request.keywords:
        dev = gm.device()
        if dev.arch < MIN_ARCH or dev.max_smem_optin < max(v.smem for v in DMMA.values()):
            pytest.skip(
                f"sm_{dev.arch} with {dev.max_smem_optin} bytes of shared memory a block cannot run every "
                "FP64 tensor-core variant"
            )


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", NAMES + ["auto"])
@settings(max_examples=15)
@given(m=dims(300, (16, 32, 64, 128)), n=dims(300, (64, 128)), k=dims(300, (16, 32, 64)))
def test_integer_products_are_exact(algorithm, m, n, k):
    a, b = integers((m, k)), integers((k, n))
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, poisoned(m, n, np.float64) as C:
        gm.matmul(A, B, out=C, algorithm=algorithm)
        np.testing.assert_array_equal(C.to_numpy(), (a.astype(np.int64) @ b.astype(np.int64)).astype(np.float64))


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", NAMES)
@settings(max_examples=10)
@given(m=dims(200, (16, 32, 64, 128)), n=dims(200, (64, 128)), k=dims(400, (16, 32, 64)))
def test_random_doubles_within_the_fp64_bound(algorithm, m, n, k):
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, poisoned(m, n, np.float64) as C:
        gm.matmul(A, B, out=C, algorithm=algorithm)
        assert_fp64_product(C.to_numpy(), a, b)


def _view(host, left, right):
    h, w = host.shape
    parent = rng.standard_normal((h, w + left + right))
    parent[:, left : left + w] = host
    big = gm.Matrix.from_numpy(parent)
    return big, big[:, left : left + w]


def _check_views(algorithm, m, n, k, pads):
    a, b = integers((m, k)), integers((k, n))
    (pa, A), (pb, B) = _view(a, pads[0], pads[1]), _view(b, pads[2], pads[3])
    pc, C = _view(np.full((m, n), np.nan), pads[4], pads[5])
    around = pc.to_numpy()
    gm.matmul(A, B, out=C, algorithm=algorithm)
    got = pc.to_numpy()
    np.testing.assert_array_equal(got[:, pads[4] : pads[4] + n], (a.astype(np.int64) @ b.astype(np.int64)))
    got[:, pads[4] : pads[4] + n] = around[:, pads[4] : pads[4] + n]
    np.testing.assert_array_equal(got, around)  # nothing outside the view was written
    for x in (pa, pb, pc):
        x.free()


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", NAMES)
@settings(max_examples=12)
@given(m=st.integers(1, 200), n=st.integers(1, 200), k=st.integers(1, 200), pads=st.tuples(*[st.integers(0, 5)] * 6))
def test_views_with_odd_offsets_and_strides(algorithm, m, n, k, pads):
    """Odd offsets or strides take the 8-byte copies; even ones the 16-byte copies with ragged edges."""
    _check_views(algorithm, m, n, k, pads)


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", NAMES)
@settings(max_examples=10)
@given(
    m=dims(260, (16, 32, 64, 128)),
    n=dims(260, (64, 128)),
    k=dims(260, (16, 32)),
    quads=st.tuples(*[st.integers(0, 2)] * 3),
)
def test_aligned_views_take_the_wide_copies_with_ragged_edges(algorithm, m, n, k, quads):
    """Starts on 16 bytes and even strides: the 16-byte path, half chunks wherever K or N is odd."""
    pads = []
    for w, q in zip((k, n, n), quads, strict=True):
        pads += [2 * q, (-(w + 2 * q)) % 2 + 2]
    _check_views(algorithm, m, n, k, [pads[0], pads[1], pads[2], pads[3], pads[4], pads[5]])


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", NAMES)
@settings(max_examples=10)
@given(
    m=dims(130, (16, 32, 64, 128)),
    n=dims(130, (64, 128)),
    k=st.integers(1, 2000),
    splits=st.sampled_from([2, 3, 5, 8]),
    chunk_tiles=st.integers(1, 12),
    odd_chunk=st.booleans(),
)
def test_split_k_for_any_chunking(algorithm, m, n, k, splits, chunk_tiles, odd_chunk):
    k_chunk = chunk_tiles * 16 - (3 if odd_chunk else 0)  # odd chunks move every other split to the 8-byte copies
    splits = max(min(splits, -(-k // k_chunk) + 1), 2)
    if splits * k_chunk < k:
        k_chunk = -(-k // splits)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, poisoned(m, n, np.float64) as C:
        p = gm.matmul_plan(A, B, out=C, algorithm=algorithm, splits=splits, k_chunk=k_chunk)
        layers = min(splits, -(-k // k_chunk))  # layers that would start past K are dropped
        assert (p.algorithm, p.splits, p.k_chunk) == (algorithm, layers, k_chunk if layers > 1 else k)
        gm.matmul(A, B, out=C, plan=p)
        assert_fp64_product(C.to_numpy(), a, b, splits)


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", NAMES + ["auto"])
def test_bitwise_deterministic_with_and_without_split_k(algorithm):
    for m, n, k in [(256, 256, 16384), (1000, 1100, 900), (2137, 108, 1055)]:
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
            first = gm.matmul(A, B, algorithm=algorithm).to_numpy()
            for _ in range(3):
                np.testing.assert_array_equal(gm.matmul(A, B, algorithm=algorithm).to_numpy(), first)
            ref = a @ b  # (the FP64 bound is checked elsewhere; this guards against a deterministic wrong answer)
            assert np.max(np.abs(first - ref)) <= 1e-12 * np.max(np.abs(a) @ np.abs(b))
            if (m, n, k) == (256, 256, 16384):
                assert gm.matmul_plan(A, B, algorithm=algorithm).splits > 1


@pytest.mark.gpu
def test_auto_runs_the_tensor_cores_and_the_simt_kernel_stays_a_named_variant():
    a, b = rng.standard_normal((300, 500)), rng.standard_normal((500, 200))
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        auto = (A @ B).to_numpy()
        simt = gm.matmul(A, B, algorithm="simt64x64").to_numpy()
        assert_fp64_product(simt, a, b)
        assert_fp64_product(auto, a, b)
        p = gm.matmul_plan(A, B)
        if p.algorithm == "simt64x64":
            np.testing.assert_array_equal(auto, simt)
        else:
            np.testing.assert_array_equal(auto, gm.matmul(A, B, algorithm=p.algorithm).to_numpy())


@pytest.mark.gpu
@pytest.mark.parametrize("algorithm", NAMES)
def test_nan_and_inf_propagate_like_numpy(algorithm):
    a, b = rng.standard_normal((37, 19)), rng.standard_normal((19, 41))
    a[3, 5], b[7, 11], a[20, 0] = np.nan, np.inf, -np.inf
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        got = gm.matmul(A, B, algorithm=algorithm).to_numpy()
    with np.errstate(invalid="ignore"):
        ref = a @ b
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))


@pytest.mark.gpu
def test_many_row_tiles_walk_the_grid_stride_loop():
    m, n, k = 65535 * 128 + 77, 5, 3
    a, b = integers((m, k)), integers((k, n))
    ref = a.astype(np.int64) @ b.astype(np.int64)
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, poisoned(m, n, np.float64) as C:
        for name in NAMES:
            poison(C)
            gm.matmul(A, B, out=C, algorithm=name)
            np.testing.assert_array_equal(C.to_numpy(), ref)
