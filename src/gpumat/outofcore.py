"""Matrix products of host (numpy) arrays larger than a GPU, on one GPU or several.

`gm.matmul(a, b)` with numpy operands lands here. C is cut into tiles that, with their A and B tiles,
fit in each GPU's memory (its free memory, gpumat's memory limit, or `memory_limit=`); each GPU gets a
worker thread with a copy stream and a compute stream. Tiles of A and B move through pinned staging
buffers on the copy stream (host threads fill them while the copy engine and the previous products
run), double-buffered so the next tiles arrive while the current ones multiply; when K does not fit
whole, each K tile's product is added into the C tile in K order (deterministic). A GPU walks its row
blocks of C one at a time and keeps the row block's A tile while it streams the B tiles past it.
Finished C tiles go back to the result array (or `out`). Row blocks go to the GPUs in turn.

Every dtype of the in-memory matmul works: float32 (with `precision=`) and float64 accumulate in
their own type; float16 and bfloat16 tiles multiply into float32 and C is rounded once at the end.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np

from . import _dtypes, _memory
from ._driver import Device, Event, OutOfMemoryError, Stream, as_device, device_count
from ._geometry import MAX_GRID_YZ, cdiv
from ._kernels import Kernel
from .matrix import Matrix

ADD = {dt: Kernel("elementwise", f"add_inplace_{dt}", "PPqqqq") for dt in ("f32", "f64")}  # dst, src, rows, cols, ldd, lds
TILE_SIDES = (16384, 8192, 6144, 4096, 3072, 2048, 1536, 1024, 768, 512, 384, 256, 192, 128, 96, 64, 48, 32, 16, 8,
              4, 2, 1)
SCRATCH_SHARE = 0.15  # of the budget, left for what the in-memory product allocates itself (split-K)
MIN_SIDE = 64         # the smallest tile side worth a round trip (a smaller matrix side is taken whole)


@dataclass(frozen=True)
class TilePlan:
    tm: int   # rows of a C tile
    tn: int   # columns of a C tile
    tk: int   # the K a product step covers (K itself when it fits)

    def device_bytes(self, k: int, in_size: int, acc_size: int, out_size: int) -> int:
        """What one GPU holds: two A and two B tiles, the C accumulator, a second C tile when K is split,
        and C in the output dtype when it differs from the accumulator's."""
        split = self.tk < k
        c = self.tm * self.tn
        return (2 * (self.tm * self.tk + self.tk * self.tn) * in_size + c * acc_size * (2 if split else 1)
                + (c * out_size if out_size != acc_size else 0))


def plan_tiles(m: int, n: int, k: int, in_size: int, acc_size: int, out_size: int, budget: int) -> TilePlan:
    """The largest C tiles (square where the shape allows) whose buffers fit in `budget` bytes, with K
    whole when it fits (no accumulation), else the largest K step that does. Pure: testable anywhere."""
    usable = int(budget * (1 - SCRATCH_SHARE))
    tried = set()
    for side in (t for t in TILE_SIDES if t >= MIN_SIDE):
        tm, tn = min(side, m), min(side, n)
        if (tm, tn) in tried:
            continue
        tried.add((tm, tn))
        for tk in (k, *[t for t in TILE_SIDES if MIN_SIDE <= t < k]):
            p = TilePlan(tm, tn, tk)
            if p.device_bytes(k, in_size, acc_size, out_size) <= usable:
                return p
    raise OutOfMemoryError(f"an out-of-core product needs at least "
                           f"{smallest_plan(m, n, k).device_bytes(k, in_size, acc_size, out_size)} bytes of GPU "
                           f"memory a device (tiles of {MIN_SIDE}); {usable} are available to it", "gpumat.matmul")


def smallest_plan(m: int, n: int, k: int) -> TilePlan:
    """The smallest tiles plan_tiles considers: MIN_SIDE on each side (or the whole side when shorter)."""
    return TilePlan(min(MIN_SIDE, m), min(MIN_SIDE, n), min(MIN_SIDE, k))


