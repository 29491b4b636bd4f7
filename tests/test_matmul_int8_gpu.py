"""int8 and int32 matrices on the GPU: they hold and move their bits (uploads, views, copies, transposes,
the interop exchanges), convert exactly to the floats, and int8 @ int8 gives the int32 sums, exactly,
on every row that runs here (the wgmma INT8 tiles on sm_90, the SIMT row anywhere), every layout, batch,
view and edge. The reference is exact: float64's product of integer-valued matrices is exact while the
sums stay below 2^53, and an int8 product's stay below 2^31 (K <= INT8_MAX_K). Into a float C (the
wgmma tiles) the sums, below 2^24 in those tests, are exact in float32, so C must be the float64
reference of the epilogue rounded once into C's dtype. Outputs are poisoned first, so an element left
unwritten shows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import dims, rng

import gpumat as gm
from gpumat import _dtypes
from gpumat.matmul import algorithms, engine
from gpumat.matmul.engine import INT8_MAX_K, VARIANTS, Target

pytestmark = pytest.mark.gpu

POISON = np.int32(-0x5A5A5A5B)  # no sum of the tests' products is this
ROWS = [name for name in algorithms(np.int8) if name != "auto"]


def runnable() -> list[str]:
    target = Target.of(gm.device())
    return [name for name in ROWS if engine.unavailable(VARIANTS[name], target) is None]


def int8s(shape, extremes: bool = True) -> np.ndarray:
    """Random int8 values, the two ends of the range among them."""
    x = rng.integers(-128, 127, size=shape, endpoint=True).astype(np.int8)
    if extremes and x.size >= 4:
        flat = x.reshape(-1)
        flat[rng.choice(flat.size, size=min(flat.size, 8), replace=False)] = rng.choice(
            [-128, 127], size=min(flat.size, 8)
        )
    return x


def exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b in int64, exactly (float64's BLAS product: every partial sum is an integer below 2^53)."""
    return np.rint(a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)


def upload_view(host: np.ndarray, pad_left: int, pad_right: int):
    """host inside a wider random matrix of its dtype: (parent, view of host's place)."""
    h, w = host.shape
    parent = (int8s if host.dtype == np.int8 else lambda s: rng.integers(-(2**31), 2**31, size=s).astype(np.int32))(
        (h, w + pad_left + pad_right)
    )
    parent[:, pad_left : pad_left + w] = host
    big = gm.Matrix.from_numpy(parent, dtype=host.dtype)
    return big, big[:, pad_left : pad_left + w]


def poisoned_int32(shape) -> gm.Matrix:
    return gm.Matrix.from_numpy(np.full(shape, POISON), dtype=np.int32)


# --- holding and moving ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int8, np.int32])
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (129, 257), (4, 33, 65), (0, 5), (2, 0, 3)])
def test_integers_round_trip_bit_for_bit(dtype, shape):
    info = np.iinfo(dtype)
    host = rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    m = gm.Matrix.from_numpy(host, dtype=dtype)
    assert m.dtype == dtype and m.shape == shape
    np.testing.assert_array_equal(m.to_numpy(), host)
    np.testing.assert_array_equal(m.copy().to_numpy(), host)
    if len(shape) == 2:
        np.testing.assert_array_equal(m.T.to_numpy(), host.T)
        if min(shape) > 2:
            np.testing.assert_array_equal(m[1:, 1:-1].to_numpy(), host[1:, 1:-1])  # a view at an odd offset
            np.testing.assert_array_equal(m[1:, 1:-1].copy().to_numpy(), host[1:, 1:-1])
    z = gm.Matrix.zeros(shape, dtype=dtype)
    assert z.dtype == dtype and not z.to_numpy().any()


