// Float64 matrix multiply on the FP64 tensor cores (DMMA, mma.sync .f64, sm_80 and later):
// C (M x N) = A (M x K) @ B (K x N), row-major with row strides lda / ldb / ldc in elements, 64-bit
// offsets. Same signature, batch and split-K contract as matmul_tc.cu: block z is (batch b, split s)
// by gpumat::batch_split (z = b * splits + s, splits = ceil(K / k_chunk)); it multiplies A + b*batch_a
// by B + b*batch_b over k in [s*k_chunk, min(K, (s+1)*k_chunk)) and writes its whole M x N result to
// C + b*batch_c + s*M*ldc (a split-K caller passes scratch with ldc = N and the identity epilogue, then
// runs matmul_splitk_reduce_f64_f64 in matmul_splitk.cu, which applies the epilogue); a plain run has
// gridDim.z = 1 and k_chunk = K, a batched one gridDim.z = batch and k_chunk = K. blockIdx.x walks N
// tiles, blockIdx.y M tiles (a grid-stride loop: gridDim.y is capped at 65535). blockDim must be
// (Cfg::THREADS, 1, 1); dynamic shared memory Cfg::SMEM_BYTES (the entry points below say how much).
// The epilogue (gpumat::Epilogue, the last parameters): C[i, j] = act(alpha * acc + beta * C[i, j] +
// bias) in float64; the identity epilogue stores the products as they are.
//
// Arithmetic: DMMA multiplies and adds in IEEE FP64 (round to nearest), so the result is an FP64
// dot product in a fixed order: per k step of 8, the hardware's own order inside one mma, the steps
// in increasing k, split-K partials added in an order fixed by the split count. No atomics: the same
// inputs give the same bits on the same GPU.
//
// Tile and data flow:
//  * a block computes BM x BN of C with WARPS_M x WARPS_N warp tiles of (16 MT) x 32, each warp MT x 4
//    mma tiles of 16 x 8; k tiles of BK (16 or 32) go global -> shared memory by cp.async into a
//    ring of STAGES buffers (one barrier per k tile);
//  * the mma is m16n8k8 .f64 on sm_90 and later (one DMMA.16x8x8 instruction); on sm_80..sm_89,
//    which have only m8n8k4 .f64, the same register fragments feed four m8n8k4 (two row halves, two
//    k halves), so both compute the same function from the same shared-memory reads. (m16n8k16, one
//    instruction for twice the work, needs 12 fragment doubles live per mma: ptxas 13.0 spilled.)
//  * fragments in the mma's own layout, every element one 8-byte shared-memory read straight into
//    its register (16-byte reads would pair elements the mma wants in different registers, and the
//    register moves that regroup them cost more registers than the kernels have). Thread
//    (g = lane/4, t = lane%4) reads A rows g, g + 8 at k t, t + 4 and B rows t, t + 4 at column g of
//    each mma tile, and ends up owning columns 2t, 2t + 1 of its C rows: 16-byte stores;
//  * shared memory rows are padded by 4 doubles (A rows BK + 4, B rows BN + 4), so consecutive rows
//    start 32 bytes further along the banks: the 16 lanes one 8-byte read serves at a time (4 rows
//    x 4 consecutive doubles, for A and for B) hit 16 distinct 8-byte bank pairs, and the copies,
//    whole rows of 16-byte chunks, stay conflict-free. Every fragment address is a per-thread base
//    plus a compile-time constant;
//  * when A, B, lda, ldb and the k start are all 16-byte aligned, operands move as 16-byte cp.async,
//    partial chunks at the M, N and K edges zero-filled by the copy itself; any other view (odd
//    offsets or strides) takes the same path with one 8-byte cp.async per double;
//  * every tile but 64 x 128, the k32 and the pipelined ones also reads A or B (or both) stored transposed in
//    place (the *at, *bt and *atbt entries), copied as they lie, along their contiguous dimension (16-byte copies
//    where aligned, as above) into shared-memory tiles of that shape, and their fragments read from there: A^T as BK
//    rows of BM (rows padded by 4 doubles: a fragment read's 4 k rows start 32 bytes apart in the
//    banks), B^T as BN rows of BK, unpadded, the 16-byte chunk k / 2 of row n stored at chunk
//    (k / 2) XOR (n % 8) (a fragment read's 8 rows of n then spread over 8 chunks; the ring has no
//    room for padded rows). Copied into the row-major tiles, a warp's 8-byte stores along m or k fell
//    on the same banks 8 rows apart (8-way conflicts);
//  * blocks are mapped to tiles in groups of 8 row tiles (gpumat::grouped_tile) so that blocks
//    running at the same time share A and B tiles in L2; warps whose whole warp tile lies outside C
//    skip the math; stores of C are guarded per element, 16-byte pairs where C's rows start on 16 bytes
//    and, with operands and C's rows off 16 bytes (odd widths), pairs shifted a column on the rows that
//    start 8 bytes off (store_row_shifted; on the tiles of more than one row of warps);
//  * the epilogue: identity() is tested once per block; the identity runs the row-tile loop above,
//    inline; any other epilogue runs its own copy of it, out of line (gemm_epilogue), which parks each
//    tile's results in the idle ring (BM x (BN + 2) doubles fit in every shape's) and then finishes
//    pairs of adjacent elements of a row, a warp a row segment: one apply per element in a loop, where
//    one inlined per accumulator in the registers' store made the code ten times larger and spilled.
//
// Built for every arch in the default list; the mma code exists only for sm_80 and later (below
// that the kernels trap, and gpumat runs its SIMT kernel there).

