"""The out-of-core tile planner: pure, testable without a GPU.

C is cut into tiles that, with their A and B tiles, fit in each GPU's memory budget. The plan is the
one a small cost model says finishes first: bigger C tiles read A and B fewer times, a K kept whole
lets a row block of A stay on the GPU while the B tiles stream past it, and two C tiles let one go
back to the host while the next one multiplies. The C tiles are walked row by row, back and forth,
and cut into one contiguous run per GPU (split_work), weighted by their area.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..runtime.errors import OutOfMemoryError
from ..runtime.geometry import cdiv

TILE_SIDES = (16384, 12288, 8192, 6144, 4096, 3072, 2048, 1536, 1024, 768, 512, 384, 256, 192, 128, 96, 64)
SCRATCH_SHARE = 0.15  # of the budget, left for what the in-memory product allocates itself (split-K)
MIN_SIDE = 64  # the smallest tile side worth a round trip (a smaller matrix side is taken whole)

STAGE_CHUNK = 16 << 20  # the staging buffers the pipeline uses (8 of them each way a GPU): a tile row fits one

# The cost model's figures, measured on the H100 (benchmarks/results/outofcore-plans-*.json, transfers-*.json)
# and used only to weigh transfers against compute when choosing tiles, so other GPUs share them.
STAGED_BPS = 21e9  # pageable host memory through the staging buffers, each way
PINNED_BPS = 50e9  # pinned host memory, each way
PARTIAL_ROWS = 0.6  # direct copies of tiles whose rows are pieces of the host array's rows, against whole rows
STAGED_CALL_S = 4e-4  # fixed cost of one staged copy (host threads, events); a pinned one's is CALL_S
CALL_S = 2e-5
STAGED_ROW_BYTES = 8192  # staged copies of shorter row pieces run slower (per-row work in the host copies)
REGISTER_S = 5.4e-11  # page-locking pageable memory in place and releasing it, a byte (58 ms a GiB)
REGISTER_GAIN = 0.9  # lock only where the model (within ~10% of what was measured) saves more than that
DEVICE_BPS = 2.5e12  # the device memory traffic of adding a K tile's product into C
STEP_S = 40e-6  # host work and launches of one product step
FLOPS = {"f32": 50e12, "tf32": 300e12, "tf32x3": 100e12, "f64": 50e12, "f16": 400e12, "bf16": 400e12}


@dataclass(frozen=True)
class TilePlan:
    tm: int  # rows of a C tile
    tn: int  # columns of a C tile
    tk: int  # the K a product step covers (K itself when it fits)
    c_buffers: int = 2  # C tiles a GPU holds: with 2, one goes back to the host while the next multiplies

    def device_bytes(self, k: int, in_size: int, acc_size: int, out_size: int) -> int:
        """What one GPU holds: two A and two B tiles, the C accumulators (and C in the output dtype when
        it differs from the accumulator's), and the product of one K tile when K is split."""
        c = self.tm * self.tn
        return (
            2 * (self.tm * self.tk + self.tk * self.tn) * in_size
            + self.c_buffers * c * (acc_size + (out_size if out_size != acc_size else 0))
            + (c * acc_size if self.tk < k else 0)
        )


def _sides(length: int, cap: int) -> list[int]:
    """Tile sides for one axis: the table's sides that fit, and the whole length when it fits a staged row
    (whole rows copy fastest)."""
    got = sorted(
        {min(t, length) for t in TILE_SIDES if t <= cap} | ({length} if length <= cap else set()), reverse=True
    )
    return [t for t in got if t >= min(MIN_SIDE, length)]


def _row_rate(piece: int, whole: int, size: int, pinned: bool) -> float:
    """Copy rate of tiles whose rows are `piece` of the host array's `whole`, against whole rows: direct
    copies of partial rows are 2-D DMAs; staged ones are host copies that slow down below 8 KiB a row."""
    if piece == whole:
        return 1.0
    return PARTIAL_ROWS if pinned else min(1.0, piece * size / STAGED_ROW_BYTES) ** 0.5


def plan_seconds(
    p: TilePlan,
    m: int,
    n: int,
    k: int,
    in_size: int,
    acc_size: int,
    out_size: int,
    flops: float = FLOPS["f32"],
    pinned_in: bool = False,
    pinned_out: bool = False,
    parts: int = 1,
    sm_count: int = 132,
) -> float:
    """Modeled seconds of a plan: compute, uploads and downloads overlap, so the slowest of the three
    sets the pace; the first tiles' upload and the last tile's download do not overlap anything.
    pinned_in / pinned_out: the operands / the result are in page-locked memory (direct copies)."""
    rows, cols, ksteps = cdiv(m, p.tm), cdiv(n, p.tn), cdiv(k, p.tk)
    tiles = rows * cols
    # a tile's product runs in waves of 128 x 128 blocks, two a SM (the 128 x 128 kernels' occupancy)
    blocks = cdiv(p.tm, 128) * cdiv(p.tn, 128)
    wave_use = blocks / (cdiv(blocks, 2 * sm_count) * 2 * sm_count)
    compute = (
        2.0 * m * n * k / flops / wave_use + (ksteps - 1) * m * n * acc_size * 3 / DEVICE_BPS + tiles * ksteps * STEP_S
    )
    in_bps, in_call = (PINNED_BPS, CALL_S) if pinned_in else (STAGED_BPS, STAGED_CALL_S)
    out_bps, out_call = (PINNED_BPS, CALL_S) if pinned_out else (STAGED_BPS, STAGED_CALL_S)
    whole_a = _row_rate(p.tk, k, in_size, pinned_in)
    whole_b = _row_rate(p.tn, n, in_size, pinned_in)
    whole_c = _row_rate(p.tn, n, out_size, pinned_out)
    # with K whole a row block of A stays while its row of C is computed; otherwise A goes again per tile
    a_copies = rows if ksteps == 1 else tiles * ksteps
    up = (
        m * k * in_size * (1 if ksteps == 1 else cols) / (in_bps * whole_a)
        + k * n * in_size * rows / (in_bps * whole_b)
        + (a_copies + tiles * ksteps) * in_call
    )
    down = m * n * out_size / (out_bps * whole_c) + tiles * out_call
    fill = (p.tm * p.tk / whole_a + p.tk * p.tn / whole_b) * in_size / in_bps + p.tm * p.tn * out_size / (
        out_bps * whole_c
    )
    serial = down if p.c_buffers == 1 else 0.0  # one C tile: its download holds up the next product
    share = _largest_share(m, n, p, parts)  # the GPU with the most work finishes last
    return (max(compute, up, down) + serial) * share + fill


@lru_cache(maxsize=1024)
def plan_tiles(
    m: int,
    n: int,
    k: int,
    in_size: int,
    acc_size: int,
    out_size: int,
    budget: int,
    flops: float = FLOPS["f32"],
    pinned_in: bool = False,
    pinned_out: bool = False,
    parts: int = 1,
) -> TilePlan:
    """The tile plan that fits in `budget` bytes a GPU and that the cost model says finishes first,
    with the largest K step that fits (K whole when it does). Pure: testable anywhere."""
    return best_plan(m, n, k, in_size, acc_size, out_size, budget, flops, pinned_in, pinned_out, parts)[1]


@lru_cache(maxsize=1024)
def best_plan(m, n, k, in_size, acc_size, out_size, budget, flops, pinned_in, pinned_out, parts):
    usable = int(budget * (1 - SCRATCH_SHARE))
    row_cap = STAGE_CHUNK // max(in_size, out_size)  # a staged copy moves whole rows of at most a chunk
    k_steps = [t for t in (k, *(s for s in TILE_SIDES if s < k)) if t <= row_cap and t >= min(MIN_SIDE, k)]
    best = None
    for tm in _sides(m, 1 << 62):
        for tn in _sides(n, row_cap):
            for c_buffers in (2, 1):
                tk = next(
                    (
                        t
                        for t in k_steps
                        if TilePlan(tm, tn, t, c_buffers).device_bytes(k, in_size, acc_size, out_size) <= usable
                    ),
                    None,
                )
                if tk is None:
                    continue
                p = TilePlan(tm, tn, tk, c_buffers)
                cost = plan_seconds(p, m, n, k, in_size, acc_size, out_size, flops, pinned_in, pinned_out, parts)
                if best is None or cost < best[0] * (1 - 1e-9):
                    best = (cost, p)
    if best is None:
        need = smallest_plan(m, n, k).device_bytes(k, in_size, acc_size, out_size)
        raise OutOfMemoryError(
            f"an out-of-core product needs at least {need} bytes of GPU memory a device "
            f"(tiles of {MIN_SIDE}); {usable} are available to it",
            "gpumat.matmul",
        )
    return best


def smallest_plan(m: int, n: int, k: int) -> TilePlan:
    """The smallest tiles plan_tiles considers: MIN_SIDE on each side (or the whole side when shorter)."""
    return TilePlan(min(MIN_SIDE, m), min(MIN_SIDE, n), min(MIN_SIDE, k), 1)


def tile_order(m: int, n: int, plan: TilePlan) -> list[tuple[int, int]]:
    """C tiles (row start, column start) row by row, every other row backwards: the B tile at the end of
    one row is the first of the next."""
    cols = list(range(0, n, plan.tn))
    return [(i0, j0) for r, i0 in enumerate(range(0, m, plan.tm)) for j0 in (cols if r % 2 == 0 else cols[::-1])]


def tile_areas(m: int, n: int, plan: TilePlan, tiles: list[tuple[int, int]]) -> list[int]:
    """Each tile's share of the work: its rows times its columns (edge tiles are smaller)."""
    return [min(plan.tm, m - i0) * min(plan.tn, n - j0) for i0, j0 in tiles]


def split_work(tiles: list, parts: int, weights: list[int] | None = None) -> list[list]:
    """Contiguous runs of tiles, one a GPU (neighbours share A row blocks), cut where the running total of
    `weights` (default: one a tile) comes nearest to each GPU's even share of the work."""
    weights = weights or [1] * len(tiles)
    total, cuts, running, i = sum(weights), [0], 0, 0
    for w in range(1, parts):
        goal = total * w / parts
        while i < len(tiles) and running + weights[i] / 2 <= goal:  # take a tile if most of it is below the goal
            running += weights[i]
            i += 1
        cuts.append(max(i, cuts[-1]))
    cuts.append(len(tiles))
    return [tiles[cuts[w] : cuts[w + 1]] for w in range(parts)]


@lru_cache(maxsize=4096)
def _largest_share(m: int, n: int, plan: TilePlan, parts: int) -> float:
    """The biggest GPU's fraction of the work under split_work (by tile count past 256 tiles, where the
    exact split costs more than the difference it makes)."""
    tiles = cdiv(m, plan.tm) * cdiv(n, plan.tn)
    if parts == 1:
        return 1.0
    if tiles > 256:
        return cdiv(tiles, parts) / tiles
    order = tile_order(m, n, plan)
    areas = tile_areas(m, n, plan, order)
    index = {t: a for t, a in zip(order, areas, strict=True)}
    return max(sum(index[t] for t in share) for share in split_work(order, parts, areas)) / (m * n)
