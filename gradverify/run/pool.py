"""Worker processes: a case that segfaults, aborts or hangs becomes that case's error.

The parent never imports torch. Each worker is a fresh interpreter (``gradverify.run.worker``,
talking over a socket pair in the messages of ``run/messages.py``) that imports the targets,
runs one case at a time and sends back its frozen ``CaseResult``. One worker starts before the
parent reads any spec, so its torch import overlaps with the parent's own work; the others once
the number of cases is known. A worker that dies is replaced; one that exceeds ``--timeout`` on
a case is killed and replaced (its start has a deadline of its own, ``START_DEADLINE``). Worker
output (user prints, native crash messages) goes to a log file, so it never mixes into the
report; the tail of it is quoted when a worker crashes.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import wait

from gradverify.choices import cores, worker_count
from gradverify.discover import Plan
from gradverify.errors import interrupt_signal, shown_path
from gradverify.options import RunOptions
from gradverify.results import ErrorEntry
from gradverify.run import caches, leftovers, messages, processes
from gradverify.run import worker as worker_process
from gradverify.run.clock import RunningClock
from gradverify.run.output import last_lines
from gradverify.run.tasks import (
    MUTANTS,
    SHRINKING,
    Task,
    TaskOutcome,
    TaskOutcomes,
    TasksInterrupted,
    crashed,
    died,
    ended,
    lost,
    mark_interrupted,
    mutants_apart,
    timed_out,
)
from gradverify.run.worker_handle import Worker, kill, reap, receive
from gradverify.targets.names import TargetName

_CLOSED_GRACE = 2.0
"""Seconds a worker whose connection closed may take to exit (a crash) before it is stopped."""
START_DEADLINE = 180.0
"""Seconds a worker may take to start (a fresh Python importing torch and gradverify, until
it says ``Ready``), apart from the per-case ``--timeout``: on a loaded CI runner torch's import
alone can take tens of seconds, and a case's limit starts when the case starts. A worker that
misses it is GV018 (no worker could start), never a case's timeout (GV009)."""
IMPORT_DEADLINE = 120.0
"""Seconds one target's import may take while targets are discovered, where no ``--timeout``
is given (with one, that timeout, never less than ``IMPORT_FLOOR``): a module that hangs on
import is told apart from a slow one."""
IMPORT_FLOOR = 10.0
"""The least an import is given, whatever ``--timeout`` says: a tiny ``--timeout`` bounds
cases, not imports (GV009, not GV003)."""


