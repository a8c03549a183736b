"""Adding a kind of target is one module, one line in ``KINDS`` and its tests: a small kind
of our own (TorchScript functions, ``torch.jit.script``), registered for the test only, is
detected, introspected, named in messages, skipped in its own words and checked, with no
change outside ``gradverify/targets``."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import pytest
import torch

import gradverify.targets as targets
from gradverify import verify
from gradverify.errors import TargetError
from gradverify.registry import REGISTRY
from gradverify.results import Status
from gradverify.targets import kinds
from gradverify.targets.introspection import adapter, file_of, location_of
from gradverify.targets.model import Capability, Param, Target, UnnamedKind


@dataclass(frozen=True)
class ScriptDetail:
    """What this kind knows beyond a target's core: a detail type of its own."""

    graph: Any


class ScriptFunctionKind(UnnamedKind):
    """``torch.jit.script`` functions: autograd differentiates what TorchScript runs."""

    name = "TorchScript function"
    plural = "TorchScript functions (torch.jit.script)"
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
