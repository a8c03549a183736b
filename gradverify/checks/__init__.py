"""The check registry: explicit, in run order. Importing it does not import torch."""
from __future__ import annotations

from gradverify.checks import (contract, determinism, gradcheck, gradgradcheck, layout, lint,
                               mutation, needs_input_grad, saved_tensors, undefined_grad)
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
        lint.CHECK,
    )
}
"""Every check by name, in the order they run."""
