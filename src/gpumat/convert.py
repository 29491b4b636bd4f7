"""Matrix.astype and the dtype conversion kernels (cuda/convert.cu): dst = src converted, over a strided 2-D region.

CONVERT_KERNELS[(src, dst)] for every ordered pair of distinct computed dtypes, and from int8 and int32 to
each of them (int8 to int32 too; the integers are exact in float64, and int32 rounds once to the narrower
floats): nothing converts into the integers (quantising is the caller's); arguments
(src, dst, rows, cols, lds, ldd, batch, sbs, sbd), strides in elements (a batch of regions, batch
strides sbs and sbd, in one launch). Rounding is to nearest even, once (values go
through double, exact for every source); NaN and +-Inf are preserved. COPY_KERNELS[sfx]: the same map
as a bit-exact strided copy (copy_region), for regions the DMA engine copies slowly (rows of unaligned
bytes); Matrix.copy itself stays cuMemcpy2D. GATHER_KERNELS[sfx]: any strided layout (signed strides
along the batch, rows and columns) into a packed batch, for imports with copy=True (gather). Both move
bits: their entries exist for each width and type of _dtypes.MOVE_SUFFIXES, int32 moving as float32.
"""

from __future__ import annotations

from functools import lru_cache

from . import _dtypes
from ._dtypes import FP8_SUFFIXES, INTEGER_SUFFIXES, ITEMSIZE, MOVE_SUFFIX, MOVE_SUFFIXES, SUFFIXES
from .matrix import Matrix, paired_pieces
from .memory import DeviceBuffer
from .memory.ordering import done_on, mark_done, use_on
from .operands import operand_device
from .runtime.devices import thread_state
from .runtime.geometry import MAX_GRID_YZ, cdiv
from .runtime.kernels import FixedLaunch, Kernel
from .runtime.streams import LEGACY_STREAM, stream_handle

