"""Every torch from 2.1: the fallbacks of ``gradverify.torchcompat`` taken on the pinned torch by
removing what older releases lack, ``requires_torch`` in specs, GV017 for an op target on a
torch without custom ops, and torch's own compile workers never blamed on a Function. The
compatibility job (``.ci/compat``) runs the whole suite on the oldest and newest torch."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
import torch

import functions
import torchversions
from conftest import run_cli
from gradverify import torchcompat, torchstate
from gradverify.errors import InputError
from gradverify.run import leftovers
from gradverify.spec.file import load_text
from gradverify.specmodel import version_tuple


@pytest.mark.parametrize(("text", "expected"), [
    ("2.1.2+cu121", (2, 1, 2)), ("2.6.0a0+git1234", (2, 6, 0)), ("2.15.0", (2, 15, 0)),
    ("2.4", (2, 4)),
])
def test_versions_compare_by_release_numbers(text, expected):
    assert version_tuple(text) == expected


def test_too_old_says_what_is_needed_and_what_is_there():
    assert torchcompat.too_old((2, 1)) is None
    reason = torchcompat.too_old((99, 0))
    assert reason == f"torch >= 99.0 (this is torch {torchcompat.version()})"


@pytest.mark.parametrize(("value", "expected"), [('"2.4"', (2, 4)), ('">=2.4.1"', (2, 4, 1))])
def test_requires_torch_reads_a_quoted_version(value, expected):
    (spec,) = load_text(f"target: m:F\nrequires_torch: {value}\ncases: [{{args: []}}]\n", "s.yaml")
    assert spec.requires_torch == expected


@pytest.mark.parametrize(("value", "message"), [
    ("2.10", 'quote the version: "2.1"'), ('"latest"', "expected the oldest torch"),
])
def test_requires_torch_refuses_numbers_and_words(value, message):
    with pytest.raises(InputError, match=message) as info:
        load_text(f"target: m:F\nrequires_torch: {value}\ncases: [{{args: []}}]\n", "s.yaml")
    assert "s.yaml:2" in str(info.value)


def test_a_spec_for_a_newer_torch_is_skipped_with_the_reason_everywhere(pytester):
    """CLI (workers and in-process) and pytest plugin (pytest run by pytester, in this
    process): skipped, exit 0, the module never imported (it may use what this torch lacks)."""
    pytester.syspathinsert()
    pytester.makepyfile(future="raise ImportError('needs a future torch')\n")
    pytester.mkdir("specs")
    (pytester.path / "specs" / "future.yaml").write_text(
        'target: future:Op\nrequires_torch: "99.0"\ncases:\n'
        "  - name: a\n    args: [{shape: [3]}]\n  - name: b\n    args: [{shape: [4]}]\n")
    for isolate in (True, False):
        result = run_cli("check", "specs/future.yaml", isolate=isolate)
        assert result.code == 0, result.output
        assert "2 skipped" in result.stdout and "torch >= 99.0" in result.stdout, result.stdout
    plugin = pytester.runpytest("--gradverify", "-rs", "-p", "no:cacheprovider",
                                "specs/future.yaml")
    out = plugin.stdout.str()
    assert plugin.ret == pytest.ExitCode.OK, out
    assert "1 skipped" in out and "needs torch >= 99.0" in out


def test_an_op_target_on_a_torch_without_custom_ops_is_gv017(project, monkeypatch):
    torchversions.require_custom_ops()
    monkeypatch.setattr(torchcompat, "custom_ops_supported", lambda: False)
    monkeypatch.setattr(torchcompat, "version", lambda: "2.1.2")
    project.write("specs/op.yaml", """
        target: gradverify_examples::scaled_sin
        imports: [gradverify.examples.customop]
        cases: [{name: v, args: {x: {shape: [3]}, alpha: 1.0}}]
        """)
    result = run_cli("check", "specs/op.yaml")
    assert result.code == 3, result.output
    output = " ".join(result.output.split())  # the console wraps long lines
    assert "needs torch >= 2.4 (this is torch 2.1.2)" in output
    assert 'requires_torch: "2.4"' in output and "[GV017]" in output


def test_saved_tensor_hooks_are_seen_without_torchs_stack_reader(monkeypatch):
    """Before torch 2.8 the hook stack cannot be read: pushes and pops are watched instead."""
    autograd = torch._C._autograd
    monkeypatch.delattr(autograd, "_top_saved_tensors_default_hooks", raising=False)
    monkeypatch.setattr(autograd, "_push_saved_tensors_default_hooks",
                        autograd._push_saved_tensors_default_hooks)
    monkeypatch.setattr(autograd, "_pop_saved_tensors_default_hooks",
                        autograd._pop_saved_tensors_default_hooks)
    monkeypatch.setattr(autograd, "_gradverify_watched", False, raising=False)
    torchcompat.watch_saved_tensor_hooks()
    assert torchcompat.top_saved_tensor_hooks() is None
    pack, unpack = (lambda t: t), (lambda t: t)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        assert torchcompat.top_saved_tensor_hooks() == (pack, unpack)
        seen: list[object] = []
        other = threading.Thread(target=lambda: seen.append(torchcompat.top_saved_tensor_hooks()))
        other.start()
        other.join()
        assert seen == [None]  # torch keeps the stack per thread, and so does the mirror
    assert torchcompat.top_saved_tensor_hooks() is None


def test_the_default_device_is_read_without_get_default_device(monkeypatch):
    """torch 2.1-2.2 have set_default_device but no getter; 2.8's getter fails once cleared."""
    monkeypatch.delattr(torch, "get_default_device", raising=False)
    get, set_ = torchcompat.default_device_accessors()
    assert get() == "cpu"
    try:
        set_("meta")
        assert get() == "meta" and torch.zeros(1).device.type == "meta"
    finally:
        set_("cpu")
    assert get() == "cpu" and torch.zeros(1).device.type == "cpu"


