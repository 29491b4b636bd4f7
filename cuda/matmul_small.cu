// Batches of small products: C_z (M x N) = op(A_z) (M x K) @ op(B_z) (K x N) for z < batch, with M and N
// at most 64 (K any), in every dtype: float32 exact FP32, float64 FP64 FMA, float16 / bfloat16 in float32
// with C in the input dtype or float32 (the _f32out entries). op(A) is A, or with ta the transpose of a
// row-major K x M storage (A.T read in place); op(B) likewise with tb (x @ W.T read in place). Matrix z of
// A, B and C starts z * batch_a (batch_b, batch_c) elements on; a batch stride of 0 shares one matrix.
// Each output goes through the fused epilogue (gpumat::Epilogue) before it is rounded.
//
// small (C of at most 256 elements). Technique: a tile kernel's 64 x 64 block leaves most of its threads
// idle on a 16 x 16 product and pays a launch's worth of prologue per matrix; these products are bound by
// memory (a 16^3 product does 16 FMAs per element of C it reads and writes). So a block of 256 threads
// takes G whole matrices at once:
//  * one output a thread, four times over (four matrices' outputs a thread), so G = 4 x 256 / (M N)
//    matrices a block: enough bytes in flight a block to draw the memory's bandwidth. small_geometry()
//    computes G, and gpumat/matmul/variants.py the same for the grid (ceil(batch / G) blocks, one
//    dimension: no 65535 limit);
//  * K passes in chunks: the chunk of each of the block's matrices of A and B is staged in shared
//    memory (as the accumulation type), read from global memory in storage order, so consecutive
//    threads read consecutive elements (a packed batch of small matrices is one contiguous run), up to
//    four loads of A and four of B in flight a thread before any store waits, and transposed on the
//    way into shared memory where the operand is stored transposed (a body for each layout);
//  * each thread then accumulates its outputs over the chunk from shared memory, in k order.
// Launch: block (256, 1, 1), grid (ceil(batch / G), 1, 1), 16 KiB of static shared memory; at most 80
// registers a thread, so at least three blocks an SM.
//
// small_wide (C up to 64 x 64). Technique: register tiles of 4 x 8 outputs a lane, a warp a 32 x 32
// quarter of C (lane l: rows 4 (l / 4).., columns 8 (l % 4)..): per k, four values of A (scalar shared
// loads, rows kp apart, kp odd: no bank conflict) and eight of B (16-byte loads) for 32 FMAs. A C of at
// most 32 x 32 is one warp's: each of a block's four warps takes its own matrix and stages it alone (no
// barrier across warps, so one warp's loads overlap another's arithmetic); a wider C is the block's four
// warps', a quarter each, staged together. A and B's chunk of K goes to the group's slice of shared memory
// as the accumulation type (rows and columns past M and N zero, so every lane runs the same loop), read
// in storage order: float32 and float64 by cp.async (all of a thread's copies in flight), the halves
// with four loads of each operand in flight a thread. C leaves a lane's run of 8 at a time where it can
// (store_tile). wide_geometry() sizes it; the host's small_per_block and small_chunk (gpumat/matmul/variants.py)
// mirror it.
// Launch: block (128, 1, 1), grid (ceil(batch / matrices a block), 1, 1), 36 KiB of dynamic shared memory.
//
// small_stream (M, N and K at most 32: the halves' products up to 32^3, float32's too, float64's up to about
// 21^3).
// Technique: a batch of tiny products is a stream of bytes, and the two kernels above wait on each
// matrix's loads before its arithmetic (a warp stages its matrix, computes it, and only then loads again:
// a few KiB in flight an SM: 0.1-0.5 of the copy rate on the H200's bench bmm). Here each warp walks its
// own chunks of matrices (chunk c, c + warps of the grid, ...) through two copy stages in shared memory:
// while it computes one chunk, the next chunk's A and B are in flight. A packed operand (its batch one
// run of whole matrices, 16-byte aligned) is copied as 16-byte cp.async pieces, whatever M, N and K (the
// run is copied from the 16-byte boundary before it, the last piece short of 16 bytes element by
// element); any other operand element by element. Each matrix of a stage is then staged (a row at a
// time, a lane an element; zeros past M, N and K stay) and computed: float32 and float64 as small_wide
// stages them (A as 8 RM rows of an odd stride, B as K rows of 4 RN + 4) with a register tile a lane of
// 4 x 8 (C up to 32 x 32) or 2 x 4 (C up to 16 x 16), C leaving in 16-byte runs where it can (store_tile);
// the halves as they are, on the tensor cores (mma.sync
// m16n8k16, float32 accumulators; fragments by ldmatrix, A as 16 or 32 rows of K padded to 16, B as K
// rows of 16 or 32 columns, rows 16 bytes past a multiple of 32: no bank conflict), where a 32^3
// product is 16 instructions, not the FP32 pipes' 1024. stream_geometry() sizes the stages; the host's
// stream_geometry (gpumat/matmul/variants.py) mirrors it. sm_80 and newer.
// Launch: block (128, 1, 1), grid (min(ceil(batch / 4), four blocks an SM), 1, 1), 56 KiB of dynamic
// shared memory (14 KiB a warp: float32 products up to about 20^3, the halves' up to 32^3); a float32 or
// float64 product whose stages need more takes a quarter of the block's dynamic shared memory a warp, which
// the host sizes for three or two blocks an SM (its stream_launch; float64's entry is bound for two).
//
// small_stream_in_place (the halves' products of M, N and K multiples of 8, at most 32). Technique: the
// staging above was most of small_stream's time on those shapes, and it is not needed there: each row of
// a multiple of 8 halves starts on 16 bytes in the stage, so ldmatrix reads the fragments where the copy
// put them (.trans for A stored K x M and B stored K x N), a last k step of 8 with its upper pieces zeroed,
// rows past M and N clamped onto the last (never stored); C in pairs of neighbours (plain epilogue, C
// aligned to two elements). The same walk, stages and launch as small_stream, its own entry points (one
// kernel with both bodies spilled at 128 registers).
//
// All four: every output's sum runs in a fixed order (k order, but for the tensor cores' own within a
// step of 16), no atomics (deterministic); each output goes through the
// fused epilogue (gpumat::Epilogue) before it is rounded.
#include "gpumat.cuh"

using gpumat::Dtype;

namespace {

// --- small ---------------------------------------------------------------------------------------------
constexpr int THREADS = 256;
constexpr int SMEM_BYTES = 16384;
// launch bounds: at most 80 registers a thread (float64 spilled at 64), so three blocks an SM
constexpr int BLOCKS_PER_SM = 3;
constexpr int PASSES = 4;  // matrices' outputs a thread: enough bytes in flight a block

struct Geometry {
    int per_pass;   // matrices the block's threads cover once (one output a thread)
    int per_block;  // matrices a block (G): per_pass, PASSES times over
};

// The matrices a block for an M x N result (M N <= 256); the host's small_per_block
// (gpumat/matmul/variants.py) computes the same G.
__device__ __forceinline__ Geometry small_geometry(int M, int N)
{
    const int per_pass = max(1, THREADS / (M * N));
    return {per_pass, per_pass * PASSES};
}

// A thread's walk over a Z x D1 x D0 index space (D0 fastest: an operand's storage order, so consecutive
// threads read consecutive elements), every step-th element from `start`, without dividing: the step's
// carries are precomputed.
struct Walk {
    int z, d1, d0;
    int Z, D1, D0, sz, s1, s0;

