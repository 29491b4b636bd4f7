"""The float64 / float16 / bfloat16 kernels, launched directly on raw device buffers (before Matrix has dtypes).

Every operand lives inside a larger buffer at an odd element offset with a padded row stride; the
padding of inputs and the whole output start as NaN (the 16-bit pattern 0x7FF8 repeated, a NaN in all
four dtypes), so a kernel that reads outside its operand or misses an output element fails. Transpose
and conversions are checked bit for bit; arithmetic against float64 with bounds from the dtype's unit
roundoff and K.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
from cuda.bindings import driver

from gpumat import _dtypes, memory, sparse
from gpumat._dtypes import SUFFIXES
from gpumat.matmul.engine import IDENTITY
from gpumat.runtime import check, device
from gpumat.runtime.geometry import cdiv

pytestmark = pytest.mark.gpu

rng = np.random.default_rng(11)
BITS = {"f32": np.uint32, "f64": np.uint64, "f16": np.uint16, "bf16": np.uint16, "s8": np.uint8, "s32": np.uint32}
BITS.update({"e4m3": np.uint8, "e5m2": np.uint8})
SIZE = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "s8": 1, "s32": 4, "e4m3": 1, "e5m2": 1}
INTEGER = {"s8": np.int8, "s32": np.int32}
NAN16 = 0x7FF8
UNIT = {"f32": 2.0**-24, "f64": 2.0**-53, "f16": 2.0**-11, "bf16": 2.0**-8}  # unit roundoff


# ------------------------------------------------------------------------------------------- dtypes on the host
def to_bits(x, dt: str) -> np.ndarray:
    """float64 values -> storage bits of dtype dt, rounded once to nearest even."""
    if dt in INTEGER:  # integers as they are (the callers pass values the type holds)
        return np.asarray(x).astype(INTEGER[dt]).view(BITS[dt])
    if dt in _dtypes.FP8_SUFFIXES:  # saturated, then rounded once (the host's rule, checked on the CPU)
        return _dtypes.to_host_array(np.asarray(x, dtype=np.float64), _dtypes.float8(dt)).view(np.uint8)
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        if dt == "f64":
            return x.view(np.uint64).copy()
        if dt == "f32":
            return x.astype(np.float32).view(np.uint32)
        if dt == "f16":
            return x.astype(np.float16).view(np.uint16)
        m, e = np.frexp(np.where(np.isfinite(x), x, 0.0))  # bfloat16: 8 significant bits
        r = np.ldexp(np.rint(m * 256.0) / 256.0, e)
        r = np.where(np.isfinite(x), r, x).astype(np.float32)
        bits = (r.view(np.uint32) >> 16).astype(np.uint16)
        return np.where(np.isnan(x), np.uint16(0x7FC0), bits).astype(np.uint16)


def from_bits(b, dt: str) -> np.ndarray:
    b = np.asarray(b)
    if dt in INTEGER:
        return b.view(INTEGER[dt]).astype(np.float64)
    if dt in _dtypes.FP8_SUFFIXES:
        return b.view(_dtypes.float8(dt)).astype(np.float64)
    if dt == "bf16":
        return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return b.view({"f32": np.float32, "f64": np.float64, "f16": np.float16}[dt]).astype(np.float64)


def nan_fill(n: int, dt: str) -> np.ndarray:
    """Poison: NaN halves (an int8 buffer: 0xA5 bytes)."""
    if SIZE[dt] == 1:
        return np.full(n, 0xA5, dtype=np.uint8)
    return np.full(n * SIZE[dt] // 2, NAN16, dtype=np.uint16).view(BITS[dt])


# ------------------------------------------------------------------------------------------- device operands
class Operand:
    """A rows x cols operand at element offset `off` with row stride `ld` inside a NaN-padded device buffer; with
    `batch`, that many of them `bstride` elements apart (bits and downloads then batch x rows x cols)."""

    def __init__(
        self,
        bits: np.ndarray | None,
        dt: str,
        rows: int,
        cols: int,
        off: int = 0,
        ld: int | None = None,
        batch: int | None = None,
        bstride: int = 0,
    ):
        self.dt, self.rows, self.cols, self.off = dt, rows, cols, off
        self.ld = ld if ld is not None else max(cols, 1)
        self.batch, self.bstride = batch, bstride
        last = off + ((batch or 1) - 1) * bstride
        self.n = last + (rows - 1) * self.ld + cols + 5 if rows and cols else last + 5
        host = nan_fill(self.n, dt)
        if bits is not None:
            host[self.index()] = bits
        self.nbytes = self.n * SIZE[dt]
        self.base = memory.alloc(self.nbytes)
        memory.upload_contiguous(self.base, host)
        self.ptr = self.base + off * SIZE[dt]

    def index(self) -> np.ndarray:
        one = self.off + np.arange(self.rows)[:, None] * self.ld + np.arange(self.cols)[None, :]
        return one if self.batch is None else one + np.arange(self.batch)[:, None, None] * self.bstride

    def download(self) -> tuple[np.ndarray, np.ndarray]:
        """(the operand's bits, the whole buffer's bits)."""
        host = np.empty(self.n, dtype=BITS[self.dt])
        memory.download_contiguous(host, self.base)
        return host[self.index()], host

    def padding_untouched(self, host: np.ndarray) -> bool:
        mask = np.ones(self.n, dtype=bool)
        mask[self.index().ravel()] = False
        return bool(np.all(host[mask] == nan_fill(1, self.dt)[0]))

    def free(self):
        memory.free(self.base)


@pytest.fixture(autouse=True)
def _sync():
    device()
    yield
    check(driver.cuCtxSynchronize(), "cuCtxSynchronize")


def random_values(shape, dt: str, spread: int = 0) -> np.ndarray:
    """Random float64 values exactly representable in dt (never zero), magnitudes 2^-spread .. 2^spread; for
    int8, its integers (the two ends among them)."""
    if dt == "s8":
        return rng.choice([-128, 127, *range(-127, 127)], size=shape).astype(np.float64)
    x = rng.uniform(0.5, 1.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    if spread:
        x = np.ldexp(x, rng.integers(-spread, spread + 1, size=shape))
    return from_bits(to_bits(x, dt), dt)


# ------------------------------------------------------------------------------------------- transpose
T = importlib.import_module("gpumat.transpose")  # the module (gpumat.transpose names the function)
TR_SHAPES = [
    (1, 1),
    (1, 37),
    (37, 1),
    (63, 65),
    (129, 130),
    (128, 64),
    (143, 65),
    (257, 193),
    (260, 388),  # whole 128 x 128 tiles and edges, word-aligned rows (quads128's word path)
    (9001, 3),  # two 1-byte strips of a narrow width (rows of B continued across a strip's edge)
    (300, 7),
    (7, 300),
    (1000, 64),
    (64, 1000),
    (517, 127),
    (517, 126),
    (2, 2049),
    (257, 3),
    (33, 2),
    (1, 2),
    (4099, 2),
    (3, 4099),
    (4100, 3),
    (3, 4100),
    (20000, 17),
    (17, 20000),
    (20001, 24),  # many strips of an even width, the last one short and of odd height
    (6000, 6),
    (1, 5000),
    (5000, 1),
]


# (A offset, A stride, B offset, B stride) in elements, for a rows x cols A
LAYOUTS = {
    "contiguous": lambda r, c: (0, c, 0, r),
    "view": lambda r, c: (3, c + 3, 1, r + 5),  # odd offsets and strides
    "even": lambda r, c: (2, c + 4 - c % 2, 4, r + 6 - r % 2),  # 4-byte aligned, even strides
    "a_flat": lambda r, c: (8, c, 2, r + 6 - r % 2),  # A contiguous from 16 bytes on
    "b_flat": lambda r, c: (2, c + 4 - c % 2, 8, r),  # B contiguous from 16 bytes on
    "b_packed": lambda r, c: (3, c + 3, 0, r),  # A at odd offsets and strides, B packed and aligned
    "b_odd": lambda r, c: (8, c, 1, r + 1 + r % 2),  # A contiguous from 16 bytes on, B's rows off words
    "a16_b_any": lambda r, c: (16, c, 3, r + 5),  # A contiguous from 16 elements on, B 3 elements off, odd stride
}


def transpose_cases():
    for (name, dt), v in T.KERNELS.items():
        for rows, cols in TR_SHAPES:
            for layout, make in LAYOUTS.items():
                a_off, lda, b_off, ldb = make(rows, cols)
                if isinstance(v, T.NarrowVariant):
                    if not v.accepts(rows, cols, a_off * SIZE[dt], lda, b_off * SIZE[dt], ldb):
                        continue
                elif layout not in ("contiguous", "view") and name not in (
                    *T.TWO_BYTE_TILES,
                    *T.ONE_BYTE_TILES,
                    "sector_aligned",
                ):
                    continue  # these take paths by the rows' alignment and the tile's edges: every layout
                yield pytest.param(name, dt, (rows, cols), layout, id=f"{name}-{dt}-{rows}x{cols}-{layout}")


def check_transpose(v, dt: str, bits: np.ndarray, layout: tuple, grid: tuple, what: str) -> None:
    """Launch v over `bits` (rows x cols) laid out as (A's offset, A's stride, B's offset, B's stride), on
    `grid`: B must hold bits.T, and nothing around it may change."""
    rows, cols = bits.shape
    a_off, lda, b_off, ldb = layout
    a, b = Operand(bits, dt, rows, cols, off=a_off, ld=lda), Operand(None, dt, cols, rows, off=b_off, ld=ldb)
    try:
        if isinstance(v, T.NarrowVariant):  # the buffers are 256-byte aligned: the contract holds
            assert v.accepts(rows, cols, a.ptr, lda, b.ptr, ldb)
        v.kernel(grid, v.block, a.ptr, b.ptr, rows, cols, a.ld, b.ld, 1, 0, 0)  # one matrix
        got, whole = b.download()
        assert np.array_equal(got, bits.T), f"{what}: wrong bits"
        assert b.padding_untouched(whole), f"{what}: wrote outside B"
    finally:
        a.free()
        b.free()


@pytest.mark.parametrize("name,dt,shape,layout", list(transpose_cases()))
def test_transpose_moves_bits(name, dt, shape, layout):
    rows, cols = shape
    v = T.KERNELS[(name, dt)]
    info = np.iinfo(BITS[dt])
    bits = rng.integers(0, info.max, size=shape, dtype=BITS[dt], endpoint=True)  # any pattern, NaNs included
    check_transpose(v, dt, bits, LAYOUTS[layout](rows, cols), v.grid(rows, cols), f"{name}/{dt} {shape} {layout}")


def batched_transpose_cases():
    """Two cases of each kernel from the table above: its largest shape (several strips or tiles) and its
    smallest of another layout."""
    found = {}
    for case in transpose_cases():
        name, dt, shape, layout = case.values
        found.setdefault((name, dt), []).append((shape, layout))
    for (name, dt), cases in found.items():
        big = max(cases, key=lambda c: c[0][0] * c[0][1])
        small = min((c for c in cases if c[1] != big[1]), key=lambda c: c[0][0] * c[0][1], default=None)
        for shape, layout in (big, small) if small else (big,):
            yield pytest.param(name, dt, shape, layout, id=f"{name}-{dt}-{shape[0]}x{shape[1]}-{layout}")


@pytest.mark.parametrize("name,dt,shape,layout", list(batched_transpose_cases()))
def test_transpose_kernels_move_each_matrix_of_a_batch(name, dt, shape, layout):
    """Three matrices in one launch, a layer of the grid each (blockIdx.z), A's and B's matrices apart by
    strides that keep each one's alignment (256 bytes more than a matrix's span) and leave poisoned gaps
    between them that must stay as they are."""
    rows, cols = shape
    batch = 3
    v = T.KERNELS[(name, dt)]
    a_off, lda, b_off, ldb = LAYOUTS[layout](rows, cols)
    step = 256 // SIZE[dt]
    bsa, bsb = (cdiv(n, step) * step + step for n in (rows * lda, cols * ldb))
    info = np.iinfo(BITS[dt])
    bits = rng.integers(0, info.max, size=(batch, rows, cols), dtype=BITS[dt], endpoint=True)
    a = Operand(bits, dt, rows, cols, off=a_off, ld=lda, batch=batch, bstride=bsa)
    b = Operand(None, dt, cols, rows, off=b_off, ld=ldb, batch=batch, bstride=bsb)
    try:
        if isinstance(v, T.NarrowVariant):
            for z in range(batch):
                assert v.accepts(rows, cols, a.ptr + z * bsa * SIZE[dt], lda, b.ptr + z * bsb * SIZE[dt], ldb)
        v.kernel((*v.grid(rows, cols)[:2], batch), v.block, a.ptr, b.ptr, rows, cols, lda, ldb, batch, bsa, bsb)
        got, whole = b.download()
        for z in range(batch):
            assert np.array_equal(got[z], bits[z].T), f"matrix {z} of the batch: wrong bits"
        assert b.padding_untouched(whole), "wrote outside the batch's matrices"
    finally:
        a.free()
        b.free()


def _word_strides(r: int, c: int) -> tuple[int, int, int, int]:
    """A and B 1-byte matrices whose every row starts on a word, padded past the matrix's edge."""
    return 4, c + 4 + -c % 4, 8, r + 4 + -r % 4


