"""The README and docs/ say what the code does: every page reachable, every link alive, every
check, code, option and configuration key documented, the architecture table equal to the
architecture test's floors, and the README's example report a real one."""
from __future__ import annotations

import os
import re
from pathlib import Path

import click
import pytest

from architecture_test import FLOORS, PACKAGE, floor
from conftest import ROOT
from gradverify.cli import cli
from gradverify.config import KEYS
from gradverify.registry import CODES, REGISTRY
from report_test import GOLDEN, _mask

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_the_readme_is_read_in_five_minutes():
    assert len(README.read_text().splitlines()) <= 200


def test_the_readme_links_every_docs_page():
    linked = {m for m in LINK.findall(README.read_text()) if m.startswith("docs/")}
    assert {f"docs/{page.name}" for page in PAGES} <= linked
    assert len(PAGES) >= 10, "docs/ was not read"


def slug(heading: str) -> str:
    """A Markdown heading's anchor, as GitHub makes it."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in _outside_code(page.read_text())
            if line.startswith("#")}


def _outside_code(text: str) -> list[str]:
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.name)
def test_every_relative_link_and_anchor_exists(page):
    dead = []
    for link in LINK.findall("\n".join(_outside_code(page.read_text()))):
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        found = target.exists() and (not anchor or (target.suffix == ".md"
                                                     and anchor in anchors(target)))
        if not found:
            dead.append(link)
    assert dead == []


def test_the_link_checker_knows_githubs_anchors():
    assert slug(" `check` options") == "check-options"
    assert slug(" Custom ops: opcheck's tests") == "custom-ops-opchecks-tests"


def test_every_check_has_a_row_in_checks_md():
    rows = re.findall(r"^\| `(\w+)` \|", (DOCS / "checks.md").read_text(), re.M)
    assert sorted(rows) == sorted(REGISTRY)


def code_table() -> str:
    """docs/codes.md's table, from the registry."""
    lines = ["| code | name | check | what it is |", "|---|---|---|---|"]
    for code in CODES.values():
        what = re.split(r"\.\s+(?=[A-Z])", code.what)[0].rstrip(".").replace("|", "\\|")
        lines.append(f"| {code.code} | `{code.name}` | {code.check or '(the run)'} | {what} |")
    return "\n".join(lines) + "\n"


def test_codes_md_lists_every_code():
    """Regenerate the table with GRADVERIFY_UPDATE_GOLDEN=1 after adding a code."""
    page = DOCS / "codes.md"
    text = page.read_text()
    start = text.index("| code | name |")
    end = text.index("\n\n", start) + 1 if "\n\n" in text[start:] else len(text)
    if os.environ.get("GRADVERIFY_UPDATE_GOLDEN"):
        page.write_text(text[:start] + code_table() + text[end:])
        text = page.read_text()
    assert text[start:start + len(code_table())] == code_table()


def _options(command: click.Command) -> list[str]:
    return [opt for param in command.params if isinstance(param, click.Option)
            for opt in (*param.opts, *param.secondary_opts)]


@pytest.mark.parametrize(("command", "page"), [
    ("check", "commands.md"), ("init", "record.md"), ("record", "record.md"),
    ("list", "commands.md"), ("explain", "commands.md")])
def test_every_option_is_documented(command, page):
    text = (DOCS / page).read_text()
    assert command in cli.commands
    missing = [opt for opt in _options(cli.commands[command])
               if not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text)]
    assert missing == []


def test_every_option_of_every_command_is_tested_above():
    assert set(cli.commands) == {"check", "init", "record", "list", "explain"}


def test_every_format_is_documented():
    from gradverify.report.formats import FORMATS

    assert f"--format {'|'.join(FORMATS)}" in (DOCS / "commands.md").read_text()


def test_every_configuration_key_is_documented():
    text = (DOCS / "configuration.md").read_text()
    assert [key for key in KEYS if not re.search(rf"(?<![\w-]){key} =", text)] == []


def _table_rows(page: Path) -> list[tuple[str, list[str]]]:
    rows = re.findall(r"^\| ([a-z ]+) \| (.*?) \| .* \|$", page.read_text(), re.M)
    return [(name, re.findall(r"`([^`]+)`", modules)) for name, modules in rows
            if name != "floor"]


def _module(path: str) -> str:
    """``spec/file.py`` -> ``gradverify.spec.file``; a pattern (``checks/<name>.py``) names its
    package."""
    parts = path.removesuffix("/").removesuffix(".py").split("/")
    while not (PACKAGE.joinpath(*parts).with_suffix(".py").exists()
               or PACKAGE.joinpath(*parts).is_dir()):
        parts.pop()
    return ".".join(["gradverify", *parts])


def test_the_architecture_table_is_the_architecture_tests_floors():
    """docs/architecture.md's table names every floor of FLOORS, in order, and each module
    there on its floor (the package itself, ``__main__``, ``_version`` and the examples are left
    out of the table)."""
    rows = _table_rows(DOCS / "architecture.md")
    assert [name for name, _ in rows] == [name for name, _ in FLOORS]
    unlisted = {"gradverify", "gradverify.__main__", "gradverify._version",
                "gradverify.examples"}
    for index, ((name, paths), (_, prefixes)) in enumerate(zip(rows, FLOORS)):
        modules = {_module(path) for path in paths}
        assert {m for m in modules if floor(m) != index} == set(), name
        named = {p for p in prefixes if any(m == p or m.startswith(p + ".") for m in modules)}
        assert set(prefixes) - unlisted - named == set(), name


def test_the_tours_report_is_the_golden_report():
    """The README's example report: its lines appear in tests/golden/broken.txt, in order
    (``...`` where lines are left out), with durations and versions masked as there."""
    text = README.read_text()
    block = next(b for b in re.findall(r"```text\n(.*?)\n```", text, re.S)
                 if b.startswith("gradverify "))
    golden = (GOLDEN / "broken.txt").read_text().splitlines()
    shown = [line for line in _mask(block).splitlines() if line != "..."]
    assert len(shown) > 20
    at = 0
    for line in shown:
        assert line in golden[at:], line
        at = golden.index(line, at) + 1


def _generated_table(page: Path, header: str, table: str, nth: int = 0) -> tuple[str, str]:
    """The ``nth`` table of ``page`` that starts with ``header``, and ``table`` (written in its
    place first under GRADVERIFY_UPDATE_GOLDEN=1)."""
    text = page.read_text()
    start = -1
    for _ in range(nth + 1):
        start = text.index(header, start + 1)
    end = text.find("\n\n", start) + 1 or len(text)
    if os.environ.get("GRADVERIFY_UPDATE_GOLDEN"):
        page.write_text(text[:start] + table + text[end:])
        return table, table
    return text[start:end], table


def test_configuration_md_lists_every_option():
    """docs/configuration.md's table is ``optiontable.docs_table()``; regenerate it with
    GRADVERIFY_UPDATE_GOLDEN=1 after changing an option."""
    from gradverify.optiontable import docs_table

    shown, table = _generated_table(DOCS / "configuration.md", "| option | `check` flag |",
                                    docs_table())
    assert shown == table  # every row, and no row of an old option


@pytest.mark.parametrize(("nth", "command"), [(0, "init"), (1, "record")])
def test_commands_md_lists_every_option_of_init_and_record(nth, command):
    from gradverify import optiontable

    options = {"init": optiontable.INIT_OPTIONS, "record": optiontable.RECORD_OPTIONS}[command]
    shown, table = _generated_table(DOCS / "commands.md", "| flag | default | what it does |",
                                    optiontable.command_table(options), nth)
    assert shown == table
