"""The out-of-core pipeline: `gm.matmul(a, b)` with numpy operands, on one GPU or several.

The tile plan comes from gpumat.outofcore.planner. Each GPU gets a worker thread and three streams:
uploads, products, downloads. A and B tiles move through pinned staging buffers (host threads fill
them while the copy engine and the products run; operands already in pinned memory are copied
directly), two of each, so the next tiles arrive while the current ones multiply and a tile a GPU
already holds is not sent again. Each tile product is planned by the GEMM engine once per tile shape
and launched directly (the public call's checks are made once, for the whole product). When K does
not fit whole, each K tile's product is added into the C tile in K order (deterministic). Finished C
tiles go back to the result array (or `out`) on a download thread of their own, through their own
staging buffers.

Every float dtype of the in-memory matmul works: float32 (with `precision=`) and float64 accumulate in
their own type; float16 and bfloat16 tiles multiply into float32 and C is rounded once at the end.
Integer arrays follow from_numpy's rule (float64, exact); the int8 product is for int8 Matrix operands.
"""

from __future__ import annotations

import queue
import threading

import numpy as np

from .. import _dtypes, _precision, memory
from ..convert import convert_region
from ..matmul.engine import IDENTITY, Problem, Target, aligned, bind, forced, plan
from ..matrix import Matrix
from ..runtime import memops
from ..runtime.devices import Device, as_device, gpu_count
from ..runtime.geometry import MAX_GRID_YZ, cdiv
from ..runtime.kernels import Kernel
from ..runtime.streams import Event, Stream
from .planner import (
    FLOPS,
    REGISTER_GAIN,
    REGISTER_S,
    STAGE_CHUNK,
    TilePlan,
    best_plan,
    plan_tiles,
    split_work,
    tile_areas,
    tile_order,
)

ADD = {
    dt: Kernel("elementwise", f"add_inplace_{dt}", "PPqqqq") for dt in ("f32", "f64")
}  # dst, src, rows, cols, ldd, lds
STAGE_BUFFERS = 8  # staging buffers each way a GPU (of planner.STAGE_CHUNK bytes: a tile row fits one)


def _budget(dev: Device, memory_limit) -> int:
    info = memory.memory_info(dev)
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
    if (
        a.dtype != dt
        or a.strides[-1] != a.itemsize
        or a.strides[0] < a.shape[1] * a.itemsize  # the copies take the row stride as a pitch, one row or many
    ):
        # rows contiguous and going forward, for the copies (a new array: numpy calls one row with a negative
        # or zero row stride contiguous, and ascontiguousarray would hand it back as it is)
        a = np.array(a, dtype=dt, order="C")
    return a


