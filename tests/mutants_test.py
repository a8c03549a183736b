"""--mutate (gradverify/mutants/): the mutation operators on small sources, a compiled mutant,
the merge of the cases' verdicts, and the score of small Functions, a function and a custom op
end to end."""
from __future__ import annotations

import ast
import inspect
import json
import textwrap

import pytest
import torch

from gradverify.mutants import operators, plan
from gradverify.mutants.merge import merge, why
from gradverify.mutants.plan import helpers
from gradverify.mutants.source import BackwardSource, read_backward
from gradverify.results import Location
from gradverify.scores import MutantRun
from tests.conftest import run_cli


def _source(text: str, grads: tuple[str, ...] = ("g",)) -> BackwardSource:
    tree = ast.parse(textwrap.dedent(text)).body[0]
    assert isinstance(tree, ast.FunctionDef)
    return BackwardSource(function=None, file="<test>", tree=tree, grads=grads)


@pytest.mark.parametrize(("operator", "text", "expected"), [
    pytest.param(operators.negate_returned, "def b(ctx, g):\n    return g * 2, None\n",
                 ["`g * 2` -> `-(g * 2)`"], id="negate-skips-None"),
    pytest.param(operators.negate_returned, "def b(ctx, g):\n    return g\n",
                 ["`g` -> `-g`"], id="negate-single"),
    pytest.param(operators.drop_factor, "def b(ctx, g):\n    return g * ctx.w\n",
                 ["`g * ctx.w` -> `g`", "`g * ctx.w` -> `ctx.w`"], id="drop-factor"),
    pytest.param(operators.drop_factor, "def b(ctx, g):\n    return g / ctx.n\n",
                 ["`g / ctx.n` -> `g`"], id="drop-divisor"),
    pytest.param(operators.drop_term, "def b(ctx, g):\n    return g + 1\n",
                 ["`g + 1` -> `g`", "`g + 1` -> `1`"], id="drop-term"),
    pytest.param(operators.drop_term, "def b(ctx, g):\n    return g - ctx.x\n",
                 ["`g - ctx.x` -> `g`", "`g - ctx.x` -> `-ctx.x`"], id="drop-subtracted"),
    pytest.param(operators.drop_term, "def b(ctx, g):\n    gx = g\n    gx += g\n    return gx\n",
                 ["`gx += g` removed"], id="drop-augmented"),
    pytest.param(operators.swap_returned, "def b(ctx, g):\n    return g * 2, None, g * 3\n",
                 ["returned `g * 2` and `g * 3` swapped"], id="swap-skips-None"),
    pytest.param(operators.drop_transpose, "def b(ctx, g):\n    return g.t() @ ctx.x\n",
                 ["`g.t()` -> `g`"], id="drop-t"),
    pytest.param(operators.drop_transpose, "def b(ctx, g):\n    return torch.transpose(g, 0, 1)\n",
                 ["`torch.transpose(g, 0, 1)` -> `g`"], id="drop-torch-transpose"),
    pytest.param(operators.drop_transpose, "def b(ctx, g):\n    return g.mT\n",
                 ["`g.mT` -> `g`"], id="drop-mT"),
    pytest.param(operators.ones_incoming, "def b(ctx, g):\n    return g * 2\n",
                 ["`g` -> `ones_like(g)`"], id="ones"),
    pytest.param(operators.ignore_gate,
                 "def b(ctx, g):\n    if ctx.needs_input_grad[1]:\n        return None, g\n",
                 ["`ctx.needs_input_grad[1]` -> `True`"], id="gate"),
    pytest.param(operators.ignore_gate,
                 "def b(ctx, g):\n    a, c = ctx.needs_input_grad\n    return g, g\n",
                 ["`ctx.needs_input_grad` -> `(True, ...)`"], id="gate-unpacked"),
    # nothing to mutate
    pytest.param(operators.negate_returned, "def b(ctx, g):\n    return None\n", [],
                 id="noop-negate-None"),
    pytest.param(operators.drop_factor, "def b(ctx, g):\n    return g @ ctx.w\n", [],
                 id="noop-matmul-is-no-factor"),
    pytest.param(operators.drop_transpose, "def b(ctx, g):\n    return g.T_ish\n", [],
                 id="noop-not-a-transpose"),
    pytest.param(operators.drop_factor,
                 "def b(ctx, g):\n    f = lambda t: t * 2\n    return f(g)\n", [],
                 id="noop-inside-a-lambda"),
])
def test_operator(operator, text, expected):
    found = operator(operators._Site(_source(text)))
    assert [m.mutation for m in found] == expected
    assert all(m.line >= 1 and m.span[0] <= m.line <= m.span[1] for m in found)


