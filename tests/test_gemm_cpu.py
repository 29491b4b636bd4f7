"""The GEMM interface without a GPU: batched and transposed views, broadcasting, the epilogue's argument
checks (before anything is launched), and how the engine plans batches and transposed operands."""

import numpy as np
import pytest
from support import ALL_MODULES, FAKE_DEVICE, H100, SM90A_MODULES, fake_batch, fake_matrix, record_launches

import gpumat as gm
from gpumat.matmul.engine import (
    ACTIVATIONS,
    IDENTITY,
    VARIANTS,
    BoundPlan,
    Problem,
    Target,
    bound_plans,
    c_map_args,
    call_view,
    plan,
    result_shape,
    tensor_map_args,
)
from gpumat.matrix import folded, matrices, storage
from gpumat.operands import overlaps
from gpumat.runtime.geometry import cdiv


# --- views -----------------------------------------------------------------------------------------
def test_T_is_a_view_of_the_same_memory_read_column_major():
    a = fake_matrix(3, 5, stride=8)
    t = a.T
    assert t.shape == (5, 3) and t.is_transposed and t.stride == 8 and t.elements == a.elements
    assert t.strides == (4, 32) and a.strides == (32, 4)
    assert t.T.shape == (3, 5) and not t.T.is_transposed
    # slicing a transposed view moves along the storage's columns
    v = t[1:4, 2:3]
    assert v.shape == (3, 1) and v.is_transposed and v.elements == a.elements + (2 * 8 + 1) * 4
    assert storage(t).shape == (3, 5) and not storage(t).is_transposed


def test_batch_views_index_and_slice():
    x = fake_batch(4, 3, 5, stride=6, bstride=20)
    assert x.shape == (4, 3, 5) and x.ndim == 3 and x.batch == 4 and x.batch_stride == 20
    assert x.strides == (80, 24, 4)
    one = x[2]
    assert one.shape == (3, 5) and one.ndim == 2 and one.elements == x.elements + 2 * 20 * 4
    assert x[-1].elements == x.elements + 3 * 20 * 4
    part = x[1:3]
    assert part.shape == (2, 3, 5) and part.elements == x.elements + 20 * 4
    corner = x[1:3, 1:3, 2:4]
    assert corner.shape == (2, 2, 2) and corner.elements == x.elements + (20 + 6 + 2) * 4
    assert x.T.shape == (4, 5, 3) and x.T.is_transposed and x.T[0].is_transposed
    with pytest.raises(IndexError):
        x[4]
    with pytest.raises(ValueError, match="step 1"):
        x[::2]
    assert [m.elements for m in matrices(x)] == [x.elements + i * 80 for i in range(4)]
    assert folded(x) is None  # 20 != 3 * 6: the matrices do not lie one after another
    tall = folded(fake_batch(4, 3, 5))
    assert tall.shape == (12, 5)


def test_contiguity_and_the_address_range_of_batches_and_transposed_views():
    assert fake_batch(2, 3, 4).is_contiguous
    assert not fake_batch(2, 3, 4, bstride=13).is_contiguous
    assert not fake_matrix(3, 4).T.is_contiguous and fake_matrix(1, 4).T.is_contiguous
    assert fake_matrix(3, 1, stride=5).T.shape == (1, 3) and not fake_matrix(3, 1, stride=5).T.is_contiguous
    x = fake_batch(2, 3, 4)  # 24 elements
    y = fake_batch(1, 2, 2, ptr=x.elements + 23 * 4)
    z = fake_batch(1, 2, 2, ptr=x.elements + 24 * 4)
    assert overlaps(x, y) and not overlaps(x, z)


# --- broadcasting and the engine's view of a call ------------------------------------------------------
def test_batches_broadcast_by_numpys_rule():
    m2 = fake_matrix(3, 4)
    assert result_shape(m2, fake_matrix(4, 5)) == (3, 5)
    assert result_shape(fake_batch(7, 3, 4), m2.T) == (7, 3, 3)
    assert result_shape(m2, fake_batch(7, 4, 5)) == (7, 3, 5)
    assert result_shape(fake_batch(1, 3, 4), fake_batch(7, 4, 5)) == (7, 3, 5)
    assert result_shape(fake_batch(7, 3, 4), fake_batch(1, 4, 5)) == (7, 3, 5)
    with pytest.raises(ValueError, match=r"\(2, 3, 4\).*\(3, 4, 5\).*do not broadcast"):
        result_shape(fake_batch(2, 3, 4), fake_batch(3, 4, 5))