def matmul_host(  # noqa: C901 (the argument checks, then the pipeline, in the order a reader follows)
    a,
    b,
    out=None,
    precision=None,
    devices=None,
    memory_limit=None,
    *,
    tiles: TilePlan | None = None,
    register: bool | None = None,
    report: dict | None = None,
) -> np.ndarray:
    """C = a @ b for host arrays of any size that fits in host memory, on the GPUs in `devices` (default:
    every visible one). Returns C as a numpy array (or fills `out`, a C-contiguous array of the result's
    shape and dtype). `memory_limit`: bytes each GPU may use for it (default: its free memory, or
    gpumat's memory limit when one is set). `tiles`: a TilePlan to use instead of the model's (for
    measurements). `register`: page-lock pageable arrays in place for the call (cuMemHostRegister), so
    that every copy is a direct DMA instead of going through the staging buffers; None: when the cost
    model says the faster copies pay for the locking (operands read several times over). `report`: a dict
    to fill with what the call did (plan: the TilePlan; registered: how many arrays it page-locked;
    pinned: whether a, b and out were page-locked while it ran)."""
    if memory_limit is not None:  # checked first: a wrong limit is the caller's mistake, not a lack of memory
        if isinstance(memory_limit, bool) or not isinstance(memory_limit, (int, np.integer)):
            raise TypeError(f"matmul: memory_limit is a number of bytes (an integer), got {memory_limit!r}")
        if memory_limit < 0:
            raise ValueError(f"matmul: memory_limit must be >= 0 bytes, got {memory_limit}")
    a, b = _host_operand(a, "a"), _host_operand(b, "b")
    if a.dtype != b.dtype:
        raise TypeError(
            f"matmul: a is {_dtypes.name(a.dtype)} and b is {_dtypes.name(b.dtype)}; gpumat does "
            f"not mix dtypes in one call"
        )
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} are not aligned: a.width {k} != b.height {k2}")
    dt = a.dtype
    half = _dtypes.suffix(dt) in ("f16", "bf16")
    acc_dt = _dtypes.FLOAT32 if half else dt
    if out is None:
        out = np.empty((m, n), dtype=dt)
    elif (
        not isinstance(out, np.ndarray)
        or out.shape != (m, n)
        or out.dtype not in (dt, acc_dt)
        or not out.flags.c_contiguous
        or not out.flags.writeable
    ):
        raise ValueError(f"matmul: out must be a writeable C-contiguous {_dtypes.name(dt)} array of shape {(m, n)}")
    else:
        for x, name in ((a, "a"), (b, "b")):
            if np.may_share_memory(out, x):  # tiles of C are written while later tiles still read a and b
                raise ValueError(f"matmul: out overlaps {name}; the product reads a and b while it writes out")
    if precision is not None and _dtypes.suffix(dt) != "f32":
        raise ValueError(f"matmul: precision= chooses among float32 modes; a and b are {_dtypes.name(dt)}")
    mode = "native"
    if _dtypes.suffix(dt) == "f32":  # resolved here: a `matmul_precision` block belongs to this thread
        mode = _precision.resolve(precision)  # a bad precision= is refused for empty products too
    wanted = list(devices) if isinstance(devices, (list, tuple)) else [devices]
    if devices is not None:
        if any(isinstance(d, bool) or not isinstance(d, (Device, int, np.integer)) for d in wanted):
            raise TypeError(f"matmul: devices are GPU indices or gm.Device objects, got {devices!r}")
        ordinals = [d.ordinal if isinstance(d, Device) else int(d) for d in wanted]
        if not wanted or len(set(ordinals)) != len(ordinals):
            raise ValueError(f"matmul: devices must name one or more distinct GPUs, got {devices!r}")
    # the arguments are checked: only now the GPUs (NoDeviceError, saying what is missing, without one)
    devs = [as_device(d) for d in (range(gpu_count()) if devices is None else wanted)]
    if m == 0 or n == 0:
        return out
    if k == 0:
        out[...] = 0
        return out
    rate = FLOPS.get(_dtypes.suffix(dt) if mode in ("native", "float32") else mode, FLOPS["f32"])
    locked_ranges, started, errors = [], [], []
    stop = threading.Event()  # set by the first worker that fails: the others stop at their next tile
    try:
        pinned = [memory.is_pinned(x) for x in (a, b, out)]
        budget = min(_budget(d, memory_limit) for d in devs)
        args = (m, n, k, dt.itemsize, acc_dt.itemsize, out.dtype.itemsize, budget, rate)
        if register is None and not all(pinned):
            staged = best_plan(*args, pinned[0] and pinned[1], pinned[2], len(devs))[0]
            locked = best_plan(*args, True, True, len(devs))[0]
            locking = REGISTER_S * sum(x.nbytes for x, p in zip((a, b, out), pinned, strict=True) if not p)
            register = locked + locking < REGISTER_GAIN * staged
        # the plan (and with it the order of every sum) follows from the arguments alone: it assumes the
        # locking below succeeds, so that an array the driver would not lock is only copied more slowly
        planned = [p or bool(register) for p in pinned]
        plan = tiles or plan_tiles(*args, planned[0] and planned[1], planned[2], len(devs))
        registered = 0
        if register:
            devs[0].activate()  # the driver registers host memory for the current context (portable: for all)
            todo = [i for i in range(3) if not pinned[i]]
            locked, locked_ranges = memory.lock_host([(a, b, out)[i] for i in todo])
            for i, ok in zip(todo, locked, strict=True):
                pinned[i] = pinned[i] or ok
                registered += ok
        if report is not None:
            report.update(plan=plan, registered=registered, pinned=tuple(pinned))
        order = tile_order(m, n, plan)
        shares = split_work(order, len(devs), tile_areas(m, n, plan, order))
        workers = [
            threading.Thread(
                target=_worker,
                name=f"gpumat-outofcore-{d.ordinal}",
                args=(d, share, a, b, out, plan, mode, tuple(pinned), stop, errors),
            )
            for d, share in zip(devs, shares, strict=True)
            if share
        ]
        for t in workers:
            t.start()
            started.append(t)
        for t in started:
            t.join()
    finally:
        # on any way out (a failed start, an interrupt in join) the workers stop and are waited for, so
        # that nothing still copies from or into the arrays when they are unlocked
        stop.set()
        for t in started:
            while t.is_alive():
                try:
                    t.join()
                except BaseException:  # a second interrupt: keep waiting, the copies are still running
                    pass
        try:
            memory.unlock_host(locked_ranges)
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise next((e for e in errors if not isinstance(e, _Stopped)), errors[0])
    return out


