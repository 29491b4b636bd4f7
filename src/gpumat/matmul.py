"""Dense matrix multiply, C = A @ B, float32: argument checks, variant choice, launch."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ._driver import device
from ._geometry import cdiv, flat_grid, tiled_grid
from ._kernels import Kernel
from ._memory import alloc, fill_2d, free
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


def _sgemm(bm: int, bn: int, threads: int, blocks_per_sm: int, efficiency: float, smem: int = 0,
           suffix: str = "") -> FastVariant:
    kernel = Kernel("matmul_fast", f"matmul_sgemm_{bm}x{bn}{suffix}", FAST_SIGNATURE, dynamic_smem=smem)
    return FastVariant(kernel, (threads, 1, 1), (bm, bn), smem, blocks_per_sm, efficiency)


VARIANTS: dict[str, Variant] = {
    "naive": _teaching("naive", 16, 16),
    "tiled16": _teaching("tiled16", 16, 16),
    "tiled32": _teaching("tiled32", 32, 32),
    "tiled16x64": _teaching("tiled16x64", 16, 16),
    # 16 x 8 outputs a thread (64 x 64 warp tiles); 128 x 256 at BK = 16 (3 stages, 74,496 bytes of dynamic
    # shared memory) and at BK = 8 (4 stages, 49,664 bytes), 128 x 128 at BK = 8 (4 stages, static).
    "sgemm128x256k16": _sgemm(128, 256, 256, 1, 1.00, smem=74496, suffix="k16"),
    "sgemm128x256": _sgemm(128, 256, 256, 1, 0.86, smem=49664),
    "sgemm128x128": _sgemm(128, 128, 128, 2, 1.01),
    # 8 x 8 outputs a thread (32 x 64 warp tiles), BK = 8, 4 stages.
    "sgemm128x64": _sgemm(128, 64, 128, 3, 0.92),
    "sgemm64x64": _sgemm(64, 64, 64, 6, 0.80),
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
    """Tiles along one axis, the edge tile counted by the share of its warp tiles that have work, but at least
    half a tile: the few live warps of a thin tile run faster than in a full block, not in proportion."""
    full, rest = divmod(length, tile)
    return full + (max(0.5, cdiv(rest, warp_tile) * warp_tile / tile) if rest else 0.0)


@lru_cache(maxsize=4096)
def plan(m: int, n: int, k: int, sm_count: int = 132, only: str | None = None, max_smem: int = 227 * 1024) -> Plan:
    """Pick the fast kernel, the split-K count and the k chunk for an m x k times k x n product.

    A small cost model: time = full waves of tiles x the time of one tile (its FFMA count over the
    kernel's relative efficiency), plus, for split-K, the scratch round trip through memory.
    Tiles along each edge count only their live warp tiles, since dead warps skip the math.

    Constants, fitted on the H100 (sm_90, 132 SMs; benchmarks/results/matmul-tuning-*.json, four runs, the
    last with the kernels as built now): peak_flops is the scale, about what the 16 x 8 kernels sustain on
    full waves; each variant's "efficiency" is fitted relative to it (it absorbs how the variant fares on
    partial waves and edges, so it is not its full-wave speed); bandwidth is the effective rate of
    split-K's scratch round trip. They are the only measured set: other GPUs use them
    as they are, with their own SM count and shared-memory limit (a ranking that holds while the FFMA rate,
    the shared-memory pipe and memory bandwidth scale together; re-run benchmarks/tune_matmul.py there).
    """
    peak_flops, bandwidth, launch_s = 50.7e12, 1.5e12, 4e-6
    best = None
    for name, v in FAST.items():
        if (only is not None and name != only) or (v.smem > max_smem and only is None):
            continue  # a kernel needing more shared memory than this GPU gives a block is never chosen
        bm, bn = v.tile
        warp_m = bm * (bn // 64) * 32 // v.block[0]  # warp tiles are warp_m x 64
        tiles = _live_tiles(m, bm, warp_m) * _live_tiles(n, bn, 64)
        slots = sm_count * v.blocks_per_sm
        for splits in SPLIT_CHOICES:
            k_chunk = k if splits == 1 else cdiv(cdiv(k, splits), K_ALIGN) * K_ALIGN
            if splits > 1 and (cdiv(k, k_chunk) != splits or k_chunk < 128):
                continue
            waves = max(1.0, math.ceil(tiles * splits / slots - 0.05))  # a wave 5% over is edge tiles: absorbed
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
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown matmul algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned: a.width {k} != b.height {k2}")
    check_out(out, (m, n), (a, b), "matmul")
    return m, n, k


def matmul(a: Matrix, b: Matrix, out: Matrix | None = None, algorithm: str = "auto") -> Matrix:
    """C = a @ b for float32 matrices of any shape (views welcome). Returns out (new if None)."""
    m, n, k = check_operands(a, b, out, algorithm)
    if out is None:
        out = Matrix._allocate(m, n)
    if m == 0 or n == 0:
        return out
    if k == 0:
        fill_2d(out.elements, out.stride * 4, 0, n, m)
        return out
    dev = device()
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
        v = VARIANTS[p.algorithm]
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
