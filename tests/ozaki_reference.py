"""Ozaki scheme II carried out on the host in numpy, step by step as the GPU kernels are to do it (the plan:
gpumat.matmul.ozaki). Each step is a function whose output a GPU kernel must reproduce bit for bit:

  1. exponents: ea (rows of A) and eb (columns of B), each line's 2-norm scaled below 2^Q (the plan's
     budget: 2^2Q <= M / 4);
  2. residues: the operands scaled by those powers of two, truncated toward zero to integers below 2^Q,
     and reduced modulo each m_l to symmetric int8 residues (a batch of N int8 matrices per operand);
  3. modular products: per modulus, the int8 residues multiplied with int32 accumulation (exact) and the
     sums reduced to symmetric residues modulo m_l (the INT8 GEMM's epilogue);
  4. reconstruction: the Chinese remainder theorem with the weights in 32-bit limbs (each limb's sum of
     residue products exact in a double), the multiple of M taken away limb by limb, the integer's limbs
     added in double-double from the top, rounded to float64 and scaled back by 2^-(ea_i + eb_j).

The references the steps are checked against are exact (Python integers) or correctly rounded (fsum of the
exact products' parts)."""

from __future__ import annotations

import math

import numpy as np

from gpumat.matmul.engine import OzakiPlan

SPLITTER = 2.0**27 + 1.0  # Veltkamp's split of a double into two halves of 26 bits


# the lanes a row's sum of squares is split over, and the groups of rows a column's (the kernels' warp width
# and COL_GROUPS: a CPU test compares them)
NORM_LANES = 32


def _ilogb(x: np.ndarray) -> np.ndarray:
    """floor(log2 x) for positive finite x, subnormals included (int64)."""
    _, top = np.frexp(x)  # x = f 2^top, f in [0.5, 1)
    return top.astype(np.int64) - 1


def exponents(x: np.ndarray, axis: int, budget: int) -> np.ndarray:
    """e (int64) for each line of x along `axis` (1: rows, 0: columns) with the line's 2-norm times 2^e below
    2^budget; 0 for a line of zeros. The largest magnitude amax = 2^g f, f in [1, 2), and the sum of squares
    S of |x| / 2^g in the kernels' order (rows: 32 lanes each adding k = lane, lane + 32, ..., the lanes' sums
    then added in a butterfly; columns: 32 groups each adding k = group, group + 32, ..., the groups' sums
    added in order); e = budget - 1 - floor(ilogb(S) / 2) - g."""
    x = np.asarray(x, dtype=np.float64)  # float32 widened, exactly, as the kernels read it
    lines = np.abs(x if axis == 1 else x.T)  # one line a row
    amax = lines.max(axis=1, initial=0.0)
    live = amax > 0
    g = np.where(live, _ilogb(np.where(live, amax, 1.0)), 0)
    v = lines / np.ldexp(1.0, g)[:, None]  # exact, or correctly rounded where it is subnormal
    width = NORM_LANES
    k = v.shape[1]
    v = np.pad(v, ((0, 0), (0, -k % width))).reshape(v.shape[0], -1, width)
    squares = np.zeros((v.shape[0], width))
    for step in range(v.shape[1]):
        squares = squares + v[:, step, :] * v[:, step, :]
    if axis == 1:
        while squares.shape[1] > 1:
            half = squares.shape[1] // 2
            squares = squares[:, :half] + squares[:, half:]
        total = squares[:, 0]
    else:
        total = squares[:, 0]
        for w in range(1, width):
            total = total + squares[:, w]
    h = _ilogb(np.where(live, total, 1.0)) >> 1
    return np.where(live, budget - 1 - h - g, 0).astype(np.int64)


def truncated(x: np.ndarray, e: np.ndarray, axis: int) -> np.ndarray:
    """x scaled by 2^e along its lines and truncated toward zero: integers of magnitude below 2^budget, as
    float64 (exact: a double of 2^53 or more is an integer already)."""
    return np.trunc(np.ldexp(np.asarray(x, dtype=np.float64), np.expand_dims(e, axis)))


