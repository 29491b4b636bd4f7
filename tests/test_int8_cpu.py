"""int8 and int32 matrices without a GPU: the two dtype tiers, the host rules of from_numpy, the gate that
keeps the integers out of the operations that compute in floats, the INT8 product's checks, and its plans
(the wgmma rows on sm_90, the SIMT row elsewhere, a zero fill at K = 0), bound and launched on a stand-in
device. The results themselves: tests/test_matmul_int8_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest
from support import TARGETS, bound_run, fake_batch, fake_matrix

import gpumat as gm
from gpumat import _dtypes
from gpumat.matmul.engine import INT8_MAX_K, VARIANTS, Problem, algorithms, forced, plan, problem_of_call

H100 = TARGETS["H100"]


# --- the dtype tiers ----------------------------------------------------------------------------------
@pytest.mark.parametrize("spelling", [np.int8, "int8", np.dtype("i1"), np.int32, "int32", "<i4"])
def test_the_integers_are_stored_dtypes_and_not_computed_ones(spelling):
    dt = _dtypes.as_storage_dtype(spelling)
    assert dt in (np.dtype(np.int8), np.dtype(np.int32))
    assert _dtypes.is_integer(dt) and _dtypes.suffix(dt) in _dtypes.INTEGER_SUFFIXES
    with pytest.raises(TypeError, match="gpumat matrices hold float32, float64, float16, bfloat16, not"):
        _dtypes.as_dtype(spelling)


@pytest.mark.parametrize("spelling", [np.int16, np.int64, np.uint8, np.uint32, bool, ">i4", np.complex64])
def test_other_integers_are_refused_with_the_six_named(spelling):
    with pytest.raises(TypeError, match="float32, float64, float16, bfloat16, int8, int32"):
        _dtypes.as_storage_dtype(spelling)


def test_the_floats_are_both_tiers_and_none_is_neither():
    for name in ("float32", "float64", "float16", "bfloat16"):
        assert _dtypes.as_storage_dtype(name) == _dtypes.as_dtype(name)
    with pytest.raises(TypeError, match="a dtype is needed"):
        _dtypes.as_storage_dtype(None)


def test_every_dtype_moves_through_kernels_of_its_width():
    for sfx, size in _dtypes.ITEMSIZE.items():
        move = _dtypes.MOVE_SUFFIX[sfx]
        assert move in _dtypes.MOVE_SUFFIXES and _dtypes.ITEMSIZE[move] == size


# --- from_numpy's host rules --------------------------------------------------------------------------
def test_integer_arrays_that_fit_become_int8_or_int32():
    a = np.array([[-128, 127], [0, 5]], dtype=np.int64)
    assert _dtypes.host_dtype_for(a, np.int8, storage=True) == np.int8
    assert _dtypes.host_dtype_for(a.astype(np.int16), "int32", storage=True) == np.int32
    assert _dtypes.host_dtype_for(np.array([True, False]), np.int8, storage=True) == np.int8
    assert _dtypes.host_dtype_for(np.zeros((0, 3), np.int64), np.int8, storage=True) == np.int8
    # without dtype=, integers stay the float64 they always became
    assert _dtypes.host_dtype_for(a.astype(np.int8)) == np.float64


@pytest.mark.parametrize(
    "values,dtype", [([-129, 0], np.int8), ([0, 128], np.int8), ([2**31], np.int32), ([-(2**31) - 1], np.int32)]
)
def test_integers_out_of_range_are_a_value_error(values, dtype):
    with pytest.raises(ValueError, match=r"beyond int(8|32)'s"):
        _dtypes.host_dtype_for(np.array(values, dtype=np.int64), dtype, storage=True)


def test_floats_are_not_quantised_behind_the_callers_back():
    with pytest.raises(TypeError, match="only from integers: round and clip"):
        _dtypes.host_dtype_for(np.array([1.0, 2.0]), np.int8, storage=True)
    # the places that take computed dtypes alone keep refusing the integers
    with pytest.raises(TypeError, match="not int8"):
        _dtypes.host_dtype_for(np.array([1, 2]), np.int8)


# --- the gate ---------------------------------------------------------------------------------------------
def test_operations_that_compute_in_floats_refuse_integer_matrices_first():
    x = fake_matrix(4, 4, dtype=np.int8)
    with pytest.raises(TypeError, match="dot computes in float32, float64, float16 or bfloat16"):
        gm.dot(x, x)
    y = fake_matrix(4, 4, dtype=np.int32)
    with pytest.raises(
        TypeError,
        match=r"matmul computes in float32, float64, float16 or bfloat16 \(and int8, float8_e4m3fn and float8_e5m2\)",
    ):
        gm.matmul(y, y)
    with pytest.raises(TypeError, match="does not mix dtypes"):
        gm.matmul(x, fake_matrix(4, 4))


def _check(a, b, out=None, **epilogue):
    """The checks of gm.matmul(a, b, out=out, **epilogue) on fake matrices: the kernels' view of the call, or
    the call's error (raised before anything is allocated or launched, so before the fake memory is used)."""
    if epilogue:
        gm.matmul(a, b, out=out, **epilogue)
    return problem_of_call(a, b, out)[0]


