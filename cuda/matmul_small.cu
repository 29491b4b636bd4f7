// Batches of small products: C_z (M x N) = op(A_z) (M x K) @ op(B_z) (K x N) for z < batch, with M and N
// at most 64 (K any), in every dtype: float32 exact FP32, float64 FP64 FMA, float16 / bfloat16 in float32
// with C in the input dtype or float32 (the _f32out entries). op(A) is A, or with ta the transpose of a
// row-major K x M storage (A.T read in place); op(B) likewise with tb (x @ W.T read in place). Matrix z of
// A, B and C starts z * batch_a (batch_b, batch_c) elements on; a batch stride of 0 shares one matrix.
// Each output goes through the fused epilogue (gpumat::Epilogue) before it is rounded.
//
// Technique: a tile kernel's 64 x 64 block leaves most of its threads idle on a 16 x 16 product and pays a
// launch's worth of prologue per matrix; these products are bound by memory (a 16^3 product does 16 FMAs
// per element of C it reads and writes). So a block of 256 threads takes G whole matrices at once:
//  * the threads of a block cover ceil(M/R) x ceil(N/R) register tiles of R x R outputs of as many
//    matrices as they can at once, R the smallest of 1, 2, 4 whose tiles of one matrix the 256 threads
//    cover (R = 1 up to 256 outputs; R = 4 for a 64 x 64 C); with R = 1 each thread does that four times
//    over (four matrices' outputs), so G = 4 x 256 / (M N) matrices a block: enough bytes in flight a
//    block to draw the memory's bandwidth. small_geometry() computes both, and gpumat/matmul/variants.py
//    the same for the grid (ceil(batch / G) blocks, one dimension: no 65535 limit);
//  * K passes in chunks: the chunk of each of the block's matrices of A and B is staged in shared
//    memory (as the accumulation type), read from global memory in storage order, so consecutive
//    threads read consecutive elements (a packed batch of small matrices is one contiguous run), up to
//    four loads of A and four of B in flight a thread before any store waits, and transposed on the
//    way into shared memory where the operand is stored transposed (a body for each layout);
//  * each thread then accumulates its R x R outputs over the chunk from shared memory, in k order.
// Deterministic: every output's sum runs in k order, no atomics.
// Launch: block (256, 1, 1), grid (ceil(batch / G), 1, 1), 16 KiB of static shared memory; at most 80
// registers a thread, so at least three blocks an SM.
#include "gpumat.cuh"

using gpumat::Dtype;

namespace {

constexpr int THREADS = 256;
constexpr int SMEM_BYTES = 16384;
// launch bounds: at most 80 registers a thread for one output a thread (float64 spills at 64), 128 for
// register tiles of 2 x 2 and 4 x 4 (their accumulators live through the staging), and no bound for
// float64's 4 x 4 tiles (32 registers of accumulators; it spilled at 128)
constexpr int BLOCKS_PER_SM = 3;
template <class T>
constexpr int wide_blocks_per_sm() { return sizeof(T) == 8 ? 1 : 2; }

struct Geometry {
    int r;         // a thread's outputs: r x r (a register tile)
    int tiles_m;   // register tiles along M and N of one matrix
    int tiles_n;
    int per_pass;  // matrices the block's threads cover once
    int per_block; // matrices a block (G): per_pass, four times over where r = 1 (passes())
};

// The passes a thread makes over the block's matrices for register tiles of r: four of 1 x 1 (four
// matrices' outputs a thread, so a block of small products moves enough bytes at once), one otherwise.
__host__ __device__ constexpr int passes(int r) { return r == 1 ? 4 : 1; }

// The register tile and the matrices a block for an M x N result: one output a thread (M N <= 256) or,
// for the wide entries (M, N <= 64), the smaller of 2 x 2 and 4 x 4 whose tiles of one matrix the block's
// threads cover (16 x 16 tiles of a 64 x 64 C at most); the host's small_per_block
// (gpumat/matmul/variants.py) computes the same G.
__device__ __forceinline__ Geometry small_geometry(int M, int N, bool wide)
{
    const auto tiles = [&](int r) { return ((M + r - 1) / r) * ((N + r - 1) / r); };
    const int r = !wide ? 1 : (tiles(2) <= THREADS ? 2 : 4);
    const int tm = (M + r - 1) / r, tn = (N + r - 1) / r;
    const int per_pass = max(1, THREADS / (tm * tn));
    return {r, tm, tn, per_pass, per_pass * passes(r)};
}

// A thread's walk over a Z x D1 x D0 index space (D0 fastest: an operand's storage order, so consecutive
// threads read consecutive elements), every THREADS-th element from its own, without dividing: the
// step's carries are precomputed.
struct Walk {
    int z, d1, d0;
    int Z, D1, D0, sz, s1, s0;

