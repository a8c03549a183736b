"""The check registry: explicit, in run order. Importing it does not import torch."""
from __future__ import annotations

from gradverify.checks import contract, gradcheck, gradgradcheck
from gradverify.checks.base import Check

REGISTRY: dict[str, Check] = {
    check.name: check
    for check in (
        contract.CHECK,
        gradcheck.CHECK,
        gradgradcheck.CHECK,
    )
}
"""Every check by name, in the order they run."""
