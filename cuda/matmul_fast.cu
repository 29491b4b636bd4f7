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
//    Loader::fetch and multiply_tile). This is for the register file, not for shared memory: the
//    register file has two banks (even / odd register number), and an FFMA whose two non-reused
//    source registers share a bank waits a cycle (a "dispatch stall"). The float4 loads and stores
//    give b[j] and the accumulator acc[i][j] the same register parity (both are j%2 inside an
//    aligned quad), so ptxas' usual order -- a[i] held in the reuse cache, b[j] and acc[i][j] read --
//    conflicted on most FFMAs; the swap gives b[j] the opposite parity. Measured on the H100: bank
//    conflicts in the 128x128 main loop 72% -> 50% of FFMAs, +2.5% throughput at 4096^3;
//  * operands travel global -> shared memory by cp.async (sm_80+), one float per copy, into a
//    ring of STAGES k tiles: no staging registers, so nothing in the loop waits on a global load
//    and the registers go to the accumulators. Single-float copies are what let the copy itself
//    transpose A and pair-swap B, and they take any view (odd offsets and strides) on one code
//    path; copies outside M, N or K zero-fill without reading (see Loader). One __syncthreads per k
//    tile. Before sm_80 the copies are plain loads and stores (correct, not tuned);
//  * the 128x128 tile uses BK = 16 with 2 stages (33 KB, two blocks per SM): against BK = 8 with
//    4 stages it halves the barriers and per-tile overhead per FFMA, +8% at 4096^3 and 8192^3;
//    a third stage would need more than 48 KB of static shared memory. The smaller tiles keep
//    BK = 8 with 4 stages (see their entry points);
//  * stores of C are guarded per element, so any M, N, K works without padding copies;
//  * warps whose whole 32 x 64 warp tile lies outside C skip the multiply, which makes the thin
//    edge tiles of sizes like 4097 nearly free.

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
    // makes the transposing copies conflict-free: a warp writes k = lane % 8 of m = lane / 8, at
    // banks (4k + m) % 32, all distinct.
    static constexpr int AS = BM + 4;
    static constexpr int STAGE_FLOATS = BK * (AS + BN);  // As[BK][AS], then Bs[BK][BN]
    // k tiles in flight (one being multiplied, the rest being copied): as many as 48 KB of static
    // shared memory holds, up to 4.
    static constexpr int STAGES = 12 * 1024 / STAGE_FLOATS < 4 ? 12 * 1024 / STAGE_FLOATS : 4;
    static constexpr int SMEM_FLOATS = STAGES * STAGE_FLOATS;
    // Copier mapping (see Loader): one warp copy takes 8 k of 4 A rows, or 32 columns of a B row.
    static constexpr int A_ROW_STEP = THREADS / 8;         // rows between a thread's A rows
    static constexpr int A_ROWS = BM / A_ROW_STEP;         // A rows a thread copies (BK / 8 each)
    static constexpr int B_ROW_STEP = THREADS / (BN / 2);  // k rows between a thread's B rows
    static constexpr int B_ROWS = BK / B_ROW_STEP;         // B rows a thread copies (2 floats each)
    static_assert(BM % WARP_TILE_M == 0 && BN % WARP_TILE_N == 0 && BK % 8 == 0, "tile shape");
    static_assert(BM % A_ROW_STEP == 0 && BK % B_ROW_STEP == 0 && BN / 2 >= 32, "copier mapping");
    static_assert(STAGES >= 2, "static shared memory");
};

// Asynchronous global -> shared copies (cp.async, sm_80+): nothing passes through registers, so
// there is no staging copy to wait on. Fewer than the full size of source bytes zero-fill the rest.
// Before sm_80 they are plain synchronous copies; the pipeline below stays correct either way.
__device__ __forceinline__ void copy4(float* dst, const float* src, bool ok)
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n"
                 :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(ok ? 4 : 0));
#else
    float v = 0.0f;
    if (ok) v = __ldg(src);
    *dst = v;
#endif
}

__device__ __forceinline__ void copy_commit()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most N of this thread's committed copy groups are still in flight.
template <int N>
__device__ __forceinline__ void copy_wait()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
#endif
}

