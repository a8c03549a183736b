"""What every report format copies from user code, made safe to write: each text of the report
(an exception's message, printed output, a name) cut to its first and last 64 KiB, as printed
output is (``run/output.py``), and its lone surrogates (undecodable bytes that Python carries
as ``\\udcXX``) written out as escapes. ``registry`` renders every format through it, so that no
writer meets text it cannot encode or copies 20 MB of it whole."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")

HEAD_BYTES = TAIL_BYTES = 64 * 1024
"""The characters of a text kept at its start and at its end: as many as the bytes of a
worker's printed output (``run/output.py``, which a test keeps equal; the renderers sit above
the run and import nothing of it)."""


def bounded(text: str) -> str:
    """``text`` with its middle left out where it is longer than the head and tail kept of
    printed output, saying how much; lone surrogates escaped (``\\udcff``)."""
    if len(text) > HEAD_BYTES + TAIL_BYTES:
        left = len(text) - HEAD_BYTES - TAIL_BYTES
        text = (f"{text[:HEAD_BYTES]}\n[... {left} characters left out ...]\n"
                f"{text[-TAIL_BYTES:]}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def safe(value: T) -> T:
    """``value`` (a report, or any part of one) with every text in it ``bounded``: frozen
    dataclasses, tuples, lists and mappings are rebuilt only where something changed."""
    return _safe(value)


def _safe(value: Any) -> Any:
    if isinstance(value, str):
        return bounded(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {}
        for field in dataclasses.fields(value):
            if not field.init:
                continue
            old = getattr(value, field.name)
            new = _safe(old)
            if new is not old:
                changed[field.name] = new
        return dataclasses.replace(value, **changed) if changed else value
    if isinstance(value, (tuple, list)):
        items = [_safe(item) for item in value]
        if all(new is old for new, old in zip(items, value)):
            return value
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    if isinstance(value, Mapping):
        pairs = {_safe(key): _safe(item) for key, item in value.items()}
        if all(k in value and value[k] is v for k, v in pairs.items()):
            return value
        return pairs
    return value
