"""The report's formats (docs/contributing.md, "Add a report format"): every name ``--format``
takes (``formats.FORMATS``, read by the option table without importing a renderer), and each
format's renderer by that name (``registry.RENDERERS``). Importing this package imports
nothing: ``RENDERERS`` and ``Verbosity`` are loaded when asked for."""
from __future__ import annotations

from typing import Any

__all__ = ["RENDERERS", "Renderer", "Verbosity"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from gradverify.report import registry

        return getattr(registry, name)
    raise AttributeError(f"module 'gradverify.report' has no attribute {name!r}")
