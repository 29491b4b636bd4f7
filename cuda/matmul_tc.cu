// Float32 matrix multiply on the tensor cores (mma.sync m16n8k8 TF32, sm_80 and later):
// C (M x N) = A (M x K) @ B (K x N), row-major with row strides lda / ldb / ldc in elements, 64-bit
// offsets. Same signature and batch / split-K contract as matmul_fast.cu: block z is (batch b, split s)
// = gpumat::batch_split(K, k_chunk); it multiplies matrix b of the batch (A + b*batch_a, B + b*batch_b)
// over k in [s*k_chunk, min(K, (s+1)*k_chunk)) and writes its whole M x N result to
// C + b*batch_c + s*M*ldc (a split-K caller passes scratch with ldc = N, then runs
// matmul_splitk_reduce_f32_f32 in matmul_splitk.cu); a plain run has gridDim.z = batch and k_chunk = K
// (a launch that both batches and splits, which gpumat never makes, is done in plain FP32: see
// batch_and_split). Each output goes through the fused epilogue (gpumat::Epilogue), tested once a
// thread: the identity stores as before (see entry for where that is a copy of the row-tile loop of its
// own). blockIdx.x walks N tiles, blockIdx.y M tiles (a grid-stride loop: gridDim.y is capped at
// 65535). blockDim must be (256, 1, 1); dynamic shared memory SMEM_BYTES (below).
//
// Two ways of using the TF32 units, chosen by a template parameter:
//  * TF32: one pass. Each operand is rounded to TF32 (11 significant bits, to nearest), so the
//    products carry up to 2^-10 relative error; the accumulation is FP32 in the tensor cores.
//  * TF32X3: x = big + small, big = x rounded to TF32, small = x - big (exact in FP32), so big + small
//    carries ~22 bits of x. C = big_a*big_b + big_a*small_b + small_a*big_b (small*small, ~2^-22
//    relative, is dropped). The tensor cores truncate as they accumulate, which over a long K costs
//    more than the split gains; so the three products of one k tile (32 k) go into a fresh tensor-core
//    sum, and those per-tile sums are added up in FP32 registers, rounding to nearest. A variant with
//    one accumulator for everything (the published scheme) is kept to measure what that buys and costs.
// The operand split is done in registers right after the fragments are read from shared memory
// (which holds plain FP32 copies of A and B), with plain FP32/integer operations (see to_tf32).
// Non-finite outputs are recomputed in plain FP32 (exact_dot), so infinities and NaNs in the
// inputs give exactly what an FP32 product gives.
// Tile and data flow:
//  * a block computes 128 x 128 of C with 8 warps as 2 (M) x 4 (N) warp tiles of 64 x 32, each warp
//    4 x 4 mma tiles of 16 x 8; k tiles of BK = 32 go global -> shared memory by cp.async into a
//    ring of STAGES = 3 buffers (one barrier per k tile);
//  * the mma's k and n indices are labels, and they are relabelled so that every fragment is a
//    128-bit shared-memory read. In k step s (0..3) of a k tile, mma k index t (0..3) stands for
//    the tile's k = 8t + 2s and index t + 4 for 8t + 2s + 1; so the thread (g = lane/4, t = lane%4)
//    reads row g of the A tile at k 8t..8t+7 as two float4 that serve all four k steps. For B, n
//    index g of mma tile j stands for the warp's column 4g + j, so the thread reads B's row k at
//    columns 4g..4g+3 as one float4 that feeds all four n tiles, and it ends up owning 8
//    consecutive columns 8t..8t+7 of each of its C rows: two float4 stores;
//  * shared memory: A rows padded to 36 floats (the 8 lanes of a quarter warp read 8 distinct
//    16-byte bank groups); B rows of 128 floats with the 16-byte chunk index XORed by
//    2 * ((k / 8) % 4), which does the same for the B reads, whose 4 rows are 8 k apart. The copies
//    into both layouts are whole 16-byte chunks, 8 consecutive chunks of one row a quarter warp;
//  * when A, B, lda, ldb and the k start are all 16-byte aligned, operands move as 16-byte cp.async,
//    partial chunks at the M, N and K edges zero-filled by the copy itself; any other view (odd
//    offsets or strides) takes the same path with one 4-byte cp.async per float;
//  * blocks are mapped to tiles in groups of 8 row tiles (gpumat::grouped_tile) so that blocks
//    running at the same time share A and B tiles in L2; warps whose whole warp tile lies outside C
//    skip the math; stores of C are guarded per element.
// Deterministic: a fixed order of products and sums, no atomics.
//
// Built for every arch in the default list; the mma code exists only for sm_80 and later (below
// that the kernels trap, and gpumat never launches them there).

#include <stdint.h>

#include "gpumat.cuh"

