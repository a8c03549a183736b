"""One rule for "is this frame the user's?" (``gradverify.frames``), and the answers its callers
get where the seven rules it replaces disagreed.

Frames are made with ``compile(source, path)``: a function compiled with a file name in torch's,
gradverify's or an installed package's folder runs with exactly the frames a real one there
would have, and no file needs to exist.
"""
from __future__ import annotations

import json
import os
import sys
import sysconfig
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
import torch

import gradverify
from gradverify import frames
from gradverify.frames import Owner, SourceLine

PACKAGE = Path(gradverify.__file__).resolve().parent
TORCH = Path(torch.__file__).resolve().parent
STDLIB = Path(os.__file__).resolve().parent


def define(path: str | Path, source: str, **names: Any) -> dict[str, Any]:
    """The namespace of ``source`` run as if it were the file at ``path``."""
    namespace: dict[str, Any] = dict(names)
    exec(compile(textwrap.dedent(source).lstrip("\n"), str(path), "exec"), namespace)
    return namespace


def raised(call: Any, *args: Any) -> BaseException:
    """What ``call(*args)`` raised, caught as a check catches it: in gradverify's code (the
    traceback starts at the catching frame)."""
    found = _CATCH(call, *args)
    assert found is not None, "did not raise"
    return found


_CATCH = define(PACKAGE / "_gradverify_test_catch.py", """
    def catch(call, *args):
        try:
            call(*args)
        except Exception as exc:
            return exc
    """)["catch"]


@pytest.fixture
def places(tmp_path: Path) -> types.SimpleNamespace:
    """A file of each owner: the user's project, an installed library, torch, gradverify (an
    example), and the standard library."""
    return types.SimpleNamespace(
        user=tmp_path / "project" / "model.py",
        helper=tmp_path / "project" / "helpers.py",
        installed=tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "lib" / "ops.py",
        torch=TORCH / "_gradverify_test_fake.py",
        ours=PACKAGE / "_gradverify_test_fake.py",
        example=PACKAGE / "examples" / "_gradverify_test_fake.py",
        stdlib=STDLIB / "_gradverify_test_fake.py")


# ----------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(("path", "expected"), [
    pytest.param(frames.__file__, Owner.GRADVERIFY, id="gradverify"),
    pytest.param(str(PACKAGE / "examples" / "basic.py"), Owner.GRADVERIFY, id="our-example"),
    pytest.param(torch.__file__, Owner.TORCH, id="torch"),
    pytest.param(torch.autograd.function.__file__, Owner.TORCH, id="torch-autograd"),
    pytest.param(os.__file__, Owner.PYTHON, id="stdlib"),
    pytest.param(json.decoder.__file__, Owner.PYTHON, id="stdlib-json"),
    pytest.param(str(STDLIB / "importlib" / "__init__.py"), Owner.PYTHON, id="importlib"),
    pytest.param("<frozen importlib._bootstrap>", Owner.PYTHON, id="frozen-importlib"),
    pytest.param("<frozen runpy>", Owner.PYTHON, id="frozen-runpy"),
    pytest.param(pytest.__file__, Owner.INSTALLED, id="pytest"),
    pytest.param("/opt/venv/lib/python3.11/site-packages/numpy/core.py", Owner.INSTALLED,
                 id="site-packages"),
    pytest.param("/usr/lib/python3/dist-packages/yaml/loader.py", Owner.INSTALLED,
                 id="dist-packages"),
    pytest.param(os.path.join(sysconfig.get_paths()["scripts"], "pytest"), Owner.INSTALLED,
                 id="console-script"),
    pytest.param("<string>", Owner.NO_FILE, id="string"),
    pytest.param("<stdin>", Owner.NO_FILE, id="stdin"),
    pytest.param("<eval_with_key>.3", Owner.NO_FILE, id="fx-generated"),
    pytest.param("", Owner.NO_FILE, id="empty"),
    pytest.param(__file__, Owner.USER, id="a-test-file"),
    pytest.param("model.py", Owner.USER, id="relative-in-cwd"),
    pytest.param(str(PACKAGE.parent / "gradverify_plugins" / "x.py"), Owner.USER,
                 id="beside-our-package"),
])
def test_who_wrote_a_file(path, expected):
    assert frames.owner(path) is expected