def _budget(dev: Device, memory_limit) -> int:
    info = _memory.memory_info(dev)
    free = info["gpu_free"] + info["cached"]
    if memory_limit is not None:
        return int(memory_limit)
    if info["limit"] is not None:
        return max(info["limit"] - info["used"], 0)
    return int(free * 0.9)


def _host_operand(x, name: str, dtype=None) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2:
        raise ValueError(f"matmul: {name} must be 1-D or 2-D, got shape {a.shape}")
    dt = _dtypes.host_dtype_for(a, dtype)
    if _dtypes.is_bfloat16(dt) and _dtypes.ML_BFLOAT16 is None:
        raise TypeError("a bfloat16 product of host arrays needs ml_dtypes on the host (pip install ml_dtypes)")
    if a.dtype != dt or a.strides[-1] != a.itemsize:
        a = np.ascontiguousarray(a, dtype=dt)  # rows must be contiguous for the staged copies
    return a


def matmul_host(a, b, out=None, precision=None, devices=None, memory_limit=None) -> np.ndarray:
    """C = a @ b for host arrays of any size that fits in host memory, on the GPUs in `devices` (default:
    every visible one). Returns C as a numpy array (or fills `out`, a C-contiguous array of the result's
    shape and dtype). `memory_limit`: bytes each GPU may use for it (default: its free memory, or
    gpumat's memory limit when one is set)."""
    a, b = _host_operand(a, "a"), _host_operand(b, "b")
    if a.dtype != b.dtype:
        raise TypeError(f"matmul: a is {_dtypes.name(a.dtype)} and b is {_dtypes.name(b.dtype)}; gpumat does "
                        f"not mix dtypes in one call")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned: a.width {k} != b.height {k2}")
    dt = a.dtype
    half = _dtypes.suffix(dt) in ("f16", "bf16")
    acc_dt = _dtypes.FLOAT32 if half else dt
    if out is None:
        out = np.empty((m, n), dtype=dt)
    elif not isinstance(out, np.ndarray) or out.shape != (m, n) or out.dtype not in (dt, acc_dt) \
            or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"matmul: out must be a writeable C-contiguous {_dtypes.name(dt)} array of shape {(m, n)}")
    if precision is not None and _dtypes.suffix(dt) != "f32":
        raise ValueError(f"matmul: precision= chooses among float32 modes; a and b are {_dtypes.name(dt)}")
    if devices is None:
        devices = list(range(device_count()))
    devs = [as_device(d) for d in (devices if isinstance(devices, (list, tuple)) else [devices])]
    if not devs or len({d.ordinal for d in devs}) != len(devs):
        raise ValueError(f"matmul: devices must name one or more distinct GPUs, got {devices!r}")
    if m == 0 or n == 0:
        return out
    if k == 0:
        out[...] = 0
        return out
    plans = [plan_tiles(m, n, k, dt.itemsize, acc_dt.itemsize, out.dtype.itemsize, _budget(d, memory_limit))
             for d in devs]
    plan = TilePlan(min(p.tm for p in plans), min(p.tn for p in plans), min(p.tk for p in plans))
    row_blocks = list(range(0, m, plan.tm))
    errors: list[BaseException] = []
    workers = [threading.Thread(target=_worker, name=f"gpumat-outofcore-{d.ordinal}",
                                args=(d, row_blocks[w::len(devs)], a, b, out, plan, precision, errors))
               for w, d in enumerate(devs)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        raise errors[0]
    return out


def _worker(dev: Device, row_starts, a, b, out, plan: TilePlan, precision, errors) -> None:
    """One GPU's share: its row blocks of C, each against every column block."""
    try:
        with dev:
            _run(dev, row_starts, a, b, out, plan, precision)
    except BaseException as exc:  # reported by the caller, after every worker has stopped
        errors.append(exc)


def _run(dev: Device, row_starts, a, b, out, plan: TilePlan, precision) -> None:
    (m, k), n = a.shape, b.shape[1]
    dt = a.dtype
    sfx = _dtypes.suffix(dt)
    half = sfx in ("f16", "bf16")
    acc_dt = _dtypes.FLOAT32 if half else dt
    k_ranges = [(k0, min(k0 + plan.tk, k)) for k0 in range(0, k, plan.tk)]
    owned: list[Matrix] = []
    copy_s, comp_s = Stream(device=dev), Stream(device=dev)
    staging = _memory.staging(dev)
    try:
        def buf(h, w, dtype):
            mat = Matrix.empty(h, w, dtype=dtype, device=dev, stream=comp_s)
            owned.append(mat)
            return mat

        A = [buf(plan.tm, plan.tk, dt) for _ in range(2)]
        B = [buf(plan.tk, plan.tn, dt) for _ in range(2)]
        acc = buf(plan.tm, plan.tn, acc_dt)
        part = buf(plan.tm, plan.tn, acc_dt) if len(k_ranges) > 1 else None
        cout = buf(plan.tm, plan.tn, out.dtype) if out.dtype != acc_dt else None
        free = [comp_s.record(Event(timing=False, device=dev)) for _ in range(2)]  # slot s may be overwritten
        ready = Event(timing=False, device=dev)
        copy_s.wait(comp_s.record(Event(timing=False, device=dev)))  # the buffers' allocations come first
        held = [None, None]  # which A tile each slot holds
        step = 0
        for i0 in row_starts:
            rows = min(plan.tm, m - i0)
            for j0 in range(0, n, plan.tn):
                cols = min(plan.tn, n - j0)
                for kk, (k0, k1) in enumerate(k_ranges):
                    s, step = step % 2, step + 1
                    kl = k1 - k0
                    copy_s.wait(free[s])
                    if held[s] != (i0, k0):
                        staging.upload(A[s].elements, A[s].stride * dt.itemsize, a[i0:i0 + rows, k0:k1], copy_s.ptr)
                        held[s] = (i0, k0)
                    staging.upload(B[s].elements, B[s].stride * dt.itemsize, b[k0:k1, j0:j0 + cols], copy_s.ptr)
                    comp_s.wait(copy_s.record(ready))
                    target = (acc if kk == 0 else part)[:rows, :cols]
                    _product(A[s][:rows, :kl], B[s][:kl, :cols], target, precision, comp_s)
                    if kk:
                        ADD[_dtypes.suffix(acc_dt)]((cdiv(cols, 128), min(cdiv(rows, 8), MAX_GRID_YZ), 1), (32, 8, 1),
                                                    acc.elements, part.elements, rows, cols, acc.stride, part.stride,
                                                    stream=comp_s.ptr, device=dev)
                    comp_s.record(free[s])
                result = acc[:rows, :cols]
                if cout is not None:
                    result = _convert(result, cout[:rows, :cols], comp_s)
                staging.download(out[i0:i0 + rows, j0:j0 + cols], result.elements, result.stride * out.itemsize,
                                 comp_s.ptr)  # waits for the product; the host copy overlaps the next uploads
    finally:
        for mat in owned:
            mat.free()
        copy_s.close()
        comp_s.close()


def _product(a: Matrix, b: Matrix, out: Matrix, precision, stream: Stream) -> None:
    """One tile's product on the compute stream. Exact float32 runs the kernel `auto` would pick without
    split-K, whose scratch would need memory outside the tile plan's budget."""
    from . import _precision
    from .matmul import Plan, matmul, plan, run_plan
    if a._sfx == "f32" and (precision or _precision.current()) == "float32":
        (m, k), n, dev = a.shape, b.width, a.device
        run_plan(Plan(plan(m, n, k, dev.sm_count, None, dev.max_smem_optin).algorithm, 1, k), a, b, out, stream)
    else:
        matmul(a, b, out=out, precision=precision, stream=stream)


def _convert(src: Matrix, dst: Matrix, stream: Stream) -> Matrix:
    from .convert import BLOCK, CONVERT_KERNELS, grid
    CONVERT_KERNELS[(src._sfx, dst._sfx)](grid(src.height, src.width), BLOCK, src.elements, dst.elements, src.height,
                                          src.width, src.stride, dst.stride, stream=stream.ptr, device=src.device)
    return dst