    __device__ __forceinline__ Walk(int Z_, int D1_, int D0_, int start, int step) : Z(Z_), D1(D1_), D0(D0_)
    {
        const int plane = D1 * D0;
        z = start / plane;
        const int r = start - z * plane;
        d1 = r / D0;
        d0 = r - d1 * D0;
        sz = step / plane;
        const int sr = step - sz * plane;
        s1 = sr / D0;
        s0 = sr - s1 * D0;
    }
    __device__ __forceinline__ bool more() const { return z < Z; }
    __device__ __forceinline__ void next()
    {
        d0 += s0;
        int carry = d0 >= D0;
        d0 -= carry ? D0 : 0;
        d1 += s1 + carry;
        carry = d1 >= D1;
        d1 -= carry ? D1 : 0;
        z += sz + carry;
    }
};

// Stage two operands' chunks into shared memory at once: adst[aplace(z, d1, d0)] = aload(z, d1, d0) over
// walk a (likewise b), as the accumulation type; each round issues up to U loads of each operand before
// any store waits for one, so a thread's loads of A and B are in flight together.
template <class T, int U, class Acc, class LA, class PA, class LB, class PB>
__device__ __forceinline__ void stage(Walk a, LA aload, PA aplace, Acc* adst, Walk b, LB bload, PB bplace, Acc* bdst)
{
    while (a.more() || b.more()) {
        T va[U], vb[U];
        int at_a[U], at_b[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            at_a[u] = -1;
            if (a.more()) {
                va[u] = aload(a.z, a.d1, a.d0);
                at_a[u] = aplace(a.z, a.d1, a.d0);
                a.next();
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            at_b[u] = -1;
            if (b.more()) {
                vb[u] = bload(b.z, b.d1, b.d0);
                at_b[u] = bplace(b.z, b.d1, b.d0);
                b.next();
            }
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (at_a[u] >= 0) adst[at_a[u]] = Dtype<T>::acc(va[u]);
            if (at_b[u] >= 0) bdst[at_b[u]] = Dtype<T>::acc(vb[u]);
        }
    }
}

// One chunk of K [k0, k0 + kn) of the block's `here` matrices (from `first`) into As[G][M][kc] and
// Bs[G][kc][N], each operand read in its storage order: A rows of K (kk fastest) or, stored transposed,
// rows of M (i fastest); B rows of N (j fastest) or, stored transposed, rows of K (kk fastest).
template <bool TA, bool TB, class T, class Acc>
__device__ __forceinline__ void stage_chunk(const T* __restrict__ A, const T* __restrict__ B, int M, int N,
                                            long long lda, long long ldb, long long sa, long long sb, long long first,
                                            int here, int k0, int kn, int kc, Acc* As, Acc* Bs)
{
    constexpr int U = sizeof(T) == 8 ? 2 : 4;  // float64's values take twice the registers
    const int t = threadIdx.x;
    const auto a_place = [=](int z, int i, int kk) { return (z * M + i) * kc + kk; };
    const auto b_place = [=](int z, int kk, int j) { return (z * kc + kk) * N + j; };
    const T* a0 = A + first * sa;
    const T* b0 = B + first * sb;
    // the walks run in storage order; each call maps its indices back to (matrix, row, column)
    const auto a_rows = [=](int z, int i, int kk) { return a0[z * sa + (long long)i * lda + k0 + kk]; };
    const auto a_cols = [=](int z, int kk, int i) { return a0[z * sa + (long long)(k0 + kk) * lda + i]; };
    const auto b_rows = [=](int z, int kk, int j) { return b0[z * sb + (long long)(k0 + kk) * ldb + j]; };
    const auto b_cols = [=](int z, int j, int kk) { return b0[z * sb + (long long)j * ldb + k0 + kk]; };
    const auto a_cols_place = [=](int z, int kk, int i) { return a_place(z, i, kk); };
    const auto b_cols_place = [=](int z, int j, int kk) { return b_place(z, kk, j); };
    if constexpr (!TA && !TB) {
        // A packed batch whose K fits one chunk: each operand's block of matrices is one contiguous run,
        // laid out as the staged chunk is (As[z][i][kk] with kc = K = lda, Bs[z][kk][j] with ldb = N), so
        // the copy is a walk along the run with no index arithmetic (the general walk's, four 64-bit
        // products an element, made the kernel instruction-bound: ncu on the H200, 65537 8^3 float16
        // products, SM throughput 65%, DRAM 5%)
        const int K = k0 + kn;
        const bool flat = k0 == 0 && kn == kc && lda == K && ldb == N && (sa == (long long)M * K || here == 1) &&
                          (sb == (long long)K * N || here == 1);
        if (flat) {
            const auto a_run = [=](int, int, int e) { return a0[e]; };
            const auto b_run = [=](int, int, int e) { return b0[e]; };
            const auto same = [](int, int, int e) { return e; };
            stage<T, U>(Walk(1, 1, here * M * K, t, THREADS), a_run, same, As, Walk(1, 1, here * K * N, t, THREADS),
                        b_run, same, Bs);
        } else {
            stage<T, U>(Walk(here, M, kn, t, THREADS), a_rows, a_place, As, Walk(here, kn, N, t, THREADS), b_rows,
                        b_place, Bs);
        }
    } else if constexpr (TA && !TB)
        stage<T, U>(Walk(here, kn, M, t, THREADS), a_cols, a_cols_place, As, Walk(here, kn, N, t, THREADS), b_rows,
                    b_place, Bs);
    else if constexpr (!TA && TB)
        stage<T, U>(Walk(here, M, kn, t, THREADS), a_rows, a_place, As, Walk(here, N, kn, t, THREADS), b_cols,
                    b_cols_place, Bs);
    else
        stage<T, U>(Walk(here, kn, M, t, THREADS), a_cols, a_cols_place, As, Walk(here, N, kn, t, THREADS), b_cols,
                    b_cols_place, Bs);
}

template <bool TA, bool TB, class T, class Out>
__device__ __forceinline__ void small(const T* __restrict__ A, const T* __restrict__ B, Out* __restrict__ C, int M,
                                      int N, int K, long long lda, long long ldb, long long ldc, int batch,
                                      long long sa, long long sb, long long sc, const gpumat::Epilogue& ep,
                                      typename Dtype<T>::Acc* smem)
{
    using Acc = typename Dtype<T>::Acc;
    constexpr int ELEMS = SMEM_BYTES / (int)sizeof(Acc);
    const Geometry g = small_geometry(M, N);
    const int G = g.per_block;
    const long long first = (long long)blockIdx.x * G;
    const int here = (int)min((long long)G, batch - first);  // matrices of this block
    // the chunk of K staged at a time: as much as fits for the block's matrices, at most 32
    const int kc = max(1, min(min(K, 32), ELEMS / (G * (M + N))));
    Acc* As = smem;               // [G][M][kc]
    Acc* Bs = smem + G * M * kc;  // [G][kc][N]
    // this thread's output: row i, column j of matrices slot + q per_pass of the block
    const int t = threadIdx.x, per_matrix = M * N;
    const int slot = t / per_matrix, rest = t - slot * per_matrix;
    const int i = rest / N, j = rest % N;
    Acc acc[PASSES];
#pragma unroll
    for (int q = 0; q < PASSES; ++q) acc[q] = Acc(0);

    for (int k0 = 0; k0 < K; k0 += kc) {
        const int kn = min(kc, K - k0);
        stage_chunk<TA, TB>(A, B, M, N, lda, ldb, sa, sb, first, here, k0, kn, kc, As, Bs);
        __syncthreads();
#pragma unroll
        for (int q = 0; q < PASSES; ++q) {
            const int mi = slot + q * g.per_pass;
            if (slot >= g.per_pass || mi >= here) break;
            const Acc* as = As + (mi * M + i) * kc;
            const Acc* bs = Bs + mi * kc * N + j;
#pragma unroll 4
            for (int kk = 0; kk < kn; ++kk) acc[q] += as[kk] * bs[kk * N];
        }
        __syncthreads();
    }
    const bool plain = ep.identity();
#pragma unroll
    for (int q = 0; q < PASSES; ++q) {
        const int mi = slot + q * g.per_pass;
        if (slot >= g.per_pass || mi >= here) break;
        Out* at = C + (first + mi) * sc + (long long)i * ldc + j;
        *at = Dtype<Out>::from(plain ? acc[q] : ep.apply<Out>(acc[q], i, j, at));
    }
}

// --- small_wide ----------------------------------------------------------------------------------------
constexpr int WIDE_THREADS = 128;      // four warps
constexpr int WIDE_SMEM = 36864;  // dynamic shared memory a block (bytes): six blocks fit an H100's SM
// launch bounds: five blocks an SM for float32 (96 registers a thread), four for the halves (their staging
// spilled at five), three for float64 (its accumulators take 64 registers)
template <class T>
constexpr int wide_blocks_per_sm() { return sizeof(T) == 8 ? 3 : sizeof(T) == 4 ? 5 : 4; }
constexpr int WIDE_KC = 64;            // the most of K staged at a time

struct WideGeometry {
    int group;      // threads that stage one matrix and compute its C: 32 (C of at most 32 x 32) or 128
    int per_block;  // matrices a block: 4 (one a warp) or 1 (the four warps a 32 x 32 quarter each)
    int mp, np;     // M and N rounded up to 32 (the warps' tiles)
    int kc;         // the chunk of K staged at a time
    int kp;         // row stride of the staged A (As[i][kk]), odd: kc | 1
    int ns;         // row stride of the staged B (Bs[kk][j]): np + 4, so rows start 16-byte aligned
    int b_at;       // where B starts in a group's slice (a multiple of 4 elements)
    int slice;      // elements of shared memory a group
};

// The staging geometry of small_wide for an M x N x K product with accumulators of acc_bytes; the host's
// small_per_block and small_chunk (gpumat/matmul/variants.py) mirror it: kc is the most of K (at most
// WIDE_KC) whose staged A (mp x kp) and B (kc x ns) fit a group's share of WIDE_SMEM.
__device__ __forceinline__ WideGeometry wide_geometry(int M, int N, int K, int acc_bytes)
{
    WideGeometry g;
    const bool one_warp = M <= 32 && N <= 32;
    g.group = one_warp ? 32 : WIDE_THREADS;
    g.per_block = WIDE_THREADS / g.group;
    g.mp = (M + 31) / 32 * 32;
    g.np = (N + 31) / 32 * 32;
    g.slice = WIDE_SMEM / acc_bytes / g.per_block;
    g.kc = max(1, min(min(K, WIDE_KC), (g.slice - g.mp - 4) / (g.mp + 1 + g.np + 4)));
    g.kp = g.kc | 1;
    g.ns = g.np + 4;
    g.b_at = (g.mp * g.kp + 3) / 4 * 4;
    return g;
}

// Eight consecutive staged elements from p (16-byte aligned) into v.
__device__ __forceinline__ void load8(const float* p, float (&v)[8])
{
    const float4 x = *reinterpret_cast<const float4*>(p), y = *reinterpret_cast<const float4*>(p + 4);
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w, v[4] = y.x, v[5] = y.y, v[6] = y.z, v[7] = y.w;
}

__device__ __forceinline__ void load8(const double* p, double (&v)[8])
{
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const double2 x = *reinterpret_cast<const double2*>(p + 2 * q);
        v[2 * q] = x.x, v[2 * q + 1] = x.y;
    }
}

// Stage a chunk of A and B (from the addresses src(z, d1, d0) over each walk, to dst[place(z, d1, d0)]): a
// float32 or float64 element is the accumulation type, so it goes by cp.async, every copy of the thread in
// flight at once and no register held (then the thread waits for them); a half is widened on the way, U
// loads of each operand in flight before their stores (stage).
template <class T, int U, class SA, class PA, class SB, class PB, class Acc>
__device__ __forceinline__ void stage_wide(Walk a, SA asrc, PA aplace, Acc* adst, Walk b, SB bsrc, PB bplace, Acc* bdst)
{
    if constexpr (sizeof(T) == sizeof(Acc)) {
        for (; a.more(); a.next()) gpumat::copy_async<sizeof(T)>(adst + aplace(a.z, a.d1, a.d0), asrc(a.z, a.d1, a.d0));
        for (; b.more(); b.next()) gpumat::copy_async<sizeof(T)>(bdst + bplace(b.z, b.d1, b.d0), bsrc(b.z, b.d1, b.d0));
        gpumat::wait_async();
    } else {
        const auto aload = [=](int z, int d1, int d0) { return *asrc(z, d1, d0); };
        const auto bload = [=](int z, int d1, int d0) { return *bsrc(z, d1, d0); };
        stage<T, U>(a, aload, aplace, adst, b, bload, bplace, bdst);
    }
}

// A lane's RN consecutive outputs of one row of C at `at`, rounded to Out, as whole 16-byte stores (8-byte ones
// where the RN outputs are 8 bytes: four halves); `at` aligned to them.
template <int RN, class Out, class Acc>
__device__ __forceinline__ void store_run(Out* at, const Acc (&v)[RN])
{
    if constexpr (sizeof(Out) == 8) {
#pragma unroll
        for (int q = 0; q < RN / 2; ++q) *reinterpret_cast<double2*>(at + 2 * q) = make_double2(v[2 * q], v[2 * q + 1]);
    } else if constexpr (sizeof(Out) == 4) {
#pragma unroll
        for (int q = 0; q < RN / 4; ++q)
            *reinterpret_cast<float4*>(at + 4 * q) =
                make_float4(float(v[4 * q]), float(v[4 * q + 1]), float(v[4 * q + 2]), float(v[4 * q + 3]));
    } else {
        uint32_t w[RN / 2];
#pragma unroll
        for (int q = 0; q < RN / 2; ++q) w[q] = gpumat::pack_pair<Out>(float(v[2 * q]), float(v[2 * q + 1]));
        if constexpr (RN == 8)
            *reinterpret_cast<uint4*>(at) = make_uint4(w[0], w[1], w[2], w[3]);
        else
            *reinterpret_cast<uint2*>(at) = make_uint2(w[0], w[1]);
    }
}

// A lane's RM x RN register tile of C (rows i0.., columns j0..; those past M or N not stored) through the
// epilogue. With the plain epilogue, C's matrix and rows aligned to a run of RN outputs (16 bytes, or 8 for
// four halves), and the lane's columns all inside N, each row leaves as whole runs (store_run): the 4 x 8
// tiles' element stores put a warp's 32 lanes on 8 rows x 4 columns 8 apart, a 32-byte sector of C each, so
// the sectors of C were written 8 times over (four halves: 4); else element by element.
template <int RM, int RN, class Out, class Acc>
__device__ __forceinline__ void store_tile(Out* cz, long long ldc, int i0, int j0, int M, int N, Acc (&acc)[RM][RN],
                                           bool plain, const gpumat::Epilogue& ep)
{
    constexpr int RUN = RN * (int)sizeof(Out) < 16 ? RN * (int)sizeof(Out) : 16;  // bytes of a store
    const bool runs = plain && j0 + RN <= N &&
                      ((reinterpret_cast<unsigned long long>(cz + j0) | (unsigned long long)ldc * sizeof(Out)) &
                       (RUN - 1)) == 0;
    if (runs) {
        Out* at = cz + (long long)i0 * ldc + j0;
#pragma unroll
        for (int r = 0; r < RM; ++r, at += ldc)
            if (i0 + r < M) store_run<RN>(at, acc[r]);
        return;
    }
#pragma unroll
    for (int r = 0; r < RM; ++r) {
        const int i = i0 + r;
        if (i >= M) break;
        Out* row = cz + (long long)i * ldc;
#pragma unroll
        for (int c = 0; c < RN; ++c) {
            const int j = j0 + c;
            if (j < N) row[j] = Dtype<Out>::from(plain ? acc[r][c] : ep.apply<Out>(acc[r][c], i, j, row + j));
        }
    }
}

template <bool TA, bool TB, class T, class Out>
__device__ __forceinline__ void small_wide(const T* __restrict__ A, const T* __restrict__ B, Out* __restrict__ C,
                                           int M, int N, int K, long long lda, long long ldb, long long ldc,
                                           int batch, long long sa, long long sb, long long sc,
                                           const gpumat::Epilogue& ep, typename Dtype<T>::Acc* smem)
{
    using Acc = typename Dtype<T>::Acc;
    constexpr int U = 4;  // the halves' loads of each operand in flight a thread
    const WideGeometry g = wide_geometry(M, N, K, (int)sizeof(Acc));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int member = g.group == 32 ? lane : threadIdx.x;  // this thread's place in its group
    const long long z = (long long)blockIdx.x * g.per_block + (g.group == 32 ? warp : 0);
    Acc* As = smem + (g.group == 32 ? warp : 0) * g.slice;  // [mp][kp]
    Acc* Bs = As + g.b_at;                                     // [kc][ns]
    // this warp's quarter of C: rows r0.., columns c0.. (a one-warp group has the only one)
    const int r0 = g.group == 32 ? 0 : warp / 2 * 32, c0 = g.group == 32 ? 0 : warp % 2 * 32;
    const bool live = r0 < M && c0 < N;
    const auto sync = [&] {
        if (g.group == 32)
            __syncwarp();
        else
            __syncthreads();
    };
    // rows of A past M and columns of B past N are zero in every chunk (the staging never writes them)
    for (int e = member; e < (g.mp - M) * g.kp; e += g.group) As[M * g.kp + e] = Acc(0);
    for (int e = member; e < g.kc * (g.np - N); e += g.group) {
        const int kk = e / (g.np - N);
        Bs[kk * g.ns + N + (e - kk * (g.np - N))] = Acc(0);
    }
    if (z >= batch) return;  // a warp of the last block with no matrix (its group is itself alone)
    const T* a = A + z * sa;
    const T* b = B + z * sb;
    const int ly = lane / 4, lx = lane % 4;
    Acc acc[4][8];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c) acc[r][c] = Acc(0);

