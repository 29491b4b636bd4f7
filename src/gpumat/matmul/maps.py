"""The tensor maps of the TMA kernels' operands and results (CUtensorMap, encoded by the runtime): their
arguments from an operand's address, shape and strides, and the encoded maps, cached by those numbers.
Below the launcher and the emulated products, which both describe matrices to the copy engine.
"""

from __future__ import annotations

from functools import lru_cache

from .._dtypes import ITEMSIZE
from ..runtime import tensormaps
from .problem import aligned

# --- tensor maps (TMA variants): boxes one 128-byte swizzle row wide (64 16-bit elements, 32 float32) ---
SWIZZLE_BYTES = 128  # the kernels' shared-memory rows: a box's inner extent, in bytes


def tensor_map_args(
    ptr: int,
    rows: int,
    cols: int,
    stride: int,
    box_cols: int,
    box_rows: int,
    itemsize: int = 2,
    layers: int = 1,
    layer_stride: int = 0,
) -> dict:
    """cuTensorMapEncodeTiled's arguments for `layers` row-major rows x cols matrices (row stride and
    layer stride in elements; one layer: the stride of the rows it has) as a cols x rows x layers tensor:
    the inner dimension is the columns; boxes of box_cols x box_rows x 1."""
    if layers == 1:
        layer_stride = rows * stride
    if not aligned(ptr, stride, itemsize) or (layer_stride * itemsize) % 16:
        raise ValueError("a tensor map needs a 16-byte aligned base, row stride and batch stride")
    return {
        "globalAddress": ptr,
        "globalDim": (cols, rows, layers),
        "globalStrides": (stride * itemsize, layer_stride * itemsize),
        "boxDim": (box_cols, box_rows, 1),
        "elementStrides": (1, 1, 1),
    }


def c_map_args(
    ptr: int, rows: int, cols: int, stride: int, layers: int, itemsize: int, layer_stride: int | None = None
) -> dict | None:
    """cuTensorMapEncodeTiled's arguments for C's layers (the batch's matrices, or split-K's float32
    partials; layer_stride elements apart, default rows x stride) as a cols x rows x layers tensor with
    boxes of 128 bytes (one swizzle row) x 64 rows; None when C's address, row stride or layer stride is
    not 16-byte aligned, or its rows are not a whole number of 16 bytes: a TMA store writes whole 16-byte
    pieces, so it would run past the last column into the next one's memory (C then leaves by plain
    stores)."""
    layer_stride = rows * stride if layer_stride is None else layer_stride
    if not aligned(ptr, stride, itemsize) or (cols * itemsize) % 16 or (layer_stride * itemsize) % 16:
        return None
    if layers > 1 and layer_stride < rows * stride:  # overlapping layers: not a tensor map's (plain stores)
        return None
    return {
        "globalAddress": ptr,
        "globalDim": (cols, rows, layers),
        "globalStrides": (stride * itemsize, layer_stride * itemsize),
        "boxDim": (SWIZZLE_BYTES // itemsize, 64, 1),
        "elementStrides": (1, 1, 1),
    }


@lru_cache(maxsize=1024)
def tensor_map(
    elem: str, ptr: int, rows: int, cols: int, stride: int, box_rows: int, layers: int = 1, layer_stride: int = 0
) -> bytes:
    """An operand's CUtensorMap (elements of the copy engine's type `elem`: a dtype suffix, or "tf32",
    float32 rounded to TF32 on the way in) over `layers` matrices layer_stride elements apart, in boxes
    one 128-byte row wide and box_rows tall; cached: it depends on nothing but these numbers."""
    size = tensormaps.element_bytes(elem)
    args = tensor_map_args(ptr, rows, cols, stride, SWIZZLE_BYTES // size, box_rows, size, layers, layer_stride)
    return tensormaps.encode_tiled(elem, args)


@lru_cache(maxsize=1024)
def c_map(
    sfx: str, ptr: int, rows: int, cols: int, stride: int, layers: int, layer_stride: int | None = None
) -> bytes | None:
    """C's CUtensorMap (see c_map_args), or None: plain stores."""
    args = c_map_args(ptr, rows, cols, stride, layers, ITEMSIZE[sfx], layer_stride)
    return None if args is None else tensormaps.encode_tiled(sfx, args)
