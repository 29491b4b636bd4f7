// Sparse CSR x dense kernels: C (rows x N) = S (rows x K, CSR) @ B (K x N), B and C row-major, in float32
// or float64: the values, B, C and the sums share one dtype (entries end in _f32 or _f64; each family is
// one template over the value type V, instantiated by a macro).
//
// CSR on the device: indptr int64 (rows + 1 entries), indices int32, data of the value dtype. Column indices need
// not be sorted and may repeat (repeats add up). B and C come with their row strides ldb and ldc (in
// elements); every offset into B, C and the CSR arrays is 64-bit.
//
// Long rows. The host cuts every row with more than `split` nonzeros into chunks of `split` nonzeros
// (chunk_row[c], chunk_start[c]; a chunk ends at min(chunk_start + split, indptr[row + 1])). The row
// kernels skip those rows; the first `chunk_blocks` blocks of the same launch work on the chunks (so the
// heaviest work is dispatched first) and write one partial product row per chunk into a scratch matrix
// (row stride ldp). spmm_csr_reduce_chunks then adds each long row's partials in chunk order and writes
// its row of C. Every output element is summed by one thread in a fixed order: results are deterministic
// run to run, with no atomics.
//
// Blocks are 256 threads. gridDim.y covers column tiles (or single columns) and is capped at 65535 by
// the launcher; kernels walk any tiles beyond the cap in a grid-stride loop. Because blockIdx.y is the
// slowest-varying block index, a launch with several column tiles sweeps the sparse matrix once per tile,
// tile after tile: each sweep gathers from a narrower slice of B, which stays resident in L2.

// Blocks per SM the row-group kernels are compiled for: 4 (64 registers) where that fits without spills;
// sm_100 and sm_120's compilers need a few more registers for the same code.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#define GPUMAT_SPMM_MIN_BLOCKS 2
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define GPUMAT_SPMM_MIN_BLOCKS 3
#else
#define GPUMAT_SPMM_MIN_BLOCKS 4
#endif
// float64 values take twice the registers for B rows and sums in flight: half the blocks per SM.
#define GPUMAT_SPMM_MIN_BLOCKS_F64 (GPUMAT_SPMM_MIN_BLOCKS > 2 ? GPUMAT_SPMM_MIN_BLOCKS / 2 : 1)