    for (int k0 = 0; k0 < K; k0 += g.kc) {
        const int kn = min(g.kc, K - k0), kp = g.kp, ns = g.ns;
        const auto a_place = [=](int, int i, int kk) { return i * kp + kk; };
        const auto a_tplace = [=](int, int kk, int i) { return i * kp + kk; };
        const auto b_place = [=](int, int kk, int j) { return kk * ns + j; };
        const auto b_tplace = [=](int, int j, int kk) { return kk * ns + j; };
        // where each element of a chunk comes from, walked in storage order
        const auto a_rows = [=](int, int i, int kk) { return a + (long long)i * lda + k0 + kk; };
        const auto a_cols = [=](int, int kk, int i) { return a + (long long)(k0 + kk) * lda + i; };
        const auto b_rows = [=](int, int kk, int j) { return b + (long long)(k0 + kk) * ldb + j; };
        const auto b_cols = [=](int, int j, int kk) { return b + (long long)j * ldb + k0 + kk; };
        sync();  // the previous chunk's reads are done
        if constexpr (!TA && !TB)
            stage_wide<T, U>(Walk(1, M, kn, member, g.group), a_rows, a_place, As, Walk(1, kn, N, member, g.group),
                             b_rows, b_place, Bs);
        else if constexpr (TA && !TB)
            stage_wide<T, U>(Walk(1, kn, M, member, g.group), a_cols, a_tplace, As, Walk(1, kn, N, member, g.group),
                             b_rows, b_place, Bs);
        else if constexpr (!TA && TB)
            stage_wide<T, U>(Walk(1, M, kn, member, g.group), a_rows, a_place, As, Walk(1, N, kn, member, g.group),
                             b_cols, b_tplace, Bs);
        else
            stage_wide<T, U>(Walk(1, kn, M, member, g.group), a_cols, a_tplace, As, Walk(1, N, kn, member, g.group),
                             b_cols, b_tplace, Bs);
        sync();
        if (live) {
            const Acc* as = As + (r0 + ly * 4) * kp;
            const Acc* bs = Bs + c0 + lx * 8;
#pragma unroll 4
            for (int kk = 0; kk < kn; ++kk) {
                Acc av[4], bv[8];
#pragma unroll
                for (int r = 0; r < 4; ++r) av[r] = as[r * kp + kk];
                load8(bs + kk * ns, bv);
#pragma unroll
                for (int r = 0; r < 4; ++r)
#pragma unroll
                    for (int c = 0; c < 8; ++c) acc[r][c] += av[r] * bv[c];
            }
        }
    }
    if (!live) return;
    store_tile(C + z * sc, ldc, r0 + ly * 4, c0 + lx * 8, M, N, acc, ep.identity(), ep);
}

// --- small_stream --------------------------------------------------------------------------------------
constexpr int STREAM_THREADS = 128;  // four warps, each on its own matrices (no barrier across warps)
// dynamic shared memory a block (bytes): four blocks (sixteen warps, at most 128 registers a thread) fill an
// H100's SM; with eight warps an SM the staging's shared-memory round trips were not hidden (H200: 10000
// 32^3 float16 products 44 us, 1.4 TB/s)
constexpr int STREAM_SMEM = 57344;
constexpr int STREAM_BLOCKS_PER_SM = 4;
constexpr int STREAM_STAGE_BYTES = 8192;  // the most of A and B's matrices a warp's copy stage holds (but one)

struct StreamGeometry {
    int rm, rn;     // a lane's register tile: 2 x 4 (C of at most 16 x 16: narrow) or 4 x 8 (at most 32 x 32)
    // row strides of the staged A (As[8 rm][kp]) and B (Bs[K][ns]): float32, kp = K | 1 (odd) and
    // ns = 4 rn + 4; the halves (for mma.sync), kp = K rounded up to 16, plus 8, and ns = 8 rm + 8
    int kp, ns;
    int b_at;       // where the staged B starts (elements; a multiple of 4, of 8 for the halves)
    int staged;     // bytes of the staged A and B, a multiple of 16
    int stage;      // bytes of a copy stage (a multiple of 16): A's run, then B's at b_raw
    int b_raw;      // where B's run starts in a stage (a multiple of 16)
    int per_chunk;  // matrices a copy stage holds
};

// The geometry of small_stream for an M x N x K product of `item`-byte elements accumulated in acc_bytes,
// with `warps` warps in the grid, a batch of `batch` and a warp's `slice` of the block's shared memory; the
// host's stream_geometry (gpumat/matmul/variants.py) mirrors it. A stage holds each operand's run of
// per_chunk matrices and up to 15 bytes before it (its copy starts on a 16-byte boundary) and after it: as
// many matrices as fit the slice twice over beside the staged operands, at most STREAM_STAGE_BYTES of them
// (or one matrix, where one is more), and no more than the batch gives every warp (0 where one matrix does
// not fit: the kernel then stops).
__device__ __forceinline__ StreamGeometry stream_geometry(int M, int N, int K, int item, int acc_bytes,
                                                          long long batch, long long warps, int slice)
{
    StreamGeometry g;
    const bool narrow = M <= 16 && N <= 16;
    g.rm = narrow ? 2 : 4;
    g.rn = narrow ? 4 : 8;
    if (item == 2) {  // the halves, staged as they are for mma.sync: A 16 or 32 rows, K and B padded to 16
        const int kpad = (K + 15) / 16 * 16;
        g.kp = kpad + 8;  // rows 16 bytes past a multiple of 32: ldmatrix's eight rows hit eight bank groups
        g.ns = 8 * g.rm + 8;
        g.b_at = 8 * g.rm * g.kp;
        g.staged = ((g.b_at + kpad * g.ns) * 2 + 15) / 16 * 16;
    } else {
        g.kp = K | 1;
        g.ns = 4 * g.rn + 4;
        g.b_at = (8 * g.rm * g.kp + 3) / 4 * 4;
        g.staged = ((g.b_at + K * g.ns) * acc_bytes + 15) / 16 * 16;
    }
    const int a_bytes = M * K * item, b_bytes = K * N * item;
    const int room = max(0, min((slice - g.staged) / 2, max(STREAM_STAGE_BYTES, a_bytes + b_bytes) + 64) - 64);
    const long long even = (batch + warps - 1) / warps;  // the batch spread over every warp
    // (room for one matrix at least: the host's stream_fits, which the planner asks, else per_chunk 0)
    g.per_chunk = (int)min((long long)(room / (a_bytes + b_bytes)), even);
    g.b_raw = (g.per_chunk * a_bytes + 31) / 16 * 16;
    g.stage = g.b_raw + (g.per_chunk * b_bytes + 31) / 16 * 16;
    return g;
}

