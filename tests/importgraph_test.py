"""`check --changed` (the pre-commit entry) follows imports: a changed file that a target's
module imports, directly or not, runs that target's specs; read from source, nothing imported.
Before, only the file defining the target (or its reference, factory, `imports:`) did."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import functions
from conftest import Project, run_cli
from gradverify.config import Config
from gradverify.discover import Discoverer
from gradverify.importgraph import ImportGraph, project_bases


def fn(name: str, helper: str = "", imports: str = "") -> str:
    """A module with a Function whose backward computes 2 * x by ``helper`` (an expression of
    x) when given, after ``imports``."""
    gradient = f"{helper} * grad" if helper else "2 * x * grad"
    return functions.module(functions.square(name, gradient=gradient),
                            header=functions.HEADER + imports)


def spec(project: Project, target: str) -> None:
    name = target.split(":")[1].lower()
    project.write(f"specs/{name}.yaml",
                  f"target: {target}\ncases:\n  - args: {{x: {{shape: [3]}}}}\n")


def changed(*files: str) -> list[str]:
    """The targets `gradverify check --changed FILES` ran, as pre-commit runs it."""
    result = run_cli("check", "--changed", *files, "--only", "gradcheck", "--format", "json")
    assert result.code == 0, result.output[-2000:]
    return sorted({r["target"] for r in json.loads(result.stdout)["results"]})


@pytest.fixture
def package(project: Project) -> Project:
    """pkg/ with a shared helper, a Function using it, a subpackage; a top-level Function."""
    project.write("pkg/__init__.py", "")
    project.write("pkg/helpers.py", "def twice(x):\n    return 2 * x\n")
    project.write("pkg/ops.py", fn("MyFn", "helpers.twice(x)", "from pkg import helpers\n"))
    project.write("pkg/sub/__init__.py", "")
    project.write("pkg/sub/more.py", fn("Other"))
    project.write("top.py", fn("Top"))
    project.write("unrelated.py", "def other():\n    return 1\n")
    for target in ("pkg.ops:MyFn", "pkg.sub.more:Other", "top:Top"):
        spec(project, target)
    return project


def test_a_changed_helper_runs_the_specs_of_its_importers(package):
    assert changed("pkg/helpers.py") == ["pkg.ops:MyFn"]
    assert changed("pkg/ops.py") == ["pkg.ops:MyFn"]  # as before


def test_a_broken_helper_fails_the_pre_commit_entry_as_is(package):
    """`gradverify check --changed FILE` as the hook runs it (worker processes); before, a
    helper broken in a commit of its own passed: nothing ran."""
    package.write("pkg/helpers.py", "def twice(x):\n    return 3 * x\n")
    result = run_cli("check", "--changed", "pkg/helpers.py", "--only", "gradcheck",
                     isolate=True)
    assert result.code == 1 and "pkg.ops:MyFn" in result.flat and "GV121" in result.flat


def test_a_changed_package_init_runs_every_target_under_the_package(package):
    assert changed("pkg/__init__.py") == ["pkg.ops:MyFn", "pkg.sub.more:Other"]
    assert changed("pkg/sub/__init__.py") == ["pkg.sub.more:Other"]


@pytest.fixture
def reexporting(project: Project) -> Project:
    """sigproc/, whose __init__ only re-exports its modules' names (as most packages do)."""
    project.write("sigproc/__init__.py", '''"""Signal processing."""
from .util import twice as double
from .filters import Lowpass
from .peaks import Peak

__all__ = ["Lowpass", "Peak", "double"]
''')
    project.write("sigproc/util.py", "def twice(x):\n    return 2 * x\n")
    project.write("sigproc/peaks.py", fn("Peak", "double(x)", "from sigproc import double\n"))
    project.write("sigproc/filters.py", fn("Lowpass"))
    for target in ("sigproc.peaks:Peak", "sigproc.filters:Lowpass"):
        spec(project, target)
    project.write("specs/reexported.yaml",
                  "target: sigproc:Lowpass\ncases:\n  - args: {x: {shape: [3]}}\n")
    return project


def test_a_package_init_that_only_re_exports_runs_only_the_targets_using_the_change(
        reexporting):
    """Importing sigproc.peaks runs sigproc/__init__.py, which imports every module; that
    alone made every target depend on every module, so the hook ran everything."""
    assert changed("sigproc/filters.py") == ["sigproc.filters:Lowpass", "sigproc:Lowpass"]
    assert changed("sigproc/peaks.py") == ["sigproc.peaks:Peak"]
    # a name imported from the package is followed to the module defining it (an alias too)
    assert changed("sigproc/util.py") == ["sigproc.peaks:Peak"]
    assert changed("sigproc/__init__.py") == [
        "sigproc.filters:Lowpass", "sigproc.peaks:Peak", "sigproc:Lowpass"]


def test_a_package_init_that_runs_code_depends_on_what_it_imports(reexporting):
    reexporting.write("sigproc/__init__.py", "from .util import twice as double\n\n"
                      "SCALE = double(1)\nfrom .filters import Lowpass\n"
                      "from .peaks import Peak\n")
    assert changed("sigproc/util.py") == [
        "sigproc.filters:Lowpass", "sigproc.peaks:Peak", "sigproc:Lowpass"]


