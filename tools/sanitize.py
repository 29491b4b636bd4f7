"""`make sanitize`: the GPU tests under compute-sanitizer, memcheck then racecheck, zero errors wanted.

Runs with fewer hypothesis examples and smaller busy-work sizes (GPUMAT_SANITIZE; the tools slow every
kernel by 10-1000x). The tests are split into
`--jobs` shards (default: 2 per visible GPU) that run side by side, each seeing every GPU with a
different one first; the tests marked
`whole_gpu` (they fill a GPU's memory) run afterwards, alone. `--tool` picks one tool; `--timeout` stops
a shard that runs too long (it then counts as failed). Each shard's log ends with the tool's summary
line; the last line printed says whether every shard of every tool reported 0 errors. Extra arguments
go to pytest (e.g. a test file).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

TOOLS = ("memcheck", "racecheck")


def _gpu_count() -> int:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "src"))
    import gpumat as gm

    return max(gm.device_count(), 1)


def _visible(gpus: int) -> list[str]:
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    return listed.split(",")[:gpus] if listed else [str(i) for i in range(gpus)]


def _summary(log: str) -> str:
    with open(log, errors="replace") as f:
        lines = [line.strip() for line in f if "ERROR SUMMARY" in line or "RACECHECK SUMMARY" in line]
    return lines[-1] if lines else "(no summary line: the shard did not finish)"


def run_tool(exe: str, tool: str, jobs: int, tests: list[str], logs: str, timeout: float) -> tuple[bool, bool, int]:
    """(every shard finished with 0 errors, some shard ran a test, the shards whose selection held no test)."""
    gpus = _visible(_gpu_count())
    base = {**os.environ, "GPUMAT_EXAMPLES": os.environ.get("GPUMAT_EXAMPLES", "4"), "GPUMAT_SANITIZE": "1"}
    # numpy's references start a BLAS thread per core in every shard, and shards side by side then fight over
    # the CPU (the plain suite on the 16-core H200 host: 14 shards ran past 375 s so; 12 shards of 2 threads
    # each took 160 s). A share of the cores each, unless the caller set it.
    for threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        base.setdefault(threads, str(max(1, (os.cpu_count() or 1) // jobs)))
    parts = [
        (f"{tool}-{i}of{jobs}", {"GPUMAT_SHARD": f"{i}/{jobs}", "GPUMAT_WHOLE_GPU": "without"}) for i in range(jobs)
    ]
    parts.append((f"{tool}-whole-gpu", {"GPUMAT_WHOLE_GPU": "only"}))
    # --show-backtrace no: the tool's host backtrace of every launch keeps the Python frames on the stack
    # alive, and with them every operand and result a launch was given, so memory never came back (three
    # memory tests failed under memcheck alone). An error is still reported, with its kernel and address.
    cmd = [exe, "--tool", tool, "--error-exitcode", "86", "--target-processes", "all", "--show-backtrace", "no"]
    cmd += [sys.executable]
    # -v: a line a test, so a shard stopped by its timeout still says where it was and what failed
    cmd += ["-m", "pytest", "-v", "-m", "gpu", "-p", "no:cacheprovider", "--durations=20", *tests]
    ok, ran, empty = True, False, 0
    running = []
    for number, (name, extra) in enumerate(parts[:-1]):
        # every shard sees every GPU (the two-GPU tests run, none skipped), its first one in turn: a
        # process works on its first visible GPU unless a test says otherwise, so the shards spread out
        turn = number % len(gpus)
        env = {**base, **extra, "CUDA_VISIBLE_DEVICES": ",".join(gpus[turn:] + gpus[:turn])}
        log = os.path.join(logs, name + ".log")
        running.append((name, log, subprocess.Popen(cmd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)))
    deadline = time.monotonic() + timeout
    for name, log, proc in running:
        code = _finish(name, log, proc, deadline)
        ok &= code in (0, 5)  # 5: every test of this shard deselected
        ran |= code != 5
        empty += code == 5
    name, extra = parts[-1]
    log = os.path.join(logs, name + ".log")
    env = {**base, **extra, "CUDA_VISIBLE_DEVICES": ",".join(gpus)}
    # these tests run the GPU out of memory on purpose: the driver's out-of-memory answers to the
    # allocations are what they test, not errors (the tool still reports every bad memory access)
    quiet = [cmd[0], "--report-api-errors", "no", *cmd[1:]]
    proc = subprocess.Popen(quiet, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    code = _finish(name, log, proc, time.monotonic() + timeout)
    return ok and code in (0, 5), ran or code != 5, empty + (code == 5)


_PYTEST_CLOSING = re.compile(r"=+ .*\b(passed|failed|errors?|deselected|no tests ran)\b.* in [\d.]+s")  # its last line
_PYTEST_FAILED = re.compile(r"(\S+\.py::.*?) (FAILED|ERROR)(\s+\[|\s*$)")  # pytest -v: a line a test


def _finish(name: str, log: str, proc: subprocess.Popen, deadline: float) -> int | str:
    """The shard's exit status ("timeout" if it ran past the deadline), after printing its summary."""
    try:
        code = proc.wait(timeout=max(deadline - time.monotonic(), 1))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = "timeout"
    with open(log, errors="replace") as f:
        lines = f.readlines()
    tail = [line.strip() for line in lines if _PYTEST_CLOSING.match(line)]
    print(f"{name}: exit {code}; {_summary(log)}; {tail[-1] if tail else 'no pytest summary'}", flush=True)
    for test in [m.group(1) for m in map(_PYTEST_FAILED.match, lines) if m][:10]:
        print(f"    failed: {test}", flush=True)
    return code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tool", choices=TOOLS, action="append", help="one tool (default: both, in turn)")
    parser.add_argument("--jobs", type=int, default=0, help="shards side by side (default: 2 per GPU)")
    parser.add_argument("--timeout", type=float, default=24 * 3600, help="seconds a shard may run")
    parser.add_argument("--logs", default=os.environ.get("GPUMAT_SANITIZE_LOGS", "build/sanitize"))
    args, tests = parser.parse_known_args()
    exe = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not os.path.exists(exe):
        print("make sanitize: compute-sanitizer not found (it comes with the CUDA toolkit)", file=sys.stderr)
        return 2
    os.makedirs(args.logs, exist_ok=True)
    jobs = args.jobs or 2 * _gpu_count()
    failed, empty = [], 0
    for tool in args.tool or TOOLS:
        print(f"== compute-sanitizer --tool {tool}: {jobs} shards, then the whole-GPU tests", flush=True)
        ok, ran, none = run_tool(exe, tool, jobs, tests or ["tests"], args.logs, args.timeout)
        empty += none
        if not ran:  # a selection that matches no GPU test checks nothing: not a clean run
            print(f"make sanitize: {tool} ran no test (the selection matched no GPU test)", flush=True)
        if not (ok and ran):
            failed.append(tool)
    if failed:
        print(f"make sanitize: {', '.join(failed)} reported errors or did not finish (logs in {args.logs})")
        return 1
    # a shard whose selection held no test (exit 5) checked nothing: said, so that its 0 is not read as a check
    unchecked = f" ({empty} shard(s) selected no test and checked nothing)" if empty else ""
    print(f"make sanitize: every shard of every tool reports 0 errors{unchecked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
