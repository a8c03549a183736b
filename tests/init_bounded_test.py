"""``init`` probes forward in bounded child processes (``init/bounded.py``): a kernel that
segfaults on a guessed shape, or deadlocks, costs its own target the probe (a spec with a TODO
naming how the probe ended), never ``init`` itself or the other targets."""
from __future__ import annotations

import pytest

import functions
from conftest import run_cli
from gradverify.init import bounded

CRASHY = functions.module(
    functions.one_input("Crashes", forward=f"{functions.SEGFAULTS}\nreturn x",
                        backward="return grad"),
    functions.one_input("Hangs", forward=f"{functions.HANGS}\nreturn x", backward="return grad"),
    functions.one_input("Fine"),
    header="import ctypes\nimport time\nfrom torch.autograd import Function\n")


@pytest.mark.slow
def test_a_crash_or_a_hang_costs_only_its_own_target(project, monkeypatch):
    monkeypatch.setattr(bounded, "PROBE_DEADLINE", 8.0)
    project.write("crashy.py", CRASHY)
    result = run_cli("init", "crashy", "-o", "specs/")
    assert result.code == 0, result.output
    crashes = (project.root / "specs" / "Crashes.yaml").read_text()
    hangs = (project.root / "specs" / "Hangs.yaml").read_text()
    fine = (project.root / "specs" / "Fine.yaml").read_text()
    assert "# TODO: trying forward on guessed inputs killed the process (by SIGSEGV)" in crashes
    assert "# TODO: trying forward on guessed inputs did not finish within 8 s" in hangs
    assert "TODO" not in fine and "these inputs ran forward and backward" in fine
    assert "crashy:Fine (inputs run)" in result.output


def test_a_target_the_child_cannot_import_is_drafted_here(project, monkeypatch):
    import sys
    import types

    module = types.ModuleType("only_here")
    exec(compile(CRASHY.split("class Crashes")[0] + "class Fine" + CRASHY.split("class Fine")[1],
                 "only_here.py", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "only_here", module)
    result = run_cli("init", "only_here:Fine")
    assert result.code == 0, result.output
    assert "these inputs ran forward and backward" in result.stdout


def test_the_probe_deadline_starts_after_the_child_has_started(project, monkeypatch,
                                                               fresh_processes):
    """A child's start (a fresh Python importing torch: seconds on a loaded machine) is not
    the first target's probe time (CI once wrote a hang's TODO into a fine target's spec)."""
    from gradverify import syspath

    command = syspath.own_module_command

    def slowed(module: str, *args: str) -> list[str]:
        line = command(module, *args)
        return [*line[:2], f"import time; time.sleep(8)\n{line[2]}", *line[3:]]

    monkeypatch.setattr(syspath, "own_module_command", slowed)
    monkeypatch.setattr(bounded, "PROBE_DEADLINE", 6.0)
    project.write("crashy.py", CRASHY)
    result = run_cli("init", "crashy:Fine", "-o", "specs/")
    assert result.code == 0, result.output
    fine = (project.root / "specs" / "Fine.yaml").read_text()
    assert "TODO" not in fine and "these inputs ran forward and backward" in fine, fine
