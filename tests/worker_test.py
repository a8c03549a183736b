"""Worker processes (``run/worker.py``, ``run/pool.py``) as a user meets them: a worker that
closes its socket, starts slowly or fails to start is not a case's fault; no more workers than
cases or a few per core; nothing a case starts (a child process, a daemon) outlives the run; an
infinite timeout is a usage error. The installed ``gradverify`` runs as a subprocess and the
processes left are read from /proc.
"""
from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from pathlib import Path

import pytest

import functions
from hostile import gv, make_project, needs_command, processes_in, unwrap

pytestmark = [needs_command,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="real processes and /proc")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def python_path(*folders: Path) -> dict[str, str]:
    """PYTHONPATH with ``folders`` first (the rest as the tests run: gradverify's tree)."""
    rest = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join([*map(str, folders), *([rest] if rest else [])])}


CLOSER = """
import os, time
from torch.autograd import Function


class F(Function):
    @staticmethod
    def forward(ctx, x):
        os.closerange(3, 4096)   # closes gradverify's socket too
        time.sleep(60)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2
"""


def test_a_worker_that_closes_its_socket_is_bounded(project):
    (project / "closer.py").write_text(CLOSER)
    start = time.monotonic()
    result = gv(project, "check", "closer:F", "good:Good", "--timeout", "20", timeout=90)
    assert time.monotonic() - start < 30
    assert result.returncode == 1
    assert re.search(r"specs/good.yaml +good:Good +\.", result.stdout)
    assert "closed its connection" in result.stdout
    assert not processes_in(project)


SPAWNER = """
import subprocess, sys, threading, time
from torch.autograd import Function


class F(Function):
    @staticmethod
    def forward(ctx, x):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)  # gv-orphan"])
        threading.Thread(target=time.sleep, args=(300,), name="poller").start()
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2
"""


@pytest.mark.parametrize("mode", [(), ("--no-isolate",)], ids=["workers", "no-isolate"])
def test_nothing_a_case_starts_outlives_the_run(project, mode):
    (project / "spawner.py").write_text(SPAWNER)
    start = time.monotonic()
    result = gv(project, "check", "spawner:F", "good:Good", *mode, timeout=90)
    assert time.monotonic() - start < 60
    assert result.returncode == 0, result.stdout + result.stderr
    flat = unwrap(result.stdout)
    assert "GV015" in flat and "process(es)" in flat
    assert re.search(r"specs/good.yaml +good:Good +\.", flat)
    time.sleep(0.5)
    assert not processes_in(project)


WORKER_START = """
import sys, time
if "gradverify.run.worker" in sys.argv:
    {action}
"""


@pytest.mark.slow
def test_a_slow_or_failed_worker_start_is_not_a_cases_fault(project, tmp_path_factory):
    slow = tmp_path_factory.mktemp("slow")
    (slow / "sitecustomize.py").write_text(WORKER_START.format(action="time.sleep(6)"))
    (project / "other.py").write_text(functions.module(functions.scale("Twice", 2)))
    # one quick check per case: 4 s bound the cases alone, not every check of a case on a
    # loaded machine (a torch-compatibility job once timed out in `checkpoint`)
    result = gv(project, "check", "good:Good", "other:Twice", "--timeout", "4",
                "--only", "gradcheck", env=python_path(slow))
    assert result.returncode == 0, result.stdout + result.stderr
    assert not re.search(r"GV00[39]|GV010", result.stdout)
    broken = tmp_path_factory.mktemp("broken")
    (broken / "sitecustomize.py").write_text(WORKER_START.format(
        action="print('torch is broken here'); raise SystemExit(1)"))
    result = gv(project, "check", "good:Good", "--json", "r.json", env=python_path(broken))
    assert result.returncode == 3, result.stdout + result.stderr
    flat = unwrap(result.stdout)
    assert "a worker process" in flat and "exited with status 1 while starting" in flat
    assert "torch is broken here" in flat and "[GV018]" in flat and "importing" not in flat
    assert json.loads((project / "r.json").read_text())["errors"][0]["code"] == "GV018"


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _most_processes_in(folder: Path, stop: threading.Event, seen: list[int]) -> None:
    """The command and its workers: processes the workers start in turn (torch's import runs
    ``ldconfig -p`` on some builds) are theirs, not more workers."""
    while not stop.is_set():
        found = set(processes_in(folder))
        parents = {pid: _parent(pid) for pid in found}
        seen.append(sum(parents[pid] not in found or parents[parents[pid]] not in found
                        for pid in found))
        time.sleep(0.05)


def test_jobs_never_start_more_workers_than_cases_or_a_few_per_core(project):
    (project / "specs" / "good.yaml").write_text(
        "target: good:Good\ncases:\n" + "".join(f"  - name: c{i}\n    args: {{x: {{shape: "
                                                f"[{i + 2}]}}}}\n" for i in range(3)))
    stop, seen = threading.Event(), [0]
    watcher = threading.Thread(target=_most_processes_in, args=(project, stop, seen))
    watcher.start()
    try:
        start = time.monotonic()
        result = gv(project, "check", "-j", "999999", "--only", "contract", timeout=90)
    finally:
        stop.set()
        watcher.join()
    workers = min(3, 2 * len(os.sched_getaffinity(0)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert time.monotonic() - start < 60
    assert f"-j 999999 lowered to {workers} workers" in unwrap(result.stdout)
    assert max(seen) <= 1 + workers  # the command and its workers
    assert not processes_in(project)


DAEMON = """
import os, time
from torch.autograd import Function

STARTED = []


class F(Function):
    @staticmethod
    def forward(ctx, x):
        if not STARTED:  # a helper daemon, started once: double fork, own session
            STARTED.append(True)
            pid = os.fork()
            if pid == 0:
                os.setsid()
                if os.fork() == 0:
                    time.sleep(300)
                os._exit(0)
            os.waitpid(pid, 0)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2
"""


@pytest.mark.parametrize("mode", [(), ("--no-isolate",)], ids=["workers", "no-isolate"])
def test_a_daemon_a_forward_starts_never_outlives_the_run(project, mode):
    (project / "daemonic.py").write_text(DAEMON)
    result = gv(project, "check", "daemonic:F", "good:Good", *mode)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "GV015" in result.stdout and "process(es)" in unwrap(result.stdout)
    time.sleep(0.5)
    assert not processes_in(project)


def test_an_infinite_timeout_is_a_usage_error(project):
    for value in ("inf", "1e400", "1e9"):
        result = gv(project, "check", "--timeout", value)
        assert result.returncode == 2, result.stderr
        assert "Invalid value for '--timeout'" in result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
    (project / "pyproject.toml").write_text("[tool.gradverify]\ntimeout = 1e9\n")
    result = gv(project, "check")
    assert result.returncode == 3 and "at most 1e+06 seconds" in result.stderr

