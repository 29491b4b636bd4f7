// Transpose kernels: B (cols x rows) = A (rows x cols)^T, row-major, for 1-, 2-, 4- and 8-byte elements.
// Kernels move bits and never convert: each family is one template over an unsigned integer type of the
// element's size, instantiated once per dtype (_f32, _f64, _f16, _bf16, _s8; f16 and bf16 share the
// 2-byte code, and int32 matrices move through the _f32 entries). Both matrices come with their own row stride (lda, ldb, in elements); every offset is 64-bit,
// so matrices of more than 2^31 elements work. Unless a family says otherwise, the launcher gives
// blockIdx.x the column tiles of A and caps gridDim.y at 65535, and each block walks the row tiles of
// A in a grid-stride loop. Every variant works for any shape: tiles that stick out of A are
// bounds-checked element by element.
// Every entry takes a batch: `batch` matrices, A's bsa and B's bsb elements apart (0: one matrix each),
// matrix blockIdx.z of them a block (up to 65535 a launch: the host launches a larger batch in pieces).
// The entries' launch bounds name the blocks an SM (1024 / threads, at most 64 registers a thread): left
// to itself, ptxas capped some 16-bit and tiled kernels lower and spilled on sm_75, sm_80, sm_90 or
// sm_120 once the batch's offset was added.
#include "gpumat.cuh"

using gpumat::copy_async;
using gpumat::wait_async;

namespace {

// Global -> shared copy of one element: cp.async for 4 and 8 bytes, a plain load and store for 2.
template <class T>
__device__ __forceinline__ void stage(T* smem, const T* gmem)
{
    if constexpr (sizeof(T) >= 4)
        copy_async<sizeof(T)>(smem, gmem);
    else
        *smem = *gmem;
}

// Shared-memory row padding, in elements, that makes a tile row an odd number of 4-byte words (one
// element for 4 and 8 bytes, two for 2 bytes, four for 1 byte), so a column of the tile falls in 32
// different banks.
template <class T>
__host__ __device__ constexpr int pad_elems() { return sizeof(T) == 1 ? 4 : sizeof(T) == 2 ? 2 : 1; }

// ---------------------------------------------------------------------------------------------------
// naive: one thread per element, straight from global memory to global memory: the reads along a row
// of A are coalesced, the writes go down a column of B (one 32-byte sector touched per element).
// Launch: block (32, 8), grid (ceil(cols/32), min(ceil(rows/8), 65535)).
// ---------------------------------------------------------------------------------------------------
template <class T>
__device__ __forceinline__ void naive(const T* __restrict__ A, T* __restrict__ B,
                                      long long rows, long long cols, long long lda, long long ldb)
{
    const long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (long long r = (long long)blockIdx.y * blockDim.y + threadIdx.y; r < rows;
         r += (long long)gridDim.y * blockDim.y)
        B[c * ldb + r] = A[r * lda + c];
}

// ---------------------------------------------------------------------------------------------------
// The shared-memory tile (seed 001, generalised). A block of 32 x BY threads moves a TILE x TILE
// tile of A: it reads rows of the tile (coalesced along a row of A) into shared memory, and after
// the barrier writes rows of the transposed tile (coalesced along a row of B), reading shared memory
// down a column. Each thread moves (TILE/32) x (TILE/BY) elements. PAD pads each tile row to an odd
// number of words (pad_elems) so a column read hits 32 banks; PAD = false is the textbook tile whose
// column reads are 32-way bank conflicts.
// A tile that lies wholly inside A skips the per-element bounds checks; with ASYNC (and 4- or 8-byte
// elements) its loads go straight to shared memory through cp.async (ptxas otherwise interleaves
// loads with shared stores to fit its register budget, leaving only a few loads in flight per thread).
// ---------------------------------------------------------------------------------------------------
template <class T, int TILE, int BY, bool PAD, bool ASYNC>
__device__ __forceinline__ void tiles(const T* __restrict__ A, T* __restrict__ B,
                                      long long rows, long long cols, long long lda, long long ldb)
{
    static_assert(TILE % 32 == 0 && TILE % BY == 0, "tile must split evenly over the thread block");
    constexpr int NX = TILE / 32, NY = TILE / BY;
    __shared__ T tile[TILE][TILE + (PAD ? pad_elems<T>() : 0)];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long c0 = (long long)blockIdx.x * TILE;
    const long long row_tiles = (rows + TILE - 1) / TILE;
    for (long long t = blockIdx.y; t < row_tiles; t += gridDim.y) {
        const long long r0 = t * TILE;
        const T* a = A + r0 * lda + c0;   // tile corner in A: rows r0.., columns c0..
        T* b = B + c0 * ldb + r0;         // tile corner in B: rows c0.., columns r0..
        if (r0 + TILE <= rows && c0 + TILE <= cols) {
            if constexpr (ASYNC && sizeof(T) >= 4) {
#pragma unroll
                for (int k = 0; k < NY; ++k)
#pragma unroll
                    for (int j = 0; j < NX; ++j)
                        stage(&tile[ty + k * BY][tx + j * 32], a + (ty + k * BY) * lda + tx + j * 32);
                wait_async();
            } else {
                T v[NY][NX];   // every load written before the first shared-memory store
#pragma unroll
                for (int k = 0; k < NY; ++k)
#pragma unroll
                    for (int j = 0; j < NX; ++j)
                        v[k][j] = a[(ty + k * BY) * lda + tx + j * 32];
#pragma unroll
                for (int k = 0; k < NY; ++k)
#pragma unroll
                    for (int j = 0; j < NX; ++j)
                        tile[ty + k * BY][tx + j * 32] = v[k][j];
            }
            __syncthreads();
#pragma unroll
            for (int k = 0; k < NY; ++k)
#pragma unroll
                for (int j = 0; j < NX; ++j)
                    b[(ty + k * BY) * ldb + tx + j * 32] = tile[tx + j * 32][ty + k * BY];
        } else {
            const int h = (int)min((long long)TILE, rows - r0);   // rows of A in this tile
            const int w = (int)min((long long)TILE, cols - c0);   // columns of A in this tile
#pragma unroll
            for (int k = 0; k < NY; ++k)
#pragma unroll
                for (int j = 0; j < NX; ++j) {
                    const int i = ty + k * BY, jj = tx + j * 32;
                    if (i < h && jj < w)
                        tile[i][jj] = a[i * lda + jj];
                }
            __syncthreads();
#pragma unroll
            for (int k = 0; k < NY; ++k)
#pragma unroll
                for (int j = 0; j < NX; ++j) {
                    const int i = ty + k * BY, jj = tx + j * 32;   // row i of B's tile, column jj
                    if (i < w && jj < h)
                        b[i * ldb + jj] = tile[jj][i];
                }
        }
        __syncthreads();   // the next tile overwrites shared memory
    }
}

// tiled: seed 001's kernel with bounds checks: block (32, 32), one element per thread, unpadded tile.
// Launch: block (32, 32), grid (ceil(cols/32), min(ceil(rows/32), 65535)).
template <class T>
__device__ __forceinline__ void tiled(const T* __restrict__ A, T* __restrict__ B, long long rows, long long cols,
                                      long long lda, long long ldb)
{
    tiles<T, 32, 32, false, false>(A, B, rows, cols, lda, ldb);
}

// tiled_padded: the same with the tile rows padded against bank conflicts.
// Launch: block (32, 32), grid (ceil(cols/32), min(ceil(rows/32), 65535)).
template <class T>
__device__ __forceinline__ void tiled_padded(const T* __restrict__ A, T* __restrict__ B, long long rows,
                                             long long cols, long long lda, long long ldb)
{
    tiles<T, 32, 32, true, false>(A, B, rows, cols, lda, ldb);
}

// tiled_rect: 32 x 8 threads move a padded 32 x 32 tile, four elements each, so each thread has four
// loads in flight before the barrier.
// Launch: block (32, 8), grid (ceil(cols/32), min(ceil(rows/32), 65535)).
template <class T>
__device__ __forceinline__ void tiled_rect(const T* __restrict__ A, T* __restrict__ B, long long rows,
                                           long long cols, long long lda, long long ldb)
{
    tiles<T, 32, 8, true, false>(A, B, rows, cols, lda, ldb);
}

// tiled_rect64: 32 x 8 threads move a padded 64 x 64 tile, sixteen elements each, loaded with cp.async
// (4- and 8-byte elements; registers for 2-byte ones): four times the bytes in flight per thread, longer
// row segments, a quarter as many tiles and barriers. Shared memory: 64 x 65 elements (8.3 / 16.6 / 33.3 KB).
// Launch: block (32, 8), grid (ceil(cols/64), min(ceil(rows/64), 65535)).
template <class T>
__device__ __forceinline__ void tiled_rect64(const T* __restrict__ A, T* __restrict__ B, long long rows,
                                             long long cols, long long lda, long long ldb)
{
    tiles<T, 64, 8, true, true>(A, B, rows, cols, lda, ldb);
}

// ---------------------------------------------------------------------------------------------------
// sector_aligned: whole 32-byte sectors of B at any stride. With a row stride of B that is not a
// multiple of a sector, every row of B starts at a different offset within its sector, so the tiles
// above leave a partial sector at both ends of each row piece they write, the other part written by
// another block, at another time. Partial sectors are what cost there, not the reads: on the H200,
// float32 8192^2 through tiled_rect64 ran at 0.68 of the copy with B's stride odd, 0.88 with it a whole
// number of sectors off a power of two, and 0.90 with A's stride odd instead. Here, with
// S = 32 / sizeof(T) elements a sector, each row c of B takes from row tile t the 64 elements
// r in [64t - m, 64t + 64 - m), m = (address of B(c, 0) in elements) mod S: the piece starts on a
// sector boundary, so every sector is written whole by one block (only the matrix's own first and last
// sectors of a row can be partial). m does not depend on t, so the pieces of a row tile it exactly, and
// a thread works out the m of its eight rows of B from two integers.
// A block stages A rows 64t - (S-1) .. 64t + 63 and columns 64 bx .. +63 (cp.async for 4 and 8 bytes),
// then writes 64 rows of B, a warp 128 or 256 contiguous bytes of one row an instruction. Pointers are
// stepped, not recomputed; a tile past A's last column checks its columns, and the first and last row
// tiles their rows, by small integer compares (an element-by-element path there had made matrices of
// under a few hundred rows 2-4 times slower).
// Launch: block (32, 8), grid (ceil(cols/64), min(ceil((rows + S - 1)/64), 65535)); shared memory
// 8 ceil((63 + S) / 8) x (64 + pad) elements: 8.8 KB (1 byte), 10.6 KB (2), 18.7 KB (4), 37.4 KB (8).
// ---------------------------------------------------------------------------------------------------
constexpr int SECTOR_TILE = 64, SECTOR_BY = 8;

template <class T>
struct SectorTile {
    static constexpr int SECTOR = 32 / (int)sizeof(T), SKEW = SECTOR - 1, STAGED = SECTOR_TILE + SKEW;
    static constexpr int KS = (STAGED + SECTOR_BY - 1) / SECTOR_BY;   // staged rows a thread row; the last pass is partial
    static constexpr int PITCH = SECTOR_TILE + pad_elems<T>();
};

// One tile of sector_aligned: staged rows i_lo <= i < i_hi lie inside A (CHECK_ROWS false: all of them).
template <class T, bool CHECK_ROWS>
__device__ __forceinline__ void sector_tile(const T* __restrict__ A, T* __restrict__ B, T (*tile)[SectorTile<T>::PITCH],
                                            int m0, int dm, long long lda, long long ldb, long long r0, long long c0,
                                            int w, int i_lo, int i_hi)
{
    using G = SectorTile<T>;
    constexpr int TILE = SECTOR_TILE, BY = SECTOR_BY, SKEW = G::SKEW, STAGED = G::STAGED, KS = G::KS;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const T* a = A + (r0 - SKEW + ty) * lda + c0 + tx;
#pragma unroll
    for (int k = 0; k < KS; ++k, a += BY * lda) {
        const int i = ty + BY * k;
        if ((k < KS - 1 || i < STAGED) && (!CHECK_ROWS || (i >= i_lo && i < i_hi))) {
            if (tx < w) stage(&tile[i][tx], a);
            if (tx + 32 < w) stage(&tile[i][tx + 32], a + 32);
        }
    }
    wait_async();
    __syncthreads();
    // element e of a piece of B's row is A's row r0 - m + e, staged row e + SKEW - m
    T* b = B + (c0 + ty) * ldb + r0 + tx;
#pragma unroll
    for (int k = 0; k < TILE / BY; ++k, b += BY * ldb) {
        const int j = ty + BY * k, m = (m0 + k * dm) & (G::SECTOR - 1), s = tx + SKEW - m;
        if (j < w) {
            if (!CHECK_ROWS || (s >= i_lo && s < i_hi)) b[-m] = tile[s][j];
            if (!CHECK_ROWS || (s + 32 >= i_lo && s + 32 < i_hi)) b[32 - m] = tile[s + 32][j];
        }
    }
    __syncthreads();   // the next tile overwrites shared memory
}

template <class T>
__device__ __forceinline__ void sector_aligned(const T* __restrict__ A, T* __restrict__ B, long long rows,
                                               long long cols, long long lda, long long ldb)
{
    using G = SectorTile<T>;
    constexpr int TILE = SECTOR_TILE, BY = SECTOR_BY, SECTOR = G::SECTOR, SKEW = G::SKEW, STAGED = G::STAGED;
    __shared__ T tile[G::KS * BY][G::PITCH];   // tile[i][j] = A(64t - SKEW + i, c0 + j)
    const int ty = threadIdx.y;
    const long long c0 = (long long)blockIdx.x * TILE;
    const long long row_tiles = (rows + SKEW + TILE - 1) / TILE;
    const unsigned long long b_elem = reinterpret_cast<unsigned long long>(B) / sizeof(T);
    // B's row c0 + ty + 8k shifts by (m0 + k dm) mod SECTOR (registers for eight shifts spilled on sm_100)
    const int m0 = (int)((b_elem + (unsigned long long)(c0 + ty) * (unsigned long long)ldb) & (SECTOR - 1));
    const int dm = (int)((BY * ldb) & (SECTOR - 1));
    const int w = (int)min((long long)TILE, cols - c0);   // columns of A in the tile
    for (long long t = blockIdx.y; t < row_tiles; t += gridDim.y) {
        const long long r0 = t * TILE, r_first = r0 - SKEW;
        // staged row i holds A's row r_first + i: inside A for i_lo <= i < i_hi
        const int i_lo = (int)max(-r_first, 0LL), i_hi = (int)min(rows - r_first, (long long)STAGED);
        if (i_lo == 0 && i_hi == STAGED)
            sector_tile<T, false>(A, B, tile, m0, dm, lda, ldb, r0, c0, w, 0, STAGED);
        else
            sector_tile<T, true>(A, B, tile, m0, dm, lda, ldb, r0, c0, w, i_lo, i_hi);
    }
}

// ---------------------------------------------------------------------------------------------------
// narrow_cols: A with at most 127 columns (a tall, narrow matrix; B short and wide). A block takes a
// strip of R whole rows of A (R = (E / P) rounded down to a multiple of 16, P = cols | 1 the odd
// shared-memory row pitch, E = BYTES of elements), reads the strip as one flat run (contiguous when
// lda == cols: every lane busy, whatever the width), then writes the strip's cols rows of B, each a
// contiguous run of R elements, again walking one flat index so every lane is busy. Flat indices turn
// into (row, column) by a cursor stepped by divmod(256, width): no division in the loops. Shared
// memory reads down a column have the odd pitch P: no bank conflicts. For 4- and 8-byte elements of an
// odd width, contiguous and 16-byte aligned, the strip is staged with 16-byte cp.async (its layout is
// the staged one), not element by element.
// Launch: block (256), grid (1, min(ceil(rows / R), 65535)); BYTES of shared memory (narrow_cols: 32 KB,
// narrow_cols16k: 16 KB).
// ---------------------------------------------------------------------------------------------------
constexpr int NARROW_THREADS = 256;

template <class T, int BYTES>
__device__ __forceinline__ void narrow_cols_impl(const T* __restrict__ A, T* __restrict__ B, long long rows,
                                                 long long cols, long long lda, long long ldb)
{
    constexpr int E = BYTES / (int)sizeof(T);
    __shared__ __align__(16) T sm[E];
    if (cols < 1 || cols > 127) return;   // the launcher's contract
    const int w = (int)cols, P = w | 1, R = (E / P) & ~15;
    const int tid = threadIdx.x;
    const int di = NARROW_THREADS / w, dj = NARROW_THREADS % w;
    const long long strips = (rows + R - 1) / R;
    // a contiguous, 16-byte aligned A: the strip (a multiple of 16 rows from A's start) is staged as 16-byte
    // chunks. An odd width keeps the staged layout (pitch w = P); a width of 4, 8 or 16 4-byte elements is
    // staged raw (pitch w) and written a chunk a lane (its reads down a column would meet in a few banks)
    const bool contiguous = lda == cols && (reinterpret_cast<unsigned long long>(A) & 15) == 0;
    const bool flat = sizeof(T) >= 4 && (w & 1) && contiguous;
    const bool chunked = sizeof(T) == 4 && (w == 4 || w == 8 || w == 16) && contiguous;
    for (long long s = blockIdx.y; s < strips; s += gridDim.y) {
        const long long r0 = s * R;
        const int h = (int)min((long long)R, rows - r0);
        const int n = h * w;
        const T* a = A + r0 * lda;
        int i = tid / w, j = tid % w;
        if (flat || chunked) {
            constexpr int V = 16 / (int)sizeof(T);
            const int chunks = n / V;
            for (int c = tid; c < chunks; c += NARROW_THREADS)
                copy_async<16>(&sm[V * c], a + V * c);
            for (int e = V * chunks + tid; e < n; e += NARROW_THREADS)
                sm[e] = a[e];
            wait_async();
        } else if constexpr (sizeof(T) >= 4) {
            for (int f = tid; f < n; f += NARROW_THREADS) {
                stage(&sm[i * P + j], a + i * lda + j);
                i += di; j += dj;
                if (j >= w) { j -= w; ++i; }
            }
            wait_async();
        } else {
            constexpr int U = 8;   // loads in flight per thread before their shared stores
            for (int f = tid; f < n; f += U * NARROW_THREADS) {
                T v[U];
                int at[U];
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    at[u] = f + u * NARROW_THREADS < n ? i * P + j : -1;
                    if (at[u] >= 0) v[u] = a[i * lda + j];
                    i += di; j += dj;
                    if (j >= w) { j -= w; ++i; }
                }
#pragma unroll
                for (int u = 0; u < U; ++u)
                    if (at[u] >= 0) sm[at[u]] = v[u];
            }
        }
        __syncthreads();
        if constexpr (sizeof(T) == 4) {
            if (chunked) {
                // lane c: the raw strip's 16-byte chunk c. The width is a multiple of 4, so a chunk is four
                // consecutive elements of one row t of A, (t, j0) .. (t, j0 + 3), and n (whole rows) whole
                // chunks; they go to B's rows j0 .. j0 + 3 at column r0 + t
                const int log_w = w == 4 ? 2 : w == 8 ? 3 : 4;
                T* b = B + r0;
                for (int c = tid; c < n / 4; c += NARROW_THREADS) {
                    const uint4 v = *reinterpret_cast<const uint4*>(&sm[4 * c]);   // within sm: n <= E - R
                    T x[4];  // the chunk's bits as they are (float32 or a 4-byte integer)
                    memcpy(x, &v, sizeof v);
                    const int t = (4 * c) >> log_w, j0 = (4 * c) & (w - 1);
#pragma unroll
                    for (int e = 0; e < 4; ++e) b[(j0 + e) * ldb + t] = x[e];
                }
                __syncthreads();   // the next strip overwrites shared memory
                continue;
            }
        }
        // B(jj, r0 + t) = sm[t * P + jj], the flat index jj * h + t over the strip
        const int ej = NARROW_THREADS / h, et = NARROW_THREADS % h;
        int jj = tid / h, t = tid % h;
        T* b = B + r0;
#pragma unroll 4
        for (int g = tid; g < n; g += NARROW_THREADS) {
            b[jj * ldb + t] = sm[t * P + jj];
            jj += ej; t += et;
            if (t >= h) { t -= h; ++jj; }
        }
        __syncthreads();   // the next strip overwrites shared memory
    }
}