def test_an_int8_product_is_int32_exact_and_plain():
    a, b = fake_matrix(8, 64, dtype=np.int8), fake_matrix(64, 16, dtype=np.int8)
    p = _check(a, b)
    assert (p.dtype, p.out_dtype, p.mode) == ("s8", "s32", "native")
    assert _check(a, b, fake_matrix(8, 16, dtype=np.int32, ptr=0x7F1000000000)).out_dtype == "s32"
    with pytest.raises(TypeError, match="out must be int32 or float32 or bfloat16 or float16"):
        _check(a, b, fake_matrix(8, 16, dtype=np.float64, ptr=0x7F1000000000))
    for extra in ({"alpha": 2.0}, {"beta": 1.0}, {"activation": "relu"}):
        with pytest.raises(TypeError, match="into int32 takes no alpha, beta, bias or activation"):
            _check(a, b, **extra)
    # a float C: the sums as floats, through the epilogue (which the launch is given: below)
    for dtype, sfx in ((np.float32, "f32"), (np.float16, "f16"), (_dtypes.as_dtype("bfloat16"), "bf16")):
        c = fake_matrix(8, 16, dtype=dtype, ptr=0x7F1000000000)
        assert _check(a, b, c).out_dtype == sfx
    with pytest.raises(ValueError, match=f"exact for K up to {INT8_MAX_K}"):
        _check(fake_matrix(8, INT8_MAX_K + 1, dtype=np.int8), fake_matrix(INT8_MAX_K + 1, 16, dtype=np.int8))
    assert _check(fake_matrix(8, INT8_MAX_K, dtype=np.int8), fake_matrix(INT8_MAX_K, 16, dtype=np.int8)).k == INT8_MAX_K
    with pytest.raises(ValueError, match="precision= chooses among float32 modes"):
        problem_of_call(a, b, None, precision="tf32")


def test_the_int8_algorithms_are_the_wgmma_tiles_and_the_simt_fallback():
    tiles = ("128x256", "128x128", "128x64", "64x64", "64x32", "64x16")
    assert algorithms("int8") == ("auto", "simt64x64", *(f"int8_wgmma{t}bt" for t in tiles))
    assert algorithms(np.int32) == ("auto",)


# --- plans ----------------------------------------------------------------------------------------------
def _problem(m, n, k, b_trans=False, batch=1, aligned=True):
    return Problem(m, n, k, "s8", "s32", "native", aligned, aligned, batch, False, b_trans)


def test_hopper_plans_the_wgmma_tiles_reading_b_transposed_in_place():
    q = plan(_problem(4096, 4096, 4096, b_trans=True), H100)
    assert q.variant.name == "int8_wgmma128x256bt" and q.splits == 1 and not (q.copy_a or q.copy_b)
    q = plan(_problem(4096, 4096, 4096), H100)  # a row-major B: transposed into scratch first
    assert q.variant.name.startswith("int8_wgmma") and q.copy_b and not q.copy_a
    q = plan(_problem(4096, 4096, 4096, aligned=False), H100)  # rows the copy engine cannot read: copied
    assert q.copy_a and q.copy_b
    q = plan(_problem(256, 256, 8192, b_trans=True, batch=12), H100)
    assert q.variant.name.startswith("int8_wgmma") and q.splits == 1
    # one row: no matrix-vector row has int8 kernels, so the tiles take it, swapped (the weight on their rows)
    q = plan(_problem(1, 4096, 4096, b_trans=True), H100)
    assert q.variant.name.startswith("int8_wgmma") and q.swap


