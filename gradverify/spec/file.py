"""Spec files (YAML, version 1) loaded: read from disk within bounds, split into documents,
each validated by ``spec.document`` into the frozen dataclasses of ``gradverify.specmodel``
before anything runs, and marked with what ``gradverify init`` left to do (TODO comments,
guessed arguments).

Never imports torch. Errors are ``SpecError`` with ``file:line`` and the key path.
"""
from __future__ import annotations

import re
import stat
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from gradverify.errors import SpecError, shown_path
from gradverify.spec.document import Validator, together
from gradverify.spec.yamlio import load_documents, looks_like_spec
from gradverify.specmodel import SPEC_KEYS, Spec

# ----------------------------------------------------------------------------- loading


MAX_SPEC_BYTES = 16 * 1024**2
"""A spec file is small: a larger YAML file is refused before it is parsed."""


def load_file(path: str | Path) -> list[Spec]:
    """All specs of one YAML file (a ``---`` stream may hold several). A file that is not a spec
    (a data file in the spec folder, say) is told apart from its start, cheaply."""
    path = Path(path)
    shown = shown_path(path)
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise SpecError("not a spec: not a regular file (a device, a FIFO or a socket, which "
                            "could be read forever); name a YAML file", file=shown, line=None,
                            code="GV001")
        with path.open("rb") as handle:  # bounded: the file may grow while it is read
            raw = handle.read(MAX_SPEC_BYTES + 1)
        if len(raw) > MAX_SPEC_BYTES:
            raise SpecError(f"not a spec: it is far larger than a spec (at most "
                            f"{MAX_SPEC_BYTES // 1024**2} MiB); move the file out of the spec "
                            "folder or add it to `exclude` in [tool.gradverify]",
                            file=shown, line=None, code="GV001")
    except OSError as exc:
        raise SpecError(f"cannot read spec file: {exc.strerror or exc}", file=shown, line=None,
                        code="GV001") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecError(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x}); save the spec as UTF-8",
                        file=shown, line=line, code="GV001") from None
    return load_text(text, shown)


PRESCAN_BYTES = 64 * 1024
"""Above this size a file is first checked to start as a spec (cheap, from its first event);
smaller ones get the full validator's messages (did-you-mean, lines) at once."""


def load_text(text: str, file: str | None = None) -> list[Spec]:
    why_not = looks_like_spec(text, SPEC_KEYS) if len(text) > PRESCAN_BYTES else None
    if why_not:
        raise SpecError(f"not a gradverify spec: {why_not}; move the file out of the spec folder "
                        "or add it to `exclude` in [tool.gradverify]", file=file, line=1,
                        code="GV001")
    documents = [(doc, line) for doc, line in load_documents(text, file) if doc is not None]
    if not documents:
        raise SpecError("empty spec file: expected a mapping with 'target' and 'cases' "
                        "(run `gradverify init mod:Class` for a skeleton)",
                        file=file, line=None, code="GV001")
    specs, errors = [], []
    starts = [line for _, line in documents]
    for doc, line in documents:  # every document of a stream is validated
        try:
            specs.append(_marked(Validator(file).spec(doc, line), text, starts))
        except SpecError as exc:
            errors += [exc, *exc.others]
    if errors:
        raise together(errors)
    return specs


INIT_HEADER = "# gradverify spec for "
"""The first line of a spec ``gradverify init`` wrote."""
_TODO = re.compile(r"#.*\bTODO\b")
_ARG_LINE = re.compile(r"^\s+([A-Za-z_]\w*):\s.*?#\s*(.+?)\s*$")


def _marked(spec: Spec, text: str, starts: list[int]) -> Spec:
    """A spec ``gradverify init`` wrote, with its TODO comments and its guesses, read from its
    part of the file: from after the previous document's start to before the next one's (its
    header comments included). Any other spec as it is."""
    lines = text.splitlines()
    here = spec.line or 1
    earlier = [s for s in starts if s < here]
    later = [s for s in starts if s > here]
    first = 0 if not earlier else _separator_after(lines, earlier[-1])
    last = len(lines) if not later else _separator_after(lines, here)
    if not any(line.startswith(INIT_HEADER) for line in lines[first:last]):
        return spec  # a spec of the user's own: its TODO comments are the user's business
    todo = tuple((n + 1, line.strip()) for n, line in enumerate(lines[first:last], first)
                 if _TODO.search(line))
    guessed = {}
    for n, line in enumerate(lines[first:last], first):
        match = _ARG_LINE.match(line)
        if match and line.startswith("      ") and not line.lstrip().startswith("#"):
            guessed[match.group(1)] = (n + 1, match.group(2))
    if not todo and not guessed:
        return spec
    return replace(spec, todo=todo, guessed=guessed)


def _separator_after(lines: list[str], line: int) -> int:
    """The index of the first ``---`` line after ``line`` (1-based), else the end."""
    for n in range(line, len(lines)):
        if lines[n].startswith("---"):
            return n
    return len(lines)


def from_dict(data: Mapping[str, Any], *, file: str | None = None) -> Spec:
    """Validate a spec given as a Python mapping (the same keys as the YAML format)."""
    return Validator(file).spec(data, None)
