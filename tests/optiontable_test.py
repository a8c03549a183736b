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


@pytest.mark.parametrize("command", ["init", "record"])
def test_init_and_record_take_exactly_their_tables_options(command):
    from gradverify import optiontable

    table = {"init": optiontable.INIT_OPTIONS, "record": optiontable.RECORD_OPTIONS}[command]
    params = [p for p in cli.commands[command].params if isinstance(p, click.Option)]
    assert [(p.name, p.help) for p in params] == [(o.name, o.help) for o in table]
    assert [f for p in params for f in p.opts] == [f for o in table for f in o.flags]


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


ADD_A_ROW = """
import sys
from gradverify import optiontable as table
from gradverify.errors import UsageError

def at_most_99(value):
    if value > 99:
        raise UsageError(f"answer: expected at most 99, got {value}")
    return value

row = table.Option("answer", "The answer to give.", ("--answer",),
                   {"type": int, "default": None}, keys=("answer",),
                   read=lambda r, v, k: r.number(v, None, k, integer=True),
                   default=0, shown_default="0", check=at_most_99)
table.OPTIONS = (*table.OPTIONS, row)
table.BY_NAME[row.name] = row
table.KEYS = (*table.KEYS, *row.keys)

from gradverify import api, config
from gradverify.cli import main
from gradverify.options import RunOptions

print("pyproject:", RunOptions.from_config(config.load()).value("answer"))
print("flag:", RunOptions.from_config(config.load(), answer=42).value("answer"))
run = api.check_targets
def told(names, options, **kwargs):
    print("run:", options.value("answer"), file=sys.stderr)
    return run(names, options, **kwargs)
api.check_targets = told
print("docs:", [line for line in table.docs_table().splitlines() if "answer" in line])
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("isolate", [True, False])
def test_an_option_added_as_one_row_of_the_table_works_end_to_end(tmp_path, isolate):
    """docs/contributing.md's "Add an option": one row, and ``check`` takes the flag (no
    parameter list to extend), pyproject takes the key, the validator guards both, the run
    carries the value (``RunOptions.value``) and the docs table shows the row."""
    root = _project(tmp_path, SPEC, "answer = 7")
    (root / "add_row.py").write_text(ADD_A_ROW)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "add_row.py", *args], capture_output=True,
                              text=True, cwd=root, env={**os.environ, "NO_COLOR": "1"},
                              timeout=300)

    isolated = () if isolate else ("--no-isolate",)
    done = run("check", "sq.yaml", "--answer", "42", "--format", "plain", *isolated)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pyproject: 7\nflag: 42\n" in done.stdout and "run: 42\n" in done.stderr
    assert "`--answer` | `answer` | - | - | 0 | The answer to give." in done.stdout
    assert "passed" in done.stdout.splitlines()[-1]
    shown = run("check", "--help")
    assert "--answer INTEGER" in shown.stdout and "The answer to give." in shown.stdout
    refused = run("check", "sq.yaml", "--answer", "100", *isolated)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "answer: expected at most 99, got 100" in refused.stderr
