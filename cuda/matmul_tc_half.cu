// float16 / bfloat16 matrix multiply on the tensor cores with mma.sync m16n8k16 (sm_80 and later):
// C (M x N) = A (M x K) @ B (K x N), row-major with row strides lda / ldb / ldc in elements, 64-bit
// offsets, float32 accumulation; C in the input dtype (rounded to nearest even) or in float32 (the
// _f32out entries). This is the portable tensor-core path: every GPU from sm_80 on, and on Hopper the
// views the TMA kernel (matmul_wgmma_half.cu) cannot take (base or row stride not 16-byte aligned).
//
// Batch and split-K contract (as matmul_fast.cu / matmul_tc.cu): block z is (batch b, split s) by
// gpumat::batch_split (z = b * splits + s, splits = ceil(K / k_chunk)); it multiplies A + b*batch_a by
// B + b*batch_b over k in [s*k_chunk, min(K, (s+1)*k_chunk)) and writes its whole M x N result to
// C + b*batch_c + s*M*ldc. A split-K caller (one matrix) runs the _f32out entry into float32 scratch
// (ldc = N) with the identity epilogue and then matmul_splitk_reduce_f32_<dtype> (matmul_splitk.cu),
// which adds the partial sums in a fixed order (deterministic, no atomics) and applies the epilogue.
// A plain run has gridDim.z = 1 and k_chunk = K; a batched one gridDim.z = batch and k_chunk = K.
//
// Epilogue (gpumat::Epilogue, the last parameters): C[i, j] = act(alpha * acc + beta * C[i, j] + bias)
// in float32, before the rounding to C's dtype; the identity epilogue stores the products as they are.
//
// One kernel template over the tile configuration (Cfg below: block tile BM x BN, warp layout, stages;
// BK = 32 for all), instantiated for a family of tiles:
//    mma128x128  8 warps of 64 x 32, 4 stages, 64 KiB: the large products (two blocks an SM);
//    mma128x64   4 warps of 64 x 32, 4 stages, 48 KiB  \  small products and products skinny in M or N,
//    mma64x128   4 warps of 32 x 64, 4 stages, 48 KiB   > where 128 x 128 tiles leave most SMs idle:
//    mma64x64    4 warps of 32 x 32, 4 stages, 32 KiB  /  four times the tiles, several blocks an SM.
// The 128 x 128 instantiation is the kernel as it was before the family (same machine code).
//
// Tile and data flow:
//  * a block computes BM x BN of C with WARPS_M x WARPS_N warp tiles of WM x WN, each warp
//    WM/16 x WN/8 mma tiles of 16 x 8; k tiles of BK = 32 (two mma k steps) pass through a ring of
//    STAGES shared-memory buffers, one barrier a k tile;
//  * fragments are read with ldmatrix (A: .x4, four 8 x 8 pieces = one 16 x 16 A fragment; B: .x4.trans
//    from the k-major B tile, two n tiles of 8 at once). Shared memory is swizzled in 16-byte chunks so
//    that the eight rows of every 8 x 8 piece hit distinct bank groups (the 32 banks are 8 groups of
//    16 bytes; an address's group is (byte offset / 16) % 8):
//      A rows are BK = 32 halves, 64 bytes (4 chunks), whatever BM is: two rows share a 128-byte bank
//      line, so chunk c of row r is stored at c ^ ((r / 2) % 4); rows r0..r0+7 (r0 a multiple of 8)
//      then take groups 4 (r % 2) + (c ^ ((r / 2) % 4)), eight distinct ones;
//      B rows are BN halves: 256 bytes (16 chunks) for BN = 128, 128 bytes (8 chunks) for BN = 64;
//      chunk c of k row r is stored at c ^ (r % 8) for both. A row of a multiple of 128 bytes starts
//      on group 0, so chunk p of any row is in group p % 8, and the eight k rows r0..r0+7 of a piece
//      (same logical chunk c) land in groups (c % 8) ^ 0..7: eight distinct ones. (A row of 64 bytes,
//      BN = 32, would need A's XOR instead; Cfg refuses it);
//  * copies: when A, B, lda, ldb and the k start are all 16-byte aligned, one cp.async of 16 bytes a
//    chunk, the M, N and K edges zero-filled by the copy (its source size; the small tiles copy whole
//    k tiles inside C by their own unguarded code, Cfg::SPLIT_GUARD); otherwise ("any view") each
//    thread loads its chunks element by element into registers (bounds-checked, zero outside) before
//    the math of the current k tile and stores them to shared memory after it, so that the loads'
//    latency hides behind a k tile of mma. It does on the 64 x 64 tile, which packs the 16-bit loads
//    into chunks after the math (Cfg::LATE_PACK). The other tiles pack them as they are loaded, and
//    their machine code waits for the loads there, before the math: 128 x 128 keeps the code it was
//    measured with, and with LATE_PACK the 128 x 64 and 64 x 128 tiles' sm_90 code spilled 8 bytes
//    at the 168 registers of three blocks an SM;
//  * blocks are mapped to tiles in groups of 8 row tiles (gpumat::grouped_tile: neighbours in time
//    share A and B in L2); warps whose warp tile lies wholly outside C skip the math; C is written in
//    pairs (4 or 8 bytes) where aligned, else element by element, every store guarded;
//  * the epilogue: identity() is tested once per block; the identity runs the row-tile loop above,
//    inline; any other epilogue runs its own copy of it, out of line (gemm_epilogue), which parks each
//    tile's float32 results in the idle ring (BM x BN floats: half or all of the ring's bytes) and
//    then finishes pairs of adjacent elements of a row, a warp a row segment: one apply per element in
//    a loop, where 64 inlined in the registers' store made the code six times larger and ptxas spill
//    at 128 registers.
// Deterministic: a fixed order of products and sums, no atomics.
//
// Built for every arch in the default list; the mma code exists only for sm_80 and later (below that
// the kernels trap, and gpumat never launches them there).
#include <stdint.h>

