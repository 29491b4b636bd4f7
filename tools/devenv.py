"""What the Makefile runs: bring the Python packages and the CUDA compiler a target needs, then run it.

    python3 tools/devenv.py [--gpu] [--deps] [--extra NAME]... [--kernels | --kernels-if-absent] [-- PYTHON-ARGS...]

--gpu         the command needs a GPU: before anything is fetched or built, ask the NVIDIA driver
              (libcuda.so.1, through ctypes) for one; without one, say what is missing in one line and
              exit 2, as `python -m gpumat` does
--deps        the runtime dependencies (pyproject's [project] dependencies), --extra NAME an extra's too
--kernels     build the kernels first (build_ptx.py), with a compiler found or installed
--kernels-if-absent
              build them only when none are built (no manifest, or a fatbin it lists is missing):
              with built kernels no compiler is looked for or installed (`make info`)
--module M    the command also imports M (pip, for `make wheel`): a Python without it is not used as it is
--nvcc-env    with --kernels: the command gets $NVCC naming the compiler the kernels were just built with
              (`make wheel`: the package build then finds that compiler, sees the kernels up to date and
              fetches none; the build's progress lines were printed here, where pip cannot hide them)
PYTHON-ARGS   run `python PYTHON-ARGS` in the chosen environment, with src/ on PYTHONPATH

The Python it uses, first that applies:
  1. the active virtual environment ($VIRTUAL_ENV); what is missing is installed into it;
  2. the interpreter running this script, as it is, when it already imports everything the target
     needs and, for --kernels, sees a supported nvcc: nothing is installed, nothing is fetched;
  3. the project's own environment, .venv/ in the source tree, created on first use and filled from
     the package index (a stamp keyed on pyproject.toml skips the check on later runs).
The compiler is the one tools/cuda_compiler.py finds; when there is none, the pinned package-index
compiler is installed into the environment of 1 or 3.
Standard library only; Python 3.10+.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import cuda_compiler  # noqa: E402

LOCAL_ENV = ROOT / ".venv"
SRC = ROOT / "src"
KERNEL_MANIFEST = SRC / "gpumat" / "kernels" / "manifest.json"
# the driver's own library, which every CUDA program loads (cuda.bindings included); never the
# toolkit's stub libcuda.so, which loads anywhere and then fails every call
DRIVER_LIBRARY = "libcuda.so.1"
NO_GPU_PREFIX = "gpumat: no usable NVIDIA GPU"  # the words `python -m gpumat` starts its line with
# what each requirement set must make importable (checked before anything is installed)
MODULES = {
    "deps": ["numpy", "cuda.bindings.driver"],
    "test": ["pytest", "hypothesis", "scipy", "ml_dtypes"],
    "plot": ["matplotlib"],
    "lint": ["ruff"],
    "docs": ["sphinx", "numpydoc", "myst_parser"],
}


def say(line: str) -> None:
    print(f"devenv: {line}", file=sys.stderr, flush=True)


def gpu_problem(load_library: Callable[[str], object] = ctypes.CDLL) -> str | None:
    """None when the NVIDIA driver loads, initialises and sees at least one GPU; else what is missing,
    in the words `python -m gpumat` uses. Needs no package: the driver's C API through ctypes."""
    try:
        driver = load_library(DRIVER_LIBRARY)
    except OSError as exc:
        return f"no NVIDIA driver found ({exc})"
    result = driver.cuInit(0)
    if result != 0:
        return driver_error(driver, result, "cuInit")
    count = ctypes.c_int(0)
    result = driver.cuDeviceGetCount(ctypes.pointer(count))
    if result != 0:
        return driver_error(driver, result, "cuDeviceGetCount")
    if count.value == 0:
        return "the NVIDIA driver reports no GPU"
    return None


def driver_error(driver, result: int, call: str) -> str:
    """ "CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected", or the bare number if the driver cannot name it."""
    name, text = ctypes.c_char_p(), ctypes.c_char_p()
    if driver.cuGetErrorName(result, ctypes.pointer(name)) != 0 or not name.value:
        return f"{call} failed with CUDA error {result}"
    driver.cuGetErrorString(result, ctypes.pointer(text))
    described = name.value.decode(errors="replace")
    return f"{described}: {text.value.decode(errors='replace')}" if text.value else described


