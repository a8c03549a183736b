"""Isolation: crashes, aborts, hangs and exits become that case's error; the rest still runs."""
from __future__ import annotations

import dataclasses
import inspect
import json
import pickle
import re
import subprocess
import sys
import time

import pytest

import functions
from conftest import run_cli
from gradverify.discover import Job, Plan
from gradverify.options import RunOptions
from gradverify.results import ErrorEntry
from gradverify.run import messages, pool
from gradverify.run.tasks import Task
from gradverify.targets.names import parse_target

OPS = functions.module(
    functions.one_input("Good", forward='print("noise from forward")\nreturn x * 2'),
    functions.one_input("Segfault", backward=f"{functions.SEGFAULTS}\nreturn grad"),
    functions.one_input("Aborts", forward="os.abort()", backward="return grad"),
    functions.one_input("Hangs", forward=f"{functions.HANGS}\nreturn x", backward="return grad"),
    functions.one_input("Exits", forward="sys.exit(3)", backward="return grad"),
    header="import ctypes, os, sys, time\nimport torch\nfrom torch.autograd import Function\n")


def spec(target: str, cases: int = 1) -> str:
    body = "".join(f"  - name: c{i}\n    args: {{x: {{shape: [{i + 2}]}}}}\n" for i in range(cases))
    return f"target: ops:{target}\ncases:\n{body}"


@pytest.fixture
def crashy(project):
    project.write("ops.py", OPS)
    for name in ("Good", "Segfault", "Aborts", "Exits"):
        project.write(f"specs/{name.lower()}.yaml", spec(name, 2 if name == "Good" else 1))
    return project


def test_crashes_become_case_errors_and_other_targets_report(crashy):
    result = run_cli("check", "--json", "report.json", isolate=True)
    assert result.code == 1, result.output
    out = result.stdout
    assert re.search(r"specs/good.yaml +ops:Good +\.\.", out)
    # backward is first called once, before any check (the float64 probe, docs/checks.md)
    assert "died (killed by SIGSEGV) during backward" in out
    assert "died (killed by SIGABRT)" in out
    assert "forward raised SystemExit" in out
    assert "noise from forward" not in out
    data = json.loads((crashy.root / "report.json").read_text())
    statuses = {r["target"] + "/" + r["case"]: r["status"] for r in data["results"]}
    assert statuses["ops:Good/c0"] == "pass" and statuses["ops:Segfault/c0"] == "error"
    assert statuses["ops:Aborts/c0"] == "error" and statuses["ops:Exits/c0"] == "error"
    crash = next(r for r in data["results"] if r["target"] == "ops:Segfault")
    assert crash["checks"][0]["findings"][0]["code"] == "GV010"


