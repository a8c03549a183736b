"""The compile check's messages (``checks/compile.py``, ``checks/_compiled.py``): torch's
reason, whole, and a hint that blames the locale where the locale is at fault."""
from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch.autograd.function import once_differentiable

import torchversions
import zoo
from conftest import ROOT
from gradverify import verify
from gradverify.checks import _compiled
from gradverify.results import Severity, Status

RAISED = ("backend='aot_eager' raised:\nUnicodeDecodeError: 'ascii' codec can't decode byte 0xe2 "
          "in position 602: ordinal not in range(128)\n\nSet TORCHDYNAMO_VERBOSE=1 for the "
          "internal stack trace")



def _verified_torch() -> None:
    """The inductor and compile(func.jvp) cells, as these tests pin them, were seen on torch
    2.13 and later; an older torch's inductor may be absent (torch 2.1 needs pkg_resources) or
    compile otherwise: the zoo and trust tests still run the check there."""
    torchversions.require((2, 13), "the inductor and compile(func.jvp) cells as seen on 2.13")

def test_a_header_line_is_followed_by_what_it_introduces():
    """torch's BackendCompilerFailed says ``backend=... raised:`` on its first line and the error
    on the second: the finding once ended at "raised:", with no reason."""
    reason = _compiled.reason(RuntimeError(RAISED))
    assert reason == ("backend='aot_eager' raised: UnicodeDecodeError: 'ascii' codec can't "
                      "decode byte 0xe2 in position 602: ordinal not in range(128)")
    assert _compiled.reason(RuntimeError("one line\nmore")) == "one line"
    assert _compiled.reason(RuntimeError("")) == "RuntimeError"


def test_a_decode_error_is_blamed_on_the_locale():
    assert _compiled.hint(RuntimeError(RAISED)) == _compiled.LOCALE_HINT
    assert "TORCH_LOGS" in _compiled.hint(RuntimeError("graph break"))


@pytest.mark.slow
def test_under_an_ascii_locale_the_finding_says_why():
    """Under LC_ALL=C without UTF-8 mode, torch 2.13's inductor cannot read its own templates:
    the compile finding names the decode error and the locale (a torch that reads them as
    UTF-8 passes)."""
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    result = subprocess.run([sys.executable, "-m", "gradverify", "check",
                             "specs/mul_constant.yaml", "--only", "compile"], cwd=ROOT,
                            capture_output=True, text=True, env=env, timeout=300)
    assert "Traceback" not in result.stderr, result.stderr
    if result.returncode == 0:
        assert " passed" in result.stdout
        return
    assert result.returncode == 1, result.stdout + result.stderr
    flat = " ".join(result.stdout.split())
    assert "raised: UnicodeDecodeError" in flat and "PYTHONUTF8=1" in flat, result.stdout


