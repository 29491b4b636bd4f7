"""The package's layers, checked from its source: data flows down, the driver stays in the runtime.

The import graph is read with `ast` (every import statement, at module level or inside a function), so
these tests run without a GPU and without importing the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "gpumat"

# The late imports the design declares: a lower module reaching the operations built on it, on first use.
DECLARED_LATE = {
    ("gpumat.matrix", "gpumat._operations"),  # Matrix methods (A @ B, A.T, astype, to, DLPack, CAI)
    ("gpumat.sparse", "gpumat.spmm"),  # S @ B
    ("gpumat.matmul.api", "gpumat.outofcore"),  # gm.matmul with numpy operands
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path) -> list[tuple[str, bool]]:
    """(imported module, whether the import is inside a function) for every import in a module; a
    `from X import y` names X.y when that is a module of the package."""
    modules = _modules()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    late_nodes = {
        id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(f)
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, id(node) in late_nodes) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.append((target if target in modules else base, id(node) in late_nodes))
    return found


def _graph(skip_declared: bool = True) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in _modules().items():
        graph[name] = {
            target
            for target, late in _imports(name, path)
            if target.startswith("gpumat")
            and target != name
            and not (skip_declared and late and (name, target) in DECLARED_LATE)
        }
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_import_graph_has_no_cycle():
    cycles = _cycles(_graph())
    assert not cycles, f"import cycles: {cycles}"


def test_the_declared_late_imports_are_late_and_needed():
    """Each declared late import exists, sits inside a function, and would close a cycle at module level
    (else it should be an ordinary import)."""
    modules = _modules()
    for source, target in DECLARED_LATE:
        imports = _imports(source, modules[source])
        assert (target, True) in imports, f"{source} has no late import of {target}"
        assert (target, False) not in imports, f"{source} imports {target} at module level"
    assert _cycles(_graph(skip_declared=False)), "no declared late import closes a cycle: make them ordinary"


def test_matrix_reaches_the_operations_through_one_late_import():
    late = [
        t for t, is_late in _imports("gpumat.matrix", _modules()["gpumat.matrix"]) if is_late and t.startswith("gpumat")
    ]
    assert late == ["gpumat._operations"]


def test_only_the_runtime_imports_the_driver_bindings():
    offenders = sorted(
        name
        for name, path in _modules().items()
        if not name.startswith("gpumat.runtime") and any(t.startswith("cuda.bindings") for t, _ in _imports(name, path))
    )
    assert offenders == []
    # the runtime reaches the bindings through one deferred import (runtime/bindings.py)
    assert "cuda.bindings.driver" in (PACKAGE / "runtime" / "bindings.py").read_text()


def test_importing_gpumat_does_not_import_the_driver_bindings():
    """The bindings load on the first GPU call, ml_dtypes at the first use of bfloat16, json and pathlib
    with the kernel manifest: `import gpumat` stays light for programs that import it early or never
    touch the GPU."""
    import os
    import subprocess
    import sys

    later = ("cuda", "ml_dtypes", "json", "pathlib", "dask")
    code = (  # what gpumat adds to what numpy (its one import) brought in already
        "import sys, numpy; before = set(sys.modules); import gpumat; "
        f"print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] in {later!r}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)},
    )
    assert result.stdout.strip() == "[]", result.stdout


def test_layers_point_down():
    """runtime imports nothing of gpumat above it; memory only the runtime (and the dtype table)."""
    graph = _graph()
    for name, targets in graph.items():
        if name.startswith("gpumat.runtime"):
            assert all(t.startswith("gpumat.runtime") for t in targets), (name, targets)
        if name.startswith("gpumat.memory"):
            assert all(t.startswith(("gpumat.runtime", "gpumat.memory")) for t in targets), (name, targets)


ENGINE_SURFACE = {"gpumat.matmul", "gpumat.matmul.engine"}  # what may be imported of the GEMM engine from outside


def _engine_imports(path: Path) -> set[str]:
    """The gpumat.matmul modules a file outside the package imports (absolute imports: tests, benchmarks, tools)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names if node.module == "gpumat.matmul"}
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module" and node.args:
            if isinstance(node.args[0], ast.Constant):
                found.add(node.args[0].value)
    return {m for m in found if m.startswith("gpumat.matmul.") and m.split(".")[2] in _ENGINE_MODULES}


_ENGINE_MODULES = {p.stem for p in (PACKAGE / "matmul").glob("*.py")} - {"__init__"}


def test_tests_and_benchmarks_reach_the_engine_through_its_surface():
    """Tests, benchmarks and tools use the plan object, gm.matmul_plan, gpumat.matmul's few names and the
    documented engine surface (gpumat.matmul.engine): never the engine's private modules, which then stay
    free to change. The package's own layers above the engine (outofcore, dask, the benchmarks, the demo)
    likewise import it only through gpumat.matmul and gpumat.matmul.engine."""
    root = PACKAGE.parent.parent
    files = [*root.glob("tests/*.py"), *root.glob("benchmarks/*.py"), *root.glob("tools/*.py")]
    offenders = {
        str(p.relative_to(root)): sorted(bad)
        for p in files
        if (bad := {m for m in _engine_imports(p) if m not in ENGINE_SURFACE})
    }
    assert offenders == {}
    inside = {
        name: sorted(t for t in targets if t.startswith("gpumat.matmul.") and t not in ENGINE_SURFACE)
        for name, targets in _graph().items()
        if not name.startswith("gpumat.matmul")
    }
    assert {name: bad for name, bad in inside.items() if bad} == {}
