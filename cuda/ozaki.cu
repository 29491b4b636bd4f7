// A float64 or float32 product emulated on integer arithmetic by the Chinese remainder theorem (Ozaki scheme
// II; the plan, its moduli and bits: src/gpumat/matmul/ozaki.py; the same steps on the host, which these
// kernels reproduce bit for bit: tests/ozaki_reference.py). C = A @ B, A M x K and B K x N row-major, of one
// type T (entries _f64 and _f32: OZAKI_ENTRIES at the end; float32 is widened to float64 as it is read):
//  1. ozaki_row_exponents_* / ozaki_col_exponents_*: for each row of A (column of B) the e that puts
//     its 2-norm below 2^Q once multiplied by 2^e (Q, the plan's budget: 2^2Q <= M / 4, so that by
//     Cauchy-Schwarz every |A' B'| element stays below M / 4); 0 for a line of zeros; NONFINITE for a line
//     holding an infinity or a NaN, whose outputs step 4 recomputes in plain FP64;
//  2. ozaki_row_residues_* / ozaki_col_residues_*: each element scaled by its line's 2^e, truncated
//     toward zero (an integer below 2^Q, exact in a double), and reduced modulo each of the first `count`
//     moduli to a symmetric residue in int8; written K-major for both operands (A as N_l layers of M rows of
//     K, B transposed: N_l layers of N rows of K), rows `ld` bytes apart, layers `layer` bytes apart (both
//     multiples of 4: four residues are stored as one word);
//  3. per modulus, the residue matrices multiplied with int32 accumulation (exact while K <= 131071: |r_a r_b|
//     <= 2^14 a term) and the sums reduced to symmetric int8 residues as they are written: on sm_90 the wgmma
//     INT8 tiles (matmul_wgmma_kmajor.cu, the *_s8_residues entries), elsewhere ozaki_residue_products here;
//  4. ozaki_crt_*: each element rebuilt from its `count` residues by the CRT
//     with the weights in 32-bit limbs (each limb's sum exact), the multiple of M taken away limb by limb,
//     the limbs added in double-double, rounded to float64, scaled back by 2^-(ea_i + eb_j) and stored as T.
// Every step is integer or in a fixed order (the norms' sums too, in the order the reference follows): the
// bits repeat. Built for every arch in the default list.
#include <stdint.h>

#include "gpumat.cuh"

