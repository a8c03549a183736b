"""Strong specs: ``init`` and ``record`` perturb the case they drafted where its values
hide a bug, and never write one on which forward is not finite. The strengthening loop is tested
on its own with a scorer of numbers; each mechanism (all rays miss, all clamped, an empty mask, a
weight of ones, a gain of one, self-loop edges, ``n_steps: 0``, forward 0/0) with a Function of
``tests/strongzoo.py``: the old inputs hide its bug (or make forward NaN), the strong ones catch
it, and the correct Function passes them."""
from __future__ import annotations

from typing import Any

import pytest
import yaml

import strongzoo
from gradverify.api import verify
from gradverify.init import spec_for
from gradverify.init.guess import Guess, first_guesses
from gradverify.init.measure import scorer_for, with_mutants
from gradverify.init.nearby import alternatives
from gradverify.init.probe import search, spec_dict
from gradverify.init.strengthen import Edit, Strength, apply_edit, chain_edit, strengthen
from gradverify.targets import introspect

# ----------------------------------------------------------------------------- the loop alone


def by_radius(case: Any) -> Strength:
    """A scorer of numbers: rays hit once the radius passes 1; a gain of 1 is a constant."""
    args = case["args"]
    hit = args["radius"] > 1
    return Strength(True, exercised=("rays",) * hit, inputs=("rays",),
                    constants=("gain",) * (args["gain"] == 1.0), hits=int(hit))


def test_the_loop_keeps_only_what_scores_strictly_higher_and_says_why():
    case = {"dims": {"N": 5}, "args": {"rays": {"shape": ["N"]}, "radius": 0.5, "gain": 1.0,
                                       "eps": 1e-5}}
    done = strengthen(case, by_radius)
    assert done.before.vacuous and not done.strength.vacuous
    assert done.case["args"]["radius"] > 1 and done.case["args"]["gain"] != 1.0
    assert done.case["args"]["eps"] == 1e-5  # no change scored higher: kept
    assert {e.arg for e in done.edits} == {"radius", "gain"}
    assert all(e.why for e in done.edits)
    assert case["args"]["radius"] == 0.5  # the case given is not changed


def test_the_loop_stops_at_its_budget():
    calls = []

    def counting(case: Any) -> Strength:
        calls.append(case)
        return by_radius(case)

    strengthen({"dims": {}, "args": {"radius": 0.5, "gain": 1.0}}, counting, max_tries=3)
    assert len(calls) == 3


def test_a_slow_machine_gets_the_same_case_and_a_stalled_search_says_it_was_cut(monkeypatch):
    """What is written is decided by the tries, not the clock: a scorer 20 times slower (a
    loaded CI machine) finds the same case; only a search past the safety limit stops early,
    and its strength line says so."""
    from gradverify.init import strengthen as module

    case = {"dims": {"N": 5}, "args": {"rays": {"shape": ["N"]}, "radius": 0.5, "gain": 1.0}}
    fast = strengthen(case, by_radius)
    now = [0.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])

    def slow(seconds: float) -> Any:
        def score(c: Any) -> Strength:
            now[0] += seconds
            return by_radius(c)
        return score

    loaded = strengthen(case, slow(0.2))
    assert loaded.case == fast.case and loaded.edits == fast.edits
    assert loaded.strength.cut is None and "stopped" not in loaded.strength.header()
    stalled = strengthen(case, slow(module.MAX_SECONDS / 2))
    assert stalled.tried < fast.tried
    assert f"stopped at its {module.MAX_SECONDS:g} s limit" in stalled.strength.header()


def test_a_mutation_score_ranks_first_and_is_a_header_line():
    probe = Strength(True, exercised=("x",), inputs=("x",), hits=3)
    mutants = Strength(True, inputs=("x",), killed=4, total=5)
    assert mutants.key() > probe.key()
    assert mutants.score_line().startswith("mutation score: 4/5 (")
    assert probe.header().startswith("strength: every input's gradient nonzero in every draw")
    assert Strength(False).key() < Strength(True, inputs=("x",)).key()  # finite first
    assert Strength(True, backward_finite=False, exercised=("x",)).key() < \
        Strength(True).key()  # then backward finite
    assert Strength(False).header() == "strength: forward returns NaN or inf on these inputs"


def test_a_mutation_scorer_plugs_in_and_its_kills_choose_the_sizes():
    """Sizes the probe cannot tell apart (every gradient exercised either way) are chosen by
    the mutants they kill: a size of 8 hides a partial last block of 8, 9 does not."""
    def probe(case: Any) -> Strength:
        return Strength(True, exercised=("x",), inputs=("x",), hits=3)

    def block_mutants(case: Any) -> tuple[int, int]:
        return (2 if case["dims"]["L"] % 8 else 1), 2

    case = {"dims": {"L": 8}, "args": {"x": {"shape": ["L"]}}}
    assert strengthen(case, probe).case["dims"] == {"L": 8}  # no gain without mutants
    done = strengthen(case, with_mutants(probe, block_mutants))
    assert done.case["dims"] == {"L": 9}
    assert done.strength.score_line().startswith("mutation score: 2/2 (")
    assert done.before.score_line().startswith("mutation score: 1/2 (")