#include <stdint.h>

#include "gpumat.cuh"

namespace {

constexpr int WN = 32, NT = 4;  // every variant: warp tiles 32 columns wide (4 mma tiles of 8)
constexpr int GROUP_M = 8;
constexpr int PAD = 4;  // doubles added to every shared-memory row: consecutive rows start 32 bytes apart in the banks

template <int WARPS_M_, int WARPS_N_, int MT_, int BK_, int STAGES_, int UNROLL_, bool PIPE_ = false>
struct Cfg {
    static constexpr bool PIPE = PIPE_;  // the register-double-buffered main loop (see gemm)
    static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_, MT = MT_, BK = BK_, STAGES = STAGES_;
    static constexpr int BN = WARPS_N * WN;
    static constexpr int UNROLL = UNROLL_;  // k steps of 8 the compiler may schedule together (registers)
    static constexpr int WM = 16 * MT, BM = WARPS_M * WM;
    static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr int AS = BK + PAD, BS = BN + PAD;  // row strides in shared memory (doubles)
    static constexpr int ATS = BM + PAD;                // A stored transposed: BK rows of BM (doubles)
    static constexpr int A_DOUBLES = BM * AS, B_DOUBLES = BK * BS;
    static constexpr int STAGE_DOUBLES = A_DOUBLES + B_DOUBLES;
    static constexpr int SMEM_BYTES = STAGES * STAGE_DOUBLES * 8;
    static constexpr int A_CHUNKS_ROW = BK / 2, B_CHUNKS_ROW = BN / 2;
    static constexpr int A_ITERS = BM * A_CHUNKS_ROW / THREADS, B_ITERS = BK * B_CHUNKS_ROW / THREADS;
    static constexpr int A_ROW_STEP = THREADS / A_CHUNKS_ROW, B_ROW_STEP = THREADS / B_CHUNKS_ROW;
    static_assert(BK % 16 == 0 && A_ITERS * THREADS == BM * A_CHUNKS_ROW && B_ITERS * THREADS == BK * B_CHUNKS_ROW,
                  "the copies split evenly over the threads");
};

// UNROLL: with more, ptxas (13.0, sm_90) hoists the next k step's fragment reads and spills.
using Big = Cfg<2, 4, 4, 16, 5, 2>;     // 128 x 128 x 16, 5 stages: 186,880 bytes
using BigK32 = Cfg<2, 4, 4, 32, 3, 2>;  // 128 x 128 x 32, 3 stages: 211,968 bytes
using Half = Cfg<2, 4, 2, 16, 4, 1>;    // 64 x 128 x 16, 4 stages: 108,544 bytes (two blocks an SM)
using Narrow = Cfg<2, 2, 4, 16, 3, 2>;  // 128 x 64 x 16, 3 stages: 87,552 bytes (two blocks an SM)
using Small = Cfg<2, 2, 2, 16, 4, 1>;   // 64 x 64 x 16, 4 stages: 75,776 bytes (three blocks an SM)
using Rows16 = Cfg<1, 4, 1, 16, 4, 2>;  // 16 x 128 x 16, 4 stages: 77,824 bytes (two blocks an SM)
using Rows32 = Cfg<1, 4, 2, 16, 4, 2>;  // 32 x 128 x 16, 4 stages: 88,064 bytes (two blocks an SM)
using Tiny = Cfg<2, 1, 1, 16, 2, 1>;    // 32 x 32 x 16, 2 stages: 19,456 bytes (ten blocks an SM)
using BigPipe = Cfg<2, 4, 4, 16, 5, 2, true>;
using NarrowPipe = Cfg<2, 2, 4, 16, 3, 2, true>;
static_assert(Big::SMEM_BYTES == 186880 && BigK32::SMEM_BYTES == 211968 && Half::SMEM_BYTES == 108544 &&
              Narrow::SMEM_BYTES == 87552 && Small::SMEM_BYTES == 75776 && Rows16::SMEM_BYTES == 77824 &&
              Rows32::SMEM_BYTES == 88064 && Tiny::SMEM_BYTES == 19456,
              "gpumat.matmul.variants asks for these");
static_assert(BigPipe::SMEM_BYTES == Big::SMEM_BYTES && NarrowPipe::SMEM_BYTES == Narrow::SMEM_BYTES,
              "the pipelined variants keep their shapes' shared memory");
template <class C>
constexpr bool parks = C::BM * (C::BN + 2) * 8 <= C::SMEM_BYTES;
static_assert(parks<Big> && parks<BigK32> && parks<Half> && parks<Narrow> && parks<Rows16> && parks<Rows32> &&
                  parks<Tiny>,
              "a non-identity epilogue parks the tile (rows padded by 2 doubles) in the ring");

#if __CUDA_ARCH__ >= 800

using gpumat::copy16;
using gpumat::copy_commit;
using gpumat::copy_wait;
using gpumat::smem_addr;

__device__ __forceinline__ void copy8(double* dst, const double* src, bool ok)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" :: "r"(smem_addr(dst)), "l"(src), "r"(ok ? 8 : 0));
}


