"""The warm interpreter (tests/warm/, test-only) that the suite forks gradverify's processes
from: a process forked from it is what a fresh Python would have been, as far as a process can
tell; what a fork cannot make the same starts as a fresh Python.

Each test runs a probe module both ways, through ``run/processes.start`` (``warm_client.start``
in the suite), and compares what it saw: its arguments, folder, environment, ``sys.path``,
streams and descriptors, session, limits, mask, signals, and how it ended.
"""
from __future__ import annotations

import fcntl
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import warm_client

from gradverify.run import processes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the warm interpreter is Linux's (pidfd_open)")

PROBE = """
import json, os, resource, signal, sys, tempfile, time
import torch  # as gradverify's own modules do

how = sys.argv[1]
if how == "sleep":
    print(os.getpid(), flush=True)
    time.sleep(120)
if how == "terminate":
    os.kill(os.getpid(), signal.SIGTERM)
with open("/proc/self/status") as status:
    umask = next(line.split()[1] for line in status if line.startswith("Umask:"))
print(json.dumps({
    "argv": sys.argv, "name": __name__, "cwd": os.getcwd(), "path": sys.path,
    "env": dict(os.environ), "stdin": sys.stdin.read(), "umask": umask,
    "fds": sorted(os.listdir("/proc/self/fd")), "leader": os.getsid(0) == os.getpid(),
    "core": resource.getrlimit(resource.RLIMIT_CORE)[0],
    "files": resource.getrlimit(resource.RLIMIT_NOFILE),
    "ignored": sorted(int(s) for s in signal.valid_signals()
                      if signal.getsignal(s) is signal.SIG_IGN),
    "interrupts": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
    "blocked": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "nice": os.getpriority(os.PRIO_PROCESS, 0), "cpus": sorted(os.sched_getaffinity(0)),
    "tmp": tempfile.gettempdir(), "threads": torch.get_num_threads(),
    "seed": torch.initial_seed(),
}))
sys.stdout.flush()
if len(sys.argv) > 2:
    os.write(int(sys.argv[2]), b"passed")
sys.exit(int(how))
"""


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm_interpreter: str) -> Path:
    """A folder with the probe module on PYTHONPATH, the current folder another one."""
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / "gv_probe.py").write_text(PROBE)
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    rest = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "modules"),
                                                      *([rest] if rest else [])]))
    monkeypatch.setenv("PROBE_SETTING", "a value only the probe reads")
    return tmp_path


def started(how: str, monkeypatch: pytest.MonkeyPatch, *args: str, warm: bool,
            **streams: Any) -> processes.Process:
    with monkeypatch.context() as patch:
        if not warm:
            patch.delenv(warm_client.VARIABLE)
        process = processes.start("gv_probe", how, *args, **streams)
    assert isinstance(process, warm_client.Forked) == warm
    return process


def seen(how: str, monkeypatch: pytest.MonkeyPatch, *, warm: bool) -> tuple[dict[str, Any], int]:
    """What the probe saw, and its exit status; it writes to a descriptor passed to it (under
    a number that both ways have free: the lowest from 100 up)."""
    read, write = os.pipe()
    passed = fcntl.fcntl(write, fcntl.F_DUPFD_CLOEXEC, 100)
    os.close(write)
    try:
        process = started(how, monkeypatch, str(passed), warm=warm, stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, pass_fds=(passed,))
    finally:
        os.close(passed)
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(b"the input")
    process.stdin.close()
    out = process.stdout.read()
    code = process.wait(timeout=60)
    process.stdout.close()
    with os.fdopen(read, "rb") as written:
        assert written.read() == (b"passed" if out else b"")
    return (json.loads(out) if out else {}), code


def test_a_forked_process_is_what_a_fresh_python_would_be(probe, monkeypatch):
    # what a child inherits, changed from what the pytest process had, and restored after
    umask = os.umask(0o027)
    files = resource.getrlimit(resource.RLIMIT_NOFILE)
    old_usr1 = signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (files[0] - 1, files[1]))
        fresh, fresh_code = seen("3", monkeypatch, warm=False)
        forked, forked_code = seen("3", monkeypatch, warm=True)
    finally:
        os.umask(umask)
        resource.setrlimit(resource.RLIMIT_NOFILE, files)
        signal.signal(signal.SIGUSR1, old_usr1)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
    assert fresh_code == forked_code == 3
    assert fresh["argv"][1:2] == ["3"] and fresh["argv"][0].endswith("gv_probe.py")
    assert fresh["stdin"] == "the input" and fresh["umask"] == "0027" and fresh["core"] == 0
    assert int(signal.SIGUSR1) in fresh["ignored"] and int(signal.SIGUSR2) in fresh["blocked"]
    assert fresh["files"][0] == files[0] - 1 and fresh["leader"] and fresh["name"] == "__main__"
    assert fresh["env"]["PROBE_SETTING"] == "a value only the probe reads"
    # only the forked one has the warm interpreter named, and torch's compiler imported
    # already (a worker imports it in its first case): a torch that sets its cache folder in
    # the environment did then (torch 2.1 sets none; the fresh one has it where this process
    # imported the compiler before)
    forked["env"].pop(warm_client.VARIABLE)
    forked["env"].pop("TORCHINDUCTOR_CACHE_DIR", None)
    fresh["env"].pop("TORCHINDUCTOR_CACHE_DIR", None)
    env = {*fresh["env"], *forked["env"]}
    assert {key: (fresh["env"].get(key), forked["env"].get(key)) for key in env
            if fresh["env"].get(key) != forked["env"].get(key)} == {}
    # each fresh Python's default generator starts from its own random seed: so does each fork
    assert fresh.pop("seed") != forked.pop("seed") != seen("3", monkeypatch, warm=True)[0]["seed"]
    assert {key: forked[key] for key in fresh if forked[key] != fresh[key]} == {}
    assert forked.keys() == fresh.keys()


