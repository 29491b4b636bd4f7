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
// Tile and data flow:
//  * a block computes 128 x 128 of C with 8 warps as 2 (M) x 4 (N) warp tiles of 64 x 32, each warp
//    4 x 4 mma tiles of 16 x 8; k tiles of BK = 32 (two mma k steps) pass through a ring of STAGES = 4
//    shared-memory buffers, one barrier a k tile;
//  * fragments are read with ldmatrix (A: .x4, four 8 x 8 pieces = one 16 x 16 A fragment; B: .x4.trans
//    from the k-major B tile, two n tiles of 8 at once). Shared memory is swizzled in 16-byte chunks so
//    that the eight rows of every 8 x 8 piece hit distinct bank groups: A rows are 64 bytes (4 chunks),
//    chunk c of row r stored at c ^ ((r / 2) % 4); B rows are 256 bytes (16 chunks), chunk c of k row
//    r at c ^ (r % 8);
//  * copies: when A, B, lda, ldb and the k start are all 16-byte aligned, one cp.async of 16 bytes a
//    chunk, the M, N and K edges zero-filled by the copy (its source size); otherwise ("any view")
//    each thread loads its chunks element by element into registers (bounds-checked, zero outside)
//    before the math of the current k tile and stores them to shared memory after it, so the loads'
//    latency still hides behind a k tile of mma;
//  * blocks are mapped to tiles in groups of 8 row tiles (gpumat::grouped_tile: neighbours in time
//    share A and B in L2); warps whose warp tile lies wholly outside C skip the math; C is written in
//    pairs (4 or 8 bytes) where aligned, else element by element, every store guarded;
//  * the epilogue: identity() is tested once per block; the identity runs the row-tile loop above,
//    inline; any other epilogue runs its own copy of it, out of line (gemm_epilogue), which parks each
//    tile's float32 results in the idle ring (BM x BN floats are its 64 KiB) and then finishes pairs of
//    adjacent elements of a row, a warp a row segment: one apply per element in a loop, where 64
//    inlined in the registers' store made the code six times larger and ptxas spill at 128 registers.
// Deterministic: a fixed order of products and sums, no atomics.
//
// Built for every arch in the default list; the mma code exists only for sm_80 and later (below that
// the kernels trap, and gpumat never launches them there).
#include <stdint.h>

#include "gpumat.cuh"

using gpumat::Dtype;
using gpumat::store_pair;

