"""CSRMatrix and S @ B: host-side validation, conversions and the auto choice (CPU), every kernel (GPU)."""

from __future__ import annotations

import importlib
import re
import types

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import FAKE_DEVICE, FakeBuffer, dims, fake_matrix, poison, poisoned, random, rel_error, strided_view

import gpumat as gm
from gpumat import memory
from gpumat import sparse as sp
from gpumat.matrix import FreedMatrixError, Matrix

ops = importlib.import_module("gpumat.spmm")  # the module (gpumat.spmm is also the function's name)

TOL = 1e-5
SEED_S = np.array([[1, 2, 0], [3, 0, 4], [0, 5, 6]], dtype=np.float32)
SEED_B = np.array([[1, 2], [3, 4], [5, 6]], dtype=np.float32)
SEED_CSR = ([0, 2, 4, 6], [0, 1, 0, 2, 1, 2], np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], np.float32), (3, 3))
KERNEL_ALGORITHMS = [a for a in ops.ALGORITHMS if a != "auto"]


def dense_of(indptr, indices, data, shape) -> np.ndarray:
    """float64 dense reference of CSR arrays (repeated entries add up)."""
    out = np.zeros(shape, dtype=np.float64)
    rows = np.repeat(np.arange(shape[0]), np.diff(np.asarray(indptr, dtype=np.int64)))
    np.add.at(out, (rows, np.asarray(indices, dtype=np.int64)), np.asarray(data, dtype=np.float64))
    return out


def random_csr(rng, rows, cols, density, empty_share=0.0, duplicates=False, unsorted=False, values=None):
    """Host CSR arrays with about `density` of each row filled; some rows emptied; optional repeats/shuffles."""
    lengths = rng.binomial(cols, density, size=rows) if cols else np.zeros(rows, dtype=np.int64)
    lengths[rng.random(rows) < empty_share] = 0
    row_of = np.repeat(np.arange(rows, dtype=np.int64), lengths)
    col = rng.integers(0, max(cols, 1), size=len(row_of))
    keys = row_of * max(cols, 1) + col
    if not duplicates:
        keys = np.unique(keys)
    else:
        keys = np.sort(keys)
    row_of, col = keys // max(cols, 1), keys % max(cols, 1)
    if unsorted:
        order = np.lexsort((rng.random(len(row_of)), row_of))
        row_of, col = row_of[order], col[order]
    indptr = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_of, minlength=rows), out=indptr[1:])
    data = random(len(col)) if values is None else values(len(col))
    return indptr, col.astype(np.int32), data, (rows, cols)


def fake_csr(host: sp.HostCSR) -> sp.CSRMatrix:
    """A CSRMatrix whose device arrays are fakes: argument checks run without a GPU."""
    s = object.__new__(sp.CSRMatrix)
    s._shape, s._nnz = host.shape, len(host.data)
    s._stats = sp.row_stats(host.indptr, host.shape[1])
    s._bufs = {name: FakeBuffer() for name in ("indptr", "indices", "data", *sp.Schedule._fields)}
    s._device = FAKE_DEVICE
    return s