// Copy `count` products of an operand (rows x inner elements each, row stride ld, batch stride bs from src)
// element by element into a stage at dst, each product's rows dst_ld bytes apart and its products one after
// another, thread t of `threads`: loads four at a time, then stores.
template <class T>
__device__ __forceinline__ void copy_elements(const T* src, int rows, int inner, long long ld, long long bs, int count,
                                              unsigned char* dst, int dst_ld, int t, int threads)
{
#pragma unroll 1
    for (Walk w(count, rows, inner, t, threads); w.more();) {
        T v[4];
        int to[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            to[u] = -1;
            if (w.more()) {
                v[u] = src[w.z * bs + w.d1 * ld + w.d0];
                to[u] = (w.z * rows + w.d1) * dst_ld + w.d0 * (int)sizeof(T);
                w.next();
            }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (to[u] >= 0) *reinterpret_cast<T*>(dst + to[u]) = v[u];
    }
}

// Copy `count` matrices of an operand (rows x inner elements each, stored with row stride ld and batch
// stride bs from src) into a warp's stage at dst as one packed run, run_head(src, packed) bytes on. A
// packed, 16-byte aligned operand (ld == inner, bs == rows x inner or the batch's one matrix, base on 16
// bytes) goes as 16-byte cp.async pieces from the 16-byte boundary at or before the
// run's first byte (the previous matrix's bytes), every copy of the lane in flight at once, and what is
// left of a last piece short of 16 bytes element by element (nothing past the operand is read); any
// other operand element by element (loads four at a time, then stores).
template <class T>
__device__ __forceinline__ void copy_run(const T* src, bool packed, int rows, int inner, long long ld, long long bs,
                                        int count, T* dst, int lane)
{
#if __CUDA_ARCH__ >= 800
    if (packed) {
        const char* first = reinterpret_cast<const char*>(src);
        const int head = (int)(reinterpret_cast<unsigned long long>(first) & 15);
        const char* from = first - head;
        const int bytes = head + count * rows * inner * (int)sizeof(T), whole = bytes / 16 * 16;
        char* to = reinterpret_cast<char*>(dst);
#pragma unroll 4
        for (int at = lane * 16; at < whole; at += 32 * 16) gpumat::copy16(to + at, from + at, 16);
        // the run's last piece short of 16 bytes: element by element, a lane each, nothing past its end read
        const int e = whole + lane * (int)sizeof(T);
        if (e < bytes) *reinterpret_cast<T*>(to + e) = *reinterpret_cast<const T*>(from + e);
        return;
    }
#endif
    copy_elements(src, rows, inner, ld, bs, count, reinterpret_cast<unsigned char*>(dst), inner * (int)sizeof(T), lane,
                  32);
}

// Where a run copied by copy_run begins in its stage: the bytes its copy took before it.
template <class T>
__device__ __forceinline__ int run_head(const T* src, bool packed)
{
    return packed ? (int)(reinterpret_cast<unsigned long long>(src) & 15) : 0;
}

// A lane's RN (4 or 8) staged float32 or float64 elements from p (16-byte aligned).
template <int RN, class S>
__device__ __forceinline__ void load_row(const S* p, S (&v)[RN])
{
    if constexpr (RN == 8) {
        load8(p, v);
    } else if constexpr (sizeof(S) == 4) {
        const float4 x = *reinterpret_cast<const float4*>(p);
        v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
    } else {
        const double2 x = *reinterpret_cast<const double2*>(p), y = *reinterpret_cast<const double2*>(p + 2);
        v[0] = x.x, v[1] = x.y, v[2] = y.x, v[3] = y.y;
    }
}

// An element as the staged layout holds it: widened to the accumulation type (float32's or float64's), or as
// it is (the halves, for the tensor cores).
template <class S, class T>
__device__ __forceinline__ S staged_as(T x)
{
    if constexpr (std::is_same<S, T>::value)
        return x;
    else
        return Dtype<T>::acc(x);
}

// One operand of a stage's matrix, a rows x cols matrix in the staged layout (row stride `stride`), from
// its copy at src: stored as it is (rows of cols elements) or, FLIP, transposed (cols rows of `rows`); as
// S (float32, or the halves as they are). A stored row at a time, a lane an element of it (every side is
// at most 32): no index arithmetic beyond a multiply-add, the stored rows read without bank conflicts,
// float32's staged A written so too (its stride odd). A is M x K into As[i][kp], B K x N into Bs[kk][ns].
template <bool FLIP, class T, class S>
__device__ __forceinline__ void stage_operand(const T* src, int rows, int cols, int stride, S* dst, int lane)
{
    const int stored_rows = FLIP ? cols : rows, inner = FLIP ? rows : cols;
    if (lane >= inner) return;
    src += lane;
    dst += FLIP ? lane * stride : lane;
#pragma unroll 4
    for (int r = 0; r < stored_rows; ++r) dst[FLIP ? r : r * stride] = staged_as<S>(src[r * inner]);
}

// Stage a matrix's A and B (ta, tb: stored transposed) as S: float32 (the FP32 arithmetic's) or the
// halves themselves (the tensor cores').
template <class T, class S>
__device__ __forceinline__ void stage_matrix(const T* ra, const T* rb, int M, int N, int K, bool ta, bool tb,
                                             const StreamGeometry& g, S* As, S* Bs, int lane)
{
    if (ta)
        stage_operand<true>(ra, M, K, g.kp, As, lane);
    else
        stage_operand<false>(ra, M, K, g.kp, As, lane);
    if (tb)
        stage_operand<true>(rb, K, N, g.ns, Bs, lane);
    else
        stage_operand<false>(rb, K, N, g.ns, Bs, lane);
    __syncwarp();
}

// One element of C (row i, column j of matrix cz) through the epilogue, rounded to Out.
template <class Out, class Acc>
__device__ __forceinline__ void store_c(Out* cz, long long ldc, int i, int j, Acc v, bool plain,
                                        const gpumat::Epilogue& ep)
{
    Out* at = cz + (long long)i * ldc + j;
    *at = Dtype<Out>::from(plain ? v : ep.apply<Out>(v, i, j, at));
}

// float32 and float64: one matrix of a stage (its A and B runs ra and rb in storage order) staged as the
// accumulation type S, a lane's RM x RN outputs over all of K on the FP32 or FP64 pipes (lane l: rows RM
// (l / 4).., columns RN (l % 4)..; per k, RM scalar loads of A, rows kp apart, kp odd, and RN of B in
// 16-byte loads), then C.
template <int RM, int RN, class T, class Out, class S>
__device__ __forceinline__ void stream_matrix(const T* ra, const T* rb, Out* cz, int M, int N, int K, long long ldc,
                                              bool ta, bool tb, const StreamGeometry& g, S* As, S* Bs,
                                              const gpumat::Epilogue& ep, int lane)
{
    stage_matrix(ra, rb, M, N, K, ta, tb, g, As, Bs, lane);
    const int kp = g.kp, ns = g.ns, ly = lane / 4, lx = lane % 4;
    S acc[RM][RN] = {};
    const S* as = As + ly * RM * kp;
    const S* bs = Bs + lx * RN;
#pragma unroll 4
    for (int kk = 0; kk < K; ++kk) {
        S av[RM], bv[RN];
#pragma unroll
        for (int r = 0; r < RM; ++r) av[r] = as[r * kp + kk];
        load_row<RN>(bs + kk * ns, bv);
#pragma unroll
        for (int r = 0; r < RM; ++r)
#pragma unroll
            for (int c = 0; c < RN; ++c) acc[r][c] += av[r] * bv[c];
    }
    __syncwarp();  // the staged operands are read: the next matrix may overwrite them
    store_tile(cz, ldc, ly * RM, lx * RN, M, N, acc, ep.identity(), ep);
}

#if __CUDA_ARCH__ >= 800
// The halves: one matrix of a stage staged as it is (A as 16 or 32 rows of K padded to 16, B as K rows of
// 16 or 32 columns, zeros past M, N and K), then the warp's C on the tensor cores: mma.sync m16n8k16 with
// float32 accumulators, fragments by ldmatrix (A .x4, B .x4.trans); MT x NT tiles of 16 x 8 (1 x 2 for a
// C of at most 16 x 16, else 2 x 4), then C (d0 d1 at row l / 4, columns 2 (l % 4) and on; d2 d3 8 rows on).
template <bool NARROW, class T, class Out>
__device__ __forceinline__ void stream_matrix_tc(const T* ra, const T* rb, Out* cz, int M, int N, int K,
                                                 long long ldc, bool ta, bool tb, const StreamGeometry& g, T* As,
                                                 T* Bs, const gpumat::Epilogue& ep, int lane)
{
    constexpr int MT = NARROW ? 1 : 2, NT = NARROW ? 2 : 4;
    stage_matrix(ra, rb, M, N, K, ta, tb, g, As, Bs, lane);
    float acc[MT][NT][4] = {};
    const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8;  // the row (A) or k row (B) this lane points at
    const int lhalf = lane >> 4;                          // which 8 columns of the 16
    const uint32_t a_base = gpumat::smem_addr(As), b_base = gpumat::smem_addr(Bs);
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t af[MT][4], bf[NT / 2][4];
#pragma unroll
        for (int i = 0; i < MT; ++i)
            gpumat::ldmatrix_x4(af[i], a_base + 2 * ((16 * i + lrow) * g.kp + k0 + 8 * lhalf));
#pragma unroll
        for (int jj = 0; jj < NT / 2; ++jj)
            gpumat::ldmatrix_x4_trans(bf[jj], b_base + 2 * ((k0 + lrow) * g.ns + 16 * jj + 8 * lhalf));
#pragma unroll
        for (int i = 0; i < MT; ++i)
#pragma unroll
            for (int j = 0; j < NT; ++j)
                gpumat::Mma<T>::run(acc[i][j], af[i], bf[j / 2][2 * (j & 1)], bf[j / 2][2 * (j & 1) + 1]);
    }
    __syncwarp();  // the staged operands are read: the next matrix may overwrite them
    const bool plain = ep.identity();
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int row = 16 * i + lane / 4 + 8 * (e / 2), col = 8 * j + 2 * (lane % 4) + e % 2;
                if (row < M && col < N) store_c(cz, ldc, row, col, acc[i][j][e], plain, ep);
            }
}
#endif

#if __CUDA_ARCH__ >= 800
// Two neighbouring elements of C at `at` (aligned to two elements), rounded to Out and written as one store
// (plain epilogue only).
template <class Out>
__device__ __forceinline__ void store_c_pair(Out* at, float v0, float v1)
{
    if constexpr (sizeof(Out) == 4) {
        *reinterpret_cast<float2*>(at) = make_float2(v0, v1);
    } else {  // both halves packed into one 32-bit store
        const Out x = Dtype<Out>::from(v0), y = Dtype<Out>::from(v1);
        const uint32_t lo = reinterpret_cast<const unsigned short&>(x), hi = reinterpret_cast<const unsigned short&>(y);
        *reinterpret_cast<uint32_t*>(at) = lo | hi << 16;
    }
}

