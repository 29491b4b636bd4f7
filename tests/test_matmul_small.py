"""The small-products rows (cuda/matmul_small.cu, issue 41 item 3): batches of products of at most 256
elements of C (small: one output a thread) or 64 x 64 (small_wide: register tiles of 4 x 8 a lane, a warp's
own matrix up to 32 x 32), several whole matrices a block, A and B read in place in either layout, every dtype;
and small_stream (M, N and K at most 32, float32 and the halves: each warp its chunks of the batch through two
copy stages, 16-byte copies for packed operands).

Without a GPU: the geometry the host and the kernel share, the grid, the arguments, one launch whatever
the batch and layout, auto's use of it. On the GPU: every dtype and layout against a float64 reference on
shapes of 1, primes and around the register tiles' steps, K past the staged chunk, batches past 65535,
operands shared by the batch, padded views and poisoned padded results, the epilogue; bits repeat."""

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support import FAKE_DEVICE, H100, bound_run, load_script, rng

import gpumat as gm
from gpumat._dtypes import BFLOAT16
from gpumat.matmul.engine import (
    BLOCK_STAGE,
    STREAM_COST,
    STREAM_SLICE,
    STREAM_STAGE_BYTES,
    VARIANTS,
    BoundPlan,
    Problem,
    Target,
    block_geometry,
    plan,
    small_chunk,
    small_per_block,
    stream_fits,
    stream_geometry,
    stream_launch,
)

SMALL, WIDE, STREAM = VARIANTS["small"], VARIANTS["small_wide"], VARIANTS["small_stream"]
IN_PLACE, BLOCK = VARIANTS["small_stream_in_place"], VARIANTS["small_stream_block"]
SOURCE = Path(__file__).resolve().parents[1] / "cuda" / "matmul_small.cu"


# ---- without a GPU ----


def test_the_host_s_geometry_is_the_kernel_s():
    src = SOURCE.read_text()
    for line in (
        "constexpr int THREADS = 256;",
        "constexpr int SMEM_BYTES = 16384;",
        "constexpr int PASSES = 4;",
        "const int per_pass = max(1, THREADS / (M * N));",
        "return {per_pass, per_pass * PASSES};",
        "const int kc = max(1, min(min(K, 32), ELEMS / (G * (M + N))));",  # small's staged chunk
        "constexpr int WIDE_THREADS = 128;",
        "constexpr int WIDE_SMEM = 36864;",
        "constexpr int WIDE_KC = 64;",
        "const bool one_warp = M <= 32 && N <= 32;",
        "g.per_block = WIDE_THREADS / g.group;",
        "g.slice = WIDE_SMEM / acc_bytes / g.per_block;",
        "g.kc = max(1, min(min(K, WIDE_KC), (g.slice - g.mp - 4) / (g.mp + 1 + g.np + 4)));",
        "g.kp = g.kc | 1;",
        "g.ns = g.np + 4;",
        "g.b_at = (g.mp * g.kp + 3) / 4 * 4;",
    ):
        assert line in src, line
    assert SMALL.block == (256, 1, 1) and SMALL.smem == 0 and WIDE.block == (128, 1, 1) and WIDE.smem == 36864
    for v in (SMALL, WIDE):
        assert (v.max_m, v.max_n) == (64, 64) and v.packs and v.reads_either_layout
    assert SMALL.max_outputs == 256 and WIDE.max_outputs is None
    assert all(k.name.endswith("_wide") for k in WIDE.kernels.values())


def test_the_host_s_stream_geometry_is_the_kernel_s():
    src = SOURCE.read_text()
    for line in (
        "constexpr int STREAM_THREADS = 128;",
        "constexpr int STREAM_SMEM = 57344;",
        "constexpr int STREAM_BLOCKS_PER_SM = 4;",
        "constexpr int STREAM_STAGE_BYTES = 8192;",
        "const bool narrow = M <= 16 && N <= 16;",
        "g.rm = narrow ? 2 : 4;",
        "g.rn = narrow ? 4 : 8;",
        "const int kpad = (K + 15) / 16 * 16;",  # the halves'
        "g.kp = kpad + 8;",
        "g.ns = 8 * g.rm + 8;",
        "g.b_at = 8 * g.rm * g.kp;",
        "g.staged = ((g.b_at + kpad * g.ns) * 2 + 15) / 16 * 16;",
        "g.kp = K | 1;",  # float32's
        "g.ns = 4 * g.rn + 4;",
        "g.b_at = (8 * g.rm * g.kp + 3) / 4 * 4;",
        "g.staged = ((g.b_at + K * g.ns) * acc_bytes + 15) / 16 * 16;",
        "const int room = max(0, min((slice - g.staged) / 2, max(STREAM_STAGE_BYTES, a_bytes + b_bytes) + 64) - 64);",
        "const int slice_bytes = (int)smem_bytes / (STREAM_THREADS / 32) / 16 * 16;",
        "GPUMAT_STREAM_ENTRY(matmul_small_f64, _stream, false, double, double, 2)",  # STREAM_F64_BLOCKS_PER_SM
        "g.per_chunk = (int)min((long long)(room / (a_bytes + b_bytes)), even);",
        "if (g.per_chunk == 0) __trap();",
        "if (M % 8 != 0 || N % 8 != 0 || K % 8 != 0) __trap();  // a shape the planner refuses",  # in place
        "g.b_raw = (g.per_chunk * a_bytes + 31) / 16 * 16;",
        "g.stage = g.b_raw + (g.per_chunk * b_bytes + 31) / 16 * 16;",
    ):
        assert line in src, line
    assert STREAM.block == (128, 1, 1) and STREAM.smem == 57344 and STREAM.blocks_per_sm == 4
    assert (STREAM.max_m, STREAM.max_n, STREAM.max_k) == (32, 32, 32) and STREAM.packs and STREAM.persistent
    halves = {("f16", "f16"), ("f16", "f32"), ("bf16", "bf16"), ("bf16", "f32")}
    assert set(STREAM.kernels) == {("f32", "f32"), ("f64", "f64"), *halves} and STREAM.sliced
    # its launches size their shared memory: the kernels may opt into one block's most on an SM
    assert all(k.name.endswith("_stream") and k.dynamic_smem == 115712 for k in STREAM.kernels.values())


STREAM_KINDS = {2: ("f16", "f16", "native"), 4: ("f32", "f32", "float32"), 8: ("f64", "f64", "native")}


