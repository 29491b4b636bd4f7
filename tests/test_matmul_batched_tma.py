"""Batches on the TMA + wgmma rows (issue 41): every row by name (16-bit, TF32, int8 and FP8, each tile and layout)
on batches of 1, 2, 3 and past the grid's 65535, with A or B shared by the batch, strided batch views,
results in padded storage poisoned with NaN (an element not written stays NaN; the padding around the
views must come back unchanged), the epilogue reading the old C of each matrix; bits repeat and equal
each matrix's 2-D product by the same row."""

import math

import numpy as np
import pytest
from support import rng

import gpumat as gm
from gpumat._dtypes import BFLOAT16, float8
from gpumat.matmul.engine import VARIANTS

pytestmark = pytest.mark.gpu

TMA_ROWS = [name for name, v in VARIANTS.items() if v.tma]
INT8_POISON = -0x5A5A5A5B  # an int8 product's C before the product: no sum of these tests takes it
# the input dtypes and precision each row is named with
HALVES = {"float16": np.float16, "bfloat16": BFLOAT16}
E4M3 = float8("e4m3")  # (the FP8 rows' e4m3 kernels; C float32)


@pytest.fixture(autouse=True)
def _hopper(request):
    """The TMA rows are sm_90a machine code: they run on compute capability 9.0 alone."""
    if "gpu" in request.keywords and gm.device().arch != 90:
        pytest.skip(f"the TMA + wgmma rows run on sm_90 alone, this GPU is sm_{gm.device().arch}")


def cases_of(name: str) -> list[tuple[str, np.dtype, str | None]]:
    if VARIANTS[name].mode == "tf32":
        return [("tf32", np.float32, "tf32")]
    if ("s8", "s32") in VARIANTS[name].kernels:  # int8 in, the int32 sums out: exact
        return [("int8", np.int8, None)]
    if ("e4m3", "f32") in VARIANTS[name].kernels:
        return [("fp8", E4M3, None)]
    return [(kind, dtype, None) for kind, dtype in HALVES.items()]


def tolerance(kind: str, k: int) -> float:
    """Elementwise, relative to |A| |B| (+ |beta C|): operands exact in their dtype (TF32 rounds them,
    2^-11 each), float32 sums growing with sqrt(K) (a factor 8 of margin), one rounding of the result."""
    if kind == "int8":
        return 0.0
    if kind == "fp8":  # the tensor cores' own FP8 accumulation (tests/test_matmul_fp8_gpu.py), a float32 C
        return (math.ceil(k / 32) + 1) * 2.0**-13 + 2.0**-24
    operand = 2.0**-10 if kind == "tf32" else 0.0
    result = {"float16": 2.0**-11, "bfloat16": 2.0**-8}.get(kind, 2.0**-24)
    return operand + 8 * 2.0**-24 * math.sqrt(k) + result


def host_random(shape, dtype) -> np.ndarray:
    if dtype == np.int8:
        return rng.integers(-128, 127, size=shape, endpoint=True).astype(np.int8)
    return rng.uniform(-1, 1, size=shape).astype(np.float32).astype(dtype)


def batch_view(host: np.ndarray, transposed: bool, extra_rows: int, extra_cols: int):
    """host ((batch,) rows, cols) on the GPU in storage with `extra_rows` rows and `extra_cols` columns of
    padding a matrix beyond the columns rounded up to 8 (a batch stride and row stride wider than the
    view, 16-byte multiples when extra_cols is a multiple of 8), stored transposed and read through .T
    when asked. Returns (view, parent)."""
    store = np.swapaxes(host, -1, -2) if transposed else host
    shape = list(store.shape)
    unit = 16 if host.dtype.itemsize == 1 else 8  # (1-byte: 16 elements make 16 bytes, and the padding doubles)
    shape[-2] += extra_rows
    shape[-1] += -shape[-1] % unit + extra_cols * unit // 8  # rows a whole number of 16 bytes, then the padding
    parent_host = host_random(shape, host.dtype)
    parent_host[..., : store.shape[-2], : store.shape[-1]] = store
    parent = gm.Matrix.from_numpy(parent_host, dtype=parent_host.dtype)
    rows, cols = slice(0, store.shape[-2]), slice(0, store.shape[-1])
    view = parent[:, rows, cols] if store.ndim == 3 else parent[rows, cols]
    return (view.T if transposed else view), parent