@pytest.mark.parametrize(
    ("src", "dst"),
    [(src, dst) for src in (np.int8, np.int32) for dst in ("float32", "float64", "float16", "bfloat16", "int32")
     if not (src == np.int32 and dst == "int32")],  # (int32 to int32: a copy, the round trip above)
)  # fmt: skip
def test_the_integers_convert_exactly_or_round_once(src, dst):
    info = np.iinfo(src)
    host = rng.integers(info.min, info.max, size=(37, 300), endpoint=True).astype(src)
    host.reshape(-1)[:4] = [info.min, info.max, 0, -1]
    if src == np.int32:  # and values float32 and the halves round (odd beyond 2^24; 2049 between halves)
        host.reshape(-1)[4:8] = [2049, 2**24 + 1, 2**24 + 3, -(2**30) - 65]
    got = gm.Matrix.from_numpy(host, dtype=src).astype(dst).to_numpy()
    # the host's rounding of the exact float64 value, once, to nearest even (from_numpy's own rule)
    if dst == "int32":
        want = host.astype(np.int32)
    else:
        with np.errstate(over="ignore"):  # (int32 beyond float16's range: infinities, as the GPU gives)
            want = _dtypes.to_host_array(host.astype(np.float64), _dtypes.as_dtype(dst))
    np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8))


def test_floats_never_become_integers_on_the_gpu():
    x = gm.Matrix.from_numpy(np.ones((2, 2), np.float32))
    for dt in (np.int8, np.int32):
        with pytest.raises(TypeError, match="quantising floats"):
            x.astype(dt)
    with pytest.raises(TypeError, match="int32 does not convert into int8 on the GPU"):
        gm.Matrix.from_numpy(np.ones((2, 2), np.int32), dtype=np.int32).astype(np.int8)
    with pytest.raises(TypeError, match="only from integers"):
        gm.Matrix.from_numpy(np.ones((2, 2)), dtype=np.int8)
    with pytest.raises(ValueError, match="beyond int8"):
        gm.Matrix.from_numpy(np.array([[300]]), dtype=np.int8)
    np.testing.assert_array_equal(x.to_numpy(), 1.0)  # and the library works on


@pytest.mark.parametrize("dtype", [np.int8, np.int32])
@pytest.mark.parametrize("shape", [(1, 300), (300, 1), (5, 40000), (40000, 7), (129, 257), (1000, 1003), (3, 64, 96)])
def test_transposes_move_integers_bit_for_bit(dtype, shape):
    info = np.iinfo(dtype)
    host = rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    m = gm.Matrix.from_numpy(host, dtype=dtype)
    want = np.swapaxes(host, -1, -2)
    names = (
        ["auto"]
        if len(shape) == 3
        else ["auto", "naive", "tiled", "tiled_padded", "tiled_rect", "tiled_rect64", "sector_aligned"]
    )
    for name in names:
        np.testing.assert_array_equal(gm.transpose(m, algorithm=name).to_numpy(), want, err_msg=name)
    if len(shape) == 2 and min(shape) > 3:
        view = m[1:-1, 2:]
        np.testing.assert_array_equal(gm.transpose(view).to_numpy(), host[1:-1, 2:].T)


@pytest.mark.parametrize("dtype", ["int8", "int32"])
def test_torch_and_cupy_exchange_integer_matrices_without_copies(dtype):
    torch = pytest.importorskip("torch")
    cupy = pytest.importorskip("cupy")
    host = rng.integers(-100, 100, size=(33, 17)).astype(dtype)
    t = torch.from_numpy(host).cuda()
    m = gm.from_dlpack(t)
    assert m.dtype == dtype and m.elements == t.data_ptr()
    np.testing.assert_array_equal(m.to_numpy(), host)
    back = torch.from_dlpack(m)
    assert back.dtype == getattr(torch, dtype) and back.data_ptr() == m.elements
    c = cupy.asarray(m)  # through __cuda_array_interface__
    assert c.dtype == dtype and c.data.ptr == m.elements
    np.testing.assert_array_equal(cupy.asnumpy(c), host)
    from_cupy = gm.asmatrix(cupy.asarray(host))
    np.testing.assert_array_equal(from_cupy.to_numpy(), host)
    torch.cuda.synchronize()