@given(
    m=st.integers(1, 32),
    n=st.integers(1, 32),
    k=st.integers(1, 32),
    itemsize=st.sampled_from([2, 4, 8]),
    batch=st.integers(1, 10**6),
    max_smem=st.sampled_from([232448, 166912, 101376]),  # sm_90, sm_80, sm_86
)
@example(m=20, n=20, k=20, itemsize=4, batch=20000, max_smem=232448)  # the last float32 at four blocks an SM
@example(m=21, n=21, k=21, itemsize=8, batch=10000, max_smem=232448)  # float64's largest: two blocks an SM
@example(m=24, n=24, k=24, itemsize=8, batch=10000, max_smem=232448)  # past it: none (one block an SM was slow)
@example(m=15, n=16, k=16, itemsize=8, batch=1, max_smem=101376)  # float64 at 16 a side where shared memory is small
def test_small_stream_s_two_stages_and_staged_operands_fit_a_warp_s_slice(m, n, k, itemsize, batch, max_smem):
    target = Target(H100.arch, 132, max_smem, H100.modules)
    launch = stream_launch(m, n, k, itemsize, max_smem)
    p = Problem(m, n, k, *STREAM_KINDS[itemsize], batch=batch)
    if launch is None:  # the planner refuses it, by name and in auto's candidates
        # (past 16 a side; or float64 near 16^3 on an SM of sm_86's shared memory, whose two blocks' warp
        # shares hold no two stages of a 16 x 16 tile pair)
        near = itemsize == 8 and max_smem == 101376 and m * n * k >= 15 * 16 * 16
        assert itemsize >= 4 and (max(m, n, k) > 16 or near) and not stream_fits(m, n, k, itemsize, max_smem)
        two = ((max_smem + 1024) // 2 - 1024) // 4 // 16 * 16  # a warp's share at two blocks an SM
        assert stream_geometry(m, n, k, itemsize, 1, 1, two).per_chunk == 0
        with pytest.raises(ValueError, match="copy stages hold no"):
            plan(p, target, "small_stream")
        assert "small_stream" not in plan(p, target).reason
        return
    per_sm, slice_bytes = launch.blocks_per_sm, launch.slice_bytes
    # four blocks an SM of 14 KiB a warp wherever that holds a matrix (float64: two at most), else the most
    # blocks whose share of the SM holds one: each within the SM's shared memory and a block's most
    most = 2 if itemsize == 8 else 4
    assert 2 <= per_sm <= most and launch.smem == 4 * slice_bytes <= min(max_smem, 115712)
    if per_sm == 4:  # the launch of old, whatever the GPU (one with less shared memory runs fewer at once)
        assert slice_bytes == STREAM_SLICE
    else:
        assert per_sm * (launch.smem + 1024) <= max_smem + 1024
    if per_sm < most:  # one block more an SM: its share holds no matrix
        more = STREAM_SLICE if per_sm + 1 == 4 else ((max_smem + 1024) // (per_sm + 1) - 1024) // 4 // 16 * 16
        assert stream_geometry(m, n, k, itemsize, 1, 1, more).per_chunk == 0
    warps = STREAM.grid(m, n, 1, 132, batch, per_sm)[0] * 4
    g = stream_geometry(m, n, k, itemsize, batch, warps, slice_bytes)
    named = plan(p, target, "small_stream")
    assert named.smem == launch.smem and named.grid == (warps // 4, 1, 1)
    assert (g.rm, g.rn) == ((2, 4) if m <= 16 and n <= 16 else (4, 8)) and m <= 8 * g.rm and n <= 4 * g.rn
    if itemsize == 2:  # the halves as they are: rows 16 bytes past a multiple of 32 (ldmatrix's 8 rows)
        kpad = math.ceil(k / 16) * 16
        assert g.kp == kpad + 8 and g.ns == 8 * g.rm + 8 and (2 * g.kp) % 32 == 16 and (2 * g.ns) % 32 == 16
        assert g.b_at == 8 * g.rm * g.kp and g.staged >= (g.b_at + kpad * g.ns) * 2
    else:  # float32 and float64: A's rows an odd stride, B's on 16 bytes
        assert g.kp % 2 == 1 and g.kp >= k and g.ns % 4 == 0 and g.b_at % 4 == 0
        assert g.staged >= (g.b_at + k * g.ns) * itemsize and g.b_at >= 8 * g.rm * g.kp
    assert g.staged % 16 == 0
    a_bytes, b_bytes = m * k * itemsize, k * n * itemsize
    # each run with up to 15 bytes before it (its copy starts on a 16-byte boundary) and its last piece
    assert g.b_raw % 16 == 0 and g.b_raw >= g.per_chunk * a_bytes + 15
    assert g.stage % 16 == 0 and g.stage - g.b_raw >= g.per_chunk * b_bytes + 15
    # a stage holds at most STREAM_STAGE_BYTES of matrices, or one matrix where one is more
    most_bytes = max(STREAM_STAGE_BYTES, a_bytes + b_bytes)
    assert g.staged + 2 * g.stage <= slice_bytes and g.per_chunk * (a_bytes + b_bytes) <= most_bytes
    assert 1 <= g.per_chunk <= max(1, math.ceil(batch / warps))
    if g.per_chunk < math.ceil(batch / warps):  # one more matrix would not fit a stage
        assert (g.per_chunk + 1) * (a_bytes + b_bytes) > min((slice_bytes - g.staged) // 2 - 64, most_bytes)
    gx, gy, gz = STREAM.grid(m, n, 1, 132, batch, per_sm)
    assert (gy, gz) == (1, 1) and gx == min(math.ceil(batch / 4), 132 * per_sm)


def test_the_host_s_block_geometry_is_the_kernel_s():
    src = SOURCE.read_text()
    for line in (
        "constexpr int BLOCK_MULTIPLE = 8;",
        "constexpr int BLOCK_MAX = 64;",
        "constexpr int BLOCK_STAGE = STREAM_SMEM / 2;",
        "__device__ __forceinline__ int spaced_row_bytes(int inner) { return 16 * (inner / 8 | 1); }",
        "g.a_ld = spaced_row_bytes(ta ? M : K);",
        "g.b_ld = spaced_row_bytes(tb ? K : N);",
        "g.a_bytes = (ta ? K : M) * g.a_ld;",
        "g.b_bytes = (tb ? N : K) * g.b_ld;",
        "const long long even = (batch + blocks - 1) / blocks, fits = BLOCK_STAGE / (g.a_bytes + g.b_bytes);",
        "const long long walks = fits ? (even + fits - 1) / fits : 1;",
        "g.per_chunk = fits ? (int)((even + walks - 1) / walks) : 0;",
        "g.b_raw = g.per_chunk * g.a_bytes;",
        "g.stage = g.b_raw + g.per_chunk * g.b_bytes;",
        "const BlockGeometry g = block_geometry(M, N, K, ta != 0, tb != 0, batch, gridDim.x);",
        "if (M % step != 0 || N % step != 0 || K % step != 0 || max(M, max(N, K)) > most || g.per_chunk == 0)",
    ):
        assert line in src, line
    assert BLOCK_STAGE == 57344 // 2
    assert (BLOCK.block, BLOCK.smem, BLOCK.blocks_per_sm) == (STREAM.block, STREAM.smem, STREAM.blocks_per_sm)
    assert (BLOCK.max_m, BLOCK.max_n, BLOCK.max_k, BLOCK.shape_multiple) == (64, 64, 64, 8)
    assert BLOCK.packs and BLOCK.persistent and BLOCK.block_chunks and BLOCK.reads_either_layout
    assert set(BLOCK.kernels) == {("f16", "f16"), ("f16", "f32"), ("bf16", "bf16"), ("bf16", "f32")}
    assert all(k.name.endswith("_stream_block") and k.dynamic_smem == 57344 for k in BLOCK.kernels.values())


@given(data=st.data(), batch=st.integers(1, 10**6), ta=st.booleans(), tb=st.booleans())
def test_small_stream_block_s_stages_hold_every_shape_it_computes(data, batch, ta, tb):
    """Two stages in a block's 56 KiB, each holding at least one product of every shape the row computes
    (sides multiples of 8 up to 64), its stored rows an odd number of 16-byte pieces apart (ldmatrix's eight
    rows on eight bank groups); one block a product at least, four blocks an SM at most."""
    m, n, k = (data.draw(st.sampled_from(range(8, 65, 8))) for _ in range(3))
    blocks = BLOCK.grid(m, n, 1, 132, batch)[0]
    assert blocks == min(batch, 528)
    g = block_geometry(m, n, k, ta, tb, batch, blocks)
    for ld, inner in ((g.a_ld, m if ta else k), (g.b_ld, k if tb else n)):
        assert ld % 16 == 0 and (ld // 16) % 2 == 1 and 2 * inner <= ld <= 2 * inner + 16
        assert len({(r * ld // 16) % 8 for r in range(8)}) == 8  # eight rows, eight bank groups
    assert g.a_bytes == (k if ta else m) * g.a_ld and g.b_bytes == (n if tb else k) * g.b_ld
    assert 1 <= g.per_chunk <= math.ceil(batch / blocks) and 2 * g.stage <= BLOCK.smem
    assert g.b_raw == g.per_chunk * g.a_bytes and g.stage == g.b_raw + g.per_chunk * g.b_bytes
    # the chunks: as few a block as a stage allows, and the busiest block's products no more than the
    # batch over the blocks (rounded up) and one chunk (one product a walk: the chunks are even)
    even, fits = math.ceil(batch / blocks), BLOCK_STAGE // (g.a_bytes + g.b_bytes)
    walks = math.ceil(math.ceil(batch / g.per_chunk) / blocks)
    assert walks == math.ceil(even / fits)
    assert even <= walks * g.per_chunk < even + walks


# small_stream_block's lanes (cuda/matmul_small.cu, spaced_lanes and block_row_tile) as the kernel writes them
BLOCK_LANE_LINES = (
    "const int a_kstride = ta ? g.a_ld : 2, b_kstride = tb ? 2 : g.b_ld;  // bytes between neighbouring k",
    "d.a_row = ta ? 8 * bit3 : r8 + 8 * bit3;",
    "d.a_last = ta ? M - 8 : M - 1;",
    "d.a_row_bytes = ta ? 2 : g.a_ld;",
    "d.a_k = (ta ? r8 + 8 * bit4 : 8 * bit4) * a_kstride;",
    "d.b_col = tb ? r8 + 8 * bit4 : 8 * bit4;",
    "d.b_last = tb ? N - 1 : N - 8;",
    "d.b_col_bytes = tb ? g.b_ld : 2;",
    "d.b_k = (tb ? 8 * bit3 : r8 + 8 * bit3) * b_kstride;",
    "d.a_tail = bit4 ? (uint32_t)(-8 * a_kstride) : 0u;  // the lanes of k + 8..15",
    "d.b_tail = bit3 ? (uint32_t)(-8 * b_kstride) : 0u;",
    "row_tile_products<NT, T>(acc, a_base + d.a_at(i), b_base + d.b_at(NT / 2 * g), b_base + d.b_at(NT / 2 * g + 1),",
    "const uint32_t at = (jj ? b_addr1 : b_addr0) + (tail ? b_tail : 0u);",
    "gpumat::Mma<T>::run(acc[j], af, bf[j / 2][2 * (j & 1)], bf[j / 2][2 * (j & 1) + 1]);",
)


def _ldmatrix(addresses, element, trans):
    """What each lane holds after ldmatrix .x4 (.trans): lane l points at row l % 8 of 8 x 8 matrix l // 8 (8
    halves from its address); register j of lane L is matrix j's (L / 4, 2 (L % 4) and on), or transposed."""
    mats = [[[element(addresses[8 * j + i] + 2 * e) for e in range(8)] for i in range(8)] for j in range(4)]
    if trans:
        return [[(m[2 * (L % 4)][L // 4], m[2 * (L % 4) + 1][L // 4]) for m in mats] for L in range(32)]
    return [[(m[L // 4][2 * (L % 4)], m[L // 4][2 * (L % 4) + 1]) for m in mats] for L in range(32)]


def _block_lanes(g, m: int, n: int, ta: bool, tb: bool) -> list[dict]:
    """spaced_lanes for each lane: (first row or column, the last, bytes a step) of A and B, their k offsets,
    k steps and tail offsets, in bytes."""
    lanes = []
    for lane in range(32):
        r8, bit3, bit4 = lane & 7, (lane >> 3) & 1, lane >> 4
        a_kstride, b_kstride = (g.a_ld if ta else 2), (2 if tb else g.b_ld)
        lanes.append(
            {
                "a": (8 * bit3 if ta else r8 + 8 * bit3, m - 8 if ta else m - 1, 2 if ta else g.a_ld),
                "a_k": (r8 + 8 * bit4 if ta else 8 * bit4) * a_kstride,
                "b": (r8 + 8 * bit4 if tb else 8 * bit4, n - 1 if tb else n - 8, g.b_ld if tb else 2),
                "b_k": (8 * bit3 if tb else r8 + 8 * bit3) * b_kstride,
                "a_step": 16 * a_kstride,
                "b_step": 16 * b_kstride,
                "a_tail": -8 * a_kstride if bit4 else 0,
                "b_tail": -8 * b_kstride if bit3 else 0,
            }
        )
    return lanes


def _lane_at(d: dict, which: str, t: int) -> int:
    """SpacedLanes.a_at(t) or b_at(t)."""
    first, last, stride = d[which]
    return min(16 * t + first, last) * stride + d[which + "_k"]


def _element_of(copy_bytes: int, ld: int, inner: int, swap: bool):
    """A byte of an operand's copy in a stage -> its logical (row, column) ((m, k) for A, (k, n) for B),
    asserting the read lies inside the copy and its stored row."""

    def element(at: int) -> tuple[int, int]:
        assert 0 <= at < copy_bytes, ("a read outside the product's copy", at)
        row, col = at // ld, at % ld // 2
        assert col < inner, ("a read past a stored row", at)
        return (col, row) if swap else (row, col)

    return element


def _block_unit_fragments(m, n, k, ta, tb, g, lanes, i, grp, nt):
    """One unit's k loop (row tile i, column group grp): each step's fragments against mma.sync's."""
    a_element = _element_of(g.a_bytes, g.a_ld, m if ta else k, ta)
    b_element = _element_of(g.b_bytes, g.b_ld, k if tb else n, tb)
    a_at = [_lane_at(d, "a", i) for d in lanes]
    b_at = [[_lane_at(d, "b", nt // 2 * grp + jj) for d in lanes] for jj in range(nt // 2)]
    for k0 in range(0, k, 16):
        tail = k0 + 16 > k
        af = _ldmatrix([x + tail * d["a_tail"] for x, d in zip(a_at, lanes, strict=True)], a_element, ta)
        bf = [
            _ldmatrix([x + tail * d["b_tail"] for x, d in zip(row, lanes, strict=True)], b_element, not tb)
            for row in b_at
        ]
        for lane in range(32):
            gq, tq = lane // 4, lane % 4
            for r in range(2 if tail else 4):  # a2 and a3 zeroed on a tail step
                row = 16 * i + gq + 8 * (r % 2)
                want = [(row, k0 + 2 * tq + 8 * (r // 2) + e) for e in range(2)]
                assert row >= m or list(af[lane][r]) == want, (i, k0, lane, r, af[lane][r], want)
            for j in range(nt):
                col = 8 * (nt * grp + j) + gq
                for q in range(1 if tail else 2):  # b1 zeroed on a tail step
                    want = [(k0 + 2 * tq + 8 * q + e, col) for e in range(2)]
                    got = bf[j // 2][lane][2 * (j & 1) + q]
                    assert col >= n or list(got) == want, (i, grp, k0, lane, j, q, got, want)
        a_at = [x + d["a_step"] for x, d in zip(a_at, lanes, strict=True)]
        b_at = [[x + d["b_step"] for x, d in zip(row, lanes, strict=True)] for row in b_at]


@given(
    m=st.sampled_from(range(8, 65, 8)),
    n=st.sampled_from(range(8, 65, 8)),
    k=st.sampled_from(range(8, 65, 8)),
    ta=st.booleans(),
    tb=st.booleans(),
)
def test_small_stream_block_gives_every_lane_the_fragments_mma_wants(m, n, k, ta, tb):
    """A model of the kernel's addressing (its lines pinned in BLOCK_LANE_LINES): every ldmatrix row a lane
    points at lies inside the product's copy, and every fragment register holds the elements mma.sync
    m16n8k16 wants there (A: (g, 2t), (g + 8, 2t), (g, 2t + 8), (g + 8, 2t + 8); B: (2t, g), (2t + 8, g));
    rows past M and columns past N are never stored, a last k step of 8 has its upper pieces zeroed; the
    stores cover C."""
    src = SOURCE.read_text()
    for line in BLOCK_LANE_LINES:
        assert line in src, line
    g = block_geometry(m, n, k, ta, tb, 1, 1)
    lanes = _block_lanes(g, m, n, ta, tb)
    nt = 2 if n <= 16 else 4
    stored = set()
    for i in range((m + 15) // 16):
        for grp in range(64 // (8 * nt)):
            if nt * grp >= n // 8:
                break
            _block_unit_fragments(m, n, k, ta, tb, g, lanes, i, grp, nt)
            rows = [16 * i + 8 * h for h in range(2) if 2 * i + h < m // 8]  # the stores: pieces inside M and N
            cols = [8 * (nt * grp + j) for j in range(nt) if nt * grp + j < n // 8]
            stored |= {
                (r + x // 4, c + 2 * (x % 4) + e) for r in rows for c in cols for x in range(32) for e in range(2)
            }
    assert stored == {(r, c) for r in range(m) for c in range(n)}


def test_small_stream_block_computes_the_halves_multiples_of_8_up_to_64():
    """The halves' products of sides multiples of 8 up to 64, any layout, one block a product at least."""
    for m, n, k in ((12, 16, 16), (72, 8, 8), (8, 8, 68), (48, 48, 44)):
        with pytest.raises(ValueError, match="multiples of 8 at most 64"):
            plan(Problem(m, n, k, "f16", "f16", "native", batch=2), H100, "small_stream_block")
    with pytest.raises(ValueError):
        plan(Problem(16, 16, 16, "f32", "f32", "float32", batch=2), H100, "small_stream_block")
    for m, n, k, batch in ((64, 64, 64, 3000), (48, 40, 56, 5000), (8, 8, 8, 100000), (64, 8, 64, 7)):
        for a_trans, b_trans in ((False, False), (True, True)):
            p = Problem(m, n, k, "bf16", "f32", "native", batch=batch, a_trans=a_trans, b_trans=b_trans)
            q = plan(p, H100, "small_stream_block")
            assert q.kernel.name == "matmul_small_bf16_f32out_stream_block" and q.grid == (min(batch, 528), 1, 1)
            assert not (q.copy_a or q.copy_b) and q.seconds > 0


@given(m=st.integers(1, 64), n=st.integers(1, 64), k=st.integers(1, 300), batch=st.integers(1, 10**6))
def test_the_grid_covers_the_batch_with_whole_matrices_a_block(m, n, k, batch):
    for v, wide in ((SMALL, False), (WIDE, True)):
        if not v.computes_shape(m, n):
            assert m * n > 256 and not wide
            continue
        g = small_per_block(m, n, wide)
        if wide:  # a warp a matrix up to 32 x 32, else the block's four warps a quarter each
            assert g == (4 if m <= 32 and n <= 32 else 1)
        else:  # one output a thread, four matrices over
            assert g == max(1, 256 // (m * n)) * 4
        gx, gy, gz = v.grid(m, n, 1, 132, batch)
        assert (gy, gz) == (1, 1) and (gx - 1) * g < batch <= gx * g


@given(m=st.integers(1, 64), n=st.integers(1, 64), k=st.integers(1, 300), itemsize=st.sampled_from([2, 4, 8]))
def test_small_wide_s_staged_chunk_fits_its_share_of_shared_memory(m, n, k, itemsize):
    kc = small_chunk(m, n, k, itemsize, True)
    acc = 8 if itemsize == 8 else 4
    mp, np_ = math.ceil(m / 32) * 32, math.ceil(n / 32) * 32
    kp = kc | 1  # A's rows: an odd stride
    b_at = math.ceil(mp * kp / 4) * 4  # B 16-byte aligned
    used = b_at + kc * (np_ + 4)
    assert 1 <= kc <= min(k, 64) and kp % 2 == 1
    assert used * acc * small_per_block(m, n, True) <= 36864
    if kc < min(k, 64):  # a chunk one longer would not fit a group's share
        assert (mp + (kc + 1) * (mp + 1 + np_ + 4) + 4) * acc * small_per_block(m, n, True) > 36864


@pytest.mark.parametrize("row, k, blocks", [("small_wide", 40, math.ceil(70000 / 4)), ("small_stream", 31, 528)])
def test_a_batch_is_one_launch_in_any_layout_with_no_copy(monkeypatch, row, k, blocks):
    m, n, batch = 16, 24, 70000  # past the grid's 65535 layers: one launch still
    for ta in (False, True):
        for tb in (False, True):
            q = plan(Problem(m, n, k, "f16", "f16", "native", batch=batch, a_trans=ta, b_trans=tb), H100, row)
            assert not (q.copy_a or q.copy_b) and q.grid == (blocks, 1, 1)
            assert BoundPlan(q, FAKE_DEVICE).shape == "direct"
            a = (0x7F0000000000, m if ta else k, m * k)
            b = (0x7F0010000000, k if tb else n, 0)  # one B for the batch
            c = (0x7F0020000000, n, m * n)
            _, launches, copies = bound_run(monkeypatch, q, a, b, c)
            assert copies == [] and len(launches) == 1
            name, grid, block, args, _ = launches[0]
            assert name == "matmul_small_f16_" + row[6:] and grid == q.grid and block == (128, 1, 1)
            assert args[:15] == (
                a[0],
                b[0],
                c[0],
                m,
                n,
                k,
                a[1],
                b[1],
                c[1],
                batch,
                int(ta),
                int(tb),
                *(m * k, 0, m * n),
            )


def test_auto_weighs_it_for_batches_of_small_products_and_never_for_one():
    for sfx in ("f32", "f64", "f16", "bf16"):
        mode = "float32" if sfx == "f32" else "native"
        for side in (2, 16, 32):
            many = plan(Problem(side, side, side, sfx, sfx, mode, batch=4096), H100)
            # among the candidates (the matrix-vector rows' too); float64 past 256 outputs has none: small_wide
            # is its only by name
            rows = [] if sfx == "f64" and side * side > 256 else ["small" if side * side <= 256 else "small_wide"]
            assert all(f"{row} " in many.reason for row in rows), many.reason
            assert (sfx == "f64") == ("small_wide " not in many.reason), many.reason
            one = plan(Problem(side, side, side, sfx, sfx, mode), H100)
            assert one.algorithm != "small"
    with pytest.raises(ValueError, match="at most 64 x 64"):
        plan(Problem(65, 8, 8, "f32", "f32", "float32", batch=2), H100, "small_wide")
    with pytest.raises(ValueError, match="and 256 elements"):
        plan(Problem(17, 16, 8, "f32", "f32", "float32", batch=2), H100, "small")
    with pytest.raises(ValueError, match="M, N and K at most 32"):
        plan(Problem(16, 16, 33, "f32", "f32", "float32", batch=2), H100, "small_stream")
    # float64's 20^3 stages need two blocks' share of an H100's SM: an sm_86 SM's half holds none
    with pytest.raises(ValueError, match="copy stages hold no"):
        plan(Problem(20, 20, 20, "f64", "f64", "native", batch=2), Target(86, 84, 101376, H100.modules), "small_stream")
    plan(Problem(20, 20, 20, "f64", "f64", "native", batch=2), H100, "small_stream")


def test_auto_streams_batches_of_tiny_float32_and_half_products():
    """The halves' sides that are multiples of 8 read in place (small_stream_in_place), the rest staged."""
    for sfx in ("f32", "f16", "bf16"):
        mode = "float32" if sfx == "f32" else "native"
        for side in (8, 12, 16) if sfx == "f32" else (8, 12, 16, 20, 24, 32):
            q = plan(Problem(side, side, side, sfx, sfx, mode, batch=20000), H100)
            in_place = sfx != "f32" and side % 8 == 0
            assert q.algorithm == ("small_stream_in_place" if in_place else "small_stream"), (sfx, side, q.reason)
            assert ("small_stream_in_place " in q.reason) == in_place, q.reason
        assert "small_stream" not in plan(Problem(32, 32, 33, sfx, sfx, mode, batch=20000), H100).reason


def test_small_stream_in_place_computes_the_halves_multiples_of_8_alone():
    assert (IN_PLACE.max_m, IN_PLACE.max_n, IN_PLACE.max_k, IN_PLACE.shape_multiple) == (32, 32, 32, 8)
    # K unknown (the matrix-vector and swap checks ask so): M and N alone
    assert (
        IN_PLACE.computes_shape(8, 32) and not IN_PLACE.computes_shape(8, 12) and not IN_PLACE.computes_shape(8, 8, 4)
    )
    assert set(IN_PLACE.kernels) == {("f16", "f16"), ("f16", "f32"), ("bf16", "bf16"), ("bf16", "f32")}
    assert all(k.name.endswith("_stream_in_place") and k.dynamic_smem == 57344 for k in IN_PLACE.kernels.values())
    assert (IN_PLACE.block, IN_PLACE.smem, IN_PLACE.blocks_per_sm) == (STREAM.block, STREAM.smem, STREAM.blocks_per_sm)
    for m, n, k in ((12, 16, 16), (16, 12, 16), (16, 16, 12), (40, 8, 8)):
        with pytest.raises(ValueError, match="multiples of 8 at most 32"):
            plan(Problem(m, n, k, "f16", "f16", "native", batch=2), H100, "small_stream_in_place")
    with pytest.raises(ValueError):
        plan(Problem(16, 16, 16, "f32", "f32", "float32", batch=2), H100, "small_stream_in_place")
    for m, n, k in ((8, 8, 8), (8, 32, 24), (32, 16, 8)):
        p = Problem(m, n, k, "bf16", "f32", "native", batch=5000, a_trans=True)
        q = plan(p, H100, "small_stream_in_place")
        assert q.kernel.name == "matmul_small_bf16_f32out_stream_in_place" and q.grid == STREAM.grid(m, n, 1, 132, 5000)
        # nothing staged: the model charges no staged rows, so it is below the staged row's
        assert q.seconds < plan(p, H100, "small_stream").seconds


def test_small_stream_in_place_s_costs_are_the_fit_of_their_probe():
    """STREAM_COST's in-place row is benchmarks/fit_stream_costs.py's fit of the committed probe (the model's
    own terms, nonnegative least squares with a constant), so the constants stay measured data."""
    import json

    fitting = load_script("benchmarks/fit_stream_costs.py")
    probe = (
        Path(__file__).resolve().parents[1]
        / "benchmarks"
        / "results"
        / "probe-stream-in-place-nvidia-h200-2026-12-01.json"
    )
    costs, constant, fitted = fitting.fit(json.loads(probe.read_text()), "small_stream_in_place", 2)
    assert len(fitted) == 34
    for got, want in zip(costs, STREAM_COST["small_stream_in_place", 2], strict=True):
        assert abs(got - want) <= 0.02 * want + 1e-12, (costs, STREAM_COST["small_stream_in_place", 2])
    assert 2e-6 < constant < 2.5e-6  # the launch's own cost and first chunk: fixed_s + wave_floor_s is 2.3 us
    assert abs(IN_PLACE.fixed_s + IN_PLACE.wave_floor_s - constant) < 0.1e-6
    assert all(0.7 < measured / model < 1.2 for _, measured, model in fitted)


def _sliced_probe() -> dict:
    import json

    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    return json.loads((results / "probe-stream-sliced-nvidia-h200-2026-12-01.json").read_text())


@pytest.mark.parametrize("itemsize", [4, 8])
def test_small_stream_s_float32_and_float64_costs_are_the_fit_of_their_probe(itemsize):
    """small_stream's float32 and float64 rows of STREAM_COST are benchmarks/fit_stream_costs.py's relative fit
    of the committed probe's timings of the products it launches (three and two blocks an SM among them), the
    row's fixed_s + wave_floor_s held."""
    fitting = load_script("benchmarks/fit_stream_costs.py")
    costs, constant, fitted = fitting.fit(_sliced_probe(), "small_stream", itemsize, relative=True, row_constant=True)
    assert len(fitted) == {4: 29, 8: 19}[itemsize]  # float64 past about 21^3 has no launch: not among them
    for got, want in zip(costs, STREAM_COST["small_stream", itemsize], strict=True):
        assert abs(got - want) <= 0.01 * want + 1e-12, (costs, STREAM_COST["small_stream", itemsize])
    assert constant == STREAM.fixed_s + STREAM.wave_floor_s
    # the far ones float64's products of unequal sides (8 x 32 x 16 0.68, 7 x 13 x 29, 12 x 20 x 8 and 32 x 16
    # x 8 1.3-1.77): the model's terms count a warp's 4 x 8 tiles, not how much of them C fills
    assert all(0.65 < measured / model < 1.8 for _, measured, model in fitted)
    assert sum(0.75 < measured / model < 1.3 for _, measured, model in fitted) >= len(fitted) - 4


def test_auto_picks_within_the_sliced_probe_s_fastest_timed_plans():
    """On the committed probe of float32 and float64 batches of 1-32 a side (every small-products row timed by
    name, the tiles too), auto's plan is one whose timing is within 25% of the fastest of the rows auto may
    take, and within 3% on average; it takes small_stream where it was fastest by 20% and more (float32
    32 x 1 x 32 and 32 x 8 x 32 at three blocks an SM, float64 16^3 at two), and never a float64 product of
    24^3 or 32^3 (one block an SM, 1.5-1.9x the tiles' time: not a launch)."""
    slowdowns = []
    for c in _sliced_probe()["cases"]:
        sfx, mode = ("f32", "float32") if c["dtype"] == "float32" else ("f64", "native")
        layout = c["layout"]
        p = Problem(
            c["M"], c["N"], c["K"], sfx, sfx, mode, batch=c["batch"], a_trans=layout[0] == "T", b_trans=layout[1] == "T"
        )
        timed = {r: c[r]["us"] for r in c if isinstance(c[r], dict) and r != "auto"}
        timed.setdefault(c["auto"]["algorithm"], c["auto"]["us"])  # the tiles' layout rows, as auto ran them
        timed = {r: us for r, us in timed.items() if VARIANTS[r].auto_may_take(sfx)}  # (small_wide: no float64)
        chosen = plan(p, H100).algorithm
        if chosen not in timed:  # a tile row for a layout the probe did not time by name: not this test's
            continue
        slowdowns.append(timed[chosen] / min(timed.values()))
        assert slowdowns[-1] < 1.25, (c["dtype"], c["batch"], c["M"], c["N"], c["K"], layout, chosen, timed)
        fastest = min(timed, key=timed.get)
        if fastest == "small_stream" and min(v for r, v in timed.items() if r != fastest) > 1.2 * timed[fastest]:
            assert chosen == "small_stream", (c["M"], c["N"], c["K"], timed)
        if sfx == "f64" and min(c["M"], c["N"], c["K"]) >= 24:  # (one block an SM: 1.5-1.9x the tiles)
            assert chosen != "small_stream" and stream_launch(c["M"], c["N"], c["K"], 8) is None
    # (float64's products past 16 a side go to dmma32x32, which this probe did not time: test_matmul_dmma.py judges
    # auto there on the probe that did)
    assert len(slowdowns) >= 40 and sum(slowdowns) / len(slowdowns) < 1.03


def _block_probe() -> dict:
    import json

    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    return json.loads((results / "probe-stream-block-nvidia-h200-2026-12-01.json").read_text())


def test_small_stream_block_s_costs_are_the_fit_of_their_probe():
    """STREAM_COST's small_stream_block row is benchmarks/fit_stream_costs.py's relative fit of the committed
    probe's products that auto gives the row (a side past auto_past_side), its constant the row's fixed_s +
    wave_floor_s."""
    fitting = load_script("benchmarks/fit_stream_costs.py")
    probe = _block_probe()
    costs, constant, fitted = fitting.fit(probe, "small_stream_block", 2, relative=True, past_side=BLOCK.auto_past_side)
    assert len(fitted) == 19
    for got, want in zip(costs, STREAM_COST["small_stream_block", 2], strict=True):
        assert abs(got - want) <= 0.02 * want + 1e-12, (costs, STREAM_COST["small_stream_block", 2])
    assert abs(BLOCK.fixed_s + BLOCK.wave_floor_s - constant) < 0.1e-6, constant
    assert all(0.85 < measured / model < 1.2 for _, measured, model in fitted)


def test_auto_s_picks_on_the_block_probe_run_near_the_fastest_timed_plan():
    """Over the committed probe of the halves' tiny products (1-64 a side, every layout; small_stream_block,
    mma64x64 and that run's auto pick timed on the H200), auto's plan today, wherever that run timed it,
    runs within 10% of the fastest plan the run timed, and small_stream_in_place wherever it ran fastest; and
    most cases are checked."""
    checked = 0  # (support.H100's target: 132 SMs and sm_90, as the H200 has)
    for c in _block_probe()["cases"]:
        layout = c["layout"]
        p = Problem(
            c["M"],
            c["N"],
            c["K"],
            "f16",
            "f16",
            "native",
            batch=c["batch"],
            a_trans=layout[0] == "T",
            b_trans=layout[1] == "T",
        )
        timed = {name: r["us"] for name, r in c.items() if isinstance(r, dict) and name != "auto"}
        timed[c["auto"]["algorithm"]] = min(c["auto"]["us"], timed.get(c["auto"]["algorithm"], math.inf))
        pick, fastest = plan(p, H100).algorithm, min(timed, key=timed.get)
        if pick in timed:
            checked += 1
            assert timed[pick] <= 1.1 * timed[fastest], (c, pick, timed)
        if fastest == "small_stream_in_place":  # every product within 32 a side the probe timed
            assert pick == fastest, (c, pick, timed)
    assert checked >= 30


def test_a_tensor_core_mode_runs_a_batch_of_tiny_products_as_exact_fp32():
    for mode in ("tf32", "tf32x3"):
        q = plan(Problem(16, 16, 16, "f32", "f32", mode, batch=4096), H100)
        assert q.problem.mode == "float32" and "exact FP32" in q.reason


# ---- on the GPU ----

KINDS = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": BFLOAT16}
ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2}
EPS = {"float32": 2.0**-24, "float64": 2.0**-53, "float16": 2.0**-24, "bfloat16": 2.0**-24}
RESULT_EPS = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
SIDES = [1, 2, 3, 5, 7, 8, 13, 15, 16, 17, 31, 32, 33, 47, 63, 64]


def tolerance(kind: str, k: int) -> float:
    eps = EPS[kind]
    return 8 * eps * math.sqrt(max(k, 1)) + RESULT_EPS.get(kind, eps)


def host_random(shape, dtype):
    return rng.uniform(-1, 1, size=shape).astype(np.float32).astype(dtype)


def upload(host: np.ndarray, transposed: bool, pad: int | None):
    """host ((batch,) rows, cols) on the GPU inside storage `pad` columns and one row wider a matrix (odd
    offsets and strides), or with pad None packed (the batch one run of whole matrices), stored transposed
    and read through .T when asked: (view, parent)."""
    store = np.swapaxes(host, -1, -2) if transposed else host
    if pad is None:
        parent = gm.Matrix.from_numpy(np.ascontiguousarray(store))
        return (parent.T if transposed else parent), parent
    shape = list(store.shape)
    shape[-2] += 1
    shape[-1] += pad
    parent_host = host_random(shape, host.dtype)
    rows, cols = slice(1, 1 + store.shape[-2]), slice(pad, pad + store.shape[-1])
    parent_host[..., rows, cols] = store
    parent = gm.Matrix.from_numpy(parent_host)
    view = parent[:, rows, cols] if store.ndim == 3 else parent[rows, cols]
    return (view.T if transposed else view), parent


def check(kind, got, a_host, b_host, k, what):
    a64, b64 = a_host.astype(np.float64), b_host.astype(np.float64)
    ref, scale = np.matmul(a64, b64), np.matmul(np.abs(a64), np.abs(b64))
    got = got.astype(np.float64)
    assert not np.isnan(got).any(), f"an element not written {what}"
    err = np.abs(got - ref) / np.maximum(scale, 2.0**-14)
    assert err.max() <= tolerance(kind, k), (err.max(), what)


@st.composite
def cases(draw):
    return {
        "kind": draw(st.sampled_from(list(KINDS))),
        "m": draw(st.sampled_from(SIDES)),
        "n": draw(st.sampled_from(SIDES)),
        "k": draw(st.sampled_from([1, 2, 7, 16, 31, 32, 33, 64, 100, 257])),
        # past 1056 (small_stream's warps on 132 SMs): a warp walks several chunks through both stages
        "batch": draw(st.sampled_from([1, 2, 3, 17, 255, 1000, 2113, 20011])),
        "shared": draw(st.sampled_from(["none", "a", "b"])),
        "ta": draw(st.booleans()),
        "tb": draw(st.booleans()),
        # None: packed (small_stream's 16-byte copies; a run starting mid-piece where a matrix's bytes are
        # not a multiple of 16)
        "pads": [draw(st.sampled_from([None, 0, 1, 2, 3])) for _ in range(2)] + [draw(st.integers(0, 3))],
        # by name, where it computes
        "row": draw(st.sampled_from(["small", "small_wide", "small_stream", "small_stream_in_place"])),
    }


def row_for(case) -> str:
    """The case's row, or the next that computes its shape and dtype (small_wide computes them all)."""
    m, n, k, row = case["m"], case["n"], case["k"], case["row"]
    if row == "small_stream_in_place" and not (ITEMSIZE[case["kind"]] == 2 and IN_PLACE.computes_shape(m, n, k)):
        row = "small_stream"
    if row == "small_stream" and not stream_fits(m, n, k, ITEMSIZE[case["kind"]]):
        row = "small"
    if row == "small" and m * n > 256:
        row = "small_wide"
    return row


def product_against_reference(case, algorithm: str, out_dtype=None):
    """The case's product by `algorithm` (A and B uploaded as the case says, C a view one row and pads[2]
    columns into NaN-filled storage, or with c_one_in one row and one column into storage two columns wider, of
    out_dtype or the case's dtype) in one launch with no copy, against a float64 reference, and nothing
    written outside C."""
    kind, m, n, k, batch = (case[x] for x in ("kind", "m", "n", "k", "batch"))
    dtype = KINDS[kind]
    a_host = host_random((m, k) if case["shared"] == "a" else (batch, m, k), dtype)
    b_host = host_random((k, n) if case["shared"] == "b" else (batch, k, n), dtype)
    a, pa = upload(a_host, case["ta"], case["pads"][0])
    b, pb = upload(b_host, case["tb"], case["pads"][1])
    if case.get("c_one_in"):  # and one row down, as below: a batch of Cs a row apart folds into one product
        pc = gm.Matrix.from_numpy(np.full((batch, m + 1, n + 2), np.nan, out_dtype or dtype))
        out, inside = pc[:, 1:, 1 : n + 1], (slice(None), slice(1, None), slice(1, n + 1))
    else:
        pc = gm.Matrix.from_numpy(np.full((batch, m + 1, n + case["pads"][2]), np.nan, out_dtype or dtype))
        out, inside = pc[:, 1:, case["pads"][2] :], (slice(None), slice(1, None), slice(case["pads"][2], None))
    try:
        q = gm.matmul_plan(a, b, out=out, algorithm=algorithm)
        assert not (q.copy_a or q.copy_b)
        gm.matmul(a, b, out=out, plan=q)
        check("float32" if out_dtype == np.float32 else kind, out.to_numpy(), a_host, b_host, k, case)
        after = pc.to_numpy()
        outside = np.ones(after.shape, bool)
        outside[inside] = False
        assert np.isnan(after[outside].astype(np.float64)).all(), "written outside out's view"
    finally:
        for x in (pa, pb, pc):
            x.free()


@pytest.mark.gpu
@settings(max_examples=250, deadline=None)
@given(cases())
def test_small_products_against_a_float64_reference(case):
    product_against_reference(case, row_for(case))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["float32", "float64"])
@pytest.mark.parametrize(
    ("m", "n", "k", "batch", "ta", "tb", "pads"),
    [
        (32, 32, 32, 2113, False, False, [None, None, 0]),  # float32 at two blocks an SM
        (24, 24, 24, 20011, True, False, [None, 1, 2]),  # float32 at three
        (21, 21, 21, 3, False, True, [2, None, 1]),  # float64 at two, its largest
        (9, 21, 17, 1000, True, True, [None, None, 3]),
        (17, 17, 17, 257, False, False, [0, 3, 0]),  # float64 at two blocks an SM, float32 at four
    ],
)
def test_small_stream_past_a_warp_s_14_kib_against_a_float64_reference(kind, m, n, k, batch, ta, tb, pads):
    """float32 and float64 products whose stages need more than small_stream's 14 KiB a warp: launched with
    a larger share of the SM's shared memory at fewer blocks an SM (stream_launch), packed and in padded
    storage, every layout; against a float64 reference, nothing written outside C."""
    case = dict(kind=kind, m=m, n=n, k=k, batch=batch, shared="none", ta=ta, tb=tb, pads=pads)
    launch = stream_launch(m, n, k, ITEMSIZE[kind])
    if launch is None:  # float64 past about 21^3: none, and the planner refuses it by name
        assert kind == "float64" and max(m, n, k) > 21
        with pytest.raises(ValueError, match="copy stages hold no"):
            plan(Problem(m, n, k, "f64", "f64", "native", batch=batch), H100, "small_stream")
        return
    assert launch.blocks_per_sm < 4 or kind == "float32"
    product_against_reference(case, "small_stream")


@st.composite
def aligned_cases(draw):
    row = draw(st.sampled_from(["small_stream_in_place", "small_stream_block"]))
    sides = st.sampled_from(range(8, VARIANTS[row].max_k + 1, 8))  # multiples of 8 up to 32 or 64
    return {
        "row": row,
        "kind": draw(st.sampled_from(["float16", "bfloat16"])),
        "into_float32": draw(st.booleans()),
        "m": draw(sides),
        "n": draw(sides),
        "k": draw(sides),
        "batch": draw(st.sampled_from([1, 2, 3, 257, 2113, 20011])),
        "shared": draw(st.sampled_from(["none", "a", "b"])),
        "ta": draw(st.booleans()),
        "tb": draw(st.booleans()),
        # A and B packed (16-byte copies) or inside wider storage; C's pad odd or even (its stores in pairs
        # of neighbours only where its rows and start are two elements aligned)
        "pads": [draw(st.sampled_from([None, 0, 1, 8])) for _ in range(2)] + [draw(st.integers(0, 3))],
        # C one column in from its storage's first, two columns wider: rows an even number of elements
        # apart, its start odd (no pairs)
        "c_one_in": draw(st.booleans()),
    }


@pytest.mark.gpu
@settings(max_examples=160, deadline=None)
@given(aligned_cases())
def test_the_in_place_rows_against_a_float64_reference_in_every_layout(case):
    """M, N and K multiples of 8 (K an odd multiple too: the last k step of 8), every layout, A or B shared,
    packed or in padded storage, C into float32 too: against a float64 reference, nothing written outside C.
    small_stream_block up to 64 a side: a product's row tiles on several warps, chunks of several products."""
    product_against_reference(case, case["row"], np.float32 if case["into_float32"] else None)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_batch_past_the_grid_s_limit_and_halves_into_float32(kind):
    """Also the widest register tiles (64 x 64) on a batch, as auto may take them."""
    dtype = KINDS[kind]
    batch, m, n, k = 65537 * 2 + 5, 4, 3, 5
    a_host, b_host = host_random((batch, m, k), dtype), host_random((batch, k, n), dtype)
    with gm.Matrix.from_numpy(a_host) as a, gm.Matrix.from_numpy(b_host) as b:
        rows = ("small", "small_wide") + (() if kind == "float64" else ("small_stream",))
        for name in rows:  # small_wide: a warp a matrix; small_stream: 22 products a warp's chunk
            with gm.matmul(a, b, algorithm=name) as c:
                check(kind, c.to_numpy(), a_host, b_host, k, (kind, name))
        if kind in ("float16", "bfloat16"):
            for name in ("small", "small_stream"):
                with gm.Matrix.empty((batch, m, n), dtype=np.float32) as c32:
                    gm.matmul(a, b, out=c32, algorithm=name)
                    check("float32", c32.to_numpy(), a_host, b_host, k, (kind, name))
    a_host, b_host = host_random((70, 64, 100), dtype), host_random((70, 100, 64), dtype)
    with gm.Matrix.from_numpy(a_host) as a, gm.Matrix.from_numpy(b_host) as b:
        with gm.matmul(a, b, algorithm="small_wide") as c:
            check(kind, c.to_numpy(), a_host, b_host, 100, kind)


EPILOGUE_CASES = [("small", 5, 36, 70), ("small_wide", 20, 36, 70), ("small_wide", 64, 61, 70)]
# small_stream: no float64 kernel; float32 products up to about 20^3
STREAM_CASES = [
    ("float32", "small_stream", 19, 13, 17),
    *((kind, "small_stream", 29, 13, 31) for kind in ("float16", "bfloat16")),
    *((kind, "small_stream_in_place", 24, 16, 8) for kind in ("float16", "bfloat16")),
    *((kind, "small_stream_block", 56, 40, 24) for kind in ("float16", "bfloat16")),
]


@pytest.mark.gpu
@pytest.mark.parametrize(
    "kind, name, m, n, k",
    [(kind, *case) for kind in KINDS for case in EPILOGUE_CASES] + STREAM_CASES,
)
def test_the_epilogue_and_bits_that_repeat(kind, name, m, n, k):
    dtype = KINDS[kind]
    batch = 3000  # small_stream: a warp's chunks through both stages
    a_host, b_host = host_random((batch, k, m), dtype), host_random((batch, k, n), dtype)
    c0 = host_random((batch, m, n), dtype)
    bias_host = host_random((m, 1), np.float32)
    with gm.Matrix.from_numpy(a_host) as a, gm.Matrix.from_numpy(b_host) as b, gm.Matrix.from_numpy(bias_host) as bias:
        runs = []
        for _ in range(2):
            with gm.Matrix.from_numpy(c0) as c:
                gm.matmul(a.T, b, out=c, algorithm=name, alpha=2.0, beta=0.5, bias=bias, activation="gelu_tanh")
                runs.append(c.to_numpy())
        assert np.array_equal(runs[0].view(np.uint8), runs[1].view(np.uint8))
    a64 = np.swapaxes(a_host.astype(np.float64), -1, -2)
    r = 2.0 * np.matmul(a64, b_host.astype(np.float64)) + 0.5 * c0.astype(np.float64) + bias_host
    ref = 0.5 * r * (1 + np.tanh(math.sqrt(2 / math.pi) * (r + 0.044715 * r**3)))
    scale = 2.0 * np.matmul(np.abs(a64), np.abs(b_host.astype(np.float64))) + np.abs(c0) + np.abs(bias_host)
    assert (np.abs(runs[0].astype(np.float64) - ref) / scale).max() <= tolerance(kind, k) + 2.0**-20
