"""``gradverify init -o``: what it writes and the command it prints agree. A name ending in
``.yaml`` or ``.yml`` is one file; any other name is a folder of one spec per target, so that
the printed ``next: gradverify check ...`` runs every target; a file of the user's is never
replaced."""
from __future__ import annotations

import shlex

import pytest

import functions
from conftest import run_cli

OPS = functions.module(functions.square("Square"), functions.scale("Double", 2))


@pytest.fixture
def kit(project):
    project.write("tkit/__init__.py", "")
    project.write("tkit/ops.py", OPS)
    return project


def _printed_next(stdout: str) -> list[str]:
    line = next(x for x in stdout.splitlines() if x.startswith("next: "))
    words = shlex.split(line.removeprefix("next: "))
    assert words[:2] == ["gradverify", "check"], line
    return words[1:]


@pytest.mark.parametrize(("target", "output", "written"), [
    pytest.param("tkit.ops", "initspecs", ["initspecs/Square.yaml", "initspecs/Double.yaml"],
                 id="module-no-slash"),
    pytest.param("tkit.ops", "initspecs/", ["initspecs/Square.yaml", "initspecs/Double.yaml"],
                 id="module-slash"),
    pytest.param("tkit", "pk", ["pk/Square.yaml", "pk/Double.yaml"], id="package-no-slash"),
    pytest.param("tkit", "pk/", ["pk/Square.yaml", "pk/Double.yaml"], id="package-slash"),
    pytest.param("tkit.ops", "all.yaml", ["all.yaml"], id="module-one-file"),
    pytest.param("tkit.ops:Square", "one", ["one/Square.yaml"], id="one-target-no-suffix"),
    pytest.param("tkit.ops:Square", "one.yml", ["one.yml"], id="one-target-file"),
    pytest.param("tkit.ops", "my specs", ["my specs/Square.yaml", "my specs/Double.yaml"],
                 id="a-space-quoted"),
])
def test_the_command_init_prints_runs_what_it_wrote(kit, target, output, written):
    result = run_cli("init", target, "-o", output)
    assert result.code == 0, result.output
    for path in written:
        assert (kit.root / path).is_file(), result.stdout
        assert f"wrote {path}: " in result.stdout
    check = run_cli(*_printed_next(result.stdout))
    assert check.code == 0, check.output
    ran = ["tkit.ops:Square"] if ":" in target else ["tkit.ops:Square", "tkit.ops:Double"]
    for name in ran:
        assert name in check.stdout, check.stdout
    assert "GV003" not in check.output


def test_each_spec_header_names_a_command_that_runs_it(kit):
    assert run_cli("init", "tkit.ops", "-o", "initspecs").code == 0
    header = (kit.root / "initspecs/Double.yaml").read_text().splitlines()[2]
    assert header.endswith("Run: gradverify check initspecs/Double.yaml"), header
    assert run_cli(*shlex.split(header.split("Run: ")[1])[1:]).code == 0


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
def test_a_users_file_where_the_folder_goes_is_never_replaced(kit, force):
    (kit.root / "initspecs").write_text("my notes\n")
    result = run_cli("init", "tkit.ops", "-o", "initspecs", *(["--force"] if force else []))
    assert result.code == 2
    said = " ".join(result.stderr.split())
    assert ("is not a spec gradverify wrote" if force else "pass --force") in said
    assert "init writes a folder there" in said or force
    assert (kit.root / "initspecs").read_text() == "my notes\n"


def test_force_replaces_a_stream_gradverify_wrote_by_the_folder(kit):
    # what an older `init tkit.ops -o initspecs` wrote: a stream of specs in one file
    stream = run_cli("init", "tkit.ops").stdout
    (kit.root / "initspecs").write_text(stream)
    refused = run_cli("init", "tkit.ops", "-o", "initspecs")
    assert refused.code == 2 and "pass --force" in refused.stderr
    result = run_cli("init", "tkit.ops", "-o", "initspecs", "--force")
    assert result.code == 0, result.output
    assert sorted(p.name for p in (kit.root / "initspecs").iterdir()) == [
        "Double.yaml", "Square.yaml"]
    assert run_cli(*_printed_next(result.stdout)).code == 0


@pytest.mark.parametrize("name", ["specs.json", "specs.py"])
def test_a_name_check_reads_otherwise_is_refused(kit, name):
    result = run_cli("init", "tkit.ops", "-o", name)
    assert result.code == 2 and "init writes YAML" in result.stderr
    assert not (kit.root / name).exists()