namespace {

constexpr int MAX_MODULI = gpumat::OZAKI_MAX_MODULI;
__constant__ int MODULI[MAX_MODULI] = {GPUMAT_OZAKI_MODULI};  // largest first (gpumat.cuh)
constexpr int NONFINITE = -0x40000000;  // an exponent no finite line gets: the line holds an Inf or a NaN
constexpr int THREADS = 256;
constexpr int COL_GROUPS = 32;  // the column exponents' groups of rows (gpumat.matmul.ozaki.COL_GROUPS)
constexpr int TILE = 32;  // the column residues' transposing tile (32 x 32 doubles)
constexpr int LIMBS = 4;  // the CRT weights in 32-bit limbs (gpumat.matmul.ozaki.LIMBS)

constexpr double FINITE_MAX = 1.7976931348623157e308;

// 1 / m for each modulus, rounded: a quotient estimate (see symmetric_residue)
__constant__ double INVERSES[MAX_MODULI] = {1.0 / 256, 1.0 / 255, 1.0 / 253, 1.0 / 251, 1.0 / 247, 1.0 / 241,
                                            1.0 / 239, 1.0 / 233, 1.0 / 229, 1.0 / 227, 1.0 / 223, 1.0 / 217,
                                            1.0 / 211, 1.0 / 199, 1.0 / 197, 1.0 / 193};

// x mod m_l, symmetric (gpumat::symmetric_residue), for an integer-valued double |x| < 2^53
__device__ __forceinline__ int symmetric_residue(double x, int l)
{
    return gpumat::symmetric_residue(x, MODULI[l], INVERSES[l]);
}

// 2^32 mod m for each modulus (see residue_of)
__constant__ double POW32[MAX_MODULI] = {0, 1, 81, 123, 139, 15, 110, 8, 161, 176, 7, 4, 51, 46, 88, 108};

// The same for any integer-valued double |x| < 2^62 (the operands' integers reach 2^Q, Q up to 61), the
// same cost whatever its size (a branch for the large ones made the residues three times slower, the warps
// divided): x = h 2^32 + l with h = floor(x 2^-32) (|h| < 2^30) and l in [0, 2^32), both exact, and
// h (2^32 mod m) + l (below 2^39: exact) has x's residue.
__device__ __forceinline__ double split_high(double x) { return floor(__dmul_rn(x, 0x1p-32)); }
__device__ __forceinline__ int residue_of(double high, double low, int l)
{
    return symmetric_residue(__fma_rn(high, POW32[l], low), l);
}

// |x| / 2^g, rounded once as the division would round it (subnormal results included): one product by a
// power of two, or, where 2^-g is past the largest double (g < -1022), two, the first exact
__device__ __forceinline__ double unit_scale(int g) { return g >= -1022 ? ldexp(1.0, -g) : ldexp(1.0, -g - 64); }
__device__ __forceinline__ double scaled_by(double x, int g, double scale)
{
    return g >= -1022 ? __dmul_rn(x, scale) : __dmul_rn(__dmul_rn(x, 0x1p64), scale);
}

// The exponent of a line from its largest magnitude amax = 2^g f (f in [1, 2)) and its sum of squares
// S = sum (|x| / 2^g)^2 in [1, 4K): the 2-norm is sqrt(S) 2^g < 2^(h + 1 + g) with h = floor(ilogb(S) / 2),
// so e = Q - 1 - h - g puts it below 2^Q (sums rounded by less than 2^-36 relative: the plan's margin).
__device__ __forceinline__ int exponent_of(double amax, double squares, int budget)
{
    return amax == 0.0 ? 0 : budget - 1 - (ilogb(squares) >> 1) - ilogb(amax);
}

// s + e == a + b exactly, s = fl(a + b) (Knuth's two-sum). The _rn intrinsics: never contracted into an
// FMA, which would break the error-free transformations.
__device__ __forceinline__ void two_sum(double a, double b, double& s, double& e)
{
    s = __dadd_rn(a, b);
    const double bb = __dsub_rn(s, a);
    e = __dadd_rn(__dsub_rn(a, __dsub_rn(s, bb)), __dsub_rn(b, bb));
}

// four integers' residues of modulus l as one little-endian word, the first in the lowest byte
__device__ __forceinline__ int packed_residues(const double (&high)[4], const double (&low)[4], int l)
{
    int word = 0;
#pragma unroll
    for (int q = 0; q < 4; ++q) word |= (residue_of(high[q], low[q], l) & 0xff) << (8 * q);
    return word;
}

// the residues of four integers t (|t| < 2^62), word by word, `count` moduli
__device__ __forceinline__ void store_residues(const double (&t)[4], int count, int* __restrict__ out,
                                               long long layer_words)
{
    double high[4], low[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        high[q] = split_high(t[q]);
        low[q] = __fma_rn(-high[q], 0x1p32, t[q]);
    }
    for (int l = 0; l < count; ++l) out[l * layer_words] = packed_residues(high, low, l);
}

}  // namespace