// ---------------------------------------------------------------------------------------------------
// narrow_rows: A with at most 64 rows (short and wide; B tall and narrow). A block takes a strip of R
// columns of A (R = (E / rows - 1) rounded down to a multiple of 16, so the pitch R + 1 is odd), reads
// its rows (contiguous runs of R elements) and writes the strip's R rows of B as one flat run
// (contiguous when ldb == rows), both through flat-index cursors with every lane busy.
// Launch: block (256), grid (min(ceil(cols / R), 2^31 - 1), 1); BYTES of shared memory (32 or 16 KB).
// ---------------------------------------------------------------------------------------------------
template <class T, int BYTES>
__device__ __forceinline__ void narrow_rows_impl(const T* __restrict__ A, T* __restrict__ B, long long rows,
                                                 long long cols, long long lda, long long ldb)
{
    constexpr int E = BYTES / (int)sizeof(T);
    __shared__ T sm[E];
    if (rows < 1 || rows > 64) return;   // the launcher's contract
    const int hgt = (int)rows, R = (E / hgt - 1) & ~15, Q = R + 1;
    const int tid = threadIdx.x;
    const long long strips = (cols + R - 1) / R;
    const int ei = NARROW_THREADS / hgt, ec = NARROW_THREADS % hgt;
    for (long long s = blockIdx.x; s < strips; s += gridDim.x) {
        const long long c0 = s * R;
        const int wdt = (int)min((long long)R, cols - c0);
        const int n = hgt * wdt;
        const T* a = A + c0;
        const int di = NARROW_THREADS / wdt, dt = NARROW_THREADS % wdt;
        int i = tid / wdt, t = tid % wdt;
        if constexpr (sizeof(T) >= 4) {
            for (int f = tid; f < n; f += NARROW_THREADS) {
                stage(&sm[i * Q + t], a + i * lda + t);
                i += di; t += dt;
                if (t >= wdt) { t -= wdt; ++i; }
            }
            wait_async();
        } else {
            constexpr int U = 8;
            for (int f = tid; f < n; f += U * NARROW_THREADS) {
                T v[U];
                int at[U];
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    at[u] = f + u * NARROW_THREADS < n ? i * Q + t : -1;
                    if (at[u] >= 0) v[u] = a[i * lda + t];
                    i += di; t += dt;
                    if (t >= wdt) { t -= wdt; ++i; }
                }
#pragma unroll
                for (int u = 0; u < U; ++u)
                    if (at[u] >= 0) sm[at[u]] = v[u];
            }
        }
        __syncthreads();
        // B(c0 + tt, ii) = sm[ii * Q + tt], the flat index tt * rows + ii over the strip
        int tt = tid / hgt, ii = tid % hgt;
        T* b = B + c0 * ldb;
#pragma unroll 4
        for (int g = tid; g < n; g += NARROW_THREADS) {
            b[tt * ldb + ii] = sm[ii * Q + tt];
            tt += ei; ii += ec;
            if (ii >= hgt) { ii -= hgt; ++tt; }
        }
        __syncthreads();
    }
}

template <class T>
__device__ __forceinline__ void narrow_cols(const T* __restrict__ A, T* __restrict__ B, long long rows,
                                            long long cols, long long lda, long long ldb)
{
    narrow_cols_impl<T, 32768>(A, B, rows, cols, lda, ldb);
}

template <class T>
__device__ __forceinline__ void narrow_cols16k(const T* __restrict__ A, T* __restrict__ B, long long rows,
                                               long long cols, long long lda, long long ldb)
{
    narrow_cols_impl<T, 16384>(A, B, rows, cols, lda, ldb);
}

template <class T>
__device__ __forceinline__ void narrow_rows(const T* __restrict__ A, T* __restrict__ B, long long rows,
                                            long long cols, long long lda, long long ldb)
{
    narrow_rows_impl<T, 32768>(A, B, rows, cols, lda, ldb);
}

template <class T>
__device__ __forceinline__ void narrow_rows16k(const T* __restrict__ A, T* __restrict__ B, long long rows,
                                               long long cols, long long lda, long long ldb)
{
    narrow_rows_impl<T, 16384>(A, B, rows, cols, lda, ldb);
}

// V = 16 / sizeof(T) elements of a run as one 16-byte vector (element 0 in the lowest bytes).
template <class T>
__device__ __forceinline__ uint4 pack16(const T* v)
{
    if constexpr (sizeof(T) == 8) {
        return make_uint4((unsigned)v[0], (unsigned)(v[0] >> 32), (unsigned)v[1], (unsigned)(v[1] >> 32));
    } else if constexpr (sizeof(T) == 4) {
        return make_uint4(v[0], v[1], v[2], v[3]);
    } else if constexpr (sizeof(T) == 2) {
        return make_uint4(v[0] | ((unsigned)v[1] << 16), v[2] | ((unsigned)v[3] << 16), v[4] | ((unsigned)v[5] << 16),
                          v[6] | ((unsigned)v[7] << 16));
    } else {
        unsigned w[4];
#pragma unroll
        for (int q = 0; q < 4; ++q)
            w[q] = v[4 * q] | ((unsigned)v[4 * q + 1] << 8) | ((unsigned)v[4 * q + 2] << 16) | ((unsigned)v[4 * q + 3] << 24);
        return make_uint4(w[0], w[1], w[2], w[3]);
    }
}

// ---------------------------------------------------------------------------------------------------
// narrow_rows_chunks: A with at most 64 rows at any alignment and row stride, into a B that is one
// contiguous, 16-byte aligned run (ldb == rows, as a new result is). Every global access is a whole
// 16-byte chunk: a block stages, for each row of A, the aligned chunks that cover the strip's R columns
// (row i's element t at byte off_i + t sizeof(T) of its staged row, off_i = A(i, c0)'s address mod 16,
// which steps by lda sizeof(T) mod 16 from row to row), then writes the strip's run of B (rows x R
// elements) as 16-byte vectors, a lane gathering 16 / sizeof(T) consecutive elements of the run from
// the staged rows. narrow_rows moves 2-byte elements 2 bytes at a time (0.38-0.50 of the copy on the
// H200 at 2-31 rows). A staged row's chunks are rotated by i mod 8, so the same column of neighbouring
// rows falls in different banks. Strips wholly inside A's rows copy whole chunks; the first and last
// copy a chunk that reaches past a row's ends element by element.
// Launch: block (256), grid (min(ceil(cols / R), 2^31 - 1), 1); R sizeof(T) = 16 floor((BYTES / rows - 16)
// / 16) bytes of each row a strip; BYTES of shared memory.
// ---------------------------------------------------------------------------------------------------
template <class T, int BYTES>
__device__ __forceinline__ void narrow_rows_chunks_impl(const T* __restrict__ A, T* __restrict__ B, long long rows,
                                                        long long cols, long long lda, long long ldb)
{
    constexpr int E = (int)sizeof(T), V = 16 / E;
    __shared__ __align__(16) unsigned char sm[BYTES];
    if (rows < 1 || rows > 64 || ldb != rows) return;   // the launcher's contract
    const int hgt = (int)rows, span = 16 * ((BYTES / hgt - 16) / 16);   // a strip's bytes of each row of A
    const int R = span / E, CH = span / 16 + 1, ROWB = 16 * CH;            // CH >= 16: one wrap at most below
    const int tid = threadIdx.x, di = NARROW_THREADS / CH, dk = NARROW_THREADS % CH;
    const long long strips = (cols + R - 1) / R;
    const int d = (int)((lda * E) & 15);   // off_i = (off_0 + i d) mod 16
    const char* a_bytes = reinterpret_cast<const char*>(A);
    for (long long s = blockIdx.x; s < strips; s += gridDim.x) {
        const long long c0 = s * R;
        const int wdt = (int)min((long long)R, cols - c0);
        const bool inside = c0 >= V && c0 + R + V <= cols;   // every chunk inside its row of A
        const int off0 = (int)((reinterpret_cast<unsigned long long>(A) + (unsigned long long)(c0 * E)) & 15);
        int i = tid / CH, k = tid % CH;
        for (int f = tid; f < hgt * CH; f += NARROW_THREADS) {
            const long long g = (long long)i * lda * E + c0 * E - ((off0 + i * d) & 15) + 16 * k;   // bytes from A
            int slot = k + (i & 7);
            if (slot >= CH) slot -= CH;
            unsigned char* dst = sm + i * ROWB + 16 * slot;
            const long long lo = (long long)i * lda * E, hi = lo + cols * E;   // row i's bytes
            if (inside || (g >= lo && g + 16 <= hi)) {
                copy_async<16>(dst, a_bytes + g);
            } else {
#pragma unroll
                for (int e = 0; e < V; ++e)
                    if (g + e * E >= lo && g + e * E < hi)
                        *reinterpret_cast<T*>(dst + e * E) = *reinterpret_cast<const T*>(a_bytes + g + e * E);
            }
            i += di; k += dk;
            if (k >= CH) { k -= CH; ++i; }
        }
        wait_async();
        __syncthreads();
        // the strip's run of B: element q = r rows + i is A(i, c0 + r)
        const int n = wdt * hgt, nv = n / V;
        T* b = B + c0 * hgt;
        for (int v = tid; v < nv; v += NARROW_THREADS) {
            int r = v * V / hgt, ii = v * V - r * hgt;
            T x[V];
#pragma unroll
            for (int t = 0; t < V; ++t) {
                int pos = ((off0 + ii * d) & 15) + r * E + 16 * (ii & 7);
                if (pos >= ROWB) pos -= ROWB;
                x[t] = *reinterpret_cast<const T*>(sm + ii * ROWB + pos);
                if (++ii == hgt) { ii = 0; ++r; }
            }
            reinterpret_cast<uint4*>(b)[v] = pack16<T>(x);
        }
        for (int q = nv * V + tid; q < n; q += NARROW_THREADS) {   // the run's tail
            const int r = q / hgt, ii = q - r * hgt;
            int pos = ((off0 + ii * d) & 15) + r * E + 16 * (ii & 7);
            if (pos >= ROWB) pos -= ROWB;
            b[q] = *reinterpret_cast<const T*>(sm + ii * ROWB + pos);
        }
        __syncthreads();   // the next strip overwrites shared memory
    }
}

