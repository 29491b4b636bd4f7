// Dot product: sum over all elements of x * y for two equal-shape matrices of one dtype (float32,
// float64, float16 or bfloat16), in one launch, accumulated in double.
//
// Seed 003's scheme, made exact enough and deterministic:
//  1. each thread walks the elements in a grid-stride loop and keeps its partial sum in double, one
//     fused multiply-add a product (a float32, float16 or bfloat16 product is exact in double, so only
//     the additions round, at 2^-53; a float64 product and its addition round once together);
//  2. each block reduces its threads' partials in a fixed order (warp shuffles, then the warps'
//     sums through shared memory) and thread 0 stores the block's sum in scratch;
//  3. the last block to finish (found with an integer atomic ticket; no float atomics) adds the
//     blocks' sums in block order and writes the result, a double, to `result`: page-locked host
//     memory mapped into the device's address space, so no copy follows the kernel (the host reads it
//     once the stream has run the kernel).
// The launcher fixes the grid from the size, the dtype and the GPU alone, so every run adds the same
// numbers in the same order: bitwise deterministic. NaN and Inf propagate through the additions.
// One template per entry, instantiated for each dtype (dot_flat_f32, dot_flat_f64, dot_flat_f16, ...).
//
// scratch layout (doubles): [0] ticket counter (an unsigned int, zero between launches; the last block
// resets it), [1 ..] one partial sum per block.
// Launch: block (256), grid (blocks, 1, 1) with blocks <= the scratch's partial slots.
#include "gpumat.cuh"

using gpumat::Dtype;

constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
// The launcher's grid cap (blocks a SM). Also the launch-bounds occupancy hint: it lets ptxas spend up
// to 64 registers a thread, which it needs to keep every load of a loop step in flight at once (with
// its default 32-register budget on sm_90 it waits for each load pair before issuing the next).
constexpr int BLOCKS_PER_SM = 4;

__device__ __forceinline__ double warp_sum(double v)
{
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// The block's sum, valid in thread 0. Ends with every thread past a barrier that follows its last
// read of `warp_sums`, so the caller may call it again after one more __syncthreads().
__device__ __forceinline__ double block_sum(double v, double* warp_sums)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    if (lane == 0)
        warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < WARPS ? warp_sums[lane] : 0.0;
        v = warp_sum(v);
    }
    return v;
}

