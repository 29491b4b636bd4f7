"""What a matmul call asks for (`Problem`) and the facts of the GPU it runs on (`Target`).

Both are small frozen values: the planner is a pure function of the two, so plans are cached by them
and can be computed on a machine without a GPU (tests pass a Target by hand). The problem holds what
decides the kernel and its launch and nothing else: shape, dtypes, precision mode, and whether each
operand can be read by the copy engine in place (16-byte aligned base and row stride). Operands'
addresses are not part of it: the launcher takes those. `kernel_view` turns a call's operands into the
product the kernels compute (a transposed result swapped, a batch folded), `problem_of` into its Problem.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .._dtypes import ITEMSIZE
from ..runtime.kernels import manifest

INT32_MAX = 2**31 - 1  # the kernels' M, N and K are 32-bit ints


@dataclass(frozen=True)
class Problem:
    """C (m x n, `out_dtype`) = op(A) (m x k) @ op(B) (k x n), `batch` times in one launch, A and B of
    `dtype` (kernel suffixes: f32, f64, f16, bf16), computed at precision `mode` (float32 | tf32 |
    tf32x3 for float32 operands; native for the others). The epilogue (alpha, beta, bias, activation)
    does not change the plan: the launcher passes it."""

    m: int
    n: int
    k: int
    dtype: str
    out_dtype: str
    mode: str
    a_aligned: bool = True
    b_aligned: bool = True
    batch: int = 1  # products in one launch (grid z), each m x k @ k x n
    a_trans: bool = False  # A (B) is stored transposed: op(A) = A^T of a row-major k x m storage
    b_trans: bool = False

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k

    def describe(self) -> str:
        out = "" if self.out_dtype == self.dtype else f" -> {self.out_dtype}"
        mode = "" if self.mode == "native" else f" at {self.mode}"
        unaligned = [name for name, ok in (("A", self.a_aligned), ("B", self.b_aligned)) if not ok]
        note = f", {' and '.join(unaligned)} not 16-byte aligned" if unaligned else ""
        trans = [name for name, t in (("A", self.a_trans), ("B", self.b_trans)) if t]
        note += f", {' and '.join(trans)} stored transposed" if trans else ""
        batch = f"{self.batch} x " if self.batch != 1 else ""
        return f"{batch}{self.m}x{self.k} @ {self.k}x{self.n} {self.dtype}{out}{mode}{note}"


def swapped(p: Problem) -> Problem:
    """The product a swapped plan's kernel computes for p: C^T (n x m) = op(B)^T @ op(A)^T, each operand
    read the other way round (B's storage as the new A, A's as the new B), written into p's C stored
    transposed."""
    return replace(
        p,
        m=p.n,
        n=p.m,
        a_aligned=p.b_aligned,
        b_aligned=p.a_aligned,
        a_trans=not p.b_trans,
        b_trans=not p.a_trans,
    )


@dataclass(frozen=True)
class Target:
    """The facts of a GPU that planning needs: compute capability (x10), SM count, the shared memory a
    block may opt into, and the kernel modules in this build (an sm_90a module is absent from builds
    without sm_90)."""

    arch: int
    sm_count: int
    max_smem: int
    modules: frozenset

    @classmethod
    def of(cls, dev) -> Target:
        """The Target of a gpumat Device (cached on the device)."""
        target = dev.scratch.get("matmul.target")
        if target is None:
            target = dev.scratch["matmul.target"] = cls(dev.arch, dev.sm_count, dev.max_smem_optin, built_modules())
        return target


def built_modules() -> frozenset:
    """The kernel modules this build holds (none when the kernels are not built)."""
    try:
        return frozenset(manifest()["modules"])
    except FileNotFoundError:
        return frozenset()


def aligned(ptr: int, stride: int, itemsize: int) -> bool:
    """Whether the copy engine can read a matrix in place: base address and row stride (bytes) are
    multiples of 16."""
    return ptr % 16 == 0 and (stride * itemsize) % 16 == 0


def operand_aligned(operand: tuple, itemsize: int, rows: int = 0) -> bool:
    """Whether the copy engine can read an operand (address, row stride, batch stride) of `rows` stored rows
    a matrix in place (what a Problem's a_aligned and b_aligned say): all three multiples of 16 bytes, and
    a batch's matrices one after another (batch stride 0, or at least rows x row stride): a tensor map's
    layers may not overlap, so a batch of overlapping views is copied first."""
    ptr, ld, bstride = operand[:3]
    return (ptr | ld * itemsize | bstride * itemsize) & 15 == 0 and (bstride == 0 or bstride >= rows * ld)


def kernel_view(A: tuple, B: tuple, C: tuple, epilogue: tuple) -> tuple:
    """The product as the kernels see it, from its operands' Matrix._operand() tuples (C: the result's, or
    the layout of a result still to be made) and the epilogue: (m, n, k, batch, a, b, c, a_trans,
    b_trans, epilogue), where a, b and c are (address, row stride, batch stride) of the storages and C is
    row-major. A transposed C is
    written as C^T = op(B)^T @ op(A)^T (operands swapped, each read the other way round); a batch whose A
    matrices and results lie one after another, with one B for all, folds into one tall product."""
    pa, lda, bsa, ta, batch_a, m, k = A[:7]
    pb, ldb, bsb, tb, batch_b, _, n = B[:7]
    pc, ldc, bsc, tc, batch = C[:5]
    a = (pa, lda, 0 if batch_a in (None, 1) else bsa)
    b = (pb, ldb, 0 if batch_b in (None, 1) else bsb)
    c = (pc, ldc, bsc)
    if tc:  # C^T (n x m, row-major storage) = op(B)^T @ op(A)^T
        a, b, ta, tb, m, n = b, a, not tb, not ta, n, m
        if epilogue[4]:
            epilogue = (*epilogue[:4], 3 - epilogue[4], *epilogue[5:])
    count = 1 if batch is None else batch
    if count > 1 and b[2] == 0 and not ta and a[2] == m * a[1] and c[2] == m * c[1] and epilogue[4] != 2:
        if m * count <= INT32_MAX:  # the kernels' M is a 32-bit int
            # one tall product: the batch's rows one after another, A and C each one matrix (no batch stride,
            # which would make the copy engine's alignment test see overlapping layers)
            m, count = m * count, 1
            a, c = (a[0], a[1], 0), (c[0], c[1], 0)
    return m, n, k, count, a, b, c, ta, tb, epilogue


def problem_of(view: tuple, sfx: str, out_sfx: str, mode: str) -> Problem:
    """The Problem of a kernel view, with the operands' alignment."""
    m, n, k, batch, a, b, _, ta, tb, _ = view
    size = ITEMSIZE[sfx]
    a_ok, b_ok = operand_aligned(a, size, k if ta else m), operand_aligned(b, size, n if tb else k)
    return Problem(m, n, k, sfx, out_sfx, mode, a_ok, b_ok, batch, ta, tb)