// d += a (16 x 8) * b (8 x 8) in FP64. Fragments (g = lane/4, t = lane%4): a[i] is (row g + 8 (i%2),
// k t + 4 (i/2)), b[j] is (k t + 4j, column g), d[r] is (row g + 8 (r/2), column 2t + r%2).
__device__ __forceinline__ void mma(double (&d)[4], const double (&a)[4], const double (&b)[2])
{
#if __CUDA_ARCH__ >= 900
    asm("mma.sync.aligned.m16n8k8.row.col.f64.f64.f64.f64 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
        : "d"(a[0]), "d"(a[1]), "d"(a[2]), "d"(a[3]), "d"(b[0]), "d"(b[1]));
#else
    // m8n8k4: a is (row g, k t), b (k t, column g), d (row g, columns 2t, 2t + 1). k half j of the
    // m16n8k8 above is one m8n8k4 for rows g (a[2j]) and one for rows g + 8 (a[2j + 1]).
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
            : "+d"(d[0]), "+d"(d[1]) : "d"(a[2 * j]), "d"(b[j]));
        asm("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
            : "+d"(d[2]), "+d"(d[3]) : "d"(a[2 * j + 1]), "d"(b[j]));
    }
#endif
}

// One row of a warp's accumulators (the fragment's rows g and g + 8 of an m tile) into a C whose rows are not
// all on 16 bytes (an odd row stride, or a base 8 bytes in). Lane (t = lane % 4 of the row's four) holds the
// row's columns 8 j + 2 t and + 1, v[4 j] and v[4 j + 1], for j < NT; `at` is C at the warp tile's first column
// of the row, cols_left C's columns from there (any int), live whether the row is inside C. A row that starts on
// 16 bytes stores its pairs whole; one that starts 8 bytes off stores them shifted a column to the right, (8 j +
// 2 t + 1, + 2): its y and the x of the lane to the right (lane t + 1's, or lane t = 0's of the next mma tile,
// fetched by a shuffle), and the warp tile's first and last columns alone. Element by element, each store
// instruction put half of the bytes of 8 rows' sectors, and a row took two passes (12289 x 1201 x 67 on the
// H200: 124 us, 84 shifted, 74 with C's rows on 16 bytes). All 32 lanes call it together (the shuffles).
__device__ __forceinline__ void store_row_shifted(double* at, const double* v, int cols_left, bool live, int lane)
{
    const int t = lane & 3, right = (lane & ~3) | ((t + 1) & 3);
    const bool shifted = (reinterpret_cast<uintptr_t>(at) & 15) != 0;
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        // the x of column 8 j + 2 t + 2 (the select is of values: an index that depends on t put v in memory)
        const double next = __shfl_sync(0xffffffffu, t == 0 ? v[4 * (j + 1 < NT ? j + 1 : j)] : v[4 * j], right);
        const int c = 8 * j + 2 * t, left = cols_left - c;
        if (!live || left < 1) continue;
        if (!shifted) {
            if (left >= 2) *reinterpret_cast<double2*>(at + c) = make_double2(v[4 * j], v[4 * j + 1]);
            else at[c] = v[4 * j];
        } else {
            if (c == 0) at[0] = v[0];
            const bool last = j + 1 == NT && t == 3;  // column 31: the next is the next warp tile's
            if (left >= 3 && !last) *reinterpret_cast<double2*>(at + c + 1) = make_double2(v[4 * j + 1], next);
            else if (left >= 2) at[c + 1] = v[4 * j + 1];
        }
    }
}

// Two consecutive doubles (one 16-byte copy where VEC, else two 8-byte ones), of which `valid` (any int:
// at most 2 count) are read and the rest zero-filled; without GUARD, both.
template <bool VEC, bool GUARD>
__device__ __forceinline__ void copy_pair(double* dst, const double* src, int valid)
{
    if (VEC) {
        copy16(dst, src, !GUARD ? 16 : 8 * max(0, min(2, valid)));
    } else {
        copy8(dst, src, !GUARD || valid > 0);
        copy8(dst + 1, src + 1, !GUARD || valid > 1);
    }
}

// B stored transposed, tile element (k, n) in shared memory: BN rows of BK = 16 doubles, chunk k / 2 of
// row n at chunk (k / 2) XOR (n % 8).
template <class C>
__device__ __forceinline__ int bt_offset(int n, int k)
{
    return n * C::BK + ((((k >> 1) ^ n) & 7) << 1) + (k & 1);
}

// The copies of one k tile. Thread tid copies A chunk (row tid / A_CHUNKS_ROW + A_ROW_STEP i,
// chunk tid % A_CHUNKS_ROW) and B chunk (k tid / B_CHUNKS_ROW + B_ROW_STEP i, chunk tid % B_CHUNKS_ROW).
// TA: A stored transposed (K rows of M): a at the tile's first k row and first column of M, a_rows the
// rows of C from the tile's first to M; the k tile's BK rows of BM copied as they lie into As[k][m]. TB:
// B stored transposed (N rows of K): b at the tile's first column of N and first k, b_cols the columns
// from the tile's first to N; the BN rows of BK copied into the swizzled B^T tile (bt_offset).
template <class C, bool TA = false, bool TB = false>
struct Loader {
    const double* a;  // A at this thread's first row and its k chunk, in the next k tile
    const double* b;  // B at this thread's first k row and its column chunk, in the next k tile
    long long lda, ldb;
    int a_rows;       // rows of A from this thread's first row to M
    int b_cols;       // columns of B from this thread's first column to N

