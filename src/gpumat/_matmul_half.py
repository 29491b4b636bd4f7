"""float16 / bfloat16 matmul on the tensor cores: the variants, the choice `auto` makes, the launch.

Two kernel families, float32 accumulation, C in the input dtype or (a float32 `out`) in float32:
  mma128x128    cuda/matmul_tc_half.cu: mma.sync m16n8k16, sm_80 and later, any view (16-byte
                cp.async copies where A, B and their strides allow, element-wise loads otherwise).
  wgmma128x256  cuda/matmul_wgmma_half.cu: TMA + wgmma, sm_90a (Hopper) only. The copy engine reads
                only operands whose base address and row stride are 16-byte aligned; any other view
                is first copied (one 2-D device copy) into pool scratch with its stride rounded up.
`auto` (choose) takes, among the variants of AUTO_VARIANTS this GPU runs, the one the cost model says
finishes first, the copies of unaligned operands counted; None when none runs: the caller then runs
the SIMT kernel. On the H100 wgmma128x256 measured
1.05-1.09x cuBLAS at 8192^3 and 0.88-1.07x at 4096^3, mma128x128 about 0.5x (the mma.sync rate);
benchmarks/results/matmul-float16-*.json and matmul-bfloat16-*.json. Both kernels split K for products with few output tiles: block z
writes its partial product to float32 scratch and a second kernel adds the partials in a fixed order
(deterministic), rounding once to C's dtype.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import lru_cache

from . import memory as _memory
from .runtime import memops
from .runtime.geometry import cdiv, splitk_reduce_grid, tiled_grid
from .runtime.kernels import Kernel, manifest

MMA_SIGNATURE = "PPPiiiqqqi"    # A, B, C, M, N, K, lda, ldb, ldc, k_chunk
WGMMA_SIGNATURE = "TTTPiiiqii"  # tensor maps A, B, C; C, M, N, K, ldc, k_chunk, tma_c
REDUCE_SIGNATURE = "PPiiqi"     # partial, C, M, N, ldc, splits
PAIRS = (("f16", "f16"), ("f16", "f32"), ("bf16", "bf16"), ("bf16", "f32"))  # (input, output) suffixes
SPLIT_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
SCRATCH_BANDWIDTH = 2.5e12   # bytes/s of split-K's float32 round trip (H100 figure; a ranking constant)
EXTRA_LAUNCH_S = 6e-6        # the reduction launch and the scratch allocation
COPY_BANDWIDTH = 2.5e12      # bytes/s (read + write) of the 2-D copy that aligns an operand for TMA
COPY_LAUNCH_S = 5e-6         # each such copy's launch and scratch allocation


@dataclass(frozen=True)
class HalfVariant:
    module: str
    tile: tuple[int, int]        # rows x columns of C one block (one work item) covers
    threads: int
    smem: int                    # dynamic shared memory a block asks for
    min_arch: int                # lowest compute capability (x10) that runs it
    only_arch: int | None        # arch-specific code (sm_90a): this compute capability alone
    tma: bool                    # A and B must start on 16 bytes with row strides of 16-byte multiples
    persistent: bool             # grid = min(work items, SMs), blocks walk the work items
    blocks_per_sm: int
    k_align: int                 # split boundaries on multiples of this (a k tile never straddles two)
    flops: float                 # what the kernel sustains on a full H100 (132 SMs), for the split-K model
    kernels: dict

    def grid(self, m: int, n: int, splits: int, sm_count: int) -> tuple[int, int, int]:
        if self.persistent:
            works = cdiv(m, self.tile[0]) * cdiv(n, self.tile[1]) * splits
            return max(1, min(works, sm_count * self.blocks_per_sm)), 1, 1
        return tiled_grid(m, n, *self.tile, layers=splits)


def _kernels(module: str, stem: str, signature: str, smem: int) -> dict:
    return {(src, dst): Kernel(module, f"matmul_{stem}_{src}" + ("_f32out" if dst != src else ""), signature,
                               dynamic_smem=smem) for src, dst in PAIRS}


MMA_SMEM = 65536       # 4 stages of a 128 x 32 A tile and a 32 x 128 B tile, 16-bit elements
WGMMA_SMEM = 230528    # 4 stages of 128 x 64 (A) + 64 x 256 (B), 4 C buffers of 8 KiB, 1 KiB for alignment, the mbarriers
VARIANTS: dict[str, HalfVariant] = {
    "mma128x128": HalfVariant("matmul_tc_half", (128, 128), 256, MMA_SMEM, 80, None, False, False, 2, 32,
                              300e12, _kernels("matmul_tc_half", "mma128x128", MMA_SIGNATURE, MMA_SMEM)),
    "wgmma128x256": HalfVariant("matmul_wgmma_half", (128, 256), 384, WGMMA_SMEM, 90, 90, True, True, 1, 64,
                                650e12, _kernels("matmul_wgmma_half", "wgmma128x256", WGMMA_SIGNATURE, WGMMA_SMEM)),
}
ALGORITHMS = tuple(VARIANTS)
AUTO_VARIANTS = ("mma128x128", "wgmma128x256")  # what `auto` may choose
REDUCE = {"f16": Kernel("matmul_tc_half", "matmul_splitk_reduce_f16", REDUCE_SIGNATURE),
          "bf16": Kernel("matmul_tc_half", "matmul_splitk_reduce_bf16", REDUCE_SIGNATURE)}


def built(name: str) -> bool:
    """Whether the variant's module is in this build (an sm_90a module is skipped when ARCHS lacks 90)."""
    try:
        return VARIANTS[name].module in manifest()["modules"]
    except FileNotFoundError:
        return False