// Where a lane's ldmatrix rows and C elements lie, for the halves' aligned shapes (M, N and K multiples of
// 8) read in place: the same for every matrix, so set once a launch. A's fragment of row tile t at k step s
// is a_at[t] + s a_step bytes into the matrix's copy (+ a_tail on a last step of 8), B's of column tile pair
// t b_at[t] + s b_step (+ b_tail). Layouts: A stored M x K (rows 16 t + lane % 16 at k 8 (lane / 16)) or
// K x M read .trans (k rows lane % 8 + 8 (lane / 16) at columns 16 t + 8 bit3); B stored K x N read .trans
// (k rows lane % 16 at columns 16 t + 8 (lane / 16)) or N x K (rows 16 t + lane % 8 + 8 (lane / 16) at k
// 8 bit3). Rows and columns past M and N are clamped onto the last ones (their outputs are never stored);
// on a last k step of 8 the lanes of k + 8..15 read k's first 8 again (tail: those pieces are zeroed).
// C: the lane's element (lane / 4, 2 (lane % 4)) of each 8 x 8 piece at c_at, pieces 8 ldc rows apart.
struct InPlaceLanes {
    uint32_t a_at[2], a_step, a_tail, b_at[2], b_step, b_tail;
    long long c_at;
    uint32_t pieces;  // bit r (0-3): C's rows 8 r.. are inside M; bit 4 + c: its columns 8 c.. inside N
};

__device__ __forceinline__ InPlaceLanes in_place_lanes(int M, int N, int K, long long ldc, bool ta, bool tb,
                                                     int lane)
{
    InPlaceLanes d;
    const int r8 = lane & 7, bit3 = (lane >> 3) & 1, bit4 = lane >> 4;
    const int a_k = ta ? r8 + 8 * bit4 : 8 * bit4, b_k = tb ? 8 * bit3 : r8 + 8 * bit3;
    const int a_kstride = ta ? M : 1, b_kstride = tb ? 1 : N;  // elements between neighbouring k
#pragma unroll
    for (int t = 0; t < 2; ++t) {
        const int a_rc = ta ? min(16 * t + 8 * bit3, M - 8) : min(16 * t + r8 + 8 * bit3, M - 1) * K;
        const int b_rc = tb ? min(16 * t + r8 + 8 * bit4, N - 1) * K : min(16 * t + 8 * bit4, N - 8);
        d.a_at[t] = 2 * (a_rc + a_k * a_kstride);
        d.b_at[t] = 2 * (b_rc + b_k * b_kstride);
    }
    d.a_step = 2 * 16 * a_kstride;
    d.b_step = 2 * 16 * b_kstride;
    d.a_tail = bit4 ? (uint32_t)(-2 * 8 * a_kstride) : 0u;  // the lanes of k + 8..15
    d.b_tail = bit3 ? (uint32_t)(-2 * 8 * b_kstride) : 0u;
    d.c_at = (long long)(lane / 4) * ldc + 2 * (lane % 4);
    d.pieces = ((1u << (M / 8)) - 1) | ((1u << (N / 8)) - 1) << 4;
    return d;
}

// The k loop of one row tile of 16 over NT column tiles of 8 (NT / 2 pairs): A's fragments ldmatrix'd from
// a_addr (.trans where ta), each pair's B fragments from b_addr[jj] (.trans where B is not transposed), both
// stepping a_step and b_step bytes a k step of 16; a last step of 8 (K an odd multiple of 8) reads at the
// tails' offsets and zeroes the pieces of k + 8..15 (A's third and fourth, B's second and fourth).
template <int NT, class T>
__device__ __forceinline__ void row_tile_products(float (&acc)[NT][4], uint32_t a_addr, uint32_t b_addr0,
                                                  uint32_t b_addr1, int K, bool ta, bool tb, uint32_t a_step,
                                                  uint32_t b_step, uint32_t a_tail, uint32_t b_tail)
{
#pragma unroll 1
    for (int k0 = 0; k0 < K; k0 += 16) {
        const bool tail = k0 + 16 > K;
        uint32_t af[4], bf[NT / 2][4];
        if (ta)
            gpumat::ldmatrix_x4_trans(af, a_addr + (tail ? a_tail : 0u));
        else
            gpumat::ldmatrix_x4(af, a_addr + (tail ? a_tail : 0u));
#pragma unroll
        for (int jj = 0; jj < NT / 2; ++jj) {
            const uint32_t at = (jj ? b_addr1 : b_addr0) + (tail ? b_tail : 0u);
            if (tb)
                gpumat::ldmatrix_x4(bf[jj], at);
            else
                gpumat::ldmatrix_x4_trans(bf[jj], at);
        }
        if (tail) {
            af[2] = af[3] = 0u;
#pragma unroll
            for (int jj = 0; jj < NT / 2; ++jj) bf[jj][1] = bf[jj][3] = 0u;
        }
#pragma unroll
        for (int j = 0; j < NT; ++j)
            gpumat::Mma<T>::run(acc[j], af, bf[j / 2][2 * (j & 1)], bf[j / 2][2 * (j & 1) + 1]);
        a_addr += a_step;
        b_addr0 += b_step;
        b_addr1 += b_step;
    }
}

// The halves' aligned shapes: one matrix of a stage read in place by ldmatrix (no staging; .trans where the
// layout asks), mma.sync m16n8k16 as stream_matrix_tc, one row tile of 16 at a time (its B fragments loaded
// again for the second: fewer registers than both at once). A last k step of 8 (K an odd multiple of 8)
// runs with the pieces of k + 8..15 zeroed (A's third and fourth, B's second and fourth). M and N multiples
// of 8: a piece of C is all inside or all outside (no per-lane bounds); stored in pairs of neighbours where
// `pairs` (plain epilogue, every matrix's C rows and start two elements aligned), else through the epilogue.
template <bool NARROW, class T, class Out>
__device__ __forceinline__ void stream_matrix_in_place(uint32_t a_base, uint32_t b_base, Out* cz, int M, int N,
                                                       int K, long long ldc, bool ta, bool tb,
                                                       const InPlaceLanes& d, bool pairs,
                                                       const gpumat::Epilogue& ep, int lane)
{
    constexpr int MT = NARROW ? 1 : 2, NT = NARROW ? 2 : 4;
#pragma unroll
    for (int i = 0; i < MT; ++i) {
        if (!(d.pieces >> (2 * i) & 1)) break;  // a row tile past M
        float acc[NT][4] = {};
        row_tile_products<NT, T>(acc, a_base + d.a_at[i], b_base + d.b_at[0], b_base + d.b_at[1], K, ta, tb, d.a_step,
                                 d.b_step, d.a_tail, d.b_tail);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (!(d.pieces >> (2 * i + h) & 1)) break;  // rows past M
            Out* row = cz + d.c_at + (16 * i + 8 * h) * ldc;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                if (!(d.pieces >> (4 + j) & 1)) break;  // columns past N
                if (pairs) {
                    store_c_pair(row + 8 * j, acc[j][2 * h], acc[j][2 * h + 1]);
                } else {
                    const int r = 16 * i + 8 * h + lane / 4, c = 8 * j + 2 * (lane % 4);
                    store_c(cz, ldc, r, c, acc[j][2 * h], false, ep);
                    store_c(cz, ldc, r, c + 1, acc[j][2 * h + 1], false, ep);
                }
            }
        }
    }
}
#endif

#if __CUDA_ARCH__ >= 800
// small_stream's walk: each warp its chunks c, c + warps, ... through two copy stages, the next chunk's
// copies in flight while compute(ra, rb, z0, here) computes this chunk's `here` matrices from their copies
// at ra and rb (the first of the chunk's batch is z0).
template <class T, class Compute>
__device__ __forceinline__ void stream_chunks(const T* __restrict__ A, const T* __restrict__ B, int M, int N, int K,
                                              long long lda, long long ldb, int batch, bool ta, bool tb, long long sa,
                                              long long sb, const StreamGeometry& g, unsigned char* stages,
                                              Compute compute)
{
    const int lane = threadIdx.x % 32;
    const long long warps = (long long)gridDim.x * (STREAM_THREADS / 32);
    const long long first_warp = (long long)blockIdx.x * (STREAM_THREADS / 32) + threadIdx.x / 32;
    const int a_rows = ta ? K : M, a_inner = ta ? M : K, b_rows = tb ? N : K, b_inner = tb ? K : N;
    // a packed operand: its batch one run of whole matrices (or one matrix for all), 16-byte aligned
    const bool a_packed = lda == a_inner && (sa == (long long)M * K || sa == 0) &&
                          (reinterpret_cast<unsigned long long>(A) & 15) == 0;
    const bool b_packed = ldb == b_inner && (sb == (long long)K * N || sb == 0) &&
                          (reinterpret_cast<unsigned long long>(B) & 15) == 0;
    const long long chunks = (batch + g.per_chunk - 1) / g.per_chunk;
    // copy chunk c into stage s as one group of cp.async (or plain copies): each operand's run of its
    // matrices (a shared operand's one matrix)
    const auto issue = [&](long long c, int s) {
        const long long z0 = c * g.per_chunk;
        const int here = (int)min((long long)g.per_chunk, batch - z0);
        T* ra = reinterpret_cast<T*>(stages + s * g.stage);
        T* rb = reinterpret_cast<T*>(stages + s * g.stage + g.b_raw);
        copy_run(A + z0 * sa, a_packed, a_rows, a_inner, lda, sa, sa ? here : 1, ra, lane);
        copy_run(B + z0 * sb, b_packed, b_rows, b_inner, ldb, sb, sb ? here : 1, rb, lane);
        gpumat::copy_commit();
    };
    long long c = first_warp;
    if (c < chunks) issue(c, 0);
    for (int i = 0; c < chunks; ++i, c += warps) {
        const int s = i & 1;
        if (c + warps < chunks) {
            issue(c + warps, s ^ 1);  // the next chunk's copies fly while this one computes
            gpumat::copy_wait<1>();
        } else {
            gpumat::copy_wait<0>();
        }
        __syncwarp();
        const long long z0 = c * g.per_chunk;
        const T* ra = reinterpret_cast<const T*>(stages + s * g.stage + run_head(A + z0 * sa, a_packed));
        const T* rb = reinterpret_cast<const T*>(stages + s * g.stage + g.b_raw + run_head(B + z0 * sb, b_packed));
        compute(ra, rb, z0, (int)min((long long)g.per_chunk, batch - z0));
        __syncwarp();  // this stage is read: the copy after next may fill it
    }
}