# --- the product ----------------------------------------------------------------------------------------
def check_product(name, m, n, k, a_trans, b_trans, batch=None, shared_b=False):
    a_host = int8s((batch, m, k) if batch else (m, k))
    b_host = int8s((k, n) if shared_b or not batch else (batch, k, n))
    # stored as asked: A as X.T of a K x M X, B as W.T of an N x K W (x @ W.T)
    A = (
        gm.Matrix.from_numpy(np.swapaxes(a_host, -1, -2).copy(), dtype=np.int8).T
        if a_trans
        else gm.Matrix.from_numpy(a_host, dtype=np.int8)
    )
    B = (
        gm.Matrix.from_numpy(np.swapaxes(b_host, -1, -2).copy(), dtype=np.int8).T
        if b_trans
        else gm.Matrix.from_numpy(b_host, dtype=np.int8)
    )
    C = poisoned_int32((batch, m, n) if batch else (m, n))
    gm.matmul(A, B, out=C, algorithm=name)
    want = exact(a_host, b_host)
    got = C.to_numpy()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got.astype(np.int64), want, err_msg=f"{name} {m}x{n}x{k} {a_trans} {b_trans} {batch}")
    again = gm.matmul(A, B, algorithm=name)  # a new C, and the same bits
    assert again.dtype == np.int32
    np.testing.assert_array_equal(again.to_numpy(), got)


@given(
    m=dims(600, (64, 128, 256)),
    n=dims(700, (64, 128, 256)),
    k=dims(1200, (4, 16, 128)),
    a_trans=st.booleans(),
    b_trans=st.booleans(),
    which=st.integers(0, 8),
)
def test_int8_products_are_the_exact_int32_sums(m, n, k, a_trans, b_trans, which):
    names = ["auto", *runnable()]
    check_product(names[which % len(names)], m, n, k, a_trans, b_trans)


@given(
    m=dims(300, (64, 128)),
    n=dims(300, (64, 128, 256)),
    k=dims(600, (16, 128)),
    batch=st.integers(1, 9),
    shared_b=st.booleans(),
    b_trans=st.booleans(),
    which=st.integers(0, 8),
)
def test_batches_of_int8_products(m, n, k, batch, shared_b, b_trans, which):
    names = ["auto", *runnable()]
    check_product(names[which % len(names)], m, n, k, False, b_trans, batch, shared_b)


@given(m=st.integers(1, 300), n=st.integers(1, 300), k=st.integers(1, 700), pads=st.tuples(*[st.integers(0, 5)] * 6))
def test_views_at_odd_offsets_and_nothing_around_c_is_touched(m, n, k, pads):
    a_host, b_host = int8s((m, k)), int8s((k, n))
    pa, A = upload_view(a_host, *pads[0:2])
    pb, B = upload_view(b_host, *pads[2:4])
    pc, C = upload_view(np.full((m, n), POISON, np.int32), *pads[4:6])
    around = pc.to_numpy()
    for name in ["auto", *runnable()]:
        gm.matmul(A, B, out=C, algorithm=name)
        got = pc.to_numpy()
        np.testing.assert_array_equal(
            got[:, pads[4] : pads[4] + n].astype(np.int64), exact(a_host, b_host), err_msg=name
        )
        got[:, pads[4] : pads[4] + n] = around[:, pads[4] : pads[4] + n]
        np.testing.assert_array_equal(got, around, err_msg=name)


def test_the_largest_k_sums_to_the_edge_of_int32_exactly():
    k = INT8_MAX_K  # (-128)(-128) K = 2^31 - 2^14: inside int32
    a = np.full((3, k), -128, np.int8)
    b = np.full((k, 5), -128, np.int8)
    b[:, 1] = 127
    A, B = gm.Matrix.from_numpy(a, dtype=np.int8), gm.Matrix.from_numpy(b, dtype=np.int8)
    for name in ["auto", *runnable()]:
        got = gm.matmul(A, B, algorithm=name).to_numpy()
        np.testing.assert_array_equal(got.astype(np.int64), exact(a, b), err_msg=name)
    assert int(exact(a, b).max()) == 2**31 - 2**14
    with pytest.raises(ValueError, match="exact for K up to"):
        gm.matmul(gm.Matrix.zeros(3, k + 1, dtype=np.int8), gm.Matrix.zeros(k + 1, 5, dtype=np.int8))


