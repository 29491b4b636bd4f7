#!/usr/bin/env python3
"""Compile cuda/*.cu ahead of time into src/gpumat/kernels/<name>.fatbin plus a manifest.

Each fatbin holds machine code for every arch in ARCHS and PTX for the lowest one (so a GPU newer
than any listed arch still runs, through the driver's JIT), every image compressed (FATBIN_FLAGS). A
module whose first line is a marker `// gpumat-archs: 90a` (arch-specific features, e.g. wgmma) is
built only for the listed archs whose base (90) is in ARCHS, as machine code alone; when none is, it
is skipped and the manifest lists it under "skipped" (Python never selects its kernels then).

Two files describe the build: manifest.json, all the runtime reads (each module's fatbin, the archs,
the CUDA version), and entries.json, the build's report for the tests: each entry point's parameter
types (read from PTX), for each arch the registers, shared memory, stack and spill bytes that ptxas
reports, and (where an sm_90 or later arch is built) whether it waits for the grid before it. A
module is rebuilt only when its sources, the arch list, the flags or the compiler change.

    python3 build_ptx.py            # every arch
    ARCHS=90 python3 build_ptx.py   # one arch, for quick iteration
    GPUMAT_LINEINFO=1 python3 build_ptx.py   # with source lines in the machine code, for ncu's source view

The compiler is found by tools/cuda_compiler.py ($NVCC, the PATH, $CUDA_HOME, or the package-index
nvcc in this Python's site-packages); `make kernels` installs the latter when there is none.

It talks while it works: one line when it starts, one line a module as each finishes (its own compile
time and the time since the start), one line at the end. A package build (`pip wheel .`, whose pip
hides the build's output unless given -v) calls main(echo_to_terminal=True): the lines then also go
to the controlling terminal, when there is one, so an interactive build is not silent for minutes.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tools"))
import cuda_compiler  # noqa: E402

SRC_DIR = ROOT / "cuda"
OUT_DIR = ROOT / "src" / "gpumat" / "kernels"
PTX_DIR = ROOT / "build" / "ptx"
MANIFEST = OUT_DIR / "manifest.json"
ENTRIES = OUT_DIR / "entries.json"
# Machine code for each major's first architecture and for sm_90 (Hopper's wgmma and TMA), sm_100 and sm_120.
# An sm_86, sm_87 or sm_89 GPU runs sm_80's machine code (within a major a cubin runs on every later minor;
# the driver picks it, kernels.code_arch reports it): no kernel has code of their own (no __CUDA_ARCH__ test
# singles them out, no instruction the modules use needs them), and building them took two sevenths of the
# build's time (CI builds every module on two cores).
DEFAULT_ARCHS = "75 80 90 100 120"
# No -lineinfo in what ships: it embeds each module's PTX text and line tables in the machine code (1.4 of
# matmul_fast's 2.2 MB for sm_90), which the driver reads at every module load, and it changes no
# instruction (cuobjdump -sass compared). GPUMAT_LINEINFO=1 adds it for profiling.
NVCC_FLAGS = ["-O3", "-std=c++17", "-Xptxas", "-v"] + ["-lineinfo"] * (os.environ.get("GPUMAT_LINEINFO") == "1")
# Compress every image in the fatbin, machine code included (by default nvcc compresses only the PTX):
# the driver decompresses the one image it picks at module load. "speed": the seven architectures then built took
# 15.2 MiB instead of 60.9 and a process's first matmul on the H100 3.7 ms instead of 3.1; nvcc's default
# "balance" made them 8.3 MiB but that first call 4.5 ms (benchmarks/results/cold-start-*.json).
FATBIN_FLAGS = ["-Xfatbin=-compress-all", "--compress-mode=speed"]

ENTRY_RE = re.compile(r"\.entry\s+(\w+)\s*\(([^)]*)\)", re.S)
# a parameter's type: ".u64", or a by-value struct ".align 64 .b8 name[128]" -> "b8[128]"
PARAM_RE = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+\w+(\[\d+\])?")
INCLUDE_RE = re.compile(r'^#include "([\w.]+\.cuh)"', re.M)
ARCHS_MARKER_RE = re.compile(r"\A//\s*gpumat-archs:\s*([0-9a-z ]+)")
PTXAS_ENTRY_RE = re.compile(r"Compiling entry function '(\w+)' for '(sm_\w+)'")
PTXAS_FRAME_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
PTXAS_PROPERTIES_RE = re.compile(r"Function properties for (\w+)")
PTXAS_USED_RE = re.compile(r"Used (\d+) registers")
PTXAS_SMEM_RE = re.compile(r"(\d+) bytes smem")


def arch_list() -> list[str]:
    archs = os.environ.get("ARCHS", "").replace(",", " ").split() or DEFAULT_ARCHS.split()
    return sorted(set(archs), key=int)


def module_archs(source: str, archs: list[str]) -> tuple[list[str], bool]:
    """(the archs a module is built for, whether it declares its own): a module's marker line names
    arch-specific targets ("90a"); each is built when its base number is in ARCHS."""
    m = ARCHS_MARKER_RE.match(source)
    if not m:
        return archs, False
    return [a for a in m.group(1).split() if a.rstrip("af") in archs], True


def gencode_flags(archs: list[str], ptx: bool = True) -> list[str]:
    flags = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs]
    if ptx:
        flags.append(f"-gencode=arch=compute_{archs[0]},code=compute_{archs[0]}")
    return flags


def included_headers(cu: Path) -> list[Path]:
    """The project headers (cuda/*.cuh) a source includes, directly or through another header."""
    found: list[Path] = []
    pending = [cu]
    while pending:
        for name in INCLUDE_RE.findall(pending.pop().read_text()):
            header = SRC_DIR / name
            if header.exists() and header not in found:
                found.append(header)
                pending.append(header)
    return sorted(found)


def source_key(cu: Path, archs: list[str], version: str) -> str:
    """What a module's build depends on: its source, the headers it includes, the archs, flags and compiler
    (an edit of one module's header rebuilds the modules that include it, not all of them)."""
    digest = hashlib.sha256()
    for part in [cu.read_bytes(), *(h.read_bytes() for h in included_headers(cu))]:
        digest.update(part)
    digest.update(" ".join(archs + NVCC_FLAGS + FATBIN_FLAGS + [version]).encode())
    return digest.hexdigest()


def parse_entries(ptx: str) -> dict[str, list[str]]:
    return {name: [t + n for t, n in PARAM_RE.findall(params)] for name, params in ENTRY_RE.findall(ptx)}


def entries_that_wait(ptx: str) -> set[str]:
    """The entry points whose code (from their .entry to the next) waits for the grid before them."""
    starts = [(m.start(), m.group(1)) for m in ENTRY_RE.finditer(ptx)]
    ends = [at for at, _ in starts[1:]] + [len(ptx)]
    return {name for (at, name), end in zip(starts, ends, strict=True) if "griddepcontrol.wait" in ptx[at:end]}


def parse_ptxas(report: str) -> dict[str, dict[str, dict[str, int]]]:
    """{entry: {sm_XX: {registers, smem, stack, spill_stores, spill_loads}}} from `ptxas -v` output."""
    resources: dict[str, dict[str, dict[str, int]]] = {}
    current = None
    entry = properties = None  # the entry being compiled; the function whose frame the next line gives
    for line in report.splitlines():
        if m := PTXAS_ENTRY_RE.search(line):
            entry = m.group(1)
            current = resources.setdefault(entry, {}).setdefault(
                m.group(2), {"registers": 0, "smem": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0}
            )
        elif m := PTXAS_PROPERTIES_RE.search(line):
            properties = m.group(1)
        elif current is not None and properties == entry and (m := PTXAS_FRAME_RE.search(line)):
            # a device function's frame (a __noinline__ helper, reported after the entry that calls it) is
            # not the entry's: taken as the entry's, its zeros once hid the entry's spills
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif current is not None and (m := PTXAS_USED_RE.search(line)):
            current["registers"] = int(m.group(1))
            if s := PTXAS_SMEM_RE.search(line):
                current["smem"] = int(s.group(1))
    return resources


def build_module(exe: str, cu: Path, archs: list[str], own_archs: bool = False) -> tuple[dict, dict]:
    """Compile one module: (its manifest row, its entry points' report)."""
    name = cu.stem
    fatbin = OUT_DIR / f"{name}.fatbin"
    ptx = PTX_DIR / f"{name}.ptx"
    # The entry points' parameter types come from the lowest arch's PTX, which the build itself writes:
    # --keep leaves it in a scratch folder (a second nvcc run for it was a second front end and
    # optimizer pass over the module, 136 of the sm_90a module's 488 seconds).
    with tempfile.TemporaryDirectory(prefix=f"gpumat-{name}-") as scratch:
        build = subprocess.run(
            [
                exe,
                *NVCC_FLAGS,
                "-I",
                str(SRC_DIR),
                "--threads",
                "0",
                "--keep",
                "--keep-dir",
                scratch,
                "-fatbin",
                *FATBIN_FLAGS,
                *gencode_flags(archs, ptx=not own_archs),
                "-o",
                str(fatbin),
                str(cu),
            ],
            capture_output=True,
            text=True,
        )
        if build.returncode != 0:
            raise RuntimeError(f"nvcc failed on {cu.name}:\n{build.stderr}")
        # <name>.compute_<arch>.ptx for each arch; plain <name>.ptx when the module is built for one
        kept = [
            p for p in (Path(scratch) / f"{name}.compute_{archs[0]}.ptx", Path(scratch) / f"{name}.ptx") if p.exists()
        ]
        if not kept:
            raise RuntimeError(f"nvcc left no PTX of compute_{archs[0]} for {cu.name} in its --keep folder")
        shutil.copyfile(kept[0], ptx)
        # which entries follow the grid before them (griddepcontrol.wait, sm_90 and later): read from the
        # PTX of the first such arch built, when there is one
        hopper = next((a for a in archs if int(a.rstrip("af")) >= 90), None)
        hopper_ptx = [Path(scratch) / f"{name}.compute_{hopper}.ptx", Path(scratch) / f"{name}.ptx"] if hopper else []
        follows = next((entries_that_wait(p.read_text()) for p in hopper_ptx if p.exists()), None)
    params = parse_entries(ptx.read_text())
    resources = parse_ptxas(build.stderr)
    module = {"fatbin": fatbin.name}
    if own_archs:
        module["archs"] = archs  # machine code for these alone, no PTX
    report = {e: {"params": p, "resources": resources.get(e, {})} for e, p in sorted(params.items())}
    if follows is not None:
        for e, row in report.items():
            row["follows_previous_grid"] = e in follows
    return module, report


class Progress:
    """The build's progress lines: to stdout, flushed at once; with echo_to_terminal, also to /dev/tty when
    stdout is not the terminal (a build under pip, which captures stdout and stderr alike)."""

    def __init__(self, echo_to_terminal: bool = False):
        self.start = time.monotonic()
        self.tty = None
        if echo_to_terminal and not sys.stdout.isatty():
            try:
                self.tty = open("/dev/tty", "w")  # kept open for the build's lines
            except OSError:  # no controlling terminal (CI, a service): stdout alone
                self.tty = None

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def say(self, line: str) -> None:
        print(line, flush=True)
        if self.tty is not None:
            try:
                self.tty.write(line + "\n")
                self.tty.flush()
            except OSError:
                self.tty = None

    def close(self) -> None:
        if self.tty is not None:
            self.tty.close()
            self.tty = None


def timed_build(exe: str, cu: Path, archs: list[str], own_archs: bool) -> tuple[dict, dict, float]:
    """build_module, and the seconds it took (its own time, not its wait for a free worker)."""
    began = time.monotonic()
    module, report = build_module(exe, cu, archs, own_archs)
    return module, report, time.monotonic() - began


def main(echo_to_terminal: bool = False) -> int:
    progress = Progress(echo_to_terminal)
    try:
        return _main(progress)
    finally:
        progress.close()


def _main(progress: Progress) -> int:
    try:
        compiler = cuda_compiler.require()
    except cuda_compiler.NoCompilerError as err:
        print(f"build_ptx.py: {err}", file=sys.stderr)
        return 1
    exe, version = compiler.path, compiler.version
    release = ".".join(version.split(".")[:2])
    archs = arch_list()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    PTX_DIR.mkdir(parents=True, exist_ok=True)
    old = json.loads(MANIFEST.read_text()) if MANIFEST.exists() else {}
    old_modules = old.get("modules", {})
    old_entries = json.loads(ENTRIES.read_text()) if ENTRIES.exists() else {}
    sources = sorted(SRC_DIR.glob("*.cu"))
    modules, entries, todo, skipped = {}, {}, [], {}
    for cu in sources:
        own, declared = module_archs(cu.read_text(), archs)
        if not own:
            skipped[cu.stem] = (
                f"built only for sm_{ARCHS_MARKER_RE.match(cu.read_text()).group(1).strip()}, "
                f"whose base is not in ARCHS ({' '.join(archs)})"
            )
            continue
        key = source_key(cu, own, version)
        prev = old_modules.get(cu.stem)
        if prev and prev.get("key") == key and (OUT_DIR / prev["fatbin"]).exists() and cu.stem in old_entries:
            modules[cu.stem], entries[cu.stem] = prev, old_entries[cu.stem]
        else:
            todo.append((cu, key, own, declared))
    # the largest sources first, headers included (a rough measure of their compile time): the longest
    # compiles start early instead of one of them running alone at the end (the sm_90a module, sorted last
    # by name, took 6 of a 14-minute build on two cores)
    todo.sort(key=lambda job: -sum(f.stat().st_size for f in [job[0], *included_headers(job[0])]))
    failed = []
    workers = max(1, os.cpu_count() or 1)
    if todo:
        progress.say(
            f"build_ptx: compiling {len(todo)} of {len(todo) + len(modules)} kernel modules for "
            f"sm_{', sm_'.join(archs)} with nvcc {version}, {min(workers, len(todo))} at a time"
            + (" (ARCHS=90 builds for one arch, for quick iteration)" if len(archs) > 1 else "")
        )
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(timed_build, exe, cu, own, declared): (cu, key, own) for cu, key, own, declared in todo}
        for done, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            cu, key, own = futures[fut]
            count = f"[{done:{len(str(len(todo)))}}/{len(todo)}]"
            try:
                module, report, seconds = fut.result()
                modules[cu.stem], entries[cu.stem] = {**module, "key": key}, report
                progress.say(
                    f"build_ptx: {count} built {cu.name} for sm_{', sm_'.join(own)} in {seconds:.1f} s "
                    f"({progress.elapsed():.0f} s since the start)"
                )
            except RuntimeError as err:
                failed.append(f"{cu.name}: {err}")
                progress.say(f"build_ptx: {count} FAILED {cu.name} ({progress.elapsed():.0f} s since the start)")
    for stale in set(old_modules) - {cu.stem for cu in sources if cu.stem not in skipped}:
        (OUT_DIR / f"{stale}.fatbin").unlink(missing_ok=True)
    manifest = {
        "cuda_version": release,
        "nvcc": f"{version} ({compiler.origin})",
        "archs": archs,
        "modules": dict(sorted(modules.items())),
        "skipped": skipped,
    }
    ENTRIES.write_text(json.dumps(dict(sorted(entries.items())), indent=1) + "\n")
    MANIFEST.write_text(json.dumps(manifest, indent=1) + "\n")  # last: a manifest means a finished build
    if failed:
        print("\n".join(failed), file=sys.stderr)
        return 1
    if todo:
        progress.say(f"build_ptx: {len(todo)} modules built in {progress.elapsed():.0f} s, kernels in {OUT_DIR}")
    else:
        progress.say(f"kernels up to date ({len(modules)} modules, sm_{', sm_'.join(archs)}, nvcc {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