def test_an_edit_replaces_a_tensors_init_and_keeps_its_shape_and_dtype():
    case = {"dims": {"N": 4}, "args": {"w": {"shape": ["N"], "init": "ones", "sorted": True,
                                             "requires_grad": False}}}
    w = apply_edit(case, Edit("w", {"init": "normal", "std": 0.25}, "why"))["args"]["w"]
    assert w == {"shape": ["N"], "sorted": True, "requires_grad": False, "init": "normal",
                 "std": 0.25}  # a recorded order is kept
    literal = apply_edit(case, Edit("w", {"values": [1.0, 2.0]}, "why"))["args"]["w"]
    assert literal == {"requires_grad": False, "values": [1.0, 2.0]}
    grown = apply_edit(case, Edit(None, 9, "why", dim="N"))
    assert grown["dims"] == {"N": 9} and case["dims"] == {"N": 4}


@pytest.mark.parametrize(("shape", "dims", "high"), [
    ([2, "E"], {"E": 6, "N": 5}, "N"),
    (["L", "E"], {"L": 2, "E": 15, "N": 16}, "N"),  # a recorded [2, E]: 2 is a dim of its own
    ([2, 3], {}, 2),
])
def test_an_edge_list_becomes_a_chain_without_self_loops(shape, dims, high):
    case = {"dims": dims, "args": {"edges": {"shape": shape, "dtype": "int64", "high": high}}}
    edit = chain_edit(case, "edges")
    assert edit is not None
    src, dst = edit.value["values"]
    n = dims.get(high, high)
    assert len(src) == len(dst) == dims.get(shape[1], shape[1])
    assert all(a != b for a, b in zip(src, dst)) and max(src + dst) < n


def test_no_chain_for_what_is_no_edge_list():
    for value in ({"shape": [3, "E"], "dtype": "int64", "high": "N"},  # not 2 rows
                  {"shape": [2, "E"], "dtype": "int64", "high": 1},  # one node: loops only
                  {"shape": [2, "E"]}):  # floating
        assert chain_edit({"dims": {"E": 4, "N": 5}, "args": {"x": value}}, "x") is None


def test_a_step_count_is_never_guessed_zero_or_one():
    g = Guess("n_steps", "int", value="S")
    assert {a.value for a in alternatives(g, [g])}.isdisjoint({0, 1})
    other = Guess("dim", "int", value="S")
    assert 0 in {a.value for a in alternatives(other, [other])}


# ----------------------------------------------------------------------------- mechanisms


def passes(function: type, spec: dict[str, Any]) -> bool:
    return verify(function, spec, checks=["gradcheck"], seed=0).ok


def old_and_new(name: str) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """The case init drafted for strongzoo's ``NameBug`` before strengthening (as it was
    written before strengthening), the spec it writes now, and what it said."""
    info = introspect(getattr(strongzoo, name + "Bug", getattr(strongzoo, name)))
    guesses, attempt = search(info, first_guesses(info))
    assert attempt.ok
    written = spec_for(info)
    new = yaml.safe_load(written.text)
    new.pop("target")
    return spec_dict(guesses), new, written


@pytest.mark.parametrize("name", ["RaySphere", "Saturate", "Blend", "Integrate"])
def test_init_writes_inputs_that_catch_a_bug_its_old_inputs_hid(name):
    """Rays that all miss (radius 0.5 and rays drawn far from the centre), values that are all
    clamped (low = high = 0.5), a gain left at its default 1.0, a loop whose count defaults
    to 0: the old case passes with the bug; the new one fails it and passes the correct code."""
    old, new, written = old_and_new(name)
    bug, good = getattr(strongzoo, name + "Bug"), getattr(strongzoo, name)
    assert passes(bug, old)
    assert not passes(bug, new) and passes(good, new)
    assert written.ran and "# strength: every input's gradient nonzero in every draw" in \
        written.text


def test_init_never_writes_self_loop_edges_that_make_forward_nan():
    old, new, written = old_and_new("EdgeDirections")
    # drawn at random, some edge is a self-loop: 0/0 in forward, which checks blame on backward
    measured = scorer_for(introspect(strongzoo.EdgeDirections))(
        {**old["cases"][0], "dims": old["dims"]})
    assert not measured.finite
    edges = new["cases"][0]["args"]["edge_index"]["values"]
    assert all(a != b for a, b in zip(*edges))
    assert passes(strongzoo.EdgeDirections, new) and not passes(strongzoo.EdgeDirectionsBug, new)
    assert written.ran


def test_a_forward_that_is_never_finite_is_a_todo_not_inputs_run():
    written = spec_for(introspect(strongzoo.Ratio))
    assert not written.ran
    assert written.error == "forward returns NaN or inf on them, at every value tried"
    assert "# TODO: these inputs ran forward and backward, but forward returns NaN" in \
        written.text
    assert "Written by `gradverify init`" not in written.text


