"""What a check's ``run`` gets: the Function, the case, its inputs and the resolved settings."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gradverify import torchcompat
from gradverify.case.inputs import Args, InputMaker, case_seed
from gradverify.results import Location, Status
from gradverify.specmodel import Case, ResolvedTolerance, Spec
from gradverify.targets import Capability, Target, location_of, registered_formula

if TYPE_CHECKING:
    import torch

    from gradverify.checks.base import Trait


def _nothing() -> Mapping[Any, Any]:
    return MappingProxyType({})


@dataclass(frozen=True)
class CheckContext:
    """Frozen: a check cannot change what the next one sees. The runner makes one per check
    (``dataclasses.replace`` with that check's ``options`` and ``mode``, and the verdicts so
    far); the results of earlier checks stay the runner's."""

    info: Target
    spec: Spec
    case: Case
    maker: InputMaker
    tolerance: ResolvedTolerance
    """Every level resolved (``RunOptions.tolerance_for``)."""
    mode: str = "auto"
    """The gradcheck mode of the check being run: auto, slow or fast (``RunOptions.mode_for``:
    a flag over the check's own option over ``mode =``)."""
    seed: int = 0
    device: str = "cpu"
    options: Mapping[str, Any] = field(default_factory=_nothing)
    """The options of the check being run (``RunOptions.check_options``), read-only."""
    earlier: Mapping[Trait, Status] = field(default_factory=_nothing, repr=False)
    """The status of the first check run on this case with each trait, read-only: checks ask
    through ``verdict``."""
    reference: Any = None
    """The spec's ``reference:`` function, resolved (None when the spec names none)."""
    computes_in: str | None = None
    """The narrower dtype the target computes in inside whatever it is handed (``float32``
    for a kernel that converts its loads): the spec's ``computes_in:``, else detected
    (``checks._computes``); None for float64 inside. float64 finite differences cannot judge
    such a target at float64's tolerances."""
    smallest: bool = False
    """The smallest case of its spec: gradcheck adds a slow-mode run when it chose fast mode."""
    first: bool = True
    """The first case of its target: what holds of the class alone is said there once."""
    found: dict[str, Location | None] = field(default_factory=dict, repr=False, compare=False)
    """What was found once for the case (``_inner``), shared by the contexts made from this
    one: a cache, never read by checks."""

    def verdict(self, trait: Trait) -> Status | None:
        """The status of this case's first earlier check with ``trait`` (``JUDGES_GRADIENT``:
        whether the gradient itself is right), or None when none ran: checks ask by what a
        check does, never by its name."""
        return self.earlier.get(trait)

    def args(self, role: str = "double") -> Args:
        """Fresh leaf copies of the case's arguments (``double`` or ``working`` dtype)."""
        return self.maker.args(role)

    def generator(self, salt: str) -> torch.Generator:
        """A generator seeded from (seed, target, case, salt): reproducible per check."""
        import torch

        generator = torch.Generator()
        generator.manual_seed(case_seed(self.seed, f"{self.info.target}/{salt}", self.case.name))
        return generator

    @property
    def location(self) -> Location | None:
        """Where a finding about gradients points: backward's ``def``; for a function or
        module, which has none, the backward of the custom Function it calls (if one), else
        its forward."""
        if self.info.backward_location is not None or self.info.has(Capability.OWN_AUTOGRAD):
            return self.info.backward_location
        return self._inner

    @property
    def _inner(self) -> Location | None:
        """For a function or module: where the backward of the one custom Function its graph
        holds is (else forward's ``def``), found once per case and target."""
        key = self.info.target
        if key not in self.found:
            self.found[key] = _inner_backward(self) or self.info.forward_location
        return self.found[key]

    @property
    def forward_location(self) -> Location | None:
        """Forward's ``def`` (an op's implementation): where a finding about outputs points."""
        return self.info.forward_location

    @property
    def backward_location(self) -> Location | None:
        """Backward's ``def`` (None for a target without one of its own)."""
        return self.info.backward_location


def _inner_backward(ctx: CheckContext) -> Location | None:
    """The ``def`` of backward of the only custom autograd.Function class in the graph of a
    call of a function or module target, or None (none, several, or the call raised)."""
    import torch


    try:
        out = ctx.info.function.apply(*ctx.args("double").values)
    except Exception:  # noqa: BLE001 -- user code: its errors are the checks' to report
        return None
    outs = out if isinstance(out, (tuple, list)) else (out,)
    pending: list[Any] = [o.grad_fn for o in outs if isinstance(o, torch.Tensor)]
    seen: set[int] = set()
    found: set[Any] = set()
    while pending and len(seen) < 10_000:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        forward_cls = getattr(node, "_forward_cls", None)
        if forward_cls is not None and registered_formula(node) is None \
                and not torchcompat.torch_internal(forward_cls):  # checkpoint's, cond's
            found.add(forward_cls)
        pending += [next_node for next_node, _ in node.next_functions]
    return location_of(next(iter(found)).backward) if len(found) == 1 else None