def runs_on(name: str, arch: int, max_smem: int, is_built: bool = True) -> bool:
    v = VARIANTS[name]
    return is_built and arch >= v.min_arch and (v.only_arch is None or arch == v.only_arch) and v.smem <= max_smem


def tma_ready(ptr: int, stride: int, itemsize: int = 2) -> bool:
    """A matrix the copy engine can read: base address and row stride (bytes) multiples of 16."""
    return ptr % 16 == 0 and (stride * itemsize) % 16 == 0


@lru_cache(maxsize=4096)
def choose(m: int, n: int, k: int, arch: int, max_smem: int, aligned: bool,
           have: tuple[str, ...] | None = None, candidates: tuple[str, ...] = AUTO_VARIANTS,
           sm_count: int = 132, unaligned_bytes: int | None = None) -> str | None:
    """What `auto` runs for an m x k times k x n float16/bfloat16 product: among `candidates` this GPU
    runs, the one with the smallest modelled time (plan_seconds, plus the copies that align operands
    for a TMA variant), else None (the SIMT kernel). `aligned`: both operands pass tma_ready;
    `unaligned_bytes`: the bytes of the operands that do not (default: both, when not aligned). `have`:
    the variants in this build (default: looked up)."""
    have = tuple(n for n in VARIANTS if built(n)) if have is None else have
    if unaligned_bytes is None:
        unaligned_bytes = 0 if aligned else 2 * (m * k + k * n)
    best = None
    for name in [n for n in ALGORITHMS if n in candidates]:
        if name not in have or not runs_on(name, arch, max_smem):
            continue
        seconds = plan_seconds(m, n, k, sm_count, name)[0]
        if VARIANTS[name].tma and unaligned_bytes:
            seconds += 2 * unaligned_bytes / COPY_BANDWIDTH + COPY_LAUNCH_S
        if best is None or seconds < best[0]:
            best = (seconds, name)
    return None if best is None else best[1]


def plan(m: int, n: int, k: int, sm_count: int, name: str) -> tuple[int, int]:
    """(splits, k_chunk) for a variant (see plan_seconds)."""
    return plan_seconds(m, n, k, sm_count, name)[1:]


@lru_cache(maxsize=4096)
def plan_seconds(m: int, n: int, k: int, sm_count: int, name: str) -> tuple[float, int, int]:
    """(modelled seconds, splits, k_chunk) for a variant: full waves of work items times one item's time
    at the kernel's rate, plus, for split-K, the scratch round trip and the extra launch; the fastest
    count wins."""
    v = VARIANTS[name]
    tiles = cdiv(m, v.tile[0]) * cdiv(n, v.tile[1])
    slots = sm_count * v.blocks_per_sm
    per_block = v.flops / (132 * v.blocks_per_sm)
    best = None
    for splits in SPLIT_CHOICES:
        k_chunk = k if splits == 1 else cdiv(cdiv(k, splits), v.k_align) * v.k_align
        if splits > 1 and (cdiv(k, k_chunk) != splits or k_chunk < 4 * v.k_align):
            continue
        waves = cdiv(tiles * splits, slots)
        seconds = waves * 2.0 * v.tile[0] * v.tile[1] * k_chunk / per_block
        if splits > 1:
            seconds += (2 * splits + 1) * m * n * 4 / SCRATCH_BANDWIDTH + EXTRA_LAUNCH_S
        if best is None or seconds < best[0]:
            best = (seconds, splits, k_chunk)
    return best