__device__ __forceinline__ void finish(double thread_sum, double* __restrict__ scratch, double* __restrict__ result)
{
    __shared__ double warp_sums[WARPS];
    __shared__ bool last;
    unsigned int* ticket = reinterpret_cast<unsigned int*>(scratch);
    double* partials = scratch + 1;

    const double block_total = block_sum(thread_sum, warp_sums);
    if (threadIdx.x == 0) {
        partials[blockIdx.x] = block_total;
        __threadfence();                                   // publish the partial before taking a ticket
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    double v = 0.0;
    for (unsigned int b = threadIdx.x; b < gridDim.x; b += THREADS)
        v += __ldcg(partials + b);                         // L2, never a stale L1 line
    v = block_sum(v, warp_sums);
    if (threadIdx.x == 0) {
        *result = v;
        *ticket = 0u;                                      // ready for the next launch
    }
}

// acc + a * b in double, one rounding (exact product for every dtype but float64).
template <class T>
__device__ __forceinline__ double fma_acc(T a, T b, double acc)
{
    return fma(Dtype<T>::wide(a), Dtype<T>::wide(b), acc);
}

// float16: the product of two halves is exact in float32 (11 x 11 significant bits; magnitudes from 2^-48
// to 2^32), so acc + (double)(a * b) rounds once, as the fma above does: the same bits, with one conversion
// to double an element instead of two. On the H200, kernel alone, operands the L2 cache holds: 2^22
// elements 7.29 -> 6.94 us, 2^23 9.73 -> 8.80 us (bits compared: equal). bfloat16 keeps the fma: its
// products can leave float32's range (8 exponent bits, as float32's), and a guard around a float32
// product (range test, fma otherwise) ran 4-21% slower than the plain fma from 2^22 elements up.
template <>
__device__ __forceinline__ double fma_acc<__half>(__half a, __half b, double acc)
{
    return acc + (double)(__half2float(a) * __half2float(b));
}

// Contiguous x and y of n elements, as flat vectors. When x and y sit at the same offset modulo
// 16 bytes, the head elements up to a 16-byte boundary are peeled and the body is read in 128-bit
// loads (V = 16 / sizeof(T) elements each), two of each operand per iteration; otherwise a scalar
// loop, four elements in flight per thread.
template <class T>
__device__ __forceinline__ void dot_flat(const T* __restrict__ x, const T* __restrict__ y, long long n,
                                         double* __restrict__ scratch, double* __restrict__ result)
{
    gpumat::wait_for_previous_grid();
    constexpr int V = 16 / (int)sizeof(T);
    const long long tid = (long long)blockIdx.x * THREADS + threadIdx.x;
    const long long stride = (long long)gridDim.x * THREADS;
    double acc = 0.0;
    const unsigned long long ax = reinterpret_cast<unsigned long long>(x);
    const unsigned long long ay = reinterpret_cast<unsigned long long>(y);
    if (((ax ^ ay) & 15) == 0) {
        const long long head = min((long long)(((16 - (ax & 15)) & 15) / sizeof(T)), n);
        for (long long h = tid; h < head; h += stride)    // fewer than V head elements
            acc = fma_acc(x[h], y[h], acc);
        const uint4* x4 = reinterpret_cast<const uint4*>(x + head);
        const uint4* y4 = reinterpret_cast<const uint4*>(y + head);
        const long long n4 = (n - head) / V;
        long long i = tid;
        for (; i + stride < n4; i += 2 * stride) {
            const uint4 a0 = x4[i], a1 = x4[i + stride];
            const uint4 b0 = y4[i], b1 = y4[i + stride];
            const T* pa0 = reinterpret_cast<const T*>(&a0);
            const T* pa1 = reinterpret_cast<const T*>(&a1);
            const T* pb0 = reinterpret_cast<const T*>(&b0);
            const T* pb1 = reinterpret_cast<const T*>(&b1);
#pragma unroll
            for (int e = 0; e < V; ++e)
                acc = fma_acc(pa0[e], pb0[e], acc);
#pragma unroll
            for (int e = 0; e < V; ++e)
                acc = fma_acc(pa1[e], pb1[e], acc);
        }
        if (i < n4) {
            const uint4 a0 = x4[i], b0 = y4[i];
            const T* pa0 = reinterpret_cast<const T*>(&a0);
            const T* pb0 = reinterpret_cast<const T*>(&b0);
#pragma unroll
            for (int e = 0; e < V; ++e)
                acc = fma_acc(pa0[e], pb0[e], acc);
        }
        for (long long t = head + V * n4 + tid; t < n; t += stride)   // fewer than V tail elements
            acc = fma_acc(x[t], y[t], acc);
    } else {
        long long i = tid;
        for (; i + 3 * stride < n; i += 4 * stride) {
            const T a0 = x[i], a1 = x[i + stride], a2 = x[i + 2 * stride], a3 = x[i + 3 * stride];
            const T b0 = y[i], b1 = y[i + stride], b2 = y[i + 2 * stride], b3 = y[i + 3 * stride];
            acc = fma_acc(a0, b0, acc); acc = fma_acc(a1, b1, acc);
            acc = fma_acc(a2, b2, acc); acc = fma_acc(a3, b3, acc);
        }
        for (; i < n; i += stride)
            acc = fma_acc(x[i], y[i], acc);
    }
    finish(acc, scratch, result);
}

// Position (r, c) of flat element index i of a rows x cols matrix, moved on by a fixed step of
// (dr, dc) = divmod(stride, cols) without any division in the loop.
struct Cursor {
    long long r, c;
    __device__ __forceinline__ void advance(long long dr, long long dc, long long cols)
    {
        r += dr;
        c += dc;
        if (c >= cols) {
            c -= cols;
            ++r;
        }
    }
};

// Views: x and y are rows x cols with their own row strides. Threads walk the flat (row-major)
// element index in a grid-stride loop, as dot_flat does, and turn it into a row and a column with
// a cursor; consecutive threads still read consecutive elements of a row. Four elements in flight.
template <class T>
__device__ __forceinline__ void dot_strided(const T* __restrict__ x, const T* __restrict__ y, long long rows,
                                            long long cols, long long ldx, long long ldy,
                                            double* __restrict__ scratch, double* __restrict__ result)
{
    gpumat::wait_for_previous_grid();
    const long long tid = (long long)blockIdx.x * THREADS + threadIdx.x;
    const long long stride = (long long)gridDim.x * THREADS;
    const long long n = rows * cols;
    const long long dr = stride / cols, dc = stride - dr * cols;
    Cursor p{tid / cols, tid % cols};
    double acc = 0.0;
    long long i = tid;
    for (; i + 3 * stride < n; i += 4 * stride) {
        const long long x0 = p.r * ldx + p.c, y0 = p.r * ldy + p.c;
        p.advance(dr, dc, cols);
        const long long x1 = p.r * ldx + p.c, y1 = p.r * ldy + p.c;
        p.advance(dr, dc, cols);
        const long long x2 = p.r * ldx + p.c, y2 = p.r * ldy + p.c;
        p.advance(dr, dc, cols);
        const long long x3 = p.r * ldx + p.c, y3 = p.r * ldy + p.c;
        p.advance(dr, dc, cols);
        const T a0 = x[x0], a1 = x[x1], a2 = x[x2], a3 = x[x3];
        const T b0 = y[y0], b1 = y[y1], b2 = y[y2], b3 = y[y3];
        acc = fma_acc(a0, b0, acc); acc = fma_acc(a1, b1, acc);
        acc = fma_acc(a2, b2, acc); acc = fma_acc(a3, b3, acc);
    }
    for (; i < n; i += stride) {
        acc = fma_acc(x[p.r * ldx + p.c], y[p.r * ldy + p.c], acc);
        p.advance(dr, dc, cols);
    }
    finish(acc, scratch, result);
}

// dot_flat_<dtype>(x, y, n, scratch, result) and dot_strided_<dtype>(x, y, rows, cols, ldx, ldy, scratch,
// result).
#define GPUMAT_DOT(SFX, T)                                                                                  \
    extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM) dot_flat_##SFX(                    \
        const T* __restrict__ x, const T* __restrict__ y, long long n, double* __restrict__ scratch,        \
        double* __restrict__ result)                                                                         \
    {                                                                                                        \
        dot_flat<T>(x, y, n, scratch, result);                                                               \
    }                                                                                                        \
    extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM) dot_strided_##SFX(                 \
        const T* __restrict__ x, const T* __restrict__ y, long long rows, long long cols, long long ldx,    \
        long long ldy, double* __restrict__ scratch, double* __restrict__ result)                            \
    {                                                                                                        \
        dot_strided<T>(x, y, rows, cols, ldx, ldy, scratch, result);                                         \
    }

GPUMAT_DOT(f32, float)
GPUMAT_DOT(f64, double)
GPUMAT_DOT(f16, __half)
GPUMAT_DOT(bf16, __nv_bfloat16)
