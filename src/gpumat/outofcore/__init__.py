"""Matrix products of host (numpy) arrays larger than a GPU, on one GPU or several: a pure tile
planner (planner) and the threaded pipeline that runs its plan (pipeline)."""

from .pipeline import matmul_host
from .planner import (
    FLOPS,
    MIN_SIDE,
    SCRATCH_SHARE,
    STAGE_CHUNK,
    STAGED_BPS,
    TilePlan,
    plan_seconds,
    plan_tiles,
    smallest_plan,
    split_work,
    tile_areas,
    tile_order,
)

__all__ = [
    "matmul_host",
    "FLOPS",
    "MIN_SIDE",
    "SCRATCH_SHARE",
    "STAGE_CHUNK",
    "STAGED_BPS",
    "TilePlan",
    "plan_seconds",
    "plan_tiles",
    "smallest_plan",
    "split_work",
    "tile_areas",
    "tile_order",
]