    template <bool VEC, bool GUARD>
    __device__ __forceinline__ void fetch(double* As, double* Bs, int kvalid)
    {
        const int tid = threadIdx.x;
        if constexpr (TA) {  // BK rows of BM: chunk (k r0 + STEP i, columns 2 c) into As[k][m]
            constexpr int CHUNKS = C::BM / 2, STEP = C::THREADS / CHUNKS;
            const int c = tid % CHUNKS, r0 = tid / CHUNKS;
            const int left = a_rows - 2 * c;  // valid m in this thread's chunk (may be <= 0 or > 2)
#pragma unroll
            for (int i = 0; i < C::BK / STEP; ++i) {
                const int k = r0 + STEP * i;
                const double* src = a + (long long)k * lda + 2 * c;
                copy_pair<VEC, GUARD>(As + k * C::ATS + 2 * c, src, k < kvalid ? left : 0);
            }
            a += C::BK * lda;
        }
        if constexpr (TB) {  // BN rows of BK: chunk (n r0 + STEP i, k 2 c) into the swizzled Bs[n][k]
            constexpr int CHUNKS = C::BK / 2, STEP = C::THREADS / CHUNKS;
            const int c = tid % CHUNKS, r0 = tid / CHUNKS;
            const int left = kvalid - 2 * c;  // valid k in this thread's chunk
#pragma unroll
            for (int i = 0; i < C::BN / STEP; ++i) {
                const int n = r0 + STEP * i;
                const double* src = b + (long long)n * ldb + 2 * c;
                copy_pair<VEC, GUARD>(Bs + bt_offset<C>(n, 2 * c), src, n < b_cols ? left : 0);
            }
            b += C::BK;
        }
        if constexpr (!TA) fetch_a<VEC, GUARD>(As, kvalid);
        if constexpr (!TB) fetch_b<VEC, GUARD>(Bs, kvalid);
    }

    // A row-major: chunk (row tid / A_CHUNKS_ROW + A_ROW_STEP i, chunk tid % A_CHUNKS_ROW) of the k tile
    template <bool VEC, bool GUARD>
    __device__ __forceinline__ void fetch_a(double* As, int kvalid)
    {
        const int tid = threadIdx.x;
        const int ca = tid % C::A_CHUNKS_ROW, ra = tid / C::A_CHUNKS_ROW;
        const int a_kleft = kvalid - 2 * ca;  // valid k in this thread's A chunk (may be <= 0 or > 2)
#pragma unroll
        for (int i = 0; i < C::A_ITERS; ++i) {
            const int row = ra + i * C::A_ROW_STEP;
            const double* src = a + (long long)i * C::A_ROW_STEP * lda;
            double* dst = As + row * C::AS + 2 * ca;
            const bool row_ok = !GUARD || i * C::A_ROW_STEP < a_rows;
            if (VEC) {
                const int n = !GUARD ? 2 : (row_ok ? max(0, min(2, a_kleft)) : 0);
                copy16(dst, src, 8 * n);
            } else {
                copy8(dst, src, !GUARD || (row_ok && a_kleft > 0));
                copy8(dst + 1, src + 1, !GUARD || (row_ok && a_kleft > 1));
            }
        }
        a += C::BK;
    }

    // B row-major: chunk (k tid / B_CHUNKS_ROW + B_ROW_STEP i, chunk tid % B_CHUNKS_ROW) of the k tile
    template <bool VEC, bool GUARD>
    __device__ __forceinline__ void fetch_b(double* Bs, int kvalid)
    {
        const int tid = threadIdx.x;
        const int cb = tid % C::B_CHUNKS_ROW, kb = tid / C::B_CHUNKS_ROW;
#pragma unroll
        for (int i = 0; i < C::B_ITERS; ++i) {
            const int k = kb + i * C::B_ROW_STEP;
            const double* src = b + (long long)i * C::B_ROW_STEP * ldb;
            double* dst = Bs + k * C::BS + 2 * cb;
            const bool row_ok = !GUARD || k < kvalid;
            if (VEC) {
                const int n = !GUARD ? 2 : (row_ok ? max(0, min(2, b_cols)) : 0);
                copy16(dst, src, 8 * n);
            } else {
                copy8(dst, src, !GUARD || (row_ok && b_cols > 0));
                copy8(dst + 1, src + 1, !GUARD || (row_ok && b_cols > 1));
            }
        }
        b += (long long)C::BK * ldb;
    }
};

// One k tile: BK / 8 k steps of MT x NT mmas, every fragment element one 8-byte shared-memory read
// straight into the mma's register. a_off: this thread's element (row g, k t) of A, b_off: its
// element (k t, column g) of B, both in the warp's tile.
// A fragment element (row m, k) of the warp's tile and B's (k, column n), both relative to the thread's
// own (a_off: its row g at k t, b_off: its k t at column g): a compile-time constant for the row-major
// tiles and A^T; for the swizzled B^T, ((t / 2) XOR g) XOR (k / 2) of the thread's chunk, whose bits the
// constant part of k does not share with t / 2 (k a multiple of 4 here, t < 4).
template <class C, bool TA>
__device__ __forceinline__ double a_at(const double* __restrict__ As, int a_off, int m, int k)
{
    return As[a_off + (TA ? k * C::ATS + m : m * C::AS + k)];
}

template <class C, bool TB>
__device__ __forceinline__ double b_at(const double* __restrict__ Bs, int b_off, int b_chunk, int k, int n)
{
    if constexpr (TB) return Bs[b_off + n * C::BK + (((b_chunk ^ (k >> 1)) & 7) << 1)];
    else return Bs[b_off + k * C::BS + n];
}

