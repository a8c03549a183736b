"""saved_tensors: what forward keeps for backward, and whether it is protected.

Tensors passed to ``save_for_backward`` are protected by version counters: changing them in
place after forward makes backward raise instead of silently using new values. Tensors kept as
ctx attributes are not. After forward, each input and output is changed in place; backward
must then raise the version-counter error or give the unchanged gradient. An output kept on ctx
makes a reference cycle (output -> grad_fn -> ctx -> output) that keeps it alive until the
garbage collector runs. The check also reports what is saved per call (count, kind, bytes).
"""
from __future__ import annotations

import gc
import time
import weakref
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from gradverify.checks.base import Check, Outcome, Trait
from gradverify.codes import Code
from gradverify.results import Finding, Severity
from gradverify.targets.model import Capability

if TYPE_CHECKING:
    import torch

    from gradverify.case.context import CheckContext
    from gradverify.case.inputs import Args
    from gradverify.checks._calls import Applied


CODES = (
    Code("GV211", "output-kept-on-ctx",
         "forward stores an output as a ctx attribute: output -> grad_fn (ctx) -> output is a "
         "reference cycle.",
         "The output (and everything its graph holds) stays alive after the caller drops it, "
         "until Python's garbage collector runs: activation memory leaks in training loops.",
         "y = x.exp()\nctx.y = y\nreturn y",
         "ctx.save_for_backward(y), then `y, = ctx.saved_tensors` in backward."),
    Code("GV212", "tensor-kept-on-ctx",
         "forward keeps an input or intermediate tensor as a ctx attribute instead of "
         "save_for_backward.",
         "Tensors on ctx attributes are not protected by version counters: an in-place change "
         "after forward makes backward silently use the new values; they also bypass "
         "saved_tensors_hooks (activation offloading, checkpointing).",
         "ctx.x = x", "ctx.save_for_backward(x)."),
    Code("GV213", "saved-tensor-unprotected",
         "Changing an input or output in place after forward silently changed the gradient.",
         "Code such as `x.add_(1)` or an optimizer step between forward and backward corrupts "
         "gradients without any error.",
         "ctx.x = x   # then, in backward: grad * ctx.x",
         "Save with ctx.save_for_backward so that autograd raises 'modified by an inplace "
         "operation' instead."),
    Code("GV214", "saved-sparse-tensor-aliases-input",
         "A sparse tensor saved for backward shares memory with an input or output (as "
         "torch.sparse_coo_tensor(indices, values) does), and changing that tensor in place "
         "changed the gradient.",
         "save_for_backward protects a tensor through its version counter, but a sparse tensor "
         "does not share the counter of the indices and values it was built from: an in-place "
         "change to them after forward goes unnoticed. A limit of torch rather than a bug in the "
         "Function, and rarely hit in practice, hence a note, not a failure.",
         "a = torch.sparse_coo_tensor(indices, values, shape)\nctx.save_for_backward(a, b)",
         "Save indices and values with save_for_backward and build the sparse tensor in "
         "backward, or build it from clones."),
)


CYCLE_WAIT_S = 1.0
"""How long pending work may hold an output after the caller drops it (a future, a thread)."""