#include "gpumat.cuh"

using gpumat::Dtype;
using gpumat::store_pair;

namespace {

constexpr int BK = 32;  // every tile's k tile: A rows of 64 bytes

// A tile configuration: block tile BM x BN, WARPS_M x WARPS_N warps, STAGES k tiles of 32 in flight.
// SPLIT_GUARD: the 16-byte copies of a whole k tile inside C's tile take their own unguarded code (no
// per-chunk byte counts): the 64 x 64 tile's main loop issues about 90 instructions a k tile instead of
// 139 (sm_90), which matters where 4 warps carry a block's copies and 16 mmas a warp a k tile.
// LATE_PACK: the element-wise path packs its 16-bit loads after the k tile's mma (Loader).
// Both off for 128 x 128, which keeps the code it was measured with (one guarded copy path, 181
// instructions a k tile for 32 mmas; packing before the math); turning them on there is an experiment
// for the GPU. LATE_PACK off for 128 x 64 and 64 x 128 (see the header: a spill).
template <int BM_, int BN_, int WARPS_M_, int WARPS_N_, int STAGES_, bool SPLIT_GUARD_ = true, bool LATE_PACK_ = true>
struct Cfg {
    static constexpr bool SPLIT_GUARD = SPLIT_GUARD_, LATE_PACK = LATE_PACK_;
    static constexpr int BM = BM_, BN = BN_;
    static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
    static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // warp tile
    static constexpr int MT = WM / 16, NT = WN / 8;             // mma tiles a warp
    static constexpr int STAGES = STAGES_;
    static constexpr int A_ELEMS = BM * BK;
    static constexpr int B_ELEMS = BK * BN;
    static constexpr int STAGE_ELEMS = A_ELEMS + B_ELEMS;
    static constexpr int SMEM_BYTES = STAGES * STAGE_ELEMS * 2;
    // The copies: A rows are 4 chunks of 16 bytes, B rows B_CHUNKS; thread tid owns A chunk tid % 4 of
    // rows tid / 4 + A_STEP i (i < A_ITERS), B chunk tid % B_CHUNKS of k rows tid / B_CHUNKS + B_STEP i.
    static constexpr int B_CHUNKS = BN / 8;
    static constexpr int B_SHIFT = B_CHUNKS == 16 ? 4 : 3;  // log2(B_CHUNKS)
    static constexpr int A_STEP = THREADS / 4, A_ITERS = BM / A_STEP;
    static constexpr int B_STEP = THREADS / B_CHUNKS, B_ITERS = BK / B_STEP;
    static_assert(WM % 16 == 0 && WN % 16 == 0, "whole mma tiles, B fragments two n tiles at a time");
    static_assert(BN == 64 || BN == 128, "B's swizzle (b_chunk) needs rows of 8 or 16 chunks");
    static_assert(BM % A_STEP == 0 && BK % B_STEP == 0, "every thread copies whole chunks");
    static_assert(BM * BN * 4 <= SMEM_BYTES, "a non-identity epilogue parks the float32 tile in the ring");
};

using Mma128x128 = Cfg<128, 128, 2, 4, 4, false, false>;  // 8 warps of 64 x 32: 65,536 bytes
using Mma128x64 = Cfg<128, 64, 2, 2, 4, true, false>;     // 4 warps of 64 x 32: 49,152 bytes
using Mma64x128 = Cfg<64, 128, 2, 2, 4, true, false>;     // 4 warps of 32 x 64: 49,152 bytes
using Mma64x64 = Cfg<64, 64, 2, 2, 4, true, true>;        // 4 warps of 32 x 32: 32,768 bytes
static_assert(Mma128x128::SMEM_BYTES == 65536 && Mma128x64::SMEM_BYTES == 49152 &&
                  Mma64x128::SMEM_BYTES == 49152 && Mma64x64::SMEM_BYTES == 32768,
              "src/gpumat/matmul/variants.py asks for these (MMA_SMEM)");
constexpr int GROUP_M = 8;
// Blocks an SM (launch bounds: at most 65536 / (threads x blocks) registers a thread), the most that
// ptxas 13.0 fits without spilling:
//  * 128 x 128: two (128 registers); its sm_80 and sm_100 code needs a few more, so there one;
//  * 128 x 64 and 64 x 128 (4 warps with the big tile's warp tile, and twice its copies a thread): three
//    (168 registers; at four, 128, the sm_90 code spilled 80 bytes); on sm_80 and sm_100 two;
//  * 64 x 64: four (128 registers). At five (96) its sm_90 code spilled 20-32 bytes with LATE_PACK
//    (32 registers of 16-bit loads held over the math); without it five fitted on sm_90 and sm_100
//    with a main loop as long as at four, and spilled 8-16 bytes on sm_80, sm_86 and sm_120.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 800 || __CUDA_ARCH__ >= 1000) && __CUDA_ARCH__ < 1200
constexpr int MIN_BLOCKS = 1;
constexpr int MIN_BLOCKS_4W = 2;
#else
constexpr int MIN_BLOCKS = 2;
constexpr int MIN_BLOCKS_4W = 3;
#endif
constexpr int MIN_BLOCKS_64x64 = 4;

#if __CUDA_ARCH__ >= 800

using gpumat::copy16;
using gpumat::copy_commit;
using gpumat::copy_wait;
using gpumat::ldmatrix_x4;
using gpumat::ldmatrix_x4_trans;
using gpumat::Mma;
using gpumat::smem_addr;

// Element offsets (in halves) of 16-byte chunk c of row r inside a stage's A and B tiles (the swizzles
// of the header comment: A's for its 64-byte rows, B's for rows of 128 or 256 bytes).
__device__ __forceinline__ int a_chunk(int r, int c) { return r * BK + ((c ^ ((r >> 1) & 3)) << 3); }
template <int BN>
__device__ __forceinline__ int b_chunk(int r, int c) { return r * BN + ((c ^ (r & 7)) << 3); }

// The copies of one k tile. Thread tid owns A chunks (row tid/4 + A_STEP i, chunk tid%4), i < A_ITERS,
// and B chunks (k row tid/B_CHUNKS + B_STEP i, chunk tid%B_CHUNKS), i < B_ITERS (Cfg). 128 x 128:
// A rows tid/4 + 64 i and B k rows tid/16 + 16 i, i = 0, 1.
template <class Cf, class T>
struct Loader {
    static constexpr int A_ITERS = Cf::A_ITERS, A_STEP = Cf::A_STEP, B_ITERS = Cf::B_ITERS, B_STEP = Cf::B_STEP;
    static constexpr int CB = Cf::B_CHUNKS - 1, SB = Cf::B_SHIFT;  // tid & CB: B chunk; tid >> SB: B k row
    const T* a;       // A at this thread's first row and its chunk's first k, in the next k tile
    const T* b;       // B at this thread's first k row and its chunk's first column, in the next k tile
    long long lda, ldb;
    int a_rows;       // rows of A from this thread's first row to M
    int b_cols;       // columns of B from this thread's chunk's first column to N
    // The element-wise path's k tile between load() and store(): its chunks packed at once (held), or
    // (LATE_PACK) its 16-bit loads as they come, each in a 32-bit register (raw), packed in store(),
    // after the math: packing waits for the loads, and done in load() it put their whole latency before
    // the k tile's mma. (Kept as 16-bit values, ptxas moved half of them into shared registers right
    // after the loads, waiting for those there.)
    static constexpr bool LATE = Cf::LATE_PACK;
    uint4 held[LATE ? 1 : A_ITERS + B_ITERS];
    uint32_t raw[LATE ? A_ITERS + B_ITERS : 1][8];