@given(m=st.integers(17, 64), n=st.integers(128, 600), k=dims(700, (16, 128)), b_trans=st.booleans())
def test_swapped_plans_write_c_transposed_exactly(m, n, k, b_trans):
    """C^T = op(B)^T @ op(A)^T on every int8 tile that writes C transposed (the weight's rows on the tile's
    M, a layer on few tokens), forced: C written element by element into its row-major storage, nothing
    left unwritten."""
    a_host, b_host = int8s((m, k)), int8s((k, n))
    A = gm.Matrix.from_numpy(a_host, dtype=np.int8)
    B = (
        gm.Matrix.from_numpy(b_host.T.copy(), dtype=np.int8).T
        if b_trans
        else gm.Matrix.from_numpy(b_host, dtype=np.int8)
    )
    for name in runnable():
        if not VARIANTS[name].writes_c_trans:
            continue
        C = poisoned_int32((m, n))
        plan = engine.forced(*engine.problem_of_call(A, B, C, name), name, 1, swap=True)
        assert plan.swap
        gm.matmul(A, B, out=C, plan=plan)
        np.testing.assert_array_equal(C.to_numpy().astype(np.int64), exact(a_host, b_host), err_msg=name)


def test_tuned_plans_pickles_and_copies_keep_int8():
    import pickle

    a, b = int8s((300, 512)), int8s((512, 200))
    A, B = gm.Matrix.from_numpy(a, dtype=np.int8), gm.Matrix.from_numpy(b, dtype=np.int8)
    tuned = gm.matmul_plan(A, B, tune=True)
    np.testing.assert_array_equal(gm.matmul(A, B, plan=tuned).to_numpy().astype(np.int64), exact(a, b))
    np.testing.assert_array_equal(gm.matmul(A, B).to_numpy().astype(np.int64), exact(a, b))  # auto: the tuned plan
    engine.forget_tuning()
    back = pickle.loads(pickle.dumps(A))
    assert back.dtype == np.int8
    np.testing.assert_array_equal(back.to_numpy(), a)
    c = pickle.loads(pickle.dumps(gm.matmul(A, B)))
    assert c.dtype == np.int32


def test_k_zero_gives_zeros_and_empty_results_nothing():
    A, B = gm.Matrix.zeros(5, 0, dtype=np.int8), gm.Matrix.zeros(0, 7, dtype=np.int8)
    C = poisoned_int32((5, 7))
    gm.matmul(A, B, out=C)
    np.testing.assert_array_equal(C.to_numpy(), 0)
    assert gm.matmul(gm.Matrix.zeros(0, 4, dtype=np.int8), gm.Matrix.zeros(4, 3, dtype=np.int8)).shape == (0, 3)


def test_a_large_product_on_auto_is_exact_and_repeats():
    a, b = int8s((4096, 4096)), int8s((4096, 4096))
    A, B = gm.Matrix.from_numpy(a, dtype=np.int8), gm.Matrix.from_numpy(b, dtype=np.int8)
    plan = gm.matmul_plan(A, B)
    if gm.device().arch == 90:
        assert plan.algorithm.startswith("int8_wgmma"), plan
    C = gm.matmul(A, B)
    np.testing.assert_array_equal(C.to_numpy().astype(np.int64), exact(a, b))
    np.testing.assert_array_equal(gm.matmul(A, B).to_numpy(), C.to_numpy())
    assert (A @ B).dtype == np.int32


# --- into a float C (dequantising) -------------------------------------------------------------------------
FLOAT_OUTS = {name: _dtypes.as_dtype(name) for name in ("float32", "bfloat16", "float16")}


def rounded(x: np.ndarray, out: str) -> np.ndarray:
    """x (exact in float64) rounded once into C's dtype, as float64."""
    with np.errstate(over="ignore"):
        return np.asarray(_dtypes.to_host_array(x, FLOAT_OUTS[out])).astype(np.float64)