    __device__ __forceinline__ Walk(int Z_, int D1_, int D0_) : Z(Z_), D1(D1_), D0(D0_)
    {
        const int plane = D1 * D0;
        z = threadIdx.x / plane;
        const int r = threadIdx.x - z * plane;
        d1 = r / D0;
        d0 = r - d1 * D0;
        sz = THREADS / plane;
        const int sr = THREADS - sz * plane;
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
// any store waits for one (U = 4, 2 for float64: its values take twice the registers), so a block's loads
// of A and B are in flight together.
template <class T, class Acc, class LA, class PA, class LB, class PB>
__device__ __forceinline__ void stage(Walk a, LA aload, PA aplace, Acc* adst, Walk b, LB bload, PB bplace, Acc* bdst)
{
    constexpr int U = sizeof(T) == 8 ? 2 : 4;
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
            stage<T>(Walk(1, 1, here * M * K), a_run, same, As, Walk(1, 1, here * K * N), b_run, same, Bs);
        } else {
            stage<T>(Walk(here, M, kn), a_rows, a_place, As, Walk(here, kn, N), b_rows, b_place, Bs);
        }
    } else if constexpr (TA && !TB)
        stage<T>(Walk(here, kn, M), a_cols, a_cols_place, As, Walk(here, kn, N), b_rows, b_place, Bs);
    else if constexpr (!TA && TB)
        stage<T>(Walk(here, M, kn), a_rows, a_place, As, Walk(here, N, kn), b_cols, b_cols_place, Bs);
    else
        stage<T>(Walk(here, kn, M), a_cols, a_cols_place, As, Walk(here, N, kn), b_cols, b_cols_place, Bs);
}

template <int R, bool TA, bool TB, class T, class Out>
__device__ __forceinline__ void small(const T* __restrict__ A, const T* __restrict__ B, Out* __restrict__ C, int M,
                                      int N, int K, long long lda, long long ldb, long long ldc, int batch,
                                      long long sa, long long sb, long long sc, const Geometry g,
                                      const gpumat::Epilogue& ep, typename Dtype<T>::Acc* smem)
{
    using Acc = typename Dtype<T>::Acc;
    constexpr int ELEMS = SMEM_BYTES / (int)sizeof(Acc), Q = passes(R);
    const int G = g.per_block;
    const long long first = (long long)blockIdx.x * G;
    const int here = (int)min((long long)G, batch - first);  // matrices of this block
    // the chunk of K staged at a time: as much as fits for the block's matrices, at most 32
    const int kc = max(1, min(min(K, 32), ELEMS / (G * (M + N))));
    Acc* As = smem;               // [G][M][kc]
    Acc* Bs = smem + G * M * kc;  // [G][kc][N]
    // this thread's register tiles: rows i0.., columns j0.. of matrices slot + q per_pass of the block
    const int t = threadIdx.x, per_matrix = g.tiles_m * g.tiles_n;
    const int slot = t / per_matrix, rest = t - slot * per_matrix;
    const int i0 = rest / g.tiles_n * R, j0 = rest % g.tiles_n * R;
    Acc acc[Q][R][R];
#pragma unroll
    for (int q = 0; q < Q; ++q)
#pragma unroll
        for (int x = 0; x < R; ++x)
#pragma unroll
            for (int y = 0; y < R; ++y) acc[q][x][y] = Acc(0);

    for (int k0 = 0; k0 < K; k0 += kc) {
        const int kn = min(kc, K - k0);
        stage_chunk<TA, TB>(A, B, M, N, lda, ldb, sa, sb, first, here, k0, kn, kc, As, Bs);
        __syncthreads();
#pragma unroll
        for (int q = 0; q < Q; ++q) {
            const int mi = slot + q * g.per_pass;
            if (slot >= g.per_pass || mi >= here) break;
            const Acc* as = As + mi * M * kc;
            const Acc* bs = Bs + mi * kc * N;
#pragma unroll 4
            for (int kk = 0; kk < kn; ++kk) {
                Acc av[R], bv[R];
#pragma unroll
                for (int x = 0; x < R; ++x) av[x] = i0 + x < M ? as[(i0 + x) * kc + kk] : Acc(0);
#pragma unroll
                for (int y = 0; y < R; ++y) bv[y] = j0 + y < N ? bs[kk * N + j0 + y] : Acc(0);
#pragma unroll
                for (int x = 0; x < R; ++x)
#pragma unroll
                    for (int y = 0; y < R; ++y) acc[q][x][y] += av[x] * bv[y];
            }
        }
        __syncthreads();
    }
    const bool plain = ep.identity();
#pragma unroll
    for (int q = 0; q < Q; ++q) {
        const int mi = slot + q * g.per_pass;
        if (slot >= g.per_pass || mi >= here) break;
        Out* c = C + (first + mi) * sc;
#pragma unroll
        for (int x = 0; x < R; ++x)
#pragma unroll
            for (int y = 0; y < R; ++y) {
                const int i = i0 + x, j = j0 + y;
                if (i < M && j < N) {
                    Out* at = c + (long long)i * ldc + j;
                    *at = Dtype<Out>::from(plain ? acc[q][x][y] : ep.apply<Out>(acc[q][x][y], i, j, at));
                }
            }
    }
}

// The product for register tiles of R, with A and B in their layouts (four bodies).
template <int R, class T, class Out>
__device__ __forceinline__ void small_any_layout(const T* A, const T* B, Out* C, int M, int N, int K, long long lda,
                                                 long long ldb, long long ldc, int batch, int ta, int tb,
                                                 long long sa, long long sb, long long sc, const Geometry g,
                                                 const gpumat::Epilogue& ep, typename Dtype<T>::Acc* smem)
{
    if (!ta && !tb) small<R, false, false>(A, B, C, M, N, K, lda, ldb, ldc, batch, sa, sb, sc, g, ep, smem);
    else if (ta && !tb) small<R, true, false>(A, B, C, M, N, K, lda, ldb, ldc, batch, sa, sb, sc, g, ep, smem);
    else if (!ta) small<R, false, true>(A, B, C, M, N, K, lda, ldb, ldc, batch, sa, sb, sc, g, ep, smem);
    else small<R, true, true>(A, B, C, M, N, K, lda, ldb, ldc, batch, sa, sb, sc, g, ep, smem);
}

}  // namespace

