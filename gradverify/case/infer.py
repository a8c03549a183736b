"""The spec of a target that no spec file names, inferred from forward's signature: enough to
run, and the report says the inputs were guessed (``gradverify init`` writes a real one)."""
from __future__ import annotations

from typing import Any

from gradverify.specmodel import Arg, Case, SeqArg, Spec, TensorArg, ValueArg
from gradverify.targets import Target


def _inferred_arg(param: Any) -> Arg:
    """A float tensor of shape [3, 4]; for an op, what its schema's type asks for."""
    kind = str(param.annotation)
    if kind in ("float", "SymFloat"):
        return ValueArg(value=0.5)
    if kind in ("int", "SymInt"):
        return ValueArg(value=2)
    if kind == "bool":
        return ValueArg(value=True)
    if kind in ("List[Tensor]", "Tensor[]"):
        return SeqArg("list", (TensorArg(shape=(3, 4)), TensorArg(shape=(3, 4))))
    return TensorArg(shape=(3, 4))


def infer_spec(info: Target) -> Spec:
    """Every forward parameter without a default becomes a float tensor of shape [3, 4]; a
    ``*xs`` parameter, two of them (``xs[0]``, ``xs[1]``)."""
    args: tuple[tuple[str | None, Arg], ...] = tuple(
        (p.name, _inferred_arg(p)) for p in info.positional if p.required)
    star = next((p.name for p in info.params if p.kind == "var_positional"), None)
    if star:
        args += ((star, SeqArg("star", (TensorArg(shape=(3, 4)), TensorArg(shape=(3, 4))))),)
    return Spec(target=info.target, cases=(Case(name="inferred", args=args, by_name=True),),
                inferred=True)
