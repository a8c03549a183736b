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
