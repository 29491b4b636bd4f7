"""The float64 and float32 products emulated on integers (Ozaki scheme II) on the GPU,
gpumat.matmul.engine.ozaki_emulated and gm.matmul at precision "fp64_int8" / "fp32_int8" (cuda/ozaki.cu): bit
for bit what tests/ozaki_reference.py computes step by step on the host, on shapes around the kernels' tiles
(1, primes, 31-33, 63-65), every count of moduli from float32's to float64's, both operand types, views at odd
offsets and transposed views; within the scheme's bound of the correctly rounded product; rows and columns
with an Inf or a NaN as the plain product gives them; the same bits call after call; bad input refused
before anything runs."""

from contextlib import contextmanager

import numpy as np
import ozaki_reference as ref
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ozaki_reference import correctly_rounded_matmul, emulated_matmul, error_bound
from support import dims, rng

import gpumat as gm
from gpumat.matmul.engine import (
    IDENTITY,
    OZAKI_INT8_TILES,
    OZAKI_MAX_K,
    OZAKI_MODULI,
    OZAKI_STEPS,
    ozaki_emulated,
    ozaki_panel_rows,
    ozaki_plan,
    ozaki_plan_for,
    ozaki_weights,
    ozaki_weights_on,
)
from gpumat.matmul.engine import OZAKI_COL_GROUPS as COL_GROUPS
from gpumat.matmul.engine import OZAKI_CRT_COLUMNS as CRT_COLUMNS

pytestmark = pytest.mark.gpu

SIDES = dims(200, (32, 64))
# the operand types and their precision modes
MODES = {np.float64: ("f64", "fp64_int8"), np.float32: ("f32", "fp32_int8")}


def scaled(shape, spread: int, dtype=np.float64) -> np.ndarray:
    """Normal numbers times powers of two up to 2^+-spread, elementwise."""
    return (rng.standard_normal(shape) * 2.0 ** rng.integers(-spread, spread + 1, shape)).astype(dtype)


@contextmanager
def products_on(kernel: str):
    """The INT8 products on the wgmma body where the GPU has it ("auto"), or on the __dp4a kernel ("dp4a")."""
    saved = dict(OZAKI_INT8_TILES)
    if kernel == "dp4a":
        OZAKI_INT8_TILES.clear()
    try:
        yield
    finally:
        OZAKI_INT8_TILES.update(saved)