def kernels_built(manifest_path: Path = KERNEL_MANIFEST) -> bool:
    """Whether a build left kernels to load: a manifest, and every fatbin it lists beside it."""
    try:
        modules = json.loads(manifest_path.read_text())["modules"]
    except (OSError, ValueError, KeyError):
        return False
    return all((manifest_path.parent / module["fatbin"]).is_file() for module in modules.values())


class Decision(NamedTuple):
    stop: str | None  # the one line to print before exiting 2; None to go on
    build_kernels: bool  # run build_ptx.py (which needs a compiler, found or installed)


def decide(*, needs_gpu: bool, problem: str | None, kernels: str, built: bool) -> Decision:
    """What a target does, from what it asks for and what this machine has.

    kernels: "no" (the target runs without them), "build" (bring them up to date: a compiler is
    needed even when nothing changed, to know that), "if-absent" (any built kernels will do).
    A missing GPU stops a target that needs one before anything else, so nothing is fetched for it.
    """
    if needs_gpu and problem is not None:
        return Decision(f"{NO_GPU_PREFIX}: {problem}", build_kernels=False)
    build = kernels == "build" or (kernels == "if-absent" and not built)
    return Decision(None, build_kernels=build)


def requirements(extras: list[str], deps: bool) -> list[str]:
    """The requirement strings for the runtime dependencies and the named extras, read from pyproject.toml."""
    text = (ROOT / "pyproject.toml").read_text()
    try:
        import tomllib

        project = tomllib.loads(text)["project"]
        runtime, optional = project["dependencies"], project.get("optional-dependencies", {})
    except ImportError:  # Python 3.10: our pyproject's two lists, read by pattern
        listed = lambda body: re.findall(r'"([^"]+)"', body)  # noqa: E731
        runtime = listed(re.search(r"^dependencies\s*=\s*\[(.*?)\]", text, re.M | re.S).group(1))
        section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
        optional = {
            m.group(1): listed(m.group(2)) for m in re.finditer(r"^([\w-]+)\s*=\s*\[(.*?)\]", section, re.M | re.S)
        }
    wanted = list(runtime) if deps else []
    for extra in extras:
        if extra not in optional:
            sys.exit(f"devenv: pyproject.toml has no extra named {extra!r}")
        wanted += optional[extra]
    return wanted


def missing_modules(python: str, modules: list[str]) -> list[str]:
    if not modules:
        return []
    if Path(python) == Path(sys.executable):
        absent = []
        for name in modules:
            try:
                if importlib.util.find_spec(name) is None:
                    absent.append(name)
            except ImportError:  # a parent package is missing
                absent.append(name)
        return absent
    probe = (
        "import importlib.util, sys\n"
        "def has(n):\n"
        "    try: return importlib.util.find_spec(n) is not None\n"
        "    except ImportError: return False\n"
        "print(' '.join(n for n in sys.argv[1:] if not has(n)))"
    )
    out = subprocess.run([python, "-c", probe, *modules], capture_output=True, text=True, check=True).stdout
    return out.split()


def compiler_in(python: str) -> str | None:
    """The compiler build_ptx.py would use when run by `python`, as a line, or None."""
    result = subprocess.run([python, str(ROOT / "tools" / "cuda_compiler.py")], capture_output=True, text=True)
    return result.stdout.strip() if result.returncode == 0 else None


def pip_install(python: str, packages: list[str], where: str) -> None:
    say(f"installing into {where}: {' '.join(packages)}")
    cmd = [python, "-m", "pip", "install", "--disable-pip-version-check", "-q", *packages]
    if subprocess.run(cmd).returncode != 0:
        sys.exit(
            f"devenv: `{' '.join(cmd)}` failed. Without access to the package index, install these "
            f"packages another way, or activate an environment that has them."
        )


def local_env() -> str:
    python = LOCAL_ENV / "bin" / "python"
    if not python.exists():
        say(f"creating the project's environment {LOCAL_ENV} (python {sys.version.split()[0]})")
        if subprocess.run([sys.executable, "-m", "venv", str(LOCAL_ENV)]).returncode != 0:
            sys.exit(
                f"devenv: `{sys.executable} -m venv {LOCAL_ENV}` failed: install Python's venv module "
                "(on Debian/Ubuntu: apt install python3-venv), or activate a virtual environment"
            )
        # the source tree on the environment's path, as an editable install would put it
        purelib = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        (Path(purelib) / "gpumat-src.pth").write_text(str(SRC) + "\n")
    return str(python)


