"""``init``'s probes in bounded child processes (``gradverify.init.child``): a forward that
segfaults or deadlocks on a guessed shape costs its target the probe, never ``init`` itself.
The child drafts each target's spec in turn and says which one it is on; one that kills the
child or runs past ``PROBE_DEADLINE`` gets a spec with a TODO naming how the probe ended, and a
fresh child drafts the rest. A target the child cannot import (a module only the caller's
``sys.path`` reaches) is drafted in this process, as before."""
from __future__ import annotations

import json
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any

from gradverify.init.targets import Found
from gradverify.run import processes
from gradverify.run.pool import START_DEADLINE
from gradverify.run.processes import Process

PROBE_DEADLINE = 120.0
"""Seconds one target's probes may take in the child before it is stopped."""


def drafted(found: Sequence[Found], paths: Sequence[str | None],
            draft: Callable[[Found, str | None], Any],
            unprobed: Callable[[Found, str | None, str], Any],
            answered: Callable[[dict[str, Any]], Any],
            deadline: float | None = None) -> list[Any]:
    """The ``Written`` spec of each target, probed in child processes
    (``gradverify.init.child``). ``draft(found, path)`` drafts one in this process;
    ``unprobed(found, path, why)`` is the spec of a target whose probe ended the child (``why``:
    how); ``answered(fields)`` is a spec the child drafted. ``deadline``: the seconds each
    target's import and probe may take (``init --timeout``; None: ``PROBE_DEADLINE``)."""
    results: list[Any] = [None] * len(found)
    todo = list(range(len(found)))
    while todo:
        answers, stopped = _child([found[i] for i in todo], [paths[i] for i in todo],
                                  PROBE_DEADLINE if deadline is None else deadline)
        for k, answer in answers.items():
            i = todo[k]
            # the child could not import it: drafted here
            results[i] = draft(found[i], paths[i]) if answer is None else answered(answer)
        if stopped is None:
            break
        k, why = stopped
        results[todo[k]] = unprobed(found[todo[k]], paths[todo[k]], why)
        todo = todo[k + 1:]
    return results


def _child(found: Sequence[Found], paths: Sequence[str | None], probe_deadline: float
           ) -> tuple[dict[int, dict[str, Any] | None], tuple[int, str] | None]:
    """Run one child over the targets: what it answered (None for a target it could not
    import), and, when it stopped early, the index of the target it was on and how."""
    request = [{"target": f.info.target, "imports": list(f.imports), "path": p}
               for f, p in zip(found, paths)]
    process = processes.start("gradverify.init.child", stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    try:  # (the child reads it before anything else: json.loads(sys.stdin.read()))
        process.stdin.write(json.dumps(request).encode())
        process.stdin.close()
    except BrokenPipeError:  # it died at once: said as its end, as any other
        return {}, (0, _ended(process.wait()))
    answers: dict[int, dict[str, Any] | None] = {}
    # until the first "start" the child is importing torch: the start deadline of the case
    # workers, never a target's probe time (a loaded machine may take seconds)
    current, started, deadline = 0, False, time.monotonic() + START_DEADLINE
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while True:
            if not selector.select(max(0.0, deadline - time.monotonic())):
                _stop(process)
                if not started:
                    return answers, (current, "could not run: a fresh Python importing torch "
                                              f"did not start within {START_DEADLINE:g} s")
                return answers, (current, f"did not finish within {probe_deadline:g} s (a "
                                          "deadlock or a wait, or a very slow forward)")
            line = process.stdout.readline()
            if not line:
                code = process.wait()
                if len(answers) == len(found):
                    return answers, None
                return answers, (current, _ended(code))
            message = json.loads(line)
            if "start" in message:
                current, started = message["start"], True
                deadline = time.monotonic() + probe_deadline
            else:
                answers[message["done"]] = message.get("written")


def _ended(code: int) -> str:
    if code < 0:
        try:
            return f"killed the process (by {signal.Signals(-code).name})"
        except ValueError:
            return f"killed the process (by signal {-code})"
    return f"ended the process (exit status {code})"


def _stop(process: Process) -> None:
    processes.kill_group(process)
    process.wait()
