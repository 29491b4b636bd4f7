"""FP8 matrices (ml_dtypes' float8_e4m3fn and float8_e5m2) without a GPU: the storage tier, the host's
rounding into FP8 (saturated to the finite range, then once to nearest even) against a brute-force
reference over every FP8 value, the gate that keeps FP8 out of the operations that compute in the four
floats (matmul alone computes in FP8), DLPack's FP8 codes (the CUDA array interface has none), and the FP8 product's
checks and plans (the wgmma rows on sm_90, none elsewhere, the naive kernel of C's dtype at K = 0), bound
and launched on a stand-in device. On the GPU: tests/test_fp8_gpu.py, tests/test_matmul_fp8_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest
from support import TARGETS, bound_run, fake_matrix

import gpumat as gm
from gpumat import _dtypes, _interop
from gpumat.convert import CONVERT_KERNELS
from gpumat.matmul.engine import Problem, algorithms, plan, problem_of_call

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


def test_fp8_is_a_storage_dtype_that_only_matmul_computes_in():
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
        # DLPack 1.1's FP8 codes, both ways; the CUDA array interface has none
        assert _interop.dtype_from_dlpack(*_interop.dlpack_dtype(dt), 1) == dt
        assert _interop.dlpack_dtype(dt) == ({"e4m3": 10, "e5m2": 12}[sfx], 8)
        with pytest.raises(TypeError, match="no code for"):
            _interop.typestr(dt)
        for other in _dtypes.SUFFIXES:  # astype both ways with the four floats
            assert (other, sfx) in CONVERT_KERNELS and (sfx, other) in CONVERT_KERNELS


# --- the FP8 product --------------------------------------------------------------------------------------
H100 = TARGETS["H100"]
BF16 = _dtypes.as_dtype("bfloat16")


def _check(a, b, out=None, **epilogue):
    if epilogue:
        gm.matmul(a, b, out=out, **epilogue)
    return problem_of_call(a, b, out)[0]


@pytest.mark.parametrize("sfx", list(FP8))
def test_an_fp8_product_accumulates_in_float32_and_writes_a_float_c(sfx):
    a, b = fake_matrix(8, 64, dtype=FP8[sfx]), fake_matrix(64, 16, dtype=FP8[sfx], ptr=0x7F1000000000)
    p = _check(a, b)
    assert (p.dtype, p.out_dtype, p.mode) == (sfx, "f32", "native")
    for out, osfx in ((np.float32, "f32"), (np.float16, "f16"), (BF16, "bf16")):
        assert _check(a, b, fake_matrix(8, 16, dtype=out, ptr=0x7F2000000000)).out_dtype == osfx
    for bad in (np.float64, np.int32, FP8[sfx]):
        with pytest.raises(TypeError, match="out must be bfloat16 or float16 or float32"):
            _check(a, b, fake_matrix(8, 16, dtype=bad, ptr=0x7F2000000000))
    with pytest.raises(TypeError, match="bias is float64; it must be the result's dtype \\(float32\\) or float32"):
        _check(a, b, bias=fake_matrix(1, 16, dtype=np.float64, ptr=0x7F3000000000))
    with pytest.raises(ValueError, match="precision= chooses among float32 modes"):
        problem_of_call(a, b, None, precision="tf32")
    other = next(x for x in FP8 if x != sfx)
    with pytest.raises(TypeError, match="does not mix dtypes"):
        _check(a, fake_matrix(64, 16, dtype=FP8[other], ptr=0x7F1000000000))


def test_the_fp8_algorithms_are_the_wgmma_tiles():
    tiles = ("128x256", "128x128", "128x64", "64x64", "64x32", "64x16")
    for dt in FP8.values():
        assert algorithms(dt) == ("auto", *(f"fp8_wgmma{t}bt" for t in tiles))


def _problem(m, n, k, sfx="e4m3", out="bf16", b_trans=False, batch=1, aligned=True):
    return Problem(m, n, k, sfx, out, "native", aligned, aligned, batch, False, b_trans)


def test_hopper_plans_the_wgmma_tiles_reading_b_transposed_in_place():
    q = plan(_problem(4096, 4096, 4096, b_trans=True), H100)
    assert q.variant.name == "fp8_wgmma128x256bt" and not (q.copy_a or q.copy_b)
    assert q.kernel.name == "matmul_wgmma128x256bt_e4m3_bf16out"
    q = plan(_problem(4096, 4096, 4096, "e5m2", "f32"), H100)  # a row-major B: transposed into scratch first
    assert q.variant.name.startswith("fp8_wgmma") and q.copy_b and not q.copy_a
    q = plan(_problem(4096, 4096, 4096, aligned=False), H100)  # rows the copy engine cannot read: copied
    assert q.copy_a and q.copy_b
    q = plan(_problem(16, 4096, 14336, b_trans=True), H100)  # a few tokens: split K or swapped, not idle SMs
    assert q.variant.name.startswith("fp8_wgmma") and (q.splits > 1 or q.swap)
    if q.splits > 1:  # float32 partials, added by the 16-bit rows' reduction into C's dtype
        assert q.kernel.name.endswith("_f32out") and q.reduce.name == "matmul_splitk_reduce_f32_bf16"


@pytest.mark.parametrize("target", ["A100", "sm_86", "Turing"])
def test_other_gpus_have_no_fp8_product(target):
    with pytest.raises(ValueError, match="no kernel runs"):
        plan(_problem(1000, 3000, 700), TARGETS[target])


@pytest.mark.parametrize("out", ["bf16", "f16", "f32"])
def test_k_zero_takes_the_naive_kernel_of_c_and_copies_nothing(out):
    for target in ("H100", "A100"):
        q = plan(_problem(100, 200, 0, out=out), TARGETS[target])
        assert not (q.copy_a or q.copy_b) and "K = 0" in q.reason
        assert q.kernel.name == f"matmul_naive_{out}"


def test_the_fp8_tile_launch_reads_bytes_in_k_tiles_of_128(monkeypatch):
    q = plan(_problem(512, 384, 1024, "e5m2", "f16", b_trans=True), H100)
    a, b, c = (0x7F0000000000, 1024, 0), (0x7F1000000000, 1024, 0), (0x7F2000000000, 384, 0)
    maps, launches, copies = bound_run(monkeypatch, q, a, b, c)
    by_type = {elem: args for elem, args in maps}
    assert sorted(elem for elem, _ in maps) == ["e5m2", "e5m2", "f16"]
    assert by_type["e5m2"]["boxDim"][0] == 128 and by_type["f16"]["boxDim"][0] == 64  # 128 bytes of each
    assert not copies and len(launches) == 1
    name, grid, block, args, smem = launches[0]
    assert name == q.kernel.name and name.endswith("bt_e5m2_f16out") and smem == q.variant.smem
