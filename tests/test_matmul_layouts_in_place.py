"""The float32 and float64 tiles reading A or B (or both) stored transposed in place (issue 41 item 1: the
*at, *bt, *atbt rows of the sgemm and dmma tiles, the few-row ones included): on the GPU, every
row against a float64 reference (computed from the same inputs) on shapes around its tile (1, primes, tile
size +-1), views at odd offsets, batches, split K and the epilogue, results poisoned with NaN; and bit for
bit what the row-major tile computes from the same operands copied row-major first (the same products,
summed in the same order)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import rng

import gpumat as gm
from gpumat.matmul.engine import VARIANTS

pytestmark = pytest.mark.gpu

ROWS = [
    name for name, v in VARIANTS.items() if name.startswith(("sgemm", "dmma")) and (v.reads_a_trans or v.reads_b_trans)
]
SIDES = [1, 2, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 257]
DTYPE = {"sgemm": np.float32, "dmma": np.float64}
EPS = {"sgemm": 2.0**-24, "dmma": 2.0**-53}


def family(name: str) -> str:
    return "sgemm" if name.startswith("sgemm") else "dmma"


def host_random(shape, dtype=np.float32):
    return rng.uniform(-1, 1, size=shape).astype(dtype)


def upload(host: np.ndarray, transposed: bool, pad: int):
    """host on the GPU at column offset `pad` of wider storage (odd offsets and strides), stored transposed
    and read through .T when asked: (view, parent)."""
    store = np.ascontiguousarray(np.swapaxes(host, -1, -2)) if transposed else host
    shape = list(store.shape)
    shape[-1] += pad + 1
    parent_host = host_random(shape, host.dtype)
    parent_host[..., pad : pad + store.shape[-1]] = store
    parent = gm.Matrix.from_numpy(parent_host)
    cols = slice(pad, pad + store.shape[-1])
    view = parent[:, cols] if store.ndim == 2 else parent[:, :, cols]
    return (view.T if transposed else view), parent


@st.composite
def cases(draw):
    return {
        "m": draw(st.sampled_from(SIDES)),
        "n": draw(st.sampled_from(SIDES)),
        "k": draw(st.sampled_from([1, 8, 9, 100, 513])),
        "batch": draw(st.sampled_from([None, 1, 3])),
        "splits": draw(st.sampled_from([1, 1, 3])),
        "pads": [draw(st.integers(0, 3)) for _ in range(3)],
        "epilogue": draw(st.booleans()),
    }


@pytest.mark.parametrize("name", ROWS)  # every row its own draws (sampled among the rows, some got none)
@settings(max_examples=8, deadline=None)
@given(case=cases())
def test_a_transposed_operand_read_in_place_against_float64(name, case):
    case = {**case, "name": name}
    v, fam = VARIANTS[name], family(name)
    m, n, k, batch = case["m"], case["n"], case["k"], case["batch"]
    lead = () if batch is None else (batch,)
    dt = DTYPE[fam]
    a_host, b_host = host_random((*lead, m, k), dt), host_random((*lead, k, n), dt)
    c0 = host_random((*lead, m, n), dt)
    a, pa = upload(a_host, v.reads_a_trans, case["pads"][0])
    b, pb = upload(b_host, v.reads_b_trans, case["pads"][1])
    out, pc = upload(c0 if case["epilogue"] else np.full((*lead, m, n), np.nan, dt), False, case["pads"][2])
    try:
        splits = case["splits"] if (batch or 1) == 1 and k > 256 else 1
        plan = gm.matmul_plan(a, b, out=out, algorithm=case["name"], splits=splits)
        assert not (plan.copy_a or plan.copy_b), plan
        alpha, beta = (0.5, -1.0) if case["epilogue"] else (1.0, 0.0)
        gm.matmul(a, b, out=out, plan=plan, alpha=alpha, beta=beta, activation="relu" if case["epilogue"] else None)
        a64, b64, c64 = (x.astype(np.float64) for x in (a_host, b_host, c0))
        ref = alpha * np.matmul(a64, b64) + (beta * c64 if beta else 0.0)
        ref = np.maximum(ref, 0) if case["epilogue"] else ref
        scale = abs(alpha) * np.matmul(np.abs(a64), np.abs(b64)) + (abs(beta) * np.abs(c64) if beta else 0.0)
        got = out.to_numpy().astype(np.float64)
        assert not np.isnan(got).any(), f"an element not written {case}"
        tol = 8 * EPS[fam] * math.sqrt(k) + 2 * EPS[fam]
        assert (np.abs(got - ref) / np.maximum(scale, 2.0**-14)).max() <= tol, case
    finally:
        for x in (pa, pb, pc):
            x.free()


@pytest.mark.parametrize("name", ROWS)
def test_in_place_equals_the_row_major_tile_on_a_copy_bit_for_bit(name):
    v, dt = VARIANTS[name], DTYPE[family(name)]
    plain = name.replace("atbt", "").replace("at", "").replace("bt", "")
    m, n, k = 300, 200, 700
    a, pa = upload(host_random((m, k), dt), v.reads_a_trans, 1)
    b, pb = upload(host_random((k, n), dt), v.reads_b_trans, 2)
    try:
        results = []
        for algorithm in (name, plain):  # the row-major tile copies the transposed operands first
            plan = gm.matmul_plan(a, b, algorithm=algorithm, splits=1)
            assert (plan.copy_a, plan.copy_b) == (
                (False, False) if algorithm == name else (v.reads_a_trans, v.reads_b_trans)
            )
            with gm.matmul(a, b, plan=plan) as c:
                results.append(c.to_numpy())
        assert np.array_equal(results[0].view(np.uint8), results[1].view(np.uint8))
    finally:
        pa.free()
        pb.free()
