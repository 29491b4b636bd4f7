"""The one launcher: queue a MatmulPlan on a stream for given operands.

It assumes the caller has checked the operands against the plan's problem, holds the device lock,
and has ordered the stream after the operands' allocations. Operands come as raw (address, row
stride, batch stride) of their storage; an operand stored otherwise than the plan's kernel reads it
(most kernels read both row-major; the *at and *bt rows read A or B stored transposed) is copied into
that layout first (the plan says so), and a batch runs as grid layers of one launch. Scratch (split-K
partials, aligned copies of operands for the copy engine) comes from the device's pool on the same
stream and is freed stream-ordered after the launches, so it is reused only once they are done.
"""

from __future__ import annotations

from functools import lru_cache

from .._dtypes import ITEMSIZE
from ..convert import copy_region
from ..memory import device_pool
from ..runtime.geometry import MAX_GRID_YZ, cdiv
from ..runtime.tensormaps import element_bytes, encode_tiled
from ..transpose import transpose_region
from .plan import MatmulPlan
from .problem import aligned
from .variants import IDENTITY, accumulator

NO_MAP = bytes(128)  # the C map's place when C leaves by plain stores


def launch_plain(p: MatmulPlan, a, b, out, dev, stream: int) -> None:
    """out = a @ b for three row-major 2-D matrices and no epilogue: the common call's short path."""
    size = a._dtype.itemsize
    # the addresses, as `elements` gives them: the caller checked under the device lock that they are live
    pa = a._buffer.ptr + a._offset * size
    pb = b._buffer.ptr + b._offset * size
    pc = out._buffer.ptr + out._offset * out._dtype.itemsize
    fixed = p.plain_launch
    if fixed is None:
        launch(p, (pa, a._stride, 0), (pb, b._stride, 0), (pc, out._stride, 0), IDENTITY, dev, stream)
    elif p.variant.tma:  # the maps of this call's operands
        fixed(dev, stream, *_tma_arguments(p, pa, a._stride, pb, b._stride, pc, out._stride, p.problem.out_dtype))
    else:
        fixed(dev, stream, pa, pb, pc, a._height, b._width, a._width, a._stride, b._stride, out._stride)


def launch(p: MatmulPlan, a: tuple, b: tuple, c: tuple, epilogue: tuple, dev, stream: int) -> None:
    """C = epilogue(op(A) @ op(B)) by plan p, queued on `stream` of `dev` (device lock held). a, b, c:
    (address, row stride, batch stride) of each operand's storage (elements; batch stride 0: one matrix
    shared by the batch); epilogue: the kernels' (alpha, beta, bias, bias_step, bias_along, bias_f32,
    activation)."""
    direct = p.direct
    if direct is not None:  # one kernel, operands read in place: the common case
        q = p.problem
        p.direct_launch(
            dev, stream, a[0], b[0], c[0], q.m, q.n, q.k, a[1], b[1], c[1], *direct, a[2], b[2], c[2], *epilogue
        )
        return
    q, v = p.problem, p.variant
    m, n, k, batch = q.m, q.n, q.k, q.batch
    (pa, lda, bsa), (pb, ldb, bsb), (pc, ldc, bsc) = a, b, c
    pool = dev.memory or device_pool(dev)
    held: list[tuple[int, int]] = []  # scratch blocks, freed stream-ordered after the launches
    try:
        size = ITEMSIZE[q.dtype]
        if p.copy_a:  # into the layout the kernel reads: M rows of K, or K rows of M (reads_a_trans)
            rows, cols = (k, m) if v.reads_a_trans else (m, k)
            flip = q.a_trans != v.reads_a_trans  # stored the other way round from what the kernel reads
            pa, lda, bsa = _row_major_copy(pa, lda, bsa, rows, cols, flip, batch, q.dtype, pool, stream, held, dev)
        if p.copy_b:  # into the layout the kernel reads: K rows of N, or N rows of K (reads_b_trans)
            rows, cols = (n, k) if v.reads_b_trans else (k, n)
            flip = q.b_trans != v.reads_b_trans
            pb, ldb, bsb = _row_major_copy(pb, ldb, bsb, rows, cols, flip, batch, q.dtype, pool, stream, held, dev)
        out, out_ld, out_sfx, product_epilogue = pc, ldc, q.out_dtype, epilogue
        if p.splits > 1:  # the product writes partials; the reduction applies the epilogue
            out, out_ld, out_sfx = pool.alloc(p.scratch_bytes, stream), n, accumulator(q.dtype)
            held.append((out, p.scratch_bytes))
            product_epilogue = IDENTITY
        if v.tma:
            p.kernel(
                p.grid,
                v.block,
                *_tma_arguments(p, pa, lda, pb, ldb, out, out_ld, out_sfx),
                *product_epilogue,
                smem=v.smem,
                stream=stream,
                device=dev,
            )
        else:
            tail = () if v.args == "plain" else (p.k_chunk,)
            out_size = ITEMSIZE[out_sfx]
            for first in range(0, batch, MAX_GRID_YZ):  # batches beyond the grid's limit: more launches
                layers = min(MAX_GRID_YZ, batch - first)
                grid = p.grid if batch == 1 else (p.grid[0], p.grid[1], layers)
                p.kernel(
                    grid,
                    v.block,
                    pa + first * bsa * size,
                    pb + first * bsb * size,
                    out + first * bsc * out_size,
                    m,
                    n,
                    k,
                    lda,
                    ldb,
                    out_ld,
                    *tail,
                    bsa,
                    bsb,
                    bsc,
                    *product_epilogue,
                    smem=v.smem,
                    stream=stream,
                    device=dev,
                )
        if p.reduce is not None:
            p.reduce(p.reduce_grid, p.reduce_block, out, pc, m, n, ldc, p.splits, *epilogue, stream=stream, device=dev)
    finally:
        for ptr, nbytes in held:
            pool.free(ptr, nbytes, stream)