namespace {

constexpr int BK = 32;
constexpr int AS = BK + 4;  // A row stride in shared memory (floats)
constexpr int STAGES = 3;
constexpr int GROUP_M = 8;

// A block's tile of C, BM x BN, in warp tiles of WM x 32 (each warp MT x 4 mma tiles of 16 x 8), and how
// its threads split a k tile's 16-byte copies: A as passes of THREADS / 8 rows (8 chunks a row), B as
// passes of THREADS / (BN / 4) k rows.
template <int BM_, int BN_, int WM_>
struct Tile {
    static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = 32;
    static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN, THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr int MT = WM / 16, NT = WN / 8;
    static constexpr int A_FLOATS = BM * AS, B_FLOATS = BK * BN, STAGE_FLOATS = A_FLOATS + B_FLOATS;
    static constexpr int SMEM_BYTES = STAGES * STAGE_FLOATS * 4;
    static constexpr int A_PASS_ROWS = THREADS / 8, B_CHUNKS = BN / 4, B_PASS_ROWS = THREADS / B_CHUNKS;
    static_assert(BM % A_PASS_ROWS == 0 && BM / A_PASS_ROWS == 4 && BK / B_PASS_ROWS == 4, "four copies an operand a thread");
};
using Big = Tile<128, 128, 64>;  // 2 x 4 warps of 64 x 32, 256 threads
using Small = Tile<64, 64, 32>;  // 2 x 2 warps of 32 x 32, 128 threads
static_assert(Big::SMEM_BYTES == 104448 && Small::SMEM_BYTES == 52224, "variants.py asks for these");

// Lane-native fragment area of the *_SMEM modes (one k tile, rewritten every k tile): the A quads
// (m tile mt of 8, k step s, lane) at ((mt*4 + s)*32 + lane)*4, then the B pairs of a warp's 4 n
// tiles (warp column wn, k step s, half h = n tiles 2h and 2h+1, lane) at (((wn*4 + s)*2 + h)*32
// + lane)*4: every fragment read is one conflict-free 128-bit load straight into the mma's registers.
// The big tile's alone.
constexpr int FRAG_FLOATS = Big::BM * BK + BK * Big::BN;  // 8192: one part (rounded, or big, or small)
constexpr int SMEM_BYTES_TF32_SMEM = Big::SMEM_BYTES + FRAG_FLOATS * 4;        // 137,216
constexpr int SMEM_BYTES_TF32X3_SMEM = Big::SMEM_BYTES + 2 * FRAG_FLOATS * 4;  // 169,984
constexpr int SMEM_BYTES_TF32_SMEM_2STAGE = 2 * Big::STAGE_FLOATS * 4 + FRAG_FLOATS * 4;  // 102,400
static_assert(SMEM_BYTES_TF32X3_SMEM == 169984 && SMEM_BYTES_TF32_SMEM == 137216 &&
              SMEM_BYTES_TF32_SMEM_2STAGE == 102400, "matmul.py asks for these");

enum class Mode { TF32, TF32X3, TF32X3_ONE_ACC, TF32_SMEM, TF32X3_SMEM };

template <Mode M>
constexpr bool SMEM_MODE = M == Mode::TF32_SMEM || M == Mode::TF32X3_SMEM;

#if __CUDA_ARCH__ >= 800

using gpumat::copy16;
using gpumat::copy_commit;
using gpumat::copy_wait;
using gpumat::smem_addr;

__device__ __forceinline__ void copy4(float* dst, const float* src, bool ok)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" :: "r"(smem_addr(dst)), "l"(src), "r"(ok ? 4 : 0));
}


// Round to TF32 (11 significant bits, to nearest) in three FP32 operations (Veltkamp's split with
// 2^13 + 1): cheaper than cvt.rna.tf32.f32, which ptxas expands to a compare and a predicated add
// in place, after which every value needs a move into the mma's register quad. A NaN stays NaN; an
// infinity, or |x| above ~4e34 (where x * 8193 overflows), becomes NaN, and such outputs are
// recomputed exactly (see exact_dot).
__device__ __forceinline__ uint32_t to_tf32(float x)
{
    const float t = __fmul_rn(x, 8193.0f);  // _rn: never contracted into an FMA, which would break the split
    return __float_as_uint(__fsub_rn(t, __fsub_rn(t, x)));
}

// x = big + small: big = x rounded to 11 significant bits (ties up, in the integer domain: add half
// a TF32 unit, clear the 13 low bits), small = x - big (exact), handed to the mma as it is: the
// tensor cores read only the top 19 bits of a TF32 operand, so small is truncated to 11 bits
// (error below 2^-23 |x|). A NaN x gives a NaN small; an infinite x, or one that rounds up to
// infinity, gives big = inf and small = NaN or -inf: every non-finite input ends in a non-finite
// output, which is recomputed exactly (see exact_dot).
__device__ __forceinline__ void split_tf32(float x, uint32_t& big, uint32_t& small)
{
    big = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
    small = __float_as_uint(x - __uint_as_float(big));
}

// d += a (16x8, row) * b (8x8, col), TF32 inputs, FP32 accumulation.
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// d = a * b (a zero accumulator in).
__device__ __forceinline__ void mma_first(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2])
{
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(0.0f));
}

// B tile element (k, n) lives at Bs[k * BN + swizzled n]: the 16-byte chunk n / 4 XOR 2 * ((k / 8) % 4).
template <int BN>
__device__ __forceinline__ int b_offset(int k, int chunk)
{
    return k * BN + ((chunk ^ (((k >> 3) & 3) << 1)) << 2);
}

// The copies of one k tile. Thread tid copies A chunk (row tid/8 + A_PASS_ROWS i, k 4 (tid%8)) and
// B chunk (k tid/B_CHUNKS + B_PASS_ROWS i, columns 4 (tid%B_CHUNKS)), i = 0..3.
template <class T>
struct Loader {
    const float* a;    // A at this thread's first row, its k chunk, in the next k tile
    const float* b;    // B at this thread's first k row and its column chunk, in the next k tile
    long long lda;     // row stride of A
    long long ldb;     // row stride of B
    int a_rows;        // rows of A from this thread's first row to M
    int b_cols;        // columns of B from this thread's first column to N

