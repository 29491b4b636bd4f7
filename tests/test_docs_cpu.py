"""The documentation's checks, without a GPU.

- Every public name (gpumat.__all__, and the public methods and properties of Matrix, CSRMatrix,
  Stream, Event and Device) has a numpydoc docstring with the sections that apply to it.
- The docstrings' examples run: those that need no GPU as doctests, here; those marked
  `# doctest: +GPU` (on their first example) on a GPU with their output compared, and without one on
  the stand-in driver (benchmarks/python_path.py), where only that they run is checked.
- The generated tables of README.md and docs/performance.md are what benchmarks/tables.py writes.
- README.md stays a front page (at most 150 lines) and never tells users to install from the package index.
"""

from __future__ import annotations

import ast
import doctest
import inspect
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import gpumat as gm

ROOT = Path(__file__).resolve().parents[1]
GPU_FLAG = doctest.register_optionflag("GPU")

CLASSES_WITH_MEMBERS = (gm.Matrix, gm.CSRMatrix, gm.Stream, gm.Event, gm.Device)
# functions that cannot raise: the test asks every other function and method for a Raises section
NEVER_RAISE = {
    "gpumat.is_available": "answers False instead",
    "gpumat.device_count": "answers 0 without a driver",
    "gpumat.get_matmul_precision": "reads a thread-local and a global",
}
SECTION = re.compile(r"^([A-Z][A-Za-z ]+)\n-{3,}\s*$", re.M)


# ------------------------------------------------------------------------------------------- the names


def public_objects():
    """(name, object, kind) for every documented public name; kind: class, function, method, property, data."""
    seen = []
    for name in gm.__all__:
        obj = getattr(gm, name)
        seen.append((f"gpumat.{name}", obj, "class" if isinstance(obj, type) else "function"))
    for cls in CLASSES_WITH_MEMBERS:
        for attr, value in vars(cls).items():
            if attr.startswith("_") and attr != "__matmul__":
                continue
            qual = f"gpumat.{cls.__name__}.{attr}"
            if isinstance(value, property):
                seen.append((qual, value, "property"))
            elif isinstance(value, (classmethod, staticmethod)):
                seen.append((qual, value.__func__, "method"))
            elif inspect.isfunction(value):
                seen.append((qual, value, "method"))
            elif type(value).__name__ == "member_descriptor":
                seen.append((qual, cls, "data"))
    return seen


def sections(doc: str) -> dict[str, str]:
    doc = inspect.cleandoc(doc)
    found = list(SECTION.finditer(doc))
    return {
        m.group(1): doc[m.end() : (found[i + 1].start() if i + 1 < len(found) else len(doc))]
        for i, m in enumerate(found)
    }


def documented_names(body: str) -> set[str]:
    """The names a Parameters or Attributes section documents ("a, b : Matrix" documents a and b)."""
    names = set()
    for line in body.splitlines():
        if line and not line[0].isspace():
            head = line.split(" : ")[0]
            names |= {n.strip().lstrip("*") for n in head.split(",")}
    return names


def parameters(obj, kind: str) -> list[str]:
    if kind == "class":
        init = obj.__new__ if obj.__init__ is object.__init__ else obj.__init__
        try:
            sig = inspect.signature(init)
        except (TypeError, ValueError):
            return []
    else:
        sig = inspect.signature(obj)
    skip = {"self", "cls"}
    return [
        p.name
        for p in sig.parameters.values()
        if p.name not in skip and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and not p.name.startswith("_")
    ]