    __device__ __forceinline__ void async(T* As, T* Bs, int kvalid, bool guard)
    {
        const int tid = threadIdx.x;
        const int ca = tid & 3, cb = tid & CB, ra = tid >> 2, rb = tid >> SB;
        const int a_kleft = kvalid - 8 * ca;
#pragma unroll
        for (int i = 0; i < A_ITERS; ++i) {
            const int n = !guard ? 8 : (A_STEP * i < a_rows ? max(0, min(8, a_kleft)) : 0);
            const T* src = n ? a + i * A_STEP * lda : a;
            copy16(As + a_chunk(ra + A_STEP * i, ca), src, 2 * n);
        }
#pragma unroll
        for (int i = 0; i < B_ITERS; ++i) {
            const int r = rb + B_STEP * i;
            const int n = !guard ? 8 : (r < kvalid ? max(0, min(8, b_cols)) : 0);
            const T* src = n ? b + i * B_STEP * ldb : b;
            copy16(Bs + b_chunk<Cf::BN>(r, cb), src, 2 * n);
        }
        a += BK;
        b += BK * ldb;
    }

    __device__ __forceinline__ void load(int kvalid)
    {
        const int tid = threadIdx.x;
        const int ca = tid & 3, rb = tid >> SB;
        const int a_kleft = kvalid - 8 * ca;
        const unsigned short* a16 = reinterpret_cast<const unsigned short*>(a);
        const unsigned short* b16 = reinterpret_cast<const unsigned short*>(b);
#pragma unroll
        for (int i = 0; i < A_ITERS; ++i) {
            const bool row_ok = A_STEP * i < a_rows;
            if constexpr (LATE) {
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    raw[i][e] = (row_ok && e < a_kleft) ? uint32_t(a16[i * A_STEP * lda + e]) : 0u;
            } else {
                unsigned short v[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) v[e] = (row_ok && e < a_kleft) ? a16[i * A_STEP * lda + e] : 0;
                held[i] = pack(v);
            }
        }
#pragma unroll
        for (int i = 0; i < B_ITERS; ++i) {
            const bool row_ok = rb + B_STEP * i < kvalid;
            if constexpr (LATE) {
#pragma unroll
                for (int e = 0; e < 8; ++e)
                    raw[A_ITERS + i][e] = (row_ok && e < b_cols) ? uint32_t(b16[i * B_STEP * ldb + e]) : 0u;
            } else {
                unsigned short v[8];
#pragma unroll
                for (int e = 0; e < 8; ++e) v[e] = (row_ok && e < b_cols) ? b16[i * B_STEP * ldb + e] : 0;
                held[A_ITERS + i] = pack(v);
            }
        }
        a += BK;
        b += BK * ldb;
    }

