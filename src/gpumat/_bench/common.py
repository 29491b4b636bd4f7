"""Shared benchmark machinery: CUDA-event timing, the copy ceiling, optional CuPy anchors, tables, JSON."""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path

import gpumat as gm

from ..runtime import memops

RESULTS_DIR = Path(os.environ.get("GPUMAT_RESULTS", "benchmarks/results"))


WARMUP_SECONDS = 0.2  # at least this long of warm-up runs: the GPU's clocks ramp up under load


def _warm_up(fn, runs: int, sync, seconds: float = WARMUP_SECONDS) -> None:
    deadline = time.perf_counter() + seconds
    done = 0
    while done < runs or time.perf_counter() < deadline:
        fn()
        done += 1
        if done % 8 == 0:
            sync()  # keep the queue short, so the deadline measures GPU time
    sync()


def time_ms(fn, warmup: int = 3, repeat: int = 20) -> float:
    """Median milliseconds of fn() on the default stream, each run between two CUDA events,
    after at least `warmup` runs and WARMUP_SECONDS of them."""
    start, stop = gm.Event(), gm.Event()
    _warm_up(fn, warmup, gm.synchronize)
    times = []
    for _ in range(repeat):
        start.record(0)
        fn()
        stop.record(0)
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)


QUEUED_BATCH_MS = 2.0  # a queued batch spans at least this much GPU time (launch gaps amortised)
MAX_BATCH = 200
SWEEP_WARMUP_SECONDS = 0.02  # a sweep's cases follow one another: the clocks are up after the first


def _between_events(start, stop, fn, calls: int = 1) -> float:
    """Milliseconds between an event recorded before `calls` calls of fn and one after them (default
    stream)."""
    start.record(0)
    for _ in range(calls):
        fn()
    stop.record(0)
    stop.synchronize()
    return start.elapsed_time(stop)


def queued_ms(*fns, batches: int = 5) -> list[float]:
    """Milliseconds a call of each fn when its calls run back to back: the median over `batches` batches of
    its calls between two CUDA events, sized to span QUEUED_BATCH_MS (after a warm-up). The functions'
    batches are interleaved, so a drift of the GPU's clocks during a case weighs on each alike (a kernel
    and the copy it is held against)."""
    start, stop = gm.Event(), gm.Event()
    sizes = []
    for fn in fns:
        _warm_up(fn, 3, gm.synchronize, SWEEP_WARMUP_SECONDS)
        one = _between_events(start, stop, fn)
        sizes.append(max(2, min(MAX_BATCH, int(QUEUED_BATCH_MS / max(one, 1e-3)))))
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(batches):
        for fn, calls, found in zip(fns, sizes, times, strict=True):
            found.append(_between_events(start, stop, fn, calls) / calls)
    return [statistics.median(t) for t in times]


def transposes_against_copy(x, out, algorithms) -> dict:
    """gm.transpose(x, out=out) with each named algorithm against a device-to-device copy of the same bytes,
    queued and interleaved (queued_ms): copy_ms, <algorithm>_ms and <algorithm>_ratio (the copy's time over
    the transpose's) for each, and ratio, auto's (the probes' rows)."""
    nbytes = x.height * x.width * x.itemsize
    fns = [lambda alg=alg: gm.transpose(x, out=out, algorithm=alg) for alg in algorithms]
    copy_ms, *times = queued_ms(
        lambda: memops.copy_device_2d(out.elements, nbytes, x.elements, nbytes, nbytes, 1, 0), *fns
    )
    row = {"copy_ms": copy_ms}
    row.update({f"{alg}_ms": t for alg, t in zip(algorithms, times, strict=True)})
    row.update({f"{alg}_ratio": copy_ms / t for alg, t in zip(algorithms, times, strict=True)})
    row["ratio"] = row["auto_ratio"]
    return row


def ratios_text(row: dict, names) -> str:
    """The `<name>_ratio` figures of a probe's row, for its progress line: "name 0.812, other 0.640"."""
    return ", ".join(f"{name} {row[name + '_ratio']:.3f}" for name in names)


IDLE_GAP_S = 0.002  # the GPU's queue is empty this long before a one-call measurement