def test_a_code_object_is_judged_by_its_file_and_a_symlink_by_its_target(tmp_path, places):
    assert frames.owner(define(places.torch, "def f(): pass")["f"].__code__) is Owner.TORCH
    assert frames.owner(define(places.user, "def f(): pass")["f"].__code__) is Owner.USER
    (tmp_path / "torchlink").symlink_to(TORCH, target_is_directory=True)
    assert frames.owner(str(tmp_path / "torchlink" / "autograd" / "function.py")) is Owner.TORCH


@pytest.mark.parametrize(("name", "expected"), [
    ("torch.nn.functional", Owner.TORCH),
    ("torch.not.imported.anywhere", Owner.TORCH),
    ("functorch.dim", Owner.TORCH),
    ("gradverify.examples.basic", Owner.GRADVERIFY),
    ("pytest", Owner.INSTALLED),
    ("json", Owner.PYTHON),
    ("no_such_module_anywhere", Owner.USER),
    ("", Owner.USER),
])
def test_who_wrote_a_module(name, expected):
    assert frames.owner_of_module(name) is expected


def test_a_module_not_named_torch_is_judged_by_its_file(monkeypatch, places):
    for name, file, expected in (("_fake_main", places.torch, Owner.TORCH),
                                 ("model", places.user, Owner.USER)):
        module = types.ModuleType(name)
        module.__file__ = str(file)
        monkeypatch.setitem(sys.modules, name, module)
        assert frames.owner_of_module(name) is expected


def test_the_target_file_is_the_users_wherever_it_lies(places):
    for path in (places.installed, places.example, places.torch):
        assert not frames.is_user_file(str(path))
        assert frames.is_user_file(str(path), target=str(path))
        assert not frames.is_user_file(str(path), target=str(places.user))
    assert frames.is_user_file(str(places.user), target=str(places.installed))


def test_installed_counts_installed_packages_only(places):
    assert frames.is_user_file(str(places.installed), installed=True)
    for path in (places.torch, places.ours, places.stdlib, "<frozen importlib._bootstrap>"):
        assert not frames.is_user_file(str(path), installed=True)


# ------------------------------------------------------------------ a traceback's user frame


def test_the_user_line_that_called_into_torch(places):
    op = define(places.torch, """
        def op(x):
            raise RuntimeError("shape mismatch")
        """)["op"]
    forward = define(places.user, """
        def forward(x):
            y = x + 1
            return op(y)
        """, op=op)["forward"]
    exc = raised(forward, 1)
    assert frames.innermost_user_frame(exc) == SourceLine(str(places.user), 3)
    assert str(frames.innermost_user_frame(exc)) == f"{places.user}:3"


def test_a_user_helper_in_another_file(places):
    """Before: a check's location (``_calls.user_location``) was the call in the Function's
    file, ``opcheck``'s (``_opcheck.user_frame``) the helper's line. Now every check gives the
    line that raised, the helper's; ``gradverify init`` (``in_target``) still the Function's
    own line, since it compares line numbers of one file."""
    helper = define(places.helper, """
        def normalise(x):
            raise ValueError("bad")
        """)["normalise"]
    forward = define(places.user, """
        def forward(x):
            return normalise(x)
        """, normalise=helper)["forward"]
    exc = raised(forward, 1)
    target = str(places.user)
    assert frames.innermost_user_frame(exc, target) == SourceLine(str(places.helper), 2)
    assert frames.innermost_user_frame(exc, target, in_target=True) == SourceLine(target, 2)
    assert frames.innermost_user_frame(exc, None, in_target=True) is None


def test_a_function_of_an_installed_package(places):
    """Before: ``_calls.user_location`` found its line (its own file), ``_opcheck.user_frame``
    did not (site-packages), ``_probes.user_frame`` did. Now all of them do, given the
    target."""
    forward = define(places.installed, """
        def forward(x):
            raise ValueError("bad")
        """)["forward"]
    exc = raised(forward, 1)
    assert frames.innermost_user_frame(exc) is None
    assert frames.innermost_user_frame(exc, str(places.installed)) == \
        SourceLine(str(places.installed), 2)


def test_an_error_torch_wraps_in_its_own(places):
    """``opcheck`` raises its own error from torch's frames, the user's as its cause. Before:
    only ``_opcheck.user_frame`` read the cause; ``_calls.user_location`` gave None."""
    wrapper = define(places.torch, """
        def opcheck(kernel):
            try:
                kernel()
            except Exception as e:
                raise RuntimeError("opcheck failed") from e
        """)["opcheck"]
    kernel = define(places.user, """
        def kernel():
            raise ValueError("data-dependent")
        """)["kernel"]
    exc = raised(wrapper, kernel)
    assert frames.innermost_user_frame(exc) == SourceLine(str(places.user), 2)


