"""Every common call path of gpumat, run on the CPU with the driver replaced by a stand-in that answers
at once (benchmarks/python_path.py): CI has no GPU, and this is where a Python error in a path the GPU
tests cover (batches, epilogues, transposed operands, other libraries' streams) shows before the device
run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess:
    """A Python process over this tree's gpumat (the stand-in driver is installed by what it runs)."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_every_call_path_runs_through_the_stand_in_driver():
    out = _run(str(ROOT / "benchmarks" / "python_path.py"), "--calls", "5")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 24 and all(line.endswith(" us") for line in lines), out.stdout
    assert all(float(line.split()[-2]) > 0 for line in lines)


RECORDING = r"""
import sys
sys.path.insert(0, sys.argv[1])
import python_path
python_path.install()
import numpy as np
import gpumat as gm
from gpumat.matmul import engine
from gpumat.runtime import kernels

# (kernel, grid, block, first two arguments, the rest, shared memory, stream, dependent launch, cluster)
launches = []
def record(name, grid, block, args, smem, stream, dependent=False, cluster=1):
    launches.append((name, tuple(grid), tuple(block), args[:2], args[3:], smem, stream, dependent, cluster))
# (a dependent launch as the launch makes it: only where the device runs sm_90 code)
kernels.Kernel.__call__ = lambda self, grid, block, *args, smem=0, stream=0, device=None, dependent=None, cluster=1: (
    record(self.name, grid, block, args, smem, stream,
           self.launched_dependent(dependent) and kernels.runs_sm90_code(device.arch),
           cluster))
kernels.FixedLaunch.__call__ = lambda self, dev, stream, *leading: record(
    self.kernel.name, self.dims[:3], self.dims[3:6], (*leading, *self.tail), self.dims[6], stream,
    self.dependent and kernels.runs_sm90_code(dev.arch), self.cluster)
# what a launch of each kernel should be on the stand-in's sm_90: dependent where the kernel waits for the grid before
follows = lambda name: name in kernels.DECLARED and kernels.DECLARED[name].waits_for_previous
from gpumat.runtime import bindings
for call in ("cuMemcpy2DAsync", "cuMemcpyDtoDAsync"):  # copies by the copy engine (a transpose of one row)
    def copying(*args, _real=getattr(bindings.driver, call)):
        launches.append(("copy_by_the_copy_engine", (0, 0, 0), (0, 0, 0), (), (), 0, 0, False, 1))
        return _real(*args)
    object.__setattr__(bindings.driver, call, copying)
COPIES, REDUCE = ("transpose_", "copy_"), "matmul_splitk_reduce"
import struct

def named(launch_list, names):
    # the launches with their arguments' device addresses by name (names: address -> "A", "B", ...; any other
    # address "address": scratch differs call to call) and each tensor map (128 bytes; the stand-in driver
    # writes into its words the address, rank, sizes, byte strides and box it describes) as those words,
    # its address named the same way
    def one(x):
        if type(x) is bytes and len(x) == 128:
            address, *words = struct.unpack("<16Q", x)
            return ("map", one(address), tuple(words))
        if type(x) is int and x >= 1 << 40:
            return names.get(x, "address")
        return x
    return [(n, g, bl, tuple(map(one, ab)), tuple(map(one, rest)), *more) for n, g, bl, ab, rest, *more in launch_list]

# the stream ordering each route asks for (route.use_on, route.mark_done), buffers by name
orderings = []
R = sys.modules["gpumat.matmul.route"]
def ordering(what, real):
    def recorded(*args):
        orderings.append((what, args))
        return real(*args)
    return recorded
R.use_on, R.mark_done = ordering("use_on", R.use_on), ordering("mark_done", R.mark_done)
rng = np.random.default_rng(int(sys.argv[2]))

import contextlib

@contextlib.contextmanager
def declined(owner, name):  # owner.name, a short path, declines every call inside: the full route takes it
    short = getattr(owner, name)
    setattr(owner, name, lambda *args: None)
    try:
        yield
    finally:
        setattr(owner, name, short)

# each case's error (type: text) as gpumat takes the call, then inside full_route() (a context that keeps the
# call off its short path): the same error both times, and an error each time; returns the count
def same_errors_on_both_routes(cases, full_route):
    seen = {}
    for route in (contextlib.nullcontext, full_route):
        for what, call in cases.items():
            with route():
                try:
                    call()
                    seen.setdefault(what, []).append("no error")
                except Exception as e:
                    seen.setdefault(what, []).append(f"{type(e).__name__}: {e}")
    for what, (short, full) in seen.items():
        assert short == full and short != "no error", (what, short, full)
    return len(seen)
"""