# -------------------------------------------------------------------------------------------------
# CPU: validation
# -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "indptr, indices, data, shape, message",
    [
        ([0, 1], [0], [1.0], (2, 2), "rows + 1"),
        ([0, 1, 2, 3], [0, 1, 0], [1.0, 1.0, 1.0], (2, 2), "rows + 1"),
        ([1, 1, 2], [0], [1.0], (2, 2), "indptr[0] must be 0"),
        ([0, 2, 1], [0, 1], [1.0, 1.0], (2, 2), "decreases at row 1"),
        ([0, 1, 3], [0, 1], [1.0, 1.0], (2, 2), "indices has 2"),
        ([0, 1, 2], [0, 1], [1.0, 1.0, 1.0], (2, 2), "data has 3"),
        ([0, 1, 2], [0, 1, 1], [1.0, 1.0], (2, 2), "indices has 3"),
        ([0, 1, 2], [0, -1], [1.0, 1.0], (2, 2), "column index -1"),
        ([0, 1, 2], [0, 2], [1.0, 1.0], (2, 2), "column index 2 (entry 1, row 1)"),
        ([0, 1], [0], [1.0], (1, 0), "0 columns"),
        ([0, 1], [0], [1.0], (-1, 2), "rows must be >= 0"),
        ([0, 1], [0], [1.0], (1, 2**31), "2^31 - 1"),
        ([0, 1], [0], [1.0], (1,), "pair"),
        ([[0, 1]], [0], [1.0], (1, 2), "1-D"),
        ([0, 1], [[0]], [1.0], (1, 2), "1-D"),
        ([0, 1], [0], [[1.0]], (1, 2), "1-D"),
    ],
)
def test_invalid_csr_is_a_value_error_naming_the_problem(indptr, indices, data, shape, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        sp.validate_csr(indptr, indices, data, shape)


@pytest.mark.parametrize(
    "indptr, indices, data, what",
    [
        (np.array([0.0, 1.0]), [0], [1.0], "indptr"),
        ([0, 1], np.array([0.5]), [1.0], "indices"),
        ([0, 1], np.array([True]), [1.0], "indices"),
        ([0, 1], [0], np.array([1 + 2j]), "data"),
        ([0, 1], [0], np.array(["x"]), "data"),
        ([0, 1], [0], np.array([True]), "data"),
        ([0, 1], [0], np.array([object()], dtype=object), "data"),
    ],
)
def test_non_integer_indices_or_non_real_data_are_refused(indptr, indices, data, what):
    with pytest.raises((TypeError, ValueError), match=what):
        sp.validate_csr(indptr, indices, data, (1, 2))
    with pytest.raises(ValueError):  # CSRTypeError is both
        sp.validate_csr(indptr, indices, data, (1, 2))


def test_shape_entries_must_be_integers():
    with pytest.raises(TypeError):
        sp.validate_csr([0], [], [], (0, 2.0))
    with pytest.raises(TypeError):
        sp.validate_csr([0], [], [], (True, 2))


def test_validation_normalises_dtypes_and_accepts_unsorted_and_repeated_columns():
    host = sp.validate_csr(
        np.array([0, 3, 3], dtype=np.uint8),
        np.array([2, 0, 2], dtype=np.int64),
        np.array([1, 2, 3], dtype=np.int16),
        (2, 3),
    )
    assert host.indptr.dtype == np.int64 and host.indices.dtype == np.int32 and host.data.dtype == np.float64
    assert host.shape == (2, 3)
    np.testing.assert_array_equal(dense_of(*host), [[2, 0, 4], [0, 0, 0]])


def test_empty_lists_and_degenerate_shapes_are_valid():
    for shape in [(0, 0), (0, 5), (5, 0), (3, 3)]:
        host = sp.validate_csr([0] * (shape[0] + 1), [], [], shape)
        assert len(host.indices) == 0 and host.indptr.dtype == np.int64 and host.shape == shape


# -------------------------------------------------------------------------------------------------
# CPU: conversions (host side)
# -------------------------------------------------------------------------------------------------
def test_from_scipy_takes_any_object_with_the_four_attributes():
    duck = types.SimpleNamespace(
        indptr=np.array(SEED_CSR[0], dtype=np.int32),
        indices=np.array(SEED_CSR[1], dtype=np.int32),
        data=np.array(SEED_CSR[2]),
        shape=SEED_CSR[3],
    )
    host = sp.scipy_to_csr(duck)
    np.testing.assert_array_equal(dense_of(*host), SEED_S)
    with pytest.raises(TypeError, match="lacks indptr"):
        sp.scipy_to_csr(types.SimpleNamespace(indices=[], data=[], shape=(0, 0)))


def test_from_scipy_converts_other_formats_through_tocsr():
    scipy_sparse = pytest.importorskip("scipy.sparse")
    coo = scipy_sparse.coo_matrix(SEED_S)
    host = sp.scipy_to_csr(coo)
    np.testing.assert_array_equal(dense_of(*host), SEED_S)
    host = sp.scipy_to_csr(scipy_sparse.csr_matrix(SEED_S))
    np.testing.assert_array_equal(host.indptr, SEED_CSR[0])


def test_dense_to_csr_keeps_the_nonzeros_row_by_row():
    a = np.array([[0, 1.5, 0, -2], [0, 0, 0, 0], [np.nan, 0, 3, 0]])
    host = sp.dense_to_csr(a)
    np.testing.assert_array_equal(host.indptr, [0, 2, 2, 4])
    np.testing.assert_array_equal(host.indices, [1, 3, 0, 2])
    np.testing.assert_array_equal(host.data, np.array([1.5, -2, np.nan, 3], dtype=np.float32))
    one_row = sp.dense_to_csr([0, 7, 0])
    assert one_row.shape == (1, 3) and one_row.indices.tolist() == [1]
    assert sp.dense_to_csr(np.zeros((0, 4))).shape == (0, 4)
    with pytest.raises(TypeError):
        sp.dense_to_csr(np.array([[1j]]))
    with pytest.raises(ValueError):
        sp.dense_to_csr(np.zeros((2, 2, 2)))


# -------------------------------------------------------------------------------------------------
# CPU: statistics, the long-row schedule, auto, launch geometry, argument checks
# -------------------------------------------------------------------------------------------------
def test_row_stats_and_schedule_cover_every_long_row_exactly():
    lengths = np.array([0, 5, 300, 128, 129, 0, 1000])
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    stats = sp.row_stats(indptr, 50)
    assert stats.split == 128 and stats.rows == 7 and stats.nnz == lengths.sum() and stats.empty == 2
    assert stats.long_rows == 3 and stats.long_nnz == 300 + 129 + 1000 and stats.max == 1000
    assert stats.chunks == 3 + 2 + 8
    assert stats.short_mean == pytest.approx((0 + 5 + 128 + 0) / 4)
    sched = sp.long_row_schedule(indptr, stats.split)
    assert sched.long_rows.tolist() == [2, 4, 6] and sched.chunk_ptr.tolist() == [0, 3, 5, 13]
    for i, row in enumerate(sched.long_rows):
        covered = []
        for c in range(sched.chunk_ptr[i], sched.chunk_ptr[i + 1]):
            assert sched.chunk_row[c] == row
            start = sched.chunk_start[c]
            covered.extend(range(start, min(start + stats.split, indptr[row + 1])))
        assert covered == list(range(indptr[row], indptr[row + 1]))
    assert sched.chunk_start.dtype == np.int64 and sched.chunk_row.dtype == np.int32


def test_split_length_grows_with_the_mean_row_on_many_rows_only():
    assert sp.split_length(1000, 10**6) == sp.SPLIT_MIN  # few rows: cut long rows finely
    assert sp.split_length(2**20, 16 * 2**20) == 128
    assert sp.split_length(2**20, 200 * 2**20) == 1024
    assert sp.split_length(2**20, 10**4 * 2**20) == sp.SPLIT_MAX
    assert sp.split_length(2**20, 0) == sp.SPLIT_MIN


def stats_of(rows, cols, per_row):
    return sp.row_stats(
        np.arange(0, rows * per_row + 1, per_row, dtype=np.int64) if per_row else np.zeros(rows + 1, dtype=np.int64),
        cols,
    )


def test_auto_runs_the_vector_kernel_for_one_column():
    for stats in (stats_of(2**20, 2**20, 16), stats_of(10, 10, 3)):
        assert ops.choose_algorithm(1, stats) == "vector"


def test_auto_sweeps_once_past_64_columns_when_long_rows_hold_most_nonzeros():
    lengths = np.full(1000, 4, dtype=np.int64)
    lengths[:10] = 2000  # 10 rows hold 20000 of the 23960 nonzeros
    stats = sp.row_stats(np.concatenate([[0], np.cumsum(lengths)]), 5000)
    assert stats.long_nnz * 2 > stats.nnz
    assert ops.choose_algorithm(128, stats) == "tile128"
    assert ops.choose_algorithm(32, stats) == "tile32"
    assert ops.choose_algorithm(128, stats, vec4=False) == "tile32"


def test_auto_takes_the_narrowest_tile_covering_n_up_to_64():
    stats = stats_of(4096, 4096, 16)
    for n, tile in [(2, 8), (8, 8), (9, 16), (32, 32), (33, 64), (64, 64), (100, 64), (128, 64), (1000, 64)]:
        assert ops.choose_algorithm(n, stats) == f"tile{tile}", n
    for n, tile in [(8, 8), (32, 32), (100, 32)]:
        assert ops.choose_algorithm(n, stats, vec4=False) == f"tile{tile}", n
    assert ops.choose_algorithm(1, stats) == "vector"


def test_vector_lanes_follow_the_typical_row():
    assert ops.vector_lanes(stats_of(100, 100, 1)) == 2
    assert ops.vector_lanes(stats_of(100, 100, 16)) == 8
    assert ops.vector_lanes(stats_of(100, 1000, 100)) == 32


def test_resolve_maps_names_to_kernels():
    stats = stats_of(100, 100, 16)
    assert ops.resolve("scalar", 5, stats, True) == ("scalar", None)
    assert ops.resolve("vector", 1, stats, True) == ("vector", 8)
    assert ops.resolve("vector32", 3, stats, True) == ("vector", 32)
    assert ops.resolve("tile128", 200, stats, True) == ("tile", (128, 4))
    assert ops.resolve("tile128", 200, stats, False) == ("tile", (32, 1))
    assert ops.resolve("auto", 32, stats, True) == ("tile", (32, 4))


def test_launch_geometry():
    la = ops.tile_launch(32, 4, rows=1000, n=200, n_chunks=70)  # 8 lanes a group, 32 groups a block
    assert la.block == (256, 1, 1) and la.chunk_blocks == 3 and la.grid == (3 + 32, 7, 1)
    assert la.kernel is ops.TILE_KERNELS_BY_DTYPE["f32"][(32, 4)]
    la = ops.tile_launch(8, 1, rows=1, n=1, n_chunks=0)
    assert la.grid == (1, 1, 1) and la.chunk_blocks == 0
    assert ops.tile_launch(8, 4, rows=10, n=10**7, n_chunks=0).grid[1] == 65535
    lv = ops.vector_launch(4, rows=1000, n=1, n_chunks=17)
    assert lv.chunk_blocks == 3 and lv.grid == (3 + 16, 1, 1) and lv.extra == (4,)
    assert ops.reduce_grid(20, 100) == (4, 3, 1)
    assert ops.scalar_grid(257, 70000) == (2, 65535, 1)


def test_every_tile_kernel_is_declared_once():
    f32_tiles = ops.TILE_KERNELS_BY_DTYPE["f32"]
    names = {k.name for k in f32_tiles.values()}
    assert len(names) == len(f32_tiles) == len(ops.TILES) + len(ops.TILES_SCALAR)


def test_operand_checks_run_before_any_gpu_call():
    s = fake_csr(sp.validate_csr(*SEED_CSR))
    b = fake_matrix(3, 2, ptr=0x10000)
    with pytest.raises(TypeError):
        ops.spmm(np.eye(3), b)
    with pytest.raises(TypeError):
        ops.spmm(s, np.ones((3, 2)))
    with pytest.raises(ValueError, match="not aligned"):
        ops.spmm(s, fake_matrix(4, 2))
    with pytest.raises(ValueError, match="unknown spmm algorithm"):
        ops.spmm(s, b, algorithm="tile7")
    with pytest.raises(ValueError, match="out has shape"):
        ops.spmm(s, b, out=fake_matrix(3, 3, ptr=0x90000))
    with pytest.raises(ValueError, match="overlaps"):
        ops.spmm(s, b, out=fake_matrix(3, 2, ptr=0x10008))
    with pytest.raises(TypeError, match="from_numpy"):  # S @ a numpy array says what to do
        s @ np.ones((3, 2))
    assert s.__matmul__("not a matrix") is NotImplemented  # anything else: Python's own TypeError
    s._bufs = None
    with pytest.raises(FreedMatrixError):
        ops.spmm(s, b)


def test_s_at_b_runs_spmm_which_sparse_does_not_import():
    s = fake_csr(sp.validate_csr(*SEED_CSR))
    with pytest.raises(ValueError, match="not aligned"):  # spmm's own check, reached through the registered slot
        s @ fake_matrix(4, 2)


def test_to_scipy_without_scipy_is_a_clear_import_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_scipy(name, *args, **kwargs):
        if name.startswith("scipy"):
            raise ImportError("no scipy here")
        return real_import(name, *args, **kwargs)

    s = fake_csr(sp.validate_csr(*SEED_CSR))
    monkeypatch.setattr(builtins, "__import__", no_scipy)
    with pytest.raises(ImportError, match="needs scipy"):
        s.to_scipy()


# -------------------------------------------------------------------------------------------------
# GPU
# -------------------------------------------------------------------------------------------------
def run(S, B, algorithm, out=None):
    return ops.spmm(S, B, out=out, algorithm=algorithm)


@pytest.mark.gpu
def test_seed_example_every_algorithm():
    ref = SEED_S.astype(np.float64) @ SEED_B
    csr = getattr(gm, "CSRMatrix", sp.CSRMatrix)  # the public name once __init__ exports it
    with csr(*SEED_CSR) as S, Matrix.from_numpy(SEED_B) as B:
        for name in ops.ALGORITHMS:
            with run(S, B, name) as C:
                assert rel_error(C.to_numpy(), ref) <= TOL, name
        with S @ B as C:
            np.testing.assert_array_equal(C.to_numpy(), [[7, 10], [23, 30], [45, 56]])
        with S @ B[:, 1:2] as y:
            np.testing.assert_array_equal(y.to_numpy(), [[10], [30], [56]])


@pytest.mark.gpu
@given(
    rows=dims(2000),
    cols=dims(2000),
    n=dims(200),
    density=st.sampled_from([0.0, 0.001, 0.01, 0.05, 0.2, 0.5]),
    empty_share=st.sampled_from([0.0, 0.3, 0.9]),
    duplicates=st.booleans(),
    unsorted=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_kernel_matches_float64_on_random_sparse_matrices(
    rows, cols, n, density, empty_share, duplicates, unsorted, seed
):
    rng = np.random.default_rng(seed)
    density = min(density, 4e6 / max(rows * cols, 1))  # keep a draw to a few million nonzeros
    host = random_csr(rng, rows, cols, density, empty_share, duplicates, unsorted)
    b = random((cols, n))
    ref = dense_of(*host) @ b.astype(np.float64)
    with sp.CSRMatrix(*host) as S, Matrix.from_numpy(b) as B, poisoned(rows, n) as C:
        for name in ops.ALGORITHMS:
            poison(C)
            run(S, B, name, out=C)
            err = rel_error(C.to_numpy(), ref)
            assert err <= TOL, (name, S.stats, n, err)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 3, 8, 37, 128])