def idle_call_ms(*fns, repeat: int = 7) -> list[float]:
    """Milliseconds of one call of each fn on an idle GPU: nothing queued before it, an event recorded just
    before the call and one just after (so the host's cost of issuing it counts); the median of `repeat`
    calls, the functions' calls interleaved."""
    start, stop = gm.Event(), gm.Event()
    for fn in fns:
        _warm_up(fn, 3, gm.synchronize, SWEEP_WARMUP_SECONDS)
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, found in zip(fns, times, strict=True):
            gm.synchronize()
            time.sleep(IDLE_GAP_S)
            found.append(_between_events(start, stop, fn))
    return [statistics.median(t) for t in times]


def warm_clocks(seconds: float = 0.3) -> None:
    """Copies for `seconds`, so a sweep's first case finds the GPU's clocks up."""
    nbytes = 256 << 20
    with gm.Matrix.empty(1, nbytes // 4) as src, gm.Matrix.empty(1, nbytes // 4) as dst:
        _warm_up(
            lambda: memops.copy_device_2d(dst.elements, nbytes, src.elements, nbytes, nbytes, 1, 0),
            8,
            gm.synchronize,
            seconds,
        )


def geometric_mean(values: list[float]) -> float | None:
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def wall(fn, repeat: int = 3) -> float:
    """Median wall seconds of `fn` after one warm-up call: for calls that return only when their work is
    done (host results, or a synchronise inside `fn`)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def copy_gbps(nbytes: int, repeat: int = 20) -> float:
    """Device-to-device copy of nbytes, as GB/s counting bytes read plus bytes written: the memory ceiling
    (the driver's own copy, cuMemcpyDtoDAsync, between two gpumat buffers)."""
    words = max(nbytes // 4, 1)
    with gm.Matrix.empty(1, words) as src, gm.Matrix.empty(1, words) as dst:
        ms = time_ms(
            lambda: memops.copy_device_2d(dst.elements, words * 4, src.elements, words * 4, words * 4, 1, 0),
            repeat=repeat,
        )
    return 2 * words * 4 / ms / 1e6


def cupy():
    """CuPy when importable (benchmarks only: it is the yardstick, never a dependency), else None."""
    try:
        import cupy  # noqa: F401

        return cupy
    except Exception:
        return None


def cupy_time_ms(cp, fn, warmup: int = 3, repeat: int = 20) -> float:
    """Median ms of a CuPy call, timed with CuPy's events on CuPy's current stream (same warm-up)."""
    _warm_up(fn, warmup, cp.cuda.Device().synchronize)
    times = []
    for _ in range(repeat):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    return statistics.median(times)


def environment() -> dict:
    dev = gm.device()
    env = {
        "device": dev.name,
        "compute_capability": f"{dev.compute_capability[0]}.{dev.compute_capability[1]}",
        "sms": dev.sm_count,
        "driver_cuda": dev.driver_version_str,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "python": platform.python_version(),
    }
    cp = cupy()
    if cp is not None:
        env["cupy"] = cp.__version__
    return env


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    cells = [[str(h) for h in header]] + [[_fmt(v) for v in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    for n, row in enumerate(cells):
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
    return "-" if v is None else str(v)


def result_path(op: str) -> Path:
    """Where write_json puts `op`'s result: <op>-<device>-<date>.json under RESULTS_DIR."""
    env = environment()
    slug = "".join(ch if ch.isalnum() else "-" for ch in env["device"]).strip("-").lower()
    return RESULTS_DIR / f"{op}-{slug}-{env['date']}.json"


def write_json(op: str, payload: dict, quiet: bool = False, path: Path | None = None) -> Path:
    """{"op": op, the environment, payload} as JSON at `path` (result_path(op) by default), whole or not at
    all: written beside it and renamed over it, so a run killed while writing leaves the last whole file."""
    path = path or result_path(op)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(path.name + ".writing")
    scratch.write_text(json.dumps({"op": op, **environment(), **payload}, indent=1) + "\n")
    os.replace(scratch, path)
    if not quiet:
        print(f"\nwrote {path}")
    return path


def interleaved_us(takers: dict, calls: int, batches: int = 7) -> dict[str, float]:
    """Per call, median of `batches` batches of `calls` calls and a synchronisation, for each library's
    (call, sync) of one case: the libraries take turns batch by batch, so a host that speeds up or slows
    down during the run moves all of them alike and the ratios hold."""
    for call, sync in takers.values():
        for _ in range(200):
            call()
        sync()
    times: dict[str, list[float]] = {lib: [] for lib in takers}
    for _ in range(batches):
        for lib, (call, sync) in takers.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                call()
            sync()
            times[lib].append((time.perf_counter() - t0) / calls * 1e6)
    return {lib: statistics.median(t) for lib, t in times.items()}