def symmetric(x: np.ndarray, m: int) -> np.ndarray:
    """x mod m (integers as int64) in [-(m // 2), (m - 1) // 2]: 256 gives [-128, 127], odd m [-(m-1)/2, (m-1)/2]."""
    r = np.mod(x, m)
    return np.where(r >= (m + 1) // 2, r - m, r)


def residues(xint: np.ndarray, plan: OzakiPlan) -> np.ndarray:
    """The int8 residues of the integers xint (float64), one matrix a modulus: shape (N, *xint.shape)."""
    as_int = xint.astype(np.int64)
    return np.stack([symmetric(as_int, m).astype(np.int8) for m in plan.moduli])


def modular_products(ra: np.ndarray, rb: np.ndarray, plan: OzakiPlan) -> np.ndarray:
    """Per modulus, the product of the residue matrices (int32 accumulation: exact, checked) reduced to a
    symmetric residue: shape (N, M, N) as int8, as the products' kernels write them."""
    out = []
    for i, m in enumerate(plan.moduli):
        acc = ra[i].astype(np.int64) @ rb[i].astype(np.int64)
        assert np.abs(acc).max(initial=0) < 2**31, "an int32 accumulator would overflow"
        out.append(symmetric(acc, m).astype(np.int8))
    return np.stack(out)


def crt_exact(cres: np.ndarray, plan: OzakiPlan) -> np.ndarray:
    """The integers below M / 2 in magnitude with the given residues (object array of Python ints)."""
    big = plan.modulus
    total = np.zeros(cres.shape[1:], dtype=object)
    for r, w in zip(cres, plan.weights, strict=True):
        total = total + r.astype(object) * w
    total = total % big
    return np.where(total > big // 2, total - big, total)


def two_sum(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """s + e == a + b exactly, s = fl(a + b) (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p + e == a * b exactly, p = fl(a * b) (Dekker; an FMA gives the same pair: e is the exact error)."""
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


LIMB_BITS = 32  # the weights and M as four limbs of 32 bits (M < 2^126 < 2^128)
LIMBS = 4


def limbs(x: int) -> tuple[float, ...]:
    """A non-negative integer below 2^128 as its four 32-bit limbs, the most significant first (each exact in
    a double)."""
    mask = (1 << LIMB_BITS) - 1
    return tuple(float((x >> (LIMB_BITS * (LIMBS - 1 - j))) & mask) for j in range(LIMBS))


def crt_double(cres: np.ndarray, plan: OzakiPlan) -> np.ndarray:
    """The reconstruction as the GPU does it. With the weights in 32-bit limbs, each limb's sum S_j = sum over
    l of r_l w_lj is exact in a double (|S_j| < 16 x 128 x 2^32 = 2^43, in any order); y = the limbs' sums
    added in doubles estimates sum r_l w_l within 2^-40 M, so q = rint(y / M) is the multiple of M the CRT
    takes away (the integer is below M / 4 in magnitude: the budget's bound); T_j = S_j - q M_j is exact again
    (below 2^44), and x = sum T_j 2^(32 (3 - j)) is the integer itself, rounded to float64 by double-double
    additions from the top limb down (within one unit in its last place)."""
    scale = [2.0 ** (LIMB_BITS * (LIMBS - 1 - j)) for j in range(LIMBS)]
    sums = [np.zeros(cres.shape[1:]) for _ in range(LIMBS)]
    for r, w in zip(cres, plan.weights, strict=True):
        rf = r.astype(np.float64)
        for j, part in enumerate(limbs(w)):
            sums[j] = sums[j] + rf * part
    y = sums[0] * scale[0]
    for j in range(1, LIMBS):
        y = y + sums[j] * scale[j]
    q = np.rint(y / float(plan.modulus))
    parts = [(sums[j] - q * part) * scale[j] for j, part in enumerate(limbs(plan.modulus))]
    hi, lo = parts[0], np.zeros_like(parts[0])
    for part in parts[1:]:
        s, t = two_sum(hi, part)
        hi, lo = two_sum(s, t + lo)
    return hi + lo


def emulated_matmul(a: np.ndarray, b: np.ndarray, plan: OzakiPlan) -> np.ndarray:
    """C ~ A @ B by the four steps, in the operands' dtype: float64, or float32 (the steps on the operands
    widened to float64, C rounded to float32 from the reconstruction's float64, as the kernels do)."""
    if a.dtype == np.float32:
        return emulated_matmul(a.astype(np.float64), b.astype(np.float64), plan).astype(np.float32)
    ea, eb = exponents(a, 1, plan.budget), exponents(b, 0, plan.budget)
    ra = residues(truncated(a, ea, 1), plan)
    rb = residues(truncated(b, eb, 0), plan)
    c = crt_double(modular_products(ra, rb, plan), plan)
    return np.ldexp(c, -(ea[:, None] + eb[None, :]))


def correctly_rounded_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A @ B with each element the exact sum rounded once to float64 (fsum of the exact products' two parts)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    m, k = a.shape
    n = b.shape[1]
    out = np.empty((m, n))
    for i in range(m):
        p, e = two_prod(np.repeat(a[i][:, None], n, axis=1), b)
        for j in range(n):
            out[i, j] = math.fsum(np.concatenate([p[:, j], e[:, j]]))
    return out


def error_bound(a: np.ndarray, b: np.ndarray, plan: OzakiPlan) -> np.ndarray:
    """The scheme's elementwise error bound. The truncation: each element of row i of A off by less than one
    unit 2^-ea_i, each of column j of B by less than 2^-eb_j, so the product is off by less than
    2^-ea_i sum_k |B_kj| + 2^-eb_j sum_k |A_ik| + K 2^-(ea_i + eb_j); the reconstruction: 2^-87 M in the
    integers' units, 2^-(ea_i + eb_j) each (see crt_double); the result's rounding to float64: half its
    spacing (the caller adds it, knowing the exact result)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    ea, eb = exponents(a, 1, plan.budget), exponents(b, 0, plan.budget)
    ua, ub = np.ldexp(1.0, -ea), np.ldexp(1.0, -eb)
    sb, sa = np.sum(np.abs(b), axis=0), np.sum(np.abs(a), axis=1)
    k = a.shape[1]
    both = ua[:, None] * ub[None, :]
    return ua[:, None] * sb[None, :] + sa[:, None] * ub[None, :] + (k + 2.0**-87 * float(plan.modulus)) * both