class SavedTensorsCheck(Check):
    name = "saved_tensors"
    needs = MappingProxyType({Capability.OWN_CTX: ""})
    default = True
    summary = "tensors are saved with save_for_backward, not kept on ctx; memory per call"
    codes = CODES
    traits = frozenset({Trait.CALLS_BACKWARD, Trait.DIFFERENTIATES})

    def run(self, ctx: CheckContext) -> Outcome:
        from gradverify.checks import _calls as calls
        from gradverify.checks import _tensors as tk

        outcome = Outcome()
        with tk.record_saved() as saved:
            applied = calls.differentiable_call(ctx)
        if isinstance(applied, calls.NothingToDifferentiate):
            return applied.skip()
        kept = tk.ctx_tensors(applied.node)
        outputs = [o for _, o in applied.tensors]
        inputs = applied.named_inputs()
        for attr, tensor in kept:
            kind, name = tk.classify(tensor, inputs, dict(enumerate(outputs)))
            if kind == "output":
                continue  # reported by the cycle check below, with proof
            what = f"input {name!r}" if kind == "input" else "an intermediate tensor"
            outcome.add(Finding(
                "GV212", Severity.WARNING,
                f"forward keeps {what} as {attr} instead of save_for_backward: no "
                "version-counter protection against in-place changes",
                input=name if kind == "input" else None, location=ctx.forward_location,
                hint="pass it to ctx.save_for_backward(...) and read it from ctx.saved_tensors",
                data={"attribute": attr, "kind": kind}))
        self._cycle(ctx, outcome)
        self._in_place(ctx, outcome)
        outcome.data["saved"] = memory = self._memory(ctx, saved.tensors, applied)
        kinds = ", ".join(f"{n} {k}{'s' * (n != 1)}" for k, n in
                          (("input", memory["inputs"]), ("output", memory["outputs"]),
                           ("intermediate", memory["intermediates"])) if n)
        outcome.summary = (f"saves {memory['count']} tensor{'s' * (memory['count'] != 1)}"
                           f"{' (' + kinds + ')' if kinds else ''}, "
                           f"{_bytes(memory['bytes'])} per call in {memory['dtype']}"
                           + (f"; {len(kept)} on ctx attributes" if kept else ""))
        return outcome

    @staticmethod
    def _memory(ctx: CheckContext, saved: list[torch.Tensor], applied: Any) -> dict[str, Any]:
        """Count and bytes of saved tensors in the working dtype (distinct storages)."""
        from gradverify.checks import _calls as calls
        from gradverify.checks import _tensors as tk

        dtype = "float64"
        try:
            working = ctx.args("working")
            with tk.record_saved() as record:
                used = calls.apply(ctx.info, working)
            saved, applied = record.tensors, used
            floating = [v for v in working.values
                        if tk.is_tensor(v) and v.is_floating_point()]
            dtype = str(floating[0].dtype).removeprefix("torch.") if floating else "float32"
        except Exception:  # noqa: BLE001 -- fall back to the float64 run's numbers
            pass
        inputs = applied.named_inputs()
        outputs = dict(enumerate(o for _, o in applied.tensors))
        counts = {"input": 0, "output": 0, "intermediate": 0}
        storages: dict[int, int] = {}
        for tensor in saved:
            if tensor is None:
                continue
            kind, _ = tk.classify(tensor, inputs, outputs)
            counts[kind] += 1
            storages.update(tk.storages(tensor))
        return {"count": sum(counts.values()), "inputs": counts["input"],
                "outputs": counts["output"], "intermediates": counts["intermediate"],
                "bytes": sum(storages.values()), "dtype": dtype}

    @staticmethod
    def _cycle(ctx: CheckContext, outcome: Outcome) -> None:
        """An output kept on ctx stays alive after the caller drops it (until gc runs). With
        the collector off, an output that pending work still holds (a torch.jit.fork future,
        a thread) is let go within CYCLE_WAIT_S; one in a cycle never is, and the collector
        then frees it: that is the proof (one a cache keeps is not freed by it either)."""
        from gradverify.checks import _calls as calls
        from gradverify.checks import _tensors as tk

        args = ctx.args("double")
        enabled = gc.isenabled()
        gc.disable()
        try:
            applied = calls.apply(ctx.info, args)
            attrs = {id(t): attr for attr, t in tk.ctx_tensors(applied.node)}
            refs = [(j, weakref.ref(o), attrs.get(id(o))) for j, o in applied.tensors
                    if o.requires_grad or id(o) in attrs]
            del applied
            deadline = time.monotonic() + CYCLE_WAIT_S
            while any(ref() is not None for _, ref, _ in refs) and time.monotonic() < deadline:
                time.sleep(0.005)
            alive = [(j, ref, attr) for j, ref, attr in refs if ref() is not None]
            if alive:
                gc.collect()  # frees what only a cycle kept alive (the cycles found, too)
            for j, ref, attr in alive:
                if ref() is None:
                    outcome.add(Finding(
                        "GV211", Severity.ERROR,
                        f"output {j} stays alive after the caller drops it: forward keeps it "
                        f"on ctx{' as ' + attr if attr else ''} (output -> grad_fn -> ctx -> "
                        "output is a reference cycle, freed only by the garbage collector)",
                        output=j, location=ctx.forward_location,
                        hint="save outputs with ctx.save_for_backward(output); never store "
                             "them as ctx attributes"))
        finally:
            if enabled:
                gc.enable()

    @staticmethod
    def _in_place(ctx: CheckContext, outcome: Outcome) -> None:
        """Change each input and output in place after forward: backward must notice."""
        from gradverify.checks import _calls as calls
        from gradverify.checks import _tensors as tk

        generator_salt = "saved_tensors"
        base = ctx.args("double")
        diff = base.diff_positions
        applied = calls.apply(ctx.info, base)
        grads = calls.random_grads(applied, ctx.generator(generator_salt))
        expected = calls.engine_grads(applied, grads, diff)
        names = [base.names[i] for i in diff]
        unchanged: list[str] = []
        tolerance = max(1e-10, ctx.tolerance.nondet_tol)
        for label, which in _targets(ctx, base, applied):
            run, tensor = _fresh_run(ctx, which)
            sparse_alias = _sparse_aliases(run, tensor)
            try:
                tk.modify_in_place(tensor)
                got: list[torch.Tensor | None] | Exception = calls.engine_grads(run, grads, diff)
            except tk.Unsupported as exc:
                unchanged.append(f"{label} ({exc})")
                continue
            except Exception as exc:  # noqa: BLE001 -- user code, or autograd refusing
                if tk.is_protection(exc):
                    continue  # autograd protected the user: exactly what should happen
                got = exc
            effect = _effect(got, expected, names, tolerance)
            if effect is not None:
                outcome.add(_unprotected(ctx, label, effect, sparse_alias))
        if unchanged:
            outcome.data["not_changed_in_place"] = unchanged


