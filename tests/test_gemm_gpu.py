"""The GEMM interface on the GPU: batched products, transposed operands and out, alpha/beta and the fused
epilogue, in every dtype and precision mode, against a float64 NumPy reference; batched results equal the
same kernel's 2-D products bit for bit; every path deterministic; zero-copy interop of 3-D and
column-major arrays."""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import epilogue_reference, rng, wide

import gpumat as gm
from gpumat._dtypes import BFLOAT16, ML_BFLOAT16
from gpumat.matmul import engine
from gpumat.matmul.engine import VARIANTS, Target

pytestmark = pytest.mark.gpu

DTYPES = {
    "float32": (np.float32, None),
    "tf32x3": (np.float32, "tf32x3"),
    "tf32": (np.float32, "tf32"),
    "float16": (np.float16, None),
    "bfloat16": (BFLOAT16, None),
    "float64": (np.float64, None),
}
# unit roundoff of what the kernels compute in (inputs are exact in their dtype), and of the result
COMPUTE_EPS = {"float32": 2.0**-24, "tf32x3": 2.0**-22, "tf32": 2.0**-11, "float16": 2.0**-24, "bfloat16": 2.0**-24}
COMPUTE_EPS["float64"] = 2.0**-53
RESULT_EPS = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
SIZES = [1, 2, 3, 5, 7, 13, 16, 17, 31, 32, 33, 63, 64, 65, 97, 127, 128, 129]


def tolerance(kind: str, k: int) -> float:
    """A bound on the error relative to the scale |alpha| |A| |B| + |beta| |C| + |bias| (elementwise): the
    accumulation's rounding grows with sqrt(K) for random data (a factor 8 of margin), plus one rounding
    of the result (and of the epilogue's few float32 operations)."""
    eps = COMPUTE_EPS[kind]
    return 8 * eps * math.sqrt(max(k, 1)) + RESULT_EPS.get(kind, eps) + (16 * 2.0**-24 if kind != "float64" else 0)


def host_random(shape, dtype):
    return rng.uniform(-1, 1, size=shape).astype(np.float32).astype(dtype)


def upload(host: np.ndarray, transposed: bool, pad: int):
    """host (2-D or 3-D) on the GPU as a view at an odd offset inside padded storage: row-major, or stored
    transposed (column-major) and read through .T. Returns (view, parent to free, the parent's host copy
    and the storage columns the view covers)."""
    store = np.swapaxes(host, -1, -2) if transposed else host
    shape = list(store.shape)
    shape[-1] += pad + 1
    parent_host = host_random(shape, host.dtype)
    cols = slice(pad, pad + store.shape[-1])
    parent_host[..., cols] = store
    parent = gm.Matrix.from_numpy(parent_host)
    view = parent[:, cols] if store.ndim == 2 else parent[:, :, cols]
    return (view.T if transposed else view), parent, parent_host, cols


def check_close(got, ref, scale, tol, what=""):
    got = np.asarray(got, np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape, what)
    assert not np.isnan(got).any(), f"NaN in the result (an element not written, or poison read) {what}"
    err = np.abs(got - ref) / np.maximum(scale, 2.0**-14)
    assert err.max() <= tol, f"max relative error {err.max():.3g} over {tol:.3g} {what}"


@st.composite
def gemm_cases(draw):
    kind = draw(st.sampled_from(list(DTYPES)))
    m, n, k = (draw(st.sampled_from(SIZES)) for _ in range(3))
    form = draw(st.sampled_from(["2d", "both", "a_only", "b_only", "a_one", "b_one"]))
    batch = draw(st.sampled_from([1, 2, 3, 17])) if form != "2d" else None
    return {
        "kind": kind,
        "m": m,
        "n": n,
        "k": k,
        "form": form,
        "batch": batch,
        "ta": draw(st.booleans()),
        "tb": draw(st.booleans()),
        "tc": draw(st.booleans()),
        "alpha": draw(st.sampled_from([1.0, -1.0, 0.5, 3.0, 0.0])),
        "beta": draw(st.sampled_from([0.0, 0.0, 1.0, -1.0, 0.5])),
        "bias": draw(st.sampled_from([None, "row", "column"])),
        "bias_f32": draw(st.booleans()),
        "activation": draw(st.sampled_from([None, "relu", "gelu", "gelu_tanh"])),
        "pads": [draw(st.integers(0, 3)) for _ in range(3)],
    }


