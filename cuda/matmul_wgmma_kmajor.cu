// gpumat-archs: 90a
// The wgmma GEMM's entries for the inputs wgmma reads K-major alone: float32 at TF32, int8 and FP8 (the
// template, its technique and its launch: matmul_wgmma.cuh).
#include "matmul_wgmma.cuh"

// matmul_wgmma<BM>x<BN>bt_tf32(map_a, map_b, map_c, C, M, N, K, ldc, k_chunk, c_store, batch, c_layer,
// batched, A, lda, sa, W, ldw, sw, alpha, beta, bias, bias_step, bias_along, bias_f32, activation): float32
// A (M x K) times W.T for a row-major N x K float32 W (B stored transposed), at TF32: wgmma m64n<BN>k8,
// float32 accumulation and C. The same launch as the 16-bit entries of the tile (block, shared memory,
// grid, persistent work items, c_store: 2, C transposed for a swapped layer, on the tiles of at most 64
// columns alone; a tile of 16 columns, 64 bytes of C, by plain stores); map_a and map_b are float32
// tensors of element type TFLOAT32 (the copy engine rounds to TF32 on the way in) with 32 x BM and 32 x BN
// boxes (a k tile of 32); A / lda / sa and W / ldw / sw are the storage the maps describe (row and batch
// strides in elements; a batch stride of 0: one matrix for the batch), read only to recompute outputs
// that come out non-finite. Tiles (k tile 32, the 16-bit tiles' stage bytes):
// 128 x 256 (4 stages), 128 x 128 (6), 128 x 64 (8), 64 x 64 (13), 64 x 32 (17), 64 x 16 (20); the
// narrower ones for products whose 128 x 128 tiles leave SMs idle or compute mostly zeros (attention's
// values at head size 64, layers on few tokens). Five copies of the body: the plain product, and one
// finishing body an activation.
template <int BM, int BN, bool A_MMAJOR>
__device__ __forceinline__ void gemm_tf32(const TensorMap& map_a, const TensorMap& map_b, const TensorMap& map_c,
                                          float* C, int M, int N, int K, long long ldc, int k_chunk, int c_store,
                                          const Batch& b, const float* A, long long lda, long long sa, const float* W,
                                          long long ldw, long long sw, const gpumat::Epilogue& ep)
{
    if (scales_only(ep))
        gemm<BM, BN, float, float, false, A_MMAJOR, true>(map_a, map_b, map_c, C, M, N, K, ldc, k_chunk, c_store, b,
                                                           A, lda, sa, W, ldw, sw, ep);
    else if (ep.activation == 1)
        gemm<BM, BN, float, float, true, A_MMAJOR, true, 1>(map_a, map_b, map_c, C, M, N, K, ldc, k_chunk, c_store, b,
                                                             A, lda, sa, W, ldw, sw, ep);
    else if (ep.activation == 2)
        gemm<BM, BN, float, float, true, A_MMAJOR, true, 2>(map_a, map_b, map_c, C, M, N, K, ldc, k_chunk, c_store, b,
                                                             A, lda, sa, W, ldw, sw, ep);
    else if (ep.activation == 3)
        gemm<BM, BN, float, float, true, A_MMAJOR, true, 3>(map_a, map_b, map_c, C, M, N, K, ldc, k_chunk, c_store, b,
                                                             A, lda, sa, W, ldw, sw, ep);
    else
        gemm<BM, BN, float, float, true, A_MMAJOR, true, 0>(map_a, map_b, map_c, C, M, N, K, ldc, k_chunk, c_store, b,
                                                             A, lda, sa, W, ldw, sw, ep);
}

#define GPUMAT_WGMMA_TF32(NAME, BM, BN, A_MMAJOR)                                                             \
    extern "C" __global__ void __launch_bounds__(Tile<BM, BN>::THREADS, 1) NAME(                              \
        const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,                    \
        const __grid_constant__ TensorMap map_c, float* __restrict__ C, int M, int N, int K, long long ldc,   \
        int k_chunk, int c_store, int batch, long long c_layer, int batched, const float* __restrict__ A,     \
        long long lda, long long sa, const float* __restrict__ W, long long ldw, long long sw,               \
        GPUMAT_EPILOGUE_PARAMS)                                                                               \
    {                                                                                                         \
        gemm_tf32<BM, BN, A_MMAJOR>(map_a, map_b, map_c, C, M, N, K, ldc, k_chunk, c_store,                    \
                                    Batch(batch, c_layer, batched), A, lda, sa, W, ldw, sw,                   \
                                    GPUMAT_EPILOGUE_ARGS);                                                    \
    }

