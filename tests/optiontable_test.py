"""Each option declared once (``gradverify/optiontable.py``): the flags of ``check``, the keys of
``[tool.gradverify]``, ``RunOptions``' defaults, ``verify()``'s keywords and the pytest options
are the table's; a device is checked for its spelling in the parent (no torch there) and for its
presence where the cases run (GV024, exit 2); a spec's ``device:`` is under ``--device``; an
in-process run says once that it does not enforce ``timeout``."""
from __future__ import annotations

import dataclasses
import inspect
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

import functions
from gradverify import config as config_mod
from gradverify.cli import cli
from gradverify.config import Config
from gradverify.errors import SpecError, UsageError
from gradverify.options import RunOptions
from gradverify.optiontable import BY_NAME, KEYS, KEYWORDS, OPTIONS
from gradverify.spec.file import from_dict

ROOT = Path(__file__).resolve().parent.parent
SQUARE = functions.module(functions.square("Square"))
SPEC = "target: sq:Square\ncases:\n  - name: vec\n    args: {x: {shape: [3]}}\n"


def test_check_has_exactly_the_tables_flags_in_its_order():
    params = [p for p in cli.commands["check"].params if isinstance(p, click.Option)]
    declared = [f for o in OPTIONS for f in o.flags if f.startswith("-")]
    assert [opt for p in params for opt in (*p.opts, *p.secondary_opts)] == [
        f for flag in declared for f in flag.split("/")]
    assert {p.name: p.help for p in params}["seed"] == BY_NAME["seed"].help


def test_pyproject_keys_are_the_tables_and_config_declares_none_of_its_own(tmp_path):
    assert config_mod.KEYS == KEYS
    assert {f.name for f in dataclasses.fields(Config)} == {"root", "file", "given"}
    every = {"specs": ["a"], "exclude": ["b"], "seed": 3, "device": "cpu", "mode": "fast",
             "jobs": 2, "timeout": 5, "fail-on-warnings": True, "mutate": True, "compose": True,
             "format": "plain", "only": ["gradcheck"], "skip": ["lint"],
             "tolerance": {"atol": 0.1}, "checks": {"lint": False}}
    assert set(every) == set(KEYS) - {"strict"}
    config = config_mod.parse(every, root=tmp_path)
    assert {o.name for o in OPTIONS if o.keys} == set(config.given)
    assert (config.specs, config.exclude, config.value("jobs")) == (("a",), ("b",), "2")
    assert config.tolerance.atol == 0.1 and not config.checks["lint"].enabled
    bare = Config(root=tmp_path)
    assert (bare.specs, bare.exclude, bare.value("seed")) == (("specs",), (), None)


def test_run_options_defaults_are_the_tables():
    defaults = {f.name: f.default for f in dataclasses.fields(RunOptions)}
    for option in (o for o in OPTIONS if o.run):
        assert defaults[option.name] == option.default, option.name


def test_verify_keywords_are_the_tables():
    from gradverify import verify

    keywords = [name for name, p in inspect.signature(verify).parameters.items()
                if p.kind is inspect.Parameter.KEYWORD_ONLY]
    assert sorted(keywords) == sorted(KEYWORDS)


def test_from_config_refuses_a_flag_no_option_declares():
    with pytest.raises(TypeError, match="unexpected flags"):
        RunOptions.from_config(Config(root=Path(".")), devices="cpu")


@pytest.mark.parametrize(("value", "ok"), [("cpu", True), ("cuda", True), ("cuda:3", True),
                                           ("gpu", False), ("cuda:x", False), ("", False)])
def test_a_devices_spelling_is_one_rule_for_flag_pyproject_and_spec(tmp_path, value, ok):
    spec = {"target": "m:F", "device": value, "cases": [{"args": [{"shape": [2]}]}]}
    if ok:
        assert RunOptions.from_config(Config(root=tmp_path), device=value).device == value
        assert config_mod.parse({"device": value}, root=tmp_path).value("device") == value
        assert from_dict(spec).device == value
        return
    with pytest.raises(UsageError, match="expected cpu, cuda or cuda:N"):
        RunOptions.from_config(Config(root=tmp_path), device=value)
    with pytest.raises(SpecError) as in_pyproject:
        config_mod.parse({"device": value}, root=tmp_path)
    with pytest.raises(SpecError) as in_spec:
        from_dict(spec)
    assert in_spec.value.message == in_pyproject.value.message


