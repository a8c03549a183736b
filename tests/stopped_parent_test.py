"""Time the user did not spend in gradverify is not charged to a case: a run stopped for a
while (SIGSTOP, Ctrl-Z) and continued gives its cases their whole time limit."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT

SLOW_PRINTER = '''
import os
import time

import torch


class Loud(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        marks = os.environ["MARKS"]
        if not os.path.exists(marks + "/started"):
            open(marks + "/started", "w").close()
            while not os.path.exists(marks + "/stopped"):
                time.sleep(0.05)
            print("x" * 1_000_000, flush=True)  # a full pipe: waits for the stopped parent
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2
'''


@pytest.mark.slow  # a parent stopped for 10 s
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals as Linux has them")
def test_a_stopped_run_does_not_time_out_its_cases(tmp_path: Path):
    (tmp_path / "loud.py").write_text(SLOW_PRINTER)
    (tmp_path / "loud.yaml").write_text(
        "target: loud:Loud\ncases:\n  - name: v\n    args: {x: {shape: [3]}}\n"
        "checks: {gradcheck: true, gradgradcheck: false}\n")
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {**os.environ, "MARKS": str(marks), "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    run = subprocess.Popen([sys.executable, "-m", "gradverify", "check", "loud.yaml",
                            "--only", "gradcheck", "--timeout", "8"], cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert run.pid > 1
    try:
        deadline = time.monotonic() + 120
        while not (marks / "started").exists():
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.05)
        os.kill(run.pid, signal.SIGSTOP)
        (marks / "stopped").touch()
        time.sleep(10)  # longer than the case's time limit
        os.kill(run.pid, signal.SIGCONT)
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            os.kill(run.pid, signal.SIGCONT)
            run.kill()
            run.wait()
    assert run.returncode == 0, out + err
    assert "GV009" not in out
