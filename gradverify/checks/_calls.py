"""Applying a Function and calling backward: through the engine, or ``Function.backward`` raw;
random incoming gradients; the user's frame in a traceback. Imported only from inside a check's
``run`` (it imports torch)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from gradverify import frames
from gradverify.case.inputs import Args
from gradverify.checks._tensors import is_inexact, layout_copy, version
from gradverify.checks.base import Outcome
from gradverify.results import Location
from gradverify.targets import Target, kind_for
from gradverify.targets.model import Formula


@dataclass
class Applied:
    """One call of ``Function.apply`` and what came out."""

    args: Args
    """The arguments passed (leaf tensors; the Function may have seen clones of them)."""
    outputs: list[Any]
    single: bool
    """forward returned one value rather than a tuple."""
    seen: list[Any] = field(default_factory=list)
    """The values forward was given: ``args``' own, or copies of them (``protect_inputs``)."""

    def named_inputs(self) -> dict[str, torch.Tensor]:
        """The tensors forward was given, by the arguments' names."""
        return {self.args.names[i]: v for i, v in enumerate(self.seen or self.args.values)
                if isinstance(v, torch.Tensor)}

    @property
    def tensors(self) -> list[tuple[int, torch.Tensor]]:
        return [(j, o) for j, o in enumerate(self.outputs) if isinstance(o, torch.Tensor)]

    @property
    def differentiable(self) -> list[int]:
        """Indices of outputs that carry gradients (floating, requiring grad)."""
        return [j for j, o in self.tensors if o.requires_grad]

    @property
    def node(self) -> Any:
        """The call's autograd node (a Function's backward ``ctx``): the ``grad_fn`` of its
        differentiable outputs. (Not the check's context, which the checks call ``ctx``.)"""
        for j in self.differentiable:
            fn = self.outputs[j].grad_fn
            if fn is not None:
                return fn
        return None


def apply(info: Target, args: Args, *, protect_inputs: bool = True) -> Applied:
    """Call ``info.function.apply``. With ``protect_inputs``, a target that declares it writes into
    its inputs (``mark_dirty``, an op's ``mutates_args``) sees copies in the same layout, so
    the caller's tensors stay intact and every run compared starts from the same values
    (docs/checks.md, ``mutation``)."""
    values = list(args.values)
    if protect_inputs and info.writes_inputs:
        values = [layout_copy(v) if isinstance(v, torch.Tensor) else v for v in values]
    out = info.function.apply(*values)
    if isinstance(out, tuple):
        return Applied(args, list(out), single=False, seen=values)
    return Applied(args, [out], single=True, seen=values)


@dataclass(frozen=True)
class NothingToDifferentiate:
    """Why a case has no gradient to check, for the checks that need one."""

    reason: str
    verifies_nothing: bool
    """The case could have had a gradient (no input requires grad, or a floating output is
    not differentiable): gradcheck then says the case verifies nothing (GV013). False for an
    integer-valued Function, which has no gradient to check."""

    def skip(self) -> Outcome:
        return Outcome.skip(self.reason)


def differentiable_call(ctx: Any, role: str = "double") -> Applied | NothingToDifferentiate:
    """Apply on fresh float64 arguments (``role``: or in the working dtype), differentiable
    inputs requiring grad; or, when there is nothing to differentiate, why."""
    args = ctx.args(role)
    if not args.diff_positions:
        return NothingToDifferentiate("no input requires grad", verifies_nothing=True)
    applied = apply(ctx.info, args)
    # (an output requiring grad may have no graph node: a function's input returned as is)
    if not applied.differentiable:
        floating = [j for j, o in applied.tensors if is_inexact(o)]
        if floating:
            return NothingToDifferentiate(
                f"no output is differentiable, although output {floating[0]} is a floating "
                "tensor (every output marked non-differentiable, or grad mode off)",
                verifies_nothing=True)
        return NothingToDifferentiate("no output is differentiable (every output is an integer "
                                      "tensor or not a tensor)", verifies_nothing=False)
    return applied


@dataclass
class DifferentiableView:
    """A case as the gradient checks see it: a function of the differentiable inputs alone
    (the rest held fixed), those inputs, their names, and one call's differentiable outputs."""

    fn: Callable[..., tuple[torch.Tensor, ...]]
    inputs: list[torch.Tensor]
    names: list[str]
    outputs: list[torch.Tensor]
    applied: Applied
    """The call that produced ``outputs`` (its graph leads back to ``applied.args``)."""

    @property
    def leaves(self) -> list[torch.Tensor]:
        """The leaves ``outputs`` were computed from, in the order of ``inputs``."""
        return [self.applied.args.values[i] for i in self.applied.args.diff_positions]