CONSISTENCY = (
    RECORDING
    + r"""
checked = split = exact_unaligned = 0
for case in range(300):
    dt = [np.float32, np.float16, np.float64][case % 3]
    m, n, k = (int(x) for x in rng.choice([1, 7, 16, 63, 64, 65, 129, 300], 3))
    batch = [None, 1, 3][case % 3 if case % 7 else 0]
    shared_b = case % 2 == 0
    a_t, b_t, out_t = (bool(rng.integers(2)) for _ in range(3))
    # every fifth float32 call at tf32x3 on views one column in (unaligned), where auto may run exact FP32,
    # whose rows slow down on unaligned operands unlike the mode's: shapes whose exact plan depends on it
    odd = case % 5 == 0 and dt is np.float32 and batch is None
    precision, shift = ("tf32x3", 1) if odd else (None, 0)
    if odd:
        m, n, k = ((32, 1024, 512), (64, 512, 512), (512, 64, 512), (1024, 1024, 512))[case // 5 % 4]
    def make(h, w, t, bt, shift=0):
        shape = (w, h + shift) if t else (h, w + shift)
        x = gm.Matrix.empty(shape if bt is None else (bt, *shape), dtype=dt)
        x = x[:, shift:] if shift else x
        return x.T if t else x
    a = make(m, k, a_t, batch, shift)
    b = make(k, n, b_t, None if shared_b else batch, shift)
    out = make(m, n, out_t, batch) if case % 4 else None
    launches.clear()
    engine.bound_plans.clear()  # nothing cached: the full route runs
    gm.matmul(a, b, out=out, alpha=0.5, precision=precision)
    if not launches:
        continue
    want = gm.matmul_plan(a, b, out, precision=precision)
    q = want.problem
    exact_unaligned += odd and q.mode == "float32" and not (q.a_aligned and q.b_aligned)
    product = [x for x in launches if not x[0].startswith(COPIES) and not x[0].startswith(REDUCE)]
    what = (case, m, n, k, batch, a_t, b_t, out_t, want, launches)
    assert product[0][0] == want.kernel.name and product[0][1][:2] == want.grid[:2], what
    assert any(x[0].startswith(REDUCE) for x in launches) == (want.splits > 1), what
    assert any(x[0].startswith(COPIES) for x in launches) == (want.copy_a or want.copy_b), what
    # the product, its reduction and the copies before it are queued as programmatic dependents of the launch
    # before them (every kernel that waits for it)
    assert [x[7] for x in launches] == [follows(x[0]) for x in launches], what
    if want.splits > 1:
        assert launches[-1][0] == want.reduce.name and launches[-2][0] == want.kernel.name, what
        split += 1
    checked += 1
# batches of tiny products (small_stream's, small_stream_in_place's and, past 32 a side, small_stream_block's,
# where auto ranks them first; float64's dmma32x32) and a batch of 1000^3 halves (rows a mid-sector length: the
# pair rows, clusters of two blocks), every layout, a transposed out, a shared B: the launch, its grid, block,
# cluster and arguments are the plan's, and the plain call launches the same
streamed = in_place = block = sliced = tiny_tile = paired = 0
batches = (
    (np.float16, (16, 16, 16), 20000),
    (np.float16, (8, 32, 24), 20000),  # not square: a transposed out swaps M and N
    (np.float16, (12, 12, 12), 50000),
    (np.float32, (12, 12, 12), 50000),
    (np.float16, (48, 40, 56), 5000),  # past 32 a side: small_stream_block
    (np.float16, (16, 64, 16), 50000),
    (np.float32, (32, 8, 32), 20000),  # past small_stream's 14 KiB a warp: three blocks an SM of a larger share
    (np.float64, (16, 16, 16), 100000),  # float64: two blocks an SM
    (np.float64, (24, 24, 24), 20000),  # float64 past small_stream: dmma32x32 and its layout rows
    (np.float16, (1000, 1000, 1000), 24),  # the pair rows
)
for dt, (m, n, k), batch in batches:
    for a_t, b_t, out_t, shared_b in ((0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 1, 0), (1, 1, 0, 1)):
        a = make(m, k, a_t, batch)
        b = make(k, n, b_t, None if shared_b else batch)
        out = make(m, n, out_t, batch)
        launches.clear()
        gm.matmul(a, b, out=out)  # the plain call, on its short path where it has one
        plain = [(x[0], x[1], x[2], x[5], x[8]) for x in launches]
        launches.clear()
        engine.bound_plans.clear()  # nothing cached: the full route runs
        gm.matmul(a, b, out=out, alpha=0.5)
        want = gm.matmul_plan(a, b, out)
        what = (dt, m, n, k, a_t, b_t, out_t, shared_b, want, launches)
        assert plain == [(x[0], x[1], x[2], x[5], x[8]) for x in launches], (plain, what)  # the same launch both ways
        assert [x[0] for x in launches] == [want.kernel.name], what
        assert launches[0][1] == want.grid and launches[0][2] == want.variant.block, what
        assert launches[0][5] == want.smem <= want.kernel.dynamic_smem and launches[0][8] == want.variant.cluster, what
        streamed += want.algorithm in ("small_stream", "small_stream_in_place", "small_stream_block")
        sliced += want.algorithm == "small_stream" and want.smem != want.variant.smem
        in_place += want.algorithm == "small_stream_in_place"
        block += want.algorithm == "small_stream_block"
        tiny_tile += want.algorithm.startswith("dmma32x32")
        paired += want.variant.cluster == 2
print(checked, split, exact_unaligned, streamed, in_place, block, sliced, tiny_tile, paired)
"""
)


def test_the_full_route_runs_the_plan_matmul_plan_shows():
    """gm.matmul's full route (batches, transposed views, a transposed out, an epilogue) runs the plan
    gm.matmul_plan describes for the same operands: its kernel and grid, its split's reduction, its copies; a
    tiny batch's plain call launches the same kernel, grid and shared memory as its full route."""
    for seed in (1, 2):
        out = _run("-c", CONSISTENCY, str(ROOT / "benchmarks"), str(seed))
        assert out.returncode == 0, out.stderr[-3000:]
        counts = (int(x) for x in out.stdout.split())
        checked, split, exact_unaligned, streamed, in_place, block, sliced, tiny_tile, paired = counts
        assert checked > 100  # most cases launch (K = 0 without an epilogue and empty results do not)
        assert split > 0  # and some split K
        assert exact_unaligned > 0  # and some at tf32x3 on unaligned views ran exact FP32
        assert streamed == 32  # the tiny batches, each layout, on the streamed rows
        assert sliced == 8  # float32 32 x 8 x 32 and float64 16^3: small_stream's launches of a larger share
        assert in_place == 8  # float16 16^3 and 8 x 32 x 24: read in place
        assert block == 8  # float16 48 x 40 x 56 and 16 x 64 x 16: a block's own chunks
        assert tiny_tile == 4  # float64 24^3: dmma32x32 in each layout, transposed operands read in place
        assert paired == 4  # 24 x 1000^3 halves: a pair row in each layout, launched as clusters of two


EMULATED = (
    RECORDING
    + r"""
checked = copied = 0
for case in range(40):
    dt, mode = ((np.float32, "fp32_int8"), (np.float64, "fp64_int8"))[case % 2]
    m, n, k = (int(x) for x in rng.choice([1, 7, 64, 65, 300, 3000], 3))
    a_t, b_t, out_t = (bool(x) for x in rng.integers(2, size=3))
    def make(h, w, t):
        x = gm.Matrix.empty((w, h) if t else (h, w), dtype=dt)
        return x.T if t else x
    a, b = make(m, k, a_t), make(k, n, b_t)
    out = make(m, n, out_t) if case % 3 else None
    for how in ("plain", "epilogue"):
        launches.clear()
        extra = {} if how == "plain" else {"alpha": 2.0, "activation": "relu"}
        gm.matmul(a, b, out=out, precision=mode, **extra)
        want = gm.matmul_plan(a, b, out=out, precision=mode)
        names = [x[0] for x in launches]
        what = (case, how, m, n, k, a_t, b_t, out_t, want, names)
        assert want.algorithm == "ozaki_" + mode and want.problem.mode == mode, what
        ours = [x for x in names if x.startswith("ozaki_") and x != "ozaki_residue_products"]
        sfx = want.kernel.name.rsplit("_", 1)[1]
        assert ours[:2] == ["ozaki_row_exponents_" + sfx, "ozaki_col_exponents_" + sfx], what
        assert names.count(want.kernel.name) >= 1 and names[-1] == want.kernel.name, what
        assert all(x.endswith("_" + sfx) for x in ours), what
        assert any(x.startswith(COPIES) for x in names) == (want.copy_a or want.copy_b), what
        copied += want.copy_a or want.copy_b
        checked += 1
print(checked, copied)
"""
)