// One k tile: BK / 8 k steps of MT x NT mmas, every fragment element one 8-byte shared-memory read
// straight into the mma's register.
template <class C, bool TA, bool TB>
__device__ __forceinline__ void multiply_tile(const double* __restrict__ As, const double* __restrict__ Bs,
                                              int a_off, int b_off, int b_chunk, double (&acc)[C::MT][NT][4])
{
#pragma unroll C::UNROLL
    for (int s = 0; s < C::BK / 8; ++s) {
        double b[NT][2];
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) b[j][e] = b_at<C, TB>(Bs, b_off, b_chunk, 8 * s + 4 * e, 8 * j);
#pragma unroll
        for (int i = 0; i < C::MT; ++i) {
            double a[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) a[e] = a_at<C, TA>(As, a_off, 16 * i + 8 * (e & 1), 8 * s + 4 * (e >> 1));
#pragma unroll
            for (int j = 0; j < NT; ++j) mma(acc[i][j], a, b[j]);
        }
    }
}

// The pipelined main loop's fragment reads (row-major tiles only): B of one k step of 8 (step s of a
// k tile), A of one m tile.
template <class C>
__device__ __forceinline__ void load_b(const double* __restrict__ Bs, int b_off, int s, double (&b)[NT][2])
{
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) b[j][e] = Bs[b_off + (8 * s + 4 * e) * C::BS + 8 * j];
}

template <class C>
__device__ __forceinline__ void load_a(const double* __restrict__ As, int a_off, int s, int i, double (&a)[4])
{
#pragma unroll
    for (int e = 0; e < 4; ++e) a[e] = As[a_off + (16 * i + 8 * (e & 1)) * C::AS + 8 * s + 4 * (e >> 1)];
}

