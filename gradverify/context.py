"""What a check's ``run`` gets: the Function, the case, its inputs and the resolved settings."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gradverify.results import CheckResult
from gradverify.spec.inputs import Args, InputMaker, case_seed
from gradverify.spec.model import Case, ResolvedTolerance, Spec
from gradverify.target import FunctionInfo

if TYPE_CHECKING:
    import torch


@dataclass
class CheckContext:
    info: FunctionInfo
    spec: Spec
    case: Case
    maker: InputMaker
    tolerance: ResolvedTolerance
    """Every level resolved (``RunOptions.tolerance_for``)."""
    mode: str = "auto"
    """gradcheck mode requested: auto, slow or fast."""
    seed: int = 0
    device: str = "cpu"
    verbose: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    """The options of the check being run (``RunOptions.check_options``)."""
    results: dict[str, CheckResult] = field(default_factory=dict)
    """Results of the checks already run on this case, by name."""
    reference: Any = None
    """The spec's ``reference:`` function, resolved (None when the spec names none)."""
    smallest: bool = False
    """The smallest case of its spec: gradcheck adds a slow-mode run when it chose fast mode."""

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
    def location(self) -> str | None:
        return self.info.backward_location