@pytest.mark.parametrize("shape", [(100, 300), (129, 130), (131, 257), (64, 1000), (1000, 67), (3, 517), (258, 5)])
def test_quads128_moves_tiles_that_stick_out_of_a_as_words(shape):
    """quads128's checked word path: tiles cut by A's last rows or columns at every remainder mod 4 (a word
    across the edge moved byte by byte), with rows of A and B on words and padding after them that must
    stay untouched."""
    v = T.KERNELS[("quads128", "s8")]
    bits = rng.integers(0, 255, size=shape, dtype=np.uint8, endpoint=True)
    check_transpose(v, "s8", bits, _word_strides(*shape), v.grid(*shape), f"quads128 {shape} on words")


# The strip kernels that walk their strips blockIdx.y, + gridDim.y, ... (blockIdx.x for the row strips), with
# widths (heights) each takes (the even 2-byte strips even widths, the odd ones odd widths) and layouts of B:
# packed (an odd number of rows, so B's rows alternate between the halves of a word), padded to an even
# stride, two elements in at an even stride, one element in at an even stride, three elements in at an odd
# one, and packed runs after A's rows at odd strides or on words; each where the kernel accepts.
STRIP_WALKERS = {
    ("narrow_cols_quads16k", "s8"): (1, 3, 24, 37, 127),
    ("narrow_cols_flat_even16k", "f16"): (2, 24, 38, 126),
    ("narrow_cols_flat_parity16k", "bf16"): (2, 24, 38, 126),
    ("narrow_cols_flat_odd_parity16k", "f16"): (1, 3, 37, 127),
    # heights (it walks blockIdx.x, + gridDim.x): multiples of 8 and 32, whose stores share banks, among them
    ("narrow_rows_quads16k", "s8"): (1, 2, 3, 8, 24, 32, 37, 64, 100, 120, 127, 128),
}
STRIP_LAYOUTS = {
    "b_packed": lambda r, c: (0, c, 0, r),
    "b_even_stride": lambda r, c: (0, c, 0, r + 1),
    "b_word_in": lambda r, c: (0, c, 2, r + 2 + r % 2),
    "b_off_words": lambda r, c: (0, c, 1, r + 2 - r % 2),
    "a16_b_any": LAYOUTS["a16_b_any"],
    "a_view_b_run": lambda r, c: (3, c + 1 + c % 2, 5, r),  # an odd stride: A's rows at every shift
    "a_words_b_run": lambda r, c: (4, c + 4 + -c % 4, 1, r),
}


