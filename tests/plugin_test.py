"""The pytest plugin, run by pytest itself (pytester) as a user would."""
from __future__ import annotations

import pytest

# pytester's inline runs restore sys.modules afterwards, dropping what they imported: torch
# must be imported before the first of them, because importing it a second time into one
# process crashes it (a segfault when this file ran alone).
import torch

import functions

OPS = functions.module(functions.square("Good"), functions.square_missing_factor("Bad"))


@pytest.fixture
def suite(pytester):
    pytester.makepyfile(ops=OPS)
    pytester.mkdir("specs")
    pytester.path.joinpath("specs/good.yaml").write_text(
        "target: ops:Good\ncases:\n  - name: vec\n    args: {x: {shape: [3]}}\n")
    pytester.path.joinpath("specs/bad.yaml").write_text(
        "target: ops:Bad\ncases:\n  - name: vec\n    args: {x: {shape: [3]}}\n")
    pytester.path.joinpath("other.yaml").write_text("not: a spec\n")
    return pytester


def test_collects_items_named_like_the_design(suite):
    result = suite.runpytest("--gradverify", "--collect-only", "-q", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["specs/bad.yaml::ops:Bad::vec::gradcheck",
                                 "specs/good.yaml::ops:Good::vec::contract"])


def test_a_session_after_another_in_the_same_process_runs_its_cases(suite):
    """Two sessions in one process (an IDE's runner, pytester): pytester's in-process runs
    restore ``sys.modules`` but not the ``gradverify`` package's attributes, so the second
    session's ``from gradverify import config`` found the first session's module, its classes
    no longer pickled for the workers, and the pool waited on a worker that never got its
    case until the case timeout. Deterministic when this file runs alone (a suite that has
    imported gradverify's modules for itself keeps them); the timeout bounds a regression."""
    suite.path.joinpath("pyproject.toml").write_text("[tool.gradverify]\ntimeout = 30\n")
    first = suite.runpytest("--gradverify", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert first.ret == pytest.ExitCode.OK
    # one item of each target: two runs in the session's one pool
    result = suite.runpytest("--gradverify", "-k", "gradcheck and not gradgradcheck",
                             "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*off by a constant factor 0.5*[[]GV121 gradcheck[]]*",
                                 "*FAILED specs/bad.yaml::ops:Bad::vec::gradcheck*"])


def test_failures_carry_findings(suite):
    result = suite.runpytest("--gradverify", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=31, skipped=4)
    result.stdout.fnmatch_lines(["*error: gradient for 'x' (output 0) is wrong: off by a constant "
                                 "factor 0.5*[GV121]*",
                                 "*FAILED specs/bad.yaml::ops:Bad::vec::gradcheck*"])