@pytest.mark.parametrize(("operator", "text", "why"), [
    pytest.param(operators.drop_factor, "def b(ctx, g):\n    return g * 1\n",
                 "the factor dropped is the constant 1", id="factor-1"),
    pytest.param(operators.drop_term, "def b(ctx, g):\n    return g + 0\n",
                 "the term dropped is the constant 0", id="term-0"),
    pytest.param(operators.swap_returned, "def b(ctx, g):\n    return g * 2, g * 2\n",
                 "the two gradients swapped are the same expression", id="same-swap"),
    pytest.param(operators.ones_incoming, "def b(ctx, g):\n    return None\n",
                 "backward never reads g", id="unread-gradient"),
])
def test_equivalent_mutants_say_why(operator, text, why):
    assert next(m.equivalent for m in operator(operators._Site(_source(text)))) == why


def test_no_term_is_dropped_inside_a_while_loop():
    source = _source("def b(ctx, g):\n    i = 0\n    while i < 3:\n        i = i + 1\n"
                     "    return g * 2 + 1\n")
    lines = {m.line for m in operators.source_mutants(source)
             if m.operator in ("drop-term", "drop-factor")}
    assert lines == {5}


class Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        big = x.dim() > 3
        if big:
            return grad * w * 1, grad * x  # no case has 4 dims: never runs
        return grad * w, grad * x


def test_a_mutant_compiles_at_the_lines_of_the_original_and_runs():
    source = read_backward(Scale.backward, 1)
    assert source is not None and source.grads == ("grad",)
    assert source.tree.lineno == Scale.backward.__code__.co_firstlineno + 1  # after @staticmethod
    negated = next(m for m in operators.source_mutants(source) if m.line > source.tree.lineno + 4
                   and m.mutation == "`grad * x` -> `-(grad * x)`")
    mutant = source.compile(negated.tree, helpers({}, set()))
    assert mutant.__code__.co_filename == Scale.backward.__code__.co_filename
    x, w = torch.tensor([2.0]), torch.tensor([3.0])

    class Ctx:
        saved_tensors = (x, w)

    assert [t.item() for t in mutant(Ctx(), torch.ones(1))] == [3.0, -2.0]


def test_a_lambda_backward_is_read_as_a_def():
    """``register_autograd(lambda ctx, g: ...)`` is common: its body is mutated as a def's."""
    backward = lambda ctx, g: g * ctx.k  # noqa: E731
    source = read_backward(backward, 1)
    assert source is not None and source.grads == ("g",)
    assert ast.unparse(source.tree.body[0]) == "return g * ctx.k"
    assert source.tree.lineno == backward.__code__.co_firstlineno
    assert [m.mutation for m in operators.drop_factor(operators._Site(source))] == [
        "`g * ctx.k` -> `g`", "`g * ctx.k` -> `ctx.k`"]
    two = [lambda ctx, g: g, lambda ctx, g: -g]  # one line, the same parameters: which is it?
    assert read_backward(two[0], 1) is None


def test_marked_code_says_which_lines_ran_in_any_thread():
    """Lines are counted by markers in the compiled code, not a tracer: a backward the engine
    runs on another thread (CUDA's) is seen too."""
    import threading

    source = read_backward(Scale.backward, 1)
    assert source is not None
    ran: set[int] = set()
    function = source.compile(source.tree, helpers({}, ran))
    x, w = torch.tensor([2.0]), torch.tensor([3.0])

    class Ctx:
        saved_tensors = (x, w)

    thread = threading.Thread(target=function, args=(Ctx(), torch.ones(1)))
    thread.start()
    thread.join()
    first = source.tree.lineno
    assert ran == {first + 1, first + 2, first + 3, first + 5}  # not the `if big:` branch


def _spec(w: dict) -> dict:
    return {"cases": [{"name": "small", "args": {"x": {"shape": [3]}, "w": {"shape": [3], **w}}}]}


def _score(target, spec):
    from gradverify import verify

    report = verify(target, spec, mutate=True)
    (score,) = report.mutants
    return score


def test_weights_of_ones_let_a_dropped_factor_live_and_say_so():
    score = _score(Scale, _spec({"init": "ones"}))
    (survivor,) = [m for m in score.survived if m.mutation == "`grad * w` -> `grad`"]
    assert survivor.why == "every case has w = 1; give w random values"
    assert survivor.location is not None and survivor.location.line == \
        Scale.backward.__code__.co_firstlineno + 6
    # the branch no case runs: listed apart, not counted
    assert {m.location.line for m in score.unexecuted} == {
        Scale.backward.__code__.co_firstlineno + 5}
    assert score.total == score.killed + len(score.survived)


