"""Whatever the environment a run starts in, its verdict is the Function's: a deleted working
directory, a POSIX locale with UTF-8 mode off, a tiny ``--timeout`` (a case timeout, never an
import problem), ``verify()`` called inside ``with torch.device("meta")`` or another
torch-function mode, and ``verify()`` given arguments of the wrong type (a TypeError naming the
argument; a string is one name)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gradverify import verify
from hostile import GOOD, GRADVERIFY, gv, make_project, require_command, unwrap


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a deleted cwd as Linux has it")
def test_a_deleted_working_directory_is_a_clear_error_not_a_bug(tmp_path):
    require_command()
    gone = tmp_path / "gone"
    gone.mkdir()
    # the script beside this interpreter: a shim (pyenv) cannot start from a deleted directory
    beside = Path(sys.executable).parent / "gradverify"
    command = beside if beside.is_file() else GRADVERIFY
    script = f"cd {gone} && rmdir {gone} && {command} check"
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 2, result.stderr
    assert "the current directory no longer exists" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX locale as Linux has it")
def test_a_non_ascii_target_under_a_posix_locale(project):
    require_command()
    (project / "ünï.py").write_text(GOOD.replace("class Good", "class Café"), encoding="utf-8")
    env = {"LC_ALL": "POSIX", "LANG": "", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    for target in ("ünï.py:Café", "ünï:Café"):
        result = gv(project, "check", target, "--json", "r.json", env=env)
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads((project / "r.json").read_text(encoding="utf-8"))
        assert report["results"][0]["status"] == "pass"
    utf8 = gv(project, "check", "ünï:Café", "--json", "u.json")
    seeded = [json.loads((project / n).read_text(encoding="utf-8"))["results"][0]["inputs"]
              for n in ("r.json", "u.json")]
    assert seeded[0] == seeded[1] and utf8.returncode == 0  # the same case in every locale


def test_a_tiny_timeout_is_a_case_timeout_not_an_import_problem(project):
    require_command()
    result = gv(project, "check", "good:Good", "--timeout", "1e-9")
    assert result.returncode == 1, result.stdout
    assert "GV009" in result.stdout and "GV003" not in result.stdout
    assert "importing good" not in unwrap(result.stdout)


SPEC = {"cases": [{"name": "c", "args": {"x": {"shape": [3]}}}]}


def _good():
    namespace: dict = {}
    exec(compile(GOOD, "good_inline.py", "exec"), namespace)
    return namespace["Good"]


def test_verify_inside_a_meta_device_context_verifies_on_the_cpu():
    good = _good()
    with torch.device("meta"):
        report = verify(good, spec=SPEC)
        assert torch.zeros(1).device.type == "meta"  # the caller's context is given back
    assert report.ok and not report.errors
    assert {c.status.value for case in report.results for c in case.rows} <= {"pass", "skip"}


def test_verify_inside_a_torch_function_mode_is_not_changed_by_it():
    good = _good()
    seen: list[object] = []

    class Spy(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Spy():
        report = verify(good, spec=SPEC)
        assert torch.overrides._get_current_function_mode_stack()  # still the caller's
    assert report.ok and seen == []


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"spec": 42}, "verify(spec=...) takes a spec file's path"),
    ({"spec": [{"args": {}}]}, "got list"),
    ({"checks": 5}, "verify(checks=...) takes a name or an iterable of names, got int"),
    ({"skip": ["lint", 3]}, "verify(skip=...) takes names (strings), got int 3"),
])
def test_verify_with_arguments_of_the_wrong_type_raises_a_type_error(kwargs, message):
    with pytest.raises(TypeError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("...", r"\.\.\.")):
        verify(_good(), **kwargs)


def test_verify_takes_a_string_as_one_check_name():
    report = verify(_good(), spec=SPEC, checks="gradcheck")
    assert [c.name for case in report.results for c in case.checks] == ["gradcheck"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX locale as Linux has it")
def test_non_ascii_folders_and_settings_under_a_posix_locale(project):
    """init writes its spec (a name Python read as surrogates is written back as its UTF-8
    bytes: once exit 4), and pyproject's folders are looked for as the file system names them
    (once: nothing selected)."""
    require_command()
    (project / "good.py").write_text(GOOD, encoding="utf-8")
    (project / "pyproject.toml").write_text('[tool.gradverify]\nspecs = ["spécs"]\n',
                                             encoding="utf-8")
    env = {"LC_ALL": "POSIX", "LANG": "", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    made = gv(project, "init", "good:Good", "-o", "spécs/good.yaml", env=env)
    assert made.returncode == 0, made.stdout + made.stderr
    text = (project / "spécs" / "good.yaml").read_text(encoding="utf-8")
    assert "gradverify check 'spécs/good.yaml'" in text
    checked = gv(project, "check", "--json", "r.json", env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = json.loads((project / "r.json").read_text(encoding="utf-8"))
    assert [r["status"] for r in report["results"]] == ["pass"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="POSIX locale as Linux has it")
def test_a_spec_naming_a_non_ascii_module_under_a_posix_locale_is_no_bug(project):
    """The spec's ``ünï`` is text Python cannot give the file system in an ASCII locale:
    looking for its file to guard it from the report crashed (exit 4). Python cannot import it
    there either: the target's import error, exit 3."""
    require_command()
    (project / "ünï.py").write_text(GOOD.replace("class Good", "class Café"), encoding="utf-8")
    (project / "u.yaml").write_text(
        "target: ünï:Café\ncases:\n  - name: v\n    args: {x: {shape: [3]}}\n",
        encoding="utf-8")
    env = {"LC_ALL": "POSIX", "LANG": "", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    result = gv(project, "check", "u.yaml", "--json", "r.json", env=env)
    assert result.returncode == 3, result.stdout + result.stderr
    assert "GV003" in result.stdout and "Traceback" not in result.stdout + result.stderr