def test_the_exceptions_own_frames_come_before_its_causes(places):
    kernel = define(places.user, """
        def kernel():
            raise ValueError("first")

        def forward():
            try:
                kernel()
            except ValueError:
                raise RuntimeError("second")
        """)
    exc = raised(kernel["forward"])
    assert frames.innermost_user_frame(exc) == SourceLine(str(places.user), 8)


def test_python_library_code_raising_points_at_the_users_line(places):
    """Before: the import reporter (``target._import_failed``, which skipped only importlib's
    and gradverify's frames) named json/decoder.py, as ``_probes.user_frame``'s rule (torch's
    and gradverify's only) would have; now the user's line that called it."""
    load = define(places.user, """
        import json
        def load():
            return json.loads("{")
        """)["load"]
    exc = raised(load)
    assert frames.innermost_user_frame(exc) == SourceLine(str(places.user), 3)
    assert frames.innermost_user_frame(exc, installed=True) == SourceLine(str(places.user), 3)


def test_the_import_reporter_counts_installed_packages(places):
    """An import that fails inside an installed package: its own line for the import
    reporter (``installed=True``: the module imported may be that package), the user's line
    that imported it for a check, and torch's frames skipped by both (before, the import
    reporter named torch's line)."""
    torch_api = define(places.torch, """
        def define(schema):
            raise RuntimeError("bad schema")
        """)["define"]
    library = define(places.installed, """
        def setup():
            define("f(Tensor x)")
        """, define=torch_api)["setup"]
    module = define(places.user, """
        def import_model():
            setup()
        """, setup=library)["import_model"]
    exc = raised(module)
    assert frames.innermost_user_frame(exc) == SourceLine(str(places.user), 2)
    assert frames.innermost_user_frame(exc, installed=True) == SourceLine(str(places.installed), 2)


def test_no_user_frame(places):
    engine = define(places.torch, """
        def run_backward():
            raise RuntimeError("returned an incorrect number of gradients")
        """)["run_backward"]
    check = define(places.ours, """
        def check():
            engine()
        """, engine=engine)["check"]
    assert frames.innermost_user_frame(raised(check)) is None


def test_a_circular_chain_ends():
    first, second = ValueError("a"), ValueError("b")
    first.__context__, second.__context__ = second, first
    assert frames.innermost_user_frame(first) is None


# ---------------------------------------------------------------- the stack's user frame


def test_the_user_line_on_the_current_stack(places):
    probe = define(places.ours, """
        def probe(target):
            return calling_user_frame(target)
        """, calling_user_frame=frames.calling_user_frame)["probe"]
    op = define(places.torch, """
        def op(probe, target):
            return probe(target)
        """)["op"]
    for where in (places.user, places.installed, places.example):
        forward = define(where, """
            def forward(op, probe, target):
                return op(probe, target)
            """)["forward"]
        # the target's file wherever it lies; without it, past installed packages and our
        # examples to the first user frame (this test's)
        assert forward(op, probe, str(where)) == SourceLine(str(where), 2)
        found = forward(op, probe, None)
        if where == places.user:
            assert found == SourceLine(str(where), 2)
        else:
            assert found is not None and found.file == __file__


# ------------------------------------------------------------------ whose bug it is


def test_an_exception_raised_in_gradverify_is_ours(places):
    ours = define(places.ours, """
        def check(forward):
            forward()
            return None.shape
        """)["check"]
    user = define(places.user, """
        def forward():
            pass
        def broken():
            raise ValueError("user")
        """)
    torch_op = define(places.torch, """
        def op():
            raise RuntimeError("torch")
        """)["op"]
    assert frames.raised_in_gradverify(raised(ours, user["forward"]))
    assert not frames.raised_in_gradverify(raised(ours, user["broken"]))
    # called by gradverify, raised by torch: the Function's (what it passed on), as before
    assert not frames.raised_in_gradverify(raised(ours, torch_op))


def test_an_example_under_test_raising_is_the_functions(places):
    """Before: ``execute._classify`` called any raise under the package folder ours (GV011),
    shipped examples under test included."""
    forward = define(places.example, """
        def forward():
            raise ValueError("example")
        """)["forward"]
    exc = raised(forward)
    assert frames.raised_in_gradverify(exc)
    assert not frames.raised_in_gradverify(exc, str(places.example))


def test_traceback_codes_outermost_first(places):
    inner = define(places.torch, "def inner():\n    raise ValueError\n")["inner"]
    outer = define(places.user, "def outer():\n    inner()\n", inner=inner)["outer"]
    codes = frames.traceback_codes(raised(outer))
    assert codes[-2:] == [outer.__code__, inner.__code__]


