"""The one table of matmul kernels: a row per variant, every dtype and precision mode.

A row says what a kernel computes (its entry point for each (input, output) dtype pair, the precision
mode), how it is launched (tile of C a block covers, threads, dynamic shared memory, its argument
list), where it runs (architectures, shared memory, whether its module is in this build, alignment
it needs), whether `auto` may choose it, and the constants of the one cost model (gpumat.matmul.planner):
its sustained rate on a whole H100, blocks an SM, the warp tile that decides which edge tiles have
work, how a split-K plan may cut K and what the split's extra pass costs, and for a memory-bound row
the bandwidth it reads its operands at. A row may compute only some shapes (the matrix-vector rows:
C of at most a few rows or columns); auto never gives it others, and naming it for one is a ValueError.
Adding a kernel is: the kernel, a row here, a test.

Precision modes: float32 operands compute at "float32" (exact FP32 on the FP32 pipes), "tf32x3" or
"tf32" (tensor cores; see gpumat._precision); float64, float16 and bfloat16 compute in their own
format, mode "native".

Rates are FLOP/s sustained on the H100 80GB (sm_90, 132 SMs), measured with the bench JSON named in
each group's comment; a block's rate is rate / (132 * blocks_per_sm), so a GPU with another SM count
gets proportionally more or fewer slots at the same per-block speed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from .._dtypes import FP8_SUFFIXES, ITEMSIZE, SUFFIXES, as_storage_dtype, suffix
from ..runtime.geometry import MAX_GRID_YZ, cdiv, tiled_grid
from ..runtime.kernels import Kernel

H100_SMS = 132  # the rates below were measured on the H100's 132 SMs

# Argument lists (struct codes of gpumat.runtime.kernels), by the `args` field of a row. Every GEMM entry
# point ends with the epilogue (gpumat::Epilogue in cuda/gpumat.cuh): alpha, beta, bias, bias_step,
# bias_along, bias_f32, activation; all but the TMA ones take the batch strides of A, B and C before it
# (grid z = matrix of the batch x splits + split).
BATCH = "qqq"
EPILOGUE = "ddPqiii"
PLAIN = "PPPiiiqqq" + BATCH + EPILOGUE  # A, B, C, M, N, K, lda, ldb, ldc
K_CHUNK = "PPPiiiqqqi" + BATCH + EPILOGUE  # ... and k_chunk: split s multiplies k in [s*k_chunk, (s+1)*k_chunk)
# tensor maps of A, B and C; C, M, N, K, ldc, k_chunk, whether C leaves by TMA; the batch: products,
# elements between C's layers (a split's partials or the batch's matrices), which of A (1) and B (2) hold
# a matrix a product
TENSOR_MAPS = "TTTPiiiqii" + "iqi" + EPILOGUE
# ... and the storage the maps of A and B describe (address, row stride, batch stride), which the TF32
# kernels read to recompute in FP32 the outputs the tensor cores leave infinite or NaN
TENSOR_MAPS_EXACT = "TTTPiiiqii" + "iqi" + "PqqPqq" + EPILOGUE
# the batch of small products (several matrices a block): A, B, C, M, N, K, lda, ldb, ldc, the batch's
# products, whether A and B are stored transposed (read in place either way), then the batch strides
SMALL = "PPPiiiqqq" + "iii" + BATCH + EPILOGUE
# the reconstruction of an emulated float64 or float32 product (cuda/ozaki.cu, ozaki_crt_f64 and _f32), the
# launch that writes C: the products' int8 residues (address, row stride, layer stride), M, N, the moduli,
# the CRT table, the exponents of A's rows and B's columns, C and its row stride, A, B and their row strides
# (the plain dots of lines holding an Inf or a NaN), K
OZAKI = "PqqiiiPPPPqPqPqi" + EPILOGUE
SIGNATURES = {
    "plain": PLAIN,
    "k_chunk": K_CHUNK,
    "tensor_maps": TENSOR_MAPS,
    "tensor_maps_exact": TENSOR_MAPS_EXACT,
    "small": SMALL,
    "ozaki": OZAKI,
}
IDENTITY = (1.0, 0.0, 0, 0, 0, 0, 0)  # the epilogue of a plain product: C = A @ B
ACTIVATIONS = {None: 0, "relu": 1, "gelu": 2, "gelu_tanh": 3}  # the kernels' activation codes
LEADING = 9  # what a plain or k_chunk launch takes before k_chunk: A, B, C, M, N, K, lda, ldb, ldc


# The argument order of each signature, written here once: a, b, c are (address, row stride, batch
# stride) of the operands' storages, in elements.
def gemm_arguments(
    args: str, a, b, c, m: int, n: int, k: int, k_chunk: int, epilogue: tuple, packed: tuple = (1, 0, 0)
) -> tuple:
    """The arguments of a plain, k_chunk or small entry point (PLAIN, K_CHUNK, SMALL), in order; `packed`:
    what a small entry adds, (products, A stored transposed, B stored transposed)."""
    head = (a[0], b[0], c[0], m, n, k, a[1], b[1], c[1])
    if args == "plain":
        return (*head, a[2], b[2], c[2], *epilogue)
    if args == "small":
        return (*head, *packed, a[2], b[2], c[2], *epilogue)
    return (*head, k_chunk, a[2], b[2], c[2], *epilogue)


# how a TMA kernel's C leaves (its c_store argument): plain stores into a row-major C, TMA stores through
# C's map, or plain stores into a C stored transposed
C_STORE = {"plain": 0, "tma": 1, "transposed": 2}


def tma_arguments(
    maps: tuple, c: int, m: int, n: int, k: int, ldc: int, k_chunk: int, batch: tuple, exact=None, c_trans=False
) -> tuple:
    """The arguments of a TMA entry point (TENSOR_MAPS) before the epilogue: the maps of A, B and C (None:
    C leaves by plain stores), C, M, N, K, C's row stride, k_chunk, how C leaves (C_STORE), and `batch`
    (products, elements between C's layers, which of A (1) and B (2) hold a matrix a product); for
    TENSOR_MAPS_EXACT `exact` adds the storage the maps of A and B describe (pa, lda, sa, pb, ldb, sb).
    c_trans: C is stored transposed (C[i, j] at c + j * ldc + i), written by plain stores (no map)."""
    map_a, map_b, map_c = maps
    store = C_STORE["transposed"] if c_trans else C_STORE["plain" if map_c is None else "tma"]
    head = (map_a, map_b, map_c or NO_MAP, c, m, n, k, ldc, k_chunk, store, *batch)
    return head if exact is None else (*head, *exact)


NO_MAP = bytes(128)  # the C map's place when C leaves by plain stores

HALF_PAIRS = (("f16", "f16"), ("f16", "f32"), ("bf16", "bf16"), ("bf16", "f32"))


@dataclass(frozen=True)
class Variant:
    name: str
    kernels: dict = field(hash=False, compare=False)  # (input suffix, output suffix) -> Kernel
    mode: str  # the precision it computes at: float32 | tf32 | tf32x3 | native | fp64_int8 | fp32_int8 (emulated)
    tile: tuple[int, int]  # rows x columns of C a block (a work item, when persistent) covers
    block: tuple[int, int, int]
    # plain | k_chunk (may split K) | tensor_maps (TMA; may split K) | tensor_maps_exact (and the operands)
    args: str = "plain"
    smem: int = 0  # dynamic shared memory a block asks for
    min_arch: int = 0  # lowest compute capability (x10) that runs it
    only_arch: int | None = None  # architecture-specific machine code (sm_90a): that one alone
    # blocks a thread-block cluster (the pair rows: 2, sharing B's stages; the grid a multiple of it)
    cluster: int = 1
    needs_aligned: bool = False  # TMA: operands not 16-byte aligned (base and row stride) are copied first
    # reads B stored transposed (N rows of K, as x @ W.T gives it) in place; a B stored row-major is
    # transposed into scratch first (the other rows do the opposite)
    reads_b_trans: bool = False
    # reads A stored transposed (K rows of M, as X.T @ B gives it) in place; likewise
    reads_a_trans: bool = False
    # reads A and B in place in either layout (told which at the launch): no transposing copy
    reads_either_layout: bool = False
    # runs a batch of products of at most max_m x max_n (and max_outputs elements of C, where set) several
    # a block (small_per_block), in a grid of ceil(batch / per block) blocks; auto weighs it against the
    # other rows (the matrix-vector rows' shapes included), where it would not be the only choice as a row
    # made for a shape is
    packs: bool = False
    max_outputs: int | None = None
    persistent: bool = False  # grid = min(work items, slots); blocks walk the work items
    # a streamed row whose blocks, not their warps, each walk their own chunks of the batch (small_stream_block)
    block_chunks: bool = False
    # a streamed row whose launch (its shared memory, the blocks an SM) follows the product (small_stream:
    # stream_launch); `smem` and `blocks_per_sm` are then those of its products that fit four blocks an SM
    sliced: bool = False
    # auto's use of it: 0 never (only by name), 1 a candidate, 2 only where no candidate of tier 1 runs
    tier: int = 0
    # the shapes it computes: C of at most max_m rows and max_n columns, of K at most max_k (None: any)
    max_m: int | None = None
    max_n: int | None = None
    max_k: int | None = None
    shape_multiple: int = 1  # it computes only M, N and K that are multiples of this (small_stream_in_place: 8)
    auto_archs: tuple[int, ...] | None = None  # architectures where auto may pick it (None: where it runs)
    auto_dtypes: tuple[str, ...] | None = None  # input dtypes auto may pick it for (None: all it has kernels for)
    auto_needs_aligned: bool = False  # auto picks it only for 16-byte aligned operands
    # auto picks it only for a C of at most this many columns as its kernel computes C (a swapped plan's C^T:
    # the tokens): the shapes its constants were measured on (None: any)
    auto_max_n: int | None = None
    # auto picks it only for a C of at least this many columns as its kernel computes C: where narrower Cs
    # measured well over its model (None: any)
    auto_min_n: int | None = None
    # auto picks it only for at most this many products in one call: the batches its constants were measured
    # on (None: any)
    auto_max_batch: int | None = None
    # auto picks it only for products with a side (M, N or K) past this: where a row made for the smaller ones
    # measured faster on every shape (None: any)
    auto_past_side: int | None = None
    # auto picks it only where it reads A and B as they are stored (no transposing or aligning copy first): the
    # layouts its constants were measured on
    auto_in_place: bool = False
    # the cost model's constants
    rate: float = 0.0  # FLOP/s on a whole H100 (every row sets its measured figure: a CPU test checks)
    blocks_per_sm: int = 1
    # a grid of fewer blocks than slots: FLOP/s of a block alone on an SM (latency-bound, so below the SM's
    # rate / 132, but above its slot's share of it; 0: that share), and the seconds a launch costs beyond
    # its blocks' arithmetic (prologue, epilogue, the launch gap), both fitted to bench sweep's times
    block_rate: float = 0.0
    fixed_s: float = 0.0
    # how much slower its arithmetic runs when A or B is not 16-byte aligned (a kernel with a 16-byte copy
    # path then loads element by element): bench sweep's 255^3 against 256^3
    unaligned_slowdown: float = 1.0
    # how much slower its waves run when A or B reaches it in rows an odd multiple of 16 bytes long (every
    # other row starts mid-sector: its copy engine's 128-byte box rows touch five 32-byte sectors, not four,
    # and a tile row that fills the SMs waits on L2): planner.half_sector_rows
    half_sector_slowdown: float = 1.0
    # a memory-bound row's bytes/s on a whole H100 (0: not memory-bound): the modelled time is at least its
    # operands' bytes at this rate, drawn by min(SMs, blocks / blocks_per_sm) SMs, or for a row with
    # sm_bandwidth by all of them (see the planner)
    bandwidth: float = 0.0
    # a memory-bound row whose SMs each draw at most this many bytes/s, whatever their blocks (0: not
    # modelled): a grid of more blocks than SMs but not a multiple of them waits on the SMs with one more
    # block than the rest, drawing their share at this rate while the others idle
    sm_bandwidth: float = 0.0
    # a memory-bound row whose warps walk K in steps of loads that wait on one memory round trip: the bytes
    # of K a block's step covers (each warp's slice of it in flight together); the planner charges
    # ceil(k_chunk x itemsize / round_bytes) round trips a block (None: not modelled)
    round_bytes: int | None = None
    # a memory-bound row whose warps read each row of B in runs of its tile's columns (tile[1] x itemsize
    # contiguous bytes): runs shorter than planner.FULL_RUN_BYTES draw less of the bandwidth (planner); set
    # on every row that reads so, whether or not its runs are that short (gemv_m1's and gemv_m<R>'s, 128
    # columns, never are)
    b_runs: bool = False
    # a memory-bound row whose blocks each cost this beyond their loads (the launch of a block, the final sum
    # of its slices), which other blocks' loads do not hide: ceil(blocks / SMs) x block_s is added to its
    # memory time
    block_s: float = 0.0
    # a TMA row whose memory term counts the bytes its copy engine stages (planner.staged): the operands,
    # and the zeros it fills the edge tiles' rows past M or N with, at about the rate it reads memory (a
    # few tokens on a 64- or 128-row tile move the tile's rows, not C's); C's stores overlap them
    stages_padding: bool = False
    warp_tile: tuple[int, int] | None = None  # live warp tiles decide an edge tile's work (None: whole tiles)
    wave_slack: float = 0.0  # a last wave this much over a whole number of waves is absorbed (edge tiles)
    # the least a wave of its blocks takes, however little of K each has (the copy pipeline's prologue, the
    # last stage's wait, the epilogue): what bounds a batch of tiny products on the tile rows (WAVE_FLOOR);
    # for a small-products row, what a wave of its blocks costs a staged chunk of K, and beside it
    # stage_element_s for each element a thread stages (small_wide: its staging is issue-bound); for
    # small_stream, its warps' first chunk's copy, which nothing hides
    wave_floor_s: float = 0.0
    stage_element_s: float = 0.0
    # a tile row's wave also costs this for each unit of K its blocks walk: a wave of mostly idle blocks
    # (a batch of products smaller than the tile) is bound by its k loop's latency, not its arithmetic
    wave_k_s: float = 0.0
    k_align: int = 32  # split boundaries on multiples of this
    min_k_chunk: int = 128  # no split shorter than this
    max_splits: int = 128
    scratch_bandwidth: float = 2.5e12  # bytes/s of the split partials' round trip through memory
    split_launch_s: float = 4e-6  # the reduction's launch and the scratch allocation
    # the same on a GPU before sm_90, where the reduction is launched plainly, not as the product's programmatic
    # dependent, for a row whose split_launch_s was fitted with the dependent launch (None: split_launch_s)
    split_launch_before_sm90_s: float | None = None

    @property
    def splits_k(self) -> bool:
        return self.args not in ("plain", "small", "ozaki")

    def computes(self, dtype: str) -> str:
        """The precision mode it computes operands of `dtype` (a kernel suffix) at: its own, or for the teaching
        kernels (mode "any") the dtype's own (float32's exact FP32, the others' native arithmetic)."""
        if self.mode != "any":
            return self.mode
        return "float32" if dtype == "f32" else "native"

    def auto_may_take(self, dtype: str) -> bool:
        """Whether auto considers it for operands of `dtype` at all (tier 1, and auto_dtypes): shapes, layouts,
        batches and GPUs aside."""
        return self.tier == 1 and (self.auto_dtypes is None or dtype in self.auto_dtypes)

    def computes_shape(self, m: int, n: int, k: int | None = None) -> bool:
        """Whether it computes an m x n C over K = k, or over some K where k is None (the matrix-vector rows:
        at most max_m rows or max_n columns; small_stream: M, N and K at most 32; small_stream_in_place:
        those of them multiples of 8)."""
        step = self.shape_multiple
        return (
            m % step == 0
            and n % step == 0
            and (k is None or (k % step == 0 and (self.max_k is None or k <= self.max_k)))
            and (self.max_m is None or m <= self.max_m)
            and (self.max_n is None or n <= self.max_n)
            and (self.max_outputs is None or m * n <= self.max_outputs)
        )

    @property
    def any_shape(self) -> bool:
        """Whether it computes every shape of C (all but the matrix-vector rows and the small products')."""
        return self.max_m is None and self.max_n is None

    @property
    def made_for_shape(self) -> bool:
        """A matrix-vector row: where it computes the shape, auto's only candidates are such rows."""
        return not self.any_shape and not self.packs

    @property
    def tma(self) -> bool:
        """Whether A and B reach the kernel as tensor maps (the copy engine reads whole boxes: a split of K
        must end on a k tile, k_align)."""
        return self.args.startswith("tensor_maps")

    @property
    def writes_c_trans(self) -> bool:
        """Whether the kernel can write C stored transposed (C_STORE["transposed"]), which the planner's
        swapped plans need: the 16-bit and int8 TMA rows can, and the TF32 ones (tensor_maps_exact) of at
        most 64 columns or reading A transposed (the wider K-major TF32 bodies have no registers left for it)."""
        return self.args == "tensor_maps" or (
            self.args == "tensor_maps_exact" and (self.tile[1] <= 64 or self.reads_a_trans)
        )

    def grid(
        self, m: int, n: int, splits: int, sm_count: int, batch: int = 1, per_sm: int | None = None
    ) -> tuple[int, int, int]:
        """Launch grid: (column tiles, row tiles capped at 65535, splits, or the batch's matrices capped at
        65535), or for a persistent kernel one block a slot up to the number of work items (tiles x splits
        x batch). The matrix-vector rows' tiles make theirs: gemv_n1 and gemv_n<R> (1, row tiles of 32,
        layers), gemv_m1 and gemv_m<R> (strips of 128 columns, 1, layers), gemv_m1x32 (strips of 32
        columns, 1, layers), gemv_m1bt and gemv_m<R>bt (tiles of 32 columns, 1, layers). per_sm: a sliced
        row's blocks an SM for this product (stream_launch), where not its own blocks_per_sm."""
        if self.packs and self.persistent:  # the streamed rows: each warp (or block) its chunks of the batch
            walkers = 1 if self.block_chunks else STREAM_WARPS
            return max(1, min(cdiv(batch, walkers), sm_count * (per_sm or self.blocks_per_sm))), 1, 1
        if self.persistent:  # (a cluster's blocks share a work item: pairs of row tiles)
            c = self.cluster
            works = cdiv(cdiv(m, self.tile[0]), c) * cdiv(n, self.tile[1]) * splits * batch
            return c * max(1, min(works, sm_count * self.blocks_per_sm // c)), 1, 1
        if self.packs:
            return max(1, cdiv(batch, small_per_block(m, n, self.max_outputs is None))), 1, 1
        layers = splits if batch == 1 else min(max(batch, 1), MAX_GRID_YZ)  # (an empty batch launches nothing)
        return tiled_grid(m, n, *self.tile, layers=layers)


SMALL_THREADS = 256  # cuda/matmul_small.cu: THREADS
SMALL_SMEM = 16384  # cuda/matmul_small.cu: SMEM_BYTES, the staged chunks of A and B
SMALL_PASSES = 4  # cuda/matmul_small.cu: PASSES, the matrices' outputs a thread of small
WIDE_THREADS = 128  # cuda/matmul_small.cu: WIDE_THREADS (four warps)
WIDE_SMEM = 36864  # cuda/matmul_small.cu: WIDE_SMEM, a small_wide block's dynamic shared memory
WIDE_KC = 64  # cuda/matmul_small.cu: WIDE_KC, the most of K a small_wide group stages at a time
# cuda/matmul_small.cu: wide_blocks_per_sm, small_wide's launch bounds by the element's bytes
WIDE_BLOCKS_PER_SM = {2: 4, 4: 5, 8: 3}


def small_per_block(m: int, n: int, wide: bool = False) -> int:
    """The matrices a block of a small-products row takes for an m x n C (cuda/matmul_small.cu,
    small_geometry and wide_geometry): small, one output a thread four matrices over, so as many whole
    matrices as the 256 threads cover, four times; small_wide, one a warp for a C of at most 32 x 32, else
    one (its four warps a 32 x 32 quarter each)."""
    if wide:
        return WIDE_THREADS // 32 if m <= 32 and n <= 32 else 1
    return max(1, SMALL_THREADS // (m * n)) * SMALL_PASSES


STREAM_THREADS = 128  # cuda/matmul_small.cu: STREAM_THREADS (four warps)
STREAM_WARPS = STREAM_THREADS // 32
STREAM_SMEM = 57344  # cuda/matmul_small.cu: STREAM_SMEM
STREAM_BLOCKS_PER_SM = 4  # cuda/matmul_small.cu: STREAM_BLOCKS_PER_SM
STREAM_SLICE = STREAM_SMEM // STREAM_WARPS  # a warp's bytes (the launch of every product whose stages fit it)
STREAM_STAGE_BYTES = 8192  # cuda/matmul_small.cu: STREAM_STAGE_BYTES
STREAM_MAX = 32  # the most of M, N and K small_stream computes
# cuda/matmul_small.cu: float64's stream entry's launch bounds (its register tile of doubles: 185 registers a
# thread on sm_90, so two blocks an SM whatever its shared memory)
STREAM_F64_BLOCKS_PER_SM = 2
# the fewest blocks an SM small_stream runs: at one (four warps an SM), float64's 24^3 and 32^3 products took
# 1.5-1.9x the time of the tiles, float32's 32 x 8 x 32 more than at two (H200, 2026-12-01,
# results/probe-stream-sliced-*): each warp waits on its own stages, and four an SM leave the latency bare
STREAM_FEWEST_BLOCKS_PER_SM = 2
# the most dynamic shared memory a small_stream launch asks for (two blocks an SM of the sm_90 GPUs, which no
# GPU's share at two exceeds): its kernels' opt-in attribute (capped at the GPU's)
STREAM_MOST_SMEM = 115712
SMEM_RESERVED = 1024  # shared memory the GPU keeps a resident block (sm_80 and newer)
H100_MAX_SMEM = 232448  # the shared memory an H100's (and H200's) block may opt into: its SM's less one reserve


@dataclass(frozen=True)
class StreamGeometry:
    """small_stream's staging for one product shape (cuda/matmul_small.cu, stream_geometry), in bytes where
    not elements: a lane's register tile (rm x rn; rm 2 for a C of at most 16 x 16, whose tensor-core tiles
    are 1 x 2 of 16 x 8 for the halves, else 2 x 4), the staged A's and B's row strides (kp, ns) and where B
    starts (b_at), the staged operands' bytes, a copy stage's bytes and where B's run starts in it, and the
    matrices a stage holds."""

    rm: int
    rn: int
    kp: int
    ns: int
    b_at: int
    staged: int
    stage: int
    b_raw: int
    per_chunk: int


def stream_geometry(
    m: int, n: int, k: int, itemsize: int, batch: int, warps: int, slice_bytes: int = STREAM_SLICE
) -> StreamGeometry:
    """The geometry cuda/matmul_small.cu's stream_geometry computes for an m x n x k product of `itemsize`
    bytes an element (float32 and float64 staged as they are for the FP32 and FP64 pipes, the halves as
    they are for the tensor cores), `warps` warps in the grid, a batch of `batch`, a warp's `slice_bytes` of
    the block's shared memory."""
    narrow = m <= 16 and n <= 16
    rm, rn = (2, 4) if narrow else (4, 8)
    if itemsize == 2:  # the halves, staged as they are for the tensor cores, K padded to 16
        kpad = cdiv(k, 16) * 16
        kp, ns = kpad + 8, 8 * rm + 8
        b_at = 8 * rm * kp
        staged = cdiv((b_at + kpad * ns) * 2, 16) * 16
    else:
        kp, ns = k | 1, 4 * rn + 4
        b_at = cdiv(8 * rm * kp, 4) * 4
        staged = cdiv((b_at + k * ns) * itemsize, 16) * 16
    a_bytes, b_bytes = m * k * itemsize, k * n * itemsize
    room = max(0, min((slice_bytes - staged) // 2, max(STREAM_STAGE_BYTES, a_bytes + b_bytes) + 64) - 64)
    per_chunk = min(room // (a_bytes + b_bytes), cdiv(batch, warps))  # 0: no stage holds a matrix
    b_raw = (per_chunk * a_bytes + 31) // 16 * 16
    stage = b_raw + (per_chunk * b_bytes + 31) // 16 * 16
    return StreamGeometry(rm, rn, kp, ns, b_at, staged, stage, b_raw, per_chunk)


@dataclass(frozen=True)
class StreamLaunch:
    """small_stream's launch for one product shape: a warp's slice of shared memory (the block's is four), and
    the blocks an SM then holds."""

    slice_bytes: int
    blocks_per_sm: int

    @property
    def smem(self) -> int:
        return self.slice_bytes * STREAM_WARPS


def stream_launch(m: int, n: int, k: int, itemsize: int, max_smem: int = H100_MAX_SMEM) -> StreamLaunch | None:
    """small_stream's launch for an m x n x k product of `itemsize`-byte elements on a GPU whose blocks may
    opt into max_smem bytes of shared memory (an SM holds that and SMEM_RESERVED): four blocks an SM of 14
    KiB a warp where a stage holds a matrix beside the staged operands (the halves up to 32^3, float32 up
    to about 20^3), else the most blocks an SM whose share holds one, at least STREAM_FEWEST_BLOCKS_PER_SM
    (float32 to 32^3 at two or three; float64 at two, its registers' most, up to about 21^3); None where a
    side is past STREAM_MAX or two blocks' shares hold no matrix."""
    if max(m, n, k) > STREAM_MAX:
        return None
    most = STREAM_F64_BLOCKS_PER_SM if itemsize == 8 else STREAM_BLOCKS_PER_SM
    for per_sm in range(most, STREAM_FEWEST_BLOCKS_PER_SM - 1, -1):
        if per_sm == STREAM_BLOCKS_PER_SM:
            slice_bytes = STREAM_SLICE
        else:
            block = min(max_smem, (max_smem + SMEM_RESERVED) // per_sm - SMEM_RESERVED)
            slice_bytes = block // STREAM_WARPS // 16 * 16
        if slice_bytes * STREAM_WARPS <= max_smem and stream_geometry(m, n, k, itemsize, 1, 1, slice_bytes).per_chunk:
            return StreamLaunch(slice_bytes, per_sm)
    return None


def stream_fits(m: int, n: int, k: int, itemsize: int, max_smem: int = H100_MAX_SMEM) -> bool:
    """Whether small_stream computes an m x n x k product of `itemsize`-byte elements on a GPU whose blocks
    may opt into max_smem bytes of shared memory (stream_launch)."""
    return stream_launch(m, n, k, itemsize, max_smem) is not None


BLOCK_MULTIPLE = 8  # cuda/matmul_small.cu: BLOCK_MULTIPLE, BLOCK_MAX (small_stream_block's sides)
BLOCK_MAX = 64
BLOCK_STAGE = STREAM_SMEM // 2  # cuda/matmul_small.cu: BLOCK_STAGE, a copy stage's bytes


def spaced_row_bytes(inner: int) -> int:
    """The bytes a stored row of `inner` halves (a multiple of 8) takes in small_stream_block's stage: its
    16-byte pieces, one more where they are even (ldmatrix's eight rows on eight bank groups)."""
    return 16 * (inner // 8 | 1)


@dataclass(frozen=True)
class BlockGeometry:
    """small_stream_block's stages for one product shape (cuda/matmul_small.cu, block_geometry), in bytes: a
    stored row of A and of B, a product's A and B, where B's products start, a stage's A and B, and the
    products a stage holds."""

    a_ld: int
    b_ld: int
    a_bytes: int
    b_bytes: int
    b_raw: int
    stage: int
    per_chunk: int


def block_geometry(m: int, n: int, k: int, a_trans: bool, b_trans: bool, batch: int, blocks: int) -> BlockGeometry:
    """The geometry cuda/matmul_small.cu's block_geometry computes for an m x n x k product of the halves with A
    and B stored as a_trans and b_trans say, a batch of `batch` over `blocks` blocks."""
    a_ld, b_ld = spaced_row_bytes(m if a_trans else k), spaced_row_bytes(k if b_trans else n)
    a_bytes, b_bytes = (k if a_trans else m) * a_ld, (n if b_trans else k) * b_ld
    even, fits = cdiv(batch, blocks), BLOCK_STAGE // (a_bytes + b_bytes)
    per_chunk = cdiv(even, cdiv(even, fits)) if fits else 0  # as few chunks a block as fit, and those even
    b_raw = per_chunk * a_bytes
    return BlockGeometry(a_ld, b_ld, a_bytes, b_bytes, b_raw, b_raw + per_chunk * b_bytes, per_chunk)


def small_chunk(m: int, n: int, k: int, itemsize: int, wide: bool) -> int:
    """The K a small-products block stages at a time (cuda/matmul_small.cu, kc), as the accumulation type
    (float64, or float32 for the others): small, as much as fits its shared memory for its matrices, at
    most 32; small_wide, as much as fits a group's share of it (A as M rounded up to 32 rows of an odd
    stride, B as K rows of N rounded up to 32 and 4 more), at most WIDE_KC."""
    acc = 8 if itemsize == 8 else 4
    if wide:
        mp, np_ = cdiv(m, 32) * 32, cdiv(n, 32) * 32
        slice_ = WIDE_SMEM // acc // small_per_block(m, n, True)
        return max(1, min(k, WIDE_KC, (slice_ - mp - 4) // (mp + 1 + np_ + 4)))
    return max(1, min(k, 32, SMALL_SMEM // acc // (small_per_block(m, n) * (m + n))))


# bytes/s an SM stages a wgmma tile's operands at while every SM streams a weight (WAVE_FLOOR)
WGMMA_STAGE_RATE = 44e9
# Variant.wave_floor_s and wave_k_s of the tile rows (seconds a wave, and a wave for each unit of K), by
# family or by tile. On the H200 (2026-11-28, batches of 8^3-64^3 and 16 x 16 x 128 products, every tile
# by name: benchmarks/NOTES.md) a wave of blocks with little to compute cost a floor plus a time for each
# unit of K, nearly whatever the tile's share of work: sgemm64x64 1.8 us + 0.137 us a unit of K (2.9 us
# at K = 8, 10.5 at 64, 19 at 128), so the arithmetic the rate charges (0.7-1 us a wave at K = 16-32)
# ranked the tiles 2-4x too fast, and the 128-wide tiles, counted by their live warp tiles, faster than
# 64 x 64 ones that measured twice as fast (least squares over the waves of grids of at least five,
# within 0.73-1.36 of each timing). Not for the persistent rows (their blocks overlap one work item's
# epilogue with the next one's loads: a work item of theirs took 1.2-1.4 us at K = 16-64, a wave being
# one item a block) nor the memory-bound ones (their bytes bound them), but for the narrowest wgmma
# tiles' staging (below).
WAVE_FLOOR = {
    "sgemm64x64": (1.8e-6, 0.137e-6),
    "sgemm128x64": (1.9e-6, 0.077e-6),
    "sgemm64x128": (1.9e-6, 0.077e-6),  # PROVISIONAL: sgemm128x64's (the same warps and thread tiles)
    "sgemm32x128": (1.8e-6, 0.137e-6),  # PROVISIONAL: sgemm64x64's
    "sgemm128x128": (2.7e-6, 0.096e-6),
    "sgemm128x256": (2.7e-6, 0.096e-6),  # not timed: 128 x 128's (its blocks walk K the same way)
    "mma": (2.2e-6, 0.0106e-6),
    # the TF32 tiles (their k loop rounds every operand it reads): a wave of tf32_128x128 blocks 3.3 us at
    # K = 24, 5.1 at 64, 10 at 128, and of tf32_64x64 blocks 3.4, 7.3-8.3 and 11 (H200, 2026-11-28, batches
    # of 24^3-256^3 and attention-shaped products); the two-stage kernel's two blocks an SM took twice a
    # wave of one (3.3 us + 0.067 a unit of K)
    "tf32": (2.5e-6, 0.05e-6),
    "tf32_2stage": (3.3e-6, 0.067e-6),
    "dmma": (2.0e-6, 0.04e-6),
    # dmma's: a wave of dmma32x32's ten blocks an SM took 2.3-2.7 us at K up to 16 (H200, 2026-12-01)
    "dmma32x32": (2.0e-6, 0.04e-6),
    "wgmma": (1.2e-6, 0.0),
    # the 64 x 32 and 64 x 16 wgmma tiles: grids of whole waves of them stream a weight, each SM staging its
    # tile's 64 + BN rows a unit of K at WGMMA_STAGE_RATE, padding rows included (H200, 2026-11-29: 4 waves
    # of 64 x 16 blocks at 8 x 8192 x 8192 x @ W.T, plain, 116 us; 2 of 64 x 32, 73 us). A grid of less
    # than a wave is charged by the block rate instead (planner.model)
    "wgmma64x32": (1.2e-6, (64 + 32) * 2 / WGMMA_STAGE_RATE),
    "wgmma64x16": (1.2e-6, (64 + 16) * 2 / WGMMA_STAGE_RATE),
}


def _wave(key: str) -> dict:
    floor, per_k = WAVE_FLOOR[key]
    return {"wave_floor_s": floor, "wave_k_s": per_k}


# The modules whose kernels all begin with gpumat::wait_for_previous_grid (cuda/gpumat.cuh): every product
# kernel's (the teaching ones too: auto runs one for small float32 products). On sm_90 and later the
# launcher queues them as programmatic dependents of the kernel before them, so that a product's launch and
# set-up overlap the end of the one before it (tests/test_kernels_cpu.py checks the compiled code against
# this list). Not the Ozaki scheme's splitting and reconstruction kernels (module ozaki).
FOLLOW_PREVIOUS_GRID = frozenset(
    {
        "matmul",
        "matmul_dmma",
        "matmul_fast",
        "matmul_gemv",
        "matmul_simt",
        "matmul_small",
        "matmul_tc",
        "matmul_tc_half",
        "matmul_wgmma_half",
        "matmul_wgmma_kmajor",
    }
)


def _kernels(module: str, names: dict, args: str, smem: int = 0) -> dict:
    follows = module in FOLLOW_PREVIOUS_GRID
    return {
        pair: Kernel(module, name, SIGNATURES[args], dynamic_smem=smem, waits_for_previous=follows)
        for pair, name in names.items()
    }


# --- the documents' teaching kernels (cuda/matmul.cu), every dtype: one thread an element of C ---------
# (threads a side, tile a side, float32 rate at 2048^3-4097^3 in benchmarks/results/matmul-*-2026-11-22.json):
# naive and tiled16x64 cover 16 x 16 of C a block; tiled16/32 are the shared-memory tiles of BLOCK_SIZE
# 16 and 32. Named only (but tiled16x64, below); the rate makes their plans' modelled time.
TEACHING = {
    "naive": (16, 16, 5.5e12),
    "tiled16": (16, 16, 8.2e12),
    "tiled32": (32, 32, 8.6e12),
    "tiled16x64": (16, 16, 8.2e12),
}


# tiled16x64 is also auto's for small float32 products. The register-tiled SGEMM blocks give each of their
# 64-256 threads 64-128 outputs, so a product of a few blocks waits on each thread's long chain of
# multiply-adds (128^3 on sgemm32x128: 4 blocks, 9.6 us queued); tiled16x64 puts one output on each of 256
# threads, and at 32^3-257^3 it ran fastest of every row, ahead of cuBLAS from 32^3 to 256^3 (H200,
# 2026-11-30, benchmarks/results/probe-small-products-*: 128^3 4.1 us against sgemm32x128's 9.6 and cuBLAS's
# 5.3; 100 x 200 x 300 7.2 against 11.0 and 8.0). Fitted there (22 shapes of 1-1000 a side; auto then within
# 0.992 of the fastest timed plan): a block alone multiplies at 28-32 GFLOP/s (16 ns a k step), an SM full of
# them at about 50, and a call costs 2 us beyond its arithmetic. Not for float64 (its rows ran it 15-30%
# slower; the DMMA tiles are within 10% of it there), nor for batches (not measured: the small-products rows
# were fitted to those), nor where an operand stored transposed would first be copied (not measured; the
# SGEMM tiles read it in place). Its fitted rate replaces the table's 8.2 TFLOP/s in every dtype's model.
TEACHING_AUTO = {
    "tiled16x64": {
        "tier": 1,
        "auto_dtypes": ("f32",),
        "auto_max_batch": 1,
        "auto_in_place": True,
        "fixed_s": 2e-6,
        "block_rate": 0.028e12,
        "rate": 6.6e12,
    },
}


def _teaching(name: str, threads: int, tile: int, rate: float) -> Variant:
    names = {(s, s): f"matmul_{name}_{s}" for s in SUFFIXES}
    fitted = {"rate": rate, **TEACHING_AUTO.get(name, {})}
    return Variant(name, _kernels("matmul", names, "plain"), "any", (tile, tile), (threads, threads, 1), **fitted)


# --- register-tiled SIMT (cuda/matmul_simt.cu): 64 x 64 of C a block of 256; float64 exact FP64 FMA,
# halves accumulate in float32 and write C in their dtype or float32, int8 sums in int32 (C int32).
# auto's fallback where no tensor-core kernel runs (before sm_80; float64 on GPUs without full-rate FP64
# tensor cores; int8 off sm_90). Rate: the float64 figure at 4096^3
# (benchmarks/results/matmul-float64-*-2026-11-23.json; float16 ran 25 TFLOP/s).
_SIMT_PAIRS = (("f64", "f64"), *HALF_PAIRS)
SIMT = Variant(
    "simt64x64",
    _kernels(
        "matmul_simt",
        {
            **{(s, d): f"matmul_simt64x64_{s}" + ("_f32out" if d != s else "") for s, d in _SIMT_PAIRS},
            ("s8", "s32"): "matmul_simt64x64_s8",
        },
        "plain",
    ),
    "native",
    (64, 64),
    (256, 1, 1),
    tier=2,
    rate=9.3e12,
)


# --- FP32 SGEMM (cuda/matmul_fast.cu): 16 x 8 (8 x 8 for the 64-wide tiles) outputs a thread, a
# cp.async ring of shared-memory stages, split-K. Rates: the 16 x 8 kernels' full-wave speed (50.7
# TFLOP/s) times each variant's fitted efficiency (benchmarks/results/matmul-tuning-*.json), which also
# absorbs how it fares on partial waves and edges.
# Splits as short as 64 of K: a small product on these tiles is a few blocks that each walk all of K, one
# FFMA a k a thread's output, and cutting K shorter went on paying (H200, 2026-11-30, every tile at 1-16
# splits: 192^3 13.9 us unsplit, 10.3 at 3 splits of 64 on sgemm32x128; 256^3 16.5, 9.9 at 4; 384^3 23.1,
# 12.3 at 6), where the default floor of 128 stopped auto at 2 or 3 splits.
SGEMM_MIN_K_CHUNK = 64


def _sgemm(
    bm: int,
    bn: int,
    threads: int,
    blocks_per_sm: int,
    efficiency: float,
    smem: int = 0,
    suffix: str = "",
    reads_a_trans: bool = False,
    reads_b_trans: bool = False,
    whole_tiles: bool = False,
    **latency,
) -> Variant:
    warp_m = bm * (bn // 64) * 32 // threads  # warp tiles are warp_m x 64
    name = f"sgemm{bm}x{bn}{suffix}" + ("at" if reads_a_trans else "") + ("bt" if reads_b_trans else "")
    entry = f"matmul_sgemm_{bm}x{bn}{suffix}" + ("at" if reads_a_trans else "") + ("bt" if reads_b_trans else "")
    kernels = _kernels("matmul_fast", {("f32", "f32"): entry}, "k_chunk", smem)
    return Variant(
        name,
        kernels,
        "float32",
        (bm, bn),
        (threads, 1, 1),
        "k_chunk",
        smem,
        reads_a_trans=reads_a_trans,
        reads_b_trans=reads_b_trans,
        tier=1,
        rate=50.7e12 * efficiency,
        blocks_per_sm=blocks_per_sm,
        warp_tile=None if whole_tiles else (warp_m, 64),
        wave_slack=0.05,
        **_wave(f"sgemm{bm}x{bn}"),
        scratch_bandwidth=1.5e12,
        min_k_chunk=SGEMM_MIN_K_CHUNK,
        **latency,
    )


# --- TF32 tensor cores (cuda/matmul_tc.cu): mma.sync m16n8k8 on 128 x 128 tiles, 8 warps of 64 x 32, and
# (tf32_64x64, one TF32 pass) 64 x 64 tiles, 4 warps of 32 x 32, four blocks an SM, for batches of small
# products and C of few tiles; sm_80+. tf32x3: each operand split into two TF32 halves, three products;
# tf32: one. *_splitsmem:
# operands rounded / split once into shared memory (more shared memory); *_2stage: two blocks an SM
# (auto takes it only for 16-byte aligned operands: with 4-byte copies it measured 0.85-0.9x).
# Rates measured at 4096^3 and 8192^3 (benchmarks/NOTES.md); the 2stage kernel's is 1.15x the
# one-block kernel's. Not chosen by auto: the split-in-shared-memory tf32x3 (0.85x) and the
# one-accumulator tf32x3 (the published scheme, less accurate; kept for the comparison).
# What a split of K costs beyond its partials' bytes (Variant.split_launch_s), fitted to this session's data:
# with every named plan's time of bench sweep (H100, 2026-11-26, the six dtypes and modes) and the times of
# every split of every row at 19 skinny, small and long-K shapes (bfloat16, float32), auto's choice came
# within 0.977 of the best plan in geometric mean (0.971 before) and below 0.85 of it in 24 cases (37)
# with 2 us for the mma.sync rows and 3 us for the TF32 rows (6 and 4-6 before: the reduction that adds
# the partials is cheaper since its loads are in flight together; benchmarks/NOTES.md).
SPLIT_LAUNCH_MMA_S = 2e-6
SPLIT_LAUNCH_TF32_S = 3e-6
# The wgmma rows' (64 x 64 and wider): 6 us until the reduction became its product's programmatic dependent
# and the pool kept scratch of up to 16 MiB (about 2 us less a split, benchmarks/NOTES.md). Refitted on
# bench sweep's float16 and bfloat16 products on the H200 (2026-11-30, 290 shapes, every named plan timed):
# auto's choice came within 0.9867 of the fastest timed plan in geometric mean at 2.5-4 us (0.9857 at 6),
# and below 0.97 of it in 94 cases (105); the long-K products of 64-128 rows and columns take wgmma64x64
# over mma64x64 at 32-128 splits (128 x 128 x 16384: 8.9 -> 7.1 us measured by name). On 60 shapes drawn at
# random whose plan this moves (benchmarks/results/probe-wgmma-split-refit-*, both dtypes): 1.056x faster in
# geometric mean, 1.11x at 64 or more columns, but 0.93x (0.83x at worst) at 8-16 columns, where a wgmma tile
# of 64 columns split lost to mma64x64 split further, or to C^T on the 64 x 16 tile (not modelled yet)
SPLIT_LAUNCH_WGMMA_S = 3e-6
# The DMMA rows' (float64): 4 us (the default) until the dependent reduction. Refitted on bench sweep's float64
# products (H200, 2026-11-30, 145 shapes): auto within 0.9852 of the fastest timed plan at 2-2.5 us (0.9827 at
# 4), and on 22 small products timed on every row at every split (benchmarks/results/probe-small-products-*)
# 0.923 (0.896): 192^3 to 320^3 now split on the 64 x 64 tile (256^3: 7.1 us against 8.3; 384^3 and 512^3 not)
SPLIT_LAUNCH_DMMA_S = 2.5e-6
# ... and on the A100, where the reduction is launched plainly: plus the 1.0-1.2 us the dependent launch took off
# a split product on the H200 (benchmarks/results/probe-split-dependent-launch-*; not measured on an A100)
SPLIT_LAUNCH_DMMA_BEFORE_SM90_S = 3.6e-6
TC_SMEM = 104448  # 3 stages of a 128 x 32 A tile (rows padded to 36) and a 32 x 128 B tile
TC_SMEM_64 = 52224  # the same for 64 x 64 tiles: a 64 x 32 A tile and a 32 x 64 B tile


def _tf32(
    name: str,
    mode: str,
    rate: float,
    smem: int = TC_SMEM,
    blocks_per_sm: int = 1,
    tier: int = 0,
    auto_needs_aligned: bool = False,
    tile: tuple[int, int] = (128, 128),
    wave: str = "tf32",
    **latency,
) -> Variant:
    kernels = _kernels("matmul_tc", {("f32", "f32"): f"matmul_{name}_f32"}, "k_chunk", smem)
    warp_m = 64 if tile == (128, 128) else 32  # warp tiles of warp_m x 32: 2 x 4 warps, or 2 x 2
    warps = tile[0] // warp_m * (tile[1] // 32)
    return Variant(
        name,
        kernels,
        mode,
        tile,
        (32 * warps, 1, 1),
        "k_chunk",
        smem,
        min_arch=80,
        tier=tier,
        auto_needs_aligned=auto_needs_aligned,
        rate=rate,
        blocks_per_sm=blocks_per_sm,
        warp_tile=(warp_m, 32),
        min_k_chunk=256,
        split_launch_s=SPLIT_LAUNCH_TF32_S,
        **_wave(wave),
        **latency,
    )


# --- float16 / bfloat16 tensor cores, float32 accumulation, C in the input dtype or float32 -----------
# mma128x128, mma128x64, mma64x128, mma64x64 (cuda/matmul_tc_half.cu, one kernel template over the
# tile): mma.sync m16n8k16, sm_80+, any view (16-byte cp.async where the operands allow), batches,
# split-K. The small tiles are for products small or skinny in M or N and batches of small products,
# where 128 x 128 tiles leave most SMs idle or most of each tile empty. wgmma128x256 and wgmma128x128
# (cuda/matmul_wgmma.cuh, one kernel template over the tile's width; the 16-bit entries in
# matmul_wgmma_half.cu): TMA + wgmma (m64n256k16 or m64n128k16), sm_90a only, persistent; operands the
# copy engine cannot read (base or row stride not
# 16-byte aligned) are first copied into aligned scratch. The 128 x 128 tile has twice the work items
# of the 128 x 256 one, for the mid-size products whose 128 x 256 tiles leave most SMs idle (1024^3:
# 32 tiles on 132 SMs). The *bt rows read B stored transposed (x @ W.T) in place, the *at rows A
# stored transposed (X.T @ B). Rates:
# benchmarks/results/matmul-float16-*.json and matmul-bfloat16-*.json.
def _half(
    name: str, module: str, args: str, tile, threads: int, smem: int, split_launch_s: float = SPLIT_LAUNCH_WGMMA_S, **kw
) -> Variant:
    names = {(s, d): f"matmul_{name}_{s}" + ("_f32out" if d != s else "") for s, d in HALF_PAIRS}
    kw.setdefault("tier", 1)
    return Variant(
        name,
        _kernels(module, names, args, smem),
        "native",
        tile,
        (threads, 1, 1),
        args,
        smem,
        split_launch_s=split_launch_s,
        **kw,
    )


# the mma.sync tiles' dynamic shared memory by tile (Cfg::SMEM_BYTES in cuda/matmul_tc_half.cu, a CPU test
# compares): 4 stages of a BM x 32 A tile and a 32 x BN B tile, 16-bit elements
MMA_SMEM = {(128, 128): 65536, (128, 64): 49152, (64, 128): 49152, (64, 64): 32768}


def _mma(tile: tuple[int, int], warps: tuple[int, int], blocks_per_sm: int, rate: float, **latency) -> Variant:
    """A tile of the mma.sync family (cuda/matmul_tc_half.cu): warps = (along M, along N); blocks_per_sm as
    the kernel's launch bounds on sm_90. No warp_tile: an edge tile counts as a whole one, as it always did
    for mma128x128 (with warp tiles, the model lets two half-empty blocks share one slot of a wave, and a
    batch of 64 x 64 products ranked half-empty 128 x 64 tiles above whole 64 x 64 ones)."""
    return _half(
        f"mma{tile[0]}x{tile[1]}",
        "matmul_tc_half",
        "k_chunk",
        tile,
        32 * warps[0] * warps[1],
        MMA_SMEM[tile],
        min_arch=80,
        rate=rate,
        blocks_per_sm=blocks_per_sm,
        k_align=32,
        min_k_chunk=128,
        split_launch_s=SPLIT_LAUNCH_MMA_S,
        **_wave("mma"),
        **latency,
    )


# the wgmma kernels' dynamic shared memory by tile (Tile<BM, BN>::SMEM_BYTES in cuda/matmul_wgmma.cuh, a
# CPU test compares): as many stages of BM x 64 (A) + 64 x BN (B) 16-bit elements (128 x 32 + 32 x BN
# float32 for TF32: the same bytes) as fit in 227 KiB (at most 8 for the 128-row tiles, 24 for the 64-row
# ones), two C buffers of 8 KiB a consumer, 1 KiB alignment, mbarriers. 4 stages of 48 KiB (128 x 256), 6
# of 32 KiB (128 x 128) and 8 of 24 KiB (128 x 64) come to the same; 64 x 64 holds 13 of 16 KiB, 64 x 32 17
# of 12 KiB, 64 x 16 20 of 10 KiB.
WGMMA_SMEM = {
    (128, 256): 230528,
    (128, 128): 230528,
    (128, 64): 230528,
    (64, 64): 230656,
    (64, 32): 226688,
    (64, 16): 222592,
}
# the bytes/s every 16-bit wgmma row moves its operands at, at most, the zeros its copy engine stages past
# C's edges counted (stages_padding; planner.staged): a layer on few tokens is a read of its weight, and a
# 128-row tile over 8 tokens stages 120 rows of zeros beside them. Fitted on the H200 (2026-11-29; it
# copies at ~4.3 TB/s: a ranking constant more than a bandwidth) over both 16-bit sweeps and the narrow
# tiles' probe (benchmarks/NOTES.md, twenty-fifth session): auto against the best timed plan 0.977 -> 0.982
# and 0.972 -> 0.979, where the 64-row tiles had drawn 4.0 (64 x 64) and 5.0 TB/s (64 x 32, 64 x 16) on the
# operands alone and the 128-row tiles nothing (16384 x 8 x 16384 with B row-major: 168 us on 128 x 64, 133
# on 64 x 16 after B's copy, cuBLAS 132)
WGMMA_BANDWIDTH = 4.75e12
# what every row of the wgmma kernel shares: sm_90a code, operands the copy engine reads (16-byte aligned,
# else copied first), a persistent grid
HOPPER_TMA = {"min_arch": 90, "only_arch": 90, "needs_aligned": True, "persistent": True}
# the fewest columns of C auto gives the wgmma rows that read B row-major (B's tensor map boxes of 64
# columns): at 8 columns they ran 1.2-2.3x their modelled time where 16 columns ran at 0.9-1.2x (H200,
# 2026-11-30, float16, benchmarks/results/probe-narrow-n-float16-nvidia-h200-2026-11-30.json: 16384 x 8 x
# 1024 on wgmma128x64 23.8 us, modelled 10.2, against 11.5 at 16 columns; 4096 x 8 x 4096 16.2 at its best
# split, modelled 13.6). Such a C runs on the mma.sync tiles or on the 64 x 16 tile over B's transposed copy,
# which the model times closer: over the probe's 8-column products with B row-major, auto's pick went from
# 0.84 to 0.95 of the fastest timed plan's speed (geometric mean)
WGMMA_ROW_MAJOR_B_MIN_N = 9


# The 16-bit wgmma tiles that also run as pairs (_pair; the kernel's CAN_PAIR). The pair rows against their single
# rows, by name (H200, 2026-12-01, bfloat16, benchmarks/results/probe-pairs-*): where an operand's rows are an odd
# multiple of 16 bytes long and the tiles fill the SMs, the single rows waited on L2 and the pairs, which read B from
# it once for two tiles, ran 1.17-1.36x faster (24 x 1000^3 119.7 -> 90.0 us, 2 x 3000^3 247.9 -> 182.8, one 3000^3
# 140.6 -> 109.7, 8 x 1000 x 1000 x 4000 126.3 -> 96.1); elsewhere they ran 0-3% slower (8192^3 1356 against 1363,
# 4 x 2048^3 94.5 against 95.4), and with fewer tiles than SMs up to 8%.
PAIR_TILES = ((128, 256), (128, 128))
HALF_SECTOR_SLOWDOWN = 1.3  # the single rows of those tiles
# a pair row's rate, of its single row's: 0.97 for both until the 128 x 128 rows' rates were refitted 10% up
# (2026-12-02, see the wgmma rows); its pairs then took one 3000^3 at 121.5 us where 128 x 256's pair ran 109.7,
# and at 0.90 they keep what the probe measured (auto within 0.996 of its fastest pair or single, 0.989 at 0.97)
PAIR_RATE = {(128, 256): 0.97, (128, 128): 0.90}


def _wgmma(
    tile: tuple[int, int], rate: float, reads_b_trans: bool = False, reads_a_trans: bool = False, **latency
) -> Variant:
    """A row of the wgmma kernel: a producer warpgroup and one consumer warpgroup for each 64 rows of the
    tile (Tile<BM, BN> in cuda/matmul_wgmma.cuh), one block an SM."""
    name = f"wgmma{tile[0]}x{tile[1]}" + ("at" if reads_a_trans else "") + ("bt" if reads_b_trans else "")
    return _half(
        name,
        "matmul_wgmma_half",
        "tensor_maps",
        tile,
        128 * (1 + tile[0] // 64),
        WGMMA_SMEM[tile],
        **HOPPER_TMA,
        reads_b_trans=reads_b_trans,
        reads_a_trans=reads_a_trans,
        rate=rate,
        k_align=64,
        min_k_chunk=256,
        bandwidth=WGMMA_BANDWIDTH,
        stages_padding=True,
        auto_min_n=None if reads_b_trans else WGMMA_ROW_MAJOR_B_MIN_N,
        half_sector_slowdown=HALF_SECTOR_SLOWDOWN if tile in PAIR_TILES else 1.0,
        **_wave(tiled if (tiled := f"wgmma{tile[0]}x{tile[1]}") in WAVE_FLOOR else "wgmma"),
        **latency,
    )


# the bytes/s the TF32 wgmma rows move their operands at, at most, the zeros staged past C's edges counted
# (stages_padding): a layer on few tokens is a read of its weight, and a 64- or 128-row tile over 8 tokens
# stages 56 or 120 rows of zeros beside them. Fitted on the H200 (it copies at ~4.3 TB/s) with the narrow
# TF32 rows (below): 8 x 8192^2 at 67.5 us swapped on 64 x 16 (83 us on 128 x 256 at 4 splits, which
# stage 15 times the zero rows)
TF32_WGMMA_BANDWIDTH = 3.5e12


# --- float32 at TF32 on Hopper's wgmma (cuda/matmul_wgmma_kmajor.cu, the float32 instantiation of the same
# template): tf32_wgmma<BM>x<BN>bt on the six tiles of the 16-bit rows (128 x 256 to 64 x 16), sm_90a only,
# persistent, TMA. wgmma reads TF32 operands K-major alone, so every row reads B stored transposed (N rows of
# K: x @ W.T in place); a row-major B is transposed into aligned scratch first (the planner charges the
# copy); the rows of at most 64 columns also write C transposed (a swapped layer on few tokens). The copy engine
# rounds the operands to TF32 (to nearest) on the way into shared memory; outputs the tensor cores leave
# non-finite are recomputed in FP32, as on the mma.sync rows. A k tile is 32 floats (128 bytes: the
# 16-bit rows' stage layout in bytes), so splits fall on multiples of 32, at least 4 k tiles long.
def _tf32_wgmma(tile: tuple[int, int], rate: float, layout: str = "bt", **latency) -> Variant:
    return _k_major_wgmma(
        "tf32",
        {("f32", "f32"): "tf32"},
        "tf32",
        "tensor_maps_exact",
        tile,
        rate,
        layout,
        k_align=32,
        min_k_chunk=128,
        split_launch_s=SPLIT_LAUNCH_TF32_S,
        bandwidth=TF32_WGMMA_BANDWIDTH,
        **latency,
    )


def _k_major_wgmma(
    kind: str, entries: dict, mode: str, args: str, tile, rate: float, layout: str = "bt", **fields
) -> Variant:
    """A row of the wgmma kernel for the inputs wgmma reads K-major alone (TF32, int8, FP8: it has no
    transpose for them): <kind>_wgmma<BM>x<BN><layout>, entries {(input suffix, output suffix): the entry's
    name after matmul_wgmma<BM>x<BN><layout>_}, B stored transposed read in place (a row-major B transposed
    into aligned scratch first), and with layout "atbt" (TF32, at most 128 columns) A stored transposed too,
    read into registers; tier 1; `fields`: the kind's split and cost constants."""
    name = f"{kind}_wgmma{tile[0]}x{tile[1]}{layout}"
    names = {pair: f"matmul_wgmma{tile[0]}x{tile[1]}{layout}_{end}" for pair, end in entries.items()}
    return Variant(
        name,
        _kernels("matmul_wgmma_kmajor", names, args, WGMMA_SMEM[tile]),
        mode,
        tile,
        (128 * (1 + tile[0] // 64), 1, 1),
        args,
        WGMMA_SMEM[tile],
        **HOPPER_TMA,
        reads_b_trans=True,
        reads_a_trans=layout == "atbt",
        rate=rate,
        tier=1,
        stages_padding=True,
        **_wave("wgmma"),
        **fields,
    )


# --- int8 on Hopper's wgmma (cuda/matmul_wgmma_kmajor.cu, the int8 instantiation of the same template, C the
# int32 sums): int8_wgmma<BM>x<BN>bt, int8 @ int8 -> int32, sm_90a only, persistent, TMA, "native" (exact:
# K up to INT8_MAX_K, which the call path checks). wgmma reads 8-bit operands K-major alone, so every row
# reads B stored transposed (x @ W.T in place) and a row-major B is transposed into aligned scratch first
# (the planner charges the copy). One split (int32 partials would need a reduction of their own); C the
# int32 sums (no epilogue: the call path refuses alpha, beta, a bias and an activation), or a float C (the
# sums as float32 through the epilogue). A k tile is 128 bytes:
# 128 int8 elements. Rates provisional, from the Ozaki scheme's residue products on the same body (1,170
# TOPS for 9 layers of 4096^3 on the H200, benchmarks/NOTES.md, twenty-ninth session), the 128 x 128 tile
# in the 16-bit rows' proportion.
INT8_MAX_K = 131071  # int8 x int8 sums of K terms stay inside int32 (|x y| <= 2^14: K (2^17 - 1) 2^14 < 2^31)
# the float Cs an int8 product also writes: its sums as float32 through the epilogue (dequantising scales)
INT8_FLOAT_OUTPUTS = ("f32", "bf16", "f16")


def _int8_wgmma(tile: tuple[int, int], rate: float, **latency) -> Variant:
    # a float C on every tile but 128 x 256, whose float copy of the sums spilled (cuda/matmul_wgmma_kmajor.cu)
    floats = () if tile == (128, 256) else INT8_FLOAT_OUTPUTS
    entries = {("s8", "s32"): "s8", **{("s8", o): f"s8_{o}out" for o in floats}}
    return _one_byte_wgmma("int8", entries, tile, rate, max_splits=1, **latency)


def _one_byte_wgmma(kind: str, entries: dict, tile, rate: float, **fields) -> Variant:
    """A wgmma row of 1-byte inputs (int8, FP8: _k_major_wgmma's), computing in their own format: a k tile of
    128 elements, splits of at least four."""
    return _k_major_wgmma(
        kind,
        entries,
        "native",
        "tensor_maps",
        tile,
        rate,
        k_align=128,
        min_k_chunk=512,
        bandwidth=WGMMA_BANDWIDTH,
        **fields,
    )


# --- FP8 on Hopper's wgmma (cuda/matmul_wgmma_kmajor.cu, the FP8 instantiations of the same template):
# fp8_wgmma<BM>x<BN>bt, e4m3 @ e4m3 or e5m2 @ e5m2 (ml_dtypes' float8_e4m3fn, float8_e5m2), float32
# accumulators, C in bfloat16, float16 or float32 through the epilogue (the per-tensor scales folded into
# alpha by the call path), sm_90a only, persistent, TMA, "native". wgmma reads FP8 operands K-major alone,
# so every row reads B stored transposed (x @ W.T in place) and a row-major B is transposed into aligned
# scratch first (the planner charges the copy). A k tile is 128 bytes: 128 elements; splits fall on
# multiples of 128, float32 partials added by the 16-bit rows' reduction. Split cost (FP8_SPLIT_LAUNCH_S):
# fitted with the rates below on the H200's probe (benchmarks/results/probe-fp8-wgmma-*-2026-11-29.json,
# 26 shapes: layers of 8-256 tokens on 4096 x 4096, 14336 x 4096 and 4096 x 14336 weights, squares of
# 512-8192, a skinny N, a long K; every row at 1-8 splits, plain and swapped): a split never won by more
# than 1% there, even at K = 14336 on few tokens, where the 16-bit constants had auto split (0.80-0.86 of
# the fastest plan); with these, auto's plans came within 0.997 of the fastest (geometric mean, worst 0.97).
FP8_OUTPUTS = ("bf16", "f16", "f32")
FP8_SPLIT_LAUNCH_S = 12e-6


def _fp8_wgmma(tile: tuple[int, int], rate: float, **latency) -> Variant:
    entries = {(s, o): f"{s}_{o}out" for s in FP8_SUFFIXES for o in FP8_OUTPUTS}
    return _one_byte_wgmma("fp8", entries, tile, rate, split_launch_s=FP8_SPLIT_LAUNCH_S, **latency)


# --- a product emulated on the INT8 tensor cores (gpumat.matmul.ozaki: exponents, residues, INT8 products, the
# CRT): the row's kernel is the reconstruction, which writes C; its launch shape "emulated" runs the steps.
# Modelled as one 128 x 256 tile row at the mode's measured rate; one product at a time.
def _emulated(sfx: str, mode: str, rate: float, fixed_s: float) -> Variant:
    return Variant(
        f"ozaki_{mode}",
        _kernels("ozaki", {(sfx, sfx): f"ozaki_crt_{sfx}"}, "ozaki"),
        mode,
        (128, 256),
        (256, 1, 1),
        "ozaki",
        min_arch=61,  # __dp4a; the wgmma INT8 tiles on sm_90
        tier=1,
        rate=rate,
        fixed_s=fixed_s,
    )


# --- float64 on the FP64 tensor cores (cuda/matmul_dmma.cu): mma.sync f64 (m16n8k8 on sm_90, m8n8k4 on
# sm_80-89), exact FP64 FMA, any view. auto uses them only on GPUs with full-rate FP64 tensor cores
# (A100, H100/H200, B200); elsewhere the SIMT kernel. Rates: benchmarks/results/matmul-float64-*.json
# at 4096^3 and 8192^3 (runs of one plan spread by up to 7%: they rank the shapes only roughly); the
# *pipe variants' (fragment reads one k step ahead) from the 2026-11-24 run, 46.0-47.4 TFLOP/s, no
# faster than the plain tiles there. They and the k32 tile (0.74-0.87x on the odd shapes) are not
# chosen by auto. dmma64x64, for the small products: 2631 us at 4096^3 against 2485 for dmma64x128 in
# one run (bench sweep, H100, 2026-11-25), its rate scaled from that row's by the ratio; at 128^3-512^3
# it ran 1.1-1.4x faster than the 128-row tiles. No warp_tile: a half-empty edge tile costs a whole one
# (bench sweep, 2026-11-26: 16384 x 64 x 16384 on 64 x 128 tiles, half of each empty, 1336 us against 813
# on 128 x 64), so the model counts it whole.
def _dmma(
    name: str,
    entry: str,
    tile,
    warp_rows: int,
    smem: int,
    blocks_per_sm: int,
    rate: float,
    tier: int,
    latency: dict | None = None,
    layout: str = "",
) -> Variant:
    """A DMMA row; latency: its fitted model constants (fixed_s, block_rate, unaligned_slowdown); layout
    "at", "bt" or "atbt": the entry reading A, B or both stored transposed in place."""
    latency = latency or {}
    threads = tile[0] // warp_rows * tile[1] // 32 * 32  # warp tiles are warp_rows x 32
    kernels = _kernels("matmul_dmma", {("f64", "f64"): f"matmul_{entry}{layout}_f64"}, "k_chunk", smem)
    return Variant(
        name + layout,
        kernels,
        "native",
        tile,
        (threads, 1, 1),
        "k_chunk",
        smem,
        reads_a_trans=layout in ("at", "atbt"),
        reads_b_trans=layout in ("bt", "atbt"),
        min_arch=80,
        tier=tier,
        auto_archs=(80, 90, 100),
        rate=rate,
        blocks_per_sm=blocks_per_sm,
        wave_slack=0.02,
        **_wave(name if name in WAVE_FLOOR else "dmma"),
        k_align=16,
        min_k_chunk=64,
        max_splits=64,
        split_launch_s=SPLIT_LAUNCH_DMMA_S,
        split_launch_before_sm90_s=SPLIT_LAUNCH_DMMA_BEFORE_SM90_S,
        **latency,
    )


# the memory term of the few-row DMMA tiles (below)
FEW_ROW_MEMORY = {"bandwidth": 4.4e12, "sm_bandwidth": 38e9}

# The tiles auto takes (tier 1), each also reading A or B stored transposed (at, bt) but dmma64x128:
# (entry, tile, warp rows, shared memory, blocks an SM, rate, tier, the latency constants). The rates, fixed
# costs and block rates of the five tiles of 64 rows or fewer and dmma128x64 were refitted together
# (2026-11-29, benchmarks/NOTES.md: coordinate steps of 5-25% on each, scored by the plan the model picks
# among the timed ones against the fastest) on the H200's float64 sweep and few-row probe of that day
# (benchmarks/results/sweep-float64-*-2026-11-29.json, probe-dmma-few-rows-*): auto within 0.9935 of the
# fastest timed plan over the sweep (0.982 before; worst 0.89, was 0.81) and 0.980 over the probe (0.976);
# on two earlier float64 sweeps of the H200 (2026-11-28 and the morning of 2026-11-29, not fitted to)
# 0.992 (0.981-0.982 before), worst 0.85-0.87 (0.80-0.81)
# Refitted after the dependent launches (2026-12-02, benchmarks/fit_planner.py on the float64 sweeps of
# 2026-12-02 and 2026-11-30 and the few-row probe, 368 cases): rates of 128 x 128, 64 x 128 and 64 x 64 up 5-10%,
# fixed costs of 128 x 64 3.56 -> 1.8 us, 16 x 128 4.69 -> 4.01, 64 x 64 3 -> 2.7, 64 x 128 2.25 -> 2.81 (its
# block rate 0.24 -> 0.32 TFLOP/s, 64 x 64's 0.214 -> 0.235), and the unaligned slowdowns of 64 x 128 and
# 128 x 64 set to what 4095^3 and 4097^3 took against 4096^3 in both sweeps (1.32 -> 1.46: it measured
# 1.44-1.48; 1.33 -> 1.28: 1.25-1.31), after the fitted rates had moved 4095^3 onto 64 x 128 (3605 us where
# 128 x 64 took 3147); with them 2026-12-02's sweep 0.982, 2026-11-30's 0.991 (worst back to 0.87) and
# 2026-11-29's 0.988. Before those two, with the fitted constants: auto within 0.9829 of the fastest timed plan
# (0.9804 before): 2026-12-02's sweep 0.977 -> 0.980, 2026-11-30's 0.985 -> 0.989 (its worst 0.87 -> 0.80),
# the probe 0.978 -> 0.979; 2026-11-29's sweep, not fitted to, 0.986 -> 0.987
DMMA_TILES = {
    "dmma128x128": (
        "dmma128x128k16",
        (128, 128),
        64,
        186880,
        1,
        50.7e12,
        1,
        {"fixed_s": 3.5e-6, "unaligned_slowdown": 1.37},
    ),
    "dmma128x64": (
        "dmma128x64k16",
        (128, 64),
        64,
        87552,
        2,
        52.8e12,
        1,
        {"fixed_s": 1.8e-6, "block_rate": 0.206e12, "unaligned_slowdown": 1.28},
    ),
    "dmma64x64": (
        "dmma64x64k16",
        (64, 64),
        32,
        75776,
        3,
        43.6e12,
        1,
        {"fixed_s": 2.7e-6, "block_rate": 0.235e12, "unaligned_slowdown": 1.3},
    ),
    # the few-row tiles (a layer on 2-32 tokens, x @ W and x @ W.T): memory-bound there, so a memory term,
    # the weight's bytes at `bandwidth`, and at least the share of the SMs with the most blocks at
    # `sm_bandwidth` (an SM drew 34-44 GB/s of a weight with one block or two). Fitted on the H200
    # (2026-11-29): the memory term on benchmarks/results/probe-dmma-few-rows-* (90 products, 2-64 rows
    # against weights of 3072 x 1024 to 8192^2, both layouts, every DMMA tile at 1-16 splits), the rates on
    # that and bench sweep's float64 timings of every named plan (at 2048^3-8192^3 the 32-row tile ran at
    # 0.80-0.83 of the 128 x 64 tile's rate, the 16-row one at 0.55-0.63). The plan the model picks among the
    # probe's timed ones came within 0.976 of the fastest (geometric mean), cuBLAS DGEMM over it 0.905 (0.747
    # with the 64-row tiles alone); bench sweep float64 then measured auto within 0.979 of its fastest plan
    "dmma16x128": (
        "dmma16x128k16",
        (16, 128),
        16,
        77824,
        2,
        34.9e12,
        1,
        {"fixed_s": 4.01e-6, "block_rate": 0.188e12, "unaligned_slowdown": 1.3, **FEW_ROW_MEMORY},
    ),
    "dmma32x128": (
        "dmma32x128k16",
        (32, 128),
        32,
        88064,
        2,
        42e12,
        1,
        {"fixed_s": 2.24e-6, "block_rate": 0.16e12, "unaligned_slowdown": 1.3, **FEW_ROW_MEMORY},
    ),
    # the tiny tile: a batch of products of 17-40 a side (a product or four a tile), at ten blocks an SM
    # where dmma64x64 runs three, so a wave holds 3.3x the products' loads in flight; memory-bound there,
    # so a memory term (the operands' bytes at 4.0 TB/s: 10000 32^3 products drew 4.06, smaller ones less).
    # On the H200 (2026-12-01, benchmarks/results/probe-dmma32x32-*: 41 batches of 1-64 a side and 8 few
    # products of N up to 64) it ran 20000 24^3 products in 78.5 us against dmma64x64's 158, 10000 32^3 in
    # 60.6 against 89; a wave of blocks took dmma's floor (2.3-2.7 us at K up to 16). Its rate is dmma64x64's
    # scaled by the smaller tile's fragment reads, its block rate a third of dmma64x64's (half the warps, a
    # quarter of the tile): auto's plan among the probe's timed rows within 0.991 of the fastest (geometric
    # mean; 0.82 at worst, 4096 16^3 products on small_stream where this tile ran 0.82 of its time). auto
    # takes it for a C of at most 64 columns
    "dmma32x32": (
        "dmma32x32k16",
        (32, 32),
        16,
        19456,
        10,
        24e12,
        1,
        {"fixed_s": 3e-6, "block_rate": 0.07e12, "unaligned_slowdown": 1.3, "bandwidth": 4.0e12, "auto_max_n": 64},
    ),
}


# --- matrix-vector products (cuda/matmul_gemv.cu): C of one column (gemv_n1: A @ x, a warp 4 rows of A,
# 16-byte loads along K, a block 32 rows) or of one row (gemv_m1: x @ B, a lane 4 columns of B, the
# block's warps slicing K, a block 128 columns; gemv_m1x32 the same on 32 columns, 32 slices of K a block;
# gemv_m1bt: x @ W.T, B stored as N rows of K, read in place
# as gemv_n1 reads A, a block 32 columns). Every dtype (halves accumulate in float32 and write their dtype
# or float32), any view, batches, split-K. Memory-bound: each reads its matrix operand once, so the
# cost model's memory term ranks them (bandwidth); rate is the FP32 pipes' FMA rate, never their limit.
# blocks_per_sm: the blocks an SM needs to draw its share of the bandwidth, about 25 KB of loads in
# flight (a 132nd of 3 TB/s over ~1 us): each block keeps 8 warps x 32 lanes x 128 bytes in flight (3
# blocks fit an SM).
# GEMV_BANDWIDTH: about 80% of the H100's 3.35 TB/s; measured (bench sweep, 2026-11-25), these rows read
# 16384 x 16384 float32 in 352 us, 3.05 TB/s, as cuBLAS's gemv does (355-360 us); the model keeps the
# lower figure, which the rows' split choices in that run were planned with (benchmarks/NOTES.md).
# The same kernels for R = 8 or 16 vectors at once (GEMV_R): gemv_n<R> (C of at most R columns: A @ B,
# B's columns staged in shared memory, a block 32 rows x R), gemv_m<R> (at most R rows: each element of B
# times R rows of A, a block R x 128) and gemv_m<R>bt (at most R rows, B read in place as N rows of K, a
# block R x 32). The matrix operand is still read once, and the small one (R vectors) once too, so the
# memory term is the same bytes; the compute term charges the whole R (the kernel computes R rows or
# columns, zero past C's): at R = 16 a 16-bit element of the matrix takes 16 FMAs, which at 3 TB/s keep the
# FP32 pipes about 80% busy, so 2 to 8 rows or columns run at R = 8 (no R = 4: it added a quarter of the
# module's code for shapes R = 8 keeps memory-bound). One block an SM (255 registers: 4 x R accumulators
# a lane), each lane with 128 bytes of loads in flight. Not measured yet: the one-vector rows' constants.
GEMV_BANDWIDTH = 2.6e12
# The K a block covers a memory round trip (round_bytes, in bytes of K): gemv_m1's 8 warps each keep 128
# bytes of a column group in flight, 32 / itemsize rows of K (16 bfloat16 rows, 8 float32), so 256 bytes of
# K a step (gemv_m<R> likewise); gemv_n1 and gemv_m1bt walk each row's K in two groups of 32 lanes x 16
# bytes, 1024 bytes a step (gemv_n<R> and gemv_m<R>bt likewise); gemv_m1x32's 32 slices keep 32 bytes of K
# each in flight (as gemv_m1's warps), 1024 bytes a step too.
# A split of K cuts the round trips of a block: at 1 x 4096 x 4096 bfloat16 (bench sweep's worst gemv,
# H100, 2026-11-26) gemv_m1 ran 25.6 us unsplit (32 round trips a block), 16.8 at 2 splits, 11.6 at 4,
# 10.8 at 8 (cuBLAS 9.9).
GEMV_M1_ROUND_BYTES = 256
GEMV_DOT_ROUND_BYTES = 1024
# gemv_m1x32 (strips of 32 columns, 32 slices of K a block: 1 KiB of K a round trip) puts a narrow B on four
# times gemv_m1's blocks, so it needs no split where gemv_m1 splits K four ways and pays a second launch
# (H200, 2026-11-30: 1 x 1024 x 1024 float16 3.8 us against 6.1, cuBLAS 4.3). Its many blocks each cost a
# launch and the slices' sum however little K they walk: a short K over a wide B is bound by them (1 x 65536
# x 64: 8.7 us on 2048 blocks against gemv_m1's 4.4 on 512; float64 10.3 against 7.9): block_s, fitted
# with planner.SHORT_RUN_DRAW to that probe's choices.
GEMV_NARROW_BLOCK_S = 0.3e-6
# ... and auto leaves it a B of at most this many columns: past them gemv_m1's strips already fill the GPU,
# and its longer runs of each row read faster (bench sweep, H200, 2026-11-30: 1 x 16384 x 16384 float64
# 514 us against 481 at 12 splits, float32 246 against 244, 1 x 16384 x 1024 float32 18.8 against 17.6;
# at 8192 columns gemv_m1x32 was still ahead in every dtype)
GEMV_NARROW_MAX_N = 8192
GEMV_R = (8, 16)  # the rows or columns of C the multi-vector rows compute at most
_GEMV_PAIRS = (("f32", "f32"), ("f64", "f64"), *HALF_PAIRS)


def _gemv(
    name: str, tile, max_m: int | None, max_n: int | None, reads_b_trans: bool = False, round_bytes=None, **extra
) -> Variant:
    names = {(s, d): f"matmul_{name}_{s}" + ("_f32out" if d != s else "") for s, d in _GEMV_PAIRS}
    return Variant(
        name,
        _kernels("matmul_gemv", names, "k_chunk"),
        "any",
        tile,
        (256, 1, 1),
        "k_chunk",
        reads_b_trans=reads_b_trans,
        tier=1,
        max_m=max_m,
        max_n=max_n,
        rate=50e12,
        blocks_per_sm=1,
        bandwidth=GEMV_BANDWIDTH,
        round_bytes=round_bytes,
        min_k_chunk=256,
        **extra,
    )


def _gemv_r(r: int) -> tuple[Variant, ...]:
    """The rows of R = r vectors: gemv_n<r>, gemv_m<r>, gemv_m<r>bt (see above). auto takes them for float32
    alone: float64 and the halves ran 1.1-2.3x slower than the GEMM tiles at 8-16 rows or columns (bench
    sweep, H100, 2026-11-26: 16384 x 16 x 16384 float16 427 us against 192; their arithmetic per byte, R
    FMAs an element and the halves' conversions, is what bounds them there), float32 1.6-2.2x faster."""
    only_f32 = {"auto_dtypes": ("f32",)}
    return (
        _gemv(f"gemv_n{r}", (32, r), None, r, round_bytes=GEMV_DOT_ROUND_BYTES, **only_f32),
        _gemv(f"gemv_m{r}", (r, 128), r, None, round_bytes=GEMV_M1_ROUND_BYTES, b_runs=True, **only_f32),
        _gemv(f"gemv_m{r}bt", (r, 32), r, None, reads_b_trans=True, round_bytes=GEMV_DOT_ROUND_BYTES, **only_f32),
    )


# --- batches of small products (cuda/matmul_small.cu): every dtype (halves accumulate in float32, C in
# their dtype or float32), K any, A and B read in place in either layout, several matrices a block
# (small_per_block), K staged through shared memory in chunks. small: C of at most 256 elements a matrix,
# one output a thread, four matrices' outputs a thread, blocks of 256; small_wide: C up to 64 x 64,
# register tiles of 4 x 8 a lane, a warp's own matrix up to 32 x 32 (four a block of 128), else the
# block's four warps a quarter each. Memory-bound by design (a 16^3 product does 16 FMAs an element it
# moves): bandwidth as the matrix-vector rows'; rate (the FP32 pipes' share it keeps from shared memory)
# and wave_floor_s, what a wave of blocks costs a staged chunk (its loads' round trip, the barrier, the
# chunk's arithmetic). small's fitted on the H200 (2026-11-28: 4.0-4.6 us a wave); small_wide's on the H200
# too (2026-11-28, 16 batches of 8^3-64^3 products in float16 and float32, least squares: 3.5 us a staged
# chunk and 0.137 us for each element a thread stages, a wave; within 0.88-1.14 of the measured times
# where it can win, 0.75-0.83 on the 40-64-wide C of the four-warp groups, where the tile rows are 2-4x
# faster), both since raised 10%: the probes of 2026-12-01 (results/probe-stream-nvidia-h200-*) timed its
# batches of 10^4-10^5 products of 20-32 a side at 1.2-1.3x the model in every dtype, where small_stream
# was faster (by 20% more, float32's 32^3 and 32 x 16 x 8 went to small_stream, 6-31% slower); with C
# stored in whole runs since (store_tile), float32's ran at 1.0-1.2x the raised model
# (results/probe-stream-sliced-*). float64 is not auto's (only by name):
# its 64 accumulators leave three blocks an SM, and it ran 1.0-1.5x slower than dmma64x64 or small at every
# shape but 20^3.
SMALL_PAIRS = (("f32", "f32"), ("f64", "f64"), *HALF_PAIRS)


def _small(name: str, suffix: str, tile: int, wide: bool, **cost) -> Variant:
    names = {(s, d): "matmul_small_" + s + ("_f32out" if d != s else "") + suffix for s, d in SMALL_PAIRS}
    return Variant(
        name,
        _kernels("matmul_small", names, "small", smem=WIDE_SMEM if wide else 0),
        "any",
        (tile, tile),
        (WIDE_THREADS if wide else SMALL_THREADS, 1, 1),
        "small",
        smem=WIDE_SMEM if wide else 0,
        reads_either_layout=True,
        packs=True,
        max_outputs=None if wide else SMALL_THREADS,
        tier=1,
        max_m=64,
        max_n=64,
        **cost,
    )


# small_stream (cuda/matmul_small.cu): batches of products of M, N and K at most 32 in every dtype,
# streamed: four warps a block, each warp its own chunks of matrices through two copy stages (the next
# chunk's bytes in flight while it computes one), 16-byte copies for a packed operand; float32 and float64
# on the FP32 and FP64 pipes (register tiles of 2 x 4 or 4 x 8 a lane), the halves on the tensor cores
# (mma.sync). Four blocks an SM, a warp's 14 KiB holding two stages and the staged operands of the halves'
# products up to 32^3 and float32's up to about 20^3; float32's products past that (to 32^3) and float64's
# (to about 21^3) get three or two blocks an SM with a larger share each (stream_launch: the plan's shared
# memory and grid). sm_80 and newer (cp.async, mma.sync).
# Its time (planner._stream_model): a warp's matrices one after another, each costing an SM (of its 8-16
# warps) STREAM_COST's seconds: a matrix, a staged row of A or B (M + K, or K and N rows as the layouts
# store them), a unit of arithmetic (float32 and float64: the 16 x 16 or 32 x 32 tile a warp computes
# times K over 1024; the halves: 1 or 4 pairs of m16n8k16 tiles a k step of 16) and 32 outputs stored; at
# least the bytes at `bandwidth`. The halves' fitted on the H200 (2026-12-01, benchmarks/results/
# probe-stream-nvidia-h200-2026-12-01.json: 56 timings of 3000-300000 products of 1-32 a side, every layout;
# nonnegative least squares, within 0.72-1.18 of its timings); float32's and float64's below STREAM_COST;
# and the first chunk's copy (wave_floor_s), which
# bench bmm's 10000 4^3 products showed unhidden (7.0 us on this row against 4.3 on small).
# small_stream_in_place: the same walk for the halves' products of M, N and K multiples of 8 (8, 16, 24, 32),
# nothing staged: ldmatrix reads each matrix where its copy lies in the stage (.trans as the layout asks;
# every row of a multiple of 8 elements starts on 16 bytes), one row tile of 16 at a time, C in pairs of
# neighbours. The staging was most of small_stream's time on those shapes (100000 16^3 float16 products:
# 84 -> 47 us on the H200). Its units of arithmetic: a pair of m16n8k16 tiles a row tile of 16 (1 or 2
# pairs) a k step of 16, no staged rows. Fitted on the H200 (2026-12-01, probe-stream-in-place-*: 34 timings
# of 200-100000 products of 8-32 a side, float16 and bfloat16, every layout; nonnegative least squares with
# the launch's own fixed cost, 0.75-1.13 of each timing).
# small_stream_block: the halves' products of M, N and K multiples of 8 up to 64, each block walking its own
# even chunks of the batch (cuda/matmul_small.cu). A matrix costs its SM (of four such blocks) STREAM_COST's
# seconds: the matrix, each 16-byte piece of its copy, its units of arithmetic (a pair of m16n8k16 tiles a
# row tile of 16 and group of up to 32 columns a k step of 16) and 32 outputs; the busiest block's matrices
# times the blocks on its SM (stream_terms). Fitted on the H200 (2026-12-01, probe-stream-block-*: the 19
# timings of products with a side past 32, auto's for this row, 100-50000 products of 8-64 a side, float16,
# every layout; nonnegative least squares of the relative errors with the launch's own fixed cost, 0.88-1.13
# of each timing).
# small_stream's float32 and float64 rows: the relative fit of the products it launches (three and two blocks an
# SM among them; fit_stream_costs.py --relative --row-constant) in results/probe-stream-sliced-nvidia-h200-
# 2026-12-01.json: 29 and 19 timings of 200-300000 products of 1-32 a side, every layout, within 0.69-1.22
# and 0.68-1.77 of each timing, C stored in whole runs (store_tile).
STREAM_COST = {  # (row, itemsize): (a matrix, a staged row, a unit of arithmetic, 32 outputs), seconds an SM
    ("small_stream", 2): (29.0e-9, 0.79e-9, 13.1e-9, 5.3e-9),
    ("small_stream", 4): (28.5e-9, 1.28e-9, 9.53e-9, 5.68e-9),
    ("small_stream", 8): (69.0e-9, 0.61e-9, 37.1e-9, 1.98e-9),
    ("small_stream_in_place", 2): (8.1e-9, 0.0, 6.9e-9, 5.5e-9),
    ("small_stream_block", 2): (43.5e-9, 0.362e-9, 7.19e-9, 1.07e-9),
}
STREAM_PAIRS = (("f32", "f32"), ("f64", "f64"), *HALF_PAIRS)
STREAM_IN_PLACE_MULTIPLE = 8  # cuda/matmul_small.cu: stream_any_layout<true>'s shapes


def _stream(
    name: str, suffix: str, pairs: tuple, side: int, multiple: int, tier: int = 1, sliced: bool = False, **cost
) -> Variant:
    """A streamed row: `name`'s kernels matmul_small_<pair><suffix>, products of M, N and K at most `side`
    (multiples of `multiple`); sliced: its launch follows the product (stream_launch)."""
    names = {(s, d): "matmul_small_" + s + ("_f32out" if d != s else "") + suffix for s, d in pairs}
    return Variant(
        name,
        _kernels("matmul_small", names, "small", smem=STREAM_MOST_SMEM if sliced else STREAM_SMEM),
        "any",
        (side, side),
        (STREAM_THREADS, 1, 1),
        "small",
        smem=STREAM_SMEM,
        min_arch=80,
        reads_either_layout=True,
        packs=True,
        persistent=True,
        tier=tier,
        max_m=side,
        max_n=side,
        max_k=side,
        shape_multiple=multiple,
        sliced=sliced,
        # float32's arithmetic in STREAM_COST (2048 FLOP a unit in 11.1 ns an SM): the model takes STREAM_COST
        rate=24.4e12,
        blocks_per_sm=STREAM_BLOCKS_PER_SM,
        bandwidth=3.6e12,
        **cost,
    )


# The SGEMM tiles that read A or B (or both) stored transposed in place, each a row in all four layouts (the
# plain entry and *at, *bt, *atbt), with one set of constants for every layout: (tile) -> (threads, blocks an
# SM, efficiency, model constants). 128 x 128 and 128 x 64: the plain rows' fits; with the B tiles padded,
# their *bt rows ran x @ W.T at 128 rows 0-8% slower than the plain rows x @ W (H200, 2026-11-28).
# whole_tiles: a block whose warp tiles are partly past M costs a whole one (bench sweep on the H200,
# 2026-11-28: 32-64 rows of x against 1024-16384 wide weights ran 128 x 128 and 128 x 256 BK 16 blocks in
# 0.98-1.03 of the time of the same grid at 128 rows, and 128 x 64 blocks at 64 rows in 0.73-0.79 of it;
# with them counted whole, auto's choice among them and the few-row tiles came closer to the fastest plan).
# The few-row tiles 64 x 128 and 32 x 128 (a layer on 32 or 64 tokens), 8 x 8 a thread: fitted on the H200
# (2026-11-28, benchmarks/NOTES.md) to 416 timings each of the plain and *bt rows at 1-16 splits (x @ W and
# x @ W.T, 16-128 rows, 4096^2-16384^2 weights; least squares of log time: efficiency 0.90-1.00, the *bt rows
# within 0.1 of the plain ones), then each efficiency moved to where auto's choice came closest to the
# fastest timed plan over those products and bench sweep's 145 shapes: 64 x 128 keeps sgemm128x64's 0.92 (its
# 8 x 8 thread tiles turned, which it equals at 2048^3, where 0.95 made auto take it over sgemm128x128).
# The fixed costs (and 128 x 256 BK 8's and 64 x 64's efficiencies, below) refitted after the dependent
# launches with the TF32 rows (2026-12-02, benchmarks/fit_planner.py on that day's float32 and tf32 sweeps,
# 290 cases): auto within 0.979 of the fastest timed plan (0.972 before; worst 0.654 -> 0.737, 231 -> 241
# cases within 3%); on the 2026-11-30 sweeps, not fitted to, float32 0.984 -> 0.989, tf32 0.978 -> 0.979
SGEMM_LAYOUT_TILES = {
    (128, 128): (
        128,
        2,
        1.01,
        {"whole_tiles": True, "fixed_s": 5.06e-6, "block_rate": 0.362e12, "unaligned_slowdown": 1.18},
    ),
    (128, 64): (
        128,
        3,
        0.92,
        {"whole_tiles": True, "fixed_s": 2.28e-6, "block_rate": 0.302e12, "unaligned_slowdown": 1.2},
    ),
    (64, 128): (128, 3, 0.92, {"fixed_s": 4.39e-6, "block_rate": 0.30e12, "unaligned_slowdown": 1.2}),
    (32, 128): (64, 6, 0.80, {"fixed_s": 2.1e-6, "block_rate": 0.14e12, "unaligned_slowdown": 1.06}),
}

_ROWS = [
    *(_teaching(name, threads, tile, rate) for name, (threads, tile, rate) in TEACHING.items()),
    _small("small", "", 16, False, rate=15e12, blocks_per_sm=3, bandwidth=2.6e12, fixed_s=2e-6, wave_floor_s=4.5e-6),
    _small(
        "small_wide",
        "_wide",
        64,
        True,
        rate=30e12,
        blocks_per_sm=WIDE_BLOCKS_PER_SM[4],  # float32's (the model takes each element size's)
        bandwidth=2.6e12,
        fixed_s=2e-6,
        wave_floor_s=3.85e-6,
        stage_element_s=0.151e-6,
        auto_dtypes=("f32", "f16", "bf16"),
    ),
    # wave_floor_s: a warp's (a block's) first chunk, copied before any arithmetic hides it
    _stream("small_stream", "_stream", STREAM_PAIRS, STREAM_MAX, 1, sliced=True, fixed_s=2e-6, wave_floor_s=1.5e-6),
    _stream(
        "small_stream_in_place",
        "_stream_in_place",
        HALF_PAIRS,
        STREAM_MAX,
        STREAM_IN_PLACE_MULTIPLE,
        fixed_s=0.9e-6,
        wave_floor_s=1.4e-6,
    ),
    _stream(
        "small_stream_block",
        "_stream_block",
        HALF_PAIRS,
        BLOCK_MAX,
        BLOCK_MULTIPLE,
        block_chunks=True,
        # small_stream_in_place ran every probed product within 32 a side 8-42% faster (H200, 2026-12-01:
        # 17 shapes and layouts), where the two models are within their errors of each other
        auto_past_side=STREAM_MAX,
        fixed_s=0.9e-6,
        wave_floor_s=2.77e-6,  # a stage's first copy, and the last chunk's arithmetic
    ),
    SIMT,
    # whole_tiles: see SGEMM_LAYOUT_TILES (the 128 x 256 BK 8 blocks ran partly empty tiles in about half
    # the time of whole ones, as their live warp tiles model)
    _sgemm(
        128, 256, 256, 1, 1.00, smem=74496, suffix="k16", whole_tiles=True, fixed_s=8.5e-6, unaligned_slowdown=1.23
    ),  # BK 16
    _sgemm(128, 256, 256, 1, 0.993, smem=49664, fixed_s=6.4e-6, unaligned_slowdown=1.23),  # BK 8, 4 stages
    *(
        _sgemm(bm, bn, threads, bps, eff, reads_a_trans=ta, reads_b_trans=tb, **constants)
        for (bm, bn), (threads, bps, eff, constants) in SGEMM_LAYOUT_TILES.items()
        for ta, tb in ((False, False), (True, False), (False, True), (True, True))
    ),
    _sgemm(64, 64, 64, 6, 0.728, fixed_s=2.25e-6, block_rate=0.144e12, unaligned_slowdown=1.06),
    _tf32("tf32x3_128x128", "tf32x3", 65e12, tier=1, fixed_s=5.25e-6),
    _tf32("tf32x3_splitsmem_128x128", "tf32x3", 65e12, 169984),
    _tf32("tf32x3_oneacc_128x128", "tf32x3", 65e12),
    # The TF32 rows' rates and fixed costs (this one, tf32_64x64, the two-stage split-smem tile and the
    # 128 x 256, 128 x 128 and 128 x 64 wgmma rows) refitted on 2026-11-29 on three H200 sets at once (the
    # tf32 sweeps of 2026-11-28 and 2026-11-29 and probe-tf32-wgmma: 313 products): the plan the model picks
    # among each product's timed plans came within 0.989 of the fastest timed one in geometric mean (0.976
    # before; sweep 0.963 -> 0.983, the older sweep 0.978 -> 0.993, the probe 0.993 as it was; worst 0.59 ->
    # 0.79); measured as a sweep: 0.846 -> 0.855 of cuBLAS TF32, auto 0.965 -> 0.976 of the best named plan.
    # Refitted again on four sets (the 2026-11-29 sweeps before and after that refit, in git at bb4db6f and
    # c9c3d07; the -28 sweep; the probe: 433 products): this row's fixed cost 6.4 -> 16.4 us, tf32_64x64's
    # rate 80.2 -> 53.9 TFLOP/s, the two-stage tile's fixed cost 5.4 -> 8.4 us and block rate 0.53 -> 0.40
    # TFLOP/s; as a sweep (2026-11-29, session 29) auto came within
    # 0.979 of the best named plan (0.976 before), but few-token x @ W fell to 2stage splits (64 x 4096 x
    # 14336: 0.72). With that sweep as a fifth set: tf32_64x64's rate 57.7 TFLOP/s, the two-stage tile's
    # fixed cost 10.5 us (the model's pick 0.989 -> 0.990 on all five sets, 0.983 -> 0.989 on the new sweep,
    # its worst 0.72 -> 0.80).
    _tf32("tf32_128x128", "tf32", 100e12, tier=1, fixed_s=16.4e-6, unaligned_slowdown=1.9),
    # tf32_64x64's constants: first chosen on 52 TF32 timings on the H200 (2026-11-28: 128^3-2048^3, skinny
    # and long-K products, batches of 24^3 to 128 x 1024 x 64 x 1024, every TF32 and FP32 tile by name), then
    # refitted with the row above (see its comment), its block rate again with the SGEMM rows on 2026-12-02
    # (0.375 -> 0.281 TFLOP/s; see SGEMM_LAYOUT_TILES). Counting whole tiles fits this row's own times better (a
    # half-empty block ran nearly as long as a whole one: 16384 x 32 x 16384 302 us where live warp tiles
    # model 226) but ranks it below tiles that measured slower
    _tf32(
        "tf32_64x64",
        "tf32",
        57.7e12,
        TC_SMEM_64,
        4,
        tier=1,
        tile=(64, 64),
        fixed_s=3e-6,
        block_rate=0.281e12,
        unaligned_slowdown=1.9,
    ),
    _tf32("tf32_splitsmem_128x128", "tf32", 110e12, 137216),
    _tf32(
        "tf32_splitsmem_2stage_128x128",
        "tf32",
        107.5e12,
        102400,
        2,
        tier=1,
        auto_needs_aligned=True,
        fixed_s=10.5e-6,
        block_rate=0.40e12,
        wave="tf32_2stage",
    ),
    _mma((128, 128), (2, 4), 2, 300e12, fixed_s=5e-6, block_rate=2.175e12, unaligned_slowdown=2.1),
    # the small tiles, 4 warps each: rates first assumed from mma128x128's 300 TFLOP/s: 128 x 64 and 64 x 128
    # (the same 64 x 32 warp tile, 12 warps an SM instead of 16, 1.5x the operand bytes a flop) 250; 64 x 64
    # (32 x 32 warp tiles: a fragment load per 2 mmas instead of per 2.7, twice the operand bytes a flop) 200;
    # fitted to the sweeps since (below: 238, 276 and 150). With these the model keeps 4096^3 and larger on the big
    # tiles on every GPU (mma128x128 where no wgmma runs); the small tiles win where the big ones leave
    # SMs idle or tiles empty, and at some mid sizes by whole waves (1536^3, 3072^3 off sm_90).
    # These three and the wgmma rows below (128 x 128 and 128 x 64 rates 5-10% up, 64 x 64's 21% down, fixed
    # costs of 64 x 64, 64 x 32atbt and 64 x 16bt 0.25-0.8 us lower) refitted on the H200's float16 and
    # bfloat16 sweeps of 2026-12-02 (benchmarks/fit_planner.py, 290 shapes, every named plan timed, with the
    # aligning copy at 2 us): auto within 0.9887 of the fastest timed plan (0.9858 before; worst 0.81 -> 0.84);
    # on the 2026-11-30 sweeps, not fitted to, 0.9886 -> 0.9916
    _mma((128, 64), (2, 2), 3, 238e12, fixed_s=5.86e-6, block_rate=1.57e12, unaligned_slowdown=2.1),
    _mma((64, 128), (2, 2), 3, 276e12, fixed_s=3.15e-6, block_rate=1.62e12, unaligned_slowdown=2.3),
    _mma((64, 64), (2, 2), 4, 150e12, fixed_s=3e-6, block_rate=1.057e12, unaligned_slowdown=1.85),
    # rates: float16 / bfloat16 at 4096^3, 6144^3 and 8192^3 in one run (bench sweep, H100, 2026-11-25:
    # benchmarks/results/sweep-float16-* and sweep-bfloat16-*): 128 x 256 761-805 TFLOP/s, reading B
    # transposed 683-758; 128 x 128 596-622, reading B transposed 557-579 (the 128 x 128 rows 10% up since,
    # every layout alike, from the H200's sweeps: see the refit note at the mma rows above)
    _wgmma((128, 256), 780e12, fixed_s=3.25e-6),
    _wgmma((128, 256), 720e12, reads_b_trans=True, fixed_s=3.25e-6),
    _wgmma((128, 128), 671e12, fixed_s=2.48e-6),
    _wgmma((128, 128), 627e12, reads_b_trans=True, fixed_s=2.48e-6),
    # A stored transposed (X.T @ B: read in place through the wgmma's transpose of A; B row-major).
    # Provisional rates, not measured yet: 2.5% under the row-major rows'. Reading B transposed cost
    # 6-8% (720 of 780, 570 of 610 before the refit), but there B comes in a layout of its own (BN rows of K, one box);
    # an A stored transposed arrives in the boxes and swizzle the row-major B already uses, read
    # through the same kind of descriptor, so a smaller loss is assumed
    _wgmma((128, 256), 760e12, reads_a_trans=True, fixed_s=3.25e-6),
    _wgmma((128, 128), 655e12, reads_a_trans=True, fixed_s=2.48e-6),
    # A and B both stored transposed (X.T @ W.T; a product into a transposed C): the transposed-B rows'
    # rates, which they ran at in bench gemm (H100, 2026-11-26: 4096^3 bfloat16 175.9 us against 176.2,
    # 2048^3 25.5 against 25.6, 1024^3 9.1 against 9.1)
    _wgmma((128, 256), 720e12, reads_b_trans=True, reads_a_trans=True, fixed_s=3.25e-6),
    _wgmma((128, 128), 627e12, reads_b_trans=True, reads_a_trans=True, fixed_s=2.48e-6),
    # 128 x 64 tiles (m64n64k16), every layout. Rates: three quarters of the 128 x 128 tiles' (half the columns a k
    # tile's A is read for; 0.72 of them after the refit of 2026-12-02, 5% up here, 10% there). Over bench sweep's
    # float16 shapes on the H200 (2026-11-28: 157 timings by name) the model gave their times within a factor 1.00
    # in geometric mean (the 128 x 128 and 128 x 256 rows' 0.93-0.98), and they were the fastest plan at
    # 192^3-1024^3 and on 16-256 rows against 1024-4096 columns; auto, which had taken them only for C of at most 64
    # columns, now takes them by the model alone (auto against the best named plan there 0.92 -> 0.965)
    *(
        _wgmma((128, 64), rate, reads_b_trans=tb, reads_a_trans=ta, fixed_s=2.5e-6)
        for ta, tb, rate in ((False, False, 483e12), (False, True, 452e12), (True, False, 473e12), (True, True, 452e12))
    ),
    # 64 x 64 tiles (one consumer warpgroup, 13 stages of 16 KiB), every layout: twice the work items of the
    # 128 x 64 tiles, for a layer on few tokens (swapped: the weight's rows on the tile's 64), skinny and
    # mid-size products whose 128-row tiles leave SMs idle. Fitted on the H200 (2026-11-29, benchmarks/
    # NOTES.md: 67 products of 8-4096 rows, 8-14336 columns, K 192-16384, every 128 x 64 and 64 x 64 row at
    # 1-16 splits, and bench sweep's 290 float16 and bfloat16 shapes with these rows timed): a block alone
    # on its SM draws 2.6 TFLOP/s (its 64 rows of a weight at ~80 GB/s), and the grid moved A and B at no
    # more than 4.0 TB/s (since: WGMMA_BANDWIDTH, the zeros staged counted); auto's choice then came within
    # 0.975 of the fastest timed plan over those products (0.970 at 2.2 TFLOP/s and 3.2 TB/s, the first fit).
    *(
        _wgmma(
            (64, 64),
            339e12,
            reads_b_trans=tb,
            reads_a_trans=ta,
            fixed_s=2.25e-6,
            block_rate=2.6e12,
        )
        for ta, tb in ((False, False), (False, True), (True, False), (True, True))
    ),
    # 64 x 32 and 64 x 16 tiles (one consumer, 17 and 20 stages), B stored transposed (the *bt and *atbt layouts: a
    # swapped layer's tokens, K-major): a layer on at most 32 or 16 tokens, whose stages then hold mostly the weight;
    # auto takes them for a C of at most 32 columns as the kernel computes it (a swapped layer's tokens, or a skinny C),
    # the shapes measured. Fitted on the H200 (2026-11-29, benchmarks/results/probe-wgmma-narrow-*: 126 products, 2-64
    # tokens against weights of 1024-14336 a side, both layouts, and skinny-N products, every 64-row tile forced swapped
    # and plain at 1-8 splits; benchmarks/NOTES.md): a block alone draws 1.3 (64 x 32) and 1.0 (64 x 16) TFLOP/s (64 x
    # 32atbt 1.365 and its fixed cost 1.69 us, 64 x 16bt's 1.88, since the refit of 2026-12-02), its
    # grid moves at most WGMMA_BANDWIDTH, a wave stages its tiles' rows at WGMMA_STAGE_RATE an SM (WAVE_FLOOR),
    # and a split's reduction costs 2 us; auto then came within 0.97 of the fastest timed plan over the probe (0.87
    # before these rows)
    *(
        _wgmma(
            (64, bn),
            430e12,
            reads_b_trans=True,
            reads_a_trans=ta,
            fixed_s=fixed_s,
            block_rate=block_rate,
            split_launch_s=2e-6,
            auto_max_n=32,
        )
        for bn, ta, fixed_s, block_rate in (
            (32, False, 2.5e-6, 1.3e12),
            (32, True, 1.69e-6, 1.365e12),
            (16, False, 1.88e-6, 1.0e12),
            (16, True, 2.5e-6, 1.0e12),
        )
    ),
    # TF32 on the wgmma kernel, for float32 products at "tf32" on sm_90 (a row-major B first transposed
    # into scratch, which the model charges). Rates: bench sweep on an H100, 2026-11-25
    # (benchmarks/results/sweep-float32-tf32-*), 4096^3-8192^3 with B's transposing copy included:
    # 128 x 256 351-377 TFLOP/s, 128 x 128 274-289; refitted on the H200 with the mma.sync TF32 rows (see the
    # tf32_128x128 row's comment): 128 x 256 at 353, 128 x 128's fixed cost 1.5 us.
    # All the TF32 wgmma rows' rates and fixed costs refitted again with the SGEMM rows on 2026-12-02 (see
    # SGEMM_LAYOUT_TILES): most fixed costs 0.5-1.3 us lower (the dependent launches; 64 x 32bt's 0.6 us
    # higher), 128 x 128bt's rate 5% up and the narrower tiles' 5-33% down
    _tf32_wgmma((128, 256), 353e12, fixed_s=2.19e-6),
    _tf32_wgmma((128, 128), 310e12, fixed_s=1.5e-6),
    # the narrower tiles at TF32 (128 x 64, 64 x 64, 64 x 32, 64 x 16): layers on few tokens (swapped, the
    # weight on the tile's rows), skinny and mid-size products, attention's values at head size 64. Fitted
    # on the H200 (2026-11-29, benchmarks/results/probe-tf32-wgmma-*: 67 products, x @ W.T on 2-256 tokens
    # against weights of 3072 x 1024 to 8192^2 and 14336 x 4096, skinny N, squares of 256-2048, long K,
    # every TF32 row at 1-16 splits, swapped and plain): the arithmetic at 215 TFLOP/s, and the memory term
    # of _tf32_wgmma. auto takes the 64 x 32 and 64 x 16 rows only where one column of tiles covers C as the
    # kernel computes it (two columns of 64 x 16 tiles stage the weight twice: 32 tokens on them took
    # 78 us where 64 x 32 took 64); auto then came within 0.979 of the fastest timed plan over the probe
    # (0.88 with the 128-row tiles alone), and at 1.006 of cuBLAS TF32 in geometric mean
    # (the 128 x 64 row refitted 2026-11-29 with the rows above: 247 TFLOP/s, 2.4 us)
    _tf32_wgmma((128, 64), 222e12, fixed_s=1.8e-6),
    _tf32_wgmma((64, 64), 215e12, fixed_s=1.88e-6),
    _tf32_wgmma((64, 32), 145e12, fixed_s=3.13e-6, auto_max_n=32),
    _tf32_wgmma((64, 16), 215e12, fixed_s=2.5e-6, auto_max_n=16),
    # The same four tiles reading A stored transposed (K rows of M) as well, through registers: above all a
    # product whose B is row-major, swapped (C^T = B^T @ A^T into C stored transposed), so that B is read in
    # place where the rows above read a transposed copy of it. Fitted on the H200 (2026-11-30, bench sweep at
    # tf32, 145 shapes, every row timed by name: benchmarks/NOTES.md, thirty-sixth session) to the timings
    # within 1.5x of each shape's fastest plan (31-98 a row; log error 0.26-0.32 rms): auto then came within
    # 0.971 of the fastest timed plan over the sweep (0.963 with the rows above's constants)
    # The 128 x 128 tile (2026-12-01): its register loads of A feed twice 128 x 64's columns and it stages
    # 0.67 times the bytes a product. 128 x 128bt's rate with the atbt rows' fixed cost; checked on the H200
    # (benchmarks/results/probe-tf32-rows-*: 30 shapes, every TF32 row timed by name beside cuBLAS TF32):
    # measured at 0.68-1.03 of its model on the products of 40 us and more with K of at least 1024, small
    # batches at up to 1.8 times it and a K of 64-67 at two to four times, as the other wgmma rows there
    # (auto took it for the small batches, the fastest row on each, and not at K = 64-67); auto within 0.99
    # of the fastest timed row in geometric mean (0.90 at worst, 2137 x 1080 x 1055, as before the row),
    # 1.12 times as fast as the table without it; large batches with B
    # row-major and layers on 128-512 tokens gain most (16 x 512 x 4096 x 1024 343.5 -> 247.3 us,
    # 128 x 14336 x 4096 102.5 -> 67.7, 512 x 8192 x 8192 314.0 -> 211.0)
    _tf32_wgmma((128, 128), 295e12, "atbt", fixed_s=4.5e-6),
    _tf32_wgmma((128, 64), 165e12, "atbt", fixed_s=3.75e-6),
    _tf32_wgmma((64, 64), 135e12, "atbt", fixed_s=4.33e-6),
    _tf32_wgmma((64, 32), 100e12, "atbt", fixed_s=3.75e-6, auto_max_n=32),
    _tf32_wgmma((64, 16), 100e12, "atbt", fixed_s=6.0e-6, auto_max_n=16),
    # int8 @ int8 -> int32 on the wgmma kernel (see _int8_wgmma). The 128 x 256 tile ran 1,400-1,580 TOPS
    # at 4096^3-8192^3 on the H200 in two runs (benchmarks/results/int8-nvidia-h200-2026-11-29.json and
    # benchmarks/NOTES.md, thirtieth session); the others' rates PROVISIONAL, in the 16-bit rows'
    # proportions: 128 x 128 at 0.78 of 128 x 256, the narrower tiles (mid-size products; a layer on few
    # tokens, swapped, the weight on the tile's rows) at 0.6, a block alone at twice the 16-bit tiles'
    # rate (half the bytes an operation), the narrowest for a C of at most as many columns as they have
    # (as the TF32 and 16-bit rows)
    _int8_wgmma((128, 256), 1100e12, fixed_s=3.25e-6),
    _int8_wgmma((128, 128), 860e12, fixed_s=2.5e-6),
    _int8_wgmma((128, 64), 650e12, fixed_s=2.5e-6),
    _int8_wgmma((64, 64), 650e12, fixed_s=2.5e-6, block_rate=5.2e12),
    *(
        _int8_wgmma((64, bn), 650e12, fixed_s=2.5e-6, block_rate=2 * rate, auto_max_n=bn)
        for bn, rate in ((32, 1.3e12), (16, 1.0e12))
    ),
    # FP8 @ FP8 on the wgmma kernel (see _fp8_wgmma): the int8 rows' constants but where the H200's FP8 probe
    # (see FP8_SPLIT_LAUNCH_S) fitted others: 128 x 128 at 950 TFLOP/s (auto had taken 128 x 256 at 3072^3,
    # 0.90 of 128 x 128's time), 64 x 32 a block at 3.9 TFLOP/s (a swapped layer on 32 tokens with K = 14336
    # ran 20.4 us on it, 25.5 on the 64 x 64 tile auto had taken)
    _fp8_wgmma((128, 256), 1100e12, fixed_s=3.25e-6),
    _fp8_wgmma((128, 128), 950e12, fixed_s=2.5e-6),
    _fp8_wgmma((128, 64), 650e12, fixed_s=2.5e-6),
    _fp8_wgmma((64, 64), 650e12, fixed_s=2.5e-6, block_rate=5.2e12),
    *(
        _fp8_wgmma((64, bn), 650e12, fixed_s=2.5e-6, block_rate=rate, auto_max_n=bn)
        for bn, rate in ((32, 3.9e12), (16, 2.0e12))
    ),
    _dmma("dmma128x128", *DMMA_TILES["dmma128x128"]),
    _dmma("dmma128x128k32", "dmma128x128k32", (128, 128), 64, 211968, 1, 46e12, 0),
    _dmma("dmma128x64", *DMMA_TILES["dmma128x64"]),
    # refitted with the tiles of DMMA_TILES (above); before, fixed_s 3 us (was 6), from the float64 sweeps'
    # timings, measured on the H200 (2026-11-29, benchmarks/NOTES.md): auto within 0.983 of the fastest timed
    # plan (0.973 before), 32 x 14336 x 4096 on dmma64x128/2 135 us where dmma64x64/1 took 190
    _dmma(
        "dmma64x128",
        "dmma64x128k16",
        (64, 128),
        32,
        108544,
        2,
        54.3e12,
        1,
        {"fixed_s": 2.81e-6, "block_rate": 0.32e12, "unaligned_slowdown": 1.46},
    ),
    _dmma("dmma64x64", *DMMA_TILES["dmma64x64"]),
    _dmma("dmma32x128", *DMMA_TILES["dmma32x128"]),
    _dmma("dmma16x128", *DMMA_TILES["dmma16x128"]),
    _dmma("dmma32x32", *DMMA_TILES["dmma32x32"]),
    # every tile of DMMA_TILES reading A or B (or both) stored transposed in place (the *at, *bt and *atbt
    # entries): the row-major tiles' constants, which the *at and *bt rows' times match for the 64- and
    # 128-row tiles (bench bmm, H200, 2026-11-28: 16-64 products of 256^3, 512 x 512 x 64 and 1024 x 64 x 1024
    # within -3% to +1% of the row-major layout's); the few-row *bt rows' fastest x @ W.T within 0.90-1.10 of
    # their x @ W (median 1.03) on the probe's 2-32 rows
    *(_dmma(name, *DMMA_TILES[name], layout=layout) for name in DMMA_TILES for layout in ("at", "bt", "atbt")),
    _dmma("dmma128x128pipe", "dmma128x128k16pipe", (128, 128), 64, 186880, 1, 46.5e12, 0),
    _dmma("dmma128x64pipe", "dmma128x64k16pipe", (128, 64), 64, 87552, 2, 47e12, 0),
    # float64 at precision="fp64_int8" and float32 at "fp32_int8": the product emulated on the INT8 tensor
    # cores, each the one row of its mode (see _emulated). Constants fitted on the three squares of
    # results/emulated-nvidia-h200-2026-11-29.json: float64 (16 moduli) 14.85 ms at 8192^3, 2.34 at 4096^3,
    # 0.48 at 2048^3 (modelled on the H100's target 15.27, 2.22, 0.58); float32 (9 moduli) 8.49, 1.42, 0.31
    # (modelled 8.59, 1.29, 0.38)
    _emulated("f64", "fp64_int8", rate=76e12, fixed_s=350e-6),
    _emulated("f32", "fp32_int8", rate=136e12, fixed_s=250e-6),
    _gemv("gemv_n1", (32, 1), None, 1, round_bytes=GEMV_DOT_ROUND_BYTES),
    _gemv("gemv_m1", (1, 128), 1, None, round_bytes=GEMV_M1_ROUND_BYTES, b_runs=True),
    _gemv(
        "gemv_m1x32",
        (1, 32),
        1,
        None,
        round_bytes=GEMV_DOT_ROUND_BYTES,
        b_runs=True,
        block_s=GEMV_NARROW_BLOCK_S,
        auto_max_n=GEMV_NARROW_MAX_N,
    ),
    _gemv("gemv_m1bt", (1, 32), 1, None, reads_b_trans=True, round_bytes=GEMV_DOT_ROUND_BYTES),
    # after the one-vector rows, smallest R first: of equal modelled times auto takes the first
    *(row for r in GEMV_R for row in _gemv_r(r)),
]


def _pair(base: Variant) -> Variant:
    """A 16-bit wgmma row of 128 x 128 or 128 x 256 launched as clusters of two blocks (a pair): the blocks
    compute two row tiles of one column tile, each loading its own A and half of their B into both blocks'
    stages (cuda/matmul_wgmma.cuh), so B crosses from L2 once for two tiles; the same kernels as the row's.
    The B of the *bt rows comes in boxes of half the tile's columns (a block's half)."""
    bm, bn = base.tile
    name = base.name.replace(f"{bm}x{bn}", f"{bm}x{bn}pair")
    return replace(base, name=name, cluster=2, rate=base.rate * PAIR_RATE[base.tile], half_sector_slowdown=1.0)


_ROWS += [_pair(v) for v in _ROWS if v.name.startswith("wgmma") and v.tile in PAIR_TILES]
VARIANTS: dict[str, Variant] = {v.name: v for v in _ROWS}
# Each row's place in the table as written: auto takes the first of equal modelled times in this order
# (the larger tile first, say), whatever order VARIANTS' keys come to have (a test that takes rows out
# and puts them back appends them at the end)
ROW_ORDER: dict[str, int] = {v.name: i for i, v in enumerate(_ROWS)}

# Split-K's second pass (cuda/matmul_splitk.cu): the partials (accumulator dtype) added in a fixed
# order into C (output dtype); grid and block by runtime.geometry.splitk_reduce_launch.
REDUCE_SIGNATURE = "PPiiqi" + EPILOGUE  # partial, C, M, N, ldc, splits, the epilogue


def reduce_arguments(partials: int, c: int, m: int, n: int, ldc: int, splits: int, epilogue: tuple) -> tuple:
    """The arguments of a split-K reduction (REDUCE_SIGNATURE), in order."""
    return (partials, c, m, n, ldc, splits, *epilogue)


REDUCE: dict[tuple[str, str], Kernel] = {
    (acc, out): Kernel("matmul_splitk", f"matmul_splitk_reduce_{acc}_{out}", REDUCE_SIGNATURE, waits_for_previous=True)
    for acc, out in (("f32", "f32"), ("f32", "f16"), ("f32", "bf16"), ("f64", "f64"))
}


def accumulator(sfx: str) -> str:
    """The dtype suffix split-K partials are kept in: float64 for float64, int32 for int8 (whose rows never
    split K), float32 for the others."""
    return {"f64": "f64", "s8": "s32"}.get(sfx, "f32")


def algorithms(dtype="float32") -> tuple[str, ...]:
    """The `algorithm=` names for operands of `dtype` (a numpy dtype, "bfloat16", or a kernel suffix such
    as "f16"): "auto" and every variant with a kernel for that input dtype."""
    sfx = dtype if dtype in ITEMSIZE else suffix(as_storage_dtype(dtype))
    return ("auto", *(name for name, v in VARIANTS.items() if any(pair[0] == sfx for pair in v.kernels)))
