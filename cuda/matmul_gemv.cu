// Matrix-vector products: matmul's shapes with one side 1, or a few (up to R = 8 or 16), which read the
// matrix operand once and are bound by memory bandwidth, not arithmetic. Every dtype: float32 accumulates
// in float, float64 in double, float16 / bfloat16 in float with C in the input dtype (rounded to nearest
// even) or in float32 (the _f32out entries).
//   matmul_gemv_n1_*    N == 1: C (M x 1) = A (M x K) @ B (K x 1), each output a dot product of a row of A
//                       (row stride lda) and the column B[:, 0] (elements ldb apart);
//   matmul_gemv_m1bt_*  M == 1, B stored transposed (N rows of K, row stride ldb, as x @ W.T gives it):
//                       C[0, j] = A[0, :] . Bstorage[j, :], the same dot products with the roles swapped;
//   matmul_gemv_m1_*    M == 1, B row-major: C[0, :] = A[0, :] @ B, B read row by row along N;
//   matmul_gemv_m1x32_* the same on strips of 32 columns (a narrow B on more blocks);
//   matmul_gemv_n<R>_*, matmul_gemv_m<R>bt_*, matmul_gemv_m<R>_*: the same for N <= R columns of B (the R
//                       vectors A's rows are dotted with) or M <= R rows of A, the matrix still read once.
//
// They take the shared k_chunk signature and contract of the GEMM kernels (matmul_fast.cu): block z is
// (batch b, split s) by gpumat::batch_split; it multiplies A + b*batch_a by B + b*batch_b over k in
// [s*k_chunk, min(K, (s+1)*k_chunk)) and writes its result to C + b*batch_c + s*M*ldc. A split-K caller
// passes float32 (float64) scratch with ldc = N and the identity epilogue, and
// matmul_splitk_reduce_* adds the partials in a fixed order and applies the epilogue; with one split
// the kernel applies the epilogue (gpumat::Epilogue) itself, once an output, where it stores it.
// Any view: row strides and base addresses are free; 16-byte (gemv_m1 and gemv_m1x32 of 16-bit types:
// 8-byte) loads where the run-time alignment of the operand allows them, element loads otherwise; both paths
// form every sum in the same order, so an aligned and an unaligned view of the same data give the same bits.
// Deterministic: a fixed order of products and sums (warp shuffles in a fixed tree, shared memory added
// in warp or slice order), no atomics.
#include <stdint.h>

#include <type_traits>

#include "gpumat.cuh"

using gpumat::Dtype;

