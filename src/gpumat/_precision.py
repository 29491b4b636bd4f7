"""Which arithmetic a float32 matmul may use: exact FP32 (the default), or the tensor cores' TF32.

    "float32"  exact FP32 on the FP32 pipes (the SGEMM kernels; small products the 16 x 16 tiles of one
               output a thread): the default, never replaced silently.
    "tf32x3"   FP32-level accuracy on the tensor cores: each operand split into two TF32 halves,
               three TF32 products (big*big + big*small + small*big), the corrections summed apart.
    "tf32"     one TF32 pass on the tensor cores: operands rounded to 10 mantissa bits, about 1e-3
               relative error (against || |A| |B| ||), fastest.

The mode is chosen per call (`gm.matmul(a, b, precision="tf32x3")`), or for a block of code in this
thread (`with gm.matmul_precision("tf32"): ...`), or for the process (`gm.set_matmul_precision(...)`);
a call's own argument wins over a scope, a scope over the process default. On GPUs without TF32
tensor cores (compute capability below 8.0) the tensor-core modes run the exact FP32 kernels.
Either tensor-core mode bounds the error, not the arithmetic: where the cost model ranks exact FP32 at
least as fast (small, skinny and short-K products), auto runs exact FP32, which is at least as accurate.
A call may also ask for "fp32_int8", the product emulated on the INT8 tensor cores
(gpumat.matmul.ozaki): never a default, since it takes no batch.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

MATMUL_PRECISIONS = ("float32", "tf32x3", "tf32")
# the modes on the TF32 tensor cores: auto may run exact FP32 for either (at least as accurate)
TENSOR_CORE_PRECISIONS = ("tf32x3", "tf32")
# the emulated modes (gpumat.matmul.ozaki) and the dtype each is for: asked for by a gm.matmul call on 2-D
# Matrix operands, never a default or a scope's (they take no batch)
PER_CALL_PRECISIONS = {"fp32_int8": "float32", "fp64_int8": "float64"}

_process_default = "float32"


class _Scoped(threading.local):
    stack: list | None = None  # the modes of this thread's open `matmul_precision` blocks (a class default:
    # a thread that never opened one reads None without the AttributeError getattr would raise and catch)


_scoped = _Scoped()


def check_precision(mode, also: tuple[str, ...] = ()) -> str:
    """mode if it is one of MATMUL_PRECISIONS, else a ValueError naming them (and `also`, the modes a call
    may ask for beyond the defaults: float32's emulated "fp32_int8")."""
    if isinstance(mode, str) and mode in PER_CALL_PRECISIONS and mode not in also:
        raise ValueError(
            f"matmul precision {mode!r} is a call's own choice: gm.matmul(a, b, precision={mode!r}) with 2-D "
            f"{PER_CALL_PRECISIONS[mode]} Matrix operands, never a default, a scope's or a host array's"
        )
    if not isinstance(mode, str) or mode not in MATMUL_PRECISIONS:
        choices = ", ".join((*MATMUL_PRECISIONS, *also))
        raise ValueError(f"unknown matmul precision {mode!r}; choose one of {choices}")
    return mode


def set_matmul_precision(mode: str) -> None:
    """Set the process-wide default precision of float32 matmuls.

    A call's own ``precision=`` and an open :func:`matmul_precision` block win over it.

    Parameters
    ----------
    mode : {"float32", "tf32x3", "tf32"}
        Exact FP32 (the default), FP32-level accuracy on the tensor cores, or one TF32 pass.

    Raises
    ------
    ValueError
        Another mode.

    Examples
    --------
    >>> gm.set_matmul_precision("tf32x3")
    >>> gm.get_matmul_precision()
    'tf32x3'
    >>> gm.set_matmul_precision("float32")
    """
    global _process_default
    _process_default = check_precision(mode)


def get_matmul_precision() -> str:
    """The precision a matmul called here without ``precision=`` uses.

    Returns
    -------
    str
        The innermost open :func:`matmul_precision` block of this thread, else the process default.

    Examples
    --------
    >>> gm.get_matmul_precision()
    'float32'
    """
    stack = _scoped.stack
    return stack[-1] if stack else _process_default


@contextmanager
def matmul_precision(mode: str):
    """A block of code whose float32 matmuls default to ``mode``, in this thread only.

    Restored on exit, also when the block raises. A call's own ``precision=`` still wins.

    Parameters
    ----------
    mode : {"float32", "tf32x3", "tf32"}
        The precision inside the block.

    Yields
    ------
    str
        ``mode``.

    Raises
    ------
    ValueError
        Another mode.

    Examples
    --------
    >>> with gm.matmul_precision("tf32"):
    ...     gm.get_matmul_precision()
    'tf32'
    >>> gm.get_matmul_precision()
    'float32'
    """
    check_precision(mode)
    stack = _scoped.stack
    if stack is None:
        stack = _scoped.stack = []
    stack.append(mode)
    try:
        yield mode
    finally:
        stack.pop()


def resolve(precision) -> str:
    """A call's `precision=` argument: None means the current default."""
    return get_matmul_precision() if precision is None else check_precision(precision)