@pytest.mark.parametrize("target", ["A100", "sm_86", "Turing"])
def test_other_gpus_plan_the_simt_row(target):
    q = plan(_problem(1000, 3000, 700), TARGETS[target])
    assert q.variant.name == "simt64x64" and q.kernel.name == "matmul_simt64x64_s8"


def test_the_int8_rows_refuse_a_forced_split():
    """int32 partials would need a reduction of their own: the rows run K in one piece, named or forced."""
    p = _problem(512, 512, 8192, b_trans=True)
    for name in algorithms("int8")[1:]:
        assert plan(p, H100, name).splits == 1
        with pytest.raises(ValueError, match="does not split K"):
            forced(p, H100, name, 2)


def test_k_zero_is_a_zero_fill_and_nothing_is_copied():
    q = plan(_problem(100, 200, 0), H100)
    assert not (q.copy_a or q.copy_b) and "K = 0" in q.reason
    assert (("s8", "s32") in q.variant.kernels) and q.kernel.name.endswith("_s8")


def test_the_int8_tile_launch_reads_bytes_and_writes_int32(monkeypatch):
    q = plan(_problem(512, 384, 1024, b_trans=True), H100)
    a, b, c = (0x7F0000000000, 1024, 0), (0x7F1000000000, 1024, 0), (0x7F2000000000, 384, 0)
    maps, launches, copies = bound_run(monkeypatch, q, a, b, c)
    by_type = {elem: args for elem, args in maps}  # (C's map first: it is made first)
    assert sorted(elem for elem, _ in maps) == ["s32", "s8", "s8"]
    assert by_type["s8"]["boxDim"][0] == 128 and by_type["s32"]["boxDim"][0] == 32  # 128 bytes of each
    assert not copies and len(launches) == 1
    name, grid, block, args, smem = launches[0]
    threads = 128 * (1 + q.variant.tile[0] // 64)  # a producer warpgroup and one consumer for each 64 rows
    assert name == q.kernel.name and name.endswith("bt_s8") and block == (threads, 1, 1) and smem == q.variant.smem


@pytest.mark.parametrize("out", ["f32", "bf16", "f16"])
def test_an_int8_product_into_a_float_c_runs_the_wgmma_tiles_with_the_epilogue(out, monkeypatch):
    p = Problem(512, 384, 1024, "s8", out, "native", True, True, 1, False, True)
    q = plan(p, H100)
    assert q.variant.name.startswith("int8_wgmma") and q.kernel.name.endswith(f"bt_s8_{out}out") and q.splits == 1
    a, b, c = (0x7F0000000000, 1024, 0), (0x7F1000000000, 1024, 0), (0x7F2000000000, 384, 0)
    epilogue = (0.25, 0.0, 0, 0, 0, 0, 0)
    maps, launches, copies = bound_run(monkeypatch, q, a, b, c, epilogue)
    assert sorted(elem for elem, _ in maps) == sorted([out, "s8", "s8"]) and not copies
    assert launches[0][3][-7:] == epilogue  # the kernel is given the epilogue
    with pytest.raises(ValueError, match="'int8_wgmma128x256bt' has no kernel for int8 inputs and a float32 result"):
        plan(Problem(512, 384, 1024, "s8", "f32", "native", True, True, 1, False, True), H100, "int8_wgmma128x256bt")
    for target in ("A100", "sm_86"):  # the SIMT row writes the int32 sums alone
        with pytest.raises(ValueError, match="no kernel runs"):
            plan(p, TARGETS[target])


def test_a_batch_of_int8_fakes_checks_like_any_batch():
    a, b = fake_batch(3, 8, 64, dtype=np.int8), fake_batch(3, 64, 16, dtype=np.int8, ptr=0x7F1000000000)
    p = _check(a, b)
    assert p.batch == 3 and p.out_dtype == "s32"
    assert VARIANTS["int8_wgmma128x256bt"].max_splits == 1
