// Teaching matrix-multiply kernels: C (M x N) = A (M x K) @ B (K x N), row-major, in four dtypes.
// Every matrix comes with its row stride (leading dimension, in elements); offsets are 64-bit.
// gridDim.y is capped at 65535 by the launcher, so blocks walk the row tiles in a grid-stride loop.
// Grid z is the batch index: matrix z of A, B and C starts z * batch_a (batch_b, batch_c) elements on.
// Each output goes through the fused epilogue (gpumat::Epilogue: alpha, beta, bias, activation) before
// it is rounded; the identity epilogue stores the plain product, as without one.
// Each family is one template over the element type T, instantiated per dtype by a macro
// (matmul_<family>_f32, _f64, _f16, _bf16): float64 accumulates in double (FP64 FMA); float16 and
// bfloat16 load as float, accumulate in float and round the result to the input dtype (nearest even).
#include "gpumat.cuh"

using gpumat::Dtype;

namespace {

// ep as a value the compiler cannot see through (an empty asm), so that its arithmetic stays at the store
// instead of being hoisted out of the row loop and held in registers through the k loop (tiled16_f16 and
// _bf16 on sm_90: 40 registers instead of 32, a quarter fewer blocks an SM).
__device__ __forceinline__ gpumat::Epilogue opaque(gpumat::Epilogue ep)
{
    asm volatile("" : "+d"(ep.alpha), "+d"(ep.beta), "+l"(ep.bias), "+l"(ep.bias_step), "+r"(ep.bias_along),
                 "+r"(ep.bias_f32), "+r"(ep.activation));
    return ep;
}

// naive: one thread per element of C, reading its row of A and column of B straight from global memory.
// Launch: block (16, 16), grid (ceil(N/16), min(ceil(M/16), 65535), batch).
template <class T>
__device__ __forceinline__ void naive(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                      int M, int N, int K, long long lda, long long ldb, long long ldc,
                                      const gpumat::Epilogue& ep)
{
    using Acc = typename Dtype<T>::Acc;
    const bool ep_id = ep.identity();
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    for (int row = blockIdx.y * blockDim.y + threadIdx.y; row < M; row += gridDim.y * blockDim.y) {
        if (col >= N) continue;
        const T* a = A + row * lda;
        Acc acc = 0;
        for (int k = 0; k < K; ++k)
            acc += Dtype<T>::acc(a[k]) * Dtype<T>::acc(B[k * ldb + col]);
        T* c = C + row * ldc + col;
        *c = Dtype<T>::from(ep_id ? acc : opaque(ep).apply<T>(acc, row, col, c));
    }
}

// tiled<TILE>: square shared-memory tiles: each block stages a TILE x TILE piece of A and of B per
// step of K (as the accumulation type), and each thread accumulates one element of C. Loads outside
// the matrices read as zero, so any M, N, K works without padding.
// Launch: block (TILE, TILE), grid (ceil(N/TILE), min(ceil(M/TILE), 65535), batch).
template <class T, int TILE>
__device__ __forceinline__ void tiled(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                      int M, int N, int K, long long lda, long long ldb, long long ldc,
                                      const gpumat::Epilogue& ep)
{
    using Acc = typename Dtype<T>::Acc;
    __shared__ Acc As[TILE][TILE];
    __shared__ Acc Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col = blockIdx.x * TILE + tx;
    const bool ep_id = ep.identity();
    const int tiles_m = (M + TILE - 1) / TILE;
    for (int tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
        const int row = tm * TILE + ty;
        Acc acc = 0;
        for (int k0 = 0; k0 < K; k0 += TILE) {
            As[ty][tx] = (row < M && k0 + tx < K) ? Dtype<T>::acc(A[row * lda + k0 + tx]) : Acc(0);
            Bs[ty][tx] = (k0 + ty < K && col < N) ? Dtype<T>::acc(B[(k0 + ty) * ldb + col]) : Acc(0);
            __syncthreads();
#pragma unroll
            for (int k = 0; k < TILE; ++k)
                acc += As[ty][k] * Bs[k][tx];
            __syncthreads();
        }
        if (row < M && col < N) {
            T* c = C + row * ldc + col;
            *c = Dtype<T>::from(ep_id ? acc : opaque(ep).apply<T>(acc, row, col, c));
        }
    }
}

template <class T>
__device__ __forceinline__ void tiled16(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                        int M, int N, int K, long long lda, long long ldb, long long ldc,
                                        const gpumat::Epilogue& ep)
{
    tiled<T, 16>(A, B, C, M, N, K, lda, ldb, ldc, ep);
}

template <class T>
__device__ __forceinline__ void tiled32(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                        int M, int N, int K, long long lda, long long ldb, long long ldc,
                                        const gpumat::Epilogue& ep)
{
    tiled<T, 32>(A, B, C, M, N, K, lda, ldb, ldc, ep);
}

// tiled16x64: the wider-tile strategy: a 16 x 64 tile of A and a 64 x 16 tile of B per step, so a block
// makes a quarter as many barrier round trips through K; each of the 16 x 16 threads stages four
// elements of each and still computes one element of C.
// Launch: block (16, 16), grid (ceil(N/16), min(ceil(M/16), 65535), batch).
template <class T>
__device__ __forceinline__ void tiled16x64(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                           int M, int N, int K, long long lda, long long ldb, long long ldc,
                                           const gpumat::Epilogue& ep)
{
    using Acc = typename Dtype<T>::Acc;
    constexpr int TS = 16, KT = 64;
    __shared__ Acc As[TS][KT];
    __shared__ Acc Bs[KT][TS];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col = blockIdx.x * TS + tx;
    const bool ep_id = ep.identity();
    const int tiles_m = (M + TS - 1) / TS;
    for (int tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
        const int row = tm * TS + ty;
        Acc acc = 0;
        for (int k0 = 0; k0 < K; k0 += KT) {
#pragma unroll
            for (int j = 0; j < KT / TS; ++j) {
                const int ka = k0 + tx + j * TS, kb = k0 + ty + j * TS;
                As[ty][tx + j * TS] = (row < M && ka < K) ? Dtype<T>::acc(A[row * lda + ka]) : Acc(0);
                Bs[ty + j * TS][tx] = (kb < K && col < N) ? Dtype<T>::acc(B[kb * ldb + col]) : Acc(0);
            }
            __syncthreads();
#pragma unroll
            for (int k = 0; k < KT; ++k)
                acc += As[ty][k] * Bs[k][tx];
            __syncthreads();
        }
        if (row < M && col < N) {
            T* c = C + row * ldc + col;
            *c = Dtype<T>::from(ep_id ? acc : opaque(ep).apply<T>(acc, row, col, c));
        }
    }
}

}  // namespace

