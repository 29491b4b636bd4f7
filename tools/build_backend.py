"""The wheel build: setuptools' own PEP 517 backend, asking for a CUDA compiler when it needs one.

A wheel without kernels is no use, so building one (pip wheel ., pip install ., python -m build)
compiles them: setup.py's build_py step runs build_ptx.py. Here, when no supported nvcc is found
($NVCC, the PATH, $CUDA_HOME), the pinned package-index compiler is added to what the isolated build
environment installs, and build_ptx.py finds it there. Without build isolation there is no such
step: with no compiler the build stops with build_ptx.py's message.
"""

from __future__ import annotations

import cuda_compiler
from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (every hook not redefined below)


def _compiler_requirements() -> list[str]:
    return [] if cuda_compiler.find() is not None else list(cuda_compiler.PINNED)


def get_requires_for_build_wheel(config_settings=None):
    return _setuptools.get_requires_for_build_wheel(config_settings) + _compiler_requirements()


def get_requires_for_build_editable(config_settings=None):
    return _setuptools.get_requires_for_build_editable(config_settings) + _compiler_requirements()
