"""The plan object: everything one matmul launch needs that does not depend on the operands' addresses.

A `MatmulPlan` is made once per (problem, GPU, algorithm) by the planner and cached; the launcher
only reads it. It is also what `gm.matmul_plan(A, B, ...)` returns: printing it says which kernel runs,
how K is split, the launch geometry, the scratch memory and copies it needs, the modelled time, and
why the planner chose it. `gm.matmul(A, B, plan=p)` runs a given plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from .._dtypes import ITEMSIZE
from ..runtime.kernels import FixedLaunch, Kernel
from .problem import Problem, Target
from .variants import IDENTITY, Variant

PLAIN_LEADING = 9  # a plain launch's own arguments: a, b, c, m, n, k, lda, ldb, ldc


@dataclass(frozen=True)
class MatmulPlan:
    problem: Problem
    target: Target
    variant: Variant
    kernel: Kernel  # the product kernel (into float32/float64 partials when splits > 1)
    grid: tuple[int, int, int]
    splits: int  # K cut into this many chunks, one grid layer (or work item) each
    k_chunk: int  # the K one split covers (K itself without split-K)
    reduce: Kernel | None  # split-K's second pass, adding the partials in a fixed order
    reduce_grid: tuple[int, int, int]
    reduce_block: tuple[int, int, int]  # (256, 1, 1), or (32, 8, 1) where a small plane's splits run in 8 runs
    scratch_bytes: int  # the partials (splits x m x n accumulators)
    copy_a: bool  # A is first copied into aligned scratch (TMA variants, unaligned views)
    copy_b: bool
    seconds: float  # the cost model's time on this GPU (a ranking figure, not a promise)
    reason: str  # why this variant and split
    # when the plan is one kernel launch reading A and B in place: the arguments that kernel takes after
    # ldc and before the batch strides (the k_chunk argument, or none); else None
    direct: tuple | None = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        v, q = self.variant, self.problem
        one = (
            self.splits == 1
            and not (self.copy_a or self.copy_b)
            and not v.tma
            and self.grid[2] == q.batch  # not a batch beyond the grid's limit
        )
        tail = () if v.args == "plain" else (self.k_chunk,)
        object.__setattr__(self, "direct", tail if one else None)

    @cached_property
    def direct_launch(self) -> FixedLaunch | None:
        """The `direct` plan's launch with every argument given each call (operands, strides, epilogue):
        a FixedLaunch that fixes only the geometry. None when the plan is not one direct launch."""
        if self.direct is None:
            return None
        return FixedLaunch(
            self.kernel, self.grid, self.variant.block, self.variant.smem, len(self.kernel.signature), ()
        )

    @cached_property
    def plain_launch(self) -> FixedLaunch | None:
        """The launch of a plain 2-D product (row-major operands read in place, one kernel, no epilogue),
        made at the first such call with the arguments every such call repeats packed once: every one
        after ldc (k_chunk if any, no batch strides, the identity epilogue), or for a TMA row the identity
        epilogue (its maps depend on the addresses). None when the plan is more than that launch."""
        v, q = self.variant, self.problem
        if self.direct is not None:
            return FixedLaunch(
                self.kernel, self.grid, v.block, v.smem, PLAIN_LEADING, (*self.direct, 0, 0, 0, *IDENTITY)
            )
        if v.tma and self.splits == 1 and not (self.copy_a or self.copy_b) and q.batch == 1:
            leading = len(self.kernel.signature) - len(IDENTITY)
            return FixedLaunch(self.kernel, self.grid, v.block, v.smem, leading, IDENTITY)
        return None

    @property
    def algorithm(self) -> str:
        return self.variant.name

    @property
    def block(self) -> tuple[int, int, int]:
        return self.variant.block

    @property
    def smem(self) -> int:
        return self.variant.smem

    @property
    def copy_bytes(self) -> int:
        p, size = self.problem, ITEMSIZE[self.problem.dtype]
        return p.batch * ((p.m * p.k * size if self.copy_a else 0) + (p.k * p.n * size if self.copy_b else 0))

    def __str__(self) -> str:
        p, v = self.problem, self.variant
        lines = [
            f"matmul plan: {p.describe()} on sm_{self.target.arch} ({self.target.sm_count} SMs)",
            f"  kernel     {self.kernel.name} ({v.name}: {v.tile[0]}x{v.tile[1]} tiles, block {v.block}, "
            f"{v.smem} bytes dynamic shared memory)",
            f"  grid       {self.grid}" + (" (persistent)" if v.persistent else ""),
        ]
        if self.splits > 1:
            lines.append(
                f"  split-K    {self.splits} splits of {self.k_chunk}, {self.scratch_bytes} bytes of partials, "
                f"reduced in a fixed order by {self.reduce.name}, grid {self.reduce_grid}, "
                f"block {self.reduce_block}"
            )
        else:
            lines.append("  split-K    none")
        if self.copy_a or self.copy_b:
            which = " and ".join(x for x, c in (("A", self.copy_a), ("B", self.copy_b)) if c)
            v = self.variant
            trans = [
                f"{x} as {rows}"
                for x, rows, t in (("A", "K rows of M", v.reads_a_trans), ("B", "N rows of K", v.reads_b_trans))
                if t
            ]
            layout = f"the layouts the kernel reads ({', '.join(trans)})" if trans else "row-major"
            lines.append(f"  copies     {which} into {layout}, 16-byte aligned scratch first ({self.copy_bytes} bytes)")
        lines.append(f"  modelled   {self.seconds * 1e6:.1f} us")
        lines.append(f"  why        {self.reason}")
        return "\n".join(lines)
