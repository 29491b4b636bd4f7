"""Find a CUDA compiler for the kernel build, or name the package-index one to install.

Looked for in this order, the first of a supported release winning:
  1. $NVCC
  2. `nvcc` on the PATH
  3. $CUDA_HOME/bin/nvcc (then $CUDA_PATH)
  4. nvidia/cu13/bin/nvcc inside this interpreter's site-packages, where the package-index compiler
     (PINNED below) lands; used only when its packages are all of one release.

Standard library only: build_ptx.py, the Makefile's tools/devenv.py and the wheel build backend
all import it.

    python3 tools/cuda_compiler.py        # prints "nvcc 13.0.88 (PATH): /usr/local/bin/nvcc" or exits 1
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

# The package-index compiler, every part of one release: nvcc alone pulls in the newest nvvm, crt and
# runtime, and a 13.0 nvcc with 13.5 headers fails in ptxas. 13.0 matches the oldest driver the
# kernels ask for (CUDA 13.0, R580).
PINNED_RELEASE = "13.0.88"
PINNED = [
    f"{name}=={PINNED_RELEASE}"
    for name in ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cuda-crt", "nvidia-cuda-runtime")
]
# the CUDA C++ core library's headers of the same release (cuda_fp16.h / cuda_bf16.h include <nv/target>)
PINNED.append("nvidia-cuda-cccl==13.0.85")
OLDEST = (12, 8)  # the oldest nvcc that knows every arch in build_ptx.DEFAULT_ARCHS (sm_120)
NEWEST_MAJOR = 13


class Compiler(NamedTuple):
    path: str
    version: str  # "13.0.88"
    origin: str  # "NVCC", "PATH", "CUDA_HOME", "package index"

    def __str__(self) -> str:
        return f"nvcc {self.version} ({self.origin}): {self.path}"


class NoCompilerError(RuntimeError):
    pass


def version_of(exe: str) -> str | None:
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"release [\d.]+, V(\d+\.\d+\.\d+)", out) or re.search(r"release (\d+\.\d+)", out)
    return match.group(1) if match else None


def supported(version: str) -> bool:
    major, minor = (int(x) for x in version.split(".")[:2])
    return OLDEST <= (major, minor) and major <= NEWEST_MAJOR


def site_nvcc() -> tuple[str, str] | None:
    """The package-index nvcc visible to this interpreter, and why it cannot be used (or "")."""
    for entry in sys.path:
        exe = Path(entry or ".") / "nvidia" / "cu13" / "bin" / "nvcc"
        if exe.is_file() and os.access(exe, os.X_OK):
            return str(exe), mixed_releases()
    return None


def mixed_releases() -> str:
    """ "" when the compiler packages installed here are of one release, else what differs."""
    from importlib import metadata

    found = {}
    for requirement in PINNED:
        name = requirement.split("==")[0]
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "missing"
    releases = {".".join(v.split(".")[:2]) for v in found.values()}
    if len(releases) == 1 and "missing" not in found.values():
        return ""
    return "its packages are of different releases: " + ", ".join(f"{n} {v}" for n, v in found.items())


def candidates():
    if os.environ.get("NVCC"):
        yield os.environ["NVCC"], "NVCC"
    if exe := shutil.which("nvcc"):
        yield exe, "PATH"
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            yield str(Path(os.environ[var]) / "bin" / "nvcc"), var


def find(report=None) -> Compiler | None:
    """The compiler to use, or None. `report(line)` hears about every compiler passed over."""
    report = report or (lambda line: None)
    for exe, origin in candidates():
        version = version_of(exe)
        if version is None:
            report(f"{origin} names {exe}, which does not run as nvcc")
        elif not supported(version):
            report(f"passing over nvcc {version} ({origin}: {exe}): gpumat needs 12.8 or newer, 13.x at most")
        else:
            return Compiler(exe, version, origin)
    if hit := site_nvcc():
        exe, problem = hit
        version = version_of(exe)
        if problem:
            report(f"passing over the package-index nvcc at {exe}: {problem}")
        elif version and supported(version):
            return Compiler(exe, version, "package index")
        else:
            report(f"passing over the package-index nvcc at {exe} (version {version})")
    return None


def require() -> Compiler:
    notes = []
    compiler = find(notes.append)
    if compiler is None:
        raise NoCompilerError(
            "\n".join(
                [
                    *notes,
                    "no CUDA compiler (nvcc 12.8+ or 13.x) found: not $NVCC, not on the PATH, not in $CUDA_HOME/bin, "
                    "not in this Python's site-packages.",
                    "Either run `make kernels`, which installs the package-index compiler into the project's "
                    "environment, or install the CUDA toolkit, or run",
                    f"  {Path(sys.executable).name} -m pip install {' '.join(PINNED)}",
                ]
            )
        )
    return compiler


if __name__ == "__main__":
    try:
        print(require())
    except NoCompilerError as err:
        print(err, file=sys.stderr)
        sys.exit(1)
