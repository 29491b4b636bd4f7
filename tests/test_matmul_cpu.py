"""matmul without a GPU: argument checks happen before any device call; launch geometry covers C."""
import pytest
from hypothesis import given, strategies as st

import gpumat as gm
from gpumat.runtime import geometry
from gpumat.matmul import VARIANTS, check_operands
from support import fake_matrix


def test_shape_mismatch_is_rejected():
    with pytest.raises(ValueError, match="not aligned"):
        gm.matmul(fake_matrix(3, 4), fake_matrix(5, 2))


def test_out_of_wrong_shape_is_rejected():
    with pytest.raises(ValueError, match="out has shape"):
        gm.matmul(fake_matrix(3, 4), fake_matrix(4, 2, ptr=0x7F0010000000), out=fake_matrix(2, 3, ptr=0x7F0020000000))


def test_out_overlapping_an_input_is_rejected():
    a = fake_matrix(4, 4)
    b = fake_matrix(4, 4, ptr=0x7F0010000000)
    out = fake_matrix(4, 4, ptr=a.elements + 4 * 5)  # starts inside a
    with pytest.raises(ValueError, match="overlaps"):
        gm.matmul(a, b, out=out)


def test_unknown_algorithm_is_rejected():
    with pytest.raises(ValueError, match="unknown matmul algorithm"):
        check_operands(fake_matrix(2, 2), fake_matrix(2, 2), None, "fastest")


@pytest.mark.parametrize("bad", [None, 3.0, [[1.0]], "A"])
def test_non_matrix_operands_are_rejected(bad):
    with pytest.raises(TypeError, match="gpumat.Matrix"):
        gm.matmul(bad, fake_matrix(1, 1))
    with pytest.raises(TypeError, match="gpumat.Matrix"):
        gm.matmul(fake_matrix(1, 1), bad)


def test_matmul_operator_declines_foreign_types():
    with pytest.raises(TypeError):
        fake_matrix(2, 2) @ 3


@given(rows=st.integers(1, 10**7), cols=st.integers(1, 10**7))
def test_tiled_grid_covers_every_tile_within_limits(rows, cols):
    for variant in VARIANTS.values():
        tile_rows, tile_cols = variant.tile
        gx, gy, gz = variant.grid(rows, cols)
        assert 1 <= gx <= geometry.MAX_GRID_X and 1 <= gy <= geometry.MAX_GRID_YZ and gz == 1
        assert gx * tile_cols >= cols and (gx - 1) * tile_cols < cols
        tiles = geometry.cdiv(rows, tile_rows)
        if tiles <= 200_000:  # the grid-stride loop over row tiles visits each exactly once
            assert sorted(geometry.row_tiles_visited(gy, tiles)) == list(range(tiles))
        else:
            assert gy == min(tiles, geometry.MAX_GRID_YZ)


@given(m=st.integers(1, 10**6), n=st.integers(1, 10**6), sms=st.sampled_from([1, 46, 132, 148]))
def test_split_k_reduction_grid_walks_strips_of_32_outputs(m, n, sms):
    blocks, gy, gz = geometry.splitk_reduce_grid(m, n, sms)
    assert (gy, gz) == (1, 1) and 1 <= blocks <= 16 * sms
    strips = geometry.cdiv(m * n, 32)
    assert blocks == min(strips, 16 * sms)  # no block without a strip; the grid-stride loop takes the rest


def test_block_shapes_are_legal():
    for variant in VARIANTS.values():
        threads = variant.block[0] * variant.block[1] * variant.block[2]
        assert 32 <= threads <= geometry.MAX_BLOCK_THREADS and threads % 32 == 0


@given(m=st.integers(1, 20000), n=st.integers(1, 20000), k=st.integers(1, 200000))
def test_plans_cover_k_exactly_and_fit_the_grid(m, n, k):
    from gpumat.matmul import FAST, K_ALIGN, plan
    for only in (None, *FAST):
        p = plan(m, n, k, 132, only)
        assert p.algorithm in FAST and (only is None or p.algorithm == only)
        if p.splits == 1:
            assert p.k_chunk == k
        else:  # every split has work, together they cover K, and boundaries keep 128-bit loads
            assert p.k_chunk % K_ALIGN == 0 and geometry.cdiv(k, p.k_chunk) == p.splits
        gx, gy, gz = FAST[p.algorithm].grid(m, n, p.splits)
        assert gz == p.splits <= geometry.MAX_GRID_YZ and gx <= geometry.MAX_GRID_X


def test_plan_prefers_split_k_only_when_tiles_cannot_fill_the_gpu():
    from gpumat.matmul import plan
    assert plan(8192, 8192, 8192).splits == 1
    assert plan(256, 256, 65536).splits > 1


def test_plan_never_picks_a_kernel_the_gpu_cannot_hold():
    from gpumat.matmul import FAST, plan
    for shape in [(8192, 8192, 8192), (3001, 3011, 2999), (256, 256, 65536), (64, 64, 64)]:
        for max_smem in (48 * 1024, 64 * 1024, 99 * 1024, 227 * 1024):
            assert FAST[plan(*shape, 132, None, max_smem).algorithm].smem <= max_smem