    template <bool VEC, bool GUARD>
    __device__ __forceinline__ void fetch(float* As, float* Bs, int kvalid)
    {
        const int tid = threadIdx.x;
        const int ca = tid & 7, kb = tid / T::B_CHUNKS, cb = tid % T::B_CHUNKS;
        const int a_kleft = kvalid - 4 * ca;  // valid k in this thread's A chunk (may be <= 0 or > 4)
        float* adst = As + (tid >> 3) * AS + 4 * ca;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float* src = a + i * T::A_PASS_ROWS * lda;
            float* dst = adst + i * T::A_PASS_ROWS * AS;
            const bool row_ok = !GUARD || T::A_PASS_ROWS * i < a_rows;
            if (VEC) {
                const int n = !GUARD ? 4 : (row_ok ? max(0, min(4, a_kleft)) : 0);
                copy16(dst, src, 4 * n);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    copy4(dst + e, src + e, !GUARD || (row_ok && e < a_kleft));
            }
        }
        a += BK;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int k = kb + T::B_PASS_ROWS * i;
            const float* src = b + i * T::B_PASS_ROWS * ldb;
            float* dst = Bs + b_offset<T::BN>(k, cb);
            const bool row_ok = !GUARD || k < kvalid;
            if (VEC) {
                const int n = !GUARD ? 4 : (row_ok ? max(0, min(4, b_cols)) : 0);
                copy16(dst, src, 4 * n);
            } else {
#pragma unroll
                for (int e = 0; e < 4; ++e)
                    copy4(dst + e, src + e, !GUARD || (row_ok && e < b_cols));
            }
        }
        b += BK * ldb;
    }
};

template <Mode MODE, class T>
struct Accumulators {
    static constexpr bool TWO = MODE == Mode::TF32X3 || MODE == Mode::TF32X3_SMEM;
    static constexpr int MT = T::MT, NT = T::NT;
    float main[MT][NT][4];                        // FP32 sums (TF32X3: added to once a k tile)
    float tile[TWO ? MT : 1][TWO ? NT : 1][4];    // TF32X3: this k tile's sum, in the tensor cores
};

// One k tile: 4 k steps of MT x NT mma tiles (x3 for the split modes).
template <Mode MODE, class T>
__device__ __forceinline__ void multiply_tile(const float* __restrict__ As, const float* __restrict__ Bs,
                                              int a_row, int b_chunk, int g, int t, Accumulators<MODE, T>& acc)
{
    constexpr int MT = T::MT, NT = T::NT;
    if constexpr (MODE == Mode::TF32) {
        // B for two k steps first, then A one mma row at a time (fewer live registers than the split
        // modes' order below; ptxas still wants 166, so this kernel also runs one block an SM).
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            uint32_t bf[2][NT][2];
#pragma unroll
            for (int s2 = 0; s2 < 2; ++s2) {
                const int k = 8 * t + 4 * half + 2 * s2;
                const float4 b0 = *reinterpret_cast<const float4*>(Bs + b_offset<T::BN>(k, b_chunk));
                const float4 b1 = *reinterpret_cast<const float4*>(Bs + b_offset<T::BN>(k + 1, b_chunk));
                const float bx[NT][2] = {{b0.x, b1.x}, {b0.y, b1.y}, {b0.z, b1.z}, {b0.w, b1.w}};
#pragma unroll
                for (int j = 0; j < NT; ++j)
#pragma unroll
                    for (int r = 0; r < 2; ++r) bf[s2][j][r] = to_tf32(bx[j][r]);
            }
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                const float4 lo = *reinterpret_cast<const float4*>(As + (a_row + 16 * i) * AS + 8 * t + 4 * half);
                const float4 hi = *reinterpret_cast<const float4*>(As + (a_row + 16 * i + 8) * AS + 8 * t + 4 * half);
                const uint32_t af[2][4] = {{to_tf32(lo.x), to_tf32(hi.x), to_tf32(lo.y), to_tf32(hi.y)},
                                           {to_tf32(lo.z), to_tf32(hi.z), to_tf32(lo.w), to_tf32(hi.w)}};
#pragma unroll
                for (int s2 = 0; s2 < 2; ++s2)
#pragma unroll
                    for (int j = 0; j < NT; ++j) mma(acc.main[i][j], af[s2], bf[s2][j]);
            }
        }
    } else {
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // k steps 2*half and 2*half + 1 share the A float4
            float4 ar[MT][2];
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h)
                    ar[i][h] = *reinterpret_cast<const float4*>(As + (a_row + 16 * i + 8 * h) * AS + 8 * t + 4 * half);
