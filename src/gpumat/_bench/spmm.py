"""`python -m gpumat bench spmm`: CSR x dense (SpMV and SpMM) against cuSPARSE and CuPy, same inputs.

Matrices (ANCHORS.md): 2^20 x 2^20 with 16 nonzeros a row on average, uniform rows (exactly 16, columns
uniform at random) and power-law rows (lengths Zipf(1.8), capped at 4096, scaled to a mean of 16,
columns uniform at random), plus a banded matrix (16 diagonals around the main one). N in 1, 8, 32, 128.
Anchors, when CuPy imports: `csr @ dense` / `csr @ vector` (cupyx.scipy.sparse.csr_matrix), and cuSPARSE
SpMM with row-major B and C through CuPy's low-level bindings for ALG_DEFAULT, CSR_ALG1, CSR_ALG2 and
CSR_ALG3 (the best is reported). A missing anchor prints "-".
"""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np

from .. import sparse as sp
from ..matrix import Matrix
from .common import copy_gbps, cupy, cupy_time_ms, print_table, time_ms, write_json

ops = importlib.import_module("gpumat.spmm")  # the module (gpumat.spmm is also the function's name)

SEED = 20261122
NS = (1, 8, 32, 128)
CUSPARSE_ALGS = {"ALG_DEFAULT": 0, "CSR_ALG1": 4, "CSR_ALG2": 6, "CSR_ALG3": 12}  # cusparseSpMMAlg_t values
SLOW_MS = 5.0  # variants slower than this are timed with fewer repeats
CHECK_ROWS = 512  # rows of every gpumat result checked against a float64 host reference


# -------------------------------------------------------------------------------------------------
# matrices (vectorised numpy, fixed seed)
# -------------------------------------------------------------------------------------------------
def _assemble(rng, lengths: np.ndarray, cols: int, col_fn=None):
    indptr = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    nnz = int(indptr[-1])
    indices = rng.integers(0, cols, size=nnz, dtype=np.int32) if col_fn is None else col_fn(indptr)
    data = (rng.random(nnz, dtype=np.float32) * 2 - 1).astype(np.float32)
    return indptr, indices, data, (len(lengths), cols)


def uniform_matrix(rng, rows: int, per_row: int = 16):
    return _assemble(rng, np.full(rows, per_row, dtype=np.int64), rows)


def power_law_matrix(rng, rows: int, mean: float = 16.0, exponent: float = 1.8, cap: int = 4096):
    raw = np.minimum(rng.zipf(exponent, size=rows), cap).astype(np.float64)
    scaled = raw * (mean * rows / raw.sum())
    lengths = np.floor(scaled).astype(np.int64)
    lengths += rng.random(rows) < (scaled - lengths)  # round at random: the mean stays on target
    return _assemble(rng, lengths, rows)


