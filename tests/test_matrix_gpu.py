"""Matrix on the GPU: round trips, views, lifetime, errors that leave the library working."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import UNDER_SANITIZER, dims, random, what_holds_live_matrices

import gpumat as gm
from gpumat import memory

pytestmark = pytest.mark.gpu


@given(h=dims(), w=dims())
def test_round_trip(h, w):
    a = random((h, w))
    with gm.Matrix.from_numpy(a) as m:
        assert m.shape == (h, w) and m.stride == w and m.dtype == np.float32
        np.testing.assert_array_equal(m.to_numpy(), a)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("rows,cols,width", [(3000, 1531, 4099), (17, 5, 9), (2, 2100000, 2100003)])
def test_a_tile_of_a_bigger_array_uploads_in_place_with_its_values(dtype, rows, cols, width):
    """A tile (rows contiguous, not the array's whole width) is uploaded from where it lies, not packed
    first: staged (3000 x 1531), through the driver (17 x 5), rows wider than a staging buffer (2 x 2.1M);
    the array around it stays untouched."""
    big = np.random.default_rng(rows).uniform(-1, 1, (rows + 3, width)).astype(dtype)
    before = big.copy()
    tile = big[1 : 1 + rows, 2 : 2 + cols]
    assert not tile.flags.c_contiguous
    with gm.Matrix.from_numpy(tile) as m:
        assert m.to_numpy().tobytes() == np.ascontiguousarray(tile).tobytes()
    assert big.tobytes() == before.tobytes()


@pytest.mark.parametrize("rows,cols,width", [(3000, 1531, 4099), (17, 5, 9)])
def test_a_matrix_downloads_into_a_tile_of_a_bigger_array_where_it_lies(rows, cols, width):
    """to_numpy(out=) of a tile (rows contiguous): staged (3000 x 1531) and through the driver (17 x 5);
    the array around the tile keeps its values. A transposed view still wants a C-contiguous out."""
    values = np.random.default_rng(cols).uniform(-1, 1, (rows, cols)).astype(np.float32)
    big = np.full((rows + 3, width), 7.0, np.float32)
    tile = big[1 : 1 + rows, 2 : 2 + cols]
    with gm.Matrix.from_numpy(values) as m:
        assert m.to_numpy(out=tile) is tile
        with pytest.raises(ValueError, match="C-contiguous"):
            m.T.to_numpy(out=big[1 : 1 + cols, 2 : 2 + rows])
    assert tile.tobytes() == np.ascontiguousarray(values).tobytes()
    outside = big.copy()
    outside[1 : 1 + rows, 2 : 2 + cols] = 7.0
    assert np.all(outside == 7.0)


def test_vector_becomes_one_row_and_dtypes_follow_the_rule():
    with gm.Matrix.from_numpy(np.arange(5, dtype=np.int16)) as m:  # integers: float64, exactly
        assert m.shape == (1, 5) and m.dtype == np.float64
        np.testing.assert_array_equal(m.to_numpy(), [[0, 1, 2, 3, 4]])
    f = np.asfortranarray(np.random.default_rng(3).uniform(-1, 1, (7, 3)))
    with gm.Matrix.from_numpy(f) as m:  # float64 stays float64, bit for bit
        assert m.dtype == np.float64 and m.to_numpy().tobytes() == np.ascontiguousarray(f).tobytes()
    with gm.Matrix.from_numpy(f, dtype=np.float32) as m:
        np.testing.assert_array_equal(m.to_numpy(), f.astype(np.float32))


def test_zeros_and_empty_shapes():
    with gm.Matrix.zeros(3, 5) as z:
        np.testing.assert_array_equal(z.to_numpy(), np.zeros((3, 5), np.float32))
    for shape in [(0, 0), (0, 4), (4, 0)]:
        e = gm.Matrix.empty(*shape)
        assert e.to_numpy().shape == shape
        e.free()


@given(h=st.integers(1, 50), w=st.integers(1, 50), data=st.data())
def test_views_read_and_share_memory(h, w, data):
    a = random((h, w))
    r0 = data.draw(st.integers(0, h - 1))
    r1 = data.draw(st.integers(r0 + 1, h))
    c0 = data.draw(st.integers(0, w - 1))
    c1 = data.draw(st.integers(c0 + 1, w))
    with gm.Matrix.from_numpy(a) as m:
        v = m[r0:r1, c0:c1]
        np.testing.assert_array_equal(v.to_numpy(), a[r0:r1, c0:c1])
        gm.matmul(
            gm.Matrix.from_numpy(np.eye(r1 - r0, dtype=np.float32)), gm.Matrix.from_numpy(-a[r0:r1, c0:c1]), out=v
        )
        expected = a.copy()
        expected[r0:r1, c0:c1] *= -1
        np.testing.assert_array_equal(m.to_numpy(), expected)


def test_freed_matrix_raises_clearly_and_views_die_with_their_owner():
    m = gm.Matrix.from_numpy(random((4, 4)))
    v = m[1:3, 1:3]
    m.free()
    for bad in (m, v):
        with pytest.raises(gm.FreedMatrixError, match="freed"):
            bad.to_numpy()
        with pytest.raises(gm.FreedMatrixError):
            gm.matmul(bad, bad)
    assert "freed" in repr(m)
    m.free()  # freeing twice is harmless


def test_freeing_a_view_leaves_the_owner_alone():
    a = random((4, 4))
    with gm.Matrix.from_numpy(a) as m:
        v = m[:2, :2]
        v.free()
        np.testing.assert_array_equal(m.to_numpy(), a)


def test_out_of_memory_is_a_memory_error_and_the_library_keeps_working():
    total = gm.device().total_memory
    with pytest.raises(gm.OutOfMemoryError) as info:
        gm.Matrix.empty(total // 4, 2)  # twice the card
    assert isinstance(info.value, MemoryError) and "cannot allocate" in str(info.value)
    a = random((8, 8))
    with gm.Matrix.from_numpy(a) as m:
        np.testing.assert_allclose((m @ m).to_numpy(), a.astype(np.float64) @ a, rtol=1e-5, atol=1e-5)


def test_threads_can_use_the_library():
    import threading

    errors = []

    def work():
        try:
            a = random((33, 17))
            with gm.Matrix.from_numpy(a) as m:
                np.testing.assert_array_equal(m.to_numpy(), a)
        except Exception as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_repr_names_shape_and_view():
    with gm.Matrix.from_numpy(random((3, 4))) as m:
        assert "3x4" in repr(m) and "view" in repr(m[:, 1:])


@pytest.mark.parametrize("side", [64, 2304])  # through the free list (<= 16 MiB), and through the pool (20 MiB)
def test_device_memory_returns_to_where_it_started_after_many_cycles(side):
    a = random((side, side))
    memory.release_cached()
    start = memory.pool_used_bytes()
    for _ in range((2000 if side == 64 else 200) // (10 if UNDER_SANITIZER else 1)):  # 10-1000x slower there
        with gm.Matrix.from_numpy(a) as x:
            y = x @ x
            y.free()
            z = x @ x  # dropped without free(): the finalizer releases it
            del z
    if side * side * 4 <= memory.pool.SMALL_BLOCK:  # the free list served these cycles, within its bound
        assert 0 < gm.device().memory.small.bytes <= memory.pool.KEEP_BYTES
    memory.release_cached()
    assert memory.pool_used_bytes() == start, what_holds_live_matrices()


def test_stream_orders_with_the_library_and_closes():
    a = random((128, 128))
    s = gm.Stream()
    with s, gm.Matrix.from_numpy(a) as m:  # `with` makes the stream current; it stays open
        c = m @ m
        s.synchronize()
        np.testing.assert_allclose(c.to_numpy(), a.astype(np.float64) @ a, rtol=1e-4, atol=1e-4)
    assert s.handle is not None and s.query()
    s.close()
    assert s.handle is None
    s.close()  # closing twice is harmless