def test_random_weights_kill_it():
    backward = vars(Scale)["backward"]
    score = _score(Scale, _spec({}))
    assert vars(Scale)["backward"] is backward  # each mutant was taken out again
    assert all(m.mutation != "`grad * w` -> `grad`" for m in score.survived)
    assert score.killed == score.total and score.total >= 10


class FrozenWeightPath(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        if not ctx.needs_input_grad[1]:
            return grad * w / 1, None  # only needs_input_grad's subsets run this line
        grad_x = grad * w if ctx.needs_input_grad[0] else None
        return grad_x, grad * x


def test_a_line_only_a_check_runs_is_not_unexecuted():
    """The spec's case has both inputs requiring grad; needs_input_grad's subsets run the
    first branch, and kill its mutants. The gates' mutants only waste work (GV204, a note)."""
    score = _score(FrozenWeightPath, _spec({}))
    assert score.unexecuted == ()
    # `/ 1` dropped is the same function, and so are the ignored gates for every check: they
    # only waste work (GV204 is a note); the rest are killed
    assert sorted(m.mutation for m in score.equivalent) == [
        "`ctx.needs_input_grad[0]` -> `True`", "`ctx.needs_input_grad[1]` -> `True`",
        "`grad * w / 1` -> `grad * w`"]
    assert all("wastes work" in m.why for m in score.equivalent if "needs_input_grad" in m.mutation)
    assert score.survived == () and score.killed == score.total and score.total >= 13


def test_value_mutants_for_a_target_without_a_backward():
    def double_sin(x):
        return torch.sin(x) * 2

    score = _score(double_sin, {"cases": [{"args": {"x": {"shape": [4]}}}]})
    assert score.note == "no backward of its own: value mutants of its inputs' gradients only"
    assert (score.total, score.killed) == (3, 3)


def test_value_mutants_for_a_backward_without_source():
    namespace: dict = {}
    exec("def backward(ctx, grad):\n    return grad * 3\n", namespace)  # no source to read
    Triple = type("Triple", (torch.autograd.Function,), {
        "forward": staticmethod(lambda ctx, x: x * 3),
        "backward": staticmethod(namespace["backward"]), "__module__": __name__})
    score = _score(Triple, {"cases": [{"args": {"x": {"shape": [4]}}}]})
    assert score.note == "backward's source cannot be read: value mutants only"
    assert (score.total, score.killed) == (3, 3)


def test_value_mutants_of_a_custom_op():
    from tests.torchversions import require_custom_ops

    require_custom_ops()
    from gradverify.examples.customop import scaled_sin

    registered = scaled_sin._backward_fn
    score = _score(scaled_sin, {"cases": [{"args": {"x": {"shape": [5]}, "alpha": 1.5}}]})
    assert scaled_sin._backward_fn is registered
    values = [m for m in score.survived if m.mutation.startswith("gradient of")]
    assert score.killed == score.total and values == [] and score.total >= 6
    # its gate on the only input that can require grad is always open
    assert [m.why for m in score.equivalent] == [
        "'x' is the only input that can require grad, so backward runs only when it does: "
        "the gate is always open"]


def test_score_in_process():
    """``gradverify.run.scoring.score``: what init and record call, without a run."""
    from gradverify.options import RunOptions
    from gradverify.run.scoring import score
    from gradverify.spec.file import from_dict
    from gradverify.targets import introspect

    found = score(introspect(Scale), from_dict(_spec({"init": "ones"})), RunOptions())
    assert found.target.endswith("Scale") and found.total == found.killed + 1
    assert [m.why for m in found.survived] == ["every case has w = 1; give w random values"]


_LIBRARIES: list = []


def _cube_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return 3 * x * x * grad


def test_source_mutants_of_an_op_registered_by_name():
    """``torch.library.register_autograd("ns::op", backward)`` without a CustomOpDef: its
    backward is found through the autograd.Function torch generated for it."""
    from tests.torchversions import require_custom_ops

    require_custom_ops()
    if not _LIBRARIES:
        library = torch.library.Library("gvmutants", "DEF")
        library.define("cube(Tensor x) -> Tensor")
        library.impl("cube", lambda x: x ** 3, "CPU")
        torch.library.register_autograd(
            "gvmutants::cube", _cube_backward, lib=library,
            setup_context=lambda ctx, inputs, output: ctx.save_for_backward(inputs[0]))
        _LIBRARIES.append(library)
    score = _score("gvmutants::cube", {"cases": [{"args": {"x": {"shape": [3]}}}]})
    assert score.note is None and score.killed == score.total
    assert score.total >= 8  # source mutants of _cube_backward, then 3 value mutants


def _run(key: str, verdict: str, **data) -> MutantRun:
    return MutantRun(key, f"m{key}", Location("f.py", 3), verdict, data=data)


def test_merge_counts_a_mutant_once_killed_in_any_case():
    score = merge("m:F", "s.yaml", [
        _run("a", "survived", difference=0.0), _run("a", "killed"),
        _run("b", "unexecuted"), _run("b", "unexecuted"),
        _run("c", "equivalent", why="same"), _run("d", "inapplicable"),
        _run("e", "survived", difference=0.0), _run("e", "unexecuted")])
    assert (score.total, score.killed) == (2, 1)
    assert [m.mutation for m in score.survived] == ["me"]
    assert [m.why for m in score.unexecuted] == ["no case runs this line"]
    assert [m.why for m in score.equivalent] == ["same"]


@pytest.mark.parametrize(("facts", "expected"), [
    pytest.param({"operator": "drop-term", "operand": "zeros", "operand_text": "b",
                  "operand_is_input": True},
                 "every case has b = 0; give b random values", id="zero-term"),
    pytest.param({"operator": "drop-term", "operand": "zeros", "operand_text": "acc"},
                 "every case has acc = 0 here, so dropping it changes nothing; if it can be other "
                 "than 0, choose inputs that make it so", id="zero-local-term"),
    pytest.param({"operator": "drop-term", "operand": "ones", "operand_text": "1",
                  "difference": 0.0},
                 "its gradients equal the original's exactly in every case: on these inputs the "
                 "change has no effect; choose inputs (and requires_grad) under which it has one",
                 id="a-term-of-one-is-no-factor"),
    pytest.param({"input": "w", "requires_grad": False},
                 "no case has 'w' requiring grad, so its gradient is never checked; give 'w' "
                 "requires_grad: true in a case", id="never-requires-grad"),
    pytest.param({"input": "x", "requires_grad": True, "zero_gradient": True},
                 "the gradient of 'x' is zero in every case; choose inputs that give 'x' a "
                 "nonzero gradient", id="zero-gradient"),
    pytest.param({"difference": 2e-6, "atol": 1e-5, "rtol": 1e-3, "scale": 1.0},
                 "its gradients differ from the original's by at most 2e-06, within the "
                 "tolerance (atol 1e-05, rtol 0.001); choose inputs where the change is larger, "
                 "or tighten the tolerance", id="within-tolerance"),
    pytest.param({"gradcheck": "xfail", "difference": 2.0},
                 "the spec expects gradcheck to fail (`expect:`), so finite differences cannot "
                 "tell this gradient from the intended one; name a `reference:` whose autograd "
                 "gives the intended gradient", id="expected-gradcheck-failure"),
    pytest.param({"gradcheck": "fail", "difference": 2.0},
                 "gradcheck already fails on the original, so a changed gradient cannot be told "
                 "from the wrong one; fix the target first", id="broken-target"),
    pytest.param({"difference": 0.5, "atol": 1e-5, "rtol": 1e-3, "scale": 1.0},
                 "its gradients differ from the original's by up to 0.5, yet no check failed or "
                 "warned on it: gradcheck is off for these cases", id="unchecked-difference"),
    pytest.param({"difference": 0.5, "atol": 1e-5, "rtol": 1e-3, "gradcheck": "pass"},
                 "its gradients differ from the original's by up to 0.5, yet no check failed or "
                 "warned on it: the finite differences decide nothing where it differs (a kink "
                 "or a tie in the inputs: fix the spec's `init`)", id="difference-at-a-kink"),
    pytest.param({"operator": "gate", "needs_input_grad": "fail", "difference": 0.0},
                 "needs_input_grad already fails on the original, so it cannot tell what the "
                 "gate changes; fix the target first", id="gate-of-a-broken-target"),
    pytest.param({"operator": "gate", "needs_input_grad": None},
                 "the needs_input_grad check, which closes the gate, did not run; turn it on "
                 "(it is off in `checks:` or by --only/--skip)", id="gate-unchecked"),
])
def test_why_a_mutant_lived(facts, expected):
    assert why([_run("a", "survived", **facts)]) == expected


def test_check_mutate_json_end_to_end(project):
    text = "import torch\n\n\n" + inspect.getsource(Scale)
    project.write("weights.py", text)
    line = text.splitlines().index("        return grad * w, grad * x") + 1
    project.write("specs/scale.yaml", """
        target: weights:Scale
        cases:
          - name: ones
            args: {x: {shape: [3]}, w: {shape: [3], init: ones}}
    """)
    result = run_cli("check", "--mutate", "--format", "json")
    assert result.code == 0, result.stderr
    (score,) = json.loads(result.stdout)["mutants"]
    assert set(score) >= {"target", "spec", "total", "killed", "survived"}
    assert (score["target"], score["spec"]) == ("weights:Scale", "specs/scale.yaml")
    assert score["survived"] == [{
        "mutation": "`grad * w` -> `grad`", "location": {"file": "weights.py", "line": line},
        "why": "every case has w = 1; give w random values", "larger": False, "gap": None}]
    assert score["killed"] == score["total"] - 1
    plain = " ".join(run_cli("check", "--mutate", "--format", "plain").stdout.split())
    assert "specs/scale.yaml weights:Scale: " in plain
    assert (f"weights.py:{line}: survived: `grad * w` -> `grad`: every case has w = 1; give w "
            "random values") in plain
    assert f"weights.py:{line - 1}: unexecuted: " in plain


GUARDED = '''
import os
import signal
import time

import torch


def _guard(out, grad, x, how):
    """Ends the process (or hangs) when backward's gradient is not the true one: only a
    mutant's is not."""
    if not torch.allclose(out, grad * 3 * x ** 2):
        if how == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        while True:
            time.sleep(0.05)


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        out = grad * 3 * x ** 2
        _guard(out, grad, x, HOW)
        return out
'''


@pytest.mark.slow  # a worker killed, and a hang stopped by a 10 s timeout
@pytest.mark.parametrize("how", ["segfault", "hang"])
def test_a_mutant_that_ends_or_hangs_its_process_never_costs_the_verdict(project, how):
    """Our own mutants run after the case's checks, in a budget of their own: the case's
    checks, its status and the exit code are those of `check` without --mutate."""
    project.write("guarded.py", GUARDED.replace("HOW", repr(how)))
    project.write("specs/cube.yaml", """
        target: guarded:Cube
        cases:
          - name: vector
            args: {x: {shape: [4]}}
    """)
    # the first-order checks only: a loaded machine's first checkpoint (torch._dynamo's
    # import) must not take the case's time limit, which stops the hang
    only = ("--only", "gradcheck,gradgradcheck,needs_input_grad", "--timeout", "10")
    plain = run_cli("check", "--format", "json", *only, isolate=True)
    mutated = run_cli("check", "--mutate", "--format", "json", *only, isolate=True)
    assert plain.code == mutated.code == 0, mutated.output
    before, after = json.loads(plain.stdout), json.loads(mutated.stdout)
    rows = [[(c["name"], c["status"]) for c in r["checks"]] for r in before["results"]]
    assert rows == [[(c["name"], c["status"]) for c in r["checks"]]
                    for r in after["results"]]
    assert [r["status"] for r in after["results"]] == ["pass"]
    (score,) = after["mutants"]
    ended = ("a mutant ended the process running them (killed by SIGSEGV)" if how == "segfault"
             else "they ran past the timeout (10 s) and were stopped")
    assert score["note"] == f"case vector's mutants not judged: {ended}"
    assert after["results"][0]["mutants_not_judged"] == f"not judged: {ended}"


WRONG_GUARDED = GUARDED.replace("grad * 3 * x ** 2", "grad * 2 * x ** 2")


@pytest.mark.slow  # a worker killed while judging mutants, after shrinking
def test_a_failing_case_keeps_its_smallest_failing_case_whatever_a_mutant_does(project):
    """The smallest failing case is found before any mutant runs: a mutant that ends the
    process costs the score only, never the failure's smallest case (or its repro)."""
    project.write("guarded.py", WRONG_GUARDED.replace("HOW", repr("segfault")))
    project.write("specs/cube.yaml", """
        target: guarded:Cube
        cases:
          - name: vector
            args: {x: {shape: [4]}}
    """)
    only = ("--only", "gradcheck", "--timeout", "20")
    plain = run_cli("check", "--format", "json", *only, isolate=True)
    mutated = run_cli("check", "--mutate", "--format", "json", *only, isolate=True)
    assert plain.code == mutated.code == 1, mutated.output

    def smallest(report: dict) -> list:
        return [f["smallest"] for r in report["results"] for c in r["checks"]
                for f in c["findings"] if f["severity"] == "error"]

    before, after = json.loads(plain.stdout), json.loads(mutated.stdout)
    assert smallest(before) and all(smallest(before)), before
    assert smallest(after) == smallest(before)
    assert "killed by SIGSEGV" in after["results"][0]["mutants_not_judged"]


def test_a_mutant_engine_that_raises_costs_the_score_only(monkeypatch):
    """Judging the mutants may raise (out of memory on a mutant's huge gradient, or a bug of
    ours): the case's checks and status are as without --mutate, and why is said."""
    from gradverify.mutants import engine

    def raising(*args, **kwargs):
        raise MemoryError("no room for the mutant's Jacobian")

    from gradverify import verify

    class Triple(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 3

        @staticmethod
        def backward(ctx, grad):
            return grad * 3

    monkeypatch.setattr(engine, "case_mutants", raising)
    spec = {"cases": [{"name": "v", "args": {"x": {"shape": [4]}}}]}
    plain = verify(Triple, spec=spec, checks=["gradcheck"])
    mutated = verify(Triple, spec=spec, checks=["gradcheck"], mutate=True)
    assert mutated.ok and plain.ok and not mutated.errors
    result = mutated.results[0]
    assert [(c.name, c.status) for c in result.checks] == \
        [(c.name, c.status) for c in plain.results[0].checks]
    assert result.mutants_not_judged == \
        "not judged: judging them raised MemoryError: no room for the mutant's Jacobian"


CHANGING = '''
import torch


class Triple(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        return grad * 3
'''


@pytest.mark.parametrize("change", ["deleted", "invalid", "other code", "other numbers",
                                    "emptied"])
def test_a_source_changed_since_import_falls_back_to_value_mutants(project, change):
    """The file no longer holds the backward that runs: its mutants would be of other code (a
    syntax error once crashed ``inspect``, exit 4; other valid code scored "0/0")."""
    path = project.write("changing.py", CHANGING)
    import changing

    if change == "deleted":
        path.unlink()
    elif change == "invalid":
        path.write_text("def broken(:\n    pass\n" * 5)
    elif change == "other code":
        path.write_text(CHANGING.replace("return grad * 3", "y = grad\n        return y + 1")
                        .replace("return x * 3", "out = x\n        return out"))
    elif change == "other numbers":  # every name and line kept: only a constant and an operator
        path.write_text(CHANGING.replace("return grad * 3", "return grad / 4"))
    else:
        path.write_text("")
    score = _score(changing.Triple, {"cases": [{"args": {"x": {"shape": [4]}}}]})
    assert score.note == "backward's source cannot be read: value mutants only"
    assert (score.total, score.killed) == (3, 3)


class Gain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, gain):
        ctx.save_for_backward(x, gain)
        return x * gain

    @staticmethod
    def backward(ctx, grad):
        x, gain = ctx.saved_tensors
        return grad * gain, (grad * x).sum()


def test_a_permutation_of_a_0d_gradient_is_equivalent_not_a_survivor():
    """No input can make it change anything: it is no weakness of the spec."""
    score = _score(Gain, {"cases": [{"args": {"x": {"shape": [4]}, "gain": {"shape": []}}}]})
    assert "gradient of 'gain' permuted" not in [m.mutation for m in score.survived]
    (line,) = [m for m in score.equivalent if m.mutation == "gradient of 'gain' permuted"]
    assert line.why == ("the gradient of 'gain' is 0-d: no input can make a permutation of it "
                        "change anything")


class Crop(torch.autograd.Function):
    """x[..., s:e]; backward reads the incoming gradient through a slice of its own length
    (``g[..., :e - s]``, a slice that never cuts), or, with ``PAST``, through one that ends
    beyond it (``g[..., :n - s]``)."""

    PAST = False

    @staticmethod
    def forward(ctx, x, s, e):
        ctx.s, ctx.e, ctx.n = s, e, x.shape[-1]
        return x[..., s:e].clone()

    @staticmethod
    def backward(ctx, g):
        s, e, n = ctx.s, ctx.e, ctx.n
        out = g.new_zeros((*g.shape[:-1], n))
        out[..., s:e] = g[..., : (n if Crop.PAST else e) - s]
        return out, None, None


DROPPED_START = "`(n if Crop.PAST else e) - s` -> `n if Crop.PAST else e`"
CROP = {"cases": [{"args": {"x": {"shape": [3, 8]}, "s": 2, "e": 6}},
                  {"args": {"x": {"shape": [2, 5]}, "s": 1, "e": 3}}]}


def test_a_bound_moved_past_the_end_of_a_slice_that_never_cuts_is_equivalent():
    score = _score(Crop, CROP)
    assert not [m for m in score.survived if "- s" in m.mutation], score.survived
    (line,) = [m for m in score.equivalent if m.mutation == DROPPED_START]
    assert "a slice that never cuts" in line.why


def test_a_slice_whose_bound_is_already_past_the_end_lives_saying_what_would_kill_it(
        monkeypatch):
    monkeypatch.setattr(Crop, "PAST", True)
    score = _score(Crop, CROP)
    (line,) = [m for m in score.survived if m.mutation == DROPPED_START]
    assert "took the whole of its dim in every case" in line.why
    assert line.gap == "a slice that cuts (it took the whole of its dim)"


def test_what_a_slice_took_of_its_dim():
    took = plan._slices_took
    x = torch.zeros(3, 4, 5)
    assert took(x, (Ellipsis, slice(None, 5))) == [(1, "exact")]
    assert took(x, (Ellipsis, slice(0, 9))) == [(1, "past")]
    assert took(x, (slice(1, None), None, 0, slice(None, 5))) == [(0, "cut"), (3, "exact")]
    assert took(x, (Ellipsis, slice(None, 3), slice(None, None))) == [(1, "cut"), (2, "exact")]
    assert took(x, (slice(None, None, 2),)) == [(0, "cut")]
    assert took(x, (torch.tensor([0, 1]), slice(None))) == []  # indices: no claim
    assert took([1, 2, 3], slice(torch.tensor(0), torch.tensor(3))) == [(0, "exact")]


class AssertsAndMangles(torch.autograd.Function):
    """Read in a test module: pytest rewrites its assert (``@py_assert`` names), and Python
    mangles its ``__`` names in the class."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.__factor = 3.0
        return x * 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        __scaled = grad * ctx.__factor
        assert __scaled.shape == x.shape
        return __scaled


def test_the_source_of_a_backward_with_asserts_and_private_names_is_read():
    assert read_backward(AssertsAndMangles.backward, 1) is not None


class RowScale(torch.autograd.Function):
    """Each row of x [R, C] times w [C]; backward flattens the incoming gradient, which a
    downstream transpose may have permuted: ``.reshape``, where ``.view`` would break."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        flat = g.reshape(-1)
        return (flat * w.repeat(x.shape[0])).view(x.shape), (g * x).sum(0)


class MatmulReshape(torch.autograd.Function):
    """x @ W; backward reshapes a matmul's result, which is contiguous whatever it is given."""

    @staticmethod
    def forward(ctx, x, W):
        ctx.save_for_backward(x, W)
        return x @ W

    @staticmethod
    def backward(ctx, g):
        x, W = ctx.saved_tensors
        return (g @ W.t()).reshape(x.shape), x.t() @ g


def _view_mutants(lines: tuple) -> list:
    return [m for m in lines if "`.view" in m.mutation or ".view(" in m.mutation]


def test_a_reshape_read_as_view_is_killed_by_a_permuted_gradient_of_two_rows():
    score = _score(RowScale, {"cases": [{"args": {"x": {"shape": [3, 4]}, "w": {"shape": [4]}}}]})
    assert not _view_mutants(score.survived) and not _view_mutants(score.equivalent)
    assert score.killed == score.total


def test_one_row_lets_it_live_and_says_which_sizes_would_kill_it():
    """One frame, one row: every layout the checks make is one ``.view`` still takes."""
    score = _score(RowScale, {"cases": [{"args": {"x": {"shape": [1, 4]}, "w": {"shape": [4]}}}]})
    (survivor,) = _view_mutants(score.survived)
    assert survivor.mutation == "`g.reshape(-1)` -> `g.view(-1)`"
    assert "give the dims it reshapes sizes of at least 2" in survivor.why
    assert survivor.gap == "a non-contiguous gradient whose merged dims are longer than 1"


def test_a_reshape_of_a_fresh_result_is_equivalent_not_a_survivor():
    score = _score(MatmulReshape,
                   {"cases": [{"args": {"x": {"shape": [3, 4]}, "W": {"shape": [4, 2]}}}]})
    assert not _view_mutants(score.survived)
    (same,) = _view_mutants(score.equivalent)
    assert "stayed contiguous while backward was handed non-contiguous gradients" in same.why


def test_without_the_layout_check_a_view_survivor_says_to_turn_it_on():
    from gradverify import verify

    report = verify(RowScale, {"cases": [{"args": {"x": {"shape": [3, 4]}, "w": {"shape": [4]}}}],
                               "checks": {"layout": False}}, mutate=True)
    (survivor,) = _view_mutants(report.mutants[0].survived)
    assert "the layout check" in survivor.why and "did not run" in survivor.why


def _frames(t: int, hop: int) -> dict:
    return {"cases": [{"args": {"x": {"shape": [2, t]}, "window": {"shape": [4]}, "hop": hop}}]}


def _overwrites(lines: tuple) -> list:
    return [m for m in lines if "+=" in m.mutation and "` -> `gx[" in m.mutation]


@pytest.fixture
def overlap_frames(project):
    import functions

    project.write("overlap_frames.py", functions.module(functions.frames()))
    import overlap_frames

    return overlap_frames.Frames


def test_overlapping_windows_kill_a_backward_that_overwrites_their_sum(overlap_frames):
    score = _score(overlap_frames, _frames(12, 2))
    assert not _overwrites(score.survived) and score.killed == score.total


@pytest.mark.parametrize(("t", "hop"), [(5, 5), (12, 4)], ids=["one frame", "apart"])
def test_windows_that_never_overlap_let_it_live_and_say_what_would_kill_it(overlap_frames, t,
                                                                           hop):
    (survivor,) = _overwrites(_score(overlap_frames, _frames(t, hop)).survived)
    assert "held only zeros each time" in survivor.why
    assert "give a case whose windows overlap or whose loop adds at least twice" in survivor.why


def test_no_sum_is_overwritten_inside_a_while_loop():
    """``i += 1`` made ``i = 1`` would never end."""
    source = _source('''
        def backward(ctx, g):
            i, out = 0, g * 0
            while i < 3:
                out += g
                i += 1
            total = 0
            total += 1
            return out
    ''')
    mutated = [m.mutation for m in operators.source_mutants(source) if m.operator == "overwrite"]
    assert mutated == ["`total += 1` -> `total = 1`"]


class RowsOfLast(RowScale):
    """``x [..., C] * w [C]`` (RowScale's forward); backward flattens the leading dims of the
    incoming gradient with ``.reshape``: a ``.view`` there breaks only where it merges two of
    them (x of rank 3)."""

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        rows = g.reshape(-1, w.shape[0])
        return (rows * w).reshape(x.shape), (rows * x.reshape(-1, w.shape[0])).sum(0)


def _rows_of_last(*shape: int) -> dict:
    return {"cases": [{"args": {"x": {"shape": list(shape)}, "w": {"shape": [shape[-1]]}}}]}


def test_a_view_that_merges_no_dims_lives_and_says_an_input_of_higher_rank_would_kill_it():
    """x [3, 4]: ``g.view(-1, 4)`` keeps g's dims, which ``.view`` does in any layout; the
    old words ("its permuted dims have size 1") would send a user after sizes that change
    nothing."""
    score = _score(RowsOfLast, _rows_of_last(3, 4))
    survivor = next(m for m in _view_mutants(score.survived) if m.mutation.startswith("`g."))
    assert "it only kept or split their dims" in survivor.why
    assert "an input with more leading dims" in survivor.why
    assert survivor.gap == "a `.reshape` that merges dims of a non-contiguous tensor"
    assert not survivor.larger  # a larger size of the same rank cannot kill it


def test_the_same_view_is_killed_where_it_merges_two_dims():
    score = _score(RowsOfLast, _rows_of_last(2, 3, 4))
    assert not [m for m in _view_mutants(score.survived) if m.mutation.startswith("`g.")]


class SplitLast(torch.autograd.Function):
    """``x [..., 4]`` scaled per pair; backward splits the last dim of its gradient in two:
    ``.view`` splits a dim in any layout, so the mutant can never change anything."""

    @staticmethod
    def forward(ctx, x):
        return x * torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=x.dtype)

    @staticmethod
    def backward(ctx, g):
        pairs = g.reshape(*g.shape[:-1], 2, 2)
        scale = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=g.dtype)
        return (pairs * scale).flatten(-2)


