"""Reliability, round 4 (issue 27): the console, the working directory, threads, workers and odd
inputs never cost a report. As in ``reliability_test.py``, each test runs the installed
``gradverify`` as a user would and checks the exit code, the message, the report files and the
processes left.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import functions
from hostile import GOOD, GRADVERIFY, NO_ROOT, SIGN_BUG, gv, make_project, processes_in, unwrap

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="real file descriptors, /proc, capabilities")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


@pytest.fixture(autouse=True)
def _installed():
    if not GRADVERIFY:
        pytest.skip("the gradverify command is not installed")


def shell(cwd: Path, line: str, env: dict[str, str] | None = None
          ) -> subprocess.CompletedProcess[str]:
    """``gradverify ARGS`` with the shell's redirections (``>&-``, ``>/dev/full``)."""
    return subprocess.run(["bash", "-c", f"{GRADVERIFY} {line}"], cwd=cwd, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL,
                          env={**os.environ, "NO_COLOR": "1", **(env or {})})


def python_path(*folders: Path) -> dict[str, str]:
    """PYTHONPATH with ``folders`` first (the rest as the tests run: gradverify's tree)."""
    rest = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join([*map(str, folders), *([rest] if rest else [])])}


# ----------------------------------------------------------------------------- the console


@pytest.mark.parametrize("redirect, said", [
    (">&-", "cannot write to stdout (it is closed)"),
    (">/dev/full", "cannot write to stdout (no space left on device)"),
    ("<&- >&- 2>&-", None),
], ids=["stdout-closed", "stdout-full", "all-closed"])
def test_a_console_that_cannot_be_written_costs_no_report(project, redirect, said):
    (project / "buggy.py").write_text(SIGN_BUG)
    result = shell(project, f"check good:Good buggy:SignBug --json r.json --junit-xml j.xml "
                            f"{redirect}")
    assert result.returncode == 1, result.stderr  # the run's own: a check failed
    report = json.loads((project / "r.json").read_text())
    assert {r["target"] for r in report["results"]} == {"good:Good", "buggy:SignBug"}
    assert ET.parse(project / "j.xml").getroot().get("failures") != "0"
    if said:
        assert result.stderr.strip().splitlines() == [result.stderr.strip()]  # one line
        assert said in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("env", [{"PYTHONIOENCODING": "cp1252"},
                                 {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}],
                         ids=["cp1252", "C-locale"])
def test_a_console_that_is_not_utf8_gets_escapes_and_the_files_utf8(project, env):
    (project / "uniops.py").write_text(GOOD.replace("class Good(", "class ΔScale("),
                                       encoding="utf-8")
    result = gv(project, "check", "uniops:ΔScale", "--json", "r.json", "--junit-xml", "j.xml",
                env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"uniops:\\u0394Scale +\(inferred spec\) +\.", result.stdout)
    report = json.loads((project / "r.json").read_text(encoding="utf-8"))
    assert report["results"][0]["target"] == "uniops:ΔScale"
    assert 'classname="uniops:ΔScale"' in (project / "j.xml").read_text(encoding="utf-8")


INJECTED = "a\n::error file=x.py::INJECTED"


def test_control_characters_in_names_never_start_a_log_line(project):
    (project / "buggy.py").write_text(SIGN_BUG)
    (project / "specs" / "nl.yaml").write_text(
        f"target: buggy:SignBug\ncases:\n  - name: {json.dumps(INJECTED)}\n"
        "    args: {x: {shape: [3]}}\n")
    first = gv(project, "check", "specs/nl.yaml", "-v", "--format", "github", "--output",
               "gh.txt", "--json", "r.json", "--junit-xml", "j.xml")
    second = gv(project, "check", "specs/nl.yaml", "--format", "markdown", "--output", "m.md")
    assert first.returncode == second.returncode == 1, first.stdout + first.stderr
    texts = [first.stdout, second.stdout, *((project / f).read_text()
                                            for f in ("gh.txt", "m.md", "j.xml"))]
    for text in texts:
        assert not [line for line in text.splitlines()
                    if line.lstrip().startswith("::error file=x.py")], text
        assert "a\\n::error file=x.py::INJECTED" in text  # shown, escaped
    report = json.loads((project / "r.json").read_text())
    assert report["results"][0]["case"] == INJECTED  # the data itself is kept whole


