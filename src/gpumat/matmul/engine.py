"""The GEMM engine's surface for what is built on it (the out-of-core pipeline), its tests, benchmarks and
tools: the problem, the one table of variants, the pure planner and its cost model's constants, the plan
bound to a device and the launch path's cache. Nothing else of gpumat.matmul's modules is to be imported
from outside the package (a CPU test checks the tests and benchmarks).

    Problem, Target                  what a call asks for; the facts of a GPU (problem)
    VARIANTS, REDUCE, ...            the table of kernels, their signatures and argument order (variants)
    plan, forced, model, ...         the planner: pure functions of a Problem and a Target (planner)
    BoundPlan, bind                  a plan bound to its device, run(stream, a, b, c, epilogue) (launcher)
    bound_plans                      the launch path's one cache of BoundPlans (clear() forgets them)
    bound_for                        the cached BoundPlan of a problem on a device, made on first use
    cached_product                   the fast lookup gm.matmul tries first: the product of a common call
                                     whose BoundPlan is cached, or None (the full route then runs)
    call_view, result_shape          a call as the kernels see it; its shape by NumPy's rule (route)
    ozaki_plan, ozaki_emulated, ...  float64 and float32 products emulated on integers (Ozaki scheme II)
"""

from .launcher import BoundPlan
from .maps import SWIZZLE_BYTES, c_map, c_map_args, tensor_map, tensor_map_args
from .ozaki import COL_GROUPS as OZAKI_COL_GROUPS
from .ozaki import CRT_COLUMNS as OZAKI_CRT_COLUMNS
from .ozaki import (
    OZAKI_MAX_BITS,
    OZAKI_MAX_K,
    OZAKI_MODULI,
    OzakiPlan,
    crt_weights,
    ozaki_bits,
    ozaki_budget,
    ozaki_plan,
)
from .ozaki import PANEL_BYTES as OZAKI_PANEL_BYTES
from .ozaki import PANEL_ROW_STEP as OZAKI_PANEL_ROW_STEP
from .ozaki import STEPS as OZAKI_STEPS
from .ozaki import WGMMA_S8 as OZAKI_INT8_TILES
from .ozaki import emulated as ozaki_emulated
from .ozaki import panel_rows as ozaki_panel_rows
from .ozaki import plan_for as ozaki_plan_for
from .ozaki import weights_of as ozaki_weights
from .ozaki import weights_on as ozaki_weights_on
from .plan import MatmulPlan
from .planner import (
    COPY_BANDWIDTH,
    COPY_LAUNCH_S,
    COPY_SECOND_LAUNCH_S,
    FULL_RUN_BYTES,
    ROUND_TRIP_S,
    SHORT_RUN_DRAW,
    SM_DRAW,
    SWAP_MARGIN,
    SWAP_MAX_M,
    TF32_MV_ARCHS,
    TF32_MV_MARGIN,
    TF32_MV_MIN_K,
    TRANSPOSING_COPY_LAUNCH_S,
    best_split,
    candidates,
    forced,
    half_sector_rows,
    matrix_vector,
    model,
    padding,
    plan,
    ranked,
    split_options,
    staged,
    stream_terms,
    swappable,
    traffic,
    unavailable,
)
from .problem import Problem, Target, aligned, built_modules, operand_aligned, swapped
from .route import _BOUND as bound_plans
from .route import _mode as mode_of
from .route import bind, bound_for, cached_product, call_view, problem_of_call, result_shape
from .tuning import choose, remember
from .tuning import forget as forget_tuning
from .tuning import load as load_tuning
from .tuning import save as save_tuning
from .variants import (
    ACTIVATIONS,
    BLOCK_STAGE,
    C_STORE,
    DMMA_TILES,
    FEW_ROW_MEMORY,
    GEMV_BANDWIDTH,
    GEMV_R,
    H100_SMS,
    IDENTITY,
    INT8_MAX_K,
    K_CHUNK,
    LEADING,
    NO_MAP,
    REDUCE,
    SIGNATURES,
    STREAM_COST,
    STREAM_SLICE,
    STREAM_STAGE_BYTES,
    TENSOR_MAPS_EXACT,
    TF32_WGMMA_BANDWIDTH,
    VARIANTS,
    WGMMA_BANDWIDTH,
    WGMMA_SMEM,
    Variant,
    accumulator,
    algorithms,
    block_geometry,
    small_chunk,
    small_per_block,
    stream_fits,
    stream_geometry,
    stream_launch,
)

__all__ = [
    "ACTIVATIONS",
    "C_STORE",
    "COPY_BANDWIDTH",
    "COPY_LAUNCH_S",
    "COPY_SECOND_LAUNCH_S",
    "TRANSPOSING_COPY_LAUNCH_S",
    "DMMA_TILES",
    "FEW_ROW_MEMORY",
    "FULL_RUN_BYTES",
    "GEMV_BANDWIDTH",
    "GEMV_R",
    "H100_SMS",
    "IDENTITY",
    "INT8_MAX_K",
    "K_CHUNK",
    "LEADING",
    "NO_MAP",
    "OZAKI_COL_GROUPS",
    "OZAKI_CRT_COLUMNS",
    "OZAKI_INT8_TILES",
    "OZAKI_MAX_BITS",
    "OZAKI_MAX_K",
    "OZAKI_MODULI",
    "OZAKI_PANEL_BYTES",
    "OZAKI_PANEL_ROW_STEP",
    "OZAKI_STEPS",
    "REDUCE",
    "ROUND_TRIP_S",
    "SHORT_RUN_DRAW",
    "SIGNATURES",
    "BLOCK_STAGE",
    "STREAM_COST",
    "STREAM_SLICE",
    "STREAM_STAGE_BYTES",
    "SM_DRAW",
    "SWAP_MARGIN",
    "SWAP_MAX_M",
    "TF32_MV_ARCHS",
    "TF32_MV_MARGIN",
    "TF32_MV_MIN_K",
    "SWIZZLE_BYTES",
    "TENSOR_MAPS_EXACT",
    "TF32_WGMMA_BANDWIDTH",
    "VARIANTS",
    "WGMMA_BANDWIDTH",
    "WGMMA_SMEM",
    "BoundPlan",
    "MatmulPlan",
    "OzakiPlan",
    "Problem",
    "Target",
    "Variant",
    "accumulator",
    "crt_weights",
    "algorithms",
    "block_geometry",
    "aligned",
    "best_split",
    "bind",
    "bound_for",
    "bound_plans",
    "built_modules",
    "c_map",
    "c_map_args",
    "cached_product",
    "candidates",
    "choose",
    "forget_tuning",
    "load_tuning",
    "save_tuning",
    "ranked",
    "remember",
    "forced",
    "call_view",
    "half_sector_rows",
    "matrix_vector",
    "mode_of",
    "model",
    "operand_aligned",
    "ozaki_bits",
    "ozaki_budget",
    "ozaki_emulated",
    "ozaki_plan_for",
    "ozaki_panel_rows",
    "ozaki_plan",
    "ozaki_weights",
    "ozaki_weights_on",
    "plan",
    "problem_of_call",
    "result_shape",
    "small_chunk",
    "small_per_block",
    "split_options",
    "stream_fits",
    "stream_launch",
    "stream_geometry",
    "stream_terms",
    "swappable",
    "swapped",
    "tensor_map",
    "tensor_map_args",
    "padding",
    "staged",
    "traffic",
    "unavailable",
]
