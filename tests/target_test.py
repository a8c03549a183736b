"""Introspection of Functions into Target."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import zoo
from gradverify.errors import TargetError
from gradverify.examples.functional import ScaledTanh
from gradverify.targets import Built, Formula, Schema, introspect, resolve


def test_ctx_style():
    info = introspect(zoo.OptionalBias)
    formula = info.need(Formula)
    assert formula.style == "ctx" and info.detail(Schema) is None and info.detail(Built) is None
    assert [p.name for p in info.params] == ["x", "bias"]
    assert info.params[1].default is None and not info.params[1].required
    assert formula.backward_arity == 1 and not info.once_differentiable
    assert info.forward_location.file.endswith("zoo/styles.py") and info.forward_location.line
    assert info.backward_location and info.target == "zoo.styles:OptionalBias"


def test_setup_context_jvp_vmap():
    info = introspect(ScaledTanh)
    assert info.need(Formula).style == "setup_context"
    assert [p.name for p in info.params] == ["x", "scale"]
    assert info.need(Formula).has_jvp and info.vmap == "generate_vmap_rule"


def test_once_differentiable_varargs_classmethod_mark_dirty():
    assert introspect(zoo.OnceDifferentiableSin).once_differentiable
    assert introspect(zoo.VarGrads).need(Formula).backward_arity is None
    info = introspect(zoo.ClassmethodStyle)
    assert [p.name for p in info.params] == ["x"] and info.need(Formula).backward_arity == 1
    assert introspect(zoo.InplaceMul).need(Formula).uses_mark_dirty
    assert introspect(zoo.InplaceMul).writes_inputs
    assert not introspect(zoo.Exp).need(Formula).has_jvp and introspect(zoo.Exp).vmap is None


class SaysMarkDirtyInWords(torch.autograd.Function):
    """Writes into a copy, so it needs no ctx.mark_dirty."""

    @staticmethod
    def forward(ctx, x):
        y = x.clone()  # no mark_dirty: y is its own
        return y.mul_(2)

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_mark_dirty_named_in_a_comment_or_docstring_is_no_declaration():
    assert not introspect(SaysMarkDirtyInWords).need(Formula).uses_mark_dirty
    assert not introspect(SaysMarkDirtyInWords).writes_inputs


def test_not_a_function():
    with pytest.raises(TargetError, match=r"is a class int; gradverify verifies torch\.autograd"):
        introspect(int)
    with pytest.raises(TargetError, match=r"no attribute 'Exq'.*did you mean 'Exp'"):
        resolve("zoo:Exq")
    with pytest.raises(TargetError, match="must look like"):
        resolve("zoo")


def test_locations_point_at_the_def_line_not_the_decorators():
    import inspect

    for cls in (zoo.Exp, zoo.OnceDifferentiableSin, zoo.ClassmethodStyle):
        info = introspect(cls)
        lines = Path(inspect.getsourcefile(cls)).read_text().splitlines()
        for location in (info.forward_location, info.backward_location):
            assert lines[location.line - 1].lstrip().startswith("def "), location


def test_a_reexported_class_is_reported_under_the_name_given(project):
    project.write("pkg/__init__.py", "from pkg.impl import Double as Double\n")
    project.write("pkg/impl.py", """
        import torch

        class Double(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                return grad * 2
        """)
    assert resolve("pkg:Double").target == "pkg:Double"
    assert resolve("pkg.impl:Double").target == "pkg.impl:Double"
    # a file path is spelt as the module it is imported as
    assert resolve("pkg/impl.py:Double").target == "pkg.impl:Double"


def test_star_args_forward_is_inferred_as_a_list_of_tensors():
    from gradverify.case.infer import infer_spec

    spec = infer_spec(introspect(zoo.SumOfMany))
    ((name, arg),) = spec.cases[0].args
    assert name == "xs" and len(arg.items) == 2
