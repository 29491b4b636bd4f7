// Matrix-vector products: matmul's shapes with one side 1, which read one operand once and are bound by
// memory bandwidth, not arithmetic. Every dtype: float32 accumulates in float, float64 in double,
// float16 / bfloat16 in float with C in the input dtype (rounded to nearest even) or in float32 (the
// _f32out entries).
//   matmul_gemv_n1_*    N == 1: C (M x 1) = A (M x K) @ B (K x 1), each output a dot product of a row of A
//                       (row stride lda) and the column B[:, 0] (elements ldb apart);
//   matmul_gemv_m1bt_*  M == 1, B stored transposed (N rows of K, row stride ldb, as x @ W.T gives it):
//                       C[0, j] = A[0, :] . Bstorage[j, :], the same dot products with the roles swapped;
//   matmul_gemv_m1_*    M == 1, B row-major: C[0, :] = A[0, :] @ B, B read row by row along N.
//
// They take the shared k_chunk signature and contract of the GEMM kernels (matmul_fast.cu): block z is
// (batch b, split s) by gpumat::batch_split; it multiplies A + b*batch_a by B + b*batch_b over k in
// [s*k_chunk, min(K, (s+1)*k_chunk)) and writes its result to C + b*batch_c + s*M*ldc. A split-K caller
// passes float32 (float64) scratch with ldc = N and the identity epilogue, and
// matmul_splitk_reduce_* adds the partials in a fixed order and applies the epilogue; with one split
// the kernel applies the epilogue (gpumat::Epilogue) itself, once an output, where it stores it.
// Any view: row strides and base addresses are free; 16-byte (gemv_m1 of 16-bit types: 8-byte) loads where
// the run-time alignment of the operand allows them, element loads otherwise; both paths form every sum in
// the same order, so an aligned and an unaligned view of the same data give the same bits.
// Deterministic: a fixed order of products and sums (warp shuffles in a fixed tree, shared memory added
// in warp order), no atomics.
#include <stdint.h>

#include <type_traits>

#include "gpumat.cuh"

using gpumat::Dtype;

