"""`python -m gpumat bench matmul`: every variant and cuBLAS (through CuPy) on the same inputs."""

from __future__ import annotations

import subprocess

import numpy as np

import gpumat as gm

from .._precision import TENSOR_CORE_PRECISIONS
from ..matmul.engine import VARIANTS, algorithms
from .common import cupy, cupy_time_ms, interleaved_us, print_table, time_ms, write_json

SHAPES = [  # (M, N, K)
    (1024, 1024, 1024),
    (2048, 2048, 2048),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (4097, 4097, 4097),
    (3001, 3011, 2999),
    (2137, 108, 1055),
    (16384, 16384, 256),
    (256, 256, 65536),
]
QUICK_SHAPES = [(1024, 1024, 1024), (2137, 108, 1055), (4097, 4097, 4097)]
TEACHING = ("naive", "tiled16", "tiled32", "tiled16x64")
TEACHING_MAX_FLOP = 2 * 4097**3  # the teaching kernels run at ~1-5% of the card: skip them on the largest shapes


def _latency_us(call, sync, calls: int = 2000, batches: int = 7) -> float:
    """End-to-end microseconds per call from Python (result allocation included), median of batches."""
    return interleaved_us({"call": (call, sync)}, calls, batches)["call"]


def sm_clock_mhz() -> int | None:
    """The SM clock nvidia-smi reports now (read right after a timed batch, while the GPU is still busy-clocked)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits", "-i", str(gm.device().ordinal)],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        return int(out.split()[0])
    except Exception:
        return None


def cublas_kernels(cp, fn) -> list[str] | None:
    """Names of the kernels one call of fn launches, through PyTorch's profiler (CUPTI sees CuPy's launches
    too); None when PyTorch is not installed. Benchmarks only: it tells which cuBLAS kernel a ratio is against."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except Exception:
        return None
    try:
        cp.cuda.Device().synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            cp.cuda.Device().synchronize()
            torch.cuda.synchronize()
        names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        return list(dict.fromkeys(n for n in names if "memcpy" not in n.lower() and "memset" not in n.lower()))
    except Exception as err:  # a profiler that cannot start must not cost the benchmark
        return [f"unavailable: {type(err).__name__}"]