def differentiable_view(ctx: Any) -> DifferentiableView | NothingToDifferentiate:
    """The differentiable view of a case shared by gradcheck, gradgradcheck and forward_ad; or,
    when there is nothing to differentiate, why."""
    applied = differentiable_call(ctx)
    if isinstance(applied, NothingToDifferentiate):
        return applied
    args, diff, out_idx = applied.args, applied.args.diff_positions, applied.differentiable
    fresh = ctx.args("double")  # untouched by that call (a forward may write into its input)
    fn = tensor_function(ctx.info, fresh, diff, out_idx)
    inputs = [fresh.values[i].detach().requires_grad_(True) for i in diff]
    outs = [applied.outputs[j] for j in out_idx]
    return DifferentiableView(fn, inputs, [args.names[i] for i in diff], outs, applied)


def random_grads(applied: Applied, generator: torch.Generator, *,
                 requires_grad: bool = False) -> list[torch.Tensor | None]:
    """What the engine passes backward: a gradient per output (random for differentiable
    outputs, zeros for non-differentiable tensor outputs, None for non-tensor outputs)."""
    grads: list[torch.Tensor | None] = []
    diff = set(applied.differentiable)
    for j, out in enumerate(applied.outputs):
        if not isinstance(out, torch.Tensor):
            grads.append(None)
        elif j in diff:
            g = randn_like(out, generator)
            grads.append(g.requires_grad_(requires_grad))
        else:
            grads.append(torch.zeros_like(out))
    return grads


