#!/usr/bin/env python3
"""What installing gpumat costs, against CuPy and PyTorch measured in the same run: the bytes pip
downloads (every wheel of the package and its dependencies, as resolved for this interpreter and
platform) and the bytes they take once installed. Needs no GPU; needs the package index.

    python3 benchmarks/install_size.py dist/gpumat-0.1.0-py3-none-any.whl

Writes benchmarks/results/install-size-<platform>-<date>.json; benchmarks/tables.py reads it for the
README's first screen.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the anchors: each library with the CUDA libraries it needs at run time, as its docs tell users to install it
ANCHORS = {
    "CuPy (cupy-cuda13x[ctk])": ["cupy-cuda13x[ctk]"],
    "PyTorch (torch, CUDA build)": ["torch"],
}


def du(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            file = Path(root) / name
            if not file.is_symlink():
                total += file.stat().st_size
    return total


def measure(requirements: list[str], work: Path) -> dict:
    """Download the requirements with their dependencies, install the wheels into an empty folder."""
    wheels, target = work / "wheels", work / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "download", "--only-binary=:all:", "-d", str(wheels), *requirements], check=True)
    files = sorted(wheels.glob("*.whl"))
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-compile", "--target", str(target), *map(str, files)], check=True
    )
    return {
        "requirements": requirements,
        "wheels": {f.name: f.stat().st_size for f in files},
        "download_bytes": sum(f.stat().st_size for f in files),
        "installed_bytes": du(target),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("wheel", type=Path, help="gpumat's wheel (make wheel)")
    opts = parser.parse_args()
    packages = {"gpumat (with cuda-bindings and numpy)": [str(opts.wheel.resolve())], **ANCHORS}
    results = {}
    for name, requirements in packages.items():
        with tempfile.TemporaryDirectory() as work:
            results[name] = measure(requirements, Path(work))
        mib = results[name]["download_bytes"] / 1e6, results[name]["installed_bytes"] / 1e6
        print(f"{name}: {mib[0]:.1f} MB to download, {mib[1]:.1f} MB installed", flush=True)
    date = datetime.date.today().isoformat()
    plat = f"{platform.system()}-{platform.machine()}".lower()
    out = {
        "op": "install-size",
        "device": None,  # no GPU is involved: wheels as pip resolves them for this interpreter and platform
        "platform": f"{platform.system()} {platform.machine()}",
        "python": platform.python_version(),
        "date": date,
        "method": "pip download --only-binary=:all: of the package and its dependencies (the wheels' bytes), then "
        "pip install --no-deps --no-compile --target of those wheels into an empty folder (its bytes)",
        "anchor": "CuPy and PyTorch with their CUDA libraries, same run, same interpreter and platform",
        "gpumat_wheel": opts.wheel.name,
        "packages": results,
    }
    path = ROOT / "benchmarks" / "results" / f"install-size-{plat}-{date}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