# ----------------------------------------------------------------------------- the directory


@pytest.mark.slow
def test_the_working_directory_is_for_the_users_imports_only(project):
    for name in ("json", "hashlib"):
        (project / f"{name}.py").write_text(f"raise SystemExit('the user\\'s {name}.py')\n")
    (project / "gradverify.py").write_text("open('gradverify-py-ran', 'a').write('x')\n"
                                           "raise SystemExit(1)\n")
    (project / "train.py").write_text("import torch, good\n"
                                      "good.Good.apply(torch.randn(3, requires_grad=True))\n")
    for mode in ((), ("--no-isolate",)):
        result = gv(project, "check", "good:Good", "--format", "json", *mode)
        assert result.returncode == 0, result.stdout + result.stderr
        assert json.loads(result.stdout)["summary"]["pass"] > 0
    result = gv(project, "record", "-o", "rec", "--check", "--", "python", "train.py")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (project / "rec" / "Good.yaml").is_file() and "passed" in result.stdout
    assert not (project / "gradverify-py-ran").exists()


# ----------------------------------------------------------------------------- workers, time


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
    result = gv(project, "check", "good:Good", "other:Twice", "--timeout", "4",
                env=python_path(slow))
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
    assert result.returncode == 3 and "timeout: at most 1e+06 seconds" in result.stderr


# ----------------------------------------------------------------------------- threads


THREADS = """
import json, sys, threading
import torch
import gradverify

stdout, verdicts, errors = sys.stdout, {}, []
together = threading.Barrier(6)


def check(index):
    together.wait()
    try:
        verdicts[index] = int(gradverify.verify("good:Good" if index % 2 else "buggy:SignBug")
                              .exit_code)
    except Exception as exc:
        errors.append(repr(exc))


with torch.no_grad():
    threads = [threading.Thread(target=check, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    grad = torch.is_grad_enabled()
sys.__stdout__.write(json.dumps({"verdicts": [verdicts.get(i) for i in range(6)],
                                 "errors": errors, "stdout": sys.stdout is stdout, "grad": grad,
                                 "dtype": str(torch.get_default_dtype())}) + "\\n")
"""


