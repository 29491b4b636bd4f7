"""Sphinx configuration: `make docs` builds build/docs/html; `make test` builds it with warnings as errors.

Why Sphinx with numpydoc (docs/index.md, "About these pages"): the docstrings are in numpydoc form, the
form numpy, SciPy and CuPy document their APIs in; numpydoc is the reference parser of that form, so
the rendered Parameters/Returns/Raises/Examples are the ones `help()` shows. autodoc imports gpumat,
which needs no GPU (cuda.bindings loads at the first GPU call). The guide pages stay Markdown through
myst-parser, so they read the same on a repository page.
"""

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "src"))

import gpumat  # noqa: E402

project = "gpumat"
author = "the gpumat authors"
copyright = "the gpumat authors, MIT license"
release = gpumat.__version__
version = release

extensions = ["sphinx.ext.autodoc", "numpydoc", "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# numpydoc: the sections each docstring has; members listed by autodoc, not by numpydoc's own tables
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the signatures carry the annotations; the docstrings name the types
trim_doctest_flags = True  # `# doctest: +GPU` markers are not shown

myst_heading_anchors = 3
suppress_warnings = ["myst.xref_missing"]  # links to source files (README.md, tools/...) outside docs/

html_theme = "alabaster"  # ships with Sphinx: no theme package to install
html_theme_options = {"description": "Matrix work on NVIDIA GPUs from pure Python", "page_width": "1100px"}
html_static_path = []
