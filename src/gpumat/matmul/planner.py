"""The one planner: which variant of the table runs a problem on a GPU, and how K is split.

One cost model for every variant, with the variant's row as its constants:

    tiles   = live tiles along M x along N (an edge tile counts the share of its warp tiles that
              have work, at least half a tile: a few live warps run faster than a full block)
    waves   = max(1, ceil(tiles x splits / (SMs x blocks an SM) - wave_slack))
    flops   = 2 x tile_m x tile_n x max(k_chunk, 16), a block's
    time    = fixed_s + waves x flops / (rate / (132 x blocks an SM)), at least the grid's whole waves
              of blocks x (wave_floor_s + k_chunk x wave_k_s) (a wave of blocks with little to compute is
              bound by their k loop's latency); or with less than a wave (at most blocks an SM of the
              grid's blocks on every SM; per_sm = ceil(tiles x splits / SMs)) fixed_s + the longer of
              per_sm x flops / (rate / 132) and flops / block_rate (a block alone on an SM is
              latency-bound: faster than its slot's share of the SM, slower than the whole SM); the
              arithmetic (not the waves' floor) unaligned_slowdown times longer when A or B is not
              16-byte aligned
              and for a memory-bound row (bandwidth set: the matrix-vector rows, the wgmma rows, the
              few-row DMMA tiles) at least
              (A and B read + C written, bytes; for a row with stages_padding, A and B and the zeros
              staged past C's edges: staged) / (bandwidth x min(SMs, SM_DRAW x busy SMs) / 132)
              with busy SMs = min(SMs, whole tiles x splits / blocks an SM): the GPU draws its SMs'
              share of the H100's bandwidth, a grid on few SMs SM_DRAW times their share; or, for a row
              whose SMs each draw at most sm_bandwidth (the few-row DMMA tiles), the longer of (A and B
              read + C written) / (bandwidth x SMs / 132) and ceil(blocks / SMs) x those bytes / blocks /
              sm_bandwidth (blocks spread over the SMs: the SMs with one block more than the rest finish
              last); B counted once however many row tiles read it (the L2 serves the others); a row
              reading B's rows in runs of fewer than FULL_RUN_BYTES draws SHORT_RUN_DRAW of it; for a
              row with round_bytes, that time met by the round trips a block waits on, the root of
              the sum of their squares (ROUND_TRIP_S each); then ceil(blocks / SMs) x block_s added
              (a row whose blocks' own work their loads do not hide)
            + for split-K: (2 x splits + 1) x m x n x accumulator bytes / scratch_bandwidth + split_launch_s
              (split_launch_before_sm90_s before sm_90, where the row has one: no dependent launch there)
            + for a variant given operands it cannot read as they lie (unaligned for TMA, or in the other
              layout): their bytes read and written at COPY_BANDWIDTH, plus COPY_LAUNCH_S for a copy that
              only aligns or TRANSPOSING_COPY_LAUNCH_S for one that transposes, and COPY_SECOND_LAUNCH_S
              where both operands are copied

`auto` takes, among the table's rows that compute the problem's dtypes at its precision and its shape
(the matrix-vector rows: C of at most 1, 8 or 16 rows or columns), run on the GPU and are auto's
candidates (tier 1), the (variant, splits) of least modelled time; where none runs, the tier-2 fallback
(the SIMT kernel). A float32 tensor-core mode (tf32, tf32x3) with no kernel on the GPU (before sm_80, or
too little shared memory a block), asked for a product that a matrix-vector row computes (memory-bound),
or where the model ranks the exact FP32 plan at least as fast as the mode's for aligned operands
(_tensor_cores_or_exact), runs exact FP32; but tf32 with 2-16 rows or columns of a large matrix runs its
tiles where the model ranks them well ahead of the exact rows (_matrix_vector_at_tf32). A C of few rows
may run swapped (C^T = op(B)^T @ op(A)^T on a row that writes C transposed) where that is modelled
SWAP_MARGIN faster (swappable). A named variant runs with its own best split (swapped by the same rule);
one the GPU cannot run, or that does not compute the problem's shape, is a ValueError before anything is
launched.
Pure: a function of the Problem and the Target, cached, and testable without a GPU.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

from .._dtypes import DTYPE_NAMES, ITEMSIZE
from .._precision import TENSOR_CORE_PRECISIONS
from ..runtime.geometry import MAX_GRID_YZ, cdiv, splitk_reduce_launch
from .plan import MatmulPlan
from .problem import Problem, Target, swapped
from .variants import (
    H100_SMS,
    REDUCE,
    ROW_ORDER,
    STREAM_COST,
    STREAM_WARPS,
    VARIANTS,
    WIDE_BLOCKS_PER_SM,
    Variant,
    accumulator,
    block_geometry,
    small_chunk,
    small_per_block,
    stream_fits,
    stream_geometry,
    stream_launch,
)

SPLIT_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
COPY_BANDWIDTH = 2.5e12  # bytes/s (read + write) of the 2-D device copy that aligns an operand for TMA
COPY_LAUNCH_S = 2e-6  # the first copy's launch and the scratch allocation
# a second operand's copy: one more launch queued behind the first (H200, 2026-11-29: 97 x 6007 x 2049
# float16 with both operands copied into wgmma128x64 took 44.9 us, 2.8 over the model with one launch).
# Both were 5 and 2.5 us until the copies became programmatic dependents: scanned on 2026-12-02's float16
# and bfloat16 sweeps (the products whose rows off 16 bytes are copied for the copy engine, 255^3 and
# 257^3: 6.6 us on wgmma64x64 after both copies, where the model said 11.0 and auto took mma64x64 at 8.5),
# auto within 0.986 of the fastest timed plan (0.982 at 5 us; worst 0.73 -> 0.81)
COPY_SECOND_LAUNCH_S = 1e-6
# ... where a copy transposes (the transpose kernel, not the copy): TF32's B copied as N rows of K kept its 5
# us in that scan (2-4 us made auto copy B for 192^3 and 256^3, 5.0 and 5.3 us measured, where the swapped
# 64 x 16 tile ran 3.5 and 3.9: float32 at tf32 0.972 -> 0.971, worst 0.74 -> 0.69)
TRANSPOSING_COPY_LAUNCH_S = 5e-6
# what one busy SM draws of the memory bandwidth, in 132nds: the matrix-vector kernels on an H100 (bench
# sweep, 2026-11-25) read 40-90 GB/s an SM on grids of 8-32 blocks, 2-4.6 times a 132nd of their 2.6 TB/s
SM_DRAW = 2.0
# a row that reads B's rows in runs (Variant.b_runs) shorter than this many contiguous bytes draws
# SHORT_RUN_DRAW of the bandwidth: on the H200 (2026-11-30) gemv_m1x32's 64-byte runs of a float16 B read
# 1 x 16384 x 16384 in 152-187 us where gemv_m1's 256-byte runs took 125-127 (float32's 128-byte runs: 244
# and 242 in that probe), 1 x 4096 x 4096 in 9.2 against 10.0 (the bandwidth is not what bounds it there). Fitted with
# gemv_m1x32's block_s to the choices on that probe (gemv_m1 and gemv_m1x32 at 1-16 splits, 17 shapes x 4
# dtypes): the picked plan's time 0.99 of the fastest's in geometric mean, 0.84 at worst
FULL_RUN_BYTES = 128
SHORT_RUN_DRAW = 0.85
# The swapped plan (problem.swapped): a C of at most SWAP_MAX_M rows and at least SWAP_MIN_N columns (one matrix, not
# a matrix-vector row's shape but at tf32: swappable) computed as C^T = op(B)^T @ op(A)^T by a row that writes C
# transposed (the 16-bit TMA rows, the TF32 ones of at most 64 columns or reading A transposed), so that C's long
# side lies on the tiles' 128 or 64 rows and its few rows on their columns (one tile of the 128 x 64 row at 64 rows,
# of the 64 x 16 row at 16).
# Taken where the model gives it SWAP_MARGIN over the plain plan: on the H200 (2026-11-28, 16-bit x @ W and x @ W.T
# with 8-128 rows, weights of 8192^2, 14336 x 4096 and 4096 x 14336) the model's gain of 1.11-1.45 measured 0.95-1.49
# (1.34-1.49 where it modelled 1.45; 128 rows: no gain modelled, none measured). At tf32 with B row-major, C of any
# number of rows may swap, and a batch: wgmma reads TF32 from shared memory K-major alone, so the plain plans read a
# copy of B transposed, and the swapped one on the TF32 atbt rows reads it in place (into registers).
SWAP_MAX_M = 64
SWAP_MIN_N = 128
# a batch at tf32 with B row-major swaps from 64 columns, onto the 64-row atbt tiles (H200, 2026-11-30,
# benchmarks/results/probe-tf32-batch-swap-*: attention's values at head size 64, 128 x 1024 x 64 x 1024 155 us
# against 173 unswapped, 512 x 256 x 64 x 256 60.6 against 67.7); one matrix keeps SWAP_MIN_N (4096 x 64 x 4096
# took 29.4 us swapped against 26.9)
SWAP_MIN_N_TF32 = 64
SWAP_MARGIN = 1.1
# the least K at which a float32 tensor-core mode's tiles compete with the exact matrix-vector rows for C of
# 2-16 rows or columns (_matrix_vector_at_tf32): the K of the H200 measurements the rule rests on
TF32_MV_MIN_K = 1024
TF32_MV_MARGIN = 1.05  # and only where they are modelled faster by more than this factor
TF32_MV_ARCHS = (90,)  # on the architectures where that was measured (the H200, sm_90)

# one memory round trip of a memory-bound row's step (Variant.round_bytes), and how it meets the bytes'
# time: neither alone (the steps of many blocks overlap, the bytes are drawn while a block waits) but the
# root of the sum of their squares, which fits gemv_m1 at 1 x 4096 x 4096 bfloat16 and float32 on an H100
# at 1 to 8 splits within 10% (bench sweep, 2026-11-26; benchmarks/NOTES.md)
ROUND_TRIP_S = 0.65e-6
# small_wide's waves where a C past 32 x 32 takes a block's four warps (they share its staged chunks, with a
# barrier each) against the model fitted mostly on one-warp matrices: on the H200 (2026-11-28) batches of
# 40^3-64^3 float32 and float16 products took 1.4-1.7x (1.1-1.3 at K = 512) what it gave
WIDE_GROUP_SLOWDOWN = 1.55


def unavailable(v: Variant, t: Target) -> str | None:
    """Why the variant cannot run on the target, or None when it can."""
    if v.kernels and next(iter(v.kernels.values())).module not in t.modules:
        return "its kernels are not in this build"
    if t.arch < v.min_arch or (v.only_arch is not None and t.arch != v.only_arch):
        return f"it needs sm_{v.only_arch}a" if v.only_arch else f"it needs sm_{v.min_arch} or newer"
    if v.smem > t.max_smem:
        return f"it needs {v.smem} bytes of shared memory a block and this GPU gives {t.max_smem}"
    return None


def _live(length: int, tile: int, warp: int) -> float:
    full, rest = divmod(length, tile)
    return full + (max(0.5, cdiv(rest, warp) * warp / tile) if rest else 0.0)


def _copies(v: Variant, p: Problem) -> tuple[bool, bool]:
    """Whether A and B are first copied into 16-byte aligned scratch in the layout the variant reads: A
    row-major or, for a variant that reads A transposed (reads_a_trans), as K rows of M; B row-major or,
    for a variant that reads B transposed (reads_b_trans), as N rows of K (an operand stored the other
    way is transposed in one pass); and an operand the copy engine cannot read in place."""
    if v.reads_either_layout:
        return v.needs_aligned and not p.a_aligned, v.needs_aligned and not p.b_aligned
    turn_a, turn_b = _stored_otherwise(v, p)
    return turn_a or (v.needs_aligned and not p.a_aligned), turn_b or (v.needs_aligned and not p.b_aligned)


def _stored_otherwise(v: Variant, p: Problem) -> tuple[bool, bool]:
    """Whether A and B are stored the other way round from the layout the variant reads (their copy, if
    any, transposes: the launcher's test too)."""
    return p.a_trans != v.reads_a_trans, p.b_trans != v.reads_b_trans


def half_sector_rows(v: Variant, p: Problem) -> bool:
    """Whether A or B reaches v's kernel in rows an odd multiple of 16 bytes long (Variant.half_sector_slowdown):
    an operand read in place, by its width as stored (a contiguous operand's row stride: a view's may differ,
    which the model does not see); a copied one never (its copy's rows are whole 32-byte sectors)."""
    size = ITEMSIZE[p.dtype]
    copy_a, copy_b = _copies(v, p)
    in_place = [cols for cols, copied in ((p.m if p.a_trans else p.k, copy_a), (p.k if p.b_trans else p.n, copy_b))
                if not copied]  # fmt: skip
    return any(cols * size % 32 == 16 for cols in in_place)


def _reads_aligned(v: Variant, p: Problem) -> bool:
    """Whether the operands the variant's kernel reads are 16-byte aligned (what auto_needs_aligned rows
    ask for): an A transposed into the layout the row reads lands in aligned scratch, so only an A read
    as stored counts by its storage. (B counts by its storage either way: the rule auto has always
    applied to it.)"""
    return (p.a_aligned or _stored_otherwise(v, p)[0]) and p.b_aligned


def model(v: Variant, p: Problem, t: Target, splits: int, k_chunk: int) -> float:
    """The modelled seconds of variant v running problem p on target t with this split."""
    if v.packs:
        return _packed_model(v, p, t)
    bm, bn = v.tile
    wm, wn = v.warp_tile or v.tile
    # a cluster's blocks take row tiles in pairs: an odd last one has a partner computing zeros
    row_tiles = _live(p.m, bm, wm) if v.cluster == 1 else cdiv(cdiv(p.m, bm), v.cluster) * v.cluster
    tiles = row_tiles * _live(p.n, bn, wn) * p.batch
    slots = t.sm_count * v.blocks_per_sm
    flops = 2.0 * bm * bn * max(k_chunk, 16)  # a block's
    sm_rate = v.rate / H100_SMS
    blocks = cdiv(cdiv(p.m, bm), v.cluster) * v.cluster * cdiv(p.n, bn) * p.batch * splits
    slowdown = 1.0 if p.a_aligned and p.b_aligned else v.unaligned_slowdown
    if math.ceil(blocks / t.sm_count) <= v.blocks_per_sm:  # less than a wave: each SM runs its few blocks side by side
        per_sm = math.ceil(tiles * splits / t.sm_count)
        seconds = slowdown * max(per_sm * flops / sm_rate, flops / (v.block_rate or sm_rate / v.blocks_per_sm))
    else:
        waves = max(1, math.ceil(tiles * splits / slots - v.wave_slack))
        if v.half_sector_slowdown != 1.0 and half_sector_rows(v, p):
            slowdown *= v.half_sector_slowdown
        seconds = slowdown * waves * flops / (sm_rate / v.blocks_per_sm)
        if v.wave_floor_s:  # whole blocks' waves, however little each computes (batches of tiny products)
            seconds = max(seconds, math.ceil(blocks / slots) * (v.wave_floor_s + k_chunk * v.wave_k_s))
    seconds += v.fixed_s
    if v.sm_bandwidth:  # memory-bound, blocks spread over the SMs, each SM drawing at most sm_bandwidth
        nbytes = traffic(p)
        full = nbytes / (v.bandwidth * t.sm_count / H100_SMS)
        seconds = max(seconds, full, math.ceil(blocks / t.sm_count) * nbytes / blocks / v.sm_bandwidth)
    elif v.bandwidth:  # memory-bound: at least the operands' bytes at the bandwidth the grid can draw
        busy = min(t.sm_count, blocks / v.blocks_per_sm)
        drawn = v.bandwidth * min(t.sm_count, SM_DRAW * busy) / H100_SMS
        if v.b_runs and v.tile[1] * ITEMSIZE[p.dtype] < FULL_RUN_BYTES:
            drawn *= SHORT_RUN_DRAW
        memory = (staged(v, p) if v.stages_padding else traffic(p)) / drawn
        if v.round_bytes:  # round trips that wait on each other, partly hidden by other blocks' loads
            trips = math.ceil(k_chunk * ITEMSIZE[p.dtype] / v.round_bytes) * ROUND_TRIP_S
            memory = math.hypot(memory, trips)
        memory += math.ceil(blocks / t.sm_count) * v.block_s
        seconds = max(seconds, memory)
    if splits > 1:
        seconds += (2 * splits + 1) * p.m * p.n * ITEMSIZE[accumulator(p.dtype)] / v.scratch_bandwidth
        plain = t.arch < 90 and v.split_launch_before_sm90_s is not None  # no programmatic dependent launch
        seconds += v.split_launch_before_sm90_s if plain else v.split_launch_s
    copy_a, copy_b = _copies(v, p)
    if copy_a or copy_b:
        size = ITEMSIZE[p.dtype]
        nbytes = p.batch * ((p.m * p.k * size if copy_a else 0) + (p.k * p.n * size if copy_b else 0))
        turn_a, turn_b = _stored_otherwise(v, p)
        first = TRANSPOSING_COPY_LAUNCH_S if (copy_a and turn_a) or (copy_b and turn_b) else COPY_LAUNCH_S
        seconds += 2 * nbytes / COPY_BANDWIDTH + first + (COPY_SECOND_LAUNCH_S if copy_a and copy_b else 0)
    return seconds


def _packed_model(v: Variant, p: Problem, t: Target) -> float:
    """A small-products row (several matrices a block, small_per_block): the operands' bytes at the
    bandwidth its grid can draw, its arithmetic at its rate on the SMs the grid fills, or its blocks' waves
    of staged chunks, each a memory round trip and a barrier (wave_floor_s) and the elements a thread
    stages (stage_element_s), whichever takes longest, and the launch's fixed cost."""
    if v.persistent:
        return _stream_model(v, p, t)
    wide = v.max_outputs is None
    per_block = small_per_block(p.m, p.n, wide)
    blocks = cdiv(p.batch, per_block)
    per_sm = WIDE_BLOCKS_PER_SM[ITEMSIZE[p.dtype]] if wide else v.blocks_per_sm
    busy = min(t.sm_count, blocks / per_sm)
    drawn = v.bandwidth * min(t.sm_count, SM_DRAW * busy) / H100_SMS
    # small_wide's warps compute whole 32 x 32 quarters, zeros past M and N included
    outputs = cdiv(p.m, 32) * cdiv(p.n, 32) * 1024 if wide else p.m * p.n
    compute = 2.0 * p.batch * outputs * p.k / (v.rate * busy / H100_SMS)
    chunks = cdiv(p.k, small_chunk(p.m, p.n, p.k, ITEMSIZE[p.dtype], wide))
    staged = (p.m * p.k + p.k * p.n) * per_block / (v.block[0] * v.block[1] * v.block[2])  # elements a thread
    rounds = cdiv(blocks, t.sm_count * per_sm) * (chunks * v.wave_floor_s + staged * v.stage_element_s)
    if wide and per_block == 1:  # a C past 32 x 32: four warps a matrix, a barrier a staged chunk
        rounds *= WIDE_GROUP_SLOWDOWN
    return v.fixed_s + max(traffic(p) / drawn, compute, rounds)


def stream_terms(v: Variant, p: Problem, t: Target) -> tuple[int, tuple[float, float, float, float]]:
    """What a streamed row pays an SM for p on t: the matrices of its busiest walker (a warp, or for
    small_stream_block a block) times the walkers that share an SM, and what each matrix counts of
    STREAM_COST's four terms (1 matrix, its staged rows or for small_stream_block its copy's 16-byte pieces,
    its units of arithmetic, its outputs over 32). The model's compute time is their product with
    STREAM_COST's row; benchmarks/fit_stream_costs.py fits that row to a probe's timings with the same terms."""
    per_sm = stream_blocks_per_sm(v, p, t)
    blocks = v.grid(p.m, p.n, 1, t.sm_count, p.batch, per_sm)[0]
    if v.block_chunks:  # the busiest block's chunks, next to the other blocks on its SM
        g = block_geometry(p.m, p.n, p.k, p.a_trans, p.b_trans, p.batch, blocks)
        busiest = cdiv(cdiv(p.batch, g.per_chunk), blocks) * g.per_chunk
        count = busiest * min(v.blocks_per_sm, cdiv(blocks, t.sm_count))
        # pairs of m16n8k16 tiles a row tile (1 for N up to 16, else 2 a group of 32 columns)
        units = cdiv(p.m, 16) * (1 if p.n <= 16 else 2 * cdiv(p.n, 32)) * cdiv(p.k, 16)
        return count, (1.0, (g.a_bytes + g.b_bytes) / 16, units, p.m * p.n / 32)
    warps = blocks * STREAM_WARPS
    in_place = v.shape_multiple > 1  # the in-place rows: nothing staged, row tiles of 16 as M asks
    narrow = p.m <= 16 and p.n <= 16  # C of at most 16 x 16 (stream_geometry's rm 2)
    if ITEMSIZE[p.dtype] == 2:  # pairs of m16n8k16 tiles (1 or 2 a row tile of 16) a k step of 16
        row_tiles = cdiv(p.m, 16) if in_place else (1 if narrow else 2)
        units = row_tiles * (1 if narrow else 2) * cdiv(p.k, 16)
    else:  # the warp's 16 x 16 or 32 x 32 tile over K, over 1024
        units = (256 if narrow else 1024) * p.k / 1024
    rows = 0 if in_place else (p.k if p.a_trans else p.m) + (p.n if p.b_trans else p.k)
    return cdiv(p.batch, warps) * STREAM_WARPS * per_sm, (1.0, rows, units, p.m * p.n / 32)


def stream_blocks_per_sm(v: Variant, p: Problem, t: Target) -> int:
    """The blocks of a streamed row an SM holds for p on t: a sliced row's for p's launch (stream_launch),
    else the row's own."""
    if v.sliced:
        launch = stream_launch(p.m, p.n, p.k, ITEMSIZE[p.dtype], t.max_smem)
        if launch is not None:
            return launch.blocks_per_sm
    return v.blocks_per_sm


def _stream_model(v: Variant, p: Problem, t: Target) -> float:
    """The streamed rows: each warp (small_stream_block: each block) computes its matrices one after another
    while the next chunk's bytes fly, so its time is the launch's fixed cost, its first chunk's copy
    (wave_floor_s) and the longer of its busiest walker's matrices, each at (walkers an SM) times what a
    matrix costs an SM (STREAM_COST: the matrix, its staged rows, its arithmetic, its outputs; stream_terms),
    and the bytes of A, B and C at the bandwidth its SMs draw."""
    count, terms = stream_terms(v, p, t)
    costs = STREAM_COST[v.name, ITEMSIZE[p.dtype]]
    compute = count * sum(cost * term for cost, term in zip(costs, terms, strict=True))
    busy = min(t.sm_count, v.grid(p.m, p.n, 1, t.sm_count, p.batch, stream_blocks_per_sm(v, p, t))[0])
    memory = traffic(p) / (v.bandwidth * busy / H100_SMS)
    return v.fixed_s + v.wave_floor_s + max(compute, memory)


def staged(v: Variant, p: Problem) -> int:
    """The bytes a TMA row's copy engine stages: A and B once and the zeros past C's edges (padding). C's
    stores are not among them: a persistent block's stores of one tile overlap its loads of the next (a
    product of K = 16, mostly C, ran as fast on the TF32 wgmma tiles as in cuBLAS)."""
    return _operand_bytes(p) + padding(v, p)


def padding(v: Variant, p: Problem) -> int:
    """The bytes of zeros a TMA row's blocks stage past C's edges: each column of tiles stages its row
    tiles' rows past M, each row of tiles its column tiles' columns past N, K elements each (the splits of
    K share those K elements out: they add none)."""
    bm, bn = v.tile
    tiles_m, tiles_n = cdiv(p.m, bm), cdiv(p.n, bn)
    rows = tiles_n * (tiles_m * bm - p.m) + tiles_m * (tiles_n * bn - p.n)
    return p.batch * rows * p.k * ITEMSIZE[p.dtype]


def traffic(p: Problem) -> int:
    """The bytes a product must move at least: A and B read once, C written once."""
    return _operand_bytes(p) + p.batch * p.m * p.n * ITEMSIZE[p.out_dtype]


def _operand_bytes(p: Problem) -> int:
    """A's and B's bytes, every matrix of the batch."""
    return p.batch * (p.m + p.n) * p.k * ITEMSIZE[p.dtype]


def refuses_shape(v: Variant, p: Problem, t: Target) -> str | None:
    """Why the variant does not compute the problem's shape on t (the matrix-vector rows; the emulated row,
    one product at a time; the streamed rows, what their stages hold), or None."""
    if v.args == "ozaki" and p.batch > 1:
        return "it computes one product at a time, not a batch (call it once a matrix)"
    if v.computes_shape(p.m, p.n, p.k):
        if _streams_too_big(v, p, t):
            return (
                f"a warp's copy stages hold no {p.m} x {p.k} @ {p.k} x {p.n} {DTYPE_NAMES[p.dtype]} product in "
                f"the {t.max_smem} bytes of shared memory a block may have on this GPU"
            )
        return None
    if v.max_k is not None:
        multiples = f" multiples of {v.shape_multiple}" if v.shape_multiple > 1 else ""
        return (
            f"it computes products of M, N and K{multiples} at most {v.max_k} only, and this one is "
            f"{p.m} x {p.n} x {p.k}"
        )
    if v.packs:
        most = f"{v.max_m} x {v.max_n}" + (f" and {v.max_outputs} elements" if v.max_outputs else "")
        return f"it computes results of at most {most} only, and this one is {p.m} x {p.n}"
    most, side, what = (v.max_n, "N", "column") if v.max_n is not None else (v.max_m, "M", "row")
    which = f"one {what} ({side} == 1)" if most == 1 else f"at most {most} {what}s ({side} <= {most})"
    return f"it computes results of {which} only, and this one is {p.m} x {p.n}"


def _streams_too_big(v: Variant, p: Problem, t: Target) -> bool:
    """Whether v is a streamed row whose warps walk the batch (small_stream, small_stream_in_place) and a
    warp's stages hold no matrix of p on t (small_stream_block's stages hold every product it computes):
    small_stream's at the most shared memory t gives its blocks (stream_launch), the in-place row's at its
    own."""
    if not (v.packs and v.persistent and not v.block_chunks):
        return False
    if v.sliced:
        return not stream_fits(p.m, p.n, p.k, ITEMSIZE[p.dtype], t.max_smem)
    return not stream_geometry(p.m, p.n, p.k, ITEMSIZE[p.dtype], 1, 1).per_chunk


def matrix_vector(p: Problem) -> bool:
    """Whether a matrix-vector row of the table (max_m or max_n set) computes the problem's shape in its
    dtypes: C of at most 16 rows or columns, a product that reads its matrix operand once and is bound by
    memory (an int8 or FP8 product has no such row: its vectors are the tiles' to plan, swapped or not)."""
    pair = (p.dtype, p.out_dtype)
    return any(
        v.made_for_shape
        and v.computes_shape(p.m, p.n)
        and pair in v.kernels
        and (v.auto_dtypes is None or p.dtype in v.auto_dtypes)
        for v in VARIANTS.values()
    )


def split_options(v: Variant, k: int, batch: int = 1):
    """(splits, k_chunk) a variant may run K with: every split has work, boundaries on k_align. A batch
    does not split K."""
    if not v.splits_k or batch > 1:
        yield 1, k
        return
    for splits in SPLIT_CHOICES:
        if splits > v.max_splits:
            return
        k_chunk = k if splits == 1 else cdiv(cdiv(k, splits), v.k_align) * v.k_align
        if splits > 1 and (cdiv(k, k_chunk) != splits or k_chunk < v.min_k_chunk):
            continue
        yield splits, k_chunk


def best_split(v: Variant, p: Problem, t: Target) -> tuple[float, int, int]:
    """(modelled seconds, splits, k_chunk) of the variant's fastest split."""
    best = None
    for splits, k_chunk in split_options(v, p.k, p.batch):
        seconds = model(v, p, t, splits, k_chunk)
        if best is None or seconds < best[0]:
            best = (seconds, splits, k_chunk)
    return best


def candidates(p: Problem, t: Target, tier: int) -> list[Variant]:
    """The table's rows of `tier` that auto may run the problem with on this target, in the table's order
    (ROW_ORDER: of equal modelled times auto takes the first, whatever order VARIANTS' keys have). A
    product with R <= 16 rows or columns of C does at most 2 R / itemsize flops a byte of its matrix
    operand, memory-bound for the tensor cores of every GPU: where a row made for its shape (the
    matrix-vector rows, max_m or max_n set) runs, those rows alone are its candidates (most GEMM rows'
    model has no memory term and would rank them as if they computed faster than the memory can feed them:
    dmma128x64 at 16384 x 1 x 16384 float64, 2 GiB, models 374 us, 5.7 TB/s; their tiles of 64-256 rows
    and columns compute 4 to 256 times the products asked for, and measured 0.45-0.6x cuBLAS at 8 and 16
    rows or columns)."""
    pair = (p.dtype, p.out_dtype)
    rows = [
        v
        for v in VARIANTS.values()
        if v.tier == tier
        and pair in v.kernels
        and v.computes(p.dtype) == p.mode
        and unavailable(v, t) is None
        and (v.auto_archs is None or t.arch in v.auto_archs)
        and (v.auto_dtypes is None or p.dtype in v.auto_dtypes)
        and (not v.auto_needs_aligned or _reads_aligned(v, p))
        and v.computes_shape(p.m, p.n, p.k)
        and not _streams_too_big(v, p, t)
        and (v.auto_max_n is None or p.n <= v.auto_max_n)
        and (v.auto_min_n is None or p.n >= v.auto_min_n)
        and (v.auto_max_batch is None or p.batch <= v.auto_max_batch)
        and (v.auto_past_side is None or max(p.m, p.n, p.k) > v.auto_past_side)
        and not (v.auto_in_place and any(_copies(v, p)))
        and (p.batch > 1 or not v.packs)  # the small-products row: for batches (one product is one block)
        and (p.batch == 1 or v.args != "ozaki")  # the emulated row: one product at a time
    ]
    rows.sort(key=lambda v: ROW_ORDER.get(v.name, len(ROW_ORDER)))  # ties go to the table's first, always
    shaped = [v for v in rows if v.made_for_shape]
    if any(v.packs for v in rows):  # a batch of small products: the rows made for it, not a matrix-vector row
        # (gemv_n16 ran 4096 16 x 16 x 16 float32 products 5.8x slower than torch.bmm on the H200)
        return [v for v in rows if not v.made_for_shape]
    return shaped or rows


# Plans measured on this GPU (gpumat.matmul.tuning, gm.matmul_plan(..., tune=True)): (problem, target) ->
# (variant, splits, k_chunk, why, swap). Where a problem has one, auto runs it instead of the model's choice.
TUNED: dict[tuple[Problem, Target], tuple[str, int, int, str, bool]] = {}
# How many times TUNED has changed, counted after each change: plan()'s cache is keyed by it, and a cache
# filled from plans made while it changed (the bound plans of matmul.route) compares it before and after,
# keeping nothing made across a change.
_tuning_changes = [0]


def tuning_generation() -> int:
    """The number of changes of TUNED so far."""
    return _tuning_changes[0]


def remember(p: Problem, t: Target, chosen: MatmulPlan, why: str) -> None:
    """Make a measured plan auto's choice for p on t from now on."""
    TUNED[(p, t)] = (chosen.variant.name, chosen.splits, chosen.k_chunk, why, chosen.swap)
    _tuning_changes[0] += 1


def forget_tuning() -> None:
    """Drop every measured plan: auto is the model's choice again."""
    TUNED.clear()
    _tuning_changes[0] += 1


def tunings_loaded() -> None:
    """Say that TUNED was filled from a file (tuning.load)."""
    _tuning_changes[0] += 1


def ranked(p: Problem, t: Target) -> list[MatmulPlan]:
    """auto's candidates for p on t, each with its best split, fastest modelled first (the first is the
    model's choice where the model decides among the table's rows), the swapped plans among them where
    p may swap (each ranked by its time over SWAP_MARGIN, as plan() weighs it); empty where none runs."""
    for tier in (1, 2):
        options = [(*o, False) for o in _options(p, t, tier)]
        if tier == 1:
            options += [(*o, True) for o in _swap_options(p, t)]
        # a stable sort: the first of equal times stays first, as plan() takes it
        options.sort(key=lambda o: o[0] * (SWAP_MARGIN if o[4] else 1))
        if options:
            return [
                _make(v, p, t, splits, k_chunk, seconds, "a candidate of auto", swap)
                for seconds, splits, k_chunk, v, swap in options
            ]
    return []


def _options(p: Problem, t: Target, tier: int) -> list[tuple[float, int, int, Variant]]:
    """(modelled seconds, splits, k_chunk, variant) of each of auto's candidates of `tier` at its best split."""
    return [(*best_split(v, p, t), v) for v in candidates(p, t, tier)]


def swappable(p: Problem) -> bool:
    """Whether p may run as a swapped plan: one matrix whose C has at most SWAP_MAX_M rows and at least
    SWAP_MIN_N columns (a tile's rows), or at tf32 with B row-major any product of at least SWAP_MIN_N
    columns, and a batch of at least SWAP_MIN_N_TF32 (the swapped TF32 rows read such a B in place, each
    matrix's C^T into its layer of C); and not a matrix-vector row's shape (those rows read their matrix
    at the memory's rate), but for 2-16 rows at tf32, where the exact matrix-vector rows fall behind the
    TF32 wgmma tiles (_matrix_vector_at_tf32 weighs the two; tf32x3 has no row that writes C transposed)."""
    if p.mode == "tf32" and not p.b_trans:
        if p.n < (SWAP_MIN_N_TF32 if p.batch > 1 else SWAP_MIN_N):
            return False
    elif not (p.batch == 1 and p.m <= SWAP_MAX_M and p.n >= SWAP_MIN_N):
        return False
    return not matrix_vector(p) or (p.mode == "tf32" and p.m > 1)


def _swap_options(p: Problem, t: Target, rows=None) -> list[tuple[float, int, int, Variant]]:
    """(modelled seconds, splits, k_chunk, variant) of the swapped product of p (problem.swapped) by each
    of auto's candidates for it that writes C transposed (or by `rows` alone); empty where p may not swap."""
    if not swappable(p):
        return []
    q = swapped(p)
    if rows is None:
        rows = candidates(q, t, 1)
    return [(*best_split(v, q, t), v) for v in rows if v.writes_c_trans and v.computes_shape(q.m, q.n)]


def _faster_swapped(p: Problem, t: Target, plain: float, rows=None) -> tuple[float, int, int, Variant] | None:
    """The fastest swapped option of p (_swap_options) where the model gives it SWAP_MARGIN over the plain
    plan's `plain` seconds, else None."""
    best = min(_swap_options(p, t, rows), key=lambda o: o[0], default=None)
    return best if best is not None and best[0] * SWAP_MARGIN < plain else None


def plan(p: Problem, t: Target, algorithm: str = "auto") -> MatmulPlan:
    """The plan for problem p on target t: auto's choice (a measured plan where one was tuned for p on t),
    or the named variant with its best split; for a product with nothing to multiply (an empty C, or
    K = 0), whatever the algorithm, the plan that says so."""
    # the number of tunings so far is part of the cached call's key (read before TUNED, which a tuning
    # changes before it counts): a plan made before a tuning, or from another problem's plan (a mode's
    # exact FP32 fallback), is never served after it
    return _plan(p, t, algorithm, _tuning_changes[0])


@lru_cache(maxsize=8192)
def _plan(p: Problem, t: Target, algorithm: str, generation: int) -> MatmulPlan:
    """plan(), cached by its arguments and the count of tunings it was made after."""
    if not (p.m and p.n and p.k and p.batch):
        return _no_product(p, t)
    tuned = TUNED.get((p, t)) if algorithm == "auto" else None
    if tuned is not None:
        name, splits, k_chunk, why, swap = tuned
        v = VARIANTS[name]
        return _make(v, p, t, splits, k_chunk, model(v, swapped(p) if swap else p, t, splits, k_chunk), why, swap)
    if algorithm != "auto":
        return _named(p, t, algorithm)
    if p.mode in TENSOR_CORE_PRECISIONS:
        return _matrix_vector_at_tf32(p, t) if matrix_vector(p) else _tensor_cores_or_exact(p, t)
    return _auto(p, t)


def _auto(p: Problem, t: Target) -> MatmulPlan:
    """auto's choice by the model among the rows of p's mode: the least modelled time among the tier-1
    candidates (swapped where that is SWAP_MARGIN faster), else among tier 2; a float32 tensor-core mode with
    no kernel here runs the exact FP32 plan."""
    for tier in (1, 2):
        options = _options(p, t, tier)
        if options:
            seconds, splits, k_chunk, v = min(options, key=lambda o: o[0])  # the first of equal times
            others = ", ".join(f"{o[3].name} {o[0] * 1e6:.1f} us" for o in options)
            why = (
                "auto: least modelled time among " + others
                if len(options) > 1
                else "auto: the only candidate" + ("" if tier == 1 else " (fallback: no tensor-core kernel runs)")
            )
            swap = _faster_swapped(p, t, seconds) if tier == 1 else None
            if swap is not None:
                why = f"auto: swapped, {swap[3].name} {swap[0] * 1e6:.1f} us ({_swap_gain(p, seconds, swap[0])}); {why}"
                return _make(swap[3], p, t, swap[1], swap[2], swap[0], why, True)
            return _make(v, p, t, splits, k_chunk, seconds, why)
    if p.mode in TENSOR_CORE_PRECISIONS:
        return _exact_fp32(p, t, f"no {p.mode} kernel runs on sm_{t.arch} with {t.max_smem} bytes of shared memory")
    raise ValueError(f"matmul: no kernel runs {p.describe()} on this GPU (sm_{t.arch})")


def _tensor_cores_or_exact(p: Problem, t: Target) -> MatmulPlan:
    """auto's plan for a float32 tensor-core mode (a C wider than a matrix-vector row's): the mode's plan, or
    the exact FP32 plan where the model ranks that at least as fast. Exact FP32 is at least as accurate as
    either mode, and it is faster where the tensor-core tiles wait on latency or memory rather than on
    arithmetic: batches of tiny products, small and skinny products, short K. tf32x3 has one 128 x 128
    tile, three passes a k-step (bench sweep, H200, 2026-11-30: 128^3 13.8 us against 4.2 exact, 32 x 4096
    x 4096 61.5 against 36.0, x @ W.T with 32 rows of a 14336 x 4096 W 300 against 169; by the two sweeps'
    timings, this rule lifts tf32x3's geometric mean against cuBLAS FP32 over the sweep from 0.91 to 1.08,
    where always taking the faster measured plan of the two would give 1.09; measured after: 1.084); for
    tf32 it moves small and short-K products (on the sweep two, 128^3 and 192^3). Weighed for the operands
    16-byte aligned, so that the precision a call runs at does not depend on where its operands lie."""
    chosen = _auto(p, t)
    if chosen.problem.mode == "float32":  # no kernel of the mode runs here
        return chosen
    # the model's choice alone for the aligned problem (a plan measured for one alignment does not decide
    # the precision of the others)
    aligned = replace(p, a_aligned=True, b_aligned=True)
    mode_aligned = chosen if aligned == p else _auto(aligned, t)
    exact_aligned = plan(replace(aligned, mode="float32"), t)
    if exact_aligned.seconds <= mode_aligned.seconds:
        what = f"{p.mode} asked for {p.describe()}, which its rows model at {mode_aligned.seconds * 1e6:.1f} us"
        return _exact_fp32(p, t, f"{what} for aligned operands ({exact_aligned.seconds * 1e6:.1f} us exact)")
    return chosen


plan.cache_clear = _plan.cache_clear  # for tests that change the table of variants


def _named(p: Problem, t: Target, algorithm: str) -> MatmulPlan:
    """The named variant's plan for p: its best split, swapped where the model gives that SWAP_MARGIN."""
    v = VARIANTS[algorithm]
    if (p.dtype, p.out_dtype) not in v.kernels:
        raise ValueError(
            f"matmul algorithm {algorithm!r} has no kernel for {DTYPE_NAMES[p.dtype]} inputs and a "
            f"{DTYPE_NAMES[p.out_dtype]} result"
        )
    shape = refuses_shape(v, p, t)
    if shape is not None:
        raise ValueError(f"matmul algorithm {algorithm!r} cannot run {p.describe()}: {shape}; use 'auto'")
    why = unavailable(v, t)
    if why is not None:
        if p.dtype == "f32" and v.mode in TENSOR_CORE_PRECISIONS:  # the tensor-core modes degrade to exact FP32
            return _exact_fp32(p, t, f"{algorithm} cannot run here ({why})")
        raise ValueError(f"matmul algorithm {algorithm!r} cannot run on this GPU (sm_{t.arch}): {why}; use 'auto'")
    seconds, splits, k_chunk = best_split(v, p, t)
    swap = _faster_swapped(p, t, seconds, [v])
    if swap is not None:
        why = f"named by the caller; swapped and split by the cost model ({_swap_gain(p, seconds, swap[0])})"
        return _make(v, p, t, swap[1], swap[2], swap[0], why, True)
    return _make(v, p, t, splits, k_chunk, seconds, "named by the caller; split by the cost model")


def _matrix_vector_at_tf32(p: Problem, t: Target) -> MatmulPlan:
    """auto's plan for a float32 tensor-core mode asked for a matrix-vector row's shape (C of at most 16 rows or
    columns). One row or column of C is memory-bound: the exact FP32 matrix-vector rows read it at the
    memory's rate, and tensor cores would only lose accuracy (bench sweep, H100: tf32x3 on the GEMM tiles
    0.12-0.33x cuBLAS FP32 on one row or column, the float32 matrix-vector rows 0.95-1.25x). With 2-16 rows or
    columns the exact rows do up to 16 FMAs an element of the matrix and fall behind it (H200, 8192^2 and
    14336 x 4096 weights: gemv_m16bt 148-167 us, gemv_m8bt 121-133, where tf32_wgmma128x256bt ran 70-93 and
    cuBLAS TF32 63-88): there, on the architectures measured (TF32_MV_ARCHS) and for K of at least
    TF32_MV_MIN_K, the mode's tiles, swapped where a row writes C transposed, compete with them by the model
    (checked against such weights only; the mma.sync TF32 tiles have no memory term). The choice between the
    two is made for the operands 16-byte aligned, so the precision a call runs at does not depend on where its
    operands lie; the tile (or exact row) then runs the operands as they are."""
    exact = _exact_fp32(p, t, f"{p.mode} asked for a {p.m} x {p.n} C, a matrix-vector row's shape")
    if min(p.m, p.n) == 1 or p.batch > 1 or p.k < TF32_MV_MIN_K or t.arch not in TF32_MV_ARCHS:
        return exact
    aligned = replace(p, a_aligned=True, b_aligned=True)
    aligned_exact = exact if aligned == p else _exact_fp32(aligned, t, "")
    tiles = [(*best_split(v, aligned, t), v) for v in candidates(aligned, t, 1)]
    if not tiles:
        return exact
    fastest = min(o[0] for o in tiles)
    swap = _faster_swapped(aligned, t, fastest)
    if (swap[0] if swap else fastest) * TF32_MV_MARGIN >= aligned_exact.seconds:  # near tie: exact rows
        return exact
    options = tiles if aligned == p else [(*best_split(v, p, t), v) for v in candidates(p, t, 1)]
    seconds, splits, k_chunk, v = min(options, key=lambda o: o[0])
    behind = (
        f"ahead of the exact FP32 matrix-vector plan ({aligned_exact.variant.name} "
        f"{aligned_exact.seconds * 1e6:.1f} us for aligned operands)"
    )
    if aligned != p:  # (for aligned operands, the swap weighed above)
        swap = _faster_swapped(p, t, seconds)
    if swap is not None:
        why = f"auto: swapped, {swap[3].name} {swap[0] * 1e6:.1f} us ({_swap_gain(p, seconds, swap[0])}), {behind}"
        return _make(swap[3], p, t, swap[1], swap[2], swap[0], why, True)
    why = f"auto: {v.name} {seconds * 1e6:.1f} us, least modelled time among the {p.mode} rows, {behind}"
    return _make(v, p, t, splits, k_chunk, seconds, why)


def _swap_gain(p: Problem, plain: float, swap: float) -> str:
    return (
        f"C's {p.n} columns on the tiles' rows, modelled {plain / swap:.2f}x faster than the plain plan's "
        f"{plain * 1e6:.1f} us"
    )


def _no_product(p: Problem, t: Target) -> MatmulPlan:
    """An empty C (M, N or the batch 0) launches nothing. With K = 0 the product is zero, so C =
    act(beta C + bias): a zero fill where beta is 0 and there is no bias (every activation maps 0 to 0),
    else the naive kernel (the SIMT one for a float32 C of halves) over K = 0; no operand is read, so
    none is copied. (An int8 product into int32, which has no epilogue, is always the fill: its plan names
    the SIMT row, the first of these with its kernels. FP8 inputs, and int8 into a float C, which neither
    has, take the result dtype's naive kernel: over K = 0 it reads no operand.)"""
    pair = (p.dtype, p.out_dtype)
    plain = (VARIANTS["naive"], VARIANTS["simt64x64"])
    if not any(pair in v.kernels for v in plain):
        pair = (p.out_dtype, p.out_dtype)
    v = next(v for v in plain if pair in v.kernels)
    if p.m and p.n and p.batch:
        why = f"K = 0: C = act(beta C + bias), a zero fill or {v.name} over K = 0 (no product to compute)"
    else:
        why = "the result is empty: nothing to launch"
    return replace(_make(v, p, t, 1, 0, 0.0, why, kernel_pair=pair), copy_a=False, copy_b=False)


def _exact_fp32(p: Problem, t: Target, why: str) -> MatmulPlan:
    """The exact FP32 plan that a float32 tensor-core request runs instead of its own (no kernel of the
    mode here, a matrix-vector shape, or exact FP32 modelled at least as fast)."""
    exact = plan(replace(p, dtype="f32", out_dtype="f32", mode="float32"), t)
    return replace(exact, reason=f"{why}: exact FP32 instead; {exact.reason}")


def forced(
    p: Problem, t: Target, algorithm: str, splits: int, k_chunk: int | None = None, swap: bool | None = None
) -> MatmulPlan:
    """A plan with the split given by the caller (tests and measurements): `splits` grid layers of
    k_chunk each (default: K cut evenly on the variant's alignment; layers that would start past K are
    dropped); `swap` True or False forces the swapped plan (problem.swapped) or the plain one (default:
    the named plan's own choice)."""
    base = plan(p, t, algorithm)
    _positive_int(splits, "splits")
    if k_chunk is not None:
        _positive_int(k_chunk, "k_chunk")
    if not (p.k and p.m and p.n and p.batch):  # nothing to multiply (an empty C, or K = 0): no split to make
        return base
    if splits > 1 and algorithm == "auto" and not base.variant.splits_k:
        # auto's row does not split K (a small float32 product's one-output-a-thread tile): the fastest of
        # auto's candidates that does, for the problem base computes (a tensor-core mode's exact plan: exact's)
        base = next((q for q in ranked(base.problem, t) if q.variant.splits_k and q.variant.max_splits > 1), base)
    v = base.variant
    swap = base.swap if swap is None else swap
    if swap and not (v.writes_c_trans and swappable(p)):
        raise ValueError(f"matmul plan: {v.name} does not run {p.describe()} swapped")
    if k_chunk is None:
        k_chunk = cdiv(cdiv(p.k, splits), v.k_align) * v.k_align
    if splits > 1 and (not v.splits_k or v.max_splits == 1):  # (the int8 rows: int32 partials have no reduction)
        raise ValueError(f"matmul plan: {v.name} does not split K")
    if splits > 1 and p.batch > 1:
        raise ValueError("matmul plan: a batched product does not split K")
    if splits > 1 and cdiv(p.k, k_chunk) > splits:
        raise ValueError(f"matmul plan: {splits} splits of {k_chunk} do not cover K = {p.k}")
    if splits == 1:
        k_chunk = p.k
    # layers that would start past K add nothing: the kernels count splits as ceil(K / k_chunk) (grid z
    # beyond that is the next matrix of a batch), so such layers are dropped
    splits = min(splits, cdiv(p.k, k_chunk))
    if splits == 1:
        k_chunk = p.k
    if splits > 1 and v.tma and k_chunk % v.k_align:  # the copy engine reads whole k tiles
        raise ValueError(f"matmul plan: {v.name} splits K on multiples of {v.k_align} (its k tile), not {k_chunk}")
    if splits > MAX_GRID_YZ:
        raise ValueError(f"matmul plan: at most {MAX_GRID_YZ} splits, got {splits}")
    seconds = model(v, swapped(p) if swap else p, t, splits, k_chunk)
    return _make(v, p, t, splits, k_chunk, seconds, "split given by the caller", swap)


def _positive_int(x, name: str) -> None:
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"matmul plan: {name} is an int, got {x!r}")
    if x < 1:
        raise ValueError(f"matmul plan: splits and k_chunk are positive integers, got {name} = {x}")


