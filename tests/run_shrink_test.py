"""The shrinker of failing cases, as pure functions (``minimal``: the smallest sizes a
predicate still holds at), and the spec cases it works on."""
from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from gradverify.run.shrink import (
    Budget,
    case_yaml,
    resized,
    shrink_sizes,
    simplifications,
    simplified,
    simplify,
    sizes_of,
    smaller,
)
from gradverify.spec.file import load_text
from gradverify.specmodel import Case, CheckSetting, SeqArg, TensorArg, Tolerance, ValueArg


def minimal(sizes: Mapping[str, int], fails: Callable[[Mapping[str, int]], bool],
            runs: int = 10_000) -> dict[str, int]:
    assert fails(sizes), "the start must fail"
    found = shrink_sizes(sizes, fails, Budget(runs=runs, seconds=60.0))
    assert fails(found)
    return found


@pytest.mark.parametrize(("size", "expected"), [
    pytest.param(1, [], id="one-is-smallest"),
    pytest.param(2, [1], id="two"),
    pytest.param(3, [1, 2], id="three"),
    pytest.param(4, [1, 2, 3], id="four"),
    pytest.param(100, [1, 2, 50, 99], id="one-two-half-one-less"),
])
def test_smaller_tries_one_two_half_one_less(size: int, expected: list[int]) -> None:
    assert smaller(size) == expected


@pytest.mark.parametrize(("start", "fails", "expected"), [
    pytest.param({"n": 100}, lambda s: s["n"] >= 7, {"n": 7}, id="a-threshold"),
    pytest.param({"n": 64}, lambda s: True, {"n": 1}, id="always-fails-shrinks-to-one"),
    pytest.param({"a": 9, "b": 9}, lambda s: s["a"] * s["b"] >= 6, {"a": 1, "b": 6},
                 id="first-size-first"),
    pytest.param({"a": 5, "b": 8}, lambda s: s["a"] != s["b"] and s["b"] > 1,
                 {"a": 1, "b": 2}, id="distinct-sizes-kept-distinct"),
    pytest.param({"n": 10}, lambda s: s["n"] % 2 == 0, {"n": 2}, id="even-only"),
])
def test_minimal(start: dict[str, int], fails: Callable[[Mapping[str, int]], bool],
                 expected: dict[str, int]) -> None:
    assert minimal(start, fails) == expected


def test_the_budget_ends_shrinking_with_the_smallest_found_so_far() -> None:
    calls: list[dict[str, int]] = []

    def fails(sizes: Mapping[str, int]) -> bool:
        calls.append(dict(sizes))
        return sizes["n"] >= 7

    found = shrink_sizes({"n": 100}, fails, Budget(runs=3))
    assert len(calls) == 3 and found == {"n": 50}  # 1 and 2 did not fail, 50 did


def test_the_budget_deadline_is_read_from_its_clock() -> None:
    now = [0.0]

    def fails(sizes: Mapping[str, int]) -> bool:
        now[0] += 1.0  # each run takes a second
        return sizes["n"] >= 7

    budget = Budget(runs=100, seconds=3.5, clock=lambda: now[0])
    assert shrink_sizes({"n": 1000}, fails, budget) == {"n": 500}  # after 1 and 2 did not fail
    assert budget.spent == 3  # at 0, 1 and 2 seconds; one begun at 3 would end after 3.5


def test_a_candidate_that_would_end_after_the_deadline_is_not_begun() -> None:
    """Its time is judged by the candidate before it, the first by what the caller says (the
    failed check's own run): a check slower than the whole budget is not shrunk at all."""
    now = [0.0]

    def fails(sizes: Mapping[str, int]) -> bool:
        now[0] += 2.0  # each run takes 2 seconds
        return sizes["n"] >= 500

    slow = Budget(runs=100, seconds=7.0, clock=lambda: now[0], cost=8.0)
    assert shrink_sizes({"n": 1000}, fails, slow) == {"n": 1000} and slow.spent == 0
    budget = Budget(runs=100, seconds=7.0, clock=lambda: now[0], cost=2.0)
    assert shrink_sizes({"n": 1000}, fails, budget) == {"n": 500}  # 1 and 2 did not fail
    assert budget.spent == 3 and now[0] == 6.0  # begun at 0, 2, 4; at 6 it would end at 8


def test_a_budget_within_another_takes_from_both() -> None:
    case = Budget(runs=5)
    first, second = Budget(runs=4, within=case), Budget(runs=4, within=case)
    assert [first.take() for _ in range(5)] == [True] * 4 + [False]
    assert [second.take() for _ in range(3)] == [True, False, False]  # the case's 5 are spent
    assert (first.spent, second.spent, case.spent) == (4, 1, 5)


