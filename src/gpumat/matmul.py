"""Dense matrix multiply, C = A @ B, float32: argument checks, variant choice, launch."""
from __future__ import annotations

from dataclasses import dataclass

from ._geometry import tiled_grid
from ._kernels import Kernel
from ._memory import fill_2d
from .matrix import Matrix, as_matrix, overlaps

TEACHING_SIGNATURE = "PPPiiiqqq"  # A, B, C, M, N, K, lda, ldb, ldc


@dataclass(frozen=True)
class Variant:
    kernel: Kernel
    block: tuple[int, int, int]
    tile: tuple[int, int]  # rows x cols of C one block covers

    def grid(self, m: int, n: int) -> tuple[int, int, int]:
        return tiled_grid(m, n, *self.tile)


def _teaching(name: str, threads: int, tile: int) -> Variant:
    return Variant(Kernel("matmul", f"matmul_{name}", TEACHING_SIGNATURE), (threads, threads, 1), (tile, tile))


VARIANTS: dict[str, Variant] = {
    "naive": _teaching("naive", 16, 16),
    "tiled16": _teaching("tiled16", 16, 16),
    "tiled32": _teaching("tiled32", 32, 32),
    "tiled16x64": _teaching("tiled16x64", 16, 16),
}
ALGORITHMS = ("auto", *VARIANTS)


def choose_algorithm(m: int, n: int, k: int) -> str:
    """What "auto" runs for an m x k times k x n product."""
    return "tiled16x64"


def check_operands(a, b, out, algorithm: str) -> tuple[int, int, int]:
    """Validate everything before any allocation or launch; returns (M, N, K)."""
    a, b = as_matrix(a, "a"), as_matrix(b, "b")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown matmul algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned: a.width {k} != b.height {k2}")
    if out is not None:
        as_matrix(out, "out")
        if out.shape != (m, n):
            raise ValueError(f"matmul: out has shape {out.shape}, the product needs {(m, n)}")
        if overlaps(out, a) or overlaps(out, b):
            raise ValueError("matmul: out overlaps an input; the kernels read A and B while writing C")
    return m, n, k


def matmul(a: Matrix, b: Matrix, out: Matrix | None = None, algorithm: str = "auto") -> Matrix:
    """C = a @ b for float32 matrices of any shape (views welcome). Returns out (new if None)."""
    m, n, k = check_operands(a, b, out, algorithm)
    if out is None:
        out = Matrix.empty(m, n)
    if m == 0 or n == 0:
        return out
    c = out.elements
    if k == 0:
        fill_2d(c, out.stride * 4, 0, n, m)
        return out
    variant = VARIANTS[choose_algorithm(m, n, k) if algorithm == "auto" else algorithm]
    variant.kernel(variant.grid(m, n), variant.block, a.elements, b.elements, c, m, n, k, a.stride, b.stride, out.stride)
    return out
