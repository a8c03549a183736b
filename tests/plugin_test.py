"""The pytest plugin, run by pytest itself (pytester) as a user would."""
from __future__ import annotations

import pytest

# pytester's inline runs restore sys.modules afterwards, dropping what they imported: torch
# must be imported before the first of them, because importing it a second time into one
# process crashes it (a segfault when this file ran alone).
import torch  # noqa: F401

import functions

OPS = functions.module(functions.square("Good"), functions.square_missing_factor("Bad"))


@pytest.fixture
def suite(pytester):
    pytester.makepyfile(ops=OPS)
    pytester.mkdir("specs")
    pytester.path.joinpath("specs/good.yaml").write_text(
        "target: ops:Good\ncases:\n  - name: vec\n    args: {x: {shape: [3]}}\n")
    pytester.path.joinpath("specs/bad.yaml").write_text(
        "target: ops:Bad\ncases:\n  - name: vec\n    args: {x: {shape: [3]}}\n")
    pytester.path.joinpath("other.yaml").write_text("not: a spec\n")
    return pytester


def test_collects_items_named_like_the_design(suite):
    result = suite.runpytest("--gradverify", "--collect-only", "-q", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["specs/bad.yaml::ops:Bad::vec::gradcheck",
                                 "specs/good.yaml::ops:Good::vec::contract"])


def test_failures_carry_findings(suite):
    result = suite.runpytest("--gradverify", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=21, skipped=4)
    result.stdout.fnmatch_lines(["*error: gradient for 'x' (output 0) is wrong: off by a constant "
                                 "factor 0.5*[GV121]*",
                                 "*FAILED specs/bad.yaml::ops:Bad::vec::gradcheck*"])


def test_keyword_and_junit(suite):
    result = suite.runpytest("--gradverify", "-k", "Good and gradcheck", "--junitxml=j.xml",
                             "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)   # gradcheck and gradgradcheck of ops:Good
    assert "testcase" in suite.path.joinpath("j.xml").read_text()


def test_nothing_without_the_flag(suite):
    result = suite.runpytest("-p", "no:cacheprovider", "specs")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_xdist(suite):
    result = suite.runpytest("--gradverify", "-n", "2", "--dist", "loadscope",
                             "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=21, skipped=4)


def test_a_broken_spec_is_one_failing_item_and_the_session_goes_on(suite):
    suite.path.joinpath("specs/half.yaml").write_text(
        "target: ops:Good\ncases:\n  - name: vec\n    args: {x: {shape: [3]\n")
    suite.path.joinpath("specs/missing.yaml").write_text(
        "target: nowhere:Thing\ncases:\n  - name: vec\n    args: {x: {shape: [3]}}\n")
    suite.makepyfile(test_unit="def test_mine():\n    assert True\n")
    result = suite.runpytest("--gradverify", "specs", "test_unit.py", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=3, passed=22, skipped=4)  # half, missing, ops:Bad gradcheck
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*specs/half.yaml:5*[GV001]*", "*nowhere*[GV003]*",
                                 "*FAILED specs/half.yaml::spec*"])
