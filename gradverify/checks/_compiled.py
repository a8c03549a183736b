"""The compile check's cells beyond one compiled call: which backends this machine can run, and
torch.compile of the torch.func transforms (``func.grad``, ``func.jvp``) against eager. Each
cell returns what it found as findings; which codes mean what is the check's (checks/compile.py).

A cell judges torch.compile only where eager is right: compiled ``func.grad`` against eager
autograd where eager ``func.grad`` agrees with it, compiled ``func.jvp`` against eager
``func.jvp`` where that agrees with finite differences. A torch that cannot compile a cell is a
note, never a failure.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from gradverify import torchcompat
from gradverify.results import Finding, Severity

if TYPE_CHECKING:
    from gradverify.case.context import CheckContext

BACKENDS = ("aot_eager", "inductor")
"""The backends each call is compiled with: aot_eager (torch's autograd graphs run eagerly:
what Dynamo and AOTAutograd change) and inductor (generated code: C++ on CPU, Triton on CUDA;
seconds per graph, a C++ compiler needed on CPU)."""

FUNC_GRAD_FIX = ("Keep the Function out of the compiled region (torch.compiler.disable), or "
                 "make its forward torch code (a torch.library.custom_op for the numpy part).")
FUNC_GRAD_MIXED_FIX = ("Keep the Function out of the compiled region (torch.compiler.disable). "
                       "Skipping the gradients ctx.needs_input_grad says are not needed is "
                       "right in eager (GV204), but here torch says an input passed in beside "
                       "intermediates needs none (pytorch#159299): where this torch must "
                       "compile torch.func.grad of it, compute every gradient in backward.")
FUNC_JVP_FIX = ("Keep the torch.func.jvp call (or the Function) out of the compiled region "
                "(torch.compiler.disable), or make forward torch code whose derivative is the "
                "jvp: compiled, torch differentiates forward itself.")
RANDOM_HINT = ("inductor draws random numbers with its own generator, not eager's: a forward "
               "that draws them (rand_like, dropout) differs from eager under one seed; set "
               "torch._inductor.config.fallback_random = True to draw eager's")


@functools.cache
def unavailable(backend: str, device: str) -> str | None:
    """Why torch.compile cannot run ``backend`` on ``device`` here (no C++ compiler, an old
    torch), tried once per process on a function of no Function's; None when it runs."""
    import torch

    if backend == "aot_eager":
        return None
    torchcompat.dynamo_reset()
    try:
        with torchcompat.inductor_in_process():
            torch.compile(_double, backend=backend)(torch.ones(2, device=device))
    except Exception as exc:  # noqa: BLE001 -- whatever keeps the backend from running
        return reason(exc)
    finally:
        torchcompat.dynamo_reset()
    return None


def _double(t: Any) -> Any:
    return t * 2


def func_grad(ctx: CheckContext, grads: list[Any] | None, eager: Any) -> list[Finding]:
    """``torch.compile(torch.func.grad(loss))``, as a compiled functional training step calls
    it, against eager autograd's gradients (``loss``: the outputs weighted by the same incoming
    gradients), in the cells of ``cells``: on the inputs themselves, on intermediates made of
    them (``x * 1``), and with one input passed in and the others made inside. Each is a call
    torch compiles differently: torch 2.13 gets only the first wrong for a numpy forward, runs an
    in-place forward only on the second, and tells a backward that computes only what
    ``ctx.needs_input_grad`` asks for that the input passed in beside intermediates needs no
    gradient (pytorch#159299): it comes back zero. A difference is the compiler's
    (GV354) only where eager ``torch.func.grad`` of the same cell agrees with autograd; a
    ``torch.func.grad`` that cannot run the Function (a numpy backward) leaves that cell with
    nothing to compare, as does no gradient to weigh by. Each input it gets wrong is a finding
    once, in the first cell it is wrong in."""
    import torch

    from gradverify.checks import _compare as cmp

    if grads is None:
        return []
    run = ctx.args("double")
    diff = run.diff_positions
    names = [run.names[i] for i in diff]
    argnums = tuple(range(len(diff)))

    def copies() -> list[Any]:
        """The inputs afresh for each call: a forward that writes into its input may have
        written even where torch.func then refused it."""
        return [run.values[i].detach().clone() for i in diff]

    found: list[Finding] = []
    for made in cells(len(diff)):
        loss = weighted_loss(ctx.info.function, list(run.values), diff, grads, made)
        try:
            functional = list(torch.func.grad(loss, argnums=argnums)(*copies()))
        except Exception:  # noqa: BLE001 -- torch.func cannot run this cell: nothing to compare
            # (a forward that writes into its input is refused on leaves, not on intermediates)
            continue
        if cmp.compare_runs(([], functional), ([], eager[1]), names, 1e-7, 1e-9):
            continue  # eager torch.func.grad already differs: not the compiler's doing
        way = cell_words(made, names)
        torchcompat.dynamo_reset()
        try:
            compiled = list(torch.compile(torch.func.grad(loss, argnums=argnums),
                                          backend="aot_eager")(*copies()))
        except Exception as exc:  # noqa: BLE001 -- this torch cannot compile it: not compared
            return [*found, _refused(ctx, f"torch.compile(torch.func.grad(f)){way}", exc)]
        said = {finding.input for finding in found}
        found += [Finding(
            "GV354", Severity.ERROR,
            f"torch.compile(torch.func.grad(f)){way} on torch {torch.__version__}: "
            f"{mismatch.describe()} (against eager, "
            "where autograd and torch.func.grad agree): torch.compile is at fault, not the "
            "formula", input=mismatch.input, location=ctx.location, data=dict(mismatch.data),
            hint=FUNC_GRAD_FIX if len(made) in (0, len(diff)) else FUNC_GRAD_MIXED_FIX)
            for mismatch in cmp.compare_runs(([], compiled), ([], eager[1]), names, 1e-7, 1e-9)
            if mismatch.input not in said]  # each input once, in the first cell it is wrong in
    return found


