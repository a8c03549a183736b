"""A standalone script that reproduces a failure with bare torch only: the smallest case's
inputs as literal float64 values, the call of the target, and the comparison that shows the
failure: torch's own (``torch.autograd.gradcheck`` for gradcheck, ``gradgradcheck`` for
gradgradcheck), one backward through autograd (what it rejects of backward's result), or the
values before and after backward (mutation's writes into what backward must not change). The
script is run here before it is handed out: one that passes under bare torch (the finding comes
from gradverify's own probes) is not written, and the reason is said instead."""
from __future__ import annotations

import contextlib
import hashlib
import math
import os
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from gradverify.case.inputs import InputMaker, case_seed
from gradverify.results import Finding
from gradverify.run import repro_bodies as bodies
from gradverify.specmodel import Case, ResolvedTolerance
from gradverify.targets import Target, kind_for
from gradverify.targets.names import parse_target

if TYPE_CHECKING:
    from gradverify.case.binding import Bound

MARKER = "# gradverify repro:"
"""The first line of every script written: the only files ``--repro`` writes over."""
MAX_NAME = 120
"""Characters of a script's name at most (file systems take 255 bytes): a longer one keeps its
start and gets the suffix that makes it its own (``file_names``)."""


def file_name(target: str, case: str, check: str) -> str:
    """``<target>_<case>_<check>.py``, every character outside ``[A-Za-z0-9_-]`` as ``_``
    (``pkg.ops:Exp`` as ``pkg_ops_Exp``: two targets of one name in two modules differ)."""
    text = f"{target}_{case}_{check}"
    return "".join(c if c.isascii() and (c.isalnum() or c in "_-") else "_" for c in text) + ".py"


def file_names(keys: Iterable[tuple[str, str, str]]) -> dict[tuple[str, str, str], str]:
    """Each (target, case, check)'s script name, ``file_name`` where that is its own, else
    with a stable suffix of its own (``a.b:C`` and ``a_b:C`` both read ``a_b_C``): no script
    ever replaces another's."""
    found = list(dict.fromkeys(keys))
    plain = {key: file_name(*key) for key in found}
    # compared without case: on macOS's and Windows' file systems Foo and foo are one file
    taken = Counter(name.casefold() for name in plain.values())
    return {key: name if taken[name.casefold()] == 1 and len(name) <= MAX_NAME else
            f"{name[:-3][:MAX_NAME - 12]}-{hashlib.sha1(repr(key).encode()).hexdigest()[:8]}.py"
            for key, name in plain.items()}


def script(check: str, finding: Finding, info: Target, imports: tuple[str, ...], case: Case,
           bound: Bound, seed: int, tolerance: ResolvedTolerance, device: str,
           reference: str | None = None) -> tuple[str | None, str | None]:
    """The script that reproduces ``finding`` of ``check`` on ``case`` under bare torch, or
    (None, why there is none); ``reference``: the spec's ``reference:``, for that check."""
    body = bodies.body(check, finding.code, info, tolerance, reference)
    if body is None:
        return None, f"no bare-torch repro for {check}" + (
            f" {finding.code}" if check == "mutation" else "")
    callee = _callee(info, imports)
    if callee is None:
        return None, f"no bare-torch repro for a {info.kind} target"
    if check == "reference" and reference:
        callee = (callee[0] + _imported(reference, "reference"), callee[1])
    if info.writes_inputs:  # bare torch refuses in-place writes into leaves that need grad
        return None, "no bare-torch repro for a target that writes into its inputs"
    maker = InputMaker(case, bound, info, case_seed(seed, info.target, case.name), device)
    args = maker.args("double")
    values = [_literal(v, i in args.diff_positions) for i, v in enumerate(args.values)]
    if any(v is None for v in values) or any(n is not None for n in maker.groups):
        return None, "no bare-torch repro: an input cannot be written as a literal"
    text = _text(check, finding, info, case, callee, list(zip(args.names, values)), body[0])
    failure = _run(text)
    if failure is None:
        return None, (f"no bare-torch repro: {body[1]} passes under bare torch on the smallest "
                      f"case ({finding.code} comes from gradverify's own comparisons)")
    return text, None


def _callee(info: Target, imports: tuple[str, ...]) -> tuple[str, str] | None:
    """(the import lines, the source that binds ``call``), or None where no plain call
    reaches the target (keyword-only parameters, a module built from what is no literal)."""
    if any(p.kind in ("keyword_only", "var_keyword") for p in info.params):
        return None
    name, kind = parse_target(info.target), kind_for(info)
    if name.named:
        call = kind.bare_call(info, None)
        return None if call is None else (
            _root_line() + "sys.path.insert(0, ROOT)\n"
            + "".join(f"import {module}\n" for module in imports), call)
    module, _, attr = info.target.rpartition(":")
    call = kind.bare_call(info, attr) if module and attr else None
    if call is None:
        return None
    head = attr.split(".")[0]
    if module.endswith(".py") or "/" in module or os.sep in module:
        path = os.path.relpath(os.path.abspath(module))
        lines = ("import importlib.util\n\n" + _root_line() +
                 f"_spec = importlib.util.spec_from_file_location({_stem(path)!r}, "
                 f"os.path.join(ROOT, {path!r}))\n"
                 "_module = importlib.util.module_from_spec(_spec)\n"
                 "_spec.loader.exec_module(_module)\n"
                 f"{head} = _module.{head}\n")
    else:
        lines = (_root_line() + "sys.path.insert(0, ROOT)\n"
                 f"from {module} import {head}\n")
    return lines, call