def _tma_arguments(p: MatmulPlan, pa: int, lda: int, pb: int, ldb: int, out: int, out_ld: int, out_sfx: str) -> tuple:
    """A TMA kernel's arguments before the epilogue, for A and B stored as its row reads them (16-byte
    aligned) and `out` (C, or split-K's partials, of `out_sfx`): the maps of A, B and C (C's map only when
    C can leave by TMA), C, M, N, K, C's row stride, k_chunk, whether C's map is used, and for the
    tensor_maps_exact rows the storage the maps of A and B describe."""
    q, v = p.problem, p.variant
    m, n, k = q.m, q.n, q.k
    mc = c_map(out_sfx, out, m, n, out_ld, p.splits)
    # the operands' element type: a TF32 row's copy engine rounds float32 to TF32 on the way in
    elem = "tf32" if v.mode == "tf32" else q.dtype
    # boxes one 128-byte row wide, and as tall as the row's tile: A k_tile K x tile rows; B stored
    # transposed (N rows of K) k_tile K x tile columns, else K rows of N in boxes of 64 columns x
    # k_tile rows (the kernel loads tile columns / 64 of them); A stored transposed (K rows of M) as a
    # row-major B is, in boxes of 64 columns of M x k_tile rows (tile rows / 64 of them); k_tile: K a
    # stage, 64 halves or 32 floats
    k_tile = SWIZZLE_BYTES // ITEMSIZE[q.dtype]
    map_a = tensor_map(elem, pa, k, m, lda, k_tile) if v.reads_a_trans else tensor_map(elem, pa, m, k, lda, v.tile[0])
    map_b = tensor_map(elem, pb, n, k, ldb, v.tile[1]) if v.reads_b_trans else tensor_map(elem, pb, k, n, ldb, k_tile)
    head = (map_a, map_b, mc or NO_MAP, out, m, n, k, out_ld, p.k_chunk, int(mc is not None))
    # the storage the maps describe, for the TF32 kernels' FP32 recomputation of non-finite outputs
    return (*head, pa, lda, pb, ldb) if v.args == "tensor_maps_exact" else head


def _row_major_copy(
    ptr: int,
    ld: int,
    bstride: int,
    rows: int,
    cols: int,
    trans: bool,
    batch: int,
    sfx: str,
    pool,
    stream: int,
    held: list,
    dev,
) -> tuple[int, int, int]:
    """(address, row stride, batch stride) of a row-major copy of a rows x cols operand (each matrix of a
    batch when bstride is not 0) whose base and row stride are 16-byte aligned, in pool scratch, by a
    copy kernel (the DMA engine takes microseconds over rows of a few hundred unaligned bytes). A
    transposed operand (stored cols x rows) is transposed on the way, one launch a matrix."""
    size = ITEMSIZE[sfx]
    per_16 = 16 // size
    aligned_ld = cdiv(cols, per_16) * per_16
    count = batch if bstride else 1
    per_matrix = rows * aligned_ld
    nbytes = count * per_matrix * size
    dst = pool.alloc(nbytes, stream)
    held.append((dst, nbytes))
    for i in range(count):
        src, out = ptr + i * bstride * size, dst + i * per_matrix * size
        if trans:
            transpose_region(src, out, cols, rows, ld, aligned_ld, sfx, stream, dev)
        else:
            copy_region(src, out, rows, cols, ld, aligned_ld, sfx, stream, dev)
    return dst, aligned_ld, per_matrix if bstride else 0


# --- tensor maps (TMA variants): boxes one 128-byte swizzle row wide (64 16-bit elements, 32 float32) ---
SWIZZLE_BYTES = 128  # the kernels' shared-memory rows: a box's inner extent, in bytes


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
    apart) as a cols x rows x layers tensor with boxes of 128 bytes (one swizzle row) x 64 rows; None when
    C's address or row stride is not 16-byte aligned, or its rows are not a whole number of 16 bytes: a TMA store
    writes whole 16-byte pieces, so it would run past the last column into the next one's memory
    (C then leaves by plain stores)."""
    if not aligned(ptr, stride, itemsize) or (cols * itemsize) % 16:
        return None
    return {
        "globalAddress": ptr,
        "globalDim": (cols, rows, layers),
        "globalStrides": (stride * itemsize, rows * stride * itemsize),
        "boxDim": (SWIZZLE_BYTES // itemsize, 64, 1),
        "elementStrides": (1, 1, 1),
    }


@lru_cache(maxsize=1024)
def tensor_map(elem: str, ptr: int, rows: int, cols: int, stride: int, box_rows: int) -> bytes:
    """An operand's CUtensorMap (elements of the copy engine's type `elem`: a dtype suffix, or "tf32",
    float32 rounded to TF32 on the way in), in boxes one 128-byte row wide and box_rows tall; cached: it
    depends on nothing but these numbers."""
    size = element_bytes(elem)
    return encode_tiled(elem, tensor_map_args(ptr, rows, cols, stride, SWIZZLE_BYTES // size, box_rows, size))


@lru_cache(maxsize=1024)
def c_map(sfx: str, ptr: int, rows: int, cols: int, stride: int, layers: int) -> bytes | None:
    """C's CUtensorMap (see c_map_args), or None: plain stores."""
    args = c_map_args(ptr, rows, cols, stride, layers, ITEMSIZE[sfx])
    return None if args is None else encode_tiled(sfx, args)
