"""A zoo of Functions for the tests, one module per check: ``zoo/gradcheck.py`` holds what
gradcheck must catch and the correct Functions a naive gradcheck would flag.

Broken ones carry ``EXPECT = (check, code, input)``: the check that must catch them, the code
it must report, and the input it must name (None when no single input is concerned).
Correct ones carry ``EXPECT = None`` and must fail no check. Correct look-alikes, each here
because a naive version of some check would flag it (its docstring's ``naive <check>:`` says
which and how), carry no ``EXPECT``: every default check must pass, skip with a reason, or meet
an ``expect:`` the spec declares (tests/trust_test.py). Each carries its ``SPEC``.

Every module's classes and functions are names of this package, as targets too:
``zoo.SinWrongSign``, ``"zoo:softplus_reference"``.
"""
from __future__ import annotations

import importlib

from torch.autograd import Function

from gradverify.results import Severity, Status


def old_style_warning(check) -> bool:
    """Whether ``check`` (a result row) is func's warning that torch.func cannot run an
    old-style Function (GV363): what every Function whose forward takes ctx gets by default,
    most of the zoo's; not a flag on its correctness."""
    return check.name == "func" and check.status == Status.WARN and {
        f.code for f in check.findings if f.severity != Severity.INFO} == {"GV363"}


VEC = {"cases": [{"name": "vec", "args": {"x": {"shape": [5]}}}]}
MAT = {"cases": [{"name": "mat", "args": {"x": {"shape": [2, 3]}}}]}


def spec_for(*args, **named):
    return {"cases": [{"name": "c", "args": dict(named) if named else list(args)}]}


def factory_case(factory, **extra):
    return {"cases": [{"name": "c", "factory": f"zoo:{factory}", **extra}]}


# The modules import the helpers above from this package, so they are imported after them.
MODULES = [importlib.import_module(f"zoo.{name}") for name in (
    "contract", "gradcheck", "gradgradcheck", "needs_input_grad", "saved_tensors", "mutation",
    "undefined_grad", "determinism", "layout", "lint", "forward_ad", "vmap", "precision",
    "declared", "reference", "compile", "func", "autocast", "complex", "inputs", "styles",
    "checkpoint", "saved_hooks", "placement")]


def _defined_in(module):
    """The classes and functions a module defines (not those it imports), in source order."""
    return {name: obj for name, obj in vars(module).items()
            if not name.startswith("_") and getattr(obj, "__module__", None) == module.__name__}


for _module in MODULES:  # zoo.SinWrongSign, "zoo:SinWrongSign"
    _names = _defined_in(_module)
    assert not _names.keys() & globals().keys(), f"{_module.__name__} reuses a zoo name"
    globals().update(_names)

_FUNCTIONS = [obj for module in MODULES for obj in _defined_in(module).values()
              if isinstance(obj, type) and issubclass(obj, Function)]
BROKEN = [cls for cls in _FUNCTIONS if getattr(cls, "EXPECT", None)]
CORRECT = [cls for cls in _FUNCTIONS if hasattr(cls, "EXPECT") and cls.EXPECT is None]
HARD = [cls for cls in _FUNCTIONS if not hasattr(cls, "EXPECT")]
"""The correct look-alikes (no ``EXPECT``), in module order."""