def _worker(dev: Device, tiles, a, b, out, plan: TilePlan, mode: str, pinned, stop, errors) -> None:
    """One GPU's share of the C tiles."""
    try:
        with dev:
            _run(dev, tiles, a, b, out, plan, mode, pinned, stop)
    except BaseException as exc:  # reported by the caller, after every worker has stopped
        errors.append(exc)
        stop.set()


def _upload(staging, pinned: bool, dst: Matrix, host: np.ndarray, stream: Stream) -> None:
    """host (rows contiguous) into the top-left of dst: straight from pinned memory, else staged."""
    pitch = dst.stride * dst.itemsize
    if pinned:
        memops.copy_2d_async(
            dst.elements,
            pitch,
            host.ctypes.data,
            host.strides[0],
            host.shape[1] * host.itemsize,
            host.shape[0],
            dst_on_host=False,
            src_on_host=True,
            stream=stream.ptr,
        )
    else:
        staging.upload(dst.elements, pitch, host, stream.ptr)


class _Downloader:
    """Brings finished C tiles back to the host, in order, each after its product's event, on a stream of
    its own. Into pinned memory the copies are queued straight away and a C buffer is reused after its
    copy on the GPU's side; into pageable memory a thread drains the staging buffers, and a C buffer is
    reused once its tile is on the host (`slots` counts the free ones)."""

    def __init__(self, dev: Device, out: np.ndarray, pinned: bool, c_buffers: int):
        self.dev, self.out, self.pinned = dev, out, pinned
        self.stream = Stream(device=dev)
        self.error: BaseException | None = None
        if pinned:
            self.copied = [self.stream.record(Event(timing=False, device=dev)) for _ in range(c_buffers)]
            return
        self.staging = memory.staging(dev, "outofcore-down", STAGE_CHUNK, STAGE_BUFFERS)
        self.slots = threading.Semaphore(c_buffers)
        self.jobs: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._loop, name=f"gpumat-outofcore-down-{dev.ordinal}")
        self.thread.start()

    def put(self, c: int, event: Event, src: Matrix, i0: int, j0: int) -> None:
        """C buffer c's tile (src, its top-left rows x cols) is ready once `event` completes."""
        if not self.pinned:
            self.jobs.put((event, src, i0, j0))
            return
        host = self.out[i0 : i0 + src.height, j0 : j0 + src.width]
        self.stream.wait(event)
        memops.copy_2d_async(
            host.ctypes.data,
            host.strides[0],
            src.elements,
            src.stride * src.itemsize,
            src.width * src.itemsize,
            src.height,
            dst_on_host=True,
            src_on_host=False,
            stream=self.stream.ptr,
        )
        self.stream.record(self.copied[c])

    def _loop(self) -> None:
        try:
            self.dev.activate()
        except BaseException as exc:  # every job below is then skipped, and the worker sees the error
            self.error = exc
        while (job := self.jobs.get()) is not None:
            event, src, i0, j0 = job
            try:
                if self.error is None:
                    self.stream.wait(event)
                    self.staging.download(
                        self.out[i0 : i0 + src.height, j0 : j0 + src.width],
                        src.elements,
                        src.stride * src.itemsize,
                        self.stream.ptr,
                    )
            except BaseException as exc:
                self.error = exc
            finally:
                self.slots.release()

    def reuse(self, c: int, comp_s: Stream, stop: threading.Event) -> None:
        """Before C buffer c takes its next tile: its last tile must be out (raise if the downloads or
        another GPU's worker failed)."""
        if self.pinned:
            comp_s.wait(self.copied[c])
        else:
            while not self.slots.acquire(timeout=0.05):
                self.check(stop)
                if not self.thread.is_alive():
                    raise RuntimeError("gpumat.matmul: the out-of-core download thread ended unexpectedly")
        self.check(stop)

    def check(self, stop: threading.Event) -> None:
        if self.error is not None:
            raise self.error
        if stop.is_set():
            raise _Stopped()

    def close(self) -> None:
        """Wait until every tile handed over is on the host."""
        if not self.pinned:
            self.jobs.put(None)
            self.thread.join()
        try:
            self.stream.synchronize()
        finally:
            self.stream.close()