#pragma unroll
            for (int s2 = 0; s2 < 2; ++s2) {
                const int k = 8 * t + 4 * half + 2 * s2;  // this thread's k for mma index t; k + 1 for t + 4
                const float4 b0 = *reinterpret_cast<const float4*>(Bs + b_offset<T::BN>(k, b_chunk));
                const float4 b1 = *reinterpret_cast<const float4*>(Bs + b_offset<T::BN>(k + 1, b_chunk));
                const float bx[NT][2] = {{b0.x, b1.x}, {b0.y, b1.y}, {b0.z, b1.z}, {b0.w, b1.w}};
                float ax[MT][4];
#pragma unroll
                for (int i = 0; i < MT; ++i) {
                    // a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
                    ax[i][0] = s2 ? ar[i][0].z : ar[i][0].x;
                    ax[i][1] = s2 ? ar[i][1].z : ar[i][1].x;
                    ax[i][2] = s2 ? ar[i][0].w : ar[i][0].y;
                    ax[i][3] = s2 ? ar[i][1].w : ar[i][1].y;
                }
                {
                    uint32_t ab[MT][4], as[MT][4], bb[NT][2], bs[NT][2];
#pragma unroll
                    for (int i = 0; i < MT; ++i)
#pragma unroll
                        for (int r = 0; r < 4; ++r) split_tf32(ax[i][r], ab[i][r], as[i][r]);
#pragma unroll
                    for (int j = 0; j < NT; ++j)
#pragma unroll
                        for (int r = 0; r < 2; ++r) split_tf32(bx[j][r], bb[j][r], bs[j][r]);
#pragma unroll
                    for (int i = 0; i < MT; ++i)
#pragma unroll
                        for (int j = 0; j < NT; ++j) {
                            if constexpr (MODE == Mode::TF32X3) {
                                if (half == 0 && s2 == 0) mma_first(acc.tile[i][j], as[i], bb[j]);
                                else mma(acc.tile[i][j], as[i], bb[j]);
                                mma(acc.tile[i][j], ab[i], bs[j]);
                                mma(acc.tile[i][j], ab[i], bb[j]);
                            } else {
                                mma(acc.main[i][j], as[i], bb[j]);
                                mma(acc.main[i][j], ab[i], bs[j]);
                                mma(acc.main[i][j], ab[i], bb[j]);
                            }
                        }
                }
            }
        }
    }  // split modes
    if constexpr (MODE == Mode::TF32X3) {
        // The tensor cores truncate as they accumulate; summing k tiles here, rounding to nearest,
        // keeps that truncation to the 12 products of one k tile.
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc.main[i][j][r] += acc.tile[i][j][r];
    }
}

// One element of C in plain FP32 (fused multiply-adds in k order), for the rare outputs that come out
// of the tensor cores non-finite: the splits above turn infinite inputs into NaN, and this restores
// exactly what FP32 gives (an infinity, a NaN, or a finite value near the overflow threshold).
__device__ __noinline__ float exact_dot(const float* a_row, const float* b_col, long long ldb, int k_begin, int k_end)
{
    float sum = 0.0f;
    for (int k = k_begin; k < k_end; ++k) sum = fmaf(a_row[k], b_col[(long long)k * ldb], sum);
    return sum;
}

// The *_SMEM modes: once a k tile has landed, the block rounds (TF32_SMEM) or splits (TF32X3_SMEM)
// every element once, writing the lane-native fragment area (big at F, small at F + FRAG_FLOATS).
// The register-split modes above redo that work in each of the 4 (A) or 2 (B) warps that read an
// element, and need register moves to assemble the mma operands.
template <Mode MODE>
__device__ __forceinline__ void fill_fragments(const float* __restrict__ As, const float* __restrict__ Bs, float* F)
{
    constexpr bool X3 = MODE == Mode::TF32X3_SMEM;
    constexpr int THREADS = Big::THREADS, BM = Big::BM, WN = Big::WN;
    const int tid = threadIdx.x;
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // A: 1024 quads {(g, k), (g + 8, k), (g, k + 1), (g + 8, k + 1)}
        const int item = tid + THREADS * q;
        const int lane = item & 31, st = (item >> 5) & 3, mt = item >> 7;
        const int k = 8 * (lane & 3) + 2 * st, row = 16 * mt + (lane >> 2);
        const float2 lo = *reinterpret_cast<const float2*>(As + row * AS + k);
        const float2 hi = *reinterpret_cast<const float2*>(As + (row + 8) * AS + k);
        const float v[4] = {lo.x, hi.x, lo.y, hi.y};
        uint4 big, small;
        if constexpr (X3) {
            split_tf32(v[0], big.x, small.x); split_tf32(v[1], big.y, small.y);
            split_tf32(v[2], big.z, small.z); split_tf32(v[3], big.w, small.w);
            *reinterpret_cast<uint4*>(F + FRAG_FLOATS + 4 * item) = small;
        } else {
            big = make_uint4(to_tf32(v[0]), to_tf32(v[1]), to_tf32(v[2]), to_tf32(v[3]));
        }
        *reinterpret_cast<uint4*>(F + 4 * item) = big;
    }
#pragma unroll
    for (int q = 0; q < 2; ++q) {  // B: 512 items, each the pairs {(k, n), (k + 1, n)} of 4 n tiles
        const int item = tid + THREADS * q;
        const int lane = item & 31, st = (item >> 5) & 3, wn = item >> 7;
        const int k = 8 * (lane & 3) + 2 * st, chunk = wn * (WN / 4) + (lane >> 2);
        const float4 r0 = *reinterpret_cast<const float4*>(Bs + b_offset<Big::BN>(k, chunk));
        const float4 r1 = *reinterpret_cast<const float4*>(Bs + b_offset<Big::BN>(k + 1, chunk));
        const float v[2][4] = {{r0.x, r1.x, r0.y, r1.y}, {r0.z, r1.z, r0.w, r1.w}};
        float* dst = F + BM * BK + (item >> 5) * 256 + 4 * lane;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            uint4 big, small;
            if constexpr (X3) {
                split_tf32(v[h][0], big.x, small.x); split_tf32(v[h][1], big.y, small.y);
                split_tf32(v[h][2], big.z, small.z); split_tf32(v[h][3], big.w, small.w);
                *reinterpret_cast<uint4*>(dst + FRAG_FLOATS + 128 * h) = small;
            } else {
                big = make_uint4(to_tf32(v[h][0]), to_tf32(v[h][1]), to_tf32(v[h][2]), to_tf32(v[h][3]));
            }
            *reinterpret_cast<uint4*>(dst + 128 * h) = big;
        }
    }
}