def randn_like(t: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    g = torch.randn(t.shape, generator=generator, dtype=torch.float64)
    if t.is_complex():
        g = torch.complex(g, torch.randn(t.shape, generator=generator, dtype=torch.float64))
    return g.to(dtype=t.dtype, device=t.device)


def no_own_backward(info: Target, applied: Applied) -> str | None:
    """Why backward cannot be called raw on this call's graph, or None: its kind's answer
    (``Kind.no_raw_backward``: a custom op whose autograd kernel was written by hand)."""
    return kind_for(info).no_raw_backward(info, applied.node)


def runs_in_working_dtype(ctx: Any, *, backward: bool = False) -> bool:
    """Whether the target runs on the case's working-dtype inputs, where those differ from the
    float64 copies (``backward``: backward too, through the engine on random gradients): a
    kernel without float64 support, when the float64 call raised."""
    working = ctx.args("working")
    if [i.dtype for i in working.info()] == [i.dtype for i in ctx.args("double").info()]:
        return False
    try:
        if not backward:
            apply(ctx.info, working)
            return True
        applied = differentiable_call(ctx, "working")
        if isinstance(applied, NothingToDifferentiate):
            return False
        engine_grads(applied, random_grads(applied, ctx.generator("working")),
                     applied.args.diff_positions)
    except KeyboardInterrupt:
        raise
    except BaseException:  # noqa: BLE001 -- user code, sys.exit() included
        return False
    return True


def raw_backward(info: Target, applied: Applied, grads: Sequence[Any]) -> tuple[Any, ...]:
    """backward's own return value, before the engine validates, casts or sums it.
    Grad mode is off, as the engine runs backward without create_graph."""
    with torch.no_grad():
        result = info.function.backward(applied.node, *grads)
    return result if isinstance(result, tuple) else (result,)


def engine_grads(applied: Applied, grads: Sequence[Any], positions: Sequence[int], *,
                 create_graph: bool = False) -> list[torch.Tensor | None]:
    """Gradients for the inputs at ``positions`` through the real autograd engine."""
    outs = [applied.outputs[j] for j in applied.differentiable]
    gs = [grads[j] for j in applied.differentiable]
    inputs = [applied.args.values[i] for i in positions]
    return list(torch.autograd.grad(outs, inputs, gs, retain_graph=True, allow_unused=True,
                                    create_graph=create_graph))


def forward_backward(info: Target, args: Args, grads: Sequence[Any] | None,
                     positions: Sequence[int]) -> tuple[list[Any], list[torch.Tensor | None]]:
    """Outputs (detached) and the gradients of the inputs at ``positions`` for incoming
    gradients ``grads`` (one per output, None for none), through the real engine."""
    return outputs_and_gradients(apply(info, args), grads, positions)


def outputs_and_gradients(applied: Applied, grads: Sequence[Any] | None,
                          positions: Sequence[int]) -> tuple[list[Any], list[torch.Tensor | None]]:
    """``forward_backward`` of a call already made (a check's probe call: no second
    forward)."""
    outputs = [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in applied.outputs]
    if grads is None or not applied.differentiable or not positions:
        return outputs, []
    matched = [g.to(dtype=o.dtype, device=o.device) if isinstance(g, torch.Tensor)
               and isinstance(o, torch.Tensor) else g for g, o in zip(grads, applied.outputs)]
    return outputs, engine_grads(applied, matched, positions)


def tensor_function(info: Target, args: Args, positions: Sequence[int],
                    outputs: Sequence[int]) -> Callable[..., tuple[torch.Tensor, ...]]:
    """A function of the tensors at ``positions`` (the rest held fixed) returning the outputs
    at ``outputs``; inputs are always cloned, so a mutating forward cannot corrupt them."""
    base = list(args.values)

    def fn(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values = list(base)
        for pos, t in zip(positions, tensors):
            values[pos] = t
        # a clone made under no_grad (gradcheck's finite differences) requires no grad: keep
        # the flag, so that code registering hooks on its input runs as it would for a user
        values = [v.clone().requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor)
                  and v.requires_grad and not torch.is_grad_enabled() else
                  _copy(v) if isinstance(v, torch.Tensor) else v for v in values]
        out = info.function.apply(*values)
        out = out if isinstance(out, tuple) else (out,)
        return tuple(out[j] for j in outputs)

    return fn


def on_the_same_tensors(info: Target, args: Args, positions: Sequence[int],
                        outputs: Sequence[int]) -> Callable[..., tuple[torch.Tensor, ...]] | None:
    """``tensor_function`` as bare torch's gradcheck calls a Function: on the very tensors it
    is given, every call, so that a forward or backward that writes into an input without
    saying so changes what the next call sees (torch then raises "modified by an inplace
    operation", or "a leaf Variable that requires grad is being used in an in-place
    operation" under double backward). None where that changes nothing: a target that
    declares its writes (called on copies, as users call it), or whose forward and backward,
    called once on copies of ``args``, write into none of its tensors."""
    if info.writes_inputs or not _writes_into(info, args, positions):
        return None
    base = list(args.values)

    def fn(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        values = list(base)
        for pos, t in zip(positions, tensors):
            values[pos] = t
        out = info.function.apply(*values)
        out = out if isinstance(out, tuple) else (out,)
        return tuple(out[j] for j in outputs)

    return fn


def _writes_into(info: Target, args: Args, positions: Sequence[int]) -> bool:
    """Whether a forward and a backward on copies of ``args`` (those at ``positions`` leaves
    requiring grad) change any of them in place: their version counters move."""
    copies = [_copy(v.detach()) if isinstance(v, torch.Tensor) else v for v in args.values]
    leaves = [copies[i].requires_grad_(True) for i in positions]
    before = [version(v) if isinstance(v, torch.Tensor) else None for v in copies]
    try:
        out = info.function.apply(*copies)
        outs = [o for o in (out if isinstance(out, tuple) else (out,))
                if isinstance(o, torch.Tensor) and o.requires_grad]
        if outs:
            torch.autograd.grad(outs, leaves, [torch.ones_like(o) for o in outs],
                                allow_unused=True)
    except Exception:  # noqa: BLE001 -- the checks report what the Function raises
        pass
    return any(b is not None and version(v) != b for v, b in zip(copies, before))


def _copy(t: torch.Tensor) -> torch.Tensor:
    """A clone of ``t``, or ``t`` itself for a frozen subclass that cannot clone itself (a
    quantized weight whose own dispatch refuses ``clone``): it requires no grad, so no call
    can carry a graph through it, and the mutation check judges writes into it."""
    try:
        return t.clone()
    except (NotImplementedError, RuntimeError, TypeError, AssertionError):
        if t.requires_grad:
            raise
        return t


def user_location(exc: BaseException, info: Target) -> Location | None:
    """The innermost of the user's frames that raised ``exc`` (the Function's own file
    counting as the user's wherever it lies): ``frames.innermost_user_frame``."""
    found = frames.innermost_user_frame(exc, info.source_file)
    return found.location() if found is not None else None


def describe_exception(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


NO_TORCH_FUNC = ("torch.func cannot use it: forward takes ctx (torch.func needs setup_context "
                 "style: forward(x) plus setup_context(ctx, inputs, output))")
"""Why no torch.func transform (grad, vjp, jvp, vmap, jacrev) can use an old-style Function:
the checks of those transforms say it, each in its skip."""


def old_style(info: Target) -> bool:
    """An autograd.Function whose forward takes ctx: torch.func refuses it."""
    formula = info.detail(Formula)
    return formula is not None and formula.style == "ctx"


def apply_to_intermediates(info: Target, args: Args) -> tuple[list[torch.Tensor], Applied]:
    """Call the target as a model calls it: each differentiable input an intermediate
    (``leaf.clone()``, with a graph node) of one of ``args``' leaves, not a leaf itself.
    Returns those leaves (in the order of ``args.diff_positions``) and the call, whose
    ``args`` hold the intermediates."""
    diff = args.diff_positions
    leaves = [args.values[i] for i in diff]
    values = list(args.values)
    for position, leaf in zip(diff, leaves):
        values[position] = leaf.clone()
    return leaves, apply(info, Args(list(args.names), values, list(args.differentiable)))


def leaf_gradients(applied: Applied, grads: Sequence[Any], leaves: Sequence[torch.Tensor]
                   ) -> list[torch.Tensor | None]:
    """The gradients of ``leaves`` for incoming gradients ``grads`` (one per output) through
    the engine, each incoming gradient a fresh copy (a backward that writes into it would
    change the next pass: mutation reports that, GV223); the graph is kept."""
    outs = [applied.outputs[j] for j in applied.differentiable]
    gs = [grads[j].detach().clone() for j in applied.differentiable]
    return list(torch.autograd.grad(outs, list(leaves), gs, retain_graph=True,
                                    allow_unused=True))
