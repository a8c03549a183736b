"""The spec side: what a spec is (``model``), reading and validating spec files (``file``, with
``args`` and ``settings``, on ``yamlio``), matching a case to forward's parameters (``binding``)
and making its tensors (``inputs``). Never imports torch (``inputs`` does, when it makes
tensors).

``Spec``, ``Case``, ``from_dict`` and ``load_file`` are the public names: build a spec in Python
without YAML, or read one, for ``gradverify.verify(F, spec=...)``. They are imported when asked
for, so that importing ``spec.model`` (the bottom floor) never imports the YAML reader.
"""
from __future__ import annotations

from typing import Any

__all__ = ["Case", "Spec", "from_dict", "load_file"]


def __getattr__(name: str) -> Any:
    if name in ("from_dict", "load_file"):
        from gradverify.spec import file

        return getattr(file, name)
    if name in ("Case", "Spec"):
        from gradverify.spec import model

        return getattr(model, name)
    raise AttributeError(f"module 'gradverify.spec' has no attribute {name!r}")
