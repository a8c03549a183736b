"""An op's arguments guessed from its schema's types, which say more than a name can: a
``float[] weights`` is a list of numbers, never a tensor; a ``Tensor[] xs`` is a list of
tensors; an ``int[] dims`` names dims of the input, an ``int[] size`` gives sizes. ``Tensor``
arguments are left to their names and the op's source (``init.guess``), as a Function's are.
"""
from __future__ import annotations

import re
from typing import Any

from gradverify.init.guess import TEMPLATES, Guess, string_guess
from gradverify.init.source import Hints, read_source
from gradverify.targets import Schema, Target

DIM_NAMES = re.compile(r"^(dim|dims|axis|axes|dim\d)$|_dims?$")
"""An ``int`` or ``int[]`` that names dims of a tensor (``dim``, ``reduce_dims``)."""
SIZE_NAMES = re.compile(r"shape|size")

DIM_LISTS: tuple[list[Any], ...] = ([-1], [0], [0, 1], [1], [-2, -1])
"""Dims of the input, valid for a tensor of rank 2 or more: the last first."""
SIZE_LISTS: tuple[list[Any], ...] = (["N", "D"], ["D", "N"], ["N"], [2, 2])
OTHER_INT_LISTS: tuple[list[Any], ...] = ([1, 1], [1], [1, 0], [0], [2, 2])
"""Strides, paddings, repeats, a permutation: small values."""
FLOAT_LISTS: tuple[list[Any], ...] = ([0.5, 2.0], [1.0], [0.5, 2.0, 1.5])
"""Two numbers, as many as the tensors of a ``Tensor[]`` next to them (two by default)."""


def typed_guesses(info: Target) -> dict[str, Guess]:
    """The guesses an op's schema types decide, by argument name (none for a Function, a
    function or a module, nor for an op's ``Tensor`` arguments)."""
    schema = info.detail(Schema)
    if schema is None:
        return {}
    hints = read_source(info)
    found = {}
    for argument in schema.op._schema.arguments:
        guess = _typed(argument, hints.get(argument.name, Hints()))
        if guess is not None:
            found[argument.name] = guess
    return found


def _typed(argument: Any, hint: Hints) -> Guess | None:
    """One argument's guess from its type: ``real_type`` keeps ``SymInt`` and ``ScalarType``
    apart from ``int``; ``N`` is the length of ``int[2]``."""
    text = str(argument.real_type).replace("SymInt", "int")
    optional = text.startswith("Optional[")
    inner = text[len("Optional["):-1] if optional else text
    name = argument.name
    if inner == "Tensor":
        return None  # its shape and dtype come from its name and the op's source
    if argument.has_default_value():
        return Guess(name, "default", value=argument.default_value, why="the schema's default")
    if inner in ("List[Tensor]", "List[Optional[Tensor]]"):
        return Guess(name, "tensors", shape=TEMPLATES[2], items=2, optional=optional,
                     why=f"{_spelt(inner)}: a list of tensors")
    if optional:
        return Guess(name, "none", value=None, why=f"{_spelt(inner)}? (optional): null")
    if inner.startswith("List["):
        return _list(name, inner[len("List["):-1], argument.N)
    if inner == "int" and DIM_NAMES.search(name):
        return Guess(name, "int", value=-1, choices=(0, 1), why="a dim (int): the last")
    if inner == "int":
        return Guess(name, "int", value="S" if name.startswith(("num_", "n_")) else "N",
                     why="a size (int)")
    if inner in ("float", "number"):
        return Guess(name, "float", value=0.5, why=f"a number ({_spelt(inner)})")
    if inner == "bool":
        return Guess(name, "bool", value=False, why="a flag (bool)")
    if inner == "str":
        return string_guess(name, hint)
    return Guess(name, "none", value=None,
                 why=f"TODO: a {_spelt(inner)}: set the value the op expects")


def _list(name: str, element: str, length: int | None) -> Guess:
    """An ``int[]``, ``float[]`` or ``bool[]``: the likeliest list for its name first, the
    others as the probe's choices; ``length`` when the schema fixes it (``int[2]``)."""
    if element == "int":
        order = (DIM_LISTS, SIZE_LISTS, OTHER_INT_LISTS) if DIM_NAMES.search(name) else \
            (SIZE_LISTS, OTHER_INT_LISTS, DIM_LISTS) if SIZE_NAMES.search(name) else \
            (OTHER_INT_LISTS, DIM_LISTS, SIZE_LISTS)
        lists = [v for group in order for v in group]
        spelt = f"int[{length or ''}]"
        why = (f"dims of the input ({spelt})" if order[0] is DIM_LISTS else
               f"sizes ({spelt})" if order[0] is SIZE_LISTS else f"a list of ints ({spelt})")
    elif element in ("float", "number"):
        lists, why = list(FLOAT_LISTS), "a list of numbers (float[])"
    elif element == "bool":
        lists, why = [[False, False], [True, False], [False]], "a list of flags (bool[])"
    else:
        return Guess(name, "none", value=None,
                     why=f"TODO: a list of {_spelt(element)}: set the value the op expects")
    if length:
        lists = [v for v in lists if len(v) == length] or [[lists[0][0]] * length]
    return Guess(name, "list", value=lists[0], choices=tuple(lists[1:]), why=why)


def _spelt(type_text: str) -> str:
    """A type as a schema spells it: ``float[]`` for ``List[float]``, ``Tensor?``."""
    if type_text.startswith("List[") and type_text.endswith("]"):
        return _spelt(type_text[len("List["):-1]) + "[]"
    if type_text.startswith("Optional[") and type_text.endswith("]"):
        return _spelt(type_text[len("Optional["):-1]) + "?"
    return {"number": "Scalar"}.get(type_text, type_text)