namespace {

constexpr int BLOCK = 256;

__device__ __forceinline__ float madd(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double madd(double a, double b, double c) { return fma(a, b, c); }

// Four consecutive values of B (16-byte aligned) in 128-bit loads through the read-only path, and four
// values of C stored the same way: one float4, or two double2.
__device__ __forceinline__ void load4(const float* src, float (&b)[4])
{
    const float4 q = __ldg(reinterpret_cast<const float4*>(src));
    b[0] = q.x; b[1] = q.y; b[2] = q.z; b[3] = q.w;
}

__device__ __forceinline__ void load4(const double* src, double (&b)[4])
{
    const double2 q0 = __ldg(reinterpret_cast<const double2*>(src));
    const double2 q1 = __ldg(reinterpret_cast<const double2*>(src + 2));
    b[0] = q0.x; b[1] = q0.y; b[2] = q1.x; b[3] = q1.y;
}

__device__ __forceinline__ void store4(float* dst, const float (&v)[4])
{
    *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
}

__device__ __forceinline__ void store4(double* dst, const double (&v)[4])
{
    reinterpret_cast<double2*>(dst)[0] = make_double2(v[0], v[1]);
    reinterpret_cast<double2*>(dst)[1] = make_double2(v[2], v[3]);
}

// The lanes of the calling thread's group of LANES consecutive lanes (LANES a power of two <= 32).
template <int LANES>
__device__ __forceinline__ unsigned group_mask()
{
    if (LANES == 32)
        return 0xffffffffu;
    const unsigned lane = threadIdx.x & 31u;
    return ((1u << LANES) - 1u) << (lane & ~unsigned(LANES - 1));
}

// Work item of a row group: a whole short row (written to C) or one chunk of a long row (written to the
// scratch matrix). Returns false when the group has nothing to do in this launch.
template <class V>
__device__ __forceinline__ bool work_item(long long group_id, const long long* __restrict__ indptr,
                                          const int* __restrict__ chunk_row,
                                          const long long* __restrict__ chunk_start,
                                          V* __restrict__ C, V* __restrict__ partial,
                                          int rows, long long ldc, long long ldp, long long split,
                                          int n_chunks, int chunk_blocks, int groups_per_block,
                                          long long& start, long long& end, V*& out)
{
    if (blockIdx.x < (unsigned)chunk_blocks) {
        if (group_id >= n_chunks)
            return false;
        const int row = chunk_row[group_id];
        start = chunk_start[group_id];
        end = min(start + split, indptr[row + 1]);
        out = partial + group_id * ldp;
        return true;
    }
    const long long row = group_id - (long long)chunk_blocks * groups_per_block;
    if (row >= rows)
        return false;
    start = indptr[row];
    end = indptr[row + 1];
    if (end - start > split)
        return false;  // a long row: its chunks and spmm_csr_reduce_chunks produce it
    out = C + row * ldc;
    return true;
}

// ---------------------------------------------------------------------------------------------------
// GE-SpMM-style row-group product. A group of LANES lanes owns one work item (row or chunk) times one
// column tile of TILE = LANES * VEC columns of B; lane l owns columns col0 .. col0 + VEC - 1. Per step
// the group stages T = LANES * U nonzeros (column index + value) coalesced, U per lane, in registers,
// while the previous step's are consumed; every staged nonzero is broadcast to the group by warp
// shuffles and reused across all the group's columns. Each lane then issues a batch of independent
// loads of VEC consecutive floats of B (float4 when VEC == 4: a group reads a 32 B .. 512 B row segment
// in full 128-bit, fully coalesced accesses) before it does the multiply-adds, so several rows of B are
// in flight per lane and 32 warps per SM (64 registers). Lanes past column N (the last tile) load
// nothing and store nothing.
// ---------------------------------------------------------------------------------------------------
template <class V, int VEC, int LANES>
struct RowGroup {
    static constexpr int U = LANES >= 8 ? 1 : 8 / LANES;  // nonzeros each lane stages per step
    static constexpr int T = LANES * U;                   // nonzeros the group consumes per step
    static constexpr int BMAX = VEC == 4 ? 4 : 8;         // keeps sm_90 at 64 registers, 4 blocks/SM
    static constexpr int BATCH = T < BMAX ? T : BMAX;     // B loads grouped per lane (the compiler may hoist more)

    __device__ __forceinline__ static void stage(int (&ci)[U], V (&cv)[U], const int* __restrict__ indices,
                                                 const V* __restrict__ data, long long p, long long end,
                                                 int lane)
    {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const long long q = p + u * LANES + lane;
            ci[u] = q < end ? __ldg(indices + q) : 0;
            cv[u] = q < end ? __ldg(data + q) : V(0);
        }
    }

    // acc += sum over the staged nonzeros t < count of value_t * B[col_t, col0 : col0 + VEC].
    template <bool PARTIAL>
    __device__ __forceinline__ static void consume(V (&acc)[VEC], const int (&ci)[U], const V (&cv)[U],
                                                   int count, unsigned mask, const V* __restrict__ Bc,
                                                   long long ldb, int valid)
    {
#pragma unroll
        for (int t0 = 0; t0 < T; t0 += BATCH) {
            int c[BATCH];
            V v[BATCH];
#pragma unroll
            for (int t = 0; t < BATCH; ++t) {
                c[t] = __shfl_sync(mask, ci[(t0 + t) / LANES], (t0 + t) % LANES, LANES);
                v[t] = __shfl_sync(mask, cv[(t0 + t) / LANES], (t0 + t) % LANES, LANES);
            }
            if (valid >= VEC) {  // the whole vector lies inside B: no shuffles in here, loads hoist freely
                V b[BATCH][VEC];
#pragma unroll
                for (int t = 0; t < BATCH; ++t) {
                    const V* src = Bc + (long long)c[t] * ldb;
                    if (!PARTIAL || t0 + t < count) {
                        if constexpr (VEC == 4) {
                            load4(src, b[t]);
                        } else {
#pragma unroll
                            for (int e = 0; e < VEC; ++e)
                                b[t][e] = __ldg(src + e);
                        }
                    }
                }
#pragma unroll
                for (int t = 0; t < BATCH; ++t)
                    if (!PARTIAL || t0 + t < count) {
#pragma unroll
                        for (int e = 0; e < VEC; ++e)
                            acc[e] = madd(v[t], b[t][e], acc[e]);
                    }
            } else if (valid > 0) {  // the last column tile: element by element, up to column N
#pragma unroll
                for (int t = 0; t < BATCH; ++t) {
                    if (!PARTIAL || t0 + t < count) {
                        const V* src = Bc + (long long)c[t] * ldb;
#pragma unroll
                        for (int e = 0; e < VEC; ++e)
                            if (e < valid)
                                acc[e] = madd(v[t], __ldg(src + e), acc[e]);
                    }
                }
            }
        }
    }

    // out[col0 : col0 + VEC] = sum over nonzeros p in [start, end) of data[p] * B[indices[p], col0 : ...].
    __device__ __forceinline__ static void product(const int* __restrict__ indices, const V* __restrict__ data,
                                                   const V* __restrict__ B, V* __restrict__ out,
                                                   long long start, long long end, int N, long long ldb,
                                                   int lane, unsigned mask, int tile)
    {
        const int col0 = tile * (LANES * VEC) + lane * VEC;
        const int valid = N - col0;
        const V* Bc = B + col0;
        V acc[VEC];
#pragma unroll
        for (int e = 0; e < VEC; ++e)
            acc[e] = V(0);
        int ci[U], ni[U];
        V cv[U], nv[U];
        stage(ci, cv, indices, data, start, end, lane);
        for (long long p = start; p < end; p += T) {
            stage(ni, nv, indices, data, p + T, end, lane);  // the next step's nonzeros, in flight meanwhile
            const long long left = end - p;
            if (left >= T)
                consume<false>(acc, ci, cv, T, mask, Bc, ldb, valid);
            else
                consume<true>(acc, ci, cv, (int)left, mask, Bc, ldb, valid);
#pragma unroll
            for (int u = 0; u < U; ++u) {
                ci[u] = ni[u];
                cv[u] = nv[u];
            }
        }
        V* dst = out + col0;
        if constexpr (VEC == 4) {
            if (valid >= 4) {
                store4(dst, acc);
                return;
            }
        }
#pragma unroll
        for (int e = 0; e < VEC; ++e)
            if (e < valid)
                dst[e] = acc[e];
    }

    __device__ __forceinline__ static void run(const long long* __restrict__ indptr, const int* __restrict__ indices,
                                               const V* __restrict__ data, const V* __restrict__ B,
                                               V* __restrict__ C, V* __restrict__ partial,
                                               const int* __restrict__ chunk_row,
                                               const long long* __restrict__ chunk_start, int rows, int N,
                                               long long ldb, long long ldc, long long ldp, long long split,
                                               int n_chunks, int chunk_blocks)
    {
        constexpr int GROUPS = BLOCK / LANES;
        const int lane = threadIdx.x % LANES;
        const long long group_id = (long long)blockIdx.x * GROUPS + threadIdx.x / LANES;
        long long start, end;
        V* out;
        if (!work_item(group_id, indptr, chunk_row, chunk_start, C, partial, rows, ldc, ldp, split, n_chunks,
                       chunk_blocks, GROUPS, start, end, out))
            return;  // the whole group leaves together; other groups' shuffles name only their own lanes
        const unsigned mask = group_mask<LANES>();
        const int tiles = (N + LANES * VEC - 1) / (LANES * VEC);
        for (int tile = blockIdx.y; tile < tiles; tile += gridDim.y)
            product(indices, data, B, out, start, end, N, ldb, lane, mask, tile);
    }
};

// ---------------------------------------------------------------------------------------------------
// Vector SpMV: a group of LANES lanes per row, the lanes striding through the row's nonzeros and
// combining their partial sums by an xor-shuffle tree (a fixed order). gridDim.y covers columns of B
// one at a time, so it also serves N > 1 (slowly: each column re-reads the row).
// ---------------------------------------------------------------------------------------------------
template <class V, int LANES>
__device__ __forceinline__ V row_dot(const int* __restrict__ indices, const V* __restrict__ data,
                                         const V* __restrict__ Bj, long long ldb, long long start,
                                         long long end, int lane, unsigned mask)
{
    V acc0 = V(0), acc1 = V(0);
    long long p = start + lane;
    for (; p + LANES < end; p += 2 * LANES) {  // two independent gathers in flight per lane
        const int c0 = __ldg(indices + p), c1 = __ldg(indices + p + LANES);
        const V v0 = __ldg(data + p), v1 = __ldg(data + p + LANES);
        acc0 = madd(v0, __ldg(Bj + (long long)c0 * ldb), acc0);
        acc1 = madd(v1, __ldg(Bj + (long long)c1 * ldb), acc1);
    }
    if (p < end)
        acc0 = madd(__ldg(data + p), __ldg(Bj + (long long)__ldg(indices + p) * ldb), acc0);
    V acc = acc0 + acc1;
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1)
        acc += __shfl_xor_sync(mask, acc, o, LANES);
    return acc;
}