def test_edges_read_a_row_at_a_time_are_an_edge_list_without_self_loops():
    """``pos[edges[1]] - pos[edges[0]]``: an index of two rows, not a float tensor; at random it
    would hold a self-loop (a length of 0, whose gradient is 0/0)."""
    info = introspect(strongzoo.Springs)
    edges = {g.name: g for g in first_guesses(info)}["edges"]
    assert (edges.dtype, edges.shape) == ("int64", (2, "E"))
    written = spec_for(info)
    args = yaml.safe_load(written.text)["cases"][0]["args"]
    assert written.ran and all(a != b for a, b in zip(*args["edges"]["values"]))


def test_a_loop_count_left_at_zero_is_a_todo_not_inputs_run():
    """``n_steps: 0`` (forward's default, and forward raises at any other count): forward and
    backward run, yet the loop has nothing to verify."""
    written = spec_for(introspect(strongzoo.NoSteps))
    assert not written.ran
    assert written.error == "n_steps left at 0: forward's loop runs no step, at every value tried"
    integrate = spec_for(introspect(strongzoo.IntegrateBug))
    assert integrate.ran and "n_steps: 3" in integrate.text  # its default 0: strengthened


@pytest.mark.parametrize(("name", "arg", "weak"), [
    ("MaskedMean", "keep", {"dtype": "bool", "init": "bernoulli", "p": 0.0}),  # selects none
    ("Scale", "weight", {"init": "ones"}),  # a weight of ones
])
def test_a_recorded_constant_is_replaced_by_values_that_catch_the_bug(name, arg, weak):
    """As ``record`` drafts a mask recorded all False, or a weight recorded all ones."""
    case = {"name": "recorded", "dims": {"N": 5, "D": 4},
            "args": {"x": {"shape": ["N", "D"]}, arg: {"shape": ["N", "D"], **weak}}}
    bug, good = getattr(strongzoo, name + "Bug"), getattr(strongzoo, name)
    done = strengthen(case, scorer_for(introspect(bug)))
    assert passes(bug, {"cases": [case]})
    assert done.before.constants == (arg,) and done.strength.constants == ()
    assert not passes(bug, {"cases": [dict(done.case)]})
    assert passes(good, {"cases": [dict(done.case)]})


# ----------------------------------------------------------------------------- record's side


def test_recording_notes_whether_an_edge_list_has_self_loops():
    import torch

    from gradverify.recording.capture import describe

    chain = describe(torch.stack([torch.arange(4), torch.arange(1, 5)]))
    looped = describe(torch.tensor([[0, 1, 2], [0, 2, 1]]))
    assert chain["self_loops"] is False and looped["self_loops"] is True
    assert "self_loops" not in describe(torch.arange(6).reshape(3, 2))  # three rows: no edges


def test_the_probes_edits_are_made_on_the_draft_and_written_with_why():
    from gradverify.recording.draft import Dim, Draft
    from gradverify.recording.strong import strong_draft
    from gradverify.recording.write import _case_text

    d = Draft({"N": 16, "E": 15}, {"N": 5, "E": 4},
              (("edges", {"shape": [2, Dim("E")], "dtype": "int64", "init": "randint",
                          "high": Dim("N"), "sorted": True}, "recorded [2, 15] int64"),
               ("n_steps", 1, "")), None, (), (), "abc", (), {})
    answer = {"strength": "strength: every input's gradient nonzero in every draw (1/1)",
              "edits": [{"arg": "edges", "value": {"values": [[0, 1], [1, 2]]},
                         "why": "no self-loops", "dim": None},
                        {"arg": "n_steps", "value": 3, "why": "1 run", "dim": None},
                        {"arg": None, "value": 7, "why": "more", "dim": "N"}]}
    text = _case_text(strong_draft(d, answer), "recorded")
    assert "    # strength: every input's gradient nonzero in every draw (1/1)\n" in text
    assert "edges: {dtype: int64, values: [[0, 1], [1, 2]]}   # recorded [2, 15] int64; no " \
           "self-loops" in text
    assert "n_steps: 3   # 1 run" in text and "N: 7 " in text


def test_backward_lines_the_case_never_runs_are_named_not_claimed():
    """A branch of backward that no case takes holds a bug no check can see: the header names
    its lines apart from the mutation score, which does not count them."""
    import inspect

    written = spec_for(introspect(strongzoo.ClipFar))
    lines, first = inspect.getsourcelines(strongzoo.ClipFar.backward)
    branch = [first + i for i, text in enumerate(lines) if "inside" in text]
    assert f"# not run: backward's lines {branch[0]}, {branch[1]} never ran on these inputs" \
        in written.text, written.text
    score = next(line for line in written.text.splitlines() if "mutation score" in line)
    assert "never ran" not in score
    # a spec that runs every line says nothing of the kind
    assert "not run:" not in spec_for(introspect(strongzoo.Ratio)).text


def test_two_scalars_are_never_strengthened_to_one_value():
    """Spacings dx = dy = 1.3 hide a backward that uses dx for both: the second scalar takes
    the next value tried."""
    from gradverify.init.strengthen import SCALAR_TRIES, candidates

    case = {"args": {"dx": SCALAR_TRIES[0], "dy": 1.0}}
    assert [e.value for e in candidates(case, "dy")] == list(SCALAR_TRIES[1:])
