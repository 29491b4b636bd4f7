"""Dense matrix multiply, C = A @ B: argument checks, variant choice, launch.

float32 runs the fast SGEMM family (or the teaching kernels); float64 runs the FP64 tensor-core kernels
(_matmul_f64, sm_80 and later), a register-tiled SIMT kernel (exact FP64 FMA) or the teaching kernels;
float16 and bfloat16 run the tensor-core kernels of _matmul_half (sm_80 and later), the SIMT kernel or
the teaching kernels (float32 accumulation, C in the input dtype or, with a float32 `out`, in float32)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .runtime.devices import Device
from .runtime.streams import SPECIAL_STREAMS, stream_handle
from .runtime.geometry import Plan, cdiv, splitk_reduce_grid, tiled_grid
from .runtime.kernels import Kernel
from .runtime import memops
from . import _matmul_f64, _matmul_half, memory as _memory, _precision
from ._dtypes import BFLOAT16, FLOAT16, suffix
from ._dtypes import name as dtype_name
from ._precision import check_precision, resolve as resolve_precision
from .matrix import INT32_MAX, Matrix, as_matrix, check_out, done_on, operand_device, same_dtype, use_on

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


DTYPES = ("f32", "f64", "f16", "bf16")  # kernel-name suffixes
TEACHING = {"naive": (16, 16), "tiled16": (16, 16), "tiled32": (32, 32), "tiled16x64": (16, 16)}  # threads, tile


def _teaching(name: str, threads: int, tile: int, dtype: str = "f32") -> Variant:
    return Variant(Kernel("matmul", f"matmul_{name}_{dtype}", TEACHING_SIGNATURE), (threads, threads, 1), (tile, tile))


# The teaching kernels in every dtype (float64 accumulates in double; halves in float, C in the input dtype).
TEACHING_KERNELS: dict[tuple[str, str], Variant] = {
    (name, dt): _teaching(name, threads, tile, dt) for dt in DTYPES for name, (threads, tile) in TEACHING.items()}

# Register-tiled SIMT kernels (cuda/matmul_simt.cu), keyed by (input dtype, output dtype): float64 exact
# FP64 FMA; float16/bfloat16 accumulate in float and write C in the input dtype or in float32.
# Block (256), a 64 x 64 tile of C per block, grid (ceil(N/64), min(ceil(M/64), 65535)).
SIMT_KERNELS: dict[tuple[str, str], Variant] = {
    (src, dst): Variant(Kernel("matmul_simt", f"matmul_simt64x64_{src}" + ("_f32out" if dst != src else ""),
                               TEACHING_SIGNATURE), (256, 1, 1), (64, 64))
    for src, dst in (("f64", "f64"), ("f16", "f16"), ("f16", "f32"), ("bf16", "bf16"), ("bf16", "f32"))
}


def _sgemm(bm: int, bn: int, threads: int, blocks_per_sm: int, efficiency: float, smem: int = 0,
           suffix: str = "") -> FastVariant:
    kernel = Kernel("matmul_fast", f"matmul_sgemm_{bm}x{bn}{suffix}", FAST_SIGNATURE, dynamic_smem=smem)
    return FastVariant(kernel, (threads, 1, 1), (bm, bn), smem, blocks_per_sm, efficiency)


VARIANTS: dict[str, Variant] = {
    **{name: TEACHING_KERNELS[(name, "f32")] for name in TEACHING},
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
ALGORITHMS = ("auto", *VARIANTS)                          # float32
OTHER_ALGORITHMS = ("auto", *TEACHING, "simt64x64")       # float64
HALF_ALGORITHMS = (*OTHER_ALGORITHMS, *_matmul_half.ALGORITHMS)  # float16, bfloat16: and the tensor-core kernels
F32_OUT_ALGORITHMS = ("auto", "simt64x64", *_matmul_half.ALGORITHMS)  # those that write a float32 C from halves


def algorithms(dtype: str) -> tuple[str, ...]:
    """The `algorithm=` names for a dtype suffix (f32, f64, f16, bf16); float32, float64 and the halves add
    their tensor-core kernels."""
    if dtype == "f32":
        return (*ALGORITHMS, *TC_ALGORITHMS)
    if dtype == "f64":
        return (*OTHER_ALGORITHMS, *_matmul_f64.VARIANTS)
    return HALF_ALGORITHMS if dtype in ("f16", "bf16") else OTHER_ALGORITHMS


def _other_mode(a: Matrix, precision) -> str:
    """float64 and the halves compute in their own format: an explicit precision is refused."""
    if precision is not None:
        raise ValueError(f"matmul: precision= chooses among float32 modes; a and b are {dtype_name(a.dtype)}")
    return "native"
SPLITK_REDUCE = Kernel("matmul_fast", "matmul_splitk_reduce", "PPiiqi")  # partial, C, M, N, ldc, splits
SPLIT_CHOICES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
K_ALIGN = 32  # split boundaries on multiples of 32 keep every split's A loads 128-bit and its k tiles full


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


def choose_algorithm(m: int, n: int, k: int, device=None) -> str:
    """What "auto" runs for an m x k times k x n product on `device` (the current GPU by default)."""
    from .runtime.devices import as_device
    dev = as_device(device)
    return plan(m, n, k, dev.sm_count, None, dev.max_smem_optin).algorithm


def check_operands(a, b, out, algorithm: str) -> tuple[int, int, int]:
    """Validate everything before any allocation or launch; returns (M, N, K)."""
    a, b = as_matrix(a, "a"), as_matrix(b, "b")
    dt = same_dtype("matmul", (a, "a"), (b, "b"))
    if algorithm not in (_NAMES.get(a._sfx) or _algorithm_names(a._sfx)):
        names = algorithms(a._sfx)
        raise ValueError(f"unknown matmul algorithm {algorithm!r} for {dtype_name(dt)}; choose one of {', '.join(names)}")
    if out is not None and out._sfx != a._sfx and not (a._sfx in ("f16", "bf16") and out._sfx == "f32"):
        raise TypeError(f"matmul: a and b are {dtype_name(dt)} and out is {dtype_name(out.dtype)}; out must be {dtype_name(dt)}"
                        + (" or float32" if dt in (FLOAT16, BFLOAT16) else ""))
    if out is not None and out._sfx != a._sfx and algorithm not in F32_OUT_ALGORITHMS:
        raise TypeError("matmul: the teaching kernels write C in the input dtype; a float32 out takes "
                        f"algorithm {', '.join(repr(x) for x in F32_OUT_ALGORITHMS)}")
    m, k, k2, n = a._height, a._width, b._height, b._width
    if k != k2:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned: a.width {k} != b.height {k2}")
    if m > INT32_MAX or n > INT32_MAX or k > INT32_MAX:
        raise ValueError(f"matmul: dimension {max(m, n, k)} of {m}x{k} @ {k}x{n} is over the kernels' limit "
                         f"of 2^31 - 1 rows or columns")
    if out is not None:
        check_out(out, (m, n), (a, b), "matmul")
    return m, n, k


_NAMES: dict[str, frozenset] = {}


def _algorithm_names(sfx: str) -> frozenset:
    names = _NAMES[sfx] = frozenset(algorithms(sfx))
    return names


def matmul(a: Matrix, b: Matrix, out: Matrix | None = None, algorithm: str = "auto", precision: str | None = None,
           stream=None, *, devices=None, memory_limit=None) -> Matrix:
    """C = a @ b for two matrices of one dtype and any shape (views welcome) on their device. Returns out
    (new if None, in the inputs' dtype; for float16/bfloat16 a float32 out is allowed). `stream`: where the
    work is queued (default: the thread's current stream). Deterministic: the same inputs give the same
    bits on the same GPU (no atomics; split-K partial sums are added in a fixed order).

    precision (float32 operands): "float32" (exact FP32 kernels), "tf32x3" (FP32-level accuracy on the
    tensor cores) or "tf32" (one TF32 pass, ~1e-3 relative error); None takes the current default
    (gm.matmul_precision block, else gm.set_matmul_precision, else "float32"). A named algorithm runs at
    its own precision. Below compute capability 8.0, and on GPUs that give a block less shared memory
    than the tensor-core kernels need (99 KiB parts), the tensor-core modes run the exact FP32 kernels.
    Other dtypes ignore a precision of None and refuse a tensor-core one.

    Host operands (numpy arrays, both) of any size that fits in host memory run out of core: tiles move
    through each GPU in `devices` (default: all visible), within `memory_limit` bytes a GPU (default: its
    free memory or gpumat's memory limit), and C comes back as a numpy array (or fills `out`); see
    gpumat.outofcore."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            raise TypeError("matmul: give both operands as numpy arrays (out of core) or both as gpumat Matrix")
        if stream is not None or algorithm != "auto":
            raise ValueError("matmul: host operands run on each GPU's own streams with algorithm 'auto'")
        from .outofcore import matmul_host
        return matmul_host(a, b, out=out, precision=precision, devices=devices, memory_limit=memory_limit)
    if devices is not None or memory_limit is not None:
        raise ValueError("matmul: devices= and memory_limit= apply to host (numpy) operands; Matrix operands "
                         "compute on their own device")
    dev = operand_device((a, "a"), (b, "b"), (out, "out"))
    s = stream_handle(stream, dev)
    with dev.lock:  # from the checks to the enqueue, no free() can slip in between
        m, n, k = check_operands(a, b, out, algorithm)
        f32 = a._sfx == "f32"
        if f32:
            mode = _precision.current() if precision is None and algorithm == "auto" else matmul_mode(algorithm, precision)
        else:
            mode = _other_mode(a, precision)
        half = None  # the tensor-core kernel a float16/bfloat16 product runs (None: SIMT or teaching)
        if a._sfx in ("f16", "bf16") and algorithm in F32_OUT_ALGORITHMS and algorithm != "simt64x64":
            unaligned = _matmul_half.unaligned_bytes(a, b)
            half = _matmul_half.resolve(algorithm, m, n, k, dev, unaligned)  # a named kernel that cannot run: ValueError
        if a._sfx == "f64" and algorithm in _matmul_f64.VARIANTS:  # likewise, before out is made
            _matmul_f64.plan_for(1, 1, 1, algorithm, dev.arch, dev.sm_count, dev.max_smem_optin)  # runs here?
        if out is None:
            out = Matrix._allocate(m, n, dev, s, a._dtype)
        if m == 0 or n == 0:
            return out
        if a._buffer.stream != s or b._buffer.stream != s or out._buffer.stream != s:
            use_on(s, a, b, out)
        if k == 0:
            memops.zero_2d(out.elements, out.stride * out.itemsize, n * out.itemsize, m, s)
        elif a._sfx == "f64" and _matmul_f64.takes(algorithm, m, n, k, dev):
            _matmul_f64.run(a, b, out, algorithm, dev, s)
        elif half is not None:
            _matmul_half.run(a, b, out, half, dev, s)
        elif not f32:
            v = SIMT_KERNELS[(suffix(a.dtype), suffix(out.dtype))] if algorithm in ("auto", "simt64x64") \
                else TEACHING_KERNELS[(algorithm, suffix(a.dtype))]
            v.kernel(v.grid(m, n), v.block, a.elements, b.elements, out.elements, m, n, k, a.stride, b.stride,
                     out.stride, stream=s, device=dev)
        else:
            tc = None
            if mode != "float32":
                aligned = all(x.elements % 16 == 0 and x.stride % 4 == 0 for x in (a, b))
                tc = tc_algorithm(mode, algorithm, dev.arch, dev.max_smem_optin, (m, n, k), dev.sm_count, aligned)
            if tc is not None:
                tc_launch_config(m, n, k, tc, dev.sm_count).run(a, b, out, dev, s)
            else:  # exact FP32 (also where the GPU has no TF32 tensor cores or too little shared memory)
                launch_config(m, n, k, algorithm if algorithm not in TC_ALGORITHMS else "auto", dev.sm_count,
                              dev.max_smem_optin).run(a, b, out, dev, s)
        if s not in SPECIAL_STREAMS:
            done_on(s, a, b, out)
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
        return cls(v, v.grid(m, n, p.splits), p.splits, p.k_chunk, splitk_reduce_grid(m, n, sm_count))

    def run(self, a: Matrix, b: Matrix, out: Matrix, dev: Device, stream: int) -> None:
        m, k, n = a._height, a._width, b._width
        variant = self.variant
        kernel, block, smem = variant.kernel, variant.block, variant.smem
        if self.splits == 1:
            kernel(self.grid, block, a.elements, b.elements, out.elements, m, n, k, a._stride, b._stride, out._stride,
                   k, smem=smem, stream=stream, device=dev)
        elif self.splits == 0:
            kernel(self.grid, block, a.elements, b.elements, out.elements, m, n, k, a._stride, b._stride, out._stride,
                   stream=stream, device=dev)
        else:
            nbytes = self.splits * m * n * 4
            pool = dev.memory or _memory.device_pool(dev)
            scratch = pool.alloc(nbytes, stream)
            try:
                kernel(self.grid, block, a.elements, b.elements, scratch, m, n, k, a.stride, b.stride, n, self.k_chunk,
                       smem=smem, stream=stream, device=dev)
                SPLITK_REDUCE(self.reduce_grid, (256, 1, 1), scratch, out.elements, m, n, out.stride, self.splits,
                              stream=stream, device=dev)
            finally:
                pool.free(scratch, nbytes, stream)  # stream-ordered: reused only after these launches


@lru_cache(maxsize=4096)
def launch_config(m: int, n: int, k: int, algorithm: str, sm_count: int, max_smem: int) -> Launch:
    if algorithm == "auto" or algorithm in FAST:
        p = plan(m, n, k, sm_count, None if algorithm == "auto" else algorithm, max_smem)
        return Launch.for_plan(p, m, n, sm_count)
    variant = VARIANTS[algorithm]
    return Launch(variant, variant.grid(m, n))


def run_plan(p: Plan, a: Matrix, b: Matrix, out: Matrix, stream=None) -> None:
    """Run a given plan (tests and tuning force split-K counts this way)."""
    dev = operand_device((a, "a"), (b, "b"), (out, "out"))
    s = stream_handle(stream, dev)
    with dev.lock:
        use_on(s, a, b, out)
        Launch.for_plan(p, a.height, b.width, dev.sm_count).run(a, b, out, dev, s)
        done_on(s, a, b, out)


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
