"""Ozaki scheme II's plan (gpumat.matmul.ozaki) and its steps on the host (tests/ozaki_reference.py), which the
GPU kernels are to reproduce: the moduli and bits, symmetric int8 residues, exact int32 products, the
Chinese remainder theorem exact and in double-double, and the emulated product's error against the
correctly rounded one, within the truncation's bound, on benign and hard inputs. No GPU."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ozaki_reference import (
    correctly_rounded_matmul,
    crt_double,
    crt_exact,
    emulated_matmul,
    error_bound,
    exponents,
    modular_products,
    residues,
    symmetric,
    truncated,
)

from gpumat.matmul.engine import (
    OZAKI_MAX_K,
    OZAKI_MODULI,
    crt_weights,
    ozaki_bits,
    ozaki_budget,
    ozaki_plan_for,
)
from gpumat.matmul.engine import ozaki_plan as plan

rng = np.random.default_rng()


def test_the_moduli_are_pairwise_coprime_and_fit_int8_residues():
    assert all(math.gcd(a, b) == 1 for i, a in enumerate(OZAKI_MODULI) for b in OZAKI_MODULI[i + 1 :])
    assert all(2 <= m <= 256 for m in OZAKI_MODULI) and list(OZAKI_MODULI) == sorted(OZAKI_MODULI, reverse=True)
    for m in OZAKI_MODULI:
        r = symmetric(np.arange(-3 * m, 3 * m, dtype=np.int64), m)
        assert r.min() >= -128 and r.max() <= 127 and r.max() - r.min() == m - 1
    # K terms of at most 128 x 128 stay inside int32 up to OZAKI_MAX_K, and not one more
    assert OZAKI_MAX_K * 128 * 128 <= 2**31 - 1 < (OZAKI_MAX_K + 1) * 128 * 128


def test_the_budget_keeps_every_product_below_a_quarter_of_the_modulus():
    # lines of 2-norm below 2^Q: |A' B'| < 2^2Q (Cauchy-Schwarz), with a margin for the norms' rounding
    for n in range(1, len(OZAKI_MODULI) + 1):
        quarter, q = math.prod(OZAKI_MODULI[:n]) // 4, ozaki_budget(OZAKI_MODULI[:n])
        assert 2 ** (2 * q) * (2**20 + 1) <= quarter * 2**20 < 2 ** (2 * q + 2) * (2**20 + 1)  # the largest such Q
    assert ozaki_budget(OZAKI_MODULI) == 61  # integers below 2^62: the residue kernels' limit


@pytest.mark.parametrize("k", [1, 2, 3, 7, 1024, 1025, 8192, 65536, OZAKI_MAX_K])
def test_the_bits_are_what_the_flattest_line_keeps(k):
    """A line of k equal magnitudes has the largest norm for its largest element: scaled as the kernels scale
    it, its elements keep exactly the plan's bits (count of moduli where some fit)."""
    for n in (8, 12, 16):
        p = ozaki_bits(OZAKI_MODULI[:n], k)
        if p < 1:
            continue
        flat = np.full((1, k), 1.999999)  # the largest scaled to just below 2: the sum of squares nearest 4k
        top = np.max(truncated(flat, exponents(flat, 1, ozaki_budget(OZAKI_MODULI[:n])), 1))
        assert 2.0 ** (p - 1) <= top < 2.0**p


def test_the_plan_takes_the_fewest_moduli_for_the_bits_asked():
    # float64's 53 bits: 16 moduli for K of 1024-65536; float32's 24: 8-9 (the flattest line's bits; a line
    # whose size sits in few elements keeps up to the budget, 61 bits with 16 moduli)
    assert [len(plan(k, bits=53).moduli) for k in (1024, 8192, 65536)] == [16, 16, 16]
    assert [len(plan(k, bits=24).moduli) for k in (1024, 8192, 65536)] == [8, 9, 9]
    for k in (1, 100, 8192):
        for bits in (1, 24, 53):
            p = plan(k, bits=bits)
            assert p.bits >= bits and (len(p.moduli) == 1 or ozaki_bits(p.moduli[:-1], k) < bits)
    assert plan(8192, count=15).bits == 50 and plan(8192, count=15).moduli == OZAKI_MODULI[:15]
    # float64's own plan: all 16 moduli at every K (the whole budget for lines that span many binades)
    assert all(ozaki_plan_for("f64", k).moduli == OZAKI_MODULI for k in (1, 64, 4096, OZAKI_MAX_K))
    assert ozaki_plan_for("f64", 64).bits == 58 and ozaki_plan_for("f64", OZAKI_MAX_K).bits == 52