def test_a_batch_with_one_shared_b_folds_into_one_tall_product():
    a, b, out = fake_batch(6, 3, 4), fake_matrix(4, 5, ptr=0x7F1000000000), fake_batch(6, 3, 5, ptr=0x7F2000000000)
    m, n, k, batch, A, B, C, ta, tb, _ = call_view(a, b, out, IDENTITY)
    assert (m, n, k, batch, ta, tb) == (18, 5, 4, 1, False, False)
    # a column bias (one value a row of each matrix) cannot fold: its index would run past m
    column = (*IDENTITY[:4], 2, *IDENTITY[5:])
    assert call_view(a, b, out, column)[3] == 6
    # a batched b does not fold either; its matrices are a grid layer each
    b3 = fake_batch(6, 4, 5, ptr=0x7F1000000000)
    m, n, k, batch, A, B, C, *_ = call_view(a, b3, out, IDENTITY)
    assert (m, batch, A[2], B[2], C[2]) == (3, 6, 12, 20, 15)


def test_a_transposed_out_is_computed_as_the_transposed_product():
    a, b = fake_matrix(3, 4), fake_matrix(4, 5, ptr=0x7F1000000000)
    out = fake_matrix(5, 3, ptr=0x7F2000000000).T  # 3 x 5, stored as 5 x 3 row-major
    row_bias = (1.0, 0.0, 0x10, 1, 1, 0, 0)
    m, n, k, batch, A, B, C, ta, tb, epilogue = call_view(a, b, out, row_bias)
    # C^T = B^T A^T: the operands swap and each is read the other way round; a row bias becomes a column one
    assert (m, n, k, ta, tb) == (5, 3, 4, True, True)
    assert A[0] == b.elements and B[0] == a.elements and C == (out.elements, 3, 0)
    assert epilogue[4] == 2


# --- bad input: clear errors before any launch, and the library keeps working -----------------------
def _ab():
    return fake_matrix(3, 4), fake_matrix(4, 5, ptr=0x7F1000000000)


@pytest.mark.parametrize("value", ["1", None, 1j, True, np.bool_(False), [1.0]])
@pytest.mark.parametrize("name", ["alpha", "beta"])
def test_gemm_scalars_must_be_real_numbers(name, value):
    a, b = _ab()
    with pytest.raises(TypeError, match=f"{name} must be a real number"):
        gm.matmul(a, b, out=fake_matrix(3, 5, ptr=0x7F2000000000), **{name: value})


def test_beta_needs_out():
    with pytest.raises(ValueError, match="pass out="):
        gm.matmul(*_ab(), beta=1.0)


def test_an_unknown_activation_lists_the_choices():
    with pytest.raises(ValueError, match="'relu', 'gelu', 'gelu_tanh'"):
        gm.matmul(*_ab(), activation="tanh")
    assert set(ACTIVATIONS) == {None, "relu", "gelu", "gelu_tanh"}


@pytest.mark.parametrize(
    "shape, dtype, error, match",
    [
        ((1, 4), np.float32, ValueError, r"\(1, 5\) row .* \(3, 1\) column"),
        ((5, 1), np.float32, ValueError, "bias has shape"),
        ((3, 5), np.float32, ValueError, "bias has shape"),
        ((1, 5), np.float64, TypeError, "bias is float64"),
        ((1, 5), np.float16, TypeError, "bias is float16"),
    ],
)
def test_bias_of_the_wrong_shape_or_dtype(shape, dtype, error, match):
    with pytest.raises(error, match=match):
        gm.matmul(*_ab(), bias=fake_matrix(*shape, ptr=0x7F3000000000, dtype=dtype))


def test_bias_must_be_a_matrix_and_not_a_batch():
    with pytest.raises(TypeError, match="bias must be a gpumat.Matrix"):
        gm.matmul(*_ab(), bias=np.ones((1, 5), np.float32))
    with pytest.raises(ValueError, match="bias must be a"):
        gm.matmul(*_ab(), bias=fake_batch(1, 1, 5, ptr=0x7F3000000000))