def run(args) -> dict:
    if getattr(args, "precision", False):
        return run_precision(args)
    if getattr(args, "dtype", "float32") != "float32":
        return run_dtype(args)
    cp = cupy()
    quick = getattr(args, "quick", False)
    rng = np.random.default_rng(1)
    rows, records = [], []
    for m, n, k in QUICK_SHAPES if quick else SHAPES:
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        flop = 2 * m * n * k
        repeat = 10
        cublas_ms = cublas_mhz = kernels = None
        if cp is not None:
            ca, cb = cp.asarray(a), cp.asarray(b)
            cublas_ms = cupy_time_ms(cp, lambda: cp.matmul(ca, cb), repeat=repeat)
            cublas_mhz = sm_clock_mhz()
            kernels = cublas_kernels(cp, lambda: cp.matmul(ca, cb))
            del ca, cb
            cp.get_default_memory_pool().free_all_blocks()
        entry = {
            "M": m,
            "N": n,
            "K": k,
            "cublas_ms": cublas_ms,
            "cublas_tflops": flop / cublas_ms / 1e9 if cublas_ms else None,
            "cublas_sm_mhz": cublas_mhz,
            "cublas_kernels": kernels,
            "variants": {},
        }
        with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, gm.Matrix.empty(m, n) as C:
            p = gm.matmul_plan(A, B, out=C, precision="float32")
            entry.update(auto_picks=p.algorithm, auto_splits=p.splits)
            names = ["auto"] + [v for v in _exact_fp32_names(A, B) if v not in TEACHING or flop <= TEACHING_MAX_FLOP]
            for name in names:
                ms = time_ms(lambda: gm.matmul(A, B, out=C, algorithm=name), repeat=repeat)
                mhz = sm_clock_mhz() if name == "auto" else None
                tflops = flop / ms / 1e9
                ratio = cublas_ms / ms if cublas_ms else None
                entry["variants"][name] = {"ms": ms, "tflops": tflops, "ratio_cublas": ratio, "sm_mhz": mhz}
                rows.append([f"{m}x{n}x{k}", name, ms, tflops, entry["cublas_tflops"], ratio, mhz or cublas_mhz])
        records.append(entry)
    print_table(
        "matmul float32 (TFLOP/s; ratio = cuBLAS time / gpumat time, >1 is faster than cuBLAS)",
        ["M x N x K", "variant", "ms", "TFLOP/s", "cuBLAS TFLOP/s", "ratio", "SM MHz"],
        rows,
    )
    for r in records:
        print(f"cuBLAS kernel for {r['M']}x{r['N']}x{r['K']}: {r['cublas_kernels']} at {r['cublas_sm_mhz']} MHz")

    small = rng.uniform(-1, 1, (64, 64)).astype(np.float32)
    A = gm.Matrix.from_numpy(small)
    latency = {"gpumat_us": _latency_us(lambda: A @ A, gm.synchronize)}
    if cp is not None:
        ca = cp.asarray(small)
        latency["cupy_us"] = _latency_us(lambda: ca @ ca, cp.cuda.Device().synchronize)
    A.free()
    print_table(
        "64 x 64 x 64 end to end from Python (result allocation included), us per call",
        ["gpumat", "CuPy"],
        [[latency["gpumat_us"], latency.get("cupy_us")]],
    )
    payload = {
        "anchor": "cuBLAS FP32 via CuPy cupy.matmul (CUPY_TF32 unset), same process, same inputs",
        "timing": "CUDA events, 3 warm-ups, median of 10 runs",
        "clock": "sm_mhz: nvidia-smi's SM clock read right after the timed runs (cuBLAS and auto)",
        "cublas_kernels": "kernels one cupy.matmul launches, seen by torch.profiler (CUPTI)",
        "shapes": records,
        "latency_64": latency,
    }
    write_json("matmul", payload)
    return payload


# ---- `bench matmul --precision`: the tensor-core modes against cuBLAS FP32 and TF32 ----

PRECISION_SHAPES = [
    (1024, 1024, 1024),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (4097, 4097, 4097),
    (3001, 3011, 2999),
    (2137, 108, 1055),
    (256, 256, 65536),
]
ACCURACY_KS = (64, 256, 1024, 4096, 16384, 65536)
ACCURACY_MN = 256


def _modes(sfx: str = "f32") -> dict[str, str]:
    """Every float32 variant's precision mode, from its plan for a small product (a variant this GPU
    cannot run plans exact FP32 and is left out of the tensor-core list)."""
    with gm.Matrix.zeros(8, 8) as x:
        return {
            name: gm.matmul_plan(x, x, algorithm=name).variant.mode
            for name in algorithms(sfx)[1:]
            if VARIANTS[name].any_shape
        }


def _exact_fp32_names(A, B) -> list[str]:
    return [
        name
        for name in algorithms("f32")[1:]
        if VARIANTS[name].computes_shape(A.height, B.width, A.width)
        and gm.matmul_plan(A, B, algorithm=name).variant.mode in ("float32", "any")
    ]


def _gpumat_modes() -> tuple[dict, dict]:
    """(label -> matmul keyword arguments, tensor-core name -> its mode): the exact kernels ("exact"),
    auto in each tensor-core mode, and every tensor-core kernel by name."""
    tensor_core = {name: mode for name, mode in _modes().items() if mode in TENSOR_CORE_PRECISIONS}
    modes = {
        "exact": {"precision": "float32"},
        "tf32x3 auto": {"precision": "tf32x3"},
        "tf32 auto": {"precision": "tf32"},
        **{name: {"algorithm": name} for name in tensor_core},
    }
    return modes, tensor_core


CUPY_COMPUTE_DEFAULT, CUPY_COMPUTE_TF32 = 1, 7  # cupy._core._routines_linalg COMPUTE_TYPE_*


