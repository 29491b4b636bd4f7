"""Dense matrix multiply, C = A @ B, float32: argument checks, variant choice, launch."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ._driver import device
from ._geometry import cdiv, flat_grid, tiled_grid
from ._kernels import Kernel
from ._memory import alloc, fill_2d, free
from ._precision import check_precision, resolve as resolve_precision
from .matrix import Matrix, as_matrix, check_out

TEACHING_SIGNATURE = "PPPiiiqqq"  # A, B, C, M, N, K, lda, ldb, ldc
FAST_SIGNATURE = "PPPiiiqqqi"      # ... and k_chunk: block z multiplies k in [z*k_chunk, (z+1)*k_chunk)


@dataclass(frozen=True)
class Variant:
    kernel: Kernel
    block: tuple[int, int, int]
    tile: tuple[int, int]  # rows x cols of C one block covers
    smem: int = 0          # dynamic shared memory bytes a launch asks for

    def grid(self, m: int, n: int, splits: int = 1) -> tuple[int, int, int]:
        return tiled_grid(m, n, *self.tile, layers=splits)


@dataclass(frozen=True)
class FastVariant(Variant):
    blocks_per_sm: int = 1     # resident blocks a SM holds (from the kernels' launch bounds)
    efficiency: float = 1.0    # relative FFMA throughput of a full tile, measured on the H100


def _teaching(name: str, threads: int, tile: int) -> Variant:
    return Variant(Kernel("matmul", f"matmul_{name}", TEACHING_SIGNATURE), (threads, threads, 1), (tile, tile))


def _sgemm(bm: int, bn: int, threads: int, blocks_per_sm: int, efficiency: float, smem: int = 0) -> FastVariant:
    kernel = Kernel("matmul_fast", f"matmul_sgemm_{bm}x{bn}", FAST_SIGNATURE, dynamic_smem=smem)
    return FastVariant(kernel, (threads, 1, 1), (bm, bn), smem, blocks_per_sm, efficiency)


VARIANTS: dict[str, Variant] = {
    "naive": _teaching("naive", 16, 16),
    "tiled16": _teaching("tiled16", 16, 16),
    "tiled32": _teaching("tiled32", 32, 32),
    "tiled16x64": _teaching("tiled16x64", 16, 16),
    "sgemm128x128": _sgemm(128, 128, 256, 2, 1.00),
    "sgemm128x64": _sgemm(128, 64, 128, 4, 0.90),
    "sgemm64x64": _sgemm(64, 64, 64, 6, 0.90),
}
FAST = {name: v for name, v in VARIANTS.items() if isinstance(v, FastVariant)}
ALGORITHMS = ("auto", *VARIANTS)
SPLITK_REDUCE = Kernel("matmul_fast", "matmul_splitk_reduce", "PPiiqi")  # partial, C, M, N, ldc, splits
SPLIT_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
K_ALIGN = 32  # split boundaries on multiples of 32 keep every split's A loads 128-bit and its k tiles full


@dataclass(frozen=True)
class Plan:
    algorithm: str
    splits: int = 1
    k_chunk: int = 0  # k per split (K when splits == 1)


def _live_tiles(length: int, tile: int, warp_tile: int) -> float:
    """Tiles along one axis, the edge tile counted by the share of its warp tiles that have work."""
    full, rest = divmod(length, tile)
    return full + (cdiv(rest, warp_tile) * warp_tile / tile if rest else 0.0)


@lru_cache(maxsize=4096)
def plan(m: int, n: int, k: int, sm_count: int = 132, only: str | None = None, max_smem: int = 227 * 1024) -> Plan:
    """Pick the fast kernel, the split-K count and the k chunk for an m x k times k x n product.

    A small cost model: time = full waves of tiles x the time of one tile (its FFMA count over the
    kernel's relative efficiency), plus, for split-K, the scratch round trip through memory.
    Tiles along each edge count only their live warp tiles, since dead warps skip the math.
    """
    peak_flops, bandwidth, launch_s = 46e12, 2.5e12, 4e-6
    best = None
    for name, v in FAST.items():
        if (only is not None and name != only) or (v.smem > max_smem and only is None):
            continue  # a kernel needing more shared memory than this GPU gives a block is never chosen
        bm, bn = v.tile
        tiles = _live_tiles(m, bm, 32) * _live_tiles(n, bn, 64)
        slots = sm_count * v.blocks_per_sm
        for splits in SPLIT_CHOICES:
            k_chunk = k if splits == 1 else cdiv(cdiv(k, splits), K_ALIGN) * K_ALIGN
            if splits > 1 and (cdiv(k, k_chunk) != splits or k_chunk < 128):
                continue
            waves = max(1.0, cdiv(math.ceil(tiles * splits), slots))
            seconds = waves * 2.0 * bm * bn * k_chunk * slots / (peak_flops * v.efficiency)
            if splits > 1:
                seconds += (2 * splits + 1) * m * n * 4 / bandwidth + launch_s
            if best is None or seconds < best[0]:
                best = (seconds, Plan(name, splits, k_chunk))
    return best[1]


def choose_algorithm(m: int, n: int, k: int) -> str:
    """What "auto" runs for an m x k times k x n product."""
    return plan(m, n, k).algorithm


def check_operands(a, b, out, algorithm: str) -> tuple[int, int, int]:
    """Validate everything before any allocation or launch; returns (M, N, K)."""
    a, b = as_matrix(a, "a"), as_matrix(b, "b")
    if algorithm not in ALGORITHMS and algorithm not in TC_ALGORITHMS:
        raise ValueError(f"unknown matmul algorithm {algorithm!r}; choose one of "
                         f"{', '.join((*ALGORITHMS, *TC_ALGORITHMS))}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned: a.width {k} != b.height {k2}")
    check_out(out, (m, n), (a, b), "matmul")
    return m, n, k


def matmul(a: Matrix, b: Matrix, out: Matrix | None = None, algorithm: str = "auto",
           precision: str | None = None) -> Matrix:
    """C = a @ b for float32 matrices of any shape (views welcome). Returns out (new if None).

    precision: "float32" (exact FP32 kernels), "tf32x3" (FP32-level accuracy on the tensor cores) or
    "tf32" (one TF32 pass, ~1e-3 relative error); None takes the current default (gm.matmul_precision
    block, else gm.set_matmul_precision, else "float32"). A named algorithm runs at its own
    precision. Below compute capability 8.0, and on GPUs that give a block less shared memory than
    the tensor-core kernels need (99 KiB parts), the tensor-core modes run the exact FP32 kernels.
    """
    m, n, k = check_operands(a, b, out, algorithm)
    mode = matmul_mode(algorithm, precision)
    if out is None:
        out = Matrix._allocate(m, n)
    if m == 0 or n == 0:
        return out
    if k == 0:
        fill_2d(out.elements, out.stride * 4, 0, n, m)
        return out
    dev = device()
    if mode != "float32":
        aligned = all(x.elements % 16 == 0 and x.stride % 4 == 0 for x in (a, b))
        name = tc_algorithm(mode, algorithm, dev.arch, dev.max_smem_optin, (m, n, k), dev.sm_count, aligned)
        if name is not None:
            tc_launch_config(m, n, k, name, dev.sm_count).run(a, b, out)
            return out
        algorithm = "auto"  # no TF32 tensor cores (or not enough shared memory) here: the exact FP32 kernels
    launch_config(m, n, k, algorithm, dev.sm_count, dev.max_smem_optin).run(a, b, out)
    return out


@dataclass(frozen=True)
class Launch:
    """Everything about one product's launch that depends only on its shape (cached per shape)."""
    variant: Variant
    grid: tuple[int, int, int]
    splits: int = 0     # 0: a teaching kernel (no k_chunk argument); 1: a fast kernel; more: split-K
    k_chunk: int = 0
    reduce_grid: tuple[int, int, int] = (1, 1, 1)

    @classmethod
    def for_plan(cls, p: Plan, m: int, n: int, sm_count: int) -> "Launch":
        v = VARIANTS[p.algorithm] if p.algorithm in VARIANTS else TC_VARIANTS[TC_ALGORITHMS[p.algorithm]][p.algorithm]
        return cls(v, v.grid(m, n, p.splits), p.splits, p.k_chunk, flat_grid(m * n, 256, 16 * sm_count))

    def run(self, a: Matrix, b: Matrix, out: Matrix) -> None:
        (m, k), n = a.shape, b.width
        kernel, block, smem = self.variant.kernel, self.variant.block, self.variant.smem
        if self.splits == 0:
            kernel(self.grid, block, a.elements, b.elements, out.elements, m, n, k, a.stride, b.stride, out.stride)
        elif self.splits == 1:
            kernel(self.grid, block, a.elements, b.elements, out.elements, m, n, k, a.stride, b.stride, out.stride, k,
                   smem=smem)
        else:
            scratch = alloc(self.splits * m * n * 4)
            try:
                kernel(self.grid, block, a.elements, b.elements, scratch, m, n, k, a.stride, b.stride, n, self.k_chunk,
                       smem=smem)
                SPLITK_REDUCE(self.reduce_grid, (256, 1, 1), scratch, out.elements, m, n, out.stride, self.splits)
            finally:
                free(scratch, nbytes=self.splits * m * n * 4)  # stream-ordered: reused only after these launches


@lru_cache(maxsize=4096)
def launch_config(m: int, n: int, k: int, algorithm: str, sm_count: int, max_smem: int) -> Launch:
    if algorithm == "auto" or algorithm in FAST:
        p = plan(m, n, k, sm_count, None if algorithm == "auto" else algorithm, max_smem)
        return Launch.for_plan(p, m, n, sm_count)
    variant = VARIANTS[algorithm]
    return Launch(variant, variant.grid(m, n))


def run_plan(p: Plan, a: Matrix, b: Matrix, out: Matrix) -> None:
    """Run a given plan (tests and tuning force split-K counts this way)."""
    Launch.for_plan(p, a.height, b.width, device().sm_count).run(a, b, out)


# --- Tensor cores (cuda/matmul_tc.cu): TF32 mma.sync kernels for the "tf32x3" and "tf32" precisions ---

TC_SMEM = 104448      # 3 stages of a 128 x 32 A tile (rows padded to 36) and a 32 x 128 B tile
TC_MIN_ARCH = 80      # mma.sync TF32 needs sm_80


def _tc(name: str, flops: float, smem: int = TC_SMEM, blocks_per_sm: int = 1) -> FastVariant:
    """flops: what the kernel sustains on a whole H100 (132 SMs), for the split-K model."""
    kernel = Kernel("matmul_tc", f"matmul_{name}_f32", FAST_SIGNATURE, dynamic_smem=smem)
    return FastVariant(kernel, (256, 1, 1), (128, 128), smem, blocks_per_sm, flops / (132 * blocks_per_sm))


# By precision. "auto" runs the first variant of the mode that fits the GPU's shared memory a block.
#   *_128x128: the operands are rounded / split in registers, by each warp that reads them.
#   *_splitsmem_128x128: rounded / split once per element into shared memory, read as mma fragments
#   (needs 134 / 166 KiB of shared memory a block); *_2stage: two cp.async stages and at most 128
#   registers, so two blocks share an SM (100 KiB each).
#   tf32x3_oneacc_128x128: all three products in one tensor-core accumulator (the published
#   scheme; less accurate, kept for the comparison).
TC_VARIANTS: dict[str, dict[str, FastVariant]] = {
    "tf32x3": {"tf32x3_128x128": _tc("tf32x3_128x128", 65e12),
               "tf32x3_splitsmem_128x128": _tc("tf32x3_splitsmem_128x128", 65e12, 169984),
               "tf32x3_oneacc_128x128": _tc("tf32x3_oneacc_128x128", 65e12)},
    "tf32": {"tf32_128x128": _tc("tf32_128x128", 110e12),
             "tf32_splitsmem_128x128": _tc("tf32_splitsmem_128x128", 110e12, 137216),
             "tf32_splitsmem_2stage_128x128": _tc("tf32_splitsmem_2stage_128x128", 110e12, 102400, 2)},
}
TC_ALGORITHMS = {name: mode for mode, variants in TC_VARIANTS.items() for name in variants}  # name -> mode
# What "auto" chooses among, with each kernel's full-tile speed relative to the first (measured on the
# H100 at 4096^3 and 8192^3, benchmarks/NOTES.md): the modeled time of its plan over this factor
# decides. The split-in-shared-memory tf32x3 kernel (0.85x) and the one-accumulator one (less
# accurate) are never chosen. The two-block tf32 kernel only for operands that take the 16-byte
# copies (TC_AUTO_ALIGNED_ONLY): with 4-byte copies (4097^3, 3001x3011x2999) it measured 0.85-0.9x.
TC_AUTO: dict[str, dict[str, float]] = {
    "tf32x3": {"tf32x3_128x128": 1.0},
    "tf32": {"tf32_128x128": 1.0, "tf32_splitsmem_2stage_128x128": 1.15},
}
TC_AUTO_ALIGNED_ONLY = {"tf32_splitsmem_2stage_128x128"}


def matmul_mode(algorithm: str, precision) -> str:
    """The precision a call runs at: a named algorithm's own, else `precision`, else the default.
    A precision that contradicts the named algorithm is a ValueError (never a silent change)."""
    if algorithm == "auto":
        return resolve_precision(precision)
    own = TC_ALGORITHMS.get(algorithm, "float32")
    if precision is not None and check_precision(precision) != own:
        raise ValueError(f"matmul algorithm {algorithm!r} computes at precision {own!r}, not {precision!r}")
    return own


def tc_algorithm(mode: str, algorithm: str, arch: int, max_smem: int,
                 shape: tuple[int, int, int] | None = None, sm_count: int = 132, aligned: bool = False) -> str | None:
    """The tensor-core kernel a call runs, or None where there is none to run: before sm_80 (no TF32
    mma), or when the kernel needs more shared memory than the GPU gives a block. None means the
    exact FP32 kernels run instead. For "auto", the TC_AUTO kernel of the mode whose plan for
    `shape` (m, n, k) is modeled fastest (the first that fits, without a shape); `aligned`: both
    operands start on 16 bytes with strides of a multiple of 4 floats."""
    if arch < TC_MIN_ARCH:
        return None
    names = (algorithm,) if algorithm != "auto" else [n for n in TC_AUTO[mode] if aligned or n not in TC_AUTO_ALIGNED_ONLY]
    names = [n for n in names if TC_VARIANTS[mode][n].smem <= max_smem]
    if not names:
        return None
    if shape is None or len(names) == 1:
        return names[0]
    return min(names, key=lambda n: _tc_plan_seconds(*shape, sm_count, n)[0] / TC_AUTO[mode][n])


@lru_cache(maxsize=4096)
def tc_plan(m: int, n: int, k: int, sm_count: int = 132, algorithm: str = "tf32x3_128x128") -> Plan:
    """Split-K count for a tensor-core variant: the same wave model as plan()."""
    return _tc_plan_seconds(m, n, k, sm_count, algorithm)[1]


@lru_cache(maxsize=4096)
def _tc_plan_seconds(m: int, n: int, k: int, sm_count: int, algorithm: str) -> tuple[float, Plan]:
    v = TC_VARIANTS[TC_ALGORITHMS[algorithm]][algorithm]
    bandwidth, launch_s = 2.5e12, 4e-6
    tiles = _live_tiles(m, 128, 64) * _live_tiles(n, 128, 32)
    slots = sm_count * v.blocks_per_sm
    best = None
    for splits in SPLIT_CHOICES:
        k_chunk = k if splits == 1 else cdiv(cdiv(k, splits), K_ALIGN) * K_ALIGN
        if splits > 1 and (cdiv(k, k_chunk) != splits or k_chunk < 256):
            continue
        waves = max(1.0, cdiv(math.ceil(tiles * splits), slots))
        seconds = waves * 2.0 * 128 * 128 * k_chunk / v.efficiency
        if splits > 1:
            seconds += (2 * splits + 1) * m * n * 4 / bandwidth + launch_s
        if best is None or seconds < best[0]:
            best = (seconds, Plan(algorithm, splits, k_chunk))
    return best


@lru_cache(maxsize=4096)
def tc_launch_config(m: int, n: int, k: int, algorithm: str, sm_count: int) -> Launch:
    return Launch.for_plan(tc_plan(m, n, k, sm_count, algorithm), m, n, sm_count)