def test_the_emulated_modes_take_the_full_route_and_run_the_plan_it_shows():
    """gm.matmul at precision "fp32_int8" / "fp64_int8" (never the fast lookup: it takes no precision) runs
    the plan gm.matmul_plan describes for the same operands, plain or with an epilogue, operands and out
    stored either way: the scheme's steps in the dtype's kernels, the reconstruction last, the row-major
    copies exactly where the plan has them."""
    out = _run("-c", EMULATED, str(ROOT / "benchmarks"), "4")
    assert out.returncode == 0, out.stderr[-3000:]
    checked, copied = (int(x) for x in out.stdout.split())
    assert checked == 80 and copied > 0


PLAIN = (
    RECORDING
    + r"""
streams = [None, gm.Stream(), python_path.ForeignStream(), python_path.TorchLikeStream()]
TF32_ATBT = [name for name, v in engine.VARIANTS.items() if v.mode == "tf32" and v.reads_a_trans]
checked = swapped = few_rows = tile64 = narrow = tf32_narrow = dmma_few = transposed = int8 = fp8 = tf32_atbt = 0
one_row = dependent = teaching = paired = 0
for case in range(216):
    gm.set_matmul_precision("tf32" if 20 <= case < 24 or 200 <= case < 208 else "float32")
    dt = (np.float32, np.float16, np.float64, "bfloat16")[case % 4]
    m, n, k = (int(x) for x in rng.choice([1, 7, 16, 63, 64, 65, 129, 300, 4096], 3))
    if case >= 208:  # a layer on one token, x @ W with W of 1024 or 3072 columns: the narrow one-row strips
        dt, (m, n, k) = (np.float32, np.float16, np.float64, "bfloat16")[case % 4], (1, (1024, 3072)[case % 2], 1024)
    elif case < 8:  # a layer on few tokens in the 16-bit dtypes: planned swapped (C^T written transposed)
        dt, (m, n, k) = (np.float16, "bfloat16")[case % 2], (16, 14336, 4096)
    elif case < 12:  # float32 layers on 32 and 64 tokens: the few-row SGEMM tiles
        dt, (m, n, k) = np.float32, ((32, 64)[case % 2], 4096, 4096)
    elif case < 16:  # 16-bit layers on 64 tokens against a 4096^2 weight: the 64 x 64 wgmma tiles
        dt, (m, n, k) = (np.float16, "bfloat16")[case % 2], (64, 4096, 4096)
    elif case >= 200:  # float32 at tf32 with B row-major, 128 and 256 rows: swapped onto an atbt tile, B in place
        dt, (m, n, k) = np.float32, ((128, 256)[case % 2], 4096, 4096)
    elif case < 20:  # ... on 8 tokens: the 64 x 16 tile, swapped, K split (C by plain stores, no map of C)
        dt, (m, n, k) = (np.float16, "bfloat16")[case % 2], (8, 4096, 4096)
    elif case < 24:  # float32 at tf32, skinny N: the narrow TF32 wgmma tiles after B's transposing copy
        dt, (m, n, k) = np.float32, ((1024, 32, 1024), (4096, 64, 4096))[case % 2]
    elif case < 28:  # float64 layers on 8 and 24 tokens: the few-row DMMA tiles
        dt, (m, n, k) = np.float64, ((8, 4096, 4096), (24, 3072, 1024))[case % 2]
    elif case < 36:  # int8 -> int32: the INT8 tiles (a row-major B transposed into scratch first)
        dt = np.int8
    elif 196 <= case < 200:  # 16-bit 3000^3, rows of 6000 bytes (every other one mid-sector): the pair rows
        dt, (m, n, k) = (np.float16, "bfloat16")[case % 2], (3000, 3000, 3000)
    elif case < 44:  # FP8 (float32 C, or out=): the FP8 tiles, with few-token layers among them
        import ml_dtypes

        dt = (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2)[case % 2]
        if case < 40:
            m, n, k = (1, 16, 64, 300)[case % 4], 4096, 4096
    # operands as matrices of their own or as views one column in (unaligned for the copy engine), where
    # the plan may depend on alignment; from case 28 on, A or B may be a transposed view (x @ W.T)
    drawn = 28 <= case < 196
    shift_a, shift_b = (int(x) for x in rng.integers(2, size=2)) if drawn else (0, 0)
    trans_a, trans_b = (bool(x) for x in rng.integers(2, size=2)) if drawn else (False, False)
    stored = lambda rows, cols, shift, trans: (
        gm.Matrix.empty((cols, rows + shift), dtype=dt)[:, shift:].T
        if trans
        else gm.Matrix.empty((rows, cols + shift), dtype=dt)[:, shift:]
    )
    a, b = stored(m, k, shift_a, trans_a), stored(k, n, shift_b, trans_b)
    c_dtype = {np.dtype(np.int8): np.int32}.get(np.dtype(dt), np.float32 if 36 <= case < 44 else dt)
    out = gm.Matrix.empty((m, n), dtype=c_dtype) if case % 2 else None
    stream = streams[(case // 2) % 4]
    runs = []
    for how in ("full", "fast", "fast"):
        launches.clear()
        if how == "full":  # nothing cached: gm.matmul's fast lookup finds nothing and the full route runs
            engine.bound_plans.clear()
            result = gm.matmul(a, b, out=out, stream=stream)
        else:
            result = engine.cached_product(a, b, out, stream)
            assert result is not None, (case, m, n, k, "the fast lookup could not vouch for a plain call")
        names = {a.elements: "A", b.elements: "B", result.elements: "C"}
        runs.append((named(launches, names), result))
    (full, r0), (first, r1), (again, r2) = runs
    if out is not None:
        assert r0 is r1 is r2 is out
    # A, B and C by name; other device addresses (split-K scratch, aligned copies) differ call to call and
    # are compared as "address"; kernels, grids, blocks, sizes, strides, epilogue arguments, shared memory
    # and stream exactly
    assert full and full == first == again, (case, m, n, k, full, again)
    checked += 1
    # the product (and a split's reduction) queued as the dependent of the launch before it, where it waits for it
    assert [x[7] for x in full] == [follows(x[0]) for x in full], (case, full)
    dependent += any(x[7] for x in full)
    chosen = gm.matmul_plan(a, b, out=out)
    swapped += chosen.swap
    few_rows += chosen.variant.name in ("sgemm32x128", "sgemm64x128")
    tile64 += chosen.variant.name.startswith("wgmma64x64")
    narrow += chosen.variant.name.startswith("wgmma64x16") and chosen.swap and chosen.splits > 1
    tf32_narrow += chosen.variant.name.startswith("tf32_wgmma64x") and chosen.copy_b
    dmma_few += chosen.variant.name in ("dmma16x128", "dmma32x128")
    transposed += trans_a or trans_b
    int8 += chosen.variant.name.startswith("int8_wgmma")
    fp8 += chosen.variant.name.startswith("fp8_wgmma")
    tf32_atbt += chosen.variant.name in TF32_ATBT and chosen.swap and not (chosen.copy_a or chosen.copy_b)
    one_row += chosen.variant.name == "gemv_m1x32"
    teaching += chosen.variant.name == "tiled16x64"
    paired += chosen.variant.cluster == 2 and all(x[8] == 2 for x in full)
gm.set_matmul_precision("float32")
print(checked, swapped, few_rows, tile64, narrow, tf32_narrow, dmma_few, transposed, int8, fp8, tf32_atbt, one_row,
      dependent, teaching, paired)
"""
)