    __device__ __forceinline__ void store(T* As, T* Bs)
    {
        const int tid = threadIdx.x;
        const int ca = tid & 3, cb = tid & CB, ra = tid >> 2, rb = tid >> SB;
#pragma unroll
        for (int i = 0; i < A_ITERS; ++i)
            *reinterpret_cast<uint4*>(As + a_chunk(ra + A_STEP * i, ca)) = chunk(i);
#pragma unroll
        for (int i = 0; i < B_ITERS; ++i)
            *reinterpret_cast<uint4*>(Bs + b_chunk<Cf::BN>(rb + B_STEP * i, cb)) = chunk(A_ITERS + i);
    }

    // The q-th chunk of the k tile load() fetched (A's first, then B's), packed.
    __device__ __forceinline__ uint4 chunk(int q) const
    {
        if constexpr (LATE) return pack_late(raw[q]);
        else return held[q];
    }

    __device__ __forceinline__ static uint4 pack(const unsigned short (&v)[8])
    {
        return make_uint4(v[0] | (v[1] << 16), v[2] | (v[3] << 16), v[4] | (v[5] << 16), v[6] | (v[7] << 16));
    }

    // LATE_PACK's pack, in store(): each pair joined by a volatile asm prmt, which the compiler keeps in
    // place, after the k tile's mma (a plain pack it hoisted up to the loads, and waited for them there).
    __device__ __forceinline__ static uint4 pack_late(const uint32_t (&v)[8])
    {
        uint32_t w[4];
#pragma unroll
        for (int q = 0; q < 4; ++q)
            asm volatile("prmt.b32 %0, %1, %2, 0x5410;\n" : "=r"(w[q]) : "r"(v[2 * q]), "r"(v[2 * q + 1]));
        return make_uint4(w[0], w[1], w[2], w[3]);
    }
};

// One k tile (two k steps of 16) of the warp's MT x NT mma tiles (4 x 4 for 128 x 128).
template <class Cf, class T>
__device__ __forceinline__ void multiply_tile(const T* As, const T* Bs, int wm, int wn, int lane,
                                              float (&acc)[Cf::MT][Cf::NT][4])
{
    constexpr int WM = Cf::WM, WN = Cf::WN, MT = Cf::MT, NT = Cf::NT;
    const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8;  // the row (A) or k row (B) this lane points at
    const int lhalf = lane >> 4;                          // which 16-byte chunk of the pair
    const uint32_t a_base = smem_addr(As), b_base = smem_addr(Bs);
#pragma unroll
    for (int ks = 0; ks < 2; ++ks) {
        uint32_t af[MT][4], bf[NT / 2][4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
            ldmatrix_x4(af[i], a_base + 2 * a_chunk(wm * WM + 16 * i + lrow, 2 * ks + lhalf));
#pragma unroll
        for (int jj = 0; jj < NT / 2; ++jj)
            ldmatrix_x4_trans(bf[jj], b_base + 2 * b_chunk<Cf::BN>(16 * ks + lrow, wn * (WN / 8) + 2 * jj + lhalf));
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
                Mma<T>::run(acc[i][j], af[i], bf[j / 2][2 * (j & 1)], bf[j / 2][2 * (j & 1) + 1]);
    }
}

// The block's tiles of matrix `batch` of the batch (A + batch*batch_a, B + batch*batch_b; C is already
// that matrix's). EPI: every tile goes through the epilogue ep (gemm_epilogue); else it is stored as it
// is and ep is not read.
template <class Cf, class T, class Out, bool VEC, bool EPI>
__device__ __forceinline__ void gemm(const T* __restrict__ A, const T* __restrict__ B, Out* __restrict__ C,
                                     int M, int N, long long lda, long long ldb, long long ldc, int k_begin,
                                     int k_end, T* smem, const gpumat::Epilogue& ep, int batch, long long batch_a,
                                     long long batch_b)
{
    constexpr int BM = Cf::BM, BN = Cf::BN, THREADS = Cf::THREADS, WARPS_N = Cf::WARPS_N, WM = Cf::WM, WN = Cf::WN;
    constexpr int MT = Cf::MT, NT = Cf::NT, STAGES = Cf::STAGES, A_ELEMS = Cf::A_ELEMS, STAGE_ELEMS = Cf::STAGE_ELEMS;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
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
        // The lane that the fragment addresses derive from (and below, the batch index) pass through
        // empty asm each tile, so that nothing derived from them is held in registers from one tile to
        // the next: with the batch and the epilogue in the kernel, ptxas otherwise re-derived the fragment
        // addresses inside the main loop (128 registers), 5 to 9% slower on the H100.
        int frag_lane = lane;
        asm volatile("" : "+r"(frag_lane));

        Loader<Cf, T> ld;
        int bt = batch;
        asm volatile("" : "+r"(bt));
        ld.a = A + bt * batch_a + (long long)(row0 + (tid >> 2)) * lda + k_begin + 8 * (tid & 3);
        ld.b = B + bt * batch_b + (long long)(k_begin + (tid >> Cf::B_SHIFT)) * ldb + col0 + 8 * (tid & (BN / 8 - 1));
        ld.lda = lda;
        ld.ldb = ldb;
        ld.a_rows = M - (row0 + (tid >> 2));
        ld.b_cols = N - (col0 + 8 * (tid & (BN / 8 - 1)));
        const bool inside = row0 + BM <= M && col0 + BN <= N;
        const bool warp_live = row0 + wm * WM < M && col0 + wn * WN < N;

        float acc[MT][NT][4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;

        // Tile t lives in stage t % STAGES. Every thread commits one cp.async group per tile slot
        // (empty past the end), so "all but STAGES - 2 groups done" means "tile t has landed".
        // The element-wise path loads tile t + STAGES - 1 into registers before tile t's math and
        // stores it after (its stage was last read in tile t - 1, behind this iteration's barrier).
        int kleft = kspan, fill = 0;
        auto issue = [&](bool now) {
            T* st = smem + fill * STAGE_ELEMS;
            if constexpr (VEC) {
                if constexpr (Cf::SPLIT_GUARD) {
                    if (kleft >= BK && inside) ld.async(st, st + A_ELEMS, BK, false);
                    else if (kleft > 0) ld.async(st, st + A_ELEMS, min(kleft, BK), true);
                } else if (kleft > 0) {
                    ld.async(st, st + A_ELEMS, min(kleft, BK), !(kleft >= BK && inside));
                }
                copy_commit();
            } else if (kleft > 0) {
                ld.load(min(kleft, BK));
                if (now) ld.store(st, st + A_ELEMS);
            }
        };
        auto advance = [&]() {
            kleft -= BK;
            fill = fill == STAGES - 1 ? 0 : fill + 1;
        };
#pragma unroll 1
        for (int s = 0; s < STAGES - 1; ++s) {
            issue(true);
            advance();
        }
        int stage = 0;
#pragma unroll 1
        for (int t = 0; t * BK < kspan; ++t) {
            if constexpr (VEC) copy_wait<STAGES - 2>();
            __syncthreads();  // tile t visible to all; every warp is done with tile t - 1's stage
            const bool pending = kleft > 0;
            T* const fill_stage = smem + fill * STAGE_ELEMS;
            issue(false);     // tile t + STAGES - 1 into tile t - 1's stage (VEC: in flight; else: registers)
            const T* st = smem + stage * STAGE_ELEMS;
            if (warp_live) multiply_tile<Cf, T>(st, st + A_ELEMS, wm, wn, frag_lane, acc);
            if constexpr (!VEC)
                if (pending) ld.store(fill_stage, fill_stage + A_ELEMS);
            advance();
            stage = stage == STAGES - 1 ? 0 : stage + 1;
        }
        if constexpr (VEC) copy_wait<0>();
        __syncthreads();  // the next row tile's first copies may overwrite a stage just read

        // Thread (g = lane/4, t = lane%4) holds, for mma tile (i, j), rows 16 i + g (+8) and columns 8 j + 2 t, +1.
        const int g = lane >> 2, tq = lane & 3;
        // pairs of outputs as one store: the base aligned to a pair, and an even row stride
        const bool vec_c = (reinterpret_cast<uintptr_t>(C) & (2 * sizeof(Out) - 1)) == 0 && (ldc & 1) == 0;
        if constexpr (!EPI) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = row0 + wm * WM + 16 * i + 8 * h + g;
                    if (r >= M) continue;
                    Out* crow = C + (long long)r * ldc;
#pragma unroll
                    for (int j = 0; j < NT; ++j) {
                        const int c = col0 + wn * WN + 8 * j + 2 * tq;
                        if (c < N) store_pair<Out>(crow + c, acc[i][j][2 * h], acc[i][j][2 * h + 1], c + 1 < N, vec_c);
                    }
                }
        } else {
            // The epilogue's switches pass through empty asm: nvcc 13.0 otherwise clones the row-tile
            // loop (main loop included) for each value they can take.
            gpumat::Epilogue e = ep;
            asm volatile("" : "+d"(e.alpha), "+d"(e.beta), "+r"(e.bias_along), "+r"(e.bias_f32), "+r"(e.activation));
            // Tile element (r, c) at stage_c[r * BN + c]. (The fragment stores conflict 8 ways; an XOR
            // swizzle that avoids it took 16 more address registers and ptxas spilled at 128.)
            float* const stage_c = reinterpret_cast<float*>(smem);
#pragma unroll
            for (int i = 0; i < MT; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = wm * WM + 16 * i + 8 * h + g;
#pragma unroll
                    for (int j = 0; j < NT; ++j) {
                        const int c = wn * WN + 8 * j + 2 * tq;
                        *reinterpret_cast<float2*>(stage_c + r * BN + c) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                    }
                }
            __syncthreads();
#pragma unroll 1
            for (int q = tid; q < BM * BN / 2; q += THREADS) {
                const int r = q / (BN / 2), c = 2 * (q % (BN / 2));
                const int i = row0 + r, j = col0 + c;  // element (i, j) of C and (i, j + 1)
                if (i >= M || j >= N) continue;
                const float2 v = *reinterpret_cast<const float2*>(stage_c + r * BN + c);
                Out* const at = C + (long long)i * ldc + j;
                const float x = e.apply<Out>(v.x, i, j, at);
                const float y = j + 1 < N ? e.apply<Out>(v.y, i, j + 1, at + 1) : 0.0f;
                store_pair<Out>(at, x, y, j + 1 < N, vec_c);
            }
            __syncthreads();  // the next row tile's first copies refill the ring
        }
    }
}

