"""The Python API: ``verify(FunctionClass or "mod:Class", spec=...) -> Report``."""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gradverify.config import Config
from gradverify.report.model import Report


def check_targets(targets: list[str], options: Any, *, config: Config,
                  spec_file: str | None = None, progress: Any = None) -> Report:
    """What ``gradverify check TARGET...`` does: discover, run, report."""
    from gradverify.discover import Discoverer
    from gradverify.runner import run
    from gradverify.target import ensure_cwd_on_path

    started = time.perf_counter()
    ensure_cwd_on_path()

    def discover(defer: bool) -> Any:
        discoverer = Discoverer(config, spec_file, defer_imports=defer)
        return discoverer.changed(targets) if options.changed else discoverer.run(targets)

    if not options.isolate:
        from gradverify import torchstate

        # On torch's defaults, with the verification functions bound before any user module
        # is imported; this process's own state is given back afterwards.
        with torchstate.isolated():
            return run(discover(False), options, progress)
    from gradverify.pool import Pool

    with Pool(options) as pool:
        pool.prestart(options.jobs)  # workers import torch while specs are read here
        return run(discover(True), options, progress, pool=pool, started=started)


def verify(function: Any, spec: str | Path | Mapping[str, Any] | Any = None, *,
           checks: Iterable[str] | None = None, skip: Iterable[str] = (), seed: int = 0,
           device: str = "cpu", mode: str = "auto", cases: Iterable[str] = (),
           strict: bool = False) -> Report:
    """Verify one Function and return the report (``report.ok``, ``report.raise_for_failures()``).

    ``function``: the Function class or ``"mod:Class"``. ``spec``: a spec file path, a mapping
    with the keys of the YAML format (``{"cases": [{"args": [{"shape": [3, 4]}]}]}``), a
    ``gradverify.spec.Spec``, or None (a spec under the spec folders naming the target, else
    inputs inferred from forward's signature). ``checks``: run only these.

    The checks run with torch's defaults (grad mode on, ...) whatever state the caller is in
    (inside ``torch.no_grad()``, say); the caller's state is given back afterwards.
    """
    from gradverify import torchstate

    with torchstate.isolated():
        return _verify(function, spec, checks=checks, skip=skip, seed=seed, device=device,
                       mode=mode, cases=cases, strict=strict)


def _verify(function: Any, spec: Any, *, checks: Iterable[str] | None, skip: Iterable[str],
            seed: int, device: str, mode: str, cases: Iterable[str], strict: bool) -> Report:
    from gradverify import config as config_mod
    from gradverify import specfile as spec_mod
    from gradverify.discover import Discoverer, Job, Plan
    from gradverify.errors import UsageError
    from gradverify.registry import unknown_check
    from gradverify.runner import run
    from gradverify.target import ensure_cwd_on_path, introspect, normalise
    from gradverify.tasks import RunOptions

    ensure_cwd_on_path()
    for name in [*(checks or ()), *skip]:
        if unknown_check(name):
            raise UsageError(unknown_check(name))
    options = RunOptions(seed=seed, device=device, mode=mode,
                         only=tuple(checks) if checks is not None else None, skip=tuple(skip),
                         cases=tuple(cases), strict=strict)
    config = config_mod.load()
    if isinstance(function, str):
        target, cls = function, None
    else:
        info = introspect(function)
        target, cls = normalise(info.target, function), function
    if spec is None:
        if cls is None:
            return run(Discoverer(config).run([target]), options)  # in-process: no deferral
        matched = [s for s in Discoverer(config).folder_specs() if s.target == target]
        resolved: Any = matched[0] if matched else None
    elif isinstance(spec, (str, Path)):
        specs = spec_mod.load_file(spec)
        resolved = next((s for s in specs if s.target in (None, target)), specs[0])
    elif isinstance(spec, Mapping):
        resolved = spec_mod.from_dict(spec)
    else:
        resolved = spec
    return run(Plan(jobs=[Job(target, resolved, cls)]), options)