def test_the_parent_never_imports_torch_to_check_a_device():
    """The bug: ``--device cuda`` imported torch in the parent to ask for CUDA."""
    code = ("import sys; from pathlib import Path; from gradverify.config import Config; "
            "from gradverify.options import RunOptions; "
            "RunOptions.from_config(Config(root=Path('.')), device='cuda:7'); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(("flag", "spec", "pyproject", "expected"), [
    (None, None, None, "cpu"),
    (None, None, "cuda", "cuda"),
    (None, "cuda:1", "cuda", "cuda:1"),   # the spec over pyproject
    ("cpu", "cuda:1", "cuda", "cpu"),     # the flag over the spec
    ("cuda", None, None, "cuda"),
])
def test_device_precedence(tmp_path, flag, spec, pyproject, expected):
    from gradverify.specmodel import Case, Spec

    config = Config(root=tmp_path, given={"device": pyproject})
    options = RunOptions.from_config(config, device=flag)
    assert options.device_for(Spec("m:F", (Case("c"),), device=spec)) == expected


def _project(tmp_path: Path, spec: str, pyproject: str = "") -> Path:
    (tmp_path / "sq.py").write_text(SQUARE)
    (tmp_path / "sq.yaml").write_text(spec)
    if pyproject:
        (tmp_path / "pyproject.toml").write_text(f"[tool.gradverify]\n{pyproject}\n")
    return tmp_path


def _check(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gradverify", "check", "sq.yaml", "--no-color",
                           "--format", "plain", *args], capture_output=True, text=True,
                          cwd=root, env={**os.environ, "NO_COLOR": "1"}, timeout=300)


def _no_cuda() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")


@pytest.mark.parametrize("isolate", [True, False])
def test_a_spec_on_a_device_the_machine_lacks_is_a_usage_error_from_where_it_runs(tmp_path,
                                                                                  isolate):
    _no_cuda()
    root = _project(tmp_path, SPEC.replace("cases:", "device: cuda\ncases:"))
    result = _check(root, *(() if isolate else ("--no-isolate",)))
    text = " ".join(result.stdout.split())
    assert result.returncode == 2, result.stdout + result.stderr
    assert "sq.yaml:1: device 'cuda': CUDA is not available" in text and "[GV024]" in text
    assert "`--device cpu` runs it on the CPU" in text
    passed = _check(root, "--device", "cpu")  # the flag over the spec
    assert passed.returncode == 0, passed.stdout + passed.stderr


def test_timeout_in_process_is_said_once(tmp_path):
    root = _project(tmp_path, SPEC)
    note = "timeout is not enforced in-process"
    in_process = _check(root, "--no-isolate", "--timeout", "30")
    assert in_process.returncode == 0 and " ".join(in_process.stdout.split()).count(note) == 1
    assert note not in _check(root, "--no-isolate").stdout  # no timeout set: nothing to say
    assert note not in _check(root, "--timeout", "30").stdout  # isolated: enforced


def test_verify_with_a_pyproject_timeout_says_it_is_not_enforced(tmp_path, monkeypatch):
    root = _project(tmp_path, SPEC, "timeout = 30")
    monkeypatch.chdir(root)
    monkeypatch.syspath_prepend(str(root))
    from gradverify import verify

    report = verify("sq:Square", spec=str(root / "sq.yaml"), checks=["gradcheck"])
    assert report.ok and any("timeout is not enforced in-process" in n for n in report.notes)


def test_a_checks_mode_option_says_the_flag_is_over_it():
    """The bug: the help of gradcheck's ``mode`` said it overrides --fast/--slow; the flag
    wins (``RunOptions.mode_for``, tests/options_test.py)."""
    from gradverify.registry import REGISTRY

    for name in ("gradcheck", "gradgradcheck"):
        (mode,) = [o for o in REGISTRY[name].options if o.name == "mode"]
        assert "--fast/--slow override it" in mode.help and "overrides" not in mode.help