def strip_walker_cases():
    for (name, dt), widths in STRIP_WALKERS.items():
        v = T.KERNELS[(name, dt)]
        for size in widths:
            if v.axis == "cols":
                cols, rows = size, 7 * v.strip(1 << 20, size) + 5  # 7 strips and a part: 8 strips, odd
            else:
                rows, cols = size, 7 * v.strip(size, 1 << 20) + 5
            for layout, make in STRIP_LAYOUTS.items():
                a_off, lda, b_off, ldb = make(rows, cols)
                if v.accepts(rows, cols, a_off * SIZE[dt], lda, b_off * SIZE[dt], ldb):
                    yield name, dt, rows, cols, layout


@pytest.mark.parametrize("blocks", [1, 2, 3])
@pytest.mark.parametrize("name,dt,rows,cols,layout", list(strip_walker_cases()))
def test_a_strip_kernel_with_fewer_blocks_than_strips_moves_each_once(name, dt, rows, cols, layout, blocks):
    """A strip kernel walks strips blockIdx.y, + gridDim.y, ...: with fewer blocks than strips (1-3 blocks
    for 7 strips and a part; the launcher's grid is capped at 65535) every block moves several, the last
    one partial, each once."""
    v = T.KERNELS[(name, dt)]
    walked = 1 if v.axis == "cols" else 0  # the grid's axis the strips are dealt over
    assert v.grid(rows, cols)[walked] == 8
    info = np.iinfo(BITS[dt])
    bits = rng.integers(0, info.max, size=(rows, cols), dtype=BITS[dt], endpoint=True)
    where = STRIP_LAYOUTS[layout](rows, cols)
    grid = (1, blocks, 1) if walked else (blocks, 1, 1)
    check_transpose(v, dt, bits, where, grid, f"{name}/{dt} {rows} x {cols}, {blocks} blocks, {layout}")


