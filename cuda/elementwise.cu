// In-place accumulation over a strided 2-D region: dst (rows x cols, row stride ldd) += src (same
// shape, row stride lds), for float32 and float64 (add_inplace_f32 / _f64). The out-of-core matmul adds
// each K tile's product into its C tile with it, always in K order, so results are deterministic.
//
// Technique: a memory-bound map like convert.cu's. A block of 32 x 8 threads covers 128 columns x 8 rows;
// each thread adds four elements 32 columns apart (coalesced along a row); rows beyond gridDim.y x 8 are
// walked in a grid-stride loop. Offsets are 64-bit.
// Launch: block (32, 8), grid (ceil(cols/128), min(ceil(rows/8), 65535)).

namespace {

template <class T>
__device__ __forceinline__ void add_inplace(T* __restrict__ dst, const T* __restrict__ src, long long rows,
                                            long long cols, long long ldd, long long lds)
{
    const long long c = (long long)blockIdx.x * 128 + threadIdx.x;
    for (long long r = (long long)blockIdx.y * blockDim.y + threadIdx.y; r < rows;
         r += (long long)gridDim.y * blockDim.y) {
        T* d = dst + r * ldd;
        const T* s = src + r * lds;
#pragma unroll
        for (int j = 0; j < 4; ++j)
            if (c + 32 * j < cols)
                d[c + 32 * j] += s[c + 32 * j];
    }
}

}  // namespace

// dst += src, elementwise; see above for the launch shape.
extern "C" __global__ void __launch_bounds__(256) add_inplace_f32(float* dst, const float* src, long long rows,
                                                                  long long cols, long long ldd, long long lds)
{
    add_inplace(dst, src, rows, cols, ldd, lds);
}

// dst += src, elementwise; see above for the launch shape.
extern "C" __global__ void __launch_bounds__(256) add_inplace_f64(double* dst, const double* src, long long rows,
                                                                  long long cols, long long ldd, long long lds)
{
    add_inplace(dst, src, rows, cols, ldd, lds);
}
