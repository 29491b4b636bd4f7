"""The plan of a product emulated on the INT8 tensor cores by the Chinese remainder theorem (Ozaki scheme II).

A float64 (or float32) product C = A @ B is computed as integers: each row of A and each column of B is
scaled by a power of two so that its largest element lies in [2^(P-1), 2^P), and truncated toward zero
(A' = trunc(diag(2^ea) A), B' = trunc(B diag(2^eb))). The integer product A' B' is found exactly from its
residues modulo pairwise coprime moduli m_1..m_N of at most 256: each residue of A' and B' is a symmetric
int8, each product of residues (an INT8 GEMM, int32 accumulation) is exact while K <= OZAKI_MAX_K, and the
Chinese remainder theorem gives A' B' back from the N residues of each element as long as
|A' B'| < M / 2 (M = m_1 ... m_N). Then C ~ diag(2^-ea) A' B' diag(2^-eb).

Every step is integer or done in a fixed order, so the bits repeat. The error is the truncation's: each
element of A is off by less than 2^(1-P) of its row's largest, each of B by less than 2^(1-P) of its
column's, so |C - A B| < 2^(1-P) (rowmax|A| |B| + |A| colmax|B|) elementwise (plus the rounding of the
result to float64): a normwise bound, as tight as float64's elementwise one where a row of A and a column
of B hold numbers of similar size, and looser where they span many binades (more moduli then buy it back).

P comes from the moduli and K: K 2^(2P) <= M / 2, so that |A' B'| < M / 2 whatever the signs. Fifteen or
sixteen moduli give P of 51-55 bits at K = 8192 (float64 accuracy), eight give 24 (float32's).

This module is the plan alone (which moduli, how many bits, the reconstruction's constants), pure Python;
tests/ozaki_reference.py carries the scheme's steps out on the host, the specification the GPU kernels
are tested against step by step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

# Pairwise coprime moduli of at most 256 (a symmetric residue fits int8), largest first: 2^8, then
# 255 = 3 5 17, 253 = 11 23, 247 = 13 19, 217 = 7 31, and primes. Sixteen: their product M < 2^126 gives
# float64's 53 bits at every K up to OZAKI_MAX_K, and keeps the double-double reconstruction's error (about
# 2^-87 M) far below the truncation's; more moduli would need a wider reconstruction for no more bits.
OZAKI_MODULI = (256, 255, 253, 251, 247, 241, 239, 233, 229, 227, 223, 217, 211, 199, 197, 193)
# the K up to which a modulus' INT8 GEMM is exact in int32: |r_a r_b| <= 128 * 128 a term, K of them
# at most 2^31 - 1
OZAKI_MAX_K = (2**31 - 1) // (128 * 128)
# the most bits an operand's integers take: float64's significand (more would not be exact in float64)
OZAKI_MAX_BITS = 53


@dataclass(frozen=True)
class OzakiPlan:
    """moduli: m_1..m_N; bits: P, the width of the integers the operands are truncated to; k: the K the bits
    were chosen for (a product of longer K may overflow M / 2)."""

    moduli: tuple[int, ...]
    bits: int
    k: int

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


def ozaki_bits(moduli: tuple[int, ...], k: int) -> int:
    """The largest P with K 2^(2P) <= M / 2 (at most OZAKI_MAX_BITS), or a negative number where none fits."""
    big = math.prod(moduli)
    p = (big // (2 * k)).bit_length() - 1  # 2^(2P) <= M / (2K): 2P <= floor(log2(M / (2K)))
    return min(p // 2 if p >= 0 else -1, OZAKI_MAX_BITS)


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
