// Fast FP32 SIMT matrix multiply (plain FFMA, no tensor cores): C (M x N) = A (M x K) @ B (K x N),
// row-major with row strides lda / ldb / ldc in elements; all offsets are 64-bit.
//
// Every GEMM entry point shares one signature and one batch / split-K contract: block z is (batch b,
// split s) = gpumat::batch_split(K, k_chunk); it multiplies matrix b of the batch (A + b*batch_a,
// B + b*batch_b) over k in [s*k_chunk, min(K, (s+1)*k_chunk)) and writes its whole M x N result to
// C + b*batch_c + s*M*ldc, so a split-K caller passes a scratch buffer (ldc = N) and then runs
// matmul_splitk_reduce_f32_f32 (matmul_splitk.cu); a plain run uses gridDim.z = batch and k_chunk = K.
// Each output goes through the fused epilogue (gpumat::Epilogue; a split-K product gets the identity,
// its reduction the caller's): identity() is tested once and picks one of two copies of the kernel
// body, the plain one as before or one that applies the epilogue before the same stores (see
// gemm_block). blockIdx.x walks N tiles; blockIdx.y walks M tiles in a grid-stride loop because
// gridDim.y is capped at 65535. blockDim must be (THREADS, 1, 1); the kernels whose shared memory
// passes 48 KB take it as dynamic shared memory (see their entry points).
//
// Technique (same for every tile shape, see Tile below):
//  * each thread owns TM x 8 outputs of C in registers (TM = 8 or 16), as (TM / 4) x 2 sub-blocks of
//    4 x 4 that sit 16 rows and 32 columns apart; a warp is 4 lanes (M) x 8 lanes (N) and covers a
//    (4 TM) x 64 warp tile, so each k step costs TM / 4 + 2 LDS.128 per 8 TM FFMA;
//  * the lanes are interleaved: lane bit 0 and bit 4 pick the M position, bits 1-3 the N position.
//    A 128-bit shared load of a warp costs 4 shared-memory wavefronts unless every lane pair
//    (T, T^1) or (T, T^2) reads one address, and then 2 (the floor). With this map lanes T and T^2
//    read the same A fragment and lanes T and T^1 the same B fragment, so every fragment load takes
//    2 wavefronts (the plain 4 x 8 row-major map gave A 2 and B 4, a mean of 3.0). ncu on the
//    H100 at 4096^3: 201.4M wavefronts for 100.7M shared loads, 2.00 a load (cuBLAS: 3.32);
//  * fragments are double-buffered in registers: the loads of step k + 1 (and, at a k tile's last
//    step, of the next tile's first step, after the barrier that publishes it) are issued before
//    the FFMAs of step k, so shared-memory latency hides behind a whole step of math (the loads go
//    ahead of the copies' branches, or ptxas schedules them after most of the step's FFMAs;
//    loading each fragment in its own step ran 5% slower at 4096^3);
//  * A is stored transposed in shared memory (As[k][m]) so that A fragments are float4 reads too;
//  * on the one-float copy path B is stored with the two floats of each pair swapped (columns 1,0,3,2
//    in every float4, see Loader::fetch and Frag::load). This is for the register file, not for
//    shared memory: the register file has two banks (even / odd register number), and an FFMA whose
//    two non-reused source registers share a bank waits a cycle. The float4 loads and stores give
//    b[j] and the accumulator acc[i][j] the same register parity (both are j%2 inside an aligned
//    quad), so ptxas' usual order -- a[i] held in the reuse cache, b[j] and acc[i][j] read --
//    conflicted on most FFMAs; the swap gives b[j] the opposite parity (+2.5% at 4096^3 when it
//    was measured on the H100);
//  * operands travel global -> shared memory by cp.async (sm_80+) into a ring of STAGES k tiles: no
//    staging registers, so nothing in the loop waits on a global load. A always goes one float a
//    copy, which lets the copy itself transpose it and takes any view (odd offsets and strides).
//    B goes one float a copy with the pair swap above; built with SGEMM_VEC_B=1, it goes 16 bytes a
//    copy whenever its base is 16-byte aligned and its row stride a multiple of 4 floats (decided
//    once per block, uniformly; other views keep one-float copies, and both give the same bits).
//    On the H100 the two paths measured within 2% of each other, each ahead on some shapes: the
//    16-byte path issues fewer copy instructions, the swap has fewer dispatch stalls (ncu, per
//    issued instruction: 0.27 against 0.23 in sgemm128x256k16), so the default stays with the swap;
//    Copies outside M, N or K zero-fill without reading (see Loader). One __syncthreads per k tile.
//    Before sm_80 the copies are plain loads and stores (correct, not tuned);
//  * the 128 x 128, 128 x 64, 64 x 128 and 32 x 128 tiles also read A and B stored transposed in place (the
//    *at, *bt and *atbt entries; their B tile rows are padded, see Tile::BS): A stored as K rows of M is copied row by row as it lies, which is As[k][m] already;
//    B stored as N rows of K goes BK consecutive k of a column a copy, into Bs[k] as the row-major copies
//    put it;
//  * stores of C are guarded per element, so any M, N, K works without padding copies;
//  * warps whose whole warp tile lies outside C skip the multiply (but not the copies and
//    barriers), which makes the thin edge tiles of sizes like 4097 nearly free.

