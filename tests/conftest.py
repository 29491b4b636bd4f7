import os

# JAX would otherwise take 75% of the GPU's memory at its first use, starving the other tests
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import pytest
from hypothesis import HealthCheck, settings

import gpumat as gm

# GPU examples are slow to generate relative to hypothesis' defaults; keep the draw count modest and fixed.
settings.register_profile(
    "gpumat",
    max_examples=int(os.environ.get("GPUMAT_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile("gpumat")

HAS_GPU = gm.is_available()


def _shard(config, items) -> None:
    """GPUMAT_SHARD=i/n keeps every n-th test from the i-th (tools/sanitize.py runs the shards side by side);
    GPUMAT_WHOLE_GPU=only|without keeps only, or leaves out, the tests that fill a GPU's memory (those run
    alone, after the shards)."""
    shard, whole = os.environ.get("GPUMAT_SHARD"), os.environ.get("GPUMAT_WHOLE_GPU")
    if not shard and not whole:
        return
    keep, drop = [], []
    index, count = (int(x) for x in shard.split("/")) if shard else (0, 1)
    for position, item in enumerate(items):
        alone = "whole_gpu" in item.keywords
        wanted = position % count == index and (whole is None or (whole == "only") == alone)
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_modifyitems(config, items):
    _shard(config, items)
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU or driver on this machine (these run on the device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_logreport(report):
    """Under tools/sanitize.py a shard may be stopped by its timeout before pytest prints its summary:
    print each failure's traceback into the log as it happens."""
    if report.failed and os.environ.get("GPUMAT_SANITIZE"):
        print(f"\n== FAILED {report.nodeid} ({report.when})\n{report.longreprtext}", flush=True)


def pytest_terminal_summary(terminalreporter):
    """One line counting the skipped tests by reason, in place of one line each (`make test` without a GPU
    skips thousands, nearly all for the same reason)."""
    import collections

    reasons = collections.Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if reasons:
        counts = "; ".join(f"{n} {reason}" for reason, n in reasons.most_common())
        terminalreporter.write_line(f"skipped {sum(reasons.values())}, by reason: {counts}")