namespace {

constexpr int THREADS = 256, WARPS = THREADS / 32;

// Blocks an SM the kernels of R vectors or rows are built for (__launch_bounds__): one at R = 8 and 16 (up
// to 255 registers a thread: a lane's 4 x R accumulators, the loads in flight and the scheduler's reads
// ahead do not fit 128 without spills at R = 8 in float64 and 16-bit types); two up to R = 4 (128, which
// R = 4 fits; not built: R = 8 serves its shapes). With one block a lane keeps twice the loads in
// flight (DEPTH, U), so that an SM has as many bytes in flight either way (32 KiB).
__host__ __device__ constexpr int min_blocks(int r) { return r <= 4 ? 2 : 1; }

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
// One row times a matrix (gemv_m1, gemv_m1x32): out[j] = sum over k of a[k] * B[k, j], j in the block's
// strip of LANES x 4 columns (128 for gemv_m1, 32 for gemv_m1x32).
// Technique: a warp is ROW_LANES = 32 / LANES row lanes of LANES column lanes; column lane c
// owns the COLS = 4 consecutive columns 4 c .. 4 c + 3 of the strip, and the block's 8 warps x ROW_LANES
// row lanes are its SLICES slices of the k range: with one row lane a warp (gemv_m1) slice w is the w-th
// contiguous eighth of the range; with 4 (gemv_m1x32) slice s is the rows k_begin + s + 32 i, so that one
// warp load reads 4 consecutive rows and the block 32. Each lane reads its 4 elements of a row (8 bytes for
// float16 / bfloat16, 16 for float32, two of 16 for float64, streaming: a warp reads runs of 64 to 1024
// contiguous bytes) and a[k] (cached), U rows in flight (128 bytes a lane; the slice's last rows, fewer
// than U, in steps of U/2, U/4, ..., 1), products added in k order into 4 accumulators. The slices' sums
// meet in shared memory and threads 0 .. COLUMNS - 1 add them in slice order, one column each, and store.
// gemv_m1x32's narrow strip spreads a B of 1024 columns over 32 blocks without splitting K, where gemv_m1
// has 8, and a block covers 1 KiB of K (32 slices x 32 bytes) a round trip; but in 16-bit types its warps
// read each row of B in runs of 64 bytes, which draw less of the memory's bandwidth than gemv_m1's 256, and
// a short K leaves each of its many blocks little to do: the planner weighs both. Rows not aligned for the
// vector loads (base, row stride) and the strip's last partial group take element loads of the same
// elements: the same sums in the same order.
// ---------------------------------------------------------------------------------------------------
constexpr int COLS = 4;                   // consecutive columns a lane
constexpr int STRIP = 32 * COLS;          // columns a gemv_m1 (and gemv_m<R>) block: a warp's 32 lanes across
constexpr int NARROW_LANES = 8;           // column lanes of a gemv_m1x32 warp: 32 columns a block

template <class T, class Out, int LANES>
__device__ __forceinline__ void row_times_matrix(const T* __restrict__ a, const T* __restrict__ B, long long ldb,
                                                 Out* __restrict__ out, int N, int k_begin, int k_end,
                                                 const gpumat::Epilogue& ep)
{
    using Acc = typename Dtype<T>::Acc;
    using P = Pack<T, COLS>;
    constexpr int ROW_LANES = 32 / LANES, SLICES = WARPS * ROW_LANES, COLUMNS = LANES * COLS;
    constexpr int KSTEP = ROW_LANES == 1 ? 1 : SLICES;  // rows between a slice's rows
    constexpr int U = 128 / (COLS * sizeof(T));        // rows in flight a lane: 16, 8, 4 for 2-, 4-, 8-byte T
    constexpr int ALIGN = alignof(P);
    __shared__ Acc part[SLICES][COLUMNS];
    const int slice = threadIdx.x / LANES, c = (threadIdx.x & 31) % LANES;
    const long long n0 = (long long)blockIdx.x * COLUMNS, col = n0 + c * COLS;
    const int live = col < N ? (int)min((long long)COLS, N - col) : 0;  // columns of this lane inside C
    const bool vec = live == COLS && (reinterpret_cast<uintptr_t>(B) % ALIGN) == 0 && (ldb * sizeof(T)) % ALIGN == 0;
    // this slice's rows, KSTEP apart: gemv_m1's from ks on before ke (its warp's contiguous share),
    // gemv_m1x32's from k_begin + slice on, `rows` of them
    const int len = k_end - k_begin, share = KSTEP == 1 ? (len + WARPS - 1) / WARPS : 0;
    const int ks = KSTEP == 1 ? k_begin + min(len, slice * share) : 0;
    const int ke = KSTEP == 1 ? k_begin + min(len, (slice + 1) * share) : 0;
    const int rows = KSTEP == 1 ? 0 : (len > slice ? (len - slice + SLICES - 1) / SLICES : 0);
    Acc acc[COLS];
#pragma unroll
    for (int e = 0; e < COLS; ++e) acc[e] = Acc(0);
    // V rows of the slice from row k (at p) on, loads first (all in flight together), then the products in
    // k order; VEC: 8/16-byte loads
    auto rows_from = [&](int k, const T*& p, auto v_const, auto vec_const) {
        constexpr int V = decltype(v_const)::value;
        P bv[V];
        T av[V];
#pragma unroll
        for (int u = 0; u < V; ++u, p += KSTEP * ldb) {
            av[u] = a[k + u * KSTEP];
            bv[u] = decltype(vec_const)::value ? load_stream<T, COLS>(p) : load_each<T, COLS>(p, 1, live);
        }
#pragma unroll
        for (int u = 0; u < V; ++u) {
            const Acc ak = Dtype<T>::acc(av[u]);
#pragma unroll
            for (int e = 0; e < COLS; ++e) acc[e] = fma(ak, Dtype<T>::acc(bv[u].v[e]), acc[e]);
        }
    };
    // whole steps of U rows, then the last rows (fewer than U) in steps of U/2, U/4, ..., 1 rows, each
    // taken at most once: at most log2(U) memory round trips for them, not one a row
    auto walk = [&](auto vec_const) {
        const int first = KSTEP == 1 ? ks : k_begin + slice;
        const T* p = B + (long long)first * ldb + col;
        int k = first, i = 0;  // row k, the slice's i-th
        auto fits = [&](int v) { return KSTEP == 1 ? k + v <= ke : i + v <= rows; };  // v more rows from k on
#pragma unroll 1
        for (; fits(U); i += U, k += U * KSTEP) rows_from(k, p, std::integral_constant<int, U>{}, vec_const);
        auto part = [&](auto v_const) {
            constexpr int V = decltype(v_const)::value;
            if (V < U && fits(V)) {
                rows_from(k, p, v_const, vec_const);
                i += V;
                k += V * KSTEP;
            }
        };
        part(std::integral_constant<int, 8>{});
        part(std::integral_constant<int, 4>{});
        part(std::integral_constant<int, 2>{});
        part(std::integral_constant<int, 1>{});
    };
    if (vec) walk(std::true_type{});
    else if (live > 0) walk(std::false_type{});
#pragma unroll
    for (int e = 0; e < COLS; ++e) part[slice][c * COLS + e] = acc[e];
    __syncthreads();
    const int t = threadIdx.x;
    if (t < COLUMNS && n0 + t < N) {
        Acc total = part[0][t];
#pragma unroll 8
        for (int s = 1; s < SLICES; ++s) total += part[s][t];
        Out* const cp = out + n0 + t;
        *cp = Dtype<Out>::from(ep.identity() ? total : ep.apply<Out>(total, 0, (int)(n0 + t), cp));
    }
}

// Loaded elements as raw 32-bit words: the kernels of R vectors or rows keep them so (registers of packed
// 16-bit pairs, which a struct of __half copies apart, a register an element) and widen each element
// where it is used.
template <int N>
struct Words {
    unsigned int w[N];
};

// The elements of a pack as words (for element loads: packed).
template <class T, int N>
__device__ __forceinline__ Words<N * sizeof(T) / 4> words_of(const Pack<T, N>& p)
{
    static_assert(N * sizeof(T) % 4 == 0, "whole words");
    Words<N * sizeof(T) / 4> u;
    memcpy(&u, &p, sizeof(u));
    return u;
}

// Element e (a constant once unrolled) of the elements of T held in u, widened to the accumulator type.
template <class T, int N>
__device__ __forceinline__ typename Dtype<T>::Acc widen(const Words<N>& u, int e)
{
    if constexpr (sizeof(T) == 4) return __uint_as_float(u.w[e]);
    else if constexpr (sizeof(T) == 8) return __hiloint2double(u.w[2 * e + 1], u.w[2 * e]);
    else {
        const unsigned short bits = (unsigned short)(e & 1 ? u.w[e / 2] >> 16 : u.w[e / 2] & 0xffffu);
        if constexpr (std::is_same_v<T, __half>) return __half2float(__ushort_as_half(bits));
        else return __bfloat162float(__ushort_as_bfloat16(bits));
    }
}

// ---------------------------------------------------------------------------------------------------
// Dot products of rows with R vectors (gemv_n8/16, gemv_m8bt/16bt): out[r, i] = W[i, k_begin:k_end]
// . x_r[k_begin:k_end] for the nvec <= R vectors x_r (element k of x_r at x + r * xstep + k * incx), every
// row of W read once for all of them.
// Technique: dot_rows' warps, lanes and loads of W (a warp 4 rows, lane l the VEC elements l * VEC .. of
// each group of 32 x VEC k; 16-byte streaming loads where the rows are aligned, element loads otherwise),
// with ROWS x R accumulators a lane. The vectors' slice of a group is staged in shared memory by the whole
// block, a group ahead in two buffers (one barrier a group): its 256 threads read the R x GROUP elements
// with element loads along the vectors' contiguous side (any view), widen each once to the accumulator
// type and store it where a lane's VEC values of one vector are 16-byte reads, contiguous across the warp
// (reads without bank conflicts). Aligned rows of W are loaded DEPTH groups ahead, before the staging, so
// their latency covers it. A lane adds its products in k order (a group's elements in order; the last partial
// group element by element, as dot_rows), on both load paths alike. The warp's 4 x R sums are added across
// its lanes in dot_rows' xor tree (offsets 16 .. 1), each lane keeping half of its values at every step
// (it ends with 4R / 32 sums, or with one its neighbours share): the same additions in the same order as
// the tree applied to each sum. Warps past the last row stage and wait with the others; vectors past nvec
// are zero, never read or stored. A block of 8 warps covers a tile of 32 rows (all R vectors); blocks walk
// row tiles from `tile` on in steps of `tile_step`, as dot_rows.
// C_ROW: vector r's outputs are row r of C (gemv_m{R}bt: element (r, i) at out + r * ldc + i), else
// column r (gemv_n{R}: element (i, r) at out + i * ldc + r).
// ---------------------------------------------------------------------------------------------------
template <class T, class Out, int R, bool C_ROW>
__device__ __forceinline__ void dot_rows_multi(const T* __restrict__ W, long long ldw, const T* __restrict__ x,
                                               long long incx, long long xstep, int nvec, Out* __restrict__ out,
                                               long long ldc, int rows, int k_begin, int k_end, int tile,
                                               int tile_step, const gpumat::Epilogue& ep)
{
    using Acc = typename Dtype<T>::Acc;
    constexpr int VEC = 16 / sizeof(T), GROUP = 32 * VEC;
    constexpr int AV = 16 / sizeof(Acc);         // accumulators in one 16-byte shared-memory read
    constexpr int XS = GROUP + AV;               // a staged vector's stride (padding: fewer conflicting stores)
    constexpr int STAGE = R * GROUP / THREADS;   // elements a thread stages a group
    constexpr int V = ROWS * R;                  // sums a warp adds across its lanes
    constexpr int DEPTH = min_blocks(R) == 2 ? 1 : 2;  // groups of W in flight beyond the one at hand
    using PA = Pack<Acc, AV>;
    static_assert(VEC % AV == 0 && R * GROUP % THREADS == 0 && (V & (V - 1)) == 0 && V <= 64, "the layout");
    __shared__ __align__(16) Acc xs[2][R][XS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int len = k_end - k_begin, groups = (len + GROUP - 1) / GROUP;
    const T* const xk = x + k_begin * incx;
    const bool vec_w = (reinterpret_cast<uintptr_t>(W + k_begin) & 15) == 0 && ldw % VEC == 0;
    const bool ep_id = ep.identity();
    // where element kk of a group sits in a staged vector: lane kk / VEC's values, AV at a time, each
    // run of AV contiguous across the lanes
    auto slot = [](int kk) {
        const int e = kk % VEC;
        return e / AV * (32 * AV) + kk / VEC * AV + e % AV;
    };
    // The elements this thread stages, s = 0 .. STAGE - 1 (consecutive threads read along the vectors'
    // contiguous side): C_ROW (x_r runs along k): vector r0s + s * RSTEP, element kk0 of the group; else
    // (x_r[k] runs along r): vector r0s, element kk0 + s * KSTEP, whose slot is slot(kk0) + s * KSTEP / VEC
    // * AV (KSTEP a multiple of VEC).
    constexpr int RSTEP = C_ROW ? THREADS / GROUP : 0, KSTEP = C_ROW ? 0 : THREADS / R;
    static_assert(C_ROW ? THREADS % GROUP == 0 : KSTEP % VEC == 0, "the staging");
    const int r0s = C_ROW ? threadIdx.x / GROUP : threadIdx.x % R, kk0 = C_ROW ? threadIdx.x % GROUP : threadIdx.x / R;
    const T* const xs0 = xk + r0s * xstep + kk0 * incx;  // element (r0s, kk0) of the first group
    const long long xs_step = C_ROW ? RSTEP * xstep : KSTEP * incx;
    const int slot0 = slot(kk0);
    // the vectors' elements g .. g + GROUP - 1 (of the block's k range) into buf; an element past the
    // vectors or past K reads the first one instead (a load without a branch: all in flight at once)
    // and stores zero
    auto stage = [&](int g, Acc(*buf)[XS]) {
        const T* const src = xs0 + g * incx;
        T e[STAGE];
#pragma unroll
        for (int s = 0; s < STAGE; ++s) {
            const bool in = r0s + s * RSTEP < nvec && g + kk0 + s * KSTEP < len;
            e[s] = *(in ? src + s * xs_step : xk);
        }
#pragma unroll
        for (int s = 0; s < STAGE; ++s) {
            const bool in = r0s + s * RSTEP < nvec && g + kk0 + s * KSTEP < len;
            buf[r0s + s * RSTEP][slot0 + s * (KSTEP / VEC * AV)] = in ? Dtype<T>::acc(e[s]) : Acc(0);
        }
    };
    const int tiles = (rows + TILE_ROWS - 1) / TILE_ROWS;
    for (; tile < tiles; tile += tile_step) {
        const int r0 = tile * TILE_ROWS + warp * ROWS;
        const bool busy = r0 < rows;  // warp-uniform; a warp past the end stages and waits with the others
        // the lane's first element of row r0 + j (rows past the end: the last row, read and not stored)
        const int last = rows - 1 - (busy ? r0 : rows - 1);
        const T* const w0 = W + (long long)(busy ? r0 : rows - 1) * ldw + k_begin + lane * VEC;
        auto w = [&](int j) { return w0 + min(j, last) * ldw; };
        Acc acc[ROWS][R];
#pragma unroll
        for (int j = 0; j < ROWS; ++j)
#pragma unroll
            for (int r = 0; r < R; ++r) acc[j][r] = Acc(0);
        // a whole group's products from the lane's elements wv of each row (16 bytes a row) and the staged
        // vectors xb, AV elements of the rows widened at a time
        auto products = [&](const Words<4>(&wv)[ROWS], const Acc(*xb)[XS]) {
#pragma unroll
            for (int h = 0; h < VEC / AV; ++h) {
                Acc wa[ROWS][AV];
#pragma unroll
                for (int j = 0; j < ROWS; ++j)
#pragma unroll
                    for (int e = 0; e < AV; ++e) wa[j][e] = widen<T>(wv[j], h * AV + e);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const PA xv = *reinterpret_cast<const PA*>(&xb[r][h * 32 * AV + lane * AV]);
#pragma unroll
                    for (int e = 0; e < AV; ++e)
#pragma unroll
                        for (int j = 0; j < ROWS; ++j) acc[j][r] = fma(wa[j][e], xv.v[e], acc[j][r]);
                }
            }
        };
        // the last partial group, element by element in the same order
        auto tail = [&](int g, const Acc(*xb)[XS]) {
            for (int e = 0, k = g + lane * VEC; e < VEC && k + e < len; ++e) {
                Acc wa[ROWS];
#pragma unroll
                for (int j = 0; j < ROWS; ++j) wa[j] = Dtype<T>::acc(w(j)[g + e]);
                const int s = slot(lane * VEC + e);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const Acc xe = xb[r][s];
#pragma unroll
                    for (int j = 0; j < ROWS; ++j) acc[j][r] = fma(wa[j], xe, acc[j][r]);
                }
            }
        };
        // the groups: rows of W that take 16-byte loads (vec_w) are loaded DEPTH groups ahead (ring[0] the
        // group at hand); others element by element just before their products
        Words<4> ring[DEPTH + 1][ROWS];
        auto fetch = [&](int d, int g) {  // group g (its first element) into ring[d], if it is whole
            if (vec_w && busy && g + GROUP <= len) {
#pragma unroll
                for (int j = 0; j < ROWS; ++j) ring[d][j] = words_of(load_stream<T, VEC>(w(j) + g));
            }
        };
#pragma unroll
        for (int d = 0; d < DEPTH; ++d) fetch(d, d * GROUP);
        // step gi stages group gi and multiplies group gi - 1 (one copy of each in the code)
#pragma unroll 1
        for (int gi = 0; gi <= groups; ++gi) {
            const int g = (gi - 1) * GROUP;  // the group multiplied
            if (gi > 0) fetch(DEPTH, g + DEPTH * GROUP);
            if (gi < groups) stage(gi * GROUP, xs[gi & 1]);
            if (gi > 0 && busy) {
                if (g + GROUP <= len) {
                    if (!vec_w) {
#pragma unroll
                        for (int j = 0; j < ROWS; ++j) ring[0][j] = words_of(load_each<T, VEC>(w(j) + g, 1));
                    }
                    products(ring[0], xs[(gi - 1) & 1]);
                } else {
                    tail(g, xs[(gi - 1) & 1]);
                }
            }
            __syncthreads();  // the buffer read here is the one staged next
            if (gi > 0) {
#pragma unroll
                for (int d = 0; d < DEPTH; ++d)
#pragma unroll
                    for (int j = 0; j < ROWS; ++j) ring[d][j] = ring[d + 1][j];
            }
        }
        // the xor tree across the lanes, halving: after the step of offset `off` a lane keeps the upper
        // half of its values if its bit `off` is set (adding its partner's), the lower half otherwise
        Acc v[V];
#pragma unroll
        for (int j = 0; j < ROWS; ++j)
#pragma unroll
            for (int r = 0; r < R; ++r) v[j * R + r] = acc[j][r];
        int base = 0;  // the sum index of v[0]: row j = index / R, vector r = index % R
        auto tree_step = [&](auto s_const) {
            constexpr int off = 16 >> decltype(s_const)::value, n = V >> decltype(s_const)::value;
            if constexpr (n >= 2) {
                const bool upper = lane & off;
#pragma unroll
                for (int i = 0; i < n / 2; ++i) {
                    const Acc send = upper ? v[i] : v[n / 2 + i], keep = upper ? v[n / 2 + i] : v[i];
                    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, off);
                }
                if (upper) base += n / 2;
            } else {
                v[0] += __shfl_xor_sync(0xffffffffu, v[0], off);
            }
        };
        tree_step(std::integral_constant<int, 0>{});
        tree_step(std::integral_constant<int, 1>{});
        tree_step(std::integral_constant<int, 2>{});
        tree_step(std::integral_constant<int, 3>{});
        tree_step(std::integral_constant<int, 4>{});
        constexpr int HELD = V >= 32 ? V / 32 : 1;  // sums a lane ends with
        const bool owner = V >= 32 || (lane & (32 / V - 1)) == 0;  // of the lanes that share a sum, the first
        if (busy && owner) {
#pragma unroll 1
            for (int h = 0; h < HELD; ++h) {  // not unrolled: one epilogue in the code
                Acc total = v[0];
#pragma unroll
                for (int hh = 1; hh < HELD; ++hh)
                    if (h == hh) total = v[hh];
                const int r = (base + h) % R, i = r0 + (base + h) / R;
                if (i < rows && r < nvec) {
                    Out* const c = C_ROW ? out + r * ldc + i : out + i * ldc + r;
                    const int row = C_ROW ? r : i, col = C_ROW ? i : r;
                    *c = Dtype<Out>::from(ep_id ? total : ep.apply<Out>(total, row, col, c));
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// R rows times a matrix (gemv_m8/16): out[i, j] = sum over k of A[i, k] * B[k, j] for the M <= R rows of
// A, j in a strip of 128 columns, every element of B read once for all the rows.
// Technique: row_times_matrix's lanes, warps and loads of B (lane l columns 4 l .. 4 l + 3 of the strip,
// warp w slice w of the k range, walked row by row with 16- / 8-byte streaming loads where the rows are
// aligned, element loads otherwise), each element of B multiplied by the R values of A at its k into R x 4
// accumulators a lane; U rows of B in flight (64 or 128 bytes a lane, by min_blocks). A warp stages its
// slice of A in shared memory 32 k at a time, the next 32 read ahead into registers (but float64 at R = 16,
// whose accumulators leave no room for them; it reads them at the start of the step instead): lane
// l reads A[i, k + l] of every row i (element loads: any view), widens it once to the accumulator type and
// stores it at a[l][i], so the R values of one k are R / 4 (float64: R / 2) 16-byte reads at one address
// for the whole warp (a broadcast). Products are added in k order; rows of A past M are zero, never read
// or stored. The warps' sums meet in shared memory G rows at a time, added in warp order into the R x 128
// totals, which a loop over the outputs then finishes (one epilogue in the code) and stores. A block of 8
// warps covers a strip of 128 columns (blockIdx.x) of all R rows. The loads of B are chosen at run time
// (one copy of the unrolled products in the code), U rows at a time and a step's last rows one at a time.
// ---------------------------------------------------------------------------------------------------
template <class T, class Out, int R>
__device__ __forceinline__ void rows_times_matrix(const T* __restrict__ A, long long lda, int M,
                                                  const T* __restrict__ B, long long ldb, Out* __restrict__ out,
                                                  long long ldc, int N, int k_begin, int k_end,
                                                  const gpumat::Epilogue& ep)
{
    using Acc = typename Dtype<T>::Acc;
    using P = Pack<T, COLS>;
    constexpr int AV = 16 / sizeof(Acc);          // accumulators in one 16-byte shared-memory read
    using PA = Pack<Acc, AV>;
    // rows of B in flight a lane: 64 bytes with two blocks an SM (min_blocks), 128 with one (R >= 8)
    constexpr int U = (min_blocks(R) == 2 ? 64 : 128) / (COLS * sizeof(T));
    // the next step's A read ahead into registers (R elements) where they fit beside the accumulators: all
    // but float64 at R = 16
    constexpr bool AHEAD = R * sizeof(T) <= 64;
    constexpr int ALIGN = alignof(P);
    constexpr int KT = 32;                         // k a staging step: one element of each row a lane
    constexpr int RS = R + AV;                     // a staged k's stride: 16-byte reads, fewer conflicting stores
    constexpr int G = 16 / sizeof(Acc);            // rows a round of the warps' sums (16 KiB of them)
    static_assert(R % AV == 0 && R % G == 0, "the layout");
    struct Sums {
        Acc part[WARPS][G][STRIP];
        Acc total[R][STRIP];
    };
    union Smem {
        Acc a[WARPS][KT][RS];
        Sums s;
    };
    __shared__ __align__(16) Smem sm;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const long long n0 = (long long)blockIdx.x * STRIP, col = n0 + lane * COLS;
    const int live = col < N ? (int)min((long long)COLS, N - col) : 0;  // columns of this lane inside C
    const bool vec = live == COLS && (reinterpret_cast<uintptr_t>(B) % ALIGN) == 0 && (ldb * sizeof(T)) % ALIGN == 0;
    const int len = k_end - k_begin, slice = (len + WARPS - 1) / WARPS;
    const int ks = k_begin + min(len, warp * slice), ke = k_begin + min(len, (warp + 1) * slice);
    Acc acc[R][COLS];
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int e = 0; e < COLS; ++e) acc[i][e] = Acc(0);
    Acc(*const a)[RS] = sm.a[warp];
    T an[R];  // A[i, k + lane] of every row for the next step
    // (an element past M or the slice reads A[0, k_begin] instead, a load without a branch, and is zero)
    auto read_a = [&](int k) {
#pragma unroll
        for (int i = 0; i < R; ++i) {
            const bool in = i < M && k + lane < ke;
            const T e = *(in ? A + i * lda + k + lane : A + k_begin);
            an[i] = in ? e : Dtype<T>::from(0.0f);
        }
    };
    const T* p = B + (long long)ks * ldb + col;
    // V rows of B from p on (row kk of the step), loads first (those the lane's alignment allows), then the
    // products in k order
    auto rows_from = [&](int kk, auto v_const) {
        constexpr int V = decltype(v_const)::value;
        Words<COLS * sizeof(T) / 4> bv[V];
        if (vec) {
#pragma unroll
            for (int u = 0; u < V; ++u) bv[u] = words_of(load_stream<T, COLS>(p + u * ldb));
        } else {
#pragma unroll
            for (int u = 0; u < V; ++u) bv[u] = words_of(load_each<T, COLS>(p + u * ldb, 1, live));
        }
        p += V * ldb;
#pragma unroll
        for (int u = 0; u < V; ++u) {
            Acc b[COLS];
#pragma unroll
            for (int e = 0; e < COLS; ++e) b[e] = widen<T>(bv[u], e);
#pragma unroll
            for (int i0 = 0; i0 < R; i0 += AV) {
                const PA av = *reinterpret_cast<const PA*>(&a[kk + u][i0]);
#pragma unroll
                for (int i = 0; i < AV; ++i)
#pragma unroll
                    for (int e = 0; e < COLS; ++e) acc[i0 + i][e] = fma(av.v[i], b[e], acc[i0 + i][e]);
            }
        }
    };
    // the step's kt rows, U at a time, the last few one at a time
    auto step = [&](int kt) {
        int kk = 0;
#pragma unroll 1
        for (; kk + U <= kt; kk += U) rows_from(kk, std::integral_constant<int, U>{});
#pragma unroll 1
        for (; kk < kt; ++kk) rows_from(kk, std::integral_constant<int, 1>{});
    };
    // the steps of KT k (warp-uniform); reading ahead, one more at the start that only reads
#pragma unroll 1
    for (int k = AHEAD ? ks - KT : ks; k < ke; k += KT) {
        if (!AHEAD) read_a(k);
        if (k >= ks) {
            __syncwarp();  // the last step's reads of a are done
#pragma unroll
            for (int i = 0; i < R; ++i) a[lane][i] = Dtype<T>::acc(an[i]);
            __syncwarp();
        }
        if (AHEAD && k + KT < ke) read_a(k + KT);
        if (k >= ks) step(min(KT, ke - k));
    }
    // the warps' sums in warp order, G rows a round, into the totals
#pragma unroll
    for (int q = 0; q < R / G; ++q) {
        __syncthreads();  // a (which part overlays) and the last round's part are read
#pragma unroll
        for (int g = 0; g < G; ++g) {
            Pack<Acc, COLS> v;
#pragma unroll
            for (int e = 0; e < COLS; ++e) v.v[e] = acc[q * G + g][e];
            *reinterpret_cast<Pack<Acc, COLS>*>(&sm.s.part[warp][g][lane * COLS]) = v;
        }
        __syncthreads();
        if (q * G < M) {
#pragma unroll
            for (int t = 0; t < G * STRIP / THREADS; ++t) {
                const int o = threadIdx.x + t * THREADS, g = o / STRIP, c = o % STRIP;
                Acc total = sm.s.part[0][g][c];
#pragma unroll
                for (int w = 1; w < WARPS; ++w) total += sm.s.part[w][g][c];
                sm.s.total[q * G + g][c] = total;
            }
        }
    }
    __syncthreads();
    const bool ep_id = ep.identity();
#pragma unroll 1
    for (int o = threadIdx.x; o < M * STRIP; o += THREADS) {
        const int i = o / STRIP, c = o % STRIP;
        if (n0 + c < N) {
            const Acc total = sm.s.total[i][c];
            Out* const cp = out + i * ldc + n0 + c;
            *cp = Dtype<Out>::from(ep_id ? total : ep.apply<Out>(total, i, (int)(n0 + c), cp));
        }
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
// bias, bias_step, bias_along, bias_f32, activation), block (256,1,1); the one-vector entries at most 80
// registers a thread (three blocks an SM; ptxas keeps every variant within them without spills), those
// of R vectors or rows by min_blocks.
//
// matmul_gemv_n1_<dtype>[_f32out]: N == 1 (N is not read). Grid (1, min(ceil(M / 32), 65535), batch *
// splits): a block a tile of 32 rows, row tiles past the grid's in a grid-stride loop.
// matmul_gemv_m1bt_<dtype>[_f32out]: M == 1, B given as its storage (N rows of K, row stride ldb). Grid
// (ceil(N / 32), 1, batch * splits): a block a tile of 32 columns of C.
// matmul_gemv_m1_<dtype>[_f32out]: M == 1. Grid (ceil(N / 128), 1, batch * splits): a block a strip of 128
// columns; static shared memory for the warps' sums, 4 KiB (float64: 8 KiB).
// matmul_gemv_m1x32_<dtype>[_f32out]: M == 1. Grid (ceil(N / 32), 1, batch * splits): a block a strip of 32
// columns; static shared memory for the slices' sums, 4 KiB (float64: 8 KiB).

// One entry point: NAME(A, B, C, M, N, K, lda, ldb, ldc, k_chunk, the batch strides, the epilogue), block
// (THREADS,1,1), MIN_BLOCKS blocks an SM; its body (the variadic arguments) finds the block's matrices and k
// range in z.
#define GPUMAT_GEMV_ENTRY(NAME, T, OUT, MIN_BLOCKS, ...)                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS) NAME(                                  \
        const T* __restrict__ A, const T* __restrict__ B, OUT* __restrict__ C, int M, int N, int K,          \
        long long lda, long long ldb, long long ldc, int k_chunk, GPUMAT_BATCH_PARAMS, GPUMAT_EPILOGUE_PARAMS) \
    {                                                                                                         \
        gpumat::wait_for_previous_grid();                                                                     \
        const Work z = work(M, K, ldc, k_chunk, batch_a, batch_b, batch_c);                                   \
        __VA_ARGS__;                                                                                          \
    }

#define GPUMAT_GEMV(T, OUT, SFX)                                                                                  \
    GPUMAT_GEMV_ENTRY(matmul_gemv_n1_##SFX, T, OUT, 3,                                                            \
        dot_rows<T, OUT, false>(A + z.a, lda, B + z.b, ldb, C + z.c, ldc, M, z.k_begin, z.k_end, blockIdx.y,      \
                                gridDim.y, GPUMAT_EPILOGUE_ARGS))                                                 \
    GPUMAT_GEMV_ENTRY(matmul_gemv_m1bt_##SFX, T, OUT, 3,                                                          \
        dot_rows<T, OUT, true>(B + z.b, ldb, A + z.a, 1, C + z.c, 1, N, z.k_begin, z.k_end, blockIdx.x,           \
                               gridDim.x, GPUMAT_EPILOGUE_ARGS))                                                  \
    GPUMAT_GEMV_ENTRY(matmul_gemv_m1_##SFX, T, OUT, 3,                                                            \
        row_times_matrix<T, OUT, STRIP / COLS>(A + z.a, B + z.b, ldb, C + z.c, N, z.k_begin, z.k_end,             \
                                               GPUMAT_EPILOGUE_ARGS))                                             \
    GPUMAT_GEMV_ENTRY(matmul_gemv_m1x32_##SFX, T, OUT, 3,                                                         \
        row_times_matrix<T, OUT, NARROW_LANES>(A + z.a, B + z.b, ldb, C + z.c, N, z.k_begin, z.k_end,             \
                                              GPUMAT_EPILOGUE_ARGS))

GPUMAT_GEMV(float, float, f32)
GPUMAT_GEMV(double, double, f64)
GPUMAT_GEMV(__half, __half, f16)
GPUMAT_GEMV(__half, float, f16_f32out)
GPUMAT_GEMV(__nv_bfloat16, __nv_bfloat16, bf16)
GPUMAT_GEMV(__nv_bfloat16, float, bf16_f32out)

// matmul_gemv_n<R>_<dtype>[_f32out], R = 8, 16: N <= R (N past R is not read), B's N columns the vectors
// (x_r[k] at B[k * ldb + r]). Grid (1, min(ceil(M / 32), 65535), batch * splits) as gemv_n1.
// matmul_gemv_m<R>bt_<dtype>[_f32out]: M <= R, B given as its storage (N rows of K), A's M rows the vectors.
// Grid (ceil(N / 32), 1, batch * splits) as gemv_m1bt.
// matmul_gemv_m<R>_<dtype>[_f32out]: M <= R. Grid (ceil(N / 128), 1, batch * splits) as gemv_m1.
// Block (256,1,1); static shared memory: the staged vectors (two buffers of R x (GROUP + 4) floats, or
// R x (GROUP + 2) doubles: 16.5 KiB at R = 16, 33 KiB for 16-bit types) or the staged rows of A, which
// the warps' sums overlay afterwards (float32 R = 16: 24 KiB, float64 36 KiB).
#define GPUMAT_GEMV_R(T, OUT, SFX, R)                                                                             \
    GPUMAT_GEMV_ENTRY(matmul_gemv_n##R##_##SFX, T, OUT, min_blocks(R),                                            \
        dot_rows_multi<T, OUT, R, false>(A + z.a, lda, B + z.b, ldb, 1, min(N, R), C + z.c, ldc, M, z.k_begin,    \
                                         z.k_end, blockIdx.y, gridDim.y, GPUMAT_EPILOGUE_ARGS))                   \
    GPUMAT_GEMV_ENTRY(matmul_gemv_m##R##bt_##SFX, T, OUT, min_blocks(R),                                          \
        dot_rows_multi<T, OUT, R, true>(B + z.b, ldb, A + z.a, 1, lda, min(M, R), C + z.c, ldc, N, z.k_begin,     \
                                        z.k_end, blockIdx.x, gridDim.x, GPUMAT_EPILOGUE_ARGS))                    \
    GPUMAT_GEMV_ENTRY(matmul_gemv_m##R##_##SFX, T, OUT, min_blocks(R),                                            \
        rows_times_matrix<T, OUT, R>(A + z.a, lda, min(M, R), B + z.b, ldb, C + z.c, ldc, N, z.k_begin, z.k_end,  \
                                     GPUMAT_EPILOGUE_ARGS))
#define GPUMAT_GEMV_MULTI(T, OUT, SFX) \
    GPUMAT_GEMV_R(T, OUT, SFX, 8)      \
    GPUMAT_GEMV_R(T, OUT, SFX, 16)

GPUMAT_GEMV_MULTI(float, float, f32)
GPUMAT_GEMV_MULTI(double, double, f64)
GPUMAT_GEMV_MULTI(__half, __half, f16)
GPUMAT_GEMV_MULTI(__half, float, f16_f32out)
GPUMAT_GEMV_MULTI(__nv_bfloat16, __nv_bfloat16, bf16)
GPUMAT_GEMV_MULTI(__nv_bfloat16, float, bf16_f32out)
