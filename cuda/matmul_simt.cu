// Register-tiled SIMT matrix multiply for the dtypes the float32 SGEMM kernels do not cover:
// C (M x N) = A (M x K) @ B (K x N), row-major, any shape and any view (row strides lda, ldb, ldc in
// elements, 64-bit offsets; every load and store bounds-checked, so no padding and no alignment needed).
//   float64: FP64 fused multiply-adds in double, C in float64;
//   float16 / bfloat16: elements widened to float when staged, float accumulation, C rounded to the
//   input dtype (round-to-nearest-even) or written as float32 (the _f32out entries);
//   int8: elements widened to int when staged, int32 accumulation, C the int32 sums (exact while
//   K <= 131071, which the host checks; no epilogue: the host passes the identity): the int8 product on
//   GPUs without Hopper's INT8 wgmma tiles.
//
// Technique: a block of 256 threads owns a 64 x 64 tile of C; each thread a 4 x 4 sub-tile (rows
// 4 ty .. +3, columns 4 tx .. +3, tx, ty in 0..15), kept in registers. K advances in steps of 16: the
// block stages a 64 x 16 piece of A (stored transposed, k-major, so a thread's four A values are one
// 16-byte read) and a 16 x 64 piece of B in shared memory, as the accumulation type. Shared memory is
// double-buffered: the global loads for step s + 1 are issued into registers before step s's 16 x 16
// multiply-adds and stored to the other buffer after them, so one barrier a step suffices and the
// loads' latency hides behind the math. Tile rows are padded by 4 elements (16-byte aligned reads).
// Batched: grid z is the batch index, matrix z of A, B and C starting z * batch_a (batch_b, batch_c)
// elements on. Each output goes through the fused epilogue (gpumat::Epilogue) before it is rounded;
// identity() is tested once a thread, and the identity stores as before.
// Launch: block (256), grid (ceil(N/64), min(ceil(M/64), 65535), batch) (blocks walk further row tiles
// in a grid-stride loop); static shared memory 2 x 2 x 16 x 68 x sizeof(acc): 17.4 KB (float), 34.8 KB
// (double).
#include "gpumat.cuh"

using gpumat::Dtype;