def _shapes(case):
    m, n, k, batch, form = case["m"], case["n"], case["k"], case["batch"], case["form"]
    a_shape, b_shape = (m, k), (k, n)
    if form in ("both", "a_only", "b_one"):
        a_shape = (batch, m, k)
    if form in ("both", "b_only", "a_one"):
        b_shape = (batch, k, n)
    if form == "a_one":
        a_shape = (1, m, k)
    if form == "b_one":
        b_shape = (1, k, n)
    out_shape = np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (m, n)
    return a_shape, b_shape, out_shape


def run_case(case, expect_plan=None):
    """One case of gemm_cases; expect_plan, if given, is called with the plan gm.matmul_plan shows for the
    operands (and asserts what it must be) before the product runs."""
    dtype, precision = DTYPES[case["kind"]]
    a_shape, b_shape, out_shape = _shapes(case)
    a_host, b_host = host_random(a_shape, dtype), host_random(b_shape, dtype)
    out_dtype = dtype
    c0 = host_random(out_shape, out_dtype)
    keep = []
    try:
        a, pa, _, _ = upload(a_host, case["ta"], case["pads"][0])
        b, pb, _, _ = upload(b_host, case["tb"], case["pads"][1])
        keep += [pa, pb]
        # beta == 0: out is never read, so a NaN-filled out must give a NaN-free result
        start = c0 if case["beta"] else np.full(out_shape, np.nan, dtype=out_dtype)
        out, pc, pc_host, cols = upload(start, case["tc"], case["pads"][2])
        keep.append(pc)
        bias = bias_host = None
        if case["bias"]:
            shape = (1, case["n"]) if case["bias"] == "row" else (case["m"], 1)
            bias_dtype = np.float32 if case["bias_f32"] else out_dtype
            bias_host = host_random(shape, bias_dtype)
            bias = gm.Matrix.from_numpy(bias_host)
            keep.append(bias)
        if expect_plan is not None:
            expect_plan(gm.matmul_plan(a, b, out=out, precision=precision))
        result = gm.matmul(
            a,
            b,
            out=out,
            precision=precision,
            alpha=case["alpha"],
            beta=case["beta"],
            bias=bias,
            activation=case["activation"],
        )
        assert result is out
        got = out.to_numpy()
        ref, scale = epilogue_reference(
            a_host,
            b_host,
            case["alpha"],
            case["beta"],
            wide(c0),
            None if bias_host is None else wide(bias_host),
            case["activation"],
        )
        check_close(got, ref, scale, tolerance(case["kind"], case["k"]), str(case))
        # nothing outside out's view was written
        after, before = pc.to_numpy(), pc_host
        outside = np.ones(before.shape[-1], bool)
        outside[cols] = False
        kept = [np.ascontiguousarray(x[..., outside]).view(np.uint8) for x in (after, before)]
        assert np.array_equal(*kept), "out's parent changed outside the view"
        return got
    finally:
        for x in keep:
            x.free()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gemm_cases())
def test_gemm_against_a_float64_epilogue_reference(case):
    run_case(case)