// Issues the copies of one BK-deep k tile of A (BM x BK, transposed into As[k][m]) and B (BK x BN,
// into Bs[k][n]). Every copy is a single float: that is what lets the copy itself transpose A and
// pair-swap B, and it makes any view (odd offsets and strides) legal with one code path.
//  * A: lane l copies k = l % 8 (and k + 8, ...) of row l / 8, so a warp copy reads 4 rows x 32
//    bytes: whole sectors, each requested once. (Lanes that each took 4 k of one row had 4 copies
//    share every sector, and L1 does not merge them at power-of-two strides: 4096^3 ran 20% slower.)
//  * B: a warp copy reads 32 consecutive columns of one row; a thread takes 2 columns BN / 2 apart.
// Per thread that is A_ROWS + B_ROWS row addresses, the offsets along a row being immediates: few
// registers for the pointers in flight, which is what keeps the loop within 128 registers.
//
// In the steady state the whole tile lies inside A, B and K and nothing is checked. Otherwise
// (GUARD) every copy outside M, N or the tile's kvalid is zero-filled and reads nothing.
template <class T>
struct Loader {
    const float* a;   // A at this thread's first row and its k, in the next k tile
    const float* b;   // B at this thread's first k row and first column, in the next k tile
    long long a_step; // A_ROW_STEP rows of A
    long long b_step; // B_ROW_STEP rows of B
    int a_rows;       // rows of A from this thread's first row to M
    int b_cols;       // columns of B from this thread's first column to N

    template <bool GUARD>
    __device__ __forceinline__ void fetch(float* __restrict__ As, float* __restrict__ Bs, int kvalid)
    {
        constexpr int HALF = T::BN / 2;
        const int tid = threadIdx.x, ka = tid % 8, kb = tid / HALF;
        float* dst = As + ka * T::AS + tid / 8;
        const float* src = a;
#pragma unroll
        for (int i = 0; i < T::A_ROWS; ++i) {
#pragma unroll
            for (int q = 0; q < T::BK; q += 8)
                copy4(dst + q * T::AS + i * T::A_ROW_STEP, src + q,
                      !GUARD || (i * T::A_ROW_STEP < a_rows && ka + q < kvalid));
            if (i + 1 < T::A_ROWS) src += a_step;
        }
        a += T::BK;
        // Each float lands on its pair partner's column (n ^ 1): the pair swap of the
        // register-bank note at the top of the file.
        dst = Bs + kb * T::BN + ((tid % HALF) ^ 1);
        src = b;
#pragma unroll
        for (int i = 0; i < T::B_ROWS; ++i) {
#pragma unroll
            for (int h = 0; h < 2; ++h)
                copy4(dst + i * T::B_ROW_STEP * T::BN + h * HALF, src + h * HALF,
                      !GUARD || (kb + i * T::B_ROW_STEP < kvalid && h * HALF < b_cols));
            src += b_step;
        }
        b = src;  // B_ROWS * B_ROW_STEP = BK rows on: the next k tile
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
                                           int k_begin, int k_end, bool vec_c, float* smem)
{
    constexpr int BM = T::BM, BN = T::BN, BK = T::BK, STAGES = T::STAGES;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / T::WARPS_N, wn = warp % T::WARPS_N;
    const int frag_m = wm * WARP_TILE_M + (lane >> 3) * 4;   // rows frag_m + {0..3, 16..19}
    const int frag_n = wn * WARP_TILE_N + (lane & 7) * 4;    // cols frag_n + {0..3, 32..35}

    const int col0 = blockIdx.x * BN;
    const int kspan = k_end - k_begin;
    const int tiles_m = (M + BM - 1) / BM;

    for (int tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
        const int row0 = tm * BM;
        Loader<T> ld;
        const int a_row = row0 + tid / 8, b_col = col0 + tid % (BN / 2);
        ld.a = A + (long long)a_row * lda + k_begin + tid % 8;
        ld.b = B + (long long)(k_begin + tid / (BN / 2)) * ldb + b_col;
        ld.a_step = T::A_ROW_STEP * lda;
        ld.b_step = T::B_ROW_STEP * ldb;
        ld.a_rows = M - a_row;
        ld.b_cols = N - b_col;
        const bool inside = row0 + BM <= M && col0 + BN <= N;

        // Warp-uniform: a warp tile entirely outside C has nothing to multiply.
        const bool warp_live = row0 + wm * WARP_TILE_M < M && col0 + wn * WARP_TILE_N < N;

        float acc[8][8];
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
                acc[i][j] = 0.0f;

        // Tile t goes to stage t % STAGES. Every thread commits one group per tile slot (empty
        // past the end) so that "all but STAGES - 2 groups done" always means "tile t landed".
        // kleft: the k still to fetch, from the next tile to fetch on; stage: where that tile goes.
        int kleft = kspan, stage = 0;
        auto fetch_next = [&]() {
            float* st = smem + stage;
            if (kleft >= BK && inside) ld.template fetch<false>(st, st + BK * T::AS, BK);
            else if (kleft > 0) ld.template fetch<true>(st, st + BK * T::AS, kleft);
            copy_commit();
            kleft -= BK;
            stage = stage == (STAGES - 1) * T::STAGE_FLOATS ? 0 : stage + T::STAGE_FLOATS;
        };
#pragma unroll 1
        for (int s = 0; s < STAGES - 1; ++s)
            fetch_next();
        // Tile t is multiplied while kspan - t * BK > 0, i.e. kleft = kspan - (t + STAGES - 1) * BK
        // > -(STAGES - 1) * BK (so no separate tile counter is kept).
        while (kleft > -(STAGES - 1) * BK) {
            copy_wait<STAGES - 2>();
            // Publishes tile t to the block and retires every warp's reads of tile t - 1, whose
            // stage the copies issued next overwrite: one barrier per k tile.
            __syncthreads();
            fetch_next();  // tile t + STAGES - 1 into the stage of tile t - 1; stage is now t's
            if (warp_live) multiply_tile<T>(smem + stage, smem + stage + BK * T::AS, frag_m, frag_n, acc);
        }
        copy_wait<0>();
        __syncthreads();  // the next row tile's first copies may target a stage just read

        // Column bounds as "what is left" from this thread's first column, compared with constant
        // offsets: eight separate column bounds, being loop invariants, were hoisted out of the
        // row-tile loop and held in registers through the main loop (spills at BK = 16).
        const int cols_left = N - (col0 + frag_n);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int r = row0 + frag_m + (i & 3) + (i >> 2) * 16;
            if (r >= M) continue;
            float* crow = C + (long long)r * ldc + col0 + frag_n;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int c = h * 32;
                const float4 v = make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
                if (vec_c && c + 3 < cols_left) {
                    *reinterpret_cast<float4*>(crow + c) = v;
                } else {
                    if (c < cols_left) crow[c] = v.x;
                    if (c + 1 < cols_left) crow[c + 1] = v.y;
                    if (c + 2 < cols_left) crow[c + 2] = v.z;
                    if (c + 3 < cols_left) crow[c + 3] = v.w;
                }
            }
        }
    }
}