def test_every_strip_walker_takes_several_layouts():
    """The cases above are not thinned to nothing by the kernels' contracts: each kernel and width meets at
    least two of B's layouts."""
    found = {}
    for name, dt, rows, cols, _layout in strip_walker_cases():
        size = cols if T.KERNELS[(name, dt)].axis == "cols" else rows
        found[(name, size)] = found.get((name, size), 0) + 1
    assert {(name, size) for (name, _), sizes in STRIP_WALKERS.items() for size in sizes} == set(found)
    assert min(found.values()) >= 2


# ------------------------------------------------------------------------------------------- dot
D = importlib.import_module("gpumat.dot")


@pytest.fixture(scope="module")
def scratch():
    """The partial sums' buffer, and a device buffer for the result (the kernel writes through any pointer:
    gm.dot gives it mapped host memory; a device buffer here, NaN until written)."""
    ptr = memory.alloc(D.SCRATCH_BYTES + 8)
    check(driver.cuMemsetD8(ptr, 0, D.SCRATCH_BYTES), "cuMemsetD8")
    yield ptr
    memory.free(ptr)


def run_dot(dt, x: Operand, y: Operand, scratch, flat: bool) -> float:
    n = x.rows * x.cols
    grid = (D.grid_blocks(n, device().sm_count, dt), 1, 1)
    result = scratch + D.SCRATCH_BYTES
    memory.upload_contiguous(result, np.array([np.nan]))
    if flat:
        D.FLAT_KERNELS[dt](grid, (D.THREADS, 1, 1), x.ptr, y.ptr, n, scratch, result)
    else:
        D.STRIDED_KERNELS[dt](grid, (D.THREADS, 1, 1), x.ptr, y.ptr, x.rows, x.cols, x.ld, y.ld, scratch, result)
    out = np.empty(1, dtype=np.float64)
    memory.download_contiguous(out, result)
    return float(out[0])