@pytest.mark.parametrize("kind", ["float16", "bfloat16"])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("m", [127, 130])
def test_halves_read_a_transposed_in_place_on_hopper_where_aligned(kind, tb, m):
    """A.T @ B and A.T @ B.T in the halves, with an epilogue and with split-K, through the interface:
    upload() stores A.T as K rows of m + 1 elements, 256 bytes for m = 127 (16-byte aligned: on sm_90
    auto's plan reads it in place with a row that reads A transposed) and 262 bytes for m = 130 (copied
    first: as it lies for a row that reads A transposed, which the planner takes at these sizes, or
    transposed for one that reads it row-major); B's rows are 192 or 256 bytes (n = 95, k = 127: aligned),
    copied only into the layout a row reads. Elsewhere only the results are checked."""
    case = {
        "kind": kind,
        "m": m,
        "n": 95,
        "k": 127,
        "form": "2d",
        "batch": None,
        "ta": True,
        "tb": tb,
        "tc": False,
        "alpha": -1.5,
        "beta": 0.5,
        "bias": "row",
        "bias_f32": True,
        "activation": "gelu",
        "pads": [0, 0, 0],
    }
    hopper = engine.unavailable(VARIANTS["wgmma128x128at"], Target.of(gm.device())) is None

    def expect(plan):
        if not hopper:
            return
        aligned = m == 127
        assert plan.copy_a != aligned and (plan.variant.reads_a_trans or not aligned), plan
        assert plan.copy_b == (tb != plan.variant.reads_b_trans), plan

    run_case(case, expect)
    # split-K: the reduction applies the epilogue
    a_host, b_host = host_random((8192, 64), DTYPES[kind][0]), host_random((8192, 48), DTYPES[kind][0])
    with gm.Matrix.from_numpy(a_host) as a, gm.Matrix.from_numpy(b_host) as b:
        p = gm.matmul_plan(a.T, b)
        forced = gm.matmul_plan(a.T, b, algorithm=p.algorithm, splits=4)
        assert forced.splits == 4 and (not hopper or (forced.variant.reads_a_trans and not forced.copy_a)), forced
        with gm.matmul(a.T, b, plan=forced, alpha=2.0, activation="relu") as c:
            ref, scale = epilogue_reference(a_host.T, b_host, 2.0, 0.0, None, None, "relu")
            check_close(c.to_numpy(), ref, scale, tolerance(kind, 8192))


@pytest.mark.parametrize("kind", list(DTYPES))
@pytest.mark.parametrize("batch, size", [(1000, 8), (2, 300), (65536 + 3, 2)])
def test_large_and_odd_batches(kind, batch, size):
    dtype, precision = DTYPES[kind]
    a_host, b_host = host_random((batch, size, size + 1), dtype), host_random((batch, size + 1, size), dtype)
    with gm.Matrix.from_numpy(a_host) as a, gm.Matrix.from_numpy(b_host) as b:
        with gm.matmul(a, b, precision=precision) as c:
            assert c.shape == (batch, size, size)
            ref, scale = epilogue_reference(a_host, b_host, 1.0, 0.0, None, None, None)
            check_close(c.to_numpy(), ref, scale, tolerance(kind, size + 1))


