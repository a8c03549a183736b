"""The house: no import circles, short modules, one file per check, tensor kinds in one place.

Imports are read with ``ast``, function-level (lazy) ones included: a lazy import still makes an
arrow, it only hides the circle from Python. Imports under ``if TYPE_CHECKING:`` never run and
are left out. ``from pkg import mod`` is an arrow to ``pkg.mod``, not to ``pkg``.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gradverify.registry import REGISTRY

PACKAGE = Path(__file__).resolve().parent.parent / "gradverify"
MAX_LINES = 400
LONG_REASON = "Long because"


def _modules(root: Path) -> dict[str, Path]:
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skipped


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in it, lazily or not)."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skipped = _type_checking_nodes(tree)
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                targets |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    here = here[:len(here) - node.level + 1]
                    base = ".".join(here + ([node.module] if node.module else []))
                targets |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                            for a in node.names}
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every circle, as the strongly connected components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_has_no_import_circle():
    graph = import_graph(PACKAGE)
    assert len(graph) > 30 and graph["gradverify.runner"], "the import graph was not read"
    assert cycles(graph) == []


def test_the_circle_finder_sees_lazy_imports_and_skips_type_checking(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.a import thing\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from pkg import d\n")
    (pkg / "d.py").write_text("from . import c\n")
    assert cycles(import_graph(pkg)) == [["pkg.a", "pkg.b"]]


def test_no_module_is_long_without_saying_why():
    long = {name: n for name, path in _modules(PACKAGE).items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES
            and LONG_REASON not in (ast.get_docstring(ast.parse(path.read_text())) or "")}
    assert long == {}, f"over {MAX_LINES} lines: say why at the top ({LONG_REASON} ...) or split"


def test_one_module_per_check_and_the_registry_outside_the_package():
    checks = PACKAGE / "checks"
    files = {p.stem for p in checks.glob("*.py") if not p.stem.startswith("_")} - {"base"}
    assert files == set(REGISTRY)
    init = ast.parse((checks / "__init__.py").read_text())
    assert not [n for n in ast.walk(init) if isinstance(n, (ast.Import, ast.ImportFrom))]
    graph = import_graph(PACKAGE)
    for name, targets in graph.items():
        if name.startswith("gradverify.checks."):
            assert "gradverify.registry" not in targets, name
        if name.startswith("gradverify.checks._"):  # helpers never import a check
            assert not {t for t in targets if t.startswith("gradverify.checks.")
                        and not t.startswith("gradverify.checks._")}, name
    for name, check in REGISTRY.items():
        assert type(check).__module__ == f"gradverify.checks.{name}"


@pytest.mark.parametrize("attribute", ["untyped_storage", "_version", "equal", "data_ptr"])
def test_tensor_kinds_are_handled_in_one_module(attribute):
    """Version counters, storages and equality differ by tensor kind (sparse, complex, views):
    only ``checks/_tensors.py`` touches them, so a new kind is handled in one place."""
    users = []
    for name, path in _modules(PACKAGE).items():
        if name == "gradverify.checks._tensors":
            continue
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.Attribute) and n.attr == attribute for n in ast.walk(tree)):
            users.append(name)
    assert users == []