class _Stopped(Exception):
    """Another GPU's worker failed; this one stops (the caller raises that worker's error)."""


class _Slots:
    """Two device buffers for tiles of one operand; a tile already held is not sent again."""

    def __init__(self, buffers: list[Matrix], comp_s: Stream, dev: Device):
        self.buffers, self.keys, self.last = buffers, [None, None], 1
        self.free = [comp_s.record(Event(timing=False, device=dev)) for _ in buffers]  # when each may be overwritten

    def get(self, key) -> tuple[int, bool]:
        """(slot, must upload): the slot holding `key`, else the one the last product did not use."""
        if key in self.keys:
            s, fresh = self.keys.index(key), False
        else:
            s, fresh = 1 - self.last, True
            self.keys[s] = key
        self.last = s
        return s, fresh


def _run(dev: Device, tiles, a, b, out, plan: TilePlan, mode: str, pinned, stop: threading.Event) -> None:
    (m, k), n = a.shape, b.shape[1]
    dt = a.dtype
    acc_dt = _dtypes.FLOAT32 if _dtypes.suffix(dt) in ("f16", "bf16") else dt
    add = ADD[_dtypes.suffix(acc_dt)]
    k_ranges = [(k0, min(k0 + plan.tk, k)) for k0 in range(0, k, plan.tk)]
    owned: list[Matrix] = []
    copy_s = comp_s = down = None
    try:
        copy_s, comp_s = Stream(device=dev), Stream(device=dev)
        up = None if pinned[0] and pinned[1] else memory.staging(dev, "outofcore-up", STAGE_CHUNK, STAGE_BUFFERS)

        def buf(h, w, dtype):
            mat = Matrix.empty(h, w, dtype=dtype, device=dev, stream=comp_s)
            owned.append(mat)
            return mat

        A = _Slots([buf(plan.tm, plan.tk, dt) for _ in range(2)], comp_s, dev)
        B = _Slots([buf(plan.tk, plan.tn, dt) for _ in range(2)], comp_s, dev)
        C = [buf(plan.tm, plan.tn, acc_dt) for _ in range(plan.c_buffers)]
        C_out = [buf(plan.tm, plan.tn, out.dtype) for _ in range(plan.c_buffers)] if out.dtype != acc_dt else None
        part = buf(plan.tm, plan.tn, acc_dt) if len(k_ranges) > 1 else None
        ready = Event(timing=False, device=dev)
        copy_s.wait(comp_s.record(Event(timing=False, device=dev)))  # the buffers' allocations come first
        down = _Downloader(dev, out, pinned[2], plan.c_buffers)
        for t, (i0, j0) in enumerate(tiles):
            rows, cols = min(plan.tm, m - i0), min(plan.tn, n - j0)
            c = t % plan.c_buffers
            down.reuse(c, comp_s, stop)  # C[c]'s previous tile is back on the host
            for kk, (k0, k1) in enumerate(k_ranges):
                kl = k1 - k0
                sa, new_a = A.get((i0, k0))
                sb, new_b = B.get((k0, j0))
                if new_a:
                    copy_s.wait(A.free[sa])
                    _upload(up, pinned[0], A.buffers[sa], a[i0 : i0 + rows, k0:k1], copy_s)
                if new_b:
                    copy_s.wait(B.free[sb])
                    _upload(up, pinned[1], B.buffers[sb], b[k0:k1, j0 : j0 + cols], copy_s)
                comp_s.wait(copy_s.record(ready))
                target = (C[c] if kk == 0 else part)[:rows, :cols]
                _product(A.buffers[sa][:rows, :kl], B.buffers[sb][:kl, :cols], target, mode, comp_s)
                if kk:
                    add(
                        (cdiv(cols, 128), min(cdiv(rows, 8), MAX_GRID_YZ), 1),
                        (32, 8, 1),
                        C[c].elements,
                        part.elements,
                        rows,
                        cols,
                        C[c].stride,
                        part.stride,
                        stream=comp_s.ptr,
                        device=dev,
                    )
                comp_s.record(A.free[sa])
                comp_s.record(B.free[sb])
            result = C[c][:rows, :cols]
            if C_out is not None:
                result = _convert(result, C_out[c][:rows, :cols], comp_s)
            down.put(c, comp_s.record(Event(timing=False, device=dev)), result, i0, j0)
        finished, down = down, None
        finished.close()  # every tile is on the host once the download thread has drained its queue
        finished.check(threading.Event())
    finally:
        _clean_up(dev, down, copy_s, comp_s, owned)


