"""`python -m gpumat bench transfers`: host<->device copies, interop and stream overheads, stream overlap.

Host copies: gpumat from plain (pageable) numpy arrays and from pinned arrays, against CuPy's
asarray/asnumpy on the same arrays and against the pinned-copy ceiling (one cuMemcpy from page-locked
memory). Interop: import and export through DLPack against CuPy's from_dlpack in the same run.
Streams: a 64^3 product with and without an explicit stream; four small-grid products on one stream
against four streams (their overlap).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import gpumat as gm
from gpumat import pinned_empty

from ..runtime import memops
from .common import cupy, environment, print_table, write_json

SIZES = [64 << 10, 1 << 20, 64 << 20, 1 << 30]


def wall_ms(fn, repeat: int) -> float:
    """Median wall-clock milliseconds of a synchronous call (host copies end on the host)."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def host_copies(quick: bool) -> list[dict]:
    cp = cupy()
    rows = []
    for nbytes in SIZES[:3] if quick else SIZES:
        n = nbytes // 4
        repeat = 5 if nbytes >= 1 << 30 else 20
        host = (
            np.random.default_rng(0).random(n, dtype=np.float32).reshape(1, n)
            if n < 1 << 20
            else np.random.default_rng(0).random(n, dtype=np.float32).reshape(-1, 1024)
        )
        pinned = pinned_empty(host.shape, np.float32)
        pinned[...] = host
        back = np.empty_like(host)
        m = gm.Matrix.from_numpy(host)
        # the ceiling: one DMA from / into page-locked memory
        dev_ptr = m.elements
        up_ceiling = wall_ms(lambda: memops.copy_to_device(dev_ptr, pinned.ctypes.data, nbytes, None), repeat)
        down_ceiling = wall_ms(lambda: memops.copy_to_host(pinned.ctypes.data, dev_ptr, nbytes, None), repeat)
        up = wall_ms(lambda: gm.Matrix.from_numpy(host).free(), repeat)
        up_pinned = wall_ms(lambda: gm.Matrix.from_numpy(pinned).free(), repeat)
        down = wall_ms(lambda: m.to_numpy(out=back), repeat)
        down_new = wall_ms(lambda: m.to_numpy(), repeat)
        down_pinned = wall_ms(lambda: m.to_numpy(out=pinned), repeat)
        row = {
            "bytes": nbytes,
            "pinned_ceiling_up_gbps": nbytes / up_ceiling / 1e6,
            "pinned_ceiling_down_gbps": nbytes / down_ceiling / 1e6,
            "gpumat_up_gbps": nbytes / up / 1e6,
            "gpumat_up_pinned_gbps": nbytes / up_pinned / 1e6,
            "gpumat_down_gbps": nbytes / down / 1e6,
            "gpumat_down_new_array_gbps": nbytes / down_new / 1e6,
            "gpumat_down_pinned_gbps": nbytes / down_pinned / 1e6,
        }
        if cp is not None:
            x = cp.asarray(host)
            cp_up = wall_ms(lambda: cp.asarray(host), repeat)
            cp_down = wall_ms(lambda: cp.asnumpy(x, out=back), repeat)
            cp_down_new = wall_ms(lambda: cp.asnumpy(x), repeat)
            row.update(
                cupy_up_gbps=nbytes / cp_up / 1e6,
                cupy_down_gbps=nbytes / cp_down / 1e6,
                cupy_down_new_array_gbps=nbytes / cp_down_new / 1e6,
                up_vs_cupy=cp_up / up,
                down_vs_cupy=cp_down / down,
                down_new_vs_cupy=cp_down_new / down_new,
            )
            del x
            cp.get_default_memory_pool().free_all_blocks()
        row["up_pinned_vs_ceiling"] = up_ceiling / up_pinned
        row["down_pinned_vs_ceiling"] = down_ceiling / down_pinned
        m.free()
        rows.append(row)
    return rows


def interop_overheads() -> dict:
    out = {}
    cp = cupy()
    a = gm.Matrix.from_numpy(np.ones((64, 64), np.float32))
    us = 1e3
    out["gpumat_export_cai_us"] = wall_ms(lambda: a.__cuda_array_interface__, 2000) * us
    if cp is not None:
        x = cp.ones((64, 64), dtype=cp.float32)
        out["gpumat_from_dlpack_cupy_us"] = wall_ms(lambda: gm.from_dlpack(x), 2000) * us
        out["gpumat_from_cuda_array_cupy_us"] = wall_ms(lambda: gm.Matrix.from_cuda_array(x), 2000) * us
        out["cupy_from_dlpack_gpumat_us"] = wall_ms(lambda: cp.from_dlpack(a), 2000) * us
        out["cupy_asarray_gpumat_us"] = wall_ms(lambda: cp.asarray(a), 2000) * us
        out["cupy_from_dlpack_cupy_us"] = wall_ms(lambda: cp.from_dlpack(x), 2000) * us
    try:
        import torch

        t = torch.ones(64, 64, device="cuda")
        out["gpumat_from_dlpack_torch_us"] = wall_ms(lambda: gm.from_dlpack(t), 2000) * us
        out["torch_from_dlpack_gpumat_us"] = wall_ms(lambda: torch.from_dlpack(a), 2000) * us
        if cp is not None:
            out["cupy_from_dlpack_torch_us"] = wall_ms(lambda: cp.from_dlpack(t), 2000) * us
    except Exception as exc:  # torch missing or without CUDA: say so in the JSON
        out["torch"] = repr(exc)
    try:
        from cuda.core.experimental.utils import StridedMemoryView

        if cp is not None:
            out["cuda_core_strided_memory_view_cupy_us"] = (
                wall_ms(lambda: StridedMemoryView(x, stream_ptr=-1), 2000) * us
            )
    except Exception as exc:
        out["cuda_core"] = repr(exc)
    return out