// The epilogue's copy of the row-tile loop, out of line: inlined beside the plain one, it changed that
// one's register allocation (its main loop up to 4% slower on the H100).
template <class Cf, class T, class Out, bool VEC>
__device__ __noinline__ void gemm_epilogue(const T* __restrict__ A, const T* __restrict__ B, Out* __restrict__ C,
                                           int M, int N, long long lda, long long ldb, long long ldc, int k_begin,
                                           int k_end, T* smem, const gpumat::Epilogue ep, int batch,
                                           long long batch_a, long long batch_b)
{
    gemm<Cf, T, Out, VEC, true>(A, B, C, M, N, lda, ldb, ldc, k_begin, k_end, smem, ep, batch, batch_a, batch_b);
}

#endif  // __CUDA_ARCH__ >= 800

template <class Cf, class T, class Out>
__device__ __forceinline__ void entry(const T* __restrict__ A, const T* __restrict__ B, Out* __restrict__ C,
                                      int M, int N, int K, long long lda, long long ldb, long long ldc, int k_chunk,
                                      GPUMAT_BATCH_PARAMS, const gpumat::Epilogue& ep)
{
#if __CUDA_ARCH__ >= 800
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    const gpumat::BatchSplit bs = gpumat::batch_split(K, k_chunk);
    const long long k_lo = (long long)bs.split * k_chunk;
    const int k_begin = (int)(k_lo < K ? k_lo : K);
    const int k_end = (int)(k_lo + k_chunk < K ? k_lo + k_chunk : K);
    Out* const Cz = C + bs.batch * batch_c + (long long)bs.split * M * ldc;
    // 16-byte copies need every chunk start 16-byte aligned: both bases (of this matrix of the batch),
    // both strides and the k start.
    const bool vec = (reinterpret_cast<uintptr_t>(A + bs.batch * batch_a) & 15) == 0 &&
                     (reinterpret_cast<uintptr_t>(B + bs.batch * batch_b) & 15) == 0 && (lda & 7) == 0 &&
                     (ldb & 7) == 0 && (k_begin & 7) == 0;
    // identity() once: the plain row-tile loop inline, as before, or the epilogue's out of line.
    if (!ep.identity()) {
        if (vec) gemm_epilogue<Cf, T, Out, true>(A, B, Cz, M, N, lda, ldb, ldc, k_begin, k_end, smem, ep, bs.batch, batch_a, batch_b);
        else gemm_epilogue<Cf, T, Out, false>(A, B, Cz, M, N, lda, ldb, ldc, k_begin, k_end, smem, ep, bs.batch, batch_a, batch_b);
    } else if (vec) {
        gemm<Cf, T, Out, true, false>(A, B, Cz, M, N, lda, ldb, ldc, k_begin, k_end, smem, ep, bs.batch, batch_a, batch_b);
    } else {
        gemm<Cf, T, Out, false, false>(A, B, Cz, M, N, lda, ldb, ldc, k_begin, k_end, smem, ep, bs.batch, batch_a, batch_b);
    }
#else
    __trap();  // no 16-bit mma before sm_80: gpumat runs the SIMT kernels there instead
#endif
}

}  // namespace