// EPI: every tile goes through the epilogue ep (gemm_epilogue); else it is stored as it is and ep is
// not read.
template <class C, bool VEC, bool EPI, bool TA = false, bool TB = false>
__device__ __forceinline__ void gemm(const double* __restrict__ A, const double* __restrict__ B, double* __restrict__ Cm,
                                     int M, int N, long long lda, long long ldb, long long ldc,
                                     int k_begin, int k_end, bool vec_c, double* smem, const gpumat::Epilogue& ep)
{
    constexpr int BM = C::BM, BN = C::BN, BK = C::BK, S = C::STAGES;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;
    const int g = lane >> 2, t = lane & 3;
    static_assert(!(C::PIPE && (TA || TB)), "the pipelined loop reads row-major tiles");
    // the transposed tiles fit in the stage's A and B parts, split evenly over the threads' copies; B^T's
    // swizzle takes 8 chunks a row
    static_assert(!TA || (BK * C::ATS <= C::A_DOUBLES && BK * (BM / 2) % C::THREADS == 0), "A^T tile");
    static_assert(!TB || (BN * BK <= C::B_DOUBLES && BK == 16 && BN * (BK / 2) % C::THREADS == 0), "B^T tile");
    // A (row g, k t) and B (k t, column g) of the warp's tile; B^T's row and the chunk t / 2 XOR g
    const int a_row = wm * C::WM + g, b_col = wn * WN + g, b_chunk = (t >> 1) ^ g;
    const int a_off = TA ? t * C::ATS + a_row : a_row * C::AS + t;
    const int b_off = TB ? b_col * C::BK + (t & 1) : t * C::BS + b_col;
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
        // The fragment offsets pass through empty asm each tile, so that what is derived from them is
        // not held in registers from one tile to the next: with the batch and the epilogue in the kernel,
        // ptxas otherwise scheduled the main loop differently (64 x 128 tiles 8% slower on the H100).
        int fa = a_off, fb = b_off, fc = b_chunk;
        asm volatile("" : "+r"(fa), "+r"(fb), "+r"(fc));

        Loader<C, TA, TB> ld;
        const int ra = tid / C::A_CHUNKS_ROW, ca = tid % C::A_CHUNKS_ROW;
        const int kb = tid / C::B_CHUNKS_ROW, cb = tid % C::B_CHUNKS_ROW;
        if constexpr (TA) {  // K rows of M: from the tile's first k row and first column of M
            ld.a = A + (long long)k_begin * lda + row0;
            ld.a_rows = M - row0;
        } else {
            ld.a = A + (long long)(row0 + ra) * lda + k_begin + 2 * ca;
            ld.a_rows = M - (row0 + ra);
        }
        if constexpr (TB) {  // N rows of K: from the tile's first column of N and first k
            ld.b = B + (long long)col0 * ldb + k_begin;
            ld.b_cols = N - col0;
        } else {
            ld.b = B + (long long)(k_begin + kb) * ldb + col0 + 2 * cb;
            ld.b_cols = N - (col0 + 2 * cb);
        }
        ld.lda = lda;
        ld.ldb = ldb;
        const bool inside = row0 + BM <= M && col0 + BN <= N;
        const bool warp_live = row0 + wm * C::WM < M && col0 + wn * WN < N;

        double acc[C::MT][NT][4];
#pragma unroll
        for (int i = 0; i < C::MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0;

        // Tile t goes to stage t % S; every thread commits one group per tile slot (empty past
        // the end), so "all but S - 2 groups done" always means "tile t has landed".
        int kleft = kspan, stage = 0;
        auto fetch_next = [&]() {
            double* st = smem + stage * C::STAGE_DOUBLES;
            if (kleft >= BK && inside) ld.template fetch<VEC, false>(st, st + C::A_DOUBLES, BK);
            else if (kleft > 0) ld.template fetch<VEC, true>(st, st + C::A_DOUBLES, kleft);
            copy_commit();
            kleft -= BK;
            stage = stage == S - 1 ? 0 : stage + 1;
        };
        if constexpr (!C::PIPE) {
#pragma unroll 1
            for (int s = 0; s < S - 1; ++s) fetch_next();
#pragma unroll 1
            while (kleft > -(S - 1) * BK) {
                copy_wait<S - 2>();
                __syncthreads();  // tile t visible to all; every warp is done with tile t - 1's stage
                fetch_next();     // tile t + S - 1 into tile t - 1's stage; `stage` is now tile t's
                const double* st = smem + stage * C::STAGE_DOUBLES;
                if (warp_live) multiply_tile<C, TA, TB>(st, st + C::A_DOUBLES, fa, fb, fc, acc);
            }
        } else {
            // Fragment reads one step ahead of the mmas: B double-buffered, and each m tile's A
            // fragment re-read for the next step right after its mmas are issued. At a tile's last
            // step the barrier comes first (tile t + 1 has landed; every warp has read all of tile t,
            // whose last fragments are in registers), then the copy of tile t + S into tile t's stage
            // and the reads of tile t + 1's first fragments, which the last step's mmas cover.
            constexpr int STEPS = BK / 8;
            const int tiles = (kspan + BK - 1) / BK;
#pragma unroll 1
            for (int s = 0; s < S; ++s) fetch_next();
            copy_wait<S - 1>();
            __syncthreads();
            int rstage = 0;
            double a[C::MT][4], b[2][NT][2];
            if (tiles > 0) {
                load_b<C>(smem + C::A_DOUBLES, fb, 0, b[0]);
#pragma unroll
                for (int i = 0; i < C::MT; ++i) load_a<C>(smem, fa, 0, i, a[i]);
            }
#pragma unroll 1
            for (int t = 0; t < tiles; ++t) {
                const double* st = smem + rstage * C::STAGE_DOUBLES;
#pragma unroll
                for (int s = 0; s < STEPS; ++s) {
                    const bool last = s + 1 == STEPS;
                    const bool more = !last || t + 1 < tiles;
                    const double* nx = st;
                    if (last && more) {
                        copy_wait<S - 2>();
                        __syncthreads();
                        fetch_next();  // tile t + S into tile t's stage
                        rstage = rstage == S - 1 ? 0 : rstage + 1;
                        nx = smem + rstage * C::STAGE_DOUBLES;
                    }
                    const int ns = last ? 0 : s + 1;
                    if (more) load_b<C>(nx + C::A_DOUBLES, fb, ns, b[(s + 1) & 1]);
#pragma unroll
                    for (int i = 0; i < C::MT; ++i) {
                        if (warp_live) {
#pragma unroll
                            for (int j = 0; j < NT; ++j) mma(acc[i][j], a[i], b[s & 1][j]);
                        }
                        if (more) load_a<C>(nx, fa, ns, i, a[i]);
                    }
                }
            }
        }
        copy_wait<0>();
        __syncthreads();  // the next row tile's first copies may overwrite a stage just read

        // Thread's outputs: rows row0 + wm*WM + g + 16 i + 8 h, columns col0 + wn*WN + 8 j + 2t and + 1.
        if constexpr (!EPI) {
            const int col = col0 + wn * WN + 2 * t;
            // rows off 16 bytes store pairs shifted a column where a row starts 8 bytes off (store_row_shifted),
            // in the copy of the loop for operands off 16 bytes (!VEC) alone: a C of an odd width comes with a B
            // of one. Even there, its code beside the loops changes how ptxas schedules the aligned operands' copy
            // (H200: 2048^3 and 4096^3 on 128 x 64 0.5% slower, 1024^3 on 32 x 128 4.5%), so the few-row tiles
            // (one row of warps) keep element stores, as do the tiles at the register limit that spilled around
            // the shuffles: the named-only ones (the pipelined loop, k tiles of 32) and 128 x 64 reading A and B
            // transposed (4 bytes on sm_100).
            constexpr bool SHIFTED_PAIRS =
                !VEC && C::WARPS_M > 1 && !C::PIPE && BK == 16 && !(TA && TB && BM == 128 && BN == 64);
            if (vec_c || !SHIFTED_PAIRS) {
#pragma unroll
                for (int i = 0; i < C::MT; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int r = row0 + wm * C::WM + g + 16 * i + 8 * h;
                        if (r >= M) continue;
                        double* crow = Cm + (long long)r * ldc + col;
#pragma unroll
                        for (int j = 0; j < NT; ++j) {
                            const int left = N - (col + 8 * j);
                            const double x = acc[i][j][2 * h], y = acc[i][j][2 * h + 1];
                            if (vec_c && left >= 2) {
                                *reinterpret_cast<double2*>(crow + 8 * j) = make_double2(x, y);
                            } else {
                                if (left >= 1) crow[8 * j] = x;
                                if (left >= 2) crow[8 * j + 1] = y;
                            }
                        }
                    }
            } else {
                const int first = col0 + wn * WN;
#pragma unroll
                for (int i = 0; i < C::MT; ++i)
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int r = row0 + wm * C::WM + g + 16 * i + 8 * h;
                        store_row_shifted(Cm + (long long)r * ldc + first, &acc[i][0][2 * h], N - first, r < M, lane);
                    }
            }
        } else {
            // The epilogue's switches pass through empty asm: nvcc 13.0 otherwise clones the row-tile
            // loop (main loop included) for each value they can take.
            gpumat::Epilogue e = ep;
            asm volatile("" : "+d"(e.alpha), "+d"(e.beta), "+r"(e.bias_along), "+r"(e.bias_f32), "+r"(e.activation));
            // Tile element (r, c) at stage_c[r * (BN + 2) + c]: rows 16 bytes apart in the banks, so the
            // 8 rows of a fragment store take 4 wavefronts, as few as its 512 bytes can.
            double* const stage_c = smem;
            constexpr int CS = BN + 2;
#pragma unroll
            for (int i = 0; i < C::MT; ++i)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = wm * C::WM + g + 16 * i + 8 * h;
#pragma unroll
                    for (int j = 0; j < NT; ++j) {
                        const int c = wn * WN + 8 * j + 2 * t;
                        *reinterpret_cast<double2*>(stage_c + r * CS + c) = make_double2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
                    }
                }
            __syncthreads();
#pragma unroll 1
            for (int q = tid; q < BM * BN / 2; q += C::THREADS) {
                const int r = q / (BN / 2), c = 2 * (q % (BN / 2));
                const int i = row0 + r, j = col0 + c;  // element (i, j) of C and (i, j + 1)
                if (i >= M || j >= N) continue;
                const double2 v = *reinterpret_cast<const double2*>(stage_c + r * CS + c);
                double* const at = Cm + (long long)i * ldc + j;
                const double x = e.apply<double>(v.x, i, j, at);
                if (j + 1 >= N) {
                    at[0] = x;
                    continue;
                }
                const double y = e.apply<double>(v.y, i, j + 1, at + 1);
                if (vec_c) {
                    *reinterpret_cast<double2*>(at) = make_double2(x, y);
                } else {
                    at[0] = x;
                    at[1] = y;
                }
            }
            __syncthreads();  // the next row tile's first copies refill the ring
        }
    }
}

