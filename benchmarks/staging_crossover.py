"""Where staging pageable copies through pinned buffers starts to pay: host -> device and back for sizes
around gpumat.memory.staging.STAGE_MIN, staged and direct (the driver's own pageable copy), beside CuPy.
`python3 benchmarks/staging_crossover.py` prints one JSON line: GB/s by size and path."""

from __future__ import annotations

import json

import numpy as np

from gpumat._bench.common import wall


def gbps(fn, nbytes: int, repeat: int = 15) -> float:
    return nbytes / wall(fn, repeat) / 1e9


def main() -> None:
    import importlib

    import gpumat as gm

    staging = importlib.import_module("gpumat.memory.staging")  # the module (gpumat.memory.staging names a function)

    out = {}
    try:
        import cupy as cp
    except ImportError:
        cp = None
    for mib in (1, 2, 4, 8, 16, 32, 64):
        n = mib << 18  # float32 elements
        host = np.random.default_rng(0).uniform(-1, 1, (n // 1024, 1024)).astype(np.float32)
        back = np.empty_like(host)
        m = gm.Matrix.from_numpy(host)
        row = {}
        for path, limit in (("staged", 0), ("direct", 1 << 62)):
            staging.STAGE_MIN = limit
            row[f"{path}_up"] = gbps(lambda: gm.Matrix.from_numpy(host).free(), host.nbytes)
            row[f"{path}_down"] = gbps(lambda: m.to_numpy(out=back), host.nbytes)
        if cp is not None:
            row["cupy_up"] = gbps(lambda: cp.asarray(host), host.nbytes)
            x = cp.asarray(host)
            row["cupy_down"] = gbps(lambda: x.get(out=back), host.nbytes)
        out[f"{mib} MiB"] = {k: round(v, 2) for k, v in row.items()}
        m.free()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
