"""Runs a gradverify command that writes a JSON report and judges it, for .ci/compat.

    python .ci/verdicts.py clean  GRADVERIFY ARGS...   exit 0, nothing failed, warned or errored
    python .ci/verdicts.py broken GRADVERIFY ARGS...   exit 1, and per target the failing checks
                                                       are those in .ci/broken-verdicts.txt
    python .ci/verdicts.py show REPORT.json            the verdict lines of a report

The report file is the one the arguments name after --output.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXPECTED = Path(__file__).with_name("broken-verdicts.txt")


def verdict_lines(report: dict) -> list[str]:
    """``target: check, check`` per target: the checks that failed in any of its cases."""
    failing: dict[str, set[str]] = {}
    for result in report["results"]:
        failed = failing.setdefault(result["target"], set())
        failed.update(c["name"] for c in result["checks"] if c["status"] == "fail")
    return [f"{target}: {', '.join(sorted(checks)) or '(none)'}"
            for target, checks in sorted(failing.items())]


def main(argv: list[str]) -> int:
    mode, command = argv[0], argv[1:]
    if mode == "show":
        print("\n".join(verdict_lines(json.loads(Path(command[0]).read_text()))))
        return 0
    output = Path(command[command.index("--output") + 1])
    code = subprocess.run(command).returncode
    if not output.is_file():
        print(f"no report was written (exit {code})", file=sys.stderr)
        return 1
    report = json.loads(output.read_text())
    summary = report["summary"]
    if mode == "clean":
        bad = {k: summary[k] for k in ("fail", "warn", "error", "xpass") if summary[k]}
        if code != 0 or bad or report["errors"]:
            print(f"exit {code}, {bad}, errors: {report['errors']}", file=sys.stderr)
            return 1
        return 0
    lines = verdict_lines(report)
    expected = EXPECTED.read_text().splitlines()
    if code != 1 or lines != expected or report["errors"]:
        print(f"exit {code} (1 expected); verdicts:", *lines, "expected:", *expected,
              f"errors: {report['errors']}", sep="\n  ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