namespace {

constexpr int BM = 128, BN = 128, BK = 32;
constexpr int THREADS = 256;
constexpr int WARPS_N = 4;
constexpr int WM = 64, WN = 32;            // warp tile
constexpr int MT = WM / 16, NT = WN / 8;   // mma tiles a warp: 4 x 4
constexpr int STAGES = 4;
constexpr int A_ELEMS = BM * BK;           // 4096 halves, 8 KiB
constexpr int B_ELEMS = BK * BN;           // 4096 halves, 8 KiB
constexpr int STAGE_ELEMS = A_ELEMS + B_ELEMS;
constexpr int SMEM_BYTES = STAGES * STAGE_ELEMS * 2;  // 65,536
constexpr int GROUP_M = 8;
static_assert(SMEM_BYTES == 65536, "src/gpumat/_matmul_half.py asks for this many bytes");
static_assert(BM * BN * 4 <= SMEM_BYTES, "a non-identity epilogue parks the float32 tile in the ring");
// Two blocks an SM (128 registers a thread) where ptxas fits the kernel in them without spilling; its
// sm_80 and sm_100 code needs a few more registers, so there one block (8 warps) an SM.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 800 || __CUDA_ARCH__ >= 1000) && __CUDA_ARCH__ < 1200
constexpr int MIN_BLOCKS = 1;
#else
constexpr int MIN_BLOCKS = 2;
#endif

#if __CUDA_ARCH__ >= 800

using gpumat::copy16;
using gpumat::copy_commit;
using gpumat::copy_wait;
using gpumat::smem_addr;

// Element offsets (in halves) of 16-byte chunk c of row r inside a stage's A and B tiles.
__device__ __forceinline__ int a_chunk(int r, int c) { return r * BK + ((c ^ ((r >> 1) & 3)) << 3); }
__device__ __forceinline__ int b_chunk(int r, int c) { return r * BN + ((c ^ (r & 7)) << 3); }

template <class T>
struct Mma;

template <>
struct Mma<__half> {
    __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
    {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

template <>
struct Mma<__nv_bfloat16> {
    __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
    {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// The copies of one k tile. Thread tid owns A chunks (row tid/4 + 64 i, chunk tid%4) and B chunks
// (k row tid/16 + 16 i, chunk tid%16), i = 0, 1.
template <class T>
struct Loader {
    const T* a;       // A at this thread's first row and its chunk's first k, in the next k tile
    const T* b;       // B at this thread's first k row and its chunk's first column, in the next k tile
    long long lda, ldb;
    int a_rows;       // rows of A from this thread's first row to M
    int b_cols;       // columns of B from this thread's chunk's first column to N
    uint4 held[4];    // the element-wise path: this k tile's chunks, between load() and store()

    __device__ __forceinline__ void async(T* As, T* Bs, int kvalid, bool guard)
    {
        const int tid = threadIdx.x;
        const int ca = tid & 3, cb = tid & 15, ra = tid >> 2, rb = tid >> 4;
        const int a_kleft = kvalid - 8 * ca;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int n = !guard ? 8 : (64 * i < a_rows ? max(0, min(8, a_kleft)) : 0);
            const T* src = n ? a + i * 64 * lda : a;
            copy16(As + a_chunk(ra + 64 * i, ca), src, 2 * n);
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int r = rb + 16 * i;
            const int n = !guard ? 8 : (r < kvalid ? max(0, min(8, b_cols)) : 0);
            const T* src = n ? b + i * 16 * ldb : b;
            copy16(Bs + b_chunk(r, cb), src, 2 * n);
        }
        a += BK;
        b += BK * ldb;
    }

    __device__ __forceinline__ void load(int kvalid)
    {
        const int tid = threadIdx.x;
        const int ca = tid & 3, rb = tid >> 4;
        const int a_kleft = kvalid - 8 * ca;
        const unsigned short* a16 = reinterpret_cast<const unsigned short*>(a);
        const unsigned short* b16 = reinterpret_cast<const unsigned short*>(b);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            unsigned short v[8];
            const bool row_ok = 64 * i < a_rows;
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] = (row_ok && e < a_kleft) ? a16[i * 64 * lda + e] : 0;
            held[i] = make_uint4(v[0] | (v[1] << 16), v[2] | (v[3] << 16), v[4] | (v[5] << 16), v[6] | (v[7] << 16));
        }
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            unsigned short v[8];
            const bool row_ok = rb + 16 * i < kvalid;
#pragma unroll
            for (int e = 0; e < 8; ++e) v[e] = (row_ok && e < b_cols) ? b16[i * 16 * ldb + e] : 0;
            held[2 + i] = make_uint4(v[0] | (v[1] << 16), v[2] | (v[3] << 16), v[4] | (v[5] << 16), v[6] | (v[7] << 16));
        }
        a += BK;
        b += BK * ldb;
    }