def test_the_fast_lookup_launches_what_the_full_route_does():
    """gm.matmul's fast lookup for the common call (two 2-D matrices, either a transposed view, a plan
    cached) launches exactly what the full route launches for the same operands, on every kind of stream:
    kernel, grid, block, sizes, strides, epilogue arguments, shared memory and stream; swapped plans
    (few-token 16-bit layers), the few-row float32 tiles, the 64 x 64 and 64 x 16 wgmma tiles, (float32
    at tf32) the narrow TF32 tiles and, B row-major, the swapped atbt tiles, the few-row float64 tiles,
    transposed operands, the INT8 tiles, the FP8 tiles, the one-row narrow strips and (small float32 products)
    the one-output-a-thread tile among them."""
    for seed in (1, 2):
        out = _run("-c", PLAIN, str(ROOT / "benchmarks"), str(seed))
        assert out.returncode == 0, out.stderr[-3000:]
        fields = [int(x) for x in out.stdout.split()]
        checked, swapped, few_rows, tile64, narrow, tf32_narrow, dmma_few, transposed, int8, fp8 = fields[:10]
        tf32_atbt, one_row, dependent, teaching, paired = fields[10:]
        assert paired == 4  # the 16-bit 3000^3 calls on a pair row, clusters of two both ways
        # the swapped plans among them (the eight aligned 16-bit few-token calls' half at least), the four
        # float32 few-token calls on the few-row tiles, the four 16-bit 64-token calls on 64 x 64 tiles, and
        # the four 8-token calls on the 64 x 16 tile, swapped and split
        # and the four float32 skinny-N calls at tf32 on the narrow TF32 tiles, B copied K-major first, and the
        # four float64 calls on 8 and 24 tokens on the few-row DMMA tiles
        # and the eight float32 calls at tf32 with B row-major on 128 and 256 rows, swapped onto the TF32 atbt
        # tiles with no copy, and the eight one-token calls on gemv_m1x32
        assert one_row >= 8
        assert dependent >= 150  # every call but the teaching tile's queues its product dependent (sm_90)
        assert teaching >= 2  # small float32 products drawn row-major: the one-output-a-thread tile (4 and 2 calls)
        assert checked == 216 and tf32_atbt == 8 and swapped >= 12 and few_rows >= 4 and tile64 >= 4 and narrow >= 4
        assert tf32_narrow == 4 and dmma_few >= 4 and transposed >= 100 and int8 >= 4 and fp8 >= 4


BATCHED = (
    RECORDING
    + r"""
streams = [None, gm.Stream(), python_path.ForeignStream(), python_path.TorchLikeStream()]
checked = folded = shared = transposed = unaligned = paired = tiny = copied = with_epilogue = ordered = 0
patterns = ((3, 3), (3, None), (None, 3), (1, 3), (3, 1), (1, 1), (2, 2), (5, 1), (None, None), (0, None))
for case in range(180):
    dt = (np.float32, np.float16, np.float64, "bfloat16")[case % 4]
    m, n, k = (int(x) for x in rng.choice([0, 1, 7, 16, 63, 64, 65, 129, 300], 3))
    batch_a, batch_b = patterns[case % len(patterns)]
    # float32 calls in a tf32 or tf32x3 scope too (the mode is part of the key)
    gm.set_matmul_precision(("tf32", "float32", "tf32x3", "float32")[case // 4 % 4])
    if case >= 152:  # the pair rows (24 x 1000^3 halves) and tiny products on the streamed rows
        dt = (np.float16, "bfloat16")[case % 2]
        (m, n, k), batch_a, batch_b = ((1000, 1000, 1000), 24, 24) if case < 156 else ((16, 16, 16), 20000, 20000)
    # a transposed view (a batch's .T swaps its last two axes) and views one column in (unaligned)
    trans_a, trans_b, shift_a, shift_b = (bool(x) for x in rng.integers(2, size=4)) if case < 152 else [False] * 4
    def make(h, w, t, bt, shift):
        shape = (w, h + shift) if t else (h, w + shift)
        x = gm.Matrix.empty(shape if bt is None else (bt, *shape), dtype=dt)
        if shift:
            x = x[:, shift:] if bt is None else x[:, :, shift:]
        return x.T if t else x
    a, b = make(m, k, trans_a, batch_a, shift_a), make(k, n, trans_b, batch_b, shift_b)
    batch = batch_b if batch_a is None else batch_a if batch_b in (None, 1) else batch_b
    shape = (m, n) if batch is None else (batch, m, n)
    out = gm.Matrix.empty(shape, dtype=dt) if case % 2 else None
    stream = streams[(case // 2) % 4]
    # every third call with an epilogue: alpha, a bias row or column (the result's dtype or float32), an
    # activation, and beta where there is an out
    epilogue, bias = {}, None
    if case % 3 == 1 and case < 152:
        bias_dtype = dt if case % 2 else np.float32
        bias = gm.Matrix.empty((1, n) if case % 4 == 1 else (m, 1), dtype=bias_dtype)
        epilogue = dict(alpha=0.5, bias=bias, activation=("relu", "gelu", None)[case % 3])
        if out is not None:
            epilogue["beta"] = 2.0
    runs = []
    for how in ("full", "fast", "fast"):
        launches.clear()
        orderings.clear()
        if how == "full":  # nothing cached: gm.matmul's fast lookup finds nothing and the full route runs
            engine.bound_plans.clear()
            result = gm.matmul(a, b, out=out, stream=stream, **epilogue)
        else:
            result = engine.cached_product(a, b, out, stream, **epilogue)
            assert result is not None, (case, m, n, k, batch_a, batch_b, "the fast lookup could not vouch for it")
        assert result.shape == shape, (case, result.shape)
        names = {a.elements: "A", b.elements: "B", result.elements: "C"}
        blocks = {id(a._operand()[8]): "A", id(b._operand()[8]): "B", id(result._operand()[8]): "C"}
        if bias is not None:
            names[bias.elements] = "bias"
            blocks[id(bias._operand()[8])] = "bias"
        # the stream ordering asked for: streams as they are, buffers by name, another library's stream's record
        asked = [(what, tuple(blocks.get(id(x), x if type(x) is int else type(x).__name__) for x in args))
                 for what, args in orderings]
        runs.append((named(launches, names), asked))
    full, first, again = runs
    empty = 0 in (m, n, k, batch if batch is not None else 1)  # a zero fill, or nothing at all
    assert (full[0] or empty) and full == first == again, (case, m, n, k, batch_a, batch_b, full, first)
    checked += 1
    chosen = gm.matmul_plan(a, b, out=out)
    folded += chosen.problem.batch == 1 and (batch or 0) > 1
    shared += None in (batch_a, batch_b) or 1 in (batch_a, batch_b)
    transposed += trans_a or trans_b
    unaligned += not (chosen.problem.a_aligned and chosen.problem.b_aligned)
    copied += chosen.copy_a or chosen.copy_b
    paired += chosen.variant.cluster == 2 and all(x[8] == 2 for x in full[0])
    tiny += chosen.algorithm.startswith("small_stream")
    with_epilogue += bool(epilogue) and any("bias" in x[3] + x[4] for x in full[0])
    ordered += any(what == "use_on" for what, _ in full[1])
    gm.set_matmul_precision("float32")
print(checked, folded, shared, transposed, unaligned, copied, paired, tiny, with_epilogue, ordered)
"""
)


