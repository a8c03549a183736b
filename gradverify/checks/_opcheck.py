"""Running one of ``torch.library.opcheck``'s tests on a case, and reading what it raised.
Imported only from inside a check's ``run`` (it imports torch)."""
from __future__ import annotations

import warnings
from typing import Any

import torch

from gradverify.checks.base import Outcome
from gradverify.results import Finding, Severity
from gradverify.targets import triton_launches as _triton
from gradverify.targets.model import Schema
from gradverify.targets.op_calls import op_arguments, op_values


def run_test(ctx: Any, test: str) -> BaseException | None:
    """What opcheck's ``test`` raised on the case's float64 arguments (differentiable ones
    requiring grad), or None when it passed. opcheck copies its inputs."""
    op = ctx.info.need(Schema).op
    positional, keyword = op_arguments(op, op_values(ctx.info, ctx.args("double").values))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = torch.library.opcheck(op, positional, keyword, test_utils=(test,),
                                       raise_exception=False)
    value: Any = result.get(test, "SUCCESS")
    if isinstance(value, BaseException):
        return value
    return None if value == "SUCCESS" else RuntimeError(str(value))


def interpreter_limit(ctx: Any, test: str) -> Any:
    """The skip (with its GV025 note) of an opcheck test that failed on an op launching
    Triton kernels through Triton's interpreter, which runs them on real data where the test
    hands them fake tensors; None otherwise."""
    if not _triton.interpreted():
        return None
    kernels = _triton.launches(ctx.info.function)
    if not kernels:
        return None
    said = (f"opcheck's {test} cannot run {', '.join(kernels)} under Triton's interpreter "
            "(TRITON_INTERPRET=1): it runs kernels on real data, and this test hands them "
            "fake tensors")
    return Outcome.skip(said, Finding("GV025", Severity.INFO, said,
                                      location=ctx.forward_location,
                                      hint="run this check on a machine with CUDA, without "
                                           "TRITON_INTERPRET"))


def messages(exc: BaseException) -> str:
    """The exception's message and its causes', one line."""
    parts: list[str] = []
    current: BaseException | None = exc
    while current is not None and len(parts) < 4:
        text = " ".join(str(current).split())
        if text and text not in parts:
            parts.append(text)
        current = current.__cause__ or current.__context__
    return " <- ".join(parts)


def shortened(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 3].rsplit(" ", 1)[0] + "..."
