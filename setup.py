"""Metadata lives in pyproject.toml; this file only makes the package build compile the kernels.

build_py runs build_ptx.py (the same build as `make kernels`) before it copies the package, so the
fatbins and the manifest go into the wheel; if the kernels do not build, neither does the wheel.
pip shows a build's output only with -v, so the build's progress lines (one a module, with the time)
also go to the controlling terminal when there is one: an interactive `pip wheel .` is not silent.
"""

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildWithKernels(build_py):
    def run(self):
        sys.path.insert(0, str(ROOT))
        import build_ptx

        if build_ptx.main(echo_to_terminal=True) != 0:
            raise SystemExit(
                "gpumat: the CUDA kernels did not build (see above), so no package is made: "
                "a gpumat without kernels cannot run anything"
            )
        self.__dict__.pop("data_files", None)  # listed again, now that the fatbins exist
        super().run()


setup(cmdclass={"build_py": BuildWithKernels})
