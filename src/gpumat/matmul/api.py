"""The public face of the GEMM engine: `matmul` and `matmul_plan`, the two functions users call, with
their documentation. A Matrix call takes the one route of route.py (check -> Problem -> plan -> BoundPlan
-> run), the common call first its fast lookup; host (numpy) operands go to gpumat.outofcore, which plans
each tile through the same engine.
"""

from __future__ import annotations

import numpy as np

from .plan import MatmulPlan
from .route import DEFAULT_ALPHA, DEFAULT_BETA, cached_product, plan_of_call, product


def matmul_plan(
    a, b, out=None, algorithm="auto", precision=None, *, splits=None, k_chunk=None, tune=False, bias=None
) -> MatmulPlan:
    """The plan :func:`matmul` would run for these operands, without running it.

    The plan names the kernel, the split of K, the launch grid, the scratch and copies it needs, the
    cost model's time and the reason for the choice (``print`` it). Nothing is allocated or launched
    (unless ``tune=True``). alpha, beta and the activation do not change the plan; a bias can (pass it).

    Parameters
    ----------
    a, b : Matrix
        The operands, as for :func:`matmul`.
    out : Matrix, optional
        The output, as for :func:`matmul` (its dtype and layout can change the plan).
    algorithm : str, optional
        ``"auto"`` or a variant's name.
    precision : {None, "float32", "tf32x3", "tf32", "fp32_int8", "fp64_int8"}, optional
        As for :func:`matmul`.
    splits : int, optional
        Force a split-K plan of this many slices (a variant that splits K).
    k_chunk : int, optional
        With ``splits``: the K of each slice (default: K cut evenly on the variant's alignment).
    tune : bool, optional
        Measure instead of model (with ``algorithm="auto"``): the cost model's best few candidates run
        on these operands (into a scratch result; ``out`` is not written) on the current stream, and
        the fastest becomes auto's choice for this problem on this GPU for the rest of the process:
        later :func:`matmul` calls of the same shapes, dtypes, layouts and precision run it. Its
        results may differ in the last bits from the untuned plan's (another kernel adds in another
        order) and repeat call after call. Takes a few milliseconds to a second.
    bias : Matrix, optional
        The bias the call will add, as for :func:`matmul`. A bias of one value a row, (M, 1), keeps a batch
        times a shared 2-D matrix from running as one tall product, so the plan is another one.

    Returns
    -------
    MatmulPlan
        Pass it as ``gm.matmul(a, b, plan=p)`` to run it.

    Raises
    ------
    TypeError
        Operands that are not Matrix, or of different dtypes.
    ValueError
        Shapes that do not match, an unknown algorithm or precision, or a split the variant cannot make.
    NoDeviceError
        No usable GPU.

    Examples
    --------
    >>> A = gm.Matrix.zeros(1024, 1024)  # doctest: +GPU
    >>> p = gm.matmul_plan(A, A)
    >>> isinstance(p, gm.MatmulPlan), p.splits >= 1
    (True, True)
    >>> C = gm.matmul(A, A, plan=p)
    """
    if tune:
        if algorithm != "auto" or splits is not None or k_chunk is not None or bias is not None:
            raise ValueError(
                "matmul_plan: tune=True chooses the plan itself; it takes algorithm='auto', no split and no bias"
            )
        from .tuning import tune as measured  # the timing loop, loaded only when asked

        return measured(a, b, out, precision)
    return plan_of_call(a, b, out, algorithm, precision, splits, k_chunk, bias)