def test_an_unrelated_file_runs_nothing_and_passes(package):
    result = run_cli("check", "--changed", "unrelated.py", "README.md")
    assert result.code == 0 and "no checks ran" in result.stdout


def test_imports_are_followed_transitively_and_relatively(project):
    project.write("pkg/__init__.py", "")
    project.write("pkg/ops.py", fn("MyFn", "a.f(x)", "from . import a\n"))
    project.write("pkg/a.py", "from .sub.b import g\n\ndef f(x):\n    return g(x)\n")
    project.write("pkg/sub/__init__.py", "")
    project.write("pkg/sub/b.py", "def g(x):\n    from ..util import c\n    return c.h(x)\n")
    project.write("pkg/util/__init__.py", "")
    project.write("pkg/util/c.py", "import shared.d\n\ndef h(x):\n    return shared.d.k(x)\n")
    project.write("shared/__init__.py", "")
    project.write("shared/d.py", "def k(x):\n    return 2 * x\n")
    spec(project, "pkg.ops:MyFn")
    for file in ("pkg/a.py", "pkg/sub/__init__.py", "pkg/sub/b.py", "pkg/util/c.py",
                 "shared/__init__.py", "shared/d.py"):
        assert changed(file) == ["pkg.ops:MyFn"], file


def test_an_import_cycle_ends(project):
    project.write("ops.py", fn("MyFn", "a.f(x)", "import a\n"))
    project.write("a.py", "import b\n\ndef f(x):\n    return 2 * x\n")
    project.write("b.py", "import a\nimport ops\nimport c\n")
    project.write("c.py", "")
    spec(project, "ops:MyFn")
    assert changed("c.py") == ["ops:MyFn"]


def test_a_file_that_does_not_parse_adds_no_imports_and_is_noted(project):
    project.write("ops.py", fn("MyFn", imports="import a\n"))
    project.write("a.py", "def broken(:\n    pass\nimport b\n")
    project.write("b.py", "")
    spec(project, "ops:MyFn")
    result = run_cli("check", "--changed", "b.py")
    assert result.code == 0 and "no checks ran" in result.stdout
    assert "a.py: not parsed (invalid syntax at line 1), so --changed does not know what it " \
           "imports" in result.flat
    broken = run_cli("check", "--changed", "a.py")  # ops imports it: its run says why
    assert broken.code == 3 and "importing 'ops' raised SyntaxError" in broken.flat


def test_choosing_imports_nothing(package):
    plan = Discoverer(Config(root=package.root)).changed(["pkg/helpers.py"])
    assert [job.target for job in plan.jobs] == ["pkg.ops:MyFn"]
    assert "pkg.ops" not in sys.modules and "pkg.helpers" not in sys.modules


def test_installed_packages_and_the_standard_library_are_not_followed(tmp_path, monkeypatch):
    installed = tmp_path / "lib" / "site-packages"
    (installed / "torch").mkdir(parents=True)
    (installed / "torch" / "__init__.py").write_text("import shared\n")
    (tmp_path / "json.py").write_text("")  # the standard library's json comes first
    (tmp_path / "shared.py").write_text("")
    (tmp_path / "ops.py").write_text("import json, torch\nfrom torch import nn\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(installed))
    bases = project_bases(tmp_path)
    assert installed not in bases and tmp_path.resolve() in bases
    ops = (tmp_path / "ops.py").resolve()
    assert ImportGraph(bases).closure([ops]) == {ops}


def test_each_import_form_resolves_to_its_file(tmp_path):
    files = ["pkg/__init__.py", "pkg/sub/__init__.py", "pkg/sub/mod.py", "pkg/sub/sib.py",
             "pkg/other.py", "pkg/ns/deep.py", "top.py"]
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    mod = tmp_path / "pkg/sub/mod.py"
    mod.write_text("from . import sib\nfrom .. import other\nimport pkg.ns.deep\nimport top.x\n")
    graph = ImportGraph([tmp_path])
    assert {str(p.relative_to(tmp_path.resolve())) for p in graph.imports(mod.resolve())} == {
        "pkg/sub/__init__.py", "pkg/sub/sib.py", "pkg/__init__.py", "pkg/other.py",
        "pkg/ns/deep.py", "top.py"}
    assert graph.find("pkg.sub") == (tmp_path / "pkg/sub/__init__.py").resolve()
    assert graph.find("nothere") is None and graph.unparsed == {}


def test_a_file_edited_between_runs_is_read_again(tmp_path):
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    a = (tmp_path / "a.py").resolve()
    assert ImportGraph([tmp_path]).imports(a) == set()
    a.write_text("import b  # longer now\n")
    assert ImportGraph([tmp_path]).imports(a) == {(tmp_path / "b.py").resolve()}


def test_the_pre_commit_docs_show_install_and_what_changed_selects():
    text = (Path(__file__).resolve().parent.parent / "docs" / "ci.md").read_text()
    assert "pre-commit install" in text and "pre-commit run --all-files" in text
    assert "imports" in text.split("## pre-commit")[1]