def _targets(ctx: CheckContext, base: Args, applied: Applied) -> list[tuple[str, Any]]:
    """What gets changed in place, labelled: each tensor input (by position) and each tensor
    output (as ``("out", j)``)."""
    from gradverify.checks import _tensors as tk

    targets: list[tuple[str, Any]] = [(f"input {n!r}", i) for i, n in enumerate(base.names)
                                      if tk.is_tensor(base.values[i])]
    targets += [(f"output {j}", ("out", j)) for j, _ in applied.tensors]
    # targets that write into their inputs run on copies: the caller's input is not theirs
    return [(label, which) for label, which in targets
            if not (isinstance(which, int) and ctx.info.writes_inputs)]


def _fresh_run(ctx: CheckContext, which: Any) -> tuple[Applied, torch.Tensor]:
    """A fresh call, and the tensor ``which`` names in it (an input or an output)."""
    from gradverify.checks import _calls as calls

    args = ctx.args("double")
    run = calls.apply(ctx.info, args, protect_inputs=ctx.info.writes_inputs)
    tensor = run.outputs[which[1]] if isinstance(which, tuple) else args.values[which]
    return run, tensor


def _sparse_aliases(run: Applied, tensor: torch.Tensor) -> list[torch.Tensor]:
    """Saved sparse tensors that share memory with ``tensor``.

    torch.sparse_coo_tensor(indices, values) aliases its arguments without sharing their
    version counter: no save_for_backward can protect that memory. (Read from ctx, not with
    saved_tensors_hooks, which would switch the version check off.)"""
    from gradverify.checks import _tensors as tk

    return [t for t in _saved(run.node) if tk.is_sparse(t)
            and set(tk.storages(t)) & set(tk.storages(tensor))]


def _effect(got: list[torch.Tensor | None] | Exception, expected: list[torch.Tensor | None],
            names: list[str], tolerance: float) -> str | None:
    """What changing a tensor in place did to backward (``got``, its gradients or what it
    raised), or None when the gradients for the inputs ``names`` are unchanged."""
    from gradverify.checks import _calls as calls
    from gradverify.checks import _compare as cmp

    if isinstance(got, Exception):
        return (f"backward raised {calls.describe_exception(got)} instead of autograd's "
                "version-counter error")
    wrong = [names[p] for p, (a, b) in enumerate(zip(got, expected, strict=False))
             if not cmp.grads_close(a, b, atol=tolerance)]
    if not wrong:
        return None
    return f"the gradient for {wrong[0]!r} silently changed"


def _unprotected(ctx: CheckContext, label: str, effect: str,
                 sparse_alias: list[torch.Tensor]) -> Finding:
    """The finding for a change that backward did not notice: a note (GV214) when a saved
    sparse tensor aliases the changed one (a limit of torch), else GV213."""
    from gradverify.checks import _tensors as tk

    if sparse_alias:
        return Finding(
            "GV214", Severity.INFO,
            f"after {label} was changed in place, {effect}: a saved "
            f"{tk.kind(sparse_alias[0])} tensor shares its memory, and sparse tensors "
            "do not share the version counter of the tensors they are built from",
            input=label.split("'")[1] if label.startswith("input") else None,
            location=ctx.forward_location,
            hint="save the indices and values with save_for_backward and build the "
                 "sparse tensor in backward, or build it from clones")
    return Finding(
        "GV213", Severity.ERROR,
        f"after {label} was changed in place, {effect}: backward reads it unprotected",
        input=label.split("'")[1] if label.startswith("input") else None,
        location=ctx.location,
        hint="save it with ctx.save_for_backward instead of a ctx attribute (or a "
             ".data alias), so that autograd raises 'modified by an inplace operation'")


def _saved(ctx: Any) -> list[torch.Tensor]:
    from gradverify.checks import _tensors as tk

    try:
        return [t for t in ctx.saved_tensors if tk.is_tensor(t)]
    except Exception:  # noqa: BLE001 -- nothing saved, or a ctx without saved_tensors
        return []


def _bytes(count: int) -> str:
    n = float(count)
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


CHECK = SavedTensorsCheck()