def test_without_outer_drops_the_frames_that_started_the_code(places):
    script = define(places.user, """
        def main():
            op()
        """, op=define(places.torch, "def op():\n    raise ValueError\n")["op"])["main"]
    runpy = define(places.stdlib, "def run(code):\n    code()\n")["run"]
    boot = define("<string>", "def boot(run, main):\n    run(main)\n")["boot"]
    launcher = define(places.ours, "def launch(boot, run, main):\n    boot(run, main)\n")
    exc = raised(launcher["launch"], boot, runpy, script)
    dropped = (Owner.GRADVERIFY, Owner.PYTHON, Owner.NO_FILE)
    tb = frames.without_outer(exc.__traceback__, dropped)
    assert tb is not None and tb.tb_frame.f_code is script.__code__
    assert frames.without_outer(exc.__traceback__, (*dropped, Owner.USER, Owner.TORCH)) is None


# ---------------------------------------------------------------- each caller's answer


def test_a_checks_location_and_inits_line(places):
    from gradverify.checks import _calls
    from gradverify.init import probe

    helper = define(places.helper, "def h():\n    raise ValueError\n")["h"]
    forward = define(places.user, "def forward():\n    y = 1\n    return h()\n", h=helper)
    exc = raised(forward["forward"])
    info = types.SimpleNamespace(source_file=str(places.user))
    assert str(_calls.user_location(exc, info)) == f"{places.helper}:2"  # type: ignore[arg-type]
    assert probe._line(exc, info) == 3  # type: ignore[arg-type]


@pytest.mark.parametrize(("where", "code"), [("user", "GV008"), ("ours", "GV011"),
                                             ("example", "GV008")])
def test_the_error_classifier(places, where, code):
    from gradverify.run.classify import classify

    path = getattr(places, where)
    exc = raised(define(path, "def f():\n    raise ValueError('x')\n")["f"])
    target = places.user if where == "ours" else path
    info = types.SimpleNamespace(source_file=str(target), backward_location=None)
    outcome, _ = classify(exc, "gradcheck", info)  # type: ignore[arg-type]
    assert [f.code for f in outcome.findings] == [code]
    if code == "GV008":
        assert outcome.findings[0].location == SourceLine(str(path), 2).location()


def test_record_skips_torchs_and_our_classes_only(tmp_path, monkeypatch, places):
    from gradverify.recording.capture import Recorder

    recorder = Recorder(tmp_path, (), (), 3, script=None)
    library = types.ModuleType("thirdparty_ops")
    library.__file__ = str(places.installed)
    monkeypatch.setitem(sys.modules, "thirdparty_ops", library)
    for module, wanted in (("torch.autograd.function", False), ("functorch.x", False),
                           ("gradverify.examples.basic", False), ("thirdparty_ops", True),
                           ("_gradverify_user_model_1f", False), ("train", True)):
        cls = type("Fn", (torch.autograd.Function,), {"__module__": module})
        assert recorder._wanted(cls) is wanted, module


def test_a_recorded_scripts_traceback_starts_at_the_script(places, capsys):
    from gradverify.recording.launch import _script_traceback

    script = define(places.user, "def main():\n    raise ValueError('in the script')\n")["main"]
    runpy = define(places.stdlib, "def run(code):\n    code()\n")["run"]
    launcher = define(places.ours, "def boot(run, main):\n    run(main)\n")["boot"]
    exc = raised(launcher, runpy, script)
    _script_traceback(type(exc), exc, exc.__traceback__)
    printed = capsys.readouterr().err
    assert str(places.user) in printed and "in the script" in printed
    assert str(places.ours) not in printed and str(places.stdlib) not in printed


def test_a_handler_that_raised_inside_itself_is_left_out_whole():
    """A second SIGINT while record's handler ran re-entered it, and the script's traceback
    kept the outer handler frame (CI, torch 2.15 job: ``launch.py ..., in interrupt``)."""
    from gradverify.frames import without_inner

    def handler(depth: int) -> None:
        if depth:
            handler(depth - 1)
        raise KeyboardInterrupt

    def program() -> None:
        handler(1)  # the program's frame, then the handler twice

    try:
        program()
    except KeyboardInterrupt as exc:
        tb = without_inner(exc.__traceback__, handler.__code__)
    codes = []
    while tb is not None:
        codes.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert codes[-1] == "program" and "handler" not in codes
