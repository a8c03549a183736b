"""The spool: what the recording processes append, one JSON line per call, read back as frozen
values once the recorded run has ended."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Observation:
    """One recorded call: the Function's target and each argument as ``describe`` wrote it."""

    target: str
    args: tuple[Mapping[str, Any], ...]
    grad_enabled: bool = True
    defaults: Mapping[str, int] = field(default_factory=dict)
    """The ints forward took by default in this call (a block size not passed)."""


@dataclass(frozen=True)
class Spool:
    """What the recording processes appended: the calls seen, in order of first appearance,
    and the targets called inside ``torch.compile`` regions (``"*"``: something was compiled)."""

    observations: tuple[Observation, ...]
    compiled: frozenset[str]


def read_spool(spool: Path) -> Spool:
    """Every observation in the spool folder, in order of first appearance, and the targets
    seen inside compiled regions."""
    observations: list[Observation] = []
    compiled: set[str] = set()
    for path in sorted(spool.glob("*.jsonl"), key=lambda p: p.stat().st_mtime):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a worker killed mid-line
            if "compiled" in entry:
                compiled.add(entry["compiled"])
            elif "target" in entry:
                observations.append(Observation(entry["target"], tuple(entry["args"]),
                                                entry.get("grad_enabled", True),
                                                entry.get("defaults", {})))
    return Spool(tuple(observations), frozenset(compiled))
