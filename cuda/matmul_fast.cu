// Fast FP32 SIMT matrix multiply (plain FFMA, no tensor cores): C (M x N) = A (M x K) @ B (K x N),
// row-major with row strides lda / ldb / ldc in elements; all offsets are 64-bit.
//
// Every GEMM entry point shares one signature and one split-K contract: block z = s multiplies over
// k in [s*k_chunk, min(K, (s+1)*k_chunk)) and writes its whole M x N result to C + s*M*ldc, so a
// split-K caller passes a scratch buffer (ldc = N) and then runs matmul_splitk_reduce; a plain run
// uses gridDim.z = 1 and k_chunk = K. blockIdx.x walks N tiles; blockIdx.y walks M tiles in a
// grid-stride loop because gridDim.y is capped at 65535. blockDim must be (THREADS, 1, 1).
//
// Technique (same for every tile shape, see Tile below):
//  * each thread owns an 8x8 block of C held in registers, as 2x2 sub-blocks of 4x4 that sit 16 rows
//    and 32 columns apart; a warp is 4 lanes (M) x 8 lanes (N) and covers a 32 x 64 warp tile, so
//    each k step costs 4 LDS.128 (2 of A, 2 of B) per 64 FFMA and every LDS.128 touches at most
//    8 distinct float4 words in one 128-byte row: one conflict-free shared-memory wavefront;
//  * A is stored transposed in shared memory (As[k][m]) so that A fragments are float4 reads too;
//  * B is stored with the two floats of each pair swapped (columns 1,0,3,2 in every float4, see
//    Stager::store and multiply_tile). This is for the register file, not for shared memory: the
//    register file has two banks (even / odd register number), and an FFMA whose two non-reused
//    source registers share a bank waits a cycle (a "dispatch stall"). The float4 loads and stores
//    give b[j] and the accumulator acc[i][j] the same register parity (both are j%2 inside an
//    aligned quad), so ptxas' usual order -- a[i] held in the reuse cache, b[j] and acc[i][j] read --
//    conflicted on most FFMAs; the swap gives b[j] the opposite parity. Measured on the H100: bank
//    conflicts in the 128x128 main loop 72% -> 50% of FFMAs, +2.5% throughput at 4096^3;
//  * the next k tile is fetched from global memory into registers while the current one is
//    multiplied out of shared memory, and shared memory is double-buffered, so there is exactly one
//    __syncthreads per k tile. This is portable to every arch (no cp.async is needed: the A
//    operand has to be transposed on its way into shared memory, which goes through registers);
//  * operands are read with 128-bit loads when that is legal for the operand (see gemm_entry) and
//    with scalar loads otherwise; edges are handled inside the kernel (see Stager), so any M, N, K
//    and any view works without padding copies; stores are guarded per element;
//  * warps whose whole 32 x 64 warp tile lies outside C skip the multiply, which makes the thin
//    edge tiles of sizes like 4097 nearly free;
//  * BK = 8 with two blocks per SM (128 registers) for the large tile: the co-resident block hides
//    each block's barrier, and a deeper k tile would not fit the register budget without spills.

#include <stdint.h>

