"""Every code is documented and owned by one check; explain renders all of them."""
from __future__ import annotations

import re
from pathlib import Path

from gradverify.checks import REGISTRY
from gradverify.codes import CODES
from gradverify.explain import explain_check, explain_code, overview

PACKAGE = Path(__file__).resolve().parent.parent / "gradverify"


def test_every_code_used_in_the_source_is_documented():
    used = set()
    for path in PACKAGE.rglob("*.py"):
        if path.name != "codes.py":
            used |= set(re.findall(r'"(GV\d{3})"', path.read_text()))
    assert used - set(CODES) == set()


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
            assert CODES[code].check == name
    owned = {c for check in REGISTRY.values() for c in check.codes}
    assert owned == {c.code for c in CODES.values() if c.check}


def test_every_check_is_explained():
    for name in REGISTRY:
        text = explain_check(name)
        assert name in text and "Findings" in text
        assert name in overview()


def test_check_modules_do_not_import_torch_at_import_time():
    import subprocess
    import sys

    code = ("import sys, gradverify.cli, gradverify.checks, gradverify.spec, gradverify.explain;"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