def cells(count: int) -> list[frozenset[int]]:
    """Which of ``count`` differentiable inputs each compiled ``func.grad`` call makes inside
    (the rest passed in as they are): none, all, then, where there are two or more, all but
    one, for each one in turn."""
    every = frozenset(range(count))
    mixed = [every - {kept} for kept in range(count)] if count > 1 else []
    return [frozenset(), every, *mixed]


def cell_words(made: frozenset[int], names: list[str]) -> str:
    """How a cell's inputs reach the Function, as a finding says it ("" for all passed in)."""
    if not made:
        return ""
    if len(made) == len(names):
        return " (inputs made inside it)"
    inside = ", ".join(repr(names[i]) for i in sorted(made))
    passed = ", ".join(repr(name) for i, name in enumerate(names) if i not in made)
    return f" ({inside} made inside it, {passed} passed in)"


def func_jvp(ctx: CheckContext) -> list[Finding]:
    """``torch.compile(lambda *x: torch.func.jvp(f, x, tangents))`` against eager
    ``torch.func.jvp``, for a Function that declares a ``jvp``. Judged only where eager is
    right (its tangents agree with central finite differences): a wrong ``jvp`` is the
    forward_ad check's, a compiled one that differs from a right eager one is torch.compile's
    (GV355: torch 2.13 differentiates forward instead of calling the jvp)."""
    import torch

    from gradverify.checks import _compare as cmp

    run = ctx.args("double")
    diff = run.diff_positions
    inputs = tuple(run.values[i].detach() for i in diff)
    generator = ctx.generator("compile-jvp")
    tangents = tuple(torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)
                     for x in inputs)
    f = _outputs_of(ctx.info.function, list(run.values), diff)
    try:
        eager = list(torch.func.jvp(f, inputs, tangents)[1])
    except Exception:  # noqa: BLE001 -- torch.func cannot run its jvp: forward_ad's to say
        return []
    if not _agrees_with_differences(f, inputs, tangents, eager):
        return []  # eager jvp is wrong: the forward_ad check's finding, not the compiler's
    torchcompat.dynamo_reset()
    try:
        compiled = list(torch.compile(lambda *xs: torch.func.jvp(f, xs, tangents),
                                      backend="aot_eager")(*inputs)[1])
    except Exception as exc:  # noqa: BLE001 -- this torch cannot compile it: not compared
        return [_refused(ctx, "torch.compile(torch.func.jvp(f))", exc)]
    return [Finding(
        "GV355", Severity.ERROR,
        f"torch.compile(torch.func.jvp(f)) on torch {torch.__version__}: the tangent of "
        f"{mismatch.describe()} (against eager torch.func.jvp, which agrees with finite "
        "differences): torch.compile does not use the Function's jvp; torch is at fault, not "
        "the jvp", output=mismatch.output, location=ctx.location, data=dict(mismatch.data),
        hint=FUNC_JVP_FIX)
        for mismatch in cmp.compare_runs((compiled, []), (eager, []), [], 1e-7, 1e-9)]