namespace {

constexpr int WARP_TILE_M = 32;
constexpr int WARP_TILE_N = 64;

template <int BM_, int BN_, int BK_>
struct Tile {
    static constexpr int BM = BM_, BN = BN_, BK = BK_;
    static constexpr int WARPS_N = BN / WARP_TILE_N;
    static constexpr int THREADS = (BM / WARP_TILE_M) * WARPS_N * 32;
    // Row stride of the transposed A tile. The +4 keeps rows 16-byte aligned for float4 reads and
    // puts the two lanes of a loader pair (which write k and k+4 of the same m) 16 banks apart, so
    // the transposing scalar stores of a warp (16 m x 2 k) hit 32 distinct banks.
    static constexpr int AS = BM + 4;
    static constexpr int A_LOADS = BM * BK / 4 / THREADS;   // float4 of A per thread per k tile
    static constexpr int B_LOADS = BK * BN / 4 / THREADS;   // float4 of B per thread per k tile
    static constexpr int SMEM_FLOATS = 2 * BK * (AS + BN);  // two stages of A and B
    static_assert(BM % WARP_TILE_M == 0 && BN % WARP_TILE_N == 0 && BK % 8 == 0, "tile shape");
    static_assert(A_LOADS * THREADS * 4 == BM * BK && B_LOADS * THREADS * 4 == BK * BN, "loads split evenly");
    // Loader maps below: lane pairs read 2 x float4 along k of one A row, so a warp reads 16 full
    // 32-byte sectors; these asserts make the per-load offsets compile-time constants.
    static_assert(BM % (THREADS / 2) == 0 && THREADS % (BN / 4) == 0, "loader mapping");

    // A load i of thread t covers row (t/2 + a_row(i)), k (4*(t%2) + a_k(i)) .. +3 of the tile.
    static __device__ __forceinline__ constexpr int a_row(int i) { return (i * THREADS / 2) % BM; }
    static __device__ __forceinline__ constexpr int a_k(int i) { return (i * THREADS / 2) / BM * 8; }
    // B load i of thread t covers k row (t/(BN/4) + b_k(i)), columns 4*(t%(BN/4)) .. +3.
    static __device__ __forceinline__ constexpr int b_k(int i) { return i * (THREADS * 4 / BN); }
};

// Reads p[0..3], giving zero where !ok and in lanes j >= n. The scalar form issues one predicated
// load per valid lane. The 128-bit form (16-byte aligned p, row stride a multiple of 4) reads the
// whole aligned chunk and zeroes lanes j >= n by select: such a chunk never extends past
// roundup4(row width) <= stride, so it stays inside the row's own span of the allocation.
template <bool VEC>
__device__ __forceinline__ float4 load4(const float* __restrict__ p, bool ok, int n)
{
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (VEC) {
        if (ok && n > 0) v = __ldg(reinterpret_cast<const float4*>(p));
        v.y = n > 1 ? v.y : 0.0f;
        v.z = n > 2 ? v.z : 0.0f;
        v.w = n > 3 ? v.w : 0.0f;
    } else {
        if (ok && n > 0) v.x = __ldg(p);
        if (ok && n > 1) v.y = __ldg(p + 1);
        if (ok && n > 2) v.z = __ldg(p + 2);
        if (ok && n > 3) v.w = __ldg(p + 3);
    }
    return v;
}

// Global -> register -> shared staging of one BK-deep k tile of A (BM x BK) and B (BK x BN).
//
// Rows of A past M and (128-bit form) columns of B past N are not masked but clamped to a valid
// row / aligned column chunk: whatever they read only reaches rows or columns of C that are never
// stored, and the loads of a full k tile need no predicates at all. Only the k direction, where a
// stray value would be summed into real outputs, is zero-filled (last, partial tile only).
template <class T>
struct Stager {
    static constexpr int A_ROWS = T::BM / (T::THREADS / 2);
    const float* a[A_ROWS];  // first element of this thread's A row(s) in the current k tile
    const float* b;          // first element of this thread's B columns in the current k tile
    long long ldb;
    int b_cols;              // scalar form: columns still inside N from this thread's B column on
    // 128-bit form allowed. Runtime flags rather than template variants: they are uniform over
    // the block, and one loop body (instead of four inlined ones) keeps the kernel within 128
    // registers without spills.
    bool vec_a, vec_b;
    float4 ra[T::A_LOADS], rb[T::B_LOADS];

