"""The plan object: everything one matmul launch needs that does not depend on the operands' addresses.

A `MatmulPlan` is plain data, made by the planner (a pure function of the Problem and the Target); the
launch path binds it to its device once (launcher.BoundPlan) and runs that. It is also what
`gm.matmul_plan(A, B, ...)` returns: printing it says which kernel runs, how K is split, the launch
geometry, the scratch memory and copies it needs, the modelled time, and why the planner chose it.
`gm.matmul(A, B, plan=p)` runs a given plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from .._dtypes import ITEMSIZE
from ..runtime.kernels import Kernel
from .problem import Problem, Target, swapped
from .variants import Variant


@dataclass(frozen=True)
class MatmulPlan:
    """What one matmul launch needs that does not depend on the operands' addresses.

    Made by :func:`gpumat.matmul_plan` (not by hand) and run by ``gm.matmul(a, b, plan=p)``;
    ``print(p)`` tells the kernel, grid, split, scratch, copies, the modelled time and why. Frozen
    (immutable) and hashable.

    Attributes
    ----------
    problem : Problem
        The product as the kernels see it (m, n, k, dtypes, precision mode, layout, batch).
    target : Target
        The GPU the plan was made for (its architecture and resources).
    variant : Variant
        The kernel's row in the variant table.
    kernel : Kernel
        The entry point launched.
    grid : tuple of int
        The launch grid.
    splits : int
        How many slices K is cut into (1: no split).
    k_chunk : int
        The K of each slice.
    reduce : Kernel or None
        The split-K reduction kernel, if any.
    reduce_grid, reduce_block : tuple of int
        Its launch shape.
    scratch_bytes : int
        Device scratch the plan needs (split partials, aligned copies).
    copy_a, copy_b : bool
        Whether an operand is first copied (transposed or aligned) into scratch.
    seconds : float
        The cost model's time.
    reason : str
        Why this plan was chosen.
    dynamic_smem : int
        A sliced row's dynamic shared memory for this product (0: the variant's; ``smem`` is the launch's).
    swap : bool
        Whether the kernel computes the swapped product C^T = op(B)^T @ op(A)^T (C's long side on the
        tile's rows: a C of few rows) and writes it into C transposed; ``kernel_problem`` is that product.

    Examples
    --------
    >>> A = gm.Matrix.zeros(256, 256)  # doctest: +GPU
    >>> p = gm.matmul_plan(A, A)
    >>> p.splits >= 1 and p.seconds > 0
    True
    """

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
    swap: bool = False  # the kernel computes C^T = op(B)^T @ op(A)^T into C stored transposed
    dynamic_smem: int = 0  # a sliced row's shared memory for this product (0: the variant's)

    @cached_property  # (the launch path reads it each call: made once, not a new Problem a call)
    def kernel_problem(self) -> Problem:
        """The product the kernel computes: the problem, or its swap (problem.swapped)."""
        return swapped(self.problem) if self.swap else self.problem

    @property
    def algorithm(self) -> str:
        return self.variant.name

    @property
    def block(self) -> tuple[int, int, int]:
        return self.variant.block

    @property
    def smem(self) -> int:
        """The launch's dynamic shared memory: the variant's, or a sliced row's for this product."""
        return self.dynamic_smem or self.variant.smem

    @property
    def copy_bytes(self) -> int:
        p, size = self.kernel_problem, ITEMSIZE[self.problem.dtype]
        return p.batch * ((p.m * p.k * size if self.copy_a else 0) + (p.k * p.n * size if self.copy_b else 0))

    def __str__(self) -> str:
        p, v = self.problem, self.variant
        lines = [
            f"matmul plan: {p.describe()} on sm_{self.target.arch} ({self.target.sm_count} SMs)",
            f"  kernel     {self.kernel.name} ({v.name}: {v.tile[0]}x{v.tile[1]} tiles, block {v.block}, "
            f"{self.smem} bytes dynamic shared memory)",
            f"  grid       {self.grid}" + (" (persistent)" if v.persistent else ""),
        ]
        if self.swap:
            lines.append(
                f"  swapped    computed as C^T = op(B)^T @ op(A)^T ({self.kernel_problem.describe()}), C's "
                f"{p.n} columns on the tiles' rows, written into C transposed"
            )
        if self.splits > 1:
            lines.append(
                f"  split-K    {self.splits} splits of {self.k_chunk}, {self.scratch_bytes} bytes of partials, "
                f"reduced in a fixed order by {self.reduce.name}, grid {self.reduce_grid}, "
                f"block {self.reduce_block}"
            )
        else:
            lines.append("  split-K    none")
        if self.copy_a or self.copy_b:
            # the kernel's operands: of the swapped product, op(B)^T (B's storage) and op(A)^T (A's)
            names = ("B^T", "A^T") if self.swap else ("A", "B")
            which = " and ".join(x for x, c in zip(names, (self.copy_a, self.copy_b), strict=True) if c)
            v = self.variant
            trans = [
                f"{x} as {rows}"
                for x, rows, t in (
                    (names[0], "K rows of M", v.reads_a_trans),
                    (names[1], "N rows of K", v.reads_b_trans),
                )
                if t
            ]
            layout = f"the layouts the kernel reads ({', '.join(trans)})" if trans else "row-major"
            lines.append(f"  copies     {which} into {layout}, 16-byte aligned scratch first ({self.copy_bytes} bytes)")
        lines.append(f"  modelled   {self.seconds * 1e6:.1f} us")
        lines.append(f"  why        {self.reason}")
        return "\n".join(lines)