def choose_python(modules: list[str], kernels: bool) -> tuple[str, str]:
    """(interpreter, kind): kind is "active", "as-is" or "local"."""
    if os.environ.get("VIRTUAL_ENV"):
        python = Path(os.environ["VIRTUAL_ENV"]) / "bin" / "python"
        if not python.exists():
            sys.exit(f"devenv: VIRTUAL_ENV={os.environ['VIRTUAL_ENV']} has no bin/python; deactivate it or fix it")
        return str(python), "active"
    if not missing_modules(sys.executable, modules) and (not kernels or cuda_compiler.find() is not None):
        return sys.executable, "as-is"
    return local_env(), "local"


def main() -> int:
    parser = argparse.ArgumentParser(prog="tools/devenv.py", description=__doc__.split("\n")[0])
    parser.add_argument("--gpu", action="store_true", help="stop at once, exit 2, when no GPU is usable")
    parser.add_argument("--deps", action="store_true")
    parser.add_argument("--extra", action="append", default=[])
    kernel_modes = parser.add_mutually_exclusive_group()
    kernel_modes.add_argument("--kernels", dest="kernels", action="store_const", const="build", default="no")
    kernel_modes.add_argument("--kernels-if-absent", dest="kernels", action="store_const", const="if-absent")
    parser.add_argument("--module", action="append", default=[], help="one more module the command imports")
    parser.add_argument("--nvcc-env", action="store_true", help="pass the kernels' compiler on as $NVCC")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    opts = parser.parse_args()
    args = opts.args[1:] if opts.args[:1] == ["--"] else opts.args
    modules = (MODULES["deps"] if opts.deps else []) + [m for e in opts.extra for m in MODULES.get(e, [])] + opts.module

    decision = decide(
        needs_gpu=opts.gpu,
        problem=gpu_problem() if opts.gpu else None,
        kernels=opts.kernels,
        built=opts.kernels == "if-absent" and kernels_built(),
    )
    if decision.stop:
        # one line, like the CLI's, plus where someone without a GPU can go on
        print(f"{decision.stop}; make test and make kernels run without one", file=sys.stderr, flush=True)
        return 2

    python, kind = choose_python(modules, decision.build_kernels)
    where = {"active": f"the active environment {os.environ.get('VIRTUAL_ENV')}", "local": str(LOCAL_ENV)}.get(kind)
    if kind != "as-is":
        wanted = requirements(opts.extra, opts.deps)
        sets = ["deps"] * opts.deps + sorted(set(opts.extra))
        key = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
        if wanted and kind == "local":
            # installed for this pyproject.toml already, by this target or one that needs more
            done = [
                set(f.name[len(".gpumat-") : -len(".stamp")].split("+"))
                for f in LOCAL_ENV.glob(".gpumat-*.stamp")
                if f.read_text() == key
            ]
            if not any(set(sets) <= d for d in done):
                stamp = LOCAL_ENV / f".gpumat-{'+'.join(sets)}.stamp"
                pip_install(python, wanted, where)
                stamp.write_text(key)
        elif wanted and missing_modules(python, modules):
            pip_install(python, wanted, where)
        if decision.build_kernels and compiler_in(python) is None:
            pip_install(python, cuda_compiler.PINNED, where)
            if compiler_in(python) is None:
                subprocess.run([python, str(ROOT / "tools" / "cuda_compiler.py")])
                return 1

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    if decision.build_kernels:
        built = subprocess.run([python, str(ROOT / "build_ptx.py")], env=env)
        if built.returncode != 0:
            return built.returncode
        if opts.nvcc_env and not env.get("NVCC") and (found := compiler_in(python)):
            env["NVCC"] = found.split(": ", 1)[1]  # "nvcc 13.0.88 (PATH): /usr/local/bin/nvcc"
    if not args:
        return 0
    sys.stdout.flush()
    os.execve(python, [python, *args], env)


if __name__ == "__main__":
    sys.exit(main())