def workers_first_run(monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    """Each worker runs ``code`` before it starts (before its torch import), as a fresh
    Python (no warm interpreter: tests/conftest.py)."""
    import warm_client

    from gradverify import syspath

    monkeypatch.delenv(warm_client.VARIABLE, raising=False)
    command = syspath.own_module_command

    def slowed(module: str, *args: str) -> list[str]:
        line = command(module, *args)
        return [*line[:2], f"{code}\n{line[2]}", *line[3:]]

    monkeypatch.setattr(syspath, "own_module_command", slowed)


@pytest.mark.slow  # two 10 s worker starts and an 8 s timeout: started first (conftest.py)
def test_a_hang_times_out_and_a_slow_start_is_not_a_case_timeout(crashy, monkeypatch):
    # each worker takes longer to start than a case may take: only the hang times out
    # (a timeout with room for a good case on a loaded machine, a start longer still)
    workers_first_run(monkeypatch, "import time; time.sleep(10)")
    crashy.write("specs/hangs.yaml", spec("Hangs"))
    # the first-order checks alone: a loaded torch 2.15 job spent more than 8 s of the good
    # case's time in the checkpoint check's first import of torch's compiler
    result = run_cli("check", "specs/hangs.yaml", "specs/good.yaml", "--timeout", "8",
                     "--only", "gradcheck,gradgradcheck", isolate=True)
    assert result.code == 1, result.output
    assert "timed out after 8 s" in result.stdout and "[GV009" in result.stdout
    assert result.stdout.count("[GV009") == 1 and "GV018" not in result.stdout
    assert re.search(r"ops:Good +\.\.", result.stdout)


def test_a_worker_that_misses_its_start_deadline_is_no_cases_timeout(crashy, monkeypatch):
    workers_first_run(monkeypatch, "import time; time.sleep(60)")
    monkeypatch.setattr(pool, "START_DEADLINE", 1.0)
    result = run_cli("check", "specs/good.yaml", "--timeout", "30", isolate=True)
    flat = re.sub(r"\s+", " ", result.stdout)
    assert result.code == 3, result.output
    assert "a worker process (a fresh Python that imports torch and gradverify to run the " \
           "cases) did not start within 1 s" in flat
    assert "[GV018" in flat and "GV009" not in flat and "timed out" not in flat


def test_worker_messages_are_frozen_documented_and_survive_pickling():
    job = Job("ops:Good", None)
    task = Task(0, 0, job, "inferred", first=True, smallest=True)
    error = ErrorEntry("ops:Good", None, "GV003", "importing ops failed")
    sent = [messages.Discover(Plan(deferred=[parse_target("ops:Good")])),
            messages.RunTask(task, RunOptions()),
            messages.Ready("2.5.0"), messages.Discovering("ops:Good", (job,), (error,), ("n",)),
            messages.Planned(), messages.CheckStarted("contract"),
            messages.TaskResult((None, [error]))]
    kinds = {c for _, c in inspect.getmembers(messages, inspect.isclass)
             if c.__module__ == messages.__name__}
    assert {type(m) for m in sent} == kinds  # one of each kind
    for message in sent:
        assert type(message).__doc__ and dataclasses.is_dataclass(message)
        assert pickle.loads(pickle.dumps(message)) == message
        with pytest.raises(dataclasses.FrozenInstanceError):
            message.extra = 1  # type: ignore[union-attr]
    assert messages.from_worker(sent[2]) == sent[2]
    assert messages.from_worker(("result", None)) is None  # what user code wrote to the socket
    assert messages.from_worker(sent[0]) is None  # the pool's own message is none of a worker's


def test_in_process_mode_still_reports_system_exit(crashy):
    result = run_cli("check", "specs/exits.yaml")
    assert result.code == 1 and "forward raised SystemExit: 3" in result.stdout


def test_parallel_jobs_give_the_same_report(crashy):
    one = run_cli("check", "specs/good.yaml", "specs/segfault.yaml", "--format", "json",
                  isolate=True)
    two = run_cli("check", "specs/good.yaml", "specs/segfault.yaml", "--format", "json", "-j",
                  "2", isolate=True)
    strip = lambda text: [(r["target"], r["case"], r["status"])  # noqa: E731
                          for r in json.loads(text)["results"]]
    assert strip(one.stdout) == strip(two.stdout)
    assert one.code == two.code == 1


def test_shards_partition_the_cases(project):
    project.write("ops.py", OPS)
    project.write("specs/good.yaml", spec("Good", 8))
    seen = []
    for k in (1, 2, 3):
        result = run_cli("check", "--shard", f"{k}/3", "--format", "json", "--only", "contract")
        seen += [r["case"] for r in json.loads(result.stdout)["results"]]
    assert sorted(seen) == [f"c{i}" for i in range(8)]
    assert run_cli("check", "--shard", "4/3").code == 2
    assert run_cli("check", "--shard", "x").code == 2


def test_jobs_option_is_validated(project):
    result = run_cli("check", "-j", "0")
    assert result.code == 2 and "positive integer or 'auto'" in result.output


def test_parent_process_never_imports_torch(crashy):
    code = ("import sys\nfrom gradverify.cli import main\n"
            "rc = main(['check', 'ops:Good', 'specs/good.yaml', '--only', 'contract'])\n"
            "print('TORCH' if 'torch' in sys.modules else 'NO-TORCH', rc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=crashy.root)
    assert out.stdout.strip().splitlines()[-1] == "NO-TORCH 0", out.stdout + out.stderr


def test_import_time_crash_in_deferred_discovery(project):
    project.write("boom.py", "import os\nos.abort()\n")
    result = run_cli("check", "boom:Thing", isolate=True)
    assert result.code == 3
    assert "importing boom was killed by SIGABRT" in result.stdout


def test_a_task_that_cannot_be_sent_leaves_the_pool_usable(crashy):
    """A pool outlives a run (the pytest plugin runs each target in the session's one pool). A
    task that cannot be sent (it does not pickle: a bug of ours) used to leave its worker marked
    busy with a task it never got, so the next run waited on it until the case timeout while
    the worker waited for a task (the hang of tests/plugin_test.py in one process)."""
    from gradverify.run.runner import run_job
    from gradverify.spec.file import load_file

    options = RunOptions(timeout=60.0, user_paths=(str(crashy.root),))
    job = Job("ops:Good", load_file(crashy.root / "specs/good.yaml")[0])
    with pool.Pool(options) as workers:
        workers.options = dataclasses.replace(options, user_paths=(lambda: "unpicklable",))
        with pytest.raises((pickle.PicklingError, AttributeError)):
            run_job(job, options, pool=workers)
        assert workers.workers and not any(w.task for w in workers.workers)
        workers.options = options
        results, errors = run_job(job, options, pool=workers)
    assert not errors and [r.case for r in results] == ["c0", "c1"]
    assert all(r.status.value == "pass" for r in results), results


def test_a_run_ended_by_an_exception_leaves_no_worker_busy(crashy):
    """A run that ends by an exception while a worker runs one of its cases stops that worker:
    left busy, the next run would wait on it and take its late result for a case of its own."""
    from gradverify.run.runner import plan_tasks, run_job
    from gradverify.spec.file import load_file

    options = RunOptions(timeout=60.0, user_paths=(str(crashy.root),))
    job = Job("ops:Good", load_file(crashy.root / "specs/good.yaml")[0])

    def progress(done: int, total: int, what: str) -> None:
        if what:  # a case was just sent
            raise RuntimeError("a progress display failed")

    with pool.Pool(options) as workers:
        with pytest.raises(RuntimeError, match="progress display"):
            workers.run(plan_tasks([job], options), progress)
        assert not any(w.task for w in workers.workers)
        results, errors = run_job(job, options, pool=workers)
    assert not errors and [r.status.value for r in results] == ["pass", "pass"]


def test_a_crash_quotes_its_own_tasks_output_however_late_it_is_read(crashy, monkeypatch):
    """What a worker prints is read by a thread of the parent, which may lag: the size of the
    log when a task is sent is no boundary. The worker's marks in the stream are (CI once
    quoted the previous case's print in a segfault's error)."""
    from gradverify.run.output import Output
    from gradverify.run.runner import plan_tasks
    from gradverify.spec.file import load_file

    keep = Output.keep

    def slow(self: Output, chunk: bytes) -> None:
        time.sleep(0.2)
        keep(self, chunk)

    monkeypatch.setattr(Output, "keep", slow)
    options = RunOptions(timeout=60.0, jobs=1, user_paths=(str(crashy.root),))
    jobs = [Job(f"ops:{name}", load_file(crashy.root / f"specs/{name.lower()}.yaml")[0])
            for name in ("Good", "Segfault")]
    with pool.Pool(options) as workers:
        outcomes = workers.run(plan_tasks(jobs, options), None)
    crash = outcomes[max(outcomes)][0]
    message = crash.rows[0].findings[0].message
    assert "SIGSEGV" in message and "noise from forward" not in message, message


def test_the_output_reader_takes_marks_out_even_split_across_reads():
    from gradverify.run.output import TASK_MARK, Output, last_lines

    output = Output()
    output.keep(b"startup\n" + TASK_MARK + b"noise from the task before\n" + TASK_MARK[:4])
    output.keep(TASK_MARK[4:] + TASK_MARK[:1])
    output.keep(TASK_MARK[1:] + b"native assert failed\n")
    assert last_lines(output) == "; its last output: native assert failed"
    output.keep(b"\x00")  # held back: it may begin a mark, yet a worker that died shows it
    assert output.since(0) == "startup\nnoise from the task before\nnative assert failed\n\x00"
    output.keep(b"not a mark\n")
    assert last_lines(output).endswith("| \x00not a mark")
    assert Output().since(0) == "" and last_lines(Output()) == ""


def test_the_output_reader_serves_a_descriptor_past_select_s_limit():
    """A long pytest session holds many files: the pipe may get a descriptor over 1024, which
    select.select refuses (its reader thread would die and the worker block on a full pipe)."""
    import fcntl
    import os
    import resource

    from gradverify.run.output import TASK_MARK, Output, last_lines

    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] <= 1500:
        pytest.skip("this process may not open descriptors over 1500")
    read, write = os.pipe()
    high = fcntl.fcntl(read, fcntl.F_DUPFD, 1500)  # the lowest free one from 1500
    os.close(read)
    assert high >= 1500
    output = Output()
    output.read_from(high)
    os.write(write, b"the case before\n" + TASK_MARK + b"this case\n")
    os.close(write)
    deadline = time.monotonic() + 10
    while output.size < len("the case before\nthis case\n") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert last_lines(output) == "; its last output: this case"


def test_a_worker_whose_cuda_context_broke_retires_and_the_next_case_runs_in_a_fresh_one(
        crashy, monkeypatch):
    """A device-side assert is sticky: every later CUDA call in that process raises again, so
    every later case in the worker would have failed for it (seen on an H200, as GV011 "our"
    bug). The worker says so with its result and exits; the pool starts another. No CUDA here:
    the workers are told their context broke after each task."""
    from gradverify.run.runner import run_job
    from gradverify.spec.file import load_file

    workers_first_run(monkeypatch, "import torch\n"
                                   "def broken(): raise RuntimeError('device-side assert')\n"
                                   "torch.cuda.is_initialized = lambda: True\n"
                                   "torch.cuda.synchronize = broken")
    started = []
    start = pool.Pool._start

    def counted(self):  # type: ignore[no-untyped-def]
        started.append(1)
        return start(self)

    monkeypatch.setattr(pool.Pool, "_start", counted)
    options = RunOptions(timeout=60.0, jobs=1, user_paths=(str(crashy.root),))
    job = Job("ops:Good", load_file(crashy.root / "specs/good.yaml")[0])
    with pool.Pool(options) as workers:
        results, errors = run_job(job, options, pool=workers)
    assert not errors and [r.status.value for r in results] == ["pass", "pass"], errors
    assert len(started) == 2  # one worker per case: the first retired after its case


def test_a_broken_cuda_context_is_told_apart_from_a_working_one():
    from types import SimpleNamespace

    from gradverify.run.worker import device_unusable

    def torch_with(initialized: bool, synchronize):  # type: ignore[no-untyped-def]
        return SimpleNamespace(cuda=SimpleNamespace(is_initialized=lambda: initialized,
                                                    synchronize=synchronize))

    def broken() -> None:
        raise RuntimeError("CUDA error: device-side assert triggered\nCUDA kernel errors ...")

    assert device_unusable(torch_with(False, broken)) is None  # CUDA never used
    assert device_unusable(torch_with(True, lambda: None)) is None
    assert device_unusable(torch_with(True, broken)) == (
        "RuntimeError: CUDA error: device-side assert triggered")