// small_stream: each matrix staged (zeros past M, N and K) and computed from the staged copy.
template <bool NARROW, class T, class Out>
__device__ __forceinline__ void small_stream(const T* __restrict__ A, const T* __restrict__ B, Out* __restrict__ C,
                                             int M, int N, int K, long long lda, long long ldb, long long ldc,
                                             int batch, bool ta, bool tb, long long sa, long long sb, long long sc,
                                             const gpumat::Epilogue& ep, const StreamGeometry& g, unsigned char* slice)
{
    // what the staged layout holds: the halves as they are, float32 and float64 as their accumulation type
    using S = typename std::conditional<sizeof(T) == 2, T, typename Dtype<T>::Acc>::type;
    const int lane = threadIdx.x % 32;
    S* As = reinterpret_cast<S*>(slice);
    S* Bs = As + g.b_at;
    // the staged rows of A past M, columns of B past N and (halves) K past K stay zero: every lane runs
    // the same loop
    for (int e = lane; e < g.staged / 4; e += 32) reinterpret_cast<uint32_t*>(slice)[e] = 0u;
    __syncwarp();
    stream_chunks(A, B, M, N, K, lda, ldb, batch, ta, tb, sa, sb, g, slice + g.staged,
                  [&](const T* ra, const T* rb, long long z0, int here) {
                      for (int p = 0; p < here; ++p) {
                          const T* a = ra + (sa ? p * M * K : 0);
                          const T* b = rb + (sb ? p * K * N : 0);
                          if constexpr (sizeof(T) == 2)
                              stream_matrix_tc<NARROW>(a, b, C + (z0 + p) * sc, M, N, K, ldc, ta, tb, g, As, Bs, ep,
                                                       lane);
                          else
                              stream_matrix<NARROW ? 2 : 4, NARROW ? 4 : 8>(a, b, C + (z0 + p) * sc, M, N, K, ldc, ta,
                                                                            tb, g, As, Bs, ep, lane);
                      }
                  });
}

// small_stream on the halves' aligned shapes (M, N and K multiples of 8): nothing staged, each matrix read
// where its copy lies (rows of a multiple of 8 elements stay 16-byte aligned in a stage).
template <bool NARROW, class T, class Out>
__device__ __forceinline__ void small_stream_in_place(const T* __restrict__ A, const T* __restrict__ B,
                                                      Out* __restrict__ C, int M, int N, int K, long long lda,
                                                      long long ldb, long long ldc, int batch, bool ta, bool tb,
                                                      long long sa, long long sb, long long sc,
                                                      const gpumat::Epilogue& ep, const StreamGeometry& g,
                                                      unsigned char* slice)
{
    const int lane = threadIdx.x % 32;
    const InPlaceLanes lanes = in_place_lanes(M, N, K, ldc, ta, tb, lane);
    const bool pairs = ep.identity() && ldc % 2 == 0 && sc % 2 == 0 &&
                       (reinterpret_cast<unsigned long long>(C) & (2 * sizeof(Out) - 1)) == 0;
    const uint32_t a_bytes = sa ? 2 * M * K : 0, b_bytes = sb ? 2 * K * N : 0;
    stream_chunks(A, B, M, N, K, lda, ldb, batch, ta, tb, sa, sb, g, slice + g.staged,
                  [&](const T* ra, const T* rb, long long z0, int here) {
                      const uint32_t a0 = gpumat::smem_addr(ra), b0 = gpumat::smem_addr(rb);
#pragma unroll 1
                      for (int p = 0; p < here; ++p)
                          stream_matrix_in_place<NARROW, T>(a0 + p * a_bytes, b0 + p * b_bytes, C + (z0 + p) * sc, M,
                                                            N, K, ldc, ta, tb, lanes, pairs, ep, lane);
                  });
}
#endif

// small_stream (IN_PLACE false: every matrix staged) or small_stream_in_place (the halves' shapes of M, N
// and K multiples of 8, read where their copies lie), with the tiles for the size of C (two bodies).
template <bool IN_PLACE, class T, class Out>
__device__ __forceinline__ void stream_any_layout(const T* A, const T* B, Out* C, int M, int N, int K, long long lda,
                                                  long long ldb, long long ldc, int batch, int ta, int tb,
                                                  long long sa, long long sb, long long sc, const gpumat::Epilogue& ep,
                                                  unsigned char* smem)
{
    using Acc = typename Dtype<T>::Acc;
    // a warp's slice: a quarter of the block's dynamic shared memory, which the host sizes for the product
    // (14 KiB at four blocks an SM, or more for the float32 and float64 products past it, at fewer)
    uint32_t smem_bytes;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(smem_bytes));
    const int slice_bytes = (int)smem_bytes / (STREAM_THREADS / 32) / 16 * 16;
    const StreamGeometry g = stream_geometry(M, N, K, (int)sizeof(T), (int)sizeof(Acc), batch,
                                             (long long)gridDim.x * (STREAM_THREADS / 32), slice_bytes);
#if __CUDA_ARCH__ >= 800
    if (g.per_chunk == 0) __trap();  // a shape the planner refuses (stream_fits): no stage holds a matrix
    unsigned char* slice = smem + threadIdx.x / 32 * slice_bytes;
#define GPUMAT_STREAM_BODY(WALK, NARROW) \
    WALK<NARROW>(A, B, C, M, N, K, lda, ldb, ldc, batch, ta != 0, tb != 0, sa, sb, sc, ep, g, slice)
    if constexpr (IN_PLACE) {
        if (M % 8 != 0 || N % 8 != 0 || K % 8 != 0) __trap();  // a shape the planner refuses
        if (g.rm == 2)
            GPUMAT_STREAM_BODY(small_stream_in_place, true);
        else
            GPUMAT_STREAM_BODY(small_stream_in_place, false);
    } else {
        if (g.rm == 2)
            GPUMAT_STREAM_BODY(small_stream, true);
        else
            GPUMAT_STREAM_BODY(small_stream, false);
    }
#undef GPUMAT_STREAM_BODY
#else
    __trap();  // the row needs sm_80 (its min_arch): the planner never launches it here
#endif
}

// Either kernel with A and B in their layouts (four bodies).
template <bool WIDE, class T, class Out>
__device__ __forceinline__ void any_layout(const T* A, const T* B, Out* C, int M, int N, int K, long long lda,
                                           long long ldb, long long ldc, int batch, int ta, int tb, long long sa,
                                           long long sb, long long sc, const gpumat::Epilogue& ep,
                                           typename Dtype<T>::Acc* smem)
{
#define GPUMAT_SMALL_BODY(TA, TB)                                                                 \
    if constexpr (WIDE)                                                                           \
        small_wide<TA, TB>(A, B, C, M, N, K, lda, ldb, ldc, batch, sa, sb, sc, ep, smem);         \
    else                                                                                          \
        small<TA, TB>(A, B, C, M, N, K, lda, ldb, ldc, batch, sa, sb, sc, ep, smem);
    if (!ta && !tb) {
        GPUMAT_SMALL_BODY(false, false)
    } else if (ta && !tb) {
        GPUMAT_SMALL_BODY(true, false)
    } else if (!ta) {
        GPUMAT_SMALL_BODY(false, true)
    } else {
        GPUMAT_SMALL_BODY(true, true)
    }
#undef GPUMAT_SMALL_BODY
}

// --- small_stream_block ---------------------------------------------------------------------------------
// The halves' products of M, N and K multiples of 8 up to 64 in any layout: each block walks its chunks of
// the batch (chunk c, c + blocks, ...) through two copy stages of its 56 KiB, every thread's cp.async of the
// next chunk in flight while its four warps compute this one. The work of a chunk is its products' row
// tiles of 16 (M / 16 rounded up a product), unit u on warp u % 4: a 64^3 product is four warps' work, a
// chunk of 16^3 products a product a warp. Each unit reads its product where the copy put it (no staging):
// the stored rows spaced an odd number of 16-byte pieces apart, so ldmatrix's eight rows fall on eight bank
// groups (64 halves back to back put them on one), .trans where the layout asks; mma.sync m16n8k16, a group
// of up to 32 columns at a time.
constexpr int BLOCK_MULTIPLE = 8;
constexpr int BLOCK_MAX = 64;
constexpr int BLOCK_STAGE = STREAM_SMEM / 2;  // bytes of a copy stage: one 64^3 product with its rows spaced

// The bytes a stored row of `inner` halves (a multiple of 8) takes in a stage: its 16-byte pieces, one more
// where they are even.
__device__ __forceinline__ int spaced_row_bytes(int inner) { return 16 * (inner / 8 | 1); }

struct BlockGeometry {
    int a_ld, b_ld;        // bytes from one stored row of A (of B) to the next in a stage
    int a_bytes, b_bytes;  // a product's A (B) in a stage
    int b_raw;             // where B's products start in a stage
    int stage;             // bytes of a stage's A and B
    int per_chunk;         // products a stage holds (0: none fits; the planner refuses such a shape)
};

// small_stream_block's stages for an M x N x K product (A and B stored transposed where ta and tb), a batch
// of `batch` over `blocks` blocks; the host's block_geometry (gpumat/matmul/variants.py) mirrors it.
__device__ __forceinline__ BlockGeometry block_geometry(int M, int N, int K, bool ta, bool tb, long long batch,
                                                        long long blocks)
{
    BlockGeometry g;
    g.a_ld = spaced_row_bytes(ta ? M : K);
    g.b_ld = spaced_row_bytes(tb ? K : N);
    g.a_bytes = (ta ? K : M) * g.a_ld;
    g.b_bytes = (tb ? N : K) * g.b_ld;
    // the batch spread over every block, in as few chunks a block as a stage allows, those chunks even: the
    // busiest block then walks no more products than the batch over the blocks (rounded up), where a full
    // stage a chunk left a tail of chunks to some blocks (65537 8^3 products: 224 on some, 124 on average)
    const long long even = (batch + blocks - 1) / blocks, fits = BLOCK_STAGE / (g.a_bytes + g.b_bytes);
    const long long walks = fits ? (even + fits - 1) / fits : 1;
    g.per_chunk = fits ? (int)((even + walks - 1) / walks) : 0;
    g.b_raw = g.per_chunk * g.a_bytes;
    g.stage = g.b_raw + g.per_chunk * g.b_bytes;
    return g;
}

// Copy `count` products of an operand (rows x inner halves each, row stride ld, batch stride bs) into a
// stage at dst, their stored rows dst_ld bytes apart, thread t of `threads`: a packed operand (every
// product and row then on 16 bytes) as 16-byte cp.async pieces, a thread's pieces `threads` apart (the row
// of piece p is p / per_row, by a multiply); any other element by element.
template <class T>
__device__ __forceinline__ void copy_rows_spaced(const T* src, bool packed, int rows, int inner, long long ld,
                                                long long bs, int count, unsigned char* dst, int dst_ld, int t,
                                                int threads)
{
#if __CUDA_ARCH__ >= 800
    if (packed) {
        const char* from = reinterpret_cast<const char*>(src);
        const uint32_t per_row = inner * sizeof(T) / 16, pieces = count * rows * per_row;
        // p / per_row as the high half of p x ceil(2^32 / per_row): exact for p below 2^16 and per_row at
        // most 8 (a stage holds at most 2^11 pieces)
        const uint32_t magic = per_row == 1 ? 0u : (uint32_t)((0x100000000ull + per_row - 1) / per_row);
#pragma unroll 4
        for (uint32_t p = t; p < pieces; p += threads) {
            const uint32_t r = per_row == 1 ? p : __umulhi(p, magic);
            gpumat::copy16(dst + r * dst_ld + (p - r * per_row) * 16, from + p * 16, 16);
        }
        return;
    }
#endif
    copy_elements(src, rows, inner, ld, bs, count, dst, dst_ld, t, threads);
}

