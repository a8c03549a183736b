"""Each report format's renderer, by the name ``--format`` takes (``formats.FORMATS``; a test
keeps the two equal); each meets ``interface.Renderer``. Importing it registers the plain
renderer as the text of ``Report.raise_for_failures``."""
from __future__ import annotations

from gradverify.report import console, github, html, jsonfmt, junit, markdown
from gradverify.report.interface import Renderer, Verbosity
from gradverify.results import set_text_renderer

RENDERERS: dict[str, Renderer] = {
    "rich": console.Console(color=True),
    "plain": console.Console(color=False),
    "json": jsonfmt.Json(),
    "junit": junit.Junit(),
    "markdown": markdown.Markdown(),
    "github": github.Github(),
    "html": html.Html(),
}

__all__ = ["RENDERERS", "Renderer", "Verbosity"]

set_text_renderer(console.render_plain)
