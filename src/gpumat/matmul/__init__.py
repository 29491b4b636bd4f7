"""The GEMM engine: C = A @ B for every dtype, precision mode and variant, through one path.

    api        the public functions (matmul, matmul_plan) and their documentation
    route      the one route of a call: check -> Problem -> plan -> BoundPlan -> run, with one cache
               of bound plans and the common call's fast lookup
    problem    Problem (what a call asks for) and Target (the facts of the GPU)
    variants   the one table of kernels (a row per variant: entry points, launch shape, where it runs,
               the cost model's constants) and the argument order of their signatures
    planner    the one cost model and auto's choice, pure and cached (with its table of measured plans)
    tuning     gm.matmul_plan(..., tune=True): auto's top candidates timed, the fastest remembered
    plan       MatmulPlan, the printable plan object (plain data)
    launcher   BoundPlan: a plan bound to its device, which owns every launch shape (direct, TMA,
               aligned copies, split-K's reduction, K = 0, batches beyond the grid's limit)
    engine     the surface for the layers above, tests, benchmarks and tools

Adding a kernel: write it (cuda/, with its comment and launch shape), add its row to variants.VARIANTS,
add a test. Nothing else names it.
"""

from .api import matmul, matmul_plan
from .plan import MatmulPlan
from .variants import algorithms

__all__ = ["matmul", "matmul_plan", "MatmulPlan", "algorithms"]
