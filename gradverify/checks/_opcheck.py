"""Running one of ``torch.library.opcheck``'s tests on a case, and reading what it raised.
Imported only from inside a check's ``run`` (it imports torch)."""
from __future__ import annotations

import traceback
import warnings
from pathlib import Path
from typing import Any

import torch

from gradverify.errors import shown_path
from gradverify.results import Location

_TORCH_DIR = str(Path(torch.__file__).resolve().parent)
_OUR_DIR = str(Path(__file__).resolve().parent.parent)


def run_test(ctx: Any, test: str) -> BaseException | None:
    """What opcheck's ``test`` raised on the case's float64 arguments (differentiable ones
    requiring grad), or None when it passed. opcheck copies its inputs."""
    from gradverify.targets.op_calls import op_arguments, op_values

    positional, keyword = op_arguments(ctx.info.op, op_values(ctx.info, ctx.args("double").values))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = torch.library.opcheck(ctx.info.op, positional, keyword, test_utils=(test,),
                                       raise_exception=False)
    value: Any = result.get(test, "SUCCESS")
    if isinstance(value, BaseException):
        return value
    return None if value == "SUCCESS" else RuntimeError(str(value))


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


def user_frame(exc: BaseException) -> Location | None:
    """The innermost frame of user code (neither torch's nor ours) in the
    exception's traceback or its causes'."""
    current: BaseException | None = exc
    found = None
    while current is not None:
        for frame in traceback.extract_tb(current.__traceback__):
            file = str(Path(frame.filename).resolve()) if frame.filename else ""
            if file and not file.startswith((_TORCH_DIR, _OUR_DIR)) and "<" not in file \
                    and "site-packages" not in file and "/lib/python" not in file:
                found = Location(shown_path(frame.filename), frame.lineno)
        current = current.__cause__ or current.__context__
    return found


def shortened(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 3].rsplit(" ", 1)[0] + "..."