@pytest.mark.parametrize("dt", SUFFIXES)
@pytest.mark.parametrize(
    "shape,offs,flat",
    [
        ((1, 1), (0, 0), True),
        ((1, 1001), (1, 1), True),
        ((1, 1001), (0, 3), True),
        ((257, 129), (0, 0), True),
        ((1024, 1024), (2, 2), True),
        ((257, 129), (1, 2), False),
        ((3, 5000), (3, 0), False),
    ],
)
def test_dot(dt, shape, offs, flat, scratch):
    rows, cols = shape
    xv, yv = random_values(shape, dt, 4), random_values(shape, dt, 4)
    ld = cols if flat else cols + 3
    x = Operand(to_bits(xv, dt), dt, rows, cols, off=offs[0], ld=ld)
    y = Operand(to_bits(yv, dt), dt, rows, cols, off=offs[1], ld=cols if flat else cols + 1)
    try:
        got = run_dot(dt, x, y, scratch, flat)
        again = run_dot(dt, x, y, scratch, flat)
    finally:
        x.free()
        y.free()
    prods = (xv * yv).ravel()
    ref = math.fsum(prods.tolist())
    bound = (rows * cols + 2) * 2.0**-52 * float(np.abs(prods).sum())
    assert abs(got - ref) <= bound, (got, ref, bound)
    assert np.float64(got).tobytes() == np.float64(again).tobytes(), "not deterministic"


