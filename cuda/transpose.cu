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

// ---------------------------------------------------------------- whole aligned sectors, any alignment
// With odd strides every row of A and of B starts at a different 4-byte offset within its 128-byte
// line, so the kernels above cut each 32-float warp access into two lines with partial 32-byte
// sectors at both ends, on reads and on writes. This kernel makes its global accesses whole aligned
// 16-byte chunks whatever a row's alignment, pairs of chunks filling whole 32-byte sectors.
//
// A block of 256 threads moves a 64 x 64 tile of A. Each tile row (a row of A on the way in, a row
// of B on the way out: 64 floats, 256 bytes) goes to 16 threads, "lanes" 0..15. Let m = the row's
// misalignment in words modulo 8 (its offset within a 32-byte sector). Lane k moves the four words
// (4k - m + e) mod 64, e = 0..3: for k >= 2 (or any k when m = 0) an aligned 16-byte chunk inside
// the row, one float4 access (cp.async of 16 bytes on the way in). When m != 0 the words of lanes 0
// and 1 wrap around: the head [0, 8 - m) and the tail [64 - m, 64) of the row, the two partial
// sectors it shares with the neighbouring tiles; lanes 0..7 move those 8 words with one scalar access
// each, so each partial sector is touched by a single instruction and every other sector of the row
// is written (or read) whole by two neighbouring lanes of a single instruction. Only the tile's own
// elements are ever read or written: no access leaves [0, cols) of A's row or touches an element of
// B that another block owns. In a tile that sticks out of A the chunks that do not lie wholly inside
// are moved word by word.
//
// Shared memory holds the tile as A's rows, each rotated by its misalignment mod 4 so that the
// 16-byte chunks read from global memory land 16-byte aligned (cp.async of 16 bytes needs that), and
// with its 16-byte slots XOR-swizzled by (row / 4) mod 8: the write phase reads a column of the tile,
// four rows a lane, and the swizzle spreads the 16 lanes of one B row over 8 different slots (2-way
// bank conflicts on those loads whatever the strides, see the write phase; the 16-byte stores into
// shared memory are conflict-free). The row alignment is computed from the pointers, so this assumes
// float-aligned A and B (as every float* is).
// Launch: block (32, 8), grid (ceil(cols/64), min(ceil(rows/64), 65535)); 16 KB of shared memory.
namespace sectors {
constexpr int TILE = 64;                  // rows and columns of A per tile
constexpr int LANES = TILE / 4;           // threads per tile row: one 16-byte chunk each
constexpr int ROWS_PER_PASS = 256 / LANES;
constexpr int PASSES = TILE / ROWS_PER_PASS;

// Where element (j, t) of the tile (A row r0 + j, column c0 + t) lives in shared memory, given
// rot = the word address of A's row r0 + j, column c0, mod 4.
__device__ __forceinline__ int slot(int j, int t, unsigned rot)
{
    const int u = (t + (int)rot) & (TILE - 1);
    return j * TILE + ((((u >> 2) ^ (j >> 2)) & (LANES - 1)) << 2) + (u & 3);
}

// Low 32 bits of a pointer's word (4-byte) address: its alignment within 16- and 32-byte blocks.
__device__ __forceinline__ unsigned word_of(const float* p)
{
    return (unsigned)(reinterpret_cast<unsigned long long>(p) >> 2);
}
}  // namespace sectors

// One 16-byte store of four floats to a 16-byte aligned address. Written in PTX: nvcc 13 splits a
// float4 assignment through a reinterpret_cast pointer into four 4-byte stores here.
__device__ __forceinline__ void store16(float* gmem, float x, float y, float z, float w)
{
    asm volatile("st.global.v4.f32 [%0], {%1, %2, %3, %4};\n" :: "l"(gmem), "f"(x), "f"(y), "f"(z), "f"(w));
}

// cp.async of a 16-byte chunk (both addresses 16-byte aligned), cached in L2 only.
__device__ __forceinline__ void copy_async16(float* smem, const float* gmem)
{
#if __CUDA_ARCH__ >= 800
    const unsigned int s = static_cast<unsigned int>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(gmem) : "memory");
#else
    *reinterpret_cast<float4*>(smem) = *reinterpret_cast<const float4*>(gmem);
#endif
}

// Blocks per SM the register budget must allow: 6 (40 registers) where an SM holds 1536 threads and
// that fits without spills; 4 on sm_75 (1024 threads an SM) and on sm_100 / sm_120, which spill at 40
// registers and would otherwise take 124-128.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ < 800 || __CUDA_ARCH__ >= 1000)
#define TRANSPOSE_ALIGNED_MIN_BLOCKS 4
#else
#define TRANSPOSE_ALIGNED_MIN_BLOCKS 6
#endif