def test_verify_from_threads_gives_right_verdicts_and_the_callers_state(project):
    (project / "buggy.py").write_text(SIGN_BUG)
    (project / "threads.py").write_text(THREADS)
    result = subprocess.run([sys.executable, "threads.py"], cwd=project, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen == {"verdicts": [1, 0] * 3, "errors": [], "stdout": True, "grad": False,
                    "dtype": "torch.float32"}


# ----------------------------------------------------------------------------- inputs, paths


def test_two_reports_into_one_file_is_a_usage_error(project):
    (project / "link.json").symlink_to("r.out")
    for second in ("r.out", "./specs/../r.out", "link.json"):
        result = gv(project, "check", "--format", "markdown", "--output", "r.out", "--json",
                    second)
        assert result.returncode == 2, result.stderr
        assert "name the same file: each report needs a file of its own" in result.stderr
        assert result.stdout == "" and not (project / "r.out").exists()


def test_paths_as_users_write_them(project):
    folder = project / "my ops dir"
    folder.mkdir()
    (folder / "ünï códe ops.py").write_text(functions.module(functions.square("Quad")),
                                            encoding="utf-8")
    (project / "more.yaml").mkdir()
    (project / "more.yaml" / "quad.yaml").write_text(
        'target: "my ops dir/ünï códe ops.py:Quad"\ncases:\n  - name: v\n'
        "    args: {x: {shape: [3]}}\n", encoding="utf-8")
    result = gv(project, "check", "more.yaml", "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    [case] = json.loads(result.stdout)["results"]
    assert case["spec"] == "more.yaml/quad.yaml" and case["status"] == "pass"


@pytest.mark.skipif(not shutil.which("capsh"), reason="needs capsh to drop root's overrides")
def test_a_spec_folder_that_cannot_be_read_is_said(project):
    private = project / "specs" / "private"
    private.mkdir()
    (private / "more.yaml").write_text("target: good:Good\ncases: [{args: [{shape: [2]}]}]\n")
    private.chmod(0)
    try:
        result = gv(project, "check", wrap=NO_ROOT)
        listed = gv(project, "list", wrap=NO_ROOT)
    finally:
        private.chmod(0o755)
    assert result.returncode == 3, result.stdout + result.stderr
    message = "specs/private: cannot read this folder (permission denied): the spec files in it"
    assert message in unwrap(result.stdout) and "[GV001]" in result.stdout
    assert re.search(r"specs/good.yaml +good:Good +\.", result.stdout)  # the rest ran
    assert listed.returncode == 3 and message in listed.stderr
    assert "specs/good.yaml:1  good:Good  1 case" in listed.stdout


MADE = """
import torch
from torch.autograd import Function


def make_square():
    class Square(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 2 * x * grad
    return Square


def _twice(ctx, x):
    return x * 2


def _twice_back(ctx, grad):
    return grad * 2


Square = make_square()
Twice = type("GeneratedTwice_0x1f", (Function,), {"forward": staticmethod(_twice),
                                                  "backward": staticmethod(_twice_back)})
"""


def test_list_names_what_check_accepts_and_lists_past_a_broken_module(project):
    (project / "made.py").write_text(MADE)
    (project / "halfedit.py").write_text("import torch\nx = (\n")
    (project / "relpkg").mkdir()
    (project / "relpkg" / "__init__.py").write_text("")
    (project / "relpkg" / "ops.py").write_text(GOOD)
    result = gv(project, "list", "made", "halfedit", "relpkg.ops")
    assert result.returncode == 3, result.stdout + result.stderr
    names = re.findall(r"^(\S+)  \(", result.stdout, re.M)
    assert sorted(names) == ["made:Square", "made:Twice", "relpkg.ops:Good"]
    assert "<locals>" not in result.stdout and "GeneratedTwice" not in result.stdout
    assert "gradverify init made:Twice" in result.stdout
    assert "SyntaxError: '(' was never closed at halfedit.py:2" in result.stderr
    assert "gradverify/" not in result.stderr and "Traceback" not in result.stderr
    checked = gv(project, "check", *names[:2], "-q")
    assert checked.returncode == 0, checked.stdout + checked.stderr


LONGRUN = """
import time
import torch
import good


def train():
    good.Good.apply(torch.randn(3, requires_grad=True)).sum().backward()
    open("recorded", "w").close()
    time.sleep(120)


train()
"""


def _ignoring_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job of a shell starts


def _ignoring_sighup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup starts


def _ignored(pid: int) -> int:
    """The mask of signals process ``pid`` ignores (Linux)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^SigIgn:\s*([0-9a-f]+)", status, re.M).group(1), 16)  # type: ignore[union-attr]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_under_nohup_the_recorded_script_stays_immune_to_a_hang_up(project):
    (project / "longrun.py").write_text(LONGRUN)
    process = subprocess.Popen([GRADVERIFY, "record", "-o", "rec", "--", "python", "longrun.py"],
                               cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=_ignoring_sighup)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (project / "recorded").exists():
        time.sleep(0.1)
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    # the script's process (record also runs a process that probes the Functions)
    scripts = [pid for pid in children
               if b"longrun.py" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    ignored = [_ignored(int(pid)) for pid in scripts]
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)
    hup, interrupt = 1 << (signal.SIGHUP - 1), 1 << (signal.SIGINT - 1)
    assert ignored and all(mask & hup and not mask & interrupt for mask in ignored), ignored


@pytest.mark.parametrize("started", ["foreground", "ignoring SIGINT"])
def test_an_interrupted_record_shows_the_scripts_own_frames(project, started):
    """A SIGINT sent to ``record`` stops the script, even when ``record`` was started ignoring
    SIGINT (the script once inherited that, and ran on to its end)."""
    (project / "longrun.py").write_text(LONGRUN)
    process = subprocess.Popen([GRADVERIFY, "record", "-o", "rec", "--", "python", "longrun.py"],
                               cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=_ignoring_sigint if started != "foreground" else None)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (project / "recorded").exists():
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    trace = stderr[stderr.index("Traceback"):stderr.index("KeyboardInterrupt")]
    files = re.findall(r'File "([^"]+)"', trace)
    assert files and set(files) == {str(project / "longrun.py")}, trace
    assert "train()" in trace and (project / "rec" / "Good.yaml").is_file()