template <Mode MODE>
__device__ __forceinline__ void multiply_fragments(const float* __restrict__ F, int wm, int wn, int lane,
                                                   Accumulators<MODE, Big>& acc)
{
    constexpr bool X3 = MODE == Mode::TF32X3_SMEM;
    constexpr int MT = Big::MT, NT = Big::NT, BM = Big::BM;
    const float* fa = F + (wm * MT * 4 * 32 + lane) * 4;         // + ((i*4 + s)*32)*4
    const float* fb = F + BM * BK + wn * 4 * 256 + 4 * lane;      // + s*256 + h*128
#pragma unroll
    for (int st = 0; st < 4; ++st) {
        uint32_t bb[NT][2], bs[NT][2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const uint4 vb = *reinterpret_cast<const uint4*>(fb + st * 256 + 128 * h);
            bb[2 * h][0] = vb.x; bb[2 * h][1] = vb.y; bb[2 * h + 1][0] = vb.z; bb[2 * h + 1][1] = vb.w;
            if constexpr (X3) {
                const uint4 vs = *reinterpret_cast<const uint4*>(fb + FRAG_FLOATS + st * 256 + 128 * h);
                bs[2 * h][0] = vs.x; bs[2 * h][1] = vs.y; bs[2 * h + 1][0] = vs.z; bs[2 * h + 1][1] = vs.w;
            }
        }
#pragma unroll
        for (int i = 0; i < MT; ++i) {
            const uint4 qa = *reinterpret_cast<const uint4*>(fa + (i * 4 + st) * 128);
            const uint32_t ab[4] = {qa.x, qa.y, qa.z, qa.w};
            if constexpr (X3) {
                const uint4 qs = *reinterpret_cast<const uint4*>(fa + FRAG_FLOATS + (i * 4 + st) * 128);
                const uint32_t as[4] = {qs.x, qs.y, qs.z, qs.w};
#pragma unroll
                for (int j = 0; j < NT; ++j) {
                    if (st == 0) mma_first(acc.tile[i][j], as, bb[j]);
                    else mma(acc.tile[i][j], as, bb[j]);
                    mma(acc.tile[i][j], ab, bs[j]);
                    mma(acc.tile[i][j], ab, bb[j]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < NT; ++j) mma(acc.main[i][j], ab, bb[j]);
            }
        }
    }
    if constexpr (X3) {
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc.main[i][j][r] += acc.tile[i][j][r];
    }
}

// gemm's stores with an epilogue: each output inside C, a non-finite one first recomputed (exact_dot),
// goes through ep and then out as the plain stores do. acc[i][j][2h + c] is row r0 + 16 i + 8 h, column
// c0 + 4 c + j. ep and c0 pass through an empty asm, once for each i (once for all i, the 2-stage
// kernel spilled): seen through, their arithmetic (columns, bias addresses, alpha and beta as float) was
// hoisted out of the row-tile loop and held in registers through the main loop, which then took up to
// 10% more instructions.
template <int MT, int NT>
__device__ __forceinline__ void epilogue_stores(const float (&acc)[MT][NT][4], const float* A, const float* B,
                                                float* C, int M, long long lda, long long ldb, long long ldc,
                                                int k_begin, int k_end, int r0, int c0, int cols_left, bool vec_c,
                                                const gpumat::Epilogue& ep)
{
#pragma unroll
    for (int i = 0; i < MT; ++i) {
        gpumat::Epilogue epi = ep;
        int col = c0;
        asm volatile("" : "+d"(epi.alpha), "+d"(epi.beta), "+l"(epi.bias), "+l"(epi.bias_step),
                     "+r"(epi.bias_along), "+r"(epi.bias_f32), "+r"(epi.activation), "+r"(col));
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = r0 + 16 * i + 8 * h;
            if (r >= M) continue;
            float v[8];
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int c = 0; c < 2; ++c) v[4 * c + j] = acc[i][j][2 * h + c];
            float* crow = C + (long long)r * ldc + col;
#pragma unroll
            for (int e = 0; e < 8; ++e) {
                if (e < cols_left) {
                    if (!isfinite(v[e])) v[e] = exact_dot(A + (long long)r * lda, B + col + e, ldb, k_begin, k_end);
                    v[e] = epi.apply<float>(v[e], r, col + e, crow + e);
                }
            }
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                if (vec_c && 4 * q + 3 < cols_left) {
                    *reinterpret_cast<float4*>(crow + 4 * q) = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
                } else {
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        if (4 * q + e < cols_left) crow[4 * q + e] = v[4 * q + e];
                }
            }
        }
    }
}

