"""compile (opt-in, a composition): under ``torch.compile``, as users compile a model, with
the ``aot_eager`` backend (what Dynamo and AOTAutograd change) and the ``inductor`` backend
(generated code), outputs and gradients match eager. A finding names its backend.

A graph break is information, not a wrong gradient: Dynamo runs the Function in eager around it
(a Function that declares a ``jvp`` is one torch cannot trace). It is found with
``fullgraph=True`` and said as a note with Dynamo's reason; the run that is compared is the one
users get, ``fullgraph=False``. A backend this machine cannot run (inductor without a C++
compiler) is a note, never a failure.

A Function that writes into its input (``ctx.mark_dirty``) is called as users call it, on a
non-leaf: one made inside the compiled region and one handed in from outside it. When only
compiled code gets it wrong (torch 2.13 returns a silently wrong gradient for the second way),
the finding says which way breaks and that torch.compile is at fault, not the formula.

torch.func composed with torch.compile (``checks/_compiled.py``): ``compile(func.grad)`` and,
for a Function that declares a ``jvp``, ``compile(func.jvp)``, each against eager where eager
is right (GV354, GV355: torch.compile is at fault).

Opt-in because compiling takes seconds per Function (inductor most: it compiles C++; leave it
out with ``checks: {compile: {inductor: false}}``, bench/README.md says the cost): turn it
on with ``--compose`` (every composition check; ``compose: all`` in a spec), ``checks:
{compile: true}`` in a spec, ``--only compile``, or ``checks = { compile = true }`` in
pyproject.toml.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradverify import torchcompat
from gradverify.checks import _compiled
from gradverify.checks.base import Check, CheckOption, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Severity, Status
from gradverify.targets.model import Formula

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext


CODES = (
    Code("GV351", "compile-graph-break",
         "Dynamo cannot trace the Function in one graph: torch.compile runs it in eager "
         "around a graph break (a note).",
         "fullgraph=True refuses it; with the default fullgraph=False it runs, slower, and its "
         "gradients are the ones compared.",
         "def forward(ctx, x):\n    return torch.from_numpy(np.exp(x.numpy()))",
         "To compile it into the graph, remove the construct Dynamo's reason names."),
    Code("GV352", "compile-mismatch",
         "Compiled outputs or gradients differ from eager.",
         "The compiled model trains on different numbers than the eager one.",
         "", "Avoid Python state and data-dependent control flow in forward/backward."),
    Code("GV353", "compile-failed",
         "torch.compile failed for another reason than a graph break.",
         "The model cannot be compiled with this Function in it. A note instead where torch "
         "cannot run a backend here at all (inductor without a C++ compiler) or cannot "
         "compile a torch.func cell: nothing is compared there.", "",
         "Read the message; run TORCH_LOGS=+dynamo for details."),
    Code("GV354", "compile-func-grad-mismatch",
         "torch.compile(torch.func.grad(f)) gives another gradient than eager, where eager "
         "torch.func.grad and autograd agree: torch.compile is at fault, not the formula.",
         "Per-sample gradients or a functional training step, compiled, train on wrong "
         "numbers (torch 2.13 drops the custom backward of a forward that leaves torch "
         "through numpy: the gradient is zero; and it tells a backward gated on "
         "ctx.needs_input_grad that an input passed in beside intermediates needs no "
         "gradient: that input's is zero).",
         "def forward(x):\n    return torch.from_numpy(np.exp(x.detach().numpy()))",
         _compiled.FUNC_GRAD_FIX),
    Code("GV355", "compile-func-jvp-mismatch",
         "torch.compile(torch.func.jvp(f)) gives other tangents than eager torch.func.jvp, "
         "where eager agrees with finite differences: torch.compile is at fault, not the jvp.",
         "Compiled forward-mode code (jacfwd, Hessian-vector products) gets wrong numbers: "
         "torch 2.13 does not call a custom jvp under compile(func.jvp), it differentiates "
         "forward instead (a zero tangent for a forward that leaves torch through numpy).",
         "def forward(x):\n    return torch.from_numpy(np.sin(x.detach().numpy()))\n\n"
         "def jvp(ctx, t):\n    (x,) = ctx.saved_tensors\n    return t * x.cos()",
         _compiled.FUNC_JVP_FIX),
)


class CompileCheck(Check):
    name = "compile"
    default = False
    composition = True
    summary = "under torch.compile (aot_eager and inductor) it matches eager"
    codes = CODES
    options = (CheckOption("inductor", bool, "also compile with the inductor backend (default "
                           "true; false saves its C++ compilation: seconds per target, more on "
                           "a cold cache)"),)
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES, Trait.COMPARES_RUNS})

    def run(self, ctx: CheckContext) -> Outcome:
        import torch

        from gradverify.checks import _calls as calls

        args = ctx.args("double")
        probe = calls.apply(ctx.info, args)
        grads = (calls.random_grads(probe, ctx.generator("compile")) if probe.differentiable
                 else None)
        eager = calls.outputs_and_gradients(probe, grads, args.diff_positions)
        outcome = Outcome()
        # A mark_dirty Function writes into its input, so users call it on a non-leaf: one made
        # inside the compiled region, or one handed in from outside it. Both must match eager.
        formula = ctx.info.detail(Formula)
        ways = ["inside", "outside"] if formula and formula.uses_mark_dirty else ["leaf"]
        tensors = [v for v in args.values if isinstance(v, torch.Tensor)]
        device = str(tensors[0].device) if tensors else "cpu"
        ran = []
        for backend in _compiled.BACKENDS:
            if backend == "inductor" and ctx.options.get("inductor") is False:
                continue
            why = _compiled.unavailable(backend, device)
            if why is not None:
                outcome.add(_backend_unavailable(ctx, backend, why))
                continue
            with torchcompat.inductor_in_process():  # no compile threads left running
                if all(self._one_way(ctx, backend, way, grads, eager, outcome)
                       for way in ways):  # stops at the first way that cannot compile
                    ran.append(backend)
        # torch.func composed with torch.compile: what torch.func can use (setup_context)
        functional = formula is not None and formula.style == "setup_context"
        if functional and args.diff_positions and outcome.status is not Status.FAIL:
            cells = [("grad", lambda: _compiled.func_grad(ctx, grads, eager))]
            if formula is not None and formula.has_jvp:
                cells.append(("jvp", lambda: _compiled.func_jvp(ctx)))
            for what, cell in cells:  # each cell on its own: a finding names its cell
                found = cell()
                for finding in found:
                    outcome.add(finding)
                if any(f.severity is Severity.ERROR for f in found):
                    outcome.summary = f"compiled torch.func.{what} differs from eager"
        if outcome.status is Status.PASS:
            broke = any(f.code == "GV351" for f in outcome.findings)
            outcome.summary = (("compiled around a graph break" if broke
                                else "traced with fullgraph=True") + "; matches eager with "
                               + " and ".join(ran)
                               + (" (input made inside and outside the compiled region)"
                                  if len(ways) > 1 else ""))
        return outcome

    @staticmethod
    def _one_way(ctx: CheckContext, backend: str, way: str, grads: list[Any] | None,
                 eager: Any, outcome: Outcome) -> bool:
        """Compile with ``backend`` and run one way of calling; findings go to ``outcome``.
        False when compiling failed (the other ways would fail alike)."""
        import torch

        run = ctx.args("double")
        diff = run.diff_positions
        call = _compiled.Call(ctx.info.function, tuple(diff) if way == "inside" else ())
        given = [v.clone() if way == "outside" and isinstance(v, torch.Tensor) and v.requires_grad
                 else v for v in run.values]
        try:
            out = _compiled_call(ctx, backend, way, call, given, outcome)
        except Exception as exc:  # noqa: BLE001 -- Dynamo or user code
            _compile_failed(ctx, backend, way, exc, outcome)
            return False
        outs = list(out) if isinstance(out, tuple) else [out]
        got_grads = _compiled.gradients(outs, grads, [run.values[i] for i in diff])
        ours = ([o.detach() if isinstance(o, torch.Tensor) else o for o in outs], got_grads)
        _against_eager(ctx, backend, way, ours, eager, [run.names[i] for i in diff], outcome)
        if outcome.status is Status.FAIL:
            outcome.summary = f"{_compiled_by(backend, way)}: differs from eager"
        return True


def _backend_unavailable(ctx: CheckContext, backend: str, why: str) -> Finding:
    """A note: this machine or torch cannot run ``backend`` at all, so it is not compared."""
    import torch

    return Finding("GV353", Severity.INFO,
                   f"torch.compile(backend={backend!r}) cannot run here (torch "
                   f"{torch.__version__}), so it is not compared: {why}",
                   location=ctx.forward_location,
                   hint=("inductor needs a C++ compiler on CPU (gcc or clang on PATH, or CXX) "
                         "and Triton on CUDA"))


def _compiled_call(ctx: CheckContext, backend: str, way: str, call: _compiled.Call,
                   given: list[Any], outcome: Outcome) -> Any:
    """The compiled call's outputs, as users get them. Compiled with ``fullgraph=True`` first
    (with the first backend: a graph break is Dynamo's, whatever the backend): a graph break
    there is a note (GV351, with Dynamo's reason), and the call is compiled again as users
    compile it (``fullgraph=False``: Dynamo runs the Function in eager around the break).
    Raises what the call users get raises."""
    import torch

    torchcompat.dynamo_reset()
    if backend == _compiled.BACKENDS[0]:
        try:
            return torch.compile(call, fullgraph=True, backend=backend)(*given)
        except Exception as exc:
            # Dynamo's Unsupported is a graph break; its UserError is one too under fullgraph
            # (a guard on a data-dependent value such as `.item()` in control flow).
            if not torchcompat.is_graph_break(exc):
                raise
            outcome.add(Finding(
                "GV351", Severity.INFO,
                f"Dynamo cannot trace it in one graph{_WAYS[way]}: {_compiled.reason(exc)}; "
                "torch.compile runs it in eager around a graph break (fullgraph=True refuses "
                "it)", location=ctx.forward_location, hint=_compiled.hint(exc)))
        torchcompat.dynamo_reset()
    return torch.compile(call, backend=backend)(*given)


def _compile_failed(ctx: CheckContext, backend: str, way: str, exc: Exception,
                    outcome: Outcome) -> None:
    """Calling the compiled Function raised, even around a graph break (GV353). Where the
    first backend compiled it and a later one (inductor) raises, that backend cannot compile
    it on this torch: a note, as for a backend that cannot run here at all."""
    import torch

    compiled_before = not any(f.code == "GV353" and f.severity is Severity.ERROR
                              for f in outcome.findings)
    if backend != _compiled.BACKENDS[0] and compiled_before:
        outcome.add(Finding(
            "GV353", Severity.INFO,
            f"torch.compile(backend={backend!r}) cannot compile it{_WAYS[way]} on torch "
            f"{torch.__version__}, so it is not compared ({_compiled.BACKENDS[0]} could): "
            f"{_compiled.reason(exc)}", location=ctx.forward_location,
            hint=_compiled.hint(exc)))
        return
    outcome.add(Finding(
        "GV353", Severity.ERROR,
        f"torch.compile(backend={backend!r}) fails{_WAYS[way]}: {_compiled.reason(exc)}",
        location=ctx.forward_location, hint=_compiled.hint(exc)))
    outcome.summary = f"compile failed with {backend}"


def _against_eager(ctx: CheckContext, backend: str, way: str, ours: Any, eager: Any,
                   names: list[str], outcome: Outcome) -> None:
    """GV352 for each output or gradient of the compiled run that differs from eager. For a
    mark_dirty Function the finding blames torch.compile, not the formula; where only
    inductor differs, its hint names inductor's own random numbers."""
    from gradverify.checks import _compare as cmp

    eager_right = ctx.verdict(Trait.JUDGES_GRADIENT) is Status.PASS
    alone = backend != _compiled.BACKENDS[0] and not any(
        f.code == "GV352" for f in outcome.findings)
    for mismatch in cmp.compare_runs(ours, eager, names, 1e-7, 1e-9):
        if way == "leaf":
            message = f"{_compiled_by(backend, way)}: {mismatch.describe()} (against eager)"
            hint = ("forward or backward depends on something Dynamo treats as a constant "
                    "(Python state, data-dependent control flow, .item())")
            if alone:
                message += f"; {_compiled.BACKENDS[0]} matches eager"
                hint = f"{_compiled.RANDOM_HINT}; else, {hint}"
        else:
            message = (f"{_compiled_by(backend, way)}: {mismatch.describe()} (against eager"
                       f"{', which gradcheck verified' if eager_right else ''}): "
                       "torch.compile mishandles this in-place (mark_dirty) Function, not "
                       "its formula")
            hint = ("a known class of torch.compile bugs with mark_dirty (pytorch issues "
                    "133491, 184113): under compile, call it on a tensor made inside the "
                    "compiled region (clone it there), or keep it out of the region with "
                    "torch.compiler.disable")
        outcome.add(Finding("GV352", Severity.ERROR, message, input=mismatch.input,
                            output=mismatch.output, location=ctx.location, hint=hint,
                            data={**mismatch.data, "way": way, "backend": backend}))


def _compiled_by(backend: str, way: str) -> str:
    """``compiled (inductor)``, with the way of calling it: each finding names its backend."""
    return f"compiled ({backend}){_WAYS[way]}"


_WAYS = {"leaf": "", "inside": " (input made inside the compiled region)",
         "outside": " (input made outside the compiled region)"}


CHECK = CompileCheck()
