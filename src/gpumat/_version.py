"""The version, in one place: pyproject.toml reads it for the package metadata, gpumat exposes it."""

__version__ = "0.1.0"