GPUMAT_WGMMA_TF32(matmul_wgmma128x256bt_tf32, 128, 256, false)
GPUMAT_WGMMA_TF32(matmul_wgmma128x128bt_tf32, 128, 128, false)
GPUMAT_WGMMA_TF32(matmul_wgmma128x64bt_tf32, 128, 64, false)
GPUMAT_WGMMA_TF32(matmul_wgmma64x64bt_tf32, 64, 64, false)
GPUMAT_WGMMA_TF32(matmul_wgmma64x32bt_tf32, 64, 32, false)
GPUMAT_WGMMA_TF32(matmul_wgmma64x16bt_tf32, 64, 16, false)

// matmul_wgmma<BM>x<BN>atbt_tf32 (the *bt_tf32 entries' arguments and launch): the same product with A given
// transposed, X.T @ W.T for a row-major K x M float32 X, read in place; above all the swapped form of a
// product whose B is row-major, C^T = B^T @ A^T written into C stored transposed (c_store 2), the one
// TF32 product that reads a row-major B without transposing it first. map_a describes X as K rows of M
// in 32 x 32 boxes (32 floats of M x a k tile), two a consumer's 64 rows; wgmma reads TF32 from shared
// memory K-major alone, so each consumer reads its A elements into registers (Wgmma::run_regs) and B
// from shared memory as the bt entries do. On the 128 x 128 tile and those of at most 64 columns (the
// ones that write C transposed; 128 x 256 spilled its accumulators, nvcc 13.0). The 128 x 128 tile's
// register loads of A feed twice the columns of 128 x 64's, and it stages 0.67 times the bytes a
// product: a large product with B row-major (H200, ncu, 16 x 512 x 4096 x 1024 at tf32: cuBLAS on 64 x 256
// tiles, A from registers, 268 us at base clocks, 128 x 64 here 448).
GPUMAT_WGMMA_TF32(matmul_wgmma128x128atbt_tf32, 128, 128, true)
GPUMAT_WGMMA_TF32(matmul_wgmma128x64atbt_tf32, 128, 64, true)
GPUMAT_WGMMA_TF32(matmul_wgmma64x64atbt_tf32, 64, 64, true)
GPUMAT_WGMMA_TF32(matmul_wgmma64x32atbt_tf32, 64, 32, true)
GPUMAT_WGMMA_TF32(matmul_wgmma64x16atbt_tf32, 64, 16, true)

// matmul_wgmma<BM>x<BN>bt_s8_residues(map_a, map_b, map_c, C, M, N, K, ldc, k_chunk, c_store, batch,
// c_layer, batched): for each product l of the batch (l < 16), int8 A_l (M x K) times W_l.T for a row-major
// N x K int8 W_l (both K-major), wgmma m64n<BN>k32 with int32 accumulation (exact while K <= 131071), C_l
// the sums' symmetric residues modulo m_l, the Ozaki scheme's l-th modulus (gpumat.cuh), in int8: no
// epilogue, one split (k_chunk = K). The same launch as the 16-bit and TF32 entries of the tile; map_a and
// map_b are UINT8 tensors (the bytes as they are) with 128 x BM and 128 x BN boxes (a k tile of 128), map_c
// a UINT8 tensor with 128 x 64 boxes (c_store 1), or C leaves by plain stores (c_store 0).
#define GPUMAT_WGMMA_S8(NAME, BM, BN)                                                                         \
    extern "C" __global__ void __launch_bounds__(Tile<BM, BN>::THREADS, 1) NAME(                              \
        const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,                    \
        const __grid_constant__ TensorMap map_c, int8_t* __restrict__ C, int M, int N, int K, long long ldc,  \
        int k_chunk, int c_store, int batch, long long c_layer, int batched)                                  \
    {                                                                                                         \
        const int8_t* none = nullptr;                                                                         \
        gemm<BM, BN, int8_t, int8_t, false, false, true>(map_a, map_b, map_c, C, M, N, K, ldc, k_chunk,        \
                                                         c_store, Batch(batch, c_layer, batched), none, 0, 0, \
                                                         none, 0, 0,                                          \
                                                         gpumat::Epilogue{1.0, 0.0, nullptr, 0, 0, 0, 0});    \
    }

GPUMAT_WGMMA_S8(matmul_wgmma128x256bt_s8_residues, 128, 256)
GPUMAT_WGMMA_S8(matmul_wgmma128x128bt_s8_residues, 128, 128)

