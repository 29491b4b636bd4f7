"""Every named matmul variant of every dtype at one shape, GPU time per call (CUDA events, median):
`python3 benchmarks/named_variants.py LABEL [M N K] [REPEAT]` prints one JSON line. Uses only
gm.matmul(algorithm=...), so it runs unchanged in any tree since the variants got their names; with
compare_trees.sh-style alternation it separates a tree's effect from the run-to-run noise."""

from __future__ import annotations

import json
import sys

import numpy as np

NAMES = {
    "float32": ("auto", "sgemm128x256k16", "sgemm128x256", "sgemm128x128", "sgemm128x64", "sgemm64x64"),
    "float16": ("auto", "mma128x128", "mma128x64", "mma64x128", "mma64x64", "wgmma128x256"),
    "float64": ("auto", "dmma128x128", "dmma128x64", "dmma64x128", "dmma128x64pipe"),
}


def main() -> None:
    import gpumat as gm
    from gpumat._bench.common import time_ms

    label = sys.argv[1] if len(sys.argv) > 1 else "gpumat"
    m, n, k = (int(x) for x in sys.argv[2:5]) if len(sys.argv) >= 5 else (2137, 108, 1055)
    repeat = int(sys.argv[5]) if len(sys.argv) > 5 else 30
    rng = np.random.default_rng(5)
    out = {"label": label, "shape": [m, n, k]}
    for dtype, names in NAMES.items():
        A = gm.Matrix.from_numpy(rng.uniform(-1, 1, (m, k)), dtype=dtype)
        B = gm.Matrix.from_numpy(rng.uniform(-1, 1, (k, n)), dtype=dtype)
        C = gm.Matrix.empty(m, n, dtype=dtype)
        for name in names:
            out[f"{dtype} {name} us"] = 1e3 * time_ms(lambda: gm.matmul(A, B, out=C, algorithm=name), repeat=repeat)
        for x in (A, B, C):
            x.free()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
