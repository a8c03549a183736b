"""The house: floors that import only downwards, no import circles (between modules or between
packages), short modules, one file per check that imports no other check, tensor kinds in one
place.

Imports are read with ``ast``, function-level (lazy) ones included: a lazy import still makes an
arrow, it only hides the circle from Python. Imports under ``if TYPE_CHECKING:`` never run and
are left out. ``from pkg import mod`` is an arrow to ``pkg.mod``, and importing ``pkg.mod`` runs
``pkg/__init__.py``: an arrow to ``pkg`` too (unless the importer is inside ``pkg``). A package's
``__getattr__`` (PEP 562) runs only when a user asks the package for a name, never when one of
its modules is imported: its imports are left out.
"""
from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gradverify.registry import REGISTRY

PACKAGE = Path(__file__).resolve().parent.parent / "gradverify"

FLOORS: list[tuple[str, tuple[str, ...]]] = [
    # From the front door down: a module imports from its own floor and the floors below only.
    ("the front", ("gradverify", "gradverify.__main__", "gradverify.cli", "gradverify.cliparams",
                   "gradverify.api", "gradverify.pytest_plugin", "gradverify.terminal",
                   "gradverify.sinks")),
    ("commands", ("gradverify.init", "gradverify.recording", "gradverify.listing",
                  "gradverify.explain")),
    ("renderers", ("gradverify.report",)),
    ("a run", ("gradverify.run", "gradverify.discover", "gradverify.importgraph",
               "gradverify.packages", "gradverify.mutants")),
    # spec files and pyproject: check names and options are validated against the registry
    ("settings", ("gradverify.spec", "gradverify.config", "gradverify.options",
                  "gradverify.optiontable", "gradverify.choices",
                  "gradverify.report.formats")),
    ("the checks", ("gradverify.registry", "gradverify.checks")),
    ("a case", ("gradverify.case", "gradverify.targets", "gradverify.torchstate")),
    ("the model", ("gradverify.results", "gradverify.scores", "gradverify.codes",
                   "gradverify.errors", "gradverify.specmodel", "gradverify.files",
                   "gradverify._version", "gradverify.examples", "gradverify.torchcompat",
                   "gradverify.syspath", "gradverify.frames")),
]
"""The table of docs/architecture.md, enforced (tests/docs_test.py checks that they agree)."""


def floor(module: str) -> int:
    """The index of the floor a module is on (0: the front): the longest prefix that names it."""
    best, found = "", None
    for index, (_, prefixes) in enumerate(FLOORS):
        for prefix in prefixes:
            exact_only = prefix == "gradverify"
            if (module == prefix or (not exact_only and module.startswith(prefix + "."))) \
                    and len(prefix) > len(best):
                best, found = prefix, index
    if found is None:
        raise AssertionError(f"{module} is on no floor: add it to FLOORS and to the table of "
                             "docs/architecture.md")
    return found
MAX_LINES = 400
MAX_FUNCTION_LINES = 60
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


def _lazy_reexport_nodes(tree: ast.Module, path: Path) -> set[int]:
    """The nodes of a package's module-level ``__getattr__``."""
    if path.name != "__init__.py":
        return set()
    return {id(n) for stmt in tree.body
            if isinstance(stmt, ast.FunctionDef) and stmt.name == "__getattr__"
            for n in ast.walk(stmt)}


