"""Tests that need a newer torch than the one installed skip, saying which they need."""
from __future__ import annotations

import pytest

from gradverify import torchcompat


def require(version: tuple[int, ...], what: str, *, module: bool = False) -> None:
    """Skip the calling test (or, with ``module``, the whole test module) on an older torch."""
    reason = torchcompat.too_old(version)
    if reason:
        pytest.skip(f"{what}: need {reason}", allow_module_level=module)


def require_custom_ops(*, module: bool = False) -> None:
    require(torchcompat.CUSTOM_OPS_TORCH, "custom ops (torch.library.custom_op, opcheck)",
            module=module)


def require_test_ops(*, module: bool = False) -> None:
    """The test modules' own custom ops are written as users write them today: string
    annotations (``from __future__ import annotations``, refused by torch 2.4's infer_schema)
    and ``list[Tensor]`` (refused before torch 2.7)."""
    require((2, 7), "the test ops (string annotations, list[Tensor] in signatures)",
            module=module)


def at_least(*version: int) -> bool:
    return torchcompat.too_old(version) is None
