#!/usr/bin/env python3
"""Refit the matmul planner's per-row constants to `bench sweep` results, on the CPU.

Each sweep case holds the queued time of every plan auto chooses among (`variants`: "<row>/<splits>" ->
microseconds). For a set of constants this replans every case with the real planner (gpumat's own
`plan`, every rule of it) and scores auto's pick by the fastest timed plan's time over the pick's; then it
steps each fitted constant of each chosen row up and down (coordinate steps of 5-25%) and keeps a step
where the geometric mean of the scores rises, their minimum does not fall and no case's pick leaves the
timed plans (or, at an equal score, where the model's idea of the fastest timed rows comes closer to
picking them). The at, bt and atbt copies
of a row move with it, by the same factor (where the table gives them constants of their own, as the 16-bit
wgmma rows' rates, they keep their proportions). Cases whose pick was never
timed do not count.

    PYTHONPATH=src python3 benchmarks/fit_planner.py RESULT.json [RESULT.json ...] --rows 'dmma*'
        [--params rate,fixed_s,block_rate] [--rounds 4] [--out fit.json]

It prints the constants it moved (old -> new) and the scores before and after: the figures to carry
into gpumat/matmul/variants.py by hand, with the sweep files they came from.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

from gpumat._bench.common import geometric_mean
from gpumat._dtypes import DTYPE_NAMES, ITEMSIZE
from gpumat.matmul.engine import REDUCE, VARIANTS, Problem, Target, plan, ranked

SUFFIX = {name: sfx for sfx, name in DTYPE_NAMES.items()}  # a result's dtype name -> the kernels' suffix
# the shared memory a block may opt into, by compute capability x 10 (the planner's Target needs it)
MAX_SMEM = {75: 64 * 1024, 80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024, 100: 227 * 1024}
ALL_MODULES = frozenset(
    {k.module for v in VARIANTS.values() for k in v.kernels.values()} | {k.module for k in REDUCE.values()}
)
LAYOUT_SUFFIXES = ("atbt", "at", "bt")
FACTORS = (0.75, 0.9, 0.95, 1.05, 1.1, 1.25)
# how far below its score at the start one case may fall for a step (the fits of 2026-12-02, before this
# rule, moved 12 of 725 sweep cases' picks to plans 3-14% slower while 37 gained more than 3%)
CASE_DROP = 0.03


def target_of(result: dict) -> Target:
    env = result.get("environment") or result
    major, minor = (int(x) for x in str(env.get("compute_capability", "9.0")).split("."))
    arch = 10 * major + minor
    return Target(arch, int(env.get("sms", 132)), MAX_SMEM.get(arch, 99 * 1024), ALL_MODULES)


def cases_of(result: dict) -> list[tuple[Problem, Target, dict]]:
    """(problem, target, {row/splits: us}) of each case of a sweep result, or of a probe that timed rows by
    name: its cases' `timings` for `variants`, float64 where it names no dtype (the DMMA probes)."""
    sfx = SUFFIX[result.get("dtype") or "float64"]
    size = ITEMSIZE[sfx]
    mode = result.get("precision") or ("float32" if sfx == "f32" else "native")
    t = target_of(result)
    out = []
    for c in result["cases"]:
        b_trans = c.get("layout") == "NT"
        # the operands are fresh allocations, so rows of a multiple of 16 bytes decide (as the planner's
        # a_aligned and b_aligned at run time): A's K, B's N (K for B a transposed view of N x K storage)
        a_aligned = c["K"] * size % 16 == 0
        b_aligned = (c["K"] if b_trans else c["N"]) * size % 16 == 0
        p = Problem(c["M"], c["N"], c["K"], sfx, sfx, mode, a_aligned, b_aligned, b_trans=b_trans)
        out.append((p, t, c["variants"] if "variants" in c else c["timings"]))
    return out


def score(cases) -> tuple[float, float, int, int, float, tuple]:
    """(geometric mean, minimum, cases within 3%, cases scored, gap, each case's score) of the fastest timed
    time over the time of auto's pick, replanned with the table as it is now; gap: the mean over the scored
    cases of how much longer the model thinks the fastest timed row (at its own best split) takes than its
    pick, as a log (0 where it picks that row), which moves before a pick does; a case whose pick was not
    timed scores None."""
    plan.cache_clear()
    ratios, gaps, each = [], [], []
    for p, t, timed in cases:
        chosen = plan(p, t)
        us = timed.get(f"{chosen.variant.name}/{chosen.splits}")
        each.append(timed[min(timed, key=timed.get)] / us if us else None)
        if not us:
            continue
        fastest = min(timed, key=timed.get).split("/")[0]
        ratios.append(timed[min(timed, key=timed.get)] / us)
        modelled = next((r.seconds for r in ranked(p, t) if r.variant.name == fastest), None)
        gaps.append(math.log(max(modelled / chosen.seconds, 1.0)) if modelled else 0.0)
    if not ratios:
        return 0.0, 0.0, 0, 0, 0.0, tuple(each)
    return (
        geometric_mean(ratios),
        min(ratios),
        sum(r >= 0.97 for r in ratios),
        len(ratios),
        sum(gaps) / len(gaps),
        tuple(each),
    )