template <class V, int LANES>
__device__ __forceinline__ void spmv_rows(const long long* __restrict__ indptr, const int* __restrict__ indices,
                                          const V* __restrict__ data, const V* __restrict__ B,
                                          V* __restrict__ C, V* __restrict__ partial,
                                          const int* __restrict__ chunk_row,
                                          const long long* __restrict__ chunk_start, int rows, int N,
                                          long long ldb, long long ldc, long long ldp, long long split,
                                          int n_chunks, int chunk_blocks)
{
    constexpr int GROUPS = BLOCK / LANES;
    const int lane = threadIdx.x % LANES;
    const long long group_id = (long long)blockIdx.x * GROUPS + threadIdx.x / LANES;
    long long start, end;
    V* out;
    if (!work_item(group_id, indptr, chunk_row, chunk_start, C, partial, rows, ldc, ldp, split, n_chunks,
                   chunk_blocks, GROUPS, start, end, out))
        return;
    const unsigned mask = group_mask<LANES>();
    for (int j = blockIdx.y; j < N; j += gridDim.y) {
        const V acc = row_dot<V, LANES>(indices, data, B + j, ldb, start, end, lane, mask);
        if (lane == 0)
            out[j] = acc;
    }
}

// ---------------------------------------------------------------------------------------------------
// Entry bodies, one template each over the value type V.
// ---------------------------------------------------------------------------------------------------
template <class V>
__device__ __forceinline__ void csr_scalar(const long long* __restrict__ indptr, const int* __restrict__ indices,
                                           const V* __restrict__ data, const V* __restrict__ B, V* __restrict__ C,
                                           int rows, int N, long long ldb, long long ldc)
{
    const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows)
        return;
    const long long start = indptr[row], end = indptr[row + 1];
    for (int j = blockIdx.y; j < N; j += gridDim.y) {
        V acc = V(0);
        for (long long p = start; p < end; ++p)
            acc = madd(data[p], B[(long long)indices[p] * ldb + j], acc);
        C[row * ldc + j] = acc;
    }
}

