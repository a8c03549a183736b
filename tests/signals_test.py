"""Shutdown: SIGTERM and SIGHUP stop a run as Ctrl-C does, and no path leaves a worker behind.

Real signals to a real process tree. Workers run in sessions of their own (so that a terminal's
Ctrl-C reaches only gradverify, and everything a worker starts goes with it): the test finds
them as the descendants of the gradverify process while it lives, and checks that each is gone.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import functions

# workers as fresh Pythons, children of the command, as outside the suite (tests/conftest.py)
pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="reads /proc and relies on PR_SET_PDEATHSIG"),
              pytest.mark.usefixtures("fresh_processes")]

SLOW = """
import os
import time
from torch.autograd import Function


class S(Function):
    @staticmethod
    def forward(ctx, x):
        open(f"started-{os.getpid()}", "w").close()
        time.sleep(120)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class T(S):
    pass
""" + functions.scale("F", 3)


def _processes() -> dict[int, tuple[str, int]]:
    """Every process: pid -> (state, parent pid), from /proc."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        found[int(entry.name)] = (fields[0], int(fields[1]))
    return found


def _tree(pid: int) -> list[int]:
    """Live (not zombie) processes below ``pid``, workers in their own sessions included."""
    processes = _processes()
    below, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for child, (state, ppid) in processes.items():
            if ppid == parent and state != "Z":
                below.append(child)
                todo.append(child)
    return below


def _alive(pids: list[int]) -> list[int]:
    processes = _processes()
    return [p for p in pids if p in processes and processes[p][0] != "Z"]


def _kill_all(pids: list[int]) -> None:
    for pid in _alive(pids):
        os.kill(pid, signal.SIGKILL)


def _start(tmp_path: Path, *options: str, slow: int = 2) -> subprocess.Popen[bytes]:
    (tmp_path / "slow.py").write_text(SLOW)
    process = subprocess.Popen(
        [sys.executable, "-m", "gradverify.cli", "check", "slow:F", "slow:S", "slow:T",
         "--timeout", "300", "--format", "json", "--output", "r.json", *options],
        cwd=tmp_path, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "CI": "true"})
    # wait until the slow forwards are running
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(tmp_path.glob("started-*"))) < slow:
        time.sleep(0.2)
    assert process.poll() is None, process.communicate()
    return process


def _gone(pids: list[int], within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pids):
            return True
        time.sleep(0.2)
    return False


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_termination_stops_workers_and_writes_the_report(tmp_path, signum, code):
    process = _start(tmp_path, "-j", "2")
    workers = _tree(process.pid)
    assert len(workers) >= 2
    try:
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == code, stderr.decode()
        assert _gone(workers), _alive(workers)
        report = json.loads((tmp_path / "r.json").read_text())
        interrupted = {r["target"] for r in report["results"] if r["status"] == "error"
                       and r["checks"][0]["findings"][0]["code"] == "GV014"}
        assert {"slow:S", "slow:T"} <= interrupted
        assert {r["target"] for r in report["results"]} == {"slow:F", "slow:S", "slow:T"}
        assert signal.Signals(signum).name in stderr.decode()
        assert not list(tmp_path.glob("*.tmp*")), "a half-written report was left behind"
    finally:
        _kill_all(workers)


def test_what_finished_before_the_signal_is_kept(tmp_path):
    process = _start(tmp_path, "--no-isolate", slow=1)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=30)
    assert process.returncode == 143
    report = json.loads((tmp_path / "r.json").read_text())
    status = {r["target"]: r["status"] for r in report["results"]}
    assert status == {"slow:F": "pass", "slow:S": "error", "slow:T": "error"}


def test_an_early_termination_still_exits_143(tmp_path):
    (tmp_path / "slow.py").write_text(SLOW)
    process = subprocess.Popen([sys.executable, "-m", "gradverify.cli", "check", "slow:S"],
                               cwd=tmp_path, start_new_session=True, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        # a worker exists (so the handlers are installed) but is still importing torch: the
        # parent is discovering targets and no report exists yet
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _tree(process.pid):
            time.sleep(0.05)
        workers = _tree(process.pid)
        assert workers
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
        assert process.returncode == 143
        assert _gone(workers), _alive(workers)
    finally:
        _kill_all(_tree(process.pid))


def test_workers_die_with_a_killed_parent(tmp_path):
    process = _start(tmp_path, slow=1)
    workers = _tree(process.pid)
    assert workers
    try:
        process.kill()
        process.wait()
        assert _gone(workers), _alive(workers)
    finally:
        _kill_all(workers)


RECORDED_THEN_WAITS = """
import time
import torch
import good
x = torch.randn(4, 3, requires_grad=True)
good.Good.apply(x).sum().backward()
open("recorded", "w").close()
time.sleep(120)
"""


def test_a_group_sigint_reaches_a_recorded_script_once(tmp_path):
    """SIGINT to record's whole process group (a terminal's Ctrl-C, ``kill -INT -PGID``): the
    script gets it from the group and from record, which cannot tell without a terminal; it
    raises one KeyboardInterrupt, and the traceback is the script's alone."""
    from hostile import GRADVERIFY, make_project

    if not GRADVERIFY:
        pytest.skip("the gradverify command is not installed")
    project = make_project(tmp_path)
    (project / "longrun.py").write_text(RECORDED_THEN_WAITS)
    for attempt in range(3):  # the second delivery raced the first one's traceback
        (project / "recorded").unlink(missing_ok=True)
        process = subprocess.Popen([GRADVERIFY, "record", "-o", f"rec{attempt}", "--", "python",
                                    "longrun.py"], cwd=project, start_new_session=True,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (project / "recorded").exists():
            time.sleep(0.05)
        time.sleep(0.2)
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=120)
        assert process.returncode == 130, err
        assert err.count("KeyboardInterrupt") == 1, err
        assert "Error in sys.excepthook" not in err and "gradverify" not in err.split(
            "KeyboardInterrupt")[0], err
        assert (project / f"rec{attempt}").is_dir()
