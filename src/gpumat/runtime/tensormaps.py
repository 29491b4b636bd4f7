"""Tensor maps: the 128-byte descriptors through which Hopper's copy engine (TMA) reads and writes tiles.

`encode_tiled(elem, args)` turns a description (address, sizes, byte strides, box, element strides)
into the CUtensorMap bytes a kernel takes by value ("T" in a kernel signature): 128-byte swizzle,
256-byte L2 promotion, zero fill outside the matrix. `elem` names the copy engine's element type: a
dtype suffix (f16, bf16, f32), or "tf32": float32 in memory that the copy engine rounds to TF32 (to
nearest, ties to even: 10 mantissa bits kept, the 13 low bits cleared; the driver's header does not
say so, tests/test_matmul_tf32_wgmma.py checks it on the GPU) on its way into shared memory, for the
TF32 tensor-core kernels (a wgmma reading raw float32 would truncate instead).
"""

from __future__ import annotations

import ctypes

from .bindings import driver
from .errors import check

# element type -> (the driver's data type, bytes an element)
DATA_TYPES = {
    "f16": ("CU_TENSOR_MAP_DATA_TYPE_FLOAT16", 2),
    "bf16": ("CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", 2),
    "f32": ("CU_TENSOR_MAP_DATA_TYPE_FLOAT32", 4),
    "tf32": ("CU_TENSOR_MAP_DATA_TYPE_TFLOAT32", 4),
    "u8": ("CU_TENSOR_MAP_DATA_TYPE_UINT8", 1),  # bytes as they are (the Ozaki scheme's int8 residues)
    "s8": ("CU_TENSOR_MAP_DATA_TYPE_UINT8", 1),  # int8 matrices: the copy engine moves their bytes as they are
    "s32": ("CU_TENSOR_MAP_DATA_TYPE_INT32", 4),  # the INT8 product's int32 C
    "e4m3": ("CU_TENSOR_MAP_DATA_TYPE_UINT8", 1),  # FP8 matrices: bytes as they are, as int8's
    "e5m2": ("CU_TENSOR_MAP_DATA_TYPE_UINT8", 1),
}


def element_bytes(elem: str) -> int:
    """Bytes an element of the copy engine's element type `elem` (see DATA_TYPES) takes in memory."""
    return DATA_TYPES[elem][1]


def encode_tiled(elem: str, args: dict) -> bytes:
    """The CUtensorMap for elements of type `elem` (a key of DATA_TYPES) described by `args` (the keyword
    names of cuTensorMapEncodeTiled: globalAddress, globalDim, globalStrides, boxDim, elementStrides)."""
    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    encoded = check(
        driver.cuTensorMapEncodeTiled(
            getattr(driver.CUtensorMapDataType, DATA_TYPES[elem][0]),
            len(args["globalDim"]),
            args["globalAddress"],
            [u64(x) for x in args["globalDim"]],
            [u64(x) for x in args["globalStrides"]],
            [u32(x) for x in args["boxDim"]],
            [u32(x) for x in args["elementStrides"]],
            driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
            driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
            driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        ),
        "cuTensorMapEncodeTiled",
    )
    return ctypes.string_at(encoded.getPtr(), 128)
