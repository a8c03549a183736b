"""Reliability against hostile inputs and environments (DESIGN §8), as a user meets them: the
installed ``gradverify`` run as a subprocess, with real signals, real symbolic links, real
permissions (root's override capabilities dropped with capsh), real memory limits (prlimit).
Each test asserts the exit code, the message, that the other targets were reported, that no
process outlives the run and that no file of the user's changed.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import functions
from hostile import (
    GOOD,
    GRADVERIFY,
    NO_ROOT,
    SIGN_BUG,
    digest,
    gv,
    make_project,
    marked_processes,
    processes_in,
    unwrap,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="real signals, /proc, capabilities and rlimits")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path)


@pytest.fixture(autouse=True)
def _installed():
    if not GRADVERIFY:
        pytest.skip("the gradverify command is not installed")


# ----------------------------------------------------------------------------- files


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


# ----------------------------------------------------------------------------- silent passes


def test_a_module_that_stubs_gradcheck_cannot_pass_another_target(project):
    (project / "stubber.py").write_text(functions.module(functions.scale("G", 2)) +
                                        "torch.autograd.gradcheck = lambda *a, **k: True\n"
                                        "torch.autograd.gradgradcheck = lambda *a, **k: True\n")
    (project / "buggy.py").write_text(SIGN_BUG)
    for mode in ((), ("--no-isolate",)):
        result = gv(project, "check", "stubber:G", "buggy:SignBug", "--format", "json", *mode)
        assert result.returncode == 1, result.stderr
        report = json.loads(result.stdout)
        buggy = next(r for r in report["results"] if r["target"] == "buggy:SignBug")
        assert {c["name"]: c["status"] for c in buggy["checks"]}["gradcheck"] == "fail"
        stubber = next(r for r in report["results"] if r["target"] == "stubber:G")
        messages = [f["message"] for c in stubber["checks"] for f in c["findings"]
                    if f["code"] == "GV012"]
        assert messages and "torch.autograd.gradcheck" in messages[0]


# ----------------------------------------------------------------------------- hangs and size


def _laughs(depth: int) -> str:
    """A YAML "billion laughs" on one line: anchor ``a<depth>`` is a list of the level below and
    eight aliases of it, so 9 ** (depth + 1) ones hide in a few hundred bytes."""
    if depth == 0:
        return "&a0 [" + ",".join("1" * 9) + "]"
    return f"&a{depth} [{_laughs(depth - 1)}" + f",*a{depth - 1}" * 8 + "]"


BOMB = f"""target: good:Good
cases:
  - name: a
    args:
      x:
        values: {_laughs(7)}