def test_torchs_own_threads_and_processes_are_not_the_cases():
    torch_dir = torchcompat.torch_dir()
    before = leftovers.snapshot()
    stop = threading.Event()
    # torch's code as a thread's target (as torch's compile worker starts its reader thread)
    torch_thread = threading.Thread(target=torch.autograd.grad, args=(), daemon=True)
    users = threading.Thread(target=stop.wait, name="users-poller", daemon=True)
    users.start()
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                               os.path.join(torch_dir, "_inductor", "compile_worker")])
    mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.2)
        assert leftovers._torch_thread(torch_thread, os.path.join(torch_dir, ""))
        threads, processes = leftovers.since(before)
        assert threads == ["users-poller"]
        assert processes == [mine.pid]
    finally:
        stop.set()
        for process in (worker, mine):
            process.kill()
            process.wait()


def test_a_compiled_case_leaves_nothing_of_its_own_running(project):
    """torch.compile's machinery (compile workers and their reader threads, on the torch
    versions that start them) is torch's, never GV015."""
    project.write("ops.py", functions.module(functions.square()))
    project.write("specs/sq.yaml", """
        target: ops:Square
        checks: {compile: true}
        cases: [{name: c, args: [{shape: [3]}]}]
        """)
    result = run_cli("check", "specs/sq.yaml", "--strict")
    assert "GV015" not in result.output
    # torch < 2.2 cannot compile a ctx-style Function at all: its own limit, said as such
    assert result.code == 0 or (result.code == 1 and "[GV35" in result.output), result.output


def test_the_baseline_binds_the_hook_watch_before_user_code(monkeypatch):
    # a worker's baseline, forgotten afterwards: in this process restore() would otherwise put
    # later tests back into this one's working directory
    monkeypatch.setattr(torchstate, "_BASELINE", None)
    torchstate.baseline()
    autograd = torch._C._autograd
    assert hasattr(autograd, "_top_saved_tensors_default_hooks") or \
        getattr(autograd, "_gradverify_watched", False)


def test_a_function_inside_torchs_own_machinery_is_torchs():
    """A user function calling torch.cond or checkpoint: findings point at the user's code,
    never at torch's Function classes (torch.testing's stand for a user's)."""
    import torch.utils.checkpoint as checkpoint
    from torch.testing._internal.autograd_function_db import NumpyCube

    assert torchcompat.torch_internal(checkpoint.CheckpointFunction)
    assert not torchcompat.torch_internal(NumpyCube)
    assert not torchcompat.torch_internal(type(functions))  # not a class of torch's files
