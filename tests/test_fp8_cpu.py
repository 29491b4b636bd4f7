"""FP8 matrices (ml_dtypes' float8_e4m3fn and float8_e5m2) without a GPU: the storage tier, the host's
rounding into FP8 (saturated to the finite range, then once to nearest even) against a brute-force
reference over every FP8 value, the gate that keeps FP8 out of the operations that compute in the four
floats, and the interop exports FP8 has no code for yet. On the GPU: tests/test_fp8_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest
from support import fake_matrix

import gpumat as gm
from gpumat import _dtypes, _interop
from gpumat.convert import CONVERT_KERNELS

ml_dtypes = pytest.importorskip("ml_dtypes")
FP8 = {"e4m3": np.dtype(ml_dtypes.float8_e4m3fn), "e5m2": np.dtype(ml_dtypes.float8_e5m2)}
rng = np.random.default_rng(8)


def nearest_even(x: np.ndarray, sfx: str) -> np.ndarray:
    """x saturated to the finite range, then rounded to the nearest FP8 value, ties to the even code: by
    search over all 256 codes (the reference the host's and the GPU's conversions must agree with)."""
    codes = np.arange(256, dtype=np.uint8)
    values = codes.view(FP8[sfx]).astype(np.float64)
    finite = np.isfinite(values)
    codes, values = codes[finite], values[finite]
    top = _dtypes.FP8_MAX[sfx]
    out = np.empty(x.shape, dtype=np.uint8)
    for i, v in enumerate(x.ravel()):
        if np.isnan(v):
            out.ravel()[i] = np.array([np.nan]).astype(FP8[sfx]).view(np.uint8)[0]
            continue
        v = min(max(v, -top), top)
        gap = np.abs(values - v)
        best = np.flatnonzero(gap == gap.min())
        # ties: the even code; a result of zero keeps v's sign (+0 and -0 are both in the table)
        pick = [c for c in best if codes[c] % 2 == 0] or list(best)
        if values[pick[0]] == 0:
            pick = [c for c in best if values[c] == 0 and np.signbit(values[c]) == np.signbit(v)]
        out.ravel()[i] = codes[pick[0]]
    return out


@pytest.mark.parametrize("sfx", ["e4m3", "e5m2"])
def test_the_host_rounds_into_fp8_saturated_and_to_nearest_even(sfx):
    top = _dtypes.FP8_MAX[sfx]
    values = np.unique(np.abs(np.arange(256, dtype=np.uint8).view(FP8[sfx]).astype(np.float64)))
    values = values[np.isfinite(values)]
    mids = (values[1:] + values[:-1]) / 2  # the ties
    x = np.concatenate(
        [
            mids,
            -mids,
            np.nextafter(mids, 0),
            np.nextafter(mids, np.inf),
            [0.0, -0.0, top, -top, top * 1.04, top * 1.1, 1e30, -1e30, np.inf, -np.inf, np.nan],
            rng.standard_normal(400) * 2.0 ** rng.integers(-12, 16, 400),
        ]
    )
    got = _dtypes.to_host_array(x, FP8[sfx]).view(np.uint8)
    np.testing.assert_array_equal(got, nearest_even(x, sfx))


def test_fp8_is_a_storage_dtype_that_nothing_computes_in_yet():
    for sfx, dt in FP8.items():
        for spelling in (dt, dt.name, dt.type):
            assert _dtypes.as_storage_dtype(spelling) == dt
        assert _dtypes.suffix(dt) == sfx and _dtypes.MOVE_SUFFIX[sfx] == "s8" and _dtypes.ITEMSIZE[sfx] == 1
        with pytest.raises(TypeError):
            _dtypes.as_dtype(dt)
        # from_numpy keeps an FP8 array and rounds others into FP8 when asked
        assert _dtypes.host_dtype_for(np.zeros(3, dt), storage=True) == dt
        assert _dtypes.host_dtype_for(np.zeros(3), dt, storage=True) == dt
        x = fake_matrix(4, 4, dtype=dt)
        with pytest.raises(TypeError, match="dot computes in float32"):
            gm.dot(x, x)
        with pytest.raises(TypeError, match="matmul computes in float32"):
            gm.matmul(x, x)
        with pytest.raises(TypeError, match="DLPack"):
            _interop.dlpack_dtype(dt)
        with pytest.raises(TypeError, match="no code for"):
            _interop.typestr(dt)
        for other in _dtypes.SUFFIXES:  # astype both ways with the four floats
            assert (other, sfx) in CONVERT_KERNELS and (sfx, other) in CONVERT_KERNELS
