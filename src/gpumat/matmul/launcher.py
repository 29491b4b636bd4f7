"""The one launcher: a MatmulPlan bound to its device (`BoundPlan`), which owns every launch a product makes.

A BoundPlan is made once per (problem, algorithm or given plan, device) and cached by the call path
(gpumat.matmul.route) as its only entry. At binding it picks the plan's launch shape and prepares what the
shape repeats (a FixedLaunch with the geometry and the fixed arguments packed); `run(stream, a, b, c,
epilogue)` then queues the product, where a, b, c begin with (address, row stride, batch stride) of
each operand's storage, in elements (a batch stride of 0: one matrix shared by the batch; what follows,
as in a Matrix's _operand() tuple, is not read). The shapes:

    direct     one kernel reading A and B in place, the batch in grid z
    tma        one TMA kernel reading A and B in place (16-byte aligned), the tensor maps made per call, a
               batch's matrices among its work items
    general    operands copied first into the layout (and 16-byte alignment) the kernel reads, split-K's
               partials and their reduction, a batch beyond the grid's limit in several launches
    zero       K = 0: C = act(beta C + bias), a zero fill or the planned kernel over K = 0
    emulated   the float64 or float32 product emulated on INT8 (precision "fp64_int8" or "fp32_int8",
               gpumat.matmul.ozaki): a transposed operand copied row-major first, then the scheme's
               launches, C's rows in panels
    nothing    an empty C

Where the plan depends on the operands' alignment (the TMA rows), the BoundPlan holds one per alignment
of A and B and picks by the addresses and strides each call. The caller holds the device lock and has
ordered the stream after the operands' allocations (gpumat.memory.ordering). Scratch (split-K
partials, aligned copies) comes from the device's pool on the same stream and is freed stream-ordered
after the launches, so it is reused only once they are done.

Every product kernel waits for the grid before it (Kernel.waits_for_previous) and is launched as its
programmatic dependent, where the GPU runs sm_90 code (the runtime decides, per launch): it launches as
that grid ends and sets up while the grid's memory is flushed (H200: 0.6-1.8 us a call off products
queued back to back, benchmarks/results/probe-dependent-products-*).
"""

from __future__ import annotations

from dataclasses import replace

from .._dtypes import ITEMSIZE
from .._precision import TENSOR_CORE_PRECISIONS
from ..convert import copy_region
from ..memory import device_pool
from ..runtime import memops
from ..runtime.geometry import MAX_GRID_YZ, cdiv
from ..runtime.kernels import FixedLaunch
from ..transpose import transpose_region
from . import ozaki, planner
from .maps import SWIZZLE_BYTES, c_map, tensor_map
from .plan import MatmulPlan
from .problem import Problem, Target
from .variants import IDENTITY, LEADING, VARIANTS, accumulator, gemm_arguments, reduce_arguments, tma_arguments


