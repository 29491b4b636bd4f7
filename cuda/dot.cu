// Dot product: sum over all elements of x * y for two equal-shape float32 matrices, in one launch.
//
// Seed 003's scheme, made exact enough and deterministic:
//  1. each thread walks the elements in a grid-stride loop and keeps its partial sum in double
//     (a float32 x float32 product is exact in double, so only the additions round, at 2^-53);
//  2. each block reduces its threads' partials in a fixed order (warp shuffles, then the warps'
//     sums through shared memory) and thread 0 stores the block's sum in scratch;
//  3. the last block to finish (found with an integer atomic ticket; no float atomics) adds the
//     blocks' sums in block order and writes the result, a double, to scratch[0].
// The launcher fixes the grid from the size and the GPU alone, so every run adds the same numbers
// in the same order: bitwise deterministic. NaN and Inf propagate through the additions.
//
// scratch layout (doubles): [0] result, [1] ticket counter (an unsigned int, zero between launches;
// the last block resets it), [2 ..] one partial sum per block.
// Launch: block (256), grid (blocks, 1, 1) with blocks <= the scratch's partial slots.

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

__device__ __forceinline__ void finish(double thread_sum, double* __restrict__ scratch)
{
    __shared__ double warp_sums[WARPS];
    __shared__ bool last;
    unsigned int* ticket = reinterpret_cast<unsigned int*>(scratch + 1);
    double* partials = scratch + 2;

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
        scratch[0] = v;
        *ticket = 0u;                                      // ready for the next launch
    }
}

__device__ __forceinline__ double prod(float a, float b)
{
    return (double)a * (double)b;
}

// Contiguous x and y of n elements, as flat vectors. When x and y sit at the same offset modulo
// 16 bytes, up to three head elements are peeled and the body is read as float4 (128-bit loads),
// two of each per iteration; otherwise a scalar loop, four elements in flight per thread.
extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM) dot_flat(
    const float* __restrict__ x, const float* __restrict__ y, long long n, double* __restrict__ scratch)
{
    const long long tid = (long long)blockIdx.x * THREADS + threadIdx.x;
    const long long stride = (long long)gridDim.x * THREADS;
    double acc = 0.0;
    const unsigned long long ax = reinterpret_cast<unsigned long long>(x);
    const unsigned long long ay = reinterpret_cast<unsigned long long>(y);
    if (((ax ^ ay) & 15) == 0) {
        const long long head = min((long long)(((16 - (ax & 15)) & 15) >> 2), n);
        for (long long h = tid; h < head; h += stride)    // at most three head elements
            acc += prod(x[h], y[h]);
        const float4* x4 = reinterpret_cast<const float4*>(x + head);
        const float4* y4 = reinterpret_cast<const float4*>(y + head);
        const long long n4 = (n - head) >> 2;
        long long i = tid;
        for (; i + stride < n4; i += 2 * stride) {
            const float4 a0 = x4[i], a1 = x4[i + stride];
            const float4 b0 = y4[i], b1 = y4[i + stride];
            acc += prod(a0.x, b0.x); acc += prod(a0.y, b0.y); acc += prod(a0.z, b0.z); acc += prod(a0.w, b0.w);
            acc += prod(a1.x, b1.x); acc += prod(a1.y, b1.y); acc += prod(a1.z, b1.z); acc += prod(a1.w, b1.w);
        }
        if (i < n4) {
            const float4 a0 = x4[i], b0 = y4[i];
            acc += prod(a0.x, b0.x); acc += prod(a0.y, b0.y); acc += prod(a0.z, b0.z); acc += prod(a0.w, b0.w);
        }
        for (long long t = head + 4 * n4 + tid; t < n; t += stride)   // at most three tail elements
            acc += prod(x[t], y[t]);
    } else {
        long long i = tid;
        for (; i + 3 * stride < n; i += 4 * stride) {
            const float a0 = x[i], a1 = x[i + stride], a2 = x[i + 2 * stride], a3 = x[i + 3 * stride];
            const float b0 = y[i], b1 = y[i + stride], b2 = y[i + 2 * stride], b3 = y[i + 3 * stride];
            acc += prod(a0, b0); acc += prod(a1, b1); acc += prod(a2, b2); acc += prod(a3, b3);
        }
        for (; i < n; i += stride)
            acc += prod(x[i], y[i]);
    }
    finish(acc, scratch);
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
extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS_PER_SM) dot_strided(
    const float* __restrict__ x, const float* __restrict__ y, long long rows, long long cols,
    long long ldx, long long ldy, double* __restrict__ scratch)
{
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
        const float a0 = x[x0], a1 = x[x1], a2 = x[x2], a3 = x[x3];
        const float b0 = y[y0], b1 = y[y1], b2 = y[y2], b3 = y[y3];
        acc += prod(a0, b0); acc += prod(a1, b1); acc += prod(a2, b2); acc += prod(a3, b3);
    }
    for (; i < n; i += stride) {
        acc += prod(x[p.r * ldx + p.c], y[p.r * ldy + p.c]);
        p.advance(dr, dc, cols);
    }
    finish(acc, scratch);
}
