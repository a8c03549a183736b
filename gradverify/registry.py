"""The check registry: every check in run order, and every finding code, collected from the
checks as pytest collects hook specs. A new check is one module under ``gradverify/checks/`` (its
``CHECK`` and ``CODES``) plus one line here. Importing this module does not import torch."""
from __future__ import annotations

from dataclasses import replace

from gradverify.checks import (
    autocast,
    checkpoint,
    compile,
    contract,
    determinism,
    device,
    forward_ad,
    func,
    gradcheck,
    gradgradcheck,
    layout,
    lint,
    mutation,
    needs_input_grad,
    op_aot_dispatch,
    op_autograd_registration,
    op_fake,
    op_schema,
    placement,
    precision,
    reference,
    saved_hooks,
    saved_tensors,
    tiles,
    undefined_grad,
    vmap,
)
from gradverify.checks.base import Check
from gradverify.codes import GENERAL, Code
from gradverify.errors import did_you_mean, one_of

REGISTRY: dict[str, Check] = {
    check.name: check
    for check in (
        contract.CHECK,
        op_schema.CHECK,
        op_autograd_registration.CHECK,
        op_fake.CHECK,
        op_aot_dispatch.CHECK,
        gradcheck.CHECK,
        gradgradcheck.CHECK,
        needs_input_grad.CHECK,
        saved_tensors.CHECK,
        mutation.CHECK,
        undefined_grad.CHECK,
        determinism.CHECK,
        layout.CHECK,
        reference.CHECK,
        tiles.CHECK,
        precision.CHECK,
        forward_ad.CHECK,
        vmap.CHECK,
        func.CHECK,
        checkpoint.CHECK,
        saved_hooks.CHECK,
        placement.CHECK,
        device.CHECK,
        compile.CHECK,
        autocast.CHECK,
        lint.CHECK,
    )
}
"""Every check by name, in the order they run."""


def _collect() -> dict[str, Code]:
    codes: dict[str, Code] = {}
    owned: list[tuple[str | None, Code]] = [(None, c) for c in GENERAL]
    owned += [(name, c) for name, check in REGISTRY.items() for c in check.codes]
    for owner, code in sorted(owned, key=lambda pair: pair[1].code):
        if code.code in codes:
            raise RuntimeError(f"{code.code} is declared twice")  # caught by the test suite
        codes[code.code] = replace(code, check=owner)
    return codes


CODES: dict[str, Code] = _collect()
"""Every finding code, in code order, each with the check that reports it."""

BY_NAME: dict[str, Code] = {c.name: c for c in CODES.values()}


def unknown_check(name: object) -> str | None:
    """The error message for a name that is not a check, or None when it is one."""
    if name in REGISTRY:
        return None
    return f"unknown check {name!r}{did_you_mean(str(name), REGISTRY)}; {one_of(REGISTRY)}"