def tensor_map_args(ptr: int, rows: int, cols: int, stride: int, box_cols: int, box_rows: int,
                    itemsize: int = 2) -> dict:
    """cuTensorMapEncodeTiled's shape arguments for a row-major rows x cols matrix (row stride in
    elements): the inner dimension is the columns; boxes of box_cols x box_rows."""
    if not tma_ready(ptr, stride, itemsize):
        raise ValueError("a tensor map needs a 16-byte aligned base and row stride")
    return {"globalAddress": ptr, "globalDim": (cols, rows), "globalStrides": (stride * itemsize,),
            "boxDim": (box_cols, box_rows), "elementStrides": (1, 1)}


ITEMSIZE = {"f16": 2, "bf16": 2, "f32": 4}
NO_MAP = bytes(128)  # the C map's place when C is written by plain stores (tma_c = 0)


def c_map_args(ptr: int, rows: int, cols: int, stride: int, layers: int, itemsize: int) -> dict | None:
    """cuTensorMapEncodeTiled's arguments for C (or split-K's float32 layers, `rows` x `stride` elements
    apart) as a cols x rows x layers tensor with boxes of 128 bytes x 64 rows; None when C's address
    or row stride is not 16-byte aligned, or its rows are not a whole number of 16 bytes: a TMA store
    writes whole 16-byte pieces, so it would run past the last column into the next one's memory
    (C then goes out by plain stores)."""
    if not tma_ready(ptr, stride, itemsize) or (cols * itemsize) % 16:
        return None
    return {"globalAddress": ptr, "globalDim": (cols, rows, layers),
            "globalStrides": (stride * itemsize, rows * stride * itemsize),
            "boxDim": (128 // itemsize, 64, 1), "elementStrides": (1, 1, 1)}


@lru_cache(maxsize=1024)
def tensor_map(sfx: str, ptr: int, rows: int, cols: int, stride: int, box_cols: int, box_rows: int) -> bytes:
    """The 128 bytes of a CUtensorMap for an operand (128-byte swizzle, zero fill outside the matrix),
    cached: it depends on nothing but these numbers."""
    return _encode(sfx, tensor_map_args(ptr, rows, cols, stride, box_cols, box_rows))


@lru_cache(maxsize=1024)
def c_map(sfx: str, ptr: int, rows: int, cols: int, stride: int, layers: int) -> bytes | None:
    """C's CUtensorMap (see c_map_args), or None: plain stores."""
    args = c_map_args(ptr, rows, cols, stride, layers, ITEMSIZE[sfx])
    return None if args is None else _encode(sfx, args)


def _encode(sfx: str, args: dict) -> bytes:
    from .runtime.tensormaps import encode_tiled
    return encode_tiled(sfx, args)
    kind = driver.CUtensorMapDataType
    dtype = {"f16": kind.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, "bf16": kind.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
             "f32": kind.CU_TENSOR_MAP_DATA_TYPE_FLOAT32}[sfx]
    u64, u32 = driver.cuuint64_t, driver.cuuint32_t
    encoded = check(driver.cuTensorMapEncodeTiled(
        dtype, len(args["globalDim"]), args["globalAddress"], [u64(x) for x in args["globalDim"]],
        [u64(x) for x in args["globalStrides"]], [u32(x) for x in args["boxDim"]], [u32(x) for x in args["elementStrides"]],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
    return ctypes.string_at(encoded.getPtr(), 128)


def unaligned_bytes(*operands) -> int:
    """The bytes a TMA variant copies before it starts: the operands (Matrix) tma_ready refuses."""
    return sum(2 * x._height * x._width for x in operands if not tma_ready(x.elements, x._stride))


def resolve(algorithm: str, m: int, n: int, k: int, dev, unaligned: int = 0) -> str | None:
    """The variant a call runs (None: the SIMT kernel); a named variant this GPU cannot run is a
    ValueError, raised before anything is launched. `unaligned`: unaligned_bytes of the operands."""
    if algorithm == "auto":
        return choose(m, n, k, dev.arch, dev.max_smem_optin, not unaligned, sm_count=dev.sm_count,
                      unaligned_bytes=unaligned)
    v = VARIANTS[algorithm]
    if not runs_on(algorithm, dev.arch, dev.max_smem_optin, built(algorithm)):
        where = f"sm_{v.only_arch}a" if v.only_arch else f"sm_{v.min_arch} or newer"
        raise ValueError(f"matmul algorithm {algorithm!r} runs on {where} with {v.smem} bytes of shared memory a "
                         f"block" + ("" if built(algorithm) else " (not in this build)") +
                         f"; this GPU is sm_{dev.arch} with {dev.max_smem_optin}")
    return algorithm


@dataclass(frozen=True)
class _Launch:
    """What one product's launch needs that depends only on its shape, dtypes and GPU (cached)."""
    variant: HalfVariant
    kernel: Kernel
    grid: tuple[int, int, int]
    splits: int
    k_chunk: int
    reduce: Kernel | None
    reduce_grid: tuple[int, int, int]


@lru_cache(maxsize=4096)
def _launch(name: str, m: int, n: int, k: int, sm_count: int, src: str, dst: str) -> _Launch:
    from .matmul import SPLITK_REDUCE
    v = VARIANTS[name]
    splits, k_chunk = plan(m, n, k, sm_count, name)
    kernel = v.kernels[(src, "f32" if splits > 1 else dst)]
    reduce = (SPLITK_REDUCE if dst == "f32" else REDUCE[dst]) if splits > 1 else None
    return _Launch(v, kernel, v.grid(m, n, splits, sm_count), splits, k_chunk, reduce, splitk_reduce_grid(m, n, sm_count))


def run(a, b, out, name: str, dev, stream: int) -> None:
    """C = A @ B with the named variant (resolve() has checked that it can run). A TMA variant reads an
    operand that is not 16-byte aligned from an aligned copy in pool scratch."""
    m, k, n = a._height, a._width, b._width
    src, dst = a._sfx, out._sfx
    L = _launch(name, m, n, k, dev.sm_count, src, dst)
    v = L.variant
    pa, pb, pc = a.elements, b.elements, out.elements
    lda, ldb, ldc = a._stride, b._stride, out._stride
    held: list[tuple[int, int]] = []  # scratch blocks, freed stream-ordered after the launches
    pool = dev.memory if (v.tma or L.splits > 1) and dev.memory is not None else None
    try:
        if v.tma and not (tma_ready(pa, lda) and tma_ready(pb, ldb)):
            pool = pool or _memory.device_pool(dev)
            pa, lda = _aligned(pa, lda, m, k, pool, stream, held)
            pb, ldb = _aligned(pb, ldb, k, n, pool, stream, held)
        c, c_ld, c_sfx = pc, ldc, dst
        if L.splits > 1:
            pool = pool or _memory.device_pool(dev)
            nbytes = L.splits * m * n * 4
            c, c_ld, c_sfx = pool.alloc(nbytes, stream), n, "f32"
            held.append((c, nbytes))
        block = (v.threads, 1, 1)
        if v.tma:
            mc = c_map(c_sfx, c, m, n, c_ld, L.splits)
            L.kernel(L.grid, block, tensor_map(src, pa, m, k, lda, 64, v.tile[0]), tensor_map(src, pb, k, n, ldb, 64, 64),
                     mc or NO_MAP, c, m, n, k, c_ld, L.k_chunk, int(mc is not None), smem=v.smem, stream=stream, device=dev)
        else:
            L.kernel(L.grid, block, pa, pb, c, m, n, k, lda, ldb, c_ld, L.k_chunk, smem=v.smem, stream=stream, device=dev)
        if L.reduce is not None:
            L.reduce(L.reduce_grid, (256, 1, 1), c, pc, m, n, ldc, L.splits, stream=stream, device=dev)
    finally:
        for ptr, nbytes in held:
            pool.free(ptr, nbytes, stream)  # stream-ordered: reused only after these launches


def _aligned(ptr: int, stride: int, rows: int, cols: int, pool, stream: int, held: list) -> tuple[int, int]:
    """(address, row stride) of a rows x cols operand, or of an aligned copy of it (stride rounded up to
    8 elements) when the copy engine cannot read it in place."""
    if tma_ready(ptr, stride):
        return ptr, stride
    aligned_stride = cdiv(cols, 8) * 8
    nbytes = rows * aligned_stride * 2
    dst = pool.alloc(nbytes, stream)
    held.append((dst, nbytes))
    memops.copy_2d_async(dst, aligned_stride * 2, ptr, stride * 2, cols * 2, rows, dst_on_host=False,
                          src_on_host=False, stream=stream)
    return dst, aligned_stride
