"""JSON report, schema 2 (docs/ci.md, the formats): a plain dump of the data model, every field
of it (``tests/formats_test.py`` checks that none is left out). Schema 2 added each finding's
``evidence`` (its Jacobian blocks and traceback) and took the text heatmap and the ``-v``-only
blocks out of ``data``: the JSON no longer changes with ``-v``."""
from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from gradverify.report.interface import Verbosity
from gradverify.report.text import advice, said
from gradverify.results import CaseResult, CheckResult, Evidence, Finding, Smallest
from gradverify.scores import MutantLine, MutationScore

if TYPE_CHECKING:
    from gradverify.results import Location, Report

SCHEMA = 2


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become strings (strict JSON has no such numbers)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _location(location: Location | None) -> str | None:
    """``file:line``, as every text format prints it."""
    return str(location) if location else None


def _data(f: Finding) -> dict[str, Any]:
    """A finding's numbers, with what refused float64 where schema 2 has always had it."""
    refused = {} if f.refuses_float64 is None else {"refuses_float64": f.refuses_float64}
    return {**f.data, **refused}


def _finding(f: Finding) -> dict[str, Any]:
    return {"code": f.code, "severity": f.severity.value, "message": said(f), "input": f.input,
            "output": f.output, "hint": advice(f), "location": _location(f.location),
            "data": _clean(_data(f)), "pattern": f.pattern,
            "refuses_float64": f.refuses_float64, "consequence_of": f.consequence_of,
            "declared": None if f.declared is None else {"check": f.declared.check,
                                                         "reason": f.declared.reason},
            "suspect": f.suspect,
            "smallest": _smallest(f.smallest), "evidence": _evidence(f.evidence)}


def _evidence(e: Evidence) -> dict[str, Any]:
    return {"blocks": [{"output": b.output, "input": b.input,
                        "analytical": _clean(b.analytical), "numerical": _clean(b.numerical),
                        "rows": [list(r) for r in b.rows], "cols": [list(c) for c in b.cols],
                        "projected": b.projected, "truncated": b.truncated}
                       for b in e.blocks],
            "traceback": e.traceback}


def _smallest(s: Smallest | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"case": s.case, "name": s.name, "tried": s.tried, "repro": s.repro,
            "no_repro": s.no_repro,
            "shapes": [{"name": name, "shape": list(shape)} for name, shape in s.shapes]}


def _check(c: CheckResult) -> dict[str, Any]:
    return {"name": c.name, "status": c.status.value, "duration_s": round(c.duration_s, 4),
            "mode": c.mode, "summary": c.summary, "expect": c.expect,
            "findings": [_finding(f) for f in c.findings], "data": _clean(dict(c.data))}


def _case(r: CaseResult) -> dict[str, Any]:
    return {"target": r.target, "spec": r.spec, "case": r.case, "status": r.status.value,
            "duration_s": round(r.duration_s, 4), "inferred": r.inferred,
            "inputs": [{"name": i.name, "kind": i.kind,
                        "shape": list(i.shape) if i.shape is not None else None,
                        "dtype": i.dtype, "requires_grad": i.requires_grad} for i in r.inputs],
            # every row a report shows, as before; the names of those about the case as a whole
            "checks": [_check(c) for c in r.rows],
            "about_case": [c.name for c in r.about_case],
            # what the case did to each mutant; a run merges them into `mutants`, so a report's
            # cases carry none
            "mutants": [{"key": m.key, "mutation": m.mutation, "location": _place(m.location),
                         "verdict": m.verdict, "killed_by": m.killed_by,
                         "data": _clean(dict(m.data))} for m in r.mutants],
            # why they were not judged: one ended or hung the process running them
            "mutants_not_judged": r.mutants_not_judged}


def _place(location: Location | None) -> dict[str, Any] | None:
    """A mutant's place, as the mutation score's JSON gives it: ``{"file", "line"}``."""
    return {"file": location.file, "line": location.line} if location else None


def _mutants(score: MutationScore) -> dict[str, Any]:
    def listed(lines: tuple[MutantLine, ...]) -> list[dict[str, Any]]:
        return [{"mutation": m.mutation, "location": _place(m.location), "why": m.why,
                 "larger": m.larger, "gap": m.gap} for m in lines]

    return {"target": score.target, "spec": score.spec, "total": score.total,
            "killed": score.killed, "survived": listed(score.survived),
            "equivalent": listed(score.equivalent), "unexecuted": listed(score.unexecuted),
            "note": score.note}


def to_dict(report: Report) -> dict[str, Any]:
    counts = report.counts()
    return {
        "schema": SCHEMA,
        "gradverify": report.versions.get("gradverify"),
        "torch": report.versions.get("torch"),
        "python": report.versions.get("python"),
        "triton": report.versions.get("triton"),
        "settings": {"device": report.settings.device, "seed": report.settings.seed,
                     "mode": report.settings.mode, "strict": report.settings.strict,
                     "empty_ok": report.settings.empty_ok},
        "summary": {"cases": len(report.results), **counts,
                    "exit_code": int(report.exit_code), "duration_s": round(report.duration_s, 4)},
        "results": [_case(r) for r in report.results],
        "errors": [{"target": e.target, "spec": e.spec, "code": e.code, "message": e.message,
                    "internal": e.internal, "usage": e.usage, "location": _location(e.location)}
                   for e in report.errors],
        "notes": list(report.notes),
        "mutants": [_mutants(score) for score in report.mutants],
    }


class Json:
    """Every field of the report, whatever ``-q``/``-v`` say: a program reads it and picks."""

    reads_verbosity = False

    def render(self, report: Report, verbosity: Verbosity = Verbosity.NORMAL) -> str:
        return json.dumps(to_dict(report), indent=2) + "\n"
