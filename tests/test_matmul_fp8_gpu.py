"""FP8 products on the GPU (float8_e4m3fn @ float8_e4m3fn and float8_e5m2 @ float8_e5m2, float32
accumulators, C in bfloat16, float16 or float32 with the epilogue): on every FP8 row that runs here, every
layout, batch, view, swap, split and edge.

Two references. Exact: operands of small integers times a power of two (every |partial sum| stays below
2^13 times the scales, so the tensor cores' sums of FP8 products, whatever their internal width, are
exact), where C must equal the float64 product rounded once into C's dtype, bit for bit. Bounded:
random normal operands rounded into FP8, where the tensor cores add the products of each k step of 32 at
a reduced precision of their own (the FP8 forms keep fewer bits than float32 when they align a step's
products and the accumulator), so |C - ref| <= (ceil(K / 32) + 1) 2^-13 (|A| @ |B|) + C's rounding. Outputs
are poisoned first, so an element left unwritten shows."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import dims, rng

import gpumat as gm
from gpumat import _dtypes
from gpumat.matmul import algorithms, engine
from gpumat.matmul.engine import VARIANTS, Target

pytestmark = pytest.mark.gpu
ml_dtypes = pytest.importorskip("ml_dtypes")
FP8 = {"e4m3": np.dtype(ml_dtypes.float8_e4m3fn), "e5m2": np.dtype(ml_dtypes.float8_e5m2)}
OUTS = {"bf16": _dtypes.as_dtype("bfloat16"), "f16": np.dtype(np.float16), "f32": np.dtype(np.float32)}
ROWS = [name for name in algorithms(FP8["e4m3"]) if name != "auto"]


@pytest.fixture(autouse=True)
def _hopper(request):
    """FP8 products run on sm_90 alone (elsewhere a ValueError: tests/test_fp8_cpu.py)."""
    if "gpu" in request.keywords and gm.device().arch != 90:
        pytest.skip(f"FP8 products run on sm_90 alone, this GPU is sm_{gm.device().arch}")


def runnable() -> list[str]:
    target = Target.of(gm.device())
    return [name for name in ROWS if engine.unavailable(VARIANTS[name], target) is None]


def small_integers(shape, scale_exp: int = 0) -> np.ndarray:
    """Values in {-2, ..., 2} times 2^scale_exp, as float64 (exact in both FP8 formats)."""
    return rng.integers(-2, 2, size=shape, endpoint=True).astype(np.float64) * 2.0**scale_exp


def rounded(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """x rounded once into dt (the host's rule, which the kernels' float32 -> C conversion matches)."""
    return np.asarray(_dtypes.to_host_array(x, dt)).astype(np.float64)


def upload(host: np.ndarray, dt: np.dtype, trans: bool = False) -> gm.Matrix:
    """host as an FP8 matrix, stored as it is or (trans) stored transposed and viewed back."""
    if trans:
        return gm.Matrix.from_numpy(np.ascontiguousarray(np.swapaxes(host, -1, -2)), dtype=dt).T
    return gm.Matrix.from_numpy(host, dtype=dt)


def poisoned(shape, out: str) -> gm.Matrix:
    return gm.Matrix.from_numpy(np.full(shape, np.nan), dtype=OUTS[out])


def check_exact(name, sfx, out, m, n, k, a_trans=False, b_trans=True, batch=0, shared_b=False, split=None, alpha=1.0):
    shape_a = (batch, m, k) if batch else (m, k)
    shape_b = (k, n) if shared_b or not batch else (batch, k, n)
    a, b = small_integers(shape_a, -3), small_integers(shape_b, 2)
    A, B = upload(a, FP8[sfx], a_trans), upload(b, FP8[sfx], b_trans)
    C = poisoned((batch, m, n) if batch else (m, n), out)
    if split is None:  # (alpha alone, the per-tensor scales: the kernels' plain body scales)
        gm.matmul(A, B, out=C, algorithm=name, alpha=alpha)
    else:
        gm.matmul(A, B, out=C, plan=engine.forced(*engine.problem_of_call(A, B, C, name), name, split), alpha=alpha)
    want = rounded(alpha * (a @ b), OUTS[out])
    what = f"{name} {sfx}->{out} {m}x{n}x{k} a_trans={a_trans} b_trans={b_trans} batch={batch} split={split} {alpha}"
    np.testing.assert_array_equal(C.to_numpy().astype(np.float64), want, err_msg=what)
    again = gm.matmul(A, B, out=C, algorithm=name, alpha=alpha).to_numpy().astype(np.float64)
    np.testing.assert_array_equal(again, want)


@given(
    m=dims(600, (64, 128, 256)),
    n=dims(700, (64, 128, 256)),
    k=dims(1200, (32, 128)),
    a_trans=st.booleans(),
    b_trans=st.booleans(),
    sfx=st.sampled_from(list(FP8)),
    out=st.sampled_from(list(OUTS)),
    alpha=st.sampled_from([1.0, 0.25, 8.0]),
    which=st.integers(0, 8),
)
def test_fp8_products_of_exact_values_are_the_rounded_sums(m, n, k, a_trans, b_trans, sfx, out, alpha, which):
    names = ["auto", *runnable()]
    check_exact(names[which % len(names)], sfx, out, m, n, k, a_trans, b_trans, alpha=alpha)


@given(
    m=dims(300, (64, 128)),
    n=dims(300, (64, 128, 256)),
    k=dims(600, (32, 128)),
    batch=st.integers(1, 9),
    shared_b=st.booleans(),
    b_trans=st.booleans(),
    sfx=st.sampled_from(list(FP8)),
    which=st.integers(0, 8),
)
def test_batches_of_fp8_products(m, n, k, batch, shared_b, b_trans, sfx, which):
    names = ["auto", *runnable()]
    check_exact(names[which % len(names)], sfx, "f32", m, n, k, False, b_trans, batch, shared_b)


@given(m=st.integers(17, 64), n=st.integers(128, 600), k=dims(700, (32, 128)), out=st.sampled_from(list(OUTS)))
def test_swapped_plans_write_c_transposed(m, n, k, out):
    """C^T = W @ x^T on every FP8 tile that writes C transposed (a layer on few tokens), forced."""
    a, b = small_integers((m, k)), small_integers((k, n), 1)
    A, B = upload(a, FP8["e4m3"]), upload(b, FP8["e4m3"], trans=True)
    for name in runnable():
        if not VARIANTS[name].writes_c_trans:
            continue
        plan = engine.forced(*engine.problem_of_call(A, B, poisoned((m, n), out), name), name, 1, swap=True)
        assert plan.swap
        # plain, and with a bias row or column (C^T's columns or rows: the swap flips it) and alpha
        for bias in (None, small_integers((1, n)), small_integers((m, 1))):
            C = poisoned((m, n), out)
            if bias is None:
                gm.matmul(A, B, out=C, plan=plan)
                want = rounded(a @ b, OUTS[out])
            else:
                gm.matmul(A, B, out=C, plan=plan, alpha=0.5, bias=gm.Matrix.from_numpy(bias.astype(np.float32)))
                want = rounded(0.5 * (a @ b) + bias, OUTS[out])
            what = f"{name} bias {None if bias is None else bias.shape}"
            np.testing.assert_array_equal(C.to_numpy().astype(np.float64), want, err_msg=what)


@pytest.mark.parametrize("splits", [2, 3, 5])
def test_split_k_adds_float32_partials_in_a_fixed_order(splits):
    for name in runnable():
        check_exact(name, "e5m2", "bf16", 96, 200, 128 * 12 + 7, split=splits)


@given(m=st.integers(1, 200), n=st.integers(1, 200), k=st.integers(1, 500), pads=st.tuples(*[st.integers(0, 5)] * 4))
def test_views_at_odd_offsets_and_nothing_around_c_is_touched(m, n, k, pads):
    a, b = small_integers((m, k)), small_integers((k, n))
    pa = gm.Matrix.from_numpy(np.pad(a, ((0, 0), (pads[0], pads[1]))), dtype=FP8["e4m3"])
    pb = gm.Matrix.from_numpy(np.pad(b, ((0, 0), (pads[2], pads[3]))), dtype=FP8["e4m3"])
    A, B = pa[:, pads[0] : pads[0] + k], pb[:, pads[2] : pads[2] + n]
    pc = gm.Matrix.from_numpy(np.full((m, n + 3), np.nan, np.float32))
    C = pc[:, 1 : n + 1]
    for name in ["auto", *runnable()]:
        gm.matmul(A, B, out=C, algorithm=name)
        got = pc.to_numpy()
        np.testing.assert_array_equal(got[:, 1 : n + 1], a @ b, err_msg=name)
        assert np.isnan(got[:, 0]).all() and np.isnan(got[:, n + 1 :]).all(), name


@pytest.mark.parametrize("out", list(OUTS))
def test_the_epilogue_scales_adds_and_activates_in_float32(out):
    """alpha (the operands' per-tensor scales, folded), beta C, a bias row or column and an activation,
    applied to the float32 sums before C is rounded: exact values give exact results."""
    m, n, k = 130, 270, 300
    a, b = small_integers((m, k)), small_integers((k, n))
    A, B = upload(a, FP8["e4m3"]), upload(b, FP8["e4m3"], trans=True)
    old = rng.integers(-8, 8, size=(m, n)).astype(np.float64)
    row, col = rng.integers(-4, 4, size=(1, n)).astype(np.float64), rng.integers(-4, 4, size=(m, 1)).astype(np.float64)
    for name in ["auto", *runnable()]:
        for bias in (row, col):
            C = gm.Matrix.from_numpy(old, dtype=OUTS[out])
            extra = {"alpha": 0.25, "beta": 2.0, "activation": "relu"}
            gm.matmul(A, B, out=C, bias=gm.Matrix.from_numpy(bias.astype(np.float32)), algorithm=name, **extra)
            want = rounded(np.maximum(0.25 * (a @ b) + 2.0 * old + bias, 0.0), OUTS[out])
            np.testing.assert_array_equal(C.to_numpy().astype(np.float64), want, err_msg=f"{name} {bias.shape}")


@pytest.mark.parametrize("sfx", list(FP8))
@pytest.mark.parametrize("shape", [(1, 1, 1), (33, 65, 4096), (512, 1024, 2048), (7, 4096, 1000)])
def test_random_fp8_operands_stay_within_the_accumulators_bound(sfx, shape):
    m, n, k = shape
    a = rounded(rng.standard_normal((m, k)) * 4, FP8[sfx])
    b = rounded(rng.standard_normal((n, k)), FP8[sfx])
    A, B = upload(a, FP8[sfx]), upload(b, FP8[sfx]).T
    ref, scale = a @ b.T, np.abs(a) @ np.abs(b).T
    bound = (math.ceil(k / 32) + 1) * 2.0**-13 * scale
    for out in OUTS:
        for name in ["auto", *runnable()]:
            got = gm.matmul(A, B, out=gm.Matrix.empty((m, n), dtype=OUTS[out]), algorithm=name)
            got = got.to_numpy().astype(np.float64)
            unit = 2.0 ** -{"bf16": 8, "f16": 11, "f32": 24}[out]
            err = np.abs(got - ref)
            assert (err <= bound + unit * np.abs(ref)).all(), f"{name} {out}: worst {np.max(err / (bound + 1e-300))}"
            again = gm.matmul(A, B, out=gm.Matrix.empty((m, n), dtype=OUTS[out]), algorithm=name)
            np.testing.assert_array_equal(again.to_numpy().astype(np.float64), got)  # the same bits


def test_k_zero_gives_the_epilogue_of_zero_and_empty_results_nothing():
    A, B = gm.Matrix.zeros(5, 0, dtype=FP8["e4m3"]), gm.Matrix.zeros(0, 7, dtype=FP8["e4m3"])
    C = poisoned((5, 7), "bf16")
    gm.matmul(A, B, out=C)
    np.testing.assert_array_equal(C.to_numpy().astype(np.float64), 0.0)
    C = gm.Matrix.from_numpy(np.full((5, 7), 3.0), dtype=OUTS["bf16"])
    gm.matmul(A, B, out=C, beta=0.5, bias=gm.Matrix.from_numpy(np.ones((1, 7), np.float32)))
    np.testing.assert_array_equal(C.to_numpy().astype(np.float64), 2.5)
    assert gm.matmul(gm.Matrix.zeros(0, 4, dtype=FP8["e5m2"]), gm.Matrix.zeros(4, 3, dtype=FP8["e5m2"])).shape == (0, 3)


def test_a_large_product_on_auto_is_exact_and_repeats():
    a, b = small_integers((4096, 2048)), small_integers((4096, 2048))
    A, B = upload(a, FP8["e4m3"]), upload(b, FP8["e4m3"]).T
    plan = gm.matmul_plan(A, B)
    if gm.device().arch == 90:
        assert plan.algorithm.startswith("fp8_wgmma") and not plan.copy_b, plan
    C = A @ B
    assert C.dtype == np.float32
    np.testing.assert_array_equal(C.to_numpy(), a @ b.T)
    np.testing.assert_array_equal((A @ B).to_numpy(), C.to_numpy())
