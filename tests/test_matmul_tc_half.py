"""float16 / bfloat16 matmul on the tensor cores (the engine's half rows): the mma.sync tiles mma128x128,
mma128x64, mma64x128 and mma64x64 (one kernel template, sm_80+, any view, batches) and the wgmma rows
(TMA + wgmma, sm_90a, 16-byte aligned operands): tiles 128 x 256 and 128 x 128, each for B row-major,
B stored transposed (*bt) and A stored transposed (*at). The variant choice, the split-K plan, the
launch geometry, tensor-map arguments (the launcher's boxes for each tile), the copies into the layouts
the rows read, the kernels' shared memory and argument checks run
without a GPU; the products run on one.

Error bound, as ||C - A B||_F / || |A| |B| ||_F against the float64 product of the exact (already
rounded) 16-bit operands: the products of two float16 (11 significant bits) or bfloat16 (8) values
are exact in float32, so the error is float32 accumulation over K terms, at most K * 2^-24 of
|A||B| with round-to-nearest sums; the tensor cores align and truncate inside each k step, so allow
twice that (K * 2^-23); plus one rounding of C to its dtype, 2^-11 (float16), 2^-8 (bfloat16) or
2^-24 (float32) of |A B| <= |A||B|. A kernel that drops or repeats a k tile, a row or a column is off
by orders of magnitude more.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import (
    ALL_MODULES,
    FAKE_DEVICE,
    SM90A_MODULES,
    bound_run,
    built_entries,
    dims,
    epilogue_reference,
    fake_matrix,
    poison,
    poisoned,
    product_error,
    rng,
)

import gpumat as gm
from gpumat.matmul import engine
from gpumat.matmul.engine import (
    K_CHUNK,
    Problem,
    Target,
    algorithms,
    aligned,
    built_modules,
    c_map_args,
    tensor_map_args,
)
from gpumat.matmul.engine import VARIANTS as ROWS
from gpumat.runtime import geometry

DTYPES = ("float16", "bfloat16")
UNIT = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24}
# the tensor-core rows for 16-bit inputs (the SIMT and teaching kernels take them too, on the CUDA cores; the
# batches of tiny products on small_stream's tensor cores are tests/test_matmul_small.py's)
VARIANTS = [name for name, v in ROWS.items() if ("f16", "f16") in v.kernels and v.min_arch >= 80 and not v.packs]
NO_WGMMA = ALL_MODULES - SM90A_MODULES  # a build without sm_90 skips the sm_90a modules
# the mma.sync tiles (cuda/matmul_tc_half.cu): every view in place, batches, split-K
MMA = [name for name, v in ROWS.items() if {k.module for k in v.kernels.values()} == {"matmul_tc_half"}]
# the 16-bit TMA + wgmma rows (cuda/matmul_wgmma_half.cu): every tile, both B layouts, and A stored
# transposed (the module's float32 rows, tf32_wgmma*, are tests/test_matmul_tf32_wgmma.py's)
WGMMA = [
    name
    for name, v in ROWS.items()
    if {k.module for k in v.kernels.values()} == {"matmul_wgmma_half"} and ("f16", "f16") in v.kernels
]
# the rows that read A stored transposed (K rows of M: X.T @ B) in place
AT_ROWS = [name for name in WGMMA if ROWS[name].reads_a_trans]
# the wgmma rows launched as clusters of two blocks sharing B (named only)
PAIRS = [name for name in WGMMA if ROWS[name].cluster == 2]
HOPPER = Target(90, 132, 227 * 1024, ALL_MODULES)


def half_plan(
    m, n, k, target: Target, a_aligned=True, b_aligned=True, algorithm="auto", b_trans=False, a_trans=False, dtype="f16"
):
    p = Problem(m, n, k, dtype, dtype, "native", a_aligned, b_aligned, a_trans=a_trans, b_trans=b_trans)
    return engine.plan(p, target, algorithm)


def tolerance(out_dtype: str, k: int) -> float:
    return UNIT[out_dtype] + k * 2.0**-23


# ---- without a GPU ----


def test_choice_prefers_wgmma_on_hopper_and_pays_for_aligned_copies_only_where_they_are_cheap():
    def pick(m, n, k, arch, smem, ok, modules=ALL_MODULES, sms=132):
        """auto's kernel; None for the SIMT fallback (no tensor-core kernel runs)."""
        name = half_plan(m, n, k, Target(arch, sms, smem, modules), ok, ok).algorithm
        return None if name == "simt64x64" else name

    assert pick(4096, 4096, 4096, 90, 227 * 1024, True) == "wgmma128x256"
    # copies: ~3% of the product; 33 x 17 tiles of 128 x 256 in 5 waves beat 33 x 33 of 128 x 128 in 9 at
    # the measured rates (bench sweep on an H100: 490 us against 581)
    assert pick(4097, 4097, 4097, 90, 227 * 1024, False) == "wgmma128x256"
    assert pick(64, 64, 64, 90, 227 * 1024, True) == "wgmma64x64"  # one tile: the smallest one is done first
    assert pick(64, 65, 64, 90, 227 * 1024, True) == "wgmma64x64"  # two 64-wide tiles beat one 128-wide
    assert pick(64, 64, 64, 90, 227 * 1024, False) == "mma64x64"  # copies: longer than the product
    assert pick(64, 64, 64, 90, 227 * 1024, True, modules=NO_WGMMA) == "mma64x64"  # no sm_90a build
    for arch, smem in ((80, 163 * 1024), (86, 99 * 1024), (89, 99 * 1024), (100, 227 * 1024), (120, 99 * 1024)):
        assert pick(4096, 4096, 4096, arch, smem, True) == "mma128x128"  # sm_90a code runs on 9.0 alone
    assert pick(4096, 4096, 4096, 75, 64 * 1024, True) is None  # SIMT below sm_80
    # the small tiles fit where a block gets 48 KiB or less (64 KiB for 128 x 128)
    assert pick(4096, 4096, 4096, 80, 48 * 1024, True) in ("mma128x64", "mma64x128")
    assert pick(4096, 4096, 4096, 80, 32 * 1024, True) == "mma64x64"
    assert pick(4096, 4096, 4096, 80, 32 * 1024 - 1, True) is None  # too little shared memory for any


def test_auto_counts_the_copies_of_unaligned_operands():
    assert [name for name in VARIANTS if ROWS[name].tier == 1] == [*MMA, *WGMMA]
    assert MMA == ["mma128x128", "mma128x64", "mma64x128", "mma64x64"]
    narrow = [f"wgmma{tile}{layout}" for tile in ("128x64", "64x64") for layout in ("", "bt", "at", "atbt")]
    # the narrowest widths read B K-major only (a swapped layer's tokens)
    narrower = [f"wgmma64x{bn}{layout}" for bn in (32, 16) for layout in ("bt", "atbt")]
    wide_at = [name for name in AT_ROWS if name not in narrow + narrower + PAIRS]
    singles = [name for name in WGMMA if name not in PAIRS]
    assert PAIRS == [name.replace("x256", "x256pair").replace("x128", "x128pair") for name in singles[:8]]
    assert singles == [
        "wgmma128x256",
        "wgmma128x256bt",
        "wgmma128x128",
        "wgmma128x128bt",
        *wide_at,
        *narrow,
        *narrower,
    ]
    assert wide_at == ["wgmma128x256at", "wgmma128x128at", "wgmma128x256atbt", "wgmma128x128atbt"]
    assert all(ROWS[name].needs_aligned for name in WGMMA) and not any(ROWS[name].needs_aligned for name in MMA)

    def choose(m, n, k, a_ok, b_ok):
        p = half_plan(m, n, k, Target(90, 132, 227 * 1024, ALL_MODULES), a_ok, b_ok)
        copied = (p.copy_a, p.copy_b)
        assert copied == ((not a_ok, not b_ok) if p.variant.needs_aligned else (False, False))
        return p.algorithm

    assert choose(4096, 4096, 4096, True, True) == "wgmma128x256"
    assert choose(4096, 4096, 4096, False, True) == "wgmma128x256"  # a copy of A: a few % of the product
    assert choose(4096, 4096, 512, False, True) == "wgmma128x256"
    assert choose(256, 256, 65536, True, True) == "wgmma128x128"  # 4 tiles x 32 splits fill the SMs
    assert choose(256, 256, 65536, False, False) == "mma128x128"  # copies far longer than the product
    assert choose(128, 4096, 4096, False, True) == "wgmma64x64"  # only the operand that needs it is copied:
    # A is 1/32 of B here: B's copy (32 MiB) costs about what the mma.sync tiles' unaligned reads lose
    assert choose(128, 4096, 4096, True, False) in ("mma128x128", "wgmma64x64")
    a = fake_matrix(64, 100, stride=100, dtype=np.float16)  # 200-byte rows: not TMA-ready
    b = fake_matrix(100, 64, stride=64, ptr=0x7F0010000000, dtype=np.float16)
    b2 = fake_matrix(64, 64, stride=64, ptr=0x7F0020000000, dtype=np.float16)
    ok = lambda x: aligned(x.elements, x.stride, x.itemsize)  # noqa: E731
    assert not ok(a) and ok(b) and ok(b2)
    wgmma = half_plan(64, 64, 100, Target(90, 132, 227 * 1024, ALL_MODULES), ok(a), ok(b), "wgmma128x256")
    assert (wgmma.copy_a, wgmma.copy_b) == (True, False) and wgmma.copy_bytes == 2 * 64 * 100
    in_place = half_plan(100, 64, 64, Target(90, 132, 227 * 1024, ALL_MODULES), ok(b), ok(b2), "wgmma128x256")
    assert in_place.copy_bytes == 0 and not (in_place.copy_a or in_place.copy_b)


