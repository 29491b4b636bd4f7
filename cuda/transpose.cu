// Transpose kernels: B (cols x rows) = A (rows x cols)^T, row-major, float32.
// Both matrices come with their own row stride (lda, ldb, in elements); every offset is 64-bit, so
// matrices of more than 2^31 elements work. The launcher gives blockIdx.x the column tiles of A and
// caps gridDim.y at 65535, so each block walks the row tiles of A in a grid-stride loop.
// Every variant works for any shape: tiles that stick out of A are bounds-checked element by element.

// One thread per element, straight from global memory to global memory: the reads along a row of A
// are coalesced, the writes go down a column of B (one 32-byte sector touched per element).
// Launch: block (32, 8), grid (ceil(cols/32), min(ceil(rows/8), 65535)).
extern "C" __global__ void __launch_bounds__(256) transpose_naive(
    const float* __restrict__ A, float* __restrict__ B,
    long long rows, long long cols, long long lda, long long ldb)
{
    const long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (long long r = (long long)blockIdx.y * blockDim.y + threadIdx.y; r < rows;
         r += (long long)gridDim.y * blockDim.y)
        B[c * ldb + r] = A[r * lda + c];
}

// Global -> shared copy of one float that needs no register: cp.async (sm_80 and newer) lets a thread
// issue all its loads back to back and wait for them together, whatever ptxas' register budget; on
// older GPUs an ordinary load and store.
__device__ __forceinline__ void copy_async(float* smem, const float* gmem)
{
#if __CUDA_ARCH__ >= 800
    const unsigned int s = static_cast<unsigned int>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" :: "r"(s), "l"(gmem) : "memory");
#else
    *smem = *gmem;
#endif
}