namespace {

constexpr int BM = 64, BN = 64, BK = 16, PAD = 4, THREADS = 256;

// Four consecutive shared-memory values (16-byte aligned) into registers: one 128-bit read for float,
// two for double.
__device__ __forceinline__ void read4(const float* p, float (&r)[4])
{
    const float4 v = *reinterpret_cast<const float4*>(p);
    r[0] = v.x; r[1] = v.y; r[2] = v.z; r[3] = v.w;
}

__device__ __forceinline__ void read4(const double* p, double (&r)[4])
{
    const double2 v0 = *reinterpret_cast<const double2*>(p);
    const double2 v1 = *reinterpret_cast<const double2*>(p + 2);
    r[0] = v0.x; r[1] = v0.y; r[2] = v1.x; r[3] = v1.y;
}

__device__ __forceinline__ void read4(const int* p, int (&r)[4])
{
    const int4 v = *reinterpret_cast<const int4*>(p);
    r[0] = v.x; r[1] = v.y; r[2] = v.z; r[3] = v.w;
}

// acc + a b: one fused multiply-add in the accumulator's type (exact in int)
__device__ __forceinline__ float mul_add(float a, float b, float acc) { return fmaf(a, b, acc); }
__device__ __forceinline__ double mul_add(double a, double b, double acc) { return fma(a, b, acc); }
__device__ __forceinline__ int mul_add(int a, int b, int acc) { return a * b + acc; }

template <class T, class Out>
__device__ __forceinline__ void simt64x64(const T* __restrict__ A, const T* __restrict__ B, Out* __restrict__ C,
                                          int M, int N, int K, long long lda, long long ldb, long long ldc,
                                          const gpumat::Epilogue& ep)
{
    using Acc = typename Dtype<T>::Acc;
    __shared__ __align__(16) Acc As[2][BK][BM + PAD];   // As[b][k][m] = A(m0 + m, k0 + k)
    __shared__ __align__(16) Acc Bs[2][BK][BN + PAD];   // Bs[b][k][n] = B(k0 + k, n0 + n)
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int a_row = tid / 4, a_k = (tid % 4) * 4;     // this thread's share of the A piece: 4 along k
    const int b_k = tid / 16, b_n = (tid % 16) * 4;     // and of the B piece: 4 along n
    const int n0 = blockIdx.x * BN;
    const int tiles_m = (M + BM - 1) / BM;
    const bool ep_id = ep.identity();
    for (int tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
        const int m0 = tm * BM;
        Acc acc[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j)
                acc[i][j] = Acc(0);
        Acc ra[4], rb[4];
        const bool a_in = m0 + a_row < M;
        const T* a_src = A + (long long)(m0 + a_row) * lda;
        const int b_col = n0 + b_n;
        auto load = [&](int k0) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int ka = k0 + a_k + e;
                ra[e] = (a_in && ka < K) ? Dtype<T>::acc(a_src[ka]) : Acc(0);
                const int kb = k0 + b_k;
                rb[e] = (kb < K && b_col + e < N) ? Dtype<T>::acc(B[(long long)kb * ldb + b_col + e]) : Acc(0);
            }
        };
        auto store = [&](int buf) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                As[buf][a_k + e][a_row] = ra[e];
                Bs[buf][b_k][b_n + e] = rb[e];
            }
        };
        load(0);
        store(0);
        __syncthreads();
        int buf = 0;
        for (int k0 = 0; k0 < K; k0 += BK) {
            const bool more = k0 + BK < K;
            if (more)
                load(k0 + BK);   // in flight during the math below
#pragma unroll
            for (int k = 0; k < BK; ++k) {
                Acc a[4], b[4];
                read4(&As[buf][k][ty * 4], a);
                read4(&Bs[buf][k][tx * 4], b);
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        acc[i][j] = mul_add(a[i], b[j], acc[i][j]);
            }
            if (more)
                store(buf ^ 1);   // nobody reads buf ^ 1 now: the last step's barrier is behind everyone
            __syncthreads();
            buf ^= 1;
        }
        if constexpr (!std::is_integral_v<Acc>) if (!ep_id) {  // (the int8 entry takes no epilogue)
            // The epilogue, in place, on the outputs inside C; the stores below are the plain ones. One
            // thread row a pass of a rolled loop: row i is in acc[0] and the rows move up one a pass,
            // back in place after 4 passes (unrolled, the float64 kernel's code was 40 times as large).
            // ep passes through an empty asm: seen through, its arithmetic was hoisted out of the
            // row-tile loop and held through the main loop (87 registers, from 77, on sm_90: 2 blocks an SM
            // instead of 3).
#pragma unroll 1
            for (int i = 0; i < 4; ++i) {
                gpumat::Epilogue e = ep;
                asm volatile("" : "+d"(e.alpha), "+d"(e.beta), "+l"(e.bias), "+l"(e.bias_step), "+r"(e.bias_along),
                             "+r"(e.bias_f32), "+r"(e.activation));
                const int row = m0 + ty * 4 + i;
                if (row < M) {
                    const Out* dst = C + (long long)row * ldc;
#pragma unroll
                    for (int j = 0; j < 4; ++j) {
                        const int col = n0 + tx * 4 + j;
                        if (col < N) acc[0][j] = e.apply<Out>(acc[0][j], row, col, dst + col);
                    }
                }
                Acc first[4];
#pragma unroll
                for (int j = 0; j < 4; ++j) first[j] = acc[0][j];
#pragma unroll
                for (int k = 0; k < 3; ++k)
#pragma unroll
                    for (int j = 0; j < 4; ++j) acc[k][j] = acc[k + 1][j];
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[3][j] = first[j];
            }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = m0 + ty * 4 + i;
            if (row < M) {
                Out* dst = C + (long long)row * ldc;
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    const int col = n0 + tx * 4 + j;
                    if (col < N)
                        dst[col] = Dtype<Out>::from(acc[i][j]);
                }
            }
        }
    }
}

}  // namespace

// matmul_simt64x64_<dtype>[_f32out](A, B, C, M, N, K, lda, ldb, ldc, batch_a, batch_b, batch_c, alpha,
// beta, bias, bias_step, bias_along, bias_f32, activation): grid z picks the matrices of the batch.
#define GPUMAT_SIMT(NAME, T, OUT)                                                                           \
    extern "C" __global__ void __launch_bounds__(THREADS, 2) NAME(                                            \
        const T* __restrict__ A, const T* __restrict__ B, OUT* __restrict__ C, int M, int N, int K,        \
        long long lda, long long ldb, long long ldc, GPUMAT_BATCH_PARAMS, GPUMAT_EPILOGUE_PARAMS)           \
    {                                                                                                        \
        gpumat::wait_for_previous_grid();                                                                    \
        const long long z = blockIdx.z;                                                                      \
        simt64x64<T, OUT>(A + z * batch_a, B + z * batch_b, C + z * batch_c, M, N, K, lda, ldb, ldc,         \
                          GPUMAT_EPILOGUE_ARGS);                                                             \
    }

GPUMAT_SIMT(matmul_simt64x64_f64, double, double)
GPUMAT_SIMT(matmul_simt64x64_f16, __half, __half)
GPUMAT_SIMT(matmul_simt64x64_f16_f32out, __half, float)
GPUMAT_SIMT(matmul_simt64x64_bf16, __nv_bfloat16, __nv_bfloat16)
GPUMAT_SIMT(matmul_simt64x64_bf16_f32out, __nv_bfloat16, float)
GPUMAT_SIMT(matmul_simt64x64_s8, int8_t, int)  // C int32
