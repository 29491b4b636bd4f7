"""The plan of a product emulated on the INT8 tensor cores by the Chinese remainder theorem (Ozaki scheme II).

A float64 (or float32) product C = A @ B is computed as integers: each row of A and each column of B is
scaled by a power of two that puts its 2-norm below 2^Q, and truncated toward zero (A' = trunc(diag(2^ea)
A), B' = trunc(B diag(2^eb))). The integer product A' B' is found exactly from its residues modulo pairwise
coprime moduli m_1..m_N of at most 256: each residue of A' and B' is a symmetric int8, each product of
residues (an INT8 GEMM, int32 accumulation) is exact while K <= OZAKI_MAX_K and is kept modulo its modulus,
an int8 residue again, and the Chinese remainder theorem gives A' B' back from the N residues of each
element as long as |A' B'| < M / 2 (M = m_1 ... m_N).
Then C ~ diag(2^-ea) A' B' diag(2^-eb).

Q, the plan's budget, is the largest with 2^(2Q) <= M / 4 (and a margin for the norms' rounding): by
Cauchy-Schwarz every |(A' B')_ij| <= |A'_i| |B'_j| < 2^(2Q) <= M / 4 whatever the signs (M / 2 is what the
CRT needs; the margin keeps the reconstruction's rounded estimate of the multiple of M exact). Scaling by
the norm rather than by the largest element (K 2^(2P) <= M / 4 would bound the largest) gives a line whose
size sits in a few elements up to log2(K) / 2 more bits: the lines that span many binades, where the
truncation loses most.

Every step is integer or done in a fixed order, so the bits repeat. The error is the truncation's: each
element of row i of A is off by less than one unit 2^-ea_i, each of column j of B by less than 2^-eb_j, so
|C - A B| < 2^-ea_i sum_k |B_kj| + sum_k |A_ik| 2^-eb_j + K 2^-(ea_i + eb_j) elementwise (plus the
reconstruction's and the result's roundings). The plan's `bits`, P, is what the bound guarantees at the
least: the largest element of every line keeps P bits (the flattest line, all of one size, has a norm of
sqrt(K) times its largest); lines whose size sits in fewer elements keep up to Q. Sixteen moduli (Q = 61)
give float64's 53 bits for K up to 2^16, eight or nine float32's 24.

This module holds the plan (which moduli, the budget and bits, the reconstruction's constants: pure
functions) and `emulated`, which runs the steps on the GPU (cuda/ozaki.cu: the exponents, residues and
reconstruction; the INT8 products on the wgmma body's s8 tiles on sm_90, elsewhere on a simple __dp4a
kernel). tests/ozaki_reference.py carries the same steps out on the host, the specification the kernels are
tested against step by step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

from .._dtypes import ITEMSIZE, suffix
from ..matrix import Matrix, plain_2d
from ..memory import device_pool
from ..memory.ordering import done_on, use_on
from ..operands import operand_device
from ..runtime import memops, tensormaps
from ..runtime.geometry import MAX_GRID_YZ, cdiv
from ..runtime.kernels import Kernel
from ..runtime.streams import LEGACY_STREAM, stream_handle, synchronize_stream
from .maps import c_map_args, tensor_map
from .problem import Target
from .variants import IDENTITY, NO_MAP, VARIANTS, WGMMA_SMEM

# Pairwise coprime moduli of at most 256 (a symmetric residue fits int8), largest first: 2^8, then
# 255 = 3 5 17, 253 = 11 23, 247 = 13 19, 217 = 7 31, and primes. Sixteen: their product M < 2^126 gives a
# budget of 61 bits (integers below 2^62: the residue kernels' limit), float64's 53 at K up to 2^16, and keeps
# the double-double reconstruction's error (about 2^-87 M) far below the truncation's.
OZAKI_MODULI = (256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197, 193)
# the K up to which a modulus' INT8 GEMM is exact in int32: |r_a r_b| <= 128 * 128 a term, K of them
# at most 2^31 - 1
OZAKI_MAX_K = (2**31 - 1) // (128 * 128)
# the most bits one may ask for: float64's significand
OZAKI_MAX_BITS = 53
# the norms' sums are rounded (by less than 2^-36 relative for K <= OZAKI_MAX_K): the budget keeps
# 2^(2Q) (1 + 2^-NORM_MARGIN_BITS) <= M / 4
NORM_MARGIN_BITS = 20


@dataclass(frozen=True)
class OzakiPlan:
    """moduli: m_1..m_N; bits: P, the bits the largest element of every line keeps at K = k (more where a
    line's size sits in few elements); k: the K the bits were worked out for."""

    moduli: tuple[int, ...]
    bits: int
    k: int

    @property
    def budget(self) -> int:
        """Q: each line's 2-norm is scaled below 2^Q (ozaki_budget)."""
        return ozaki_budget(self.moduli)

    @property
    def modulus(self) -> int:
        """M, the product of the moduli."""
        return math.prod(self.moduli)

    @property
    def weights(self) -> tuple[int, ...]:
        """The CRT weights w_l = (M / m_l) ((M / m_l)^-1 mod m_l): x = sum(r_l w_l) mod M for the residues r_l of
        x (exact integers below M)."""
        return crt_weights(self.moduli)


@cache
def crt_weights(moduli: tuple[int, ...]) -> tuple[int, ...]:
    big = math.prod(moduli)
    return tuple((big // m) * pow(big // m, -1, m) for m in moduli)


@cache
def ozaki_budget(moduli: tuple[int, ...]) -> int:
    """Q, the largest with 2^(2Q) (1 + 2^-NORM_MARGIN_BITS) <= M / 4: lines scaled to 2-norms below 2^Q keep
    every element of A' B' below M / 4 in magnitude (Cauchy-Schwarz), so that the reconstruction's estimate
    of the multiple of M to take away (within 2^-40 M) cannot round the wrong way. Negative where no
    budget fits."""
    quarter = math.prod(moduli) // 4
    q = (quarter << NORM_MARGIN_BITS) // ((1 << NORM_MARGIN_BITS) + 1)  # floor(M / 4 / (1 + 2^-20))
    return (q.bit_length() - 1) // 2 if q >= 1 else -1


def ozaki_bits(moduli: tuple[int, ...], k: int) -> int:
    """P, the bits the largest element of every line keeps at inner dimension k (at least): a line's sum of
    squares scaled by its largest's power of two is below 4k, so its norm below 2^(h + 1) times that power
    with h <= (1 + ceil(log2 k)) // 2, and the largest's integer is at least 2^(Q - 1 - h). Negative or zero
    where none fits."""
    return ozaki_budget(moduli) - (1 + (k - 1).bit_length()) // 2


def ozaki_plan(k: int, count: int | None = None, bits: int | None = None) -> OzakiPlan:
    """The plan for products of inner dimension k: `count` moduli (the largest ones), or the fewest that give
    at least `bits` bits (float64's 53 or float32's 24, say). ValueError where k is past OZAKI_MAX_K, or no count
    of the table's moduli reaches the bits."""
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"Ozaki scheme: K must be a positive int, got {k!r}")
    if k > OZAKI_MAX_K:
        raise ValueError(f"Ozaki scheme: K = {k} is past {OZAKI_MAX_K}, where the INT8 products may overflow int32")
    if (count is None) == (bits is None):
        raise ValueError("Ozaki scheme: give the number of moduli or the bits wanted, one of the two")
    if count is not None:
        if not isinstance(count, int) or not 1 <= count <= len(OZAKI_MODULI):
            raise ValueError(f"Ozaki scheme: 1 to {len(OZAKI_MODULI)} moduli, got {count!r}")
        p = ozaki_bits(OZAKI_MODULI[:count], k)
        if p < 1:
            raise ValueError(f"Ozaki scheme: {count} moduli leave no bits for K = {k}")
        return OzakiPlan(OZAKI_MODULI[:count], p, k)
    if not isinstance(bits, int) or not 1 <= bits <= OZAKI_MAX_BITS:
        raise ValueError(f"Ozaki scheme: 1 to {OZAKI_MAX_BITS} bits, got {bits!r}")
    for n in range(1, len(OZAKI_MODULI) + 1):
        if ozaki_bits(OZAKI_MODULI[:n], k) >= bits:
            return OzakiPlan(OZAKI_MODULI[:n], ozaki_bits(OZAKI_MODULI[:n], k), k)
    raise ValueError(f"Ozaki scheme: the {len(OZAKI_MODULI)} moduli give fewer than {bits} bits at K = {k}")


# the operand types the scheme takes (the kernels' suffixes) and the bits their modes keep
MODE_BITS = {"f64": 53, "f32": 24}
DTYPES = tuple(MODE_BITS)
# A mode's budget: its bits and this many more, for the lines whose elements span many binades (their small
# elements keep what the budget holds past their line's scale): float64's 61 of 16 moduli, float32's 34 of 9.
# Fifteen moduli would give flat float64 lines their 53 bits up to K = 256, but on standard normal elements
# times 2^[-30, 30] they were about 100 times less accurate than float64's own product (the host reference,
# K = 256), sixteen 23 times more accurate than cuBLAS DGEMM (the H200, 4096^3)
HEADROOM_BITS = 8


def plan_for(sfx: str, k: int) -> OzakiPlan:
    """The plan of precision "fp64_int8" (float64 operands, sfx "f64") or "fp32_int8" (float32, "f32") at
    inner dimension k: the fewest moduli whose budget reaches the mode's bits and HEADROOM_BITS more and
    whose flattest line keeps the mode's bits at this K; all of them where none does."""
    want = MODE_BITS[sfx]
    for n in range(1, len(OZAKI_MODULI) + 1):
        moduli = OZAKI_MODULI[:n]
        if ozaki_budget(moduli) >= want + HEADROOM_BITS and ozaki_bits(moduli, k) >= want:
            return ozaki_plan(k, count=n)
    return ozaki_plan(k, count=len(OZAKI_MODULI))


# --- the launches (cuda/ozaki.cu), in the order of the steps ---------------------------------------------------
# each by the operands' type (DTYPES): A, lda, rows, cols, budget, e
ROW_EXPONENTS = {t: Kernel("ozaki", f"ozaki_row_exponents_{t}", "PqiiiP") for t in DTYPES}
COL_EXPONENTS = {t: Kernel("ozaki", f"ozaki_col_exponents_{t}", "PqiiiP") for t in DTYPES}
# X, ldx, rows, cols, e, count, out, out's row stride and layer stride (bytes)
ROW_RESIDUES = {t: Kernel("ozaki", f"ozaki_row_residues_{t}", "PqiiPiPqq") for t in DTYPES}
COL_RESIDUES = {t: Kernel("ozaki", f"ozaki_col_residues_{t}", "PqiiPiPqq") for t in DTYPES}
# ra, rb, out, M, N, K, lda, ldb, ldc, layer_a, layer_b, layer_c: the residues of the products, int8 (GPUs
# without wgmma)
RESIDUE_PRODUCTS = Kernel("ozaki", "ozaki_residue_products", "PPPiiiqqqqqq")
# the rows of precisions "fp64_int8" and "fp32_int8" (variants.py): their kernel, the reconstruction
ROWS = {"f64": "ozaki_fp64_int8", "f32": "ozaki_fp32_int8"}
CRT = {t: VARIANTS[row].kernels[(t, t)] for t, row in ROWS.items()}
PRODUCT_TILE = 64  # ozaki_residue_products' tile of C, a side
CRT_COLUMNS = 4  # the reconstruction's adjacent elements a thread (cuda/ozaki.cu), 256 threads a block
COL_GROUPS = 32  # the column exponents' groups of rows (cuda/ozaki.cu), their block (32, COL_GROUPS)
# the launches by operand type and step, for a test that checks each step's output against the host reference
STEPS = {
    t: {
        "row_exponents": ROW_EXPONENTS[t],
        "col_exponents": COL_EXPONENTS[t],
        "row_residues": ROW_RESIDUES[t],
        "col_residues": COL_RESIDUES[t],
        "residue_products": RESIDUE_PRODUCTS,
        "crt": CRT[t],
    }
    for t in DTYPES
}
# the INT8 products on the wgmma body (sm_90a): tile (BM, BN) -> its entry (the int8 residues K-major, C the
# sums' int8 residues, product l's modulo the l-th modulus; maps of A, B and C, C, M, N, K, ldc, k_chunk,
# c_store, batch, c_layer, batched)
WGMMA_S8 = {
    # (the wgmma kernel waits for the grid before it: launched as its programmatic dependent on sm_90)
    tile: Kernel(
        "matmul_wgmma_kmajor",
        f"matmul_wgmma{tile[0]}x{tile[1]}bt_s8_residues",
        "TTTPiiiqiiiqi",
        WGMMA_SMEM[tile],
        waits_for_previous=True,
    )
    for tile in ((128, 256), (128, 128))
}
WIDE_N = 2048  # C at least this wide: the 128 x 256 tile (else 128 x 128; PROVISIONAL, not measured)
K_ALIGN = 16  # the residue rows' length in bytes is K rounded up to this
# A panel of C's rows at a time: its share of A's residues and of the products' residues within this many
# bytes of scratch (with 16 moduli a 4096^2 product in one panel, 8192^2 in 4 of 2048 rows), so that the
# scratch stays below the pool's cache limit and is reused call after call rather than allocated anew
PANEL_BYTES = 512 << 20
PANEL_ROW_STEP = 128


LIMB_BITS, LIMBS = 32, 4  # the weights and M in four 32-bit limbs (M < 2^126): each limb's sum exact


def weights_of(count: int) -> list[float]:
    """What the reconstruction (ozaki_crt_f64, _f32) reads for the first `count` moduli: the four 32-bit limbs
    of each CRT weight (the most significant first, each exact in a double), the limbs of M, then M rounded to
    a double."""
    moduli = OZAKI_MODULI[:count]
    mask = (1 << LIMB_BITS) - 1
    out = []
    for w in (*crt_weights(moduli), math.prod(moduli)):
        out += [float((w >> (LIMB_BITS * (LIMBS - 1 - j))) & mask) for j in range(LIMBS)]
    return [*out, float(math.prod(moduli))]


class _Weights:
    """One device's table of the CRT weights for every count of moduli (weights_of), uploaded once."""

    def __init__(self, dev):  # made by Device.scratch_for, the device's context current
        table = [x for c in range(1, len(OZAKI_MODULI) + 1) for x in weights_of(c)]
        self.ptr = memops.alloc_unpooled(8 * len(table))
        host = np.array(table, dtype=np.float64)
        memops.copy_to_device(self.ptr, host.ctypes.data, host.nbytes, None)
        # a copy from pageable memory may return before its DMA lands, and the first product may run on a
        # stream that does not wait for the legacy stream the copy ran on: wait for it here, once a device
        synchronize_stream(LEGACY_STREAM)

    def at(self, count: int) -> int:
        before = sum(LIMBS * (c + 1) + 1 for c in range(1, count))
        return self.ptr + 8 * before


def weights_on(dev, count: int) -> int:
    """The device address of the reconstruction's table (weights_of(count)) on dev, uploaded on first use."""
    return dev.scratch_for("ozaki.weights", _Weights).at(count)


def emulated(
    a: Matrix,
    b: Matrix,
    *,
    bits: int | None = None,
    count: int | None = None,
    stream=None,
    panel_bytes: int = PANEL_BYTES,
) -> Matrix:
    """C = A @ B for float64 or float32 A (M x K) and B (K x N) of one dtype, computed as integers by Ozaki
    scheme II (see the module docstring): the fewest moduli that give `bits` bits, or `count` of them (by
    default plan_for's, the plan of the dtype's precision mode); C's rows in panels whose scratch (A's
    residues and the products' residues) stays within `panel_bytes`. A new row-major M x N Matrix of the
    operands' dtype. Outputs of a row of A or a column of B holding an Inf or a NaN are the plain FP64 dot product's.
    Deterministic. ValueError for shapes that do not chain, K past OZAKI_MAX_K, or a batch; TypeError for
    another dtype; all before anything is launched."""
    dev = operand_device((a, "A"), (b, "B"))
    for x, name in ((a, "A"), (b, "B")):
        if x.ndim != 2:
            raise ValueError(f"the emulated product takes 2-D matrices, got {name} of shape {x.shape}")
        if x.dtype not in (np.float64, np.float32) or x.dtype != a.dtype:
            raise TypeError(f"the emulated product takes float64 or float32 operands of one dtype, got A of "
                            f"{a.dtype} and B of {b.dtype}")  # fmt: skip
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not chain (K {k} != {k2})")
    if not isinstance(panel_bytes, int) or panel_bytes < 1:
        raise ValueError(f"the emulated product's panel_bytes must be a positive int, got {panel_bytes!r}")
    if k == 0:  # a sum of nothing; the moduli or bits asked for are checked all the same
        p = None
        if bits is not None or count is not None:
            ozaki_plan(1, count=count, bits=bits)
    elif bits is None and count is None:
        p = plan_for(suffix(a.dtype), k)
    else:
        p = ozaki_plan(k, count=count, bits=bits)
    if cdiv(m, PRODUCT_TILE) > MAX_GRID_YZ:
        raise ValueError(f"the emulated product takes at most {MAX_GRID_YZ * PRODUCT_TILE} rows, got {m}")
    if p is None:  # K = 0: a sum of nothing (zeros, ordered on the stream as Matrix.zeros orders them)
        return Matrix.zeros(m, n, dtype=a.dtype, device=dev, stream=stream)
    s = stream_handle(stream, dev)
    c = Matrix._allocate(m, n, dev, s, a.dtype)
    if m == 0 or n == 0:
        return c
    copies = []
    try:
        a2, b2 = (_row_major(x, copies, s) for x in (a, b))
        _launch(a2, b2, c, p, panel_bytes, dev, s)
    finally:
        for x in copies:
            x.free()
    return c


def _row_major(x: Matrix, copies: list, s: int) -> Matrix:
    rows = plain_2d(x, "the emulated product", s)
    if rows is not x:
        copies.append(rows)
    return rows


def panel_rows(m: int, n: int, kp: int, count: int, panel_bytes: int = PANEL_BYTES) -> int:
    """The rows of C a panel covers: A's residues and the products' residues of a panel (count (kp + n) bytes a row)
    within panel_bytes, in whole tiles of the INT8 products' 128 rows (at least one tile; all of M where it
    fits)."""
    rows = panel_bytes // (count * (kp + n))
    return m if rows >= m else max(PANEL_ROW_STEP, rows // PANEL_ROW_STEP * PANEL_ROW_STEP)


def _launch(a: Matrix, b: Matrix, c: Matrix, p: OzakiPlan, panel_bytes: int, dev, s: int) -> None:
    """emulated()'s launches on stream s, the operands ordered on it (gpumat.memory.ordering)."""
    table = weights_on(dev, len(p.moduli))  # (its first upload waits for the copy: before the lock is taken)
    pool = dev.memory or device_pool(dev)
    with dev.lock:
        pa, lda, (m, k), sfx, a_buffer = _parts(a)
        pb, ldb, (_, n), _, b_buffer = _parts(b)
        pc, ldc, *_, c_buffer = c._operand()
        if not all(x is not None and x.alive for x in (a_buffer, b_buffer)):
            _ = a.elements, b.elements  # freed by another thread meanwhile: FreedMatrixError says which
        use_on(s, a_buffer, b_buffer, c_buffer)
        args = (m, n, k, p, IDENTITY, Target.of(dev), table, pool, dev, s, sfx, panel_bytes)
        run((pa, lda), (pb, ldb), (pc, ldc), *args)
        done_on(s, a_buffer, b_buffer, c_buffer)


def run(a: tuple, b: tuple, c: tuple, m: int, n: int, k: int, p: OzakiPlan, epilogue: tuple, target: Target,
        table: int, pool, dev, s: int, sfx: str = "f64", panel_bytes: int = PANEL_BYTES) -> None:  # fmt: skip
    """C = epilogue(A @ B) emulated with plan p, for row-major A (M x K), B (K x N) and C (M x N) of one type
    (sfx: "f64" or "f32"), each given as (address, row stride in elements, ...), K >= 1: the exponents and
    B's residues once, then for each panel of C's rows (scratch bounded: panel_rows) A's residues, the INT8
    products and the reconstruction, which applies the epilogue (gm.matmul's: alpha, beta C, bias,
    activation) as it writes C. table: weights_on(dev, the moduli's count). Scratch from `pool` on stream s,
    freed stream-ordered after the launches. What a BoundPlan of the "fp64_int8" and "fp32_int8" rows runs,
    and emulated() too."""
    item = ITEMSIZE[sfx]
    (pa, lda), (pb, ldb), (pc, ldc) = a[:2], b[:2], c[:2]
    count = len(p.moduli)
    kp = cdiv(k, K_ALIGN) * K_ALIGN
    rows = panel_rows(m, n, kp, count, panel_bytes)
    sizes = (4 * m, 4 * n, count * rows * kp, count * n * kp, count * rows * n)
    alpha, beta, bias, bias_step, bias_along, bias_f32, activation = epilogue
    bias_bytes = 4 if bias_f32 else item
    held = []
    try:
        ea, eb, ra, rb, rc = (_take(pool, nbytes, s, held) for nbytes in sizes)
        block = (256, 1, 1)
        ROW_EXPONENTS[sfx]((cdiv(m, 8), 1, 1), block, pa, lda, m, k, p.budget, ea, stream=s, device=dev)
        COL_EXPONENTS[sfx]((cdiv(n, 32), 1, 1), (32, COL_GROUPS, 1), pb, ldb, k, n, p.budget, eb, stream=s, device=dev)
        grid = (cdiv(n, 32), cdiv(k, 32), 1)
        COL_RESIDUES[sfx](grid, (32, 8, 1), pb, ldb, k, n, eb, count, rb, kp, n * kp, stream=s, device=dev)
        for r0 in range(0, m, rows):
            r = min(rows, m - r0)
            pa_r, ea_r, pc_r = pa + item * r0 * lda, ea + 4 * r0, pc + item * r0 * ldc
            grid = (cdiv(k, 4 * 256), min(r, MAX_GRID_YZ), 1)
            ROW_RESIDUES[sfx](grid, block, pa_r, lda, r, k, ea_r, count, ra, kp, r * kp, stream=s, device=dev)
            _products(ra, rb, rc, r, n, k, kp, count, target, dev, s)
            # a bias over C's rows (bias_along 2) starts at the panel's first row
            bias_r = bias + r0 * bias_step * bias_bytes if bias_along == 2 else bias
            ep = (alpha, beta, bias_r, bias_step, bias_along, bias_f32, activation)
            grid = (cdiv(n, CRT_COLUMNS * 256), min(r, MAX_GRID_YZ), 1)
            args = (rc, n, r * n, r, n, count, table, ea_r, eb, pc_r, ldc, pa_r, lda, pb, ldb, k, *ep)
            CRT[sfx](grid, block, *args, stream=s, device=dev)
    finally:
        for ptr, nbytes in held:
            pool.free(ptr, nbytes, s)


def _products(
    ra: int, rb: int, rc: int, m: int, n: int, k: int, kp: int, count: int, target: Target, dev, s: int
) -> None:
    """Step 3: the count residue products, their int32 sums reduced to int8 residues in rc (count layers of m x n
    bytes): on the wgmma body's INT8 tiles where the GPU runs them (sm_90 with the sm_90a modules), else the
    __dp4a kernel."""
    tile = (128, 256) if n >= WIDE_N else (128, 128)
    kernel = WGMMA_S8.get(tile)  # (a test takes the entries out to run the __dp4a kernel on sm_90 too)
    if kernel is not None and target.arch == 90 and kernel.module in target.modules:
        map_a = tensor_map("u8", ra, m, k, kp, tile[0], count, m * kp)
        map_b = tensor_map("u8", rb, n, k, kp, tile[1], count, n * kp)
        c_args = c_map_args(rc, m, n, n, count, 1, m * n)
        map_c = NO_MAP if c_args is None else tensormaps.encode_tiled("u8", c_args)
        works = cdiv(m, tile[0]) * cdiv(n, tile[1]) * count
        grid = (min(works, target.sm_count), 1, 1)
        block = (128 * (1 + tile[0] // 64), 1, 1)
        args = (map_a, map_b, map_c, rc, m, n, k, n, k, 0 if c_args is None else 1, count, m * n, 3)
        kernel(grid, block, *args, smem=kernel.dynamic_smem, stream=s, device=dev)
        return
    grid = (cdiv(n, PRODUCT_TILE), cdiv(m, PRODUCT_TILE), count)
    args = (ra, rb, rc, m, n, k, kp, kp, n, m * kp, n * kp, m * n)
    RESIDUE_PRODUCTS(grid, (16, 16, 1), *args, stream=s, device=dev)


def _parts(x: Matrix) -> tuple:
    """(address, row stride, (rows, cols), dtype suffix, buffer) of a row-major 2-D matrix."""
    ptr, ld, _, _, _, rows, cols, sfx, buf = x._operand()
    return ptr, ld, (rows, cols), sfx, buf


def _take(pool, nbytes: int, s: int, held: list) -> int:
    ptr = pool.alloc(max(nbytes, 16), s)
    held.append((ptr, max(nbytes, 16)))
    return ptr
