"""Reading spec files: YAML or JSON documents (``yamlio``) loaded by ``file`` and validated key
by key (``document``, with ``args`` and ``settings``) into the frozen dataclasses of
``gradverify.specmodel``, what a spec is. Never imports torch. Turning a case into call
arguments is ``gradverify.case``.

``Spec``, ``Case``, ``from_dict`` and ``load_file`` are the public names: build a spec in Python
without YAML, or read one, for ``gradverify.verify(F, spec=...)``. They are imported when asked
for, so that importing the package for one of its modules never imports the YAML reader.
"""
from __future__ import annotations

from typing import Any

__all__ = ["Case", "Spec", "from_dict", "load_file"]


def __getattr__(name: str) -> Any:
    if name in ("from_dict", "load_file"):
        from gradverify.spec import file

        return getattr(file, name)
    if name in ("Case", "Spec"):
        from gradverify import specmodel

        return getattr(specmodel, name)
    raise AttributeError(f"module 'gradverify.spec' has no attribute {name!r}")