    // KGUARD: the tile is the last, partial one and only k < kvalid (relative to the tile) is read.
    template <bool KGUARD>
    __device__ __forceinline__ void fetch(int kvalid)
    {
        const int ka = (threadIdx.x & 1) * 4;
        const int kb = threadIdx.x / (T::BN / 4);
#pragma unroll
        for (int i = 0; i < T::A_LOADS; ++i) {
            const float* p = a[T::a_row(i) / (T::THREADS / 2)] + T::a_k(i);
            const int n = KGUARD ? kvalid - ka - T::a_k(i) : 4;
            ra[i] = vec_a ? load4<true>(p, true, n) : load4<false>(p, true, n);
        }
#pragma unroll
        for (int i = 0; i < T::B_LOADS; ++i) {
            const float* p = b + T::b_k(i) * ldb;
            const bool ok = !KGUARD || kb + T::b_k(i) < kvalid;
            rb[i] = vec_b ? load4<true>(p, ok, 4) : load4<false>(p, ok, b_cols);
        }
#pragma unroll
        for (int r = 0; r < A_ROWS; ++r)
            a[r] += T::BK;
        b += T::BK * ldb;
    }

    __device__ __forceinline__ void store(float* __restrict__ As, float* __restrict__ Bs) const
    {
        const int m = threadIdx.x >> 1, ka = (threadIdx.x & 1) * 4;
        const int kb = threadIdx.x / (T::BN / 4), nb = (threadIdx.x % (T::BN / 4)) * 4;
#pragma unroll
        for (int i = 0; i < T::A_LOADS; ++i) {
            float* dst = As + (ka + T::a_k(i)) * T::AS + m + T::a_row(i);
            dst[0 * T::AS] = ra[i].x;
            dst[1 * T::AS] = ra[i].y;
            dst[2 * T::AS] = ra[i].z;
            dst[3 * T::AS] = ra[i].w;
        }
#pragma unroll
        for (int i = 0; i < T::B_LOADS; ++i)
            // Pairs swapped: see the register-bank note at the top of the file.
            *reinterpret_cast<float4*>(Bs + (kb + T::b_k(i)) * T::BN + nb) = make_float4(rb[i].y, rb[i].x, rb[i].w, rb[i].z);
    }
};

// acc += As^T(k, frag_m..) x Bs(k, frag_n..) over one k tile held in shared memory.
template <class T>
__device__ __forceinline__ void multiply_tile(const float* __restrict__ As, const float* __restrict__ Bs,
                                              int frag_m, int frag_n, float (&acc)[8][8])
{
#pragma unroll
    for (int k = 0; k < T::BK; ++k) {
        const float4 a0 = *reinterpret_cast<const float4*>(As + k * T::AS + frag_m);
        const float4 a1 = *reinterpret_cast<const float4*>(As + k * T::AS + frag_m + 16);
        const float4 b0 = *reinterpret_cast<const float4*>(Bs + k * T::BN + frag_n);
        const float4 b1 = *reinterpret_cast<const float4*>(Bs + k * T::BN + frag_n + 32);
        const float a[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
        const float b[8] = {b0.y, b0.x, b0.w, b0.z, b1.y, b1.x, b1.w, b1.z};  // undo the pair swap
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
                acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

template <class T>
__device__ __forceinline__ void gemm_block(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N,
                                           long long lda, long long ldb, long long ldc,
                                           int k_begin, int k_end, bool vec_a, bool vec_b, bool vec_c, float* smem)
{
    constexpr int BM = T::BM, BN = T::BN, BK = T::BK;
    float* const As = smem;                      // [2][BK][AS]
    float* const Bs = smem + 2 * BK * T::AS;     // [2][BK][BN]

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / T::WARPS_N, wn = warp % T::WARPS_N;
    const int frag_m = wm * WARP_TILE_M + (lane >> 3) * 4;   // rows frag_m + {0..3, 16..19}
    const int frag_n = wn * WARP_TILE_N + (lane & 7) * 4;    // cols frag_n + {0..3, 32..35}

    const int col0 = blockIdx.x * BN;
    const int b_col = col0 + (tid % (BN / 4)) * 4;
    const int kspan = k_end - k_begin;
    const int ntiles = (kspan + BK - 1) / BK, nfull = kspan / BK;
    const int tiles_m = (M + BM - 1) / BM;

    for (int tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
        const int row0 = tm * BM;
        const int a_row = row0 + (tid >> 1);
        Stager<T> st;
#pragma unroll
        for (int r = 0; r < st.A_ROWS; ++r) {
            const int row = min(a_row + r * (T::THREADS / 2), M - 1);
            st.a[r] = A + (long long)row * lda + k_begin + (tid & 1) * 4;
        }
        st.b = B + (long long)(k_begin + tid / (BN / 4)) * ldb + (vec_b && b_col >= N ? (N - 1) & ~3 : b_col);
        st.ldb = ldb;
        st.b_cols = N - b_col;
        st.vec_a = vec_a;
        st.vec_b = vec_b;

        // Warp-uniform: a warp tile entirely outside C has nothing to multiply.
        const bool warp_live = row0 + wm * WARP_TILE_M < M && col0 + wn * WARP_TILE_N < N;

        float acc[8][8];
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
                acc[i][j] = 0.0f;

        if (ntiles > 0) {
            if (nfull > 0) st.template fetch<false>(BK);
            else st.template fetch<true>(kspan);
            st.store(As, Bs);
            __syncthreads();
            // Steady state: multiply stage t&1 while the next (full) k tile travels through
            // registers into the other stage. One barrier per tile: it publishes the stage just
            // stored and, because the next store targets the stage read here, retires this read.
            int t = 0;
            for (; t + 1 < nfull; ++t) {
                st.template fetch<false>(BK);
                if (warp_live) multiply_tile<T>(As + (t & 1) * BK * T::AS, Bs + (t & 1) * BK * BN, frag_m, frag_n, acc);
                st.store(As + (~t & 1) * BK * T::AS, Bs + (~t & 1) * BK * BN);
                __syncthreads();
            }
            // The same step once more when the last k tile is partial, with k-guarded loads; kept
            // out of the loop so the steady state carries none of the guard arithmetic.
            if (t + 1 < ntiles) {
                st.template fetch<true>(kspan - (t + 1) * BK);
                if (warp_live) multiply_tile<T>(As + (t & 1) * BK * T::AS, Bs + (t & 1) * BK * BN, frag_m, frag_n, acc);
                st.store(As + (~t & 1) * BK * T::AS, Bs + (~t & 1) * BK * BN);
                __syncthreads();
                ++t;
            }
            if (warp_live) multiply_tile<T>(As + (t & 1) * BK * T::AS, Bs + (t & 1) * BK * BN, frag_m, frag_n, acc);
            __syncthreads();  // the next row tile's first store may target the stage just read
        }

#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int r = row0 + frag_m + (i & 3) + (i >> 2) * 16;
            if (r >= M) continue;
            float* crow = C + (long long)r * ldc;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int c = col0 + frag_n + h * 32;
                const float4 v = make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
                if (vec_c && c + 3 < N) {
                    *reinterpret_cast<float4*>(crow + c) = v;
                } else {
                    if (c < N) crow[c] = v.x;
                    if (c + 1 < N) crow[c + 1] = v.y;
                    if (c + 2 < N) crow[c + 2] = v.z;
                    if (c + 3 < N) crow[c + 3] = v.w;
                }
            }
        }
    }
}

// Resolves this block's k range and output plane, and which operands allow 128-bit access.
template <class T>
__device__ __forceinline__ void gemm_entry(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K,
                                           long long lda, long long ldb, long long ldc, int k_chunk)
{
    __shared__ __align__(16) float smem[T::SMEM_FLOATS];
    const long long k_lo = (long long)blockIdx.z * k_chunk;
    const int k_begin = (int)(k_lo < K ? k_lo : K);
    const int k_end = (int)(k_lo + k_chunk < K ? k_lo + k_chunk : K);
    float* const Cz = C + (long long)blockIdx.z * M * ldc;

    // 128-bit access to an operand needs a 16-byte aligned base, a stride that is a multiple of 4
    // floats, and (A only, whose vectors run along k) a split start on a multiple of 4.
    const bool vec_a = (reinterpret_cast<uintptr_t>(A) & 15) == 0 && (lda & 3) == 0 && (k_begin & 3) == 0;
    const bool vec_b = (reinterpret_cast<uintptr_t>(B) & 15) == 0 && (ldb & 3) == 0;
    const bool vec_c = (reinterpret_cast<uintptr_t>(Cz) & 15) == 0 && (ldc & 3) == 0;

    gemm_block<T>(A, B, Cz, M, N, lda, ldb, ldc, k_begin, k_end, vec_a, vec_b, vec_c, smem);
}

using Tile128x128 = Tile<128, 128, 8>;
using Tile128x64 = Tile<128, 64, 8>;
using Tile64x64 = Tile<64, 64, 8>;

}  // namespace

// Large tiles for big problems. Block (256,1,1) = 8 warps as 4 (M) x 2 (N) warp tiles of 32 x 64;
// tile 128 x 128 x 8; 16,640 bytes of static shared memory (0 dynamic); two blocks per SM.
// Grid (ceil(N/128), min(ceil(M/128), 65535), splits).
extern "C" __global__ void __launch_bounds__(Tile128x128::THREADS, 2) matmul_sgemm_128x128(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
    int M, int N, int K, long long lda, long long ldb, long long ldc, int k_chunk)
{
    gemm_entry<Tile128x128>(A, B, C, M, N, K, lda, ldb, ldc, k_chunk);
}

// Medium tiles: twice the blocks of 128x128 for mid-size problems, where finer tiles even out the
// last wave. Block (128,1,1) = 4 (M) x 1 (N) warp tiles; tile 128 x 64 x 8; 12,544 bytes static
// shared memory (0 dynamic); four blocks per SM. Grid (ceil(N/64), min(ceil(M/128), 65535), splits).
extern "C" __global__ void __launch_bounds__(Tile128x64::THREADS, 4) matmul_sgemm_128x64(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
    int M, int N, int K, long long lda, long long ldb, long long ldc, int k_chunk)
{
    gemm_entry<Tile128x64>(A, B, C, M, N, K, lda, ldb, ldc, k_chunk);
}

// Small tiles for small or skinny problems (usually with split-K). Block (64,1,1) = 2 (M) x 1 (N)
// warp tiles; tile 64 x 64 x 8; 8,448 bytes static shared memory (0 dynamic); six blocks per SM
// (its two float4 of B per thread need more than 128 registers to stay spill-free).
// Grid (ceil(N/64), min(ceil(M/64), 65535), splits).
extern "C" __global__ void __launch_bounds__(Tile64x64::THREADS, 6) matmul_sgemm_64x64(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
    int M, int N, int K, long long lda, long long ldb, long long ldc, int k_chunk)
{
    gemm_entry<Tile64x64>(A, B, C, M, N, K, lda, ldb, ldc, k_chunk);
}

// Deterministic split-K reduction: C[i*ldc + j] = sum over s = 0..splits-1, in that order, of
// partial[s*M*N + i*N + j]. No atomics, so results are bitwise reproducible.
// Launch: block (256,1,1), grid-stride over M*N, e.g. grid (min(ceil(M*N/256), 132*16), 1, 1).
extern "C" __global__ void __launch_bounds__(256) matmul_splitk_reduce(
    const float* __restrict__ partial, float* __restrict__ C, int M, int N, long long ldc, int splits)
{
    const long long plane = (long long)M * N;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < plane; idx += stride) {
        float sum = partial[idx];
#pragma unroll 4
        for (int s = 1; s < splits; ++s)
            sum += partial[s * plane + idx];
        const long long i = idx / N;
        C[i * ldc + (idx - i * N)] = sum;
    }
}
