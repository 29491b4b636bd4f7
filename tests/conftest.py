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


def pytest_collection_modifyitems(config, items):
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason="no NVIDIA GPU or driver on this machine (these run on the device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
