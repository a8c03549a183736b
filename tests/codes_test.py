"""Every code is documented and owned by one check; explain renders all of them."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from gradverify.codes import GENERAL
from gradverify.explain import explain_check, explain_code, overview
from gradverify.registry import CODES, REGISTRY

PACKAGE = Path(__file__).resolve().parent.parent / "gradverify"


def _used_codes(source: str) -> set[str]:
    """Code strings in a module, except where a ``Code(...)`` declares one."""
    tree = ast.parse(source)
    declared = {id(call.args[0]) for call in ast.walk(tree) if isinstance(call, ast.Call)
                and getattr(call.func, "id", None) == "Code" and call.args}
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and id(node) not in declared and isinstance(node.value, str)
            and re.fullmatch(r"GV\d{3}", node.value)}


def test_every_code_used_in_the_source_is_documented():
    used = set()
    for path in PACKAGE.rglob("*.py"):
        used |= _used_codes(path.read_text())
    assert used, "the scan found no code at all"
    assert used - set(CODES) == set()


def test_every_declared_code_is_reported_somewhere():
    used = set()
    for path in PACKAGE.rglob("*.py"):
        used |= _used_codes(path.read_text())
    assert set(CODES) - used == set()


def test_every_code_has_what_why_and_fix():
    for code in CODES.values():
        assert re.fullmatch(r"GV\d{3}", code.code)
        assert code.name == code.name.lower() and " " not in code.name
        assert code.what and code.why and code.fix, code.code
        text = explain_code(code)
        assert code.code in text and "Why it matters" in text


def test_check_codes_belong_to_their_check():
    for name, check in REGISTRY.items():
        assert check.codes, name
        for code in check.codes:
            assert CODES[code.code].check == name
    owned = {c.code for check in REGISTRY.values() for c in check.codes}
    assert owned == {c.code for c in CODES.values() if c.check}
    assert {c.code for c in GENERAL} == {c.code for c in CODES.values() if c.check is None}
    assert list(CODES) == sorted(CODES)


def test_every_code_is_in_the_block_of_its_check():
    from gradverify.codes import RANGES

    assert {code: c.check for code, c in CODES.items() if RANGES.get(code[:4], "?") != c.check} \
        == {}
    assert set(RANGES) == {code[:4] for code in CODES}  # no block said that nothing uses


def test_every_check_is_explained():
    for name in REGISTRY:
        text = explain_check(name)
        assert name in text and "Findings" in text
        assert name in overview()


def test_check_modules_do_not_import_torch_at_import_time():
    import subprocess
    import sys

    code = ("import sys, gradverify.cli, gradverify.checks, gradverify.specmodel,"
            " gradverify.explain;"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_check_declarations_are_consistent():
    from gradverify.checks.base import Effect, Trait

    for name, check in REGISTRY.items():
        own = {code.code for code in check.codes}
        assert set(check.traits) <= set(Trait), name
        for rule in check.consequences:  # a rule's cause is a code of its own check's
            assert rule.codes <= own, (name, rule)
            assert rule.reaches <= set(Trait), (name, rule)
            assert not (rule.declared and rule.codes), (name, rule)
            if rule.effect is Effect.SKIPS:  # what a skip reaches is said by trait
                assert rule.reaches and rule.symptom is None, (name, rule)


def test_every_symptom_is_reported_by_a_code_or_read_from_torch_and_reached_by_a_rule():
    from gradverify.checks.base import Effect
    from gradverify.codes import Symptom

    reported = {s for code in CODES.values() for s in code.reports} | {Symptom.REFUSED_WRITE}
    reached = {rule.symptom for check in REGISTRY.values() for rule in check.consequences
               if rule.effect is Effect.MARKS}
    assert reported == set(Symptom) == reached - {None}


def test_every_format_has_a_renderer():
    from gradverify.report import RENDERERS
    from gradverify.report.formats import FORMATS

    assert set(FORMATS) == set(RENDERERS)
