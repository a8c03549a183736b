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
from gradverify.specmodel import Case, ResolvedTolerance
from gradverify.targets import Capability, Target, kind_for
from gradverify.targets.names import parse_target

if TYPE_CHECKING:
    from gradverify.case.binding import Bound

MARKER = "# gradverify repro:"
"""The first line of every script written: the only files ``--repro`` writes over."""
COMPARISONS = {
    "gradcheck": "torch.autograd.gradcheck",
    "gradgradcheck": "torch.autograd.gradgradcheck",
}
"""The checks whose failure a bare torch call shows, and that call."""
WRITES = {
    "GV222": ("the tensors forward saved", "list(outs[0].grad_fn.saved_tensors)"),
    "GV223": ("its incoming gradients", "grads"),
}
"""mutation's codes a script shows by comparing values before and after backward: what
backward writes into, and the expression of those tensors in the script."""


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
    body = _body(check, finding.code, info, tolerance, reference)
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


_CALLED = """    args = inputs()
    out = call(*args)
    outs = [o for o in (out if isinstance(out, tuple) else (out,))
            if isinstance(o, torch.Tensor) and o.requires_grad]
    grads = [torch.ones_like(o) for o in outs]
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
"""
"""The start of a body that runs backward itself: the call, its outputs and the leaves."""

_REFERENCE = """    args = inputs()
    copies = [a.detach().clone().requires_grad_(a.requires_grad)
              if isinstance(a, torch.Tensor) else a for a in args]
    out, ref = call(*args), reference(*copies)
    outs = [o for o in (out if isinstance(out, tuple) else (out,))
            if isinstance(o, torch.Tensor) and o.requires_grad]
    refs = [r for r in (ref if isinstance(ref, tuple) else (ref,))
            if isinstance(r, torch.Tensor) and r.requires_grad]
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    copies = [a for a in copies if isinstance(a, torch.Tensor) and a.requires_grad]
"""
"""The start of a body that compares the call with the spec's reference on copies of the
inputs."""

_RELAID = """    def strided(g):  # every other element of a buffer twice as long
        buffer = torch.zeros(*g.shape[:-1], 2 * g.shape[-1], dtype=g.dtype)
        out = buffer[..., ::2]
        out.copy_(g)
        return out

    def transposed(g):  # the last two dims swapped in memory
        return g.transpose(-1, -2).contiguous().transpose(-1, -2) if g.dim() >= 2 else g

    def reversed_strides(g):  # every dim's order reversed in memory
        order = list(range(g.dim()))[::-1]
        return g.permute(order).contiguous().permute(order)

    LAYOUTS = {"every other element of a larger buffer": strided,
               "transposed in memory": transposed, "with reversed strides": reversed_strides}
"""
"""Incoming gradients with the same values in other memory, as the layout check makes them."""


def _body(check: str, code: str, info: Target, tolerance: ResolvedTolerance,
          reference: str | None = None) -> tuple[str, str] | None:
    """The body of the script's ``main()`` (``call`` stands for the callable), and what it
    compares; None for a finding bare torch cannot show."""
    target = repr(info.target)
    if check in COMPARISONS:
        comparison = COMPARISONS[check]
        seeded = "    torch.manual_seed(0)  # the random incoming gradients it draws\n" \
            if check == "gradgradcheck" else ""
        return f'''{seeded}    try:
        {comparison}(call, inputs(), eps={tolerance.eps!r}, atol={tolerance.atol!r},
            rtol={tolerance.rtol!r}, nondet_tol={tolerance.nondet_tol!r})
    except RuntimeError as exc:
        return "FAILED: {comparison} on " + {target} + ":\\n" + str(exc)
    print("ok: {comparison} passes")
    return None
''', f"bare {comparison}"
    if check == "contract":  # what autograd itself rejects of backward's result
        return _CALLED + f'''    try:
        torch.autograd.grad(outs, leaves, grads, allow_unused=True)
    except RuntimeError as exc:
        return "FAILED: autograd rejects the gradients backward of " + {target} + \\
            " returns:\\n" + str(exc)
    print("ok: autograd accepts backward's gradients")
    return None
''', "one backward through autograd"
    if check == "reference" and code in ("GV331", "GV332") and reference:
        return _REFERENCE + f'''    for k, (a, b) in enumerate(zip(outs, refs)):
        if not torch.allclose(a, b, rtol={tolerance.rtol!r}, atol={tolerance.atol!r}):
            return ("FAILED: output " + str(k) + " of " + {target} + " differs from the "
                    "reference's by " + str(float((a - b).abs().max())))
    torch.manual_seed(0)
    grads = [torch.randn_like(o) for o in outs]
    ours = torch.autograd.grad(outs, leaves, grads, allow_unused=True)
    theirs = torch.autograd.grad(refs, copies, grads, allow_unused=True)
    for k, (a, b) in enumerate(zip(ours, theirs)):
        a = torch.zeros_like(leaves[k]) if a is None else a
        b = torch.zeros_like(copies[k]) if b is None else b
        if not torch.allclose(a, b, rtol={tolerance.rtol!r}, atol={tolerance.atol!r}):
            return ("FAILED: the gradient of " + {target} + " for input " + str(k) + " differs "
                    "from autograd through the reference by " + str(float((a - b).abs().max())))
    print("ok: outputs and gradients equal the reference's")
    return None
''', "outputs and gradients against the reference's"
    if check == "layout" and code in ("GV253", "GV254"):
        return _CALLED + _RELAID + f'''    torch.manual_seed(0)
    grads = [torch.randn_like(o) for o in outs]
    contiguous = torch.autograd.grad(outs, leaves, grads, retain_graph=True, allow_unused=True)
    for how, relaid in LAYOUTS.items():
        try:
            other = torch.autograd.grad(outs, leaves, [relaid(g) for g in grads],
                                        retain_graph=True, allow_unused=True)
        except RuntimeError as exc:
            return ("FAILED: backward of " + {target} + " raised on an incoming gradient "
                    "with the same values " + how + ":\\n" + str(exc))
        for k, (a, b) in enumerate(zip(contiguous, other)):
            if (a is None) != (b is None) or a is not None and not torch.allclose(a, b):
                return ("FAILED: backward of " + {target} + " gives another gradient for "
                        "input " + str(k) + " when the incoming gradient, same values, is " + how)
    print("ok: backward gives the same gradients whatever the incoming gradient's layout")
    return None
''', "backward on incoming gradients laid out otherwise"
    if check != "mutation" or code not in WRITES or not info.has(Capability.CLASS_SOURCE):
        return None
    what, watched = WRITES[code]
    return _CALLED + f'''    watched = {watched}
    before = [t.detach().clone() for t in watched]
    torch.autograd.grad(outs, leaves, grads, retain_graph=True, allow_unused=True)
    changed = [k for k, (t, b) in enumerate(zip(watched, before)) if not torch.equal(t, b)]
    if changed:
        return ("FAILED: backward of " + {target} + " wrote into {what} in place "
                "(positions " + str(changed) + "): their values before and after differ")
    print("ok: backward leaves {what} unchanged")
    return None
''', "comparing values before and after backward"


def _callee(info: Target, imports: tuple[str, ...]) -> tuple[str, str] | None:
    """(the import lines, the expression of the callable), or None for a kind no plain call
    reaches (a module, keyword-only parameters)."""
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


call = {call}


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
