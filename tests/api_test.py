"""The Python API: verify() with a class or a target string, dict specs, raise_for_failures."""
from __future__ import annotations

import pytest

import zoo
from gradverify import Report, VerificationFailed, verify
from gradverify.errors import UsageError
from gradverify.spec.file import from_dict


def test_verify_a_broken_function_raises_an_assertion_with_the_report():
    report = verify(zoo.SinWrongSign, spec={"cases": [{"args": {"x": {"shape": [4]}}}]})
    assert isinstance(report, Report) and not report.ok
    with pytest.raises(VerificationFailed) as info:
        report.raise_for_failures()
    assert isinstance(info.value, AssertionError)
    text = " ".join(str(info.value).split())  # as wrapped to the terminal's width
    assert "sign flipped" in text and "[GV121 gradcheck]" in text


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


def test_verify_runs_on_torch_defaults_whatever_the_callers_state():
    import torch

    from gradverify import torchcompat

    for _ in range(2):  # the state is not captured once per process
        with torch.no_grad():
            report = verify(zoo.SinWrongSign, spec=zoo.SinWrongSign.SPEC, checks=["gradcheck"])
            assert not torch.is_grad_enabled()  # the caller's state, given back
        assert report.results[0].checks[0].status.value == "fail"
        assert verify(zoo.Exp, spec=zoo.Exp.SPEC, checks=["gradcheck"]).ok
    with torch.inference_mode():
        report = verify(zoo.Exp, spec=zoo.Exp.SPEC, checks=["gradcheck"])
        assert torch.is_inference_mode_enabled()
    assert report.results[0].checks[0].status.value == "pass"
    hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
    with hooks:
        assert verify(zoo.Exp, spec=zoo.Exp.SPEC, checks=["gradcheck"]).ok
        assert torchcompat.top_saved_tensor_hooks() is not None
    assert torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