def _make(
    v: Variant,
    p: Problem,
    t: Target,
    splits: int,
    k_chunk: int,
    seconds: float,
    why: str,
    swap: bool = False,
    kernel_pair: tuple[str, str] | None = None,
) -> MatmulPlan:
    """The plan of variant v for p with this split; swap: the kernel computes p's swapped product (its
    copies and grid are that product's; split-K's partials and their reduction are laid out as C).
    kernel_pair: v's kernel by another (input, output) pair than p's (_no_product's, which reads no input)."""
    acc = accumulator(p.dtype)
    kernel = v.kernels[kernel_pair or (p.dtype, acc if splits > 1 else p.out_dtype)]
    reduce = REDUCE[(acc, p.out_dtype)] if splits > 1 else None
    q = swapped(p) if swap else p
    copy_a, copy_b = _copies(v, q)
    scratch = splits * p.m * p.n * ITEMSIZE[acc] if splits > 1 else 0
    # a tiled grid has one layer a matrix (the launcher cuts batches beyond the grid's limit); a persistent
    # one walks the batch's tiles too
    # a sliced row's launch for this product: its blocks an SM (the grid) and shared memory
    launch = stream_launch(q.m, q.n, q.k, ITEMSIZE[q.dtype], t.max_smem) if v.sliced else None
    grid = v.grid(q.m, q.n, splits, t.sm_count, p.batch, launch and launch.blocks_per_sm)
    return MatmulPlan(
        p,
        t,
        v,
        kernel,
        grid,
        splits,
        k_chunk,
        reduce,
        *splitk_reduce_launch(p.m, p.n, splits, ITEMSIZE[acc], t.sm_count),
        scratch,
        copy_a,
        copy_b,
        seconds,
        why,
        swap,
        launch.smem if launch is not None else 0,
    )