def test_out_of_the_wrong_batch_shape_and_overlapping_out_matrices():
    a, b = fake_batch(4, 3, 4), fake_batch(4, 4, 5, ptr=0x7F1000000000)
    with pytest.raises(ValueError, match=r"out has shape \(3, 3, 5\), the result needs \(4, 3, 5\)"):
        gm.matmul(a, b, out=fake_batch(3, 3, 5, ptr=0x7F2000000000))
    with pytest.raises(ValueError, match=r"out has shape \(3, 5\)"):
        gm.matmul(a, b, out=fake_matrix(3, 5, ptr=0x7F2000000000))
    with pytest.raises(ValueError, match="overlap each other"):
        gm.matmul(a, b, out=fake_batch(4, 3, 5, bstride=5, ptr=0x7F2000000000))


def test_mixed_dtypes_and_freed_operands():
    a, b = _ab()
    with pytest.raises(TypeError, match="does not mix dtypes"):
        gm.matmul(a, fake_batch(2, 4, 5, ptr=0x7F1000000000, dtype=np.float64))
    gone = fake_batch(2, 4, 5, ptr=0x7F1000000000)
    gone._buffer = None
    with pytest.raises(gm.FreedMatrixError):
        gm.matmul(a, gone)
    with pytest.raises(gm.FreedMatrixError):
        gm.matmul(*_ab(), bias=gone)


def test_dot_and_spmm_refuse_a_batch():
    x = fake_batch(2, 3, 4)
    with pytest.raises(ValueError, match="dot takes 2-D matrices"):
        gm.dot(x, fake_batch(2, 3, 4, ptr=0x7F1000000000))


def test_host_operands_do_not_take_an_epilogue():
    with pytest.raises(ValueError, match="apply to Matrix operands"):
        gm.matmul(np.ones((2, 2), np.float32), np.ones((2, 2), np.float32), alpha=2.0)


# --- planning batches and transposed operands ---------------------------------------------------------
def test_a_batch_runs_in_one_launch_without_split_k():
    for dtype, mode in (("f32", "float32"), ("f32", "tf32"), ("f16", "native"), ("bf16", "native"), ("f64", "native")):
        for batch in (2, 17, 1000, 70000):
            p = plan(Problem(64, 64, 4096, dtype, dtype, mode, batch=batch), H100)
            assert p.splits == 1
            shape = BoundPlan(p, FAKE_DEVICE).shape
            if p.variant.persistent:  # the TMA rows: the batch's tiles are work items of one grid
                bm, bn = p.variant.tile
                assert p.grid == (min(batch * cdiv(64, bm) * cdiv(64, bn), H100.sm_count), 1, 1)
                assert shape == ("general" if p.copy_a or p.copy_b else "tma")  # a copy first (TF32's B), or not
            else:  # one grid layer a matrix, more launches past the grid's limit
                assert p.grid[2] == min(batch, 65535)
                assert shape == ("direct" if batch <= 65535 else "general")


def test_a_named_tma_row_takes_a_batch_and_its_grid_walks_every_matrix_s_tiles():
    """Issue 41: the TMA + wgmma rows run batches (3-D tensor maps, the matrix their outer dimension)."""
    for batch in (2, 3, 65537):
        p = plan(Problem(256, 300, 256, "f16", "f16", "native", batch=batch), H100, "wgmma128x256")
        works = 2 * 2 * batch
        assert p.splits == 1 and p.grid == (min(works, 132), 1, 1)
        assert BoundPlan(p, FAKE_DEVICE).shape == "tma"


def test_a_tma_batch_launch_gets_3d_maps_and_says_which_operands_hold_a_matrix_each(monkeypatch):
    """The maps of A and B have the batch as their outer dimension (an operand shared by the batch: a map of
    one matrix, its bit clear in `batched`), C's layers are its batch stride apart; one launch."""
    from support import bound_run

    m, n, k, batch = 200, 136, 96, 5
    for shared_b in (False, True):
        p = plan(Problem(m, n, k, "bf16", "bf16", "native", batch=batch, b_trans=True), H100, "wgmma128x128bt")
        a = (0x7F0000000000, k, m * k)
        b = (0x7F0010000000, k, 0 if shared_b else n * k)  # stored transposed: N rows of K a matrix
        c = (0x7F0020000000, n + 8, m * (n + 8) + 64)
        encoded, launches, copies = bound_run(monkeypatch, p, a, b, c)
        assert copies == [] and len(launches) == 1
        (name, grid, _, args, _) = launches[0]
        assert name == "matmul_wgmma128x128bt_bf16" and grid == (2 * 2 * batch, 1, 1)
        assert args[3:13] == (c[0], m, n, k, n + 8, k, 1, batch, c[2], 1 if shared_b else 3)
        dims = {args["globalAddress"]: (args["globalDim"], args["globalStrides"]) for _, args in encoded}
        assert dims[a[0]] == ((k, m, batch), (2 * k, 2 * m * k))
        assert dims[b[0]] == ((k, n, 1), (2 * k, 2 * n * k)) if shared_b else ((k, n, batch), (2 * k, 2 * n * k))
        assert dims[c[0]] == ((n, m, batch), (2 * (n + 8), 2 * c[2]))


