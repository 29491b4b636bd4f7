"""The one launcher: queue a MatmulPlan on a stream for given operands.

It assumes the caller has checked the operands against the plan's problem, holds the device lock,
and has ordered the stream after the operands' allocations. Scratch (split-K partials, aligned copies
of operands for the copy engine) comes from the device's pool on the same stream and is freed
stream-ordered after the launches, so it is reused only once they are done.
"""

from __future__ import annotations

from functools import lru_cache

from .._dtypes import ITEMSIZE
from ..memory import device_pool
from ..runtime import memops
from ..runtime.geometry import cdiv
from ..runtime.tensormaps import encode_tiled
from .plan import MatmulPlan
from .problem import aligned
from .variants import accumulator

NO_MAP = bytes(128)  # the C map's place when C leaves by plain stores


def launch(p: MatmulPlan, a, b, out, dev, stream: int) -> None:
    """out = a @ b by plan p, queued on `stream` of `dev` (device lock held)."""
    direct = p.direct
    if direct is not None:  # one kernel, operands read in place: the common case
        kernel, grid, block, smem, m, n, k, tail = direct
        kernel(
            grid,
            block,
            a.elements,
            b.elements,
            out.elements,
            m,
            n,
            k,
            a._stride,
            b._stride,
            out._stride,
            *tail,
            smem=smem,
            stream=stream,
            device=dev,
        )
        return
    pa, pb, pc = a.elements, b.elements, out.elements
    m, n, k = p.problem.m, p.problem.n, p.problem.k
    lda, ldb, ldc = a._stride, b._stride, out._stride
    v = p.variant
    pool = dev.memory or device_pool(dev)
    held: list[tuple[int, int]] = []  # scratch blocks, freed stream-ordered after the launches
    try:
        size = ITEMSIZE[p.problem.dtype]
        if p.copy_a:
            pa, lda = _aligned_copy(pa, lda, m, k, size, pool, stream, held)
        if p.copy_b:
            pb, ldb = _aligned_copy(pb, ldb, k, n, size, pool, stream, held)
        c, c_ld, c_sfx = pc, ldc, p.problem.out_dtype
        if p.splits > 1:
            c, c_ld, c_sfx = pool.alloc(p.scratch_bytes, stream), n, accumulator(p.problem.dtype)
            held.append((c, p.scratch_bytes))
        if v.args == "tensor_maps":
            src = p.problem.dtype
            mc = c_map(c_sfx, c, m, n, c_ld, p.splits)
            p.kernel(
                p.grid,
                v.block,
                tensor_map(src, pa, m, k, lda, 64, v.tile[0]),
                tensor_map(src, pb, k, n, ldb, 64, 64),
                mc or NO_MAP,
                c,
                m,
                n,
                k,
                c_ld,
                p.k_chunk,
                int(mc is not None),
                smem=v.smem,
                stream=stream,
                device=dev,
            )
        else:
            p.kernel(
                p.grid, v.block, pa, pb, c, m, n, k, lda, ldb, c_ld, p.k_chunk, smem=v.smem, stream=stream, device=dev
            )
        if p.reduce is not None:
            p.reduce(p.reduce_grid, (256, 1, 1), c, pc, m, n, ldc, p.splits, stream=stream, device=dev)
    finally:
        for ptr, nbytes in held:
            pool.free(ptr, nbytes, stream)


def _aligned_copy(
    ptr: int, stride: int, rows: int, cols: int, size: int, pool, stream: int, held: list
) -> tuple[int, int]:
    """(address, row stride) of a copy of a rows x cols operand whose base and row stride are 16-byte
    aligned (stride rounded up to 16 bytes), in pool scratch."""
    per_16 = 16 // size
    aligned_stride = cdiv(cols, per_16) * per_16
    nbytes = rows * aligned_stride * size
    dst = pool.alloc(nbytes, stream)
    held.append((dst, nbytes))
    memops.copy_2d_async(
        dst,
        aligned_stride * size,
        ptr,
        stride * size,
        cols * size,
        rows,
        dst_on_host=False,
        src_on_host=False,
        stream=stream,
    )
    return dst, aligned_stride


# --- tensor maps (TMA variants): boxes of 64 columns (128 bytes of 16-bit elements) ----------------
def tensor_map_args(
    ptr: int, rows: int, cols: int, stride: int, box_cols: int, box_rows: int, itemsize: int = 2
) -> dict:
    """cuTensorMapEncodeTiled's arguments for a row-major rows x cols operand (row stride in elements):
    the inner dimension is the columns; boxes of box_cols x box_rows."""
    if not aligned(ptr, stride, itemsize):
        raise ValueError("a tensor map needs a 16-byte aligned base and row stride")
    return {
        "globalAddress": ptr,
        "globalDim": (cols, rows),
        "globalStrides": (stride * itemsize,),
        "boxDim": (box_cols, box_rows),
        "elementStrides": (1, 1),
    }


def c_map_args(ptr: int, rows: int, cols: int, stride: int, layers: int, itemsize: int) -> dict | None:
    """cuTensorMapEncodeTiled's arguments for C (or split-K's float32 layers, `rows` x `stride` elements
    apart) as a cols x rows x layers tensor with boxes of 128 bytes x 64 rows; None when C's address
    or row stride is not 16-byte aligned, or its rows are not a whole number of 16 bytes: a TMA store
    writes whole 16-byte pieces, so it would run past the last column into the next one's memory
    (C then leaves by plain stores)."""
    if not aligned(ptr, stride, itemsize) or (cols * itemsize) % 16:
        return None
    return {
        "globalAddress": ptr,
        "globalDim": (cols, rows, layers),
        "globalStrides": (stride * itemsize, rows * stride * itemsize),
        "boxDim": (128 // itemsize, 64, 1),
        "elementStrides": (1, 1, 1),
    }


@lru_cache(maxsize=1024)
def tensor_map(sfx: str, ptr: int, rows: int, cols: int, stride: int, box_cols: int, box_rows: int) -> bytes:
    """An operand's CUtensorMap, cached: it depends on nothing but these numbers."""
    return encode_tiled(sfx, tensor_map_args(ptr, rows, cols, stride, box_cols, box_rows))


@lru_cache(maxsize=1024)
def c_map(sfx: str, ptr: int, rows: int, cols: int, stride: int, layers: int) -> bytes | None:
    """C's CUtensorMap (see c_map_args), or None: plain stores."""
    args = c_map_args(ptr, rows, cols, stride, layers, ITEMSIZE[sfx])
    return None if args is None else encode_tiled(sfx, args)