#include <stdint.h>

#include "gpumat.cuh"

// Build switches (the defaults are what ships): SGEMM_VEC_B=1 copies aligned B 16 bytes at a time,
// SGEMM_ZIGZAG=0 restores the plain 4 x 8 lane map, SGEMM_FRAG_DB=0 loads each fragment in the
// step that uses it. Every combination builds with zero spills on sm_90.
#ifndef SGEMM_VEC_B
#define SGEMM_VEC_B 0
#endif
#ifndef SGEMM_ZIGZAG
#define SGEMM_ZIGZAG 1
#endif
#ifndef SGEMM_FRAG_DB
#define SGEMM_FRAG_DB 1
#endif

namespace {

constexpr int WARP_TILE_N = 64;

template <int BM_, int BN_, int BK_, int TM_, int STAGES_, int BPAD_ = 0>
struct Tile {
    static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, STAGES = STAGES_;
    static constexpr int WARP_TILE_M = 4 * TM;
    static constexpr int WARPS_N = BN / WARP_TILE_N;
    static constexpr int THREADS = (BM / WARP_TILE_M) * WARPS_N * 32;
    // Row stride of the transposed A tile. The +4 keeps rows 16-byte aligned for float4 reads and
    // makes the transposing copies conflict-free: a warp writes k = lane % 8 of m = lane / 8, at
    // banks (4k + m) % 32, all distinct.
    static constexpr int AS = BM + 4;
    // Row stride of the B tile. The tiles that read B stored transposed pad it by 4 floats: their copies
    // write 8 k rows of 4 columns a warp, which at a stride of BN (a multiple of 32 banks) fell in 4 banks,
    // 8-way conflicts on every copy (x @ W.T ran 1.15-1.3x slower than x @ W); at BN + 4, k row r starts 4r
    // banks on and the warp's 32 floats take 32 banks. Rows stay 16-byte aligned for the fragments' float4s.
    static constexpr int BS = BN + BPAD_;
    static constexpr int STAGE_FLOATS = BK * (AS + BS);  // As[BK][AS], then Bs[BK][BS]
    static constexpr int SMEM_FLOATS = STAGES * STAGE_FLOATS;
    static constexpr int SMEM_BYTES = SMEM_FLOATS * 4;
    // One-float copier mapping (see Loader): one warp copy takes 8 k of 4 A rows, or 32 columns of
    // a B row.
    static constexpr int A_ROW_STEP = THREADS / 8;         // rows between a thread's A rows
    static constexpr int A_ROWS = BM / A_ROW_STEP;         // A rows a thread copies (BK / 8 each)
    static constexpr int B_ROW_STEP = THREADS / (BN / 2);  // k rows between a thread's B rows
    static constexpr int B_ROWS = BK / B_ROW_STEP;         // B rows a thread copies (2 floats each)
    // 16-byte B copier: a thread copies the float4 column group tid % (BN / 4) of VB_ROWS rows.
    static constexpr int VB_ROW_STEP = THREADS / (BN / 4);
    static constexpr int VB_ROWS = BK / VB_ROW_STEP;
    static_assert(TM == 8 || TM == 16, "thread tile");
    static_assert(BM % WARP_TILE_M == 0 && BN % WARP_TILE_N == 0 && BK % 8 == 0, "tile shape");
    static_assert(BM % A_ROW_STEP == 0 && BK % B_ROW_STEP == 0 && BN / 2 >= 32, "copier mapping");
    static_assert(THREADS % (BN / 4) == 0 && BK % VB_ROW_STEP == 0, "16-byte copier mapping");
    static_assert(STAGES >= 2, "ring");
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

// 16 bytes from a 16-byte aligned source; only the first `bytes` (0, 4, 8, 12 or 16) are read.
__device__ __forceinline__ void copy16(float* dst, const float* src, int bytes)
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes));
#else
#pragma unroll
    for (int e = 0; e < 4; ++e)
        dst[e] = 4 * e < bytes ? __ldg(src + e) : 0.0f;