def poisoned_out(batch: int, m: int, n: int, dtype, start: np.ndarray | None = None):
    """A (batch, m, n) view inside NaN-filled storage 8 columns and 3 rows wider a matrix: (view, parent,
    the parent's host bytes before the product). `start` fills the view (the old C an epilogue reads). An
    int8 product's C: int32, filled with a value no test's sum takes; an FP8 product's: float32."""
    if dtype == np.int8:
        dtype, poison = np.int32, INT8_POISON
    else:
        dtype, poison = (np.float32 if dtype == E4M3 else dtype), np.nan
    host = np.full((batch, m + 3, n + 8), poison, dtype=dtype)
    if start is not None:
        host[:, :m, :n] = start
    parent = gm.Matrix.from_numpy(host, dtype=host.dtype)
    return parent[:, :m, :n], parent, host


def guard_bands_kept(parent, before: np.ndarray, m: int, n: int) -> bool:
    after = parent.to_numpy()
    outside = np.ones(after.shape, bool)
    outside[:, :m, :n] = False
    return np.array_equal(after[outside].view(np.uint8), before[outside].view(np.uint8))


def operands(name: str, dtype, batch: int, m: int, n: int, k: int, shared: str):
    """A and B in the layouts the row reads in place (A stored transposed for the *at rows, B for the *bt
    rows), in padded storage; an operand `shared` by the batch is one 2-D matrix."""
    v = VARIANTS[name]
    a_shape = (m, k) if shared == "a" else (batch, m, k)
    b_shape = (k, n) if shared == "b" else (batch, k, n)
    a_host, b_host = host_random(a_shape, dtype), host_random(b_shape, dtype)
    a, pa = batch_view(a_host, v.reads_a_trans, 3, 8)
    b, pb = batch_view(b_host, v.reads_b_trans, 5, 16)
    return a_host, b_host, a, b, [pa, pb]


@pytest.mark.parametrize("shared", ["none", "a", "b"])
@pytest.mark.parametrize("batch", [1, 2, 3])
@pytest.mark.parametrize("name", TMA_ROWS)
def test_every_tma_row_runs_a_batch_in_place_into_poisoned_padded_results(name, batch, shared):
    m, n, k = 131, 136, 200  # odd rows, 16-byte rows of C (the TMA store), K past three k tiles
    for kind, dtype, precision in cases_of(name):
        a_host, b_host, a, b, keep = operands(name, dtype, batch, m, n, k, shared)
        out, pc, before = poisoned_out(batch, m, n, dtype)
        keep.append(pc)
        try:
            plan = gm.matmul_plan(a, b, out=out, algorithm=name, precision=precision)
            assert plan.algorithm == name and not (plan.copy_a or plan.copy_b), plan
            gm.matmul(a, b, out=out, plan=plan)
            got = out.to_numpy().astype(np.float64)
            a64, b64 = a_host.astype(np.float64), b_host.astype(np.float64)
            ref, scale = np.matmul(a64, b64), np.matmul(np.abs(a64), np.abs(b64))
            assert not np.isnan(got).any(), f"{name} {kind}: an element of C not written"
            assert kind != "int8" or not (got == INT8_POISON).any(), f"{name}: an element of C not written"
            err = np.abs(got - np.broadcast_to(ref, got.shape)) / np.maximum(np.broadcast_to(scale, got.shape), 1e-3)
            assert err.max() <= tolerance(kind, k), (name, kind, err.max())
            assert guard_bands_kept(pc, before, m, n), f"{name} {kind}: written outside out's views"
        finally:
            for x in keep:
                x.free()


@pytest.mark.parametrize("name", TMA_ROWS)
def test_many_work_items_a_block_on_every_row(name):
    """A batch of hundreds of products: each persistent block walks many work items, its consumers'
    C buffers turning over store after store (the 128 x 64 tile, one TMA box a tile, once refilled the
    buffer its last store was still reading: 512 attention-value products came out wrong)."""
    batch, m, n, k = 300, 256, 64, 256
    for kind, dtype, precision in cases_of(name):
        a_host, b_host, a, b, keep = operands(name, dtype, batch, m, n, k, "none")
        out, pc, before = poisoned_out(batch, m, n, dtype)
        keep.append(pc)
        try:
            plan = gm.matmul_plan(a, b, out=out, algorithm=name, precision=precision)
            assert plan.grid[0] < 2 * 2 * batch  # fewer blocks than work items
            gm.matmul(a, b, out=out, plan=plan)
            a64, b64 = a_host.astype(np.float64), b_host.astype(np.float64)
            ref, scale = np.matmul(a64, b64), np.matmul(np.abs(a64), np.abs(b64))
            got = out.to_numpy().astype(np.float64)
            assert not np.isnan(got).any() and (np.abs(got - ref) / scale).max() <= tolerance(kind, k), (name, kind)
            assert guard_bands_kept(pc, before, m, n)
        finally:
            for x in keep:
                x.free()


