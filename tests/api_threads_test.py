"""``gradverify.verify`` called from several threads at once: right verdicts, and each caller's
torch state left as it was.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hostile import SIGN_BUG, make_project, needs_command

pytestmark = [needs_command,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="real threads in a fresh interpreter")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


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

