"""Every finding code, documented for ``gradverify explain``. Codes are never renumbered or reused.

Ranges: GV0nn input and run errors; GV10n-GV11n contract; GV12n gradcheck; GV14n gradgradcheck;
GV20n needs_input_grad; GV21n saved_tensors; GV22n mutation; GV23n undefined_grad;
GV24n determinism; GV25n layout; GV26n lint; GV30n forward_ad; GV31n vmap; GV32n precision;
GV33n reference; GV34n device; GV35n compile.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Code:
    code: str
    name: str
    """Describes the defect, not the fix."""
    check: str | None
    what: str
    why: str
    example: str = ""
    fix: str = ""


_CODES = [
    # ------------------------------------------------------------------ input and run errors
    Code("GV001", "spec-unreadable", None,
         "A spec file could not be read as YAML: a syntax error, bad encoding, an empty file or a "
         "YAML tag that would construct an object.",
         "gradverify only reads plain YAML with yaml.safe_load semantics; it never builds objects "
         "or runs code from a spec.",
         "cases:\n  - args: [{shape: [3, 4]}\n",
         "Fix the YAML at the line given (here: the missing ']'). Save the file as UTF-8."),
    Code("GV002", "spec-invalid", None,
         "A spec is valid YAML but not a valid gradverify spec: an unknown key, a wrong type, an "
         "unknown dtype, init or dim, or arguments that do not match forward's parameters.",
         "Specs are validated before anything runs, so that a typo never silently turns a check "
         "off or tests something other than you meant.",
         "cases:\n  - args:\n      input: {shpe: [3, 4]}\n",
         "Follow the message: it names the file, line and key path, the allowed values and the "
         "closest valid spelling."),
    Code("GV003", "target-unimportable", None,
         "The module of a target (or of a reference or factory) cannot be imported.",
         "The current directory is put on sys.path as `python -m` does; everything else must be "
         "installed in the environment that runs gradverify.",
         "gradverify check mypkg.opz:Linear",
         "Run from the project root, install the package (pip install -e .), or give a path: "
         "gradverify check path/to/file.py:Linear."),
    Code("GV004", "target-missing", None,
         "The module imports, but has no attribute of the given name.",
         "Usually a typo or a class that was renamed.",
         "gradverify check mypkg.ops:LinearFuncton",
         "Use the name the message suggests; `gradverify list mypkg.ops` lists the Functions."),
    Code("GV005", "target-not-a-function", None,
         "The target is not a torch.autograd.Function subclass with forward and backward.",
         "gradverify verifies custom autograd Functions; an nn.Module or plain function has no "
         "backward of its own to verify.",
         "gradverify check mypkg.layers:Linear  # an nn.Module",
         "Point at the Function class the module uses (`gradverify list mypkg.layers`)."),
    Code("GV006", "factory-failed", None,
         "A case's factory could not be imported, raised, or returned something other than a "
         "tuple/list of arguments or a dict of named arguments.",
         "A factory is your code: gradverify reports its failure instead of guessing inputs.",
         "def make_inputs(generator):\n    return torch.randn(3, 4)  # not a tuple",
         "Return a tuple/list of forward's arguments or a dict keyed by parameter name."),
    Code("GV007", "inputs-too-large", None,
         "A case's tensors would need more memory than gradverify allows for one case.",
         "Gradient checks keep several float64 copies; allocating first and failing later would "
         "take the machine down.",
         "args: [{shape: [100000, 100000]}]",
         "Use small shapes: gradient bugs show on tiny inputs (distinct sizes, batch 1 and > 1)."),
    Code("GV008", "forward-raised", None,
         "forward raised on the spec's inputs, so the checks of that case could not run.",
         "Either the spec's inputs are not what the Function expects (shapes, dtypes, argument "
         "order), or forward has a bug.",
         "args: {input: {shape: [3, 4]}, weight: {shape: [3, 4]}}   # weight must be [5, 4]",
         "Fix the shapes or dtypes in the spec; for an inferred spec run `gradverify init`."),
    Code("GV009", "case-timed-out", None,
         "A case ran longer than --timeout seconds and was stopped.",
         "A hanging kernel or an enormous slow-mode Jacobian; other cases still run.",
         "", "Use smaller shapes, --fast, or a larger --timeout."),
    Code("GV010", "case-crashed", None,
         "The process running a case died (a segfault or abort in an extension).",
         "A crash in native code; gradverify isolates it so that other targets still report.",
         "", "Run the case alone with --no-isolate under a debugger."),
    Code("GV011", "gradverify-bug", None,
         "An internal error in gradverify.",
         "Exit code 4 means gradverify itself failed, not your Function.",
         "", "Please report it with the traceback and the spec."),
    Code("GV012", "torch-state-changed", None,
         "Importing a target's module, or running its Function, changed torch's process-wide "
         "state: grad mode, inference mode, default dtype or device, deterministic algorithms, "
         "anomaly mode, the number of threads, CPU autocast, or saved-tensor hooks left "
         "installed.",
         "Every Function used after it in the same process behaves differently: with grad "
         "mode off, nothing is differentiable and gradient checks silently verify nothing. "
         "gradverify restores the state before and after each case, so no other target's "
         "verdict changes, and reports the setting and who changed it.",
         "# mypkg/infer.py\ntorch.set_grad_enabled(False)   # at import time",
         "Use context managers around the code that needs a setting (with torch.no_grad(): "
         "...), never global setters at import time or inside forward/backward."),
    Code("GV013", "nothing-verified", None,
         "Every gradient check of a case skipped because no input requires grad, or because no "
         "output is differentiable although the Function returns floating tensors.",
         "A case that verifies nothing must not look like a pass: CI would go green on zero "
         "checks. It is a warning, so `--strict` fails it.",
         "cases:\n  - args: {x: {shape: [3], requires_grad: false}}",
         "Let a floating input require grad, and do not mark every floating output "
         "non-differentiable (or turn grad mode off) unless the Function has no gradient."),
    Code("GV014", "run-interrupted", None,
         "The run was stopped (SIGINT, SIGTERM or SIGHUP) before this case finished.",
         "gradverify stops its workers, writes the report files that were asked for with the "
         "cases that finished, marks the rest with this code, and exits 128 + the signal "
         "number (130, 143, 129).",
         "", "Rerun the case; nothing is wrong with it."),
    # ------------------------------------------------------------------ contract
    Code("GV101", "backward-raised", "contract",
         "backward raised when called with gradients for the outputs.",
         "Every training step that reaches this Function will crash.",
         "def backward(ctx, grad):\n    x, = ctx.saved_tensors\n    return grad @ x   # shapes do not match",
         "Read the traceback location given and fix backward."),
    Code("GV102", "too-few-gradients", "contract",
         "backward returned fewer values than forward has inputs.",
         "Autograd requires exactly one gradient (or None) per forward input, including "
         "non-tensor ones, and raises 'returned an incorrect number of gradients'.",
         "def forward(ctx, x, scale): ...\ndef backward(ctx, grad):\n    return grad * ctx.scale",
         "Return one value per forward input: `return grad * ctx.scale, None`."),
    Code("GV103", "too-many-gradients", "contract",
         "backward returned more non-None values than forward has inputs.",
         "Autograd raises 'returned an incorrect number of gradients'; extra trailing Nones are "
         "accepted, extra tensors are not.",
         "return grad_x, grad_w, grad_b   # forward(ctx, x, w) has two inputs",
         "Return exactly one value per forward input."),
    Code("GV104", "grad-for-non-tensor", "contract",
         "backward returned a gradient for an input that is not a tensor (an int, a float, None).",
         "Autograd raises 'returned a gradient different than None at position N, but the "
         "corresponding forward input was not a Variable'.",
         "def forward(ctx, x, dim): ...\ndef backward(ctx, g):\n    return g, g",
         "Return None at the positions of non-tensor inputs."),
    Code("GV105", "grad-shape-mismatch", "contract",
         "A gradient's shape cannot be summed to its input's shape.",
         "Autograd raises 'returned an invalid gradient at index N - got [...] but expected shape "
         "compatible with [...]'.",
         "return grad.t()   # input was [3, 4]",
         "Return a gradient with exactly the input's shape."),
    Code("GV106", "grad-broadcast-unsummed", "contract",
         "A gradient has a broadcast shape that autograd silently sums down to the input's shape.",
         "The result is right but backward materialises a larger tensor than needed, and the "
         "mismatch usually means backward forgot to reduce over broadcast dimensions.",
         "def backward(ctx, g):\n    return g, g   # bias is [5], g is [N, 5]",
         "Reduce explicitly: `g.sum(0)` (or `g.sum_to_size(bias.shape)`)."),
    Code("GV107", "grad-dtype-mismatch", "contract",
         "A gradient's dtype differs from its input's, and autograd silently casts it.",
         "A float32 gradient for a float64 input loses precision (and often hides that the kernel "
         "cannot run in double, so gradcheck compares against float32 noise).",
         "return grad.float()",
         "Compute the gradient in the input's dtype; for float32-only kernels use `reference:`."),
    Code("GV108", "grad-for-integer-input", "contract",
         "backward returned a tensor for an integer or boolean input, which can never require grad.",
         "Autograd drops it silently; computing it is wasted work.",
         "return grad_values, torch.zeros_like(indices)",
         "Return None for integer inputs (indices, label maps, masks)."),
    Code("GV109", "grad-wrong-device", "contract",
         "A gradient is on a different device than its input.",
         "Autograd raises, or copies across devices on every step.",
         "return grad.cpu()",
         "Create gradients on the input's device (`torch.zeros_like(x)`, `x.new_zeros(...)`)."),
    Code("GV110", "backward-arity-mismatch", "contract",
         "backward takes a different number of gradient arguments than forward has outputs.",
         "Autograd calls backward with one gradient per output; a mismatch is a TypeError on "
         "the first backward.",
         "def forward(ctx, x):\n    return y, idx\ndef backward(ctx, grad_y):   # needs grad_idx too",
         "Take one gradient per output: `def backward(ctx, grad_y, grad_idx)`."),
    Code("GV111", "non-differentiable-output-depends-on-input", "contract",
         "An output marked non-differentiable (ctx.mark_non_differentiable) changes when a "
         "differentiable input changes.",
         "Gradients that flow through that output are silently zero, so training ignores that path.",
         "ctx.mark_non_differentiable(normalised)   # normalised = x / x.norm()",
         "Only mark outputs that are truly piecewise constant (indices, masks, argmax)."),
    Code("GV112", "grad-not-a-tensor", "contract",
         "backward returned something other than a tensor or None (a number, a list, a numpy array).",
         "Autograd raises 'expected Variable or None'.",
         "return 2.0 * ctx.scale",
         "Return tensors (`torch.full_like(x, 2.0 * ctx.scale)`) or None."),
    Code("GV113", "output-not-float64", "contract",
         "forward returned a lower-precision floating output for float64 inputs.",
         "A kernel that only runs in float32 makes float64 gradient checks compare against float32 "
         "round-off, so they fail (or pass) for the wrong reasons.",
         "return kernel(x.float())",
         "Support float64, or verify the kernel against a plain-PyTorch `reference:` in the spec."),
    # ------------------------------------------------------------------ gradcheck
    Code("GV121", "jacobian-mismatch", "gradcheck",
         "The analytical Jacobian (from backward) differs from the numerical one (finite "
         "differences in float64) for one (output, input) pair.",
         "The gradient is wrong: training follows a wrong direction, usually without any error.",
         "def backward(ctx, g):\n    x, = ctx.saved_tensors\n    return -g * x.cos()   # d sin = +cos",
         "The finding names the input, the worst element and a recognised pattern (sign flipped, "
         "constant factor, zero, not multiplied by the incoming gradient, transposed, only some "
         "rows); fix the formula for that input."),
    Code("GV122", "non-differentiable-point", "gradcheck",
         "The mismatch is where the left and right finite differences disagree: the inputs sit "
         "on a kink or a tie (relu at 0, max with equal values, abs at 0).",
         "Finite differences are meaningless at such points, so this is a problem of the spec's "
         "inputs, not of backward.",
         "args: [{shape: [4], init: zeros}]   # relu at exactly 0",
         "Choose an `init` that avoids the kink (e.g. `uniform` with low 0.1, or `randn`), or "
         "distinct values for max/sort-like ops."),
    Code("GV123", "fast-mode-used", "gradcheck",
         "gradcheck ran in fast mode, which compares random projections of the Jacobian.",
         "Fast mode can miss an error confined to a few elements.",
         "", "Add a small case (a few elements per dim) so that slow mode runs, or pass --slow."),
    Code("GV124", "no-slow-mode-case", "gradcheck",
         "No case of this spec is small enough for slow-mode gradcheck.",
         "Every case ran in fast mode, so errors confined to a few elements can go unseen.",
         "", "Add a case with small shapes of distinct sizes, with batch 1 and batch > 1."),
    Code("GV125", "square-shapes", "gradcheck",
         "Every tensor dimension in this case has the same size.",
         "Square shapes hide transpose bugs: grad.t() has the right shape by accident.",
         "args: [{shape: [3, 3]}, {shape: [3, 3]}]",
         "Use distinct sizes, e.g. [2, 3] and [3, 4]."),
    Code("GV126", "gradient-in-wrong-dtype", "gradcheck",
         "Gradients were not computed in float64 although the inputs were float64.",
         "gradcheck then compares float64 finite differences with float32 results, so it fails "
         "or passes for the wrong reason.",
         "", "Support float64, or use `reference:`, which checks the working dtype directly."),
    # ------------------------------------------------------------------ gradgradcheck
    Code("GV141", "second-order-mismatch", "gradgradcheck",
         "The derivative of backward's result (double backward) differs from finite differences.",
         "Higher-order uses (gradient penalties, Hessian-vector products, MAML) get wrong values.",
         "def backward(ctx, g):\n    x, = ctx.saved_tensors\n    return g * x.detach().cos()",
         "Write backward with differentiable torch ops on tensors from ctx.saved_tensors; avoid "
         ".data/.detach()/numpy and intermediates computed in forward without being saved."),
    Code("GV142", "backward-not-differentiable", "gradgradcheck",
         "Under create_graph=True, backward's result for an input has no grad_fn: backward breaks "
         "the graph.",
         "torch.autograd.grad(..., create_graph=True) silently treats the gradient as constant, so "
         "second derivatives are zero.",
         "def backward(ctx, g):\n    return torch.from_numpy(np_grad(g.numpy()))",
         "Use torch ops on saved tensors; if double backward is truly unsupported, decorate "
         "backward with @once_differentiable so that it raises instead of being silently wrong."),
    Code("GV143", "once-differentiable", "gradgradcheck",
         "backward is decorated @once_differentiable: double backward is unsupported (skip).",
         "Calling autograd through it with create_graph=True raises; torch.autograd.grad with "
         "create_graph=True through it silently drops its contribution in some versions.",
         "", "Nothing to fix unless you need higher-order gradients."),
    Code("GV144", "incoming-gradient-detached", "gradgradcheck",
         "Under create_graph=True, backward's result for an input does not depend on the "
         "incoming gradient the way it is computed from it: backward detaches grad_output "
         "(grad.detach(), grad.data, a numpy round trip) or uses it non-linearly.",
         "Double backward differentiates backward's result with respect to the incoming "
         "gradient too (torch's gradgradcheck checks that block). A detached incoming gradient "
         "makes gradient penalties and Hessian-vector products silently wrong even for linear "
         "and piecewise-linear ops, whose second derivative with respect to the inputs is zero "
         "and so cannot reveal it.",
         "def backward(ctx, grad):\n    return grad.detach() * 3",
         "Use the incoming gradient itself: return grad * 3."),
    # ------------------------------------------------------------------ needs_input_grad
    Code("GV201", "backward-raises-with-partial-grad", "needs_input_grad",
         "backward raised when only some inputs require grad.",
         "Fine-tuning with frozen layers, or any input that does not require grad, crashes "
         "training: usually a variable assigned only inside `if ctx.needs_input_grad[i]:` and "
         "used for another input.",
         "if ctx.needs_input_grad[0]:\n    gx = grad @ w.t()\nif ctx.needs_input_grad[1]:\n"
         "    gw = x.t() @ grad\nreturn gx, gw   # UnboundLocalError when only w requires grad",
         "Initialise every gradient to None first, and compute what each needs in its own branch."),
    Code("GV202", "gradient-missing", "needs_input_grad",
         "backward returned None for an input that requires grad.",
         "That input silently gets no gradient: its parameters never train. Usually a wrong "
         "index into ctx.needs_input_grad.",
         "if ctx.needs_input_grad[0]:   # should be [1] for weight\n    grad_weight = ...",
         "Use the position of the input in forward's signature (after ctx)."),
    Code("GV203", "gradient-depends-on-requires-grad", "needs_input_grad",
         "An input's gradient changes depending on which other inputs require grad.",
         "Gradients must not depend on what else is being trained; this usually means the "
         "needs_input_grad branches compute shared terms differently.",
         "gx = grad * w if ctx.needs_input_grad[1] else grad",
         "Compute each gradient from the saved tensors alone."),
    Code("GV204", "gradient-not-needed", "needs_input_grad",
         "backward computed a gradient for an input that does not require grad.",
         "Autograd throws it away: wasted compute and memory on every step.",
         "return grad @ w.t(), x.t() @ grad   # w is frozen",
         "Guard each gradient with `if ctx.needs_input_grad[i]:`."),
    Code("GV205", "forward-fails-without-grad", "needs_input_grad",
         "forward raised when no input requires grad.",
         "Inference calls forward on tensors that do not require grad.",
         "ctx.save_for_backward(x.grad_fn.next_functions)",
         "Do not depend on requires_grad or grad_fn in forward."),
    Code("GV206", "forward-fails-under-no-grad", "needs_input_grad",
         "forward raised under torch.no_grad().",
         "Evaluation loops run under torch.no_grad() or torch.inference_mode().",
         "", "Do not depend on grad mode in forward."),
    Code("GV207", "output-depends-on-grad-mode", "needs_input_grad",
         "forward computed different outputs when no input requires grad.",
         "Training and inference would disagree.",
         "", "Compute the same values whatever requires grad."),
    # ------------------------------------------------------------------ saved_tensors
    Code("GV211", "output-kept-on-ctx", "saved_tensors",
         "forward stores an output as a ctx attribute: output -> grad_fn (ctx) -> output is a "
         "reference cycle.",
         "The output (and everything its graph holds) stays alive after the caller drops it, "
         "until Python's garbage collector runs: activation memory leaks in training loops.",
         "y = x.exp()\nctx.y = y\nreturn y",
         "ctx.save_for_backward(y), then `y, = ctx.saved_tensors` in backward."),
    Code("GV212", "tensor-kept-on-ctx", "saved_tensors",
         "forward keeps an input or intermediate tensor as a ctx attribute instead of "
         "save_for_backward.",
         "Tensors on ctx attributes are not protected by version counters: an in-place change "
         "after forward makes backward silently use the new values; they also bypass "
         "saved_tensors_hooks (activation offloading, checkpointing).",
         "ctx.x = x", "ctx.save_for_backward(x)."),
    Code("GV213", "saved-tensor-unprotected", "saved_tensors",
         "Changing an input or output in place after forward silently changed the gradient.",
         "Code such as `x.add_(1)` or an optimizer step between forward and backward corrupts "
         "gradients without any error.",
         "ctx.x = x   # then, in backward: grad * ctx.x",
         "Save with ctx.save_for_backward so that autograd raises 'modified by an inplace "
         "operation' instead."),
    Code("GV214", "saved-sparse-tensor-aliases-input", "saved_tensors",
         "A sparse tensor saved for backward shares memory with an input or output (as "
         "torch.sparse_coo_tensor(indices, values) does), and changing that tensor in place "
         "changed the gradient.",
         "save_for_backward protects a tensor through its version counter, but a sparse tensor "
         "does not share the counter of the indices and values it was built from: an in-place "
         "change to them after forward goes unnoticed. A limit of torch rather than a bug in the Function, and rarely hit in practice, hence a note, not a failure.",
         "a = torch.sparse_coo_tensor(indices, values, shape)\nctx.save_for_backward(a, b)",
         "Save indices and values with save_for_backward and build the sparse tensor in "
         "backward, or build it from clones."),
    # ------------------------------------------------------------------ mutation
    Code("GV221", "input-mutated-without-mark-dirty", "mutation",
         "forward wrote into an input in place without ctx.mark_dirty.",
         "The caller's tensor changes behind autograd's back: other uses of it compute with the "
         "new values and its gradient is wrong.",
         "def forward(ctx, x):\n    return x.clamp_(min=0)",
         "Work on a copy, or call ctx.mark_dirty(x) and return x."),
    Code("GV222", "saved-tensor-mutated-in-backward", "mutation",
         "backward wrote into a saved tensor in place.",
         "A second backward (retain_graph=True, gradient penalties) or another user of that "
         "tensor sees the changed values.",
         "x, = ctx.saved_tensors\nreturn grad * x.mul_(2)",
         "Use out-of-place ops: grad * (x * 2)."),
    Code("GV223", "incoming-gradient-mutated", "mutation",
         "backward wrote into its incoming gradient in place.",
         "Autograd may hand the same gradient tensor to other branches (an add passes one "
         "tensor to both of its inputs): their gradients silently change.",
         "return grad.mul_(2)",
         "Use out-of-place ops: return grad * 2."),
    # ------------------------------------------------------------------ undefined_grad
    Code("GV231", "unused-output-crashes-backward", "undefined_grad",
         "With only one output of a multi-output Function used, backward raised.",
         "Callers often use one output (values but not indices); with "
         "ctx.set_materialize_grads(False) the unused outputs' gradients arrive as None, and "
         "`None * x` raises TypeError.",
         "ctx.set_materialize_grads(False)\n...\nreturn grad_a * 2 + grad_b * 3",
         "Check `if grad_b is not None` before using it, or keep materialized gradients."),
    Code("GV232", "unused-output-wrong-gradient", "undefined_grad",
         "With only one output used, backward gave a different gradient than with zero "
         "gradients for the other outputs.",
         "An unused output's gradient is zero by definition.",
         "if grad_b is None:\n    return None", "Treat a None gradient as zeros."),
    # ------------------------------------------------------------------ determinism
    Code("GV241", "nondeterministic-backward", "determinism",
         "Two backward passes on the same inputs and gradients gave different results.",
         "Unreproducible training; usually uninitialised memory (torch.empty) or random ops, "
         "sometimes atomics (index_add/scatter_add on CUDA).",
         "out = torch.empty_like(grad)\nout[mask] = grad[mask]   # the rest is garbage",
         "Initialise with zeros; for known atomics, set `tolerance: {nondet_tol: ...}`."),
    # ------------------------------------------------------------------ layout
    Code("GV251", "noncontiguous-input-wrong", "layout",
         "A non-contiguous input (transposed or strided storage) gave different outputs or "
         "gradients than the same values in contiguous memory.",
         "Kernels that read data_ptr as if memory were contiguous compute silently wrong results "
         "for views, transposes and slices.",
         "kernel(x.data_ptr(), ...)   # x may be x.t()",
         "Call .contiguous() before raw kernels."),
    Code("GV252", "noncontiguous-input-raises", "layout",
         "A non-contiguous input made the Function raise.", "Views and slices are everyday "
         "inputs.", "x.view(-1)   # fails on transposed x",
         "Use .reshape or call .contiguous() first."),
    Code("GV253", "noncontiguous-gradient-wrong", "layout",
         "An expanded (stride 0) or non-contiguous incoming gradient gave a different gradient.",
         "`out.sum().backward()` hands backward an expanded gradient with stride 0; a "
         "downstream .t() hands it a transposed one.",
         "kernel_backward(grad.data_ptr(), ...)",
         "Call grad.contiguous() before raw kernels."),
    Code("GV254", "noncontiguous-gradient-raises", "layout",
         "An expanded or non-contiguous incoming gradient made backward raise.",
         "`out.sum().backward()` produces such gradients.", "grad.view(-1)",
         "Use grad.reshape or grad.contiguous()."),
    # ------------------------------------------------------------------ forward_ad
    Code("GV301", "jvp-mismatch", "forward_ad",
         "The Function's jvp (forward-mode derivative) differs from finite differences.",
         "torch.func.jvp, jacfwd and forward-mode Hessians get wrong values silently.",
         "@staticmethod\ndef jvp(ctx, x_t):\n    x, = ctx.saved_tensors\n    return -x.sin() * x_t"
         "   # d cos... but forward is sin",
         "The tangent of each output is the directional derivative along the input tangents; "
         "the finding names the input and the pattern."),
    Code("GV302", "forward-over-reverse-wrong", "forward_ad",
         "jacfwd of the gradient (forward-over-reverse) is wrong or fails.",
         "Hessian-vector products with torch.func compose forward mode over backward.",
         "", "Write backward with ops that support forward-mode AD, or mark it "
             "@once_differentiable."),
    Code("GV303", "jvp-raised", "forward_ad",
         "jvp raised.", "torch.func.jvp/jacfwd crash on this Function.",
         "def jvp(ctx, x_t):\n    x, = ctx.saved_tensors   # saved with save_for_backward only",
         "Save what jvp needs with ctx.save_for_forward; return one tangent per output."),
    # ------------------------------------------------------------------ vmap
    Code("GV311", "vmap-output-mismatch", "vmap",
         "torch.func.vmap of the Function gives different outputs than a loop over the batch.",
         "Batched code (vmap, per-sample gradients, ensembling) computes wrong values.",
         "def vmap(info, in_dims, x):\n    return x.sum(0), 0   # reduces over the batch dim",
         "Return outputs with the batch dimension where out_dims says it is."),
    Code("GV312", "vmap-gradient-mismatch", "vmap",
         "Per-sample gradients under vmap(grad(...)) differ from a loop.",
         "Per-sample gradients (DP-SGD, influence functions) are wrong.",
         "", "backward must treat each sample independently under vmap."),
    Code("GV313", "vmap-raised", "vmap",
         "torch.func.vmap raised on a Function that declares vmap support.",
         "The declared support does not hold.", "",
         "Fix the vmap staticmethod, or use generate_vmap_rule = True."),
    # ------------------------------------------------------------------ precision
    Code("GV321", "low-precision-overflow", "precision",
         "In the working dtype (float32/float16/bfloat16), an output or gradient is inf or NaN "
         "where float64 is finite.",
         "float64 gradient checks hide overflow: exp(89) is inf in float32, exp(12) in float16.",
         "def forward(ctx, x):\n    e = x.exp()\n    return (e / e.sum()).log()   # naive log-softmax",
         "Use a stable formula: subtract the maximum before exp, use logsumexp, log1p, expm1."),
    Code("GV322", "low-precision-error", "precision",
         "In the working dtype, an output or gradient is far from float64 (beyond the dtype's "
         "tolerance table).",
         "Catastrophic cancellation or large unscaled sums make training noisy or biased.",
         "return (x + 1e4) - 1e4", "Rearrange the formula, or accumulate in float32/float64."),
    Code("GV323", "low-precision-unsupported", "precision",
         "The Function raised in its working dtype.",
         "The spec declares that dtype as the one the Function is used with.", "",
         "Support the dtype, or declare the dtype the Function really works in."),
    # ------------------------------------------------------------------ reference
    Code("GV331", "reference-output-mismatch", "reference",
         "An output differs from the spec's plain-PyTorch reference.",
         "The kernel computes something else than the math it implements.",
         "reference: mypkg.ops:linear_reference", "Fix the kernel (or the reference)."),
    Code("GV332", "reference-gradient-mismatch", "reference",
         "A gradient differs from autograd through the reference.",
         "backward is wrong; for kernels that cannot run in float64, this is the gradient check.",
         "", "Fix backward's formula for the input named."),
    Code("GV333", "reference-raised", "reference",
         "The reference function raised.",
         "It must take forward's arguments and return the same outputs.", "",
         "Make the reference take the same arguments as forward."),
    # ------------------------------------------------------------------ device
    Code("GV341", "device-mismatch", "device",
         "Outputs or gradients on CUDA differ from the CPU run on the same inputs.",
         "The device kernel is wrong while the CPU path is right (or the reverse).", "",
         "Look for indexing, stride and race bugs in the device kernel."),
    Code("GV342", "device-raised", "device",
         "The Function raised on CUDA but not on the CPU.",
         "Tensors created on the wrong device, or a kernel missing for CUDA.",
         "torch.zeros(n)   # on the CPU, inside a CUDA backward",
         "Create tensors with the input's device (x.new_zeros, torch.zeros_like)."),
    # ------------------------------------------------------------------ compile
    Code("GV351", "compile-graph-break", "compile",
         "torch.compile(fullgraph=True) cannot trace the Function (a graph break).",
         "With fullgraph=False it silently falls back to eager around the Function.",
         "def forward(ctx, x):\n    return torch.from_numpy(np.exp(x.numpy()))",
         "The finding gives Dynamo's reason; remove the construct it names."),
    Code("GV352", "compile-mismatch", "compile",
         "Compiled outputs or gradients differ from eager.",
         "The compiled model trains on different numbers than the eager one.",
         "", "Avoid Python state and data-dependent control flow in forward/backward."),
    Code("GV353", "compile-failed", "compile",
         "torch.compile failed for another reason than a graph break.",
         "The model cannot be compiled with this Function in it.", "",
         "Read the message; run TORCH_LOGS=+dynamo for details."),
    # ------------------------------------------------------------------ lint
    Code("GV261", "saved-variables-used", "lint",
         "The source uses ctx.saved_variables.", "It is a deprecated alias of saved_tensors.",
         "x, = ctx.saved_variables", "Use ctx.saved_tensors."),
    Code("GV262", "legacy-variable-api", "lint",
         "The source uses Variable(...) or volatile=.",
         "Both have done nothing since PyTorch 0.4.", "Variable(x, volatile=True)",
         "Use tensors, and torch.no_grad()."),
    Code("GV263", "backward-leaves-graph", "lint",
         "backward uses .data or numpy without @once_differentiable.",
         "Double backward through it is silently wrong instead of raising.",
         "return grad * torch.from_numpy(np.cos(x.numpy()))",
         "Use torch ops, or decorate backward with @once_differentiable."),
    Code("GV264", "save-for-backward-twice", "lint",
         "save_for_backward is called more than once.",
         "Each call replaces the previous one: the first tensors are lost.",
         "ctx.save_for_backward(x)\nctx.save_for_backward(w)",
         "Save everything in one call: ctx.save_for_backward(x, w)."),
    Code("GV265", "non-static-method", "lint",
         "forward or backward is not a @staticmethod.",
         "torch rejects legacy (non-static) autograd Functions.",
         "def forward(self, x): ...", "Use @staticmethod def forward(ctx, x)."),
]

CODES: dict[str, Code] = {c.code: c for c in _CODES}
BY_NAME: dict[str, Code] = {c.name: c for c in _CODES}
