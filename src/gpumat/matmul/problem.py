"""What a matmul call asks for (`Problem`) and the facts of the GPU it runs on (`Target`).

Both are small frozen values: the planner is a pure function of the two, so plans are cached by them
and can be computed on a machine without a GPU (tests pass a Target by hand). The problem holds what
decides the kernel and its launch and nothing else: shape, dtypes, precision mode, and whether each
operand can be read by the copy engine in place (16-byte aligned base and row stride). Operands'
addresses are not part of it: the launcher takes those.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..runtime.kernels import manifest


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