#endif
}

using gpumat::copy_commit;
using gpumat::copy_wait;

// Issues the copies of one BK-deep k tile of A (BM x BK, transposed into As[k][m]) and B (BK x BN,
// into Bs[k][n]).
//  * A, one float a copy: lane l copies k = l % 8 (and k + 8, ...) of row l / 8, so a warp copy
//    reads 4 rows x 32 bytes: whole sectors, each requested once. (Lanes that each took 4 k of one
//    row had 4 copies share every sector, and L1 does not merge them at power-of-two strides:
//    4096^3 ran 20% slower.)
//  * B, one float a copy (VEC_B false): a warp copy reads 32 consecutive columns of one row; a
//    thread takes 2 columns BN / 2 apart, each landing on its pair partner's column (n ^ 1).
//  * B, 16 bytes a copy (VEC_B true): a thread copies 4 consecutive columns of VB_ROWS rows.
// Per thread that is a few row addresses, the offsets along a row being immediates: few registers
// for the pointers in flight.
//
// In the steady state the whole tile lies inside A, B and K and nothing is checked. Otherwise
// (GUARD) every copy outside M, N or the tile's kvalid is zero-filled and reads nothing.
template <class T, bool VEC_B, bool TA = false, bool TB = false>
struct Loader {
    const float* a;   // A at this thread's first row and its k, in the next k tile
    const float* b;   // B at this thread's first k row and first column, in the next k tile
    long long a_step; // A_ROW_STEP rows of A
    long long b_step; // B_ROW_STEP (or VB_ROW_STEP) rows of B
    int a_rows;       // rows of A from this thread's first row to M
    int b_cols;       // columns of B from this thread's first column to N

