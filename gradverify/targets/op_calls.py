"""How a case's values become a call of a custom op: positional and keyword-only arguments,
and ``Tensor[]`` arguments spread into one input per tensor (``xs[0]``, ``xs[1]``) so that
gradient checks see each (gradcheck differentiates top-level tensors only), gathered back
into a list for the call."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gradverify import torchcompat
from gradverify.targets.model import Schema

if TYPE_CHECKING:
    from gradverify.targets.model import Target


def op_arguments(op: Any, values: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A call's values in schema order (trailing defaults left out) as the op's positional
    arguments and keyword-only ones."""
    keyword = [a.name for a in op._schema.arguments if a.kwarg_only]
    positional = len(op._schema.arguments) - len(keyword)
    return tuple(values[:positional]), dict(zip(keyword, values[positional:]))


def tensor_lists(info: Target, names: Sequence[str],
                 values: Sequence[Any]) -> tuple[int | None, ...]:
    """Per value of a case, the length of a ``Tensor[]`` argument of an op, or of any list
    argument of a plain function or module, given as a list of tensors, else None. Such lists
    are spread into one input per tensor (``xs[0]``, ``xs[1]``): autograd differentiates an op
    or plain code through the tensors of a list, and gradcheck sees top-level tensors only.
    (A Function class's ``apply`` does not: tensors in a list are constants to it.)"""
    import torch


    if info.list_inputs:
        lists = set(names)
    elif (schema := info.detail(Schema)) is None:
        return tuple(None for _ in values)
    else:
        lists = {a.name for a in schema.op._schema.arguments
                 if torchcompat.is_tensor_list_type(a.type)}
    # where torch flattens: a list of tensors only (a None in a Tensor?[] keeps it whole),
    # an empty one included
    return tuple(len(value) if name in lists and isinstance(value, list)
                 and all(isinstance(v, torch.Tensor) for v in value) else None
                 for name, value in zip(names, values))


def for_case(info: Target, groups: tuple[int | None, ...]) -> Target:
    """``info`` whose ``function.apply`` takes a case's values with its tensor lists spread
    (``tensor_lists``) and gathers them back before calling the op."""
    if all(g is None for g in groups):
        return info
    inner = info.function.apply

    def apply(*values: Any) -> Any:
        return inner(*gathered(groups, values))

    cls = type(info.function.__name__, (info.function,), {"apply": staticmethod(apply),
                                                "tensor_lists": groups})
    return replace(info, function=cls)


def gathered(groups: tuple[int | None, ...], values: Sequence[Any]) -> list[Any]:
    """Values with the spread tensors of each list gathered back into a list."""
    out: list[Any] = []
    rest = iter(values)
    for count in groups:
        try:
            out.append([next(rest) for _ in range(count)] if count is not None else next(rest))
        except StopIteration:
            break
    return out + list(rest)


def needs_input_grad_index(info: Target, pos: int) -> str:
    """How backward reads input ``pos`` of a case in ``ctx.needs_input_grad``: ``[pos]``, or
    ``[k][i]`` for element i of tensor list k (spread into inputs; its flags are a list)."""
    groups = getattr(info.function, "tensor_lists", None) or ()
    flat = 0
    for k, count in enumerate(groups):
        size = 1 if count is None else count
        if pos < flat + size:
            return f"[{k}]" if count is None else f"[{k}][{pos - flat}]"
        flat += size
    return f"[{pos - flat + len(groups)}]"


def op_values(info: Target, values: Sequence[Any]) -> list[Any]:
    """A case's values as the op takes them (tensor lists gathered back)."""
    groups = getattr(info.function, "tensor_lists", None)
    return gathered(groups, values) if groups else list(values)


def gradient_count(info: Target, count: int) -> int:
    """How many of a call's ``count`` arguments backward returns gradients for: all of them,
    but an op's registered backward returns none for keyword-only arguments (torch passes
    those aside)."""
    schema = info.detail(Schema)
    if schema is None:
        return count
    keyword = op_arguments(schema.op, op_values(info, range(count)))[1]
    return count - len(keyword)


def flat_outputs(out: Any) -> Any:
    """A call's result with the tensors of nested lists and tuples (an op's ``Tensor[]``, a
    function returning a list) as outputs of their own, in order, as autograd and torch's
    gradcheck see them; a single value as it is."""
    if not isinstance(out, (list, tuple)):
        return out
    flat: list[Any] = []
    for item in out:
        inner = flat_outputs(item)
        flat += list(inner) if isinstance(item, (list, tuple)) else [inner]
    return tuple(flat)
