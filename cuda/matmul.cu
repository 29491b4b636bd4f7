// Teaching matrix-multiply kernels: C (M x N) = A (M x K) @ B (K x N), row-major, float32.
// Every matrix comes with its row stride (leading dimension, in elements); offsets are 64-bit.
// gridDim.y is capped at 65535 by the launcher, so blocks walk the row tiles in a grid-stride loop.

// One thread per element of C, reading its row of A and column of B straight from global memory.
// Launch: block (16, 16), grid (ceil(N/16), min(ceil(M/16), 65535)).
extern "C" __global__ void matmul_naive(const float* __restrict__ A, const float* __restrict__ B,
                                        float* __restrict__ C, int M, int N, int K,
                                        long long lda, long long ldb, long long ldc)
{
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    for (int row = blockIdx.y * blockDim.y + threadIdx.y; row < M; row += gridDim.y * blockDim.y) {
        if (col >= N) continue;
        const float* a = A + row * lda;
        float acc = 0.0f;
        for (int k = 0; k < K; ++k)
            acc += a[k] * B[k * ldb + col];
        C[row * ldc + col] = acc;
    }
}

// Square shared-memory tiles: each block stages a TILE x TILE piece of A and of B per step of K,
// and each thread accumulates one element of C. Loads outside the matrices read as zero, so any
// M, N, K works without padding. Launch: block (TILE, TILE), grid (ceil(N/TILE), min(ceil(M/TILE), 65535)).
template <int TILE>
__device__ __forceinline__ void matmul_tiled(const float* __restrict__ A, const float* __restrict__ B,
                                             float* __restrict__ C, int M, int N, int K,
                                             long long lda, long long ldb, long long ldc)
{
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col = blockIdx.x * TILE + tx;
    const int tiles_m = (M + TILE - 1) / TILE;
    for (int tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
        const int row = tm * TILE + ty;
        float acc = 0.0f;
        for (int k0 = 0; k0 < K; k0 += TILE) {
            As[ty][tx] = (row < M && k0 + tx < K) ? A[row * lda + k0 + tx] : 0.0f;
            Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * ldb + col] : 0.0f;
            __syncthreads();
#pragma unroll
            for (int k = 0; k < TILE; ++k)
                acc += As[ty][k] * Bs[k][tx];
            __syncthreads();
        }
        if (row < M && col < N)
            C[row * ldc + col] = acc;
    }
}

extern "C" __global__ void __launch_bounds__(256) matmul_tiled16(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
    int M, int N, int K, long long lda, long long ldb, long long ldc)
{
    matmul_tiled<16>(A, B, C, M, N, K, lda, ldb, ldc);
}

extern "C" __global__ void __launch_bounds__(1024) matmul_tiled32(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
    int M, int N, int K, long long lda, long long ldb, long long ldc)
{
    matmul_tiled<32>(A, B, C, M, N, K, lda, ldb, ldc);
}

// The wider-tile strategy: a 16 x 64 tile of A and a 64 x 16 tile of B per step, so a block makes a
// quarter as many barrier round trips through K; each of the 16 x 16 threads stages four elements of
// each and still computes one element of C. Launch: block (16, 16), grid (ceil(N/16), min(ceil(M/16), 65535)).
extern "C" __global__ void __launch_bounds__(256) matmul_tiled16x64(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
    int M, int N, int K, long long lda, long long ldb, long long ldc)
{
    constexpr int T = 16, KT = 64;
    __shared__ float As[T][KT];
    __shared__ float Bs[KT][T];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col = blockIdx.x * T + tx;
    const int tiles_m = (M + T - 1) / T;
    for (int tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
        const int row = tm * T + ty;
        float acc = 0.0f;
        for (int k0 = 0; k0 < K; k0 += KT) {
#pragma unroll
            for (int j = 0; j < KT / T; ++j) {
                const int ka = k0 + tx + j * T, kb = k0 + ty + j * T;
                As[ty][tx + j * T] = (row < M && ka < K) ? A[row * lda + ka] : 0.0f;
                Bs[ty + j * T][tx] = (kb < K && col < N) ? B[kb * ldb + col] : 0.0f;
            }
            __syncthreads();
#pragma unroll
            for (int k = 0; k < KT; ++k)
                acc += As[ty][k] * Bs[k][tx];
            __syncthreads();
        }
        if (row < M && col < N)
            C[row * ldc + col] = acc;
    }
}