// The epilogue's copy of the row-tile loop, out of line: inlined beside the plain one, it changed that
// one's register allocation and schedule.
template <class C, bool VEC, bool TA, bool TB>
__device__ __noinline__ void gemm_epilogue(const double* __restrict__ A, const double* __restrict__ B, double* __restrict__ Cm,
                                           int M, int N, long long lda, long long ldb, long long ldc,
                                           int k_begin, int k_end, bool vec_c, double* smem, const gpumat::Epilogue ep)
{
    gemm<C, VEC, true, TA, TB>(A, B, Cm, M, N, lda, ldb, ldc, k_begin, k_end, vec_c, smem, ep);
}

#endif  // __CUDA_ARCH__ >= 800

template <class C, bool TA = false, bool TB = false>
__device__ __forceinline__ void entry(const double* __restrict__ A, const double* __restrict__ B, double* __restrict__ Cm,
                                      int M, int N, int K, long long lda, long long ldb, long long ldc, int k_chunk,
                                      GPUMAT_BATCH_PARAMS, const gpumat::Epilogue& ep)
{
#if __CUDA_ARCH__ >= 800
    extern __shared__ __align__(16) double smem[];
    const gpumat::BatchSplit bs = gpumat::batch_split(K, k_chunk);
    const long long k_lo = (long long)bs.split * k_chunk;
    const int k_begin = (int)(k_lo < K ? k_lo : K);
    const int k_end = (int)(k_lo + k_chunk < K ? k_lo + k_chunk : K);
    A += bs.batch * batch_a;
    B += bs.batch * batch_b;
    double* const Cz = Cm + bs.batch * batch_c + (long long)bs.split * M * ldc;
    const bool vec_c = (reinterpret_cast<uintptr_t>(Cz) & 15) == 0 && (ldc & 1) == 0;
    // 16-byte copies need every chunk start 16-byte aligned: both bases, both strides and the k start.
    const bool vec = (reinterpret_cast<uintptr_t>(A) & 15) == 0 && (reinterpret_cast<uintptr_t>(B) & 15) == 0 &&
                     (lda & 1) == 0 && (ldb & 1) == 0 && (k_begin & 1) == 0;
    // identity() once: the plain row-tile loop inline, as before, or the epilogue's out of line.
    if (!ep.identity()) {
        if (vec) gemm_epilogue<C, true, TA, TB>(A, B, Cz, M, N, lda, ldb, ldc, k_begin, k_end, vec_c, smem, ep);
        else gemm_epilogue<C, false, TA, TB>(A, B, Cz, M, N, lda, ldb, ldc, k_begin, k_end, vec_c, smem, ep);
    } else if (vec) {
        gemm<C, true, false, TA, TB>(A, B, Cz, M, N, lda, ldb, ldc, k_begin, k_end, vec_c, smem, ep);
    } else {
        gemm<C, false, false, TA, TB>(A, B, Cz, M, N, lda, ldb, ldc, k_begin, k_end, vec_c, smem, ep);
    }
#else
    __trap();  // no FP64 tensor cores before sm_80: gpumat runs its SIMT kernel there instead
#endif
}

}  // namespace

// One extern "C" entry point a tile configuration: launch bounds (CFG's threads, blocks an SM) and the
// shared signature of every matmul kernel, (A, B, C, M, N, K, lda, ldb, ldc, k_chunk, batch_a, batch_b,
// batch_c, alpha, beta, bias, bias_step, bias_along, bias_f32, activation). Grids' z: batch * splits.
#define GPUMAT_DMMA_ENTRY_AS(NAME, CFG, BLOCKS_PER_SM, TA, TB)                                                \
    extern "C" __global__ void __launch_bounds__(CFG::THREADS, BLOCKS_PER_SM) NAME(                           \
        const double* __restrict__ A, const double* __restrict__ B, double* __restrict__ C, int M, int N,     \
        int K, long long lda, long long ldb, long long ldc, int k_chunk, GPUMAT_BATCH_PARAMS,                 \
        GPUMAT_EPILOGUE_PARAMS)                                                                               \
    {                                                                                                         \
        gpumat::wait_for_previous_grid();                                                                     \
        entry<CFG, TA, TB>(A, B, C, M, N, K, lda, ldb, ldc, k_chunk, batch_a, batch_b, batch_c,               \
                           GPUMAT_EPILOGUE_ARGS);                                                             \
    }