def test_strided_views_of_b_and_out(n):
    rng = np.random.default_rng(n)
    host = random_csr(rng, 700, 500, 0.05, empty_share=0.2, duplicates=True, unsorted=True)
    b = random((500, n))
    ref = dense_of(*host) @ b.astype(np.float64)
    with sp.CSRMatrix(*host) as S:
        for pad_left, pad_right in [(1, 2), (4, 4), (4, 3)]:  # misaligned; aligned with stride % 4 == 0; odd stride
            parent, view = strided_view(b, pad_left, pad_right)
            out_parent = poisoned(700, n + 8)
            out = out_parent[:, 4 : 4 + n]
            with parent, out_parent:
                for name in ops.ALGORITHMS:
                    run(S, view, name, out=out)
                    assert rel_error(out.to_numpy(), ref) <= TOL, (name, pad_left, pad_right)
                    # the columns around the view stay poisoned: nothing is written outside out
                    around = out_parent.to_numpy()
                    assert np.isnan(around[:, :4]).all() and np.isnan(around[:, 4 + n :]).all(), name


@pytest.mark.gpu
def test_one_row_of_two_million_nonzeros():
    rng = np.random.default_rng(7)
    nnz = 2**21
    cols = 2**21
    long_cols = rng.integers(0, cols, size=nnz)  # repeats included, unsorted
    indices = np.concatenate([[5, 9], long_cols, [0]]).astype(np.int32)
    indptr = np.array([0, 2, 2, 2 + nnz, 3 + nnz], dtype=np.int64)
    data = random(len(indices))
    n = 8
    b = random((cols, n))
    bd = b.astype(np.float64)
    ref = np.zeros((4, n))
    for r in range(4):
        sl = slice(indptr[r], indptr[r + 1])
        ref[r] = data[sl].astype(np.float64) @ bd[indices[sl]]
    with sp.CSRMatrix(indptr, indices, data, (4, cols)) as S, Matrix.from_numpy(b) as B:
        assert S.stats.long_rows == 1 and S.stats.chunks == nnz // S.stats.split
        for name in ops.ALGORITHMS:
            for width in (n, 1):
                with poisoned(4, width) as C:
                    run(S, B[:, :width], name, out=C)
                    # 2^21 float32 terms: a looser bound than the small cases
                    assert rel_error(C.to_numpy(), ref[:, :width]) <= 1e-3, (name, width)


