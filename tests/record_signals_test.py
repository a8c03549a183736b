"""``gradverify record`` under signals: SIGINT and SIGTERM stop the recorded script and keep
what was seen; under ``nohup`` the script stays immune to a hang-up; an interrupted record shows
the script's own frames. The installed ``gradverify`` runs as a subprocess, with real signals.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostile import GRADVERIFY, make_project, marked_processes, needs_command

pytestmark = [needs_command,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="real signals and /proc")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


LONGRUN = """
import time
import torch
import good
x = torch.randn(4, 3, requires_grad=True)
good.Good.apply(x).sum().backward()
open("recorded", "w").close()
time.sleep(120)
"""


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_record_stops_on_signals_and_keeps_what_it_saw(project, signum, code):
    (project / "longrun.py").write_text(LONGRUN)
    spool = project.parent / f"{project.name}-tmp"  # where the spool goes: checked empty after
    spool.mkdir()
    process = subprocess.Popen([GRADVERIFY, "record", "-o", "rec", "--", "python", "longrun.py"],
                               cwd=project, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(spool)})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (project / "recorded").exists():
        time.sleep(0.1)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    assert (project / "rec" / "Good.yaml").is_file(), stderr
    # torch's own cache folder is torch's: importing torch._dynamo (the checkpoint check's
    # torch.utils.checkpoint does, through @torch._disable_dynamo) makes
    # $TMPDIR/torchinductor_<user>/dynamo, kept across runs as torch.compile keeps it
    left = [p for p in spool.iterdir() if not p.name.startswith("torchinductor_")]
    assert not left, "spool files were left behind"
    assert not marked_processes(str(spool))  # the script's command line names its spool


TRAIN_LONGRUN = """
import os
import time
import torch
import good


def train():
    good.Good.apply(torch.randn(3, requires_grad=True)).sum().backward()
    open("recording", "w").close()
    os.replace("recording", "recorded")  # seen only once open()'s own frames are done
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
    (project / "longrun.py").write_text(TRAIN_LONGRUN)
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
    (project / "longrun.py").write_text(TRAIN_LONGRUN)
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

