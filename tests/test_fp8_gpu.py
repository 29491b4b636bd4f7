"""FP8 matrices on the GPU: their bits round-trip, move (views, copies, transposes) as int8's do, and
astype converts them both ways with the four floats exactly as the host's rule does (into FP8 saturated
and rounded once to nearest even; out of FP8 exact)."""

from __future__ import annotations

import numpy as np
import pytest

import gpumat as gm
from gpumat import _dtypes

pytestmark = pytest.mark.gpu
ml_dtypes = pytest.importorskip("ml_dtypes")
FP8 = {"e4m3": np.dtype(ml_dtypes.float8_e4m3fn), "e5m2": np.dtype(ml_dtypes.float8_e5m2)}
rng = np.random.default_rng(9)


@pytest.mark.parametrize("sfx", list(FP8))
@pytest.mark.parametrize("shape", [(1, 1), (37, 300), (3, 65, 129)])
def test_fp8_bits_round_trip_and_move(sfx, shape):
    bits = rng.integers(0, 256, size=shape, dtype=np.uint8)
    host = bits.view(FP8[sfx])
    m = gm.Matrix.from_numpy(host)
    assert m.dtype == FP8[sfx]
    np.testing.assert_array_equal(m.to_numpy().view(np.uint8), bits)
    np.testing.assert_array_equal(m.copy().to_numpy().view(np.uint8), bits)
    if len(shape) == 2 and min(shape) > 2:
        np.testing.assert_array_equal(gm.transpose(m).to_numpy().view(np.uint8), bits.T)
        np.testing.assert_array_equal(m[1:, 2:].T.to_numpy().view(np.uint8), bits[1:, 2:].T)


@pytest.mark.parametrize("sfx", list(FP8))
@pytest.mark.parametrize("other", ["float32", "float64", "float16", "bfloat16"])
def test_astype_into_and_out_of_fp8_is_the_hosts_rule(sfx, other):
    top = _dtypes.FP8_MAX[sfx]
    x = rng.standard_normal((41, 257)) * 2.0 ** rng.integers(-14, 17, (41, 257))
    x.reshape(-1)[:8] = [top * 1.1, -top * 1.1, np.inf, -np.inf, np.nan, 0.0, -0.0, top]
    with np.errstate(over="ignore"):  # beyond float16's range: Inf, as numpy casts it
        src = gm.Matrix.from_numpy(x, dtype=other)
    wide = src.to_numpy().astype(np.float64)  # the values as the source dtype holds them
    into = src.astype(FP8[sfx]).to_numpy()
    host = _dtypes.to_host_array(wide, FP8[sfx])
    # the same codes, but a NaN's (FP8 has several NaN codes; the GPU's conversion writes its own): NaN where
    # the host has NaN, and elsewhere the very code
    nan = np.isnan(host.astype(np.float64))
    np.testing.assert_array_equal(np.isnan(into.astype(np.float64)), nan)
    np.testing.assert_array_equal(into.view(np.uint8)[~nan], host.view(np.uint8)[~nan])
    back = gm.Matrix.from_numpy(into).astype(other).to_numpy().astype(np.float64)
    with np.errstate(over="ignore"):
        want = np.asarray(_dtypes.to_host_array(into.astype(np.float64), _dtypes.as_dtype(other))).astype(np.float64)
    # the same values and signs (a NaN is a NaN: its payload bits are the conversion's own)
    np.testing.assert_array_equal(back, want)
    np.testing.assert_array_equal(np.signbit(back[~np.isnan(want)]), np.signbit(want[~np.isnan(want)]))


@pytest.mark.parametrize("sfx", list(FP8))
def test_torch_exchanges_fp8_matrices_through_dlpack_without_copies(sfx):
    """DLPack 1.1's FP8 codes both ways with PyTorch's float8_e4m3fn / float8_e5m2 tensors (the same
    memory, the same bits)."""
    torch = pytest.importorskip("torch")
    bits = rng.integers(0, 256, size=(33, 17), dtype=np.uint8)
    t = torch.from_numpy(bits).cuda().view({"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[sfx])
    m = gm.from_dlpack(t)
    assert m.dtype == FP8[sfx] and m.elements == t.data_ptr()
    np.testing.assert_array_equal(m.to_numpy().view(np.uint8), bits)
    back = torch.from_dlpack(m)
    assert back.dtype == t.dtype and back.data_ptr() == m.elements
    np.testing.assert_array_equal(back.view(torch.uint8).cpu().numpy(), bits)
    torch.cuda.synchronize()


@pytest.mark.parametrize(("src", "dst"), [("e4m3", "e5m2"), ("e5m2", "e4m3")])
def test_one_fp8_format_converts_into_the_other_rounded_once(src, dst):
    """Exactly into float32 and rounded once out of it (saturated: e5m2's range is wider than e4m3's)."""
    bits = rng.integers(0, 256, size=(33, 70), dtype=np.uint8)
    values = bits.view(FP8[src]).astype(np.float64)
    got = gm.Matrix.from_numpy(bits.view(FP8[src])).astype(FP8[dst]).to_numpy()
    want = _dtypes.to_host_array(values, FP8[dst])
    nan = np.isnan(values)
    np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), nan)
    np.testing.assert_array_equal(got.view(np.uint8)[~nan], want.view(np.uint8)[~nan])
    with pytest.raises(TypeError, match="FP8 comes from the four floats"):
        gm.Matrix.zeros(3, 4, dtype=np.int8).astype(FP8[dst])
