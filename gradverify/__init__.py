"""gradverify: verify custom torch.autograd.Function subclasses.

Importing this package does not import torch; ``verify`` does, when called.
"""
from __future__ import annotations

from typing import Any

from gradverify._version import __version__

__all__ = ["Report", "VerificationFailed", "__version__", "record", "verify"]


def __getattr__(name: str) -> Any:
    # Lazy so that `gradverify --help`, `explain` and spec validation stay torch-free.
    if name == "verify":
        from gradverify.api import verify

        return verify
    if name == "record":
        from gradverify.recording.capture import record

        return record
    if name in ("Report", "VerificationFailed"):
        from gradverify import results

        return getattr(results, name)
    raise AttributeError(f"module 'gradverify' has no attribute {name!r}")
