"""Every operation in every dtype through the Matrix API: float32, float64, float16, bfloat16."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import FAKE_DEVICE, dims, fake_matrix, poisoned, product_error, record_launches

import gpumat as gm
from gpumat import _dtypes
from gpumat.convert import copy_region
from gpumat.matmul.engine import VARIANTS, Target, algorithms, stream_fits, unavailable

gpu = pytest.mark.gpu
ml_dtypes = pytest.importorskip("ml_dtypes")  # the host side of bfloat16 (installed on the GPU machine)
BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16]
IDS = ["f32", "f64", "f16", "bf16"]
EPS = {"f32": 2.0**-24, "f64": 2.0**-53, "f16": 2.0**-11, "bf16": 2.0**-8}  # unit roundoff
rng = np.random.default_rng()


def data(shape, dtype, low=-1.0, high=1.0) -> np.ndarray:
    return rng.uniform(low, high, size=shape).astype(dtype)


def exact(x) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


# -------------------------------------------------------------------------------------------------
# CPU: mixed dtypes are refused before anything runs
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("other", ["float64", "float16", "bfloat16"])
def test_mixed_dtypes_are_type_errors_naming_both(other):
    a = fake_matrix(4, 4)
    b = fake_matrix(4, 4, ptr=0x7F8000000000, dtype=other)
    name = _dtypes.name(_dtypes.as_dtype(other))
    for call in (
        lambda: gm.matmul(a, b),
        lambda: gm.dot(a, b),
        lambda: gm.transpose(a, out=fake_matrix(4, 4, ptr=0x7F9000000000, dtype=other)),
    ):
        with pytest.raises(TypeError, match=f"float32.*{name}"):
            call()


@pytest.mark.parametrize(
    "spelling", [ml_dtypes.bfloat16, BF16, "bfloat16", "bf16"], ids=["type", "dtype", "name", "bf16"]
)
def test_every_spelling_of_bfloat16_is_taken(spelling):
    """ml_dtypes.bfloat16 itself (the scalar type, given as np.float16 is) was refused where a Matrix's dtype
    is read (`as_storage_dtype`: from_numpy, empty, astype); asked twice, the second answer is the cached one."""
    for _ in range(2):
        assert _dtypes.as_dtype(spelling) == BF16
        assert _dtypes.as_storage_dtype(spelling) == BF16
    assert fake_matrix(2, 3, dtype=spelling).dtype == BF16


@pytest.mark.parametrize("convert", [_dtypes.as_dtype, _dtypes.as_storage_dtype], ids=["computed", "stored"])
def test_the_tagged_bfloat16_stand_in_never_answers_for_a_plain_uint16(convert):
    """The stand-in used without ml_dtypes is a uint16 dtype tagged by metadata, which numpy ignores when it
    compares and hashes dtypes: had the dtype caches kept it as a key, every later uint16 would have been
    taken as bfloat16."""
    tagged = np.dtype(np.uint16, metadata={"gpumat": "bfloat16"})
    assert convert(tagged) == _dtypes.bfloat16()
    for plain in (np.dtype(np.uint16), np.uint16, "uint16"):
        with pytest.raises(TypeError, match="uint16"):
            convert(plain)


def test_matmul_out_dtype_rules():
    a, b = fake_matrix(4, 4, dtype="float16"), fake_matrix(4, 4, ptr=0x7F8000000000, dtype="float16")
    with pytest.raises(TypeError, match="out must be float16 or float32"):
        gm.matmul(a, b, out=fake_matrix(4, 4, ptr=0x7F9000000000, dtype="float64"))
    with pytest.raises(TypeError, match="teaching kernels"):
        gm.matmul(a, b, out=fake_matrix(4, 4, ptr=0x7F9000000000), algorithm="tiled16")
    with pytest.raises(ValueError, match="precision"):
        gm.matmul(a, b, precision="tf32")
    with pytest.raises(ValueError, match="unknown matmul algorithm"):
        gm.matmul(a, b, algorithm="sgemm128x128")  # a float32 kernel


# -------------------------------------------------------------------------------------------------
# GPU
# -------------------------------------------------------------------------------------------------
def test_the_2d_copy_moves_16_bytes_of_elements_a_thread(monkeypatch):
    """copy_region's grid: 32 threads along a row, each moving 16 bytes of elements, at least four (1-byte
    elements 512 columns a block, 2-byte ones 256, 4- and 8-byte ones 128), 8 rows a block, the batch on z."""
    launched = record_launches(monkeypatch, [])
    for sfx in ("s8", "f16", "bf16", "f32", "s32", "f64"):
        copy_region(0x7F0000000002, 0x7F0000100000, 100, 2049, 2049, 2056, sfx, 0, FAKE_DEVICE, 3, 204900, 205600)
    got = [(name, grid) for name, grid, *_ in launched]
    assert got == [
        ("copy_2d_s8", (5, 13, 3)),
        ("copy_2d_f16", (9, 13, 3)),
        ("copy_2d_bf16", (9, 13, 3)),
        ("copy_2d_f32", (17, 13, 3)),
        ("copy_2d_f32", (17, 13, 3)),  # int32 moves as float32
        ("copy_2d_f64", (17, 13, 3)),
    ]


@gpu
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@given(h=dims(90), w=dims(90), pad=st.integers(0, 5))
def test_round_trip_is_bit_exact_views_included(dt, h, w, pad):
    host = data((h, w + pad + 1), dt)
    with gm.Matrix.from_numpy(host) as m:
        assert m.dtype == dt and m.itemsize == dt.itemsize and m.nbytes == h * (w + pad + 1) * dt.itemsize
        assert m.to_numpy().tobytes() == host.tobytes()
        view = m[:, 1 : w + 1]
        assert view.to_numpy().tobytes() == np.ascontiguousarray(host[:, 1 : w + 1]).tobytes()
    with gm.Matrix.zeros(h, w, dtype=dt) as z:
        assert z.dtype == dt and not exact(z.to_numpy()).any()


@gpu
@pytest.mark.parametrize("src", DTYPES, ids=IDS)
@pytest.mark.parametrize("dst", DTYPES, ids=IDS)
def test_astype_rounds_to_nearest_and_keeps_specials(src, dst):
    with np.errstate(over="ignore"):  # values beyond float16's range become Inf: on purpose
        host = data((37, 53), np.float64, -70000, 70000).astype(src)
    host[0, :4] = [np.nan, np.inf, -np.inf, 0.0]
    with gm.Matrix.from_numpy(host) as m, m.astype(dst) as c:
        got = c.to_numpy()
        assert c.dtype == dst
        with np.errstate(over="ignore"):
            ref = host.astype(np.float32).astype(dst) if (src == np.float64 and dst == BF16) else host.astype(dst)
        same = (got.view(np.uint8) == ref.view(np.uint8)).all() or np.array_equal(
            exact(got), exact(ref), equal_nan=True
        )
        if src == np.float64 and dst == BF16:  # numpy's route may round twice; one unit in the last place apart
            with np.errstate(invalid="ignore"):
                close = (exact(got) == exact(ref)) | (np.abs(exact(got) - exact(ref)) <= np.abs(exact(ref)) * 2**-7)
            same = bool((close | (np.isnan(exact(got)) & np.isnan(exact(ref)))).all())
        assert same
        assert np.isnan(exact(got[0, 0])) and exact(got[0, 1]) == np.inf and exact(got[0, 2]) == -np.inf


@gpu
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@given(rows=dims(300), cols=st.one_of(st.integers(1, 70), dims(300)), pad=st.integers(0, 3))
def test_transpose_moves_the_bits_in_every_dtype(dt, rows, cols, pad):
    host = data((rows, cols + pad), dt)
    with gm.Matrix.from_numpy(host) as a:
        view = a[:, pad:]
        with poisoned(cols, rows, dt) as out:
            gm.transpose(view, out=out)
            assert out.to_numpy().tobytes() == np.ascontiguousarray(host[:, pad:].T).tobytes()
        with gm.transpose(view) as t:
            assert t.dtype == dt and t.to_numpy().tobytes() == np.ascontiguousarray(host[:, pad:].T).tobytes()


@gpu
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@given(rows=dims(300), cols=st.one_of(st.integers(1, 70), dims(300)), pad=st.integers(0, 3), spare=st.integers(0, 9))
def test_the_2d_copy_kernel_moves_the_bits_and_nothing_else(dt, rows, cols, pad, spare):
    """copy_region (the matmul launcher's aligning copy) from a view at an odd offset into a region of a
    wider matrix, whose rows may start anywhere: the region gets the source's bits (NaN payloads included),
    the rest keeps its poison."""
    host = data((rows, cols + pad), dt)
    host.view(np.uint8)[: min(host.nbytes, 64)] = 0xFF  # NaNs with payloads, where the region starts
    with gm.Matrix.from_numpy(host) as a, poisoned(rows, cols + spare, dt) as out:
        before = out.to_numpy()
        view = a[:, pad:]
        dev = gm.current_device()
        with dev.lock:
            copy_region(view.elements, out.elements, rows, cols, view.stride, out.stride, view._sfx, 0, dev)
        got = out.to_numpy()
        assert got[:, :cols].tobytes() == np.ascontiguousarray(host[:, pad:]).tobytes()
        assert got[:, cols:].tobytes() == before[:, cols:].tobytes()


@gpu
@pytest.mark.parametrize("dt", [*DTYPES, np.dtype(np.int8)], ids=[*IDS, "s8"])
@given(
    rows=dims(40),
    cols=st.one_of(dims(300), st.integers(1000, 5000)),
    pad=st.integers(0, 16),
    batch=st.integers(1, 3),
    spare=st.integers(0, 2),
)
def test_the_aligning_copy_moves_rows_of_every_alignment(dt, rows, cols, pad, batch, spare):
    """copy_region into rows that start on 16 bytes (the matmul launcher's copy into aligned scratch) from a
    batch of views at every offset from 16 bytes, rows wider than a block's columns included: random bit
    patterns (NaN payloads, every byte value) arrive as they were, and nothing past each row's columns is
    written."""
    per_16 = 16 // dt.itemsize
    ldd = -(-cols // per_16) * per_16 + spare * per_16  # 16-byte rows, maybe with whole 16-byte spares
    width = cols + pad
    host = rng.integers(0, 256, size=batch * rows * width * dt.itemsize, dtype=np.uint8).view(dt)
    host = host.reshape(batch * rows, width)
    with gm.Matrix.from_numpy(host, dtype=dt) as a, poisoned(batch * rows, ldd, dt) as out:
        before = out.to_numpy()
        view = a[:, pad:]
        dev = gm.current_device()
        with dev.lock:
            copy_region(
                view.elements, out.elements, rows, cols, width, ldd, view._sfx, 0, dev, batch, rows * width, rows * ldd
            )
        got = out.to_numpy()
        assert got[:, :cols].tobytes() == np.ascontiguousarray(host[:, pad:]).tobytes()
        assert got[:, cols:].tobytes() == before[:, cols:].tobytes()


@gpu
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@pytest.mark.parametrize(
    "shape", [(1 << 16, 3), (1 << 14, 40), (70000, 64), (5, 1 << 16), (31, 50000), (1, 999), (999, 1)]
)
def test_narrow_transposes(dt, shape):
    host = data(shape, dt)
    with gm.Matrix.from_numpy(host) as a, gm.transpose(a) as t:
        assert t.to_numpy().tobytes() == np.ascontiguousarray(host.T).tobytes()
    for name in ("narrow_cols", "narrow_rows"):
        axis = 1 if name == "narrow_cols" else 0
        if shape[axis] <= 64:
            with gm.Matrix.from_numpy(host) as a, gm.transpose(a, algorithm=name) as t:
                assert t.to_numpy().tobytes() == np.ascontiguousarray(host.T).tobytes(), name


@gpu
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@given(m=dims(150), n=dims(150), k=dims(300))
def test_matmul_in_every_dtype_against_float64(dt, m, n, k):
    a, b = data((m, k), dt), data((k, n), dt)
    sfx = _dtypes.suffix(dt)
    names = algorithms(sfx)
    # fp32 accumulation for the halves, then one rounding into the output type
    tol = {"f32": 1e-5, "f64": 1e-13, "f16": 2 * EPS["f16"] + 1e-5, "bf16": 2 * EPS["bf16"] + 1e-5}[sfx]
    with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
        for name in names:
            if name.startswith("tf32"):
                continue  # the tensor-core modes have their own tests and bounds
            if name != "auto" and not VARIANTS[name].computes_shape(m, n, k):
                # a matrix-vector kernel, for C of another shape; small_stream, for M, N and K up to 32
                with pytest.raises(ValueError, match="only"):
                    gm.matmul(A, B, algorithm=name)
                continue
            if name == "small_stream" and not stream_fits(m, n, k, a.itemsize):
                with pytest.raises(ValueError, match="copy stages hold no"):  # float32 past about 20^3
                    gm.matmul(A, B, algorithm=name)
                continue
            if name != "auto" and unavailable(VARIANTS[name], Target.of(A.device)) is not None:
                with pytest.raises(ValueError, match="sm_"):  # not on this GPU: refused
                    gm.matmul(A, B, algorithm=name)
                continue
            with poisoned(m, n, dt) as C:
                gm.matmul(A, B, out=C, algorithm=name)
                assert product_error(exact(C.to_numpy()), exact(a), exact(b), dt) < tol, name
        if sfx in ("f16", "bf16"):
            with poisoned(m, n, np.float32) as C32:
                gm.matmul(A, B, out=C32)
                assert product_error(C32.to_numpy(), exact(a), exact(b)) < 1e-5


@gpu
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_matmul_is_deterministic_and_takes_views(dt):
    a, b = data((300, 257), dt), data((257, 129), dt)
    with gm.Matrix.from_numpy(np.pad(a, ((1, 0), (3, 2)))) as PA, gm.Matrix.from_numpy(b) as B:
        A = PA[1:, 3:260]
        first = (A @ B).to_numpy()
        assert (A @ B).to_numpy().tobytes() == first.tobytes()
        assert product_error(exact(first), exact(a), exact(b)) < {"f32": 1e-5, "f64": 1e-13}.get(
            _dtypes.suffix(dt), 3 * EPS[_dtypes.suffix(dt)]
        )


@gpu
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
@given(rows=dims(200), cols=dims(200), strided=st.booleans())
def test_dot_accumulates_in_double_in_every_dtype(dt, rows, cols, strided):
    x, y = data((rows, cols + 1), dt), data((rows, cols + 1), dt)
    ref = float((exact(x[:, :cols]) * exact(y[:, :cols])).sum())
    scale = float(np.abs(exact(x[:, :cols]) * exact(y[:, :cols])).sum())
    with gm.Matrix.from_numpy(x) as X, gm.Matrix.from_numpy(y) as Y:
        if strided:
            X, Y = X[:, :cols], Y[:, :cols]
        else:
            X, Y = (
                gm.Matrix.from_numpy(np.ascontiguousarray(x[:, :cols])),
                gm.Matrix.from_numpy(np.ascontiguousarray(y[:, :cols])),
            )
        got = gm.dot(X, Y)
        assert abs(got - ref) <= 1e-12 * scale + 1e-300
        assert gm.dot(X, Y) == got  # the same bits again


@gpu
@given(rows=dims(120), k=dims(120), n=st.integers(1, 70))
def test_spmm_in_float64(rows, k, n):
    dense = data((rows, k), np.float64)
    dense[rng.random((rows, k)) < 0.7] = 0
    b = data((k, n), np.float64)
    with gm.CSRMatrix.from_dense(dense) as S, gm.Matrix.from_numpy(b) as B:
        assert S.dtype == np.float64
        for name in ("auto", "scalar", "vector", "tile8", "tile32", "tile128"):
            with poisoned(rows, n, np.float64) as C:
                gm.spmm(S, B, out=C, algorithm=name)
                assert product_error(C.to_numpy(), dense, b) < 1e-13, name
        with pytest.raises(TypeError, match="float64.*float32"):
            gm.spmm(S, B.astype(np.float32))


@gpu
@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_interop_carries_every_dtype(dt):
    torch = pytest.importorskip("torch")
    tdt = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}[_dtypes.suffix(dt)]
    t = torch.randn(33, 17, device="cuda").to(tdt)
    m = gm.from_dlpack(t)
    assert m.dtype == dt and m.elements == t.data_ptr()
    back = torch.from_dlpack(m)
    assert back.dtype == tdt and back.data_ptr() == t.data_ptr()
    assert (
        m.to_numpy().tobytes()
        == t.cpu()
        .contiguous()
        .view(torch.int16 if dt.itemsize == 2 else (torch.int32 if dt.itemsize == 4 else torch.int64))
        .numpy()
        .tobytes()
    )
    cai = m.__cuda_array_interface__
    assert cai["typestr"] == ("<V2" if dt == BF16 else dt.str)


@gpu
def test_bfloat16_without_ml_dtypes_on_the_host_path(monkeypatch):
    monkeypatch.setattr(_dtypes, "ML_BFLOAT16", None)
    with gm.Matrix.from_numpy(np.array([[1.0, 2.5, -3.0]], np.float32), dtype="bfloat16") as m:
        with pytest.raises(TypeError, match="ml_dtypes"):
            m.to_numpy()
        assert np.array_equal(m.to_numpy(dtype=np.float32), [[1.0, 2.5, -3.0]])