#if __CUDA_ARCH__ >= 800
// Where a lane's ldmatrix rows and C elements lie in small_stream_block's products (InPlaceLanes' layouts,
// for rows a_ld and b_ld bytes apart and up to 64 a side): A's fragment of row tile t at k step s is
// a_at(t) + s a_step bytes into the product's copy (+ a_tail on a last step of 8), B's of column tile pair t
// (16 columns) b_at(t) + s b_step (+ b_tail); rows and columns past M and N clamped onto the last ones.
struct SpacedLanes {
    int a_row, a_last, b_col, b_last;  // the lane's row (column) in tile t: min(16 t + a_row, a_last)
    uint32_t a_row_bytes, a_k, b_col_bytes, b_k;
    uint32_t a_step, a_tail, b_step, b_tail;
    long long c_at;
    uint32_t pieces;  // bit r (0-7): C's rows 8 r.. are inside M; bit 8 + c: its columns 8 c.. inside N

    __device__ __forceinline__ uint32_t a_at(int t) const { return min(16 * t + a_row, a_last) * a_row_bytes + a_k; }
    __device__ __forceinline__ uint32_t b_at(int t) const { return min(16 * t + b_col, b_last) * b_col_bytes + b_k; }
    __device__ __forceinline__ bool rows_in(int r8) const { return pieces >> r8 & 1; }
    __device__ __forceinline__ bool columns_in(int c8) const { return pieces >> (8 + c8) & 1; }
};

__device__ __forceinline__ SpacedLanes spaced_lanes(int M, int N, long long ldc, bool ta, bool tb,
                                                   const BlockGeometry& g, int lane)
{
    SpacedLanes d;
    const int r8 = lane & 7, bit3 = (lane >> 3) & 1, bit4 = lane >> 4;
    const int a_kstride = ta ? g.a_ld : 2, b_kstride = tb ? 2 : g.b_ld;  // bytes between neighbouring k
    d.a_row = ta ? 8 * bit3 : r8 + 8 * bit3;
    d.a_last = ta ? M - 8 : M - 1;
    d.a_row_bytes = ta ? 2 : g.a_ld;
    d.a_k = (ta ? r8 + 8 * bit4 : 8 * bit4) * a_kstride;
    d.b_col = tb ? r8 + 8 * bit4 : 8 * bit4;
    d.b_last = tb ? N - 1 : N - 8;
    d.b_col_bytes = tb ? g.b_ld : 2;
    d.b_k = (tb ? 8 * bit3 : r8 + 8 * bit3) * b_kstride;
    d.a_step = 16 * a_kstride;
    d.b_step = 16 * b_kstride;
    d.a_tail = bit4 ? (uint32_t)(-8 * a_kstride) : 0u;  // the lanes of k + 8..15
    d.b_tail = bit3 ? (uint32_t)(-8 * b_kstride) : 0u;
    d.c_at = (long long)(lane / 4) * ldc + 2 * (lane % 4);
    d.pieces = ((1u << (M / 8)) - 1) | ((1u << (N / 8)) - 1) << 8;
    return d;
}

// A quad's 4 x 4 words transposed (the four lanes 4 q .. 4 q + 3 of a warp): word j of the quad's lane p
// becomes word p of its lane j, in two rounds of exchanges, with the lane two apart and then one apart.
__device__ __forceinline__ void quad_transpose(uint32_t (&w)[4], int lane)
{
    const bool odd_pair = lane & 2, odd = lane & 1;
#pragma unroll
    for (int j = 0; j < 2; ++j) {  // lanes 0, 1 keep words 0, 1 and take their partners' 0, 1 as 2, 3
        const uint32_t got = __shfl_xor_sync(0xffffffffu, odd_pair ? w[j] : w[j + 2], 2);
        if (odd_pair)
            w[j] = got;
        else
            w[j + 2] = got;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // then each lane keeps its own column's word and takes its partner's
        const uint32_t got = __shfl_xor_sync(0xffffffffu, odd ? w[2 * r] : w[2 * r + 1], 1);
        if (odd)
            w[2 * r] = got;
        else
            w[2 * r + 1] = got;
    }
}

// How small_stream_block stores C: element by element through the epilogue, neighbours in pairs, or (C's
// rows on 16 bytes) a row's eight columns of a tile at once, a quad's words transposed so that each of its
// lanes holds one column tile's row: whole 32-byte sectors, where pairs fill half of eight.
enum class CStores { elements, pairs, rows };

// One unit of small_stream_block: row tile i (16 rows) of a product whose copy lies at a_base and b_base,
// over every group of NT column tiles of 8 inside N (2 for N up to 16, else 4), then C as `stores` says.
template <bool NARROW, class T, class Out>
__device__ __forceinline__ void block_row_tile(uint32_t a_base, uint32_t b_base, Out* cz, int i, int K, long long ldc,
                                               bool ta, bool tb, const SpacedLanes& d, CStores stores,
                                               const gpumat::Epilogue& ep, int lane)
{
    constexpr int NT = NARROW ? 2 : 4, GROUPS = BLOCK_MAX / (8 * NT);
#pragma unroll 1
    for (int g = 0; g < GROUPS && d.columns_in(NT * g); ++g) {  // the column groups inside N
        float acc[NT][4] = {};
        row_tile_products<NT, T>(acc, a_base + d.a_at(i), b_base + d.b_at(NT / 2 * g), b_base + d.b_at(NT / 2 * g + 1),
                                 K, ta, tb, d.a_step, d.b_step, d.a_tail, d.b_tail);
        // whole rows where the group's four column tiles lie inside N (a part group or a narrow product
        // stores in pairs: its shuffles cost more there than the sectors they fill save)
        if (!NARROW && stores == CStores::rows && d.columns_in(NT * g + NT - 1)) {
            const int q = lane % 4, c8 = NT * g + q;  // the column tile this lane stores
            // (q < NT and c8 inside N hold here; spelt out as the stores' guard, ptxas fits this form in the
            // 128 registers of four blocks an SM, where without it one register spilled)
            const bool mine = q < NT && d.columns_in(c8);
#pragma unroll 1
            for (int h = 0; h < 2; ++h) {
                if (!d.rows_in(2 * i + h)) break;  // rows past M
                Out* at = cz + (16 * i + 8 * h + lane / 4) * ldc + 8 * c8;
                // (selects on h: indexing acc by it would put acc in local memory)
                if constexpr (sizeof(Out) == 2) {
                    uint32_t w[4] = {};
#pragma unroll
                    for (int j = 0; j < NT; ++j)
                        w[j] = gpumat::pack_pair<Out>(h ? acc[j][2] : acc[j][0], h ? acc[j][3] : acc[j][1]);
                    quad_transpose(w, lane);
                    if (mine) *reinterpret_cast<uint4*>(at) = make_uint4(w[0], w[1], w[2], w[3]);
                } else {
                    uint32_t x[4] = {}, y[4] = {};
#pragma unroll
                    for (int j = 0; j < NT; ++j) {
                        x[j] = __float_as_uint(h ? acc[j][2] : acc[j][0]);
                        y[j] = __float_as_uint(h ? acc[j][3] : acc[j][1]);
                    }
                    quad_transpose(x, lane);
                    quad_transpose(y, lane);
                    if (mine) {
                        *reinterpret_cast<uint4*>(at) = make_uint4(x[0], y[0], x[1], y[1]);
                        *reinterpret_cast<uint4*>(at + 4) = make_uint4(x[2], y[2], x[3], y[3]);
                    }
                }
            }
            continue;
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            if (!d.rows_in(2 * i + h)) break;  // rows past M
            Out* row = cz + d.c_at + (16 * i + 8 * h) * ldc;
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int c8 = NT * g + j;
                if (!d.columns_in(c8)) break;  // columns past N
                if (stores != CStores::elements) {
                    store_c_pair(row + 8 * c8, acc[j][2 * h], acc[j][2 * h + 1]);
                } else {
                    const int r = 16 * i + 8 * h + lane / 4, c = 8 * c8 + 2 * (lane % 4);
                    store_c(cz, ldc, r, c, acc[j][2 * h], false, ep);
                    store_c(cz, ldc, r, c + 1, acc[j][2 * h + 1], false, ep);
                }
            }
        }
    }
}

// small_stream_block's walk (see above), with the column groups for N (NARROW: N up to 16).
template <bool NARROW, class T, class Out>
__device__ __forceinline__ void small_stream_block(const T* __restrict__ A, const T* __restrict__ B,
                                                   Out* __restrict__ C, int M, int N, int K, long long lda,
                                                   long long ldb, long long ldc, int batch, bool ta, bool tb,
                                                   long long sa, long long sb, long long sc,
                                                   const gpumat::Epilogue& ep, const BlockGeometry& g,
                                                   unsigned char* smem)
{
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    const SpacedLanes d = spaced_lanes(M, N, ldc, ta, tb, g, lane);
    const bool pairs = ep.identity() && ldc % 2 == 0 && sc % 2 == 0 &&
                       (reinterpret_cast<unsigned long long>(C) & (2 * sizeof(Out) - 1)) == 0;
    const bool rows = ep.identity() && ldc * sizeof(Out) % 16 == 0 && sc * sizeof(Out) % 16 == 0 &&
                      (reinterpret_cast<unsigned long long>(C) & 15) == 0;
    const CStores stores = rows ? CStores::rows : pairs ? CStores::pairs : CStores::elements;
    const int a_rows = ta ? K : M, a_inner = ta ? M : K, b_rows = tb ? N : K, b_inner = tb ? K : N;
    // a packed operand: its batch one run of whole products (or one product for all), 16-byte aligned
    const bool a_packed = lda == a_inner && (sa == (long long)M * K || sa == 0) &&
                          (reinterpret_cast<unsigned long long>(A) & 15) == 0;
    const bool b_packed = ldb == b_inner && (sb == (long long)K * N || sb == 0) &&
                          (reinterpret_cast<unsigned long long>(B) & 15) == 0;
    const uint32_t a_next = sa ? g.a_bytes : 0, b_next = sb ? g.b_bytes : 0;  // a shared operand: one for all
    const int tiles = (M + 15) / 16;
    const long long chunks = (batch + g.per_chunk - 1) / g.per_chunk;
    // chunk c into stage s, one group of cp.async a thread (or plain copies)
    const auto issue = [&](long long c, int s) {
        const long long z0 = c * g.per_chunk;
        const int here = (int)min((long long)g.per_chunk, batch - z0);
        unsigned char* stage = smem + s * g.stage;
        copy_rows_spaced(A + z0 * sa, a_packed, a_rows, a_inner, lda, sa, sa ? here : 1, stage, g.a_ld, t,
                         STREAM_THREADS);
        copy_rows_spaced(B + z0 * sb, b_packed, b_rows, b_inner, ldb, sb, sb ? here : 1, stage + g.b_raw, g.b_ld,
                         t, STREAM_THREADS);
        gpumat::copy_commit();
    };
    long long c = blockIdx.x;
    if (c < chunks) issue(c, 0);
    for (int i = 0; c < chunks; ++i, c += gridDim.x) {
        const int s = i & 1;
        if (c + gridDim.x < chunks) {
            issue(c + gridDim.x, s ^ 1);  // the next chunk's copies fly while this one computes
            gpumat::copy_wait<1>();
        } else {
            gpumat::copy_wait<0>();
        }
        __syncthreads();  // every thread's copies of this chunk have landed
        const long long z0 = c * g.per_chunk;
        const int here = (int)min((long long)g.per_chunk, batch - z0);
        const uint32_t a0 = gpumat::smem_addr(smem + s * g.stage), b0 = a0 + g.b_raw;
#pragma unroll 1
        for (int u = warp; u < here * tiles; u += STREAM_THREADS / 32) {
            const int p = u / tiles;
            block_row_tile<NARROW, T>(a0 + p * a_next, b0 + p * b_next, C + (z0 + p) * sc, u - p * tiles, K, ldc, ta,
                                      tb, d, stores, ep, lane);
        }
        __syncthreads();  // this stage is read: the copy after next may fill it
    }
}
#endif