def test_the_fast_lookup_takes_batches_and_epilogues_as_the_full_route_does():
    """gm.matmul's fast lookup takes batched calls (equal batches, a batch of 1 or a 2-D operand shared,
    transposed and unaligned views, a batch folded into one tall product, out= or a new result, every kind of
    stream) and calls with an epilogue (alpha, beta, a bias row or column, an activation), and launches exactly
    what the full route launches for them: kernels, grids, blocks, arguments (A, B, C and the bias by name),
    shared memory, stream, dependent launches and clusters."""
    out = _run("-c", BATCHED, str(ROOT / "benchmarks"), "3")
    assert out.returncode == 0, out.stderr[-3000:]
    counts = (int(x) for x in out.stdout.split())
    checked, folded, shared, transposed, unaligned, copied, paired, tiny, with_epilogue, ordered = counts
    assert checked == 180 and folded > 0 and shared >= 80 and transposed > 40 and unaligned > 20 and copied > 0
    assert paired == 4 and tiny >= 4 and with_epilogue >= 30 and ordered >= 60


FOLDED = (
    RECORDING
    + r"""
on_wgmma = checked = 0
for dt, (batch, m, k, n) in [
    (np.float16, (8, 128, 256, 512)),
    ("bfloat16", (4, 77, 1024, 4096)),
    (np.float16, (3, 65, 72, 40)),
    (np.float32, (8, 128, 256, 512)),
    (np.float64, (5, 64, 64, 64)),
    (np.float16, (2, 300, 1000, 24)),
]:
    for out_given in (False, True):
        x, w = gm.Matrix.empty((batch, m, k), dtype=dt), gm.Matrix.empty((k, n), dtype=dt)
        tall = gm.Matrix.empty((batch * m, k), dtype=dt)
        runs = []
        for a, shape in ((x, (batch, m, n)), (tall, (batch * m, n))):
            out = gm.Matrix.empty(shape, dtype=dt) if out_given else None
            for how in ("full", "fast"):
                launches.clear()
                if how == "full":
                    engine.bound_plans.clear()
                result = gm.matmul(a, w, out=out)
                runs.append(named(launches, {a.elements: "A", w.elements: "B", result.elements: "C"}))
            plan = gm.matmul_plan(a, w, out=out)
        assert runs[0] and runs[0] == runs[1] == runs[2] == runs[3], (dt, batch, m, k, n, runs)
        on_wgmma += plan.variant.name.startswith("wgmma")
        checked += 1
# a bias of one value a row keeps the batch from folding: matmul_plan given that bias plans the batch as
# matmul runs it, and plan= takes that plan with the bias (the folded one it refuses)
x, w = gm.Matrix.empty((4, 64, 128), dtype=np.float16), gm.Matrix.empty((128, 256), dtype=np.float16)
rows = gm.Matrix.empty((64, 1), dtype=np.float32)
folded, per_row = gm.matmul_plan(x, w), gm.matmul_plan(x, w, bias=rows)
assert (folded.problem.batch, per_row.problem.batch) == (1, 4), (folded, per_row)
assert gm.matmul_plan(x, w, bias=gm.Matrix.empty((1, 256), dtype=np.float32)).problem == folded.problem
runs = []
for how in ("plan", "full", "fast"):  # the planned batch is what either route launches for that call
    launches.clear()
    if how == "full":
        engine.bound_plans.clear()
    result = gm.matmul(x, w, bias=rows, plan=per_row if how == "plan" else None)
    runs.append(named(launches, {x.elements: "A", w.elements: "B", rows.elements: "bias", result.elements: "C"}))
assert runs[0] and runs[0] == runs[1] == runs[2], runs
refused = 0
for call in (lambda: gm.matmul(x, w, bias=rows, plan=folded), lambda: gm.matmul_plan(x, w, bias=rows, tune=True)):
    try:
        call()
    except ValueError:
        refused += 1
print(checked, on_wgmma, refused)
"""
)