@pytest.mark.slow
def test_inductor_on_a_cold_cache_leaves_no_thread_running(tmp_path):
    """On an empty cache inductor compiles C++; with its default compile threads it left a
    pool thread (Python's executor code, not torch's) running after the case: GV015 on a
    correct Function. It compiles in the calling thread now."""
    _verified_torch()
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cold")}
    result = subprocess.run([sys.executable, "-m", "gradverify", "check",
                             "specs/mul_constant.yaml", "--only", "compile", "--strict",
                             "-v", "--case", "compiled"],
                            cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0 and "GV015" not in result.stdout, result.stdout
    assert "aot_eager and inductor" in " ".join(result.stdout.split())


# ------------------------------------------------- the cells: inductor, compile(func.jvp)
# Each is judged against bare torch on the torch at hand: what a cell reports is what this
# torch does (a note where it cannot compile the cell), never a claim about another version.

SPEC = {"checks": {"compile": True}, "cases": [{"args": {"x": {"shape": [3]}}}]}


def _row(cls, **keywords):
    report = verify(cls, spec=SPEC, checks=["compile"], **keywords)
    return next(c for c in report.results[0].checks if c.name == "compile")


class NumpySinWithJvp(torch.autograd.Function):
    """Right in eager (backward, jvp: both cos); forward and backward leave torch through
    numpy, so torch.func.grad cannot run it and of the func cells only compile(func.jvp) is
    compared: torch 2.13 differentiates the numpy forward (zero) instead of calling the jvp."""

    @staticmethod
    def forward(x):
        return torch.from_numpy(np.sin(x.detach().numpy()))

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.from_numpy(np.cos(x.detach().numpy()))

    @staticmethod
    def jvp(ctx, tangent):
        (x,) = ctx.saved_tensors
        return tangent * x.cos()


class SinWrongJvp(torch.autograd.Function):
    """Its jvp is wrong (twice the derivative); compiled, torch.func.jvp differentiates the
    torch forward and is right: the differences are the jvp's (forward_ad, GV301), never
    torch.compile's."""

    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()

    @staticmethod
    def jvp(ctx, tangent):
        (x,) = ctx.saved_tensors
        return 2 * tangent * x.cos()


class SeededNoise(torch.autograd.Function):
    """Right in eager and deterministic (it seeds itself); aot_eager draws eager's random
    numbers, inductor its own: outputs differ under inductor only."""

    @staticmethod
    def forward(x):
        torch.manual_seed(0)
        return x + torch.rand_like(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad


def _bare_jvp(cls):
    x, t = torch.randn(3, dtype=torch.double), torch.randn(3, dtype=torch.double)
    eager = torch.func.jvp(cls.apply, (x,), (t,))[1]
    torch._dynamo.reset()
    try:
        compiled = torch.compile(lambda y: torch.func.jvp(cls.apply, (y,), (t,)),
                                 backend="aot_eager")(x)[1]
    except Exception:  # noqa: BLE001 -- a torch that cannot compile it
        return eager, None
    return eager, compiled


@pytest.mark.slow
def test_compiled_func_jvp_is_judged_against_bare_torch():
    """GV355 exactly where bare torch.compile(torch.func.jvp) differs from a right eager jvp,
    with the torch version and the workaround; a note where this torch cannot compile it; a
    pass where it gets it right. Before, compile(func.jvp) was never tried: a pass."""
    eager, compiled = _bare_jvp(NumpySinWithJvp)
    row = _row(NumpySinWithJvp)
    codes = {(f.code, f.severity) for f in row.findings}
    assert ("GV354", Severity.ERROR) not in codes  # torch.func.grad cannot use it: not tried
    if compiled is None:
        assert row.status == Status.PASS and ("GV353", Severity.INFO) in codes, codes
    elif torch.allclose(compiled, eager):
        assert row.status == Status.PASS, codes
    else:
        assert row.status == Status.FAIL and ("GV355", Severity.ERROR) in codes, codes
        finding = next(f for f in row.findings if f.code == "GV355")
        assert f"on torch {torch.__version__}" in finding.message
        assert "does not use the Function's jvp; torch is at fault" in finding.message
        assert "torch.compiler.disable" in finding.hint
        assert row.summary.startswith("torch.compile(torch.func.jvp(f)) on torch")


@pytest.mark.slow
def test_a_wrong_jvp_is_not_blamed_on_the_compiler():
    """Compiled func.jvp differs from eager here too, but eager disagrees with finite
    differences: the jvp is wrong, which forward_ad says (GV301); compile has nothing to
    blame torch.compile for."""
    _verified_torch()
    eager, compiled = _bare_jvp(SinWrongJvp)
    assert compiled is None or not torch.allclose(compiled, eager)  # a naive cell would flag it
    report = verify(SinWrongJvp, spec=SPEC, checks=["compile", "forward_ad"])
    rows = {c.name: c for c in report.results[0].checks}
    assert "GV301" in {f.code for f in rows["forward_ad"].findings}
    assert rows["compile"].status == Status.PASS, [f.message for f in rows["compile"].findings]
    assert "GV355" not in {f.code for f in rows["compile"].findings}


@pytest.mark.slow
def test_inductor_is_compared_and_named():
    """A difference only inductor makes is a finding that names inductor, says aot_eager
    matches, and hints at inductor's own random numbers; before, only aot_eager was tried and
    the row passed. Judged against bare torch: where inductor matches eager here, a pass."""
    _verified_torch()
    x = torch.randn(3, dtype=torch.double)
    torch.manual_seed(1)
    eager = SeededNoise.apply(x)
    torch._dynamo.reset()
    try:
        inductor = torch.compile(SeededNoise.apply, backend="inductor")(x)
    except Exception:  # noqa: BLE001 -- no C++ compiler, say: the cell is a note
        inductor = None
    row = _row(SeededNoise)
    codes = {(f.code, f.severity) for f in row.findings}
    if inductor is None:
        assert row.status == Status.PASS and ("GV353", Severity.INFO) in codes, codes
    elif torch.allclose(inductor, eager):
        assert row.status == Status.PASS, codes
    else:
        assert row.status == Status.FAIL
        (finding,) = [f for f in row.findings if f.code == "GV352"]
        assert finding.message.startswith("compiled (inductor): output 0")
        assert "aot_eager matches eager" in finding.message
        assert "fallback_random" in finding.hint and finding.data["backend"] == "inductor"


def test_inductor_can_be_left_out():
    """``checks: {compile: {inductor: false}}`` compiles with aot_eager alone (inductor's C++
    costs seconds per target): the inductor-only difference is not looked for."""
    _verified_torch()
    spec = {**SPEC, "checks": {"compile": {"inductor": False}}}
    report = verify(SeededNoise, spec=spec, checks=["compile"])
    (row,) = report.results[0].checks
    assert row.status == Status.PASS, [f.message for f in row.findings]
    assert row.summary.endswith("matches eager with aot_eager")


def test_a_backend_this_machine_cannot_run_is_a_note(monkeypatch):
    """Without a C++ compiler (simulated) inductor cannot run: the row passes on aot_eager
    with a note naming inductor and the reason, never a failure or gradverify's error."""
    _verified_torch()
    monkeypatch.setattr(_compiled, "unavailable",
                        lambda backend, device: "InvalidCxxCompiler: No working C++ compiler "
                        "found" if backend == "inductor" else None)
    row = _row(Square)
    assert row.status == Status.PASS, [f.message for f in row.findings]
    (note,) = [f for f in row.findings if f.code == "GV353"]
    assert note.severity == Severity.INFO
    assert note.message.startswith("torch.compile(backend='inductor') cannot run here")
    assert "No working C++ compiler" in note.message and "C++ compiler" in note.hint
    assert row.summary.endswith("matches eager with aot_eager")


def test_a_function_only_the_later_backend_cannot_compile_is_a_note(monkeypatch):
    """aot_eager compiles it, the later backend raises (a stand-in for an inductor that cannot
    lower an op on this torch): a note that names the backend and torch's reason, not a
    failure; before, any raise was GV353, an error."""
    _verified_torch()

    def no_sin(graph, example_inputs):
        if any("sin" in str(node.target) for module in graph.modules()
               if isinstance(module, torch.fx.GraphModule) for node in module.graph.nodes):
            raise RuntimeError("no lowering for sin on this torch")
        return graph.forward

    monkeypatch.setattr(_compiled, "BACKENDS", ("aot_eager", no_sin))
    row = _row(Sin)
    assert row.status == Status.PASS, [f.message for f in row.findings]
    (note,) = [f for f in row.findings if f.code == "GV353"]
    assert note.severity == Severity.INFO and "cannot compile it on torch" in note.message
    assert "(aot_eager could): " in note.message and "no lowering for sin" in note.message


class Sin(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x.sin()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * x.cos()


class Square(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


@pytest.mark.slow
def test_an_in_place_forward_is_compared_on_intermediates(monkeypatch):
    """compile(func.grad) on inputs made inside it, for a forward that writes into its input
    (exp_, declared; torch.func refuses it on a leaf, "a leaf Variable that requires grad is
    used in an in-place operation"): a compiler that gets the gradient wrong there (simulated:
    twice eager's) is GV354 for that cell; a right one leaves nothing (a note on a torch that
    cannot compile it: 2.1). Before, torch.func's refusal of the leaves ended the comparison
    (and its write into them changed the inputs of the next cell)."""
    x = torch.randn(3, dtype=torch.double)
    grad = torch.randn(3, dtype=torch.double)
    eager = ([], [grad * x.exp()])
    run = SimpleNamespace(values=[x.clone()], names=["x"], diff_positions=[0])
    ctx = SimpleNamespace(args=lambda dtype: run, location=None, forward_location=None,
                          info=SimpleNamespace(function=zoo.InplaceExpVmap))
    right = _compiled.func_grad(ctx, [grad], eager)
    if torchversions.at_least(2, 13):
        assert right == [], right
    else:  # torch 2.1 cannot compile the cell: a note
        assert all(f.code == "GV353" and f.severity is Severity.INFO for f in right), right
    assert torch.equal(run.values[0], x)
    monkeypatch.setattr(torch, "compile",
                        lambda fn, **_: lambda *xs: [2 * g for g in fn(*xs)])
    (finding,) = _compiled.func_grad(ctx, [grad], eager)
    assert finding.code == "GV354" and finding.input == "x"
    assert f"(inputs made inside it) on torch {torch.__version__}:" in finding.message
    assert torch.equal(run.values[0], x)