def test_keyword_and_junit(suite):
    result = suite.runpytest("--gradverify", "-k", "Good and gradcheck", "--junitxml=j.xml",
                             "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)   # gradcheck and gradgradcheck of ops:Good
    assert "testcase" in suite.path.joinpath("j.xml").read_text()


def test_mutation_score_after_the_tests(suite):
    """--gradverify-mutate: each spec's score as a section of the summary; it fails no test."""
    result = suite.runpytest("--gradverify", "--gradverify-mutate", "--gradverify-no-isolate",
                             "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=31, skipped=4)
    result.stdout.fnmatch_lines(["*gradverify mutation score*",
                                 "specs/*.yaml ops:*: */* mutants killed*"])


@pytest.mark.parametrize("isolate", [False, True])
def test_a_timeout_not_enforced_in_process_is_a_warning(suite, isolate):
    """``timeout`` stops a worker: with --gradverify-no-isolate it cannot, and says so once."""
    suite.path.joinpath("pyproject.toml").write_text("[tool.gradverify]\ntimeout = 30\n")
    args = () if isolate else ("--gradverify-no-isolate",)
    result = suite.runpytest("--gradverify", *args, "-p", "no:cacheprovider", "specs/good.yaml")
    assert result.ret == pytest.ExitCode.OK
    said = result.stdout.str().count("timeout is not enforced in-process")
    assert said == (0 if isolate else 1)


def test_nothing_without_the_flag(suite):
    result = suite.runpytest("-p", "no:cacheprovider", "specs")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_xdist(suite):
    result = suite.runpytest("--gradverify", "-n", "2", "--dist", "loadscope",
                             "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=31, skipped=4)


def test_a_broken_spec_is_one_failing_item_and_the_session_goes_on(suite):
    suite.path.joinpath("specs/half.yaml").write_text(
        "target: ops:Good\ncases:\n  - name: vec\n    args: {x: {shape: [3]\n")
    suite.path.joinpath("specs/missing.yaml").write_text(
        "target: nowhere:Thing\ncases:\n  - name: vec\n    args: {x: {shape: [3]}}\n")
    suite.makepyfile(test_unit="def test_mine():\n    assert True\n")
    result = suite.runpytest("--gradverify", "specs", "test_unit.py", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=3, passed=32, skipped=4)  # half, missing, ops:Bad gradcheck
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*specs/half.yaml:5*[GV001]*", "*nowhere*[GV003]*",
                                 "*FAILED specs/half.yaml::spec*"])


LEAKY = functions.module(functions.leaky())


def test_case_level_findings_and_strict_are_the_command_lines(pytester):
    """A Function that changes torch's threads and leaks a thread: `gradverify check --strict`
    fails it on two warnings (GV012, GV015), found about the case as a whole; the plugin does
    too, in the case's own item, and the run's smallest case and findings across cases (GV124)
    are the command line's (one way to run a target: ``run_job``)."""
    threads = torch.get_num_threads()
    pytester.makepyfile(leaky=LEAKY)
    pytester.mkdir("specs")
    pytester.path.joinpath("specs/leaky.yaml").write_text(
        "target: leaky:Leaky\ncases:\n  - name: basic\n    args: {x: {shape: [3]}}\n")
    pytester.path.joinpath("pyproject.toml").write_text("[tool.gradverify]\nstrict = true\n")
    try:
        result = pytester.runpytest("--gradverify", "-p", "no:cacheprovider")
    finally:
        torch.set_num_threads(threads)
    result.assert_outcomes(failed=1, passed=15, skipped=2)
    result.stdout.fnmatch_lines(["*[[]GV012 case[]]*", "*[[]GV015 case[]]*",
                                 "*FAILED specs/leaky.yaml::leaky:Leaky::basic::case*"])


SEGFAULT = functions.module(
    functions.one_input("Segfault", backward=f"{functions.SEGFAULTS}\nreturn grad"),
    header="import ctypes\nfrom torch.autograd import Function\n")


@pytest.mark.parametrize("xdist", [(), ("-n", "2", "--dist", "loadscope")], ids=["one", "xdist"])
def test_a_segfaulting_target_is_its_own_error_not_the_sessions_end(suite, xdist):
    """Cases run in worker processes, as `gradverify check` runs them: a Function that
    segfaults fails its own items, and the session, its other targets and its JUnit report go
    on."""
    suite.makepyfile(crash=SEGFAULT)
    suite.path.joinpath("specs/crash.yaml").write_text(
        "target: crash:Segfault\ncases:\n  - name: vec\n    args: {x: {shape: [3]}}\n")
    result = suite.runpytest_subprocess("--gradverify", "--junitxml=j.xml", "-p",
                                        "no:cacheprovider", *xdist, timeout=600)
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 23 and outcomes.get("failed", 0) >= 2, result.stdout
    for line in ("*FAILED specs/bad.yaml::ops:Bad::vec::gradcheck*",
                 "*FAILED specs/crash.yaml::crash:Segfault::vec::*"):  # in any order (xdist)
        result.stdout.fnmatch_lines([line])
    assert "killed by SIGSEGV" in result.stdout.str()
    assert "testcase" in suite.path.joinpath("j.xml").read_text()


def test_a_mutant_that_crashes_its_worker_fails_no_test(pytester):
    """--gradverify-mutate in workers: a mutant that segfaults costs no test its verdict."""
    from mutants_test import GUARDED

    pytester.makepyfile(guarded=GUARDED.replace("HOW", repr("segfault")))
    pytester.mkdir("specs")
    pytester.path.joinpath("specs/cube.yaml").write_text(
        "target: guarded:Cube\ncases:\n  - name: vec\n    args: {x: {shape: [4]}}\n")
    plain = pytester.runpytest("--gradverify", "-p", "no:cacheprovider")
    mutated = pytester.runpytest("--gradverify", "--gradverify-mutate", "-p", "no:cacheprovider")
    assert mutated.ret == plain.ret == pytest.ExitCode.OK
    assert mutated.parseoutcomes() == plain.parseoutcomes()
    mutated.stdout.fnmatch_lines(["*gradverify mutation score*",
                                  "*not judged: a mutant ended the process running them*"])


def test_a_swept_case_gets_well_formed_junit_names(pytester):
    pytester.makepyfile(ops=OPS)
    pytester.mkdir("specs")
    pytester.path.joinpath("specs/good.yaml").write_text(
        "target: ops:Good\ndims: {B: [1, 2]}\ncases:\n  - name: vec\n"
        "    args: {x: {shape: [B]}}\n")
    result = pytester.runpytest("--gradverify", "--gradverify-no-isolate", "-k", "gradcheck",
                                "--junitxml=j.xml", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4)
    junit = pytester.path.joinpath("j.xml").read_text()
    assert 'classname="specs.good.yaml.ops:Good.vec(B=1)" name="gradcheck"' in junit
    assert "::" not in junit.split("<testcase", 1)[1]