@pytest.mark.gpu
def test_results_are_deterministic():
    rng = np.random.default_rng(3)
    host = random_csr(rng, 300, 3000, 0.3, duplicates=True, unsorted=True)  # rows of ~900: chunked
    b = random((3000, 64))
    with sp.CSRMatrix(*host) as S, Matrix.from_numpy(b) as B:
        assert S.stats.chunks > 0
        for name in ("auto", "vector", "tile8", "tile64"):
            with run(S, B, name) as C1, run(S, B, name) as C2:
                np.testing.assert_array_equal(C1.to_numpy(), C2.to_numpy())


@pytest.mark.gpu
@pytest.mark.parametrize("shape, n", [((0, 5), 3), ((5, 0), 3), ((4, 4), 3), ((4, 4), 0), ((0, 0), 2), ((3, 6), 1)])
def test_empty_matrices_and_shapes(shape, n):
    rows, cols = shape
    with (
        sp.CSRMatrix([0] * (rows + 1), [], np.zeros(0, np.float32), shape) as S,
        Matrix.from_numpy(random((cols, n))) as B,
    ):
        assert S.nnz == 0
        for name in ops.ALGORITHMS:
            with poisoned(rows, n) as C:
                run(S, B, name, out=C)
                np.testing.assert_array_equal(C.to_numpy(), np.zeros((rows, n), dtype=np.float32))
            with run(S, B, name) as C:
                assert C.shape == (rows, n)