def test_a_batch_times_a_shared_matrix_launches_what_its_tall_product_does():
    """A batch times a shared 2-D matrix (x @ W with x of (batch, tokens, features)), its A and C packed,
    folds into one tall product: it launches exactly what the 2-D product of the stacked rows launches
    (kernel, grid, arguments, tensor maps), on both routes. Its A used to keep its batch stride, which made
    the copy engine's alignment test see overlapping layers: the 16-bit products ran the mma.sync tiles.
    A bias of one value a row keeps such a batch a batch, and gm.matmul_plan given that bias plans it so
    (plan= then takes it; tune=True takes no bias)."""
    out = _run("-c", FOLDED, str(ROOT / "benchmarks"), "0")
    assert out.returncode == 0, out.stderr[-3000:]
    checked, on_wgmma, refused = (int(x) for x in out.stdout.split())
    assert checked == 12 and on_wgmma >= 4 and refused == 2


SAME_ERRORS = (
    RECORDING
    + r"""
a = gm.Matrix.empty((64, 48))
b = gm.Matrix.empty((48, 32))
gone = gm.Matrix.empty((64, 48))
gone.free()
closed = gm.Stream()
closed.close()
w = gm.Matrix.empty((32, 48))  # b's transpose stored: a @ w.T is x @ W.T
gone_w = gm.Matrix.empty((32, 48))
gone_w.free()
i8, j8, w8 = (gm.Matrix.empty(shape, dtype=np.int8) for shape in ((64, 48), (48, 32), (32, 48)))
gone_f8 = gm.Matrix.empty((32, 48), dtype="float8_e4m3fn")
gone_f8.free()
i32 = gm.Matrix.empty((64, 48), dtype=np.int32)
import ml_dtypes

e4, e5 = np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)
f8, g8, v8 = (gm.Matrix.empty(shape, dtype=e4) for shape in ((64, 48), (48, 32), (32, 48)))
a3, b3, gone3 = gm.Matrix.empty((3, 64, 48)), gm.Matrix.empty((3, 48, 32)), gm.Matrix.empty((3, 64, 48))
gone3.free()
c, gone_bias = gm.Matrix.empty((64, 32)), gm.Matrix.empty((1, 32))
gone_bias.free()
cases = {
    "devices= with Matrix operands": lambda: gm.matmul(a, b, devices=[0]),
    "memory_limit= with Matrix operands": lambda: gm.matmul(a, b, memory_limit=1 << 20),
    "out is an input": lambda: gm.matmul(a, gm.Matrix.empty((48, 48)), out=a),
    "out of another shape": lambda: gm.matmul(a, b, out=gm.Matrix.empty((64, 31))),
    "out of another dtype": lambda: gm.matmul(a, b, out=gm.Matrix.empty((64, 32), dtype=np.float64)),
    "a freed operand": lambda: gm.matmul(gone, b),
    "a freed out": lambda: gm.matmul(a, b, out=gone[:, :32]),
    "shapes that do not match": lambda: gm.matmul(a, a),
    "mixed dtypes": lambda: gm.matmul(a, gm.Matrix.empty((48, 32), dtype=np.float16)),
    "a closed stream": lambda: gm.matmul(a, b, stream=closed),
    "not a stream": lambda: gm.matmul(a, b, stream="stream"),
    "a numpy operand": lambda: gm.matmul(a, np.ones((48, 32), np.float32)),
    "an unknown precision": lambda: gm.matmul(a, b, precision="fp8"),
    "the other dtype's emulated mode": lambda: gm.matmul(a, b, precision="fp64_int8"),
    "an emulated mode for a batch": lambda: gm.matmul(gm.Matrix.empty((2, 64, 48)), b, precision="fp32_int8"),
    # a transposed operand (the fast lookup takes x @ W.T) and the int8 product's own rules
    "a closed stream, B transposed": lambda: gm.matmul(a, w.T, stream=closed),
    "a freed transposed operand": lambda: gm.matmul(a, gone_w.T),
    "int8 into a float64 out": lambda: gm.matmul(i8, j8, out=gm.Matrix.empty((64, 32), dtype=np.float64)),
    "int8 into an int8 out": lambda: gm.matmul(i8, j8, out=gm.Matrix.empty((64, 32), dtype=np.int8)),
    "int8 with alpha": lambda: gm.matmul(i8, j8, alpha=2.0),
    "int8 with a closed stream": lambda: gm.matmul(i8, w8.T, stream=closed),
    "int8 at a float32 precision": lambda: gm.matmul(i8, j8, precision="tf32"),
    "int32 operands": lambda: gm.matmul(i32, i32.T),
    # the FP8 product's own rules
    "FP8 of two formats": lambda: gm.matmul(f8, gm.Matrix.empty((48, 32), dtype=e5)),
    "FP8 into an FP8 out": lambda: gm.matmul(f8, g8, out=gm.Matrix.empty((64, 32), dtype=e4)),
    "FP8 into a float64 out": lambda: gm.matmul(f8, g8, out=gm.Matrix.empty((64, 32), dtype=np.float64)),
    "FP8 with a closed stream": lambda: gm.matmul(f8, v8.T, stream=closed),
    "FP8 at a float32 precision": lambda: gm.matmul(f8, g8, precision="tf32"),
    "FP8 with a freed operand": lambda: gm.matmul(f8, gone_f8.T),
    # batches (the fast lookup takes them too)
    "batches that do not broadcast": lambda: gm.matmul(a3, gm.Matrix.empty((2, 48, 32))),
    "out of another batch": lambda: gm.matmul(a3, b3, out=gm.Matrix.empty((2, 64, 32))),
    "a 2-D out for a batch": lambda: gm.matmul(a3, b, out=gm.Matrix.empty((64, 32))),
    "a freed batch": lambda: gm.matmul(gone3, b3),
    "a batch on a closed stream": lambda: gm.matmul(a3, b3, stream=closed),
    "out is a batch's input": lambda: gm.matmul(a3, gm.Matrix.empty((3, 48, 48)), out=a3),
    # epilogues (the fast lookup takes them too)
    "beta without out": lambda: gm.matmul(a, b, beta=1.0),
    "an unknown activation": lambda: gm.matmul(a, b, activation="tanh"),
    "alpha not a number": lambda: gm.matmul(a, b, alpha="2"),
    "a bias of another shape": lambda: gm.matmul(a, b, bias=gm.Matrix.empty((1, 31))),
    "a bias of another dtype": lambda: gm.matmul(a, b, bias=gm.Matrix.empty((1, 32), dtype=np.float64)),
    "a batched bias": lambda: gm.matmul(a3, b3, bias=gm.Matrix.empty((3, 1, 32))),
    "a freed bias": lambda: gm.matmul(a, b, bias=gone_bias),
    "a numpy bias": lambda: gm.matmul(a, b, bias=np.ones((1, 32), np.float32)),
    "out is the bias": lambda: gm.matmul(a, b, out=c, bias=c[:1, :]),
    "an epilogue on a closed stream": lambda: gm.matmul(a3, b, alpha=2.0, stream=closed),
    "int8 into int32 with a bias": lambda: gm.matmul(i8, j8, bias=gm.Matrix.empty((1, 32), dtype=np.int32)),
}
# their plans cached: a plain call may take the fast lookup
for x, y in ((a, b), (a, w.T), (i8, j8), (i8, w8.T), (f8, g8), (f8, v8.T), (a3, b3), (a3, b)):
    gm.matmul(x, y)
@contextlib.contextmanager
def cold():  # no plan cached and the fast lookup kept out of the call: the full route alone
    engine.bound_plans.clear()
    with declined(sys.modules["gpumat.matmul.api"], "cached_product"):
        yield

print(same_errors_on_both_routes(cases, cold))
"""
)