"""


def test_a_yaml_bomb_fails_at_once_and_the_rest_runs(project):
    (project / "specs" / "bomb.yaml").write_text(BOMB)
    start = time.monotonic()
    result = gv(project, "check", timeout=60)
    assert time.monotonic() - start < 30
    assert result.returncode == 3
    assert "specs/bomb.yaml:6" in result.stdout and "aliases" in result.stdout
    assert re.search(r"specs/good.yaml +good:Good +\.", result.stdout)


def test_a_large_data_file_in_the_spec_folder_is_named_quickly(project):
    with open(project / "specs" / "annotations.yaml", "w") as handle:
        handle.write("images:\n")
        for i in range(700_000):
            handle.write(f"  - {{id: {i}, bbox: [0.25, 0.5, 3, 4], label: cat}}\n")
    assert (project / "specs" / "annotations.yaml").stat().st_size > 30 * 2**20
    start = time.monotonic()
    result = subprocess.run(["/usr/bin/time", "-f", "%M", GRADVERIFY, "list", "specs"],
                            cwd=project, capture_output=True, text=True, timeout=60)
    assert time.monotonic() - start < 20
    assert int(result.stderr.strip().splitlines()[-1]) < 512 * 1024  # KiB: spec reading alone
    result = gv(project, "check", timeout=60)
    assert result.returncode == 3
    assert "specs/annotations.yaml" in result.stdout and "not a spec" in unwrap(result.stdout)
    assert re.search(r"specs/good.yaml +good:Good +\.", result.stdout)


@pytest.mark.parametrize("args, message", [
    ("{x: {values: " + "[" * 80 + "1" + "]" * 80 + "}}", "nested more than 16 deep"),
    ("{x: {shape: [0, 100000000000000000000]}}", "too large"),
])
def test_absurd_tensors_are_spec_errors(project, args, message):
    (project / "specs" / "absurd.yaml").write_text(
        f"target: good:Good\ncases:\n  - name: a\n    args: {args}\n")
    result = gv(project, "check", "specs/absurd.yaml")
    assert result.returncode == 3, result.stdout + result.stderr
    assert message in unwrap(result.stdout)
    assert "GV011" not in result.stdout


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
    assert not list(spool.iterdir()), "spool files were left behind"
    assert not marked_processes(str(spool))  # the script's command line names its spool


# ----------------------------------------------------------------------------- bad targets


@pytest.mark.parametrize("mode", [(), ("--no-isolate",)], ids=["workers", "no-isolate"])
def test_modules_that_exit_at_import_are_their_own_errors(project, mode):
    (project / "exitmod.py").write_text("import sys\nsys.exit('bye')\n")
    (project / "interrupts.py").write_text("raise KeyboardInterrupt\n")
    (project / "wanders.py").write_text("import os\nos.chdir('/')\nfrom good import Good\n")
    (project / "sub").mkdir()
    (project / "sub" / "other.py").write_text(GOOD)
    targets = ["exitmod:F", "interrupts:F", "wanders:Good", "sub/other.py:Good", "good:Good"]
    if not mode:
        (project / "osexit.py").write_text("import os\nos._exit(7)\n")
        targets.insert(1, "osexit:F")
    result = gv(project, "check", *targets, "--json", "r.json", *mode)
    assert result.returncode == 3, result.stdout + result.stderr
    flat = unwrap(result.stdout)
    assert "importing 'exitmod' exited (sys.exit('bye'))" in flat
    assert "importing 'interrupts' raised KeyboardInterrupt" in flat
    if not mode:
        assert "importing osexit exited with status 7" in flat
    report = json.loads((project / "r.json").read_text())
    ran = {r["target"] for r in report["results"]}
    assert {"good:Good", "wanders:Good", "sub.other:Good"} <= ran
    assert "working directory" in flat  # wanders' chdir: a GV012 warning, undone


def test_printing_at_import_never_reaches_a_machine_report(project):
    (project / "noisy.py").write_text("print('hello from import')\n" + GOOD)
    result = gv(project, "check", "noisy:Good", "--no-isolate", "--format", "json")
    assert json.loads(result.stdout)["summary"]["exit_code"] == 0
    assert "hello from import" in result.stderr


def test_junit_stays_well_formed_whatever_an_exception_says(project):
    (project / "escapes.py").write_text(functions.module('''
class F(Function):
    @staticmethod
    def forward(ctx, x):
        raise ValueError("\\x1b[31mred\\x00 and NUL")

    @staticmethod
    def backward(ctx, grad):
        return grad
'''))
    result = gv(project, "check", "escapes:F", "--junit-xml", "j.xml")
    assert result.returncode == 1
    root = ET.parse(project / "j.xml").getroot()
    assert "\\x1b[31mred\\x00" in ET.tostring(root, encoding="unicode")


@pytest.mark.slow
def test_out_of_memory_is_its_own_finding(project):
    (project / "specs" / "huge.yaml").write_text(
        "target: good:Good\ncases:\n  - name: huge\n    args: {x: {shape: [12000, 12000]}}\n")
    result = gv(project, "check", wrap=("prlimit", "--as=3000000000"), timeout=120)
    assert result.returncode == 1, result.stdout + result.stderr
    flat = unwrap(result.stdout)
    assert "GV016" in flat and "out of memory" in flat and "'huge'" in flat
    assert "[12000, 12000]" in flat and re.search(r"specs/good.yaml +good:Good +\.", flat)
    assert "native code" not in flat and "inputs.py" not in flat


def test_yaml_merge_keys_and_unicode_names(project):
    (project / "uniops.py").write_text(GOOD.replace("class Good(", "class ΔScale("))
    (project / "specs" / "merged.yaml").write_text(
        "target: uniops:ΔScale\ncases:\n  - &small\n    name: small\n"
        "    args: {x: {shape: [3]}}\n  - <<: *small\n    name: other\n", encoding="utf-8")
    result = gv(project, "check", "specs/merged.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"specs/merged.yaml +uniops:ΔScale +\.\.", result.stdout)


def test_record_never_appends_to_an_invalid_spec(project):
    (project / "train.py").write_text(
        "import torch\nimport good\ngood.Good.apply(torch.randn(3, requires_grad=True))\n")
    (project / "rec").mkdir()
    (project / "rec" / "Good.yaml").write_text("target: good:Good\ncases:\n  - name: [half\n")
    before = (project / "rec" / "Good.yaml").read_text()
    # not shrunk (no probe process): where the cases go is decided before shrinking
    result = gv(project, "record", "-o", "rec", "--no-shrink", "--", "python", "train.py")
    assert result.returncode == 0, result.stderr
    assert (project / "rec" / "Good.yaml").read_text() == before
    assert (project / "rec" / "Good_2.yaml").is_file()
    assert "is not a valid spec" in unwrap(result.stderr)
    assert gv(project, "check", "rec/Good_2.yaml").returncode == 0
