"""The Python API: verify() with a class or a target string, dict specs, raise_for_failures."""
from __future__ import annotations

import pytest

import zoo
from gradverify import Report, VerificationFailed, verify
from gradverify.errors import UsageError
from gradverify.specfile import from_dict


def test_verify_a_broken_function_raises_an_assertion_with_the_report():
    report = verify(zoo.SinWrongSign, spec={"cases": [{"args": {"x": {"shape": [4]}}}]})
    assert isinstance(report, Report) and not report.ok
    with pytest.raises(VerificationFailed) as info:
        report.raise_for_failures()
    assert isinstance(info.value, AssertionError)
    assert "sign flipped" in str(info.value) and "[GV121 gradcheck]" in str(info.value)


def test_verify_by_target_string_and_spec_object():
    spec = from_dict({"cases": [{"name": "v", "args": [{"shape": [2, 3]}]}]})
    report = verify("zoo:Exp", spec=spec, checks=["gradcheck"])
    assert report.ok and report.results[0].case == "v"


def test_verify_infers_a_spec_when_none_is_given():
    report = verify(zoo.Exp, checks=["contract"])
    assert report.results[0].inferred and report.ok


def test_verify_rejects_unknown_checks():
    with pytest.raises(UsageError, match="did you mean 'gradcheck'"):
        verify(zoo.Exp, checks=["gradchek"])
