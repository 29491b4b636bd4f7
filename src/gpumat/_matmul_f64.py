"""float64 matmul on the FP64 tensor cores (cuda/matmul_dmma.cu, sm_80 and later): the variants, the
choice `auto` makes (variant and split-K count, a pure function of the shape and the GPU's facts), and
the launch. IEEE FP64 arithmetic in a fixed order: deterministic, no atomics.

matmul.py routes float64 here for the names in VARIANTS and for "auto" wherever `choose` finds a
variant the GPU can run; elsewhere (before sm_80, or too little shared memory a block) "auto" keeps the
SIMT kernel."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from .runtime.geometry import Plan, cdiv, splitk_reduce_grid, tiled_grid
from .runtime.kernels import Kernel

SIGNATURE = "PPPiiiqqqi"  # A, B, C, M, N, K, lda, ldb, ldc, k_chunk (block z multiplies k in [z*k_chunk, (z+1)*k_chunk))
MIN_ARCH = 80             # mma.sync .f64 (m8n8k4) needs sm_80; sm_90 adds m16n8k8, which these kernels use there
AUTO_ARCHS = (80, 90, 100)  # full-rate FP64 tensor cores (A100, H100/H200, B200); the other sm_8x/sm_12x
                            # parts run FP64 at 1/64 rate either way, and "auto" keeps the SIMT kernel there
K_ALIGN = 16              # split boundaries on whole k tiles, even: every split keeps the 16-byte copies
MIN_K_CHUNK = 64          # no split shorter than this (each split pays a pipeline fill and a scratch pass)


@dataclass(frozen=True)
class DmmaVariant:
    kernel: Kernel
    tile: tuple[int, int]  # rows x cols of C one block covers
    warp_rows: int         # rows of a warp tile (warp tiles are warp_rows x 32)
    smem: int              # dynamic shared memory bytes a launch asks for
    blocks_per_sm: int     # resident blocks an SM holds (launch bounds and shared memory)
    flops: float           # what the kernel sustains on a full H100 (132 SMs), for the cost model
    threads: int = 256

    def grid(self, m: int, n: int, splits: int = 1) -> tuple[int, int, int]:
        return tiled_grid(m, n, *self.tile, layers=splits)


def _variant(name: str, tile, warp_rows: int, smem: int, blocks_per_sm: int, flops: float) -> DmmaVariant:
    kernel = Kernel("matmul_dmma", f"matmul_{name}_f64", SIGNATURE, dynamic_smem=smem)
    threads = tile[0] // warp_rows * tile[1] // 32 * 32  # warp tiles are warp_rows x 32
    return DmmaVariant(kernel, tile, warp_rows, smem, blocks_per_sm, flops, threads)


# name -> variant. 128 x 128 tiles: 2 x 4 warps of 64 x 32, one block an SM (64 accumulators a thread);
# k tiles of 16 in 5 cp.async stages, or of 32 in 3. 128 x 64: 2 x 2 warps of 64 x 32, 3 stages, two
# blocks an SM. 64 x 128: 2 x 4 warps of 32 x 32, 4 stages, two blocks an SM. The *pipe variants run the
# same tiles with the fragment reads one k step ahead of the mmas (see cuda/matmul_dmma.cu).
# flops: sustained on the H100 at 4096^3 and 8192^3 (benchmarks/results/matmul-float64-*.json; runs of
# one kernel and plan spread by up to 7%, so these rank the shapes only roughly). The *pipe variants were
# not measured yet: their figure is a placeholder, and auto does not choose them.
VARIANTS: dict[str, DmmaVariant] = {
    "dmma128x128": _variant("dmma128x128k16", (128, 128), 64, 186880, 1, 46e12),
    "dmma128x128k32": _variant("dmma128x128k32", (128, 128), 64, 211968, 1, 46e12),
    "dmma128x64": _variant("dmma128x64k16", (128, 64), 64, 87552, 2, 48e12),
    "dmma64x128": _variant("dmma64x128k16", (64, 128), 32, 108544, 2, 47e12),
    "dmma128x128pipe": _variant("dmma128x128k16pipe", (128, 128), 64, 186880, 1, 46e12),
    "dmma128x64pipe": _variant("dmma128x64k16pipe", (128, 64), 64, 87552, 2, 48e12),
}
# What "auto" chooses among (the k32 tile ran 0.74-0.87x of the others on the odd shapes).
AUTO = ("dmma128x64", "dmma128x128", "dmma64x128")
REDUCE = Kernel("matmul_dmma", "matmul_splitk_reduce_f64", "PPiiqi")  # partial, C, M, N, ldc, splits
SPLIT_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
SCRATCH_BANDWIDTH, LAUNCH_S = 2.5e12, 4e-6  # split-K's scratch round trip and its second launch


def _live(length: int, tile: int, warp: int) -> float:
    """Tiles along one axis, the edge tile counted by the share of its warp tiles that have work (dead
    warps skip the math), at least half a tile."""
    full, rest = divmod(length, tile)
    return full + (max(0.5, cdiv(rest, warp) * warp / tile) if rest else 0.0)


@lru_cache(maxsize=4096)
def plan_seconds(m: int, n: int, k: int, algorithm: str, sm_count: int = 132) -> tuple[float, Plan]:
    """Modeled seconds and the split-K plan for one variant: full waves of blocks, each block's time its
    FMA work at the variant's rate an SM, plus split-K's scratch round trip."""
    v = VARIANTS[algorithm]
    bm, bn = v.tile
    tiles = _live(m, bm, v.warp_rows) * _live(n, bn, 32)
    slots = sm_count * v.blocks_per_sm
    block_rate = v.flops / (132 * v.blocks_per_sm)
    best = None
    for splits in SPLIT_CHOICES:
        k_chunk = k if splits == 1 else cdiv(cdiv(k, splits), K_ALIGN) * K_ALIGN
        if splits > 1 and (cdiv(k, k_chunk) != splits or k_chunk < MIN_K_CHUNK):
            continue
        waves = max(1, math.ceil(tiles * splits / slots - 0.02))
        seconds = waves * 2.0 * bm * bn * max(k_chunk, 16) / block_rate
        if splits > 1:
            seconds += (2 * splits + 1) * m * n * 8 / SCRATCH_BANDWIDTH + LAUNCH_S
        if best is None or seconds < best[0] - 1e-12:
            best = (seconds, Plan(algorithm, splits, k_chunk))
    return best


def usable(algorithm: str, arch: int, max_smem: int) -> bool:
    return arch >= MIN_ARCH and VARIANTS[algorithm].smem <= max_smem


@lru_cache(maxsize=4096)
def choose(m: int, n: int, k: int, arch: int, sm_count: int, max_smem: int) -> Plan | None:
    """What "auto" runs for an m x k times k x n float64 product: the AUTO variant and split count with
    the least modeled time among those the GPU can run, or None (run the SIMT kernel) on GPUs without
    full-rate FP64 tensor cores (AUTO_ARCHS) or where no variant fits the shared memory a block gets."""
    if arch not in AUTO_ARCHS:
        return None
    names = [name for name in AUTO if usable(name, arch, max_smem)]
    if not names:
        return None
    return min((plan_seconds(m, n, k, name, sm_count) for name in names), key=lambda sp: sp[0])[1]


def plan_for(m: int, n: int, k: int, algorithm: str, arch: int, sm_count: int, max_smem: int) -> Plan | None:
    """The plan a call runs: `choose` for "auto", else the named variant with its own split count. A named
    variant the GPU cannot run is a ValueError, raised before anything is launched."""
    if algorithm == "auto":
        return choose(m, n, k, arch, sm_count, max_smem)
    v = VARIANTS[algorithm]
    if arch < MIN_ARCH:
        raise ValueError(f"matmul algorithm {algorithm!r} needs the FP64 tensor cores of compute capability 8.0 "
                         f"or newer; this GPU is sm_{arch}: use 'auto' or 'simt64x64'")
    if v.smem > max_smem:
        raise ValueError(f"matmul algorithm {algorithm!r} needs {v.smem} bytes of shared memory a block; this GPU "
                         f"gives {max_smem}: use 'auto' or 'simt64x64'")
    return plan_seconds(m, n, k, algorithm, sm_count)[1]


def reduce_grid(m: int, n: int, sm_count: int) -> tuple[int, int, int]:
    return splitk_reduce_grid(m, n, sm_count)


def launch(p: Plan, a, b, out, dev, stream: int) -> None:
    """Enqueue plan p for out = a @ b (float64 Matrix operands already checked, k > 0)."""
    from . import memory as _memory
    m, k, n = a._height, a._width, b._width
    v = VARIANTS[p.algorithm]
    if p.splits == 1:
        v.kernel(v.grid(m, n), (v.threads, 1, 1), a.elements, b.elements, out.elements, m, n, k, a._stride,
                 b._stride, out._stride, k, smem=v.smem, stream=stream, device=dev)
        return
    nbytes = p.splits * m * n * 8
    pool = dev.memory or _memory.device_pool(dev)
    scratch = pool.alloc(nbytes, stream)
    try:
        v.kernel(v.grid(m, n, p.splits), (v.threads, 1, 1), a.elements, b.elements, scratch, m, n, k, a._stride,
                 b._stride, n, p.k_chunk, smem=v.smem, stream=stream, device=dev)
        REDUCE(reduce_grid(m, n, dev.sm_count), (256, 1, 1), scratch, out.elements, m, n, out._stride, p.splits,
               stream=stream, device=dev)
    finally:
        pool.free(scratch, nbytes, stream)  # stream-ordered: reused only after these launches


def takes(algorithm: str, m: int, n: int, k: int, dev) -> bool:
    """Whether a float64 call with this algorithm runs here (named variant, or "auto" with a plan)."""
    if algorithm in VARIANTS:
        return True
    return algorithm == "auto" and choose(m, n, k, dev.arch, dev.sm_count, dev.max_smem_optin) is not None


def run(a, b, out, algorithm: str, dev, stream: int) -> None:
    """out = a @ b on the FP64 tensor cores with `algorithm` ("auto" or a name in VARIANTS)."""
    m, k, n = a._height, a._width, b._width
    p = plan_for(m, n, k, algorithm, dev.arch, dev.sm_count, dev.max_smem_optin)
    if p is None:
        raise ValueError("matmul: no FP64 tensor-core kernel runs on this GPU")
    launch(p, a, b, out, dev, stream)


def run_plan(p: Plan, a, b, out, stream=None) -> None:
    """Run a given plan (tests force split-K counts and chunks this way)."""
    from .runtime.streams import stream_handle
    from .matrix import done_on, operand_device, use_on
    dev = operand_device((a, "a"), (b, "b"), (out, "out"))
    s = stream_handle(stream, dev)
    m, k = a.shape
    if p.k_chunk <= 0 or p.splits < 1 or cdiv(k, p.k_chunk) > p.splits:
        raise ValueError(f"run_plan: {p.splits} splits of {p.k_chunk} do not cover K = {k}")
    with dev.lock:
        plan_for(1, 1, 1, p.algorithm, dev.arch, dev.sm_count, dev.max_smem_optin)  # the GPU can run it
        use_on(s, a, b, out)
        launch(p, a, b, out, dev, s)
        done_on(s, a, b, out)
