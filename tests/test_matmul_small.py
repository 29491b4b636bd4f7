"""The small-products rows (cuda/matmul_small.cu, issue 41 item 3): batches of products of at most 256
elements of C (small: one output a thread) or 64 x 64 (small_wide: register tiles of 4 x 8 a lane, a warp's
own matrix up to 32 x 32), several whole matrices a block, A and B read in place in either layout, every dtype.

Without a GPU: the geometry the host and the kernel share, the grid, the arguments, one launch whatever
the batch and layout, auto's use of it. On the GPU: every dtype and layout against a float64 reference on
shapes of 1, primes and around the register tiles' steps, K past the staged chunk, batches past 65535,
operands shared by the batch, padded views and poisoned padded results, the epilogue; bits repeat."""

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import FAKE_DEVICE, H100, bound_run, rng

import gpumat as gm
from gpumat._dtypes import BFLOAT16
from gpumat.matmul.engine import VARIANTS, BoundPlan, Problem, plan, small_chunk, small_per_block

SMALL, WIDE = VARIANTS["small"], VARIANTS["small_wide"]
SOURCE = Path(__file__).resolve().parents[1] / "cuda" / "matmul_small.cu"


# ---- without a GPU ----


def test_the_host_s_geometry_is_the_kernel_s():
    src = SOURCE.read_text()
    for line in (
        "constexpr int THREADS = 256;",
        "constexpr int SMEM_BYTES = 16384;",
        "constexpr int PASSES = 4;",
        "const int per_pass = max(1, THREADS / (M * N));",
        "return {per_pass, per_pass * PASSES};",
        "const int kc = max(1, min(min(K, 32), ELEMS / (G * (M + N))));",  # small's staged chunk
        "constexpr int WIDE_THREADS = 128;",
        "constexpr int WIDE_SMEM = 36864;",
        "constexpr int WIDE_KC = 64;",
        "const bool one_warp = M <= 32 && N <= 32;",
        "g.per_block = WIDE_THREADS / g.group;",
        "g.slice = WIDE_SMEM / acc_bytes / g.per_block;",
        "g.kc = max(1, min(min(K, WIDE_KC), (g.slice - g.mp - 4) / (g.mp + 1 + g.np + 4)));",
        "g.kp = g.kc | 1;",
        "g.ns = g.np + 4;",
        "g.b_at = (g.mp * g.kp + 3) / 4 * 4;",
    ):
        assert line in src, line
    assert SMALL.block == (256, 1, 1) and SMALL.smem == 0 and WIDE.block == (128, 1, 1) and WIDE.smem == 36864
    for v in (SMALL, WIDE):
        assert (v.max_m, v.max_n) == (64, 64) and v.packs and v.reads_either_layout
    assert SMALL.max_outputs == 256 and WIDE.max_outputs is None
    assert all(k.name.endswith("_wide") for k in WIDE.kernels.values())