def test_every_argument_check_holds_on_both_routes():
    """The same bad arguments give the same errors whether gm.matmul's fast lookup may vouch for the call
    (a plan cached for its shapes) or not: devices= and memory_limit= with Matrix operands used to be
    ignored by the fast lookup, which returned a product."""
    out = _run("-c", SAME_ERRORS, str(ROOT / "benchmarks"), "0")
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.strip()) == 46


TRANSPOSES = (
    RECORDING
    + r"""
T = sys.modules["gpumat.transpose"]  # (gpumat.transpose, the attribute, is the function)
streams = [None, gm.Stream(), python_path.ForeignStream(), python_path.TorchLikeStream()]
full_route = lambda a, out, stream: None
fast = T._common_transpose
taken = 0
for case in range(300):
    dt = (np.float32, np.float16, np.float64, "bfloat16", np.int8, np.int32)[case % 6]
    rows, cols = (int(x) for x in rng.choice([1, 2, 7, 17, 24, 31, 63, 64, 65, 128, 1001, 3001], 2))
    shift, out_shift = (int(x) for x in rng.integers(3, size=2))  # views one or two columns in
    a = gm.Matrix.empty((rows, cols + shift), dtype=dt)[:, shift:]
    out = gm.Matrix.empty((cols, rows + out_shift), dtype=dt)[:, out_shift:] if case % 2 else None
    stream = streams[(case // 2) % 4]
    runs = []
    for how in ("full", "fast", "fast"):
        T._common_transpose = full_route if how == "full" else fast
        launches.clear()
        result = T.transpose(a, out=out, stream=stream)
        names = {a.elements: "A", result.elements: "B"}
        runs.append([(n, g, bl, tuple(names.get(x, x) for x in ab), *more) for n, g, bl, ab, *more in launches])
    T._common_transpose = fast
    assert runs[0] and runs[0] == runs[1] == runs[2], (case, rows, cols, shift, out_shift, runs)
    taken += fast(a, out, stream) is not None
print(taken)
"""
)


def test_the_common_transpose_launches_what_the_full_route_does():
    """gm.transpose's short path for the common call (a row-major 2-D matrix of gpumat's pool, auto, into a
    new matrix or a row-major out) launches what the full route launches for the same operands: kernel,
    grid, block, addresses, sizes, strides and stream, every dtype, views one or two columns in, strips and
    tiles and the copies of one row or column, on every kind of stream."""
    out = _run("-c", TRANSPOSES, str(ROOT / "benchmarks"), "3")
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.strip()) == 300  # and the short path took every one of them


TRANSPOSES_OF_INT8_STRIPS = (
    RECORDING
    + r"""
T = sys.modules["gpumat.transpose"]
fast = T._common_transpose
kernels_run = set()
# the 1-byte strips auto takes at 15 MiB and more: 65-128 rows and 2-63 rows into a result off 16 bytes
# (narrow_rows_quads16k), 65-80 columns into rows off words (narrow_cols_quads16k), and quads128's cut tiles;
# then small ones: the row strip into an aligned result, chunks at 2 rows, the tiles at 32 rows off 16 bytes
# and at 96 rows under the strip's size for multiples of 32
shapes = ((100, 157287, 0), (37, 425105, 1), (262145, 72, 0), (1048576, 100, 0))
shapes += ((24, 1001, 0), (2, 4099, 0), (32, 4099, 1), (96, 1001, 0))
for rows, cols, out_shift in shapes:
    a = gm.Matrix.empty((rows, cols), dtype=np.int8)
    out = gm.Matrix.empty((cols + 1, rows), dtype=np.int8)[out_shift : out_shift + cols, :]
    runs = []
    for how in ("full", "fast"):
        T._common_transpose = (lambda a, out, stream: None) if how == "full" else fast
        launches.clear()
        T.transpose(a, out=out)
        runs.append(list(launches))
    T._common_transpose = fast
    assert runs[0] and runs[0] == runs[1], (rows, cols, runs)
    assert fast(a, out, None) is not None
    kernels_run.update(launch[0] for launch in runs[0])
    a.free()
print(" ".join(sorted(kernels_run)))
"""
)


def test_the_int8_strips_take_the_same_launch_on_both_transpose_routes():
    """The 1-byte strips and cut tiles auto chooses, at 15 MiB and more and on small matrices, are launched
    alike by gm.transpose's short path and its full route (kernel, grid, block, addresses, sizes, strides,
    stream)."""
    out = _run("-c", TRANSPOSES_OF_INT8_STRIPS, str(ROOT / "benchmarks"), "5")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == [
        "transpose_narrow_cols_quads16k_s8",
        "transpose_narrow_rows_chunks_s8",
        "transpose_narrow_rows_quads16k_s8",
        "transpose_quads128_s8",
        "transpose_tiled_rect64_s8",
    ]


TRANSPOSE_ERRORS = (
    RECORDING
    + r"""
T = sys.modules["gpumat.transpose"]  # (gpumat.transpose, the attribute, is the function)
a = gm.Matrix.empty((64, 48))
gone = gm.Matrix.empty((64, 48))
gone.free()
gone_out = gm.Matrix.empty((48, 64))
gone_out.free()
closed = gm.Stream()
closed.close()
block = gm.Matrix.empty((64, 64))
cases = {
    "out of another shape": lambda: gm.transpose(a, out=gm.Matrix.empty((48, 63))),
    "out of another dtype": lambda: gm.transpose(a, out=gm.Matrix.empty((48, 64), dtype=np.float64)),
    "out overlapping a": lambda: gm.transpose(block[:, :48], out=block[:48, :]),
    "out is a": lambda: gm.transpose(block, out=block),
    "a freed operand": lambda: gm.transpose(gone),
    "a freed out": lambda: gm.transpose(a, out=gone_out),
    "a closed stream": lambda: gm.transpose(a, stream=closed),
    "not a stream": lambda: gm.transpose(a, stream="stream"),
    "a numpy operand": lambda: gm.transpose(np.ones((4, 4), np.float32)),
    "a numpy out": lambda: gm.transpose(a, out=np.ones((48, 64), np.float32)),
}
print(same_errors_on_both_routes(cases, lambda: declined(T, "_common_transpose")))
"""
)


