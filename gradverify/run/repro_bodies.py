"""What each bare-torch repro script compares (``repro.script`` writes the rest: the inputs,
the call, the file): torch's own ``gradcheck``/``gradgradcheck``, one backward through autograd
(what it rejects of backward's result), outputs and gradients against the spec's reference,
backward on incoming gradients laid out otherwise, and the values before and after backward
(mutation's writes). Each body is the text of ``main()``, where ``call`` stands for the target
and ``inputs()`` makes the case's values; it returns a message starting ``FAILED:`` while the
bug is there. Pure text: no torch here."""
from __future__ import annotations

from gradverify.specmodel import ResolvedTolerance
from gradverify.targets import Capability, Target

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


def body(check: str, code: str, info: Target, tolerance: ResolvedTolerance,
         reference: str | None = None) -> tuple[str, str] | None:
    """The body of the script's ``main()`` for ``code`` of ``check``, and what it compares;
    None for a finding bare torch cannot show (``reference``: the spec's ``reference:``)."""
    target = repr(info.target)
    if check in COMPARISONS:
        return _comparison(check, target, tolerance)
    if check == "contract":  # what autograd itself rejects of backward's result
        return _contract(target)
    if check == "reference" and code in ("GV331", "GV332") and reference:
        return _reference(target, tolerance)
    if check == "layout" and code in ("GV253", "GV254"):
        return _layout(target)
    if check == "mutation" and code in WRITES and info.has(Capability.CLASS_SOURCE):
        return _writes(target, code)
    return None


def _comparison(check: str, target: str, tolerance: ResolvedTolerance) -> tuple[str, str]:
    """torch's own gradcheck or gradgradcheck on the call, with the case's tolerances."""
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


def _contract(target: str) -> tuple[str, str]:
    """One backward through autograd, which rejects a wrong number or shape of gradients."""
    return _CALLED + f'''    try:
        torch.autograd.grad(outs, leaves, grads, allow_unused=True)
    except RuntimeError as exc:
        return "FAILED: autograd rejects the gradients backward of " + {target} + \\
            " returns:\\n" + str(exc)
    print("ok: autograd accepts backward's gradients")
    return None
''', "one backward through autograd"


def _reference(target: str, tolerance: ResolvedTolerance) -> tuple[str, str]:
    """Outputs and gradients against autograd through the spec's reference."""
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


def _layout(target: str) -> tuple[str, str]:
    """backward on the same incoming gradients laid out otherwise, against contiguous ones."""
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


def _writes(target: str, code: str) -> tuple[str, str]:
    """The values backward must not change, before and after one backward."""
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
