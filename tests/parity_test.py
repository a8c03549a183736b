"""One way to run a case: the command line, ``verify()`` and the pytest plugin give the
same verdict on every check of every case, on broken Functions (specs/broken), correct ones
(bundled examples, a surrogate gradient declared as such) and one that leaks a thread and
changes torch's settings (findings about the case as a whole)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import torch

import functions
import gradverify
from conftest import ROOT
from gradverify.registry import REGISTRY
from gradverify.spec.file import load_file

SPECS = ("specs/broken/broken.yaml", "specs/linear.yaml", "specs/estimators.yaml",
         "specs/pooling.yaml", "specs/leaky.yaml")

LEAKY = functions.module(functions.leaky())

OUTCOME = {"pass": "passed", "warn": "passed", "xpass": "passed", "skip": "skipped",
           "xfail": "skipped", "fail": "failed", "error": "failed"}
"""A gradverify status as pytest reports it (a warning is a pytest warning; not strict)."""


def _statuses(report: dict) -> dict[tuple[str, str, str], str]:
    """(target, case, check) -> status; the rows about the case as a whole as its own row."""
    found: dict[tuple[str, str, str], str] = {}
    for result in report["results"]:
        about = set(result["about_case"])
        own = [c["status"] for c in result["checks"] if c["name"] in about]
        for check in result["checks"]:
            if check["name"] not in about:
                found[(result["target"], result["case"], check["name"])] = check["status"]
        found[(result["target"], result["case"], "case")] = _worst(own)
    return found


def _worst(statuses: list[str]) -> str:
    order = ["pass", "skip", "xfail", "xpass", "warn", "fail", "error"]
    return max(statuses, key=order.index) if statuses else "pass"


def test_the_command_line_verify_and_the_plugin_agree(pytester, tmp_path):
    project = pytester.path
    for spec in SPECS[:-1]:
        (project / spec).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / spec, project / spec)
    shutil.copy(ROOT / "specs/broken/broken_ops.py", project / "specs/broken/broken_ops.py")
    (project / "leaky.py").write_text(LEAKY)
    (project / "specs/leaky.yaml").write_text(
        "target: leaky:Leaky\ncases:\n  - name: basic\n    args: {x: {shape: [3]}}\n")
    threads = torch.get_num_threads()
    try:
        command = subprocess.run(
            [sys.executable, "-m", "gradverify", "check", *SPECS, "--json", "cli.json", "-q"],
            cwd=project, capture_output=True, text=True, timeout=600,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(
                [str(project), os.environ.get("PYTHONPATH", "")])})
        assert command.returncode == 1, command.stdout + command.stderr
        cli = _statuses(json.loads((project / "cli.json").read_text()))

        api: dict[tuple[str, str, str], str] = {}
        for spec_path in SPECS:
            for spec in load_file(project / spec_path):
                report = gradverify.verify(spec.target, spec)
                if spec.target == "leaky:Leaky":  # what is about the case is no check's row
                    (leaky,) = report.results
                    assert [c.name for c in leaky.about_case] == ["global_state",
                                                                  "left_running"]
                    assert {c.name for c in leaky.checks} <= set(REGISTRY)
                path = tmp_path / "api.json"
                from gradverify.report import RENDERERS

                path.write_text(RENDERERS["json"].render(report))
                api.update(_statuses(json.loads(path.read_text())))

        plugin: dict[tuple[str, str, str], str] = {}
        reports = pytester.inline_run("--gradverify", *SPECS, "-p", "no:cacheprovider")
        for rep in reports.getreports("pytest_runtest_logreport"):
            if rep.when == "call" or (rep.when == "setup" and rep.outcome == "skipped"):
                _, target, case, check = rep.nodeid.split("::")
                # the item names the spec's target as written (a file path); the report, as
                # imported (a module)
                module, _, name = target.rpartition(":")
                if module.endswith(".py"):
                    target = f"{module.removesuffix('.py').replace('/', '.')}:{name}"
                # and a swept case's values in parentheses: `case(N=4)` is `case[N=4]`
                case = re.sub(r"\((\w+=[^()]*)\)$", r"[\1]", case)
                plugin[(target, case, check)] = rep.outcome
    finally:
        torch.set_num_threads(threads)

    assert len(cli) > 150 and any(s == "fail" for s in cli.values())
    assert cli[("leaky:Leaky", "basic", "case")] == "warn"  # GV012 and GV015
    assert api == cli
    expected = {key: OUTCOME[status] for key, status in cli.items()}
    assert set(plugin) - set(expected) == set(), sorted(set(expected) - set(plugin))[:5]
    assert plugin == expected
