"""The Python API: ``verify(FunctionClass or "mod:Class", spec=...) -> Report``."""
from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gradverify import config, torchstate
from gradverify.config import Config
from gradverify.discover import Discoverer, Job, Plan, resolves_to
from gradverify.options import FLAGS, RunOptions
from gradverify.optiontable import KEYWORDS, keyword_given
from gradverify.report.registry import plain_text
from gradverify.results import Report
from gradverify.run import caches
from gradverify.run.pool import Pool
from gradverify.run.runner import run
from gradverify.spec import file as spec_mod
from gradverify.specmodel import Spec
from gradverify.syspath import ensure_cwd_on_path
from gradverify.targets import Capability, introspect, may_have, normalise
from gradverify.targets.names import parse_target

if TYPE_CHECKING:
    from gradverify.targets.names import TargetName


def check_targets(targets: Sequence[TargetName], options: RunOptions, *, config: Config,
                  spec_file: str | None = None, changed: Sequence[str] = (),
                  progress: Any = None) -> Report:
    """What ``gradverify check TARGET...`` does: discover, run, report. ``targets``: the
    TARGET arguments, parsed once (``parse_target``); with ``--changed``, the ``changed``
    files instead."""
    started = time.perf_counter()

    def discover(defer: bool) -> Any:
        discoverer = Discoverer(config, spec_file, defer_imports=defer)
        return discoverer.changed(list(changed)) if options.changed else discoverer.run(targets)

    if not options.isolate:
        ensure_cwd_on_path()  # only where user code is imported: workers do it for themselves
        # On torch's defaults, with the verification functions bound before any user module
        # is imported; this process's own state is given back afterwards. Discovery imports
        # the targets here, and an import may import torch's compiler, which makes its cache.
        with torchstate.isolated(), caches.in_this_process():
            return run(discover(False), options, progress)
    with Pool(options) as pool:
        # One worker imports torch while specs are read here; the others start once the
        # number of cases is known (no more workers than cases).
        pool.prestart(1)
        return run(discover(True), options, progress, pool=pool, started=started)


def verify(function: Any, spec: str | Path | Mapping[str, Any] | Any = None, *,
           checks: Iterable[str] | None = None, skip: Iterable[str] | None = None,
           seed: int | None = None, device: str | None = None, mode: str | None = None,
           cases: Iterable[str] = (), strict: bool | None = None, atol: float | None = None,
           rtol: float | None = None, eps: float | None = None,
           init_args: Mapping[str, Any] | None = None, mutate: bool | None = None,
           compose: bool | None = None) -> Report:
    """Verify one target and return the report (``report.ok``, ``report.raise_for_failures()``).

    ``function``: a Function class, a custom op, a plain function or an ``nn.Module`` class
    (built with ``init_args``, else the spec's), or its name (``"mod:Class"``, ``"ns::op"``).
    ``spec``: a spec file path, a mapping with the keys of the YAML format
    (``{"cases": [{"args": [{"shape": [3, 4]}]}]}``), a
    ``gradverify.spec.Spec``, or None (a spec under the spec folders naming the target, else
    inputs inferred from forward's signature). ``checks``: run only these. The other keywords
    are the command line's flags (``--skip``, ``--seed``, ...): as there, each one not given
    comes from ``[tool.gradverify]`` in the nearest pyproject.toml, else the default.
    ``mutate``: also the spec's mutation score (``report.mutants``, as ``--mutate``).
    ``compose``: also the costly composition checks (compile, autocast; as ``--compose``).

    The checks run with torch's defaults (grad mode on, ...) whatever state the caller is in
    (inside ``torch.no_grad()``, say); the caller's state is given back afterwards. Calls from
    several threads run one after another (torch's settings and ``sys.stdout`` are the
    process's), each with its own right verdict.
    """
    given = keyword_given({k: v for k, v in locals().items() if k in KEYWORDS})
    _check_spec_type(spec)
    loaded = config.load()
    options = RunOptions.from_config(loaded, **{k: v for k, v in given.items() if k in FLAGS})
    with torchstate.isolated():  # one call at a time: threads wait their turn
        ensure_cwd_on_path()
        return plain_text(_verify(function, spec, options, loaded, init_args))


def _check_spec_type(spec: Any) -> None:
    if spec is not None and not isinstance(spec, (str, Path, Mapping, Spec)):
        raise TypeError(f"verify(spec=...) takes a spec file's path, a mapping with the keys of "
                        f"the YAML format, a gradverify.spec.Spec or None, got "
                        f"{type(spec).__name__}")


def _verify(function: Any, spec: Any, options: RunOptions, config: Config,
            init_args: Mapping[str, Any] | None = None) -> Report:
    if isinstance(function, str):
        target, cls = function, None
    elif may_have(function, Capability.PARAMETERS):  # built when the run prepares it
        target, cls = normalise(function.__qualname__, function), function
    else:
        info = introspect(function)
        target, cls = normalise(info.target, function), function
    if spec is None:
        if cls is None and init_args is None:
            # in-process: no deferral
            return run(Discoverer(config).run([parse_target(target)]), options)
        matched = [s for s in Discoverer(config).folder_specs()
                   if s.target == target or (cls is not None and resolves_to(s, cls))]
        resolved: Any = matched[0] if matched else None
    elif isinstance(spec, (str, Path)):
        specs = spec_mod.load_file(spec)
        resolved = next((s for s in specs if s.target in (None, target)), specs[0])
    elif isinstance(spec, Mapping):
        resolved = spec_mod.from_dict(spec)
    else:
        resolved = spec
    return run(Plan(jobs=[Job(target, resolved, cls, init_args)]), options)