ROOT_LINE = "ROOT = "
"""How the line naming the folder gradverify ran in starts: absolute as the worker writes it
(``_root_line``), made relative to the script where it is written (``placed``)."""


def _root_line() -> str:
    return f"{ROOT_LINE}{os.getcwd()!r}  # the folder gradverify ran in\n"


def placed(script: str, folder: str, ran_in: str) -> str:
    """``script`` as written into ``folder``: the folder gradverify ran in (``ran_in``) named
    relative to the script's own, so that no local path leaks into a bug report and the script
    runs from any directory, and wherever the project goes with it."""
    try:
        relative = os.path.relpath(ran_in, folder)
    except ValueError:  # another drive: only the absolute path reaches it
        return script
    lines = script.splitlines(keepends=True)
    for i, line in enumerate(lines):
        if line.startswith(ROOT_LINE):
            lines[i] = (f"{ROOT_LINE}os.path.normpath(os.path.join(os.path.dirname("
                        f"os.path.abspath(__file__)), {relative!r}))  # the folder gradverify "
                        "ran in, from this script's\n")
    return "".join(lines)


def _imported(name: str, bound: str) -> str:
    """The lines that import ``mod:attr`` (or ``file.py:attr``) as ``bound``, from ``ROOT``."""
    module, _, attr = name.rpartition(":")
    head, _, rest = attr.partition(".")
    if module.endswith(".py") or "/" in module or os.sep in module:
        path = os.path.relpath(os.path.abspath(module))
        return ("import importlib.util\n\n"
                f"_ref_spec = importlib.util.spec_from_file_location({_stem(path)!r}, "
                f"os.path.join(ROOT, {path!r}))\n"
                "_ref_module = importlib.util.module_from_spec(_ref_spec)\n"
                "_ref_spec.loader.exec_module(_ref_module)\n"
                f"{bound} = _ref_module.{attr}\n")
    return f"from {module} import {head} as _reference_head\n" \
        f"{bound} = _reference_head{'.' + rest if rest else ''}\n"


def _stem(path: str) -> str:
    return os.path.splitext(os.path.basename(path))[0]


def _literal(value: Any, requires_grad: bool) -> str | None:
    """Python source that makes ``value`` (None when there is none with bare torch)."""
    import torch

    if isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor or value.layout != torch.strided \
                or value.is_quantized:
            return None
        dtype = str(value.dtype)
        grad = ", requires_grad=True" if requires_grad else ""
        device = f", device={str(value.device)!r}" if value.device.type != "cpu" else ""
        return f"torch.tensor({_number(value.detach().cpu().tolist())}, dtype={dtype}" \
               f"{device}{grad})"
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, (float, complex)):
        return _number(value)
    if isinstance(value, (tuple, list)):
        items = [_literal(v, False) for v in value]
        if any(i is None for i in items):
            return None
        inner = ", ".join(str(i) for i in items)
        return f"({inner},)" if isinstance(value, tuple) else f"[{inner}]"
    return None


def _number(value: Any) -> str:
    """Nested lists of numbers as source that reads back the same values (nan, inf too)."""
    if isinstance(value, list):
        return "[" + ", ".join(_number(v) for v in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, complex):
        return f"complex({_number(value.real)}, {_number(value.imag)})"
    return repr(value)


def _text(check: str, finding: Finding, info: Target, case: Case, callee: tuple[str, str],
          inputs: list[tuple[str, str | None]], body: str) -> str:
    imports, call = callee
    message = _comment(finding.message)
    values = "".join(f"        {value},  # {_comment(name)}\n" for name, value in inputs)
    spec_case = "\n".join(f"#   {line}" for line in _case_lines(case))
    header = f"{MARKER} {finding.code} ({check}) on {_comment(info.target)}, case " \
        f"{_comment(case.name)}"
    return f'''{header}
# {message}
# It exits 1, printing the failure, while the bug is there; 0 once it is fixed.
# Bare torch only: gradverify is not needed to run it. The case, as a spec case:
{spec_case}
import os
import sys

import torch

{imports}

def inputs():
    return (
{values}    )


{call}

def main():
{body}

if __name__ == "__main__":
    sys.exit(main())
'''


def _case_lines(case: Case) -> list[str]:
    from gradverify.run.shrink import case_yaml

    return [_comment(line) for line in case_yaml(case).splitlines()]


def _comment(text: str) -> str:
    """``text`` safe on one comment line."""
    return "".join(c if c.isprintable() else "?" for c in text)


def _run(text: str) -> str | None:
    """Run the script here: its failure (the message ``main`` returns, or the exception it
    raises: the script then ends with that traceback), or None when it passes or cannot even
    get to ``main`` (the import, the inputs)."""
    import torch

    namespace: dict[str, Any] = {"__name__": "gradverify_repro"}
    with _kept_path(), torch.random.fork_rng(devices=[]), \
            contextlib.redirect_stdout(sys.stderr):
        try:
            exec(compile(text, "<gradverify repro>", "exec"), namespace)
        except Exception:  # noqa: BLE001 -- the user's module raised when imported: no script
            return None
        try:
            result = namespace["main"]()
        except Exception as exc:  # noqa: BLE001 -- the user's code raised: what it shows
            return f"raised {type(exc).__name__}: {exc}"
    return result if isinstance(result, str) else None


@contextlib.contextmanager
def _kept_path() -> Iterator[None]:
    saved = list(sys.path)
    try:
        yield
    finally:
        sys.path[:] = saved