@pytest.mark.parametrize("kind", ["float32", "tf32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("shared", ["none", "b"])
def test_batched_results_equal_the_same_kernels_2d_products_bit_for_bit(kind, shared):
    dtype, precision = DTYPES[kind]
    batch, m, n, k = 5, 70, 90, 130
    a_host = host_random((batch, m, k), dtype)
    b_host = host_random((k, n) if shared == "b" else (batch, k, n), dtype)
    with gm.Matrix.from_numpy(a_host) as a, gm.Matrix.from_numpy(b_host) as b:
        p = gm.matmul_plan(a, b, precision=precision, splits=1)  # a shared b folds into one product: no split
        with gm.matmul(a, b, plan=p) as c:
            got = c.to_numpy()
        for i in range(batch):
            bi = b if shared == "b" else b[i]
            one = gm.matmul_plan(a[i], bi, algorithm=p.algorithm, splits=1)
            with gm.matmul(a[i], bi, plan=one) as ci:
                assert np.array_equal(ci.to_numpy().view(np.uint8), got[i].view(np.uint8)), (p.algorithm, i)


@pytest.mark.parametrize("kind", list(DTYPES))
def test_every_new_path_is_deterministic(kind):
    dtype, precision = DTYPES[kind]
    a_host, b_host = host_random((3, 200, 300), dtype), host_random((3, 200, 150), dtype)
    bias = gm.Matrix.from_numpy(host_random((1, 150), np.float32))
    c_host = host_random((3, 300, 150), dtype)
    with gm.Matrix.from_numpy(a_host) as a, gm.Matrix.from_numpy(b_host) as b:
        results = []
        for _ in range(2):
            c = gm.Matrix.from_numpy(c_host)
            gm.matmul(a.T, b, out=c, precision=precision, alpha=0.5, beta=-1.0, bias=bias, activation="gelu")
            results.append(c.to_numpy())
            c.free()
        assert np.array_equal(results[0].view(np.uint8), results[1].view(np.uint8))
    bias.free()


@pytest.mark.parametrize("kind", ["float32", "float16", "bfloat16", "float64"])
def test_epilogue_with_split_k_runs_in_the_reduction(kind):
    dtype, _ = DTYPES[kind]
    a_host, b_host = host_random((64, 8192), dtype), host_random((8192, 48), dtype)
    bias_host = host_random((64, 1), np.float32)
    c_host = host_random((64, 48), dtype)
    with gm.Matrix.from_numpy(a_host) as a, gm.Matrix.from_numpy(b_host) as b, gm.Matrix.from_numpy(bias_host) as bias:
        p = gm.matmul_plan(a, b)
        forced = gm.matmul_plan(a, b, algorithm=p.algorithm, splits=4)
        assert forced.splits == 4
        with gm.Matrix.from_numpy(c_host) as c:
            gm.matmul(a, b, out=c, plan=forced, alpha=2.0, beta=0.5, bias=bias, activation="relu")
            ref, scale = epilogue_reference(a_host, b_host, 2.0, 0.5, wide(c_host), wide(bias_host), "relu")
            check_close(c.to_numpy(), ref, scale, tolerance(kind, 8192))


@pytest.mark.parametrize("kind", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("n", [48, 37])  # whole groups of outputs, and groups that straddle rows
@pytest.mark.parametrize("splits", [16, 24, 37, 128])
def test_split_k_in_runs_matches_the_reference_and_is_deterministic(kind, n, splits):
    # a small plane with many splits: the reduction adds 8 runs of splits apart (block (32, 8, 1)),
    # including runs of unequal length (37) and a tail of a block's 32 groups that is not whole
    dtype, _ = DTYPES[kind]
    m = 29
    # auto's GEMM row for this dtype (C is 29 x n: no matrix-vector row); a small float32 product runs on the
    # 16 x 16 tiles of one output a thread, which do not split K: then the row auto takes at a long K
    for depth in (64, 4096):
        with gm.Matrix.empty((m, depth), dtype=dtype) as a0, gm.Matrix.empty((depth, n), dtype=dtype) as b0:
            v = gm.matmul_plan(a0, b0).variant
        if v.splits_k:
            break
    assert v.splits_k
    k_chunk = -(-max(64, v.min_k_chunk) // v.k_align) * v.k_align
    k = k_chunk * (splits - 1) + 5  # the last split has 5 of K
    a_host, b_host = host_random((m, k), dtype), host_random((k, n), dtype)
    bias_host = host_random((1, n), np.float32)
    c_host = host_random((m, n), dtype)
    with gm.Matrix.from_numpy(a_host) as a, gm.Matrix.from_numpy(b_host) as b, gm.Matrix.from_numpy(bias_host) as bias:
        forced = gm.matmul_plan(a, b, algorithm=v.name, splits=splits, k_chunk=k_chunk)
        assert forced.splits == splits and forced.reduce_block == (32, 8, 1)
        got = []
        for _ in range(2):
            with gm.Matrix.from_numpy(c_host) as c:
                gm.matmul(a, b, out=c, plan=forced, alpha=-1.5, beta=0.5, bias=bias, activation="gelu")
                got.append(c.to_numpy())
        assert np.array_equal(got[0].view(np.uint8), got[1].view(np.uint8))
        ref, scale = epilogue_reference(a_host, b_host, -1.5, 0.5, wide(c_host), wide(bias_host), "gelu")
        check_close(got[0], ref, scale, tolerance(kind, k))


@pytest.mark.parametrize("algorithm", ["naive", "tiled16", "tiled32", "tiled16x64"])
def test_teaching_kernels_batch_and_take_the_epilogue(algorithm):
    a_host, b_host = host_random((3, 40, 50), np.float32), host_random((3, 50, 30), np.float32)
    bias_host = host_random((1, 30), np.float32)
    with gm.Matrix.from_numpy(a_host) as a, gm.Matrix.from_numpy(b_host) as b, gm.Matrix.from_numpy(bias_host) as bias:
        with gm.matmul(a, b, algorithm=algorithm, alpha=-1.5, bias=bias, activation="gelu_tanh") as c:
            ref, scale = epilogue_reference(a_host, b_host, -1.5, 0.0, None, wide(bias_host), "gelu_tanh")
            check_close(c.to_numpy(), ref, scale, tolerance("float32", 50))


def test_k_zero_with_an_epilogue():
    with (
        gm.Matrix.from_numpy(np.zeros((3, 4, 0), np.float32)) as a,
        gm.Matrix.from_numpy(np.zeros((0, 5), np.float32)) as b,
    ):
        c_host = host_random((3, 4, 5), np.float32)
        bias_host = host_random((4, 1), np.float32)
        with gm.Matrix.from_numpy(c_host) as c, gm.Matrix.from_numpy(bias_host) as bias:
            gm.matmul(a, b, out=c, beta=2.0, bias=bias, activation="relu")
            np.testing.assert_allclose(c.to_numpy(), np.maximum(2 * c_host + bias_host, 0), rtol=1e-6)
        with gm.matmul(a, b) as z:
            assert z.shape == (3, 4, 5) and not z.to_numpy().any()


def test_relu_keeps_nan_and_gelu_matches_its_formula_at_known_points():
    a_host = np.array([[np.nan, -2.0, 0.0, 1.0, 3.0]], np.float32).T  # 5 x 1
    with gm.Matrix.from_numpy(a_host) as a, gm.Matrix.from_numpy(np.ones((1, 1), np.float32)) as one:
        with gm.matmul(a, one, activation="relu") as r:
            got = r.to_numpy()[:, 0]
            assert np.isnan(got[0]) and list(got[1:]) == [0.0, 0.0, 1.0, 3.0]
        with gm.matmul(a[1:], one, activation="gelu") as g:
            expect = [0.5 * x * (1 + math.erf(x / math.sqrt(2))) for x in (-2.0, 0.0, 1.0, 3.0)]
            np.testing.assert_allclose(g.to_numpy()[:, 0], expect, rtol=1e-6, atol=1e-7)


# --- views and operations on batches and transposed views ---------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, BFLOAT16])
def test_batch_and_transposed_round_trips_and_operations(dtype):
    host = host_random((4, 5, 7), dtype)
    with gm.Matrix.from_numpy(host) as x:
        assert x.shape == (4, 5, 7) and x.is_contiguous
        assert np.array_equal(x.to_numpy(), host)
        assert np.array_equal(x[2].to_numpy(), host[2])
        assert np.array_equal(x[1:3, 1:4, 2:6].to_numpy(), host[1:3, 1:4, 2:6])
        t = x.T
        assert np.array_equal(t.to_numpy(), np.swapaxes(host, 1, 2))
        assert np.array_equal(t[1:3].to_numpy(), np.swapaxes(host, 1, 2)[1:3])
        for y in (x[1:3, 1:4, 2:6], t, t[0]):
            with y.copy() as c:
                assert np.array_equal(c.to_numpy(), y.to_numpy()) and c.is_transposed == y.is_transposed
            with y.astype(np.float32) as f:
                assert np.array_equal(f.to_numpy(), y.to_numpy().astype(np.float32))
            with gm.transpose(y) as tr:
                assert not tr.is_transposed and np.array_equal(tr.to_numpy(), np.swapaxes(y.to_numpy(), -1, -2))
        with gm.Matrix.zeros((3, 2, 5), dtype=dtype) as z:
            assert z.shape == (3, 2, 5) and not z.to_numpy().astype(np.float32).any()
    with pytest.raises(ValueError, match="takes 2-D matrices"):
        gm.dot(gm.Matrix.empty((2, 2, 2)), gm.Matrix.empty((2, 2, 2)))


def test_dot_and_spmm_read_transposed_views():
    from scipy import sparse

    host = host_random((30, 20), np.float32)
    other = host_random((20, 30), np.float32)
    with gm.Matrix.from_numpy(host) as x, gm.Matrix.from_numpy(other) as y:
        assert math.isclose(gm.dot(x.T, y), float(np.sum(host.T.astype(np.float64) * other)), rel_tol=1e-9)
        assert math.isclose(gm.dot(x.T, x.T.T.T), float(np.sum(host.astype(np.float64) ** 2)), rel_tol=1e-9)
        s = sparse.random(7, 30, density=0.3, format="csr", dtype=np.float32, random_state=1)
        with gm.CSRMatrix.from_scipy(s) as S, gm.spmm(S, y.T) as c:
            np.testing.assert_allclose(c.to_numpy(), s @ other.T, rtol=1e-5, atol=1e-6)


def test_torch_batched_and_column_major_arrays_cross_without_a_copy():
    torch = pytest.importorskip("torch")
    w = torch.rand(64, 48, device="cuda")
    wt = gm.from_dlpack(w.t())  # PyTorch's w.t(): column-major, a transposed view of the same memory
    assert wt.is_transposed and wt.shape == (48, 64) and wt.elements == w.data_ptr() and wt.is_borrowed
    x = torch.rand(5, 32, 48, device="cuda")
    xb = gm.from_dlpack(x)
    assert xb.shape == (5, 32, 48) and xb.elements == x.data_ptr()
    y = gm.matmul(xb, wt)
    expect = torch.matmul(x.double(), w.t().double()).cpu().numpy()
    np.testing.assert_allclose(y.to_numpy(), expect, rtol=1e-5, atol=1e-5)
    back = torch.from_dlpack(y)
    assert back.shape == (5, 32, 64) and back.data_ptr() == y.elements
    tv = torch.from_dlpack(wt)  # a transposed view goes back with its strides
    assert tv.stride() == (1, 48) and torch.equal(tv, w.t())
    cupy = pytest.importorskip("cupy")
    f = cupy.asfortranarray(cupy.random.rand(30, 20, dtype=cupy.float32))
    fm = gm.from_dlpack(f)
    assert fm.is_transposed and np.array_equal(fm.to_numpy(), cupy.asnumpy(f))
    cai = cupy.asarray(xb[1:3].T)
    assert cai.shape == (2, 48, 32) and np.array_equal(cupy.asnumpy(cai), x[1:3].transpose(1, 2).cpu().numpy())
    for m in (wt, xb, y, fm):
        m.free()


@pytest.mark.skipif(ML_BFLOAT16 is None, reason="needs ml_dtypes")
def test_bfloat16_batch_round_trip():
    host = host_random((3, 4, 5), BFLOAT16)
    with gm.Matrix.from_numpy(host) as x:
        assert np.array_equal(x.T.to_numpy(), np.swapaxes(host, 1, 2))


def test_bad_input_leaves_the_library_working():
    a = gm.Matrix.from_numpy(host_random((2, 3, 4), np.float32))
    b = gm.Matrix.from_numpy(host_random((3, 4, 5), np.float32))
    for call in (
        lambda: gm.matmul(a, b),
        lambda: gm.matmul(a, b[0], activation="swish"),
        lambda: gm.matmul(a, b[0], beta=1.0),
        lambda: gm.matmul(a, b[0], alpha="2"),
        lambda: gm.matmul(a, b[0], bias=gm.Matrix.zeros(1, 4)),
    ):
        with pytest.raises((ValueError, TypeError)):
            call()
    with gm.matmul(a, b[0]) as c:
        ref, scale = epilogue_reference(a.to_numpy(), b[0].to_numpy(), 1.0, 0.0, None, None, None)
        check_close(c.to_numpy(), ref, scale, tolerance("float32", 4))
    a.free()
    b.free()


def test_empty_matrices_and_read_only_imports_cross_to_cupy():
    """An empty matrix exports to CuPy (a null address used to be refused there; issue 24 item 12), and
    memory its producer marks read-only (CAI's data[1], DLPack's READ_ONLY flag) is never written (item 5)."""
    cupy = pytest.importorskip("cupy")
    with gm.Matrix.empty(0, 5) as e:
        assert cupy.asarray(e).shape == (0, 5)
    x = cupy.ones((8, 8), dtype=cupy.float32)

    class ReadOnly:
        __cuda_array_interface__ = dict(x.__cuda_array_interface__, data=(x.data.ptr, True))

    m = gm.Matrix.from_cuda_array(ReadOnly())
    assert m.__cuda_array_interface__["data"][1] is True
    with gm.Matrix.from_numpy(np.ones((8, 8), np.float32)) as a:
        with pytest.raises(ValueError, match="read-only"):
            gm.matmul(a, a, out=m)
        with pytest.raises(ValueError, match="read-only"):
            gm.transpose(a, out=m)
        with gm.matmul(a, m) as c:  # reading it is fine
            assert np.array_equal(c.to_numpy(), np.full((8, 8), 8, np.float32))
    m.free()


def test_products_queued_back_to_back_each_read_the_result_before_them():
    """On sm_90 each product is a programmatic dependent of the launch before it on its stream: it waits
    for that grid in the kernel, not at its launch. A chain on one stream with no synchronisation until the
    end, each product reading the result before it (every product's C NaN until written): 16-bit tiles,
    plain and with A a transposed view, a conversion (a plain launch) between, float32 tiles, a few-row
    float32 product, float64 tiles, a batch of tiny float64 products sharing the result before as A. Each
    step matches its float64 product over the step before's result, downloaded after the whole chain."""
    g = np.random.default_rng(11)
    host = lambda *shape, dtype=np.float32: g.uniform(-1, 1, shape).astype(dtype)  # noqa: E731
    nan = lambda *shape, dtype=np.float32: gm.Matrix.from_numpy(np.full(shape, np.nan, dtype))  # noqa: E731
    w = {
        "w1": host(512, 512, dtype=np.float16),
        "w2": host(512, 384, dtype=np.float16),
        "w4": host(384, 64),
        "w5": host(512, 4096),
        "w7": host(64, 64, dtype=np.float64),
        "w8": host(4096, 16, 16, dtype=np.float64),
    }
    x0 = host(512, 512, dtype=np.float16)
    gw = {name: gm.Matrix.from_numpy(a) for name, a in w.items()}
    out = {
        "x1": nan(512, 512, dtype=np.float16),
        "x2": nan(512, 384, dtype=np.float16),
        "x4": nan(512, 64),
        "x5": nan(64, 4096),
        "x7": nan(64, 64, dtype=np.float64),
        "x8": nan(4096, 16, 16, dtype=np.float64),
    }
    gx0 = gm.Matrix.from_numpy(x0)
    gm.synchronize()
    s = gm.Stream()
    gm.matmul(gx0, gw["w1"], out=out["x1"], stream=s)
    gm.matmul(out["x1"].T, gw["w2"], out=out["x2"], stream=s)
    x3 = out["x2"].astype(np.float32, stream=s)
    gm.matmul(x3, gw["w4"], out=out["x4"], stream=s)
    gm.matmul(out["x4"].T, gw["w5"], out=out["x5"], stream=s)  # 64 rows against K = 512: few rows
    x6 = out["x5"][:, :64].astype(np.float64, stream=s)
    gm.matmul(x6, gw["w7"], out=out["x7"], stream=s)
    gm.matmul(out["x7"][:16, :16], gw["w8"], out=out["x8"], stream=s)  # a 2-D A shared by the batch
    s.synchronize()
    got = {name: wide(m) for name, m in out.items()}
    steps = [
        ("x1", x0, w["w1"], "float16", 512),
        ("x2", got["x1"].T, w["w2"], "float16", 512),
        ("x4", got["x2"], w["w4"], "float32", 384),
        ("x5", got["x4"].T, w["w5"], "float32", 512),
        ("x7", got["x5"][:, :64], w["w7"], "float64", 64),
        ("x8", got["x7"][:16, :16], w["w8"], "float64", 16),
    ]
    for name, left, right, kind, k in steps:
        ref, scale = epilogue_reference(left, right, 1.0, 0.0, None, None, None)
        assert np.isfinite(got[name]).all(), name  # every element written, after its inputs were
        err = float(np.max(np.abs(got[name] - ref) / np.maximum(scale, 2.0**-14)))
        assert err <= tolerance(kind, k), (name, err)