def test_a_tensor_map_of_a_batch_is_3d_and_refuses_an_unaligned_batch_stride():
    one = tensor_map_args(0x7F0000000000, rows=30, cols=64, stride=64, box_cols=64, box_rows=128)
    assert one["globalDim"] == (64, 30, 1) and one["globalStrides"] == (128, 30 * 128)
    many = tensor_map_args(0x7F0000000000, 30, 64, 64, 64, 128, 2, layers=7, layer_stride=30 * 64 + 8)
    assert many["globalDim"] == (64, 30, 7) and many["globalStrides"] == (128, (30 * 64 + 8) * 2)
    assert many["boxDim"] == (64, 128, 1)
    with pytest.raises(ValueError, match="batch stride"):
        tensor_map_args(0x7F0000000000, 30, 64, 64, 64, 128, 2, layers=7, layer_stride=30 * 64 + 1)
    assert c_map_args(0x7F0000000000, 30, 64, 64, 7, 2, layer_stride=30 * 64 + 4) is None  # plain stores


def test_transposed_operands_are_copied_row_major_once_and_the_model_counts_it():
    """(dmma64x128 reads row-major operands alone; float32's and float64's other tiles read either layout.)"""
    plain = plan(Problem(4096, 4096, 512, "f64", "f64", "native"), H100, "dmma64x128")
    ta = plan(Problem(4096, 4096, 512, "f64", "f64", "native", a_trans=True), H100, "dmma64x128")
    tb = plan(Problem(512, 512, 512, "f64", "f64", "native", b_trans=True, batch=3), H100, "dmma64x128")
    assert not (plain.copy_a or plain.copy_b) and BoundPlan(plain, FAKE_DEVICE).shape == "direct"
    assert ta.copy_a and not ta.copy_b and BoundPlan(ta, FAKE_DEVICE).shape == "general"
    assert ta.seconds > plain.seconds
    assert tb.copy_b and tb.copy_bytes == 3 * 512 * 512 * 8
    for sfx, mode in (("f32", "float32"), ("f64", "native")):
        in_place = plan(Problem(4096, 4096, 512, sfx, sfx, mode, a_trans=True), H100)
        assert in_place.variant.reads_a_trans and not in_place.copy_a
        assert BoundPlan(in_place, FAKE_DEVICE).shape == "direct"
    assert "stored transposed" in str(ta)