def test_every_transpose_argument_check_holds_on_both_routes():
    """The same bad arguments give gm.transpose the same errors whether its short path may take the call or
    not: an out that overlaps A (a view of the same block) or is A, another shape or dtype, freed
    operands, a closed stream."""
    out = _run("-c", TRANSPOSE_ERRORS, str(ROOT / "benchmarks"), "0")
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.strip()) == 10


ASTYPES = (
    RECORDING
    + r"""
import ml_dtypes
from gpumat import convert
streams = [None, gm.Stream(), python_path.ForeignStream(), python_path.TorchLikeStream()]
dtypes = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int8, np.int32, ml_dtypes.float8_e4m3fn]
fast = convert._common_astype
taken = 0
for case in range(300):
    src_dt, dst_dt = (dtypes[int(i)] for i in rng.integers(len(dtypes), size=2))
    rows, cols = (int(x) for x in rng.choice([1, 7, 64, 129, 1001], 2))
    shift = int(rng.integers(3))
    a = gm.Matrix.empty((rows, cols + shift), dtype=src_dt)[:, shift:]
    stream = streams[case % 4]
    runs = []
    for how in ("full", "fast"):
        convert._common_astype = (lambda m, dt, stream: None) if how == "full" else fast
        launches.clear()
        try:
            result = a.astype(dst_dt, stream=stream)
        except TypeError as e:
            runs.append(str(e))
            continue
        names = {a.elements: "A", result.elements: "B"}
        runs.append([(n, g, bl, tuple(names.get(x, x) for x in ab), *more) for n, g, bl, ab, *more in launches])
        assert result.dtype == np.dtype(dst_dt) and result.shape == a.shape
    convert._common_astype = fast
    assert runs[0] == runs[1], (case, src_dt, dst_dt, rows, cols, shift, runs)
    taken += fast(a, np.dtype(dst_dt), stream) is not None
print(taken)
"""
)


def test_the_common_astype_launches_what_the_full_route_does():
    """Matrix.astype's short path (one row-major 2-D matrix of gpumat's pool into another dtype a kernel
    converts into) launches what the full route launches, on every kind of stream, views included; the
    pairs no kernel converts raise the same TypeError either way."""
    out = _run("-c", ASTYPES, str(ROOT / "benchmarks"), "5")
    assert out.returncode == 0, out.stderr[-3000:]
    assert 100 <= int(out.stdout.strip()) < 300  # the short path took the convertible pairs


ASTYPE_ERRORS = (
    RECORDING
    + r"""
from gpumat import convert
a = gm.Matrix.empty((64, 48))
gone = gm.Matrix.empty((64, 48))
gone.free()
closed = gm.Stream()
closed.close()
cases = {
    "a freed matrix": lambda: gone.astype(np.float16),
    "a closed stream": lambda: a.astype(np.float16, stream=closed),
    "not a stream": lambda: a.astype(np.float16, stream="stream"),
    "floats into int8": lambda: a.astype(np.int8),
    "not a dtype gpumat holds": lambda: a.astype(np.complex64),
    "not a dtype": lambda: a.astype("no such dtype"),
}
print(same_errors_on_both_routes(cases, lambda: declined(convert, "_common_astype")))
"""
)


def test_every_astype_argument_check_holds_on_both_routes():
    """The same bad arguments give Matrix.astype the same errors whether its short path may take the call
    or not: a freed matrix, a closed stream or not a stream, a conversion no kernel makes, a dtype gpumat
    does not hold."""
    out = _run("-c", ASTYPE_ERRORS, str(ROOT / "benchmarks"), "0")
    assert out.returncode == 0, out.stderr[-3000:]
    assert int(out.stdout.strip()) == 6


# Each driver call costs about a microsecond from Python on the H100's host, so a call path that gains
# one gets measurably slower: these are the only ones each common call may make. A kernel is launched
# through cuLaunchKernelEx on the stand-in's sm_90 (a programmatic dependent of the launch before it).
LAUNCH = "cuLaunchKernelEx 1"
DRIVER_CALLS = {
    "dot 64x64": "cuLaunchKernelEx 1, cuStreamSynchronize 1",
    # B transposed into pool scratch (K-major, as the INT8 tiles read it), then the product
    "matmul 256^3 int8, B row-major (transposed into scratch)": "cuLaunchKernelEx 2",
    "upload 64x64 (from_numpy)": "cuMemcpyHtoD 1",
    "download 64x64 (to_numpy)": "cuMemcpyDtoH 1",
    # the stream's mark, recorded after the work: what orders the frees of the operands and the result
    # after it once the stream may be gone. Which stream the handle names is known without asking the
    # driver, the same stream object having named it before (runtime.streams.foreign)
    "matmul 64^3, another library's stream": "cuEventRecord 1, cuLaunchKernelEx 1",
    # a PyTorch stream object keeps no weak reference (runtime.streams._life_says_nothing); one of PyTorch's
    # own streams (torch.cuda.Stream(), an odd id) is never destroyed, so its handle is settled once and its
    # mark recorded only when a free waits for it (runtime.streams.mark_now); one naming another's stream
    # (an even id: the handle) is asked of the driver each call
    "matmul 64^3, a PyTorch stream": LAUNCH,
    "matmul 64^3, a PyTorch object for an external stream": "cuEventRecord 1, cuLaunchKernelEx 1, cuStreamGetId 1",
    # the memory's device asked of the driver (a capsule's word is not enough); the import, dropped unused,
    # goes back to its producer at once: nothing of gpumat's was queued on it anywhere
    "from_dlpack of another library's 64x64": "cuPointerGetAttribute 1",
}


def test_each_common_call_makes_only_the_driver_calls_it_needs():
    out = _run(str(ROOT / "benchmarks" / "python_path.py"), "--driver-calls")
    assert out.returncode == 0, out.stderr[-3000:]
    made = dict(line.split("  ", 1) for line in out.stdout.splitlines())
    made = {case.strip(): calls.strip() for case, calls in made.items()}
    assert len(made) == 24, out.stdout
    for case, calls in made.items():
        assert calls == DRIVER_CALLS.get(case, LAUNCH), (case, calls)
