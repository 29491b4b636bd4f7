"""NVIDIA's driver bindings, imported on first use rather than with gpumat.

`from cuda.bindings import driver` takes tens of milliseconds (on the H100 machine about a quarter of
what `import gpumat` took): a program that imports gpumat and never touches the GPU, or touches it
later, should not pay for it at import. `driver` here stands in for the module; its first attribute
access imports it, and every attribute read is then kept on the stand-in, so later reads cost what a
module attribute costs. `CUresult` stands in for the result enum the same way.
"""

from __future__ import annotations

import importlib


class _Deferred:
    """A module, or an attribute of one, fetched on the first attribute read and kept attribute by attribute."""

    def __init__(self, load):
        object.__setattr__(self, "_load", load)

    def __getattr__(self, name: str):
        value = getattr(self._load(), name)
        object.__setattr__(self, name, value)
        return value


driver = _Deferred(lambda: importlib.import_module("cuda.bindings.driver"))
CUresult = _Deferred(lambda: driver.CUresult)