// matmul_<family>_<dtype>(A, B, C, M, N, K, lda, ldb, ldc, batch_a, batch_b, batch_c, alpha, beta, bias,
// bias_step, bias_along, bias_f32, activation): grid z picks the matrices of the batch.
#define GPUMAT_MATMUL_ENTRY(FAMILY, THREADS, SFX, T)                                                       \
    extern "C" __global__ void __launch_bounds__(THREADS) matmul_##FAMILY##_##SFX(                          \
        const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C, int M, int N, int K,          \
        long long lda, long long ldb, long long ldc, GPUMAT_BATCH_PARAMS, GPUMAT_EPILOGUE_PARAMS)           \
    {                                                                                                        \
        gpumat::wait_for_previous_grid();                                                                    \
        const long long z = blockIdx.z;                                                                      \
        FAMILY<T>(A + z * batch_a, B + z * batch_b, C + z * batch_c, M, N, K, lda, ldb, ldc,                 \
                  GPUMAT_EPILOGUE_ARGS);                                                                     \
    }
#define GPUMAT_MATMUL_FAMILY(FAMILY, THREADS)                   \
    GPUMAT_MATMUL_ENTRY(FAMILY, THREADS, f32, float)            \
    GPUMAT_MATMUL_ENTRY(FAMILY, THREADS, f64, double)           \
    GPUMAT_MATMUL_ENTRY(FAMILY, THREADS, f16, __half)           \
    GPUMAT_MATMUL_ENTRY(FAMILY, THREADS, bf16, __nv_bfloat16)

GPUMAT_MATMUL_FAMILY(naive, 256)
GPUMAT_MATMUL_FAMILY(tiled16, 256)
GPUMAT_MATMUL_FAMILY(tiled32, 1024)
GPUMAT_MATMUL_FAMILY(tiled16x64, 256)