@pytest.mark.parametrize("warm", [False, True], ids=["fresh", "forked"])
def test_it_ends_as_a_fresh_python_would(probe, monkeypatch, warm):
    assert seen("terminate", monkeypatch, warm=warm)[1] == -signal.SIGTERM
    process = started("sleep", monkeypatch, warm=warm, stdout=subprocess.PIPE)
    assert process.stdout is not None
    assert int(process.stdout.readline()) == process.pid
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=0.1)
    assert process.poll() is None
    process.kill()
    assert process.wait(timeout=30) == -signal.SIGKILL == process.returncode
    process.stdout.close()


ASKER = """
import subprocess, sys, time
from gradverify.run import processes
process = processes.start("gv_probe", "sleep", stdout=subprocess.PIPE)
print(type(process).__name__, process.stdout.readline().decode().strip(), flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("warm", [False, True], ids=["fresh", "forked"])
def test_a_process_dies_with_the_process_that_started_it(probe, monkeypatch, warm):
    if not warm:
        monkeypatch.delenv(warm_client.VARIABLE)
    asker = subprocess.Popen([sys.executable, "-c", ASKER], stdout=subprocess.PIPE)
    try:
        assert asker.stdout is not None
        kind, pid = asker.stdout.readline().decode().split()
        assert kind == ("Forked" if warm else "Popen")
        os.kill(asker.pid, signal.SIGKILL)
        asker.wait()
        deadline = time.monotonic() + 30
        while _alive(int(pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(int(pid))
    finally:
        asker.kill()
        asker.wait()
        asker.stdout.close()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("change", ["read by C++", "read by torch's Python", "sitecustomize",
                                    "a failed set-up", "unreachable"])
def test_what_a_fork_cannot_make_the_same_starts_fresh(probe, monkeypatch, change):
    if change == "read by C++":  # as libtorch loads
        monkeypatch.setenv("TORCH_SHOW_CPP_STACKTRACES", "1")
    elif change == "read by torch's Python":  # torch._functorch.config: custom ops' aliasing
        import torch._functorch.config as functorch_config

        if '"CI"' not in Path(functorch_config.__file__).read_text():
            pytest.skip(f"torch {torch.__version__}'s own Python reads no CI variable")
        monkeypatch.setenv("CI", "" if os.environ.get("CI") else "true")
    elif change == "sitecustomize":  # run as Python starts
        (probe / "modules" / "sitecustomize.py").write_text(
            "import os\nos.environ['SITE'] = 'ran'\n")
    elif change == "unreachable":
        monkeypatch.setenv(warm_client.VARIABLE, str(probe / "no-socket"))
    with monkeypatch.context() as patch:
        if change == "a failed set-up":  # the child cannot enter the asker's folder
            patch.setattr(os, "getcwd", lambda: str(probe / "gone"))
        process = processes.start("gv_probe", "4", stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert isinstance(process, subprocess.Popen)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 4
    assert (json.loads(out)["env"].get("SITE") == "ran") == (change == "sitecustomize")


@pytest.mark.parametrize(("entry", "forked"), [("torch.txt", True), ("torch.py", False),
                                               ("torch/__init__.py", False)])
def test_a_folder_in_front_declines_only_what_it_would_import(probe, entry, forked):
    """A folder in front of the interpreter's ``PYTHONPATH`` that holds a module or package of
    a name it imported from elsewhere makes a fresh Python import that one (here, one that
    exits 7): it starts fresh. A file of that name that is no module (a project's
    ``torch.txt`` pin) imports nothing: the probe is forked and runs on the real torch."""
    (probe / "modules" / entry).parent.mkdir(exist_ok=True)
    (probe / "modules" / entry).write_text("raise SystemExit(7)\n")
    process = processes.start("gv_probe", "4", stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert isinstance(process, warm_client.Forked) == forked
    assert process.wait(timeout=120) == (4 if forked else 7)


def test_a_report_is_the_same_from_forked_and_fresh_workers(in_repo):
    def report(warm: bool) -> list[Any]:
        env = {**os.environ} if warm else {k: v for k, v in os.environ.items()
                                          if k != warm_client.VARIABLE}
        run = subprocess.run([sys.executable, "-m", "gradverify", "check", "specs/broken",
                              "specs/exp.yaml", "--format", "json"], env=env,
                             capture_output=True, text=True, timeout=600)
        results = json.loads(run.stdout)["results"]
        for result in results:
            result.pop("duration_s")
            for check in result["checks"]:
                check.pop("duration_s")
        return results

    fresh = report(False)
    assert any(r["status"] == "fail" for r in fresh) and any(r["status"] == "pass" for r in fresh)
    assert report(True) == fresh


def test_a_request_given_up_on_never_runs_a_second_process(probe, monkeypatch):
    """An asker that gets no answer in time starts a fresh Python; the child the warm
    interpreter forked meanwhile never runs the module (it waits for the asker's go)."""
    runs = probe / "runs"
    monkeypatch.setenv("PROBE_RUNS", str(runs))
    (probe / "modules" / "gv_counted.py").write_text(
        "import os\nwith open(os.environ['PROBE_RUNS'], 'a') as f:\n    f.write('ran\\n')\n")
    answer = warm_client._answer

    def late(conn):  # the answer comes, but after the asker gave up
        answer(conn)
        return []

    monkeypatch.setattr(warm_client, "_answer", late)
    process = processes.start("gv_counted", stdin=subprocess.DEVNULL)
    assert isinstance(process, subprocess.Popen)
    assert process.wait(timeout=120) == 0
    time.sleep(1)
    assert runs.read_text() == "ran\n"