namespace {

constexpr int THREADS = 256, WARPS = THREADS / 32;

// N consecutive elements of T, as one 8- or 16-byte load (or two of 16) reads them.
template <class T, int N>
struct alignas(N * sizeof(T) < 16 ? N * sizeof(T) : 16) Pack {
    T v[N];
};

// The pack at p (aligned to the pack) with loads that stream past the caches: the matrix operand is read
// once, and the vector, read by every warp, keeps its place in L1.
template <class T, int N>
__device__ __forceinline__ Pack<T, N> load_stream(const T* p)
{
    constexpr int BYTES = N * sizeof(T);
    static_assert(BYTES == 8 || BYTES % 16 == 0, "8 or 16-byte loads");
    Pack<T, N> r;
    if constexpr (BYTES == 8) {
        *reinterpret_cast<uint2*>(r.v) = __ldcs(reinterpret_cast<const uint2*>(p));
    } else {
#pragma unroll
        for (int h = 0; h < BYTES / 16; ++h)
            reinterpret_cast<uint4*>(r.v)[h] = __ldcs(reinterpret_cast<const uint4*>(p) + h);
    }
    return r;
}

// The pack of elements p[0], p[step], ..., one load each (cached: a neighbour's loads read the same
// lines next); elements from `live` on are zero, unread.
template <class T, int N>
__device__ __forceinline__ Pack<T, N> load_each(const T* p, long long step, int live = N)
{
    Pack<T, N> r;
#pragma unroll
    for (int e = 0; e < N; ++e)
        r.v[e] = e < live ? p[e * step] : Dtype<T>::from(0.0f);
    return r;
}

// ---------------------------------------------------------------------------------------------------
// Dot products of rows with one vector (gemv_n1, gemv_m1bt): out[r] = W[r, k_begin:k_end] . x[k_begin:k_end].
// Technique: a warp takes ROWS = 4 rows at once; its lanes stride over K in groups of 32 x VEC elements
// (VEC = 16 bytes of T), lane l the VEC consecutive elements l * VEC .. of each group: one 16-byte load
// of each row (streaming) and one of x (cached in L1: every warp of the SM reads it), two groups in
// flight a lane where both are aligned (8 row loads, 128 bytes), products added in k order into one
// accumulator a row; the 32 lane sums of a row are then added by xor shuffles in a fixed tree, and lane j
// stores row j. Rows not 16-byte aligned (base + k_begin, row stride) or a vector with a stride or
// another alignment take element loads of the same elements in the same order, one group in flight; the
// last partial group goes element by element. Rows past the end re-read the last row and store nothing.
// A block of 8 warps covers a tile of 32 rows; blocks walk row tiles from `tile` on in steps of
// `tile_step` (the grid's row tiles, capped).
// C_ROW: the outputs are one row of C (element (0, r) at out + r) rather than a column (element (r, 0)
// at out + r * inc) - for the epilogue's bias and position.
// ---------------------------------------------------------------------------------------------------
constexpr int ROWS = 4;                  // rows a warp
constexpr int TILE_ROWS = WARPS * ROWS;  // rows a block

template <class T, class Out, bool C_ROW>
__device__ __forceinline__ void dot_rows(const T* __restrict__ W, long long ldw, const T* __restrict__ x, long long incx,
                                         Out* __restrict__ out, long long inc, long long rows, int k_begin, int k_end,
                                         long long tile, long long tile_step, const gpumat::Epilogue& ep)
{
    using Acc = typename Dtype<T>::Acc;
    constexpr int VEC = 16 / sizeof(T), GROUP = 32 * VEC;
    using P = Pack<T, VEC>;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int len = k_end - k_begin;
    const T* const xk = x + k_begin * incx;
    const bool vec_w = (reinterpret_cast<uintptr_t>(W + k_begin) & 15) == 0 && ldw % VEC == 0;
    const bool vec_x = incx == 1 && (reinterpret_cast<uintptr_t>(xk) & 15) == 0;
    const bool ep_id = ep.identity();
    const long long tiles = (rows + TILE_ROWS - 1) / TILE_ROWS;
    for (; tile < tiles; tile += tile_step) {
        const long long r0 = tile * TILE_ROWS + warp * ROWS;
        if (r0 >= rows) break;  // warp-uniform; later tiles lie further on
        const T* w[ROWS];
#pragma unroll
        for (int j = 0; j < ROWS; ++j)
            w[j] = W + (r0 + j < rows ? r0 + j : rows - 1) * ldw + k_begin + lane * VEC;
        Acc acc[ROWS];
#pragma unroll
        for (int j = 0; j < ROWS; ++j) acc[j] = Acc(0);
        // U whole groups from g: every lane reads its VEC elements of each row; loads first, then the
        // products, in k order. FAST: both operands 16-byte aligned (vector loads alone); otherwise each
        // operand takes the loads its alignment allows.
        auto groups = [&](int g, auto u_const, auto fast_const) {
            constexpr int U = decltype(u_const)::value;
            constexpr bool FAST = decltype(fast_const)::value;
            P xv[U], wv[U][ROWS];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const long long k = g + u * GROUP + lane * VEC;
                xv[u] = FAST || vec_x ? *reinterpret_cast<const P*>(xk + k) : load_each<T, VEC>(xk + k * incx, incx);
#pragma unroll
                for (int j = 0; j < ROWS; ++j) {
                    const T* p = w[j] + g + u * GROUP;
                    wv[u][j] = FAST || vec_w ? load_stream<T, VEC>(p) : load_each<T, VEC>(p, 1);
                }
            }
#pragma unroll
            for (int u = 0; u < U; ++u)
#pragma unroll
                for (int e = 0; e < VEC; ++e) {
                    const Acc xe = Dtype<T>::acc(xv[u].v[e]);
#pragma unroll
                    for (int j = 0; j < ROWS; ++j) acc[j] = fma(Dtype<T>::acc(wv[u][j].v[e]), xe, acc[j]);
                }
        };
        int g = 0;
        if (vec_w && vec_x) {  // two groups in flight (8 row loads of 16 bytes a lane)
#pragma unroll 1
            for (; g + 2 * GROUP <= len; g += 2 * GROUP) groups(g, std::integral_constant<int, 2>{}, std::true_type{});
            if (g + GROUP <= len) {
                groups(g, std::integral_constant<int, 1>{}, std::true_type{});
                g += GROUP;
            }
        } else {  // one group in flight: element loads take a register an element
#pragma unroll 1
            for (; g + GROUP <= len; g += GROUP) groups(g, std::integral_constant<int, 1>{}, std::false_type{});
        }
        // the last partial group, element by element in the same order
        for (int e = 0, k = g + lane * VEC; e < VEC && k + e < len; ++e) {
            const Acc xe = Dtype<T>::acc(xk[(k + e) * incx]);
#pragma unroll
            for (int j = 0; j < ROWS; ++j) acc[j] = fma(Dtype<T>::acc(w[j][g + e]), xe, acc[j]);
        }
        // every lane ends with each row's total (the same bits in every lane: a + b == b + a)
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
#pragma unroll
            for (int j = 0; j < ROWS; ++j) acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], off);
        Acc total = acc[0];