class Pool:
    """``jobs`` workers, started on demand, each running one case at a time: never more than
    the cases (``fit``) or a few per core (``options.worker_count``)."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.jobs = worker_count(max(1, options.jobs), max(1, options.jobs), cores())[0]
        self.timeout = options.timeout
        # an import is no case: bounded by --timeout where one is given, never below a floor
        # that any import takes (a tiny --timeout times out cases, not imports)
        self.import_deadline = max(options.timeout, IMPORT_FLOOR) if options.is_set("timeout") \
            else IMPORT_DEADLINE
        self.start_deadline = START_DEADLINE
        self.workers: list[Worker] = []
        self.versions: dict[str, str] = {}
        self.start_error: ErrorEntry | None = None
        """Why a worker did not start (GV018); the cases no started worker can run get it."""
        self._before = leftovers.descendants(os.getpid())
        self._jobs = 0
        self.clock = RunningClock()
        """Time limits count the time this process ran: not the time it was stopped."""
        self._cache = contextlib.ExitStack()
        self.cache = self._cache.enter_context(caches.compiler_cache())
        """The run's folder for its workers' compiler cache (None: the user's)."""

    def new_job_index(self) -> int:
        """A job index no task run in this pool had (the pytest plugin runs one job a call)."""
        self._jobs += 1
        return self._jobs

    def fit(self, cases: int) -> str | None:
        """Run ``cases`` cases with no more workers than they need; the note that says so when
        that lowers an explicit ``-j``."""
        self.jobs, note = worker_count(max(1, self.options.jobs), cases, cores())
        return None if self.options.jobs_auto or not cases else note

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        for worker in list(self.workers):
            # Idle workers hold nothing worth a graceful shutdown; tearing down an
            # interpreter with torch loaded takes most of a second. Whatever a worker started
            # (helper processes of a Function) is in its session and goes with it.
            kill(worker)
            worker.conn.close()
        # What a worker that died on its own left behind was adopted by this process (the
        # command line inherits orphans too): nothing outlives the run.
        leftovers.kill(sorted(leftovers.descendants(os.getpid()) - self._before))
        self._cache.close()
        self.clock.close()

    def prestart(self, count: int) -> None:
        """Start workers now, without waiting for them to import torch."""
        while len(self.workers) < min(count, self.jobs):
            self._start()

    def _start(self) -> Worker:
        threads = max(1, cores() // self.jobs) if self.jobs > 1 else 0
        process, conn, output = worker_process.spawn(threads, self.cache)
        worker = Worker(process, conn, output, self.clock.now())
        self.workers.append(worker)
        return worker

    def _alive(self, worker: Worker) -> bool:
        return not processes.exited(worker.process)

    def _await_ready(self, worker: Worker) -> bool:
        """Whether the worker has started, waiting up to its start deadline (not the case
        timeout); one that did not is retired and becomes ``start_error``."""
        if worker.ready:
            return True
        message = receive(worker, worker.spawned + self.start_deadline - self.clock.now())
        if not isinstance(message, messages.Ready):
            self.start_error = self._not_started(worker)
            return False
        worker.ready = True
        self.versions["torch"] = message.torch_version
        return True

    def _not_started(self, worker: Worker) -> ErrorEntry:
        try:
            worker.process.wait(timeout=2)
            how = f"{ended(worker.process.returncode)} while starting"
        except subprocess.TimeoutExpired:
            how = f"did not start within {self.start_deadline:g} s"
        kill(worker)
        self._retire(worker)
        return ErrorEntry(None, None, "GV018",
                          f"a worker process (a fresh Python that imports torch and gradverify "
                          f"to run the cases) {how}{last_lines(worker.output)}; the "
                          "cases it was to run did not run. Check that `python -c \"import "
                          "torch, gradverify\"` works in this environment (the interpreter "
                          f"{shown_path(sys.executable)})")

    def discover(self, plan: Plan) -> Plan:
        """Targets that need importing are discovered in a worker, not here. The worker says
        which target it is importing: one whose import ends or hangs the worker is that
        target's error (exit 3), and the targets after it are discovered in a fresh worker."""
        if not plan.deferred:
            return plan
        found = Plan(jobs=list(plan.jobs), errors=list(plan.errors), notes=list(plan.notes))
        remaining = list(plan.deferred)
        while remaining:
            # a prestarted worker (already importing torch) if there is one; it then runs cases
            idle = [w for w in self.workers if w.task is None and self._alive(w)]
            worker = idle[0] if idle else self._start()
            if not self._await_ready(worker) and self.start_error is not None:
                found.errors.append(self.start_error)  # no target's fault: none is blamed
                break
            worker.conn.send(messages.Discover(Plan(deferred=remaining, config=plan.config,
                                                    spec_file=plan.spec_file)))
            current = None
            while True:
                message = receive(worker, self.import_deadline)
                if isinstance(message, messages.Discovering):
                    # what the targets before it found, then the next target's name
                    found.jobs += message.jobs
                    found.errors += message.errors
                    found.notes += message.notes
                    current = message.target or current
                    continue
                if isinstance(message, messages.Planned):
                    remaining = []
                else:  # died, or hung: the target being imported is the cause
                    culprit = next((n for n in remaining if n.text == current), remaining[0])
                    found.errors.append(self._import_crash(worker, culprit))
                    remaining = remaining[remaining.index(culprit) + 1:]
                break
        return found

    def _import_crash(self, worker: Worker, target: TargetName) -> ErrorEntry:
        """A worker died (or hung) while importing ``target``: an import failure of that
        target (exit 3), with how it ended."""
        try:
            worker.process.wait(timeout=2)
            how = ended(worker.process.returncode)
        except subprocess.TimeoutExpired:
            how = f"did not finish within {self.import_deadline:g} s"
        kill(worker)
        self._retire(worker)
        module = target.module or target.text
        return ErrorEntry(target.text, None, "GV003",
                          f"importing {module} {how}: the module ends or hangs the process "
                          "when imported (os._exit, a native abort, a wait)"
                          + last_lines(worker.output))

    def run(self, tasks: list[Task],
            progress: Callable[[int, int, str], None] | None) -> TaskOutcomes:
        """Every task's outcome. On an interrupt (SIGINT, SIGTERM, SIGHUP) the workers are
        stopped and ``TasksInterrupted`` raised, with what finished and the rest as interrupted
        errors."""
        outcomes: TaskOutcomes = {}
        try:
            return self._run(tasks, progress, outcomes)
        except KeyboardInterrupt as exc:
            self.stop()
            raise TasksInterrupted(mark_interrupted(tasks, outcomes, exc),
                                   interrupt_signal(exc)) from exc
        except BaseException:
            self._abandon()
            raise

    def _abandon(self) -> None:
        """Stop the workers still running a task of a run that ended by an exception (a bug
        of ours): the pool outlives the run (the pytest plugin runs one per target), and a
        worker left busy would be waited on by the next run for a result of the old one."""
        for worker in [w for w in self.workers if w.task is not None]:
            kill(worker)
            self._retire(worker)

    def stop(self, grace: float = 2.0) -> None:
        """Terminate every worker, then kill those still alive after ``grace`` seconds (and
        whatever they started)."""
        for worker in self.workers:
            if self._alive(worker):
                worker.process.terminate()
        deadline = time.monotonic() + grace
        for worker in list(self.workers):
            try:
                worker.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            kill(worker)
            self._retire(worker)

    def _run(self, tasks: list[Task], progress: Callable[[int, int, str], None] | None,
             outcomes: TaskOutcomes) -> TaskOutcomes:
        if not tasks:
            return outcomes
        pending = deque(tasks)
        done = 0
        # Start the workers together: each spends its first second or two importing torch.
        alive = [w for w in self.workers if self._alive(w)]
        # (after a worker could not start, none more: the same environment would fail again)
        fresh = [self._start() for _ in range(min(self.jobs, len(tasks)) - len(alive))] \
            if self.start_error is None else []
        for worker in alive + fresh:
            self._await_ready(worker)
        while pending or any(w.task for w in self.workers):
            if self.start_error is not None and not any(w.ready for w in self.workers):
                while pending:  # no worker could start: the cases left cannot run
                    outcomes[pending.popleft().index] = None, [self.start_error]
                    done += 1
            done += self._assign(pending, outcomes, done, len(tasks), progress)
            if pending and len(self.workers) < self.jobs and self.start_error is None:
                self._await_ready(self._start())
                continue
            busy = [w for w in self.workers if w.task is not None]
            if not busy:
                continue
            deadline = min(w.started + self.timeout for w in busy)
            if any(w.closed is not None for w in busy):
                deadline = min(deadline, self.clock.now() + 0.1)
            # A dead worker's socket reads as end-of-file, so waiting on the sockets alone
            # also notices crashes.
            open_conns = [w.conn for w in busy if w.closed is None]
            wait(open_conns, timeout=max(0.0, deadline - self.clock.now())) if open_conns \
                else time.sleep(max(0.0, deadline - self.clock.now()))
            for worker in busy:
                finished = self._poll(worker, outcomes)
                if finished:
                    done += 1
            if progress:
                progress(done, len(tasks), "")
        return outcomes

    def _assign(self, pending: deque[Task], outcomes: TaskOutcomes, done: int, total: int,
                progress: Callable[[int, int, str], None] | None) -> int:
        """Give each idle worker a pending task; how many tasks ended at once (their worker
        had died). A task whose worker did not start stays pending."""
        ended = 0
        for worker in [w for w in self.workers if w.task is None]:
            if not pending:
                break
            if not self._await_ready(worker):
                continue
            task = pending.popleft()
            if not self._alive(worker):
                outcomes[task.index] = self._crashed(worker, task)
                self._retire(worker)
                ended += 1
                continue
            # Sent before the worker counts as busy: a task that cannot be sent (it does not
            # pickle) leaves the worker idle, never waited on for a result it cannot send.
            worker.conn.send(messages.RunTask(task, self.options))
            worker.task, worker.started, worker.check = task, self.clock.now(), None
            worker.kept = None
            if progress:
                progress(done + ended, total, f"{task.job.target} {task.case}")
        return ended

    def _poll(self, worker: Worker, outcomes: TaskOutcomes) -> bool:
        """Handle what one busy worker did; True when its task is finished. Never blocks:
        messages already sent are read before any time limit is applied."""
        task = worker.task
        if task is None:
            return False
        if worker.closed is None:
            try:
                while worker.conn.poll():
                    message = worker.conn.recv()  # anything else is ignored
                    if isinstance(message, messages.CheckStarted):
                        worker.check, worker.kept = message.name, message.kept
                        if message.name in (MUTANTS, SHRINKING):  # a budget of their own
                            worker.started = self.clock.now()
                    elif isinstance(message, messages.TaskResult):
                        outcomes[task.index] = message.outcome
                        worker.task = None
                        if message.unusable:  # it exits: the next task gets a fresh worker
                            self._retire(worker)
                        return True
            except (EOFError, OSError, pickle.UnpicklingError):
                worker.closed = self.clock.now()
        if not self._alive(worker):
            outcomes[task.index] = self._crashed(worker, task)
            self._retire(worker)
            return True
        now = self.clock.now()
        if worker.closed is not None and now - worker.closed >= _CLOSED_GRACE:
            # Alive with its connection closed: user code closed the socket. No wait on it
            # may be longer than this.
            kill(worker)
            outcomes[task.index] = self._lost(worker, task)
            self._retire(worker)
            return True
        if now - worker.started >= self.timeout:
            kill(worker)
            outcomes[task.index] = self._timed_out(worker, task)
            self._retire(worker)
            return True
        return False

    def _retire(self, worker: Worker) -> None:
        worker.task = None
        processes.kill_group(worker.process)  # what the worker started goes with it
        worker.conn.close()
        if worker in self.workers:
            self.workers.remove(worker)

    def _lost(self, worker: Worker, task: Task) -> TaskOutcome:
        return self._kept(worker, "the process running them closed its connection to "
                                  "gradverify") \
            or lost(task, worker.check, last_lines(worker.output))

    def _crashed(self, worker: Worker, task: Task) -> TaskOutcome:
        reap(worker)
        return self._kept(worker, f"a mutant ended the process running them "
                                  f"({died(worker.process.returncode)})") \
            or crashed(task, worker.check, worker.process.returncode, last_lines(worker.output))

    def _timed_out(self, worker: Worker, task: Task) -> TaskOutcome:
        return self._kept(worker, f"they ran past the timeout ({self.timeout:g} s) and were "
                                  "stopped") \
            or timed_out(task, worker.check, self.timeout)

    @staticmethod
    def _kept(worker: Worker, why: str) -> TaskOutcome | None:
        """What stands of a task whose worker ended early: the outcome it sent before a phase
        that may end it (shrinking, the mutants: then ``why`` they were not judged)."""
        if worker.kept is None or worker.check != MUTANTS:
            return worker.kept
        return mutants_apart(worker.kept, f"not judged: {why}")