// Step 1, rows: one warp a row. The largest magnitude first (an order-free reduction), then the sum of the
// squares of |x| / 2^g (the division exact or correctly rounded, never an FMA): lane l adds k = l, l + 32,
// ... in order, the lanes' sums then added in a butterfly (offsets 16, 8, 4, 2, 1). Block (256), grid
// (ceil(rows / 8)).
template <class T>
__device__ __forceinline__ void row_exponents(const T* __restrict__ A, long long lda, int rows, int cols, int budget,
                                              int* __restrict__ e)
{
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (THREADS / 32) + (threadIdx.x >> 5);
    if (row >= rows) return;
    const T* a = A + (long long)row * lda;
    double amax = 0.0;
    bool finite = true;
    for (int k = lane; k < cols; k += 32) {
        const double v = fabs((double)a[k]);
        finite = finite && v <= FINITE_MAX;
        amax = fmax(amax, v);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) amax = fmax(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    if (!__all_sync(0xffffffffu, finite)) {
        if (lane == 0) e[row] = NONFINITE;
        return;
    }
    if (amax == 0.0) {
        if (lane == 0) e[row] = 0;
        return;
    }
    const int g = ilogb(amax);
    const double scale = unit_scale(g);
    double squares = 0.0;
    for (int k = lane; k < cols; k += 32) {
        const double v = scaled_by(fabs((double)a[k]), g, scale);
        squares = __dadd_rn(squares, __dmul_rn(v, v));
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        squares = __dadd_rn(squares, __shfl_xor_sync(0xffffffffu, squares, offset));
    if (lane == 0) e[row] = exponent_of(amax, squares, budget);
}

// Step 1, columns: 32 columns a block, COL_GROUPS groups of rows (a warp reads 32 consecutive doubles of a
// row, warp w rows w, w + COL_GROUPS, ...). The groups' maxima of a column are taken in shared memory (max
// is exact in any order), then each group adds the squares of its rows' |x| / 2^g in order and the groups'
// sums are added group 0 first. Block (32, COL_GROUPS), grid (ceil(cols / 32)).
template <class T>
__device__ __forceinline__ void col_exponents(const T* __restrict__ B, long long ldb, int rows, int cols, int budget,
                                              int* __restrict__ e)
{
    __shared__ double partial[COL_GROUPS][32];
    __shared__ bool finites[COL_GROUPS][32];
    const int col = blockIdx.x * 32 + threadIdx.x;
    double amax = 0.0;
    bool finite = true;
    if (col < cols) {
        for (int k = threadIdx.y; k < rows; k += COL_GROUPS) {
            const double v = fabs((double)B[(long long)k * ldb + col]);
            finite = finite && v <= FINITE_MAX;
            amax = fmax(amax, v);
        }
    }
    partial[threadIdx.y][threadIdx.x] = amax;
    finites[threadIdx.y][threadIdx.x] = finite;
    __syncthreads();
    for (int w = 0; w < COL_GROUPS; ++w) {
        amax = fmax(amax, partial[w][threadIdx.x]);
        finite = finite && finites[w][threadIdx.x];
    }
    __syncthreads();  // every group has its column's maximum before the partials are overwritten
    double squares = 0.0;
    if (col < cols && finite && amax != 0.0) {
        const int g = ilogb(amax);
        const double scale = unit_scale(g);
        for (int k = threadIdx.y; k < rows; k += COL_GROUPS) {
            const double v = scaled_by(fabs((double)B[(long long)k * ldb + col]), g, scale);
            squares = __dadd_rn(squares, __dmul_rn(v, v));
        }
    }
    partial[threadIdx.y][threadIdx.x] = squares;
    __syncthreads();
    if (threadIdx.y != 0 || col >= cols) return;
    squares = partial[0][threadIdx.x];
    for (int w = 1; w < COL_GROUPS; ++w) squares = __dadd_rn(squares, partial[w][threadIdx.x]);
    e[col] = finite ? exponent_of(amax, squares, budget) : NONFINITE;
}

// Step 2, rows of A: elements (i, 4c .. 4c + 3) scaled by 2^e[i], truncated, their residues stored as one
// word a modulus at out[l * layer + i * ld + 4c] (zeros past the row's end, up to the word). A non-finite
// row's residues are zeros (step 4 recomputes its outputs). Block (256), grid (ceil(cols / 1024),
// min(rows, 65535)), rows walked in steps of gridDim.y.
template <class T>
__device__ __forceinline__ void row_residues(const T* __restrict__ A, long long lda, int rows, int cols,
                                             const int* __restrict__ e, int count, int8_t* __restrict__ out,
                                             long long ld, long long layer)
{
    const int k = 4 * (blockIdx.x * THREADS + threadIdx.x);
    if (k >= cols) return;
    for (int i = blockIdx.y; i < rows; i += gridDim.y) {
        const int ei = e[i];
        const T* a = A + (long long)i * lda + k;
        double t[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) t[q] = (ei == NONFINITE || k + q >= cols) ? 0.0 : trunc(ldexp((double)a[q], ei));
        store_residues(t, count, reinterpret_cast<int*>(out + (long long)i * ld + k), layer / 4);
    }
}

// Step 2, columns of B, written transposed (N rows of K): a 32 x 32 tile of B read along its rows into
// shared memory, then each thread takes four consecutive k of one column, scales them by the column's 2^e
// and stores their residues as one word a modulus (eight threads a column's 32 bytes). Block (32, 8), grid
// (ceil(cols / 32), ceil(rows / 32)).
template <class T>
__device__ __forceinline__ void col_residues(const T* __restrict__ B, long long ldb, int rows, int cols,
                                             const int* __restrict__ e, int count, int8_t* __restrict__ out,
                                             long long ld, long long layer)
{
    __shared__ double tile[TILE][TILE + 1];
    const int j0 = blockIdx.x * TILE, k0 = blockIdx.y * TILE;
    for (int r = threadIdx.y; r < TILE; r += 8) {  // rows k0 + r of B, columns j0 + threadIdx.x
        const int k = k0 + r, j = j0 + threadIdx.x;
        tile[r][threadIdx.x] = (k < rows && j < cols) ? (double)B[(long long)k * ldb + j] : 0.0;
    }
    __syncthreads();
    const int tid = threadIdx.y * 32 + threadIdx.x;
    const int c = tid >> 3, w = tid & 7;  // column j0 + c, k from k0 + 4 w
    const int j = j0 + c, k = k0 + 4 * w;
    if (j >= cols || k >= rows) return;
    const int ej = e[j];
    double t[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) t[q] = ej == NONFINITE ? 0.0 : trunc(ldexp(tile[4 * w + q][c], ej));
    store_residues(t, count, reinterpret_cast<int*>(out + (long long)j * ld + k), layer / 4);
}

// Step 3: C_l = A_l B_l^T mod m_l for layer l = blockIdx.z, A_l M rows of K and B_l N rows of K (both
// K-major, int8, rows lda / ldb bytes apart, each a multiple of 4, layers layer_a / layer_b apart): the int32
// sums (exact) reduced to symmetric int8 residues, C_l's rows ldc bytes apart, layers layer_c apart (what the
// wgmma INT8 tiles' *_s8_residues entries write). A 64 x 64 tile a block of 16 x 16 threads, 4 x 4 outputs
// a thread, K in chunks of 32 bytes staged in shared memory as words of 4 int8, each word pair one __dp4a.
// The correct and simple form, for GPUs without wgmma. Block (16, 16), grid (ceil(N / 64), ceil(M / 64),
// count).
extern "C" __global__ void __launch_bounds__(THREADS)
    ozaki_residue_products(const int8_t* __restrict__ A, const int8_t* __restrict__ B, int8_t* __restrict__ C,
                           int M, int N, int K, long long lda, long long ldb, long long ldc, long long layer_a,
                           long long layer_b, long long layer_c)
{
    constexpr int BM = 64, BN = 64, KC = 32, WORDS = KC / 4;
    __shared__ int as[BM][WORDS + 1];
    __shared__ int bs[BN][WORDS + 1];
    const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    A += blockIdx.z * layer_a;
    B += blockIdx.z * layer_b;
    C += blockIdx.z * layer_c;
    int acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += KC) {
        for (int q = tid; q < BM * WORDS; q += THREADS) {  // word w of row r: 4 bytes of K, zero past M or K
            const int r = q / WORDS, w = q % WORDS, k = k0 + 4 * w;
            int wa = 0, wb = 0;
            for (int b = 0; b < 4; ++b) {
                if (k + b < K) {
                    if (row0 + r < M) wa |= (int)(uint8_t)A[(long long)(row0 + r) * lda + k + b] << (8 * b);
                    if (col0 + r < N) wb |= (int)(uint8_t)B[(long long)(col0 + r) * ldb + k + b] << (8 * b);
                }
            }
            as[r][w] = wa;
            bs[r][w] = wb;
        }
        __syncthreads();
#pragma unroll
        for (int w = 0; w < WORDS; ++w)
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = __dp4a(as[ty + 16 * i][w], bs[tx + 16 * j][w], acc[i][j]);
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int r = row0 + ty + 16 * i, c = col0 + tx + 16 * j;
            if (r < M && c < N) C[(long long)r * ldc + c] = (int8_t)symmetric_residue(acc[i][j], blockIdx.z);
        }
}

// Step 4's element (i, j) from its residues: residue l is byte q of words[l]. See crt below. T: the operands'
// and C's type (float64, float32).
template <class T>
__device__ __forceinline__ void crt_element(const uint32_t (&words)[MAX_MODULI], int q, int count,
                                           const double* __restrict__ weights, int ei, int ej, T* __restrict__ C,
                                           long long ldc, const T* __restrict__ A, long long lda,
                                           const T* __restrict__ B, long long ldb, int K, int i, int j,
                                           const gpumat::Epilogue& ep, bool plain)
{
    double v;
    if (ei == NONFINITE || ej == NONFINITE) {
        v = 0.0;
        for (int k = 0; k < K; ++k) v = fma((double)A[(long long)i * lda + k], (double)B[(long long)k * ldb + j], v);
    } else {
        // each limb's sum of residue x weight-limb products: integers below 2^43, exact in any order
        double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
#pragma unroll
        for (int l = 0; l < MAX_MODULI; ++l) {
            if (l < count) {
                const double r = (double)(int8_t)(words[l] >> (8 * q));
                const double* w = weights + LIMBS * l;
                s0 = fma(r, w[0], s0);
                s1 = fma(r, w[1], s1);
                s2 = fma(r, w[2], s2);
                s3 = fma(r, w[3], s3);
            }
        }
        // q: the multiple of M to take away, from the limbs added in doubles (the reference's order)
        const double* m = weights + LIMBS * count;
        double y = __dmul_rn(s0, 0x1p96);
        y = __dadd_rn(y, __dmul_rn(s1, 0x1p64));
        y = __dadd_rn(y, __dmul_rn(s2, 0x1p32));
        y = __dadd_rn(y, s3);
        const double qm = rint(__ddiv_rn(y, m[LIMBS]));
        // the integer's limbs, exact (below 2^44), added from the top in double-double
        double hi = __dmul_rn(__fma_rn(-qm, m[0], s0), 0x1p96), lo = 0.0;
        const double rest[3] = {__dmul_rn(__fma_rn(-qm, m[1], s1), 0x1p64),
                                __dmul_rn(__fma_rn(-qm, m[2], s2), 0x1p32), __fma_rn(-qm, m[3], s3)};
#pragma unroll
        for (int t = 0; t < 3; ++t) {
            double sum, err;
            two_sum(hi, rest[t], sum, err);
            two_sum(sum, __dadd_rn(err, lo), hi, lo);
        }
        v = ldexp(__dadd_rn(hi, lo), -(ei + ej));
    }
    T* c = C + (long long)i * ldc + j;
    *c = plain ? (T)v : ep.apply<T, T>((T)v, i, j, c);
}

// Step 4: element (i, j) from its count residues P[l * layer + i * ldp + j] (symmetric int8, step 3's).
// weights (gpumat.matmul.ozaki.weights_of): the four 32-bit limbs of each modulus' CRT weight, those of M,
// then M as a double. The limbs' sums are exact, q = rint(their sum / M) is the multiple of M the CRT takes
// away (|A' B'| < 2^2Q <= M / 4, the budget's Cauchy-Schwarz bound, keeps it off a rounding edge), and the
// integer's limbs less q M's are exact again: only their double-double sum and its rounding to float64
// round. A NONFINITE row or column: the element is the FP64 dot product of row i of A and column j of B
// (fused multiply-adds in k order), Inf and NaN as an unemulated product gives them. Then gm.matmul's
// epilogue (gpumat.cuh: alpha, beta C, bias, activation, in T; rows i of this launch: a panel's bias is
// passed from its first row). A thread rebuilds CRT_COLUMNS adjacent elements of a row: it loads their
// residues first, all layers (a word a layer where the rows and layers are whole words apart), then computes
// them one by one. The launch is bound by its FP64 arithmetic, not by memory (H200, 4096^2 float32 with 9
// moduli: 370 us, SM 76% busy, DRAM 12%; the same as one element a thread with byte loads). Block (256),
// grid (ceil(N / (CRT_COLUMNS 256)), min(M, 65535)), rows walked in steps of gridDim.y.
constexpr int CRT_COLUMNS = 4;
template <class T>
__device__ __forceinline__ void crt(const int8_t* __restrict__ P, long long ldp, long long layer, int M, int N,
                                    int count, const double* __restrict__ weights, const int* __restrict__ ea,
                                    const int* __restrict__ eb, T* __restrict__ C, long long ldc,
                                    const T* __restrict__ A, long long lda, const T* __restrict__ B, long long ldb,
                                    int K, const gpumat::Epilogue& ep)
{
    const int j0 = CRT_COLUMNS * (blockIdx.x * THREADS + threadIdx.x);
    if (j0 >= N) return;
    const int cols = min(CRT_COLUMNS, N - j0);
    const bool plain = ep.identity();
    const bool whole_words = cols == CRT_COLUMNS && ((ldp | layer | reinterpret_cast<uintptr_t>(P)) & 3) == 0;
    for (int i = blockIdx.y; i < M; i += gridDim.y) {
        const int8_t* p = P + (long long)i * ldp + j0;
        uint32_t words[MAX_MODULI];  // layer l's residues of the thread's columns, column j0 + q in byte q
#pragma unroll
        for (int l = 0; l < MAX_MODULI; ++l) {
            words[l] = 0;
            if (l < count) {
                const int8_t* at = p + l * layer;
                if (whole_words) {
                    words[l] = *reinterpret_cast<const uint32_t*>(at);
                } else {
                    for (int q = 0; q < cols; ++q) words[l] |= (uint32_t)(uint8_t)at[q] << (8 * q);
                }
            }
        }
#pragma unroll 1  // (the four unrolled made ptxas spill the float32 entry)
        for (int q = 0; q < cols; ++q)
            crt_element(words, q, count, weights, ea[i], eb[j0 + q], C, ldc, A, lda, B, ldb, K, i, j0 + q, ep, plain);
    }
}

// The entry points of one operand type T (float64: _f64, float32: _f32): steps 1, 2 and 4 as above. A
// float32 operand is widened to float64 (exact) as it is read, and C rounded once to float32 from the
// reconstruction's float64 before the epilogue, which runs in float32 as the FP32 kernels' does.
#define OZAKI_ENTRIES(SFX, T)                                                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS)                                                              \
        ozaki_row_exponents_##SFX(const T* __restrict__ A, long long lda, int rows, int cols, int budget,              \
                                  int* __restrict__ e)                                                                 \
    {                                                                                                                  \
        row_exponents<T>(A, lda, rows, cols, budget, e);                                                               \
    }                                                                                                                  \
    extern "C" __global__ void __launch_bounds__(32 * COL_GROUPS)                                                      \
        ozaki_col_exponents_##SFX(const T* __restrict__ B, long long ldb, int rows, int cols, int budget,              \
                                  int* __restrict__ e)                                                                 \
    {                                                                                                                  \
        col_exponents<T>(B, ldb, rows, cols, budget, e);                                                               \
    }                                                                                                                  \
    extern "C" __global__ void __launch_bounds__(THREADS)                                                              \
        ozaki_row_residues_##SFX(const T* __restrict__ A, long long lda, int rows, int cols,                           \
                                 const int* __restrict__ e, int count, int8_t* __restrict__ out, long long ld,         \
                                 long long layer)                                                                      \
    {                                                                                                                  \
        row_residues<T>(A, lda, rows, cols, e, count, out, ld, layer);                                                 \
    }                                                                                                                  \
    extern "C" __global__ void __launch_bounds__(THREADS)                                                              \
        ozaki_col_residues_##SFX(const T* __restrict__ B, long long ldb, int rows, int cols,                           \
                                 const int* __restrict__ e, int count, int8_t* __restrict__ out, long long ld,         \
                                 long long layer)                                                                      \
    {                                                                                                                  \
        col_residues<T>(B, ldb, rows, cols, e, count, out, ld, layer);                                                 \
    }                                                                                                                  \
    extern "C" __global__ void __launch_bounds__(THREADS)                                                              \
        ozaki_crt_##SFX(const int8_t* __restrict__ P, long long ldp, long long layer, int M, int N, int count,        \
                        const double* __restrict__ weights, const int* __restrict__ ea, const int* __restrict__ eb,    \
                        T* __restrict__ C, long long ldc, const T* __restrict__ A, long long lda,                      \
                        const T* __restrict__ B, long long ldb, int K, GPUMAT_EPILOGUE_PARAMS)                         \
    {                                                                                                                  \
        crt<T>(P, ldp, layer, M, N, count, weights, ea, eb, C, ldc, A, lda, B, ldb, K, GPUMAT_EPILOGUE_ARGS);          \
    }

OZAKI_ENTRIES(f64, double)
OZAKI_ENTRIES(f32, float)