// One extern "C" entry point a tile and dtype pair: launch bounds (CFG's threads, BLOCKS an SM) and
// the signature of every matmul kernel with a k_chunk, (A, B, C, M, N, K, lda, ldb, ldc, k_chunk,
// batch_a, batch_b, batch_c, alpha, beta, bias, bias_step, bias_along, bias_f32, activation). Each is
// mma.sync m16n8k16 with float32 accumulation, ldmatrix from swizzled shared memory, 4 cp.async stages
// (16-byte copies for aligned operands, element-wise register-staged loads for any other view); C in
// the input dtype, or float32 (_f32out). Block (CFG::THREADS, 1, 1), CFG::SMEM_BYTES of dynamic shared
// memory, grid (ceil(N/BN), min(ceil(M/BM), 65535), batch * splits).
#define GPUMAT_MMA_HALF(NAME, CFG, BLOCKS, T, OUT)                                                          \
    extern "C" __global__ void __launch_bounds__(CFG::THREADS, BLOCKS) NAME(                                \
        const T* __restrict__ A, const T* __restrict__ B, OUT* __restrict__ C, int M, int N, int K,         \
        long long lda, long long ldb, long long ldc, int k_chunk, GPUMAT_BATCH_PARAMS,                      \
        GPUMAT_EPILOGUE_PARAMS)                                                                             \
    {                                                                                                       \
        gpumat::wait_for_previous_grid();                                                                   \
        entry<CFG, T, OUT>(A, B, C, M, N, K, lda, ldb, ldc, k_chunk, batch_a, batch_b, batch_c,             \
                           GPUMAT_EPILOGUE_ARGS);                                                           \
    }