#define GPUMAT_DMMA_ENTRY(NAME, CFG, BLOCKS_PER_SM) GPUMAT_DMMA_ENTRY_AS(NAME, CFG, BLOCKS_PER_SM, false, false)
// A tile reading A stored transposed (STEM at: K rows of M, as X.T @ B gives it), B stored transposed
// (STEM bt: N rows of K, as x @ W.T gives it) or both (STEM atbt) in place (see Loader): the same tile,
// launch and shared memory as the row-major entry STEM.
#define GPUMAT_DMMA_LAYOUTS(STEM, CFG, BLOCKS_PER_SM)                                                         \
    GPUMAT_DMMA_ENTRY(STEM##_f64, CFG, BLOCKS_PER_SM)                                                         \
    GPUMAT_DMMA_ENTRY_AS(STEM##at_f64, CFG, BLOCKS_PER_SM, true, false)                                       \
    GPUMAT_DMMA_ENTRY_AS(STEM##bt_f64, CFG, BLOCKS_PER_SM, false, true)                                       \
    GPUMAT_DMMA_ENTRY_AS(STEM##atbt_f64, CFG, BLOCKS_PER_SM, true, true)

// 128 x 128 x 16 tiles, block (256,1,1) = 2 x 4 warps of 64 x 32 (4 x 4 mmas of 16 x 8 each),
// 5 cp.async stages in 186,880 bytes of dynamic shared memory, one block per SM (64 accumulators
// a thread). Grid (ceil(N/128), min(ceil(M/128), 65535), batch * splits).
GPUMAT_DMMA_LAYOUTS(matmul_dmma128x128k16, Big, 1)

// The same with k tiles of 32 (half the barriers a k), 3 stages in 211,968 bytes of dynamic shared
// memory. Block (256,1,1), one block per SM, grid (ceil(N/128),
// min(ceil(M/128), 65535), batch * splits).
GPUMAT_DMMA_ENTRY(matmul_dmma128x128k32_f64, BigK32, 1)

// 64 x 128 x 16 tiles, block (256,1,1) = 2 x 4 warps of 32 x 32, 4 stages in 108,544 bytes of dynamic
// shared memory, at most 128 registers so that two blocks share an SM (more tiles for the small and
// skinny shapes; fits the 99 KiB a block of sm_86 / sm_89 gets). Grid (ceil(N/128),
// min(ceil(M/64), 65535), batch * splits).
GPUMAT_DMMA_ENTRY(matmul_dmma64x128k16_f64, Half, 2)

// 128 x 64 x 16 tiles, block (128,1,1) = 2 x 2 warps of 64 x 32, 3 stages in 87,552 bytes of dynamic
// shared memory, two blocks an SM (each one's barriers, pipeline fill and stores of C overlap the other's
// math). Grid (ceil(N/64), min(ceil(M/128), 65535), batch * splits).
GPUMAT_DMMA_LAYOUTS(matmul_dmma128x64k16, Narrow, 2)

// 64 x 64 x 16 tiles, block (128,1,1) = 2 x 2 warps of 32 x 32, 4 stages in 75,776 bytes of dynamic
// shared memory, three blocks an SM: four times the tiles of 128 x 128 for the small products (a few
// hundred a side), whose big tiles leave most SMs idle or need a split of K and its second pass.
// Grid (ceil(N/64), min(ceil(M/64), 65535), batch * splits).
GPUMAT_DMMA_LAYOUTS(matmul_dmma64x64k16, Small, 3)

// 16 x 128 x 16 and 32 x 128 x 16 tiles, block (128,1,1) = 1 x 4 warps of 16 x 32 or 32 x 32, 4 stages in
// 77,824 or 88,064 bytes of dynamic shared memory, two blocks an SM: a layer on a few tokens (x @ W, x @ W.T
// with 2-32 rows of x), where the 64-row tiles run 2-32 times the mmas asked for and ran at the DMMA pipe's
// rate instead of the weight's bandwidth; a 16-row tile does at most twice, so the weight's stream bounds it.
// Grid (ceil(N/128), min(ceil(M/16 or 32), 65535), batch * splits).
GPUMAT_DMMA_LAYOUTS(matmul_dmma16x128k16, Rows16, 2)

GPUMAT_DMMA_LAYOUTS(matmul_dmma32x128k16, Rows32, 2)

// 32 x 32 x 16 tiles, block (64,1,1) = 2 x 1 warps of 16 x 32, 2 stages in 19,456 bytes of dynamic shared
// memory, ten blocks an SM: a batch of tiny products (17-40 a side), a product or four a tile, where the
// 64 x 64 tile left three quarters of each block idle at three blocks an SM, so that every wave waited on
// the latency of too few products' loads. Grid (ceil(N/32), min(ceil(M/32), 65535), batch * splits).
GPUMAT_DMMA_LAYOUTS(matmul_dmma32x32k16, Tiny, 10)

// The two 128-row shapes above with the double-buffered main loop (same tiles, stages, blocks an SM, shared
// memory and grids as matmul_dmma128x128k16_f64 and matmul_dmma128x64k16_f64).
GPUMAT_DMMA_ENTRY(matmul_dmma128x128k16pipe_f64, BigPipe, 1)

GPUMAT_DMMA_ENTRY(matmul_dmma128x64k16pipe_f64, NarrowPipe, 2)