@pytest.mark.parametrize("dtype", list(MODES))
@pytest.mark.parametrize("kernel", ["auto", "dp4a"])
@settings(max_examples=25, deadline=None)
@given(m=SIDES, n=SIDES, k=SIDES, count=st.integers(8, len(OZAKI_MODULI)), spread=st.sampled_from([0, 4, 60]))
def test_bit_for_bit_the_host_reference(kernel, dtype, m, n, k, count, spread):
    a, b = scaled((m, k), spread, dtype), scaled((k, n), spread, dtype)
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, products_on(kernel):
        got = ozaki_emulated(A, B, count=count).to_numpy()
    want = emulated_matmul(a, b, ozaki_plan(k, count=count))
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", list(MODES))
@pytest.mark.parametrize(("m", "n", "k", "count"), [(4, 4, 5, 15), (1, 1, 1, 8), (33, 40, 70, 16), (65, 31, 129, 12)])
def test_each_step_bit_for_bit(dtype, m, n, k, count):
    """Each launch on its own, its output downloaded and compared with the host reference's step: where the
    product goes wrong, this says which step (the weights' table, the exponents, the residues, the residues
    of the __dp4a products, the reconstruction)."""
    from gpumat.memory import alloc, free
    from gpumat.runtime import memops
    from gpumat.runtime.streams import LEGACY_STREAM

    a, b = scaled((m, k), 8, dtype), scaled((k, n), 8, dtype)
    p = ozaki_plan(k, count=count)
    kp = -(-k // 16) * 16
    dev, s = gm.device(), LEGACY_STREAM

    def down(ptr, shape, dtype):
        host = np.empty(shape, dtype=dtype)
        gm.synchronize()
        memops.copy_to_host(host.ctypes.data, ptr, host.nbytes, None)
        gm.synchronize()
        return host

    step = OZAKI_STEPS[MODES[dtype][0]]
    sizes = (4 * m, 4 * n, count * m * kp, count * n * kp, count * m * n)
    ea, eb, ra, rb, rc = (alloc(x) for x in sizes)
    try:
        with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, gm.Matrix.zeros(m, n, dtype=dtype) as C:
            table = ozaki_weights_on(dev, count)
            assert down(table, (4 * count + 5,), np.float64).tolist() == ozaki_weights(count)
            (pa, lda, *_), (pb, ldb, *_), (pc, ldc, *_) = A._operand(), B._operand(), C._operand()
            block = (256, 1, 1)
            step["row_exponents"]((-(-m // 8), 1, 1), block, pa, lda, m, k, p.budget, ea, stream=s, device=dev)
            step["col_exponents"](
                (-(-n // 32), 1, 1), (32, COL_GROUPS, 1), pb, ldb, k, n, p.budget, eb, stream=s, device=dev
            )
            ea_ref, eb_ref = ref.exponents(a, 1, p.budget), ref.exponents(b, 0, p.budget)
            assert np.array_equal(down(ea, (m,), np.int32), ea_ref)
            assert np.array_equal(down(eb, (n,), np.int32), eb_ref)
            args = (pa, lda, m, k, ea, count, ra, kp, m * kp)
            step["row_residues"]((-(-k // 1024), m, 1), block, *args, stream=s, device=dev)
            args = (pb, ldb, k, n, eb, count, rb, kp, n * kp)
            step["col_residues"]((-(-n // 32), -(-k // 32), 1), (32, 8, 1), *args, stream=s, device=dev)
            ra_ref = ref.residues(ref.truncated(a, ea_ref, 1), p)
            rb_ref = ref.residues(ref.truncated(b, eb_ref, 0), p)
            assert np.array_equal(down(ra, (count, m, kp), np.int8)[:, :, :k], ra_ref)
            assert np.array_equal(down(rb, (count, n, kp), np.int8)[:, :, :k], rb_ref.transpose(0, 2, 1))
            args = (ra, rb, rc, m, n, k, kp, kp, n, m * kp, n * kp, m * n)
            step["residue_products"]((-(-n // 64), -(-m // 64), count), (16, 16, 1), *args, stream=s, device=dev)
            assert np.array_equal(down(rc, (count, m, n), np.int8), ref.modular_products(ra_ref, rb_ref, p))
            args = (rc, n, m * n, m, n, count, table, ea, eb, pc, ldc, pa, lda, pb, ldb, k, *IDENTITY)
            step["crt"]((-(-n // (CRT_COLUMNS * 256)), m, 1), block, *args, stream=s, device=dev)
            assert C.to_numpy().tobytes() == emulated_matmul(a, b, p).tobytes()
    finally:
        gm.synchronize()
        for ptr, nbytes in zip((ea, eb, ra, rb, rc), sizes, strict=True):
            free(ptr, nbytes=nbytes)


@pytest.mark.parametrize("kernel", ["auto", "dp4a"])
def test_panels_of_rows_bit_for_bit(kernel):
    """C's rows in panels (the scratch bound made small): 300 rows as 128 + 128 + 44, each panel's residues,
    products and reconstruction at its offset."""
    small = 16 * (112 + 70) * 200
    assert ozaki_panel_rows(300, 70, 112, 16, small) == 128
    a, b = scaled((300, 100), 4), scaled((100, 70), 4)
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, products_on(kernel):
        got = ozaki_emulated(A, B, count=16, panel_bytes=small).to_numpy()
    assert got.tobytes() == emulated_matmul(a, b, ozaki_plan(100, count=16)).tobytes()


# both wgmma INT8 tiles (128 x 128 below 2048 columns, 128 x 256 from there), C's residues by plain stores
# (rows not a whole number of 16 bytes: 130, 2053) and through the byte map (256, 2064: whole boxes, the wide
# tile's two boxes, a clipped last tile)
@pytest.mark.parametrize("n", [130, 2053, 256, 2064])
def test_the_wgmma_int8_tiles_bit_for_bit(n):
    a, b = rng.standard_normal((257, 300)), rng.standard_normal((300, n))
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        got = ozaki_emulated(A, B).to_numpy()
        with products_on("dp4a"):
            slow = ozaki_emulated(A, B).to_numpy()
    assert got.tobytes() == slow.tobytes() == emulated_matmul(a, b, ozaki_plan_for("f64", 300)).tobytes()


@pytest.mark.parametrize("bits", [24, 53])
def test_within_the_bound_of_the_correctly_rounded_product(bits):
    a, b = scaled((37, 300), 8), scaled((300, 29), 8)
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        got = ozaki_emulated(A, B, bits=bits).to_numpy()
    exact = correctly_rounded_matmul(a, b)
    p = ozaki_plan(300, bits=bits)
    assert p.bits >= bits
    assert np.all(np.abs(got - exact) <= error_bound(a, b, p) + np.spacing(np.abs(exact)))


def test_views_at_odd_offsets_and_transposed_views():
    a, b = rng.standard_normal((45, 70)), rng.standard_normal((70, 33))
    want = emulated_matmul(a, b, ozaki_plan_for("f64", 70))
    pa = rng.standard_normal((45, 73))
    pa[:, 1:71] = a
    with gm.Matrix.from_numpy(pa) as PA, gm.Matrix.from_numpy(np.ascontiguousarray(b.T)) as BT:
        got = ozaki_emulated(PA[:, 1:71], BT.T).to_numpy()  # A at an odd offset, B a transposed view
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", list(MODES))
def test_infinities_and_nans_as_the_plain_product_gives_them(dtype):
    a, b = rng.standard_normal((9, 40)).astype(dtype), rng.standard_normal((40, 7)).astype(dtype)
    a[2, 5], a[6, 0], b[3, 4] = np.inf, np.nan, -np.inf
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        got = ozaki_emulated(A, B).to_numpy()
    with np.errstate(invalid="ignore"):
        ref = a @ b
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))
    clean = np.ones((9, 7), bool)
    clean[[2, 6], :] = False
    clean[:, 4] = False
    a0, b0 = a.copy(), b.copy()
    a0[[2, 6]], b0[:, 4] = 0.0, 0.0  # the other elements: the emulation's, as if those lines were not there
    want = emulated_matmul(a0, b0, ozaki_plan_for(MODES[dtype][0], 40))
    np.testing.assert_array_equal(got[clean], want[clean])


@pytest.mark.parametrize("dtype", list(MODES))
def test_the_same_bits_call_after_call_and_empty_shapes(dtype):
    a, b = rng.standard_normal((130, 257)).astype(dtype), rng.standard_normal((257, 66)).astype(dtype)
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        first = ozaki_emulated(A, B).to_numpy()
        for _ in range(3):
            assert ozaki_emulated(A, B).to_numpy().tobytes() == first.tobytes()
    for m, k, n in ((0, 3, 4), (3, 0, 4), (3, 4, 0)):
        with gm.Matrix.from_numpy(np.ones((m, k), dtype)) as A, gm.Matrix.from_numpy(np.ones((k, n), dtype)) as B:
            got = ozaki_emulated(A, B)
            assert got.shape == (m, n) and got.dtype == dtype and np.all(got.to_numpy() == 0.0)


def test_bad_input_is_refused_and_the_library_keeps_working():
    with gm.Matrix.from_numpy(np.ones((4, 5))) as A, gm.Matrix.from_numpy(np.ones((5, 3), np.float32)) as B32:
        with pytest.raises(TypeError, match="float64"):
            ozaki_emulated(A, B32)
        with pytest.raises(ValueError, match="do not chain"):
            ozaki_emulated(A, A)
        with pytest.raises(ValueError, match="Ozaki scheme"):
            ozaki_emulated(A, A.T, count=0)
        with gm.Matrix.from_numpy(np.ones((3, 0))) as E, gm.Matrix.from_numpy(np.ones((0, 2))) as F:
            with pytest.raises(ValueError, match="Ozaki scheme"):  # checked at K = 0 too
                ozaki_emulated(E, F, count=0)
        with gm.Matrix.from_numpy(np.ones((2, 4, 5))) as batch, pytest.raises(ValueError, match="2-D"):
            ozaki_emulated(batch, A.T)
        for bad in (0, -1, 2.5):
            with pytest.raises(ValueError, match="panel_bytes"):
                ozaki_emulated(A, A.T, panel_bytes=bad)
        np.testing.assert_array_equal(ozaki_emulated(A, A.T).to_numpy(), np.full((4, 4), 5.0))
    with gm.Matrix.zeros(1, OZAKI_MAX_K + 1, dtype=np.float64) as X, pytest.raises(ValueError, match="overflow int32"):
        ozaki_emulated(X, X.T)


# --- gm.matmul(..., precision="fp64_int8" / "fp32_int8"): the same scheme on the one call path ---------------
@settings(max_examples=20, deadline=None)
@given(m=SIDES, n=SIDES, k=SIDES, a_trans=st.booleans(), b_trans=st.booleans(), dtype=st.sampled_from(list(MODES)))
def test_matmul_at_the_emulated_modes_is_the_emulated_product_in_every_layout(m, n, k, a_trans, b_trans, dtype):
    """gm.matmul at precision "fp64_int8" (float64) and "fp32_int8" (float32) gives the host reference's bits
    with the mode's plan, operands stored either way (a transposed view copied row-major first), into a
    poisoned out; the plan says which row runs."""
    sfx, mode = MODES[dtype]
    a, b = scaled((m, k), 4, dtype), scaled((k, n), 4, dtype)
    want = emulated_matmul(a, b, ozaki_plan_for(sfx, k))
    sa = np.ascontiguousarray(a.T) if a_trans else a
    sb = np.ascontiguousarray(b.T) if b_trans else b
    with gm.Matrix.from_numpy(sa) as SA, gm.Matrix.from_numpy(sb) as SB:
        A, B = (SA.T if a_trans else SA), (SB.T if b_trans else SB)
        assert gm.matmul_plan(A, B, precision=mode).algorithm == f"ozaki_{mode}"
        with gm.Matrix.from_numpy(np.full((m, n), np.nan, dtype)) as C:
            gm.matmul(A, B, out=C, precision=mode)
            got = C.to_numpy()
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", list(MODES))
@pytest.mark.parametrize("bias_along", [0, 1, 2])
def test_matmul_at_the_emulated_modes_applies_the_epilogue(bias_along, dtype):
    """alpha, beta C, a bias over columns or rows and relu, applied to the emulated product as C is written
    (alpha x + beta c + bias, then relu, in the dtype: gpumat.cuh's epilogue)."""
    sfx, mode = MODES[dtype]
    m, n, k = 300, 70, 90  # (the bias over rows crosses no panel here; the CPU tests check panels' offsets)
    a, b, c0 = scaled((m, k), 4, dtype), scaled((k, n), 4, dtype), rng.standard_normal((m, n)).astype(dtype)
    bias = rng.standard_normal(n if bias_along == 1 else m).astype(dtype)
    x = emulated_matmul(a, b, ozaki_plan_for(sfx, k))
    alpha, beta = dtype(1.5), dtype(-0.5)
    ref = alpha * x + beta * c0
    if bias_along == 1:
        ref = ref + bias[None, :]
    if bias_along == 2:
        ref = ref + bias[:, None]
    ref = np.maximum(ref, 0.0)
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, gm.Matrix.from_numpy(c0) as C:
        shape = (1, n) if bias_along == 1 else (m, 1)
        with gm.Matrix.from_numpy(bias.reshape(shape)) as bias_matrix:
            extra = {} if bias_along == 0 else {"bias": bias_matrix}
            gm.matmul(A, B, out=C, precision=mode, alpha=1.5, beta=-0.5, activation="relu", **extra)
            got = C.to_numpy()
    eps = np.finfo(dtype).eps
    assert got.dtype == dtype
    np.testing.assert_allclose(got, ref, rtol=8 * eps, atol=8 * eps * np.abs(ref).max())