def test_a_budget_within_another_is_judged_by_the_inner_candidates_time() -> None:
    """The case's budget judges a check's candidate by that check's candidates, not by the
    time since the case's last take (another check's candidate, its repro script run)."""
    now = [0.0]
    case = Budget(runs=100, seconds=10.0, clock=lambda: now[0])
    first = Budget(runs=100, seconds=5.0, clock=lambda: now[0], within=case, cost=1.0)
    assert first.take()
    now[0] = 7.0  # the candidate took 1 s, then a repro script ran for 6
    second = Budget(runs=100, seconds=5.0, clock=lambda: now[0], within=case, cost=2.0)
    assert second.take() and case.spent == 2  # begun at 7, ends at 9: within the case's 10
    now[0] = 9.0
    assert not second.take() and case.spent == 2  # 2 s more would end at 11


def test_simplify_keeps_each_choice_that_still_fails() -> None:
    kept = simplify([0, 1, 2], lambda chosen: 1 not in chosen, Budget())
    assert kept == frozenset({0, 2})


def _case() -> Case:
    return Case("basic[N=4]", args=(
        ("x", TensorArg(shape=("N", 3))),
        ("w", TensorArg(shape=(5, 3), init="uniform", params={"low": -2.0, "high": 2.0})),
        ("idx", TensorArg(shape=("N",), dtype="int64", params={"high": "N"})),
        ("k", ValueArg(4, dim="N")),
        ("pair", SeqArg("tuple", (ValueArg(1), ValueArg(2.5)))),
    ), by_name=True, dims={"N": 4})


def test_sizes_of_a_case_are_its_dims_and_its_literal_sizes_tied_by_value() -> None:
    assert sizes_of(_case()) == {("dim", "N"): 4, ("size", 3): 3, ("size", 5): 5}


def test_resized_changes_dims_and_every_equal_literal_size_together() -> None:
    small = resized(_case(), {("dim", "N"): 1, ("size", 3): 2, ("size", 5): 5}, "basic-smallest")
    assert small.name == "basic-smallest" and small.dims == {"N": 1}
    shapes = [arg.shape for _, arg in small.args if isinstance(arg, TensorArg)]
    assert shapes == [("N", 2), (5, 2), ("N",)]


def test_only_random_floating_tensors_may_become_ones() -> None:
    case = _case()
    assert simplifications(case) == [0, 1]
    ones = simplified(case, {1})
    assert [getattr(arg, "init", None) for _, arg in ones.args][:2] == [None, "ones"]
    assert ones.args[1][1].params == {}  # type: ignore[union-attr]


def test_case_yaml_reads_back_as_the_same_case() -> None:
    small = resized(_case(), {("dim", "N"): 2}, "basic-smallest")
    text = "target: m:F\ncases:\n" + "\n".join(f"  {line}" for line in
                                               case_yaml(small).splitlines())
    (spec,) = load_text(text)
    (read,) = spec.cases
    assert read.name == "basic-smallest" and read.dims == {"N": 2}
    assert dict(read.args)["w"] == dict(small.args)["w"]
    assert dict(read.args)["idx"] == dict(small.args)["idx"]
    assert isinstance(dict(read.args)["k"], ValueArg) and dict(read.args)["k"].dim == "N"
    assert dict(read.args)["pair"] == dict(small.args)["pair"]


def test_case_yaml_keeps_what_the_case_sets_for_its_checks() -> None:
    case = Case("c", args=(("x", TensorArg(shape=(2,))),), by_name=True,
                tolerance=Tolerance(atol=0.5), checks={
                    "precision": CheckSetting(True, {"dtype": "bfloat16"}),
                    "compile": CheckSetting(True), "layout": CheckSetting(False)})
    text = case_yaml(case)
    assert text.endswith("  tolerance: {atol: 0.5}\n  checks: {precision: {dtype: bfloat16}, "
                         "compile: true, layout: false}")
    (spec,) = load_text("target: m:F\ncases:\n" + "\n".join(f"  {line}"
                                                              for line in text.splitlines()))
    assert spec.cases[0].checks == case.checks and spec.cases[0].tolerance == case.tolerance


def test_case_yaml_of_a_positional_case_is_a_list() -> None:
    case = Case("c", args=((None, TensorArg(shape=(2,), dtype="float64")), (None, ValueArg(None))))
    assert case_yaml(case) == '- name: c\n  args: [{shape: [2], dtype: float64}, null]'
