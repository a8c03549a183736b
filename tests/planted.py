"""Running the installed command on a copy of a project with planted bugs (an environment
variable turns them on), and telling which bugs a folder of specs catches: shared by the
tests of the planted projects (``tests/newcomer``, ``tests/audio``, ``tests/physics``,
``tests/graphics``)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gradverify


def gv(cwd: Path, *args: str, bugs: bool = False, flag: str = "FASTOPS_BUGS"
       ) -> subprocess.CompletedProcess[str]:
    """The installed command in ``cwd``; ``bugs``: with the project's planted bugs (the
    environment variable ``flag`` set to 1). The tree of the gradverify under test first on
    ``PYTHONPATH`` (a worktree's, not the one installed editable elsewhere), then the tests'
    (``tests/warm/``: the command starts fresh, its workers and probes are forked from the
    suite's warm interpreter, as every command a test starts)."""
    path = [str(Path(gradverify.__file__).parents[1]), *filter(None, [os.environ.get(
        "PYTHONPATH")])]
    env = {**os.environ, "NO_COLOR": "1", flag: "1" if bugs else "0",
           "PYTHONPATH": os.pathsep.join(path)}
    return subprocess.run([sys.executable, "-m", "gradverify", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def errors_by_target(report: Path, folder: str) -> dict[str, set[str]]:
    """The codes of the error findings of each target checked by the specs of ``folder`` in a
    JSON report."""
    found: dict[str, set[str]] = {}
    for result in json.loads(report.read_text())["results"]:
        if result["spec"].startswith(f"{folder}/"):
            found.setdefault(result["target"], set()).update(
                f["code"] for c in result["checks"] for f in c["findings"]
                if f["severity"] == "error")
    return found


def caught(project: Path, *folders: str, flag: str = "FASTOPS_BUGS", good_report: str = ""
           ) -> list[set[str]]:
    """For each spec folder, the targets whose planted bug its specs catch: an error found on
    the bugged code that the correct code does not have (one run of each for every folder).
    ``good_report``: the JSON report (in ``project``) of the same check of the correct code,
    when the test has run it already (it is not run again)."""
    if not good_report:
        good_report = "good.json"
        gv(project, "check", *folders, "--json", good_report, "-q", flag=flag)
    gv(project, "check", *folders, "--json", "bad.json", "-q", bugs=True, flag=flag)
    found = []
    for folder in folders:
        good = errors_by_target(project / good_report, folder)
        bad = errors_by_target(project / "bad.json", folder)
        found.append({t for t, codes in bad.items() if codes - good.get(t, set())})
    return found