@given(
    m=dims(400, (64, 128)),
    n=dims(500, (64, 128, 256)),
    k=dims(900, (16, 128)),
    b_trans=st.booleans(),
    out=st.sampled_from(list(FLOAT_OUTS)),
    finish=st.booleans(),
    which=st.integers(0, 8),
)
def test_int8_products_into_a_float_c_are_the_scaled_sums_rounded_once(m, n, k, b_trans, out, finish, which):
    """The int32 sums (below 2^24 here: exact in float32) times alpha (a power of two), plus beta C, a bias
    and an activation where `finish`, equal the float64 reference rounded once into C's dtype."""
    rows = [name for name in runnable() if ("s8", "f32") in VARIANTS[name].kernels]
    a, b = int8s((m, k)), int8s((k, n))
    A = gm.Matrix.from_numpy(a, dtype=np.int8)
    B = gm.Matrix.from_numpy(b.T.copy(), dtype=np.int8).T if b_trans else gm.Matrix.from_numpy(b, dtype=np.int8)
    if not rows:  # (no GPU but sm_90 has the float C's kernels: a ValueError before anything is launched)
        with pytest.raises(ValueError, match="no kernel runs"):
            gm.matmul(A, B, out=gm.Matrix.empty((m, n), dtype=FLOAT_OUTS[out]))
        return
    names = ["auto", *rows]
    name = names[which % len(names)]
    sums = exact(a, b).astype(np.float64)
    alpha = 2.0**-10
    if finish:
        old = rng.integers(-64, 64, size=(m, n)).astype(np.float64)
        bias = rng.integers(-8, 8, size=(1, n)).astype(np.float32)
        C = gm.Matrix.from_numpy(old, dtype=FLOAT_OUTS[out])
        finishing = {"alpha": alpha, "beta": 0.5, "bias": gm.Matrix.from_numpy(bias), "activation": "relu"}
        gm.matmul(A, B, out=C, algorithm=name, **finishing)
        want = rounded(np.maximum(alpha * sums + 0.5 * old + bias, 0.0), out)
    else:
        C = gm.Matrix.from_numpy(np.full((m, n), np.nan), dtype=FLOAT_OUTS[out])
        gm.matmul(A, B, out=C, algorithm=name, alpha=alpha)
        want = rounded(alpha * sums, out)
    np.testing.assert_array_equal(C.to_numpy().astype(np.float64), want, err_msg=f"{name} {out} {m}x{n}x{k}")


@given(m=st.integers(17, 64), n=st.integers(128, 600), k=dims(700, (16, 128)), out=st.sampled_from(list(FLOAT_OUTS)))
def test_swapped_int8_plans_write_a_float_c_transposed(m, n, k, out):
    a, b = int8s((m, k)), int8s((k, n))
    A, B = gm.Matrix.from_numpy(a, dtype=np.int8), gm.Matrix.from_numpy(b.T.copy(), dtype=np.int8).T
    for name in runnable():
        if not (("s8", "f32") in VARIANTS[name].kernels and VARIANTS[name].writes_c_trans):
            continue
        C = gm.Matrix.from_numpy(np.full((m, n), np.nan), dtype=FLOAT_OUTS[out])
        plan = engine.forced(*engine.problem_of_call(A, B, C, name), name, 1, swap=True)
        assert plan.swap
        gm.matmul(A, B, out=C, plan=plan, alpha=2.0**-8)
        want = rounded(2.0**-8 * exact(a, b).astype(np.float64), out)
        np.testing.assert_array_equal(C.to_numpy().astype(np.float64), want, err_msg=name)


@pytest.mark.parametrize("shared_b", [False, True])
def test_batches_of_int8_products_into_a_float_c_read_each_matrix_s_old_c(shared_b):
    """A batch into a float32 C with beta: each product's epilogue reads its own old C (the work items of
    one persistent grid walk the batch), every float-C row by name."""
    rows = [name for name in runnable() if ("s8", "f32") in VARIANTS[name].kernels]
    batch, m, n, k = 3, 150, 264, 300
    a, b = int8s((batch, m, k)), int8s((k, n) if shared_b else (batch, k, n))
    A = gm.Matrix.from_numpy(a, dtype=np.int8)
    B = gm.Matrix.from_numpy(np.swapaxes(b, -1, -2).copy(), dtype=np.int8).T  # x @ W.T, read in place
    old = rng.integers(-64, 64, size=(batch, m, n)).astype(np.float64)
    want = 2.0**-6 * exact(a, b).astype(np.float64) - old
    if not rows:
        pytest.skip("no row writes an int8 product's float C on this GPU (sm_90 only)")
    for name in rows:
        C = gm.Matrix.from_numpy(old, dtype=np.float32)
        gm.matmul(A, B, out=C, algorithm=name, alpha=2.0**-6, beta=-1.0)
        np.testing.assert_array_equal(C.to_numpy().astype(np.float64), want, err_msg=name)
