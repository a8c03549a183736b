"""Adding a kind of target is one module, one line in ``KINDS`` and its tests: two small kinds
of our own, registered for the test only, with no change outside ``gradverify/targets``.
TorchScript functions (``torch.jit.script``) are detected, introspected, named in messages,
skipped in their own words and checked; gradient rules, objects with a backward of their own,
get that backward mutated by ``--mutate`` and a bare-torch script from ``--repro``."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pytest
import torch

import gradverify.targets as targets
from conftest import run_cli
from gradverify import verify
from gradverify.errors import TargetError
from gradverify.registry import REGISTRY
from gradverify.results import Status
from gradverify.targets import kinds
from gradverify.targets.holders import Holder
from gradverify.targets.introspection import adapter, file_of, location_of
from gradverify.targets.model import Capability, Formula, Param, Target, UnnamedKind


@dataclass(frozen=True)
class ScriptDetail:
    """What this kind knows beyond a target's core: a detail type of its own."""

    graph: Any


class ScriptFunctionKind(UnnamedKind):
    """``torch.jit.script`` functions: autograd differentiates what TorchScript runs."""

    name = "TorchScript function"
    plural = "TorchScript functions (torch.jit.script)"
    short = "TorchScript functions"
    listed = True
    capabilities = frozenset()
    lacking: Mapping[Capability, str] = MappingProxyType(
        dict.fromkeys(Capability, "TorchScript differentiates it itself"))

    @staticmethod
    def detect(obj: Any) -> bool:
        return isinstance(obj, torch.jit.ScriptFunction)

    @staticmethod
    def introspect(obj: Any, name: str, init_args: Mapping[str, Any]) -> Target:
        params = tuple(Param(a.name) for a in obj.schema.arguments)
        source = obj.__wrapped__ if hasattr(obj, "__wrapped__") else obj
        return Target(
            function=adapter(obj.name, obj, __name__, source), target=name, params=params,
            forward_location=location_of(source), backward_location=None,
            source_file=file_of(source), kind=ScriptFunctionKind.name,
            capabilities=frozenset(), called=obj.name, details=(ScriptDetail(obj.graph),))

    @staticmethod
    def defined_in(obj: Any, module: str) -> bool:
        return getattr(obj, "__module__", None) == module

    @staticmethod
    def listing(obj: Any, name: str) -> tuple[str, list[str]]:
        return name, ["TorchScript"]