template <class V>
__device__ __forceinline__ void csr_vector(const long long* __restrict__ indptr, const int* __restrict__ indices,
                                           const V* __restrict__ data, const V* __restrict__ B, V* __restrict__ C,
                                           V* __restrict__ partial, const int* __restrict__ chunk_row,
                                           const long long* __restrict__ chunk_start, int rows, int N, long long ldb,
                                           long long ldc, long long ldp, long long split, int n_chunks,
                                           int chunk_blocks, int lanes)
{
#define GPUMAT_SPMV_ROWS(L) \
    spmv_rows<V, L>(indptr, indices, data, B, C, partial, chunk_row, chunk_start, rows, N, ldb, ldc, ldp, split, \
                    n_chunks, chunk_blocks)
    if (blockIdx.x < (unsigned)chunk_blocks) {
        GPUMAT_SPMV_ROWS(32);
        return;
    }
    // row blocks: work_item rebases the group number past the chunk blocks for the group size in use
    switch (lanes) {
    case 2: GPUMAT_SPMV_ROWS(2); break;
    case 4: GPUMAT_SPMV_ROWS(4); break;
    case 8: GPUMAT_SPMV_ROWS(8); break;
    case 16: GPUMAT_SPMV_ROWS(16); break;
    default: GPUMAT_SPMV_ROWS(32); break;
    }
#undef GPUMAT_SPMV_ROWS
}