@given(m=st.integers(1, 64), n=st.integers(1, 64), k=st.integers(1, 300), batch=st.integers(1, 10**6))
def test_the_grid_covers_the_batch_with_whole_matrices_a_block(m, n, k, batch):
    for v, wide in ((SMALL, False), (WIDE, True)):
        if not v.computes_shape(m, n):
            assert m * n > 256 and not wide
            continue
        g = small_per_block(m, n, wide)
        if wide:  # a warp a matrix up to 32 x 32, else the block's four warps a quarter each
            assert g == (4 if m <= 32 and n <= 32 else 1)
        else:  # one output a thread, four matrices over
            assert g == max(1, 256 // (m * n)) * 4
        gx, gy, gz = v.grid(m, n, 1, 132, batch)
        assert (gy, gz) == (1, 1) and (gx - 1) * g < batch <= gx * g


@given(m=st.integers(1, 64), n=st.integers(1, 64), k=st.integers(1, 300), itemsize=st.sampled_from([2, 4, 8]))
def test_small_wide_s_staged_chunk_fits_its_share_of_shared_memory(m, n, k, itemsize):
    kc = small_chunk(m, n, k, itemsize, True)
    acc = 8 if itemsize == 8 else 4
    mp, np_ = math.ceil(m / 32) * 32, math.ceil(n / 32) * 32
    kp = kc | 1  # A's rows: an odd stride
    b_at = math.ceil(mp * kp / 4) * 4  # B 16-byte aligned
    used = b_at + kc * (np_ + 4)
    assert 1 <= kc <= min(k, 64) and kp % 2 == 1
    assert used * acc * small_per_block(m, n, True) <= 36864
    if kc < min(k, 64):  # a chunk one longer would not fit a group's share
        assert (mp + (kc + 1) * (mp + 1 + np_ + 4) + 4) * acc * small_per_block(m, n, True) > 36864


def test_a_batch_is_one_launch_in_any_layout_with_no_copy(monkeypatch):
    m, n, k, batch = 16, 24, 40, 70000  # past the grid's 65535 layers: one launch still
    for ta in (False, True):
        for tb in (False, True):
            q = plan(Problem(m, n, k, "f16", "f16", "native", batch=batch, a_trans=ta, b_trans=tb), H100, "small_wide")
            assert not (q.copy_a or q.copy_b) and q.grid == (math.ceil(batch / small_per_block(m, n, True)), 1, 1)
            assert BoundPlan(q, FAKE_DEVICE).shape == "direct"
            a = (0x7F0000000000, m if ta else k, m * k)
            b = (0x7F0010000000, k if tb else n, 0)  # one B for the batch
            c = (0x7F0020000000, n, m * n)
            _, launches, copies = bound_run(monkeypatch, q, a, b, c)
            assert copies == [] and len(launches) == 1
            name, grid, block, args, _ = launches[0]
            assert name == "matmul_small_f16_wide" and grid == q.grid and block == (128, 1, 1)
            assert args[:15] == (
                a[0],
                b[0],
                c[0],
                m,
                n,
                k,
                a[1],
                b[1],
                c[1],
                batch,
                int(ta),
                int(tb),
                *(m * k, 0, m * n),
            )


def test_auto_weighs_it_for_batches_of_small_products_and_never_for_one():
    for sfx in ("f32", "f64", "f16", "bf16"):
        mode = "float32" if sfx == "f32" else "native"
        for side in (2, 16, 32):
            many = plan(Problem(side, side, side, sfx, sfx, mode, batch=4096), H100)
            # among the candidates (the matrix-vector rows' too); float64 past 256 outputs has none: small_wide
            # is its only by name
            rows = [] if sfx == "f64" and side * side > 256 else ["small" if side * side <= 256 else "small_wide"]
            assert all(f"{row} " in many.reason for row in rows), many.reason
            assert (sfx == "f64") == ("small_wide " not in many.reason), many.reason
            one = plan(Problem(side, side, side, sfx, sfx, mode), H100)
            assert one.algorithm != "small"
    with pytest.raises(ValueError, match="at most 64 x 64"):
        plan(Problem(65, 8, 8, "f32", "f32", "float32", batch=2), H100, "small_wide")
    with pytest.raises(ValueError, match="and 256 elements"):
        plan(Problem(17, 16, 8, "f32", "f32", "float32", batch=2), H100, "small")


def test_a_tensor_core_mode_runs_a_batch_of_tiny_products_as_exact_fp32():
    for mode in ("tf32", "tf32x3"):
        q = plan(Problem(16, 16, 16, "f32", "f32", mode, batch=4096), H100)
        assert q.problem.mode == "float32" and "exact FP32" in q.reason


# ---- on the GPU ----

KINDS = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": BFLOAT16}
EPS = {"float32": 2.0**-24, "float64": 2.0**-53, "float16": 2.0**-24, "bfloat16": 2.0**-24}
RESULT_EPS = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
SIDES = [1, 2, 3, 5, 7, 8, 13, 15, 16, 17, 31, 32, 33, 47, 63, 64]


def tolerance(kind: str, k: int) -> float:
    eps = EPS[kind]
    return 8 * eps * math.sqrt(max(k, 1)) + RESULT_EPS.get(kind, eps)


def host_random(shape, dtype):
    return rng.uniform(-1, 1, size=shape).astype(np.float32).astype(dtype)


def upload(host: np.ndarray, transposed: bool, pad: int):
    """host ((batch,) rows, cols) on the GPU inside storage `pad` columns and one row wider a matrix (odd
    offsets and strides), stored transposed and read through .T when asked: (view, parent)."""
    store = np.swapaxes(host, -1, -2) if transposed else host
    shape = list(store.shape)
    shape[-2] += 1
    shape[-1] += pad
    parent_host = host_random(shape, host.dtype)
    rows, cols = slice(1, 1 + store.shape[-2]), slice(pad, pad + store.shape[-1])
    parent_host[..., rows, cols] = store
    parent = gm.Matrix.from_numpy(parent_host)
    view = parent[:, rows, cols] if store.ndim == 3 else parent[rows, cols]
    return (view.T if transposed else view), parent


def check(kind, got, a_host, b_host, k, what):
    a64, b64 = a_host.astype(np.float64), b_host.astype(np.float64)
    ref, scale = np.matmul(a64, b64), np.matmul(np.abs(a64), np.abs(b64))
    got = got.astype(np.float64)
    assert not np.isnan(got).any(), f"an element not written {what}"
    err = np.abs(got - ref) / np.maximum(scale, 2.0**-14)
    assert err.max() <= tolerance(kind, k), (err.max(), what)


@st.composite
def cases(draw):
    return {
        "kind": draw(st.sampled_from(list(KINDS))),
        "m": draw(st.sampled_from(SIDES)),
        "n": draw(st.sampled_from(SIDES)),
        "k": draw(st.sampled_from([1, 2, 7, 16, 31, 32, 33, 64, 100, 257])),
        "batch": draw(st.sampled_from([1, 2, 3, 17, 255, 1000])),
        "shared": draw(st.sampled_from(["none", "a", "b"])),
        "ta": draw(st.booleans()),
        "tb": draw(st.booleans()),
        "pads": [draw(st.integers(0, 3)) for _ in range(3)],
        "wide": draw(st.booleans()),  # small_wide where small could run too
    }


@pytest.mark.gpu
@settings(max_examples=250, deadline=None)
@given(cases())
def test_small_products_against_a_float64_reference(case):
    kind, m, n, k, batch = (case[x] for x in ("kind", "m", "n", "k", "batch"))
    dtype = KINDS[kind]
    a_host = host_random((m, k) if case["shared"] == "a" else (batch, m, k), dtype)
    b_host = host_random((k, n) if case["shared"] == "b" else (batch, k, n), dtype)
    a, pa = upload(a_host, case["ta"], case["pads"][0])
    b, pb = upload(b_host, case["tb"], case["pads"][1])
    out_host = np.full((batch, m + 1, n + case["pads"][2]), np.nan, dtype)
    pc = gm.Matrix.from_numpy(out_host)
    out = pc[:, 1:, case["pads"][2] :]
    try:
        q = gm.matmul_plan(a, b, out=out, algorithm="small" if m * n <= 256 and not case["wide"] else "small_wide")
        assert not (q.copy_a or q.copy_b)
        gm.matmul(a, b, out=out, plan=q)
        check(kind, out.to_numpy(), a_host, b_host, k, case)
        after = pc.to_numpy()
        outside = np.ones(after.shape, bool)
        outside[:, 1:, case["pads"][2] :] = False
        assert np.isnan(after[outside].astype(np.float64)).all(), "written outside out's view"
    finally:
        for x in (pa, pb, pc):
            x.free()


@pytest.mark.gpu
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_batch_past_the_grid_s_limit_and_halves_into_float32(kind):
    """Also the widest register tiles (64 x 64) on a batch, as auto may take them."""
    dtype = KINDS[kind]
    batch, m, n, k = 65537 * 2 + 5, 4, 3, 5
    a_host, b_host = host_random((batch, m, k), dtype), host_random((batch, k, n), dtype)
    with gm.Matrix.from_numpy(a_host) as a, gm.Matrix.from_numpy(b_host) as b:
        for name in ("small", "small_wide"):  # small_wide: a warp a matrix
            with gm.matmul(a, b, algorithm=name) as c:
                check(kind, c.to_numpy(), a_host, b_host, k, (kind, name))
        if kind in ("float16", "bfloat16"):
            with gm.Matrix.empty((batch, m, n), dtype=np.float32) as c32:
                gm.matmul(a, b, out=c32, algorithm="small")
                check("float32", c32.to_numpy(), a_host, b_host, k, kind)
    a_host, b_host = host_random((70, 64, 100), dtype), host_random((70, 100, 64), dtype)
    with gm.Matrix.from_numpy(a_host) as a, gm.Matrix.from_numpy(b_host) as b:
        with gm.matmul(a, b, algorithm="small_wide") as c:
            check(kind, c.to_numpy(), a_host, b_host, 100, kind)


@pytest.mark.gpu
@pytest.mark.parametrize("name, m, n", [("small", 5, 36), ("small_wide", 20, 36), ("small_wide", 64, 61)])
@pytest.mark.parametrize("kind", list(KINDS))
def test_the_epilogue_and_bits_that_repeat(kind, name, m, n):
    dtype = KINDS[kind]
    batch, k = 300, 70
    a_host, b_host = host_random((batch, k, m), dtype), host_random((batch, k, n), dtype)
    c0 = host_random((batch, m, n), dtype)
    bias_host = host_random((m, 1), np.float32)
    with gm.Matrix.from_numpy(a_host) as a, gm.Matrix.from_numpy(b_host) as b, gm.Matrix.from_numpy(bias_host) as bias:
        runs = []
        for _ in range(2):
            with gm.Matrix.from_numpy(c0) as c:
                gm.matmul(a.T, b, out=c, algorithm=name, alpha=2.0, beta=0.5, bias=bias, activation="gelu_tanh")
                runs.append(c.to_numpy())
        assert np.array_equal(runs[0].view(np.uint8), runs[1].view(np.uint8))
    a64 = np.swapaxes(a_host.astype(np.float64), -1, -2)
    r = 2.0 * np.matmul(a64, b_host.astype(np.float64)) + 0.5 * c0.astype(np.float64) + bias_host
    ref = 0.5 * r * (1 + np.tanh(math.sqrt(2 / math.pi) * (r + 0.044715 * r**3)))
    scale = 2.0 * np.matmul(np.abs(a64), np.abs(b_host.astype(np.float64))) + np.abs(c0) + np.abs(bias_host)
    assert (np.abs(runs[0].astype(np.float64) - ref) / scale).max() <= tolerance(kind, k) + 2.0**-20