def stream_overheads() -> dict:
    a = gm.Matrix.from_numpy(np.ones((64, 64), np.float32))
    c = gm.Matrix.empty(64, 64)
    s = gm.Stream()
    out = {
        "matmul64_default_stream_us": wall_ms(lambda: gm.matmul(a, a, out=c), 3000) * 1e3,
        "matmul64_explicit_stream_us": wall_ms(lambda: gm.matmul(a, a, out=c, stream=s), 3000) * 1e3,
        "matmul64_new_result_us": wall_ms(lambda: gm.matmul(a, a).free(), 3000) * 1e3,
    }
    cp = cupy()
    if cp is not None:
        x = cp.ones((64, 64), dtype=cp.float32)
        out["cupy_matmul64_us"] = wall_ms(lambda: x @ x, 3000) * 1e3
    gm.synchronize()
    s.close()
    return out


def stream_overlap() -> dict:
    """Four products that each fill one block (128 x 128 x 65536, no split): serial on one stream vs one
    stream each. Overlap shows as the four-stream time approaching one product's."""
    k = 1 << 16
    a = gm.Matrix.from_numpy(np.random.default_rng(1).random((128, k), dtype=np.float32))
    b = gm.Matrix.from_numpy(np.random.default_rng(2).random((k, 128), dtype=np.float32))
    outs = [gm.Matrix.empty(128, 128) for _ in range(4)]
    streams = [gm.Stream() for _ in range(4)]

    def one_stream():
        for o in outs:
            gm.matmul(a, b, out=o, algorithm="sgemm128x128", stream=streams[0])
        streams[0].synchronize()

    def four_streams():
        for o, s in zip(outs, streams, strict=True):
            gm.matmul(a, b, out=o, algorithm="sgemm128x128", stream=s)
        for s in streams:
            s.synchronize()

    single = wall_ms(
        lambda: (gm.matmul(a, b, out=outs[0], algorithm="sgemm128x128", stream=streams[0]), streams[0].synchronize()),
        10,
    )
    serial = wall_ms(one_stream, 10)
    overlapped = wall_ms(four_streams, 10)
    for s in streams:
        s.close()
    return {
        "one_product_ms": single,
        "four_on_one_stream_ms": serial,
        "four_on_four_streams_ms": overlapped,
        "overlap_speedup": serial / overlapped,
    }


def run(args) -> None:
    gm.device()
    quick = getattr(args, "quick", False)
    copies = host_copies(quick)
    print_table(
        "host <-> device (GB/s; ratios: gpumat over CuPy on the same arrays, pinned over the ceiling)",
        [
            "MiB",
            "ceiling up",
            "gpumat up",
            "pinned up",
            "CuPy up",
            "vs CuPy",
            "ceiling down",
            "gpumat down",
            "pinned down",
            "CuPy down",
            "vs CuPy",
            "new array vs CuPy",
        ],
        [
            [
                r["bytes"] / 2**20,
                r["pinned_ceiling_up_gbps"],
                r["gpumat_up_gbps"],
                r["gpumat_up_pinned_gbps"],
                r.get("cupy_up_gbps"),
                r.get("up_vs_cupy"),
                r["pinned_ceiling_down_gbps"],
                r["gpumat_down_gbps"],
                r["gpumat_down_pinned_gbps"],
                r.get("cupy_down_gbps"),
                r.get("down_vs_cupy"),
                r.get("down_new_vs_cupy"),
            ]
            for r in copies
        ],
    )
    interop = interop_overheads()
    print_table("interop (microseconds a call, 64 x 64)", ["what", "us"], [[k, v] for k, v in interop.items()])
    streams = stream_overheads()
    print_table("launch path (microseconds a call, 64^3 product)", ["what", "us"], [[k, v] for k, v in streams.items()])
    overlap = stream_overlap()
    print_table("stream overlap (ms)", ["what", "value"], [[k, v] for k, v in overlap.items()])
    env = environment()
    print(f"\n{env['device']}, {env['date']}")
    write_json("transfers", {"host_copies": copies, "interop": interop, "launch": streams, "overlap": overlap})