def banded_matrix(rng, rows: int, width: int = 16):
    offsets = np.arange(-(width // 2), width - width // 2, dtype=np.int64)
    first = np.maximum(np.arange(rows) + offsets[0], 0)
    last = np.minimum(np.arange(rows) + offsets[-1], rows - 1)
    lengths = last - first + 1

    def columns(indptr):
        row_of = np.repeat(np.arange(rows, dtype=np.int64), lengths)
        return (first[row_of] + np.arange(indptr[-1]) - indptr[:-1][row_of]).astype(np.int32)

    return _assemble(rng, lengths, rows, columns)


# -------------------------------------------------------------------------------------------------
# anchors
# -------------------------------------------------------------------------------------------------
class CupyAnchors:
    """CuPy csr_matrix @ dense / vector, and cuSPARSE SpMM (row-major B and C) for each algorithm."""

    def __init__(self, cp, host):
        import cupyx.scipy.sparse as cpsparse

        indptr, indices, data, shape = host
        self.cp, self.shape, self.nnz = cp, shape, len(data)
        self.indptr = cp.asarray(indptr.astype(np.int32))
        self.indices = cp.asarray(indices)
        self.data = cp.asarray(data)
        self.csr = cpsparse.csr_matrix((self.data, self.indices, self.indptr), shape=shape)

    def cupy_ms(self, b: np.ndarray, repeat: int):
        cp = self.cp
        x = cp.asarray(b[:, 0].copy()) if b.shape[1] == 1 else cp.asarray(b)
        return cupy_time_ms(cp, lambda: self.csr @ x, repeat=repeat)

    def cusparse_ms(self, b: np.ndarray, repeat: int) -> dict:
        """{algorithm: ms or None} for cusparseSpMM with row-major B and C."""
        from cupy.cuda import device as cpdevice
        from cupy_backends.cuda.libs import cusparse as cs

        cp = self.cp
        rows, cols = self.shape
        n = b.shape[1]
        r32f = 0  # CUDA_R_32F
        index32 = getattr(cs, "CUSPARSE_INDEX_32I", 2)
        base0 = getattr(cs, "CUSPARSE_INDEX_BASE_ZERO", 0)
        order_row = getattr(cs, "CUSPARSE_ORDER_ROW", 2)
        op = getattr(cs, "CUSPARSE_OPERATION_NON_TRANSPOSE", 0)
        handle = cpdevice.get_cusparse_handle()
        bd, cd = cp.asarray(b), cp.empty((rows, n), dtype=cp.float32)
        alpha, beta = np.array(1.0, dtype=np.float32), np.array(0.0, dtype=np.float32)
        mat_a = cs.createCsr(
            rows,
            cols,
            self.nnz,
            self.indptr.data.ptr,
            self.indices.data.ptr,
            self.data.data.ptr,
            index32,
            index32,
            base0,
            r32f,
        )
        mat_b = cs.createDnMat(cols, n, n, bd.data.ptr, r32f, order_row)
        mat_c = cs.createDnMat(rows, n, n, cd.data.ptr, r32f, order_row)
        results = {}
        try:
            for name, alg in CUSPARSE_ALGS.items():
                try:
                    alg = getattr(cs, f"CUSPARSE_SPMM_{name}", alg)
                    size = cs.spMM_bufferSize(
                        handle, op, op, alpha.ctypes.data, mat_a, mat_b, beta.ctypes.data, mat_c, r32f, alg
                    )
                    buf = cp.empty(max(int(size), 1), dtype=cp.int8)
                    if hasattr(cs, "spMM_preprocess"):
                        try:
                            cs.spMM_preprocess(
                                handle,
                                op,
                                op,
                                alpha.ctypes.data,
                                mat_a,
                                mat_b,
                                beta.ctypes.data,
                                mat_c,
                                r32f,
                                alg,
                                buf.data.ptr,
                            )
                        except Exception:
                            pass
                    results[name] = cupy_time_ms(
                        cp,
                        lambda: cs.spMM(
                            handle,
                            op,
                            op,
                            alpha.ctypes.data,
                            mat_a,
                            mat_b,
                            beta.ctypes.data,
                            mat_c,
                            r32f,
                            alg,
                            buf.data.ptr,
                        ),
                        repeat=repeat,
                    )
                except Exception as exc:  # an algorithm cuSPARSE refuses for this layout: report, go on
                    print(f"  cuSPARSE {name}: {type(exc).__name__}: {exc}")
                    results[name] = None
        finally:
            cs.destroySpMat(mat_a)
            cs.destroyDnMat(mat_b)
            cs.destroyDnMat(mat_c)
            del bd, cd
        return results

    def free(self):
        del self.csr, self.indptr, self.indices, self.data
        self.cp.get_default_memory_pool().free_all_blocks()


# -------------------------------------------------------------------------------------------------
# the run
# -------------------------------------------------------------------------------------------------
def _variants(n: int) -> list[str]:
    if n == 1:
        return ["vector", *(f"vector{k}" for k in ops.VECTOR_LANES), "tile8", "scalar"]
    return [*(f"tile{t}" for t in ops.TILES), "vector", "scalar"]


def _time(fn, repeat: int) -> float:
    ms = time_ms(fn, warmup=1, repeat=3)
    return ms if ms > SLOW_MS else time_ms(fn, warmup=2, repeat=repeat)


def _sample_error(host, b: np.ndarray, got: np.ndarray, rows: np.ndarray) -> float:
    indptr, indices, data, _ = host
    ref = np.empty((len(rows), b.shape[1]))
    for i, r in enumerate(rows):
        sl = slice(indptr[r], indptr[r + 1])
        ref[i] = data[sl].astype(np.float64) @ b[indices[sl]].astype(np.float64)
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(got[rows].astype(np.float64) - ref) / (denom if denom else 1.0))


def run(args=None) -> dict:
    quick = bool(getattr(args, "quick", False))
    repeat = 5 if quick else 10
    log_rows = 18 if quick else 20
    rows = 2**log_rows
    cp = cupy()
    rng = np.random.default_rng(SEED)
    try:
        copy = copy_gbps(2**28)
    except Exception:
        copy = None
    matrices = {
        "uniform": uniform_matrix(rng, rows),
        "power-law": power_law_matrix(rng, rows),
        "banded": banded_matrix(rng, rows),
    }
    summary, sweep, records = [], [], []
    for label, host in matrices.items():
        host = sp.validate_csr(*host)
        nnz = len(host.data)
        S = sp.CSRMatrix._from_host(host)
        stats = S.stats
        print(
            f"\n{label}: {rows}x{rows}, nnz {nnz}, {stats.mean:.2f} a row (std {stats.std:.1f}, max {stats.max}), "
            f"{stats.long_rows} rows over {stats.split} cut into {stats.chunks} chunks"
        )
        anchors = None
        if cp is not None:
            try:
                anchors = CupyAnchors(cp, host)
            except Exception as exc:
                print(f"  CuPy anchors unavailable: {type(exc).__name__}: {exc}")
        check_rows = np.sort(rng.choice(rows, size=min(CHECK_ROWS, rows), replace=False))
        for n in NS[:3] if quick else NS:
            b = (rng.random((rows, n), dtype=np.float32) * 2 - 1).astype(np.float32)
            flop = 2 * nnz * n
            entry = {"matrix": label, "N": n, "nnz": nnz, "stats": dataclasses.asdict(stats), "variants": {}}
            with Matrix.from_numpy(b) as B, Matrix.empty(rows, n) as C:
                auto = ops.choose_algorithm(n, stats, ops.vec4_ok(B, C))
                entry["auto_picks"] = auto
                for name in ["auto", *_variants(n)]:
                    try:
                        ms = _time(lambda: ops.spmm(S, B, out=C, algorithm=name), repeat)
                        err = _sample_error(host, b, C.to_numpy(), check_rows)
                    except Exception as exc:
                        print(f"  {name} N={n}: {type(exc).__name__}: {exc}")
                        continue
                    entry["variants"][name] = {"ms": ms, "gflops": flop / ms / 1e6, "sample_rel_error": err}
                    sweep.append([label, n, name, ms, flop / ms / 1e6, err])
            cupy_ms, cusparse = None, {}
            if anchors is not None:
                try:
                    cupy_ms = anchors.cupy_ms(b, repeat)
                except Exception as exc:
                    print(f"  CuPy csr @ {'vector' if n == 1 else 'dense'}: {type(exc).__name__}: {exc}")
                if n > 1:
                    try:
                        cusparse = anchors.cusparse_ms(b, repeat)
                    except Exception as exc:
                        print(f"  cuSPARSE SpMM: {type(exc).__name__}: {exc}")
                cp.get_default_memory_pool().free_all_blocks()
            timed = {k: v for k, v in cusparse.items() if v is not None}
            best_alg = min(timed, key=timed.get) if timed else None
            best_ms = timed.get(best_alg) if best_alg else None
            ours = entry["variants"].get("auto", {}).get("ms")
            gather_ms = nnz * n * 4 / (copy * 1e6) if copy else None
            entry.update(
                cupy_ms=cupy_ms,
                cusparse_ms=cusparse,
                cusparse_best=best_alg,
                cusparse_best_ms=best_ms,
                gather_bound_ms=gather_ms,
                ratio_cusparse=best_ms / ours if best_ms and ours else None,
                ratio_cupy=cupy_ms / ours if cupy_ms and ours else None,
            )
            records.append(entry)
            summary.append(
                [
                    label,
                    n,
                    auto,
                    ours,
                    flop / ours / 1e6 if ours else None,
                    f"{best_ms:.3f} ({best_alg})" if best_ms else None,
                    entry["ratio_cusparse"],
                    cupy_ms,
                    entry["ratio_cupy"],
                    gather_ms,
                ]
            )
        if anchors is not None:
            anchors.free()
        S.free()
    print_table(
        "SpMM/SpMV variants (sample error: relative, float64 reference on sampled rows)",
        ["matrix", "N", "variant", "ms", "GFLOP/s", "sample err"],
        sweep,
    )
    print_table(
        "CSR x dense, float32, auto (ratio = anchor time / gpumat time, >1 is faster than the anchor)",
        [
            "matrix",
            "N",
            "auto picks",
            "ms",
            "GFLOP/s",
            "cuSPARSE best ms",
            "ratio",
            "CuPy ms",
            "ratio CuPy",
            "gather bound ms",
        ],
        summary,
    )
    payload = {
        "anchor": "cuSPARSE SpMM (row-major B, C; best of ALG_DEFAULT/CSR_ALG1/2/3) and CuPy csr @ dense/vector "
        "through CuPy, same process, same inputs",
        "timing": f"CUDA events, median of {repeat} runs after warm-ups",
        "copy_gbps": copy,
        "rows": rows,
        "cases": records,
    }
    write_json("spmm", payload)
    return payload
