"""Value mutants: one returned gradient scaled by random per-element factors near 1, negated, or
permuted; for every kind of target, with or without backward's source (``install``: on the
target's own backward, else through an identity Function on the input)."""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

SCALE = 0.1
"""Factors are drawn from [1 - SCALE, 1 + SCALE]."""
CHANGES = {
    "scale": f"scaled by random factors in [{1 - SCALE:g}, {1 + SCALE:g}]",
    "negate": "negated",
    "permute": "permuted",
}


@dataclass
class ValueChange:
    """One change of the gradient of one input; ``hits`` counts the gradients it changed (none
    in a case where the input has no gradient: the mutant is not exercised there)."""

    change: str
    position: int
    name: str
    hits: int = 0
    uniform: list[bool] = field(default_factory=list)
    """Per gradient changed: all its elements were equal (a permutation changes nothing)."""
    scalar: list[bool] = field(default_factory=list)
    """Per gradient permuted: it was 0-d (no input can make a permutation of it change
    anything: the mutant is equivalent)."""

    @property
    def key(self) -> str:
        return f"value:{self.change}:{self.position}"

    @property
    def mutation(self) -> str:
        return f"gradient of {self.name!r} {CHANGES[self.change]}"

    def __call__(self, grad: Any) -> Any:
        import torch

        from gradverify.checks._tensors import is_inexact, is_strided

        if not isinstance(grad, torch.Tensor) or not is_strided(grad) or not is_inexact(grad) \
                or grad.numel() == 0:
            return grad
        self.hits += 1
        if self.change == "negate":
            return -grad
        generator = torch.Generator(device="cpu")
        generator.manual_seed(int.from_bytes(hashlib.sha256(self.key.encode()).digest()[:6],
                                             "little"))
        if self.change == "scale":
            factors = 1 + SCALE * (2 * torch.rand(grad.shape, generator=generator,
                                                  dtype=torch.float64) - 1)
            return grad * factors.to(device=grad.device, dtype=grad.real.dtype)
        flat = grad.reshape(-1)
        self.uniform.append(bool((flat == flat[0]).all()))
        self.scalar.append(grad.dim() == 0)
        order = torch.randperm(flat.numel(), generator=generator)
        if bool((order == torch.arange(flat.numel())).all()):  # never the identity
            order = order.roll(1)
        order = order.to(grad.device)
        return flat[order].reshape(grad.shape)

    def returning(self, backward: Callable[..., Any]) -> Callable[..., Any]:
        """``backward`` with its gradient for this input changed."""
        def mutant(*args: Any) -> Any:
            result = backward(*args)
            single = not isinstance(result, tuple)
            grads = [result] if single else list(result)
            if self.position < len(grads):
                grads[self.position] = self(grads[self.position])
            return grads[0] if single else tuple(grads)

        return mutant


def value_changes(names: list[str]) -> list[ValueChange]:
    """The value mutants of a target whose inputs are ``names`` (forward's, in order)."""
    return [ValueChange(change, position, name) for position, name in enumerate(names)
            for change in CHANGES]
