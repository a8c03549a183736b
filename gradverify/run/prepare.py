"""A job made ready to run: its target imported and introspected, every case bound to forward's
parameters (all before any case runs, every binding error listed at once), its reference
resolved; and the spec inferred from forward's signature where no spec file names the target."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gradverify import torchcompat
from gradverify.case.binding import MAX_CASE_BYTES, Bound, bind, case_tensors
from gradverify.case.infer import infer_spec
from gradverify.discover import Job
from gradverify.errors import InputError, SpecError
from gradverify.results import ErrorEntry
from gradverify.run.tasks import Unsupported
from gradverify.specmodel import Spec
from gradverify.targets import Capability, Target, introspect, resolve, resolve_object
from gradverify.targets.module_calls import InitArgsError

if TYPE_CHECKING:
    from gradverify.options import RunOptions


@dataclass
class Prepared:
    info: Target
    spec: Spec
    bound: dict[str, Bound]
    reference: Any = None


def device_problem(device: str) -> str | None:
    """Why this machine cannot run on ``device`` (spelt right: ``choices.check_device``), or
    None. Asked where torch is imported (a worker, or an in-process run), never in the parent
    of workers."""
    import torch

    if not device.startswith("cuda"):
        return None
    if not torch.cuda.is_available():
        return (f"device {device!r}: CUDA is not available on this machine (torch "
                f"{torch.__version__}, torch.cuda.is_available() is False)")
    index = int(device.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        return (f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA "
                "device(s), numbered from 0")
    return None


def device_unavailable(spec: Spec | None, options: RunOptions) -> ErrorEntry | None:
    """GV024 (exit 2) when the device a spec's cases run on is not on this machine: the run's
    (``--device``, ``device =``), said once for the run, or the spec's ``device:``."""
    device = options.device_for(spec) if spec is not None else options.device
    problem = device_problem(device)
    if problem is None:
        return None
    if spec is not None and device != options.device:  # the spec's own
        return ErrorEntry(spec.target, spec.path, "GV024", f"{spec.where}: {problem}; "
                          "`--device cpu` runs it on the CPU", location=spec.location,
                          usage=True)
    return ErrorEntry(None, None, "GV024", problem, usage=True)


def prepare(job: Job) -> Prepared | ErrorEntry | Unsupported:
    """Import and introspect a job's target and bind every case (all before any runs)."""
    spec_path = job.spec.path if job.spec else None
    too_old = torchcompat.too_old(job.spec.requires_torch) if job.spec else None
    if job.spec is not None and too_old:
        return Unsupported(job.target, job.spec, too_old)
    introspected = _introspect(job)
    if isinstance(introspected, ErrorEntry):
        return introspected
    info, init_args = introspected
    refused = _init_args_refused(job, info, init_args)
    if refused is not None:
        return refused
    spec = job.spec or infer_spec(info)
    unbound: list[SpecError] = []
    try:
        bound = _bind_cases(spec, info, unbound)
        reference = _reference(spec)
    except InputError as exc:
        more = [e for e in unbound if e is not exc]
        return ErrorEntry(info.target, spec_path, exc.code, str(exc) + "".join(
            f"; and {e}" for e in more), location=exc.location)
    return Prepared(info, spec, bound, reference)


def _introspect(job: Job) -> tuple[Target, Mapping[str, Any]] | ErrorEntry:
    """The job's target imported and introspected, with the ``init_args`` it is built with."""
    try:
        imports, init_args = (job.spec.imports, job.spec.init_args) if job.spec else ((), {})
        init_args = job.init_args if job.init_args is not None else init_args
        info = introspect(job.cls, job.target, init_args) if job.cls is not None \
            else resolve(job.target, imports, init_args)
    except InputError as exc:
        if isinstance(exc, InitArgsError) and job.spec is not None and job.init_args is None:
            exc.where = f"{job.spec.where}: init_args"  # the spec's init_args are wrong
            exc.location = job.spec.location
        return ErrorEntry(job.target, job.spec.path if job.spec else None, exc.code, str(exc),
                          location=exc.location)
    return info, init_args


def _init_args_refused(job: Job, info: Target, init_args: Mapping[str, Any]) -> ErrorEntry | None:
    """``init_args`` for a target that is not built (not an nn.Module): an error."""
    if not init_args or info.has(Capability.PARAMETERS):
        return None
    where = f"{job.spec.where}: init_args: " if job.spec and job.init_args is None else ""
    return ErrorEntry(job.target, job.spec.path if job.spec else None, "GV002",
                      f"{where}init_args builds an nn.Module target; {job.target} is a "
                      f"{info.kind}, which is called as it is",
                      location=job.spec.location if where and job.spec else None)


def _bind_cases(spec: Spec, info: Target, unbound: list[SpecError]) -> dict[str, Bound]:
    """Every case bound; the binding errors of all cases go to ``unbound`` and the first is
    raised. A case too large for memory is an InputError at once."""
    bound: dict[str, Bound] = {}
    for case in spec.cases:
        try:
            bound[case.name] = bind(case, info, spec)
        except SpecError as exc:  # every case's errors, listed at once
            unbound += [exc, *exc.others]
            continue
        tensors = case_tensors(bound[case.name], case.dims)
        size = sum(n for _, _, n in tensors)
        if size > MAX_CASE_BYTES:
            name, shape, largest = max(tensors, key=lambda t: t[2])
            raise InputError(
                f"case {case.name!r} needs {size / 1024**3:.1f} GiB for its float64 inputs "
                f"(limit {MAX_CASE_BYTES / 1024**3:.0f} GiB), {largest / 1024**3:.1f} GiB "
                f"of it for {name!r} of shape {list(shape)}; gradient bugs show on small "
                "shapes", code="GV007", where=spec.location or spec.where)
    if unbound:
        raise unbound[0]
    return bound


def _reference(spec: Spec) -> Any:
    """The spec's ``reference`` function, resolved, or None."""
    if not spec.reference:
        return None
    reference = resolve_object(spec.reference)
    if not callable(reference):
        raise InputError(f"reference {spec.reference} is not callable", code="GV021",
                         where=spec.location or spec.where)
    return reference