def test_a_transposed_b_is_read_in_place_where_aligned_and_copied_otherwise():
    hopper = Target(90, 132, 227 * 1024, ALL_MODULES)

    def plan_of(b_trans, b_aligned, target=hopper, algorithm="auto"):
        return half_plan(4096, 4096, 4096, target, True, b_aligned, algorithm, b_trans)

    x_wt = plan_of(True, True)  # x @ W.T with W row-major N x K: read in place, no transposed copy
    assert x_wt.algorithm == "wgmma128x256bt" and not (x_wt.copy_a or x_wt.copy_b) and x_wt.copy_bytes == 0
    unaligned = plan_of(True, False)  # the copy engine cannot read it: copied either way, the first row wins
    assert unaligned.algorithm == "wgmma128x256" and unaligned.copy_b
    for aligned_b in (True, False):  # a B stored row-major goes to the row that reads it so
        assert plan_of(False, aligned_b).algorithm == "wgmma128x256"
    named = plan_of(False, True, algorithm="wgmma128x256bt")  # named: B transposed into scratch first
    assert named.copy_b and named.copy_bytes == 2 * 4096 * 4096
    elsewhere = plan_of(True, True, target=Target(80, 108, 163 * 1024, ALL_MODULES))
    assert elsewhere.algorithm == "mma128x128" and elsewhere.copy_b  # sm_90a code runs on 9.0 alone


def test_a_stored_transposed_is_read_in_place_where_aligned_and_copied_otherwise():
    """X.T @ B with X a row-major K x M matrix (a linear layer's weight gradient, X.T @ dY): on sm_90 the
    *at rows read X's storage by TMA, no transposed copy first, for both 16-bit dtypes and C in either
    dtype; where the copy engine cannot read X (base or row stride not 16-byte aligned) it is copied
    either way: as it lies for the *at row, or transposed for the row-major row where that row's rate wins;
    elsewhere A's copy is charged as before."""
    for dtype in ("f16", "bf16"):
        for out in (dtype, "f32"):

            def plan_of(side, algorithm="auto", target=HOPPER, a_aligned=True, a_trans=True, b_trans=False):
                problem = Problem(side, side, side, dtype, out, "native", a_aligned, True, 1, a_trans, b_trans)
                return engine.plan(problem, target, algorithm)

            suffix = dtype + ("_f32out" if out != dtype else "")
            for side, row in ((256, "wgmma64x64at"), (1024, "wgmma128x64at"), (4096, "wgmma128x256at")):
                q = plan_of(side)
                assert (q.algorithm, q.copy_a, q.copy_b, q.copy_bytes) == (row, False, False, 0), q
                assert (
                    q.kernel.name == f"matmul_{row}_{suffix}" and engine.BoundPlan(q, None).shape == "tma"
                )  # maps each call
                # copied either way: kept as it lies (the copy kernel) where the transpose kernel's longer
                # launch outweighs the row-major row's rate (below 4096^3 in the model), else transposed into it
                unaligned = plan_of(side, a_aligned=False)
                into = row if side < 4096 else row[:-2]
                assert (unaligned.algorithm, unaligned.copy_a, unaligned.copy_b) == (into, True, False)
                assert unaligned.copy_bytes == 2 * side * side
                assert plan_of(side, a_trans=False).algorithm == row[:-2]  # A row-major: read as stored
                assert plan_of(side).seconds < plan_of(side, a_trans=False, algorithm=row[:-2]).seconds * 1.03
            # named with a row-major A: A transposed into aligned scratch (K rows of M) first
            named = plan_of(1024, "wgmma128x128at", a_trans=False)
            assert named.copy_a and not named.copy_b and named.copy_bytes == 2 * 1024 * 1024
            # A.T @ B.T: both read in place by the row that reads both transposed
            both = plan_of(4096, b_trans=True)
            assert (both.algorithm, both.copy_a, both.copy_b) == ("wgmma128x256atbt", False, False)
            # one row of C: the matrix-vector rows (memory-bound) as before, A copied as before
            assert not plan_of(1, a_aligned=True).variant.tma
            elsewhere = plan_of(4096, target=Target(80, 108, 163 * 1024, ALL_MODULES))
            assert elsewhere.algorithm == "mma128x128" and elsewhere.copy_a  # sm_90a code runs on 9.0 alone
            no_sm90 = plan_of(4096, target=Target(90, 132, 227 * 1024, NO_WGMMA))
            assert no_sm90.algorithm == "mma128x128" and no_sm90.copy_a


def test_auto_takes_the_pairs_where_rows_start_mid_sector_and_the_tiles_fill_the_gpu():
    """The pair rows (clusters of two blocks sharing B) measured 1.17-1.36x faster than their single rows where
    an operand read in place has rows an odd multiple of 16 bytes long (1000 or 3000 halves) and the tiles
    fill the SMs, and 0-3% slower elsewhere (benchmarks/results/probe-pairs-*): auto takes them there alone. A
    copied operand's rows are whole 32-byte sectors, so a copy never counts."""
    from gpumat.matmul.engine import half_sector_rows

    def auto(batch, m, n, k, layout="NN"):
        a_trans, b_trans = layout[0] == "T", layout[1] == "T"
        problem = Problem(m, n, k, "bf16", "bf16", "native", batch=batch, a_trans=a_trans, b_trans=b_trans)
        return engine.plan(problem, HOPPER)

    pairs = [(24, 1000, 1000, 1000, "NN"), (24, 1000, 1000, 1000, "NT"), (2, 3000, 3000, 3000, "NT")]
    pairs += [(1, 3000, 3000, 3000, "NN"), (8, 1000, 1000, 4000, "NN"), (16, 1000, 3000, 700, "NN")]
    for case in pairs:
        p = auto(*case)
        assert p.variant.cluster == 2 and p.variant.name.startswith("wgmma128x256pair"), (case, p.algorithm)
        assert p.grid[0] % 2 == 0 and half_sector_rows(p.variant, p.problem)
    singles = [(4, 2000, 2000, 2000, "NN"), (1, 4096, 4096, 4096, "NN"), (8, 1000, 1000, 4000, "NT")]
    singles += [(1, 4000, 4000, 4000, "NT"), (24, 1024, 1024, 1024, "NN")]  # rows of whole sectors
    singles += [(1, 1000, 1000, 1000, "NN"), (1, 2136, 1000, 1056, "NN")]  # fewer tiles than SMs
    for case in singles:
        assert auto(*case).variant.cluster == 1, case
    # what counts is the rows as the kernel reads them: A's width (K, or M stored transposed), B's (N, or K)
    row = ROWS["wgmma128x256"]
    assert half_sector_rows(row, Problem(64, 64, 1000, "f16", "f16", "native"))  # A's 2000-byte rows
    assert not half_sector_rows(row, Problem(1000, 64, 64, "f16", "f16", "native"))
    assert half_sector_rows(ROWS["wgmma128x256at"], Problem(1000, 64, 64, "f16", "f16", "native", a_trans=True))
    assert not half_sector_rows(row, Problem(1000, 64, 64, "f16", "f16", "native", a_trans=True))  # copied
    assert not half_sector_rows(row, Problem(64, 1000, 64, "f16", "f16", "native", b_trans=True))
    assert half_sector_rows(row, Problem(64, 1000, 64, "f16", "f16", "native"))
    assert not half_sector_rows(row, Problem(64, 1000, 64, "f16", "f16", "native", False, False))  # copied


def test_the_launcher_copies_a_into_the_layout_its_row_reads(monkeypatch):
    """The copies of A (recorded, nothing runs): an *at row given a row-major A transposes it into K rows
    of M, and given an unaligned A stored transposed copies those rows into aligned scratch; a row-major
    row given an A stored transposed transposes it into M rows of K. A's tensor map then describes the
    scratch (rows of a multiple of 16 elements: whole 32-byte sectors)."""
    m, n, k = 300, 520, 1000
    cases = [
        # (row, A stored transposed, A's storage row stride, the copy, A's map: globalDim, row stride in bytes)
        ("wgmma128x128at", False, k, ("transpose", m, k, k, 304), (m, k), 608),  # M x K source -> K x M scratch
        ("wgmma128x128at", True, m + 1, ("copy", k, m, m + 1, 304), (m, k), 608),  # K x M, unaligned rows
        ("wgmma128x128", True, m, ("transpose", k, m, m, 1008), (k, m), 2016),  # K x M source -> M x K scratch
    ]
    for name, a_trans, lda, copy, global_dim, stride in cases:
        aligned_a = not (a_trans and lda % 8)
        problem = Problem(m, n, k, "f16", "f16", "native", aligned_a, True, a_trans=a_trans)
        q = engine.plan(problem, HOPPER, name)
        assert q.copy_a and not q.copy_b
        a, b, c = (0x7F0000000000, lda, 0), (0x7F0010000000, n, 0), (0x7F0020000000, n, 0)
        encoded, _, copies = bound_run(monkeypatch, q, a, b, c)
        assert [(kind, *args[2:6]) for kind, args in copies] == [copy], (name, copies)
        a_map = encoded[1][1]  # C's map first
        assert (a_map["globalAddress"], a_map["globalDim"], a_map["globalStrides"][0]) == (
            0x7F4000000000,
            (*global_dim, 1),  # one matrix: a map of one layer
            stride,
        )


