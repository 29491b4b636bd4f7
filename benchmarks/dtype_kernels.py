#!/usr/bin/env python3
"""The float64 / float16 / bfloat16 kernels on raw device buffers, against the copy and the libraries.

  transpose: each dtype at 8192^2 and narrow shapes (1..127 columns, 1..64 rows, 2^24 elements), every
             fast variant, as a fraction of the device-to-device copy of the same bytes;
  dot:       2^27 elements per dtype, GB/s read over the copy's GB/s (read + written), the ANCHORS ratio;
  matmul:    the SIMT kernels against CuPy's matmul (cuBLAS) in the same dtype (PyTorch for bfloat16).

    PYTHONPATH=src python3 benchmarks/dtype_kernels.py [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys

import numpy as np
from cuda.bindings import driver

from gpumat import _memory
from gpumat._bench.common import copy_gbps, cupy, cupy_time_ms, environment, time_ms
from gpumat._driver import check, device

T = importlib.import_module("gpumat.transpose")
D = importlib.import_module("gpumat.dot")
MM = importlib.import_module("gpumat.matmul")
SIZE = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2}


def buffer(nbytes: int, fill16: int = 0x3C00) -> int:
    ptr = _memory.alloc(nbytes)
    check(driver.cuMemsetD16(ptr, fill16, nbytes // 2), "cuMemsetD16")
    return ptr


def bench_transpose(quick: bool) -> list[dict]:
    out = []
    cases = [("square", 8192, 8192)]
    if not quick:
        cases += [("square", 16384, 16384)]
    n = 1 << 24
    for c in (1, 2, 3, 4, 8, 16, 17, 32, 40, 64, 96, 127):
        cases.append(("narrow_cols", (n // c) & ~15, c))   # an even, 16-aligned height: B rows stay aligned
    for r in (1, 2, 3, 8, 17, 32, 40, 64):
        cases.append(("narrow_rows", r, (n // r) & ~15))
    ceilings: dict[int, float] = {}
    for dt in ("f32", "f64", "f16"):
        for kind, rows, cols in cases:
            if kind == "square" and rows == 16384 and dt == "f64":
                continue
            nbytes = rows * cols * SIZE[dt]
            if nbytes not in ceilings:
                ceilings[nbytes] = copy_gbps(nbytes)
            a, b = buffer(nbytes), buffer(nbytes)
            names = ["tiled_rect64", "sector_aligned"]
            if dt == "f16":
                names.append("pairs128x64")
            if kind in ("narrow_cols", "narrow_rows"):
                names += [kind, kind + "16k"]
                if dt == "f16":
                    names += [n for n in (kind + "_pairs", kind + "_pairs16k", kind + "_flat16k")
                              if T.KERNELS[(n, dt)].accepts(rows, cols, a, cols, b, rows)]
            names = [n for n in names if not isinstance(T.KERNELS[(n, dt)], T.NarrowVariant)
                     or T.KERNELS[(n, dt)].accepts(rows, cols, a, cols, b, rows)]
            entry = {"dtype": dt, "kind": kind, "rows": rows, "cols": cols, "copy_gbps": ceilings[nbytes], "variants": {}}
            for name in names:
                v = T.KERNELS[(name, dt)]
                grid = v.grid(rows, cols)
                ms = time_ms(lambda: v.kernel(grid, v.block, a, b, rows, cols, cols, rows), repeat=10)
                gbps = 2 * nbytes / ms / 1e6
                entry["variants"][name] = {"ms": ms, "gbps": gbps, "x_copy": gbps / ceilings[nbytes]}
            _memory.free(a)
            _memory.free(b)
            best = max(entry["variants"].items(), key=lambda kv: kv[1]["x_copy"])
            print(f"transpose {dt:>4} {kind:>11} {rows:>9} x {cols:<9} copy {ceilings[nbytes]:7.0f} GB/s  " +
                  "  ".join(f"{k}={v['x_copy']:.3f}" for k, v in entry["variants"].items()) + f"   best {best[0]}",
                  flush=True)
            out.append(entry)
    return out


def bench_dot(quick: bool) -> list[dict]:
    out = []
    n = 1 << (24 if quick else 27)
    dev = device()
    scratch = _memory.alloc(D.SCRATCH_BYTES)
    check(driver.cuMemsetD8(scratch, 0, D.SCRATCH_BYTES), "cuMemsetD8")
    host = np.empty(1, dtype=np.float64)
    for dt in ("f64", "f32", "f16", "bf16"):
        nbytes = n * SIZE[dt]
        ceiling = copy_gbps(nbytes)
        x, y = buffer(nbytes, 0x3C00 if dt != "bf16" else 0x3F80), buffer(nbytes, 0x3C00 if dt != "bf16" else 0x3F80)
        grid = (D.grid_blocks(n, dev.sm_count, dt), 1, 1)
        k = D.FLAT_KERNELS[dt]
        ms = time_ms(lambda: k(grid, (D.THREADS, 1, 1), x, y, n, scratch), repeat=20)
        results = set()
        for _ in range(3):
            k(grid, (D.THREADS, 1, 1), x, y, n, scratch)
            _memory.download_contiguous(host, scratch)
            results.add(host.tobytes())
        gbps = 2 * nbytes / ms / 1e6
        entry = {"dtype": dt, "n": n, "ms": ms, "gbps_read": gbps, "copy_gbps": ceiling, "x_copy": gbps / ceiling,
                 "deterministic": len(results) == 1, "value": float(host[0])}
        print(f"dot {dt:>4} n=2^{n.bit_length() - 1}: {ms:.3f} ms, {gbps:.0f} GB/s read, x copy {gbps / ceiling:.3f}, "
              f"value {host[0]} deterministic {len(results) == 1}", flush=True)
        out.append(entry)
        _memory.free(x)
        _memory.free(y)
    _memory.free(scratch)
    return out


def bench_matmul(quick: bool) -> list[dict]:
    out = []
    cp = cupy()
    try:
        import torch
    except Exception:
        torch = None
    shapes = [(2048, 2048, 2048), (4096, 4096, 4096)] + ([] if quick else [(3001, 2999, 1003)])
    rng = np.random.default_rng(0)
    for (src, dst), v in MM.SIMT_KERNELS.items():
        for m, n, k in shapes:
            a_host = rng.uniform(-1, 1, size=(m, k))
            b_host = rng.uniform(-1, 1, size=(k, n))
            conv = {"f64": np.float64, "f16": np.float16}
            if src == "bf16":
                a_bits = (a_host.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
                b_bits = (b_host.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
            else:
                a_bits, b_bits = a_host.astype(conv[src]), b_host.astype(conv[src])
            a, b = _memory.alloc(a_bits.nbytes), _memory.alloc(b_bits.nbytes)
            _memory.upload_contiguous(a, np.ascontiguousarray(a_bits))
            _memory.upload_contiguous(b, np.ascontiguousarray(b_bits))
            c = _memory.alloc(m * n * SIZE[dst])
            grid = v.grid(m, n)
            ms = time_ms(lambda: v.kernel(grid, v.block, a, b, c, m, n, k, k, n, n), repeat=5)
            tflops = 2 * m * n * k / ms / 1e9
            entry = {"kernel": v.kernel.name, "m": m, "n": n, "k": k, "ms": ms, "tflops": tflops}
            anchor = None
            if src != "bf16" and cp is not None and dst == src:
                ca, cb = cp.asarray(a_bits), cp.asarray(b_bits)
                anchor_ms = cupy_time_ms(cp, lambda: cp.matmul(ca, cb), repeat=5)
                anchor = ("cupy", anchor_ms)
                del ca, cb
            elif torch is not None and dst == src:
                tdt = {"f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}[src]
                ta = torch.from_numpy(a_host).to("cuda", tdt)
                tb = torch.from_numpy(b_host).to("cuda", tdt)
                st, sp = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                for _ in range(3):
                    torch.matmul(ta, tb)
                torch.cuda.synchronize()
                times = []
                for _ in range(5):
                    st.record()
                    torch.matmul(ta, tb)
                    sp.record()
                    sp.synchronize()
                    times.append(st.elapsed_time(sp))
                anchor = ("torch", sorted(times)[len(times) // 2])
                del ta, tb
            if anchor:
                entry["anchor"] = {"lib": anchor[0], "ms": anchor[1], "tflops": 2 * m * n * k / anchor[1] / 1e9,
                                   "ratio": anchor[1] / ms}
            print(f"matmul {v.kernel.name:<30} {m}x{n}x{k}: {ms:.2f} ms {tflops:.1f} TFLOP/s" +
                  (f"   {anchor[0]} {anchor[1]:.2f} ms {entry['anchor']['tflops']:.1f} TFLOP/s ratio "
                   f"{entry['anchor']['ratio']:.3f}" if anchor else ""), flush=True)
            out.append(entry)
            for p in (a, b, c):
                _memory.free(p)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default="benchmarks/results/dtype_kernels.json")
    parser.add_argument("--only", default="transpose,dot,matmul")
    args = parser.parse_args(argv)
    result = {"environment": environment()}
    for part in args.only.split(","):
        result[part] = {"transpose": bench_transpose, "dot": bench_dot, "matmul": bench_matmul}[part](args.quick)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