template <class T>
__device__ __forceinline__ void narrow_rows_chunks16k(const T* __restrict__ A, T* __restrict__ B, long long rows,
                                                      long long cols, long long lda, long long ldb)
{
    narrow_rows_chunks_impl<T, 16384>(A, B, rows, cols, lda, ldb);
}

template <class T>
__device__ __forceinline__ void narrow_rows_chunks(const T* __restrict__ A, T* __restrict__ B, long long rows,
                                                   long long cols, long long lda, long long ldb)
{
    narrow_rows_chunks_impl<T, 32768>(A, B, rows, cols, lda, ldb);
}

// ---------------------------------------------------------------------------------------------------
// narrow_cols_pairs (2-byte elements, even cols <= 126; A and B 4-byte aligned, lda and ldb even): the
// narrow_cols strip with every access 4 bytes wide. Rows 2u and 2u + 1 of A give, for each word k of
// theirs (columns 2k, 2k + 1), two words of B: B(2k, 2u .. 2u+1) and B(2k+1, 2u .. 2u+1), made by
// __byte_perm and staged as a (row pairs) x cols matrix of words with the odd pitch cols + 1; then the
// strip's cols rows of B are written as words (the last, when rows is odd, as a half). A block takes R2
// row pairs, R2 = (E / (cols + 1)) rounded down to a multiple of 16, E = BYTES / 4 words.
// Launch: block (256), grid (1, min(ceil(ceil(rows / 2) / R2), 65535)); BYTES of shared memory.
// ---------------------------------------------------------------------------------------------------
template <int BYTES>
__device__ __forceinline__ void narrow_cols_pairs_impl(const unsigned short* __restrict__ A,
                                                       unsigned short* __restrict__ B, long long rows,
                                                       long long cols, long long lda, long long ldb)
{
    constexpr int E = BYTES / 4, U = 8;
    __shared__ unsigned int sm[E];
    if (cols < 2 || cols > 126 || (cols & 1)) return;   // the launcher's contract
    const int w = (int)cols, hw = w / 2, P = w + 1, R2 = (E / P) & ~15;
    const int tid = threadIdx.x;
    const long long pairs = (rows + 1) / 2, lda2 = lda / 2, ldb2 = ldb / 2;
    const long long strips = (pairs + R2 - 1) / R2;
    const unsigned int* A32 = reinterpret_cast<const unsigned int*>(A);
    unsigned int* B32 = reinterpret_cast<unsigned int*>(B);
    const int du = NARROW_THREADS / hw, dk = NARROW_THREADS % hw;
    for (long long s = blockIdx.y; s < strips; s += gridDim.y) {
        const long long u0 = s * R2;
        const int h2 = (int)min((long long)R2, pairs - u0);
        const int n = h2 * hw;
        const int odd_last = (u0 + h2 == pairs) && (rows & 1);   // the strip's last pair has one row
        const unsigned int* a = A32 + 2 * u0 * lda2;
        int u = tid / hw, k = tid % hw;
        for (int f = tid; f < n; f += U * NARROW_THREADS) {
            unsigned int lo[U], hi[U];
            int at[U];
#pragma unroll
            for (int q = 0; q < U; ++q) {
                at[q] = f + q * NARROW_THREADS < n ? u * P + 2 * k : -1;
                if (at[q] >= 0) {
                    lo[q] = a[(2 * u) * lda2 + k];
                    hi[q] = (odd_last && u == h2 - 1) ? 0u : a[(2 * u + 1) * lda2 + k];
                }
                u += du; k += dk;
                if (k >= hw) { k -= hw; ++u; }
            }
#pragma unroll
            for (int q = 0; q < U; ++q)
                if (at[q] >= 0) {
                    sm[at[q]] = __byte_perm(lo[q], hi[q], 0x5410);
                    sm[at[q] + 1] = __byte_perm(lo[q], hi[q], 0x7632);
                }
        }
        __syncthreads();
        // B32(jj, u0 + t) = sm[t * P + jj], the flat index jj * h2 + t over the strip
        const int ej = NARROW_THREADS / h2, et = NARROW_THREADS % h2;
        int jj = tid / h2, t = tid % h2;
#pragma unroll 4
        for (int g = tid; g < n * 2; g += NARROW_THREADS) {
            const unsigned int v = sm[t * P + jj];
            if (odd_last && t == h2 - 1)
                B[jj * ldb + 2 * (u0 + t)] = (unsigned short)(v & 0xffffu);
            else
                B32[jj * ldb2 + u0 + t] = v;
            jj += ej; t += et;
            if (t >= h2) { t -= h2; ++jj; }
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------------------------
// narrow_rows_pairs (2-byte elements, rows <= 64; A and B 4-byte aligned, lda and ldb even): the
// narrow_rows strip with 4-byte accesses. Rows 2k and 2k + 1 of A give, for each word of theirs
// (columns c, c + 1), the words B(c, 2k .. 2k+1) and B(c+1, 2k .. 2k+1) (__byte_perm), staged as a
// ceil(rows / 2) x R matrix of words with the odd pitch R + 1; then the strip's R rows of B are written
// as words (the last word of a row, when rows is odd, as a half). A strip is R columns of A,
// R = (E / ceil(rows / 2) - 1) rounded down to a multiple of 16, E = BYTES / 4 words; a strip's last
// column, when its width is odd, is read a half at a time.
// Launch: block (256), grid (min(ceil(cols / R), 2^31 - 1), 1); BYTES of shared memory.
// ---------------------------------------------------------------------------------------------------
template <int BYTES>
__device__ __forceinline__ void narrow_rows_pairs_impl(const unsigned short* __restrict__ A,
                                                       unsigned short* __restrict__ B, long long rows,
                                                       long long cols, long long lda, long long ldb)
{
    constexpr int E = BYTES / 4, U = 4;
    __shared__ unsigned int sm[E];
    if (rows < 1 || rows > 64) return;   // the launcher's contract
    const int hgt = (int)rows, h2 = (hgt + 1) / 2, R = (E / h2 - 1) & ~15, Q = R + 1;
    const int tid = threadIdx.x;
    const long long strips = (cols + R - 1) / R, lda2 = lda / 2, ldb2 = ldb / 2;
    const unsigned int* A32 = reinterpret_cast<const unsigned int*>(A);
    unsigned int* B32 = reinterpret_cast<unsigned int*>(B);
    const int ek = NARROW_THREADS / h2, et = NARROW_THREADS % h2;
    for (long long s = blockIdx.x; s < strips; s += gridDim.x) {
        const long long c0 = s * R;   // even: R is a multiple of 16
        const int wdt = (int)min((long long)R, cols - c0), wv = (wdt + 1) / 2;
        const int n = h2 * wv;
        const int dk = NARROW_THREADS / wv, dv = NARROW_THREADS % wv;
        int k = tid / wv, v = tid % wv;
        for (int f = tid; f < n; f += U * NARROW_THREADS) {
            unsigned int lo[U], hi[U];
            int at[U], whole[U];
#pragma unroll
            for (int q = 0; q < U; ++q) {
                at[q] = f + q * NARROW_THREADS < n ? k * Q + 2 * v : -1;
                whole[q] = 2 * v + 1 < wdt;
                if (at[q] >= 0) {
                    const bool second = 2 * k + 1 < hgt;
                    if (whole[q]) {
                        lo[q] = A32[(2 * k) * lda2 + c0 / 2 + v];
                        hi[q] = second ? A32[(2 * k + 1) * lda2 + c0 / 2 + v] : 0u;
                    } else {
                        lo[q] = A[(2 * k) * lda + c0 + 2 * v];
                        hi[q] = second ? A[(2 * k + 1) * lda + c0 + 2 * v] : 0u;
                    }
                }
                k += dk; v += dv;
                if (v >= wv) { v -= wv; ++k; }
            }
#pragma unroll
            for (int q = 0; q < U; ++q)
                if (at[q] >= 0) {
                    sm[at[q]] = __byte_perm(lo[q], hi[q], 0x5410);
                    if (whole[q])
                        sm[at[q] + 1] = __byte_perm(lo[q], hi[q], 0x7632);
                }
        }
        __syncthreads();
        // B32(c0 + t, kk) = sm[kk * Q + t], the flat index t * h2 + kk over the strip
        int t = tid / h2, kk = tid % h2;
        const int m = wdt * h2;
#pragma unroll 4
        for (int g = tid; g < m; g += NARROW_THREADS) {
            const unsigned int val = sm[kk * Q + t];
            if (2 * kk + 1 < hgt)
                B32[(c0 + t) * ldb2 + kk] = val;
            else
                B[(c0 + t) * ldb + 2 * kk] = (unsigned short)(val & 0xffffu);
            t += ek; kk += et;
            if (kk >= h2) { kk -= h2; ++t; }
        }
        __syncthreads();
    }
}

// The flat strips' staging: n contiguous 2-byte elements from a (16-byte aligned) into dst, as 16-byte
// cp.async copies and the tail element by element (the caller waits for them: wait_async, then a barrier).
__device__ __forceinline__ void stage_flat_run(unsigned short* dst, const unsigned short* __restrict__ a, int n)
{
    const int chunks = n / 8;
    for (int c = threadIdx.x; c < chunks; c += NARROW_THREADS)
        copy_async<16>(dst + 8 * c, a + 8 * c);
    for (int e = 8 * chunks + threadIdx.x; e < n; e += NARROW_THREADS)
        dst[e] = a[e];
}

// ---------------------------------------------------------------------------------------------------
// narrow_cols_flat (2-byte elements, odd cols <= 127; A contiguous (lda == cols) and 16-byte aligned, B
// 4-byte aligned with even ldb): a strip of R rows of A (R = (E / cols) rounded down to a multiple of 16,
// E = BYTES / 2 elements) is one contiguous run, staged raw with 16-byte cp.async (a strip's tail
// element by element); B's rows are then written as words, each word two halves of one column of the
// staged rows 2u and 2u + 1 (the odd cols makes the shared-memory reads down a column conflict-free).
// Launch: block (256), grid (1, min(ceil(rows / R), 65535)); BYTES of shared memory.
// ---------------------------------------------------------------------------------------------------
template <int BYTES>
__device__ __forceinline__ void narrow_cols_flat_impl(const unsigned short* __restrict__ A,
                                                      unsigned short* __restrict__ B, long long rows,
                                                      long long cols, long long lda, long long ldb)
{
    constexpr int E = BYTES / 2;
    __shared__ __align__(16) unsigned short sm[E];
    if (cols < 1 || cols > 127 || !(cols & 1)) return;   // the launcher's contract
    const int w = (int)cols, R = (E / w) & ~15;
    const int tid = threadIdx.x;
    const long long strips = (rows + R - 1) / R, ldb2 = ldb / 2;
    unsigned int* B32 = reinterpret_cast<unsigned int*>(B);
    for (long long s = blockIdx.y; s < strips; s += gridDim.y) {
        const long long r0 = s * R;   // a multiple of 16: the strip starts 16-byte aligned
        const int h = (int)min((long long)R, rows - r0), n = h * w;
        const unsigned short* a = A + r0 * w;
        stage_flat_run(sm, a, n);
        wait_async();
        __syncthreads();
        // B32(jj, r0 / 2 + u) = (A(r0 + 2u, jj), A(r0 + 2u + 1, jj)): the flat index jj * h2 + u
        const int h2 = (h + 1) / 2, m = w * h2;
        const int ej = NARROW_THREADS / h2, eu = NARROW_THREADS % h2;
        int jj = tid / h2, u = tid % h2;
#pragma unroll 4
        for (int g = tid; g < m; g += NARROW_THREADS) {
            const unsigned int lo = sm[(2 * u) * w + jj];
            if (2 * u + 1 < h)
                B32[jj * ldb2 + r0 / 2 + u] = lo | ((unsigned int)sm[(2 * u + 1) * w + jj] << 16);
            else
                B[jj * ldb + r0 + 2 * u] = (unsigned short)lo;
            jj += ej; u += eu;
            if (u >= h2) { u -= h2; ++jj; }
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------------------------
// narrow_cols_flat_even (2-byte elements, even cols <= 126; A contiguous (lda == cols) and 16-byte
// aligned, B 4-byte aligned with even ldb): narrow_cols_flat's strip for the even widths, where its reads
// down a column of the raw strip would meet in a few banks (rows 2u apart lie cols words apart). The strip
// (R rows, R = (E / cols) rounded down to a multiple of 16, E = BYTES / 2 elements) is staged raw with
// 16-byte cp.async as there; then word k of rows 2u and 2u + 1 (columns 2k, 2k + 1) gives, by two byte
// permutes, the words B(2k, 2u .. 2u+1) and B(2k+1, 2u .. 2u+1), staged a second time as B's cols rows of
// P words; the rows of B then leave as words, a warp 128 contiguous bytes of a row. A warp's lanes take
// word k fastest: its reads of the raw strip hit at most two words a bank, and its writes, to 2k P + u for
// the ~32 / (cols / 2) values of u it spans, fall in distinct banks when 2P = that span (mod 32): P is
// R / 2 padded by under 16 words to it.
// Launch: block (256), grid (1, min(ceil(rows / R), 65535)); BYTES + 4 (E / 2 + 1920) bytes of shared memory.
// ---------------------------------------------------------------------------------------------------
template <int BYTES>
__device__ __forceinline__ void narrow_cols_flat_even_impl(const unsigned short* __restrict__ A,
                                                           unsigned short* __restrict__ B, long long rows,
                                                           long long cols, long long lda, long long ldb)
{
    constexpr int E = BYTES / 2;
    __shared__ __align__(16) unsigned short raw[E];
    __shared__ unsigned int words[E / 2 + 1920];   // cols rows of P < R / 2 + 16 words: E / 2 + 15 cols at most
    if (cols < 2 || cols > 126 || (cols & 1)) return;   // the launcher's contract
    const int w = (int)cols, w2 = w / 2, R = (E / w) & ~15;
    const int span = (32 + w2 - 1) / w2, P = R / 2 + (((span + 1) / 2 - R / 2) & 15);
    const int tid = threadIdx.x;
    const long long strips = (rows + R - 1) / R, ldb2 = ldb / 2;
    const unsigned int* raw32 = reinterpret_cast<const unsigned int*>(raw);
    unsigned int* B32 = reinterpret_cast<unsigned int*>(B);
    for (long long s = blockIdx.y; s < strips; s += gridDim.y) {
        const long long r0 = s * R;   // a multiple of 16: the strip starts 16-byte aligned
        const int h = (int)min((long long)R, rows - r0), n = h * w;
        const unsigned short* a = A + r0 * w;
        stage_flat_run(raw, a, n);
        wait_async();
        __syncthreads();
        // pair (u, k), k fastest: raw words k of rows 2u and 2u + 1 -> words u of B's rows 2k and 2k + 1. A
        // thread keeps its word column k (k = tid % (cols / 2); the last partial group of threads idles) and
        // walks u by the threads a column: two loads, two byte permutes, two stores and four adds a pair of
        // words (the flattened (u, k) walk with its wrap cost about three times that: issue-bound, as
        // narrow_cols_quads was); an odd last row alone.
        {
            const int per = NARROW_THREADS / w2, k = tid % w2, pairs = h / 2;
            int u = tid / w2;
            if (u < per) {
                const unsigned int* p = raw32 + 2 * u * w2 + k;
                unsigned int* even = words + 2 * k * P + u;   // B's row 2k
                unsigned int* odd = even + P;                  // and 2k + 1
                for (; u < pairs; u += per, p += 2 * w2 * per, even += per, odd += per) {
                    const unsigned int x = p[0], y = p[w2];
                    *even = __byte_perm(x, y, 0x5410);
                    *odd = __byte_perm(x, y, 0x7632);
                }
                if (u == pairs && 2 * u < h) {
                    const unsigned int x = p[0];
                    *even = __byte_perm(x, 0u, 0x5410);
                    *odd = __byte_perm(x, 0u, 0x7632);
                }
            }
        }
        __syncthreads();
        // row jj of B, a warp a row: B32(jj, r0 / 2 + u) = words[jj * P + u], lanes over u (128 contiguous bytes
        // a warp step); the last, when h is odd, a half alone
        {
            const int lane = tid % 32, pairs = h / 2;
            for (int jj = tid / 32; jj < w; jj += NARROW_THREADS / 32) {
                unsigned int* row = B32 + jj * ldb2 + r0 / 2;
                const unsigned int* src = words + jj * P;
                int u = lane;
                for (; u < pairs; u += 32)
                    row[u] = src[u];
                if (u == pairs && 2 * u < h)
                    B[jj * ldb + r0 + 2 * u] = (unsigned short)src[u];
            }
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------------------------
// narrow_cols_flat_parity (2-byte elements, even cols <= 126; A contiguous (lda == cols) and 16-byte
// aligned; B 2-byte aligned, any ldb): narrow_cols_flat_even for rows of B that start on either half of a
// word. Row jj of B starts at element parity p = (B's element address + jj ldb) mod 2 (rows alternate
// with an odd ldb, the packed result of an odd number of rows). A row with p = 0 takes, as there, the
// words (r, r + 1) for r = r0, r0 + 2, ...; a row with p = 1 the words (r - 1, r): a strip's first word
// of such a row pairs its first A row with the previous strip's last (staged apart, element by element;
// none before the first strip: that word is written as its upper half alone), and the strip's last A row
// goes to the next strip's first word (the last strip writes it as a lower half). So each word of B is
// written whole by one block, at any parity.
// Launch: block (256), grid (1, min(ceil(rows / R), 65535)), R = (E / cols) rounded down to a multiple of
// 16, E = BYTES / 2; BYTES + 4 (E / 2 + 2048) + 2 cols bytes of shared memory.
// ---------------------------------------------------------------------------------------------------
template <int BYTES>
__device__ __forceinline__ void narrow_cols_flat_parity_impl(const unsigned short* __restrict__ A,
                                                             unsigned short* __restrict__ B, long long rows,
                                                             long long cols, long long lda, long long ldb)
{
    constexpr int E = BYTES / 2;
    __shared__ __align__(16) unsigned short raw[E];
    __shared__ unsigned int words[E / 2 + 2048];   // cols rows of P <= R / 2 + 16 words
    __shared__ unsigned int before[64];            // A's row r0 - 1 as words (cols / 2 of them)
    if (cols < 2 || cols > 126 || (cols & 1)) return;   // the launcher's contract
    const int w = (int)cols, w2 = w / 2, R = (E / w) & ~15;
    const int span = (32 + w2 - 1) / w2, P = R / 2 + 1 + (((span + 1) / 2 - R / 2 - 1) & 15);
    const int tid = threadIdx.x;
    const int p0 = (int)((reinterpret_cast<unsigned long long>(B) >> 1) & 1), podd = (int)(ldb & 1);
    const long long strips = (rows + R - 1) / R;
    const unsigned int* raw32 = reinterpret_cast<const unsigned int*>(raw);
    for (long long s = blockIdx.y; s < strips; s += gridDim.y) {
        const long long r0 = s * R;   // a multiple of 16: the strip starts 16-byte aligned
        const int h = (int)min((long long)R, rows - r0), n = h * w, h2 = (h + 1) / 2;
        const bool last = r0 + h == rows;
        // words of a row with p = 1: (r0 - 1 + 2u, r0 + 2u) for u < U1 (the last strip: through row rows - 1)
        const int U1 = last ? h / 2 + 1 : h / 2, U = max(h2, U1);
        const unsigned short* a = A + r0 * w;
        stage_flat_run(raw, a, n);
        if (tid < w2)
            before[tid] = r0 > 0 ? reinterpret_cast<const unsigned int*>(a - w)[tid] : 0u;
        wait_async();
        __syncthreads();
        // pair (u, k), k fastest: words u of B's rows 2k and 2k + 1, each from the A rows its parity pairs. A
        // thread keeps its word column k (the last partial group of threads idles) and walks u by the threads
        // a column, as narrow_cols_flat_even does
        {
            const int per = NARROW_THREADS / w2, k = tid % w2, pe = p0, po = p0 ^ podd;
            int u = tid / w2;
            if (u < per) {
                const unsigned int* q = raw32 + 2 * u * w2 + k;   // A's row 2u, word k
                unsigned int* even = words + 2 * k * P + u;        // B's row 2k
                unsigned int* odd = even + P;                       // and 2k + 1
                for (; u < U; u += per, q += 2 * w2 * per, even += per, odd += per) {
                    const unsigned int x = 2 * u < h ? q[0] : 0u;
                    const unsigned int y = 2 * u + 1 < h ? q[w2] : 0u;
                    const unsigned int z = u > 0 ? q[-w2] : before[k];
                    *even = pe ? __byte_perm(z, x, 0x5410) : __byte_perm(x, y, 0x5410);
                    *odd = po ? __byte_perm(z, x, 0x7632) : __byte_perm(x, y, 0x7632);
                }
            }
        }
        __syncthreads();
        // row jj, a warp a row, lanes over its words u: elements (r0 - p + 2u, + 1) of B's row; halves at the
        // strip's ends (the matrix's first row on an odd start, its last row, an odd h on an even start)
        {
            const int lane = tid % 32;
            for (int jj = tid / 32; jj < w; jj += NARROW_THREADS / 32) {
                const int p = p0 ^ (podd & jj), count = p ? U1 : h2;
                unsigned short* row = B + jj * ldb + r0 - p;   // word u at row + 2u
                const unsigned int* src = words + jj * P;
                for (int u = lane; u < count; u += 32) {
                    const int rr = 2 * u - p;                   // the word's first row of A, from r0
                    const unsigned int v = src[u];
                    if (rr < 0 && r0 == 0)
                        row[2 * u + 1] = (unsigned short)(v >> 16);
                    else if (rr + 1 >= h)   // its second row past the strip (the last strip, or an even start)
                        row[2 * u] = (unsigned short)v;
                    else
                        *reinterpret_cast<unsigned int*>(row + 2 * u) = v;
                }
            }
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------------------------
// narrow_cols_flat_odd_parity (2-byte elements, odd cols <= 127; A contiguous (lda == cols) and 16-byte
// aligned; B 2-byte aligned, any ldb): narrow_cols_flat for rows of B of either parity, as
// narrow_cols_flat_parity does for even widths: a row of B whose elements start on a word's upper half
// takes the words (r - 1, r), the strip's first from A's row r0 - 1 (staged apart), its last A row left to
// the next strip; halves at the matrix's ends.
// Launch: block (256), grid (1, min(ceil(rows / R), 65535)), R = (E / cols) rounded down to a multiple of
// 16, E = BYTES / 2; BYTES + 256 bytes of shared memory.
// ---------------------------------------------------------------------------------------------------
template <int BYTES>
__device__ __forceinline__ void narrow_cols_flat_odd_parity_impl(const unsigned short* __restrict__ A,
                                                                 unsigned short* __restrict__ B, long long rows,
                                                                 long long cols, long long lda, long long ldb)
{
    constexpr int E = BYTES / 2;
    __shared__ __align__(16) unsigned short sm[E];
    __shared__ unsigned short before[128];   // A's row r0 - 1
    if (cols < 1 || cols > 127 || !(cols & 1)) return;   // the launcher's contract
    const int w = (int)cols, R = (E / w) & ~15;
    const int tid = threadIdx.x;
    const int p0 = (int)((reinterpret_cast<unsigned long long>(B) >> 1) & 1), podd = (int)(ldb & 1);
    const long long strips = (rows + R - 1) / R;
    for (long long s = blockIdx.y; s < strips; s += gridDim.y) {
        const long long r0 = s * R;   // a multiple of 16: the strip starts 16-byte aligned
        const int h = (int)min((long long)R, rows - r0), n = h * w, h2 = (h + 1) / 2;
        const bool last = r0 + h == rows;
        const int U1 = last ? h / 2 + 1 : h / 2;
        const unsigned short* a = A + r0 * w;
        stage_flat_run(sm, a, n);
        if (tid < w)
            before[tid] = r0 > 0 ? a[tid - w] : (unsigned short)0;
        wait_async();
        __syncthreads();
        // row jj, a warp a row, lanes over its words u: elements (r0 - p + 2u, + 1) of B's row, from the
        // strip's rows i = 2u - p and i + 1 (i = -1: the row before it); halves at the strip's ends (the
        // matrix's first row on an odd start, its last row, an odd h on an even start). A row's parity,
        // pointers and word count are the warp's, once a row (the flattened (jj, u) walk recomputed them,
        // with its wrap, for every word: issue-bound)
        const int lane = tid % 32;
        for (int jj = tid / 32; jj < w; jj += NARROW_THREADS / 32) {
            const int p = p0 ^ (podd & jj), count = p ? U1 : h2;
            unsigned short* row = B + jj * ldb + r0 - p;   // word u at row + 2u, on a word
            const unsigned short* col = sm + jj;            // the strip's element (i, jj) at col[i * w]
            for (int u = lane; u < count; u += 32) {
                const int i = 2 * u - p;
                const unsigned int lo = i >= 0 ? col[i * w] : before[jj];
                const unsigned int hi = i + 1 < h ? col[(i + 1) * w] : 0u;
                if (i < 0 && r0 == 0)
                    row[2 * u + 1] = (unsigned short)hi;
                else if (i + 1 >= h)
                    row[2 * u] = (unsigned short)lo;
                else
                    *reinterpret_cast<unsigned int*>(row + 2 * u) = lo | (hi << 16);
            }
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------------------------
// narrow_cols_quads (1-byte elements, cols <= 127; A contiguous (lda == cols) and 16-byte aligned; B at any
// alignment and row stride): a strip of R rows of A (R = BYTES / cols rounded down to a multiple of 16) is
// one contiguous run, staged raw with 16-byte cp.async. Row c of B takes the strip's bytes as aligned
// words: its first d_c bytes (d_c = what it takes to reach a word boundary, 0-3) go out one by one, then
// word u holds A's rows d_c + 4u .. + 3 at column c, gathered from the staged strip byte by byte and staged
// a second time as B's cols rows of P words; those rows then leave as words, a warp a row, 128 contiguous
// bytes a step (a last partial word byte by byte). Every other global access is 16 or 4 bytes wide
// (narrow_cols moves single bytes: 0.24 of the copy on the H200). A warp's lanes take the column c
// fastest: lanes of one u read bytes of one or two words of a staged row, and the ~32 / cols values of u
// it spans lie 4 rows = cols words apart, in different banks; its writes, to c P + u, fall in different
// banks when P = that span (mod 32): P is R / 4 padded by under 32 words to it.
// Launch: block (256), grid (1, min(ceil(rows / R), 65535)); BYTES + 4 (BYTES / 4 + 3968) + 128 bytes of
// shared memory.
// ---------------------------------------------------------------------------------------------------
template <int BYTES>
__device__ __forceinline__ void narrow_cols_quads_impl(const unsigned char* __restrict__ A,
                                                       unsigned char* __restrict__ B, long long rows,
                                                       long long cols, long long lda, long long ldb)
{
    __shared__ __align__(16) unsigned char raw[BYTES];
    __shared__ unsigned int words[BYTES / 4 + 3968];   // cols rows of P < R / 4 + 32 words: BYTES / 4 + 31 cols
    __shared__ unsigned char heads[128];                // row c's head d_c, for every column of A
    if (cols < 1 || cols > 127) return;                 // the launcher's contract
    const int w = (int)cols, R = (BYTES / w) & ~15;
    const int span = (32 + w - 1) / w, P = R / 4 + ((span - R / 4) & 31);
    const int tid = threadIdx.x;
    const long long strips = (rows + R - 1) / R;
    // row c's bytes before its first word boundary: (-(B + c ldb)) mod 4, the same in every strip (R % 4 == 0);
    // made once, read from shared memory by the loops below
    const unsigned long long b_address = reinterpret_cast<unsigned long long>(B);
    for (int c = tid; c < w; c += NARROW_THREADS)
        heads[c] = (unsigned char)((0ull - (b_address + (unsigned long long)c * (unsigned long long)ldb)) & 3ull);
    for (long long s = blockIdx.y; s < strips; s += gridDim.y) {
        const long long r0 = s * R;   // a multiple of 16: the strip starts 16-byte aligned in A
        const int h = (int)min((long long)R, rows - r0);
        const unsigned char* a = A + r0 * w;
        const int n = h * w, chunks = n / 16;
        for (int c = tid; c < chunks; c += NARROW_THREADS)
            copy_async<16>(raw + 16 * c, a + 16 * c);
        for (int e = 16 * chunks + tid; e < n; e += NARROW_THREADS)
            raw[e] = a[e];
        wait_async();
        __syncthreads();
        // (u, c), c fastest: bytes (d_c + 4u + i, c) of the strip -> word u of B's row c. A thread keeps its
        // column (c = tid % cols; the last tid / cols group, if partial, idles) and walks u by the threads a
        // column, so the whole words cost four byte loads, three byte permutes, a store and three adds
        // each; the one word a row ends in part (rows past the strip's end) byte by byte. Words past it are
        // never read.
        {
            const int per = NARROW_THREADS / w, c = tid % w;
            int u = tid / w;
            if (u < per) {
                const int d = heads[c], full = (h - d) / 4;
                const unsigned char* p = raw + (d + 4 * u) * w + c;
                unsigned int* out = words + c * P + u;
                for (; u < full; u += per, p += 4 * w * per, out += per) {
                    const unsigned int lo = __byte_perm(p[0], p[w], 0x0040);
                    const unsigned int hi = __byte_perm(p[2 * w], p[3 * w], 0x0040);
                    *out = __byte_perm(lo, hi, 0x5410);
                }
                if (u == full && d + 4 * u < h) {
                    unsigned int v = 0;
                    for (int q = 0; d + 4 * u + q < h; ++q)
                        v |= (unsigned int)p[q * w] << (8 * q);
                    *out = v;
                }
            }
        }
        // each row's head bytes, one by one (the word they fall in is shared with the strip before)
        for (int g = tid; g < 3 * w; g += NARROW_THREADS) {
            const int c = g / 3, q = g % 3;
            if (q < heads[c] && q < h)
                B[c * ldb + r0 + q] = raw[q * w + c];
        }
        __syncthreads();
        // row jj of B from byte r0 + d_jj on, a warp a row: word u = words[jj * P + u] to aligned words, lanes
        // over u (128 contiguous bytes a warp step); the last, where it reaches past the strip, byte by byte
        {
            const int lane = tid % 32;
            for (int jj = tid / 32; jj < w; jj += NARROW_THREADS / 32) {
                const int d = heads[jj], full = (h - d) / 4;
                unsigned char* row = B + jj * ldb + r0 + d;
                const unsigned int* src = words + jj * P;
                int u = lane;
                for (; u < full; u += 32)
                    *reinterpret_cast<unsigned int*>(row + 4 * u) = src[u];
                if (u == full && d + 4 * u < h) {
                    const unsigned int v = src[u];
                    for (int q = 0; d + 4 * u + q < h; ++q)
                        row[4 * u + q] = (unsigned char)(v >> (8 * q));
                }
            }
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------------------------
// narrow_rows_quads (1-byte elements, rows <= 128; B one contiguous run (ldb == rows) at any alignment; A
// at any alignment and row stride): a strip of R columns of A (R = BYTES / rows rounded down to a multiple
// of 32) is one contiguous run of B, built in shared memory and written out in aligned 16-byte stores.
// The threads form ceil(rows / 4) teams, team g keeping A's rows 4g .. 4g + 3 for the whole launch (their
// pointers and word shifts made once) and dealing the strip's word columns among its threads, BATCH
// columns' loads issued before any is used. A thread takes the 4 x 4 block of A's rows 4g .. 4g + 3 at
// columns 4w .. 4w + 3: a row off words as the two aligned words that hold it, joined by a funnel shift;
// transposed in registers with eight byte permutes; put at its places in the run (B's rows 4w .. 4w + 3,
// bytes 4g .. 4g + 3 of each) as a word, two halves or a byte, a half and a byte, by where the row's bytes
// start in a word (the same for every thread of a strip), a last team of fewer than 4 rows byte by byte
// (never past its rows). The run sits in shared memory at the global run's offset mod 16, so that its
// 16-byte chunks line up with B's. A word reaching past A's last column is read byte by byte. H200, 64
// MiB into a packed, aligned B (results/probe-transpose-int8-row-kernels-*): 0.58-0.75 of the copy at 3-63
// rows but 5 and 32 (narrow_rows_chunks 0.39-0.64), 0.62-0.70 at 65-127 but 96 (the tiles 0.25-0.41).
// It is issue-bound (about 11 thread instructions a byte before the wider stores); rows that are
// multiples of 32 put a warp's stores in one bank (32 rows: 0.40).
// Launch: block (256), grid (min(ceil(cols / R), 2^31 - 1), 1); BYTES + 16 bytes of shared memory.
// ---------------------------------------------------------------------------------------------------
template <int BYTES, int BATCH = 2>   // BATCH: 4 x 4 blocks a thread loads before it stores any
__device__ __forceinline__ void narrow_rows_quads_impl(const unsigned char* __restrict__ A,
                                                       unsigned char* __restrict__ B, long long rows,
                                                       long long cols, long long lda, long long ldb)
{
    __shared__ __align__(16) unsigned char run[BYTES + 16];
    if (rows < 1 || rows > 128 || ldb != rows) return;   // the launcher's contract
    const int h = (int)rows, G = (h + 3) / 4, R = (BYTES / h) & ~31, W = R / 4;
    // the threads in G teams of `per`, team g keeping A's rows 4g .. 4g + 3 (a thread's rows, their word
    // shifts and pointers fixed for the whole launch) and dealing the strip's word columns w among its threads
    const int per = NARROW_THREADS / G, tid = threadIdx.x, g = tid / per, lane = tid % per;
    const long long strips = (cols + R - 1) / R;
    const unsigned char* top = A + min(4 * g, h - 1) * lda;   // A(4g, 0) (rows past A's last are never read)
    unsigned int shifts = 0;   // byte b: A(4g + b, 0)'s byte index mod 4 (the same at every strip's start, 32 columns on)
#pragma unroll
    for (int b = 0; b < 4; ++b)
        shifts |= (unsigned int)((reinterpret_cast<unsigned long long>(top) + (unsigned long long)(b * lda)) & 3) << (8 * b);
    const int valid = g < G ? min(4, h - 4 * g) : 0;   // the team's rows (none for the threads left over)
    for (long long s = blockIdx.x; s < strips; s += gridDim.x) {
        const long long c0 = s * R;
        const int wdt = (int)min((long long)R, cols - c0);
        unsigned char* out = B + c0 * h;
        const int s0 = (int)(reinterpret_cast<unsigned long long>(out) & 15);
        unsigned char* img = run + s0 + 4 * g;   // B's run byte t at run[s0 + t]; this team's bytes from 4g on
        for (int w0 = lane; valid && w0 < W; w0 += BATCH * per) {
            // straight-line loads, none behind a branch (the compiler then issues them all before their first
            // use): a word of a row off words as the two aligned words that hold it, joined by a funnel shift
            // (by 0 for a row on words); a word reaching past A's last column after, byte by byte
            unsigned int x[BATCH][4];
#pragma unroll
            for (int j = 0; j < BATCH; ++j) {
                const int col = 4 * (w0 + j * per);
                const bool whole = col < wdt && c0 + col + 3 < cols;   // the word inside A's rows
                const unsigned char* p = top + c0 + col;
#pragma unroll
                for (int b = 0; b < 4; ++b, p += lda) {
                    const int shift = (shifts >> (8 * b)) & 3;
                    const unsigned int* q = reinterpret_cast<const unsigned int*>(p - shift);
                    const unsigned int lo = whole && b < valid ? q[0] : 0u;
                    const unsigned int up = whole && b < valid && shift ? q[1] : 0u;
                    x[j][b] = __funnelshift_r(lo, up, 8 * shift);
                }
            }
#pragma unroll
            for (int j = 0; j < BATCH; ++j) {
                const int col = 4 * (w0 + j * per);
                if (col < wdt && c0 + col + 3 >= cols) {
#pragma unroll
                    for (int b = 0; b < 4; ++b) {
                        const unsigned char* p = top + b * lda + c0 + col;
                        for (int e = 0; b < valid && c0 + col + e < cols; ++e) x[j][b] |= (unsigned int)p[e] << (8 * e);
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < BATCH; ++j) {
                const int col = 4 * (w0 + j * per);
                if (col >= wdt) continue;
                const unsigned int t0 = __byte_perm(x[j][0], x[j][1], 0x5140), t1 = __byte_perm(x[j][0], x[j][1], 0x7362);
                const unsigned int t2 = __byte_perm(x[j][2], x[j][3], 0x5140), t3 = __byte_perm(x[j][2], x[j][3], 0x7362);
                const unsigned int y[4] = {__byte_perm(t0, t2, 0x5410), __byte_perm(t0, t2, 0x7632),
                                           __byte_perm(t1, t3, 0x5410), __byte_perm(t1, t3, 0x7632)};
                unsigned char* at = img + col * h;   // B's row col + e at at + e h (past wdt: never copied)
                if (valid == 4) {
                    // a row's 4 bytes as widely as their address allows: at + e h mod 4 is (s0 + e h) mod 4, the
                    // same for every thread of the strip (4w h and 4g are multiples of 4), so no thread diverges
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        unsigned char* p = at + e * h;
                        const int m = (s0 + e * h) & 3;
                        if (m == 0) {
                            *reinterpret_cast<unsigned int*>(p) = y[e];
                        } else if (m == 2) {
                            reinterpret_cast<unsigned short*>(p)[0] = (unsigned short)y[e];
                            reinterpret_cast<unsigned short*>(p)[1] = (unsigned short)(y[e] >> 16);
                        } else {
                            p[0] = (unsigned char)y[e];
                            *reinterpret_cast<unsigned short*>(p + 1) = (unsigned short)(y[e] >> 8);
                            p[3] = (unsigned char)(y[e] >> 24);
                        }
                    }
                } else {   // the last team, fewer than 4 rows: its bytes one by one
#pragma unroll
                    for (int e = 0; e < 4; ++e)
#pragma unroll
                        for (int b = 0; b < 4; ++b)
                            if (b < valid) at[e * h + b] = (unsigned char)(y[e] >> (8 * b));
                }
            }
        }
        __syncthreads();
        // the run: bytes before out's first 16-byte boundary one by one, then 16-byte chunks, then the tail
        const unsigned char* image = run + s0;
        const int n = wdt * h, head = min((16 - s0) & 15, n), chunks = (n - head) / 16;
        const uint4* src = reinterpret_cast<const uint4*>(image + head);
        uint4* dst = reinterpret_cast<uint4*>(out + head);
        for (int v = tid; v < chunks; v += NARROW_THREADS) dst[v] = src[v];
        if (tid < head) out[tid] = image[tid];
        for (int t = head + 16 * chunks + tid; t < n; t += NARROW_THREADS) out[t] = image[t];
        __syncthreads();   // the next strip overwrites shared memory
    }
}

// ---------------------------------------------------------------------------------------------------
// narrow_rows_flat (2-byte elements, odd rows <= 63; B contiguous (ldb == rows) and 16-byte aligned, A
// 4-byte aligned with even lda): a strip of R rows of B (R columns of A, R = (E / rows) rounded down to
// a multiple of 16) is one contiguous run of B. Threads read A's rows as words (columns c, c + 1) and
// put the two halves at their places in the staged run of B (the odd rows makes those shared-memory
// writes conflict-free); the run then goes out in 16-byte stores (its tail element by element).
// Launch: block (256), grid (min(ceil(cols / R), 2^31 - 1), 1); BYTES of shared memory.
// ---------------------------------------------------------------------------------------------------
template <int BYTES>
__device__ __forceinline__ void narrow_rows_flat_impl(const unsigned short* __restrict__ A,
                                                      unsigned short* __restrict__ B, long long rows,
                                                      long long cols, long long lda, long long ldb)
{
    constexpr int E = BYTES / 2, U = 8;
    __shared__ __align__(16) unsigned short sm[E];
    if (rows < 1 || rows > 63 || !(rows & 1)) return;   // the launcher's contract
    const int hgt = (int)rows, R = (E / hgt) & ~15;
    const int tid = threadIdx.x;
    const long long strips = (cols + R - 1) / R, lda2 = lda / 2;
    const unsigned int* A32 = reinterpret_cast<const unsigned int*>(A);
    for (long long s = blockIdx.x; s < strips; s += gridDim.x) {
        const long long c0 = s * R;   // even, and B's strip starts 16-byte aligned
        const int wdt = (int)min((long long)R, cols - c0), wv = (wdt + 1) / 2, n = hgt * wv;
        const int di = NARROW_THREADS / wv, dv = NARROW_THREADS % wv;
        int i = tid / wv, v = tid % wv;
        for (int f = tid; f < n; f += U * NARROW_THREADS) {
            unsigned int x[U];
            int at[U];
#pragma unroll
            for (int q = 0; q < U; ++q) {
                at[q] = f + q * NARROW_THREADS < n ? (2 * v) * hgt + i : -1;
                if (at[q] >= 0)
                    x[q] = 2 * v + 1 < wdt ? A32[i * lda2 + c0 / 2 + v] : (unsigned int)A[i * lda + c0 + 2 * v];
                i += di; v += dv;
                if (v >= wv) { v -= wv; ++i; }
            }
#pragma unroll
            for (int q = 0; q < U; ++q)
                if (at[q] >= 0) {
                    sm[at[q]] = (unsigned short)(x[q] & 0xffffu);
                    if (at[q] + hgt < wdt * hgt)
                        sm[at[q] + hgt] = (unsigned short)(x[q] >> 16);
                }
        }
        __syncthreads();
        const int m = wdt * hgt, chunks = m / 8;
        unsigned short* b = B + c0 * hgt;
        const uint4* sm4 = reinterpret_cast<const uint4*>(sm);
        for (int c = tid; c < chunks; c += NARROW_THREADS)
            reinterpret_cast<uint4*>(b)[c] = sm4[c];
        for (int e = 8 * chunks + tid; e < m; e += NARROW_THREADS)
            b[e] = sm[e];
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------------------------
// pairs128x64 (2-byte elements only): every global access 4 bytes wide. A block of 32 x 8 threads moves a
// 128 x 64 tile of A as 2 x 2 blocks: a thread loads two 4-byte words (columns c, c+1 of rows r and
// r+1), swaps their halves in registers (__byte_perm) into the two words of B's rows c and c+1 at
// columns r, r+1, and stores them to shared memory at their place in B's tile; after the barrier a
// warp writes 128 bytes of a row of B per instruction. Needs A and B 4-byte aligned with even lda and
// ldb, else (and for tiles that stick out of A) the block moves its tile element by element through
// the same shared memory. Shared memory: 64 x 65 words (16.6 KB).
// Launch: block (32, 8), grid (ceil(cols/64), min(ceil(rows/128), 65535)).
// ---------------------------------------------------------------------------------------------------
__device__ __forceinline__ void pairs128x64(const unsigned short* __restrict__ A, unsigned short* __restrict__ B,
                                            long long rows, long long cols, long long lda, long long ldb)
{
    constexpr int TR = 128, TC = 64, PITCH = 65;   // S[c][p]: B(c0 + c, r0 + 2p .. 2p + 1), low half first
    __shared__ unsigned int S[TC][PITCH];
    unsigned short* S16 = reinterpret_cast<unsigned short*>(&S[0][0]);   // S16[c * 130 + r] = A(r0 + r, c0 + c)
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long c0 = (long long)blockIdx.x * TC;
    const long long row_tiles = (rows + TR - 1) / TR;
    const bool aligned = ((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B)) & 3) == 0
                         && ((lda | ldb) & 1) == 0;
    for (long long t = blockIdx.y; t < row_tiles; t += gridDim.y) {
        const long long r0 = t * TR;
        if (aligned && r0 + TR <= rows && c0 + TC <= cols) {
            const unsigned int* a = reinterpret_cast<const unsigned int*>(A + r0 * lda + c0);
            const long long lda2 = lda >> 1, ldb2 = ldb >> 1;
            unsigned int lo[8], hi[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int p = ty + 8 * k;
                lo[k] = a[(2 * p) * lda2 + tx];
                hi[k] = a[(2 * p + 1) * lda2 + tx];
            }
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int p = ty + 8 * k;
                S[2 * tx][p] = __byte_perm(lo[k], hi[k], 0x5410);
                S[2 * tx + 1][p] = __byte_perm(lo[k], hi[k], 0x7632);
            }
            __syncthreads();
            unsigned int* b = reinterpret_cast<unsigned int*>(B + c0 * ldb + r0);
#pragma unroll
            for (int k = 0; k < 8; ++k) {
                const int q = ty + 8 * k;
                b[q * ldb2 + tx] = S[q][tx];
                b[q * ldb2 + tx + 32] = S[q][tx + 32];
            }
        } else {
            const int h = (int)min((long long)TR, rows - r0), w = (int)min((long long)TC, cols - c0);
            const unsigned short* a = A + r0 * lda + c0;
#pragma unroll 4
            for (int r = ty; r < h; r += 8)
#pragma unroll
                for (int c = tx; c < TC; c += 32)
                    if (c < w)
                        S16[c * (2 * PITCH) + r] = a[r * lda + c];
            __syncthreads();
            unsigned short* b = B + c0 * ldb + r0;
#pragma unroll 4
            for (int c = ty; c < w; c += 8)
#pragma unroll
                for (int r = tx; r < TR; r += 32)
                    if (r < h)
                        b[c * ldb + r] = S16[c * (2 * PITCH) + r];
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------------------------
// words256x64 and sector_words128x64 (2-byte elements, any alignment and strides): A read and B written
// as aligned 4-byte words, whatever the parity of A's and B's rows, with a few 32-bit instructions an
// element (a 2-byte kernel moves half the bytes a 4-byte one does for each instruction, so the loops are
// kept lean). A block moves A's columns c0 .. c0 + 63 (B's rows) for A's rows near TR t (TR = 256 or
// 128). Row j of B takes the TR elements r in [TR t - m, TR t + TR - m), m = B(c0 + j, TR t)'s element
// index mod SHIFT + 1, so the piece starts on a word (words256x64: SHIFT 1) or on a 32-byte sector
// (sector_words128x64: SHIFT 15, as sector_aligned does for the element tiles, so that every sector of B
// but a row's first and last is written whole by one block). The block stages A's rows TR t - SHIFT ..
// TR t + TR - 1 as aligned words: staged row i holds A(r, c0 - p + 2w .. +1) in its word w, p = the
// parity of A(r, c0)'s element index, so every copy is a 4-byte cp.async (where a word's half lies
// outside A's row, the other half is loaded alone). A warp stages rows i = warp (mod 8), whose parities
// agree (8 lda is even), and writes whole pieces of B's rows: a lane makes B(c, r .. r + 1) from staged
// rows i and i + 1 with one byte permute, and a warp stores 128 contiguous bytes an instruction. A warp's
// rows of B are 8 apart: their shifts are m and m + 8 ldb mod SHIFT + 1, of one parity. Shared memory:
// TR + SHIFT rows of 35 words, a row's words rotated by one in every other 32-row band, so the lanes,
// reading rows o + 2l, hit 32 banks (35 = 3 mod 32, and rows 32 apart meet the rotation). Tiles wholly
// inside A (all but the edges) take the loops without checks.
// Launch: block (32, 8), grid (ceil(cols/64), min(ceil((rows + SHIFT)/TR), 65535)); shared memory 36 KB
// (words256x64), 19.6 KB (sector_words128x64).
// ---------------------------------------------------------------------------------------------------
constexpr int WORDS_TR = 256, WORDS_TC = 64, WORDS_PITCH = 35;

// One tile of words_tiles; CHECK: the tile reaches past an edge of A (else every row and word is inside).
// A warp's row parities are the same for all its rows (they are 8 apart): its staging loop only steps
// pointers, and so does its write loop where one shift serves all its rows of B (SHIFT 1).
template <int SHIFT, int TR, bool CHECK>
__device__ __forceinline__ void words_tile(const unsigned short* __restrict__ A, unsigned short* __restrict__ B,
                                           unsigned int* S, long long rows, long long cols, long long lda,
                                           long long ldb, long long top, long long c0, int w_cols, int a_first,
                                           unsigned long long b_top)
{
    constexpr int STAGED = TR + SHIFT, PITCH = WORDS_PITCH;
    const int lane = threadIdx.x, warp = threadIdx.y, lda_odd = (int)(lda & 1);
    const long long r_first = top - SHIFT;
    // staged rows i_lo <= i < i_hi lie inside A
    const int i_lo = CHECK ? (int)max(-r_first, 0LL) : 0;
    const int i_hi = CHECK ? (int)min(rows - r_first, (long long)STAGED) : STAGED;
    const int p = (a_first + ((int)(r_first + warp) & lda_odd)) & 1;   // the parity of this warp's rows
    const int words = (p + w_cols + 1) >> 1;                          // the words that hold the tile's columns
    {
        // lane l copies word l of each of the warp's rows: columns c, c + 1
        const long long c = c0 - p + 2 * lane;
        const bool whole = !CHECK || (c >= 0 && c + 1 < cols && lane < words);
        const unsigned short* a = A + (r_first + warp) * lda + c;
        const long long step = 8 * lda;
#pragma unroll
        for (int k = 0; k < (STAGED + 7) / 8; ++k, a += step) {
            const int i = warp + 8 * k;   // (i >> 5) & 1 == (k >> 2) & 1 while warp + 8k % 32 < 32
            if ((k < STAGED / 8 || i < STAGED) && (!CHECK || (i >= i_lo && i < i_hi))) {
                unsigned int* s = S + i * PITCH + ((k >> 2) & 1) + lane;
                if (whole) {
                    copy_async<4>(s, a);
                } else if (lane < words) {   // a word half outside A's row: the other half alone
                    unsigned short* s16 = reinterpret_cast<unsigned short*>(s);
                    if (c >= 0 && c < cols) s16[0] = a[0];
                    if (c + 1 >= 0 && c + 1 < cols) s16[1] = a[1];
                }
            }
        }
        if (words > 32) {   // p = 1 and a whole tile: word 32 (columns c0 + 63, c0 + 64), a lane a row
            const long long c32 = c0 + 63;
            for (int i = warp + 8 * lane; i < STAGED; i += 256) {   // (one pass when TR = 128)
                if (CHECK && (i < i_lo || i >= i_hi)) continue;
                const unsigned short* a32 = A + (r_first + i) * lda + c32;
                unsigned int* s = S + i * PITCH + ((i >> 5) & 1) + 32;
                if (!CHECK || c32 + 1 < cols)
                    copy_async<4>(s, a32);
                else
                    reinterpret_cast<unsigned short*>(s)[0] = a32[0];
            }
        }
    }
    wait_async();
    __syncthreads();
    // the warp writes rows j = warp (mod 8) of B's tile; row j's piece starts at A's row top - m
    const int m_first = (int)((b_top + (unsigned long long)warp * (unsigned long long)ldb) & SHIFT);
    const int m_step = (int)((8 * ldb) & SHIFT);          // 0 or 8 (SHIFT 15), 0 (SHIFT 1): m's parity stays
    const int pp = (a_first + (m_first & lda_odd)) & 1;   // A(top - m, c0)'s parity (top is even)
    const int qq = pp ^ lda_odd;                          // A(top - m + 1, c0)'s
    const unsigned int sel = (((warp + pp) & 1) ? 0x32u : 0x10u) | (((warp + qq) & 1) ? 0x7600u : 0x5400u);
    // element k of a piece is A's row top - m + k: inside A when lo <= k - m < hi
    const int lo = CHECK ? (int)max(-top, (long long)-SHIFT) : -SHIFT, hi = CHECK ? (int)min(rows - top, (long long)TR) : TR;
    // one piece of B's row: its lane's words from staged rows i0 + 64h and i0 + 1 + 64h (s0, s1)
    auto piece = [&](const unsigned int* s0, const unsigned int* s1, unsigned short* b, int kr0) {
#pragma unroll
        for (int h = 0; h < TR / 64; ++h) {   // rows 64 apart share the rotation
            const unsigned int w = __byte_perm(s0[64 * h * PITCH], s1[64 * h * PITCH], sel);
            const int kr = kr0 + 64 * h;
            if (!CHECK || (kr >= lo && kr + 1 < hi)) {
                *reinterpret_cast<unsigned int*>(b + 64 * h) = w;
            } else {   // a word across an end of A's rows: its half inside
                if (kr >= lo && kr < hi) b[64 * h] = (unsigned short)(w & 0xffffu);
                if (kr + 1 >= lo && kr + 1 < hi) b[64 * h + 1] = (unsigned short)(w >> 16);
            }
        }
    };
    auto first = [&](int j, int m, const unsigned int*& s0, const unsigned int*& s1, unsigned short*& b) {
        const int i0 = SHIFT - m + 2 * lane;   // the staged row of the lane's first element
        s0 = S + i0 * PITCH + ((i0 >> 5) & 1) + ((j + pp) >> 1);
        s1 = S + (i0 + 1) * PITCH + (((i0 + 1) >> 5) & 1) + ((j + qq) >> 1);
        b = B + (c0 + j) * ldb + top - m + 2 * lane;   // word-aligned
    };
    const unsigned int* s0;
    const unsigned int* s1;
    unsigned short* b;
    if constexpr (SHIFT == 1) {   // one shift for all the warp's rows (m_step is 0): pointers stepped
        first(warp, m_first, s0, s1, b);
        const long long bstep = 8 * ldb;
#pragma unroll 2
        for (int j = warp; j < w_cols; j += 8, s0 += 4, s1 += 4, b += bstep)   // column j + 8: 4 words on
            piece(s0, s1, b, 2 * lane - m_first);
    } else {   // shifts m and m + m_step in turn (stepping both sets of pointers spilled on sm_120)
#pragma unroll 2
        for (int j = warp, k = 0; j < w_cols; j += 8, ++k) {
            const int m = (m_first + (k & 1) * m_step) & SHIFT;
            first(j, m, s0, s1, b);
            piece(s0, s1, b, 2 * lane - m);
        }
    }
    __syncthreads();   // the next tile overwrites shared memory
}

template <int SHIFT, int TR = WORDS_TR>
__device__ __forceinline__ void words_tiles(const unsigned short* __restrict__ A, unsigned short* __restrict__ B,
                                            long long rows, long long cols, long long lda, long long ldb)
{
    __shared__ unsigned int S[(TR + SHIFT) * WORDS_PITCH];
    const long long c0 = (long long)blockIdx.x * WORDS_TC;
    const int w_cols = (int)min((long long)WORDS_TC, cols - c0);
    const bool cols_inside = c0 >= 1 && c0 + WORDS_TC + 1 <= cols;   // every staged word inside A's rows
    const long long row_tiles = (rows + SHIFT + TR - 1) / TR;
    const int a_first = (int)((reinterpret_cast<unsigned long long>(A) / 2 + c0) & 1);   // A(0, c0)'s parity
    const unsigned long long b_c0 = reinterpret_cast<unsigned long long>(B) / 2 + (unsigned long long)(c0 * ldb);
    for (long long t = blockIdx.y; t < row_tiles; t += gridDim.y) {
        const long long top = t * TR;
        const unsigned long long b_top = b_c0 + (unsigned long long)top;   // B(c0, top)'s element index
        if (cols_inside && t >= 1 && top + TR <= rows)   // all tiles but the edges
            words_tile<SHIFT, TR, false>(A, B, S, rows, cols, lda, ldb, top, c0, w_cols, a_first, b_top);
        else
            words_tile<SHIFT, TR, true>(A, B, S, rows, cols, lda, ldb, top, c0, w_cols, a_first, b_top);
    }
}

__device__ __forceinline__ void words256x64(const unsigned short* __restrict__ A, unsigned short* __restrict__ B,
                                            long long rows, long long cols, long long lda, long long ldb)
{
    words_tiles<1>(A, B, rows, cols, lda, ldb);
}

__device__ __forceinline__ void sector_words128x64(const unsigned short* __restrict__ A,
                                                   unsigned short* __restrict__ B, long long rows, long long cols,
                                                   long long lda, long long ldb)
{
    words_tiles<15, 128>(A, B, rows, cols, lda, ldb);
}

// ---------------------------------------------------------------------------------------------------
// quads128 (1-byte elements only): every global access 4 bytes wide. A block of 32 x 8 threads moves a
// 128 x 128 tile of A as 4 x 4 blocks of bytes: the tile's rows are loaded as words (a warp 128
// contiguous bytes of a row) into shared memory; then a thread reads the four words that hold a 4 x 4
// block (rows 4w .. 4w + 3, columns 4q .. 4q + 3), transposes its bytes in registers with four byte
// permutes into pairs and four into the block's columns, and writes them as words of B's rows 4q .. 4q + 3
// (a warp, w = 0 .. 31, 128 contiguous bytes of one row of B). Staged row r keeps its word q at column
// q ^ (r / 4): the warp's four reads, rows 4w + i for w = 0 .. 31, then fall in 32 banks. Needs A and B
// 4-byte aligned with lda and ldb multiples of 4, else the block moves its tile byte by byte through the
// same shared memory (an odd pitch of 33 words there). A tile that sticks out of A (every tile of an A of
// 64 or 100 rows or columns) takes the same words with checks: a word that crosses A's last column or
// B's last column is moved byte by byte, its bytes inside.
// Launch: block (32, 8), grid (ceil(cols/128), min(ceil(rows/128), 65535)); 16.5 KB of shared memory.
// ---------------------------------------------------------------------------------------------------
constexpr int QUADS128_T = 128, QUADS128_W = QUADS128_T / 4;

template <bool CHECK>
__device__ __forceinline__ void quads128_tile(const unsigned char* __restrict__ A, unsigned char* __restrict__ B,
                                              unsigned int* S, long long lda, long long ldb, int h, int w)
{
    constexpr int W = QUADS128_W;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const unsigned int* a = reinterpret_cast<const unsigned int*>(A);
    const long long lda4 = lda >> 2, ldb4 = ldb >> 2;
    unsigned int v[16];
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        const int r = ty + 8 * k;
        v[k] = !CHECK || (r < h && 4 * tx + 3 < w) ? a[r * lda4 + tx] : 0u;
    }
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        const int r = ty + 8 * k;
        if (!CHECK || r < h) S[r * W + (tx ^ (r >> 2))] = v[k];
    }
    if (CHECK && (w & 3) && tx == w / 4) {   // the word across A's last column: its bytes inside
        for (int r = ty; r < h; r += 8) {
            const unsigned char* a8 = A + r * lda + 4 * tx;
            unsigned int x = 0;
            for (int c = 0; 4 * tx + c < w; ++c) x |= (unsigned int)a8[c] << (8 * c);
            S[r * W + (tx ^ (r >> 2))] = x;
        }
    }
    __syncthreads();
    unsigned int* b = reinterpret_cast<unsigned int*>(B) + tx;   // word w = tx of B's rows
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int q = ty + 8 * k;   // B's rows 4q .. 4q + 3 of the tile
        if (CHECK && (4 * q >= w || 4 * tx >= h)) continue;
        const unsigned int x0 = S[(4 * tx) * W + (q ^ tx)], x1 = S[(4 * tx + 1) * W + (q ^ tx)];
        const unsigned int x2 = S[(4 * tx + 2) * W + (q ^ tx)], x3 = S[(4 * tx + 3) * W + (q ^ tx)];
        const unsigned int t0 = __byte_perm(x0, x1, 0x5140), t1 = __byte_perm(x0, x1, 0x7362);
        const unsigned int t2 = __byte_perm(x2, x3, 0x5140), t3 = __byte_perm(x2, x3, 0x7362);
        const unsigned int y[4] = {__byte_perm(t0, t2, 0x5410), __byte_perm(t0, t2, 0x7632),
                                   __byte_perm(t1, t3, 0x5410), __byte_perm(t1, t3, 0x7632)};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            if (CHECK && 4 * q + i >= w) break;
            if (!CHECK || 4 * tx + 3 < h) {
                b[(4 * q + i) * ldb4] = y[i];
            } else {   // the word across B's last column (A's last row): its bytes inside
                unsigned char* b8 = reinterpret_cast<unsigned char*>(b + (4 * q + i) * ldb4);
                for (int e = 0; 4 * tx + e < h; ++e) b8[e] = (unsigned char)(y[i] >> (8 * e));
            }
        }
    }
}

__device__ __forceinline__ void quads128(const unsigned char* __restrict__ A, unsigned char* __restrict__ B,
                                         long long rows, long long cols, long long lda, long long ldb)
{
    constexpr int T = QUADS128_T, PITCH = QUADS128_W + 1;
    __shared__ unsigned int S[T * PITCH];
    unsigned char* S8 = reinterpret_cast<unsigned char*>(S);   // fallback: S8[c * 4 PITCH + r] = A(r0 + r, c0 + c)
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long c0 = (long long)blockIdx.x * T;
    const long long row_tiles = (rows + T - 1) / T;
    const bool aligned = ((reinterpret_cast<unsigned long long>(A) | reinterpret_cast<unsigned long long>(B)) & 3) == 0
                         && ((lda | ldb) & 3) == 0;
    const int w = (int)min((long long)T, cols - c0);
    for (long long t = blockIdx.y; t < row_tiles; t += gridDim.y) {
        const long long r0 = t * T;
        const int h = (int)min((long long)T, rows - r0);
        if (aligned && h == T && w == T) {
            quads128_tile<false>(A + r0 * lda + c0, B + c0 * ldb + r0, S, lda, ldb, h, w);
        } else if (aligned) {
            quads128_tile<true>(A + r0 * lda + c0, B + c0 * ldb + r0, S, lda, ldb, h, w);
        } else {
            const unsigned char* a = A + r0 * lda + c0;
#pragma unroll 4
            for (int r = ty; r < h; r += 8)
#pragma unroll
                for (int c = tx; c < T; c += 32)
                    if (c < w)
                        S8[c * (4 * PITCH) + r] = a[r * lda + c];
            __syncthreads();
            unsigned char* b = B + c0 * ldb + r0;
#pragma unroll 4
            for (int c = ty; c < w; c += 8)
#pragma unroll
                for (int r = tx; r < T; r += 32)
                    if (r < h)
                        b[c * ldb + r] = S8[c * (4 * PITCH) + r];
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------------------------
// sector_quads128 (1-byte elements, any alignment and strides): sector_words128x64's scheme for bytes.
// A block moves A's columns c0 .. c0 + 127 (B's rows) for A's rows near 128t. Row j of B takes the 128
// bytes r in [128t - m, 128t + 128 - m), m = B(c0 + j, 128t)'s byte index mod 32: every piece starts on a
// 32-byte sector, and a warp stores one piece (a lane one word) an instruction. The block stages A's
// rows 128t - 31 .. 128t + 127 as aligned words: staged row i holds A(r, c0 - p + 4w .. +3) in its word w,
// p = A(r, c0)'s byte index mod 4, so every copy is a 4-byte cp.async (a word that reaches outside A's
// row is copied byte by byte, its bytes inside). A warp stages rows i = warp (mod 8), whose p agree (8 lda
// is a multiple of 4). A lane builds B(c, r .. r + 3) from the byte of column c in staged rows i .. i + 3
// (four shared loads, three byte permutes); rows 4 apart have one p, so the words and bytes it reads are
// the same for every lane. Shared memory: 159 rows of 37 words, a row's words rotated by (i / 32) mod 4,
// so that the lanes' loads, rows o + 4l, fall in 32 banks for every o (checked exhaustively on the host).
// Tiles wholly inside A take the loops without checks.
// Launch: block (32, 8), grid (ceil(cols/128), min(ceil((rows + 31)/128), 65535)); 23.5 KB of shared memory.
// ---------------------------------------------------------------------------------------------------
constexpr int QUADS_TR = 128, QUADS_TC = 128, QUADS_SHIFT = 31, QUADS_STAGED = QUADS_TR + QUADS_SHIFT, QUADS_PITCH = 37;

__device__ __forceinline__ int quads_slot(int i) { return i * QUADS_PITCH + ((i >> 5) & 3); }

template <bool CHECK>
__device__ __forceinline__ void sector_quads_tile(const unsigned char* __restrict__ A, unsigned char* __restrict__ B,
                                                  unsigned int* S, long long rows, long long cols, long long lda,
                                                  long long ldb, long long top, long long c0, int w_cols,
                                                  int a_first, unsigned long long b_top)
{
    constexpr int TR = QUADS_TR, SHIFT = QUADS_SHIFT, STAGED = QUADS_STAGED;
    const int lane = threadIdx.x, warp = threadIdx.y, lda4 = (int)(lda & 3);
    const long long r_first = top - SHIFT;
    // staged rows i_lo <= i < i_hi lie inside A
    const int i_lo = CHECK ? (int)max(-r_first, 0LL) : 0;
    const int i_hi = CHECK ? (int)min(rows - r_first, (long long)STAGED) : STAGED;
    const int p = (a_first + (int)((r_first + warp) & 3) * lda4) & 3;   // A(r, c0)'s byte index mod 4, this warp's rows
    const int words = (p + w_cols + 3) >> 2;                           // the words that hold the tile's columns
    {
        // lane l copies word l of each of the warp's rows: columns c .. c + 3
        const long long c = c0 - p + 4 * lane;
        const bool whole = !CHECK || (c >= 0 && c + 3 < cols && lane < words);
        const unsigned char* a = A + (r_first + warp) * lda + c;
        const long long step = 8 * lda;
#pragma unroll 4
        for (int k = 0; k < (STAGED + 7) / 8; ++k, a += step) {
            const int i = warp + 8 * k;   // (i >> 5) & 3 == (k >> 2) & 3
            if ((k < STAGED / 8 || i < STAGED) && (!CHECK || (i >= i_lo && i < i_hi))) {
                unsigned int* s = S + i * QUADS_PITCH + ((k >> 2) & 3) + lane;
                if (whole) {
                    copy_async<4>(s, a);
                } else if (lane < words) {   // a word reaching outside A's row: its bytes inside
                    unsigned char* s8 = reinterpret_cast<unsigned char*>(s);
#pragma unroll
                    for (int b = 0; b < 4; ++b)
                        if (c + b >= 0 && c + b < cols) s8[b] = a[b];
                }
            }
        }
        if (words > 32) {   // p > 0 and a whole tile: word 32 (columns c0 - p + 128 .. +3), a lane a row
            const long long c32 = c0 - p + 128;
            for (int i = warp + 8 * lane; i < STAGED; i += 256) {
                if (CHECK && (i < i_lo || i >= i_hi)) continue;
                const unsigned char* a32 = A + (r_first + i) * lda + c32;
                unsigned int* s = S + quads_slot(i) + 32;
                if (!CHECK || c32 + 3 < cols) {
                    copy_async<4>(s, a32);
                } else {
                    unsigned char* s8 = reinterpret_cast<unsigned char*>(s);
#pragma unroll
                    for (int b = 0; b < 4; ++b)
                        if (c32 + b < cols) s8[b] = a32[b];
                }
            }
        }
    }
    wait_async();
    __syncthreads();
    // the warp writes rows j = warp (mod 8) of B's tile; row j's piece starts at A's row top - m
    const int m_first = (int)((b_top + (unsigned long long)warp * (unsigned long long)ldb) & SHIFT);
    const int m_step = (int)((8 * ldb) & SHIFT);   // 0, 8, 16 or 24: m mod 4 is the same for all the warp's rows
    // staged rows x + q (x = SHIFT - m + 4 lane) hold A's rows top - m + 4 lane + q, whose p depends on q
    // alone: column j's byte is byte (j + p) mod 4 of word (j + p) / 4, the same for every lane and
    // (j = warp + 8k) two words further on for each k
    int word[4], pick[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        const int at = warp + ((a_first + ((q - m_first) & 3) * lda4) & 3);
        word[q] = at >> 2;
        pick[q] = at & 3;
    }
    const unsigned int sel_lo = pick[0] | ((pick[1] + 4) << 4), sel_hi = pick[2] | ((pick[3] + 4) << 4);
    // element k of a piece is A's row top - m + k: inside A when lo <= k - m < hi
    const int lo = CHECK ? (int)max(-top, (long long)-SHIFT) : -SHIFT, hi = CHECK ? (int)min(rows - top, (long long)TR) : TR;
#pragma unroll 1   // unrolled, it spilled on sm_80 at six blocks an SM
    for (int j = warp, k = 0; j < w_cols; j += 8, ++k) {
        const int m = (m_first + k * m_step) & SHIFT;
        const int x = SHIFT - m + 4 * lane;   // the staged row of the lane's first byte
        const unsigned int v0 = S[quads_slot(x) + word[0] + 2 * k], v1 = S[quads_slot(x + 1) + word[1] + 2 * k];
        const unsigned int v2 = S[quads_slot(x + 2) + word[2] + 2 * k], v3 = S[quads_slot(x + 3) + word[3] + 2 * k];
        const unsigned int w = __byte_perm(__byte_perm(v0, v1, sel_lo), __byte_perm(v2, v3, sel_hi), 0x5410);
        unsigned char* b = B + (c0 + j) * ldb + top - m + 4 * lane;   // sector-aligned at lane 0
        const int kr = 4 * lane - m;
        if (!CHECK || (kr >= lo && kr + 3 < hi)) {
            *reinterpret_cast<unsigned int*>(b) = w;
        } else {   // a word across an end of A's rows: its bytes inside
#pragma unroll
            for (int q = 0; q < 4; ++q)
                if (kr + q >= lo && kr + q < hi) b[q] = (unsigned char)(w >> (8 * q));
        }
    }
    __syncthreads();   // the next tile overwrites shared memory
}

__device__ __forceinline__ void sector_quads128(const unsigned char* __restrict__ A, unsigned char* __restrict__ B,
                                                long long rows, long long cols, long long lda, long long ldb)
{
    __shared__ unsigned int S[QUADS_STAGED * QUADS_PITCH];
    const long long c0 = (long long)blockIdx.x * QUADS_TC;
    const int w_cols = (int)min((long long)QUADS_TC, cols - c0);
    const bool cols_inside = c0 >= 3 && c0 + QUADS_TC + 3 <= cols;   // every staged word inside A's rows
    const long long row_tiles = (rows + QUADS_SHIFT + QUADS_TR - 1) / QUADS_TR;
    const int a_first = (int)((reinterpret_cast<unsigned long long>(A) + c0) & 3);   // A(0, c0)'s byte index mod 4
    const unsigned long long b_c0 = reinterpret_cast<unsigned long long>(B) + (unsigned long long)(c0 * ldb);
    for (long long t = blockIdx.y; t < row_tiles; t += gridDim.y) {
        const long long top = t * QUADS_TR;
        const unsigned long long b_top = b_c0 + (unsigned long long)top;   // B(c0, top)'s byte index
        if (cols_inside && t >= 1 && top + QUADS_TR <= rows)   // all tiles but the edges
            sector_quads_tile<false>(A, B, S, rows, cols, lda, ldb, top, c0, w_cols, a_first, b_top);
        else
            sector_quads_tile<true>(A, B, S, rows, cols, lda, ldb, top, c0, w_cols, a_first, b_top);
    }
}

}  // namespace

// One entry per family and dtype: transpose_<family>_<dtype>(A, B, rows, cols, lda, ldb, batch, bsa, bsb).
#define GPUMAT_TRANSPOSE_BATCH(CALL)                                                                         \
    gpumat::wait_for_previous_grid();                                                                        \
    const long long z = blockIdx.z;                                                                          \
    if (z < batch) CALL;
// Launch bounds: THREADS a block and, for the memory-bound families, the blocks an SM that keep enough
// loads in flight (MIN4 for 4- and 8-byte elements, MIN2 for 2-byte ones): ptxas keeps a family under the
// registers that many blocks leave, without spilling on any architecture the build targets. With no
// minimum ptxas spilled the 16-bit tiles on some architectures; with 1024 / THREADS everywhere it took up
// to 64 registers where 32-40 had done. Against that build (bench transpose, H200, 2026-11-28), six
// blocks (40 registers) ran tiled_rect64's 32-63-row float32 and 16-bit shapes 5-22% faster; float64's
// narrow_rows lost 5% at six, so the row strips keep four.
#define GPUMAT_TRANSPOSE_ENTRY(FAMILY, THREADS, MINB, SFX, T)                                              \
    extern "C" __global__ void __launch_bounds__(THREADS, MINB) transpose_##FAMILY##_##SFX(                \
        const T* __restrict__ A, T* __restrict__ B, long long rows, long long cols, long long lda, long long ldb, \
        long long batch, long long bsa, long long bsb)                                                       \
    {                                                                                                        \
        GPUMAT_TRANSPOSE_BATCH((FAMILY<T>(A + z * bsa, B + z * bsb, rows, cols, lda, ldb)))                  \
    }
// sector_aligned: six blocks an SM for 4- and 8-byte elements (40 registers), four for the others, where that
// fits without spills; sm_100 and sm_120's compilers need more registers for the same code.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#define GPUMAT_SECTOR_MIN4 4
#define GPUMAT_SECTOR_MIN2 3
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define GPUMAT_SECTOR_MIN4 4
#define GPUMAT_SECTOR_MIN2 2
#else
#define GPUMAT_SECTOR_MIN4 6
#define GPUMAT_SECTOR_MIN2 4
#endif
#define GPUMAT_TRANSPOSE_FAMILY(FAMILY, THREADS, MIN4, MIN2)                    \
    GPUMAT_TRANSPOSE_ENTRY(FAMILY, THREADS, MIN4, f32, unsigned int)            \
    GPUMAT_TRANSPOSE_ENTRY(FAMILY, THREADS, MIN4, f64, unsigned long long)      \
    GPUMAT_TRANSPOSE_ENTRY(FAMILY, THREADS, MIN2, f16, unsigned short)          \
    GPUMAT_TRANSPOSE_ENTRY(FAMILY, THREADS, MIN2, bf16, unsigned short)          \
    GPUMAT_TRANSPOSE_ENTRY(FAMILY, THREADS, MIN2, s8, unsigned char)

GPUMAT_TRANSPOSE_FAMILY(naive, 256, 4, 4)
GPUMAT_TRANSPOSE_FAMILY(tiled, 1024, 1, 1)
GPUMAT_TRANSPOSE_FAMILY(tiled_padded, 1024, 1, 1)
GPUMAT_TRANSPOSE_FAMILY(tiled_rect, 256, 4, 4)
GPUMAT_TRANSPOSE_FAMILY(tiled_rect64, 256, 6, 6)
GPUMAT_TRANSPOSE_FAMILY(sector_aligned, 256, GPUMAT_SECTOR_MIN4, GPUMAT_SECTOR_MIN2)
GPUMAT_TRANSPOSE_FAMILY(narrow_cols, 256, 6, 4)
GPUMAT_TRANSPOSE_FAMILY(narrow_rows, 256, 4, 4)
GPUMAT_TRANSPOSE_FAMILY(narrow_cols16k, 256, 6, 4)
GPUMAT_TRANSPOSE_FAMILY(narrow_rows16k, 256, 4, 4)
GPUMAT_TRANSPOSE_FAMILY(narrow_rows_chunks, 256, 4, 4)
GPUMAT_TRANSPOSE_FAMILY(narrow_rows_chunks16k, 256, 4, 4)

// The tiles of 2-byte elements alone: transpose_<tile>_<dtype>, six blocks an SM.
#define GPUMAT_TRANSPOSE_2BYTE_TILE(TILE, SFX)                                                               \
    extern "C" __global__ void __launch_bounds__(256, 6) transpose_##TILE##_##SFX(                            \
        const unsigned short* __restrict__ A, unsigned short* __restrict__ B, long long rows, long long cols, \
        long long lda, long long ldb, long long batch, long long bsa, long long bsb)                         \
    {                                                                                                        \
        GPUMAT_TRANSPOSE_BATCH((TILE(A + z * bsa, B + z * bsb, rows, cols, lda, ldb)))                       \
    }
GPUMAT_TRANSPOSE_2BYTE_TILE(pairs128x64, f16)
GPUMAT_TRANSPOSE_2BYTE_TILE(pairs128x64, bf16)
GPUMAT_TRANSPOSE_2BYTE_TILE(words256x64, f16)
GPUMAT_TRANSPOSE_2BYTE_TILE(words256x64, bf16)
GPUMAT_TRANSPOSE_2BYTE_TILE(sector_words128x64, f16)
GPUMAT_TRANSPOSE_2BYTE_TILE(sector_words128x64, bf16)

// The tiles of 1-byte elements alone (int8 and the FP8 formats): six blocks an SM.
extern "C" __global__ void __launch_bounds__(256, 6) transpose_quads128_s8(const unsigned char* __restrict__ A,
    unsigned char* __restrict__ B, long long rows, long long cols, long long lda, long long ldb, long long batch,
    long long bsa, long long bsb)
{
    GPUMAT_TRANSPOSE_BATCH((quads128(A + z * bsa, B + z * bsb, rows, cols, lda, ldb)))
}
extern "C" __global__ void __launch_bounds__(256, 6) transpose_sector_quads128_s8(const unsigned char* __restrict__ A,
    unsigned char* __restrict__ B, long long rows, long long cols, long long lda, long long ldb, long long batch,
    long long bsa, long long bsb)
{
    GPUMAT_TRANSPOSE_BATCH((sector_quads128(A + z * bsa, B + z * bsb, rows, cols, lda, ldb)))
}

// narrow_rows_quads16k: four blocks an SM on sm_90 (64 registers, no spills); the other architectures'
// compilers spill at 64 and get three (80 registers)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
#define GPUMAT_ROWS_QUADS_MIN 4
#else
#define GPUMAT_ROWS_QUADS_MIN 3
#endif
extern "C" __global__ void __launch_bounds__(256, GPUMAT_ROWS_QUADS_MIN) transpose_narrow_rows_quads16k_s8(
    const unsigned char* __restrict__ A, unsigned char* __restrict__ B, long long rows, long long cols, long long lda,
    long long ldb, long long batch, long long bsa, long long bsb)
{
    GPUMAT_TRANSPOSE_BATCH((narrow_rows_quads_impl<16384>(A + z * bsa, B + z * bsb, rows, cols, lda, ldb)))
}
// The 2-byte strips, BYTES of staged strip each; MIN_BLOCKS blocks an SM asked of the register allocator
// (4 for the strips that walk a column a thread and write a row a warp: 40-64 registers; the others keep 2)
#define GPUMAT_TRANSPOSE_NARROW_PAIRS(SFX, NAME, IMPL, BYTES, MIN_BLOCKS)                                   \
    extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS) transpose_##NAME##_##SFX(                 \
        const unsigned short* __restrict__ A, unsigned short* __restrict__ B, long long rows, long long cols, \
        long long lda, long long ldb, long long batch, long long bsa, long long bsb)                         \
    {                                                                                                        \
        GPUMAT_TRANSPOSE_BATCH((IMPL<BYTES>(A + z * bsa, B + z * bsb, rows, cols, lda, ldb)))                \
    }
GPUMAT_TRANSPOSE_NARROW_PAIRS(f16, narrow_cols_pairs, narrow_cols_pairs_impl, 32768, 2)
GPUMAT_TRANSPOSE_NARROW_PAIRS(bf16, narrow_cols_pairs, narrow_cols_pairs_impl, 32768, 2)
GPUMAT_TRANSPOSE_NARROW_PAIRS(f16, narrow_rows_pairs, narrow_rows_pairs_impl, 32768, 2)
GPUMAT_TRANSPOSE_NARROW_PAIRS(bf16, narrow_rows_pairs, narrow_rows_pairs_impl, 32768, 2)
GPUMAT_TRANSPOSE_NARROW_PAIRS(f16, narrow_cols_pairs16k, narrow_cols_pairs_impl, 16384, 2)
GPUMAT_TRANSPOSE_NARROW_PAIRS(bf16, narrow_cols_pairs16k, narrow_cols_pairs_impl, 16384, 2)
GPUMAT_TRANSPOSE_NARROW_PAIRS(f16, narrow_rows_pairs16k, narrow_rows_pairs_impl, 16384, 2)
GPUMAT_TRANSPOSE_NARROW_PAIRS(bf16, narrow_rows_pairs16k, narrow_rows_pairs_impl, 16384, 2)
GPUMAT_TRANSPOSE_NARROW_PAIRS(f16, narrow_cols_flat16k, narrow_cols_flat_impl, 16384, 2)
GPUMAT_TRANSPOSE_NARROW_PAIRS(bf16, narrow_cols_flat16k, narrow_cols_flat_impl, 16384, 2)
GPUMAT_TRANSPOSE_NARROW_PAIRS(f16, narrow_rows_flat16k, narrow_rows_flat_impl, 16384, 2)
GPUMAT_TRANSPOSE_NARROW_PAIRS(bf16, narrow_rows_flat16k, narrow_rows_flat_impl, 16384, 2)
GPUMAT_TRANSPOSE_NARROW_PAIRS(f16, narrow_cols_flat_even16k, narrow_cols_flat_even_impl, 16384, 4)
GPUMAT_TRANSPOSE_NARROW_PAIRS(bf16, narrow_cols_flat_even16k, narrow_cols_flat_even_impl, 16384, 4)
GPUMAT_TRANSPOSE_NARROW_PAIRS(f16, narrow_cols_flat_parity16k, narrow_cols_flat_parity_impl, 16384, 4)
GPUMAT_TRANSPOSE_NARROW_PAIRS(bf16, narrow_cols_flat_parity16k, narrow_cols_flat_parity_impl, 16384, 4)
GPUMAT_TRANSPOSE_NARROW_PAIRS(f16, narrow_cols_flat_odd_parity16k, narrow_cols_flat_odd_parity_impl, 16384, 4)
GPUMAT_TRANSPOSE_NARROW_PAIRS(bf16, narrow_cols_flat_odd_parity16k, narrow_cols_flat_odd_parity_impl, 16384, 4)

// The strip of 1-byte elements alone, moved as words.
// Four blocks an SM: 64 registers a thread, 48 KB of shared memory each.
extern "C" __global__ void __launch_bounds__(256, 4) transpose_narrow_cols_quads16k_s8(
    const unsigned char* __restrict__ A, unsigned char* __restrict__ B, long long rows, long long cols, long long lda,
    long long ldb, long long batch, long long bsa, long long bsb)
{
    GPUMAT_TRANSPOSE_BATCH((narrow_cols_quads_impl<16384>(A + z * bsa, B + z * bsb, rows, cols, lda, ldb)))
}