def _packages_run(target: str, importer: str, modules: dict[str, Path]) -> set[str]:
    """The packages whose ``__init__`` importing ``target`` runs, but those the importer is in
    (already running)."""
    parts = target.split(".")
    return {p for p in (".".join(parts[:i]) for i in range(1, len(parts)))
            if p in modules and not (importer == p or importer.startswith(p + "."))}


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in it, lazily or not), and the
    packages whose ``__init__`` that runs, unless that ``__init__`` imports nothing when run
    (only lazily, in its ``__getattr__``): running it then imports nothing."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {}
    imported: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skipped = _type_checking_nodes(tree) | _lazy_reexport_nodes(tree, path)
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
        imported[name] = {t for t in targets if t in modules and t != name}
    for name, found in imported.items():
        graph[name] = found | {p for t in found for p in _packages_run(t, name, modules)
                               if imported[p]}
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
    assert len(graph) > 30 and graph["gradverify.run.runner"], "the import graph was not read"
    assert cycles(graph) == []


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` with every module counted as the first-level package it is in
    (``gradverify.spec.file`` -> ``gradverify.spec``; a top-level module stays itself)."""
    def package(module: str) -> str:
        return ".".join(module.split(".")[:2])

    collapsed: dict[str, set[str]] = {}
    for name, targets in graph.items():
        collapsed.setdefault(package(name), set()).update(package(t) for t in targets)
    return {name: targets - {name} for name, targets in collapsed.items()}


def test_no_import_circle_between_packages():
    """A package is one idea on its floors: when one of its modules imports another package and
    another of them is imported by it, the two packages are tangled even though no module circle
    shows. Move the module to the package it belongs to, or a shared value down a floor."""
    graph = package_graph(import_graph(PACKAGE))
    assert {"gradverify.spec", "gradverify.case", "gradverify.targets"} <= graph["gradverify.run"]
    assert cycles(graph) == []


def test_the_package_circle_finder_sees_what_no_module_circle_shows(tmp_path):
    pkg = tmp_path / "pkg"
    for sub in ("a", "b"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "util.py").write_text("")
    (pkg / "a" / "low.py").write_text("from pkg import util\nfrom pkg.b import mid\n")
    (pkg / "a" / "high.py").write_text("")
    (pkg / "b" / "mid.py").write_text("def f():\n    from pkg.a.high import thing\n")
    assert cycles(import_graph(pkg)) == []
    assert package_graph(import_graph(pkg)) == {
        "pkg": set(), "pkg.util": set(), "pkg.a": {"pkg.util", "pkg.b"}, "pkg.b": {"pkg.a"}}
    assert cycles(package_graph(import_graph(pkg))) == [["pkg.a", "pkg.b"]]
    (pkg / "a" / "high.py").unlink()
    (pkg / "b" / "high.py").write_text("")
    (pkg / "b" / "mid.py").write_text("def f():\n    from pkg.b.high import thing\n")
    assert cycles(package_graph(import_graph(pkg))) == []


def test_every_module_imports_only_its_own_floor_and_below():
    upward = sorted(f"{name} ({FLOORS[floor(name)][0]}) imports {target} "
                    f"({FLOORS[floor(target)][0]})"
                    for name, targets in import_graph(PACKAGE).items() for target in targets
                    if floor(target) < floor(name))
    assert upward == []


def test_the_report_model_is_below_the_checks_and_the_renderers_above_them():
    graph = import_graph(PACKAGE)
    assert not {t for t in graph["gradverify.results"] if t != "gradverify._version"}
    assert floor("gradverify.results") > floor("gradverify.checks.base") > \
        floor("gradverify.report.console")


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


def test_importing_a_module_runs_its_packages_init_unless_lazily(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("from pkg.sub import leaf\n")
    (pkg / "sub" / "__init__.py").write_text("from pkg.sub import high\n")
    (pkg / "sub" / "leaf.py").write_text("")
    (pkg / "sub" / "high.py").write_text("from pkg import low\n")
    assert cycles(import_graph(pkg)) == [["pkg.low", "pkg.sub", "pkg.sub.high"]]
    assert "pkg.sub" in import_graph(pkg)["pkg.low"]
    (pkg / "sub" / "__init__.py").write_text(
        "def __getattr__(name):\n    from pkg.sub import high\n    return high\n")
    assert cycles(import_graph(pkg)) == []
    # an __init__ that imports nothing when run is no step up: pkg.sub's floor is not low's
    assert import_graph(pkg)["pkg.low"] == {"pkg.sub.leaf"}


START_UP = ("torch", "yaml", "click")
"""What a lazy import of our own modules may defer: the libraries that cost start-up."""

DEFERRED: dict[str, str] = {
    # module imported in functions only -> what it loads that its light importers must not
    "gradverify.api": "yaml", "gradverify.config": "yaml", "gradverify.discover": "yaml",
    "gradverify.init": "yaml", "gradverify.listing": "yaml", "gradverify.spec.file": "yaml",
    "gradverify.spec.yamlio": "yaml", "gradverify.run.shrink": "yaml",
    "gradverify.recording.write": "yaml", "gradverify.run.pool": "yaml",
    "gradverify.run.prepare": "yaml", "gradverify.run.runner": "yaml",
    "gradverify.run.tasks": "yaml",
    "gradverify.options": "click", "gradverify.optiontable": "click",
    "gradverify.run.schedule": "click",
    "gradverify.checks._calls": "torch", "gradverify.checks._compare": "torch",
    "gradverify.checks._jacobian": "torch", "gradverify.checks._opcheck": "torch",
    "gradverify.checks._probes": "torch", "gradverify.checks._saved_changes": "torch",
    "gradverify.checks._tensors": "torch", "gradverify.mutants.engine": "torch",
    "gradverify.checks._elsewhere": "torch",
}
"""The list of docs/contributing.md's rule: a function-level import of our own module is one of
these, from a module that does not load what it loads at import time (the check modules, the
command line and the pytest plugin start without torch; the plugin without click or yaml)."""


def _runs_at_import(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """The imports a module runs when imported: outside functions and ``TYPE_CHECKING``."""
    skipped = _type_checking_nodes(tree)
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)) and id(child) not in skipped:
                found.append(child)
            visit(child)
    visit(tree)
    return found


def _imported(name: str, path: Path, node: ast.Import | ast.ImportFrom,
              modules: dict[str, Path]) -> tuple[set[str], set[str]]:
    """(our modules an import names, the other top-level names it imports); importing a module
    runs its packages' inits too: ``start_up_loads`` counts them."""
    if isinstance(node, ast.Import):
        named = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
            package = here[:len(here) - node.level + 1]
            base = ".".join([*package, base] if base else package)
        named = [f"{base}.{a.name}" for a in node.names] if base.startswith("gradverify") \
            else [base]
    ours = {t if t in modules else t.rsplit(".", 1)[0] for t in named
            if t.split(".")[0] == "gradverify"}
    return ours - {name}, {t.split(".")[0] for t in named if t.split(".")[0] != "gradverify"}


def start_up_loads(root: Path) -> dict[str, set[str]]:
    """Module -> which of START_UP importing it loads (through our modules, transitively)."""
    modules = _modules(root)
    direct: dict[str, tuple[set[str], set[str]]] = {}
    for name, path in modules.items():
        ours: set[str] = set()
        others: set[str] = set()
        for node in _runs_at_import(ast.parse(path.read_text())):
            o, e = _imported(name, path, node, modules)
            ours, others = ours | o, others | e
        parts = name.split(".")
        ours |= {p for p in (".".join(parts[:i]) for i in range(1, len(parts))) if p in modules}
        direct[name] = (ours, others & set(START_UP))
    loads = {name: set(others) for name, (_, others) in direct.items()}
    changed = True
    while changed:  # a fixed point: circles are another test's
        changed = False
        for name, (ours, _) in direct.items():
            more = set().union(loads[name], *(loads[m] for m in ours))
            changed, loads[name] = changed or more != loads[name], more
    return loads


def lazy_imports(root: Path) -> dict[str, set[str]]:
    """Our module imported in a function -> what it loads that its importer does not; empty
    where it defers nothing (hoist it). A package's ``__getattr__`` is a lazy re-export, and
    ``TYPE_CHECKING`` imports never run."""
    modules, loads = _modules(root), start_up_loads(root)
    found: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        at_import = ({id(n) for n in _runs_at_import(tree)} | _type_checking_nodes(tree)
                     | _lazy_reexport_nodes(tree, path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in at_import:
                for module in _imported(name, path, node, modules)[0]:
                    found.setdefault(f"{module} (in {name})", set()).update(
                        loads[module] - loads[name])
    return found


def test_our_modules_are_imported_in_functions_only_to_defer_start_up():
    """A function-level import hides a dependency and fails only on the rare path that runs it;
    one of ours is there only to keep torch, yaml or click out of a light module's start-up."""
    found = lazy_imports(PACKAGE)
    assert len(found) > 20, "no function-level import was read"
    defers_nothing = sorted(where for where, defers in found.items() if not defers)
    assert defers_nothing == [], "import these at the top of their module"
    lazily = {where.split(" (in ")[0] for where in found}
    assert lazily == set(DEFERRED), "DEFERRED lists the modules imported in functions"
    loads = start_up_loads(PACKAGE)
    assert {m: why for m, why in DEFERRED.items() if why not in loads[m]} == {}


def test_the_lazy_import_finder_sees_what_a_function_defers(tmp_path):
    pkg = tmp_path / "gradverify"
    pkg.mkdir()
    for file, text in {"__init__.py": "", "heavy.py": "import torch\n", "light.py": "X = 1\n",
                       "user.py": "def f():\n    from . import heavy, light\n    import torch\n"
                       }.items():
        (pkg / file).write_text(text)
    assert lazy_imports(pkg) == {"gradverify.heavy (in gradverify.user)": {"torch"},
                                 "gradverify.light (in gradverify.user)": set()}
    assert start_up_loads(pkg)["gradverify.user"] == set()

def test_no_module_is_long_without_saying_why():
    long = {name: n for name, path in _modules(PACKAGE).items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES
            and LONG_REASON not in (ast.get_docstring(ast.parse(path.read_text())) or "")}
    assert long == {}, f"over {MAX_LINES} lines: say why at the top ({LONG_REASON} ...) or split"


def test_no_function_is_long_without_saying_why():
    """A function reads as a sequence of named steps; one over the limit says why in its
    docstring."""
    long = []
    for name, path in _modules(PACKAGE).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES and \
                        LONG_REASON not in (ast.get_docstring(node) or ""):
                    long.append(f"{name}.{node.name} ({lines} lines)")
    assert long == [], f"over {MAX_FUNCTION_LINES} lines: split by step, or say why"


def test_ci_runs_the_readme_test_command():
    """`.ci/run` is the README's test command: every step of it, in order."""
    import re

    root = PACKAGE.parent
    blocks = re.findall(r"```bash\n(.*?)\n```", (root / "README.md").read_text(), re.S)
    command = next(b for b in blocks if '".[test]"' in b)
    ci = (root / ".ci" / "run").read_text()
    positions = [ci.find(step.strip().replace("python -m pip install", "python -m pip install -q"))
                 for step in command.split("&&")]
    assert -1 not in positions and positions == sorted(positions), (command, positions)


def test_one_module_per_check_and_the_registry_outside_the_package():
    checks = PACKAGE / "checks"
    files = {p.stem for p in checks.glob("*.py") if not p.stem.startswith("_")} - {"base"}
    assert files == set(REGISTRY)
    init = ast.parse((checks / "__init__.py").read_text())
    assert not [n for n in ast.walk(init) if isinstance(n, (ast.Import, ast.ImportFrom))]
    graph = import_graph(PACKAGE)
    checks = {f"gradverify.checks.{name}" for name in REGISTRY}
    for name, targets in graph.items():
        if name.startswith("gradverify.checks."):
            assert "gradverify.registry" not in targets, name
            # a check imports no other check, and a helper none: what checks share is in
            # the helpers (checks/_*.py) and the interface (checks/base.py)
            assert not targets & checks, f"{name} imports {sorted(targets & checks)}"
    for name, check in REGISTRY.items():
        assert type(check).__module__ == f"gradverify.checks.{name}"


def test_the_pool_and_its_workers_send_only_typed_messages():
    """The worker protocol is ``run/messages.py``: whatever the pool and a worker send over
    their socket is a call of one of its classes, never a bare tuple with a string tag."""
    run = PACKAGE / "run"
    kinds = {n.name for n in ast.parse((run / "messages.py").read_text()).body
             if isinstance(n, ast.ClassDef)}
    sent, untyped = 0, []
    for module in ("pool", "worker"):
        for node in ast.walk(ast.parse((run / f"{module}.py").read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("send", "put", "send_bytes"):
                sent += 1
                what = node.args[0] if len(node.args) == 1 and not node.keywords else None
                called = what.func if isinstance(what, ast.Call) else None
                name = called.attr if isinstance(called, ast.Attribute) else \
                    called.id if isinstance(called, ast.Name) else None
                if name not in kinds:
                    untyped.append(f"{module}.py:{node.lineno}: {ast.unparse(node)}")
    assert sent >= 5 and untyped == []


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


def _private_torch(tree: ast.AST) -> list[str]:
    """``torch._C...``, ``torch.x._y`` and ``from torch._z import ...`` in a module."""
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Attribute):
            chain, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id == "torch":
                names = [".".join(["torch", *reversed(chain)])]
        found += [n for n in names if n.split(".")[0] == "torch" and any(
            part.startswith("_") and not part.startswith("__") for part in n.split(".")[1:])]
    return found


def _found_outside(find: Callable[[ast.Module], Any], allowed: Callable[[str], bool]
                   ) -> dict[str, Any]:
    """What ``find`` finds in each module of the package that ``allowed`` does not allow."""
    return {name: found for name, path in _modules(PACKAGE).items()
            if not allowed(name) and (found := find(ast.parse(path.read_text())))}


def test_only_torchcompat_touches_private_torch():
    """Private torch APIs change between releases: each is feature-tested in one module."""
    assert _found_outside(_private_torch, lambda name: name == "gradverify.torchcompat") == {}
    assert _private_torch(ast.parse((PACKAGE / "torchcompat.py").read_text()))


def test_the_private_torch_finder_sees_every_spelling():
    tree = ast.parse("import torch._dynamo\nfrom torch._library import x\n"
                     "torch._C._autograd.f()\ntorch.ops.aten._foo\ntorch.__version__\n"
                     "from torch.autograd import Function\n")
    assert sorted(_private_torch(tree)) == sorted([
        "torch._dynamo", "torch._library", "torch._C._autograd.f", "torch._C._autograd",
        "torch._C", "torch.ops.aten._foo"])


KIND_MODULES = {f"gradverify.targets.{name}" for name in
                ("function_class", "custom_op", "plain_function", "module")}


def _kind_knowledge(tree: ast.AST, kind_names: set[str]) -> list[str]:
    """Where code compares a ``.kind`` with a target kind's name, or imports a kind's module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            named = {f"{node.module}.{a.name}" for a in node.names} | {node.module}
            if named & KIND_MODULES:
                found.append(f"line {node.lineno}: imports {sorted(named & KIND_MODULES)[0]}")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            texts = {c.value for side in sides for c in ast.walk(side)
                     if isinstance(c, ast.Constant) and isinstance(c.value, str)}
            if any(isinstance(s, ast.Attribute) and s.attr == "kind" for s in sides) \
                    and texts & kind_names:
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_only_targets_knows_a_kind_of_target():
    """targets/ is the seam: other code asks a Target for capabilities (``Target.has``), and
    names its kind only in messages."""
    from gradverify.targets import KINDS

    names = {kind.name for kind in KINDS}
    assert _found_outside(lambda tree: _kind_knowledge(tree, names),
                          lambda name: name.startswith("gradverify.targets")) == {}


def _name_grammar(tree: ast.AST) -> list[str]:
    """Where code outside targets/ reads a kind's name grammar itself: a regular expression
    of an op's ``ns::op`` or ``torch.ops.ns.op`` spelling."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "re" \
                and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) \
                and ("::" in node.args[0].value or "torch\\.ops" in node.args[0].value):
            found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_only_targets_knows_the_grammar_of_a_kinds_names():
    """A kind owns the names it accepts (``Kind.name_of``): other code asks
    ``parse_target(text).named`` or ``targets.names.named_by``."""
    assert _found_outside(_name_grammar, lambda name: name.startswith("gradverify.targets")) \
        == {}
    assert _name_grammar(ast.parse('import re\nOP = re.compile(r"^(\\w+)::(\\w+)$")\n'))


_STRING_METHODS = frozenset({"split", "rsplit", "partition", "rpartition", "replace", "count",
                             "startswith", "endswith", "find", "rfind", "index"})
_OTHER_COLONS = {
    "gradverify.pytest_plugin": "pytest's node ids, spec.yaml::Target::case",
    "gradverify.report.line": "a CI runner's workflow commands, ::error",
    "gradverify.checks.gradgradcheck": "the C++ names of torch's graph nodes",
}
"""Modules whose ``::`` is not a kind's grammar, and whose it is."""


def _double_colons(tree: ast.AST) -> list[str]:
    """Where code takes a name apart at ``::`` (an op's ``ns::op``): a string method called with
    ``"::"``, or ``"::" in name``."""
    def colons(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and isinstance(node.value, str) \
            and "::" in node.value

    def apart(node: ast.AST) -> bool:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            return node.func.attr in _STRING_METHODS and any(map(colons, node.args))
        return isinstance(node, ast.Compare) and colons(node.left) \
            and isinstance(node.ops[0], (ast.In, ast.NotIn))

    return [f"line {node.lineno}: {ast.unparse(node)[:80]}" for node in ast.walk(tree)
            if apart(node)]


def test_only_targets_takes_a_kinds_names_apart():
    """An op's ``ns::op`` is its kind's grammar: other code asks ``Schema.short_name``,
    ``targets.names`` (``named_by``, ``same_target_name``, ``file_stem``) or its kind
    (``Kind.bare_call``)."""
    assert _found_outside(_double_colons, lambda name: name.startswith("gradverify.targets")
                          or name in _OTHER_COLONS) == {}
    assert sorted(w.split(":")[0] for w in _double_colons(ast.parse(
        'a = name.split("::")[-1]\nb = "::" in attr\nc = f"{x} :: {y}"\n'
        'd = text.partition("::")\ne = "::" + x\n'))) == ["line 1", "line 2", "line 4"]


def test_the_kind_finder_sees_comparisons_and_imports():
    names = {"custom op", "module"}
    code = ("from gradverify.targets.custom_op import op_of\n"
            "from gradverify.targets import module\n"
            "a = info.kind == 'custom op'\n"
            "b = ctx.info.kind in ('function', 'module')\n"
            "c = g.kind == 'tensor'\n"
            "d = f'not for a {info.kind}'\n")
    assert [w.split(":")[0] for w in _kind_knowledge(ast.parse(code), names)] == \
        ["line 1", "line 2", "line 3", "line 4"]


def _schedule_reads(tree: ast.AST) -> list[str]:
    """Where a check reads the schedule's state through its context (``ctx.results``,
    ``ctx.earlier``, ``ctx.verdicts``) instead of asking ``ctx.verdict(trait)``."""
    return [f"line {node.lineno}: {ast.unparse(node)}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in ("results", "earlier", "verdicts")
            and isinstance(node.value, ast.Name) and node.value.id == "ctx"]


def test_checks_see_earlier_checks_only_by_trait():
    """A check asks ``ctx.verdict(trait)``; the rows of earlier checks are the runner's, and
    the context a check gets is frozen: nothing it does changes what the next one sees."""
    import dataclasses

    from gradverify.case.context import CheckContext

    assert _found_outside(_schedule_reads, lambda name: not name.startswith("gradverify.checks")
                          ) == {}
    assert sorted(_schedule_reads(ast.parse(
        "a = ctx.results['gradcheck']\nb = ctx.earlier\nc = ctx.verdict(JUDGES)\n"
        "d = other.results\n"))) == ["line 1: ctx.results", "line 2: ctx.earlier"]
    assert CheckContext.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert not {"results", "verdicts"} & {f.name for f in dataclasses.fields(CheckContext)}


_FRAME_ATTRIBUTES = frozenset({
    "co_filename", "f_back", "f_lineno", "tb_frame", "tb_next", "tb_lineno",
    "extract_tb", "extract_stack", "walk_tb", "walk_stack", "_getframe", "currentframe",
    "getouterframes", "getinnerframes"})
"""Reading a frame's file or walking a traceback or the stack: deciding whose a frame is."""
_FRAME_EXEMPT = {"gradverify.frames"}


def _frame_reads(tree: ast.AST) -> list[str]:
    """``x.co_filename``, ``traceback.walk_tb``, ``from sys import _getframe``, ``inspect.stack``
    and the like in a module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and (node.attr in _FRAME_ATTRIBUTES or (
                node.attr in ("stack", "trace") and isinstance(node.value, ast.Name)
                and node.value.id == "inspect")):
            found.append(node.attr)
        elif isinstance(node, ast.ImportFrom):
            found += [a.name for a in node.names if a.name in _FRAME_ATTRIBUTES or (
                node.module == "inspect" and a.name in ("stack", "trace"))]
    return found


def test_only_frames_decides_whose_a_frame_is():
    """"Is this frame the user's?" has one answer, ``gradverify/frames.py``'s: no other module
    reads a code object's file or walks a traceback or the stack."""
    assert _found_outside(_frame_reads, lambda name: name in _FRAME_EXEMPT) == {}
    assert _frame_reads(ast.parse((PACKAGE / "frames.py").read_text()))


def test_the_frame_reader_finder_sees_every_spelling():
    tree = ast.parse("fn.__code__.co_filename\ntraceback.extract_tb(tb)\nsys._getframe(1).f_back\n"
                     "from traceback import walk_stack\ninspect.stack()\nself.stack\n"
                     "traceback.format_exception(exc)\nfrom inspect import trace\n")
    assert sorted(_frame_reads(tree)) == sorted([
        "co_filename", "extract_tb", "_getframe", "f_back", "walk_stack", "stack", "trace"])


_UNCITED_EXEMPT: set[str] = set()
"""Modules that may still cite the design document: none."""


_TRACKER = re.compile(r"(?<!pytorch )(?<!torch )\bissues? #?\d+")
"""A citation of an issue of a tracker not in the repository ("issue 34"); one of torch's
("pytorch issue 172798", "pytorch#159299") names a public thread."""


def _outside_citations(text: str) -> list[str]:
    """The lines that cite a document outside the repository: "DESIGN", a section sign, or an
    issue of our own tracker."""
    return [line.strip() for line in text.splitlines()
            if "DESIGN" in line or "\u00a7" in line or _TRACKER.search(line)]


def test_no_module_cites_a_document_outside_the_repository():
    """The design document and our issue tracker are not in the repository: a citation of
    either ("DESIGN \u00a73", "issue 34") sends a reader nowhere. docs/ is the reference: cite
    its page, or say the fact. The package, its tests, docs/ and bench/ alike."""
    root = PACKAGE.parent
    files = [*_modules(PACKAGE).values(), *root.glob("tests/**/*.py"), *root.glob("docs/*.md"),
             *root.glob("bench/**/*.py"), root / "README.md"]
    cited = {str(path.relative_to(root)): found for path in files
             if path.stem not in _UNCITED_EXEMPT and path.name != "architecture_test.py"
             and (found := _outside_citations(path.read_text()))}
    assert cited == {}
    assert _outside_citations("x = 1  # DESIGN \u00a78\n(see \u00a74)\nfine\nissue 34 then\n"
                              "see pytorch issue 172798\n") == \
        ["x = 1  # DESIGN \u00a78", "(see \u00a74)", "issue 34 then"]


def _ranked_e_or_f(root: Path) -> list[str]:
    """Every function of the package at ``root`` that radon ranks E or F, with its rank."""
    complexity = pytest.importorskip("radon.complexity", reason="radon is a test extra (a linter)")
    return sorted(f"{path.relative_to(root).as_posix()} {block.fullname} "
                  f"({complexity.cc_rank(block.complexity)}, {block.complexity})"
                  for path in _modules(root).values()
                  for block in complexity.cc_visit(path.read_text())
                  if complexity.cc_rank(block.complexity) in ("E", "F"))


def test_no_function_is_ranked_e_or_f_by_radon():
    """Cyclomatic complexity (radon's ranks: E from 31 branches, F from 41): a function that
    decides that much at once is several steps; split it by role, each step a named function.
    No function is exempt."""
    assert _ranked_e_or_f(PACKAGE) == []


def _branches(name: str, n: int) -> str:
    """A toy function of cyclomatic complexity ``n + 1``: ``n`` ifs in a row."""
    return f"def {name}(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n"
                                          for i in range(n)) + "    return -1\n"


def test_the_radon_test_sees_a_function_ranked_e_or_f(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text(_branches("ranked_d", 29))
    (pkg / "sub" / "mod.py").write_text(_branches("ranked_e", 30) + "\n\nclass Toy:\n    "
                                        + _branches("ranked_f", 40).replace("\n", "\n    "))
    # a class is ranked by its methods' mean complexity, plus one; ranked_d (D, 30) passes
    assert _ranked_e_or_f(pkg) == ["sub/mod.py Toy (F, 42)", "sub/mod.py Toy.ranked_f (F, 41)",
                                   "sub/mod.py ranked_e (E, 31)"]