// EPILOGUE: the stores test ep (else they are the plain ones and ep is not read).
template <Mode MODE, class T, bool VEC, int S, bool EPILOGUE>
__device__ __forceinline__ void gemm(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                     int M, int N, long long lda, long long ldb, long long ldc,
                                     int k_begin, int k_end, bool vec_c, float* smem, const gpumat::Epilogue& ep)
{
    static_assert(!SMEM_MODE<MODE> || T::BM == Big::BM, "the fragment area is the big tile's");
    constexpr int BM = T::BM, BN = T::BN, WM = T::WM, WN = T::WN, MT = T::MT, NT = T::NT, WARPS_N = T::WARPS_N;
    constexpr int A_FLOATS = T::A_FLOATS, STAGE_FLOATS = T::STAGE_FLOATS;
    const bool ep_id = !EPILOGUE || ep.identity();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int g = lane >> 2, t = lane & 3;
    const int a_row = wm * WM + g;           // fragment rows a_row + 16 i + {0, 8}
    const int b_chunk = wn * (WN / 4) + g;   // the 16-byte chunk of B this thread reads
    const int kspan = k_end - k_begin;
    const int tiles_m = (M + BM - 1) / BM, tiles_n = gridDim.x;

    for (int tm_raw = blockIdx.y; tm_raw < tiles_m; tm_raw += gridDim.y) {
        int tm = tm_raw, tn = blockIdx.x;
        if (gridDim.y == tiles_m) {  // the whole grid at once: walk it in groups of GROUP_M row tiles
            const gpumat::TileIndex tile =
                gpumat::grouped_tile<GROUP_M>(tm_raw * tiles_n + tn, tiles_m, tiles_n);
            tm = tile.tm;
            tn = tile.tn;
        }
        const int row0 = tm * BM, col0 = tn * BN;

        Loader<T> ld;
        ld.a = A + (long long)(row0 + (tid >> 3)) * lda + k_begin + 4 * (tid & 7);
        ld.b = B + (long long)(k_begin + tid / T::B_CHUNKS) * ldb + col0 + 4 * (tid % T::B_CHUNKS);
        ld.lda = lda;
        ld.ldb = ldb;
        ld.a_rows = M - (row0 + (tid >> 3));
        ld.b_cols = N - (col0 + 4 * (tid % T::B_CHUNKS));
        const bool inside = row0 + BM <= M && col0 + BN <= N;
        const bool warp_live = row0 + wm * WM < M && col0 + wn * WN < N;

        Accumulators<MODE, T> acc;
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    acc.main[i][j][r] = 0.0f;
                    if constexpr (Accumulators<MODE, T>::TWO) acc.tile[i][j][r] = 0.0f;
                }

        // Tile t goes to stage t % S; every thread commits one group per tile slot (empty past
        // the end), so "all but S - 2 groups done" always means "tile t has landed".
        int kleft = kspan, stage = 0;
        auto fetch_next = [&]() {
            float* st = smem + stage * STAGE_FLOATS;
            if (kleft >= BK && inside) ld.template fetch<VEC, false>(st, st + A_FLOATS, BK);
            else if (kleft > 0) ld.template fetch<VEC, true>(st, st + A_FLOATS, kleft);
            copy_commit();
            kleft -= BK;
            stage = stage == S - 1 ? 0 : stage + 1;
        };
#pragma unroll 1
        for (int s = 0; s < S - 1; ++s) fetch_next();
        while (kleft > -(S - 1) * BK) {
            copy_wait<S - 2>();
            __syncthreads();  // tile t visible to all; every warp is done with tile t - 1's stage
            fetch_next();     // tile t + S - 1 into tile t - 1's stage; `stage` is now tile t's
            const float* st = smem + stage * STAGE_FLOATS;
            if constexpr (SMEM_MODE<MODE>) {
                float* frag = smem + S * STAGE_FLOATS;
                fill_fragments<MODE>(st, st + A_FLOATS, frag);  // (the barrier above: tile t - 1's fragments are read)
                __syncthreads();
                if (warp_live) multiply_fragments<MODE>(frag, wm, wn, lane, acc);
            } else {
                if (warp_live) multiply_tile<MODE, T>(st, st + A_FLOATS, a_row, b_chunk, g, t, acc);
            }
        }
        copy_wait<0>();
        __syncthreads();  // the next row tile's first copies may overwrite a stage just read

        // Thread's outputs: rows row0 + a_row + 16 i + 8 h, columns col0 + wn*WN + 8t .. + 7.
        const int cols_left = N - (col0 + wn * WN + 8 * t);
        if (!ep_id) {
            epilogue_stores(acc.main, A, B, C, M, lda, ldb, ldc, k_begin, k_end, row0 + a_row, col0 + wn * WN + 8 * t,
                            cols_left, vec_c, ep);
            continue;
        }
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = row0 + a_row + 16 * i + 8 * h;
                if (r >= M) continue;
                float v[8];
#pragma unroll
                for (int j = 0; j < NT; ++j)
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        v[4 * c + j] = acc.main[i][j][2 * h + c];  // mma column 2t + c of n tile j is column 8t + 4c + j
                    }
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    if (!isfinite(v[e]) && e < cols_left)
                        v[e] = exact_dot(A + (long long)r * lda, B + col0 + wn * WN + 8 * t + e, ldb, k_begin, k_end);
                float* crow = C + (long long)r * ldc + col0 + wn * WN + 8 * t;