def test_mid_size_products_take_the_narrower_tiles_and_large_ones_the_128x256_tile():
    """On the H100's 132 SMs, 128 x 256 tiles leave most SMs idle on mid-size products (1024^3: 32 tiles;
    128 x 16384 x 4096: 64); the 128 x 128 tile has twice the work items and the 128 x 64 tile four times
    (1024^3 and 512^3: the 128 x 64 tile, which the H200 sweep measured fastest there). Where all fill the
    GPU the widest tile's rate wins. The same choice for each layout of the operands (both row-major, B
    stored transposed, A stored transposed, both), among the rows that read them as stored (at 8192^3 with
    B stored transposed, a transposing copy into a faster kernel may win)."""

    def pick(m, n, k, layout, in_place=True):
        a_trans, b_trans = layout.startswith("at"), layout.endswith("bt")
        q = half_plan(m, n, k, HOPPER, a_trans=a_trans, b_trans=b_trans)
        if in_place:  # (a swapped plan's kernel reads B's storage as its A, A's as its B, the other way round)
            reads = (q.variant.reads_a_trans, q.variant.reads_b_trans)
            kernel = q.kernel_problem
            assert reads == (kernel.a_trans, kernel.b_trans) and not (q.copy_a or q.copy_b), q
        name = re.sub("(at)?(bt)?$", "", q.algorithm)
        return (name, q.splits, "swapped") if q.swap else (name, q.splits)

    for layout in ("", "bt", "at", "atbt"):
        wide, narrow = ROWS["wgmma128x256" + layout], ROWS["wgmma128x128" + layout]
        assert pick(1024, 1024, 1024, layout) == ("wgmma128x64", 1)  # 128 tiles, not 64 or 32
        assert pick(128, 16384, 4096, layout) == ("wgmma128x128", 1)  # 128 tiles: no split needed
        # 64 rows: 64 tiles of 64 x 64 in 2 splits of K (H200, 2026-11-30, probe-wgmma-split-refit-*: 11.3-11.5
        # us against 12.9-13.1 unsplit; C^T on 32 tiles of 128 x 64 x 4 splits took 15.5)
        assert pick(64, 4096, 4096, layout) == ("wgmma64x64", 2)
        assert pick(512, 512, 512, layout) == ("wgmma64x64", 1)  # 64 tiles (H200: 4.5 us, 128 x 64 5.3)
        assert pick(4096, 4096, 4096, layout) == ("wgmma128x256", 1)  # both fill the SMs in whole waves
        assert pick(8192, 8192, 8192, layout, in_place=not layout.endswith("bt")) == ("wgmma128x256", 1)
        # 2048^3: 128 tiles of 128 x 256 (one wave) or 256 of 128 x 128 (two): the same fill of the SMs,
        # so the tiles' measured rates decide (bench sweep, H100: 25.6 us against 28.8)
        p = Problem(2048, 2048, 2048, "f16", "f16", "native", a_trans="at" in layout, b_trans=layout.endswith("bt"))
        arithmetic = [engine.best_split(v, p, HOPPER)[0] - v.fixed_s for v in (wide, narrow)]
        assert arithmetic[0] / arithmetic[1] == pytest.approx(narrow.rate / wide.rate)
        assert pick(2048, 2048, 2048, layout) == ("wgmma128x256", 1)


def test_layers_on_at_most_32_tokens_take_the_narrow_tiles_swapped():
    """A layer on at most 32 tokens runs C^T = W^T x^T on the 64 x 16 or 64 x 32 tile (the weight on the
    tile's 64 rows, the tokens K-major on its 16 or 32 columns: both layouts of W read in place, the tokens
    as stored); at 48 and 64 tokens the 64 x 64 tile, unswapped. A skinny C with B stored transposed (N
    rows of K) takes the narrow tile as it is. auto takes the narrow tiles for a C of at most 32 columns as
    the kernel computes it (the shapes they were measured on); by name they run any shape. H200 probe
    (benchmarks/results/probe-wgmma-narrow-*): 8 x 4096 x 4096 10.7 us on 64 x 16 at 2 splits against 17.0
    on 64 x 64, 32 x 8192 x 8192 36.4 against 39.5."""

    def plan_of(m, n, k, b_trans, batch=1, algorithm="auto"):
        return engine.plan(Problem(m, n, k, "f16", "f16", "native", batch=batch, b_trans=b_trans), HOPPER, algorithm)

    def pick(m, n, k, b_trans, batch=1):
        q = plan_of(m, n, k, b_trans, batch)
        assert not (q.copy_a or q.copy_b), q
        return re.sub("(at)?(bt)?$", "", q.algorithm), q.swap

    narrow = ("wgmma64x16", "wgmma64x32")
    for b_trans in (False, True):  # x @ W and x @ W.T
        assert pick(8, 4096, 4096, b_trans) == ("wgmma64x16", True)
        assert pick(8, 3072, 1024, b_trans) == ("wgmma64x16", True)
        assert pick(32, 8192, 8192, b_trans) == ("wgmma64x32", True)
        assert pick(48, 8192, 8192, b_trans) == ("wgmma64x64", False)
        assert pick(64, 4096, 4096, b_trans) == ("wgmma64x64", False)
        # C of more than 32 columns as the kernel computes it: never the narrow tiles in auto
        for m, n, k, batch in ((128, 1024, 1024, 1), (2, 2048, 4096, 1), (64, 64, 4096, 2), (256, 256, 256, 1)):
            q = plan_of(m, n, k, b_trans, batch)
            assert not q.algorithm.startswith(narrow) or q.kernel_problem.n <= 32, q
    assert pick(4096, 16, 4096, True) == ("wgmma64x16", False)
    named = plan_of(128, 1024, 1024, True, algorithm="wgmma64x16bt")  # by name: any shape
    assert (named.algorithm, named.copy_a, named.copy_b) == ("wgmma64x16bt", False, False)


def test_a_plan_copying_both_operands_pays_a_second_launch():
    """Each operand's aligning copy is a launch of its own: a plan copying both is charged the first copy's
    launch and COPY_SECOND_LAUNCH_S beside their bytes (H200: 97 x 6007 x 2049 float16, both operands
    unaligned, ran 44.9 us on wgmma128x64 after both copies; charged a whole second 5 us launch, auto took
    mma64x64 at 2 splits, 55.9 us)."""
    m, n, k = 97, 6007, 2049
    v = ROWS["wgmma128x64"]
    both = Problem(m, n, k, "f16", "f16", "native", a_aligned=False, b_aligned=False)
    a_only = Problem(m, n, k, "f16", "f16", "native", a_aligned=False, b_aligned=True)
    charged = engine.model(v, both, HOPPER, 1, k) - engine.model(v, a_only, HOPPER, 1, k)
    assert charged == pytest.approx(2 * k * n * 2 / engine.COPY_BANDWIDTH + engine.COPY_SECOND_LAUNCH_S)
    assert 0 < engine.COPY_SECOND_LAUNCH_S < engine.COPY_LAUNCH_S
    q = engine.plan(both, HOPPER)
    assert (q.algorithm, q.splits, q.copy_a, q.copy_b) == ("wgmma128x64", 1, True, True)


def test_mma_rows_launch_their_tiles_instantiation_with_its_block_and_shared_memory():
    """Each mma row's entry points are its tile's instantiation of the kernel template (the file's
    `using MmaBMxBN = Cfg<BM, BN, WARPS_M, WARPS_N, STAGES, ...>`), launched with that configuration's
    block (32 WARPS_M WARPS_N threads) and dynamic shared memory (STAGES k tiles of BM x 32 + 32 x BN
    halves), which the file pins in a static_assert."""
    src = (Path(__file__).resolve().parents[1] / "cuda" / "matmul_tc_half.cu").read_text()
    cfgs = {
        name: tuple(int(x) for x in args)
        for name, *args in re.findall(r"using (Mma\w+) = Cfg<(\d+), (\d+), (\d+), (\d+), (\d+)", src)
    }
    entries = dict(re.findall(r"GPUMAT_MMA_HALF\((\w+), (Mma\w+),", src))
    assert sorted(cfgs) == sorted(f"Mma{ROWS[name].tile[0]}x{ROWS[name].tile[1]}" for name in MMA)
    assert set(entries) == {kernel.name for name in MMA for kernel in ROWS[name].kernels.values()}
    for name in MMA:
        v = ROWS[name]
        cfg = f"Mma{v.tile[0]}x{v.tile[1]}"
        bm, bn, warps_m, warps_n, stages = cfgs[cfg]
        smem = stages * (bm * 32 + 32 * bn) * 2
        assert name == f"mma{bm}x{bn}" and v.tile == (bm, bn), name
        assert v.block == (32 * warps_m * warps_n, 1, 1) and v.smem == smem, name
        assert f"{cfg}::SMEM_BYTES == {smem}" in src, name  # the kernel file pins the same number
        assert (v.args, v.min_arch, v.needs_aligned, v.persistent, v.tier) == ("k_chunk", 80, False, False, 1), name
        for (sfx, out), kernel in v.kernels.items():
            assert kernel.name == f"matmul_{name}_{sfx}" + ("_f32out" if out != sfx else "")
            assert entries[kernel.name] == cfg and kernel.dynamic_smem == smem and kernel.signature == K_CHUNK


def test_mma_rows_fit_their_blocks_an_sm_on_sm90():
    """The cost model's blocks_per_sm of each mma row is what its sm_90 build fits: registers (the launch
    bounds) and shared memory (228 KiB an SM, 1 KiB of it reserved a block)."""
    modules = built_entries()
    for name in MMA:
        v = ROWS[name]
        assert v.blocks_per_sm * (v.smem + 1024) <= 228 * 1024, name
        for kernel in v.kernels.values():
            r = modules[kernel.module][kernel.name]["resources"].get("sm_90")
            if r is None:
                pytest.skip("the kernels were built without sm_90")
            assert r["registers"] * v.block[0] * v.blocks_per_sm <= 65536, (kernel.name, r["registers"])


