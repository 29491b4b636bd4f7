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
//  * the threads of a block cover G matrices x ceil(M/R) x ceil(N/R) register tiles of R x R outputs:
//    R the smallest of 1, 2, 4 whose tiles of one matrix the 256 threads cover (R = 1 up to 256 outputs,
//    G = 256 / (M N) matrices a block; R = 4 for a 64 x 64 C); small_geometry() computes both, and
//    gpumat/matmul/variants.py the same for the grid (ceil(batch / G) blocks, one dimension: no 65535
//    limit);
//  * K passes in chunks: the chunk of each of the block's matrices of A and B is staged in shared
//    memory (as the accumulation type), read from global memory in storage order, so consecutive
//    threads read consecutive elements (a packed batch of small matrices is one contiguous run), four
//    loads in flight a thread, and transposed on the way into shared memory where the operand is
//    stored transposed;
//  * each thread then accumulates its R x R outputs over the chunk from shared memory, in k order.
// Deterministic: every output's sum runs in k order, no atomics.
// Launch: block (256, 1, 1), grid (ceil(batch / G), 1, 1), 16 KiB of static shared memory; at most 80
// registers a thread, so at least three blocks an SM.
#include "gpumat.cuh"

using gpumat::Dtype;

namespace {

constexpr int THREADS = 256;
constexpr int SMEM_BYTES = 16384;
constexpr int BLOCKS_PER_SM = 3;  // launch bounds: at most 80 registers a thread (float64 spills at 64)

struct Geometry {
    int r;        // a thread's outputs: r x r
    int tiles_m;  // register tiles along M and N of one matrix
    int tiles_n;
    int per_block;  // matrices a block (G)
};

// The register tile and the matrices a block for an M x N result (M, N <= 64); the host's
// small_per_block (gpumat/matmul/variants.py) computes the same G.
__device__ __forceinline__ Geometry small_geometry(int M, int N)
{
    // the smallest r whose tiles the block's threads cover (r = 4: 16 x 16 tiles of a 64 x 64 C at most)
    const auto tiles = [&](int r) { return ((M + r - 1) / r) * ((N + r - 1) / r); };
    const int r = tiles(1) <= THREADS ? 1 : (tiles(2) <= THREADS ? 2 : 4);
    const int tm = (M + r - 1) / r, tn = (N + r - 1) / r;
    return {r, tm, tn, max(1, THREADS / (tm * tn))};
}

// Stage the elements of a Z x D1 x D0 index space (D0 fastest: the operand's storage order, so
// consecutive threads read consecutive elements) into shared memory: dst[place(z, d1, d0)] = load(z, d1,
// d0) as the accumulation type. Each thread walks every THREADS-th element without dividing (the step's
// carries are precomputed), four loads in flight before their stores.
template <class T, class Load, class Place, class Acc>
__device__ __forceinline__ void stage(int Z, int D1, int D0, Load load, Place place, Acc* dst)
{
    const int plane = D1 * D0;
    int z = threadIdx.x / plane, r = threadIdx.x - z * plane;
    int d1 = r / D0, d0 = r - d1 * D0;
    const int sz = THREADS / plane, sr = THREADS - sz * plane, s1 = sr / D0, s0 = sr - s1 * D0;
    while (z < Z) {
        T v[4];
        int at[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            at[u] = -1;
            if (z < Z) {
                v[u] = load(z, d1, d0);
                at[u] = place(z, d1, d0);
            }
            d0 += s0;
            int carry = d0 >= D0;
            d0 -= carry ? D0 : 0;
            d1 += s1 + carry;
            carry = d1 >= D1;
            d1 -= carry ? D1 : 0;
            z += sz + carry;
        }
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (at[u] >= 0) dst[at[u]] = Dtype<T>::acc(v[u]);
    }
}

template <int R, class T, class Out>
__device__ __forceinline__ void small(const T* __restrict__ A, const T* __restrict__ B, Out* __restrict__ C, int M,
                                      int N, int K, long long lda, long long ldb, long long ldc, int batch, int ta,
                                      int tb, long long sa, long long sb, long long sc, const Geometry g,
                                      const gpumat::Epilogue& ep, typename Dtype<T>::Acc* smem)
{
    using Acc = typename Dtype<T>::Acc;
    constexpr int ELEMS = SMEM_BYTES / (int)sizeof(Acc);
    const int G = g.per_block;
    const long long first = (long long)blockIdx.x * G;
    const int here = (int)min((long long)G, batch - first);  // matrices of this block
    // the chunk of K staged at a time: as much as fits for the block's matrices, at most 32
    const int kc = max(1, min(min(K, 32), ELEMS / (G * (M + N))));
    Acc* As = smem;                // [G][M][kc]
    Acc* Bs = smem + G * M * kc;   // [G][kc][N]
    // this thread's register tile: matrix mi of the block, rows i0.., columns j0..
    const int t = threadIdx.x, per_matrix = g.tiles_m * g.tiles_n;
    const int mi = t / per_matrix, rest = t - mi * per_matrix;
    const int i0 = rest / g.tiles_n * R, j0 = rest % g.tiles_n * R;
    const bool active = mi < here;
    Acc acc[R][R];
#pragma unroll
    for (int x = 0; x < R; ++x)
#pragma unroll
        for (int y = 0; y < R; ++y) acc[x][y] = Acc(0);

    for (int k0 = 0; k0 < K; k0 += kc) {
        const int kn = min(kc, K - k0);
        // A's chunk in storage order: rows of K (kk fastest), or stored transposed, rows of M (i fastest)
        if (ta)
            stage<T>(here, kn, M, [&](int z, int kk, int i) { return A[(first + z) * sa + (long long)(k0 + kk) * lda + i]; },
                     [&](int z, int kk, int i) { return (z * M + i) * kc + kk; }, As);
        else
            stage<T>(here, M, kn, [&](int z, int i, int kk) { return A[(first + z) * sa + (long long)i * lda + k0 + kk]; },
                     [&](int z, int i, int kk) { return (z * M + i) * kc + kk; }, As);
        // B's chunk: rows of N (j fastest), or stored transposed, rows of K (kk fastest)
        if (tb)
            stage<T>(here, N, kn, [&](int z, int j, int kk) { return B[(first + z) * sb + (long long)j * ldb + k0 + kk]; },
                     [&](int z, int j, int kk) { return (z * kc + kk) * N + j; }, Bs);
        else
            stage<T>(here, kn, N, [&](int z, int kk, int j) { return B[(first + z) * sb + (long long)(k0 + kk) * ldb + j]; },
                     [&](int z, int kk, int j) { return (z * kc + kk) * N + j; }, Bs);
        __syncthreads();
        if (active) {
            const Acc* as = As + mi * M * kc;
            const Acc* bs = Bs + mi * kc * N;
            for (int kk = 0; kk < kn; ++kk) {
                Acc av[R], bv[R];
#pragma unroll
                for (int x = 0; x < R; ++x) av[x] = i0 + x < M ? as[(i0 + x) * kc + kk] : Acc(0);
#pragma unroll
                for (int y = 0; y < R; ++y) bv[y] = j0 + y < N ? bs[kk * N + j0 + y] : Acc(0);
#pragma unroll
                for (int x = 0; x < R; ++x)
#pragma unroll
                    for (int y = 0; y < R; ++y) acc[x][y] += av[x] * bv[y];
            }
        }
        __syncthreads();
    }
    if (!active) return;
    Out* c = C + (first + mi) * sc;
    const bool plain = ep.identity();
#pragma unroll
    for (int x = 0; x < R; ++x)
#pragma unroll
        for (int y = 0; y < R; ++y) {
            const int i = i0 + x, j = j0 + y;
            if (i < M && j < N) {
                Out* at = c + (long long)i * ldc + j;
                *at = Dtype<Out>::from(plain ? acc[x][y] : ep.apply<Out>(acc[x][y], i, j, at));
            }
        }
}

}  // namespace

