// Shared device helpers for gpumat's kernels: element types (dtype traits), cp.async wrappers, the GEMM
// epilogue, split-K's reduction and the Ozaki scheme's moduli.
#pragma once

#include <stdint.h>

#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_fp16.h>

namespace gpumat {

// ---------------------------------------------------------------------------------------------------
// Dtype traits. Dtype<T> for T in {float, double, __half, __nv_bfloat16}:
//   Acc        what arithmetic kernels accumulate in: double for double, float for the others;
//   Bits       an unsigned integer of the same size, for kernels that only move bits (transpose);
//   acc(x)     the element widened to Acc (exact);
//   wide(x)    the element widened to double (exact);
//   from(v)    an Acc (float or double) rounded to T, round-to-nearest-even; NaN and Inf stay NaN/Inf;
//              from double to a half type the rounding is done once, straight from double.
// ---------------------------------------------------------------------------------------------------
template <class T>
struct Dtype;

template <>
struct Dtype<float> {
    using Acc = float;
    using Bits = unsigned int;
    __device__ __forceinline__ static float acc(float x) { return x; }
    __device__ __forceinline__ static double wide(float x) { return (double)x; }
    __device__ __forceinline__ static float from(float v) { return v; }
    __device__ __forceinline__ static float from(double v) { return __double2float_rn(v); }
};

template <>
struct Dtype<double> {
    using Acc = double;
    using Bits = unsigned long long;
    __device__ __forceinline__ static double acc(double x) { return x; }
    __device__ __forceinline__ static double wide(double x) { return x; }
    __device__ __forceinline__ static double from(float v) { return (double)v; }
    __device__ __forceinline__ static double from(double v) { return v; }
};

template <>
struct Dtype<__half> {
    using Acc = float;
    using Bits = unsigned short;
    __device__ __forceinline__ static float acc(__half x) { return __half2float(x); }
    __device__ __forceinline__ static double wide(__half x) { return (double)__half2float(x); }
    __device__ __forceinline__ static __half from(float v) { return __float2half_rn(v); }
    __device__ __forceinline__ static __half from(double v) { return __double2half(v); }
};

template <>
struct Dtype<__nv_bfloat16> {
    using Acc = float;
    using Bits = unsigned short;
    __device__ __forceinline__ static float acc(__nv_bfloat16 x) { return __bfloat162float(x); }
    __device__ __forceinline__ static double wide(__nv_bfloat16 x) { return (double)__bfloat162float(x); }
    __device__ __forceinline__ static __nv_bfloat16 from(float v) { return __float2bfloat16_rn(v); }
    __device__ __forceinline__ static __nv_bfloat16 from(double v) { return __double2bfloat16(v); }
};

// The integers: int8 matrices multiply into int32 sums (exact: an int8 product's sums stay inside int32
// for K below 2^17: 2^14 a product), and both convert to the floats through double, exactly.
template <>
struct Dtype<int8_t> {
    using Acc = int;
    using Bits = unsigned char;
    __device__ __forceinline__ static int acc(int8_t x) { return x; }
    __device__ __forceinline__ static double wide(int8_t x) { return (double)x; }
};

template <>
struct Dtype<int> {
    using Acc = int;
    using Bits = unsigned int;
    __device__ __forceinline__ static int acc(int x) { return x; }
    __device__ __forceinline__ static double wide(int x) { return (double)x; }
    __device__ __forceinline__ static int from(int v) { return v; }
};

// FP8 (e4m3fn, e5m2): to float exactly; from double rounded once to nearest even and saturated to the
// finite range (__NV_SATFINITE: +-Inf and values beyond it become +-max; NaN stays NaN).
template <>
struct Dtype<__nv_fp8_e4m3> {
    using Acc = float;
    using Bits = unsigned char;
    __device__ __forceinline__ static float acc(__nv_fp8_e4m3 x) { return (float)x; }
    __device__ __forceinline__ static double wide(__nv_fp8_e4m3 x) { return (double)(float)x; }
    __device__ __forceinline__ static __nv_fp8_e4m3 from(double v) { return __nv_fp8_e4m3(v); }
};

template <>
struct Dtype<__nv_fp8_e5m2> {
    using Acc = float;
    using Bits = unsigned char;
    __device__ __forceinline__ static float acc(__nv_fp8_e5m2 x) { return (float)x; }
    __device__ __forceinline__ static double wide(__nv_fp8_e5m2 x) { return (double)(float)x; }
    __device__ __forceinline__ static __nv_fp8_e5m2 from(double v) { return __nv_fp8_e5m2(v); }
};

// ---------------------------------------------------------------------------------------------------
// Global -> shared copies that need no register: cp.async (sm_80 and newer) lets a thread issue all its
// loads back to back and wait for them together, whatever ptxas' register budget; on older GPUs an
// ordinary load and store. BYTES is 4, 8 or 16 (cp.async has no 2-byte form); both addresses must be
// aligned to BYTES.
// ---------------------------------------------------------------------------------------------------
template <int BYTES>
__device__ __forceinline__ void copy_async(void* smem, const void* gmem)
{
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
#if __CUDA_ARCH__ >= 800
    const unsigned int s = static_cast<unsigned int>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" :: "r"(s), "l"(gmem), "n"(BYTES) : "memory");
#else
    if constexpr (BYTES == 4)
        *static_cast<unsigned int*>(smem) = *static_cast<const unsigned int*>(gmem);
    else if constexpr (BYTES == 8)
        *static_cast<unsigned long long*>(smem) = *static_cast<const unsigned long long*>(gmem);
    else
        *static_cast<uint4*>(smem) = *static_cast<const uint4*>(gmem);
#endif
}

// Waits for every cp.async the calling thread issued (a barrier must follow before other threads read).
__device__ __forceinline__ void wait_async()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------------------------------
// Programmatic dependent launch (sm_90 and newer). On such a GPU the launcher queues a kernel that calls
// wait_for_previous_grid() as a programmatic dependent of the kernel before it on its stream
// (gpumat.runtime.kernels, dependent=True): it is launched as that grid's last block exits, not after the
// grid's completion and memory flush, and its blocks set up (barriers, a tensor map's prefetch) while the
// flush runs. griddepcontrol.wait then holds every thread until the grid before has completed and its
// writes are visible, so the call comes before the kernel's first access to global memory; a plain launch
// passes straight through it. Before sm_90 it compiles to nothing.
// No kernel lets the next grid launch earlier (griddepcontrol.launch_dependents): the next grid's blocks
// would then wait on the SMs this grid's first blocks leave, several to an SM where the grid is small,
// and run there crowded once it ends (H200: a float64 batch on dmma64x64 0.81x, a split float32 layer
// 0.66x, either after a product on the wgmma tiles 0.52-0.83x; results/probe-dependent-products-*).
// ---------------------------------------------------------------------------------------------------
__device__ __forceinline__ void wait_for_previous_grid()
{
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// ---------------------------------------------------------------------------------------------------
// The multi-stage matmul kernels' cp.async ring (sm_80 and newer): 16-byte copies that zero-fill what
// they do not read (edges of A and B), commit groups, and waits for all but N groups. The commit and
// the wait compile to nothing before sm_80, for the kernels whose copies are plain loads and stores
// there (matmul_fast.cu): their pipeline code stays the same on every arch.
// ---------------------------------------------------------------------------------------------------
#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ unsigned int smem_addr(const void* p)
{
    return static_cast<unsigned int>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; the copy reads `bytes` (0..16) and zero-fills the rest.
__device__ __forceinline__ void copy16(void* dst, const void* src, int bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(smem_addr(dst)), "l"(src), "r"(bytes));
}
#endif

__device__ __forceinline__ void copy_commit()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most N of this thread's committed copy groups are still in flight.
template <int N>
__device__ __forceinline__ void copy_wait()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory");
#endif
}

#if __CUDA_ARCH__ >= 800
// ---------------------------------------------------------------------------------------------------
// The 16-bit tensor cores through mma.sync (sm_80 and newer): Mma<T>::run(d, a, b0, b1) is d += a b for
// one m16n8k16 tile, float32 accumulators, A's fragment row-major and B's column-major, by the halves'
// type; ldmatrix_x4 loads four 8 x 8 pieces of 16-bit elements from shared memory (each lane gives one
// row's address: lanes 0-7 the first piece's rows, 8-15 the second's, ...), ldmatrix_x4_trans the same
// pieces transposed.
// ---------------------------------------------------------------------------------------------------
template <class T>
struct Mma;

template <>
struct Mma<__half> {
    __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
    {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

template <>
struct Mma<__nv_bfloat16> {
    __device__ __forceinline__ static void run(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
    {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
};

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
#endif

// ---------------------------------------------------------------------------------------------------
// The tiled matmul kernels' tile order: the id-th tile of a tiles_m x tiles_n grid of C tiles (ids
// counted row tile by row tile) is mapped to tile (tm, tn) so that the grid is walked in groups of
// GROUP_M row tiles, each group column by column (the last group has the row tiles that are left).
// Blocks running at the same time (consecutive ids) then cover a few row tiles and a few column tiles,
// and share those A and B tiles in L2 (in row order each would read its own column tile of B).
// A kernel whose grid covers every row tile at once maps tile id blockIdx.y * gridDim.x + blockIdx.x;
// one whose row tiles are a grid-stride loop keeps (blockIdx.y, blockIdx.x). That test and the plain
// map stay in the kernels: moved in here, they changed the sm_90 machine code of some of them.
struct TileIndex {
    int tm, tn;  // row tile, column tile
};

template <int GROUP_M>
__device__ __forceinline__ TileIndex grouped_tile(int id, int tiles_m, int tiles_n)
{
    const int per_group = GROUP_M * tiles_n;
    const int first = id / per_group * GROUP_M;      // the group's first row tile
    const int rows = min(tiles_m - first, GROUP_M);  // row tiles in the group
    return {first + (id % per_group) % rows, (id % per_group) / rows};
}

// ---------------------------------------------------------------------------------------------------
// Two adjacent 16-bit C values (columns j, j + 1) in one 32-bit word, each rounded to nearest even.
template <class Out>
__device__ __forceinline__ uint32_t pack_pair(float x, float y)
{
    Out v[2] = {Dtype<Out>::from(x), Dtype<Out>::from(y)};
    return *reinterpret_cast<uint32_t*>(v);
}

// C[j] = x and, where pair_ok (column j + 1 exists), C[j + 1] = y: one 4- or 8-byte store when `vec`
// says p is aligned for it, else element by element.
template <class Out>
__device__ __forceinline__ void store_pair(Out* p, float x, float y, bool pair_ok, bool vec)
{
    if (pair_ok && vec) {
        if constexpr (sizeof(Out) == 4) {
            *reinterpret_cast<float2*>(p) = make_float2(x, y);
        } else {
            *reinterpret_cast<uint32_t*>(p) = pack_pair<Out>(x, y);
        }
    } else {
        p[0] = Dtype<Out>::from(x);
        if (pair_ok) p[1] = Dtype<Out>::from(y);
    }
}

}  // namespace gpumat

namespace gpumat {

// ---------------------------------------------------------------------------------------------------
// The GEMM epilogue every matmul kernel (and split-K's reduction) applies to an output element before
// rounding it to C's dtype, in the accumulator's type (float, or double for float64):
//     C[i, j] = act(alpha * acc + beta * C[i, j] + bias)
// bias: none (bias_along 0), bias[j * bias_step] for every row (1: a row vector over the rows) or
// bias[i * bias_step] for every column (2: a column vector over the columns); its elements are float32
// when bias_f32, else C's dtype. act: 0 none, 1 relu (x < 0 ? 0 : x, NaN stays NaN), 2 gelu with erf,
// 0.5 x (1 + erf(x / sqrt 2)), 3 gelu with tanh, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
// With beta == 0, C is never read (BLAS: a NaN already in C does not leak into the result).
// The identity epilogue (alpha 1, beta 0, no bias, no act) is the plain product: kernels test
// identity() once and store as before. A split-K product kernel always gets the identity; its
// reduction gets the caller's.
// Every GEMM entry point takes these as its last parameters (GPUMAT_EPILOGUE_PARAMS) and builds the
// struct with GPUMAT_EPILOGUE_ARGS.
// ---------------------------------------------------------------------------------------------------
struct Epilogue {
    double alpha, beta;
    const void* bias;
    long long bias_step;
    int bias_along, bias_f32, activation;

    __device__ __forceinline__ bool identity() const
    {
        return alpha == 1.0 && beta == 0.0 && bias_along == 0 && activation == 0;
    }

    // The finished value of element (i, j) of C (one matrix of a batch), whose old value is at c.
    template <class Out, class Acc>
    __device__ __forceinline__ Acc apply(Acc v, int i, int j, const Out* c) const
    {
        Acc r = Acc(alpha) * v;
        if (beta != 0.0) r += Acc(beta) * Dtype<Out>::acc(*c);
        if (bias_along) {
            const long long at = (long long)(bias_along == 1 ? j : i) * bias_step;
            r += bias_f32 ? Acc(static_cast<const float*>(bias)[at]) : Dtype<Out>::acc(static_cast<const Out*>(bias)[at]);
        }
        // three separate tests, not an else-if chain: ptxas turns the chain into an indexed jump, which
        // cost the teaching kernels 8 registers
        if (activation == 1) r = activate<1>(r);
        if (activation == 2) r = activate<2>(r);
        if (activation == 3) r = activate<3>(r);
        return r;
    }

    // Activation ACT (the codes above) of r.
    template <int ACT, class Acc>
    static __device__ __forceinline__ Acc activate(Acc r)
    {
        if constexpr (ACT == 1) return r < Acc(0) ? Acc(0) : r;
        if constexpr (ACT == 2) return Acc(0.5) * r * (Acc(1) + erf(r * Acc(0.70710678118654752440)));
        if constexpr (ACT == 3)
            return Acc(0.5) * r * (Acc(1) + tanh(Acc(0.79788456080286535588) * (r + Acc(0.044715) * r * r * r)));
        return r;
    }

    template <class Out, class Acc, int ACT>
    struct Fixed;

    // This epilogue with its activation ACT fixed at compile time (pass the activation the struct holds)
    // and its scalars converted once, for kernels that finish many accumulators a thread in one unrolled
    // loop: apply() inlines all four activations and both bias types for every accumulator, which made
    // the wgmma kernel's 128-accumulator epilogue about 200 KB of machine code that ran from outside the
    // instruction cache (2.8x the plain product's time on the H100). Such a kernel switches on
    // `activation` once per tile and runs an unrolled loop of Fixed<..., ACT> in each case. The same
    // float operations as apply(), in the same order: the same result.
    template <class Out, class Acc, int ACT>
    __device__ __forceinline__ Fixed<Out, Acc, ACT> fixed() const
    {
        const bool f32 = bias_f32 != 0;
        return {Acc(alpha), Acc(beta), beta != 0.0, bias_along,
                f32 ? static_cast<const float*>(bias) : nullptr, f32 ? nullptr : static_cast<const Out*>(bias),
                bias_step};
    }
};

template <class Out, class Acc, int ACT>
struct Epilogue::Fixed {
    Acc alpha, beta;
    bool reads_c;
    int bias_along;
    const float* bias32;  // the bias when its elements are float32, else null
    const Out* bias_out;  // the bias when its elements are C's dtype, else null
    long long bias_step;

    // The bias element at `at` (elements from the bias's start), or 0 where the bias does not run `along`
    // (1: a row vector, over the columns; 2: a column vector). The caller passes an index inside the bias
    // (an element outside C reads the last row's or column's, and its result is dropped).
    __device__ __forceinline__ Acc bias_of(int along, long long at) const
    {
        if (bias_along != along) return Acc(0);
        return bias32 ? Acc(bias32[at]) : Dtype<Out>::acc(bias_out[at]);
    }

    // The finished value of an element from its accumulator v, its bias element (bias_of) and its old
    // value `old` (read by the caller where reads_c; not read otherwise).
    __device__ __forceinline__ Acc operator()(Acc v, Acc bias, Acc old) const
    {
        Acc r = alpha * v;
        if (reads_c) r += beta * old;
        if (bias_along) r += bias;
        return Epilogue::activate<ACT>(r);
    }
};

// A batched GEMM launch: grid z = batch index * splits + split of K (a batched launch does not split:
// splits 1); matrix b of the batch starts batch_a * b elements after A (batch_b, batch_c alike; a
// stride of 0 shares one matrix across the batch). Every GEMM entry point but the persistent TMA ones
// takes these after its k_chunk (GPUMAT_BATCH_PARAMS).
struct BatchSplit {
    int batch, split;
};

__device__ __forceinline__ BatchSplit batch_split(int K, int k_chunk)
{
    const int splits = k_chunk > 0 ? max(1, (K + k_chunk - 1) / k_chunk) : 1;
    return {(int)blockIdx.z / splits, (int)blockIdx.z % splits};
}

}  // namespace gpumat

#define GPUMAT_BATCH_PARAMS long long batch_a, long long batch_b, long long batch_c
#define GPUMAT_EPILOGUE_PARAMS                                                                               \
    double alpha, double beta, const void* bias, long long bias_step, int bias_along, int bias_f32,        \
        int activation
#define GPUMAT_EPILOGUE_ARGS gpumat::Epilogue{alpha, beta, bias, bias_step, bias_along, bias_f32, activation}

namespace gpumat {

// ---------------------------------------------------------------------------------------------------
// Split-K's second pass: C[i*ldc + j] = the epilogue (Epilogue above) of the sum of `splits` partial
// products (each M x N with row stride N, one after the other in `partial`), added in an order fixed by
// M, N and splits alone (deterministic, no atomics, the same for every output and every GPU), then
// rounded once to Out (the identity epilogue: the total as before). The order is split order
// (partial 0 + partial 1 + ...), or, for few outputs and many splits, split order within each of
// SPLITK_SLICES equal runs of splits and then the runs' sums in run order.
// Technique: memory-bound, so every thread keeps many 16-byte loads in flight: a thread owns a group of
// 16 / sizeof(Acc) consecutive outputs (4 floats, 2 doubles) and reads them from each split with one
// vector load, up to 16 splits' loads issued before their adds. When N is not a multiple of the group, a
// group may straddle rows: it reads element by element (the same order, so the same sums). A small plane
// (64 x 64 from 128 splits: 1024 groups) gives too few threads to keep the memory busy, so its splits are
// cut into runs, one warp a run (splitk_reduce below).
// The entry points, one an accumulator and output dtype, and their launch: matmul_splitk.cu.
template <class Acc>
struct Vector16;
template <>
struct Vector16<float> {
    using type = float4;
    __device__ __forceinline__ static void add(float* s, const float4& v)
    {
        s[0] += v.x, s[1] += v.y, s[2] += v.z, s[3] += v.w;
    }
};
template <>
struct Vector16<double> {
    using type = double2;
    __device__ __forceinline__ static void add(double* s, const double2& v) { s[0] += v.x, s[1] += v.y; }
};

// The sum of splits s0 .. s1 - 1 of one group (the VEC outputs from `first` on), in split order from -0
// (-0 + x is x exactly, signed zeros too). Whole groups (in one row, every plane 16-byte aligned): one
// vector load a split, 16 splits' loads in flight before their adds, then 4, then one; otherwise element
// loads of the same elements in the same order (the loads do not wait on the sums: unrolled, they are in
// flight together).
template <class Acc>
__device__ __forceinline__ void add_splits(Acc (&sum)[16 / sizeof(Acc)], const Acc* __restrict__ partial,
                                           long long first, long long plane, int s0, int s1, bool whole)
{
    constexpr int VEC = 16 / sizeof(Acc);
    using V = typename Vector16<Acc>::type;
#pragma unroll
    for (int e = 0; e < VEC; ++e) sum[e] = Acc(-0.0);
    if (whole) {
        const V* p = reinterpret_cast<const V*>(partial + first);
        const long long step = plane / VEC;  // one split's plane, in vectors
        // D splits from s: their loads first, then their adds in split order
        auto splits_from = [&](int s, auto d_const) {
            constexpr int D = decltype(d_const)::value;
            V w[D];
#pragma unroll
            for (int u = 0; u < D; ++u) w[u] = p[(s + u) * step];
#pragma unroll
            for (int u = 0; u < D; ++u) Vector16<Acc>::add(sum, w[u]);
        };
        int s = s0;
        for (; s + 16 <= s1; s += 16) splits_from(s, std::integral_constant<int, 16>{});
        for (; s + 4 <= s1; s += 4) splits_from(s, std::integral_constant<int, 4>{});
        for (; s < s1; ++s) splits_from(s, std::integral_constant<int, 1>{});
    } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
            const long long idx = first + e;
            if (idx < plane) {
                Acc t = sum[e];
#pragma unroll 8
                for (int s = s0; s < s1; ++s) t += partial[s * plane + idx];
                sum[e] = t;
            }
        }
    }
}

// The group's totals through the epilogue into C (row stride ldc), rounded once to Out.
template <class Acc, class Out>
__device__ __forceinline__ void store_group(const Acc (&sum)[16 / sizeof(Acc)], Out* __restrict__ C, long long first,
                                            long long plane, int N, long long ldc, const Epilogue& ep, bool ep_id)
{
    constexpr int VEC = 16 / sizeof(Acc);
    long long i = first / N, j = first - i * N;
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
        if (first + e < plane) {
            Out* c = C + i * ldc + j;
            *c = Dtype<Out>::from(ep_id ? sum[e] : ep.apply<Out>(sum[e], (int)i, (int)j, c));
        }
        if (++j == N) {
            j = 0;
            ++i;
        }
    }
}

// Launch: 256 threads, block (256, 1, 1) or (32, SLICES, 1). With one slice a thread adds every split of
// its group, blocks in a grid-stride loop over the groups. With blockDim.y = SLICES (few outputs and many
// splits: runtime/geometry.py's splitk_slices decides from M, N and splits alone, so the order of the sums
// does not depend on the GPU) a block takes 32 groups at a time, warp y adding the y-th of SLICES equal
// runs of splits for lane x's group, and warp 0 adds the SLICES sums in slice order: SLICES times the
// threads, each with a SLICES-th of the loads.
constexpr int SPLITK_SLICES = 8;

template <class Acc, class Out>
__device__ __forceinline__ void splitk_reduce(const Acc* __restrict__ partial, Out* __restrict__ C, int M, int N,
                                              long long ldc, int splits, GPUMAT_EPILOGUE_PARAMS)
{
    constexpr int VEC = 16 / sizeof(Acc);
    const Epilogue ep = GPUMAT_EPILOGUE_ARGS;
    const bool ep_id = ep.identity();
    const long long plane = (long long)M * N;
    const long long groups = (plane + VEC - 1) / VEC;
    const bool whole = N % VEC == 0;
    if (blockDim.y == 1) {
        for (long long g = (long long)blockIdx.x * blockDim.x + threadIdx.x; g < groups;
             g += (long long)gridDim.x * blockDim.x) {
            Acc sum[VEC];
            add_splits(sum, partial, g * VEC, plane, 0, splits, whole);
            store_group(sum, C, g * VEC, plane, N, ldc, ep, ep_id);
        }
        return;
    }
    __shared__ Acc part[SPLITK_SLICES][32][VEC];
    const int lane = threadIdx.x, slice = threadIdx.y;
    const int s0 = slice * splits / SPLITK_SLICES, s1 = (slice + 1) * splits / SPLITK_SLICES;
    for (long long g0 = (long long)blockIdx.x * 32; g0 < groups; g0 += (long long)gridDim.x * 32) {  // block-uniform
        const long long g = g0 + lane;
        Acc sum[VEC];
        if (g < groups) add_splits(sum, partial, g * VEC, plane, s0, s1, whole);
#pragma unroll
        for (int e = 0; e < VEC; ++e) part[slice][lane][e] = g < groups ? sum[e] : Acc(0);
        __syncthreads();
        if (slice == 0 && g < groups) {
#pragma unroll
            for (int w = 1; w < SPLITK_SLICES; ++w)
#pragma unroll
                for (int e = 0; e < VEC; ++e) sum[e] += part[w][lane][e];
            store_group(sum, C, g * VEC, plane, N, ldc, ep, ep_id);
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------------------------------------------
// The Ozaki scheme's moduli (gpumat.matmul.ozaki.OZAKI_MODULI, largest first; a CPU test compares the two),
// for the __constant__ tables of the files that read them: the residue kernels and the reconstruction
// (ozaki.cu), and the INT8 products, which reduce their int32 sums to residues (matmul_wgmma.cuh).
// ---------------------------------------------------------------------------------------------------
#define GPUMAT_OZAKI_MODULI 256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197, 193
constexpr int OZAKI_MAX_MODULI = 16;

// x mod m in [-(m / 2), (m - 1) / 2] for an integer-valued double |x| < 2^53, inv = 1 / m rounded, without a
// division (fmod loops and integer % divide: both were most of the residues' and the reconstruction's time)
// and without a conversion instruction of its own (the FP64 conversions issue at a quarter of the FP64 adds'
// rate; an int32 caller still converts its x to a double once): q, x inv rounded to an integer by adding and taking away 1.5 2^52, is the
// nearest quotient or one off it (x inv's error is below 2^-52 x / m < 0.02); r = x - q m is exact (an FMA,
// a small integer), read as an int from the low word of r + 1.5 2^52 (whose last place is 1, its low 32 bits
// r's two's complement); one step puts r in the symmetric range. The residue is the integer a division gives,
// so the bits are the host reference's (tests/ozaki_reference.py).
__device__ __forceinline__ int symmetric_residue(double x, int m, double inv)
{
    constexpr double ROUND = 0x1.8p52;
    const double q = __dsub_rn(__dadd_rn(__dmul_rn(x, inv), ROUND), ROUND);
    int r = __double2loint(__dadd_rn(__fma_rn(-q, (double)m, x), ROUND));
    if (r > (m - 1) / 2) r -= m;
    else if (r < -(m / 2)) r += m;
    return r;
}

}  // namespace gpumat