// matmul_wgmma<BM>x<BN>bt_s8(map_a, map_b, map_c, C, M, N, K, ldc, k_chunk, c_store, batch, c_layer,
// batched, alpha, beta, bias, bias_step, bias_along, bias_f32, activation): int8 A (M x K) times W.T for a
// row-major N x K int8 W (both K-major; gm.matmul of int8 matrices, a row-major B transposed first by the
// host), wgmma m64n<BN>k32 with int32 accumulation, C the int32 sums (exact while K <= 131071, which the
// host checks), on the six tiles of the 16-bit entries (128 x 256 to 64 x 16: the narrow ones for mid-size
// products and for a layer on few tokens, swapped). The 16-bit entries' argument list and launch (block,
// shared memory, persistent grid over the batch's tiles); the epilogue's arguments are taken and never read (the host passes the identity);
// one split (k_chunk = K). map_a and map_b: UINT8 tensors (the bytes as they are) with 128 x BM and
// 128 x BN boxes (a k tile of 128); C through an INT32 map of 32 x 64 boxes (c_store 1; a tile of 16
// columns, 64 bytes of C, by plain stores), by plain stores (0), or by plain stores into C stored
// transposed (2: a swapped product).
#define GPUMAT_WGMMA_S8_S32(NAME, BM, BN)                                                                     \
    extern "C" __global__ void __launch_bounds__(Tile<BM, BN>::THREADS, 1) NAME(                              \
        const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,                    \
        const __grid_constant__ TensorMap map_c, int* __restrict__ C, int M, int N, int K, long long ldc,     \
        int k_chunk, int c_store, int batch, long long c_layer, int batched, GPUMAT_EPILOGUE_PARAMS)          \
    {                                                                                                         \
        const int8_t* none = nullptr;                                                                         \
        gemm<BM, BN, int8_t, int, false, false, true>(map_a, map_b, map_c, C, M, N, K, ldc, k_chunk, c_store,  \
                                                      Batch(batch, c_layer, batched), none, 0, 0, none, 0, 0,  \
                                                      GPUMAT_EPILOGUE_ARGS);                                   \
    }

GPUMAT_WGMMA_S8_S32(matmul_wgmma128x256bt_s8, 128, 256)
GPUMAT_WGMMA_S8_S32(matmul_wgmma128x128bt_s8, 128, 128)
GPUMAT_WGMMA_S8_S32(matmul_wgmma128x64bt_s8, 128, 64)
GPUMAT_WGMMA_S8_S32(matmul_wgmma64x64bt_s8, 64, 64)
GPUMAT_WGMMA_S8_S32(matmul_wgmma64x32bt_s8, 64, 32)
GPUMAT_WGMMA_S8_S32(matmul_wgmma64x16bt_s8, 64, 16)

