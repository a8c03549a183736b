"""How gradverify starts and stops its own processes (``run/processes.py``): always a fresh
Python, and no process id from outside its own process tree is ever signalled."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gradverify.run import processes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="AF_UNIX, /proc")


class _Liar:
    """A listener that answers every connection as the old warm interpreter did, naming a
    process that is not gradverify's (``forked PID``), and counts the connections."""

    def __init__(self, address: str, victim: int) -> None:
        self.connections = 0
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(address)
        self._server.listen(8)
        self._server.settimeout(0.2)
        self._answer = f"forked {victim}\n".encode()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                continue
            self.connections += 1
            with conn:
                conn.sendall(self._answer)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._server.close()


def test_a_socket_named_in_the_environment_is_never_asked_or_obeyed(in_repo, tmp_path,
                                                                     fresh_processes):
    """The package once forked its processes from whatever listened on the socket named in
    ``GRADVERIFY_ZYGOTE``, sent it the environment, and killed the pid it answered."""
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                              start_new_session=True)
    liar = _Liar(str(tmp_path / "socket"), victim.pid)
    try:
        env = {**os.environ, "GRADVERIFY_ZYGOTE": str(tmp_path / "socket"),
               "GRADVERIFY_SECRET": "not for the socket"}
        run = subprocess.run([sys.executable, "-m", "gradverify", "check", "specs/exp.yaml",
                              "--timeout", "60"], env=env, capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "passed" in run.stdout
        assert liar.connections == 0
        assert victim.poll() is None
    finally:
        liar.close()
        victim.kill()
        victim.wait()


def test_a_started_process_is_a_fresh_python_in_a_session_of_its_own(fresh_processes):
    process = processes.start("gradverify", "--version", stdout=subprocess.PIPE)
    assert isinstance(process, subprocess.Popen)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 0 and b"gradverify" in out


class _Handle:
    """A stand-in for a started process, with the pid it is given."""

    def __init__(self, pid: int, returncode: int | None = None) -> None:
        self.pid, self.returncode = pid, returncode
        self.killed = False

    def kill(self) -> None:
        self.killed = True


@pytest.mark.parametrize("pid", [-1, 0, 1])
def test_kill_group_never_signals_a_pid_of_1_or_less(monkeypatch, pid):
    """``kill(0)`` is our own group and ``kill(-1)`` every process: nothing is signalled."""
    sent: list[int] = []
    monkeypatch.setattr(os, "killpg", lambda group, sig: sent.append(group))
    monkeypatch.setattr(os, "kill", lambda target, sig: sent.append(target))
    handle = _Handle(pid)
    processes.kill_group(handle)  # type: ignore[arg-type]
    assert sent == [] and not handle.killed


def test_kill_group_of_a_reaped_process_signals_nothing(monkeypatch):
    """Its pid may be another process's by now, and a group of that id another's (a reused pid
    that leads a session of its own): nothing is sent, whatever runs."""
    sent: list[int] = []
    monkeypatch.setattr(os, "killpg", lambda group, sig: sent.append(group))
    monkeypatch.setattr(os, "kill", lambda target, sig: sent.append(target))
    gone = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    gone.wait()
    from gradverify.run import leftovers

    # as /proc would show a process that took the freed pid and made a session of its own
    monkeypatch.setattr(leftovers, "stats", lambda: [(gone.pid, ["S", "1", str(gone.pid)])])
    processes.kill_group(gone)
    assert sent == []


def test_an_exited_process_s_group_is_killed_before_it_is_reaped(tmp_path):
    """``exited`` kills what the process left in its group while its exit still holds the id,
    then reaps it; one still running is neither signalled nor reaped."""
    script = tmp_path / "leaves.py"
    script.write_text("import subprocess, sys\n"
                      "child = subprocess.Popen([sys.executable, '-c', 'import time; "
                      "time.sleep(60)'])\n"
                      "print(child.pid, flush=True)\n")
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                               start_new_session=True, text=True)
    assert process.pid > 1 and process.stdout is not None
    left = int(process.stdout.readline())
    assert left > 1
    try:
        deadline = time.monotonic() + 60
        while not processes.exited(process):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert process.returncode == 0
        while time.monotonic() < deadline:  # SIGKILLed: gone once its parent, init, reaps it
            try:
                os.kill(left, 0)
            except ProcessLookupError:
                break
            try:
                if Path(f"/proc/{left}/stat").read_text().split()[2] == "Z":
                    break  # a zombie of whoever adopted it
            except (FileNotFoundError, IndexError):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the process it left in its group still runs")
    finally:
        try:
            if os.getpgid(left) == process.pid:
                os.kill(left, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                               start_new_session=True)
    try:
        assert not processes.exited(sleeper) and sleeper.returncode is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_kill_group_ends_what_the_process_started(fresh_processes, tmp_path):
    script = tmp_path / "parent.py"
    script.write_text("import subprocess, sys, time\n"
                      "child = subprocess.Popen([sys.executable, '-c', 'import time; "
                      "time.sleep(300)'])\n"
                      "print(child.pid, flush=True)\ntime.sleep(300)\n")
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                               start_new_session=True)
    assert process.stdout is not None
    child = int(process.stdout.readline())
    processes.kill_group(process)
    assert process.wait(timeout=30) == -signal.SIGKILL
    process.stdout.close()
    deadline = 30.0
    while Path(f"/proc/{child}").exists() and deadline > 0:
        state = (Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split() or ["?"])[0]
        if state == "Z":
            break
        deadline -= 0.05
        threading.Event().wait(0.05)
    assert deadline > 0


def test_nothing_test_only_is_in_the_package():
    """The suite's warm interpreter lives in tests/warm/; the package names none of it."""
    package = Path(processes.__file__).resolve().parent.parent
    named = [str(path.relative_to(package)) for path in package.rglob("*.py")
             if any(word in path.read_text(encoding="utf-8")
                    for word in ("ZYGOTE", "zygote", "warm_client", "GRADVERIFY_TESTS_"))]
    assert named == []
