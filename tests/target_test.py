"""Introspection of Functions into FunctionInfo."""
from __future__ import annotations

import pytest

import zoo
from gradverify.errors import TargetError
from gradverify.examples.functional import ScaledTanh
from gradverify.target import introspect, resolve


def test_ctx_style():
    info = introspect(zoo.OptionalBias)
    assert info.style == "ctx"
    assert [p.name for p in info.params] == ["x", "bias"]
    assert info.params[1].default is None and not info.params[1].required
    assert info.backward_arity == 1 and not info.once_differentiable
    assert info.forward_location.endswith("zoo.py:" + info.forward_location.split(":")[-1])
    assert info.backward_location and info.target == "zoo:OptionalBias"


def test_setup_context_jvp_vmap():
    info = introspect(ScaledTanh)
    assert info.style == "setup_context"
    assert [p.name for p in info.params] == ["x", "scale"]
    assert info.has_jvp and info.vmap == "generate_vmap_rule"


def test_once_differentiable_varargs_classmethod_mark_dirty():
    assert introspect(zoo.OnceDifferentiableSin).once_differentiable
    assert introspect(zoo.VarGrads).backward_arity is None
    info = introspect(zoo.ClassmethodStyle)
    assert [p.name for p in info.params] == ["x"] and info.backward_arity == 1
    assert introspect(zoo.InplaceMul).uses_mark_dirty
    assert not introspect(zoo.Exp).has_jvp and introspect(zoo.Exp).vmap is None


def test_not_a_function():
    with pytest.raises(TargetError, match="not a torch.autograd.Function subclass"):
        introspect(int)
    with pytest.raises(TargetError, match="no attribute 'Exq'.*did you mean 'Exp'"):
        resolve("zoo:Exq")
    with pytest.raises(TargetError, match="must look like"):
        resolve("zoo")
