"""matmul on the GPU: every variant against a float64 reference, on every kind of shape."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import check_view_product, dims, poison, poisoned, product_error, random, rel_error

import gpumat as gm
from gpumat.matmul.engine import VARIANTS, Target, algorithms, unavailable

pytestmark = pytest.mark.gpu
TOL = 1e-5  # float32 accumulation of inputs in [-1, 1]
# float32 at precision "float32": auto, the teaching kernels and the SGEMM kernels (test_matmul_tc: the TF32 ones;
# test_matmul_gemv: the matrix-vector kernels, which compute C of at most 16 rows or columns only)
ALGORITHMS = [
    name
    for name in algorithms("f32")
    if name == "auto" or (VARIANTS[name].computes("f32") == "float32" and VARIANTS[name].any_shape)
]
FAST = {name: v for name, v in VARIANTS.items() if v.mode == "float32"}  # the SGEMM kernels, which split K


def reference(a, b):
    return a.astype(np.float64) @ b.astype(np.float64)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@given(m=dims(), n=dims(), k=dims())
def test_matches_float64_reference(algorithm, m, n, k):
    a, b = random((m, k)), random((k, n))
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, poisoned(m, n) as C:
        gm.matmul(A, B, out=C, algorithm=algorithm)
        assert product_error(C.to_numpy(), a, b) < TOL


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@given(m=st.integers(1, 90), n=st.integers(1, 90), k=st.integers(1, 90), pads=st.tuples(*[st.integers(0, 5)] * 6))
def test_views_with_odd_offsets_and_strides(algorithm, m, n, k, pads):
    check_view_product(algorithm, m, n, k, pads, TOL)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_nan_and_inf_propagate_like_numpy(algorithm):
    a, b = random((37, 19)), random((19, 41))
    a[3, 5], b[7, 11], a[20, 0] = np.nan, np.inf, -np.inf
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        got = gm.matmul(A, B, algorithm=algorithm).to_numpy()
    with np.errstate(invalid="ignore"):
        ref = reference(a, b)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))
    finite = np.isfinite(ref)
    assert rel_error(got[finite], ref[finite]) < TOL


def test_empty_shapes_and_zero_k():
    for m, n, k in [(0, 5, 3), (5, 0, 3), (0, 0, 0)]:
        c = gm.matmul(
            gm.Matrix.from_numpy(random((m, k)).reshape(m, k)), gm.Matrix.from_numpy(random((k, n)).reshape(k, n))
        )
        assert c.shape == (m, n)
    c = poisoned(4, 6)
    gm.matmul(gm.Matrix.empty(4, 0), gm.Matrix.empty(0, 6), out=c)
    np.testing.assert_array_equal(c.to_numpy(), np.zeros((4, 6), np.float32))


def test_operator_and_seed_003_example():
    i = np.arange(4, dtype=np.float32)
    a, b = np.repeat(i[:, None], 4, 1), np.repeat(i[None, :], 4, 0)
    got = (gm.Matrix.from_numpy(a) @ gm.Matrix.from_numpy(b)).to_numpy()
    np.testing.assert_array_equal(got, a @ b)  # small integers: exact in float32


def test_large_tall_output_uses_the_grid_stride_loop():
    m, n, k = 65535 * 16 + 37, 3, 2  # more 16-row tiles than gridDim.y allows
    a, b = random((m, k)), random((k, n))
    for algorithm in ("naive", "tiled16", "tiled16x64"):
        with poisoned(m, n) as C:
            gm.matmul(gm.Matrix.from_numpy(a), gm.Matrix.from_numpy(b), out=C, algorithm=algorithm)
            assert product_error(C.to_numpy(), a, b) < TOL


def test_bad_input_raises_before_launch_and_library_keeps_working():
    A, B = gm.Matrix.from_numpy(random((3, 4))), gm.Matrix.from_numpy(random((5, 2)))
    with pytest.raises(ValueError):
        A @ B
    S = gm.Matrix.from_numpy(random((4, 4)))
    with pytest.raises(ValueError, match="overlaps"):
        gm.matmul(S, S[:, :], out=S[:, :])  # out overlaps an input
    a = random((4, 4))
    np.testing.assert_allclose(
        (gm.Matrix.from_numpy(a) @ gm.Matrix.from_numpy(a)).to_numpy(), reference(a, a), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("name", list(FAST))
@given(
    m=dims(200),
    n=dims(200),
    k=st.integers(1, 3000),
    splits=st.sampled_from([2, 3, 5, 8]),
    chunk_tiles=st.integers(1, 12),
    odd_chunk=st.booleans(),
)
def test_split_k_matches_reference_for_any_chunking(name, m, n, k, splits, chunk_tiles, odd_chunk):
    k_chunk = chunk_tiles * 32 - (3 if odd_chunk else 0)  # odd chunks drop A to scalar loads
    splits = max(min(splits, -(-k // k_chunk) + 1), 2)  # at most one split past K, which the plan drops
    a, b = random((m, k)), random((k, n))
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, poisoned(m, n) as C:
        if splits * k_chunk < k:
            k_chunk = -(-k // splits)
        p = gm.matmul_plan(A, B, out=C, algorithm=name, splits=splits, k_chunk=k_chunk)
        layers = min(splits, -(-k // k_chunk))  # layers that would start past K are dropped
        assert (p.algorithm, p.splits, p.k_chunk) == (name, layers, k_chunk if layers > 1 else k)
        gm.matmul(A, B, out=C, plan=p)
        assert product_error(C.to_numpy(), a, b) < TOL


def test_split_k_is_bitwise_deterministic():
    a, b = random((256, 16384)), random((16384, 256))
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        assert gm.matmul_plan(A, B).splits > 1
        first = (A @ B).to_numpy()
        for _ in range(10):
            np.testing.assert_array_equal((A @ B).to_numpy(), first)
        assert product_error(first, a, b) < TOL


@pytest.mark.parametrize("name", [name for name, v in FAST.items() if v.tile[0] >= 128])
def test_fast_kernels_walk_more_row_tiles_than_the_grid_holds(name):
    m, n, k = 65535 * FAST[name].tile[0] + 77, 5, 3
    a, b = random((m, k)), random((k, n))
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, poisoned(m, n) as C:
        gm.matmul(A, B, out=C, algorithm=name)
        assert product_error(C.to_numpy(), a, b) < TOL


@pytest.mark.parametrize("name", list(FAST))
@given(m=dims(300), n=st.sampled_from([1, 3, 4, 61, 64, 127, 128, 130, 255, 257]), k=dims(300), shift=st.integers(1, 3))
def test_aligned_and_unaligned_b_give_identical_bits(name, m, n, k, shift):
    """A 16-byte aligned B (base and row stride) takes 16-byte copies, any other view one-float copies:
    the sums are formed in the same order either way, so the results agree bit for bit."""
    a, b = random((m, k)), random((k, n))
    width = -(-(n + 3) // 4) * 4  # a parent row of a multiple of 4 floats: the view at offset 0 is aligned
    parent = random((k, width + 4))
    parent[:, :n] = b
    odd = random((k, n + shift + 1))
    odd[:, shift : shift + n] = b
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(parent) as P, gm.Matrix.from_numpy(odd) as Q:
        aligned = gm.matmul(A, P[:, :n], algorithm=name).to_numpy()
        unaligned = gm.matmul(A, Q[:, shift : shift + n], algorithm=name).to_numpy()
    np.testing.assert_array_equal(aligned, unaligned)
    assert product_error(aligned, a, b) < TOL


def test_a_tuned_plan_runs_for_later_calls_and_repeats_its_bits():
    """matmul_plan(tune=True): one of auto's candidates, measured; plain calls of that problem then run it,
    its bits repeat and equal plan='s, the result is right, and a given out is not written by the tuning."""
    from gpumat.matmul.engine import forget_tuning, ranked

    rng = np.random.default_rng(31)
    a = rng.uniform(-1, 1, (1536, 1536)).astype(np.float32)
    b = rng.uniform(-1, 1, (1536, 1536)).astype(np.float32)
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, gm.Matrix.zeros(1536, 1536) as out:
        untuned = gm.matmul_plan(A, B, precision="float32")
        try:
            p = gm.matmul_plan(A, B, out=out, precision="float32", tune=True)
            assert out.to_numpy().tobytes() == np.zeros((1536, 1536), np.float32).tobytes()
            # which candidate wins is the GPU's measurement: another one by more than 3%, or the model's kept
            assert p.reason.startswith(("tuned: measured fastest of", "tuned: the model's choice kept of"))
            names = [q.variant.name for q in ranked(untuned.problem, untuned.target)]
            assert p.variant.name in names
            assert gm.matmul_plan(A, B, precision="float32").variant == p.variant  # auto's choice now
            first = gm.matmul(A, B, precision="float32").to_numpy()
            again = gm.matmul(A, B, precision="float32").to_numpy()
            given = gm.matmul(A, B, precision="float32", plan=p).to_numpy()
            assert first.tobytes() == again.tobytes() == given.tobytes()
        finally:
            forget_tuning()
        assert gm.matmul_plan(A, B, precision="float32") == untuned
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert np.all(np.abs(first - ref) <= 1536 * np.finfo(np.float32).eps * scale)


