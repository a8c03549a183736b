"""Reports and the user's files, as a user meets them: a report is never written over a file the run
reads, links are written through, an unwritable or read-only output is a one-line error after
the whole report, and two reports never share a file. The installed ``gradverify`` runs as a
subprocess, with real permissions (root's override capabilities dropped with capsh).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hostile import GOOD, NO_ROOT, digest, gv, make_project, needs_command

pytestmark = [needs_command,
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="real links, devices and permissions")]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


def test_a_report_is_never_written_over_a_file_the_run_reads(project):
    before = digest(project)
    for target, output in (("specs/good.yaml", "specs/good.yaml"), ("good:Good", "good.py")):
        result = gv(project, "check", target, "--format", "json", "--output", output)
        assert result.returncode == 2, result.stderr
        assert "refusing to write the report over" in result.stderr
        assert result.stdout == ""  # refused before anything ran
    assert digest(project) == before


def test_links_are_written_through_and_devices_directly(project):
    (project / "real.json").write_text("old")
    (project / "link.json").symlink_to("real.json")
    result = gv(project, "check", "--format", "json", "--output", "link.json")
    assert result.returncode == 0, result.stderr
    assert (project / "link.json").is_symlink()
    assert json.loads((project / "real.json").read_text())["summary"]["exit_code"] == 0
    # /dev/stdout is a link to /proc/self/fd/1: the JSON goes to stdout, the link stays
    result = gv(project, "check", "--format", "json", "--output", "/dev/stdout")
    assert json.loads(result.stdout)["schema"] == 2
    assert os.path.islink("/dev/stdout")
    os.mkfifo(project / "fifo")
    reader = subprocess.Popen(["cat", str(project / "fifo")], stdout=subprocess.PIPE, text=True)
    assert gv(project, "check", "--json", "fifo").returncode == 0
    assert json.loads(reader.communicate(timeout=30)[0])["schema"] == 2
    assert (project / "fifo").is_fifo()


def test_an_unwritable_output_comes_after_the_whole_report(project):
    (project / "notes.txt").write_text("mine")
    result = gv(project, "check", "--json", "notes.txt/r.json")
    assert result.returncode == 2
    assert re.search(r"specs/good.yaml +good:Good +\.", result.stdout)
    assert "passed" in result.stdout
    assert "notes.txt is a file, not a folder" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert (project / "notes.txt").read_text() == "mine"


@pytest.mark.skipif(not shutil.which("capsh"), reason="needs capsh to drop root's overrides")
def test_read_only_folders(project):
    ro = project / "ro"
    ro.mkdir()
    (ro / "kept.json").write_text("old")
    (ro / "kept.json").chmod(0o666)
    ro.chmod(0o555)
    try:
        result = gv(project, "check", "--json", "ro/new.json", wrap=NO_ROOT)
        assert result.returncode == 2, result.stderr
        assert "passed" in result.stdout and "permission denied" in result.stderr
        # a writable file in a read-only folder is simply written
        result = gv(project, "check", "--json", "ro/kept.json", wrap=NO_ROOT)
        assert result.returncode == 0, result.stderr
        assert json.loads((ro / "kept.json").read_text())["schema"] == 2
    finally:
        ro.chmod(0o755)


def test_reports_get_a_normal_mode_and_ignore_a_changed_directory(project):
    (project / "wander.py").write_text(GOOD.replace(
        "ctx.save_for_backward(x)", "ctx.save_for_backward(x)\n        import os\n"
        "        os.makedirs('/tmp/gv-elsewhere', exist_ok=True)\n"
        "        os.chdir('/tmp/gv-elsewhere')"))
    old = os.umask(0o022)
    try:
        result = gv(project, "check", "wander:Good", "--no-isolate", "--json", "rel.json")
    finally:
        os.umask(old)
    assert result.returncode == 0, result.stderr + result.stdout
    report = project / "rel.json"
    assert report.is_file() and not Path("/tmp/gv-elsewhere/rel.json").exists()
    assert oct(report.stat().st_mode & 0o777) == oct(0o644)


def test_record_refuses_an_output_folder_it_cannot_use_before_running(project):
    (project / "notes.txt").write_text("mine")
    (project / "train.py").write_text("open('ran', 'w').close()\n")
    result = gv(project, "record", "-o", "notes.txt/specs", "--", "python", "train.py")
    assert result.returncode == 2
    assert "notes.txt is a file, not a folder" in result.stderr
    assert not (project / "ran").exists()


def test_two_reports_into_one_file_is_a_usage_error(project):
    (project / "link.json").symlink_to("r.out")
    for second in ("r.out", "./specs/../r.out", "link.json"):
        result = gv(project, "check", "--format", "markdown", "--output", "r.out", "--json",
                    second)
        assert result.returncode == 2, result.stderr
        assert "name the same file: each report needs a file of its own" in result.stderr
        assert result.stdout == "" and not (project / "r.out").exists()

