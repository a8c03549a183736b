"""The report's renderings. Each format is a ``render(report, verbose) -> str``; the formats a
user can choose are ``gradverify.choices.FORMATS``."""
from __future__ import annotations

from collections.abc import Callable

from gradverify.report import console, github, jsonfmt, junit, markdown
from gradverify.results import Report, set_text_renderer

Renderer = Callable[[Report, bool], str]

RENDERERS: dict[str, Renderer] = {
    "plain": console.render_plain,
    "json": jsonfmt.render,
    "junit": junit.render,
    "markdown": markdown.render,
    "github": github.render,
}
"""Each format of ``choices.FORMATS`` by name but ``rich``, the coloured console form of
``plain``."""

set_text_renderer(console.render_plain)
