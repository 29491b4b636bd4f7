"""Transpose: argument checks and launch geometry on the CPU; every variant against numpy on the GPU."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gpumat as gm
from gpumat import _geometry, _kernels, _memory
from gpumat.matrix import Matrix
from support import dims, fake_matrix, poison, poisoned, random, strided_view

T = importlib.import_module("gpumat.transpose")  # the module (gpumat.transpose may name the function)
VARIANTS = list(T.VARIANTS)
SHAPES = [(1, 1), (1, 7), (7, 1), (33, 31), (1000, 3), (4096, 4096), (3001, 17011), (16384, 16384),
          (46341, 46341), (1, 2**31 - 1), (2**31 - 1, 1), (2**24 + 3, 5), (65535 * 64 + 1, 70), (10**6, 10**6)]


# ---------------------------------------------------------------- CPU: declarations, geometry, checks
def test_declarations_match_ptx():
    try:
        entries = _kernels.manifest()["modules"]["transpose"]["entries"]
    except (FileNotFoundError, KeyError):
        pytest.skip("transpose kernels not built")
    for v in T.VARIANTS.values():
        k = v.kernel
        assert k.name in entries, k.name
        assert entries[k.name]["params"] == [_kernels.PTX_TYPES[c] for c in k.signature]


def test_kernels_do_not_spill():
    try:
        entries = _kernels.manifest()["modules"]["transpose"]["entries"]
    except (FileNotFoundError, KeyError):
        pytest.skip("transpose kernels not built")
    for name, info in entries.items():
        for arch, res in info["resources"].items():
            assert res["spill_stores"] == 0 and res["spill_loads"] == 0, (name, arch, res)


@pytest.mark.parametrize("name", VARIANTS)
def test_block_fits_tile(name):
    v = T.VARIANTS[name]
    bx, by, bz = v.block
    assert bx * by * bz <= _geometry.MAX_BLOCK_THREADS and bz == 1
    tr, tc = v.tile
    assert tc % bx == 0 and tr % by == 0   # each thread moves a whole number of elements


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES)
def test_grid_covers_and_stays_in_limits(name, shape):
    rows, cols = shape
    v = T.VARIANTS[name]
    gx, gy, gz = v.grid(rows, cols)
    tr, tc = v.tile
    assert 1 <= gx <= _geometry.MAX_GRID_X and 1 <= gy <= _geometry.MAX_GRID_YZ and gz == 1
    assert gx * tc >= cols and (gx - 1) * tc < cols          # every column tile, no idle column of blocks
    tiles = _geometry.cdiv(rows, tr)
    assert gy == min(tiles, _geometry.MAX_GRID_YZ)
    # the kernels' row-tile loop: block row by visits by, by + gy, ... < tiles; each tile exactly once
    if tiles <= 10**6:
        assert sorted(_geometry.row_tiles_visited(gy, tiles)) == list(range(tiles))


@given(rows=dims(1000, tiles=(8, 32, 64)), cols=dims(1000, tiles=(8, 32, 64)), name=st.sampled_from(VARIANTS))
def test_grid_covers_drawn_shapes(rows, cols, name):
    v = T.VARIANTS[name]
    gx, gy, _ = v.grid(rows, cols)
    tr, tc = v.tile
    covered = {(t, cx) for cx in range(gx) for t in _geometry.row_tiles_visited(gy, _geometry.cdiv(rows, tr))}
    assert len(covered) == _geometry.cdiv(rows, tr) * _geometry.cdiv(cols, tc)
    assert gx * tc >= cols


@pytest.fixture
def no_gpu(monkeypatch):
    """Fail loudly if anything reaches the GPU: allocation or a launch."""
    launches = []

    def refuse(*args, **kwargs):
        raise AssertionError("argument checks must fail before any GPU call")

    def record(self, grid, block, *args, smem=0, stream=0):
        launches.append((self.name, tuple(grid), tuple(block), args))

    monkeypatch.setattr(_memory, "alloc", refuse)
    monkeypatch.setattr(_kernels.Kernel, "__call__", record)
    return launches


def test_argument_errors_before_any_gpu_call(no_gpu):
    a = fake_matrix(4, 6)
    with pytest.raises(TypeError):
        T.transpose(np.zeros((4, 6), np.float32))
    with pytest.raises(TypeError):
        T.transpose(a, out=np.zeros((6, 4), np.float32))
    with pytest.raises(ValueError, match="algorithm"):
        T.transpose(a, out=fake_matrix(6, 4, ptr=0x7F1000000000), algorithm="fastest")
    with pytest.raises(ValueError, match="shape"):
        T.transpose(a, out=fake_matrix(4, 6, ptr=0x7F1000000000))
    with pytest.raises(ValueError, match="shape"):
        T.transpose(a, out=fake_matrix(6, 5, ptr=0x7F1000000000))
    with pytest.raises(ValueError, match="overlaps"):
        T.transpose(a, out=fake_matrix(6, 4, ptr=0x7F0000000000 + 8))
    with pytest.raises(ValueError, match="overlaps"):        # a square matrix onto itself
        sq = fake_matrix(5, 5)
        T.transpose(sq, out=sq)
    freed = fake_matrix(3, 3)
    freed._buffer = None
    with pytest.raises(ValueError):
        T.transpose(freed, out=fake_matrix(3, 3, ptr=0x7F1000000000))
    assert no_gpu == []


@pytest.mark.parametrize("name", ["auto", *VARIANTS])
def test_launch_arguments(no_gpu, name):
    a = fake_matrix(3001, 17011, stride=17100)
    out = fake_matrix(17011, 3001, stride=3010, ptr=0x7F1000000000)
    assert T.transpose(a, out=out, algorithm=name) is out
    (kname, grid, block, args), = no_gpu
    v = T.VARIANTS[T.choose_algorithm(3001, 17011) if name == "auto" else name]
    assert kname == v.kernel.name and grid == v.grid(3001, 17011) and block == v.block
    assert args == (a.elements, out.elements, 3001, 17011, 17100, 3010)


@pytest.mark.parametrize("shape", [(0, 0), (0, 5), (5, 0)])
def test_empty_never_launches(no_gpu, shape):
    a = fake_matrix(*shape)
    out = fake_matrix(shape[1], shape[0], ptr=0x7F1000000000)
    assert T.transpose(a, out=out) is out
    assert no_gpu == []


def test_auto_is_a_variant():
    for rows, cols in SHAPES:
        assert T.choose_algorithm(rows, cols) in T.VARIANTS


# ---------------------------------------------------------------- GPU
def _check_transposed(out: Matrix, host: np.ndarray) -> None:
    got = out.to_numpy()
    assert got.shape == host.T.shape
    assert np.array_equal(got, host.T), f"{np.count_nonzero(got != host.T)} wrong of {host.size}"


@pytest.mark.gpu
@given(rows=dims(1000, tiles=(8, 32, 64)), cols=dims(1000, tiles=(8, 32, 64)),
       name=st.sampled_from(["auto", *VARIANTS]))
def test_variants_on_drawn_shapes(rows, cols, name):
    host = random((rows, cols))
    with gm.Matrix.from_numpy(host) as a, poisoned(cols, rows) as out:
        assert T.transpose(a, out=out, algorithm=name) is out
        _check_transposed(out, host)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["auto", *VARIANTS])
@pytest.mark.parametrize("shape", [(1, 1), (1, 1000), (1000, 1), (1, 70001), (70001, 1), (32, 32), (64, 64),
                                   (63, 65), (97, 251), (1024, 1), (2, 3)])
def test_edge_shapes(name, shape):
    host = random(shape)
    with gm.Matrix.from_numpy(host) as a, poisoned(shape[1], shape[0]) as out:
        T.transpose(a, out=out, algorithm=name)
        _check_transposed(out, host)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["auto", *VARIANTS])
def test_tall_matrix_walks_row_tiles_past_the_grid_cap(name):
    # more row tiles than gridDim.y can hold even for 8-row tiles: the grid-stride loop must cover them
    rows, cols = 65535 * 64 + 77, 3
    host = random((rows, cols))
    assert T.VARIANTS[name if name != "auto" else T.choose_algorithm(rows, cols)].grid(rows, cols)[1] == 65535
    with gm.Matrix.from_numpy(host) as a, poisoned(cols, rows) as out:
        T.transpose(a, out=out, algorithm=name)
        _check_transposed(out, host)


@pytest.mark.gpu
@settings(max_examples=20)
@given(rows=dims(300, tiles=(32, 64)), cols=dims(300, tiles=(32, 64)), name=st.sampled_from(["auto", *VARIANTS]),
       pads=st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 5), st.integers(0, 5)))
def test_views_in_and_out(rows, cols, name, pads):
    host = random((rows, cols))
    parent, a = strided_view(host, pads[0], pads[1] + 1)
    big = poisoned(cols + 2, rows + pads[2] + pads[3])
    try:
        out = big[1:cols + 1, pads[2]:pads[2] + rows]
        assert out.stride == rows + pads[2] + pads[3]
        T.transpose(a, out=out, algorithm=name)
        _check_transposed(out, host)
        whole = big.to_numpy()
        mask = np.ones(whole.shape, bool)
        mask[1:cols + 1, pads[2]:pads[2] + rows] = False
        assert np.isnan(whole[mask]).all(), "wrote outside the output view"
    finally:
        parent.free()
        big.free()


@pytest.mark.gpu
@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("shape", [(1, 70), (70, 1), (63, 65), (65, 127), (97, 251), (129, 129), (200, 64)])
def test_views_with_every_row_alignment(name, shape):
    # A and B as views whose first element and stride take every residue mod 8 words (every offset
    # within a 32-byte sector), so rows start everywhere in their sectors; nothing outside B's view written
    rows, cols = shape
    host = random(shape)
    for k in range(8):
        # lda = cols + k, ldb = rows + 3k (mod 8): both strides take every residue, and for odd
        # squares both are odd at even k (lda * ldb = 1 mod 4: tiled_aligned's skewed reads)
        a_left, a_right = k, 0
        b_top, b_left, b_right = 2, (5 * k + 3) % 8, (-2 * k - 3) % 8   # B's offset: 2 rows + 3k + 3 (mod 8)
        parent, a = strided_view(host, a_left, a_right)
        big = poisoned(cols + 3, rows + b_left + b_right)
        try:
            out = big[b_top:b_top + cols, b_left:b_left + rows]
            T.transpose(a, out=out, algorithm=name)
            _check_transposed(out, host)
            whole = big.to_numpy()
            mask = np.ones(whole.shape, bool)
            mask[b_top:b_top + cols, b_left:b_left + rows] = False
            assert np.isnan(whole[mask]).all(), ("wrote outside the output view", k)
        finally:
            parent.free()
            big.free()


@pytest.mark.gpu
def test_new_output_and_T_property():
    host = random((37, 129))
    with gm.Matrix.from_numpy(host) as a:
        b = T.transpose(a)
        c = a.T
        try:
            assert b.shape == (129, 37) and not b.is_view
            _check_transposed(b, host)
            _check_transposed(c, host)
        finally:
            b.free()
            c.free()


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(0, 0), (0, 5), (5, 0)])
def test_empty(shape):
    with gm.Matrix.empty(*shape) as a:
        b = T.transpose(a)
        assert b.shape == (shape[1], shape[0])
        assert b.to_numpy().shape == (shape[1], shape[0])
        b.free()


@pytest.mark.gpu
def test_out_overlapping_input_rejected():
    with gm.Matrix.from_numpy(random((8, 8))) as a:
        with pytest.raises(ValueError, match="overlaps"):
            T.transpose(a, out=a)
        with pytest.raises(ValueError, match="overlaps"):
            T.transpose(a[0:4, 0:4], out=a[2:6, 4:8])   # no shared element, but the address ranges interleave


@pytest.mark.gpu
def test_huge_square_beyond_2_31_elements():
    """46341^2 > 2^31 elements: element offsets must be 64-bit everywhere. Checked on sampled rows/columns."""
    n = 46341
    need = 2 * n * n * 4
    _memory.release_cached()  # earlier tests' blocks stay cached in the pool unless handed back
    free_bytes, _ = _free_memory()
    if free_bytes < need + 2**30:
        pytest.skip(f"needs {need / 2**30:.1f} GiB of GPU memory, {free_bytes / 2**30:.1f} free")
    # A[r, c] = (hr[r] + hc[c]) mod 2^24: exact in float32, and a misplaced element almost surely differs
    g = np.random.default_rng(1234)
    hr = g.integers(0, 2**24, n, dtype=np.int32)
    hc = g.integers(0, 2**24, n, dtype=np.int32)

    def expect(r, c):
        return ((hr[r] + hc[c]) & 0xFFFFFF).astype(np.float32)

    a = gm.Matrix.empty(n, n)
    b = gm.Matrix.empty(n, n)
    try:
        chunk = 1024
        buf = np.empty((chunk, n), np.int32)
        for r0 in range(0, n, chunk):
            k = min(chunk, n - r0)
            np.add(hr[r0:r0 + k, None], hc[None, :], out=buf[:k])
            np.bitwise_and(buf[:k], 0xFFFFFF, out=buf[:k])
            _memory.upload(a[r0:r0 + k, :].elements, n * 4, buf[:k].astype(np.float32))
        del buf
        rng = np.random.default_rng()
        picks = sorted({0, 1, 31, 32, 63, 64, n // 2, n - 65, n - 64, n - 33, n - 2, n - 1,
                        *rng.integers(0, n, 6).tolist()})
        everything = np.arange(n)
        for name in ["auto", *VARIANTS]:
            poison(b)
            T.transpose(a, out=b, algorithm=name)
            for j in picks:
                row = b[j:j + 1, :].to_numpy()[0]            # B[j, :] = A[:, j]
                assert np.array_equal(row, expect(everything, j)), (name, "row", j)
                col = b[:, j:j + 1].to_numpy()[:, 0]         # B[:, j] = A[j, :]
                assert np.array_equal(col, expect(j, everything)), (name, "column", j)
    finally:
        a.free()
        b.free()
        _memory.release_cached()


def _free_memory():
    from cuda.bindings import driver
    from gpumat._driver import check
    gm.device()
    return check(driver.cuMemGetInfo())


# ---------------------------------------------------------------- CPU: tiled_aligned's index arithmetic
# A numpy transcription of transpose_tiled_aligned (cuda/transpose.cu), run on word addresses: A's element
# (r, c) lives at word a0 + r * lda + c, B's element (c, r) at b0 + c * ldb + r (a0, b0 = the pointers / 4,
# so their residues mod 8 are the rows' offsets within 32-byte sectors). Every access of every thread is
# replayed per warp instruction and checked: reads only A's own elements, writes only B's, each of B's
# elements exactly once with the right value, 16-byte accesses aligned, shared-memory slots written once
# per tile and read only after; and, for tiles wholly inside A, that each 32-byte sector of A and of B
# is touched by one warp instruction of the block (whole sectors, no split ones), with bounded bank
# conflicts on the shared-memory side.
_TILE, _LANES, _ROWS_PER_PASS, _PASSES = 64, 16, 16, 4
_U32 = 0xFFFFFFFF


def _slot(j, t, rot):
    u = (t + rot) & (_TILE - 1)
    return j * _TILE + ((((u >> 2) ^ (j >> 2)) & (_LANES - 1)) << 2) + (u & 3)


def _bank_ways(addrs: np.ndarray, warps: np.ndarray) -> int:
    """Worst bank conflict of one 4-byte shared-memory instruction: distinct words per bank, per warp."""
    worst = 0
    for wp in np.unique(warps):
        words = np.unique(addrs[warps == wp])
        worst = max(worst, int(np.bincount(words % 32, minlength=32).max()) if words.size else 0)
    return worst


def _emulate_aligned(rows, cols, lda, ldb, a0, b0):
    tid = np.arange(256)
    lane, sub, warp = tid % _LANES, tid // _LANES, tid // 32
    wrap_lane = lane < 8
    lda_lo, ldb_lo = lda & _U32, ldb & _U32
    skew = (sub & 1) if (lda_lo * ldb_lo) & 3 == 1 else np.zeros_like(sub)
    written: dict[int, float] = {}          # B word -> value
    stats = {"lds_ways": 0, "wrap_lds_ways": 0, "sts16_ok": True, "split_sectors": 0}

    def a_element(words):                    # (row, col) of A at these word addresses; all must be A's
        off = words - a0
        r, c = off // lda, off % lda
        assert (off >= 0).all() and (r < rows).all() and (c < cols).all(), "read outside A's elements"
        return r, c

    for bx in range(-(-cols // _TILE)):
        c0 = bx * _TILE
        w = min(_TILE, cols - c0)
        for t in range(-(-rows // _TILE)):
            r0 = t * _TILE
            h = min(_TILE, rows - r0)
            a_word, b_word = a0 + r0 * lda + c0, b0 + c0 * ldb + r0     # the tile corners
            a_lo, b_lo = a_word & _U32, b_word & _U32                    # the kernel keeps 32 bits of these
            smem = np.full(_TILE * _TILE, np.nan)
            smem_writes = np.zeros(_TILE * _TILE, int)
            read_sectors: list[set] = []     # per warp instruction: the 32-byte sectors it touches
            interior = h == _TILE and w == _TILE

            def load(mask, gwords, swords, width):
                if not mask.any():
                    return
                for k in range(width):
                    g, s_ = gwords[mask] + k, swords[mask] + k
                    r, c = a_element(g)
                    np.add.at(smem_writes, s_, 1)
                    smem[s_] = r * cols + c
                for wp in np.unique(warp[mask]):
                    sel = mask & (warp == wp)
                    read_sectors.append({int(x) for k in range(width) for x in (gwords[sel] + k) // 8})
                if width == 4:
                    assert (gwords[mask] % 4 == 0).all() and (swords[mask] % 4 == 0).all(), "unaligned 16-byte copy"
                    for wp in np.unique(warp[mask]):   # 16-byte accesses go 8 lanes at a time: distinct quads
                        for quarter in range(4):
                            sel = mask & (warp == wp) & ((tid % 32) // 8 == quarter)
                            quads = swords[sel] // 4 % 8
                            stats["sts16_ok"] &= len(set(quads.tolist())) == len(quads)

            # in
            for p in range(_PASSES):
                j = sub + p * _ROWS_PER_PASS
                act = j < h
                word = (a_lo + j * lda_lo) & _U32
                src = a_word + j * lda           # word address of A's row r0 + j, column c0
                m, rot = word & 7, word & 3
                t0 = 4 * lane - m
                chunk = act & ((m == 0) | (lane >= 2))
                full = chunk & (t0 + 4 <= w)
                load(full, src + t0, _slot(j, np.where(full, t0, 0), rot), 4)
                for e in range(3):
                    part = chunk & ~(t0 + 4 <= w) & (t0 + e < w)
                    load(part, src + t0 + e, _slot(j, np.where(part, t0 + e, 0), rot), 1)
                tw = (lane - m) & (_TILE - 1)
                wrap = act & (m != 0) & wrap_lane & (tw < w)
                load(wrap, src + tw, _slot(j, tw, rot), 1)
            jj, tt = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
            own = _slot(jj, tt, (a_lo + jj * lda_lo) & 3)
            assert (smem_writes <= 1).all(), "a shared-memory slot written twice"
            assert smem_writes.sum() == h * w and (smem_writes[own] == 1).all(), "tile not loaded exactly"
            assert (smem[own] == (r0 + jj) * cols + c0 + tt).all(), "tile holds the wrong elements"

            # out: all shared-memory loads, then the stores
            v = np.empty((_PASSES, 4, 256))
            vw = np.empty((_PASSES, 256))
            for p in range(_PASSES):
                i = sub + p * _ROWS_PER_PASS
                m = (b_lo + i * ldb_lo) & 7
                x = np.empty((4, 256))
                for e in range(4):
                    j = (4 * lane - m + ((e + skew) & 3)) & (_TILE - 1)
                    s_ = _slot(j, i, (a_lo + j * lda_lo) & 3)
                    x[e] = smem[s_]
                    stats["lds_ways"] = max(stats["lds_ways"], _bank_ways(s_, warp))
                for e in range(4):
                    v[p, e] = np.where(skew != 0, x[(e + 3) & 3], x[e])
                j = (lane - m) & (_TILE - 1)
                s_ = _slot(j, i, (a_lo + j * lda_lo) & 3)
                on = wrap_lane & (m != 0)
                vw[p] = np.where(on, smem[s_], np.nan)
                if on.any():
                    stats["wrap_lds_ways"] = max(stats["wrap_lds_ways"], _bank_ways(s_[on], warp[on]))
            write_sectors: list[set] = []

            def store(mask, gwords, values, width):
                if not mask.any():
                    return
                if width == 4:
                    assert (gwords[mask] % 4 == 0).all(), "unaligned 16-byte store"
                for k in range(width):
                    for g, x in zip((gwords[mask] + k).tolist(), values[k][mask].tolist()):
                        off = g - b0
                        assert off >= 0 and off // ldb < cols and off % ldb < rows, "wrote outside B's elements"
                        assert g not in written, "a B element written twice"
                        written[g] = x
                for wp in np.unique(warp[mask]):
                    sel = mask & (warp == wp)
                    write_sectors.append({int(x) for k in range(width) for x in (gwords[sel] + k) // 8})

            for p in range(_PASSES):
                i = sub + p * _ROWS_PER_PASS
                act = i < w
                dst = b_word + i * ldb
                m = (b_lo + i * ldb_lo) & 7
                t0 = 4 * lane - m
                chunk = act & ((m == 0) | (lane >= 2))
                full = chunk & (t0 + 4 <= h)
                store(full, dst + t0, v[p], 4)
                for e in range(3):
                    part = chunk & ~(t0 + 4 <= h) & (t0 + e < h)
                    store(part, dst + t0 + e, v[p, e:e + 1], 1)
                j = (lane - m) & (_TILE - 1)
                wrap = act & (m != 0) & wrap_lane & (j < h)
                store(wrap, dst + j, vw[p:p + 1], 1)
            if interior:   # every sector touched by one instruction: whole sectors, or a tile end's part
                for sectors in (read_sectors, write_sectors):
                    seen = [x for s_ in sectors for x in s_]
                    stats["split_sectors"] += len(seen) - len(set(seen))
    # every element of B exactly once, with A's element
    assert len(written) == rows * cols, f"{rows * cols - len(written)} elements of B never written"
    for g, x in written.items():
        c, r = divmod(g - b0, ldb)
        assert x == r * cols + c, ("wrong value", r, c)
    return stats


ALIGNED_CASES = [  # rows, cols, lda, ldb, a0, b0 (a0, b0: word addresses of A and B)
    (1, 1, 1, 1, 0, 64), (1, 1, 5, 3, 3, 101), (1, 200, 200, 1, 1, 1000), (200, 1, 1, 200, 7, 1003),
    (200, 1, 9, 201, 2, 5000), (1, 70, 70, 3, 5, 2000), (64, 64, 64, 64, 0, 8192), (64, 64, 65, 67, 3, 9999),
    (63, 65, 65, 63, 0, 8192), (65, 63, 70, 66, 5, 9002), (128, 128, 129, 131, 1, 40001),
    (130, 190, 191, 133, 6, 50007), (97, 251, 251, 97, 0, 60000), (200, 150, 157, 203, 2, 70004),
    (129, 127, 2**33 + 131, 2**32 + 129, 4, 2**40 + 3),   # strides past 32 bits: 64-bit offsets, low bits kept
    (300, 257, 257, 300, 1, 100000),
]


@pytest.mark.parametrize("case", ALIGNED_CASES, ids=lambda c: "x".join(map(str, c)))
def test_aligned_kernel_index_arithmetic(case):
    _emulate_aligned(*case)


@pytest.mark.parametrize("shape", [(1, 70), (70, 1), (63, 65), (65, 127), (97, 251), (129, 129), (200, 64)])
def test_aligned_kernel_on_the_gpu_tests_views(shape):
    # the views of test_views_with_every_row_alignment (parents start 256-byte aligned: word 0)
    rows, cols = shape
    for k in range(8):
        lda = cols + k
        b_left = (5 * k + 3) % 8
        ldb = rows + b_left + (-2 * k - 3) % 8
        _emulate_aligned(rows, cols, lda, ldb, k, (1 << 30) + 2 * ldb + b_left)


@pytest.mark.parametrize("lda_mod", range(8))
@pytest.mark.parametrize("ldb_mod", range(8))
def test_aligned_kernel_sectors_and_banks_every_stride_class(lda_mod, ldb_mod):
    # 128 x 128 (four whole tiles) with every residue of the strides mod 8 and odd pointers
    for a0, b0 in [(0, 0), (3, 5)]:
        stats = _emulate_aligned(128, 128, 128 + lda_mod, 128 + ldb_mod, a0, 1 << 20 | b0)
        assert stats["split_sectors"] == 0
        assert stats["sts16_ok"]
        assert stats["lds_ways"] <= 2 and stats["wrap_lds_ways"] <= 4, stats