def better(trial: tuple, best: tuple, start: tuple | None = None) -> bool:
    """A higher geometric mean with no lower minimum and no fewer cases scored (constants that send a pick to
    a plan nobody timed do not get to drop its case); at an equal mean and minimum, a smaller gap. Given the
    score the fit started from, also no case more than CASE_DROP below its own score there: a step that
    helps many shapes may not make one shape much slower."""
    if trial[1] < best[1] or trial[3] < best[3]:
        return False
    if start is not None and any(
        was is not None and now is not None and now < was * (1 - CASE_DROP)
        for now, was in zip(trial[5], start[5], strict=True)
    ):
        return False
    return trial[0] > best[0] + 1e-4 or (abs(trial[0] - best[0]) <= 1e-4 and trial[4] < best[4] - 1e-4)


def family(name: str) -> list[str]:
    """The row and its layout copies (name + at, bt, atbt) in the table, and where its tile also runs as pairs
    of blocks, the pair rows the table builds from them (the same constants, the rate scaled)."""
    names = [name, *(name + s for s in LAYOUT_SUFFIXES)]
    bm, bn = VARIANTS[name].tile
    pair = name.replace(f"{bm}x{bn}", f"{bm}x{bn}pair", 1)
    if pair != name and pair in VARIANTS:
        names += [pair, *(pair + s for s in LAYOUT_SUFFIXES)]
    return [n for n in names if n in VARIANTS]


def bases(patterns: list[str]) -> list[str]:
    """The rows the patterns name, a layout copy counted as its base row."""
    found = []
    for name in VARIANTS:
        if VARIANTS[name].cluster > 1:  # a pair row moves with the row it is built from
            continue
        if any(fnmatch.fnmatch(name, pat) for pat in patterns):
            copies = (name[: -len(s)] for s in LAYOUT_SUFFIXES if name.endswith(s) and name[: -len(s)] in VARIANTS)
            base = next(copies, name)
            if base not in found:
                found.append(base)
    return found


def set_constant(name: str, param: str, value: float) -> None:
    """The row's constant set to value, and its layout copies' scaled alike (their own values may differ:
    the 16-bit wgmma rows' rates do by layout)."""
    scale = value / getattr(VARIANTS[name], param)
    for n in family(name):
        VARIANTS[n] = replace(VARIANTS[n], **{param: getattr(VARIANTS[n], param) * scale})
    VARIANTS[name] = replace(VARIANTS[name], **{param: value})  # exactly, not through the scale


def fit(cases, rows: list[str], params: list[str], rounds: int = 4) -> tuple[dict, tuple, tuple]:
    """Coordinate steps over the rows' constants, each kept where the geometric mean of the scores rises and
    their minimum does not fall (the table is left as fitted); returns ({(row, param): (old, new)} for the
    constants that moved, each layout copy and pair row listed with its own values, the score before, the
    score after)."""
    start = {(name, param): getattr(VARIANTS[name], param) for name in rows for param in params}
    every = {(n, param): getattr(VARIANTS[n], param) for name in rows for n in family(name) for param in params}
    before = best = score(cases)
    for _ in range(rounds):
        improved = False
        for (name, param), first in start.items():
            if not first:  # a constant the row does not use (block_rate 0: no block term)
                continue
            current = getattr(VARIANTS[name], param)
            for f in FACTORS:
                set_constant(name, param, current * f)
                trial = score(cases)
                if better(trial, best, before):  # no shape pays for the others
                    best, current, improved = trial, current * f, True
                set_constant(name, param, current)
        if not improved:
            break
    moved = {key: (old, getattr(VARIANTS[key[0]], key[1])) for key, old in every.items()}
    return {key: pair for key, pair in moved.items() if not math.isclose(*pair, rel_tol=1e-12)}, before, best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "results",
        nargs="+",
        type=Path,
        help="bench sweep JSON files, or probes that time rows by name (one dtype and mode each)",
    )
    parser.add_argument("--rows", action="append", required=True, help="rows to fit, a glob (repeatable)")
    parser.add_argument("--params", default="rate,fixed_s,block_rate", help="constants to fit, comma-separated")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", type=Path, help="write the fit as JSON here")
    args = parser.parse_args(argv)
    cases = [c for path in args.results for c in cases_of(json.loads(path.read_text()))]
    rows = bases(args.rows)
    if not rows:
        print(f"fit_planner: no row matches {args.rows}", file=sys.stderr)
        return 2
    moved, before, after = fit(cases, rows, args.params.split(","), args.rounds)
    for (name, param), (old, new) in moved.items():
        print(f"{name:28} {param:10} {old:.4g} -> {new:.4g}")
    for label, (mean, low, near, n, _gap, _each) in (("before", before), ("after", after)):
        print(f"{label}: auto / fastest timed, geometric mean {mean:.4f}, minimum {low:.3f}, {near} of {n} within 3%")
    if args.out:
        fitted = [{"row": r, "param": p, "old": o, "new": n} for (r, p), (o, n) in moved.items()]
        payload = {"results": [str(p) for p in args.results], "rows": rows, "fitted": fitted}
        keys = ("geomean", "min", "within_3pct", "cases", "gap")
        payload.update(
            {"before": dict(zip(keys, before[:5], strict=True)), "after": dict(zip(keys, after[:5], strict=True))}
        )
        args.out.write_text(json.dumps(payload, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