def matmul(a, b, out=None, algorithm="auto", precision=None, stream=None, *, alpha=DEFAULT_ALPHA,
           beta=DEFAULT_BETA, bias=None, activation=None, plan=None, devices=None, memory_limit=None):  # fmt: skip
    """C = act(alpha * op(a) @ op(b) + beta * out + bias): the BLAS GEMM with a fused epilogue.

    For matrices of one dtype on one device. Deterministic: the same inputs give the same bits on the
    same GPU (no atomics; split-K partial sums are added in a fixed order). int8 matrices multiply on
    the INT8 tensor cores into int32 sums, exact for K up to 131071 (as ``torch._int_mm``; sm_90 GPUs
    such as the H100 and H200), with no epilogue, or into a float ``out`` through the epilogue (the
    sums dequantised in the same launch; sm_90). FP8 matrices (ml_dtypes' float8_e4m3fn, float8_e5m2;
    one format for both) multiply on the FP8 tensor cores with float32 accumulation (sm_90), their
    per-tensor scales given as ``alpha``. With two numpy arrays it is the out-of-core product instead
    (see ``devices`` and ``memory_limit``).

    Shapes follow NumPy's matmul: 2-D ``a`` (m x k) and ``b`` (k x n), or batches (batch, m, k) @
    (batch, k, n), where a batch of 1 or a 2-D operand is shared by every product of the other's
    batch; the batch runs in one launch. Operands may be views, transposed views (``a.T``: read in
    place, or copied row-major in one pass where the chosen kernel needs it; :func:`matmul_plan` says
    which) and a transposed ``out``.

    The epilogue is applied to each element in float32 (float64 for float64) before the one rounding
    to ``out``'s dtype.

    Parameters
    ----------
    a, b : Matrix or numpy.ndarray
        The operands: two Matrix of one dtype on one device, or two numpy arrays (out of core).
    out : Matrix or numpy.ndarray, optional
        Where C goes (read when ``beta != 0``). New if None, in the inputs' dtype (int32 for int8 inputs,
        float32 for FP8); for float16 and bfloat16 a float32 ``out`` is allowed; for int8 and FP8 a
        float32, bfloat16 or float16 one.
    algorithm : str, optional
        ``"auto"`` (the planner's choice) or a variant's name (``gpumat.matmul.algorithms(dtype)`` lists them).
    precision : {None, "float32", "tf32x3", "tf32", "fp32_int8", "fp64_int8"}, optional
        For float32 operands: exact FP32, FP32-level accuracy on the tensor cores, or one TF32 pass
        (operands rounded to 10 mantissa bits; docs/performance.md measures each mode's error). None
        takes the current default (:func:`matmul_precision`). For float64 operands, ``"fp64_int8"``
        emulates the product on the INT8 tensor cores (Ozaki scheme II: each row of A and column of B
        scaled by its 2-norm to integers below 2^61, exact modular products, the Chinese remainder
        theorem); its error is bounded by one unit of each line's scale (2^-61 to 2^-60 of its
        2-norm): more accurate than plain FP64 on the operands measured, whose elements spanned up to
        2^[-60, 60] (docs/guide/precision.md). For float32 operands ``"fp32_int8"`` is the same scheme
        with 9 moduli (integers below 2^34): more accurate than FP32's own product on elements spanning
        up to 2^[-10, 10]. Either is a call's own choice, never a default; 2-D products of Matrix
        operands only; bits repeat call after call.
    stream : Stream or stream-like, optional
        Where the work is queued: a :class:`Stream`, an object with ``__cuda_stream__`` or a raw
        handle; the thread's current stream by default.
    alpha, beta : float, optional
        The GEMM scalars; ``beta != 0`` needs ``out``, and with ``beta == 0`` ``out`` is never read.
    bias : Matrix, optional
        A (1, n) row added to every row, or an (m, 1) column added to every column; of ``out``'s
        dtype or float32.
    activation : {None, "relu", "gelu", "gelu_tanh"}, optional
        Applied last; ``"gelu"`` is the erf form.
    plan : MatmulPlan, optional
        A plan from :func:`matmul_plan`, run as it is.
    devices : list of int, optional
        With numpy operands: the GPUs to use (default: all visible).
    memory_limit : int, optional
        With numpy operands: bytes each GPU may use (default: its free memory).

    Returns
    -------
    Matrix or numpy.ndarray
        ``out``, or a new Matrix (a numpy array for numpy operands).

    Raises
    ------
    TypeError
        A Matrix mixed with a numpy array, operands of different dtypes, or a non-real dtype.
    ValueError
        Shapes that do not match, an ``out`` that overlaps an input, ``beta != 0`` without ``out``, an
        unknown algorithm, precision or activation, a contradicting ``plan``, or operands and stream on
        different devices.
    FreedMatrixError
        An operand has been freed.
    OutOfMemoryError
        No room for the result or the scratch.
    NoDeviceError
        No usable GPU.

    See Also
    --------
    matmul_plan : what would run, and why.

    Examples
    --------
    >>> a = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> A = gm.Matrix.from_numpy(a)  # doctest: +GPU
    >>> gm.matmul(A, A.T).to_numpy().tolist()
    [[5.0, 14.0], [14.0, 50.0]]
    >>> C = gm.Matrix.zeros(2, 2)
    >>> bias = gm.Matrix.from_numpy(np.array([[1.0, -100.0]], np.float32))
    >>> gm.matmul(A, A.T, out=C, alpha=2.0, bias=bias, activation="relu").to_numpy().tolist()
    [[11.0, 0.0], [29.0, 0.0]]
    >>> gm.matmul(a, np.ascontiguousarray(a.T)).tolist()  # numpy operands: out of core, numpy back
    [[5.0, 14.0], [14.0, 50.0]]
    """

    if plan is None and algorithm == "auto" and precision is None and devices is None and memory_limit is None:
        result = cached_product(a, b, out, stream, alpha, beta, bias, activation)
        if result is not None:
            return result
    plain = alpha is DEFAULT_ALPHA and beta is DEFAULT_BETA and bias is None and activation is None
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            raise TypeError("matmul: give both operands as numpy arrays (out of core) or both as gpumat Matrix")
        if stream is not None or algorithm != "auto" or plan is not None:
            raise ValueError("matmul: host operands run on each GPU's own streams with algorithm 'auto'")
        if not plain:
            raise ValueError("matmul: alpha, beta, bias and activation apply to Matrix operands, not host arrays")
        from ..outofcore import matmul_host  # the host path is a layer above the engine

        return matmul_host(a, b, out=out, precision=precision, devices=devices, memory_limit=memory_limit)
    if devices is not None or memory_limit is not None:
        raise ValueError(
            "matmul: devices= and memory_limit= apply to host (numpy) operands; Matrix operands compute on their "
            "own device"
        )
    return product(a, b, out, algorithm, precision, stream, alpha, beta, bias, activation, plan)
