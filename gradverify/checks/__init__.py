"""The check registry: explicit, in run order. Importing it does not import torch."""
from __future__ import annotations

from gradverify.checks import (compile, contract, determinism, device, forward_ad, gradcheck,
                               gradgradcheck, layout, lint, mutation, needs_input_grad,
                               precision, reference, saved_tensors, undefined_grad, vmap)
from gradverify.checks.base import Check

REGISTRY: dict[str, Check] = {
    check.name: check
    for check in (
        contract.CHECK,
        gradcheck.CHECK,
        gradgradcheck.CHECK,
        needs_input_grad.CHECK,
        saved_tensors.CHECK,
        mutation.CHECK,
        undefined_grad.CHECK,
        determinism.CHECK,
        layout.CHECK,
        reference.CHECK,
        precision.CHECK,
        forward_ad.CHECK,
        vmap.CHECK,
        device.CHECK,
        compile.CHECK,
        lint.CHECK,
    )
}
"""Every check by name, in the order they run."""


def unknown_check(name: object) -> str | None:
    """The error message for a name that is not a check, or None when it is one."""
    from gradverify.errors import did_you_mean, one_of

    if name in REGISTRY:
        return None
    return f"unknown check {name!r}{did_you_mean(str(name), REGISTRY)}; {one_of(REGISTRY)}"