def test_tuning_leaves_a_modes_fallback_alone_and_an_unaligned_view_runs_its_tuned_plan():
    """A tf32 batch of tiny products runs as exact FP32 (the mode's fallback): tune=True returns that plan
    untuned, and it runs as plan=. A product with an unaligned view: the tuned plan is what the plain
    call (default precision) then runs, bit for bit."""
    from gpumat.matmul.engine import forget_tuning

    rng = np.random.default_rng(37)
    x = rng.uniform(-1, 1, (4096, 32, 32)).astype(np.float32)
    q = rng.uniform(-1, 1, (1536, 1540)).astype(np.float32)
    b = rng.uniform(-1, 1, (1536, 1536)).astype(np.float32)
    with gm.Matrix.from_numpy(x) as X, gm.Matrix.from_numpy(q) as Q, gm.Matrix.from_numpy(b) as B:
        try:
            p = gm.matmul_plan(X, X, precision="tf32", tune=True)
            assert not p.reason.startswith("tuned") and p == gm.matmul_plan(X, X, precision="tf32")
            assert gm.matmul(X, X, precision="tf32", plan=p).shape == (4096, 32, 32)
            view = Q[:, 1:1537]  # rows 4-byte aligned only
            tuned = gm.matmul_plan(view, B, tune=True)
            assert tuned.reason.startswith("tuned")
            plain = gm.matmul(view, B).to_numpy()
            assert plain.tobytes() == gm.matmul(view, B, plan=tuned).to_numpy().tobytes()
        finally:
            forget_tuning()
    ref = q[:, 1:1537].astype(np.float64) @ b.astype(np.float64)
    assert rel_error(plain, ref) < 1e-5