def _cublas_mode(cp, tf32: bool) -> None:
    """cupy.matmul on float32 runs cublasGemmEx with CuPy's per-dtype compute type: TF32 or default (FP32)."""
    from cupy._core import _routines_linalg as rl

    rl.set_compute_type(np.float32, CUPY_COMPUTE_TF32 if tf32 else CUPY_COMPUTE_DEFAULT)


def _inputs(kind: str, m: int, n: int, k: int, rng):
    """uniform [-1, 1]; wide: uniform times 2^e, e uniform in [-20, 20]; cancel: A = [X X'], B = [Y; -Y + d]
    so that most of each dot product cancels (the result is ~1e-3 of || |A| |B| ||)."""
    if kind == "uniform":
        return rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
    if kind == "wide":
        a = rng.uniform(-1, 1, (m, k)) * np.exp2(rng.integers(-20, 21, (m, k)))
        b = rng.uniform(-1, 1, (k, n)) * np.exp2(rng.integers(-20, 21, (k, n)))
        return a.astype(np.float32), b.astype(np.float32)
    h = k // 2
    x = rng.uniform(-1, 1, (m, h))
    y = rng.uniform(-1, 1, (h, n))
    a = np.concatenate([x, x * (1 + 1e-3 * rng.uniform(-1, 1, (m, h))), rng.uniform(-1, 1, (m, k - 2 * h))], axis=1)
    b = np.concatenate([y, -y, 1e-3 * rng.uniform(-1, 1, (k - 2 * h, n))], axis=0)
    return a.astype(np.float32), b.astype(np.float32)


