"""Report model and output formats. Each format is a ``render(report, verbose) -> str``."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from gradverify.report import console, github, jsonfmt, junit, markdown
from gradverify.report.model import Report

Renderer = Callable[[Report, bool], str]

FORMATS: dict[str, Renderer] = {
    "plain": console.render_plain,
    "json": jsonfmt.render,
    "junit": junit.render,
    "markdown": markdown.render,
    "github": github.render,
}
"""File formats by name; ``rich`` is the coloured console form of ``plain``."""


def write_atomic(path: str | Path, text: str) -> None:
    """Write via a temporary file in the same directory, then rename: never a half report."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