#pragma unroll
                for (int q = 0; q < 2; ++q) {
                    if (vec_c && 4 * q + 3 < cols_left) {
                        *reinterpret_cast<float4*>(crow + 4 * q) = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
                    } else {
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            if (4 * q + e < cols_left) crow[4 * q + e] = v[4 * q + e];
                    }
                }
            }
    }
}

// One block's matrices of the batch, k range and output plane, whether C allows 128-bit stores and
// whether A and B allow 16-byte copies.
template <Mode MODE, class T, int S, bool EPILOGUE>
__device__ __forceinline__ void block(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                      int M, int N, int K, long long lda, long long ldb, long long ldc, int k_chunk,
                                      int batch, int split, long long batch_a, long long batch_b, long long batch_c,
                                      float* smem, const gpumat::Epilogue& ep)
{
    const long long k_lo = (long long)split * k_chunk;
    const int k_begin = (int)(k_lo < K ? k_lo : K);
    const int k_end = (int)(k_lo + k_chunk < K ? k_lo + k_chunk : K);
    const float* const Az = A + batch * batch_a;
    const float* const Bz = B + batch * batch_b;
    float* const Cz = C + batch * batch_c + (long long)split * M * ldc;
    const bool vec_c = (reinterpret_cast<uintptr_t>(Cz) & 15) == 0 && (ldc & 3) == 0;
    // 16-byte copies need every chunk start 16-byte aligned: both bases, both strides and the k start.
    const bool vec = (reinterpret_cast<uintptr_t>(Az) & 15) == 0 && (reinterpret_cast<uintptr_t>(Bz) & 15) == 0 &&
                     (lda & 3) == 0 && (ldb & 3) == 0 && (k_begin & 3) == 0;
    if (vec) gemm<MODE, T, true, S, EPILOGUE>(Az, Bz, Cz, M, N, lda, ldb, ldc, k_begin, k_end, vec_c, smem, ep);
    else gemm<MODE, T, false, S, EPILOGUE>(Az, Bz, Cz, M, N, lda, ldb, ldc, k_begin, k_end, vec_c, smem, ep);
}

// A launch that both batches and splits K (gpumat never makes one): each output of the block's tiles in
// plain FP32 (exact_dot), through the epilogue. Its (batch, split) need batch_split's division, whose
// per-thread results cost the row-tile loop registers and instructions (see entry).
template <class T>
__device__ __noinline__ void batch_and_split(const float* A, const float* B, float* C, int M, int N, int K,
                                             long long lda, long long ldb, long long ldc, int k_chunk,
                                             long long batch_a, long long batch_b, long long batch_c,
                                             gpumat::Epilogue ep)
{
    const gpumat::BatchSplit bs = gpumat::batch_split(K, k_chunk);
    const long long k_lo = (long long)bs.split * k_chunk;
    const int k_begin = (int)(k_lo < K ? k_lo : K);
    const int k_end = (int)(k_lo + k_chunk < K ? k_lo + k_chunk : K);
    A += bs.batch * batch_a;
    B += bs.batch * batch_b;
    C += bs.batch * batch_c + (long long)bs.split * M * ldc;
    constexpr int BM = T::BM, BN = T::BN;
    const bool ep_id = ep.identity();
    const int tiles_m = (M + BM - 1) / BM;
    for (int tm = blockIdx.y; tm < tiles_m; tm += gridDim.y)
        for (int e = threadIdx.x; e < BM * BN; e += T::THREADS) {
            const int r = tm * BM + e / BN, c = blockIdx.x * BN + e % BN;
            if (r >= M || c >= N) continue;
            float* out = C + (long long)r * ldc + c;
            const float v = exact_dot(A + (long long)r * lda, B + c, ldb, k_begin, k_end);
            *out = ep_id ? v : ep.apply<float>(v, r, c, out);
        }
}

#endif  // __CUDA_ARCH__ >= 800

template <Mode MODE, class T, int S, bool PLAIN_COPY>
__device__ __forceinline__ void entry(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                                      int M, int N, int K, long long lda, long long ldb, long long ldc, int k_chunk,
                                      long long batch_a, long long batch_b, long long batch_c,
                                      const gpumat::Epilogue& ep)
{
#if __CUDA_ARCH__ >= 800
    extern __shared__ __align__(16) float smem[];
    // (batch, split) = gpumat::batch_split(K, k_chunk), without its division where the launch has no split
    // (batch z, split 0) or no batch (batch 0, split z): computed through it, they were per-thread values
    // (the division is not done in the uniform datapath) and cost the main loop up to 10% more
    // instructions, the 2-stage kernel spills.
    // PLAIN_COPY: plain and split-K launches with the identity epilogue run a copy of the row-tile loop
    // without the epilogue's stores (sm_90: its main loop has 2-10% fewer instructions than before, in
    // the registers the kernel now has); in one loop with them, the main loop took up to 10% more. Where
    // two copies made ptxas spill (3xTF32, 3xTF32 split in shared memory, 2 stages) there is one loop,
    // which tests the epilogue at its stores: the same main loop as before (the 2-stage kernel: 4-5% more
    // instructions, at its 128 registers).
    const int z = blockIdx.z;
    const bool split_k = k_chunk > 0 && k_chunk < K;
    if (split_k && (long long)z * k_chunk >= K) {  // a batch that is also split
        batch_and_split<T>(A, B, C, M, N, K, lda, ldb, ldc, k_chunk, batch_a, batch_b, batch_c, ep);
        return;
    }
    if (PLAIN_COPY && (split_k || z == 0) && ep.identity())
        block<MODE, T, S, false>(A, B, C, M, N, K, lda, ldb, ldc, k_chunk, 0, z, 0, 0, 0, smem, ep);
    else
        block<MODE, T, S, true>(A, B, C, M, N, K, lda, ldb, ldc, k_chunk, split_k ? 0 : z, split_k ? z : 0, batch_a,
                             batch_b, batch_c, smem, ep);
#else
    __trap();  // no TF32 tensor cores before sm_80: gpumat runs its FP32 kernels there instead
#endif
}

}  // namespace

