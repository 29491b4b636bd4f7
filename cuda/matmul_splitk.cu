// Split-K's second pass for every matmul module: a split-K run writes `splits` partial products of
// M x N (row stride N, one after the other) into scratch, and one of these kernels adds them into C
// (row stride ldc), in an order fixed by M, N and `splits` alone (deterministic, no atomics), and applies
// the GEMM epilogue (gpumat::Epilogue) to each total before rounding it (the product kernels of a split-K
// run get the identity epilogue).
//
// Technique (gpumat::splitk_reduce in gpumat.cuh): a thread adds the splits of a group of consecutive
// outputs (4 float32 or 2 float64) with one 16-byte load a split, in split order, applies the epilogue
// and rounds once to the output dtype; for a small plane and many splits, 8 warps add 8 runs of the
// splits of 32 groups and the first adds the runs' sums. Launch: block (256,1,1), or (32,8,1) for the
// runs, with a grid-stride loop over the groups; splitk_reduce_launch in src/gpumat/runtime/geometry.py
// computes both. The partials must start 16-byte aligned (they come from the pool).
#include "gpumat.cuh"

// matmul_splitk_reduce_<accumulator dtype>_<output dtype>(partial, C, M, N, ldc, splits, alpha, beta,
// bias, bias_step, bias_along, bias_f32, activation)
// On sm_90 and later the launcher queues the reduction as a programmatic dependent of the product
// (gpumat.runtime.kernels, dependent=True): its launch follows the product's blocks instead of the
// product grid's completion and memory flush, and gpumat::wait_for_previous_grid (gpumat.cuh) holds its
// blocks until those are done and the partials are visible. A plain launch passes straight through it.
#define GPUMAT_SPLITK_REDUCE(NAME, ACC, OUT)                                                                  \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                                   \
        const ACC* __restrict__ partial, OUT* __restrict__ C, int M, int N, long long ldc, int splits,        \
        GPUMAT_EPILOGUE_PARAMS)                                                                               \
    {                                                                                                         \
        gpumat::wait_for_previous_grid();                                                                     \
        gpumat::splitk_reduce<ACC, OUT>(partial, C, M, N, ldc, splits, alpha, beta, bias, bias_step,          \
                                        bias_along, bias_f32, activation);                                    \
    }

// float32 partials (matmul_fast.cu, matmul_tc.cu, the _f32out entries of matmul_tc_half.cu, and the wgmma
// kernel's, matmul_wgmma.cuh) into float32, float16 or bfloat16; float64 partials (matmul_dmma.cu) into float64.
GPUMAT_SPLITK_REDUCE(matmul_splitk_reduce_f32_f32, float, float)
GPUMAT_SPLITK_REDUCE(matmul_splitk_reduce_f32_f16, float, __half)
GPUMAT_SPLITK_REDUCE(matmul_splitk_reduce_f32_bf16, float, __nv_bfloat16)
GPUMAT_SPLITK_REDUCE(matmul_splitk_reduce_f64_f64, double, double)
