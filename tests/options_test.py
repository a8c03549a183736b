"""Options merged once: flag over case over spec over pyproject over the default,
for the gradcheck mode of each check, as a table. Pure: no torch run, no subprocess."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from gradverify.config import Config
from gradverify.options import RunOptions
from gradverify.run.schedule import rows as select
from gradverify.specmodel import Case, CheckSetting, Spec
from gradverify.targets import Capability


def _checks(level: dict[str, str]) -> dict[str, CheckSetting]:
    return {name: CheckSetting(True, {"mode": mode}) for name, mode in level.items()}


@pytest.mark.parametrize(("flag", "pyproject", "pyproject_checks", "spec", "case", "expected"), [
    # nothing set: auto for every check
    (None, None, {}, {}, {}, {"gradcheck": "auto", "gradgradcheck": "auto",
                              "forward_ad": "auto"}),
    # `mode =` of pyproject: every check
    (None, "slow", {}, {}, {}, {"gradcheck": "slow", "gradgradcheck": "slow",
                                "forward_ad": "slow"}),
    # a check's own mode is over `mode =`, for that check only
    (None, "slow", {"gradcheck": "fast"}, {}, {}, {"gradcheck": "fast", "gradgradcheck": "slow"}),
    # spec over pyproject, case over spec
    (None, None, {"gradcheck": "fast"}, {"gradcheck": "slow"}, {},
     {"gradcheck": "slow", "gradgradcheck": "auto"}),
    (None, None, {}, {"gradcheck": "slow"}, {"gradcheck": "fast"}, {"gradcheck": "fast"}),
    # the flag over every level (the bug: a spec's gradcheck mode won over --fast)
    ("fast", "slow", {"gradcheck": "slow"}, {"gradcheck": "slow", "gradgradcheck": "slow"},
     {"gradcheck": "slow"}, {"gradcheck": "fast", "gradgradcheck": "fast", "forward_ad": "fast"}),
    ("slow", None, {}, {"gradgradcheck": "fast"}, {}, {"gradcheck": "slow",
                                                       "gradgradcheck": "slow"}),
])
def test_mode_precedence(flag, pyproject, pyproject_checks, spec, case, expected):
    config = Config(root=Path("."), given={"mode": pyproject, "checks": _checks(pyproject_checks)})
    options = RunOptions.from_config(config, mode=flag)
    the_case = Case("c", checks=_checks(case))
    the_spec = Spec("m:F", (the_case,), checks=_checks(spec))
    assert {name: options.mode_for(name, the_spec, the_case) for name in expected} == expected


FUNCTION_CLASS = frozenset({Capability.OWN_AUTOGRAD, Capability.OWN_BACKWARD,
                            Capability.CLASS_SOURCE, Capability.OWN_CTX, Capability.FORWARD_AD})
OP = frozenset({Capability.OWN_AUTOGRAD, Capability.SCHEMA})


@pytest.mark.parametrize(("target", "flags", "spec_keys", "present", "absent"), [
    # the default checks, no op checks, no reference or accelerator check
    (FUNCTION_CLASS, {}, {}, {"gradcheck", "lint", "contract"},
     {"op_fake", "reference", "device", "compile"}),
    # an op gets the op checks; a row for a check it lacks a capability of (skipped, saying why)
    (OP, {}, {}, {"op_fake", "op_schema", "gradcheck", "contract"}, {"reference"}),
    # --only names an op check: it has a row (that says why it does not apply)
    (FUNCTION_CLASS, {"only": ["op_fake", "gradcheck"]}, {}, {"op_fake", "gradcheck"},
     {"lint"}),
    # a reference in the spec brings the reference check; --skip drops one
    (FUNCTION_CLASS, {"skip": ["lint"]}, {"reference": "m:ref"}, {"reference"}, {"lint"}),
    # an opt-in check switched on in the spec
    (FUNCTION_CLASS, {}, {"checks": {"compile": CheckSetting(True, {})}}, {"compile"}, set()),
    # the accelerator check with --device cuda
    (FUNCTION_CLASS, {"device": "cuda"}, {}, {"device"}, set()),
])
def test_check_selection(target, flags, spec_keys, present, absent):
    device = flags.pop("device", "cpu")  # no CUDA here: set past from_config's test for one
    options = dataclasses.replace(RunOptions.from_config(Config(root=Path(".")), **flags),
                                  device=device)
    case = Case("c")
    names = {c.name for c in select(Spec("m:F", (case,), **spec_keys), case, options, target)}
    assert present <= names and not absent & names


def test_selection_imports_no_torch():
    code = ("import sys; from gradverify.run.schedule import rows as select; "
            "from gradverify.options import RunOptions; from gradverify.config import Config; "
            "from gradverify.specmodel import Case, Spec; from pathlib import Path; "
            "case = Case('c'); select(Spec('m:F', (case,)), case, "
            "RunOptions.from_config(Config(root=Path('.'))), frozenset()); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --------------------------------------------------------------------- compose: the switch


@pytest.mark.parametrize(("flag", "pyproject", "spec", "expected"), [
    (None, None, None, False),    # nothing said: the composition checks are opt-in
    (None, True, None, True),     # pyproject's `compose = true`
    (None, None, True, True),     # a spec's `compose: all` turns them on for its cases
    (None, True, False, False),   # a spec's `compose: false` is over pyproject's
    (True, None, False, True),    # --compose is over the spec's `compose: false`
    (False, None, True, False),   # verify(compose=False) too
])
def test_compose_precedence_is_the_device_s(flag, pyproject, spec, expected):
    """Flag over a spec's ``compose:`` over pyproject's ``compose =``, as for ``device``; a
    spec's ``compose:`` once did not exist (its key was refused)."""
    config = Config(root=Path("."), given={} if pyproject is None else {"compose": pyproject})
    options = RunOptions.from_config(config, compose=flag)
    case = Case("c")
    the_spec = Spec("m:F", (case,), compose=spec)
    names = {c.name for c in select(the_spec, case, options, FUNCTION_CLASS)}
    assert ({"compile", "autocast"} <= names) is expected
    assert not expected or "gradcheck" in names  # the default checks stay


def test_a_check_switch_is_over_the_spec_compose():
    """``compose: all`` turns on every composition check but one switched off by name."""
    options = RunOptions.from_config(Config(root=Path(".")))
    case = Case("c")
    the_spec = Spec("m:F", (case,), compose=True,
                    checks={"compile": CheckSetting(False, {})})
    names = {c.name for c in select(the_spec, case, options, FUNCTION_CLASS)}
    assert "autocast" in names and "compile" not in names