def _errors(got: np.ndarray, a: np.ndarray, b: np.ndarray, ref: np.ndarray) -> dict:
    got = np.asarray(got, np.float64)
    scale = np.linalg.norm(np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    diff = np.linalg.norm(got - ref)
    return {"rel": float(diff / np.linalg.norm(ref)), "rel_abs": float(diff / scale)}


def run_precision(args) -> dict:
    gpumat_modes, tensor_core = _gpumat_modes()
    tensor_core.update({"tf32 auto": "tf32", "tf32x3 auto": "tf32x3"})
    cp = cupy()
    rng = np.random.default_rng(3)
    quick = getattr(args, "quick", False)
    rows, ratio_rows, records = [], [], []
    for m, n, k in PRECISION_SHAPES[:1] + PRECISION_SHAPES[-2:] if quick else PRECISION_SHAPES:
        a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
        b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
        flop = 2 * m * n * k
        entry = {"M": m, "N": n, "K": k, "ms": {}, "tflops": {}, "error": {}}
        if cp is not None:
            ca, cb = cp.asarray(a), cp.asarray(b)
            ref = cp.asnumpy(ca.astype(cp.float64) @ cb.astype(cp.float64))
            for label, tf32 in (("cublas_fp32", False), ("cublas_tf32", True)):
                _cublas_mode(cp, tf32)
                entry["ms"][label] = cupy_time_ms(cp, lambda: cp.matmul(ca, cb), repeat=10)
                entry["error"][label] = _errors(cp.asnumpy(cp.matmul(ca, cb)), a, b, ref)["rel"]
            _cublas_mode(cp, False)
            del ca, cb
            cp.get_default_memory_pool().free_all_blocks()
        else:
            ref = a.astype(np.float64) @ b.astype(np.float64)
        with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, gm.Matrix.empty(m, n) as C:
            for label, kw in gpumat_modes.items():
                entry["ms"][label] = time_ms(lambda: gm.matmul(A, B, out=C, **kw), repeat=10)
                gm.matmul(A, B, out=C, **kw)
                entry["error"][label] = _errors(C.to_numpy(), a, b, ref)["rel"]
        entry["tflops"] = {key: flop / ms / 1e9 for key, ms in entry["ms"].items()}
        ms = entry["ms"]
        entry["ratios"] = {
            f"{g}/{c}": ms[c] / ms[g] for g in gpumat_modes for c in ("cublas_fp32", "cublas_tf32") if c in ms
        }
        records.append(entry)
        t = entry["tflops"]
        rows.append([f"{m}x{n}x{k}", t.get("cublas_fp32"), t.get("cublas_tf32"), *(t[g] for g in gpumat_modes)])
        for g in gpumat_modes:
            anchor = "cublas_tf32" if tensor_core.get(g) == "tf32" else "cublas_fp32"
            ratio_rows.append(
                [f"{m}x{n}x{k}", g, t[g], anchor, entry["ratios"].get(f"{g}/{anchor}"), entry["error"][g]]
            )
    print_table(
        "matmul float32 by precision, TFLOP/s (same inputs, same process)",
        ["M x N x K", "cuBLAS FP32", "cuBLAS TF32", *gpumat_modes],
        rows,
    )
    print_table(
        "against the same-mode anchor (exact and tf32x3 against cuBLAS FP32, tf32 against cuBLAS TF32); "
        "error = ||C - AB||_F / ||AB||_F",
        ["M x N x K", "gpumat", "TFLOP/s", "anchor", "ratio", "error"],
        ratio_rows,
    )

    accuracy, arows = [], []
    for kind in ("uniform", "wide", "cancel"):
        for k in ACCURACY_KS:
            a, b = _inputs(kind, ACCURACY_MN, ACCURACY_MN, k, rng)
            ref = a.astype(np.float64) @ b.astype(np.float64)
            errs = {}
            with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B:
                for label, kw in gpumat_modes.items():
                    errs[label] = _errors(gm.matmul(A, B, **kw).to_numpy(), a, b, ref)
            if cp is not None:
                ca, cb = cp.asarray(a), cp.asarray(b)
                for label, tf32 in (("cublas_fp32", False), ("cublas_tf32", True)):
                    _cublas_mode(cp, tf32)
                    errs[label] = _errors(cp.asnumpy(cp.matmul(ca, cb)), a, b, ref)
                _cublas_mode(cp, False)
            accuracy.append({"inputs": kind, "M": ACCURACY_MN, "N": ACCURACY_MN, "K": k, "error": errs})
            arows.append(
                [
                    kind,
                    k,
                    *(errs[c]["rel"] if c in errs else None for c in (*gpumat_modes, "cublas_fp32", "cublas_tf32")),
                ]
            )
    print_table(
        f"relative error ||C - AB||_F / ||AB||_F against float64, {ACCURACY_MN} x {ACCURACY_MN} x K",
        ["inputs", "K", *gpumat_modes, "cuBLAS FP32", "cuBLAS TF32"],
        arows,
    )
    payload = {
        "anchor": "cuBLAS via CuPy cupy.matmul with CuPy's float32 compute type set to DEFAULT (FP32) or TF32, "
        "same process, same inputs",
        "timing": "CUDA events, warm-up >= 0.2 s, median of 10 runs",
        "error": "rel: ||C - AB||_F / ||AB||_F; rel_abs: ||C - AB||_F / || |A| |B| ||_F; AB in float64",
        "shapes": records,
        "accuracy": accuracy,
    }
    write_json("matmul-precision", payload)
    return payload


DTYPE_SHAPES = [
    (1024, 1024, 1024),
    (4096, 4096, 4096),
    (4097, 4097, 4097),
    (3001, 3011, 2999),
    (2137, 108, 1055),
    (256, 256, 65536),
]
HALF_SHAPES = [
    (1024, 1024, 1024),
    (4096, 4096, 4096),
    (8192, 8192, 8192),
    (4097, 4097, 4097),
    (3001, 3011, 2999),
    (2137, 108, 1055),
    (16384, 16384, 256),
    (256, 256, 65536),
]  # float16, bfloat16: every target shape
SIMT_MAX_FLOP = 2 * 4097**3  # the SIMT kernel runs at ~4% of the tensor cores: only up to this size


def _half_names(A, B, out, flops: float) -> list[str]:
    """Every tensor-core kernel this GPU runs for these operands, and the SIMT kernel where it is quick enough."""
    names = []
    for name in algorithms(A.dtype)[1:]:
        try:
            plan = gm.matmul_plan(A, B, out=out, algorithm=name)
        except (ValueError, TypeError):  # not on this GPU, or not for a float32 out
            continue
        if plan.variant.auto_may_take(plan.problem.dtype) or (name == "simt64x64" and flops <= SIMT_MAX_FLOP):
            names.append(name)
    return names


def run_dtype(args) -> dict:
    """`bench matmul --dtype D`: gpumat's `auto` in float64 / float16 / bfloat16 against cuBLAS in the same
    dtype (CuPy's matmul; PyTorch's for bfloat16, which CuPy lacks), same inputs, same run. For the 16-bit
    dtypes also every tensor-core variant (and SIMT on the smaller shapes), each with its ratio."""
    import gpumat as gm

    dtype = args.dtype
    if dtype == "float64":
        return run_f64(args)
    quick = getattr(args, "quick", False)
    halves = dtype in ("float16", "bfloat16")
    shapes = (HALF_SHAPES if halves else DTYPE_SHAPES)[: 3 if quick else None]
    rng = np.random.default_rng(7)
    cp = cupy()
    try:
        import torch
    except ImportError:
        torch = None
    rows, records = [], []
    for m, n, k in shapes:
        a32, b32 = rng.uniform(-1, 1, (m, k)).astype(np.float32), rng.uniform(-1, 1, (k, n)).astype(np.float32)
        A = gm.Matrix.from_numpy(a32).astype(dtype)
        B = gm.Matrix.from_numpy(b32).astype(dtype)
        C = gm.Matrix.empty(m, n, dtype=dtype)
        flops = 2.0 * m * n * k
        ours = time_ms(lambda: gm.matmul(A, B, out=C), repeat=10)
        err = None
        if m * n * k <= 2**33:  # C from auto against the float64 product of the operands as stored
            ref = A.to_numpy(dtype=np.float64) @ B.to_numpy(dtype=np.float64)
            got = C.to_numpy(dtype=np.float64)
            err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        names = _half_names(A, B, C, flops) if halves else []
        variants = {name: time_ms(lambda: gm.matmul(A, B, out=C, algorithm=name), repeat=10) for name in names}
        anchor, anchor_name = None, None
        if dtype == "bfloat16" and torch is not None:
            ta, tb = torch.from_dlpack(A), torch.from_dlpack(B)
            tc = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
            anchor = time_ms(lambda: torch.matmul(ta, tb, out=tc), repeat=10)
            anchor_name = "PyTorch (cuBLAS)"
        elif cp is not None and dtype != "bfloat16":
            ca, cb = cp.from_dlpack(A), cp.from_dlpack(B)
            cc = cp.empty((m, n), dtype=dtype)
            anchor = time_ms(lambda: cp.matmul(ca, cb, out=cc), repeat=10)
            anchor_name = "CuPy (cuBLAS)"
        record = {
            "M": m,
            "N": n,
            "K": k,
            "gpumat_ms": ours,
            "gpumat_tflops": flops / ours / 1e9,
            "anchor": anchor_name,
            "anchor_ms": anchor,
            "anchor_tflops": flops / anchor / 1e9 if anchor else None,
            "ratio": anchor / ours if anchor else None,
            "rel_error": err,
        }
        if halves:
            plan = gm.matmul_plan(A, B, out=C)
            record["auto_picks"] = plan.algorithm
            record["aligned_copies_bytes"] = plan.copy_bytes
            record["variants"] = {
                name: {"ms": ms, "tflops": flops / ms / 1e9, "ratio": anchor / ms if anchor else None}
                for name, ms in variants.items()
            }
        records.append(record)
        label = f"auto ({record['auto_picks']})" if halves else "auto"
        rows.append([f"{m}x{n}x{k}", label, record["gpumat_tflops"], record["anchor_tflops"], record["ratio"], err])
        for name, v in record.get("variants", {}).items():
            rows.append([f"{m}x{n}x{k}", name, v["tflops"], record["anchor_tflops"], v["ratio"], None])
        for x in (A, B, C):
            x.free()
    print_table(
        f"matmul {dtype}: gpumat against cuBLAS in {dtype} (ratio = cuBLAS time / gpumat time)",
        ["M x N x K", "variant", "gpumat TFLOP/s", "cuBLAS TFLOP/s", "ratio", "rel. error"],
        rows,
    )
    return write_json(
        f"matmul-{dtype}", {"dtype": dtype, "timing": "CUDA events, warm-up, median of 10 runs", "shapes": records}
    )


# ---- `bench matmul --dtype float64`: every FP64 tensor-core variant and auto against cuBLAS DGEMM ----

F64_SIMT_MAX_FLOP = 2 * 4097**3  # the SIMT kernel runs at a fraction of the tensor cores: only up to this size


def _runs(A, B, C, name: str) -> bool:
    try:
        gm.matmul_plan(A, B, out=C, algorithm=name)
        return True
    except ValueError:
        return False


def run_f64(args) -> dict:
    """Each FP64 tensor-core variant, `auto` and (on the smaller shapes) the SIMT kernel against cuBLAS DGEMM
    through CuPy, same inputs (uniform [-1, 1] doubles, full 53-bit significands), same run."""
    cp = cupy()
    quick = getattr(args, "quick", False)
    rng = np.random.default_rng(11)
    rows, records = [], []
    for m, n, k in QUICK_SHAPES if quick else SHAPES:
        a, b = rng.uniform(-1, 1, (m, k)), rng.uniform(-1, 1, (k, n))
        flop = 2.0 * m * n * k
        entry = {"M": m, "N": n, "K": k, "variants": {}}
        cublas_ms = None
        if cp is not None:
            ca, cb = cp.asarray(a), cp.asarray(b)
            cc = cp.empty((m, n), dtype=np.float64)
            cublas_ms = cupy_time_ms(cp, lambda: cp.matmul(ca, cb, out=cc), repeat=10)
            entry["cublas_sm_mhz"] = sm_clock_mhz()
            entry["cublas_kernels"] = cublas_kernels(cp, lambda: cp.matmul(ca, cb, out=cc))
            del ca, cb, cc
            cp.get_default_memory_pool().free_all_blocks()
        entry.update(cublas_ms=cublas_ms, cublas_tflops=flop / cublas_ms / 1e9 if cublas_ms else None)
        with gm.Matrix.from_numpy(a) as A, gm.Matrix.from_numpy(b) as B, gm.Matrix.empty(m, n, dtype=np.float64) as C:
            p = gm.matmul_plan(A, B, out=C)
            entry["auto_picks"] = {"algorithm": p.algorithm, "splits": p.splits, "k_chunk": p.k_chunk}
            tensor_cores = [n for n in algorithms("f64")[1:] if n.startswith("dmma") and _runs(A, B, C, n)]
            names = ["auto", *tensor_cores] + (["simt64x64"] if flop <= F64_SIMT_MAX_FLOP else [])
            for name in names:
                ms = time_ms(lambda: gm.matmul(A, B, out=C, algorithm=name), repeat=10)
                mhz = sm_clock_mhz() if name == "auto" else None
                ratio = cublas_ms / ms if cublas_ms else None
                entry["variants"][name] = {"ms": ms, "tflops": flop / ms / 1e9, "ratio_cublas": ratio, "sm_mhz": mhz}
                rows.append([f"{m}x{n}x{k}", name, ms, flop / ms / 1e9, entry["cublas_tflops"], ratio])
        records.append(entry)
    print_table(
        "matmul float64 (TFLOP/s; ratio = cuBLAS DGEMM time / gpumat time, >1 is faster than cuBLAS)",
        ["M x N x K", "variant", "ms", "TFLOP/s", "cuBLAS TFLOP/s", "ratio"],
        rows,
    )
    for r in records:
        print(
            f"{r['M']}x{r['N']}x{r['K']}: auto = {r['auto_picks']}; cuBLAS {r.get('cublas_kernels')} "
            f"at {r.get('cublas_sm_mhz')} MHz"
        )
    payload = {
        "dtype": "float64",
        "anchor": "cuBLAS DGEMM via CuPy cupy.matmul(out=...), same process, same inputs",
        "timing": "CUDA events, warm-up >= 0.2 s, median of 10 runs",
        "clock": "sm_mhz: nvidia-smi's SM clock read right after the timed runs (cuBLAS and auto)",
        "shapes": records,
    }
    write_json("matmul-float64", payload)
    return payload