def test_a_view_that_only_splits_the_last_dim_is_equivalent():
    score = _score(SplitLast, {"cases": [{"args": {"x": {"shape": [3, 4]}}}]})
    assert not _view_mutants(score.survived)
    (same,) = _view_mutants(score.equivalent)
    assert "keeps every dim but the last, which it splits" in same.why


class TwoArms(torch.autograd.Function):
    """``x * k`` where ``k > 0``, else ``x / 2``: backward's two arms on one line."""

    @staticmethod
    def forward(ctx, x, k: float):
        ctx.k = k
        return x * k if k > 0 else x * 0.5

    @staticmethod
    def backward(ctx, grad):
        return (grad * ctx.k if ctx.k > 0 else grad * 0.5), None


def test_an_arm_of_a_conditional_expression_no_case_takes_is_unexecuted_not_survived():
    """The line runs, but ``grad * 0.5`` never does: its mutants are no weakness of what ran,
    and the score does not count them."""
    one = _score(TwoArms, {"cases": [{"args": {"x": {"shape": [3]}, "k": 2.0}}]})
    untaken = [m for m in one.unexecuted if "grad * 0.5" in m.mutation]
    assert untaken and all(m.why == "no case takes this arm of its `... if ... else ...`"
                           for m in untaken)
    assert not [m for m in one.survived if "grad * 0.5" in m.mutation]
    both = _score(TwoArms, {"cases": [{"args": {"x": {"shape": [3]}, "k": 2.0}},
                                      {"args": {"x": {"shape": [3]}, "k": -1.0}}]})
    assert not both.unexecuted and not both.survived