def test_a_transposed_operand_of_a_batch_is_copied_in_one_launch(monkeypatch):
    """Issue 41: B stored transposed in a batch of 384 (attention's Q @ K^T layout) used to be transposed into
    row-major scratch one launch a matrix, 384 launches ahead of the product; it is one transpose launch
    over the batch (z), each matrix from its batch stride to its place in the scratch."""
    from support import bound_run

    m, n, k, batch = 77, 77, 64, 384
    q = plan(Problem(m, n, k, "f32", "f32", "float32", b_trans=True, batch=batch), H100, "sgemm64x64")
    assert q.copy_b  # (the tile reads B row-major alone)
    a, b, c = (0x7F0000000000, k, m * k), (0x7F0010000000, k, n * k), (0x7F0020000000, n, m * n)
    _, launches, copies = bound_run(monkeypatch, q, a, b, c)
    assert len(copies) == 1 and len(launches) == 1
    kind, args = copies[0]
    aligned_n = -(-n // 4) * 4
    assert kind == "transpose" and args == (b[0], 0x7F4000000000, n, k, k, aligned_n, batch, n * k, k * aligned_n)


def test_an_unaligned_operand_of_a_batch_is_copied_in_one_launch(monkeypatch):
    """A batch whose A rows are not whole 16-byte pieces (4 x 4 float16: 8-byte rows) is copied into aligned
    scratch (rows of whole 32-byte sectors: 16 halves) by one copy launch over the batch, not one a matrix."""
    from support import bound_run

    m, n, k, batch = 4, 4, 4, 100000
    q = plan(Problem(m, n, k, "f16", "f16", "native", False, False, batch=batch), H100, "wgmma128x128")
    assert q.copy_a
    a, b, c = (0x7F0000000000, k, m * k), (0x7F0010000000, n, n * k), (0x7F0020000000, n, m * n)
    _, launches, copies = bound_run(monkeypatch, q, a, b, c)
    assert len(launches) == 1 and [kind for kind, _ in copies] == ["copy", "copy"]  # B: 8-byte rows too
    assert copies[0][1] == (a[0], 0x7F4000000000, m, k, k, 16, batch, m * k, m * 16)


def test_a_batch_of_overlapping_matrices_is_not_read_by_tensor_maps():
    """A tensor map's layers lie one after another: a batch whose matrices overlap in memory (a batch stride
    under rows x row stride, as sliding windows give) counts as not readable in place (copied first), and
    C's layers that overlap leave by plain stores."""
    from gpumat.matmul.engine import operand_aligned

    m, k = 64, 128
    assert operand_aligned((0x7F0000000000, k, m * k), 2, m)  # one after another
    assert operand_aligned((0x7F0000000000, k, 0), 2, m)  # one matrix for the batch
    assert not operand_aligned((0x7F0000000000, k, 8 * k), 2, m)  # windows 8 rows apart
    assert c_map_args(0x7F0000000000, m, k, k, 3, 2, layer_stride=m * k) is not None
    assert c_map_args(0x7F0000000000, m, k, k, 3, 2, layer_stride=8 * k) is None
    assert c_map_args(0x7F0000000000, m, k, k, 1, 2, layer_stride=8 * k) is not None  # one layer: no overlap


def test_batched_cost_grows_with_the_batch():
    one = plan(Problem(128, 128, 128, "f32", "f32", "float32"), H100).seconds
    many = plan(Problem(128, 128, 128, "f32", "f32", "float32", batch=4096), H100).seconds
    assert many > 10 * one


def test_every_gemm_kernel_takes_the_epilogue_and_the_batch():
    for v in VARIANTS.values():
        for kernel in v.kernels.values():
            assert kernel.signature.endswith("ddPqiii"), kernel
            if v.tma:  # the batch: products, C's layer stride, which operands hold a matrix each
                assert kernel.signature.startswith("TTTPiiiqii" + "iqi"), kernel
            elif v.args == "ozaki":  # the emulated product's reconstruction: 2-D products only (no batch)
                assert v.mode in ("fp64_int8", "fp32_int8") and not v.splits_k, v
            else:
                assert kernel.signature[-10:-7] == "qqq", kernel
    t = Target(80, 108, 163 * 1024, ALL_MODULES - SM90A_MODULES)
    assert plan(Problem(100, 100, 100, "f16", "f32", "native", batch=5), t).kernel.signature.endswith("ddPqiii")


def test_the_plan_sees_the_same_fold_as_the_launch():
    """A column bias keeps a batch unfolded in the plan too (the plan's batch is the launch's grid)."""
    a, b = fake_batch(2, 1, 1, stride=2), fake_matrix(1, 2, ptr=0x7F1000000000)
    out = fake_batch(2, 1, 2, stride=3, ptr=0x7F2000000000)
    column = (1.0, 0.0, 0x10, 1, 2, 0, 0)
    assert gm.matmul_plan(a, b, out).problem.batch == 1  # folded: one tall product
    m, n, k, batch, *_ = call_view(a, b, out, column)
    assert (m, batch) == (1, 2)


def test_the_launch_paths_plan_cache_stays_bounded_for_batched_calls(monkeypatch):
    launches = record_launches(monkeypatch, [])  # everything up to the launch runs
    monkeypatch.setattr(bound_plans, "limit", 4)
    bound_plans.clear()
    for n in range(1, 12):
        a, b = fake_batch(2, n, n), fake_batch(2, n, n, ptr=0x7F1000000000)
        gm.matmul(a, b, out=fake_batch(2, n, n, ptr=0x7F2000000000))
    assert len(bound_plans) <= 4 and len(launches) == 11
    bound_plans.clear()