    template <bool GUARD>
    __device__ __forceinline__ void fetch(float* __restrict__ As, float* __restrict__ Bs, int kvalid)
    {
        const int tid = threadIdx.x;
        if constexpr (TA) {
            // A stored transposed (K rows of M, a at the tile's first k row and first column of M): the
            // tile's BK rows of BM floats copied as they lie into As[k][m], a warp 32 consecutive m
            // (whole sectors, consecutive banks); a = A + k * lda + m, a_step = lda
            constexpr int STEP = T::THREADS / T::BM;  // k rows a pass of the block's threads covers
            static_assert(T::THREADS % T::BM == 0 && T::BK % STEP == 0, "transposed A copier mapping");
            const int m = tid % T::BM, k0 = tid / T::BM;
            const float* src = a + k0 * a_step + m;
#pragma unroll
            for (int i = 0; i < T::BK / STEP; ++i) {
                copy4(As + (k0 + i * STEP) * T::AS + m, src, !GUARD || (m < a_rows && k0 + i * STEP < kvalid));
                src += STEP * a_step;
            }
            a += T::BK * a_step;
        } else {
            const int ka = tid % 8;
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
        }
        if constexpr (TB) {
            // B stored transposed (N rows of K, b at the tile's first column of N and first k): a warp
            // copies BK consecutive k of 32 / BK columns (whole 32-byte sectors), each into its column's
            // pair partner (n ^ 1) of Bs[k] as the row-major path does; b = B + n * b_step + k
            constexpr int STEP = T::THREADS / T::BK;  // columns a pass of the block's threads covers (even)
            static_assert(T::THREADS % T::BK == 0 && STEP % 2 == 0 && T::BN % STEP == 0, "transposed B copier");
            const int k = tid % T::BK, n0 = tid / T::BK;
            const float* src = b + n0 * b_step + k;
            float* dst = Bs + k * T::BS + (n0 ^ 1);  // (n0 + i STEP) ^ 1 = (n0 ^ 1) + i STEP: STEP is even
#pragma unroll
            for (int i = 0; i < T::BN / STEP; ++i) {
                copy4(dst + i * STEP, src, !GUARD || (n0 + i * STEP < b_cols && k < kvalid));
                src += STEP * b_step;
            }
            b += T::BK;
        } else if constexpr (VEC_B) {
            constexpr int GROUPS = T::BN / 4;
            const int kb = tid / GROUPS;
            float* dst = Bs + kb * T::BS + (tid % GROUPS) * 4;
            const float* src = b;
            const int bytes = b_cols >= 4 ? 16 : (b_cols > 0 ? 4 * b_cols : 0);
#pragma unroll
            for (int i = 0; i < T::VB_ROWS; ++i) {
                copy16(dst + i * T::VB_ROW_STEP * T::BS, src,
                       !GUARD ? 16 : (kb + i * T::VB_ROW_STEP < kvalid ? bytes : 0));
                src += b_step;
            }
            b = src;  // VB_ROWS * VB_ROW_STEP = BK rows on: the next k tile
        } else {
            constexpr int HALF = T::BN / 2;
            const int kb = tid / HALF;
            float* dst = Bs + kb * T::BS + ((tid % HALF) ^ 1);
            const float* src = b;
#pragma unroll
            for (int i = 0; i < T::B_ROWS; ++i) {
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    copy4(dst + i * T::B_ROW_STEP * T::BS + h * HALF, src + h * HALF,
                          !GUARD || (kb + i * T::B_ROW_STEP < kvalid && h * HALF < b_cols));
                src += b_step;
            }
            b = src;  // B_ROWS * B_ROW_STEP = BK rows on: the next k tile
        }
    }
};

// One k step's fragments: a[i] for the thread's TM rows, b[j] for its 8 columns (pair swap undone).
template <class T, bool VEC_B>
struct Frag {
    float a[T::TM];
    float b[8];

    __device__ __forceinline__ void load(const float* __restrict__ As_k, const float* __restrict__ Bs_k,
                                         int frag_m, int frag_n)
    {
#pragma unroll
        for (int s = 0; s < T::TM / 4; ++s) {
            const float4 v = *reinterpret_cast<const float4*>(As_k + frag_m + 16 * s);
            a[4 * s] = v.x; a[4 * s + 1] = v.y; a[4 * s + 2] = v.z; a[4 * s + 3] = v.w;
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float4 v = *reinterpret_cast<const float4*>(Bs_k + frag_n + 32 * h);
            if constexpr (VEC_B) {
                b[4 * h] = v.x; b[4 * h + 1] = v.y; b[4 * h + 2] = v.z; b[4 * h + 3] = v.w;
            } else {
                b[4 * h] = v.y; b[4 * h + 1] = v.x; b[4 * h + 2] = v.w; b[4 * h + 3] = v.z;
            }
        }
    }
};

template <class T, bool VEC_B>
__device__ __forceinline__ void fma_step(const Frag<T, VEC_B>& f, float (&acc)[T::TM][8])
{
#pragma unroll
    for (int i = 0; i < T::TM; ++i)
#pragma unroll
        for (int j = 0; j < 8; ++j)
            acc[i][j] = fmaf(f.a[i], f.b[j], acc[i][j]);
}