def _agrees_with_differences(f: Any, inputs: tuple[Any, ...], tangents: tuple[Any, ...],
                             eager: list[Any]) -> bool:
    """Whether eager jvp's tangents equal ``(f(x + h t) - f(x - h t)) / 2h`` (float64)."""
    import torch

    h = 1e-6
    with torch.no_grad():
        ahead = f(*(x + h * t for x, t in zip(inputs, tangents)))
        behind = f(*(x - h * t for x, t in zip(inputs, tangents)))
    return all(torch.allclose((a - b) / (2 * h), e, rtol=1e-4, atol=1e-6)
               for a, b, e in zip(ahead, behind, eager))


def _outputs_of(function: Any, values: list[Any], diff: list[int]) -> Any:
    """``f(*tensors)``: the Function's floating outputs, with the tensors at ``diff`` passed
    in (torch.func.jvp takes tensors in and out)."""
    import torch

    def f(*tensors: Any) -> tuple[Any, ...]:
        called = list(values)
        for position, tensor in zip(diff, tensors):
            called[position] = tensor
        out = function.apply(*called)
        outs = out if isinstance(out, tuple) else (out,)
        return tuple(o for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point())

    return f


def weighted_loss(function: Any, values: list[Any], diff: list[int], grads: list[Any],
                  made: frozenset[int]) -> Any:
    """``loss(*tensors)``: the sum of the outputs weighted by ``grads``, with the tensors at
    ``diff`` passed in as they are, those at the indices ``made`` (into ``diff``) as
    intermediates (``t * 1``, as a model hands them on)."""
    import torch

    def loss(*tensors: Any) -> Any:
        called = list(values)
        for index, (position, tensor) in enumerate(zip(diff, tensors)):
            called[position] = tensor * 1 if index in made else tensor
        out = function.apply(*called)
        outs = out if isinstance(out, tuple) else (out,)
        terms = [(o * g.to(o.dtype)).sum() for o, g in zip(outs, grads)
                 if isinstance(o, torch.Tensor) and isinstance(g, torch.Tensor)]
        return torch.stack(terms).sum()

    return loss


def _refused(ctx: CheckContext, what: str, exc: Exception) -> Finding:
    """A note: this torch cannot compile the cell, so it is not compared (GV353)."""
    import torch

    return Finding("GV353", Severity.INFO,
                   f"{what} fails on torch {torch.__version__}, so it is not compared: "
                   f"{reason(exc)}", location=ctx.forward_location, hint=hint(exc))


def gradients(outs: list[Any], grads: list[Any] | None, leaves: list[Any]) -> list[Any]:
    """The compiled run's gradients for the differentiable inputs ``leaves``, through
    autograd as a user gets them; empty when no output carries a gradient."""
    import torch

    tensors = [(o, g) for o, g in zip(outs, grads or [], strict=False)
               if isinstance(o, torch.Tensor) and o.requires_grad and g is not None]
    if not tensors:
        return []
    return list(torch.autograd.grad([o for o, _ in tensors], leaves, [g for _, g in tensors],
                                    allow_unused=True))


class Call:
    """A named callable, so Dynamo's messages point at the Function; the arguments at
    ``clone`` (those that require grad) are cloned first, inside the compiled region. Which
    they are is decided outside it: Dynamo before torch 2.5 cannot trace
    ``getattr(tensor, "requires_grad")`` and would report a graph break that is gradverify's."""

    def __init__(self, cls: Any, clone: tuple[int, ...] = ()) -> None:
        self.cls = cls
        self.clone = clone

    def __call__(self, *args: Any) -> Any:
        args = tuple(a.clone() if i in self.clone else a for i, a in enumerate(args))
        return self.cls.apply(*args)


def reason(exc: BaseException) -> str:
    """The first line of torch's message, with the line it introduces (``backend='aot_eager'
    raised:`` is followed by the error itself) and Dynamo's explanation, if any."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    explanation = next((line for line in lines if line.startswith("Explanation:")), None)
    head = f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    return f"{head} ({explanation.removeprefix('Explanation:').strip()})" if explanation else head


LOCALE_HINT = ("torch.compile reads its own source files in the locale's encoding, and this "
               "locale's is not UTF-8 (as under LC_ALL=C): run under a UTF-8 locale "
               "(LC_ALL=C.UTF-8) or with PYTHONUTF8=1")
"""The hint of a failure that is the locale's, not the Function's (torch's inductor opens its
templates without an encoding)."""


def hint(exc: BaseException) -> str:
    if "UnicodeDecodeError" in str(exc) or isinstance(exc.__cause__, UnicodeDecodeError):
        return LOCALE_HINT
    return "Dynamo must trace forward and backward; see the reason, or run " \
           "TORCH_LOGS=graph_breaks for details"
