"""op_schema: what a custom op does to its arguments matches what its schema declares.

Runs opcheck's ``test_schema`` (the op under ``SchemaCheckMode``): an argument written in place
that the schema does not mark mutable, or an output that aliases an input. Says which argument
and the schema to write instead.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gradverify.checks.base import Check, Consequence, Effect, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Severity
from gradverify.targets.model import Capability, Schema

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext

CODES = (
    Code("GV401", "undeclared-mutation",
         "The op writes into an argument in place, but its schema does not declare it.",
         "torch.compile, functionalization and export assume the argument is unchanged: "
         "compiled code reads stale values or reorders the write.",
         "@torch.library.custom_op(\"mylib::scale_\", mutates_args=())\n"
         "def scale_(x: Tensor) -> Tensor:\n    x.mul_(2)   # not declared",
         "Declare it: `mutates_args=(\"x\",)` (schema `Tensor(a!) x`), or work on a copy."),
    Code("GV402", "output-aliases-input",
         "An output of the op is an input, or a view of one.",
         "Custom ops must return fresh tensors; an alias breaks autograd and compilation.",
         "def flat(x: Tensor) -> Tensor:\n    return x.view(-1)",
         "Return a copy: `return x.view(-1).clone()`."),
    Code("GV403", "schema-check-failed",
         "opcheck's schema test failed for another reason.",
         "The op's behaviour does not match its schema.",
         "", "Read the message; compare the op's schema with what it does."),
)


class OpSchemaCheck(Check):
    name = "op_schema"
    default = True
    summary = "writes and aliases match the op's schema (opcheck test_schema)"
    codes = CODES
    made_for = Capability.SCHEMA
    traits = frozenset()
    consequences = (
        Consequence(Effect.SKIPS, frozenset({"GV401"}),
                    frozenset({Trait.REUSES_INPUTS, Trait.COMPARES_RUNS})),
        Consequence(Effect.SKIPS, frozenset({"GV402"}), frozenset({Trait.TRACES})))
    """The undeclared write is said once, here: mutation would say it again, and every later
    check that calls the op more than once on the same inputs would blame something else.
    An aliasing output fails opcheck's fake and AOT tests with the same message."""

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _calls as calls
        from gradverify.checks import _opcheck

        exc = _opcheck.run_test(ctx, "test_schema")
        outcome = Outcome(summary=f"schema {_schema(ctx)} holds")
        if exc is None:
            return outcome
        text = _opcheck.messages(exc)
        location = calls.user_location(exc, ctx.info) or ctx.forward_location
        mutated = re.search(r"Argument (\w+) is not defined as mutable but was mutated", text)
        if mutated:
            name = mutated.group(1)
            outcome.add(Finding(
                "GV401", Severity.ERROR,
                f"the op writes into {name!r} in place, but its schema {_schema(ctx)} does not "
                "declare it", input=name, location=location,
                hint=f"declare it: mutates_args=({name!r},), which makes the schema "
                     f"{_schema(ctx, mutable=name)}; or work on a copy ({name}.clone())"))
        elif re.search(r"\balias(es|ing)?\b", text.replace(ctx.info.need(Schema).name, "")):
            outcome.add(Finding(
                "GV402", Severity.ERROR,
                "an output of the op is one of its inputs or a view of one; a custom op must "
                "return new tensors", location=location,
                hint="return a copy (`return out.clone()`) instead of the input or its view"))
        else:
            outcome.add(Finding("GV403", Severity.ERROR,
                                f"opcheck's schema test failed: {_opcheck.shortened(text)}",
                                location=location,
                                hint=f"compare what the op does with its schema {_schema(ctx)}"))
        outcome.summary = "the op's behaviour does not match its schema"
        return outcome


def _schema(ctx: CheckContext, mutable: str | None = None) -> str:
    """The op's schema as torch prints it; with ``mutable``, that argument marked written."""
    text = str(ctx.info.need(Schema).op._schema)
    if mutable:
        text = re.sub(rf"\bTensor {mutable}\b", f"Tensor(a!) {mutable}", text)
    return f"`{text}`"


CHECK = OpSchemaCheck()
