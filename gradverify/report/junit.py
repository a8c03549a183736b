"""JUnit XML: one testsuite per target, one testcase per (case, check).

Follows the common schema CI systems read (Jenkins/xunit): ``failure`` for failed checks,
``error`` for checks that could not run, ``skipped`` for skips and expected failures. Warnings
pass, with the findings in ``system-out``. Specs or targets that could not run at all form a
last testsuite named ``gradverify``.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from gradverify.report.interface import Verbosity
from gradverify.report.text import escaped, finding_text, said
from gradverify.results import CheckResult, Status, failing

if TYPE_CHECKING:
    from gradverify.results import Report


def _testcase(suite: ET.Element, classname: str, case: str, check: CheckResult,
              strict: bool) -> None:
    element = ET.SubElement(suite, "testcase", classname=classname,
                            name=f"{escaped(case)}::{check.name}",
                            time=f"{check.duration_s:.3f}")
    text = "\n".join(finding_text(f, check.name, expected=check.status == Status.XFAIL)
                     for f in check.findings)
    first = next((f for f in check.findings if f.severity.value == "error"), None)
    message = f"{first.code}: {said(first)}" if first else check.summary
    if check.status != Status.ERROR and failing(check.status, strict):
        ET.SubElement(element, "failure", message=message,
                      type=first.code if first else check.status.value).text = text
    elif check.status == Status.ERROR:
        ET.SubElement(element, "error", message=message,
                      type=first.code if first else "error").text = text
    elif check.status == Status.SKIP:
        ET.SubElement(element, "skipped", message=check.summary)
    elif check.status == Status.XFAIL:
        ET.SubElement(element, "skipped", message=f"expected failure: {check.expect}").text = text
    elif text:
        ET.SubElement(element, "system-out").text = text


class Junit:
    """Every check of every case as a testcase, whatever ``-q``/``-v`` say: CI systems count
    them and show each failure's text."""

    reads_verbosity = False

    def render(self, report: Report, verbosity: Verbosity = Verbosity.NORMAL) -> str:
        return _render(report)


def _render(report: Report) -> str:
    root = ET.Element("testsuites", name="gradverify")
    targets: dict[str, list] = {}
    for case in report.results:
        targets.setdefault(case.target, []).append(case)
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for target, cases in targets.items():
        suite = ET.SubElement(root, "testsuite", name=escaped(target))
        for case in cases:
            for check in case.rows:
                _testcase(suite, escaped(target), case.case, check, report.settings.strict)
        _count(suite, totals, sum(c.duration_s for c in cases))
    if report.errors:
        suite = ET.SubElement(root, "testsuite", name="gradverify")
        for error in report.errors:
            element = ET.SubElement(suite, "testcase", classname="gradverify",
                                    name=escaped(error.spec or error.target or "input"),
                                    time="0")
            ET.SubElement(element, "error", message=error.message[:500],
                          type=error.code).text = error.message
        _count(suite, totals, 0.0)
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{report.duration_s:.3f}")
    _clean(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
"""Characters XML 1.0 forbids anywhere, even escaped (ESC, NUL, ...): a user exception may hold
them (colour codes, binary garbage)."""


def _clean(root: ET.Element) -> None:
    """Forbidden characters shown as ``\\x1b`` in every text and attribute, so that the file
    is well-formed whatever the findings quote."""
    def fix(text: str | None) -> str | None:
        return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}", text) if text else text

    for element in root.iter():
        element.text, element.tail = fix(element.text), fix(element.tail)
        for key, value in element.attrib.items():
            element.set(key, fix(value) or "")


def _count(suite: ET.Element, totals: dict[str, int], duration: float) -> None:
    cases = suite.findall("testcase")
    counts = {"tests": len(cases),
              "failures": sum(1 for c in cases if c.find("failure") is not None),
              "errors": sum(1 for c in cases if c.find("error") is not None),
              "skipped": sum(1 for c in cases if c.find("skipped") is not None)}
    for key, value in counts.items():
        suite.set(key, str(value))
        totals[key] += value
    suite.set("time", f"{duration:.3f}")