def test_wgmma_rows_ask_for_their_kernels_shared_memory():
    """A wgmma row's launches ask for the block and dynamic shared memory of its tile's instantiation: the
    kernel file pins Tile<BM, BN>::STAGES and Tile<BM, BN>::SMEM_BYTES in static_asserts, and the ring's
    layout gives the same count (as many stages as fit in 227 KiB, at most 8 for the 128-row tiles and 24
    for the 64-row ones), with a producer warpgroup and a consumer warpgroup each 64 rows."""
    src = (Path(__file__).resolve().parents[1] / "cuda" / "matmul_wgmma.cuh").read_text()
    pinned = {
        (int(bm), int(bn)): (int(stages), int(smem))
        for bm, bn, stages, smem in re.findall(
            r"Tile<(\d+), (\d+)>::STAGES == (\d+) && Tile<\1, \2>::SMEM_BYTES == (\d+)", src
        )
    }
    assert sorted(pinned) == [(64, 16), (64, 32), (64, 64), (128, 64), (128, 128), (128, 256)]
    assert sorted({ROWS[name].tile for name in WGMMA}) == sorted(pinned)
    for name in WGMMA:
        v = ROWS[name]
        bm, bn = v.tile
        stages, smem = pinned[bm, bn]
        stage = (bm * 64 + 64 * bn) * 2  # A BM x 64 and B 64 x BN, 16-bit
        c_buffers = bm // 64 * 2 * 8192  # two of 64 rows x 128 bytes a consumer
        fit = (227 * 1024 - c_buffers - 1024 - 384) // stage
        assert stages == min(8 if bm == 128 else 24, fit), name
        bars = -(-16 * stages // 128) * 128  # an 8-byte full and empty mbarrier a stage
        assert bn >= 64 or v.reads_b_trans, name  # the narrow widths read B K-major, BN rows a box
        assert smem == stages * stage + c_buffers + 1024 + bars, name
        assert v.block == (128 * (1 + bm // 64), 1, 1) and v.smem == smem and v.blocks_per_sm == 1, name
        pair = "pair" if v.cluster == 2 else ""
        assert v.cluster in (1, 2) and (not pair or (bm == 128 and bn >= 128)), name
        assert name == f"wgmma{bm}x{bn}{pair}" + ("at" if v.reads_a_trans else "") + ("bt" if v.reads_b_trans else "")
        for (sfx, out), kernel in v.kernels.items():
            assert kernel.dynamic_smem == smem, kernel.name
            # (a pair runs its single row's kernels, as clusters)
            assert kernel.name == f"matmul_{name.replace('pair', '')}_{sfx}" + ("_f32out" if out != sfx else "")


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("name", WGMMA)
def test_the_launcher_gives_each_wgmma_tile_its_tensor_map_boxes(monkeypatch, name, splits):
    """The tensor maps the launcher encodes (nothing is encoded or launched: both are recorded): A in
    64 x BM boxes, A stored transposed (K rows of M) in 64 x 64 boxes (the kernel loads BM / 64 of
    them); B row-major in 64 x 64 boxes (the kernel loads BN / 64 of them), B stored transposed in
    64 x BN boxes (a pair's block loads half of it: 64 x BN / 2); C (or split-K's float32 layers) in
    128-byte x 64-row boxes."""
    v = ROWS[name]
    bm, bn = v.tile
    m, n, k = 300, 520, 1000  # 16-byte aligned rows (A stored transposed: 304 apart): every operand in place
    problem = Problem(m, n, k, "f16", "f16", "native", a_trans=v.reads_a_trans, b_trans=v.reads_b_trans)
    q = engine.forced(problem, HOPPER, name, splits, 384)
    assert q.variant is v and q.splits == splits and not (q.copy_a or q.copy_b)
    a = (0x7F0000000000, 304, 0) if v.reads_a_trans else (0x7F0000000000, k, 0)
    b = (0x7F0010000000, k, 0) if v.reads_b_trans else (0x7F0010000000, n, 0)
    encoded, launches, _ = bound_run(monkeypatch, q, a, b, (0x7F0020000000, n, 0))
    out = "f32" if splits > 1 else "f16"
    by_tma = bn * (4 if splits > 1 else 2) >= 128  # C's tile at least one 128-byte box wide
    if by_tma:
        (sc, c_map), (sa, a_map), (sb, b_map) = encoded  # C's map first: it decides TMA stores
        assert (sc, c_map["globalDim"], c_map["boxDim"]) == (
            out,
            (n, m, splits),
            (128 // (2 if out == "f16" else 4), 64, 1),
        )
    else:  # (the narrow widths: plain stores, no map of C)
        (sa, a_map), (sb, b_map) = encoded
    if v.reads_a_trans:
        assert (sa, a_map["globalDim"], a_map["globalStrides"][0], a_map["boxDim"]) == (
            "f16",
            (m, k, 1),
            608,
            (64, 64, 1),
        )
    else:
        assert (sa, a_map["globalDim"], a_map["boxDim"]) == ("f16", (k, m, 1), (64, bm, 1))
    if v.reads_b_trans:
        assert (sb, b_map["globalDim"], b_map["boxDim"]) == ("f16", (k, n, 1), (64, bn // v.cluster, 1))
    else:
        assert (sb, b_map["globalDim"], b_map["boxDim"]) == ("f16", (n, k, 1), (64, 64, 1))
    assert all(box <= 256 for _, x in encoded for box in x["boxDim"])  # the copy engine's largest box
    kernel, grid, block, args, smem = launches[0]
    assert kernel == v.kernels[("f16", out)].name and grid == q.grid and block == v.block and smem == v.smem
    assert args[4:10] == (m, n, k, n, q.k_chunk, int(by_tma))  # M, N, K, ldc, k_chunk, C by TMA or not
    assert len(launches) == (2 if splits > 1 else 1)


@pytest.mark.parametrize("splits", [1, 3])
def test_a_swapped_plan_launches_c_transposed_with_the_operands_exchanged(monkeypatch, splits):
    """x @ W.T with 16 rows of x (16 x 520 x 1000, x and W row-major), run swapped by wgmma128x64bt: the
    kernel's A is W's storage (520 rows of K), its B x's (16 rows of K, read as B stored transposed), no
    map for C, which leaves by plain stores into C stored transposed (c_store 2, ldc C's row stride); a
    bias over C's columns becomes one over the kernel's rows. Split: float32 partials laid out as C (520
    apart, 16 x 520 a split), reduced into C as the caller laid it out with the caller's epilogue."""
    m, n, k = 16, 520, 1000
    p = Problem(m, n, k, "f16", "f16", "native", b_trans=True)
    q = engine.forced(p, HOPPER, "wgmma128x64bt", splits, 384, swap=True)
    assert q.swap and q.kernel_problem == Problem(n, m, k, "f16", "f16", "native", a_trans=False, b_trans=True)
    assert not (q.copy_a or q.copy_b) and q.grid == ROWS["wgmma128x64bt"].grid(n, m, splits, 132)
    x, w, c = (0x7F0000000000, k, 0), (0x7F0010000000, k, 0), (0x7F0020000000, 528, 0)
    bias_over_columns = (1.0, 0.0, 0x7F0030000000, 1, 1, 0, 0)  # bias[j] added to every row of C
    encoded, launches, copies = bound_run(monkeypatch, q, x, w, c, bias_over_columns, scratch=0x7F4000000000)
    assert not copies
    (sa, a_map), (sb, b_map) = encoded  # no C map
    assert (sa, a_map["globalAddress"], a_map["globalDim"], a_map["boxDim"]) == ("f16", w[0], (k, n, 1), (64, 128, 1))
    assert (sb, b_map["globalAddress"], b_map["globalDim"], b_map["boxDim"]) == ("f16", x[0], (k, m, 1), (64, 64, 1))
    kernel, grid, _, args, _ = launches[0]
    assert grid == q.grid
    C_TRANSPOSED = engine.C_STORE["transposed"]
    if splits == 1:
        assert len(launches) == 1 and kernel == "matmul_wgmma128x64bt_f16"
        assert args[3:10] == (c[0], n, m, k, 528, k, C_TRANSPOSED)
        assert args[-7:] == (1.0, 0.0, 0x7F0030000000, 1, 2, 0, 0)  # the bias along the kernel's rows
    else:
        assert len(launches) == 2 and kernel == "matmul_wgmma128x64bt_f16_f32out"
        assert args[3:10] == (0x7F4000000000, n, m, k, n, 384, C_TRANSPOSED)
        assert args[10:12] == (1, m * n)  # one product, partial layers m x n apart
        assert args[-7:] == engine.IDENTITY
        reduce, _, _, rargs, _ = launches[1]
        assert reduce == "matmul_splitk_reduce_f32_f16"
        assert rargs == (0x7F4000000000, c[0], m, n, 528, splits, *bias_over_columns)


@given(
    dims(5000, (64, 128, 256)),
    dims(5000, (64, 128, 256)),
    dims(70000, (32, 64, 256, 1024)),
    st.sampled_from(VARIANTS),
    st.sampled_from([1, 8, 46, 132]),
)
def test_split_k_plans_cover_k_in_whole_tiles(m, n, k, name, sms):
    p = half_plan(m, n, k, Target(90, sms, 227 * 1024, ALL_MODULES), algorithm=name)
    splits, k_chunk, v = p.splits, p.k_chunk, ROWS[name]
    assert p.variant is v
    assert 1 <= splits and geometry.cdiv(k, k_chunk) == splits  # every split has work, none is left over
    if splits > 1:
        assert k_chunk % v.k_align == 0 and k_chunk >= 4 * v.k_align and k_chunk >= v.min_k_chunk
    else:
        assert k_chunk == k
    kernel = p.kernel_problem  # (a swapped plan's grid covers C^T)
    grid = v.grid(kernel.m, kernel.n, splits, sms)
    assert p.grid == grid
    if v.persistent:  # (a cluster of two blocks runs even on one SM's worth of slots)
        assert 1 <= grid[0] <= max(sms * v.blocks_per_sm, v.cluster) and grid[1:] == (1, 1)
        assert grid[0] % v.cluster == 0
    else:
        assert grid == geometry.tiled_grid(kernel.m, kernel.n, *v.tile, layers=splits)


def test_skinny_products_split_k_and_square_ones_do_not():
    for name in VARIANTS:

        def split(m, n, k, name=name):
            return half_plan(m, n, k, Target(90, 132, 227 * 1024, ALL_MODULES), algorithm=name)

        tm, tn = ROWS[name].tile  # 4-16 tiles of 256 x 256, 65536 deep: split until about half the SMs work
        assert split(256, 256, 65536).splits * -(-256 // tm) * -(-256 // tn) >= 64
        # 2137 x 108 x 1055 (H200, 2026-11-30, probe-wgmma-split-refit-*): 17 tiles of 128 x 256 leave most SMs
        # idle, and 3 splits took 18.7 us against 22.6 unsplit; 34 tiles of 128 x 64 and 68 of 64 x 64 ran
        # fastest unsplit (14.7 and 13.1 us; 15.0-16.7 split): a pass over split partials costs more there
        if name.startswith("wgmma"):
            if ROWS[name].tile == (128, 256):
                assert split(2137, 108, 1055).splits > 1
            elif ROWS[name].tile[1] == 64:
                assert split(2137, 108, 1055).splits == 1
        elif ROWS[name].tile == (128, 128):  # 17 tiles of 128 x 128 on 132 SMs: split
            assert split(2137, 108, 1055).splits > 1
        # (the small mma tiles have 34-68 tiles there, each alone on its SM: a split gains about what its
        # second pass costs, and the model may go either way)
        assert (split(8192, 8192, 8192).splits, split(8192, 8192, 8192).k_chunk) == (1, 8192)


def test_tensor_map_arguments():
    args = tensor_map_args(0x7F0000000000, rows=3001, cols=2999, stride=3008, box_cols=64, box_rows=128)
    assert args["globalDim"] == (2999, 3001, 1) and args["globalStrides"] == (6016, 3001 * 6016)
    assert args["boxDim"] == (64, 128, 1) and args["elementStrides"] == (1, 1, 1)
    assert aligned(0x7F0000000010, 8, 2) and not aligned(0x7F0000000002, 8, 2)
    assert not aligned(0x7F0000000000, 4097, 2)
    with pytest.raises(ValueError, match="16-byte"):
        tensor_map_args(0x7F0000000000, 4, 4, 4097, 64, 64)


def test_c_map_arguments():
    args = c_map_args(0x7F0000000000, rows=3001, cols=3000, stride=3008, layers=1, itemsize=2)
    assert args["globalDim"] == (3000, 3001, 1) and args["globalStrides"] == (6016, 3001 * 6016)
    assert args["boxDim"] == (64, 64, 1)  # 128 bytes of columns: one swizzle row
    split = c_map_args(0x7F0000000100, rows=100, cols=36, stride=36, layers=5, itemsize=4)
    assert (
        split["globalDim"] == (36, 100, 5) and split["globalStrides"] == (144, 14400) and split["boxDim"] == (32, 64, 1)
    )
    assert c_map_args(0x7F0000000000, rows=3001, cols=2999, stride=3008, layers=1, itemsize=2) is None
    assert c_map_args(0x7F0000000000, 10, 10, 4097, 1, 2) is None  # plain stores
    assert c_map_args(0x7F0000000004, 10, 16, 16, 1, 4) is None
    # rows that end inside a 16-byte piece: the copy engine would write the whole piece, past the view
    assert c_map_args(0x7F0000000000, rows=1, cols=1, stride=4, layers=1, itemsize=4) is None
    assert c_map_args(0x7F0000000000, rows=9, cols=12, stride=16, layers=1, itemsize=2) is None
    assert c_map_args(0x7F0000000000, rows=9, cols=16, stride=24, layers=1, itemsize=2) is not None


def test_every_half_variant_is_an_algorithm_name():
    for sfx in ("f16", "bf16"):
        assert set(VARIANTS) <= set(algorithms(sfx))
    assert not set(VARIANTS) & set(algorithms("f64"))


def test_named_variants_that_cannot_run_are_refused_before_any_launch(monkeypatch):
    a16 = fake_matrix(64, 64, stride=4097, dtype=np.float16)
    b16 = fake_matrix(64, 64, ptr=0x7F0010000000, dtype=np.float16)
    monkeypatch.setattr(a16.device, "arch", 89)  # sm_90a code runs on compute capability 9.0 alone
    with pytest.raises(ValueError, match="sm_90a"):
        gm.matmul(a16, b16, algorithm="wgmma128x256")
    monkeypatch.undo()
    with pytest.raises(ValueError, match="unknown matmul algorithm"):
        gm.matmul(fake_matrix(2, 3), fake_matrix(3, 2, ptr=0x7F0010000000), algorithm="mma128x128")  # float32
    old = FAKE_DEVICE.arch
    try:
        FAKE_DEVICE.arch = 86
        b = fake_matrix(64, 64, ptr=0x7F0010000000, dtype=np.float16)
        with pytest.raises(ValueError, match="sm_90a"):
            gm.matmul(fake_matrix(64, 64, dtype=np.float16), b, algorithm="wgmma128x256")
        FAKE_DEVICE.arch = 75
        with pytest.raises(ValueError, match="sm_80"):
            gm.matmul(fake_matrix(64, 64, dtype=np.float16), b, algorithm="mma128x128")
    finally:
        FAKE_DEVICE.arch = old


# ---- on the GPU ----


def runnable() -> list[str]:
    target = Target.of(gm.device())
    return [n for n in VARIANTS if engine.unavailable(ROWS[n], target) is None]


def upload(host: np.ndarray, dtype: str, pad_left: int, pad_right: int):
    """host rounded to dtype inside a wider random matrix (parent, view); the view's exact values as float64."""
    h, w = host.shape
    parent = rng.uniform(-1, 1, (h, w + pad_left + pad_right)).astype(np.float32)
    parent[:, pad_left : pad_left + w] = host
    big = gm.Matrix.from_numpy(parent, dtype=dtype)
    view = big[:, pad_left : pad_left + w]
    return big, view, view.to_numpy(dtype=np.float32).astype(np.float64)


def tma_pads(m: int, n: int, k: int) -> tuple:
    """Right paddings that make A's and B's row strides multiples of 8 elements (what TMA needs)."""
    return (0, -k % 8, 0, -n % 8, 0, 0)


def product(name: str, dtype: str, out_dtype: str, m: int, n: int, k: int, pads=None):
    """C = A @ B for views with the given (left, right) paddings, into a NaN-filled view of a larger C;
    returns (error against float64, C as float64, whether everything outside C's view stayed NaN).
    Default paddings: none for the mma tiles (odd K or N: the element-wise copies), TMA-ready strides for
    the others."""
    if pads is None:
        pads = (0,) * 6 if name in MMA else tma_pads(m, n, k)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    pa, A, a64 = upload(a, dtype, pads[0], pads[1])
    pb, B, b64 = upload(b, dtype, pads[2], pads[3])
    pc = gm.Matrix.empty(m, n + pads[4] + pads[5], dtype=out_dtype)
    poison(pc)
    C = pc[:, pads[4] : pads[4] + n]
    before = pc.to_numpy(dtype=np.float32)
    gm.matmul(A, B, out=C, algorithm=name)
    after = pc.to_numpy(dtype=np.float32)
    got = after[:, pads[4] : pads[4] + n].astype(np.float64)
    outside = np.concatenate([after[:, : pads[4]], after[:, pads[4] + n :]], axis=1)
    untouched = np.array_equal(
        np.isnan(outside), np.isnan(np.concatenate([before[:, : pads[4]], before[:, pads[4] + n :]], axis=1))
    )
    err = product_error(got, a64, b64, out_dtype if out_dtype != "bfloat16" else None)
    for x in (pa, pb, pc):
        x.free()
    return err, got, untouched


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("out_dtype", ["same", "float32"])
def test_every_variant_matches_float64(dtype, out_dtype):
    out_dtype = dtype if out_dtype == "same" else out_dtype
    names = runnable()
    if not names:
        pytest.skip(f"no tensor-core half kernel runs on sm_{gm.device().arch}")
    for name in names:
        for m, n, k in ((1, 1, 1), (128, 256, 64), (129, 257, 65), (300, 200, 1000), (2137, 108, 1055), (64, 64, 8192)):
            err, got, _ = product(name, dtype, out_dtype, m, n, k)
            assert not np.isnan(got).any(), (name, m, n, k)
            assert err < tolerance(out_dtype, k), (name, m, n, k, err)


@pytest.mark.gpu
@given(
    m=dims(400, (64, 128, 256)),
    n=dims(600, (64, 128, 256)),
    k=dims(400, (16, 32, 64)),
    dtype=st.sampled_from(DTYPES),
    f32out=st.booleans(),
    which=st.integers(0, len(VARIANTS) - 1),
)
def test_any_shape(m, n, k, dtype, f32out, which):
    names = runnable()
    if not names:
        pytest.skip("no tensor-core half kernel runs here")
    name = names[which % len(names)]
    out_dtype = "float32" if f32out else dtype
    err, got, _ = product(name, dtype, out_dtype, m, n, k)
    assert not np.isnan(got).any()
    assert err < tolerance(out_dtype, k), (name, err)


@pytest.mark.gpu
@given(
    m=dims(300, (128,)),
    n=dims(300, (128, 256)),
    k=dims(300, (32, 64)),
    dtype=st.sampled_from(DTYPES),
    pads=st.tuples(*[st.integers(0, 9)] * 6),
    f32out=st.booleans(),
)
def test_views_at_odd_offsets_and_strides(m, n, k, dtype, pads, f32out):
    """Every variant takes any view: the mma tiles read it in place (16-byte or element-wise copies), a
    TMA variant from an aligned copy of each operand that needs one; C is written in place."""
    names = runnable()
    if not names:
        pytest.skip("no tensor-core half kernel runs here")
    out_dtype = "float32" if f32out else dtype
    for name in (*names, "auto"):
        err, got, untouched = product(name, dtype, out_dtype, m, n, k, pads)
        assert not np.isnan(got).any() and untouched
        assert err < tolerance(out_dtype, k), (name, err)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", WGMMA)
def test_wgmma_takes_aligned_views_with_padded_strides(name, dtype):
    if name not in runnable():
        pytest.skip(f"{name} needs sm_90a; this GPU is sm_{gm.device().arch}")
    # (left, right) paddings of A, B and C: A's and B's rows start on 16 bytes and are a multiple of 8 long
    # (a *bt row multiplies a transposed copy of this row-major B)
    for m, n, k, pads in ((300, 517, 200, (8, 16, 16, 3, 3, 5)), (129, 255, 1000, (16, 0, 8, 1, 0, 1))):
        assert (k + pads[0] + pads[1]) % 8 == 0 and (n + pads[2] + pads[3]) % 8 == 0
        err, got, untouched = product(name, dtype, dtype, m, n, k, pads)
        assert not np.isnan(got).any() and untouched
        assert err < tolerance(dtype, k)


# epilogues the by-name tests draw: (alpha, beta, bias: none, a row or a column, a float32 bias (else C's
# dtype), activation)
EPILOGUES = st.tuples(
    st.sampled_from([1.0, -1.5]),  # alpha
    st.sampled_from([0.0, 0.0, 0.5]),  # beta
    st.sampled_from([None, "row", "column"]),  # bias
    st.booleans(),  # a float32 bias (else C's dtype)
    st.sampled_from([None, "relu", "gelu", "gelu_tanh"]),
)


def tma_ready(width: int) -> tuple[int, int]:
    """(left, right) padding of a stored row of `width` elements that makes its view TMA-ready: it starts
    16 bytes into its parent's row, and the rows are a multiple of 8 elements apart."""
    return 8, -width % 8


def upload_operands(m, n, k, dtype, a_trans, b_trans, pads):
    """A (m x k) and B (k x n) for a product, as views into wider random storage padded by pads(stored row
    width); A stored transposed (X, k x m row-major, as X.T) and B stored transposed (W, n x k, as W.T)
    where asked. Returns (A's parent, B's parent, A, B, A as float64, B as float64)."""
    if a_trans:
        pa, X, x64 = upload(rng.uniform(-1, 1, (k, m)).astype(np.float32), dtype, *pads(m))
        A, a64 = X.T, x64.T
    else:
        pa, A, a64 = upload(rng.uniform(-1, 1, (m, k)).astype(np.float32), dtype, *pads(k))
    if b_trans:
        pb, W, w64 = upload(rng.uniform(-1, 1, (n, k)).astype(np.float32), dtype, *pads(k))
        B, b64 = W.T, w64.T
    else:
        pb, B, b64 = upload(rng.uniform(-1, 1, (k, n)).astype(np.float32), dtype, *pads(n))
    return pa, pb, A, B, a64, b64


def check_epilogue_product(name, A, B, a64, b64, out_dtype, splits, c_tma, epilogue, copies, swap=False) -> None:
    """C = act(alpha op(A) op(B) + beta C + bias) by the named row with K split as asked (the reduction then
    applies the epilogue), swapped or not as asked (swap: C^T = op(B)^T @ op(A)^T written into C
    transposed), its plan copying the operands `copies` says (copy_a, copy_b; None: not checked), against float64
    element by element, relative to |alpha| |A| |B| + |beta| |C| + |bias|. C is a view inside a wider
    matrix, NaN-poisoned where beta is 0 (C is then never read): nothing outside it may change, no NaN
    stay. c_tma: C's rows start on 16 bytes and are whole 16-byte pieces (the caller rounds n up to a
    multiple of 8), so it may leave by TMA stores (a tile row of C narrower than a 128-byte box leaves by
    plain stores all the same); else by the kernels' (or the reduction's) plain stores."""
    alpha, beta, bias_kind, bias_f32, activation = epilogue
    (m, k), n = a64.shape, b64.shape[1]
    left, right = (8, 8) if c_tma else (1, 2)
    pc, C, c64 = upload(rng.uniform(-1, 1, (m, n)).astype(np.float32), out_dtype, left, right)
    assert (c_map_args(C.elements, m, n, C.stride, 1, C.itemsize) is not None) == c_tma
    if not beta:
        poison(pc)
    bias, bias64 = None, 0.0
    if bias_kind:
        shape = (1, n) if bias_kind == "row" else (m, 1)
        bias = gm.Matrix.from_numpy(
            rng.uniform(-1, 1, shape).astype(np.float32), dtype="float32" if bias_f32 else out_dtype
        )
        bias64 = bias.to_numpy(dtype=np.float32).astype(np.float64)
    before = pc.to_numpy(dtype=np.float32)
    plan = engine.forced(*engine.problem_of_call(A, B, C, name), name, splits, swap=swap)
    assert plan.variant is ROWS[name] and plan.swap == swap, plan
    assert copies is None or (plan.copy_a, plan.copy_b) == copies, plan
    gm.matmul(A, B, out=C, plan=plan, alpha=alpha, beta=beta, bias=bias, activation=activation)
    after = pc.to_numpy(dtype=np.float32)
    got = after[:, left : left + n].astype(np.float64)
    outside = np.r_[0:left, left + n : left + n + right]
    assert np.array_equal(after[:, outside], before[:, outside], equal_nan=True), "C's parent changed outside C"
    r, scale = epilogue_reference(a64, b64, alpha, beta, c64, None if bias is None else bias64, activation)
    assert not np.isnan(got).any(), (name, plan.splits, "an element of C not written, or poison read")
    # the accumulation bound (gelu's slope is at most 1.13) plus C's rounding and the epilogue's few
    # float32 operations; below float16's normal range, its fixed spacing
    err = np.abs(got - r) / np.maximum(scale, 2.0**-14)
    assert err.max() <= 1.2 * tolerance(out_dtype, k) + 2.0**-20, (name, plan.splits, err.max())
    for x in (pc, *([bias] if bias is not None else [])):
        x.free()


def upload_batch(host: np.ndarray, dtype: str, pad_left: int, pad_right: int):
    """upload() for a matrix (h x w) or a batch (batch x h x w): host rounded to dtype as a view inside
    wider random storage; (parent, view, the view's exact values as float64)."""
    w = host.shape[-1]
    parent = rng.uniform(-1, 1, (*host.shape[:-1], w + pad_left + pad_right)).astype(np.float32)
    parent[..., pad_left : pad_left + w] = host
    big = gm.Matrix.from_numpy(parent, dtype=dtype)
    view = big[:, pad_left : pad_left + w] if host.ndim == 2 else big[:, :, pad_left : pad_left + w]
    return big, view, view.to_numpy(dtype=np.float32).astype(np.float64)


@pytest.mark.gpu
@settings(max_examples=4 * settings().max_examples)  # four tiles: four times the profile's draws
@given(
    m=dims(300, (64, 128)),
    n=dims(300, (64, 128)),
    k=dims(700, (32, 64, 128)),
    name=st.sampled_from(MMA),
    dtype=st.sampled_from(DTYPES),
    f32out=st.booleans(),
    batch=st.sampled_from([1, 1, 2, 5]),
    splits=st.sampled_from([1, 2, 3]),
    in_place_16=st.booleans(),
    pads=st.tuples(*[st.integers(0, 9)] * 6),
    epilogue=st.tuples(
        st.sampled_from([1.0, -1.5]),  # alpha
        st.sampled_from([0.0, 0.0, 0.5]),  # beta
        st.sampled_from([None, "row", "column"]),  # bias
        st.booleans(),  # a float32 bias (else C's dtype)
        st.sampled_from([None, "relu", "gelu", "gelu_tanh"]),
    ),
)
def test_every_mma_tile_by_name_with_batches_split_k_views_and_epilogues(
    m, n, k, name, dtype, f32out, batch, splits, in_place_16, pads, epilogue
):
    """Each mma tile by name on everything its kernel takes: a batch (grid z, one layer a matrix) or, for
    one matrix, K split as drawn (float32 partials from the _f32out entry; the reduction applies the
    epilogue); A and B read in place as views whose rows start on 16 bytes and are whole 16-byte pieces
    (in_place_16: the cp.async path, ragged edges zero-filled) or at the drawn offsets and strides
    (mostly odd: the element-wise path); the fused epilogue (alpha, beta, a row or column bias of
    either dtype, each activation). Against float64, element by element relative to |alpha| |A| |B| +
    |beta| |C| + |bias|; C is a view inside a wider matrix, NaN-poisoned where beta is 0 (C is then
    never read): nothing outside it may change, no NaN stay."""
    if name not in runnable():
        pytest.skip(f"{name} needs sm_80; this GPU is sm_{gm.device().arch}")
    alpha, beta, bias_kind, bias_f32, activation = epilogue
    out_dtype = "float32" if f32out else dtype
    v = ROWS[name]
    if in_place_16:  # left paddings of 0 or 8 elements, row strides a multiple of 8
        pa = (8 * (pads[0] % 2), -k % 8 + 8 * (pads[1] % 2))
        pb = (8 * (pads[2] % 2), -n % 8 + 8 * (pads[3] % 2))
    else:
        pa, pb = pads[0:2], pads[2:4]
    lead = (batch,) if batch > 1 else ()
    keep = []
    try:
        pA, A, a64 = upload_batch(rng.uniform(-1, 1, (*lead, m, k)).astype(np.float32), dtype, *pa)
        keep.append(pA)
        pB, B, b64 = upload_batch(rng.uniform(-1, 1, (*lead, k, n)).astype(np.float32), dtype, *pb)
        keep.append(pB)
        pC, C, c64 = upload_batch(rng.uniform(-1, 1, (*lead, m, n)).astype(np.float32), out_dtype, *pads[4:6])
        keep.append(pC)
        if not beta:
            for i in range(batch) if batch > 1 else [None]:
                poison(pC if i is None else pC[i])
        bias, bias64 = None, None
        if bias_kind:
            shape = (1, n) if bias_kind == "row" else (m, 1)
            bias = gm.Matrix.from_numpy(
                rng.uniform(-1, 1, shape).astype(np.float32), dtype="float32" if bias_f32 else out_dtype
            )
            keep.append(bias)
            bias64 = bias.to_numpy(dtype=np.float32).astype(np.float64)
        before = pC.to_numpy(dtype=np.float32)
        plan = gm.matmul_plan(A, B, out=C, algorithm=name, splits=splits if batch == 1 else 1)
        assert plan.variant is v and not (plan.copy_a or plan.copy_b), plan
        if batch > 1:
            assert plan.grid[2] == batch and plan.splits == 1, plan
        else:
            assert plan.splits == min(splits, -(-k // plan.k_chunk)), plan
        gm.matmul(A, B, out=C, plan=plan, alpha=alpha, beta=beta, bias=bias, activation=activation)
        after = pC.to_numpy(dtype=np.float32)
        left, width = pads[4], n
        got = after[..., left : left + width].astype(np.float64)
        outside = np.r_[0:left, left + width : after.shape[-1]]
        assert np.array_equal(after[..., outside], before[..., outside], equal_nan=True), "C's parent changed"
        r, scale = epilogue_reference(a64, b64, alpha, beta, c64, bias64, activation)
        assert not np.isnan(got).any(), (name, plan.splits, "an element of C not written, or poison read")
        # the accumulation bound (gelu's slope is at most 1.13) plus C's rounding and the epilogue's few
        # float32 operations; below float16's normal range, its fixed spacing
        err = np.abs(got - r) / np.maximum(scale, 2.0**-14)
        assert err.max() <= 1.2 * tolerance(out_dtype, k) + 2.0**-20, (name, plan.splits, err.max())
    finally:
        for x in keep:
            x.free()


@pytest.mark.gpu
@pytest.mark.parametrize("name", MMA)
def test_more_row_tiles_than_grid_rows_walk_the_grid_stride_loop(name):
    """More row tiles than the grid's 65535 block rows: each block row walks its row tiles in a loop, in
    plain order (the grouped order is for a grid that covers every row tile). Small integers: exact."""
    if name not in runnable():
        pytest.skip(f"{name} needs sm_80; this GPU is sm_{gm.device().arch}")
    m, n, k = 65535 * ROWS[name].tile[0] + 77, 5, 3
    a = rng.integers(-4, 5, (m, k)).astype(np.float32)
    b = rng.integers(-4, 5, (k, n)).astype(np.float32)
    with gm.Matrix.from_numpy(a, dtype="float16") as A, gm.Matrix.from_numpy(b, dtype="float16") as B:
        plan = gm.matmul_plan(A, B, algorithm=name)
        assert plan.grid[1] == 65535 and plan.splits == 1, plan
        with gm.Matrix.empty(m, n, dtype="float16") as C:
            poison(C)
            gm.matmul(A, B, out=C, plan=plan)
            np.testing.assert_array_equal(C.to_numpy(dtype=np.float32), a @ b)


@pytest.mark.gpu
@given(
    m=dims(400, (64, 128, 256)),
    n=dims(600, (64, 128, 256)),
    k=dims(700, (64, 128, 256)),
    name=st.sampled_from(WGMMA),
    dtype=st.sampled_from(DTYPES),
    f32out=st.booleans(),
    splits=st.sampled_from([1, 2, 3]),
    c_tma=st.booleans(),
    epilogue=EPILOGUES,
)
def test_every_wgmma_row_by_name_with_split_k_and_epilogues(m, n, k, name, dtype, f32out, splits, c_tma, epilogue):
    """Each wgmma row by name (both tiles, every operand layout, every operand read in place: A stored
    transposed for the *at rows, B for the *bt rows, both TMA-ready views), K split as drawn, with an
    epilogue, into a C view (check_epilogue_product)."""
    if name not in runnable():
        pytest.skip(f"{name} needs sm_90a; this GPU is sm_{gm.device().arch}")
    out_dtype = "float32" if f32out else dtype
    v = ROWS[name]
    if c_tma:
        n += -n % 8
    pa, pb, A, B, a64, b64 = upload_operands(m, n, k, dtype, v.reads_a_trans, v.reads_b_trans, tma_ready)
    check_epilogue_product(name, A, B, a64, b64, out_dtype, splits, c_tma, epilogue, (False, False))
    for x in (pa, pb):
        x.free()


@pytest.mark.gpu
@given(
    m=dims(400, (64, 128, 256)),
    n=dims(600, (64, 128, 256)),
    k=dims(700, (64, 128, 256)),
    name=st.sampled_from(AT_ROWS),
    dtype=st.sampled_from(DTYPES),
    f32out=st.booleans(),
    a_in_place=st.booleans(),
    b_trans=st.booleans(),
    splits=st.sampled_from([1, 2, 3]),
    c_tma=st.booleans(),
    epilogue=EPILOGUES,
)
def test_a_stored_transposed_in_place_or_copied(
    m, n, k, name, dtype, f32out, a_in_place, b_trans, splits, c_tma, epilogue
):
    """X.T @ B and X.T @ W.T by each *at row, X stored K x M: read in place where X's view is TMA-ready
    (its rows start 16 bytes into the parent and are a multiple of 8 elements apart), else first copied
    into aligned rows (the view starts 2 bytes in: never 16-byte aligned); B, TMA-ready, is copied only
    when stored otherwise than the row reads it (transposed into K rows of N for the *at rows). K split as
    drawn, with an epilogue, into a C view (check_epilogue_product)."""
    if name not in runnable():
        pytest.skip(f"{name} needs sm_90a; this GPU is sm_{gm.device().arch}")
    out_dtype = "float32" if f32out else dtype
    if c_tma:
        n += -n % 8
    pa, X, x64 = upload(rng.uniform(-1, 1, (k, m)).astype(np.float32), dtype, *((8, -m % 8) if a_in_place else (1, 2)))
    if b_trans:
        pb, W, w64 = upload(rng.uniform(-1, 1, (n, k)).astype(np.float32), dtype, 8, -k % 8)
        B, b64 = W.T, w64.T
    else:
        pb, B, b64 = upload(rng.uniform(-1, 1, (k, n)).astype(np.float32), dtype, 8, -n % 8)
    copies = (not a_in_place, b_trans != ROWS[name].reads_b_trans)
    check_epilogue_product(name, X.T, B, x64.T, b64, out_dtype, splits, c_tma, epilogue, copies)
    for x in (pa, pb):
        x.free()


@pytest.mark.gpu
@given(
    m=dims(64, (8, 16, 32, 64)).filter(lambda m: m >= 2),  # (one row is a matrix-vector row's: never swapped)
    n=st.integers(128, 700),
    k=dims(700, (64, 128, 256)),
    name=st.sampled_from(WGMMA),
    dtype=st.sampled_from(DTYPES),
    f32out=st.booleans(),
    a_trans=st.booleans(),
    b_trans=st.booleans(),
    in_place=st.booleans(),
    splits=st.sampled_from([1, 2, 3]),
    c_tma=st.booleans(),
    epilogue=EPILOGUES,
)
def test_swapped_plans_write_c_transposed(
    m, n, k, name, dtype, f32out, a_trans, b_trans, in_place, splits, c_tma, epilogue
):
    """A C of at most 64 rows computed swapped by each wgmma row: C^T = op(B)^T @ op(A)^T, the kernel
    reading B's storage as its A and A's as its B (each copied where the row reads it the other way round,
    or where it is not TMA-ready: in_place False starts the views 2 bytes in) and writing C transposed
    by plain stores; K split as drawn (float32 partials laid out as C, the reduction applying the
    epilogue), with an epilogue (beta reading the old C transposed, a bias over C's rows or columns),
    into a C view (check_epilogue_product)."""
    if name not in runnable():
        pytest.skip(f"{name} needs sm_90a; this GPU is sm_{gm.device().arch}")
    out_dtype = "float32" if f32out else dtype
    if c_tma:
        n += -n % 8
    pads = tma_ready if in_place else (lambda width: (1, 2))
    pa, pb, A, B, a64, b64 = upload_operands(m, n, k, dtype, a_trans, b_trans, pads)
    assert engine.swappable(engine.problem_of_call(A, B, None, name)[0])
    check_epilogue_product(name, A, B, a64, b64, out_dtype, splits, c_tma, epilogue, None, swap=True)
    for x in (pa, pb):
        x.free()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "tokens, n, k, row, splits",
    [(16, 14336, 4096, "wgmma128x64", 1), (8, 4096, 4096, "wgmma64x16", 2), (29, 3072, 1024, "wgmma64x16", 1)],
)
def test_auto_swaps_few_token_products_and_repeats_its_bits(dtype, tokens, n, k, row, splits):
    """x @ W.T and x @ W with few tokens against an n x k weight: auto computes them swapped (the model gives
    it more than SWAP_MARGIN: C's n columns on the tiles' 64 or 128 rows, the tokens on their columns; 29
    tokens on two 16-wide tiles, 8 on one at 2 splits), into a NaN-poisoned C, to the 16-bit tolerance, and
    the same bits call after call."""
    if row + "bt" not in runnable():  # (every width has a row reading B K-major: the swapped tokens)
        pytest.skip(f"the swapped plans run on the wgmma rows (sm_90a); this GPU is sm_{gm.device().arch}")
    x = rng.uniform(-1, 1, (tokens, k)).astype(np.float32)
    w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
    X, W = gm.Matrix.from_numpy(x, dtype=dtype), gm.Matrix.from_numpy(w, dtype=dtype)
    x64, w64 = (M.to_numpy(dtype=np.float32).astype(np.float64) for M in (X, W))
    Wt = gm.transpose(W)  # k x n row-major: x @ W
    for B, b64 in ((W.T, w64.T), (Wt, w64.T)):
        plan = gm.matmul_plan(X, B)
        assert plan.swap and "swapped" in str(plan) and plan.kernel_problem.m == n, plan
        assert re.sub("(at)?(bt)?$", "", plan.algorithm) == row and plan.splits == splits, plan
        first, again = poisoned(tokens, n, dtype), poisoned(tokens, n, dtype)
        gm.matmul(X, B, out=first)
        gm.matmul(X, B, out=again)
        got = first.to_numpy(dtype=np.float32).astype(np.float64)
        assert not np.isnan(got).any()
        assert product_error(got, x64, b64, dtype if dtype != "bfloat16" else None) < tolerance(dtype, k)
        assert np.array_equal(first.to_numpy().view(np.uint16), again.to_numpy().view(np.uint16))
        for M in (first, again):
            M.free()
    for M in (X, W, Wt):
        M.free()


def check_read_in_place(A, B, a64, b64, shape, name, reads, out_dtype):
    """One product A @ B by `name` (or auto), whose row reads the transposed views in place (`reads`:
    reads_a_trans, reads_b_trans, or both in a tuple) and copies nothing: every element of a NaN-poisoned C
    written, within the dtype's bound of the float64 product a64 @ b64, and relu fused is the plain
    product's max with 0."""
    m, n, k = shape
    plan = gm.matmul_plan(A, B, algorithm=name)
    reads = (reads,) if isinstance(reads, str) else reads
    assert all(getattr(plan.variant, r) for r in reads) and not (plan.copy_a or plan.copy_b), plan
    C = gm.Matrix.empty(m, n, dtype=out_dtype)
    poison(C)
    gm.matmul(A, B, out=C, algorithm=name)
    got = C.to_numpy(dtype=np.float32).astype(np.float64)
    assert not np.isnan(got).any(), (name, m, n, k)
    err = product_error(got, a64, b64, out_dtype if out_dtype != "bfloat16" else None)
    assert err < tolerance(out_dtype, k), (name, m, n, k, err)
    relu = gm.matmul(A, B, algorithm=name, activation="relu").to_numpy(dtype=np.float32)
    plain = gm.matmul(A, B, algorithm=name).to_numpy(dtype=np.float32)
    np.testing.assert_array_equal(relu, np.maximum(plain, 0))
    C.free()


def check_rows_in_place(A, B, a64, b64, shape, rows, reads, out_dtype):
    """check_read_in_place for each of `rows` by name and for auto, whose pick must be one of them; a C of
    a few rows or columns goes to the matrix-vector rows instead (their own tests), so auto is left out."""
    m, n, _ = shape
    matrix_vector = any(not v.any_shape and v.computes_shape(m, n) for v in ROWS.values())
    if not matrix_vector:
        assert gm.matmul_plan(A, B).algorithm in rows
    for name in (*rows, *(() if matrix_vector else ("auto",))):
        check_read_in_place(A, B, a64, b64, shape, name, reads, out_dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("out_dtype", ["same", "float32"])
def test_x_transposed_at_b_reads_x_in_place(dtype, out_dtype):
    """X.T @ B with X a row-major K x M matrix (a weight gradient X.T @ dY): on sm_90 the transposed-A
    kernels (each tile by name, and auto's pick) read X's storage by TMA, no copy; edges of every tile
    shape, a poisoned C, an epilogue. An X view the copy engine cannot read is copied first (as it lies for
    a row that reads A transposed, or transposed for one that reads it row-major), within the same error
    bound."""
    rows = [name for name in AT_ROWS if not ROWS[name].reads_b_trans]  # the rows that read B row-major
    if not set(rows) <= set(runnable()):
        pytest.skip(f"{', '.join(rows)} need sm_90a; this GPU is sm_{gm.device().arch}")
    out_dtype = dtype if out_dtype == "same" else out_dtype
    shapes = ((2, 3, 8), (128, 256, 64), (129, 257, 72), (127, 129, 136), (300, 200, 1000), (520, 64, 8192))
    for m, n, k in (*shapes, (1024, 1024, 1024)):
        x = rng.uniform(-1, 1, (k, m)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        px, X, x64 = upload(x, dtype, 8, -m % 8)  # rows start 16 bytes in, strides a multiple of 8 elements
        pb, B, b64 = upload(b, dtype, 0, -n % 8)
        check_rows_in_place(X.T, B, x64.T.copy(), b64, (m, n, k), rows, "reads_a_trans", out_dtype)
        odd, Xu, _ = upload(x, dtype, 1, 0)  # 2 bytes into the parent: copied first
        plan = gm.matmul_plan(Xu.T, B)
        assert plan.copy_a and plan.copy_b == plan.variant.reads_b_trans, plan  # B row-major, aligned
        with gm.matmul(Xu.T, B) as C:
            got = C.to_numpy(dtype=np.float32).astype(np.float64)
        err = product_error(got, x64.T.copy(), b64, dtype if dtype != "bfloat16" else None)
        assert err < tolerance(dtype, k), ("auto, X unaligned", m, n, k, err)
        for parent in (px, pb, odd):
            parent.free()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("out_dtype", ["same", "float32"])
def test_x_at_w_transposed_reads_w_in_place(dtype, out_dtype):
    """x @ W.T with W a row-major N x K matrix (a linear layer's weight): on sm_90 the transposed-B
    kernels (each tile by name, and auto's pick) read W's storage by TMA, no copy; edges of every tile
    shape, a poisoned C, an epilogue. (For one row of x auto takes the matrix-vector row, which also reads
    W in place.)"""
    bt_rows = [name for name in WGMMA if ROWS[name].reads_b_trans and not ROWS[name].reads_a_trans]  # A row-major
    if not set(bt_rows) <= set(runnable()):
        pytest.skip(f"{', '.join(bt_rows)} need sm_90a; this GPU is sm_{gm.device().arch}")
    out_dtype = dtype if out_dtype == "same" else out_dtype
    shapes = ((1, 1, 8), (128, 256, 64), (129, 257, 72), (127, 129, 136), (300, 200, 1000), (64, 520, 8192))
    for m, n, k in shapes:
        x = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
        px, X, x64 = upload(x, dtype, 0, -k % 8)
        pw, W, w64 = upload(w, dtype, 8, -k % 8)  # rows start 16 bytes in, strides a multiple of 8 elements
        # one row of x: the matrix-vector row that reads W as stored (gemv_m1bt) is auto's pick there
        assert gm.matmul_plan(X, W.T).algorithm in (["gemv_m1bt"] if m == 1 else bt_rows)
        for name in (*bt_rows, "auto"):
            check_read_in_place(X, W.T, x64, w64.T.copy(), (m, n, k), name, "reads_b_trans", out_dtype)
        for parent in (px, pw):
            parent.free()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("out_dtype", ["same", "float32"])
def test_x_transposed_at_w_transposed_reads_both_in_place(dtype, out_dtype):
    """X.T @ W.T with X a row-major K x M matrix and W a row-major N x K one: on sm_90 the rows that read
    both operands as stored (each tile by name, and auto's pick) take both by TMA, no copy; edges of every
    tile shape, a poisoned C, an epilogue."""
    rows = [name for name in WGMMA if ROWS[name].reads_a_trans and ROWS[name].reads_b_trans]
    assert rows, "no row reads both operands transposed"
    if not set(rows) <= set(runnable()):
        pytest.skip(f"{', '.join(rows)} need sm_90a; this GPU is sm_{gm.device().arch}")
    out_dtype = dtype if out_dtype == "same" else out_dtype
    for m, n, k in ((17, 24, 8), (128, 256, 64), (129, 257, 72), (127, 129, 136), (300, 200, 1000), (520, 64, 8192)):
        x = rng.uniform(-1, 1, (k, m)).astype(np.float32)
        w = rng.uniform(-1, 1, (n, k)).astype(np.float32)
        px, X, x64 = upload(x, dtype, 8, -m % 8)  # rows start 16 bytes in, strides a multiple of 8 elements
        pw, W, w64 = upload(w, dtype, 0, -k % 8)
        reads = ("reads_a_trans", "reads_b_trans")
        check_rows_in_place(X.T, W.T, x64.T.copy(), w64.T.copy(), (m, n, k), rows, reads, out_dtype)
        for parent in (px, pw):
            parent.free()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_results_are_bitwise_deterministic(dtype):
    for name in runnable():
        # odd strides: a TMA variant multiplies aligned copies; the bits must not depend on where they land
        for m, n, k in ((300, 129, 1001),):
            a = gm.Matrix.from_numpy(rng.uniform(-1, 1, (m, k)).astype(np.float32), dtype=dtype)
            b = gm.Matrix.from_numpy(rng.uniform(-1, 1, (k, n)).astype(np.float32), dtype=dtype)
            first = gm.matmul(a, b, algorithm=name).to_numpy(dtype=np.float32)
            gm.matmul(b, a[:129, :], algorithm=name)  # other scratch in between
            np.testing.assert_array_equal(gm.matmul(a, b, algorithm=name).to_numpy(dtype=np.float32), first)
        for m, n, k in ((513, 296, 776), (96, 80, 20000)):  # the second splits K; views with TMA-ready strides
            a = gm.Matrix.from_numpy(rng.uniform(-1, 1, (m, k + 8)).astype(np.float32), dtype=dtype)[:, :k]
            b = gm.Matrix.from_numpy(rng.uniform(-1, 1, (k, n + 8)).astype(np.float32), dtype=dtype)[:, :n]
            first = gm.matmul(a, b, algorithm=name).to_numpy(dtype=np.float32)
            for _ in range(3):
                np.testing.assert_array_equal(gm.matmul(a, b, algorithm=name).to_numpy(dtype=np.float32), first)


@pytest.mark.gpu
def test_auto_runs_the_tensor_cores_from_sm80():
    dev = gm.device()
    pick = half_plan(1024, 1024, 1024, Target.of(dev)).algorithm
    if dev.arch >= 80:
        hopper = dev.arch == 90 and "matmul_wgmma_half" in built_modules() and ROWS["wgmma128x64"].tier == 1
        if hopper:
            assert pick == "wgmma128x64"  # 128 tiles of 128 x 64 (one wave), not 64 of 128 x 128 or 32 of 128 x 256
        else:
            assert pick in MMA  # the tile the model ranks first for this GPU's SM count
    else:
        assert pick == "simt64x64"
    err, got, _ = product("auto", "float16", "float16", 1024, 1024, 1024)
    assert err < tolerance("float16", 1024)


@pytest.mark.gpu
def test_infinities_and_nans_propagate():
    for name in runnable():
        a = np.ones((130, 72), np.float32)
        a[3, 5] = np.inf
        a[100, 0] = np.nan
        A = gm.Matrix.from_numpy(a, dtype="float16")
        B = gm.Matrix.from_numpy(np.ones((72, 264), np.float32), dtype="float16")
        c = gm.matmul(A, B, algorithm=name).to_numpy(dtype=np.float32)
        assert np.isposinf(c[3]).all() and np.isnan(c[100]).all()
        assert (c[np.r_[0:3, 4:100, 101:130]] == 72).all()
