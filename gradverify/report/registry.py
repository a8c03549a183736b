"""Each report format's renderer, by the name ``--format`` takes (``formats.FORMATS``; a test
keeps the two equal); each meets ``interface.Renderer`` and renders the report made ``safe``
first (every text bounded, lone surrogates escaped). ``plain_text`` is what the API gives a
report as the text of ``Report.raise_for_failures``."""
from __future__ import annotations

from dataclasses import replace

from gradverify.report import console, github, html, jsonfmt, junit, markdown
from gradverify.report.interface import Renderer, Verbosity
from gradverify.report.safe import safe
from gradverify.results import Report


class _Safe:
    """A format that renders the report made ``safe``: whatever text user code put in it."""

    def __init__(self, renderer: Renderer) -> None:
        self._renderer = renderer

    @property
    def reads_verbosity(self) -> bool:
        return self._renderer.reads_verbosity

    def render(self, report: Report, verbosity: Verbosity = Verbosity.NORMAL) -> str:
        return self._renderer.render(safe(report), verbosity)


_FORMATS: dict[str, Renderer] = {
    "rich": console.Console(color=True),
    "plain": console.Console(color=False),
    "json": jsonfmt.Json(),
    "junit": junit.Junit(),
    "markdown": markdown.Markdown(),
    "github": github.Github(),
    "html": html.Html(),
}
RENDERERS: dict[str, Renderer] = {name: _Safe(renderer) for name, renderer in _FORMATS.items()}

__all__ = ["RENDERERS", "Renderer", "Verbosity", "plain_text"]


def plain_text(report: Report) -> Report:
    """``report`` with the plain renderer as its ``raise_for_failures`` text."""
    return replace(report, text=RENDERERS["plain"].render)