class BoundPlan:
    """A MatmulPlan bound to one device: `run(stream, a, b, c, epilogue=IDENTITY)` queues its product (see
    the module docstring); `shape` names its launch shape. `plan` is the plan for 16-byte aligned
    operands (the one it runs unless the alignment picks another)."""

    __slots__ = (
        "plan",
        "device",
        "run",
        "shape",
        "launches",
        "_m",
        "_n",
        "_k",
        "_packed",
        "_rows",
        "_plain",
        "_every",
        "_by_alignment",
        "_ozaki",
    )

    def __init__(self, plan: MatmulPlan, dev):
        q, v = plan.problem, plan.variant
        self.plan, self.device, self._by_alignment, self._ozaki = plan, dev, None, None
        self._m, self._n, self._k = q.m, q.n, q.k
        self._packed = (q.batch, int(q.a_trans), int(q.b_trans))  # what a small-products launch adds
        self._rows = (q.k if q.a_trans else q.m, q.n if q.b_trans else q.k)  # stored rows of A and B a matrix
        self._plain = self._every = None
        self.launches = bool(q.m and q.n and q.batch)  # whether run() queues anything
        one = plan.splits == 1 and not (plan.copy_a or plan.copy_b)
        if not self.launches:
            self.shape, self.run = "nothing", self._nothing
        elif q.k == 0:
            self.shape, self.run = "zero", self._zero
        elif v.args == "ozaki":
            if plan.swap or q.batch > 1:  # (the planner never makes such a plan: refuses_shape, writes_c_trans)
                raise ValueError(f"matmul: {v.name} computes one product, written as it is: {q.describe()}")
            self.shape, self.run = "emulated", self._emulated
            # the moduli for the mode's bits at this K, and the device's table of their CRT weights
            scheme = ozaki.plan_for(q.dtype, q.k)
            self._ozaki = (scheme, ozaki.weights_on(dev, len(scheme.moduli)))
        elif one and v.tma:
            self.shape, self.run = "tma", self._tma
            # the identity epilogue packed once; the maps and sizes before it, each call
            leading = len(plan.kernel.signature) - len(IDENTITY)
            self._plain = FixedLaunch(plan.kernel, plan.grid, v.block, plan.smem, leading, IDENTITY, v.cluster)
        elif one and not v.tma and (v.packs or plan.grid[2] == q.batch):
            self.shape, self.run = "direct", self._direct
            self._every = FixedLaunch(plan.kernel, plan.grid, v.block, plan.smem, len(plan.kernel.signature), ())
            if q.batch == 1:  # one matrix: the batch strides are never used, so fixed at 0 with the identity
                zeros = (0, 0, 0)
                tail = gemm_arguments(v.args, zeros, zeros, zeros, 0, 0, 0, plan.k_chunk, IDENTITY, self._packed)
                self._plain = FixedLaunch(plan.kernel, plan.grid, v.block, plan.smem, LEADING, tail[LEADING:])
        else:
            self.shape, self.run = "general", self._general

    @classmethod
    def for_problem(cls, p: Problem, t: Target, algorithm: str, dev) -> BoundPlan:
        """The plan of problem p (its alignment fields ignored) by `algorithm`, bound to dev: one plan where
        every alignment of A and B plans alike, else one per alignment, picked per call. When no row the
        call may run reads alignment (copy-engine rows, or ones auto takes only for aligned operands) and
        the rows slow down alike on unaligned operands (the model's unaligned_slowdown), one plan is made:
        the common first call plans once, not four times; where only the slowdowns differ, two (it applies
        alike to A, B or both unaligned)."""
        if algorithm != "auto":
            rows = [VARIANTS[algorithm]]
        else:
            pair = (p.dtype, p.out_dtype)
            # (a float32 tensor-core mode may run exact FP32: the planner weighs those rows too)
            modes = {p.mode, "float32"} if p.mode in TENSOR_CORE_PRECISIONS else {p.mode}
            rows = [v for v in VARIANTS.values() if pair in v.kernels and v.computes(p.dtype) in modes]
        reads = any(v.needs_aligned or v.auto_needs_aligned for v in rows)
        alignments = [replace(p, a_aligned=x, b_aligned=y) for x in (True, False) for y in (True, False)]
        # a plan measured for one alignment of the problem (tuning) is that alignment's alone: one plan each
        tuned = algorithm == "auto" and bool(planner.TUNED) and any((q, t) in planner.TUNED for q in alignments)
        if not reads and not tuned and len({v.unaligned_slowdown for v in rows}) == 1:
            return cls(planner.plan(replace(p, a_aligned=True, b_aligned=True), t, algorithm), dev)
        if reads or tuned:
            plans = {
                (x, y): planner.plan(replace(p, a_aligned=x, b_aligned=y), t, algorithm)
                for x in (True, False)
                for y in (True, False)
            }
        else:  # only the model's slowdown reads alignment, and it reads "both aligned or not": two plans
            unaligned = planner.plan(replace(p, a_aligned=False, b_aligned=False), t, algorithm)
            plans = {(True, True): planner.plan(replace(p, a_aligned=True, b_aligned=True), t, algorithm)}
            plans.update({key: unaligned for key in ((True, False), (False, True), (False, False))})
        first = plans[True, True]
        if all(_same_launches(q, first) for q in plans.values()):
            return cls(first, dev)
        bound = cls(first, dev)
        bounds = {id(q): cls(q, dev) for q in plans.values()}  # one BoundPlan a distinct plan
        bound._by_alignment = {key: bounds[id(q)] for key, q in plans.items()}
        bound.shape, bound.run = "by alignment", bound._aligned
        return bound

    # the launch shapes (device lock held, operands ordered on the stream) --------------------------------
    def _aligned(self, stream: int, a: tuple, b: tuple, c: tuple, epilogue: tuple = IDENTITY) -> None:
        size, (rows_a, rows_b) = ITEMSIZE[self.plan.problem.dtype], self._rows
        # problem.operand_aligned of A and B, inline: address, row stride and batch stride multiples of 16
        # bytes, and a batch's matrices one after another
        key = (
            (a[0] | a[1] * size | a[2] * size) & 15 == 0 and (a[2] == 0 or a[2] >= rows_a * a[1]),
            (b[0] | b[1] * size | b[2] * size) & 15 == 0 and (b[2] == 0 or b[2] >= rows_b * b[1]),
        )
        self._by_alignment[key].run(stream, a, b, c, epilogue)

    def _direct(self, stream: int, a: tuple, b: tuple, c: tuple, epilogue: tuple = IDENTITY) -> None:
        if epilogue is IDENTITY and self._plain is not None:  # the common call: nine arguments packed
            self._plain(self.device, stream, a[0], b[0], c[0], self._m, self._n, self._k, a[1], b[1], c[1])
        else:
            p = self.plan
            args = gemm_arguments(p.variant.args, a, b, c, self._m, self._n, self._k, p.k_chunk, epilogue, self._packed)
            self._every(self.device, stream, *args)

    def _tma(self, stream: int, a: tuple, b: tuple, c: tuple, epilogue: tuple = IDENTITY) -> None:
        p = self.plan
        if p.swap:  # C^T = op(B)^T @ op(A)^T: B's storage is the kernel's A, A's its B
            a, b, epilogue = b, a, _swapped_epilogue(epilogue)
        args = _tma_arguments(p, a, b, c, p.problem.out_dtype)
        if epilogue is IDENTITY:
            self._plain(self.device, stream, *args)
        else:
            self._tma_kernel(stream, *args, *epilogue)

    def _tma_kernel(self, stream: int, *args) -> None:
        """The plan's TMA kernel over its grid with every argument given, queued on `stream` (a dependent
        of the launch before it where the kernel waits for it; a cluster launch for the pair rows)."""
        p = self.plan
        p.kernel(
            p.grid, p.variant.block, *args, smem=p.smem, stream=stream, device=self.device, cluster=p.variant.cluster
        )

    def _zero(self, stream: int, a: tuple, b: tuple, c: tuple, epilogue: tuple = IDENTITY) -> None:
        q = self.plan.problem
        if epilogue[1] != 0.0 or epilogue[4]:  # beta C or a bias to add: the planned kernel over K = 0
            self._general(stream, a, b, c, epilogue)
            return
        ptr, ld, bstride = c[:3]  # (the fast lookup passes 2-D operands' whole tuples: their first three)
        size = ITEMSIZE[q.out_dtype]
        if bstride == q.m * ld or q.batch == 1:  # the batch's matrices one after another: one fill
            memops.zero_2d(ptr, ld * size, q.n * size, q.m * q.batch, stream)
        else:
            for i in range(q.batch):
                memops.zero_2d(ptr + i * bstride * size, ld * size, q.n * size, q.m, stream)

    def _emulated(self, stream: int, a: tuple, b: tuple, c: tuple, epilogue: tuple = IDENTITY) -> None:
        p, dev = self.plan, self.device
        q = p.problem
        scheme, table = self._ozaki
        pool = dev.memory or device_pool(dev)
        held: list[tuple[int, int]] = []  # the row-major copies, freed stream-ordered after the launches
        try:  # (the row never swaps: it writes C row-major; nor takes a batch: refuses_shape)
            if p.copy_a:  # A as the scheme reads it, M rows of K (stored transposed: K rows of M)
                a = _row_major_copy(a, q.m, q.k, q.a_trans, 1, q.dtype, pool, stream, held, dev)
            if p.copy_b:  # B as K rows of N
                b = _row_major_copy(b, q.k, q.n, q.b_trans, 1, q.dtype, pool, stream, held, dev)
            ozaki.run(a, b, c, q.m, q.n, q.k, scheme, epilogue, p.target, table, pool, dev, stream, q.dtype)
        finally:
            for ptr, nbytes in held:
                pool.free(ptr, nbytes, stream)

    def _nothing(self, stream: int, a: tuple, b: tuple, c: tuple, epilogue: tuple = IDENTITY) -> None:
        return None

    def _general(self, stream: int, a: tuple, b: tuple, c: tuple, epilogue: tuple = IDENTITY) -> None:
        p, dev = self.plan, self.device
        q, v = p.kernel_problem, p.variant
        m, n, k, batch = q.m, q.n, q.k, q.batch
        reduce_epilogue = epilogue  # split-K's reduction writes C as the caller laid it out
        if p.swap:  # C^T = op(B)^T @ op(A)^T: B's storage is the kernel's A, A's its B
            a, b, epilogue = b, a, _swapped_epilogue(epilogue)
        pool = dev.memory or device_pool(dev)
        held: list[tuple[int, int]] = []  # scratch blocks, freed stream-ordered after the launches
        try:
            if p.copy_a:  # into the layout the kernel reads: M rows of K, or K rows of M (reads_a_trans)
                rows, cols = (k, m) if v.reads_a_trans else (m, k)
                flip = q.a_trans != v.reads_a_trans  # stored the other way round from what the kernel reads
                a = _row_major_copy(a, rows, cols, flip, batch, q.dtype, pool, stream, held, dev)
            if p.copy_b:  # into the layout the kernel reads: K rows of N, or N rows of K (reads_b_trans)
                rows, cols = (n, k) if v.reads_b_trans else (k, n)
                flip = q.b_trans != v.reads_b_trans
                b = _row_major_copy(b, rows, cols, flip, batch, q.dtype, pool, stream, held, dev)
            out, out_sfx, product_epilogue = c, q.out_dtype, epilogue
            if p.splits > 1:  # the product writes partials; the reduction applies the epilogue
                partials = pool.alloc(p.scratch_bytes, stream)
                held.append((partials, p.scratch_bytes))
                # a split's partial product laid out as C: m rows of n, or (swapped: written transposed) n of m
                ld = m if p.swap else n
                out, out_sfx, product_epilogue = (partials, ld, 0), accumulator(q.dtype), IDENTITY
            if v.tma:
                self._tma_kernel(stream, *_tma_arguments(p, a, b, out, out_sfx), *product_epilogue)
            else:
                size, out_size = ITEMSIZE[q.dtype], ITEMSIZE[out_sfx]
                for first in range(0, batch, MAX_GRID_YZ):  # batches beyond the grid's limit: more launches
                    layers = min(MAX_GRID_YZ, batch - first)
                    grid = p.grid if batch == 1 else (p.grid[0], p.grid[1], layers)
                    at = (
                        (a[0] + first * a[2] * size, a[1], a[2]),
                        (b[0] + first * b[2] * size, b[1], b[2]),
                        (out[0] + first * out[2] * out_size, out[1], out[2]),
                    )
                    args = gemm_arguments(v.args, *at, m, n, k, p.k_chunk, product_epilogue)
                    p.kernel(grid, v.block, *args, smem=p.smem, stream=stream, device=dev)
            if p.reduce is not None:
                r = p.problem  # the partials and C as the caller's product lays them out
                args = reduce_arguments(out[0], c[0], r.m, r.n, c[1], p.splits, reduce_epilogue)
                # a dependent of the product (sm_90+): launched as the product's blocks exit, not after its
                # grid's completion and flush, for which it waits in the kernel (about 1 us a split product
                # on the H200)
                p.reduce(p.reduce_grid, p.reduce_block, *args, stream=stream, device=dev)
        finally:
            for ptr, nbytes in held:
                pool.free(ptr, nbytes, stream)