template <class T, class Out>
__device__ __forceinline__ void stream_block_any_layout(const T* A, const T* B, Out* C, int M, int N, int K,
                                                        long long lda, long long ldb, long long ldc, int batch,
                                                        int ta, int tb, long long sa, long long sb, long long sc,
                                                        const gpumat::Epilogue& ep, unsigned char* smem)
{
#if __CUDA_ARCH__ >= 800
    const BlockGeometry g = block_geometry(M, N, K, ta != 0, tb != 0, batch, gridDim.x);
    const int step = BLOCK_MULTIPLE, most = BLOCK_MAX;
    if (M % step != 0 || N % step != 0 || K % step != 0 || max(M, max(N, K)) > most || g.per_chunk == 0)
        __trap();  // a shape the planner refuses
    if (N <= 16)
        small_stream_block<true>(A, B, C, M, N, K, lda, ldb, ldc, batch, ta != 0, tb != 0, sa, sb, sc, ep, g, smem);
    else
        small_stream_block<false>(A, B, C, M, N, K, lda, ldb, ldc, batch, ta != 0, tb != 0, sa, sb, sc, ep, g, smem);
#else
    __trap();  // the row needs sm_80 (its min_arch): the planner never launches it here
#endif
}

}  // namespace

// matmul_small_<dtype>[_f32out](A, B, C, M, N, K, lda, ldb, ldc, batch, ta, tb, batch_a, batch_b, batch_c,
// alpha, beta, bias, bias_step, bias_along, bias_f32, activation): see the header; M N <= 256, one output a
// thread, four matrices' outputs a thread. matmul_small_<dtype>[_f32out]_wide: the same for M, N <= 64,
// register tiles of 4 x 8 a lane, 36 KiB of dynamic shared memory.
#define GPUMAT_SMALL_ENTRY(NAME, T, OUT)                                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM) NAME(                               \
        const T* __restrict__ A, const T* __restrict__ B, OUT* __restrict__ C, int M, int N, int K,          \
        long long lda, long long ldb, long long ldc, int batch, int ta, int tb, GPUMAT_BATCH_PARAMS,        \
        GPUMAT_EPILOGUE_PARAMS)                                                                              \
    {                                                                                                        \
        gpumat::wait_for_previous_grid();                                                                    \
        __shared__ typename Dtype<T>::Acc smem[SMEM_BYTES / sizeof(typename Dtype<T>::Acc)];                \
        any_layout<false>(A, B, C, M, N, K, lda, ldb, ldc, batch, ta, tb, batch_a, batch_b, batch_c,        \
                          GPUMAT_EPILOGUE_ARGS, smem);                                                       \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(WIDE_THREADS, wide_blocks_per_sm<T>()) NAME##_wide(         \
        const T* __restrict__ A, const T* __restrict__ B, OUT* __restrict__ C, int M, int N, int K,          \
        long long lda, long long ldb, long long ldc, int batch, int ta, int tb, GPUMAT_BATCH_PARAMS,        \
        GPUMAT_EPILOGUE_PARAMS)                                                                              \
    {                                                                                                        \
        gpumat::wait_for_previous_grid();                                                                    \
        extern __shared__ __align__(16) unsigned char wide_smem[];                                           \
        any_layout<true>(A, B, C, M, N, K, lda, ldb, ldc, batch, ta, tb, batch_a, batch_b, batch_c,         \
                         GPUMAT_EPILOGUE_ARGS, reinterpret_cast<typename Dtype<T>::Acc*>(wide_smem));        \
    }

GPUMAT_SMALL_ENTRY(matmul_small_f32, float, float)
GPUMAT_SMALL_ENTRY(matmul_small_f64, double, double)
GPUMAT_SMALL_ENTRY(matmul_small_f16, __half, __half)
GPUMAT_SMALL_ENTRY(matmul_small_f16_f32out, __half, float)
GPUMAT_SMALL_ENTRY(matmul_small_bf16, __nv_bfloat16, __nv_bfloat16)
GPUMAT_SMALL_ENTRY(matmul_small_bf16_f32out, __nv_bfloat16, float)

// matmul_small_<dtype>[_f32out]_stream: the same arguments, for M, N and K at most 32: four warps a block,
// each on its own chunks of matrices, 56 KiB of dynamic shared memory (14 KiB a warp; float32 and float64
// products whose stages need more: 75 or 113 KiB on an H100, at three or two blocks an SM); grid
// min(ceil(batch / 4), the blocks an SM holds times its SMs). matmul_small_<half>[_f32out]_stream_in_place:
// the same launch for the halves' M, N and K multiples of 8 (and at most 32), nothing staged. float64's
// entry is bound for two blocks an SM (its 4 x 8 register tile of doubles: 185 registers a thread on sm_90).
#define GPUMAT_STREAM_ENTRY(NAME, SUFFIX, IN_PLACE, T, OUT, MIN_BLOCKS)                                      \
    extern "C" __global__ void __launch_bounds__(STREAM_THREADS, MIN_BLOCKS) NAME##SUFFIX(                    \
        const T* __restrict__ A, const T* __restrict__ B, OUT* __restrict__ C, int M, int N, int K,          \
        long long lda, long long ldb, long long ldc, int batch, int ta, int tb, GPUMAT_BATCH_PARAMS,        \
        GPUMAT_EPILOGUE_PARAMS)                                                                              \
    {                                                                                                        \
        gpumat::wait_for_previous_grid();                                                                    \
        extern __shared__ __align__(16) unsigned char stream_smem[];                                         \
        stream_any_layout<IN_PLACE>(A, B, C, M, N, K, lda, ldb, ldc, batch, ta, tb, batch_a, batch_b,       \
                                    batch_c, GPUMAT_EPILOGUE_ARGS, stream_smem);                             \
    }

GPUMAT_STREAM_ENTRY(matmul_small_f32, _stream, false, float, float, STREAM_BLOCKS_PER_SM)
GPUMAT_STREAM_ENTRY(matmul_small_f64, _stream, false, double, double, 2)
GPUMAT_STREAM_ENTRY(matmul_small_f16, _stream, false, __half, __half, STREAM_BLOCKS_PER_SM)
GPUMAT_STREAM_ENTRY(matmul_small_f16_f32out, _stream, false, __half, float, STREAM_BLOCKS_PER_SM)
GPUMAT_STREAM_ENTRY(matmul_small_bf16, _stream, false, __nv_bfloat16, __nv_bfloat16, STREAM_BLOCKS_PER_SM)
GPUMAT_STREAM_ENTRY(matmul_small_bf16_f32out, _stream, false, __nv_bfloat16, float, STREAM_BLOCKS_PER_SM)
GPUMAT_STREAM_ENTRY(matmul_small_f16, _stream_in_place, true, __half, __half, STREAM_BLOCKS_PER_SM)
GPUMAT_STREAM_ENTRY(matmul_small_f16_f32out, _stream_in_place, true, __half, float, STREAM_BLOCKS_PER_SM)
GPUMAT_STREAM_ENTRY(matmul_small_bf16, _stream_in_place, true, __nv_bfloat16, __nv_bfloat16, STREAM_BLOCKS_PER_SM)
GPUMAT_STREAM_ENTRY(matmul_small_bf16_f32out, _stream_in_place, true, __nv_bfloat16, float, STREAM_BLOCKS_PER_SM)

// matmul_small_<half>[_f32out]_stream_block: the same arguments, for the halves' M, N and K multiples of 8
// up to 64 in any layout: four warps a block on its own chunks of products, 56 KiB of dynamic shared
// memory; grid min(ceil(batch / per chunk), four blocks an SM).
#define GPUMAT_STREAM_BLOCK_ENTRY(NAME, T, OUT)                                                              \
    extern "C" __global__ void __launch_bounds__(STREAM_THREADS, STREAM_BLOCKS_PER_SM) NAME##_stream_block(   \
        const T* __restrict__ A, const T* __restrict__ B, OUT* __restrict__ C, int M, int N, int K,          \
        long long lda, long long ldb, long long ldc, int batch, int ta, int tb, GPUMAT_BATCH_PARAMS,        \
        GPUMAT_EPILOGUE_PARAMS)                                                                              \
    {                                                                                                        \
        gpumat::wait_for_previous_grid();                                                                    \
        extern __shared__ __align__(16) unsigned char block_smem[];                                          \
        stream_block_any_layout(A, B, C, M, N, K, lda, ldb, ldc, batch, ta, tb, batch_a, batch_b, batch_c,   \
                                GPUMAT_EPILOGUE_ARGS, block_smem);                                           \
    }

GPUMAT_STREAM_BLOCK_ENTRY(matmul_small_f16, __half, __half)
GPUMAT_STREAM_BLOCK_ENTRY(matmul_small_f16_f32out, __half, float)
GPUMAT_STREAM_BLOCK_ENTRY(matmul_small_bf16, __nv_bfloat16, __nv_bfloat16)
GPUMAT_STREAM_BLOCK_ENTRY(matmul_small_bf16_f32out, __nv_bfloat16, float)