def _clean_up(dev: Device, down, copy_s, comp_s, owned: list[Matrix]) -> None:
    """After a worker's last tile or a failure: the tiles queued so far land, no upload is still reading
    the host arrays (they may be unlocked next), and the buffers and streams go, each step even if an
    earlier one failed."""
    try:
        if down is not None:
            down.close()
    finally:
        try:
            if copy_s is not None:
                copy_s.synchronize()
        finally:
            if comp_s is not None:
                if copy_s is not None:  # the buffers are freed in comp_s's order: after the last uploads
                    comp_s.wait(copy_s.record(Event(timing=False, device=dev)))
                for mat in owned:
                    mat.free()
                comp_s.close()
            if copy_s is not None:
                copy_s.close()


def _product(a: Matrix, b: Matrix, out: Matrix, mode: str, stream: Stream) -> None:
    """One tile's product on the compute stream, planned by the GEMM engine (plans are cached by shape)
    and launched without the public call's checks. Exact float32 (asked for, or a tensor-core mode's exact
    plan) runs the kernel `auto` picks without split-K, whose scratch would need memory outside the tile
    plan's budget."""
    dev = a.device
    (m, k), n = a.shape, b.width
    problem = Problem(
        m,
        n,
        k,
        a._operand()[7],
        out._operand()[7],
        mode,
        aligned(a.elements, a.stride, a.itemsize),
        aligned(b.elements, b.stride, b.itemsize),
    )
    target = Target.of(dev)
    chosen = plan(problem, target)
    if chosen.problem.mode == "float32" and chosen.splits > 1:  # (a tensor-core mode's exact plan too)
        chosen = forced(chosen.problem, target, chosen.algorithm, 1, k)
    bound = bind(chosen, dev)
    with dev.lock:
        operands = (a.elements, a.stride, 0), (b.elements, b.stride, 0), (out.elements, out.stride, 0)
        bound.run(stream.ptr, *operands, IDENTITY)


def _convert(src: Matrix, dst: Matrix, stream: Stream) -> Matrix:
    convert_region(src, dst, stream.ptr, src.device)
    return dst
