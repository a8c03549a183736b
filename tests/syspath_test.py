"""The working directory on ``sys.path`` (``gradverify/syspath.py``) is for the user's imports
only: a module there named as the standard library's never replaces it. The installed
``gradverify`` runs as a subprocess.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hostile import gv, make_project, needs_command

pytestmark = [needs_command,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="a real working directory")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


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