// matmul_small_<dtype>[_f32out](A, B, C, M, N, K, lda, ldb, ldc, batch, ta, tb, batch_a, batch_b, batch_c,
// alpha, beta, bias, bias_step, bias_along, bias_f32, activation): see the header; M N <= 256, one output a
// thread, four matrices' outputs a thread. matmul_small_wide_<dtype>[_f32out]: the same for M, N <= 64,
// register tiles of 2 x 2 or 4 x 4.
#define GPUMAT_SMALL_ENTRY(NAME, T, OUT)                                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM) NAME(                               \
        const T* __restrict__ A, const T* __restrict__ B, OUT* __restrict__ C, int M, int N, int K,          \
        long long lda, long long ldb, long long ldc, int batch, int ta, int tb, GPUMAT_BATCH_PARAMS,        \
        GPUMAT_EPILOGUE_PARAMS)                                                                              \
    {                                                                                                        \
        __shared__ typename Dtype<T>::Acc smem[SMEM_BYTES / sizeof(typename Dtype<T>::Acc)];                \
        small_any_layout<1>(A, B, C, M, N, K, lda, ldb, ldc, batch, ta, tb, batch_a, batch_b, batch_c,      \
                            small_geometry(M, N, false), GPUMAT_EPILOGUE_ARGS, smem);                        \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(THREADS, wide_blocks_per_sm<T>()) NAME##_wide(             \
        const T* __restrict__ A, const T* __restrict__ B, OUT* __restrict__ C, int M, int N, int K,          \
        long long lda, long long ldb, long long ldc, int batch, int ta, int tb, GPUMAT_BATCH_PARAMS,        \
        GPUMAT_EPILOGUE_PARAMS)                                                                              \
    {                                                                                                        \
        __shared__ typename Dtype<T>::Acc smem[SMEM_BYTES / sizeof(typename Dtype<T>::Acc)];                \
        const Geometry g = small_geometry(M, N, true);                                                      \
        if (g.r == 2)                                                                                        \
            small_any_layout<2>(A, B, C, M, N, K, lda, ldb, ldc, batch, ta, tb, batch_a, batch_b, batch_c, g, \
                                GPUMAT_EPILOGUE_ARGS, smem);                                                 \
        else                                                                                                 \
            small_any_layout<4>(A, B, C, M, N, K, lda, ldb, ldc, batch, ta, tb, batch_a, batch_b, batch_c, g, \
                                GPUMAT_EPILOGUE_ARGS, smem);                                                 \
    }

GPUMAT_SMALL_ENTRY(matmul_small_f32, float, float)
GPUMAT_SMALL_ENTRY(matmul_small_f64, double, double)
GPUMAT_SMALL_ENTRY(matmul_small_f16, __half, __half)
GPUMAT_SMALL_ENTRY(matmul_small_f16_f32out, __half, float)
GPUMAT_SMALL_ENTRY(matmul_small_bf16, __nv_bfloat16, __nv_bfloat16)
GPUMAT_SMALL_ENTRY(matmul_small_bf16_f32out, __nv_bfloat16, float)