@torch.jit.script
def gated(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(gate)


@pytest.fixture
def registered(monkeypatch):
    """The kind's one registry line, for this test only."""
    kind = ScriptFunctionKind()
    monkeypatch.setattr(kinds, "KINDS", (kind, *kinds.KINDS))
    return kind


SPEC = {"cases": [{"name": "c", "args": {"x": {"shape": [3]}, "gate": {"shape": [3]}}}]}


def test_without_its_line_the_object_is_no_target():
    assert targets.kind_of(gated) is None
    with pytest.raises(TargetError, match=r"gradverify verifies"):
        targets.introspect(gated, "kind_test:gated")


def test_a_kind_of_our_own_is_detected_described_and_checked(registered):
    assert targets.kind_of(gated) is registered
    assert "TorchScript functions (torch.jit.script)" in targets.described(listed=True)
    info = targets.introspect(gated, "kind_test:gated")
    assert [p.name for p in info.params] == ["x", "gate"]
    assert info.need(ScriptDetail).graph is gated.graph and info.detail(targets.Schema) is None
    report = verify(gated, spec=SPEC)
    rows = {c.name: c for case in report.results for c in case.checks}
    assert rows["gradcheck"].status == Status.PASS and rows["gradgradcheck"].status == Status.PASS
    # the checks that need what it lacks skip in its own words (or the check's own)
    for name in ("contract", "saved_tensors", "forward_ad"):
        assert rows[name].status == Status.SKIP
        reason = REGISTRY[name].needs and next(iter(REGISTRY[name].needs.values()))
        assert rows[name].summary.startswith("not for a TorchScript function: ")
        assert reason in rows[name].summary or "TorchScript differentiates it" in \
            rows[name].summary
    assert report.ok


RULES = '''
import torch


class Rule:
    """f(x) = scale * x**2, with a gradient rule of its own (not an autograd.Function)."""

    IS_RULE = True

    def __init__(self, scale):
        self.scale = scale

    def value(self, x):
        return self.scale * x * x

    def gradient(self, ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * self.scale * x

    def __call__(self, x):
        return applied(self).apply(x)


def applied(rule):
    """The autograd.Function that calls the rule's value and (looked up when called) gradient."""

    class Applied(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return rule.value(x)

        @staticmethod
        def backward(ctx, grad):
            return rule.gradient(ctx, grad)

    return Applied


class ForgetsTheTwo(Rule):
    def gradient(self, ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * self.scale * x


square = Rule(1.5)
wrong_square = ForgetsTheTwo(1.5)
'''
"""A project whose targets are rule objects: a kind with a backward of its own."""


@dataclass(frozen=True)
class TheRule:
    """The rule object a target of the rule kind is (a detail of its own)."""

    rule: Any


class RuleKind(UnnamedKind):
    """Objects of a class with ``IS_RULE``: a forward (``value``) and a backward of their own
    (``gradient(ctx, grad)``), looked up on the class when autograd calls it."""

    name = "gradient rule"
    plural = "gradient rules (objects with value and gradient)"
    short = "gradient rules"
    listed = True
    capabilities = frozenset({Capability.OWN_AUTOGRAD, Capability.OWN_BACKWARD,
                              Capability.OWN_CTX})
    lacking: Mapping[Capability, str] = MappingProxyType({
        Capability.CLASS_SOURCE: "it is an object, not an autograd.Function class",
        Capability.FORWARD_AD: "a rule has no forward-mode formula"})

    @staticmethod
    def detect(obj: Any) -> bool:
        return getattr(type(obj), "IS_RULE", False) is True

    @staticmethod
    def introspect(obj: Any, name: str, init_args: Mapping[str, Any]) -> Target:
        cls = type(obj)
        function = sys.modules[cls.__module__].applied(obj)
        return Target(
            function=function, target=name, params=(Param("x"),),
            forward_location=location_of(cls.value), backward_location=location_of(cls.gradient),
            source_file=file_of(cls), kind=RuleKind.name, capabilities=RuleKind.capabilities,
            called=f"{cls.__name__}.value",
            details=(Formula("ctx", backward_arity=1), TheRule(obj)))

    @staticmethod
    def defined_in(obj: Any, module: str) -> bool:
        return type(obj).__module__ == module

    @staticmethod
    def listing(obj: Any, name: str) -> tuple[str, list[str]]:
        return name, ["gradient rule"]

    @staticmethod
    def backward_holder(target: Target, node: Any) -> Holder | None:
        """The rule's class: where autograd finds ``gradient`` (self and ctx before the
        gradients)."""
        owner = type(target.need(TheRule).rule)
        for klass in owner.__mro__:
            if "gradient" in vars(klass):
                return Holder(owner, "gradient", vars(klass)["gradient"],
                              "gradient" in vars(owner), 2)
        return None


@pytest.fixture
def rules(project, monkeypatch):
    """The rule kind's registry line and a project of rules (the current directory)."""
    project.write("rules.py", RULES)
    project.write("rule.yaml", "cases:\n  - name: c\n    args:\n      x: {shape: [4]}\n")
    monkeypatch.syspath_prepend(str(project.root))
    monkeypatch.setattr(kinds, "KINDS", (RuleKind(), *kinds.KINDS))
    yield project
    sys.modules.pop("rules", None)


def test_a_kind_with_its_own_backward_gets_its_backward_mutated(rules, monkeypatch):
    """``--mutate`` swaps the backward where its kind says it lives (``Kind.backward_holder``):
    mutants of the rule's own source, each killed, and the original put back."""
    report = verify("rules:square", spec="rule.yaml", mutate=True)
    assert report.ok, report.text
    (score,) = report.mutants
    assert score.note is None  # not "no backward of its own: value mutants only"
    assert score.total >= 3 and score.killed == score.total, score
    rules_module = sys.modules["rules"]
    assert "gradient" in vars(rules_module.Rule)  # put back
    wrong = verify("rules:wrong_square", spec="rule.yaml", checks=["gradcheck"])
    assert not wrong.ok
    # without the kind's answer the backward cannot be reached: value mutants only, said so
    monkeypatch.setattr(RuleKind, "backward_holder", staticmethod(lambda target, node: None))
    (fewer,) = verify("rules:square", spec="rule.yaml", mutate=True).mutants
    assert fewer.total < score.total and "cannot be reached" in (fewer.note or "")


def test_a_kind_with_its_own_backward_gets_a_bare_torch_repro(rules):
    """``--repro`` calls the target as its kind says a plain script calls it
    (``Kind.bare_call``): the script fails under bare torch, on the rule's own bug."""
    result = run_cli("check", "rules:wrong_square", "--spec", "rule.yaml", "--only",
                     "gradcheck", "--repro", "repro", "--format", "plain")
    assert result.code == 1, result.output
    (script,) = (rules.root / "repro").iterdir()
    assert "from rules import wrong_square" in script.read_text()
    done = subprocess.run([sys.executable, "-I", str(script)], capture_output=True, text=True,
                          cwd=rules.root, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAILED: torch.autograd.gradcheck on rules:wrong_square" in done.stderr