# ------------------------------------------------------------------------------------------- matmul
MM = importlib.import_module("gpumat.matmul.engine")
MM_SHAPES = [(1, 1, 1), (17, 33, 65), (64, 64, 16), (65, 63, 17), (130, 67, 129), (3, 200, 1000)]


MM_TEACHING = ("naive", "tiled16", "tiled32", "tiled16x64")  # the documents' kernels, one thread an element of C


def matmul_cases():
    """(variant, input dtype, output dtype): the teaching kernels in every dtype, the SIMT kernel's pairs
    (int8 -> int32 among them)."""
    for name in MM_TEACHING:
        for dt, out_dt in MM.VARIANTS[name].kernels:
            yield pytest.param(MM.VARIANTS[name], dt, out_dt, id=f"{name}-{dt}")
    for dt, out_dt in MM.VARIANTS["simt64x64"].kernels:
        yield pytest.param(MM.VARIANTS["simt64x64"], dt, out_dt, id=f"simt-{dt}-{out_dt}")


def test_matmul_cases_cover_every_dtype():
    cases = [(p.values[0].name, p.values[1], p.values[2]) for p in matmul_cases()]
    for name in MM_TEACHING:
        assert {(dt, out) for n, dt, out in cases if n == name} == {(s, s) for s in ("f32", "f64", "f16", "bf16")}
    simt = {(dt, out) for n, dt, out in cases if n == "simt64x64"}
    assert simt == {("f64", "f64"), ("f16", "f16"), ("f16", "f32"), ("bf16", "bf16"), ("bf16", "f32"), ("s8", "s32")}


@pytest.mark.parametrize("v,dt,out_dt", list(matmul_cases()))
@pytest.mark.parametrize("mnk", MM_SHAPES)
@pytest.mark.parametrize("layout", ["contiguous", "view"])
def test_matmul(v, dt, out_dt, mnk, layout):
    m, n, k = mnk
    av, bv = random_values((m, k), dt), random_values((k, n), dt)
    view = layout == "view"
    a = Operand(to_bits(av, dt), dt, m, k, off=1 if view else 0, ld=k + 3 if view else k)
    b = Operand(to_bits(bv, dt), dt, k, n, off=3 if view else 0, ld=n + 1 if view else n)
    c = Operand(None, out_dt, m, n, off=1 if view else 0, ld=n + 2 if view else n)
    try:
        assert v.args == "plain" and not v.persistent  # launched here as a plain tiled grid
        v.kernels[(dt, out_dt)](
            v.grid(m, n, 1, 1), v.block, a.ptr, b.ptr, c.ptr, m, n, k, a.ld, b.ld, c.ld, 0, 0, 0, *IDENTITY
        )
        got_bits, whole = c.download()
        assert c.padding_untouched(whole), "wrote outside C"
    finally:
        a.free()
        b.free()
        c.free()
    got = from_bits(got_bits, out_dt)
    ref = av @ bv
    acc_unit = {"f64": 2.0**-53, "s8": 0.0}.get(dt, 2.0**-24)  # int8: the int32 sums, exact
    bound = 1.01 * k * acc_unit * (np.abs(av) @ np.abs(bv)) + UNIT.get(out_dt, 0.0) * np.abs(ref) + 1e-300
    err = np.abs(got - ref)
    assert np.all(np.isfinite(got)), "unwritten (NaN) elements of C"
    assert np.all(err <= bound), (
        f"max error {err.max()} over bound at {np.unravel_index(np.argmax(err - bound), err.shape)}"
    )


# ------------------------------------------------------------------------------------------- CSR x dense
SP = importlib.import_module("gpumat.spmm")  # the module (gpumat.spmm is also the function's name)


def csr(rows, k, max_nnz):
    lengths = rng.integers(0, max_nnz + 1, size=rows)
    lengths[rng.integers(0, rows)] = 3 * max_nnz  # one long row
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    indices = rng.integers(0, k, size=int(indptr[-1])).astype(np.int32)  # repeats allowed
    return indptr, indices