# (dtype, precision, the mode its tile rows compute): the tile rows, which store C from mma fragments
FRAGMENT_KINDS = [
    ("float64", None, "native"),
    ("float16", None, "native"),
    ("bfloat16", None, "native"),
    ("float32", "tf32", "tf32"),
]


@pytest.mark.parametrize("dtype, precision, mode", FRAGMENT_KINDS, ids=[k[0] + (k[1] or "") for k in FRAGMENT_KINDS])
def test_every_tile_writes_c_rows_of_either_alignment_exactly(dtype, precision, mode):
    """Every tile row of the dtype into C views whose rows start on a pair of elements, an element off it, or
    alternate (odd row strides, bases one element in), on shapes that end inside a warp's fragment and cross
    tiles, with B of an even and of odd widths (the float64 tiles store pairs shifted a column from their loop
    for operands off 16 bytes): exact integer products (small integers: every partial sum exact in every
    dtype) land in the view, and nothing around it is written (a NaN-filled parent)."""
    sfx = {"float64": "f64", "float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype]
    target = Target.of(gm.device())
    names = [
        name
        for name in algorithms(sfx)
        if name != "auto"
        and VARIANTS[name].any_shape
        and VARIANTS[name].computes(sfx) == mode
        and unavailable(VARIANTS[name], target) is None
    ]
    assert names
    rng = np.random.default_rng(7)
    store = np.float32 if dtype == "bfloat16" else np.dtype(dtype)
    for m, n, k in ((77, 300, 16), (130, 129, 8), (5, 517, 16)):
        a, b = rng.integers(-2, 3, (m, k)), rng.integers(-2, 3, (k, n))
        with (
            gm.Matrix.from_numpy(a.astype(store), dtype=dtype) as A,
            gm.Matrix.from_numpy(b.astype(store), dtype=dtype) as B,
        ):
            for left, right in ((1, 0), (1, 2), (0, 1), (2, 1)):
                parent = gm.Matrix.from_numpy(np.full((m, n + left + right), np.nan, store), dtype=dtype)
                for name in names:
                    poison(parent)
                    gm.matmul(A, B, out=parent[:, left : left + n], algorithm=name, precision=precision)
                    got = parent.to_numpy().astype(np.float64)
                    np.testing.assert_array_equal(got[:, left : left + n], a @ b, err_msg=f"{name} {m}x{n}x{k} {left}")
                    assert np.isnan(got[:, :left]).all() and np.isnan(got[:, left + n :]).all(), name
                parent.free()
