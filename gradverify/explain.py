"""``gradverify explain``: documentation of every code and check, torch-free."""
from __future__ import annotations

import textwrap

from gradverify.codes import Code
from gradverify.errors import UsageError, did_you_mean
from gradverify.registry import BY_NAME, CODES, REGISTRY
from gradverify.run import consequences


def _wrap(text: str) -> str:
    return "\n".join(textwrap.fill(p, 88, initial_indent="  ", subsequent_indent="  ")
                     for p in text.split("\n\n"))


def _doc(doc: str) -> str:
    """A check module's docstring: paragraphs wrapped, indented blocks (tables) kept as they
    are."""
    out = []
    for paragraph in textwrap.dedent(doc).strip().split("\n\n"):
        lines = paragraph.splitlines()
        if all(line.startswith("    ") for line in lines):
            out.append("\n".join("  " + line for line in lines))
        else:
            out.append(_wrap(" ".join(paragraph.split())))
    return "\n\n".join(out)


def explain_code(code: Code) -> str:
    parts = [f"{code.code} {code.name}" + (f"  (check: {code.check})" if code.check else ""), "",
             "What it is", _wrap(code.what), "", "Why it matters", _wrap(code.why)]
    if code.example:
        parts += ["", "Example", textwrap.indent(code.example.rstrip(), "    ")]
    if code.fix:
        parts += ["", "Fix", _wrap(code.fix)]
    return "\n".join(parts)


def explain_check(name: str) -> str:
    check = REGISTRY[name]
    doc = (type(check).__module__ and __import__(type(check).__module__, fromlist=["_"]).__doc__)
    parts = [f"{name}  ({'on by default' if check.default else 'opt-in'})", "",
             _wrap(check.summary)]
    if doc:
        parts += ["", _doc(doc)]
    blockers = consequences.blockers(check)
    if blockers:
        parts += ["", f"  Skipped when {', '.join(blockers)} failed."]
    if check.options:
        parts += ["", "Options (spec `checks: {" + name + ": {...}}`)"]
        parts += [f"  {o.name}: {o.help}" for o in check.options]
    parts += ["", "Findings"]
    parts += [f"  {c.code}  {c.name}: {c.what.split('. ')[0].rstrip('.')}" for c in check.codes]
    return "\n".join(parts)


def overview() -> str:
    lines = ["Checks (gradverify explain CHECK):"]
    width = max(len(name) for name in REGISTRY) + 2
    lines += [f"  {name:<{width}}{'' if c.default else '(opt-in) '}{c.summary}"
              for name, c in REGISTRY.items()]
    lines += ["", "Codes (gradverify explain CODE):"]
    lines += [f"  {c.code}  {c.name}" for c in CODES.values()]
    return "\n".join(lines)


def explain_topic(topic: str | None) -> str:
    if not topic:
        return overview()
    key = topic.strip()
    if key.upper() in CODES:
        return explain_code(CODES[key.upper()])
    if key in BY_NAME:
        return explain_code(BY_NAME[key])
    if key in REGISTRY:
        return explain_check(key)
    choices = [*CODES, *BY_NAME, *REGISTRY]
    raise UsageError(f"no code or check named {topic!r}{did_you_mean(key, choices)}; run "
                     "`gradverify explain` for the list")