#pragma unroll
        for (int j = 1; j < ROWS; ++j)
            if (lane == j) total = acc[j];
        const long long r = r0 + lane;
        if (lane < ROWS && r < rows) {
            Out* const c = C_ROW ? out + r : out + r * inc;
            const int i = C_ROW ? 0 : (int)r, col = C_ROW ? (int)r : 0;
            *c = Dtype<Out>::from(ep_id ? total : ep.apply<Out>(total, i, col, c));
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// One row times a matrix (gemv_m1): out[j] = sum over k of a[k] * B[k, j], j in a strip of 128 columns.
// Technique: lane l of every warp owns the COLS = 4 consecutive columns 4 l .. 4 l + 3 of the block's
// strip; the block's k range is cut into WARPS slices, warp w walking slice w row by row: each lane
// reads its 4 elements of the row (one load of 16 bytes, two for float64, 8 bytes for float16 /
// bfloat16: a warp reads 256 to 1024 contiguous bytes, streaming) and a[k] (one address for the whole
// warp, cached), U rows in flight (128 bytes a lane), products added in k order into 4 accumulators. The
// warps' sums meet in shared memory and threads 0..127 add them in warp order, one column each, and
// store. Rows not aligned for the vector loads (base, row stride) and the strip's last partial group
// take element loads of the same elements: the same sums in the same order.
// ---------------------------------------------------------------------------------------------------
constexpr int COLS = 4;           // consecutive columns a lane
constexpr int STRIP = 32 * COLS;  // columns a block

template <class T, class Out>
__device__ __forceinline__ void row_times_matrix(const T* __restrict__ a, const T* __restrict__ B, long long ldb,
                                                 Out* __restrict__ out, int N, int k_begin, int k_end,
                                                 const gpumat::Epilogue& ep)
{
    using Acc = typename Dtype<T>::Acc;
    using P = Pack<T, COLS>;
    constexpr int U = 128 / (COLS * sizeof(T));  // rows in flight a lane: 16, 8, 4 for 2-, 4-, 8-byte T
    constexpr int ALIGN = alignof(P);
    __shared__ Acc part[WARPS][STRIP];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long n0 = (long long)blockIdx.x * STRIP, col = n0 + lane * COLS;
    const int live = col < N ? (int)min((long long)COLS, N - col) : 0;  // columns of this lane inside C
    const bool vec = live == COLS && (reinterpret_cast<uintptr_t>(B) % ALIGN) == 0 && (ldb * sizeof(T)) % ALIGN == 0;
    const int len = k_end - k_begin, slice = (len + WARPS - 1) / WARPS;
    const int ks = k_begin + min(len, warp * slice), ke = k_begin + min(len, (warp + 1) * slice);
    Acc acc[COLS];
#pragma unroll
    for (int e = 0; e < COLS; ++e) acc[e] = Acc(0);
    // U rows from row k (at p) on, loads first, then the products in k order; VEC: 8/16-byte loads
    auto rows_from = [&](int k, const T*& p, auto u_const, auto vec_const) {
        constexpr int V = decltype(u_const)::value;
        P bv[V];
        T av[V];
#pragma unroll
        for (int u = 0; u < V; ++u, p += ldb) {
            av[u] = a[k + u];
            bv[u] = decltype(vec_const)::value ? load_stream<T, COLS>(p) : load_each<T, COLS>(p, 1, live);
        }
#pragma unroll
        for (int u = 0; u < V; ++u) {
            const Acc ak = Dtype<T>::acc(av[u]);
#pragma unroll
            for (int e = 0; e < COLS; ++e) acc[e] = fma(ak, Dtype<T>::acc(bv[u].v[e]), acc[e]);
        }
    };
    auto walk = [&](auto vec_const) {
        const T* p = B + (long long)ks * ldb + col;
        int k = ks;
#pragma unroll 1
        for (; k + U <= ke; k += U) rows_from(k, p, std::integral_constant<int, U>{}, vec_const);
#pragma unroll 1
        for (; k < ke; ++k) rows_from(k, p, std::integral_constant<int, 1>{}, vec_const);
    };
    if (vec) walk(std::true_type{});
    else if (live > 0) walk(std::false_type{});
#pragma unroll
    for (int e = 0; e < COLS; ++e) part[warp][lane * COLS + e] = acc[e];
    __syncthreads();
    const int t = threadIdx.x;
    if (t < STRIP && n0 + t < N) {
        Acc total = part[0][t];
#pragma unroll
        for (int w = 1; w < WARPS; ++w) total += part[w][t];
        Out* const c = out + n0 + t;
        *c = Dtype<Out>::from(ep.identity() ? total : ep.apply<Out>(total, 0, (int)(n0 + t), c));
    }
}

// This block's matrices of the batch and k range (gpumat::batch_split), and where its C starts.
struct Work {
    long long a, b, c;  // element offsets of A, B and C
    int k_begin, k_end;
};

__device__ __forceinline__ Work work(int M, int K, long long ldc, int k_chunk, GPUMAT_BATCH_PARAMS)
{
    const gpumat::BatchSplit bs = gpumat::batch_split(K, k_chunk);
    const long long k_lo = (long long)bs.split * k_chunk;
    return {bs.batch * batch_a, bs.batch * batch_b, bs.batch * batch_c + (long long)bs.split * M * ldc,
            (int)(k_lo < K ? k_lo : K), (int)(k_lo + k_chunk < K ? k_lo + k_chunk : K)};
}

}  // namespace