// matmul_small_<dtype>[_f32out](A, B, C, M, N, K, lda, ldb, ldc, batch, ta, tb, batch_a, batch_b, batch_c,
// alpha, beta, bias, bias_step, bias_along, bias_f32, activation): see the header. M, N <= 64.
#define GPUMAT_SMALL_ENTRY(NAME, T, OUT)                                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM) NAME(                               \
        const T* __restrict__ A, const T* __restrict__ B, OUT* __restrict__ C, int M, int N, int K,          \
        long long lda, long long ldb, long long ldc, int batch, int ta, int tb, GPUMAT_BATCH_PARAMS,        \
        GPUMAT_EPILOGUE_PARAMS)                                                                              \
    {                                                                                                        \
        __shared__ typename Dtype<T>::Acc smem[SMEM_BYTES / sizeof(typename Dtype<T>::Acc)];                \
        const Geometry g = small_geometry(M, N);                                                            \
        const gpumat::Epilogue ep = GPUMAT_EPILOGUE_ARGS;                                                    \
        if (g.r == 1)                                                                                        \
            small<1, T, OUT>(A, B, C, M, N, K, lda, ldb, ldc, batch, ta, tb, batch_a, batch_b, batch_c, g, ep, \
                             smem);                                                                          \
        else if (g.r == 2)                                                                                   \
            small<2, T, OUT>(A, B, C, M, N, K, lda, ldb, ldc, batch, ta, tb, batch_a, batch_b, batch_c, g, ep, \
                             smem);                                                                          \
        else                                                                                                 \
            small<4, T, OUT>(A, B, C, M, N, K, lda, ldb, ldc, batch, ta, tb, batch_a, batch_b, batch_c, g, ep, \
                             smem);                                                                          \
    }

GPUMAT_SMALL_ENTRY(matmul_small_f32, float, float)
GPUMAT_SMALL_ENTRY(matmul_small_f64, double, double)
GPUMAT_SMALL_ENTRY(matmul_small_f16, __half, __half)
GPUMAT_SMALL_ENTRY(matmul_small_f16_f32out, __half, float)
GPUMAT_SMALL_ENTRY(matmul_small_bf16, __nv_bfloat16, __nv_bfloat16)
GPUMAT_SMALL_ENTRY(matmul_small_bf16_f32out, __nv_bfloat16, float)