@pytest.mark.gpu
def test_conversions_round_trip():
    rng = np.random.default_rng(11)
    host = random_csr(rng, 50, 40, 0.2, duplicates=True, unsorted=True)
    dense = dense_of(*host)
    with sp.CSRMatrix(*host) as S:
        back = S.to_host()
        for got, want in zip(back[:3], host[:3], strict=True):
            np.testing.assert_array_equal(got, want)
        with S.to_dense() as D:
            np.testing.assert_allclose(D.to_numpy(), dense, rtol=1e-6, atol=1e-6)
        assert "50x40" in repr(S) and f"nnz={S.nnz}" in repr(S)
    assert "freed" in repr(S)
    a = random((30, 20))
    a[a < 0.5] = 0
    with Matrix.from_numpy(a) as A, sp.CSRMatrix.from_dense(A) as S1, sp.CSRMatrix.from_dense(a) as S2:
        assert S1.nnz == S2.nnz == np.count_nonzero(a)
        with S1.to_dense() as D:
            np.testing.assert_array_equal(D.to_numpy(), a)
    scipy_sparse = pytest.importorskip("scipy.sparse")
    m = scipy_sparse.random(60, 70, density=0.1, format="csr", dtype=np.float32, random_state=1)
    with sp.CSRMatrix.from_scipy(m) as S:
        back = S.to_scipy()
        assert (back != m).nnz == 0 and back.shape == m.shape
        with Matrix.from_numpy(random((70, 5))) as B, S @ B as C:
            assert rel_error(C.to_numpy(), m.toarray().astype(np.float64) @ B.to_numpy()) <= TOL


@pytest.mark.gpu
def test_free_releases_everything_and_blocks_use():
    rng = np.random.default_rng(5)
    host = random_csr(rng, 10, 5000, 0.5)  # long rows: a schedule on the device too
    with Matrix.from_numpy(random((5000, 16))) as B:
        memory.release_cached()  # no small blocks kept aside: every allocation below comes from the pool
        before = memory.pool_used_bytes()
        S = sp.CSRMatrix(*host)
        assert S.stats.chunks > 0 and memory.pool_used_bytes() > before
        (S @ B).free()
        S.free()
        S.free()  # twice is fine
        memory.release_cached()
        assert memory.pool_used_bytes() == before
        with pytest.raises(FreedMatrixError):
            S @ B
        with pytest.raises(FreedMatrixError):
            S.to_dense()