// matmul_mma128x128_<dtype>[_f32out]: tile 128 x 128 x 32, block (256,1,1) = 2 x 4 warps of 64 x 32,
// 65,536 bytes of dynamic shared memory, two blocks an SM (one on sm_80 and sm_100, see MIN_BLOCKS).
// Grid (ceil(N/128), min(ceil(M/128), 65535), batch * splits).
GPUMAT_MMA_HALF(matmul_mma128x128_f16, Mma128x128, MIN_BLOCKS, __half, __half)
GPUMAT_MMA_HALF(matmul_mma128x128_f16_f32out, Mma128x128, MIN_BLOCKS, __half, float)
GPUMAT_MMA_HALF(matmul_mma128x128_bf16, Mma128x128, MIN_BLOCKS, __nv_bfloat16, __nv_bfloat16)
GPUMAT_MMA_HALF(matmul_mma128x128_bf16_f32out, Mma128x128, MIN_BLOCKS, __nv_bfloat16, float)

// matmul_mma128x64_<dtype>[_f32out]: tile 128 x 64 x 32, block (128,1,1) = 2 x 2 warps of 64 x 32 (the
// 128 x 128 tile's warp tile), 49,152 bytes of dynamic shared memory, four blocks an SM (two on sm_80
// and sm_100). For products narrow in N (4096 x 128 x 4096: 64 tiles where 128 x 128 makes 32).
// Grid (ceil(N/64), min(ceil(M/128), 65535), batch * splits).
GPUMAT_MMA_HALF(matmul_mma128x64_f16, Mma128x64, MIN_BLOCKS_4W, __half, __half)
GPUMAT_MMA_HALF(matmul_mma128x64_f16_f32out, Mma128x64, MIN_BLOCKS_4W, __half, float)
GPUMAT_MMA_HALF(matmul_mma128x64_bf16, Mma128x64, MIN_BLOCKS_4W, __nv_bfloat16, __nv_bfloat16)
GPUMAT_MMA_HALF(matmul_mma128x64_bf16_f32out, Mma128x64, MIN_BLOCKS_4W, __nv_bfloat16, float)