// Resolves this block's k range and output plane, and whether C allows 128-bit stores.
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

    // C's float4 stores need a 16-byte aligned base and a stride that is a multiple of 4 floats.
    const bool vec_c = (reinterpret_cast<uintptr_t>(Cz) & 15) == 0 && (ldc & 3) == 0;

    gemm_block<T>(A, B, Cz, M, N, lda, ldb, ldc, k_begin, k_end, vec_c, smem);
}

using Tile128x128 = Tile<128, 128, 16>;
using Tile128x64 = Tile<128, 64, 8>;
using Tile64x64 = Tile<64, 64, 8>;

}  // namespace

// Large tiles for big problems. Block (256,1,1) = 8 warps as 4 (M) x 2 (N) warp tiles of 32 x 64;
// tile 128 x 128 x 16, 2 stages: 33,280 bytes of static shared memory (0 dynamic); two blocks per SM.
// Grid (ceil(N/128), min(ceil(M/128), 65535), splits).
extern "C" __global__ void __launch_bounds__(Tile128x128::THREADS, 2) matmul_sgemm_128x128(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
    int M, int N, int K, long long lda, long long ldb, long long ldc, int k_chunk)
{
    gemm_entry<Tile128x128>(A, B, C, M, N, K, lda, ldb, ldc, k_chunk);
}

// Medium tiles: twice the blocks of 128x128 for mid-size problems, where finer tiles even out the
// last wave. Block (128,1,1) = 4 (M) x 1 (N) warp tiles; tile 128 x 64 x 8, 4 stages: 25,088 bytes
// static shared memory (0 dynamic); four blocks per SM (BK = 16 would spill at 128 registers). Grid (ceil(N/64), min(ceil(M/128), 65535), splits).
extern "C" __global__ void __launch_bounds__(Tile128x64::THREADS, 4) matmul_sgemm_128x64(
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
    int M, int N, int K, long long lda, long long ldb, long long ldc, int k_chunk)
{
    gemm_entry<Tile128x64>(A, B, C, M, N, K, lda, ldb, ldc, k_chunk);
}

// Small tiles for small or skinny problems (usually with split-K). Block (64,1,1) = 2 (M) x 1 (N)
// warp tiles; tile 64 x 64 x 8, 4 stages: 16,896 bytes static shared memory (0 dynamic); six blocks
// per SM. (BK = 16 with 4 stages, 33,792 bytes, ran split-K 256x256x65536 at 23 TFLOP/s against 35.)
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