def _same_launches(q: MatmulPlan, p: MatmulPlan) -> bool:
    return (q.variant, q.splits, q.k_chunk, q.copy_a, q.copy_b, q.swap) == (
        p.variant,
        p.splits,
        p.k_chunk,
        p.copy_a,
        p.copy_b,
        p.swap,
    )


def _tma_arguments(p: MatmulPlan, a: tuple, b: tuple, out: tuple, out_sfx: str) -> tuple:
    """A TMA kernel's arguments before the epilogue, for A and B (address, row stride, batch stride) stored
    as its row reads them (16-byte aligned) and `out` (C, or split-K's partials, of `out_sfx`): the maps of
    A, B and C (C's map only when C can leave by TMA), the sizes and the batch (variants.tma_arguments).
    The maps are 3-D, the batch's matrices their outer dimension; an operand shared by the batch (batch
    stride 0) is a map of one matrix."""
    q, v = p.kernel_problem, p.variant
    m, n, k, batch = q.m, q.n, q.k, q.batch
    # C's layers: a split's partials (m rows of n apart; swapped, n rows of m, C^T written transposed) or
    # the batch's matrices (C's batch stride apart)
    c_layer = out[2] if batch > 1 else (n if p.swap else m) * out[1]
    # (a tile narrower than a TMA store's 128-byte box leaves by plain stores: no map for it)
    narrow = v.tile[1] * ITEMSIZE[out_sfx] < SWIZZLE_BYTES
    mc = None if p.swap or narrow else c_map(out_sfx, out[0], m, n, out[1], p.splits * batch, c_layer)
    a_batched, b_batched = batch > 1 and a[2] != 0, batch > 1 and b[2] != 0
    la, lb = (batch, a[2]) if a_batched else (1, 0), (batch, b[2]) if b_batched else (1, 0)
    # the operands' element type: a TF32 row's copy engine rounds float32 to TF32 on the way in
    elem = "tf32" if v.mode == "tf32" else q.dtype
    # boxes one 128-byte row wide, and as tall as the row's tile: A k_tile K x tile rows; B stored
    # transposed (N rows of K) k_tile K x tile columns, else K rows of N in boxes of 64 columns x
    # k_tile rows (the kernel loads tile columns / 64 of them); A stored transposed (K rows of M) as a
    # row-major B is, in boxes of 64 columns of M x k_tile rows (tile rows / 64 of them); k_tile: K a
    # stage, 64 halves or 32 floats
    k_tile = SWIZZLE_BYTES // ITEMSIZE[q.dtype]
    if v.reads_a_trans:
        map_a = tensor_map(elem, a[0], k, m, a[1], k_tile, *la)
    else:
        map_a = tensor_map(elem, a[0], m, k, a[1], v.tile[0], *la)
    if v.reads_b_trans:  # (a pair's block loads half of the B the two share: boxes of half the columns)
        map_b = tensor_map(elem, b[0], n, k, b[1], v.tile[1] // v.cluster, *lb)
    else:
        map_b = tensor_map(elem, b[0], k, n, b[1], k_tile, *lb)
    # the storage the maps describe, for the TF32 kernels' FP32 recomputation of non-finite outputs
    exact = (a[0], a[1], la[1], b[0], b[1], lb[1]) if v.args == "tensor_maps_exact" else None
    products = (batch, c_layer, int(a_batched) | 2 * int(b_batched))
    return tma_arguments((map_a, map_b, mc), out[0], m, n, k, out[1], p.k_chunk, products, exact, p.swap)


def _swapped_epilogue(epilogue: tuple) -> tuple:
    """The epilogue as a swapped plan's kernel applies it (C^T's rows are C's columns): a bias over C's
    rows is one over C^T's columns, and the other way round (problem.kernel_view flips it alike)."""
    if not epilogue[4]:
        return epilogue
    return (*epilogue[:4], 3 - epilogue[4], *epilogue[5:])


def _row_major_copy(
    operand: tuple, rows: int, cols: int, trans: bool, batch: int, sfx: str, pool, stream: int, held: list, dev
) -> tuple[int, int, int]:
    """(address, row stride, batch stride) of a row-major copy of a rows x cols operand (each matrix of a
    batch when its batch stride is not 0) whose base and row stride are 32-byte aligned, in pool scratch,
    by a copy kernel (the DMA engine takes microseconds over rows of a few hundred unaligned bytes). A
    transposed operand (stored cols x rows) is transposed on the way; one launch for the whole batch either way."""
    ptr, ld, bstride = operand[:3]
    size = ITEMSIZE[sfx]
    # rows a whole number of 32-byte sectors long: a copy engine's 128-byte box row then touches four sectors,
    # where rows an odd multiple of 16 bytes long start every other one mid-sector and touch five
    per_sector = 32 // size
    aligned_ld = cdiv(cols, per_sector) * per_sector
    count = batch if bstride else 1
    per_matrix = rows * aligned_ld
    nbytes = count * per_matrix * size
    dst = pool.alloc(nbytes, stream)
    held.append((dst, nbytes))
    if trans:
        transpose_region(ptr, dst, cols, rows, ld, aligned_ld, sfx, stream, dev, "auto", count, bstride, per_matrix)
    else:
        copy_region(ptr, dst, rows, cols, ld, aligned_ld, sfx, stream, dev, count, bstride, per_matrix)
    return dst, aligned_ld, per_matrix if bstride else 0
