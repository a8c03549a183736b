"""What a finding code is, and the codes of the run itself (GV0nn). Each check declares its own
codes next to the code that emits them (``CODES`` in ``gradverify/checks/<check>.py``); the
registry collects them all for ``gradverify explain``. Codes are never renumbered or reused;
``RANGES`` says whose each block of ten is (a test keeps it true).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

RANGES: dict[str, str | None] = {
    "GV00": None, "GV01": None, "GV02": None,  # input and run errors
    "GV10": "contract", "GV11": "contract", "GV12": "gradcheck", "GV13": "gradcheck",
    "GV14": "gradgradcheck", "GV20": "needs_input_grad", "GV21": "saved_tensors",
    "GV22": "mutation", "GV23": "undefined_grad", "GV24": "determinism", "GV25": "layout",
    "GV26": "lint", "GV27": "saved_hooks", "GV30": "forward_ad", "GV31": "vmap",
    "GV32": "precision", "GV33": "reference", "GV34": "device", "GV35": "compile",
    "GV36": "func", "GV37": "autocast", "GV38": "tiles", "GV39": "checkpoint",
    "GV40": "op_schema", "GV41": "op_autograd_registration", "GV42": "op_fake",
    "GV43": "op_aot_dispatch", "GV44": "placement",
}
"""Whose codes each block of ten holds (``GV12`` is GV120 to GV129): a check's, or the run's
own (None). A new check takes a free block."""


class Symptom(enum.Enum):
    """What a finding reports besides its own defect, which another check's finding can cause:
    the consequence rules (``checks.base.Consequence``) reach findings by symptom, never by
    another check's codes. A code declares the symptoms its findings always report
    (``Code.reports``)."""

    DETACHED = "double backward finds backward's result cut from the incoming gradient"
    """A backward that ignores its incoming gradient (gradcheck's GV121) detaches it too."""
    RUNS_DIFFER = "two runs of backward on the same inputs differ"
    """What a nondeterministic backward (determinism's GV241) makes every comparison of runs
    report."""
    ASSUMES_GRADIENT = "premised on backward returning each input's true gradient"
    """Wrong by its premise where the spec declares that backward is not the gradient."""
    REFUSED_WRITE = "autograd refused an in-place write"
    """The version-counter error and its kin, raised by a later backward after a write into
    a saved tensor or the incoming gradient (mutation's GV222, GV223). Any code can report it:
    it is read from torch's own words in the finding (``refuses_write``)."""


_REFUSALS = (
    "modified by an inplace operation",
    # a view created inside a custom Function (or an input returned as-is), or one created in
    # no_grad or inference mode (a kernel's x.reshape(-1, n) saved for backward), whose base
    # was changed in place: "...its base or another view of its base has been modified
    # inplace with grad mode enabled" / "... in normal mode", raised at the op or in backward
    "its base or another view of its base has been modified inplace",
    "is a view and is being modified inplace",
    "a view of a leaf Variable that requires grad is being used in an in-place operation",
    "a leaf Variable that requires grad is being used in an in-place operation",
    "unsafe_view",
    # a view made under no_grad or inference mode, or one of several views, changed in place
    "is being modified inplace",
    "output views to be modified inplace",
    "Inplace update to inference tensor outside InferenceMode",
)
"""autograd's words for refusing an in-place change (at the op or at backward)."""


def refuses_write(text: str) -> bool:
    """A message that carries one of autograd's in-place refusals (``Symptom.REFUSED_WRITE``)."""
    return any(words in text for words in _REFUSALS)


@dataclass(frozen=True)
class Code:
    code: str
    name: str
    """Describes the defect, not the fix."""
    what: str
    why: str
    example: str = ""
    fix: str = ""
    check: str | None = None
    """The check that reports it; set by the registry, which collects every check's codes."""
    reports: frozenset[Symptom] = frozenset()
    """The symptoms every finding of this code reports (``Symptom``)."""


GENERAL = (
    Code("GV001", "spec-unreadable",
         "A spec file could not be read as YAML: a syntax error, bad encoding, an empty file or a "
         "YAML tag that would construct an object.",
         "gradverify only reads plain YAML with yaml.safe_load semantics; it never builds objects "
         "or runs code from a spec.",
         "cases:\n  - args: [{shape: [3, 4]}\n",
         "Fix the YAML at the line given (here: the missing ']'). Save the file as UTF-8."),
    Code("GV002", "spec-invalid",
         "A spec is valid YAML but not a valid gradverify spec: an unknown key, a wrong type, an "
         "unknown dtype, init or dim, or arguments that do not match forward's parameters.",
         "Specs are validated before anything runs, so that a typo never silently turns a check "
         "off or tests something other than you meant.",
         "cases:\n  - args:\n      input: {shpe: [3, 4]}\n",
         "Follow the message: it names the file, line and key path, the allowed values and the "
         "closest valid spelling."),
    Code("GV003", "target-unimportable",
         "The module of a target (or of a reference or factory) cannot be imported.",
         "The current directory is put on sys.path as `python -m` does; everything else must be "
         "installed in the environment that runs gradverify.",
         "gradverify check mypkg.opz:Linear",
         "Run from the project root, install the package (pip install -e .), or give a path: "
         "gradverify check path/to/file.py:Linear."),
    Code("GV004", "target-missing",
         "The module imports, but has no attribute of the given name.",
         "Usually a typo or a class that was renamed.",
         "gradverify check mypkg.ops:LinearFuncton",
         "Use the name the message suggests; `gradverify list mypkg.ops` lists the Functions."),
    Code("GV005", "target-not-a-function",
         "The target is not one of the kinds gradverify verifies (a torch.autograd.Function "
         "class, a custom op, a plain function, an nn.Module class), or it is one without what "
         "that kind needs: a Function class without forward or backward, a module without "
         "forward, a module whose forward takes an argument named like one of its parameters.",
         "Each kind is called and differentiated in its own way; an object of another kind "
         "(an instance, a number, a class of another base) has nothing gradverify can call.",
         "gradverify check mypkg.layers:LINEAR_SIZE   # an int, not a target",
         "Name the Function class, op, function or module class itself (`gradverify list "
         "mypkg.layers` lists what a module defines)."),
    Code("GV006", "factory-failed",
         "A case's factory could not be imported, raised, or returned something other than a "
         "tuple/list of arguments or a dict of named arguments.",
         "A factory is your code: gradverify reports its failure instead of guessing inputs.",
         "def make_inputs(generator):\n    return torch.randn(3, 4)  # not a tuple",
         "Return a tuple/list of forward's arguments or a dict keyed by parameter name."),
    Code("GV007", "inputs-too-large",
         "A case's tensors would need more memory than gradverify allows for one case.",
         "Gradient checks keep several float64 copies; allocating first and failing later would "
         "take the machine down.",
         "args: [{shape: [100000, 100000]}]",
         "Use small shapes: gradient bugs show on tiny inputs (distinct sizes, batch 1 and > 1)."),
    Code("GV008", "forward-raised",
         "forward raised on the spec's inputs, so the checks of that case could not run.",
         "Either the spec's inputs are not what the Function expects (shapes, dtypes, argument "
         "order), or forward has a bug.",
         "args: {input: {shape: [3, 4]}, weight: {shape: [3, 4]}}   # weight must be [5, 4]",
         "Fix the shapes or dtypes in the spec; for an inferred spec run `gradverify init`."),
    Code("GV009", "case-timed-out",
         "A case ran longer than --timeout seconds and was stopped.",
         "A hanging kernel or an enormous slow-mode Jacobian; other cases still run.",
         "", "Use smaller shapes, --fast, or a larger --timeout."),
    Code("GV010", "case-crashed",
         "The process running a case died (a segfault or abort in an extension).",
         "A crash in native code; gradverify isolates it so that other targets still report.",
         "", "Run the case alone with --no-isolate under a debugger."),
    Code("GV011", "gradverify-bug",
         "An internal error in gradverify.",
         "Exit code 4 means gradverify itself failed, not your Function.",
         "", "Please report it with the traceback and the spec."),
    Code("GV012", "torch-state-changed",
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
    Code("GV013", "nothing-verified",
         "Every gradient check of a case skipped because no input requires grad, or because no "
         "output is differentiable although the Function returns floating tensors.",
         "A case that verifies nothing must not look like a pass: CI would go green on zero "
         "checks. It is a warning, so `--strict` fails it.",
         "cases:\n  - args: {x: {shape: [3], requires_grad: false}}",
         "Let a floating input require grad, and do not mark every floating output "
         "non-differentiable (or turn grad mode off) unless the Function has no gradient."),
    Code("GV014", "run-interrupted",
         "The run was stopped (SIGINT, SIGTERM or SIGHUP) before this case finished.",
         "gradverify stops its workers, writes the report files that were asked for with the "
         "cases that finished, marks the rest with this code, and exits 128 + the signal "
         "number (130, 143, 129).",
         "", "Rerun the case; nothing is wrong with it."),
    Code("GV015", "left-running",
         "A case left threads or processes running after it finished: the Function (or a module "
         "it imports) starts helpers it never stops.",
         "In training they pile up with every call (108 processes in one probe); here "
         "gradverify stops the processes when the case ends (isolated runs: the whole worker "
         "with them) so that nothing outlives `gradverify check`.",
         "def forward(ctx, x):\n    threading.Thread(target=poll_gpu).start()   # never joined",
         "Join threads and wait for processes before forward returns, start them once at "
         "import as daemons, or use a pool owned by the caller."),
    Code("GV016", "out-of-memory",
         "The machine ran out of memory while the case ran (while making its inputs, or in "
         "the Function).",
         "It is a limit of the machine or of the case's size, not a wrong gradient; the other "
         "cases still run and are reported.",
         "args: {x: {shape: [12000, 12000]}}",
         "Use smaller shapes: gradient bugs show on a few elements per dim."),
    Code("GV017", "torch-too-old",
         "The target needs a newer torch than the one installed: custom ops "
         "(torch.library.custom_op, opcheck's tests) need torch >= 2.4.",
         "gradverify verifies Function classes, functions and modules on torch 2.1 and newer; "
         "what a torch release does not have cannot be checked on it, and a spec says so "
         "rather than fail.",
         "target: mypkg.ops:mysin   # a torch.library.custom_op, checked on torch 2.1",
         "Upgrade torch, or give the spec `requires_torch: \"2.4\"`: on an older torch its "
         "cases are then skipped with that reason."),
    Code("GV018", "worker-did-not-start",
         "A worker process (a fresh Python that imports torch and gradverify, then runs cases) "
         "exited or hung before it was ready, so the cases it was to run did not run.",
         "It is the environment, not any target: torch or gradverify cannot be imported by "
         "this interpreter, or the machine is too loaded to start one within its deadline "
         "(180 s, apart from --timeout, which limits each case from when it starts). No "
         "target is blamed for it.",
         "PYTHONPATH=/opt/old-torch gradverify check   # a torch that does not import",
         "Run the command the message gives (python -c \"import torch, gradverify\") with the "
         "same interpreter and environment, and fix what it prints."),
    Code("GV020", "module-not-built",
         "An nn.Module target could not be built: its constructor raised, or `init_args` names "
         "an argument the constructor does not take.",
         "A module is verified as built from the spec's `init_args:` (seeded); without a module "
         "there is nothing to check.",
         "target: mypkg.layers:Linear\ninit_args: {in_feature: 4}   # the argument is in_features",
         "Give the constructor's arguments under `init_args:`, as the class takes them."),
    Code("GV021", "reference-not-callable",
         "The spec's `reference:` names something that cannot be called.",
         "The reference check calls it on the case's arguments and compares its outputs and "
         "gradients with the target's.",
         "reference: mypkg.ops:EPS   # a number",
         "Name a function (or a Function class's apply) computing the same outputs with "
         "torch's own ops."),
    Code("GV022", "no-targets-found",
         "A module or package named on the command line defines nothing gradverify verifies "
         "(no Function class, custom op or nn.Module class), or none of them could be "
         "introspected.",
         "A plain function is a target only when named (`module:function`): every helper of a "
         "module is a function.",
         "gradverify init mypkg.utils   # helpers only",
         "Name the module that defines the Functions, or a function as module:function."),
    Code("GV019", "spec-unfinished",
         "The spec still holds a TODO comment (`gradverify init` writes one where its guesses "
         "did not run, or where no value could be guessed).",
         "An unfinished spec runs, but what it checks was guessed: a failure may come from a "
         "wrong guess (a weight of the wrong shape) rather than from the code, and a pass may "
         "check less than a finished spec would. It is a warning, so `--strict` fails it.",
         "# TODO: no inputs tried made forward and backward run; the closest raised\n"
         "target: mypkg.ops:FusedNorm",
         "Set the shapes and values forward expects (the comments say what was guessed), "
         "then delete the TODO line."),
    Code("GV023", "forward-not-finite",
         "forward returned NaN or inf on a case's inputs: the inputs lie outside forward's "
         "domain (a zero vector normalised, the log of 0, a 0/0 on a self-loop edge).",
         "Every gradient check on such inputs compares NaN with NaN and would blame backward "
         "for what is the inputs' fault. gradverify says so once for the case and skips the "
         "checks that compare values on it. It is a warning, so `--strict` fails it; if the "
         "inputs are within forward's domain, forward itself is wrong there.",
         "cases:\n  - args: {x: {shape: [4, 3], init: zeros}}   # x / x.norm(): 0 / 0",
         "Choose inputs forward is defined on (an `init` away from the singular point, a "
         "`factory` that draws edges without self-loops); `gradverify init` and `record` "
         "write only such inputs."),
    Code("GV024", "device-unavailable",
         "The device a case is to run on (`--device`, the spec's `device:`, `device =` of "
         "pyproject.toml) is not on this machine: no CUDA, or fewer CUDA devices than its "
         "index.",
         "A case cannot run where there is no device; the worker that would run it says so "
         "(the command line never imports torch to ask). It is a usage error (exit 2): the "
         "run asked for what this machine cannot do.",
         "device: cuda        # in a spec, run on a machine without CUDA",
         "Run on a machine with the device, or pass `--device cpu` (the flag is over a "
         "spec's `device:`)."),
    Code("GV025", "triton-interpreter-limit",
         "A check cannot run on a target that launches Triton kernels while Triton's "
         "interpreter runs them (TRITON_INTERPRET=1, how a machine without CUDA runs Triton): "
         "the interpreter computes on real data where the check hands the kernel fake tensors "
         "(opcheck's fake-tensor and AOT dispatch tests).",
         "This is a limit of the interpreter, not a defect of the target, so it is a note: the "
         "check's row is skipped, saying so.",
         "TRITON_INTERPRET=1 gradverify check specs/triton_ops.yaml",
         "Run the check on a machine with CUDA, without TRITON_INTERPRET."),
    Code("GV026", "backward-refuses-float64",
         "backward raised on the float64 copies of a case's inputs but runs on the "
         "working-dtype ones: a kernel without float64 support.",
         "Every gradient check runs in float64, so none can judge such a backward, and its "
         "raising is no defect of the Function (training never hands it float64). The case is "
         "an error, its float64 checks skipped, unless the spec names a `reference:`: then the "
         "reference check alone judges it, in the working dtype.",
         "_DTYPES = {torch.float32: 0, torch.float16: 1}\n"
         "def backward(ctx, grad):\n    code = _DTYPES[grad.dtype]   # KeyError: torch.float64",
         "Name a plain-PyTorch `reference: mod:fn` in the spec (the same math as forward), or "
         "support float64."),
)
"""Codes of the run itself (input, target and run errors), not of any one check."""