// One extern "C" entry point a mode, tile and stage count: launch bounds (the tile's threads, blocks an
// SM), whether the identity epilogue has a copy of the loop (PLAIN_COPY, see entry) and the shared
// signature of every matmul kernel: NAME(A, B, C, M, N, K, lda, ldb, ldc, k_chunk, batch_a, batch_b,
// batch_c, alpha, beta, bias, bias_step, bias_along, bias_f32, activation).
#define GPUMAT_TF32_ENTRY(NAME, MODE, TILE, S, BLOCKS_PER_SM, PLAIN_COPY)                                     \
    extern "C" __global__ void __launch_bounds__(TILE::THREADS, BLOCKS_PER_SM) NAME(                          \
        const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int M, int N,        \
        int K, long long lda, long long ldb, long long ldc, int k_chunk, GPUMAT_BATCH_PARAMS,                 \
        GPUMAT_EPILOGUE_PARAMS)                                                                               \
    {                                                                                                         \
        gpumat::wait_for_previous_grid();                                                                     \
        entry<MODE, TILE, S, PLAIN_COPY>(A, B, C, M, N, K, lda, ldb, ldc, k_chunk, batch_a, batch_b, batch_c, \
                                         GPUMAT_EPILOGUE_ARGS);                                               \
    }

// One TF32 pass (operands rounded to TF32, FP32 accumulation): ~1e-3 relative error
// against || |A| |B| || whatever K. Tile 128 x 128 x 32, block (256,1,1) = 2 x 4 warps of 64 x 32,
// 3 cp.async stages in 104,448 bytes of dynamic shared memory, one block per SM (within 128
// registers, for two blocks, ptxas spilled). Grid (ceil(N/128), min(ceil(M/128), 65535), batch * splits).
GPUMAT_TF32_ENTRY(matmul_tf32_128x128_f32, Mode::TF32, Big, STAGES, 1, true)

// One TF32 pass on 64 x 64 tiles, for batches of small products and C of few tiles, where 128 x 128
// tiles leave most of each tile empty or most SMs idle. Block (128,1,1) = 2 x 2 warps of 32 x 32, 3
// cp.async stages in 52,224 bytes of dynamic shared memory, four blocks an SM (at most 128 registers).
// Grid (ceil(N/64), min(ceil(M/64), 65535), batch * splits).
GPUMAT_TF32_ENTRY(matmul_tf32_64x64_f32, Mode::TF32, Small, STAGES, 4, false)

// 3xTF32 (FP32-level accuracy): big*big + big*small + small*big of each k tile summed in the tensor
// cores, the per-tile sums added up in FP32. Tile 128 x 128 x 32, block (256,1,1) = 2 x 4 warps of
// 64 x 32, 3 cp.async stages in 104,448 bytes of dynamic shared memory, one block per SM (two
// accumulator sets: ~230 registers).
// Grid (ceil(N/128), min(ceil(M/128), 65535), batch * splits).
GPUMAT_TF32_ENTRY(matmul_tf32x3_128x128_f32, Mode::TF32X3, Big, STAGES, 1, false)

// 3xTF32 with all three products in one accumulator (the corrections first, then big*big): the
// published scheme, kept to measure what the per-tile FP32 sums buys and costs.
// Same tile, block, shared memory, grid and occupancy (one block per SM) as matmul_tf32x3_128x128_f32.
GPUMAT_TF32_ENTRY(matmul_tf32x3_oneacc_128x128_f32, Mode::TF32X3_ONE_ACC, Big, STAGES, 1, true)

// The same two modes with the rounding / split done once per element into shared memory (see
// fill_fragments), two barriers a k tile. Tile 128 x 128 x 32, block (256,1,1) = 2 x 4 warps of
// 64 x 32, one block per SM, 3 cp.async stages plus the fragment area: 137,216 bytes (tf32) and
// 169,984 bytes (tf32x3) of dynamic shared memory. Grid (ceil(N/128), min(ceil(M/128), 65535), batch * splits).
GPUMAT_TF32_ENTRY(matmul_tf32_splitsmem_128x128_f32, Mode::TF32_SMEM, Big, STAGES, 1, true)

GPUMAT_TF32_ENTRY(matmul_tf32x3_splitsmem_128x128_f32, Mode::TF32X3_SMEM, Big, STAGES, 1, false)

// tf32_splitsmem with 2 cp.async stages (102,400 bytes of dynamic shared memory) and at most 128
// registers, so that two blocks share an SM (16 warps to hide latency instead of 8). Block (256,1,1),
// grid (ceil(N/128), min(ceil(M/128), 65535), batch * splits).
GPUMAT_TF32_ENTRY(matmul_tf32_splitsmem_2stage_128x128_f32, Mode::TF32_SMEM, Big, 2, 2, false)
