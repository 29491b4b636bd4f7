"""The GEMM engine: C = A @ B for every dtype, precision mode and variant, through one path.

    api        the public functions (matmul, matmul_plan): argument checks -> Problem -> plan -> launch
    problem    Problem (what a call asks for) and Target (the facts of the GPU)
    variants   the one table of kernels (a row per variant: entry points, launch shape, where it runs,
               the cost model's constants)
    planner    the one cost model and auto's choice, pure and cached
    plan       MatmulPlan, the printable plan object
    launcher   the one launcher (scratch, aligned copies, tensor maps, split-K's reduction)

Adding a kernel: write it (cuda/, with its comment and launch shape), add its row to variants.VARIANTS,
add a test. Nothing else names it.
"""

from .api import matmul, matmul_plan
from .launcher import launch
from .plan import MatmulPlan
from .planner import plan as plan_problem
from .problem import Problem, Target
from .variants import VARIANTS, algorithms

__all__ = [
    "matmul",
    "matmul_plan",
    "MatmulPlan",
    "Problem",
    "Target",
    "VARIANTS",
    "algorithms",
    "launch",
    "plan_problem",
]
