// Dtype conversion over a strided 2-D region: dst (rows x cols, row stride ldd) = src (rows x cols,
// row stride lds) converted, for every ordered pair of distinct dtypes among float32, float64, float16
// and bfloat16, and from int8 and int32 to each of them and int8 to int32 (convert_<src>_<dst>). The
// value goes through double (exact for every source) and is rounded once to the destination, to nearest
// even; NaN stays NaN, +-Inf stays +-Inf, values beyond the destination's range become +-Inf, and
// widening conversions are exact. Nothing converts into the integers from floats. The same map with one dtype
// is a strided 2-D copy (copy_2d_<dtype>): the matmul launcher's copy of an operand the copy engine
// cannot read in place into aligned scratch, where rows of a few hundred unaligned bytes make the DMA
// engine (cuMemcpy2DAsync) take several microseconds.
//
// gather_3d_<dtype> copies any strided layout (signed element strides along the batch, the rows and the
// columns: reversed views, every other column, a broadcast) into a packed C-order batch: what an import
// with copy=True runs for a layout gpumat cannot view.
//
// Technique: a plain memory-bound map. A block of 32 x 8 threads covers 128 columns x 8 rows; each
// thread converts four elements 32 columns apart (coalesced along a row; copy_2d of 1- and 2-byte elements
// moves 16 or 8 a thread, 512 or 256 columns a block: COPY_ELEMS); rows beyond gridDim.y x 8 are
// walked in a grid-stride loop. A batch of regions (batch strides sbs and sbd) runs in one launch, the
// matrices on blockIdx.z (beyond gridDim.z in a grid-stride loop). Offsets are 64-bit.
// Launch: block (32, 8), grid (ceil(cols/(32 x elements a thread)), min(ceil(rows/8), 65535), min(batch, 65535)).
#include <type_traits>

#include "gpumat.cuh"

using gpumat::Dtype;

namespace {

template <class S, class D, int ELEMS = 4>
__device__ __forceinline__ void convert(const S* __restrict__ src, D* __restrict__ dst, long long rows, long long cols,
                                        long long lds, long long ldd, long long batch, long long sbs, long long sbd)
{
    gpumat::wait_for_previous_grid();
    const long long c = (long long)blockIdx.x * (32 * ELEMS) + threadIdx.x;
    for (long long b = blockIdx.z; b < batch; b += gridDim.z)
    for (long long r = (long long)blockIdx.y * blockDim.y + threadIdx.y; r < rows;
         r += (long long)gridDim.y * blockDim.y) {
        const S* s = src + b * sbs + r * lds;
        D* d = dst + b * sbd + r * ldd;
        S v[ELEMS];
#pragma unroll
        for (int j = 0; j < ELEMS; ++j)
            if (c + 32 * j < cols)
                v[j] = s[c + 32 * j];
#pragma unroll
        for (int j = 0; j < ELEMS; ++j)
            if (c + 32 * j < cols)
                if constexpr (std::is_same_v<S, D>)
                    d[c + 32 * j] = v[j];  // a copy: the bits as they are
                else if constexpr (std::is_integral_v<D>)
                    d[c + 32 * j] = (D)v[j];  // int8 -> int32: widened
                else
                    d[c + 32 * j] = Dtype<D>::from(Dtype<S>::wide(v[j]));
    }
}

// dst (batch x rows x cols, packed) = src, element (b, r, c) at src + b * sb + r * sr + c * sc (signed strides).
// The same thread layout as convert(): four elements a thread 32 columns apart, writes coalesced along a row;
// batches beyond gridDim.z and rows beyond gridDim.y x 8 in grid-stride loops.
template <class T>
__device__ __forceinline__ void gather(const T* __restrict__ src, T* __restrict__ dst, long long batch, long long rows,
                                       long long cols, long long sb, long long sr, long long sc)
{
    gpumat::wait_for_previous_grid();
    const long long c = (long long)blockIdx.x * 128 + threadIdx.x;
    for (long long b = blockIdx.z; b < batch; b += gridDim.z) {
        for (long long r = (long long)blockIdx.y * blockDim.y + threadIdx.y; r < rows;
             r += (long long)gridDim.y * blockDim.y) {
            const T* s = src + b * sb + r * sr;
            T* d = dst + (b * rows + r) * cols;
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (c + 32 * j < cols)
                    d[c + 32 * j] = s[(c + 32 * j) * sc];
        }
    }
}

}  // namespace

#define GPUMAT_CONVERT(SN, S, DN, D)                                                                         \
    extern "C" __global__ void __launch_bounds__(256) convert_##SN##_##DN(                                  \
        const S* __restrict__ src, D* __restrict__ dst, long long rows, long long cols, long long lds,      \
        long long ldd, long long batch, long long sbs, long long sbd)                                        \
    {                                                                                                        \
        convert<S, D>(src, dst, rows, cols, lds, ldd, batch, sbs, sbd);                                      \
    }

