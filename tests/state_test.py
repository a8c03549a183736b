"""Torch's global state: one target can never switch off another's verification (GV012), and a
case that verified nothing is not a plain pass (GV013)."""
from __future__ import annotations

import json

import pytest

import functions
import torchversions
from conftest import run_cli

CORRECT = """
import torch
from torch.autograd import Function


class F(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sin()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()
"""

LEAKY = """
import torch
from torch.autograd import Function

{change}
""" + functions.scale("G", 2)

CHANGES = {
    "grad mode": "torch.set_grad_enabled(False)",
    "inference mode": "_guard = torch.inference_mode()\n_guard.__enter__()",
    "default dtype": "torch.set_default_dtype(torch.float64)",
    "deterministic algorithms": "torch.use_deterministic_algorithms(True)",
    "anomaly mode": "torch.autograd.set_detect_anomaly(True)",
    "number of threads": "torch.set_num_threads(torch.get_num_threads() + 1)",
    "default device": "torch.set_default_device('meta')",
    "CPU autocast": "torch.set_autocast_enabled('cpu', True)" if torchversions.at_least(2, 4)
    else "torch.set_autocast_cpu_enabled(True)",  # the device argument came with torch 2.4
    "saved-tensor hooks": ("_hooks = torch.autograd.graph.saved_tensors_hooks(lambda t: t, "
                           "lambda t: t)\n_hooks.__enter__()"),
}


def _statuses(report: dict, target: str) -> dict[str, str]:
    (case,) = [r for r in report["results"] if r["target"] == target]
    return {c["name"]: c["status"] for c in case["checks"]}


def _check(*args: str, isolate: bool = False) -> dict:
    result = run_cli("check", *args, "--format", "json", isolate=isolate)
    assert result.code in (0, 1), result.output
    return json.loads(result.stdout)


@pytest.fixture
def alone(project) -> dict[str, str]:
    project.write("mypkg.py", CORRECT)
    return _statuses(_check("mypkg:F"), "mypkg:F")


@pytest.mark.parametrize("setting", CHANGES)
def test_a_leaky_import_changes_no_other_verdict(project, alone, setting):
    project.write("leaky.py", LEAKY.format(change=CHANGES[setting]))
    report = _check("leaky:G", "mypkg:F")
    assert _statuses(report, "mypkg:F") == alone
    assert alone["gradcheck"] == "pass"
    (leaky,) = [r for r in report["results"] if r["target"] == "leaky:G"]
    findings = [f for c in leaky["checks"] for f in c["findings"] if f["code"] == "GV012"]
    assert findings and setting in findings[0]["message"]
    assert "importing 'leaky'" in findings[0]["message"]


@pytest.mark.parametrize("jobs", ["1", "2"])
@pytest.mark.parametrize("isolate", [True, False], ids=["workers", "no-isolate"])
def test_same_verdict_in_every_mode(project, alone, isolate, jobs):
    project.write("leaky.py", LEAKY.format(change="\n".join(
        CHANGES[name] for name in ("grad mode", "default dtype", "deterministic algorithms"))))
    report = _check("leaky:G", "mypkg:F", "-j", jobs, isolate=isolate)
    assert _statuses(report, "mypkg:F") == alone


def test_a_forward_that_changes_state_is_reported_and_undone(project, alone):
    project.write("setter.py", CORRECT.replace(
        "ctx.save_for_backward(x)", "ctx.save_for_backward(x)\n        "
        "torch.set_default_dtype(torch.float64)"))
    report = _check("setter:F", "mypkg:F")
    assert _statuses(report, "mypkg:F") == alone
    statuses = _statuses(report, "setter:F")
    assert statuses["global_state"] == "warn"
    (case,) = [r for r in report["results"] if r["target"] == "setter:F"]
    (finding,) = [f for c in case["checks"] for f in c["findings"] if f["code"] == "GV012"]
    assert "default dtype: float32 -> float64" in finding["message"]
    assert "while this case ran" in finding["message"]


def test_nothing_verified_is_a_warning_and_fails_under_strict(project):
    project.write("mypkg.py", CORRECT)
    project.write("specs/frozen.yaml", """
        target: mypkg:F
        cases: [{name: frozen, args: {x: {shape: [3], requires_grad: false}}}]
    """)
    result = run_cli("check", "specs/frozen.yaml")
    assert result.code == 0, result.output
    assert "nothing was verified: no input requires grad" in result.flat
    assert "GV013" in result.output
    assert run_cli("check", "specs/frozen.yaml", "--strict").code == 1
    # gradcheck says so: without it (turned off, or not selected), nothing claims it
    only_contract = run_cli("check", "specs/frozen.yaml", "--strict", "--only", "contract")
    assert only_contract.code == 0 and "GV013" not in only_contract.output


def test_integer_valued_functions_are_not_flagged_as_unverified(project):
    project.write("argmax.py", """
        import torch
        from torch.autograd import Function


        class ArgMax(Function):
            @staticmethod
            def forward(ctx, x):
                return x.argmax(-1)

            @staticmethod
            def backward(ctx, grad):
                return None
    """)
    result = run_cli("check", "argmax:ArgMax")
    assert "GV013" not in result.output, result.output
