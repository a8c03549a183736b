"""A line of the console report as (text, style) segments: rendered plain or with rich's
styles, user text escaped and never read as a CI workflow command."""
from __future__ import annotations

from typing import TYPE_CHECKING

from gradverify.report.text import escaped

if TYPE_CHECKING:
    from rich.text import Text


class Line:
    """A line as (text, style) segments; plain rendering ignores styles. What a user named (a
    case, a target, a path, an exception's text) never breaks a line: control characters are
    escaped."""

    def __init__(self, *segments: tuple[str, str]) -> None:
        self.segments = [(escaped(text), style) for text, style in segments if text]
        self._never_a_command()

    def _never_a_command(self) -> None:
        """A line whose text starts with ``::`` once leading spaces are stripped is a workflow
        command to a CI runner (``::set-env``, ``::error file=...``): user text wrapped onto
        the start of a line gets a backslash there, ``\\::``, and stays one line of text."""
        for index, (text, style) in enumerate(self.segments):
            stripped = text.lstrip()
            if not stripped:
                continue
            if stripped.startswith("::"):
                at = len(text) - len(stripped)
                self.segments[index] = (f"{text[:at]}\\{stripped}", style)
            return

    def plain(self) -> str:
        return "".join(text for text, _ in self.segments).rstrip()

    def rich(self) -> Text:
        from rich.text import Text

        text = Text()
        for part, style in self.segments:
            text.append(part, style=style or None)
        return text


def plain(text: str, style: str = "") -> Line:
    """A line of one segment."""
    return Line((text, style))