SIGNATURE = "PPqqqqqqq"  # src, dst, rows, cols, lds, ldd, batch, sbs, sbd
BLOCK = (32, 8, 1)
COLS_PER_BLOCK = 128  # each thread converts four elements 32 columns apart
# copy_2d: 16 bytes of elements a thread (at least four), 32 threads along a row (cuda/convert.cu COPY_ELEMS)
COPY_COLS_PER_BLOCK = {s: 32 * max(4, 16 // ITEMSIZE[s]) for s in MOVE_SUFFIXES}

CONVERSIONS = (
    *((s, d) for s in SUFFIXES for d in SUFFIXES if s != d),
    *((s, d) for s in INTEGER_SUFFIXES for d in SUFFIXES),
    ("s8", "s32"),
    *((s, f) for f in FP8_SUFFIXES for s in SUFFIXES),  # into FP8: saturated, rounded once
    *((f, d) for f in FP8_SUFFIXES for d in SUFFIXES),  # out of FP8: exact
)
CONVERT_KERNELS: dict[tuple[str, str], Kernel] = {
    (s, d): Kernel("convert", f"convert_{s}_{d}", SIGNATURE, waits_for_previous=True) for s, d in CONVERSIONS
}

# by move suffix (_dtypes.MOVE_SUFFIX of a dtype's: int32 through float32's entries, bits moved, never computed)
COPY_KERNELS: dict[str, Kernel] = {
    s: Kernel("convert", f"copy_2d_{s}", SIGNATURE, waits_for_previous=True) for s in MOVE_SUFFIXES
}
# src, dst, batch, rows, cols, and the source's signed strides along each, in elements: into a packed batch
GATHER_KERNELS: dict[str, Kernel] = {
    s: Kernel("convert", f"gather_3d_{s}", "PPqqqqqq", waits_for_previous=True) for s in MOVE_SUFFIXES
}


def grid(rows: int, cols: int, batch: int = 1, cols_per_block: int = COLS_PER_BLOCK) -> tuple[int, int, int]:
    """Launch grid for `batch` rows x cols regions (rows beyond 65535 x 8 and matrices beyond 65535 are
    walked in grid-stride loops)."""
    return (
        max(cdiv(cols, cols_per_block), 1),
        max(min(cdiv(rows, BLOCK[1]), MAX_GRID_YZ), 1),
        max(min(batch, MAX_GRID_YZ), 1),
    )


@lru_cache(maxsize=1024)  # called on every conversion and strided copy: the few shapes a program uses, once
def _launch(kernel: Kernel, rows: int, cols: int, batch: int = 1, cols_per_block: int = COLS_PER_BLOCK) -> FixedLaunch:
    """`kernel`'s launch over `batch` rows x cols regions: launch(dev, stream, src, dst, rows, cols, lds,
    ldd, batch, sbs, sbd)."""
    return FixedLaunch(kernel, grid(rows, cols, batch, cols_per_block), BLOCK, 0, len(SIGNATURE), ())


_THREAD = thread_state()  # each thread's state (its `with stream:` stack)
_SUFFIX = _dtypes.SUFFIX_OF  # a dtype's kernel suffix, for those already seen (the rest: the full route)


def astype(m, dtype, stream=None):
    """Matrix.astype: a new packed matrix of `dtype` on m's device, of m's shape and layout (a transposed
    view gives a transposed result; same dtype: a copy)."""
    dt = _dtypes.as_storage_dtype(dtype)
    done = _common_astype(m, dt, stream)
    if done is not None:
        return done
    dev = operand_device((m, "m"))
    if dt == m.dtype:
        return m.copy(stream=stream)
    to = _dtypes.suffix(dt)
    if m._sfx in _dtypes.FP8_SUFFIXES and to in _dtypes.FP8_SUFFIXES:
        # one FP8 format into the other: exactly into float32, then rounded once (saturated) out of it
        wide = astype(m, _dtypes.FLOAT32, stream)
        try:
            return astype(wide, dt, stream)
        finally:
            wide.free()
    if (m._sfx, to) not in CONVERT_KERNELS:
        if to in _dtypes.FP8_SUFFIXES:
            raise TypeError(
                f"astype: {_dtypes.name(m.dtype)} does not convert into {_dtypes.name(dt)} on the GPU (FP8 comes "
                "from the four floats: convert to float32 first)"
            )
        source = "int8" if to == "s32" else "nothing else"
        raise TypeError(
            f"astype: {_dtypes.name(m.dtype)} does not convert into {_dtypes.name(dt)} on the GPU (into {dt}: "
            f"from {source}); quantising floats, or narrowing integers, is the caller's: round and clip on the "
            f"host, then from_numpy(..., dtype=np.{dt})"
        )
    s = stream_handle(stream, dev)
    with dev.lock:
        _ = m.elements
        out = Matrix._allocate_like(m, dev, s, dt)
        if m.size:
            src, dst = m._operand(), out._operand()
            use_on(s, src[8], dst[8])
            if src[4] is None and not src[3]:  # the common call: one row-major matrix, its own storage
                _convert(src, dst, s, dev)
            else:
                for piece, target in paired_pieces(m, out):
                    _convert(piece._operand(), target._operand(), s, dev)
            done_on(s, src[8], dst[8])
    return out


def _common_astype(m, dt, stream) -> Matrix | None:
    """The common call, one live row-major 2-D matrix of gpumat's pool into another computed dtype, in as
    few steps as it takes: what the full route would do, tested directly; None for anything else (the
    same dtype, FP8 into FP8, no kernel for the pair, views stored transposed, batches, imported, freed or
    empty matrices), which then takes the full route and its messages."""
    if m.__class__ is not Matrix:
        return None
    src = m._operand()
    _, _, _, trans, batch, rows, cols, sfx, buf = src
    kernel = CONVERT_KERNELS.get((sfx, _SUFFIX.get(dt)))
    if kernel is None or trans or batch is not None or buf.__class__ is not DeviceBuffer or not rows or not cols:
        return None
    dev = buf.device
    dev.activate()
    s = LEGACY_STREAM if stream is None and not _THREAD.streams else stream_handle(stream, dev)
    with dev.lock:  # from the liveness test to the enqueue, no free() can slip in between
        if not buf.alive:
            return None
        out = Matrix._allocate(rows, cols, dev, s, dt)
        dst = out._operand()
        foreign = use_on(s, buf, dst[8])
        _launch(kernel, rows, cols)(dev, s, src[0], dst[0], rows, cols, src[1], dst[1], 1, 0, 0)
        if foreign is not None:
            mark_done(foreign, s, buf, dst[8])
    return out


def convert_region(src: Matrix, dst: Matrix, stream: int, dev) -> None:
    """dst = src converted, for two row-major 2-D matrices of one shape (operands ordered on `stream`)."""
    _convert(src._operand(), dst._operand(), stream, dev)


def _convert(src: tuple, dst: tuple, stream: int, dev) -> None:
    """convert_region of two matrices' _operand() tuples."""
    rows, cols = src[5], src[6]
    launch = _launch(CONVERT_KERNELS[(src[7], dst[7])], rows, cols)
    launch(dev, stream, src[0], dst[0], rows, cols, src[1], dst[1], 1, 0, 0)


def gather(src: int, dst: int, shape: tuple, strides: tuple, sfx: str, stream: int, dev) -> None:
    """dst (packed, C order) = the (batch, rows, cols) elements at src with signed `strides` in elements,
    queued on `stream` (the caller orders dst on it and holds the device lock): one launch for any layout."""
    batch, rows, cols = shape
    g = grid(rows, cols)
    GATHER_KERNELS[MOVE_SUFFIX[sfx]](
        (g[0], g[1], max(min(batch, MAX_GRID_YZ), 1)), BLOCK, src, dst, *shape, *strides, stream=stream, device=dev
    )


def copy_region(
    src: int,
    dst: int,
    rows: int,
    cols: int,
    lds: int,
    ldd: int,
    sfx: str,
    stream: int,
    dev,
    batch: int = 1,
    sbs: int = 0,
    sbd: int = 0,
) -> None:
    """dst = src, `batch` rows x cols regions of `sfx` elements between two device addresses (row and batch
    strides in elements), in one launch queued on `stream` (the caller orders the operands on it and holds
    the device lock)."""
    sfx = MOVE_SUFFIX[sfx]
    _launch(COPY_KERNELS[sfx], rows, cols, batch, COPY_COLS_PER_BLOCK[sfx])(
        dev, stream, src, dst, rows, cols, lds, ldd, batch, sbs, sbd
    )