@pytest.mark.parametrize("name", TMA_ROWS)
def test_a_batched_tma_product_equals_each_matrix_s_2d_product_bit_for_bit_and_repeats(name):
    batch, m, n, k = 4, 200, 72, 320  # 72 columns: C's rows are not whole 128-byte boxes
    for kind, dtype, precision in cases_of(name):
        _, _, a, b, keep = operands(name, dtype, batch, m, n, k, "none")
        try:
            plan = gm.matmul_plan(a, b, algorithm=name, precision=precision)
            runs = []
            for _ in range(2):
                with gm.matmul(a, b, plan=plan) as c:
                    runs.append(c.to_numpy())
            assert np.array_equal(runs[0].view(np.uint8), runs[1].view(np.uint8)), (name, kind)
            for i in range(batch):
                one = gm.matmul_plan(a[i], b[i], algorithm=name, precision=precision, splits=1)
                with gm.matmul(a[i], b[i], plan=one) as ci:
                    assert np.array_equal(ci.to_numpy().view(np.uint8), runs[0][i].view(np.uint8)), (name, kind, i)
        finally:
            for x in keep:
                x.free()


@pytest.mark.parametrize("name", ["wgmma128x128", "wgmma128x256bt", "wgmma128x128at", "tf32_wgmma128x128bt"])
def test_the_epilogue_reads_each_matrix_s_own_old_c(name):
    batch, m, n, k = 3, 150, 264, 96
    for kind, dtype, precision in cases_of(name):
        a_host, b_host, a, b, keep = operands(name, dtype, batch, m, n, k, "none")
        c0 = host_random((batch, m, n), dtype)
        out, pc, before = poisoned_out(batch, m, n, dtype, c0)
        bias_host = host_random((1, n), np.float32)
        bias = gm.Matrix.from_numpy(bias_host)
        keep += [pc, bias]
        try:
            plan = gm.matmul_plan(a, b, out=out, algorithm=name, precision=precision)
            gm.matmul(a, b, out=out, plan=plan, alpha=0.5, beta=-1.0, bias=bias, activation="relu")
            a64, b64, c64 = (x.astype(np.float64) for x in (a_host, b_host, c0))
            ref = np.maximum(0.5 * np.matmul(a64, b64) - c64 + bias_host.astype(np.float64), 0)
            scale = 0.5 * np.matmul(np.abs(a64), np.abs(b64)) + np.abs(c64) + np.abs(bias_host)
            got = out.to_numpy().astype(np.float64)
            assert (np.abs(got - ref) / scale).max() <= tolerance(kind, k) + 2.0**-20, (name, kind)
            assert guard_bands_kept(pc, before, m, n)
        finally:
            for x in keep:
                x.free()


@pytest.mark.parametrize("name", ["wgmma128x128bt", "tf32_wgmma128x128bt"])
def test_a_batch_past_the_grid_s_limit_is_one_launch(name):
    """65537 tiny products: work items of one persistent grid, no second launch needed."""
    batch, m, n, k = 65537, 3, 8, 8
    for kind, dtype, precision in cases_of(name)[:1]:
        a_host, b_host, a, b, keep = operands(name, dtype, batch, m, n, k, "none")
        try:
            plan = gm.matmul_plan(a, b, algorithm=name, precision=precision)
            with gm.matmul(a, b, plan=plan) as c:
                got = c.to_numpy().astype(np.float64)
            a64, b64 = a_host.astype(np.float64), b_host.astype(np.float64)
            err = np.abs(got - np.matmul(a64, b64)) / np.maximum(np.matmul(np.abs(a64), np.abs(b64)), 1e-3)
            assert err.max() <= tolerance(kind, k), (name, kind)
        finally:
            for x in keep:
                x.free()


def test_attention_scores_with_k_a_transposed_view_run_in_place_on_hopper():
    """Q @ K^T (K's storage read as B stored transposed) in float16: auto takes a row that reads it in
    place (no copy), and the result matches the reference."""
    batch, tokens, d = 12, 77, 64
    q_host, k_host = host_random((batch, tokens, d), np.float16), host_random((batch, tokens, d), np.float16)
    with gm.Matrix.from_numpy(q_host) as q, gm.Matrix.from_numpy(k_host) as kk:
        plan = gm.matmul_plan(q, kk.T)
        assert not plan.copy_b, plan
        with gm.matmul(q, kk.T) as s:
            got = s.to_numpy().astype(np.float64)
    q64, k64 = q_host.astype(np.float64), k_host.astype(np.float64)
    ref = np.matmul(q64, np.swapaxes(k64, -1, -2))
    scale = np.matmul(np.abs(q64), np.abs(np.swapaxes(k64, -1, -2)))
    assert (np.abs(got - ref) / scale).max() <= tolerance("float16", d)