def test_bad_plans_are_refused():
    for bad in (dict(k=0, bits=53), dict(k=OZAKI_MAX_K + 1, bits=53), dict(k=10), dict(k=10, count=3, bits=10)):
        with pytest.raises(ValueError, match="Ozaki scheme"):
            plan(**bad)
    for bad in (
        dict(k=10, count=0),
        dict(k=10, count=len(OZAKI_MODULI) + 1),
        dict(k=10, bits=54),
        dict(k=2**16, count=2),
    ):
        with pytest.raises(ValueError, match="Ozaki scheme"):
            plan(**bad)


def test_the_weights_rebuild_any_integer_below_the_modulus():
    moduli = OZAKI_MODULI[:5]
    big, weights = math.prod(moduli), crt_weights(moduli)
    for x in [0, 1, big - 1, big // 2, 12345678901, *rng.integers(0, 2**62, 20).tolist()]:
        x %= big
        assert sum((x % m) * w for m, w in zip(moduli, weights, strict=True)) % big == x


@settings(max_examples=40, deadline=None)
@given(
    m=st.integers(1, 9),
    n=st.integers(1, 9),
    k=st.sampled_from([1, 2, 3, 31, 64, 257]),
    count=st.integers(8, 16),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_residue_products_rebuild_the_integer_product_exactly(m, n, k, count, seed):
    """The integer operands at the bits' limit (the worst signs too): the N modular products, put back together
    by the CRT, are A' B' exactly, and the limbs' reconstruction is it rounded, within one unit in its last
    place (the integer's limbs are exact; only their double-double sum rounds)."""
    p = plan(k, count=count)
    g = np.random.default_rng(seed)
    top = 2**p.bits - 1
    ai = g.integers(-top, top + 1, (m, k), dtype=np.int64).astype(np.float64)
    bi = g.integers(-top, top + 1, (k, n), dtype=np.int64).astype(np.float64)
    if seed % 3 == 0:  # every term at the bound, one sign: |A' B'| at its largest, K (2^P - 1)^2
        ai[:], bi[:] = top, -top
    elif seed % 3 == 1:  # one term a line at the budget (the largest double below 2^Q), one sign
        big = 2.0**p.budget - 2.0 ** (p.budget - 53)
        ai[:], bi[:] = 0.0, 0.0
        ai[:, 0], bi[0, :] = big, -big
    cres = modular_products(residues(ai, p), residues(bi, p), p)
    exact = ai.astype(np.int64).astype(object) @ bi.astype(np.int64).astype(object)
    np.testing.assert_array_equal(crt_exact(cres, p), exact)
    got = crt_double(cres, p)
    want = np.array([[float(v) for v in row] for row in exact])
    assert np.all(np.abs(got - want) <= np.spacing(np.abs(want)))


def test_the_steps_keep_their_ranges():
    a = rng.standard_normal((17, 40)) * 2.0 ** rng.integers(-30, 30, (17, 1))
    a[3] = 0.0  # a row of zeros
    a[5] = 0.0
    a[5, 7] = -3.0  # a row of one element: it keeps the whole budget
    p = plan(40, bits=53)
    e = exponents(a, 1, p.budget)
    assert e[3] == 0
    t = truncated(a, e, 1)
    squares = [sum(int(x) ** 2 for x in row) for row in t]  # exact
    live = np.arange(17) != 3
    assert all(s < 2 ** (2 * p.budget) for s in squares) and np.all(t == np.trunc(t))
    assert np.all(np.max(np.abs(t), axis=1)[live] >= 2.0 ** (p.bits - 1))
    assert 2.0 ** (p.budget - 2) <= abs(t[5, 7]) < 2.0**p.budget
    r = residues(t, p)
    assert r.dtype == np.int8 and r.shape == (len(p.moduli), 17, 40)
    for i, m in enumerate(p.moduli):
        assert np.all((t.astype(np.int64) - r[i].astype(np.int64)) % m == 0)


@pytest.mark.parametrize("bits", [24, 53])
@pytest.mark.parametrize(
    "case", ["uniform", "normal", "rows_of_different_scales", "spread_30", "wide_exponents", "cancellation"]
)
def test_the_emulated_product_is_within_the_truncation_bound(case, bits):
    """The emulated product against the correctly rounded one: within the scheme's bound (the truncation and
    the reconstruction) plus one rounding, on benign inputs and on hard ones (lines spanning 2^-300..2^300,
    sums that cancel)."""
    m, k, n = 12, 96, 10
    a, b = rng.uniform(-1, 1, (m, k)), rng.uniform(-1, 1, (k, n))
    if case == "normal":
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    elif case == "rows_of_different_scales":
        a *= 2.0 ** rng.integers(-200, 200, (m, 1))
        b *= 2.0 ** rng.integers(-200, 200, (1, n))
    elif case == "spread_30":  # each element its own scale, 2^-30..2^30: lines that span 60 binades
        a *= 2.0 ** rng.integers(-30, 31, (m, k))
        b *= 2.0 ** rng.integers(-30, 31, (k, n))
    elif case == "wide_exponents":
        a *= 2.0 ** rng.integers(-300, 300, (m, k))
        b *= 2.0 ** rng.integers(-300, 300, (k, n))
    elif case == "cancellation":  # the second half of K undoes the first: small sums of large terms
        a[:, k // 2 :] = a[:, : k // 2]
        b[k // 2 :] = -b[: k // 2] * (1 + 2.0**-40)
    p = ozaki_plan_for("f64", k) if bits == 53 else plan(k, bits=bits)
    got, exact = emulated_matmul(a, b, p), correctly_rounded_matmul(a, b)
    err = np.abs(got - exact)
    assert np.all(err <= error_bound(a, b, p) + np.spacing(np.abs(exact))), case
    if bits == 53 and case in ("uniform", "normal", "rows_of_different_scales", "spread_30"):
        # lines of one scale each, or spanning 60 binades: as accurate as float64's own product (numpy's,
        # summed in its order); lines spanning 600 binades lose their small elements (the bound above)
        native = np.abs(a @ b - exact)
        assert np.max(err) <= 2 * np.max(native) + np.max(np.spacing(np.abs(exact))), case


def test_the_kernels_moduli_are_the_plans():
    from pathlib import Path

    cuda = Path(__file__).resolve().parents[1] / "cuda"
    shared, src = (cuda / "gpumat.cuh").read_text(), (cuda / "ozaki.cu").read_text()
    table = shared.split("#define GPUMAT_OZAKI_MODULI ", 1)[1].split("\n", 1)[0]
    assert tuple(int(x) for x in table.split(",")) == OZAKI_MODULI
    assert f"constexpr int OZAKI_MAX_MODULI = {len(OZAKI_MODULI)};" in shared
    # the residue kernels' and the INT8 products' tables both come from it
    assert "__constant__ int MODULI[MAX_MODULI] = {GPUMAT_OZAKI_MODULI};" in src
    wgmma = (cuda / "matmul_wgmma.cuh").read_text()
    assert "__constant__ int S8_MODULI[gpumat::OZAKI_MAX_MODULI] = {GPUMAT_OZAKI_MODULI};" in wgmma
    powers = src.split("__constant__ double POW32[MAX_MODULI] = {", 1)[1].split("}", 1)[0]
    assert tuple(int(x) for x in powers.split(",")) == tuple(2**32 % m for m in OZAKI_MODULI)
    inverses = src.split("__constant__ double INVERSES[MAX_MODULI] = {", 1)[1].split("}", 1)[0]
    assert [x.split() for x in inverses.split(",")] == [["1.0", "/", str(m)] for m in OZAKI_MODULI]
    # the column exponents' groups of rows: the kernel's, the launch's and the host reference's order
    from ozaki_reference import NORM_LANES

    from gpumat.matmul.engine import OZAKI_COL_GROUPS as COL_GROUPS

    assert f"constexpr int COL_GROUPS = {COL_GROUPS};" in src and NORM_LANES == COL_GROUPS == 32
    assert "constexpr int MAX_MODULI = gpumat::OZAKI_MAX_MODULI;" in src
    from gpumat.matmul.engine import OZAKI_CRT_COLUMNS as CRT_COLUMNS

    assert f"constexpr int CRT_COLUMNS = {CRT_COLUMNS};" in src  # the reconstruction's grid


def test_the_uploaded_weights_are_the_exact_limbs():
    from gpumat.matmul.engine import ozaki_weights as weights_of

    for count in range(1, len(OZAKI_MODULI) + 1):
        moduli = OZAKI_MODULI[:count]
        table = weights_of(count)
        assert len(table) == 4 * count + 5
        exact = (*crt_weights(moduli), math.prod(moduli))
        for n, x in enumerate(exact):
            parts = table[4 * n : 4 * n + 4]
            assert all(p == int(p) and 0 <= p < 2**32 for p in parts)
            assert sum(int(p) << (32 * (3 - j)) for j, p in enumerate(parts)) == x
        assert table[-1] == float(math.prod(moduli))


def test_panels_keep_the_scratch_bounded_in_whole_tiles():
    from gpumat.matmul.engine import OZAKI_PANEL_BYTES as PANEL_BYTES
    from gpumat.matmul.engine import OZAKI_PANEL_ROW_STEP as PANEL_ROW_STEP
    from gpumat.matmul.engine import ozaki_panel_rows as panel_rows

    for m, n, k, count in ((4096, 4096, 4096, 16), (8192, 8192, 8192, 16), (300, 200, 112, 8), (10**6, 8, 16, 16)):
        rows = panel_rows(m, n, k, count)
        assert rows == m or (rows % PANEL_ROW_STEP == 0 and rows < m)
        assert rows == PANEL_ROW_STEP or count * rows * (k + n) <= PANEL_BYTES  # A's and C's residues
    assert panel_rows(300, 200, 112, 8) == 300  # fits: one panel
    assert panel_rows(8192, 8192, 8192, 16) == 2048 and panel_rows(4096, 4096, 4096, 16) == 4096
    assert panel_rows(1000, 10**6, 16, 16) == PANEL_ROW_STEP  # one tile of rows, whatever the bytes


# --- precision="fp64_int8" on gm.matmul's route (stand-in matrices and driver: nothing launched) ------------
def f64(height, width, ptr=0x7F0000000000, stride=None):
    from support import fake_matrix

    return fake_matrix(height, width, stride=stride, ptr=ptr, dtype=np.float64)


def test_fp64_int8_is_float64s_emulated_precision_planned_on_its_row():
    import gpumat as gm

    a, b = f64(300, 500), f64(500, 200, ptr=0x7F0010000000)
    q = gm.matmul_plan(a, b, precision="fp64_int8")
    assert (q.algorithm, q.problem.mode, q.splits, q.copy_a, q.copy_b) == (
        "ozaki_fp64_int8",
        "fp64_int8",
        1,
        False,
        False,
    )
    assert q.reason == "auto: the only candidate"
    assert gm.matmul_plan(a, b).problem.mode == "native"  # the default stays FP64
    assert gm.matmul_plan(a, b, algorithm="ozaki_fp64_int8").problem.mode == "fp64_int8"  # named: its own mode
    wt = f64(200, 500, ptr=0x7F0020000000)
    assert gm.matmul_plan(a, wt.T, precision="fp64_int8").copy_b  # x @ W.T: W copied row-major first
    assert gm.matmul_plan(f64(300, 0), f64(0, 200, ptr=0x7F0010000000), precision="fp64_int8").algorithm == "naive"


def test_fp64_int8_refused_where_it_does_not_apply_before_anything_runs():
    from support import fake_batch, fake_matrix

    import gpumat as gm

    a, b = f64(30, 50), f64(50, 20, ptr=0x7F0010000000)
    with pytest.raises(ValueError, match="'fp64_int8' is a call's own choice.* 2-D float64 Matrix operands"):
        gm.matmul_plan(fake_matrix(30, 50), fake_matrix(50, 20, ptr=0x7F0010000000), precision="fp64_int8")
    with pytest.raises(ValueError, match="float32 modes, or 'fp64_int8'"):
        gm.matmul_plan(a, b, precision="tf32")
    with pytest.raises(ValueError, match="computes at precision 'native', not 'fp64_int8'"):
        gm.matmul_plan(a, b, algorithm="dmma64x64", precision="fp64_int8")
    batch = fake_batch(2, 30, 50, dtype=np.float64)
    with pytest.raises(ValueError, match="2-D products"):
        gm.matmul_plan(batch, b, precision="fp64_int8")
    long_k = f64(2, OZAKI_MAX_K + 1), f64(OZAKI_MAX_K + 1, 2, ptr=0x7F0010000000)
    with pytest.raises(ValueError, match="takes K up to"):
        gm.matmul_plan(*long_k, precision="fp64_int8")


POOL_BASE, POOL_STEP = 0x7F4000000000, 0x10000000


class _Pool:
    """Scratch at its own address each allocation, in order: POOL_BASE, POOL_BASE + POOL_STEP, ..."""

    def __init__(self):
        self.taken = 0

    def alloc(self, nbytes, stream):
        self.taken += 1
        return POOL_BASE + (self.taken - 1) * POOL_STEP

    def free(self, ptr, nbytes, stream):
        pass


class _Table:
    def at(self, count):
        return 0x7F5000000000 + 8 * count


def _emulated_launches(monkeypatch, p, a, b, c, epilogue, maps=None):
    """The launches of plan p's BoundPlan on a stand-in device: (kernel name, grid, block, args) each; the tensor
    maps encoded on the way, (element type, arguments) each, appended to `maps` when given."""
    import types

    from support import record_launches

    from gpumat.matmul import engine
    from gpumat.runtime import tensormaps

    launched = []
    record_launches(monkeypatch, launched)

    def encode(elem, args):
        if maps is not None:
            maps.append((elem, args))
        return bytes(128)

    monkeypatch.setattr(tensormaps, "encode_tiled", encode)
    dev = types.SimpleNamespace(memory=_Pool(), scratch_for=lambda name, make: _Table())
    engine.tensor_map.cache_clear()
    try:
        bound = engine.BoundPlan(p, dev)
        assert bound.shape == "emulated"
        bound.run(0, a, b, c, epilogue)
    finally:
        engine.tensor_map.cache_clear()
    return [(name, grid, block, args) for name, grid, block, args, _, _ in launched]


def test_an_emulated_plan_launches_the_steps_and_applies_the_epilogue_as_it_writes_c(monkeypatch):
    from support import H100

    from gpumat.matmul.engine import Problem, plan

    p = plan(Problem(300, 200, 500, "f64", "f64", "fp64_int8", b_trans=True), H100)
    assert p.copy_b and not p.copy_a
    epilogue = (2.0, 0.5, 0x7F6000000000, 1, 1, 0, 1)  # alpha, beta, a row vector bias, relu
    a, b, c = (0x7F0000000000, 512, 0), (0x7F1000000000, 504, 0), (0x7F2000000000, 200, 0)
    launches = _emulated_launches(monkeypatch, p, a, b, c, epilogue)
    names = [x[0] for x in launches]
    assert names[0].startswith("transpose") and names[1:] == [
        "ozaki_row_exponents_f64",
        "ozaki_col_exponents_f64",
        "ozaki_col_residues_f64",
        "ozaki_row_residues_f64",
        "matmul_wgmma128x128bt_s8_residues",  # sm_90 with the sm_90a module: the wgmma INT8 tile (C of 200 columns)
        "ozaki_crt_f64",
    ]
    # the scratch in the order taken: B's row-major copy, then A's and B's exponents, their residues, the
    # products' residues
    copy_b, ea, eb, ra, rb, rc = (POOL_BASE + i * POOL_STEP for i in range(6))
    crt = launches[-1][3]
    count = len(plan_of(500).moduli)
    assert crt[:9] == (rc, 200, 300 * 200, 300, 200, count, 0x7F5000000000 + 8 * count, ea, eb)
    assert crt[9:11] == (0x7F2000000000, 200) and crt[-7:] == epilogue
    assert crt[11:15] == (0x7F0000000000, 512, copy_b, 200)  # A in place, B's copy: the non-finite lines' dots
    assert launches[1][3][:2] == (0x7F0000000000, 512) and launches[1][3][-1] == ea  # A read in place
    assert launches[2][3][0] == copy_b and launches[2][3][-1] == eb  # B from its row-major copy
    assert launches[3][3][0] == copy_b and launches[3][3][4:7] == (eb, count, rb)  # B's residues
    assert launches[4][3][4:7] == (ea, count, ra)  # A's residues


def test_the_products_write_int8_residues_through_a_byte_map_and_the_reconstruction_reads_them(monkeypatch):
    """C of 256 columns (rows of whole 16 bytes): the INT8 tile stores its residues through a UINT8 map of
    count layers of 300 x 256 bytes in 128-byte x 64-row boxes (c_store 1), into the scratch the
    reconstruction reads, four columns a thread."""
    from support import H100

    from gpumat.matmul.engine import IDENTITY, OZAKI_CRT_COLUMNS, Problem, plan

    p = plan(Problem(300, 256, 500, "f64", "f64", "fp64_int8"), H100)
    a, b, c = (0x7F0000000000, 500, 0), (0x7F1000000000, 256, 0), (0x7F2000000000, 256, 0)
    maps = []
    launches = _emulated_launches(monkeypatch, p, a, b, c, IDENTITY, maps)
    count = len(plan_of(500).moduli)
    rc = POOL_BASE + 4 * POOL_STEP  # the fifth scratch taken: A's and B's exponents and residues before it
    (name, _, _, args), crt = launches[-2], launches[-1]
    assert name == "matmul_wgmma128x128bt_s8_residues" and args[3:8] == (rc, 300, 256, 500, 256)
    assert args[9:12] == (1, count, 300 * 256)  # c_store 1: through the map; the layers
    c_maps = [args for elem, args in maps if args["globalAddress"] == rc]
    assert [elem for elem, args in maps if args["globalAddress"] == rc] == ["u8"]
    assert c_maps[0]["globalDim"] == (256, 300, count) and c_maps[0]["boxDim"] == (128, 64, 1)
    assert c_maps[0]["globalStrides"] == (256, 300 * 256)
    assert crt[0] == "ozaki_crt_f64" and crt[3][:3] == (rc, 256, 300 * 256)
    assert crt[1] == (-(-256 // (OZAKI_CRT_COLUMNS * 256)), 300, 1)


def plan_of(k):
    return ozaki_plan_for("f64", k)


@pytest.mark.parametrize(
    ("sfx", "mode", "item", "bias_f32"),
    [("f64", "fp64_int8", 8, 0), ("f64", "fp64_int8", 8, 1), ("f32", "fp32_int8", 4, 0)],
)
def test_c_in_panels_each_with_its_rows_bias(monkeypatch, sfx, mode, item, bias_f32):
    """20000 rows of 4096 columns at K = 64 (float32's with fewer moduli: 40000 rows): panels of 8064 and
    14336 rows (the scratch bound), each reconstruction writing its rows of C, a bias over C's rows (bias_along
    2) starting at its first row, the offsets in the dtype's bytes (a float32 bias of float64 C: 4 bytes)."""
    from support import H100

    from gpumat.matmul.engine import OZAKI_PANEL_BYTES, Problem, ozaki_panel_rows, ozaki_plan_for
    from gpumat.matmul.engine import plan as matmul_plan

    m, n, k = (20000 if sfx == "f64" else 40000), 4096, 64
    rows = ozaki_panel_rows(m, n, k, len(ozaki_plan_for(sfx, k).moduli), OZAKI_PANEL_BYTES)
    firsts = list(range(0, m, rows))
    assert len(firsts) >= 3
    p = matmul_plan(Problem(m, n, k, sfx, sfx, mode), H100)
    bias, step = 0x7F6000000000, 3
    epilogue = (1.0, 0.0, bias, step, 2, bias_f32, 0)
    a, b, c = (0x7F0000000000, k, 0), (0x7F1000000000, n, 0), (0x7F2000000000, n, 0)
    launches = _emulated_launches(monkeypatch, p, a, b, c, epilogue)
    bias_item = 4 if bias_f32 else item
    assert {x[0].rsplit("_", 1)[1] for x in launches if x[0].startswith("ozaki")} == {sfx}
    crts = [x[3] for x in launches if x[0] == f"ozaki_crt_{sfx}"]
    assert [x[3] for x in crts] == [min(rows, m - r0) for r0 in firsts]  # the panels' rows
    assert [x[9] for x in crts] == [c[0] + item * r0 * n for r0 in firsts]  # C at each panel's first row
    assert [x[11] for x in crts] == [a[0] + item * r0 * k for r0 in firsts]  # A likewise
    assert [x[-5] for x in crts] == [bias + bias_item * r0 * step for r0 in firsts]  # the bias too
    assert all(x[-2] == bias_f32 for x in crts)


# --- precision="fp32_int8": float32 on the same scheme, 9 moduli ---------------------------------------------
def f32(height, width, ptr=0x7F0000000000):
    from support import fake_matrix

    return fake_matrix(height, width, ptr=ptr, dtype=np.float32)


def test_each_mode_takes_its_bits_and_eight_more_of_budget():
    from gpumat.matmul.engine import ozaki_plan_for

    for k in (1, 64, 4096, OZAKI_MAX_K):
        p32, p64 = ozaki_plan_for("f32", k), ozaki_plan_for("f64", k)
        assert (len(p32.moduli), p32.budget) == (9, 34) and p32.bits >= 24
        assert (len(p64.moduli), p64.budget) == (16, 61)


def test_fp32_int8_is_a_float32_calls_own_choice_planned_on_its_row():
    import gpumat as gm

    a, b = f32(300, 500), f32(500, 200, ptr=0x7F0010000000)
    q = gm.matmul_plan(a, b, precision="fp32_int8")
    assert (q.algorithm, q.problem.mode, q.copy_a, q.copy_b) == ("ozaki_fp32_int8", "fp32_int8", False, False)
    assert gm.matmul_plan(a, b, algorithm="ozaki_fp32_int8").problem.mode == "fp32_int8"
    assert gm.matmul_plan(a, b).problem.mode == "float32"  # never a default
    with gm.matmul_precision("tf32"):  # a call's own precision= wins over the scope
        assert gm.matmul_plan(a, b, precision="fp32_int8").algorithm == "ozaki_fp32_int8"
    for name in ("fp32_int8", "fp64_int8"):
        with pytest.raises(ValueError, match=f"'{name}' is a call's own choice"):
            gm.set_matmul_precision(name)
        with pytest.raises(ValueError, match=f"'{name}' is a call's own choice"), gm.matmul_precision(name):
            pass
    assert gm.get_matmul_precision() == "float32"
    with pytest.raises(ValueError, match="computes at precision 'float32', not 'fp32_int8'"):
        gm.matmul_plan(a, b, algorithm="sgemm128x128", precision="fp32_int8")
    with pytest.raises(ValueError, match="computes at precision 'fp32_int8', not 'tf32'"):
        gm.matmul_plan(a, b, algorithm="ozaki_fp32_int8", precision="tf32")
    with pytest.raises(ValueError, match="float32 modes, or 'fp64_int8'"):
        gm.matmul_plan(f64(30, 50), f64(50, 20, ptr=0x7F0010000000), precision="fp32_int8")
    with pytest.raises(ValueError, match="'fp64_int8' is a call's own choice.* float64 Matrix"):
        gm.matmul_plan(a, b, precision="fp64_int8")
    with pytest.raises(ValueError, match="unknown matmul precision 'fp8'; choose one of .*fp32_int8"):
        gm.matmul_plan(a, b, precision="fp8")


def test_fp32_int8_refuses_a_batch_and_long_k_before_anything_runs():
    from support import fake_batch

    import gpumat as gm

    b = f32(50, 20, ptr=0x7F0010000000)
    with pytest.raises(ValueError, match="precision='fp32_int8' takes 2-D products"):
        gm.matmul_plan(fake_batch(2, 30, 50, dtype=np.float32), b, precision="fp32_int8")
    long_k = f32(2, OZAKI_MAX_K + 1), f32(OZAKI_MAX_K + 1, 2, ptr=0x7F0010000000)
    with pytest.raises(ValueError, match="takes K up to"):
        gm.matmul_plan(*long_k, precision="fp32_int8")


@pytest.mark.parametrize("case", ["uniform", "normal", "spread_10", "cancellation"])
def test_fp32_int8_is_as_accurate_as_float32s_own_product(case):
    """The host reference of the float32 mode against the correctly rounded product of the float32 operands:
    within the scheme's bound plus one float32 rounding, and no worse than numpy's float32 product."""
    from gpumat.matmul.engine import ozaki_plan_for

    m, k, n = 12, 300, 10
    a, b = rng.uniform(-1, 1, (m, k)), rng.uniform(-1, 1, (k, n))
    if case == "normal":
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    elif case == "spread_10":
        a *= 2.0 ** rng.integers(-10, 11, (m, k))
        b *= 2.0 ** rng.integers(-10, 11, (k, n))
    elif case == "cancellation":
        a[:, k // 2 :] = a[:, : k // 2]
        b[k // 2 :] = -b[: k // 2] * (1 + 2.0**-12)
    a, b = a.astype(np.float32), b.astype(np.float32)
    p = ozaki_plan_for("f32", k)
    got, exact = emulated_matmul(a, b, p), correctly_rounded_matmul(a, b)
    assert got.dtype == np.float32
    err = np.abs(got.astype(np.float64) - exact)
    ulp32 = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    assert np.all(err <= error_bound(a, b, p) + np.spacing(np.abs(exact)) + ulp32), case
    native = np.abs((a @ b).astype(np.float64) - exact)
    assert np.max(err) <= max(np.max(native), np.max(ulp32)), case


def test_the_emulated_row_refuses_a_batch_however_it_is_asked():
    """A batch at fp64_int8 is refused by the call's checks, by the planner (named or auto) and by a plan
    given with precision left out: never the first matrix computed and the rest left unwritten."""
    from support import H100, fake_batch

    import gpumat as gm
    from gpumat.matmul.engine import Problem
    from gpumat.matmul.engine import plan as matmul_plan

    p = Problem(30, 20, 50, "f64", "f64", "fp64_int8", batch=4)
    with pytest.raises(ValueError, match="one product at a time"):
        matmul_plan(p, H100, "ozaki_fp64_int8")
    with pytest.raises(ValueError, match="no kernel runs"):
        matmul_plan(p, H100)
    a3, b3 = fake_batch(4, 30, 50, dtype=np.float64), fake_batch(4, 50, 20, ptr=0x7F0010000000, dtype=np.float64)
    with pytest.raises(ValueError, match="2-D products"):  # the call's own check, first
        gm.matmul_plan(a3, b3, algorithm="ozaki_fp64_int8")