// The entry points: NAME(A, B, C, M, N, K, lda, ldb, ldc, k_chunk, batch_a, batch_b, batch_c, alpha, beta,
// bias, bias_step, bias_along, bias_f32, activation), block (256,1,1), at most 80 registers a thread (three
// blocks an SM; ptxas keeps every variant within them without spills).
//
// matmul_gemv_n1_<dtype>[_f32out]: N == 1 (N is not read). Grid (1, min(ceil(M / 32), 65535), batch *
// splits): a block a tile of 32 rows, row tiles past the grid's in a grid-stride loop.
// matmul_gemv_m1bt_<dtype>[_f32out]: M == 1, B given as its storage (N rows of K, row stride ldb). Grid
// (ceil(N / 32), 1, batch * splits): a block a tile of 32 columns of C.
// matmul_gemv_m1_<dtype>[_f32out]: M == 1. Grid (ceil(N / 128), 1, batch * splits): a block a strip of 128
// columns; static shared memory for the warps' sums, 4 KiB (float64: 8 KiB).
#define GPUMAT_GEMV(T, OUT, SFX)                                                                              \
    extern "C" __global__ void __launch_bounds__(THREADS, 3) matmul_gemv_n1_##SFX(                           \
        const T* __restrict__ A, const T* __restrict__ B, OUT* __restrict__ C, int M, int N, int K,          \
        long long lda, long long ldb, long long ldc, int k_chunk, GPUMAT_BATCH_PARAMS, GPUMAT_EPILOGUE_PARAMS) \
    {                                                                                                         \
        const Work z = work(M, K, ldc, k_chunk, batch_a, batch_b, batch_c);                                   \
        dot_rows<T, OUT, false>(A + z.a, lda, B + z.b, ldb, C + z.c, ldc, M, z.k_begin, z.k_end, blockIdx.y,  \
                                gridDim.y, GPUMAT_EPILOGUE_ARGS);                                             \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(THREADS, 3) matmul_gemv_m1bt_##SFX(                         \
        const T* __restrict__ A, const T* __restrict__ B, OUT* __restrict__ C, int M, int N, int K,          \
        long long lda, long long ldb, long long ldc, int k_chunk, GPUMAT_BATCH_PARAMS, GPUMAT_EPILOGUE_PARAMS) \
    {                                                                                                         \
        const Work z = work(M, K, ldc, k_chunk, batch_a, batch_b, batch_c);                                   \
        dot_rows<T, OUT, true>(B + z.b, ldb, A + z.a, 1, C + z.c, 1, N, z.k_begin, z.k_end, blockIdx.x,       \
                               gridDim.x, GPUMAT_EPILOGUE_ARGS);                                              \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(THREADS, 3) matmul_gemv_m1_##SFX(                           \
        const T* __restrict__ A, const T* __restrict__ B, OUT* __restrict__ C, int M, int N, int K,          \
        long long lda, long long ldb, long long ldc, int k_chunk, GPUMAT_BATCH_PARAMS, GPUMAT_EPILOGUE_PARAMS) \
    {                                                                                                         \
        const Work z = work(M, K, ldc, k_chunk, batch_a, batch_b, batch_c);                                   \
        row_times_matrix<T, OUT>(A + z.a, B + z.b, ldb, C + z.c, N, z.k_begin, z.k_end, GPUMAT_EPILOGUE_ARGS); \
    }

GPUMAT_GEMV(float, float, f32)
GPUMAT_GEMV(double, double, f64)
GPUMAT_GEMV(__half, __half, f16)
GPUMAT_GEMV(__half, float, f16_f32out)
GPUMAT_GEMV(__nv_bfloat16, __nv_bfloat16, bf16)
GPUMAT_GEMV(__nv_bfloat16, float, bf16_f32out)