// EPILOGUE: the outputs go through ep before they are stored (else ep is the identity, unread).
template <class T, bool VEC_B, bool EPILOGUE, bool TA = false, bool TB = false>
__device__ __forceinline__ void gemm_block(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N,
                                           long long lda, long long ldb, long long ldc,
                                           int k_begin, int k_end, bool vec_c, float* smem,
                                           const gpumat::Epilogue& ep)
{
    constexpr int BM = T::BM, BN = T::BN, BK = T::BK, STAGES = T::STAGES, TM = T::TM;
    constexpr int A_FLOATS = BK * T::AS;  // Bs follows As inside a stage

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / T::WARPS_N, wn = warp % T::WARPS_N;
#if SGEMM_ZIGZAG
    const int lane_m = (lane & 1) | ((lane >> 3) & 2);  // lane bits 0 and 4
    const int lane_n = (lane >> 1) & 7;                 // lane bits 1-3
#else
    const int lane_m = lane >> 3, lane_n = lane & 7;
#endif
    const int frag_m = wm * T::WARP_TILE_M + lane_m * 4;  // rows frag_m + 16 s + {0..3}
    const int frag_n = wn * WARP_TILE_N + lane_n * 4;     // cols frag_n + {0..3, 32..35}

    const int col0 = blockIdx.x * BN;
    const int kspan = k_end - k_begin;
    const int ktiles = kspan > 0 ? (kspan + BK - 1) / BK : 0;
    const int tiles_m = (M + BM - 1) / BM;

    for (int tm = blockIdx.y; tm < tiles_m; tm += gridDim.y) {
        const int row0 = tm * BM;
        Loader<T, VEC_B, TA, TB> ld;
        if constexpr (TA) {  // K rows of M: from the tile's first k row and first column of M
            ld.a = A + (long long)k_begin * lda + row0;
            ld.a_step = lda;
            ld.a_rows = M - row0;
        } else {
            const int a_row = row0 + tid / 8;
            ld.a = A + (long long)a_row * lda + k_begin + tid % 8;
            ld.a_step = T::A_ROW_STEP * lda;
            ld.a_rows = M - a_row;
        }
        if constexpr (TB) {  // N rows of K: from the tile's first column of N and first k
            ld.b = B + (long long)col0 * ldb + k_begin;
            ld.b_step = ldb;
            ld.b_cols = N - col0;
        } else if constexpr (VEC_B) {
            const int b_col = col0 + (tid % (BN / 4)) * 4;
            ld.b = B + (long long)(k_begin + tid / (BN / 4)) * ldb + b_col;
            ld.b_step = T::VB_ROW_STEP * ldb;
            ld.b_cols = N - b_col;
        } else {
            const int b_col = col0 + tid % (BN / 2);
            ld.b = B + (long long)(k_begin + tid / (BN / 2)) * ldb + b_col;
            ld.b_step = T::B_ROW_STEP * ldb;
            ld.b_cols = N - b_col;
        }
        const bool inside = row0 + BM <= M && col0 + BN <= N;

        // Warp-uniform: a warp tile entirely outside C has nothing to multiply.
        const bool warp_live = row0 + wm * T::WARP_TILE_M < M && col0 + wn * WARP_TILE_N < N;

        float acc[TM][8];
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j)
                acc[i][j] = 0.0f;

        // Tile t goes to stage t % STAGES. Every thread commits one group per tile slot (empty
        // past the end) so that "all but STAGES - 2 groups done" always means "the next tile
        // landed". kleft: the k still to fetch; wr / rd: the stages being written and read.
        int kleft = kspan, wr = 0, rd = 0;
        auto fetch_next = [&]() {
            float* st = smem + wr;
            if (kleft >= BK && inside) ld.template fetch<false>(st, st + A_FLOATS, BK);
            else if (kleft > 0) ld.template fetch<true>(st, st + A_FLOATS, kleft);
            copy_commit();
            kleft -= BK;
            wr = wr == (STAGES - 1) * T::STAGE_FLOATS ? 0 : wr + T::STAGE_FLOATS;
        };
#pragma unroll 1
        for (int s = 0; s < STAGES - 1; ++s)
            fetch_next();
        copy_wait<STAGES - 2>();
        __syncthreads();  // tile 0 landed

        // Per k tile t: at step 0 the copies of tile t + STAGES - 1 go into the stage of tile t - 1
        // (every warp's reads of it were done before the last barrier); at step BK - 1 the barrier
        // waits for tile t + 1, after which its first fragments are loaded. Fragments of step k + 1
        // are loaded before the FFMAs of step k.
        if (warp_live) {
            Frag<T, VEC_B> f[2];
            f[0].load(smem + rd, smem + rd + A_FLOATS, frag_m, frag_n);
#pragma unroll 1
            for (int t = 0; t < ktiles; ++t) {
#pragma unroll
                for (int k = 0; k < BK; ++k) {
                    const float* src = smem + rd;
                    int kn = k + 1;
                    if (k == BK - 1) {
                        copy_wait<STAGES - 2>();
                        __syncthreads();
                        rd = rd == (STAGES - 1) * T::STAGE_FLOATS ? 0 : rd + T::STAGE_FLOATS;
                        src = smem + rd;
                        kn = 0;
                    }
#if SGEMM_FRAG_DB
                    // The copies' branches end a basic block, and ptxas schedules within one: the
                    // loads go first so that they stay ahead of this step's FFMAs.
                    f[(k + 1) & 1].load(src + kn * T::AS, src + A_FLOATS + kn * T::BS, frag_m, frag_n);
                    if (k == 0) fetch_next();
                    fma_step<T, VEC_B>(f[k & 1], acc);
#else
                    if (k == 0) fetch_next();
                    fma_step<T, VEC_B>(f[0], acc);
                    f[0].load(src + kn * T::AS, src + A_FLOATS + kn * T::BS, frag_m, frag_n);
#endif
                }
            }
        } else {
#pragma unroll 1
            for (int t = 0; t < ktiles; ++t) {
                fetch_next();
                copy_wait<STAGES - 2>();
                __syncthreads();
            }
        }
        copy_wait<0>();
        __syncthreads();  // the next row tile's first copies may target a stage just read

        // Column bounds as "what is left" from this thread's first column, compared with constant
        // offsets: separate column bounds, being loop invariants, were hoisted out of the row-tile
        // loop and held in registers through the main loop.
        const int cols_left = N - (col0 + frag_n);
        if constexpr (EPILOGUE) {
            // The epilogue, in place, on the outputs inside C; the stores below are the plain ones. One
            // thread row a pass of a rolled loop: row i is in acc[0] and the rows move up one a pass,
            // back in place after TM passes (unrolled over all TM rows, its code was 4-5 times the
            // size of the rest of the kernel).
#pragma unroll 1
            for (int i = 0; i < TM; ++i) {
                const int r = row0 + frag_m + (i & 3) + (i >> 2) * 16;
                if (r < M) {
                    const float* crow = C + (long long)r * ldc + col0 + frag_n;
#pragma unroll
                    for (int j = 0; j < 8; ++j) {
                        const int c = (j >> 2) * 32 + (j & 3);  // acc[.][j] is column col0 + frag_n + c
                        if (c < cols_left) acc[0][j] = ep.apply<float>(acc[0][j], r, col0 + frag_n + c, crow + c);
                    }
                }
                float first[8];
#pragma unroll
                for (int j = 0; j < 8; ++j) first[j] = acc[0][j];
#pragma unroll
                for (int k = 0; k + 1 < TM; ++k)
#pragma unroll
                    for (int j = 0; j < 8; ++j) acc[k][j] = acc[k + 1][j];
#pragma unroll
                for (int j = 0; j < 8; ++j) acc[TM - 1][j] = first[j];
            }
        }
#pragma unroll
        for (int i = 0; i < TM; ++i) {
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

// Resolves this block's matrices of the batch, k range, output plane and shared memory, whether C
// allows 128-bit stores and whether B allows 16-byte copies (one decision for the block's matrix).
template <class T, bool TA = false, bool TB = false>
__device__ __forceinline__ void gemm_entry(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K,
                                           long long lda, long long ldb, long long ldc, int k_chunk,
                                           long long batch_a, long long batch_b, long long batch_c,
                                           const gpumat::Epilogue& ep)
{
    float* smem;
    if constexpr (T::SMEM_BYTES > 48 * 1024) {
        extern __shared__ __align__(16) float dynamic_smem[];
        smem = dynamic_smem;
    } else {
        __shared__ __align__(16) float static_smem[T::SMEM_FLOATS];
        smem = static_smem;
    }
    const gpumat::BatchSplit bs = gpumat::batch_split(K, k_chunk);
    const long long k_lo = (long long)bs.split * k_chunk;
    const int k_begin = (int)(k_lo < K ? k_lo : K);
    const int k_end = (int)(k_lo + k_chunk < K ? k_lo + k_chunk : K);
    const float* const Az = A + bs.batch * batch_a;
    const float* const Bz = B + bs.batch * batch_b;
    float* const Cz = C + bs.batch * batch_c + (long long)bs.split * M * ldc;

    // C's float4 stores need a 16-byte aligned base and a stride that is a multiple of 4 floats.
    const bool vec_c = (reinterpret_cast<uintptr_t>(Cz) & 15) == 0 && (ldc & 3) == 0;
    const bool vec_b = SGEMM_VEC_B && !TB && (reinterpret_cast<uintptr_t>(Bz) & 15) == 0 && (ldb & 3) == 0;

    // The epilogue gets a copy of the whole row-tile loop: inside the plain one, the compiler hoisted
    // its arithmetic out of the loop, which cost the main loop registers and instructions.
    const bool ep_id = ep.identity();
    if constexpr (TA || TB) {  // a transposed operand: the one-float B copies (no 16-byte path)
        if (ep_id) gemm_block<T, false, false, TA, TB>(Az, Bz, Cz, M, N, lda, ldb, ldc, k_begin, k_end, vec_c, smem, ep);
        else gemm_block<T, false, true, TA, TB>(Az, Bz, Cz, M, N, lda, ldb, ldc, k_begin, k_end, vec_c, smem, ep);
    } else if (vec_b) {
        if (ep_id) gemm_block<T, true, false>(Az, Bz, Cz, M, N, lda, ldb, ldc, k_begin, k_end, vec_c, smem, ep);
        else gemm_block<T, true, true>(Az, Bz, Cz, M, N, lda, ldb, ldc, k_begin, k_end, vec_c, smem, ep);
    } else {
        if (ep_id) gemm_block<T, false, false>(Az, Bz, Cz, M, N, lda, ldb, ldc, k_begin, k_end, vec_c, smem, ep);
        else gemm_block<T, false, true>(Az, Bz, Cz, M, N, lda, ldb, ldc, k_begin, k_end, vec_c, smem, ep);
    }
}

//                         BM   BN   BK  TM  STAGES  BPAD (the tiles with transposed layouts)
using Tile128x256k16 = Tile<128, 256, 16, 16, 3>;
using Tile128x256 = Tile<128, 256, 8, 16, 4>;
using Tile128x128 = Tile<128, 128, 8, 16, 4, 4>;
using Tile128x64 = Tile<128, 64, 8, 8, 4, 4>;
using Tile64x128 = Tile<64, 128, 8, 8, 4, 4>;
using Tile64x64 = Tile<64, 64, 8, 8, 4>;
using Tile32x128 = Tile<32, 128, 8, 8, 4, 4>;

}  // namespace

// One extern "C" entry point a tile shape: launch bounds (TILE's threads, blocks an SM) and the shared
// signature of every matmul kernel: NAME(A, B, C, M, N, K, lda, ldb, ldc, k_chunk, batch_a, batch_b,
// batch_c, alpha, beta, bias, bias_step, bias_along, bias_f32, activation).
#define GPUMAT_SGEMM_ENTRY_AS(NAME, TILE, BLOCKS_PER_SM, TA, TB)                                               \
    extern "C" __global__ void __launch_bounds__(TILE::THREADS, BLOCKS_PER_SM) NAME(                          \
        const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N,        \
        int K, long long lda, long long ldb, long long ldc, int k_chunk, GPUMAT_BATCH_PARAMS,                 \
        GPUMAT_EPILOGUE_PARAMS)                                                                               \
    {                                                                                                         \
        gpumat::wait_for_previous_grid();                                                                     \
        gemm_entry<TILE, TA, TB>(A, B, C, M, N, K, lda, ldb, ldc, k_chunk, batch_a, batch_b, batch_c,         \
                                 GPUMAT_EPILOGUE_ARGS);                                                       \
    }
#define GPUMAT_SGEMM_ENTRY(NAME, TILE, BLOCKS_PER_SM) GPUMAT_SGEMM_ENTRY_AS(NAME, TILE, BLOCKS_PER_SM, false, false)
// The same tile reading A stored transposed (NAME##at: K rows of M, as X.T @ B gives it), B stored
// transposed (NAME##bt: N rows of K, as x @ W.T gives it), or both (NAME##atbt), in place: the copies into
// shared memory take the storage as it lies (see Loader), the rest of the kernel is the same.
#define GPUMAT_SGEMM_LAYOUTS(NAME, TILE, BLOCKS_PER_SM)                                                       \
    GPUMAT_SGEMM_ENTRY(NAME, TILE, BLOCKS_PER_SM)                                                             \
    GPUMAT_SGEMM_ENTRY_AS(NAME##at, TILE, BLOCKS_PER_SM, true, false)                                         \
    GPUMAT_SGEMM_ENTRY_AS(NAME##bt, TILE, BLOCKS_PER_SM, false, true)                                         \
    GPUMAT_SGEMM_ENTRY_AS(NAME##atbt, TILE, BLOCKS_PER_SM, true, true)

// Largest tiles, 16 x 8 a thread, for big problems. Block (256,1,1) = 2 (M) x 4 (N) warp tiles of
// 64 x 64; tile 128 x 256 x 16, 3 stages: 74,496 bytes of dynamic shared memory; one block per SM.
// (The same tile turned, 256 x 128, ran 4-8% slower: twice the one-float A copies per k tile.)
// Grid (ceil(N/256), min(ceil(M/128), 65535), batch * splits).
GPUMAT_SGEMM_ENTRY(matmul_sgemm_128x256k16, Tile128x256k16, 1)

// The same at BK = 8, 4 stages: 49,664 bytes of dynamic shared memory; one block per SM.
// Grid (ceil(N/256), min(ceil(M/128), 65535), batch * splits).
GPUMAT_SGEMM_ENTRY(matmul_sgemm_128x256, Tile128x256, 1)

// Large tiles at 16 x 8 a thread, 4 warps. Block (128,1,1) = 2 (M) x 2 (N) warp tiles of 64 x 64;
// tile 128 x 128 x 8, 4 stages: 33,792 bytes of static shared memory (0 dynamic); two blocks per SM.
// Grid (ceil(N/128), min(ceil(M/128), 65535), batch * splits).
GPUMAT_SGEMM_LAYOUTS(matmul_sgemm_128x128, Tile128x128, 2)

// Medium tiles at 8 x 8 a thread: twice the blocks of 128x128 for mid-size problems, where finer
// tiles even out the last wave. Block (128,1,1) = 4 (M) x 1 (N) warp tiles of 32 x 64; tile
// 128 x 64 x 8, 4 stages: 25,600 bytes static shared memory (0 dynamic); three blocks per SM (four,
// at 128 registers, spill). Grid (ceil(N/64), min(ceil(M/128), 65535), batch * splits).
GPUMAT_SGEMM_LAYOUTS(matmul_sgemm_128x64, Tile128x64, 3)

// Few-row tiles for products of 33-64 rows of C (a layer on few tokens, x @ W or x @ W.T): all of a
// block's rows live where the 128-row tiles compute half or more of theirs past M. Block (128,1,1) =
// 2 (M) x 2 (N) warp tiles of 32 x 64, 8 x 8 a thread; tile 64 x 128 x 8, 4 stages: 25,600 bytes static
// shared memory (0 dynamic); three blocks per SM. Grid (ceil(N/128), min(ceil(M/64), 65535),
// batch * splits).
GPUMAT_SGEMM_LAYOUTS(matmul_sgemm_64x128, Tile64x128, 3)

// The same for 32 rows or fewer: Block (64,1,1) = 1 (M) x 2 (N) warp tiles of 32 x 64; tile 32 x 128 x 8,
// 4 stages: 21,504 bytes static shared memory; six blocks per SM (168 registers; on sm_120 the *atbt entry
// spills 4 bytes).
// Grid (ceil(N/128), min(ceil(M/32), 65535), batch * splits).
GPUMAT_SGEMM_LAYOUTS(matmul_sgemm_32x128, Tile32x128, 6)

// Small tiles for small or skinny problems (usually with split-K). Block (64,1,1) = 2 (M) x 1 (N)
// warp tiles of 32 x 64; tile 64 x 64 x 8, 4 stages: 16,896 bytes static shared memory (0 dynamic);
// six blocks per SM. Grid (ceil(N/64), min(ceil(M/64), 65535), batch * splits). No transposed layouts:
// at 160 registers of its 168, the transposed copies made it spill.
GPUMAT_SGEMM_ENTRY(matmul_sgemm_64x64, Tile64x64, 6)