template <class V>
__device__ __forceinline__ void reduce_chunks(const V* __restrict__ partial, const int* __restrict__ long_rows,
                                              const int* __restrict__ chunk_ptr, V* __restrict__ C, int n_long, int N,
                                              long long ldp, long long ldc)
{
    for (int i = blockIdx.y * blockDim.y + threadIdx.y; i < n_long; i += gridDim.y * blockDim.y) {
        const int c0 = chunk_ptr[i], c1 = chunk_ptr[i + 1];
        V* dst = C + (long long)long_rows[i] * ldc;
        for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < N; j += gridDim.x * blockDim.x) {
            V acc = V(0);
            for (int c = c0; c < c1; ++c)
                acc += partial[(long long)c * ldp + j];
            dst[j] = acc;
        }
    }
}

template <class V>
__device__ __forceinline__ void to_dense(const long long* __restrict__ indptr, const int* __restrict__ indices,
                                         const V* __restrict__ data, V* __restrict__ C, int rows, long long ldc)
{
    const long long row = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows)
        return;
    V* dst = C + row * ldc;
    const long long end = indptr[row + 1];
    for (long long p = indptr[row]; p < end; ++p)
        dst[indices[p]] += data[p];
}

}  // namespace

// spmm_csr_scalar_<dtype>(indptr, indices, data, B, C, rows, N, ldb, ldc). The baseline: one thread per
// row and column of C, walking the row's nonzeros in order and gathering B[col, j] one value at a time
// (adjacent threads read unrelated rows of B: uncoalesced).
// Launch: block (256), grid (ceil(rows / 256), min(N, 65535)).
//
// spmv_csr_vector_<dtype>(indptr, indices, data, B, C, partial, chunk_row, chunk_start, rows, N, ldb, ldc,
// ldp, split, n_chunks, chunk_blocks, lanes). Vector SpMV (also any N, one column per grid row): `lanes`
// (2, 4, 8, 16 or 32, chosen on the host from the row lengths) lanes per row; chunks of long rows take a
// full warp each. Launch: block (256), grid (chunk_blocks + ceil(rows / (256 / lanes)), min(N, 65535)),
// chunk_blocks = ceil(n_chunks / 8).
//
// spmm_csr_reduce_chunks_<dtype>(partial, long_rows, chunk_ptr, C, n_long, N, ldp, ldc). Second pass for
// long rows: C[long_rows[i], j] = sum over its chunks c (chunk_ptr[i] .. chunk_ptr[i+1], in order) of
// partial[c, j]. One thread per output element.
// Launch: block (32, 8), grid (min(ceil(N / 32), 65535), min(ceil(n_long / 8), 65535)).
//
// csr_to_dense_<dtype>(indptr, indices, data, C, rows, ldc). CSR -> dense, into a C already filled with
// zeros: one thread per row adds the row's nonzeros in order (repeated columns add up, deterministically).
// Launch: block (256), grid (ceil(rows / 256)).
#define GPUMAT_SPMM_BASIC(SFX, V, MINB)                                                                       \
    extern "C" __global__ void __launch_bounds__(BLOCK) spmm_csr_scalar_##SFX(                                \
        const long long* __restrict__ indptr, const int* __restrict__ indices, const V* __restrict__ data,     \
        const V* __restrict__ B, V* __restrict__ C, int rows, int N, long long ldb, long long ldc)             \
    {                                                                                                          \
        csr_scalar<V>(indptr, indices, data, B, C, rows, N, ldb, ldc);                                         \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(BLOCK) spmv_csr_vector_##SFX(                                \
        const long long* __restrict__ indptr, const int* __restrict__ indices, const V* __restrict__ data,     \
        const V* __restrict__ B, V* __restrict__ C, V* __restrict__ partial,                                   \
        const int* __restrict__ chunk_row, const long long* __restrict__ chunk_start, int rows, int N,         \
        long long ldb, long long ldc, long long ldp, long long split, int n_chunks, int chunk_blocks, int lanes) \
    {                                                                                                          \
        csr_vector<V>(indptr, indices, data, B, C, partial, chunk_row, chunk_start, rows, N, ldb, ldc, ldp,    \
                      split, n_chunks, chunk_blocks, lanes);                                                   \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(BLOCK) spmm_csr_reduce_chunks_##SFX(                         \
        const V* __restrict__ partial, const int* __restrict__ long_rows, const int* __restrict__ chunk_ptr,   \
        V* __restrict__ C, int n_long, int N, long long ldp, long long ldc)                                    \
    {                                                                                                          \
        reduce_chunks<V>(partial, long_rows, chunk_ptr, C, n_long, N, ldp, ldc);                               \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(BLOCK) csr_to_dense_##SFX(                                   \
        const long long* __restrict__ indptr, const int* __restrict__ indices, const V* __restrict__ data,     \
        V* __restrict__ C, int rows, long long ldc)                                                            \
    {                                                                                                          \
        to_dense<V>(indptr, indices, data, C, rows, ldc);                                                      \
    }