def returns_value(func) -> bool:
    """Whether the function's own body returns something other than None (or yields)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError):
        return True
    root = tree.body[0]
    for node in ast.walk(root):
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return True
        if isinstance(node, ast.Return) and node.value is not None:
            if not (isinstance(node.value, ast.Constant) and node.value.value is None):
                return True
    return False


def missing_sections(qual: str, obj, kind: str) -> list[str]:
    if kind == "data":
        cls = obj
        attrs = documented_names(sections(cls.__doc__ or "").get("Attributes", ""))
        return [] if qual.rsplit(".", 1)[1] in attrs else [f"{qual}: not in {cls.__name__}'s Attributes section"]
    doc = inspect.getdoc(obj.fget if kind == "property" else obj) if kind == "property" else obj.__doc__
    if not doc or not doc.strip():
        return [f"{qual}: no docstring"]
    if kind == "property":
        return []
    found = sections(doc)
    problems = []
    params = parameters(obj, kind)
    documented = documented_names(found.get("Parameters", "")) | documented_names(found.get("Attributes", ""))
    if params and "Parameters" not in found and not (kind == "class" and "Attributes" in found):
        problems.append(f"{qual}: no Parameters section (takes {', '.join(params)})")
    elif missing := [p for p in params if p not in documented]:
        problems.append(f"{qual}: Parameters does not document {', '.join(missing)}")
    if kind in ("function", "method"):
        if returns_value(obj) and not ({"Returns", "Yields"} & set(found)):
            problems.append(f"{qual}: no Returns section")
        if qual not in NEVER_RAISE and "Raises" not in found:
            problems.append(f"{qual}: no Raises section")
    if "Examples" not in found:
        problems.append(f"{qual}: no Examples section")
    return problems


def test_every_public_name_has_the_numpydoc_sections_that_apply():
    problems = [p for qual, obj, kind in public_objects() for p in missing_sections(qual, obj, kind)]
    assert not problems, "\n".join(problems)


def test_the_section_check_catches_a_missing_section():
    def f(x):
        """Summary.

        Parameters
        ----------
        x : int
            A number.

        Examples
        --------
        >>> f(1)
        """
        return x

    assert missing_sections("f", f, "function") == ["f: no Returns section", "f: no Raises section"]


# -------------------------------------------------------------------------------------------- examples


def docstring_tests() -> list[doctest.DocTest]:
    finder, tests = doctest.DocTestFinder(recurse=False), []
    globs = {"np": np, "gm": gm}
    for qual, obj, kind in public_objects():
        if kind == "data":
            continue
        target = obj.fget if kind == "property" else obj
        for test in finder.find(target, qual, globs=dict(globs)):
            if test.examples:
                tests.append(test)
    return tests


def needs_gpu(test: doctest.DocTest) -> bool:
    return any(example.options.get(GPU_FLAG) for example in test.examples)


def test_the_examples_that_need_no_gpu_run_as_doctests():
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    cpu = [t for t in docstring_tests() if not needs_gpu(t)]
    assert len(cpu) >= 8  # precision, errors, is_available, device_count, ...
    for test in cpu:
        runner.run(test)
    assert runner.failures == 0, f"{runner.failures} doctest failures (the output above names them)"


@pytest.mark.gpu
def test_the_gpu_examples_give_their_output_on_a_gpu():
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in [t for t in docstring_tests() if needs_gpu(t)]:
        runner.run(test)
    assert runner.failures == 0, f"{runner.failures} doctest failures (the output above names them)"


STAND_IN = r"""
import doctest, sys
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
import python_path
from gpumat.runtime import bindings


class Driver(python_path.StandInDriver):  # the answers the examples need beyond the call paths'
    def cuEventElapsedTime(self, start, end):
        return (*python_path.OK, 0.0)

    def cuPointerGetAttribute(self, attribute, pointer):  # every pointer is device 0's
        return (*python_path.OK, 0)


stand_in = Driver()  # installed as python_path.install() installs its own
object.__setattr__(bindings.driver, "_load", lambda: stand_in)
for name in list(vars(bindings.driver)):
    if name != "_load":
        object.__delattr__(bindings.driver, name)
import test_docs_cpu as t


class AnyOutput(doctest.OutputChecker):
    def check_output(self, want, got, optionflags):
        return True


runner = doctest.DocTestRunner(checker=AnyOutput())
tests = [x for x in t.docstring_tests() if t.needs_gpu(x)]
for test in tests:
    runner.run(test)
print(f"ran {len(tests)} docstrings, {runner.failures} failed")
sys.exit(1 if runner.failures else 0)
"""


def test_the_gpu_examples_run_on_the_stand_in_driver():
    """The examples that need a GPU also run on a driver that answers every call at once (in a process of
    their own, so on a machine with a GPU too): without a GPU, a wrong name, argument or shape in an example
    fails here (its printed output is not compared)."""
    manifest = ROOT / "src" / "gpumat" / "kernels" / "manifest.json"
    if not manifest.exists():
        pytest.skip("the kernels are not built (no manifest.json): `make kernels` builds them")
    out = subprocess.run(
        [sys.executable, "-c", STAND_IN, str(ROOT / "benchmarks"), str(ROOT / "tests")],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-6000:]
    assert re.search(r"ran \d+ docstrings, 0 failed", out.stdout), out.stdout[-2000:]


# ------------------------------------------------------------------------------------ tables and README


def test_the_generated_tables_are_what_the_script_writes():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import tables
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    for path in tables.TARGETS:
        text = path.read_text()
        assert tables.BLOCK.search(text), f"{path.name} has no generated block"
        assert tables.render(text, path) == text, f"{path.name}: stale tables; run python3 benchmarks/tables.py"


def test_the_readme_is_a_front_page_that_installs_from_source():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert "make wheel" in text and "pip install dist/" in text
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        body = doc.read_text()
        assert not re.search(r"pip install ['\"]?gpumat\[", body), f"{doc.name} installs gpumat from an index"


def test_every_docs_page_is_reachable_from_the_index():
    index = (ROOT / "docs" / "index.md").read_text()
    pages = {p.relative_to(ROOT / "docs").with_suffix("").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    pages |= {p.relative_to(ROOT / "docs").with_suffix("").as_posix() for p in (ROOT / "docs").rglob("*.rst")}
    missing = [p for p in pages if p != "index" and p not in index]
    assert not missing, f"pages outside the toctree: {missing}"
