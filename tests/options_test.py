"""Options merged once (issue 29): flag over case over spec over pyproject over the default,
for the gradcheck mode of each check, as a table. Pure: no torch run, no subprocess."""
from __future__ import annotations

from pathlib import Path

import pytest

from gradverify.config import Config
from gradverify.options import RunOptions
from gradverify.spec.model import Case, CheckSetting, Spec


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
    config = Config(root=Path("."), mode=pyproject, checks=_checks(pyproject_checks))
    options = RunOptions.from_config(config, mode=flag)
    the_case = Case("c", checks=_checks(case))
    the_spec = Spec("m:F", (the_case,), checks=_checks(spec))
    assert {name: options.mode_for(name, the_spec, the_case) for name in expected} == expected
