"""Stream-K on the wgmma rows (the *sk rows): every work item's k tiles cut into one range a block, a work item
split over the blocks whose ranges cover it, its owner adding the others' partial sums. Each row by name in
float16 and bfloat16, on products of one k tile to hundreds (a work item over every block of the grid),
edges of every tile, results poisoned with NaN in padded storage (an element not written stays NaN, the
padding must come back unchanged), the epilogue; the bits repeat call after call. The planner's side (grid,
scratch, the model) runs without a GPU: tests/test_matmul_planner.py."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import dims
from test_matmul_batched_tma import HALVES, batch_view, guard_bands_kept, host_random, poisoned_out

import gpumat as gm
from gpumat.matmul.engine import VARIANTS

pytestmark = pytest.mark.gpu

STREAMK = [name for name, v in VARIANTS.items() if v.streamk]


@pytest.fixture(autouse=True)
def _hopper(request):
    if "gpu" in request.keywords and gm.device().arch != 90:
        pytest.skip(f"the stream-K rows are sm_90a machine code, this GPU is sm_{gm.device().arch}")


def tolerance(kind: str, k: int) -> float:
    """Elementwise, relative to |A| |B| (+ |beta C| + |bias|): float32 sums growing with sqrt(K) (a factor 8
    of margin), one rounding of the result to its 16-bit dtype."""
    return 8 * 2.0**-24 * math.sqrt(k) + {"float16": 2.0**-11, "bfloat16": 2.0**-8}[kind]


def run(name: str, kind: str, m: int, n: int, k: int, epilogue: bool = False, repeats: int = 1):
    """The product by the row, into a poisoned padded C (holding an old C for the epilogue), `repeats` times
    over a fresh C: checked against float64, the guard bands kept, the same bits each time. Returns the
    plan."""
    dtype, v = HALVES[kind], VARIANTS[name]
    a_host, b_host = host_random((m, k), dtype), host_random((k, n), dtype)
    a, pa = batch_view(a_host, False, 3, 8)
    b, pb = batch_view(b_host, v.reads_b_trans, 5, 16)
    c0 = host_random((1, m, n), dtype) if epilogue else None
    bias_host = host_random((1, n), np.float32)
    bias = gm.Matrix.from_numpy(bias_host)
    keep = [pa, pb, bias]
    extra = {"alpha": 0.5, "beta": -1.0, "bias": bias, "activation": "relu"} if epilogue else {}
    try:
        results = []
        for _ in range(repeats):
            out, pc, before = poisoned_out(1, m, n, dtype, c0)
            keep.append(pc)
            plan = gm.matmul_plan(a, b, out=out[0], algorithm=name)
            assert plan.algorithm == name and plan.splits == 1 and not (plan.copy_a or plan.copy_b), plan
            gm.matmul(a, b, out=out[0], plan=plan, **extra)
            results.append(out.to_numpy()[0])
            assert guard_bands_kept(pc, before, m, n), f"{name} {kind}: written outside out's view"
        for again in results[1:]:
            assert np.array_equal(results[0].view(np.uint16), again.view(np.uint16)), (name, kind, m, n, k)
        a64, b64 = a_host.astype(np.float64), b_host.astype(np.float64)
        ref, scale = a64 @ b64, np.abs(a64) @ np.abs(b64)
        if epilogue:
            c64 = c0[0].astype(np.float64)
            ref = np.maximum(0.5 * ref - c64 + bias_host.astype(np.float64), 0)
            scale = 0.5 * scale + np.abs(c64) + np.abs(bias_host)
        got = results[0].astype(np.float64)
        assert not np.isnan(got).any(), f"{name} {kind} {m}x{n}x{k}: an element of C not written"
        err = (np.abs(got - ref) / np.maximum(scale, 1e-3)).max()
        assert err <= tolerance(kind, k), (name, kind, m, n, k, err)
        return plan
    finally:
        for x in keep:
            x.free()


@pytest.mark.parametrize("kind", list(HALVES))
@pytest.mark.parametrize("name", STREAMK)
@pytest.mark.parametrize(
    "m, n, k",
    [
        (1, 1, 1),  # one k tile: one block
        (1, 8, 64),
        (127, 255, 65),  # the tile's edges, two k tiles
        (128, 256, 64 * 300),  # one work item over every block: its owner adds 131 partial sums
        (256, 512, 64 * 33 + 5),  # few items, each over several blocks, K past a tile
        (300, 520, 1000),
        (1536, 1536, 1536),  # the mid-size product stream-K is for: items over one or two blocks
    ],
)
def test_every_streamk_row_matches_float64_and_repeats_its_bits(name, kind, m, n, k):
    plan = run(name, kind, m, n, k, repeats=3)
    bm, bn = VARIANTS[name].tile
    k_tiles = -(-m // bm) * -(-n // bn) * -(-k // 64)
    assert plan.grid == (min(k_tiles, gm.device().sm_count), 1, 1)


@pytest.mark.parametrize("name", STREAMK)
def test_the_owner_applies_the_epilogue_once_to_the_whole_sum(name):
    for kind in HALVES:
        for m, n, k in ((200, 264, 64 * 40), (1536, 1536, 1536)):
            run(name, kind, m, n, k, epilogue=True, repeats=2)


@pytest.mark.parametrize("name", STREAMK)
@given(m=dims(700, (128, 256)), n=dims(700, (128, 256)), k=dims(5000, (64, 128)), kind=st.sampled_from(list(HALVES)))
def test_streamk_on_drawn_shapes(name, m, n, k, kind):
    run(name, kind, m, n, k)
