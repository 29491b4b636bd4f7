"""`make sanitize`: the GPU tests under compute-sanitizer, memcheck then racecheck, zero errors wanted.

Runs with fewer hypothesis examples (the tools slow every kernel by 10-100x) and stops at the first
tool that reports an error. Extra arguments go to pytest (e.g. a test file).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

TOOLS = ("memcheck", "racecheck")


def main() -> int:
    exe = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not os.path.exists(exe):
        print("make sanitize: compute-sanitizer not found (it comes with the CUDA toolkit)", file=sys.stderr)
        return 2
    env = {**os.environ, "GPUMAT_EXAMPLES": os.environ.get("GPUMAT_EXAMPLES", "4")}
    tests = sys.argv[1:] or ["tests"]
    for tool in TOOLS:
        cmd = [
            exe,
            "--tool",
            tool,
            "--error-exitcode",
            "86",
            "--target-processes",
            "all",
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-m",
            "gpu",
            "-p",
            "no:cacheprovider",
            *tests,
        ]
        print(f"== compute-sanitizer --tool {tool}", flush=True)
        code = subprocess.run(cmd, env=env).returncode
        if code != 0:
            print(
                f"make sanitize: {tool} failed (exit {code}{', errors reported' if code == 86 else ''})",
                file=sys.stderr,
            )
            return 1
    print("make sanitize: memcheck and racecheck report no errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