    __device__ __forceinline__ void store(T* As, T* Bs)
    {
        const int tid = threadIdx.x;
        const int ca = tid & 3, cb = tid & 15, ra = tid >> 2, rb = tid >> 4;
#pragma unroll
        for (int i = 0; i < 2; ++i) *reinterpret_cast<uint4*>(As + a_chunk(ra + 64 * i, ca)) = held[i];
#pragma unroll
        for (int i = 0; i < 2; ++i) *reinterpret_cast<uint4*>(Bs + b_chunk(rb + 16 * i, cb)) = held[2 + i];
    }
};

// One k tile (two k steps of 16) of the warp's 4 x 4 mma tiles.
template <class T>
__device__ __forceinline__ void multiply_tile(const T* As, const T* Bs, int wm, int wn, int lane, float (&acc)[MT][NT][4])
{
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
            ldmatrix_x4_trans(bf[jj], b_base + 2 * b_chunk(16 * ks + lrow, wn * (WN / 8) + 2 * jj + lhalf));
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
template <class T, class Out, bool VEC, bool EPI>
__device__ __forceinline__ void gemm(const T* __restrict__ A, const T* __restrict__ B, Out* __restrict__ C,
                                     int M, int N, long long lda, long long ldb, long long ldc, int k_begin,
                                     int k_end, T* smem, const gpumat::Epilogue& ep, int batch, long long batch_a,
                                     long long batch_b)
{
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

        Loader<T> ld;
        int bt = batch;
        asm volatile("" : "+r"(bt));
        ld.a = A + bt * batch_a + (long long)(row0 + (tid >> 2)) * lda + k_begin + 8 * (tid & 3);
        ld.b = B + bt * batch_b + (long long)(k_begin + (tid >> 4)) * ldb + col0 + 8 * (tid & 15);
        ld.lda = lda;
        ld.ldb = ldb;
        ld.a_rows = M - (row0 + (tid >> 2));
        ld.b_cols = N - (col0 + 8 * (tid & 15));
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
                if (kleft > 0) ld.async(st, st + A_ELEMS, min(kleft, BK), !(kleft >= BK && inside));
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
            if (warp_live) multiply_tile<T>(st, st + A_ELEMS, wm, wn, frag_lane, acc);
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
template <class T, class Out, bool VEC>
__device__ __noinline__ void gemm_epilogue(const T* __restrict__ A, const T* __restrict__ B, Out* __restrict__ C,
                                           int M, int N, long long lda, long long ldb, long long ldc, int k_begin,
                                           int k_end, T* smem, const gpumat::Epilogue ep, int batch,
                                           long long batch_a, long long batch_b)
{
    gemm<T, Out, VEC, true>(A, B, C, M, N, lda, ldb, ldc, k_begin, k_end, smem, ep, batch, batch_a, batch_b);
}

#endif  // __CUDA_ARCH__ >= 800

template <class T, class Out>
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
        if (vec) gemm_epilogue<T, Out, true>(A, B, Cz, M, N, lda, ldb, ldc, k_begin, k_end, smem, ep, bs.batch, batch_a, batch_b);
        else gemm_epilogue<T, Out, false>(A, B, Cz, M, N, lda, ldb, ldc, k_begin, k_end, smem, ep, bs.batch, batch_a, batch_b);
    } else if (vec) {
        gemm<T, Out, true, false>(A, B, Cz, M, N, lda, ldb, ldc, k_begin, k_end, smem, ep, bs.batch, batch_a, batch_b);
    } else {
        gemm<T, Out, false, false>(A, B, Cz, M, N, lda, ldb, ldc, k_begin, k_end, smem, ep, bs.batch, batch_a, batch_b);
    }
#else
    __trap();  // no 16-bit mma before sm_80: gpumat runs the SIMT kernels there instead
#endif
}

}  // namespace

// matmul_mma128x128_<dtype>[_f32out](A, B, C, M, N, K, lda, ldb, ldc, k_chunk, batch_a, batch_b, batch_c,
// alpha, beta, bias, bias_step, bias_along, bias_f32, activation): mma.sync m16n8k16 with
// float32 accumulation, ldmatrix from swizzled shared memory, 4 cp.async stages (16-byte copies for
// aligned operands, element-wise register-staged loads for any other view). Tile 128 x 128 x 32,
// block (256,1,1) = 2 x 4 warps of 64 x 32, 65,536 bytes of dynamic shared memory, two blocks an SM
// (one on sm_80 and sm_100, see MIN_BLOCKS). Grid (ceil(N/128), min(ceil(M/128), 65535), batch * splits).
// C in the input dtype, or float32.
#define GPUMAT_MMA_HALF(NAME, T, OUT)                                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) NAME(                                        \
        const T* __restrict__ A, const T* __restrict__ B, OUT* __restrict__ C, int M, int N, int K,      \
        long long lda, long long ldb, long long ldc, int k_chunk, GPUMAT_BATCH_PARAMS,                     \
        GPUMAT_EPILOGUE_PARAMS)                                                                            \
    {                                                                                                      \
        entry<T, OUT>(A, B, C, M, N, K, lda, ldb, ldc, k_chunk, batch_a, batch_b, batch_c,                 \
                      GPUMAT_EPILOGUE_ARGS);                                                               \
    }

GPUMAT_MMA_HALF(matmul_mma128x128_f16, __half, __half)
GPUMAT_MMA_HALF(matmul_mma128x128_f16_f32out, __half, float)
GPUMAT_MMA_HALF(matmul_mma128x128_bf16, __nv_bfloat16, __nv_bfloat16)
GPUMAT_MMA_HALF(matmul_mma128x128_bf16_f32out, __nv_bfloat16, float)