GPUMAT_SPMM_BASIC(f32, float, GPUMAT_SPMM_MIN_BLOCKS)
GPUMAT_SPMM_BASIC(f64, double, GPUMAT_SPMM_MIN_BLOCKS_F64)

// Row-group SpMM kernels (see RowGroup above), one entry per (column tile, vector width, dtype):
// spmm_csr_tile<TILE>_v<VEC>_<dtype> has groups of TILE / VEC lanes, 256 / (TILE / VEC) work items per
// block; arguments as spmv_csr_vector's without `lanes`.
// VEC = 4 needs B and C 16-byte aligned and ldb, ldc multiples of 4 (float32) or of 2 (float64);
// VEC = 1 takes any B and C.
// Launch: block (256), grid (chunk_blocks + ceil(rows / groups), min(ceil(N / TILE), 65535)),
// chunk_blocks = ceil(n_chunks / groups), groups = 256 * VEC / TILE.
#define GPUMAT_SPMM_TILE(TILE, VEC, SFX, V, MINB)                                                              \
    extern "C" __global__ void __launch_bounds__(BLOCK, MINB) spmm_csr_tile##TILE##_v##VEC##_##SFX(            \
        const long long* __restrict__ indptr, const int* __restrict__ indices, const V* __restrict__ data,     \
        const V* __restrict__ B, V* __restrict__ C, V* __restrict__ partial,                                   \
        const int* __restrict__ chunk_row, const long long* __restrict__ chunk_start, int rows, int N,         \
        long long ldb, long long ldc, long long ldp, long long split, int n_chunks, int chunk_blocks)          \
    {                                                                                                          \
        RowGroup<V, VEC, TILE / VEC>::run(indptr, indices, data, B, C, partial, chunk_row, chunk_start, rows, \
                                          N, ldb, ldc, ldp, split, n_chunks, chunk_blocks);                    \
    }
#define GPUMAT_SPMM_TILES(SFX, V, MINB)          \
    GPUMAT_SPMM_TILE(8, 4, SFX, V, MINB)         \
    GPUMAT_SPMM_TILE(16, 4, SFX, V, MINB)        \
    GPUMAT_SPMM_TILE(32, 4, SFX, V, MINB)        \
    GPUMAT_SPMM_TILE(64, 4, SFX, V, MINB)        \
    GPUMAT_SPMM_TILE(128, 4, SFX, V, MINB)       \
    GPUMAT_SPMM_TILE(8, 1, SFX, V, MINB)         \
    GPUMAT_SPMM_TILE(16, 1, SFX, V, MINB)        \
    GPUMAT_SPMM_TILE(32, 1, SFX, V, MINB)

GPUMAT_SPMM_TILES(f32, float, GPUMAT_SPMM_MIN_BLOCKS)
GPUMAT_SPMM_TILES(f64, double, GPUMAT_SPMM_MIN_BLOCKS_F64)
