#!/usr/bin/env python3
"""Soak test (issue 24): several threads for minutes of mixed gpumat work, each result checked.

Every thread loops over random operations on a random stream kind (its own gm.Stream, the per-thread
default stream, the legacy stream, a PyTorch stream, a CuPy stream): products (2-D, batched, transposed
operands, an epilogue), transposes, conversions, dot, zero-copy imports from PyTorch and CuPy that are
freed or dropped while work on them may still be queued, and exports back; each result is compared with
NumPy. At the end gpumat's memory in use must be back where it started.

    PYTHONPATH=src python3 benchmarks/soak.py --seconds 300 --threads 8 --json out.json

Runs on a GPU machine, not in CI; needs PyTorch and CuPy for the foreign streams and imports (without
them those kinds are left out and said so).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import threading
import time
import traceback

import numpy as np

import gpumat as gm


def _optional(name):
    try:
        return __import__(name)
    except Exception:
        return None


torch = _optional("torch")
cupy = _optional("cupy")


def close(got, ref, tol) -> bool:
    ref = np.asarray(ref, np.float64)
    scale = max(float(np.abs(ref).max()) if ref.size else 0.0, 1.0)
    return bool(np.all(np.abs(np.asarray(got, np.float64) - ref) <= tol * scale))


class Worker:
    def __init__(self, seed: int, deadline: float):
        self.rng = random.Random(seed)
        self.np = np.random.default_rng(seed)
        self.deadline = deadline
        self.ops = 0
        self.failures: list[str] = []
        self.own = gm.Stream()
        self.torch_stream = torch.cuda.Stream() if torch is not None else None
        self.cupy_stream = cupy.cuda.Stream(non_blocking=True) if cupy is not None else None

    def stream(self):
        kinds = ["own", "per-thread", "legacy"]
        kinds += ["torch"] if self.torch_stream is not None else []
        kinds += ["cupy"] if self.cupy_stream is not None else []
        kind = self.rng.choice(kinds)
        return {"own": self.own, "per-thread": 2, "legacy": 0}.get(kind) or (
            self.torch_stream if kind == "torch" else self.cupy_stream
        )

    def host(self, *shape, dtype=np.float32):
        return self.np.uniform(-1, 1, size=shape).astype(dtype)

    # --- operations ----------------------------------------------------------------------------------
    def op_matmul(self):
        dtype = self.rng.choice([np.float32, np.float64, np.float16])
        m, n, k = (self.rng.choice([1, 7, 31, 64, 129, 300]) for _ in range(3))
        batch = self.rng.choice([None, None, 3])
        a = self.host(*(() if batch is None else (batch,)), m, k, dtype=dtype)
        b = self.host(k, n, dtype=dtype)
        s = self.stream()
        trans = self.rng.random() < 0.3
        with gm.Matrix.from_numpy(np.swapaxes(a, -1, -2).copy() if trans else a, stream=s) as A:
            with gm.Matrix.from_numpy(b, stream=s) as B:
                use = A.T if trans else A
                act = self.rng.choice([None, "relu"])
                with gm.matmul(use, B, stream=s, activation=act, alpha=0.5) as C:
                    got = C.to_numpy(stream=s)
        ref = 0.5 * np.matmul(a.astype(np.float64), b.astype(np.float64))
        ref = np.maximum(ref, 0) if act == "relu" else ref
        tol = {np.float32: 1e-4, np.float64: 1e-10, np.float16: 2e-2}[dtype]
        return close(got, ref, tol * max(1, k) ** 0.5)

    def op_transpose_astype_dot(self):
        x = self.host(self.rng.choice([1, 33, 200]), self.rng.choice([1, 65, 150]))
        s = self.stream()
        with gm.Matrix.from_numpy(x, stream=s) as X, gm.transpose(X, stream=s) as T:
            with T.astype(np.float64, stream=s) as D:
                ok = np.array_equal(D.to_numpy(stream=s), x.T.astype(np.float64))
            ok = ok and abs(gm.dot(X, X, stream=s) - float(np.sum(x.astype(np.float64) ** 2))) <= 1e-6 * x.size
        return ok

    def op_import(self):
        """Zero-copy import from PyTorch or CuPy, a product queued on it, the import freed (or dropped)
        before the product is waited for, the producer's array dropped and its allocator given new work."""
        lib = self.rng.choice([x for x in ("torch", "cupy") if globals()[x] is not None] or [None])
        if lib is None:
            return True
        n = self.rng.choice([64, 256, 512])
        x = self.host(n, n, dtype=np.float64)
        if lib == "torch":
            t = torch.from_numpy(x).cuda()
            torch.cuda.synchronize()
            M = gm.from_dlpack(t)
        else:
            t = cupy.asarray(x)
            cupy.cuda.Device().synchronize()
            M = gm.asmatrix(t)
        s = self.stream()
        with gm.Matrix.from_numpy(x, stream=s) as H:
            transposed = self.rng.random() < 0.5
            C = gm.matmul(M.T if transposed else M, H, stream=s)
            if self.rng.random() < 0.5:
                M.free()
            del M, t
            if self.rng.random() < 0.5:
                gc.collect()
            filler = (
                [torch.full((n, n), 7.0, device="cuda", dtype=torch.float64) for _ in range(3)]
                if lib == "torch"
                else [cupy.full((n, n), 7.0) for _ in range(3)]
            )
            got = C.to_numpy(stream=s)
            C.free()
            del filler
        return close(got, (x.T if transposed else x) @ x, 1e-10 * n)

    def op_export(self):
        if torch is None and cupy is None:
            return True
        x = self.host(40, 30)
        with gm.Matrix.from_numpy(x) as X:
            view = X.T if self.rng.random() < 0.5 else X
            ref = x.T if view is not X else x
            if torch is not None and self.rng.random() < 0.5:
                got = torch.from_dlpack(view).cpu().numpy()
            elif cupy is not None:
                got = cupy.asnumpy(cupy.asarray(view))
            else:
                got = torch.from_dlpack(view).cpu().numpy()
            return np.array_equal(got, ref)

    def run(self) -> None:
        ops = [self.op_matmul, self.op_transpose_astype_dot, self.op_import, self.op_export]
        while time.monotonic() < self.deadline:
            op = self.rng.choice(ops)
            try:
                if not op():
                    self.failures.append(f"{op.__name__}: wrong result")
            except Exception:
                self.failures.append(f"{op.__name__}: {traceback.format_exc(limit=3)}")
            self.ops += 1
        self.own.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    gm.synchronize()
    gc.collect()
    gm.release_cached()
    start = gm.memory_info()
    deadline = time.monotonic() + args.seconds
    workers = [Worker(seed, deadline) for seed in range(args.threads)]
    threads = [threading.Thread(target=w.run) for w in workers]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    gm.synchronize()
    gc.collect()
    gm.release_cached()
    end = gm.memory_info()
    failures = [f for w in workers for f in w.failures]
    summary = {
        "device": gm.device().name,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "threads": args.threads,
        "seconds": round(elapsed, 1),
        "operations": sum(w.ops for w in workers),
        "failures": len(failures),
        "first_failures": failures[:5],
        "used_start": start["used"],
        "used_end": end["used"],
        "foreign": {"torch": torch is not None, "cupy": cupy is not None},
    }
    print(json.dumps(summary, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0 if not failures and end["used"] == start["used"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
