"""Report model and output formats. Each format is a ``render(report, verbose) -> str``."""
from __future__ import annotations

from collections.abc import Callable

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