// The twelve ordered pairs of distinct dtypes.
GPUMAT_CONVERT(f32, float, f64, double)
GPUMAT_CONVERT(f32, float, f16, __half)
GPUMAT_CONVERT(f32, float, bf16, __nv_bfloat16)
GPUMAT_CONVERT(f64, double, f32, float)
GPUMAT_CONVERT(f64, double, f16, __half)
GPUMAT_CONVERT(f64, double, bf16, __nv_bfloat16)
GPUMAT_CONVERT(f16, __half, f32, float)
GPUMAT_CONVERT(f16, __half, f64, double)
GPUMAT_CONVERT(f16, __half, bf16, __nv_bfloat16)
GPUMAT_CONVERT(bf16, __nv_bfloat16, f32, float)
GPUMAT_CONVERT(bf16, __nv_bfloat16, f64, double)
GPUMAT_CONVERT(bf16, __nv_bfloat16, f16, __half)
// From the integers (int8 to the floats exactly; int32 exactly to float64, rounded to nearest even to the
// narrower ones), and int8 widened to int32.
GPUMAT_CONVERT(s8, int8_t, f32, float)
GPUMAT_CONVERT(s8, int8_t, f64, double)
GPUMAT_CONVERT(s8, int8_t, f16, __half)
GPUMAT_CONVERT(s8, int8_t, bf16, __nv_bfloat16)
GPUMAT_CONVERT(s8, int8_t, s32, int)
GPUMAT_CONVERT(s32, int, f32, float)
GPUMAT_CONVERT(s32, int, f64, double)
GPUMAT_CONVERT(s32, int, f16, __half)
GPUMAT_CONVERT(s32, int, bf16, __nv_bfloat16)
// FP8 both ways with the four floats: into FP8 rounded once to nearest even and saturated to the finite
// range (+-Inf and values beyond it become +-max, NaN stays NaN); out of FP8 exactly.
#define GPUMAT_CONVERT_FP8(FN, F)                                                                            \
    GPUMAT_CONVERT(f32, float, FN, F)                                                                        \
    GPUMAT_CONVERT(f64, double, FN, F)                                                                       \
    GPUMAT_CONVERT(f16, __half, FN, F)                                                                       \
    GPUMAT_CONVERT(bf16, __nv_bfloat16, FN, F)                                                               \
    GPUMAT_CONVERT(FN, F, f32, float)                                                                        \
    GPUMAT_CONVERT(FN, F, f64, double)                                                                       \
    GPUMAT_CONVERT(FN, F, f16, __half)                                                                       \
    GPUMAT_CONVERT(FN, F, bf16, __nv_bfloat16)
GPUMAT_CONVERT_FP8(e4m3, __nv_fp8_e4m3)
GPUMAT_CONVERT_FP8(e5m2, __nv_fp8_e5m2)

// Elements a thread of copy_2d moves: 16 bytes of them, at least four (a copy of 1- and 2-byte elements at four
// a thread drew 1.4-2.9 TB/s of the H200's 3.3-4.1 where 4-byte ones drew 3.6-4.0: too few bytes in flight).
template <class S>
constexpr int COPY_ELEMS = sizeof(S) >= 4 ? 4 : 16 / (int)sizeof(S);

#define GPUMAT_COPY_2D(SN, S)                                                                                \
    extern "C" __global__ void __launch_bounds__(256) copy_2d_##SN(                                         \
        const S* __restrict__ src, S* __restrict__ dst, long long rows, long long cols, long long lds,      \
        long long ldd, long long batch, long long sbs, long long sbd)                                        \
    {                                                                                                        \
        convert<S, S, COPY_ELEMS<S>>(src, dst, rows, cols, lds, ldd, batch, sbs, sbd);                         \
    }

// Same-dtype copies: every element's bits unchanged (int32 moves through the f32 entry, int8 its own).
GPUMAT_COPY_2D(f32, float)
GPUMAT_COPY_2D(f64, double)
GPUMAT_COPY_2D(f16, __half)
GPUMAT_COPY_2D(bf16, __nv_bfloat16)
GPUMAT_COPY_2D(s8, int8_t)

// Launch: block (32, 8), grid (ceil(cols/128), min(ceil(rows/8), 65535), min(batch, 65535)).
#define GPUMAT_GATHER_3D(SN, S)                                                                              \
    extern "C" __global__ void __launch_bounds__(256)                                                        \
        gather_3d_##SN(const S* __restrict__ src, S* __restrict__ dst, long long batch, long long rows,    \
                       long long cols, long long sb, long long sr, long long sc)                             \
    {                                                                                                        \
        gather<S>(src, dst, batch, rows, cols, sb, sr, sc);                                                  \
    }

// Strided gathers into a packed batch: every element's bits unchanged.
GPUMAT_GATHER_3D(f32, float)
GPUMAT_GATHER_3D(f64, double)
GPUMAT_GATHER_3D(f16, __half)
GPUMAT_GATHER_3D(bf16, __nv_bfloat16)
GPUMAT_GATHER_3D(s8, int8_t)