def schedule(indptr, split):
    lengths = np.diff(indptr)
    chunk_row, chunk_start, long_rows, chunk_ptr = [], [], [], [0]
    for r, length in enumerate(lengths):
        if length > split:
            long_rows.append(r)
            for s in range(int(indptr[r]), int(indptr[r + 1]), split):
                chunk_row.append(r)
                chunk_start.append(s)
            chunk_ptr.append(len(chunk_row))
    return (
        np.array(chunk_row, np.int32),
        np.array(chunk_start, np.int64),
        np.array(long_rows, np.int32),
        np.array(chunk_ptr, np.int32),
    )


def upload_raw(arr: np.ndarray) -> int:
    ptr = memory.alloc(max(arr.nbytes, 16))
    memory.upload_contiguous(ptr, np.ascontiguousarray(arr))
    return ptr


@pytest.mark.parametrize("dt", sparse.VALUE_SUFFIXES)
@pytest.mark.parametrize("n", [1, 5, 8, 33, 130])
@pytest.mark.parametrize(
    "kind",
    [
        "scalar",
        "vector2",
        "vector8",
        "vector32",
        "tile8_v4",
        "tile32_v4",
        "tile128_v4",
        "tile8_v1",
        "tile32_v1",
        "to_dense",
    ],
)
def test_csr(dt, n, kind):
    rows, k, split = 37, 50, 8
    indptr, indices = csr(rows, k, 12)
    data = random_values(indices.shape, dt)
    bv = random_values((k, n), dt)
    v4 = kind.endswith("_v4")
    if kind == "to_dense":
        n = k
    b = Operand(
        to_bits(bv, dt),
        dt,
        k,
        bv.shape[1],
        off=0 if v4 else 1,
        ld=cdiv(bv.shape[1], 4) * 4 + 4 if v4 else bv.shape[1] + 3,
    )
    c = Operand(None, dt, rows, n, off=0 if v4 else 3, ld=(cdiv(n, 4) * 4 + 4) if v4 else n + 1)
    chunk_row, chunk_start, long_rows, chunk_ptr = schedule(indptr, split)
    n_chunks, n_long = len(chunk_row), len(long_rows)
    ldp = cdiv(n, 4) * 4
    bufs = [upload_raw(a) for a in (indptr, indices, to_bits(data, dt), chunk_row, chunk_start, long_rows, chunk_ptr)]
    p_indptr, p_indices, p_data, p_crow, p_cstart, p_long, p_cptr = bufs
    partial = memory.alloc(max(n_chunks * ldp * SIZE[dt], 16))
    try:
        if kind == "scalar":
            SP.SCALAR_BY_DTYPE[dt](
                (cdiv(rows, 256), n, 1), (256, 1, 1), p_indptr, p_indices, p_data, b.ptr, c.ptr, rows, n, b.ld, c.ld
            )
        elif kind == "to_dense":
            check(driver.cuMemsetD8(c.base, 0, c.nbytes), "cuMemsetD8")
            sparse.TO_DENSE_BY_DTYPE[dt](
                (cdiv(rows, 256), 1, 1), (256, 1, 1), p_indptr, p_indices, p_data, c.ptr, rows, c.ld
            )
        else:
            if kind.startswith("vector"):
                lanes = int(kind[6:])
                chunk_blocks = cdiv(n_chunks, 8)
                grid = (chunk_blocks + cdiv(rows, 256 // lanes), n, 1)
                kern, extra = SP.VECTOR_BY_DTYPE[dt], (lanes,)
            else:
                tile, vec = (int(x) for x in kind[4:].split("_v"))
                groups = 256 * vec // tile
                chunk_blocks = cdiv(n_chunks, groups)
                grid = (chunk_blocks + cdiv(rows, groups), cdiv(n, tile), 1)
                kern, extra = SP.TILE_KERNELS_BY_DTYPE[dt][(tile, vec)], ()
            kern(
                grid,
                (256, 1, 1),
                p_indptr,
                p_indices,
                p_data,
                b.ptr,
                c.ptr,
                partial,
                p_crow,
                p_cstart,
                rows,
                n,
                b.ld,
                c.ld,
                ldp,
                split,
                n_chunks,
                chunk_blocks,
                *extra,
            )
            if n_long:
                SP.REDUCE_BY_DTYPE[dt](
                    (cdiv(n, 32), cdiv(n_long, 8), 1), (32, 8, 1), partial, p_long, p_cptr, c.ptr, n_long, n, ldp, c.ld
                )
        got_bits, whole = c.download()
        assert c.padding_untouched(whole) or kind == "to_dense", "wrote outside C"
    finally:
        for p in (*bufs, partial):
            memory.free(p)
        b.free()
        c.free()
    dense, magnitude = np.zeros((rows, k)), np.zeros((rows, k))
    at = (np.repeat(np.arange(rows), np.diff(indptr)), indices)
    np.add.at(dense, at, data)
    # repeated entries are separate terms of the kernel's sums: the error bound scales with the sum of
    # their magnitudes, not with |their sum| (which cancels to nearly 0 for a pair like 0.7 and -0.69)
    np.add.at(magnitude, at, np.abs(data))
    got = from_bits(got_bits, dt)
    if kind == "to_dense":
        ref, bound = dense, 4 * UNIT[dt] * magnitude + 1e-300
    else:
        ref = dense @ bv
        bound = 1.01 * 40 * UNIT[dt] * (magnitude @ np.abs(bv)) + 1e-300
    assert np.all(np.isfinite(got)), "unwritten (NaN) elements of C"
    assert np.all(np.abs(got - ref) <= bound)


# ------------------------------------------------------------------------------------------- astype
CV = importlib.import_module("gpumat.convert")
SPECIALS = [
    0.0,
    -0.0,
    np.inf,
    -np.inf,
    np.nan,
    1e300,
    -1e300,
    1e-300,
    65504.0,
    65519.99,
    65520.0,
    3.4e38,
    3.5e38,
    1 + 2.0**-11,
    1 + 3 * 2.0**-11,
    1 + 2.0**-8,
    1 + 3 * 2.0**-8,
    1 + 2.0**-24,
    1 + 3 * 2.0**-24,
    1 + 2.0**-24 + 2.0**-40,
    2.0**-24,
    3 * 2.0**-26,
    1.0 / 3,
]


@pytest.mark.parametrize("pair", list(CV.CONVERT_KERNELS))
@pytest.mark.parametrize("shape", [(1, 1), (5, 131), (300, 3), (129, 257)])
def test_convert(pair, shape):
    src_dt, dst_dt = pair
    rows, cols = shape
    if src_dt in INTEGER:  # every integer the type holds may come: its two ends among random ones
        info = np.iinfo(INTEGER[src_dt])
        vals = rng.integers(info.min, info.max, size=rows * cols, endpoint=True).astype(np.float64)
        vals[: min(4, vals.size)] = [info.min, info.max, 0, -1][: min(4, vals.size)]
        if src_dt == "s32":  # and ones float32 and the halves must round (odd beyond 2^24, ties)
            vals[4:8] = [2.0**24 + 1, 2.0**24 + 3, -(2.0**30) - 64, 2049][: max(0, min(4, vals.size - 4))]
    else:
        vals = random_values(shape, "f64", spread=20).ravel()
        vals[: min(len(SPECIALS), vals.size)] = SPECIALS[: vals.size]
    rng.shuffle(vals)
    src_bits = to_bits(vals.reshape(shape), src_dt)
    s = Operand(src_bits, src_dt, rows, cols, off=1, ld=cols + 3)
    d = Operand(None, dst_dt, rows, cols, off=3, ld=cols + 1)
    try:
        CV.CONVERT_KERNELS[pair](CV.grid(rows, cols), CV.BLOCK, s.ptr, d.ptr, rows, cols, s.ld, d.ld, 1, 0, 0)
        got, whole = d.download()
        assert d.padding_untouched(whole), "wrote outside dst"
    finally:
        s.free()
        d.free()
    src_vals = from_bits(src_bits, src_dt)
    want = to_bits(src_vals, dst_dt)
    nan = np.isnan(src_vals)
    assert np.all(np.isnan(from_bits(got, dst_dt)[nan]))
    assert np.array_equal(got[~nan], want[~nan]), f"{pair}: first mismatch at {np.argwhere(got != want)[:3]}"