extern "C" __global__ void __launch_bounds__(256, TRANSPOSE_ALIGNED_MIN_BLOCKS) transpose_tiled_aligned(
    const float* __restrict__ A, float* __restrict__ B,
    long long rows, long long cols, long long lda, long long ldb)
{
    using namespace sectors;
    __shared__ __align__(16) float tile[TILE * TILE];
    const int tid = threadIdx.y * blockDim.x + threadIdx.x;
    const int lane = tid % LANES, sub = tid / LANES;   // this thread's lane and first row in the tile
    const bool wrap_lane = lane < 8;                    // moves one word of the partial sectors
    const unsigned lda_lo = (unsigned)lda, ldb_lo = (unsigned)ldb;   // strides mod 2^32: enough for alignments
    const int skew = ((lda_lo * ldb_lo) & 3) == 1 ? (sub & 1) : 0;   // see the write phase
    const long long c0 = (long long)blockIdx.x * TILE;
    const int w = (int)min((long long)TILE, cols - c0);   // columns of A in this tile (= rows of B)
    const long long row_tiles = (rows + TILE - 1) / TILE;
    for (long long t = blockIdx.y; t < row_tiles; t += gridDim.y) {
        const long long r0 = t * TILE;
        const int h = (int)min((long long)TILE, rows - r0);   // rows of A in this tile (= columns of B)
        const float* a = A + r0 * lda + c0;   // tile corner in A: rows r0.., columns c0..
        float* b = B + c0 * ldb + r0;         // tile corner in B: rows c0.., columns r0..
        const unsigned a_word = word_of(a), b_word = word_of(b);

        // In: row j of the tile is A's row r0 + j, columns c0 .. c0 + w - 1.
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            const int j = sub + p * ROWS_PER_PASS;
            if (j < h) {
                const float* src = a + j * lda;
                const unsigned word = a_word + (unsigned)j * lda_lo;
                const int m = word & 7;
                const unsigned rot = word & 3;
                const int t0 = 4 * lane - m;   // first word of this lane's chunk
                if (m == 0 || lane >= 2) {
                    if (t0 + 4 <= w) {
                        copy_async16(&tile[slot(j, t0, rot)], src + t0);
                    } else {
#pragma unroll
                        for (int e = 0; e < 3; ++e)   // a chunk sticking out of A: t0 + 3 >= w
                            if (t0 + e < w)
                                copy_async(&tile[slot(j, t0 + e, rot)], src + t0 + e);
                    }
                }
                if (m != 0 && wrap_lane) {
                    const int tw = (lane - m) & (TILE - 1);   // head [0, 8 - m) and tail [64 - m, 64)
                    if (tw < w)
                        copy_async(&tile[slot(j, tw, rot)], src + tw);
                }
            }
        }
        wait_async();
        __syncthreads();

        // Out: row i of B's tile is B's row c0 + i, columns r0 .. r0 + h - 1, holding column i of the
        // tile: word j of it is row j of the tile, whose A row has rotation (a_word + j * lda) mod 4.
        // All shared-memory loads first (indices wrapped into the tile; values a thread does not store
        // are never used), then the stores, so that a thread has all its loads in flight at once.
        // The 16 lanes of B row i read tile column i at rows 4k - m + e: for each e one bank class mod 4
        // per B row, (i + rotation) mod 4, which moves by 1 - lda * ldb (mod 4) from B row i to i + 1,
        // the two rows of a warp. When lda * ldb = 1 (mod 4) both rows would share a class (4-way
        // conflicts): then odd rows read their four words in the order 1, 2, 3, 0 (moving their class
        // by lda, odd) and rotate the registers back.
        float v[PASSES][4], vw[PASSES];
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            const int i = sub + p * ROWS_PER_PASS;
            const int m = (b_word + (unsigned)i * ldb_lo) & 7;
            float x[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int j = (4 * lane - m + ((e + skew) & 3)) & (TILE - 1);
                x[e] = tile[slot(j, i, (a_word + (unsigned)j * lda_lo) & 3)];
            }
#pragma unroll
            for (int e = 0; e < 4; ++e)   // word e of the chunk is x[e - skew]
                v[p][e] = skew ? x[(e + 3) & 3] : x[e];
            const int j = (lane - m) & (TILE - 1);
            vw[p] = wrap_lane && m != 0 ? tile[slot(j, i, (a_word + (unsigned)j * lda_lo) & 3)] : 0.0f;
        }
#pragma unroll
        for (int p = 0; p < PASSES; ++p) {
            const int i = sub + p * ROWS_PER_PASS;
            if (i < w) {
                float* dst = b + i * ldb;
                const int m = (b_word + (unsigned)i * ldb_lo) & 7;
                const int t0 = 4 * lane - m;   // first word of this lane's chunk
                if (m == 0 || lane >= 2) {
                    if (t0 + 4 <= h) {
                        store16(dst + t0, v[p][0], v[p][1], v[p][2], v[p][3]);
                    } else {
#pragma unroll
                        for (int e = 0; e < 3; ++e)   // a chunk sticking out of A's rows: t0 + 3 >= h
                            if (t0 + e < h)
                                dst[t0 + e] = v[p][e];
                    }
                }
                if (m != 0 && wrap_lane) {
                    const int j = (lane - m) & (TILE - 1);
                    if (j < h)
                        dst[j] = vw[p];
                }
            }
        }
        __syncthreads();   // the next tile overwrites shared memory
    }
}
