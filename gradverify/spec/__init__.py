"""The spec side: what a spec is (``model``), reading and validating spec files (``file``, on
``yamlio``), matching a case to forward's parameters (``binding``) and making its tensors
(``inputs``). Never imports torch (``inputs`` does, when it makes tensors).

``Spec``, ``from_dict`` and ``load_file`` are the public names: build a spec in Python without
YAML, or read one, for ``gradverify.verify(F, spec=...)``.
"""
from __future__ import annotations

from gradverify.spec.file import from_dict, load_file
from gradverify.spec.model import Case, Spec

__all__ = ["Case", "Spec", "from_dict", "load_file"]