// matmul_wgmma<BM>x<BN>bt_s8_<bf16|f16|f32>out: the *bt_s8 entries' product (int32 accumulators, exact while
// K <= 131071) into a float C: each sum rounded once to float32, then the epilogue in float32 (alpha: the
// operands' dequantising scales) and C rounded to its dtype, as the 16-bit entries finish theirs; their
// argument list, launch and C paths (c_store 0, 1, 2). Not on the 128 x 256 tile: there the sums' floats
// beside the int32 accumulators spilled (ptxas, nvcc 13.0: 8 to 292 spill stores a thread).
GPUMAT_WGMMA_HALF(matmul_wgmma128x128bt_s8_bf16out, 128, 128, int8_t, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x128bt_s8_f16out, 128, 128, int8_t, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x128bt_s8_f32out, 128, 128, int8_t, float, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x64bt_s8_bf16out, 128, 64, int8_t, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x64bt_s8_f16out, 128, 64, int8_t, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x64bt_s8_f32out, 128, 64, int8_t, float, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x64bt_s8_bf16out, 64, 64, int8_t, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x64bt_s8_f16out, 64, 64, int8_t, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x64bt_s8_f32out, 64, 64, int8_t, float, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x32bt_s8_bf16out, 64, 32, int8_t, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x32bt_s8_f16out, 64, 32, int8_t, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x32bt_s8_f32out, 64, 32, int8_t, float, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x16bt_s8_bf16out, 64, 16, int8_t, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x16bt_s8_f16out, 64, 16, int8_t, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x16bt_s8_f32out, 64, 16, int8_t, float, false, true)
// matmul_wgmma<BM>x<BN>bt_<e4m3|e5m2>_<bf16|f16|f32>out(map_a, map_b, map_c, C, M, N, K, ldc, k_chunk,
// c_store, batch, c_layer, batched, alpha, beta, bias, bias_step, bias_along, bias_f32, activation): FP8
// A (M x K) times W.T for a row-major N x K W of the same FP8 format (both K-major: wgmma reads FP8 no other
// way; gm.matmul of FP8 matrices, any other layout copied first by the host), wgmma m64n<BN>k32 with float32
// accumulation, C in bfloat16, float16 or float32 through the epilogue (the host folds the operands'
// per-tensor scales into alpha). The 16-bit bt entries' arguments, launch, tiles and C paths (c_store 0, 1,
// 2); map_a and map_b: UINT8 tensors (the bytes as they are) with 128 x BM and 128 x BN boxes (a k tile of
// 128 elements). The tensor cores add FP8 products into float32 accumulators at a reduced precision of their
// own (the sums are not IEEE float32 sums: docs/guide/matmul.md gives the bound the tests hold).
GPUMAT_WGMMA_HALF(matmul_wgmma128x256bt_e4m3_bf16out, 128, 256, __nv_fp8_e4m3, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x256bt_e4m3_f16out, 128, 256, __nv_fp8_e4m3, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x256bt_e4m3_f32out, 128, 256, __nv_fp8_e4m3, float, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x256bt_e5m2_bf16out, 128, 256, __nv_fp8_e5m2, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x256bt_e5m2_f16out, 128, 256, __nv_fp8_e5m2, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x256bt_e5m2_f32out, 128, 256, __nv_fp8_e5m2, float, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x128bt_e4m3_bf16out, 128, 128, __nv_fp8_e4m3, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x128bt_e4m3_f16out, 128, 128, __nv_fp8_e4m3, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x128bt_e4m3_f32out, 128, 128, __nv_fp8_e4m3, float, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x128bt_e5m2_bf16out, 128, 128, __nv_fp8_e5m2, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x128bt_e5m2_f16out, 128, 128, __nv_fp8_e5m2, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x128bt_e5m2_f32out, 128, 128, __nv_fp8_e5m2, float, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x64bt_e4m3_bf16out, 128, 64, __nv_fp8_e4m3, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x64bt_e4m3_f16out, 128, 64, __nv_fp8_e4m3, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x64bt_e4m3_f32out, 128, 64, __nv_fp8_e4m3, float, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x64bt_e5m2_bf16out, 128, 64, __nv_fp8_e5m2, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x64bt_e5m2_f16out, 128, 64, __nv_fp8_e5m2, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma128x64bt_e5m2_f32out, 128, 64, __nv_fp8_e5m2, float, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x64bt_e4m3_bf16out, 64, 64, __nv_fp8_e4m3, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x64bt_e4m3_f16out, 64, 64, __nv_fp8_e4m3, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x64bt_e4m3_f32out, 64, 64, __nv_fp8_e4m3, float, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x64bt_e5m2_bf16out, 64, 64, __nv_fp8_e5m2, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x64bt_e5m2_f16out, 64, 64, __nv_fp8_e5m2, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x64bt_e5m2_f32out, 64, 64, __nv_fp8_e5m2, float, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x32bt_e4m3_bf16out, 64, 32, __nv_fp8_e4m3, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x32bt_e4m3_f16out, 64, 32, __nv_fp8_e4m3, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x32bt_e4m3_f32out, 64, 32, __nv_fp8_e4m3, float, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x32bt_e5m2_bf16out, 64, 32, __nv_fp8_e5m2, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x32bt_e5m2_f16out, 64, 32, __nv_fp8_e5m2, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x32bt_e5m2_f32out, 64, 32, __nv_fp8_e5m2, float, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x16bt_e4m3_bf16out, 64, 16, __nv_fp8_e4m3, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x16bt_e4m3_f16out, 64, 16, __nv_fp8_e4m3, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x16bt_e4m3_f32out, 64, 16, __nv_fp8_e4m3, float, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x16bt_e5m2_bf16out, 64, 16, __nv_fp8_e5m2, __nv_bfloat16, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x16bt_e5m2_f16out, 64, 16, __nv_fp8_e5m2, __half, false, true)
GPUMAT_WGMMA_HALF(matmul_wgmma64x16bt_e5m2_f32out, 64, 16, __nv_fp8_e5m2, float, false, true)
