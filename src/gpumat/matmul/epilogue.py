"""The epilogue of a GEMM, as the kernels take it: C = act(alpha * op(A) @ op(B) + beta * C + bias).

The kernels' epilogue arguments (gpumat::Epilogue in cuda/gpumat.cuh) are (alpha, beta, bias address,
bias step, bias along (1: a row added to every row, 2: a column added to every column), bias in float32,
activation code); variants.IDENTITY is the plain product's. Bad values are a ValueError or TypeError
here, before anything is launched.
"""

from __future__ import annotations

import numpy as np

from .._dtypes import DTYPE_NAMES
from .._dtypes import name as dtype_name
from ..operands import as_matrix
from .variants import ACTIVATIONS


def _number(x, name: str) -> float:
    if type(x) is float:  # the common case, without the checks below
        return x
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"matmul: {name} must be a real number, got {type(x).__name__}")
    try:
        return float(x)
    except OverflowError:  # an int beyond float64's range
        raise ValueError(f"matmul: {name} = {x} is beyond float64's range") from None


def epilogue_of(alpha, beta, bias, activation, out, out_sfx: str, shape: tuple, a) -> tuple:
    """The kernels' epilogue arguments (alpha, beta, bias, bias_step, bias_along, bias_f32, activation) for
    C's own orientation; ValueError/TypeError for bad values before anything is launched."""
    alpha, beta = _number(alpha, "alpha"), _number(beta, "beta")
    if beta != 0.0 and out is None:
        raise ValueError("matmul: beta != 0 adds beta * out to the product: pass out=")
    if activation not in ACTIVATIONS:
        known = ", ".join(repr(x) for x in ACTIVATIONS if x is not None)
        raise ValueError(f"matmul: unknown activation {activation!r}; choose one of {known} (or None)")
    if bias is None:
        return alpha, beta, 0, 0, 0, 0, ACTIVATIONS[activation]
    ptr, stride, _, trans, batch, height, width, bias_sfx, buffer = as_matrix(bias, "bias")._operand()
    m, n = shape[-2], shape[-1]
    if bias_sfx not in (out_sfx, "f32"):
        wanted = DTYPE_NAMES[out_sfx]
        got = dtype_name(bias.dtype)
        raise TypeError(f"matmul: bias is {got}; it must be the result's dtype ({wanted}) or float32")
    if batch is not None:
        raise ValueError(f"matmul: bias must be a (1, n) row or an (m, 1) column, got shape {bias.shape}")
    # the step between consecutive elements of the row (or column), in elements: 1 along a row of a
    # row-major matrix, the row stride down its column (the other way round for a transposed one)
    if height == 1 and width == n:
        along, step = 1, stride if trans else 1
    elif height == m and width == 1:
        along, step = 2, 1 if trans else stride
    else:
        raise ValueError(
            f"matmul: bias has shape {bias.shape}; for a {m}x{n} result it is a (1, {n}) row (added to every "
            f"row) or a ({m}, 1) column (added to every column)"
        )
    if buffer.device is not a.device:  # both live (checked above and by the caller)
        raise ValueError(f"matmul: bias is on GPU {bias.device.ordinal} and a on GPU {a.device.ordinal}")
    return alpha, beta, ptr, step, along, int(bias_sfx == "f32"), ACTIVATIONS[activation]