// matmul_mma64x128_<dtype>[_f32out]: tile 64 x 128 x 32, block (128,1,1) = 2 x 2 warps of 32 x 64,
// 49,152 bytes of dynamic shared memory, four blocks an SM (two on sm_80 and sm_100). For products
// short in M (64 x 4096 x 4096). Grid (ceil(N/128), min(ceil(M/64), 65535), batch * splits).
GPUMAT_MMA_HALF(matmul_mma64x128_f16, Mma64x128, MIN_BLOCKS_4W, __half, __half)
GPUMAT_MMA_HALF(matmul_mma64x128_f16_f32out, Mma64x128, MIN_BLOCKS_4W, __half, float)
GPUMAT_MMA_HALF(matmul_mma64x128_bf16, Mma64x128, MIN_BLOCKS_4W, __nv_bfloat16, __nv_bfloat16)
GPUMAT_MMA_HALF(matmul_mma64x128_bf16_f32out, Mma64x128, MIN_BLOCKS_4W, __nv_bfloat16, float)

// matmul_mma64x64_<dtype>[_f32out]: tile 64 x 64 x 32, block (128,1,1) = 2 x 2 warps of 32 x 32,
// 32,768 bytes of dynamic shared memory, four blocks an SM (or more, as registers allow). For small
// products and batches of them (a batch of 64 x 64 products: one block a matrix, every warp busy).
// Grid (ceil(N/64), min(ceil(M/64), 65535), batch * splits).
GPUMAT_MMA_HALF(matmul_mma64x64_f16, Mma64x64, MIN_BLOCKS_64x64, __half, __half)
GPUMAT_MMA_HALF(matmul_mma64x64_f16_f32out, Mma64x64, MIN_BLOCKS_64x64, __half, float)
GPUMAT_MMA_HALF(matmul_mma64x64_bf16, Mma64x64, MIN_BLOCKS_64x64, __nv_bfloat16, __nv_bfloat16)
GPUMAT_MMA_HALF(matmul_mma64x64_bf16_f32out, Mma64x64, MIN_BLOCKS_64x64, __nv_bfloat16, float)