__device__ __forceinline__ void wait_async()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// The shared-memory tile (seed 001, generalised). A block of 32 x BY threads moves a TILE x TILE
// tile of A: it reads rows of the tile (coalesced along a row of A) into shared memory, and after
// the barrier writes rows of the transposed tile (coalesced along a row of B), reading shared memory
// down a column. Each thread moves (TILE/32) x (TILE/BY) elements. PAD = 1 pads each tile row by one
// float so a column of the tile falls in 32 different banks (TILE + 1 is odd); PAD = 0 is the
// textbook tile whose column reads are 32-way bank conflicts.
// A tile that lies wholly inside A skips the per-element bounds checks; with ASYNC its loads go
// straight to shared memory through cp.async (ptxas otherwise interleaves loads with shared stores
// to fit its register budget, leaving only a few loads in flight per thread).
template <int TILE, int BY, int PAD, bool ASYNC>
__device__ __forceinline__ void transpose_tiles(const float* __restrict__ A, float* __restrict__ B,
                                                long long rows, long long cols, long long lda, long long ldb)
{
    static_assert(TILE % 32 == 0 && TILE % BY == 0, "tile must split evenly over the thread block");
    constexpr int NX = TILE / 32, NY = TILE / BY;
    __shared__ float tile[TILE][TILE + PAD];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long c0 = (long long)blockIdx.x * TILE;
    const long long row_tiles = (rows + TILE - 1) / TILE;
    for (long long t = blockIdx.y; t < row_tiles; t += gridDim.y) {
        const long long r0 = t * TILE;
        const float* a = A + r0 * lda + c0;   // tile corner in A: rows r0.., columns c0..
        float* b = B + c0 * ldb + r0;         // tile corner in B: rows c0.., columns r0..
        if (r0 + TILE <= rows && c0 + TILE <= cols) {
            if (ASYNC) {
#pragma unroll
                for (int k = 0; k < NY; ++k)
#pragma unroll
                    for (int j = 0; j < NX; ++j)
                        copy_async(&tile[ty + k * BY][tx + j * 32], a + (ty + k * BY) * lda + tx + j * 32);
                wait_async();
            } else {
                float v[NY][NX];   // every load written before the first shared-memory store
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

// Seed 001's kernel with bounds checks: block (32, 32), one element per thread, unpadded tile.
// Launch: block (32, 32), grid (ceil(cols/32), min(ceil(rows/32), 65535)).
extern "C" __global__ void __launch_bounds__(1024) transpose_tiled(
    const float* __restrict__ A, float* __restrict__ B,
    long long rows, long long cols, long long lda, long long ldb)
{
    transpose_tiles<32, 32, 0, false>(A, B, rows, cols, lda, ldb);
}

// The same with the tile padded to 32 x 33 against bank conflicts.
// Launch: block (32, 32), grid (ceil(cols/32), min(ceil(rows/32), 65535)).
extern "C" __global__ void __launch_bounds__(1024) transpose_tiled_padded(
    const float* __restrict__ A, float* __restrict__ B,
    long long rows, long long cols, long long lda, long long ldb)
{
    transpose_tiles<32, 32, 1, false>(A, B, rows, cols, lda, ldb);
}

// Non-square thread block: 32 x 8 threads move a padded 32 x 32 tile, four elements each, so each
// thread has four loads in flight before the barrier.
// Launch: block (32, 8), grid (ceil(cols/32), min(ceil(rows/32), 65535)).
extern "C" __global__ void __launch_bounds__(256) transpose_tiled_rect(
    const float* __restrict__ A, float* __restrict__ B,
    long long rows, long long cols, long long lda, long long ldb)
{
    transpose_tiles<32, 8, 1, false>(A, B, rows, cols, lda, ldb);
}

// Wider tile: 32 x 8 threads move a padded 64 x 64 tile, sixteen elements each, loaded with cp.async:
// four times the bytes in flight per thread, 256-byte row segments (fewer partial sectors when
// strides are not multiples of 32), and a quarter as many tiles and barriers.
// Launch: block (32, 8), grid (ceil(cols/64), min(ceil(rows/64), 65535)).
extern "C" __global__ void __launch_bounds__(256) transpose_tiled_rect64(
    const float* __restrict__ A, float* __restrict__ B,
    long long rows, long long cols, long long lda, long long ldb)
{
    transpose_tiles<64, 8, 1, true>(A, B, rows, cols, lda, ldb);
}

// Whole 32-byte sectors of B at any stride. With an odd ldb every row of B starts at a different
// offset within its 32-byte sector, so the tiles above leave a partial sector at both ends of each
// row piece they write, the other part written by another block: measured on the H100 at 3001 x 17011
// that costs a third of the bandwidth, and B's alignment alone decides it (A odd and B 32-byte
// aligned runs at 0.89 of copy, the reverse at 0.68). Here each row c of B takes, from tile t, the
// 64 elements r in [64t - m, 64t + 64 - m), m = (address of B(c, 0) in words) mod 8: the piece starts
// on a sector boundary, so every sector is written whole by one block (only the matrix's own first
// and last sectors of a row can be partial). m does not depend on t, so the pieces of a row tile it
// exactly. A block stages A rows 64t - 7 .. 64t + 63 (71 rows, 7 of them also staged by the previous
// tile) and columns 64 bx .. +63 with cp.async, then writes 64 rows of B from a 65-float-padded tile.
// Launch: block (32, 8), grid (ceil(cols/64), min(ceil((rows + 7)/64), 65535)); 18.5 KB of shared memory.
extern "C" __global__ void __launch_bounds__(256) transpose_sector_aligned(
    const float* __restrict__ A, float* __restrict__ B,
    long long rows, long long cols, long long lda, long long ldb)
{
    constexpr int TILE = 64, SKEW = 7, STAGED = TILE + SKEW, BY = 8;
    __shared__ float tile[STAGED][TILE + 1];   // tile[i][j] = A(64t - 7 + i, c0 + j)
    const int tx = threadIdx.x, ty = threadIdx.y;
    const long long c0 = (long long)blockIdx.x * TILE;
    const long long row_tiles = (rows + SKEW + TILE - 1) / TILE;
    const unsigned long long b_word = reinterpret_cast<unsigned long long>(B) >> 2;
    for (long long t = blockIdx.y; t < row_tiles; t += gridDim.y) {
        const long long r_first = t * TILE - SKEW;
#pragma unroll
        for (int i = ty; i < STAGED; i += BY)
#pragma unroll
            for (int j = tx; j < TILE; j += 32) {
                const long long r = r_first + i, c = c0 + j;
                if (r >= 0 && r < rows && c < cols)
                    copy_async(&tile[i][j], A + r * lda + c);
            }
        wait_async();
        __syncthreads();
#pragma unroll
        for (int i = ty; i < TILE; i += BY) {
            const long long c = c0 + i;
            if (c < cols) {
                const int m = (int)((b_word + (unsigned long long)c * (unsigned long long)ldb) & 7);
                float* b = B + c * ldb;
#pragma unroll
                for (int j = tx; j < TILE; j += 32) {
                    const long long r = t * TILE - m + j;   // staged at row r - r_first = j + 7 - m
                    if (r >= 0 && r < rows)
                        b[r] = tile[j + SKEW - m][i];
                }
            }
        }
        __syncthreads();   // the next tile overwrites shared memory
    }
}
