"""The size search of ``gradverify record`` on its own, with an injected predicate in place of
the user's forward (as hypothesis tests its shrinker): what it returns, that forward runs
there, that it backs off no further than needed, and how many forwards it costs."""
from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from gradverify.recording.shrink import SizeChoice, search_sizes


def needs_at_least(minimum: Mapping[str, int], calls: list[dict[str, int]] | None = None):
    """Forward that raises unless every dim is at least its minimum."""
    def error(sizes: Mapping[str, int]) -> str | None:
        if calls is not None:
            calls.append(dict(sizes))
        short = [d for d in sizes if sizes[d] < minimum.get(d, 0)]
        return f"ValueError: {short[0]} too small" if short else None
    return error


def test_shrunk_sizes_that_run_are_kept_without_a_note():
    calls: list[dict[str, int]] = []
    choice = search_sizes({"N": 2, "C": 3}, {"N": 64, "C": 512}, needs_at_least({}, calls))
    assert choice == SizeChoice({"N": 2, "C": 3})
    assert calls == [{"N": 2, "C": 3}]  # one forward: nothing to search


def test_one_dim_backs_off_by_halving_from_its_recorded_size():
    choice = search_sizes({"N": 2, "C": 3}, {"N": 64, "C": 512}, needs_at_least({"C": 100}))
    assert choice.sizes == {"N": 2, "C": 128}  # 512 -> 256 -> 128; 64 would raise
    assert choice.notes == ("backed off to C=128: at the shrunk sizes forward raised "
                            "ValueError: C too small",)


def test_two_dims_that_must_grow_both_back_off():
    choice = search_sizes({"N": 2, "C": 3}, {"N": 64, "C": 512},
                          needs_at_least({"N": 10, "C": 100}))
    assert choice.sizes == {"N": 16, "C": 128}
    assert choice.notes[0].startswith("backed off to N=16, C=128:")


def test_forward_that_never_runs_keeps_the_shrunk_sizes_and_says_why():
    def error(sizes: Mapping[str, int]) -> str:
        return "RuntimeError: broken"

    choice = search_sizes({"N": 2}, {"N": 64}, error)
    assert choice.sizes == {"N": 2}
    assert choice.notes == ("forward raised at the shrunk sizes and at the recorded ones: "
                            "RuntimeError: broken",)


def test_the_inputs_are_not_changed():
    shrunk, recorded = {"N": 2, "C": 3}, {"N": 64, "C": 512}
    search_sizes(shrunk, recorded, needs_at_least({"N": 10, "C": 100}))
    assert shrunk == {"N": 2, "C": 3} and recorded == {"N": 64, "C": 512}


@st.composite
def problems(draw):
    """Dims with shrunk sizes 2, 3, ... and recorded sizes at least as large, and a minimum
    size for each dim that the recorded size meets."""
    count = draw(st.integers(1, 4))
    names = ["N", "C", "L", "D"][:count]
    shrunk = {d: 2 + i for i, d in enumerate(names)}
    recorded = {d: draw(st.integers(shrunk[d], 4096)) for d in names}
    minimum = {d: draw(st.integers(0, recorded[d])) for d in names}
    return shrunk, recorded, minimum


@settings(max_examples=300, deadline=None)
@given(problems())
def test_the_search_ends_where_forward_runs_and_backs_off_no_further_than_needed(problem):
    shrunk, recorded, minimum = problem
    calls: list[dict[str, int]] = []
    error = needs_at_least(minimum, calls)
    choice = search_sizes(shrunk, recorded, error)
    forwards = len(calls)

    assert error(choice.sizes) is None  # forward runs where it ends
    for d, size in choice.sizes.items():
        assert shrunk[d] <= size <= recorded[d]
        if size != shrunk[d]:  # backed off: from the recorded size, in halving steps ...
            assert size in {recorded[d] >> k for k in range(recorded[d].bit_length())}
            # ... and halving once more would raise or go below the shrunk size
            assert size // 2 < shrunk[d] or error({**choice.sizes, d: size // 2}) is not None
    assert bool(choice.notes) == (choice.sizes != shrunk)
    # Bounded: the shrunk sizes, each dim at its recorded size, the recorded sizes, and one
    # forward per halving of each dim (about log2(recorded / shrunk)).
    halvings = sum(recorded[d].bit_length() for d in recorded)
    assert forwards <= 2 + len(shrunk) + halvings


def _weight(constant: float | None, dtype: str = "float32") -> dict:
    arg = {"kind": "tensor", "shape": [8], "dtype": dtype, "device": "cpu",
           "requires_grad": True, "layout": "strided", "finite": True, "sorted": True}
    if constant is not None:
        arg.update(constant=constant, positive=constant > 0)
    return arg


def test_a_recorded_constant_float_becomes_random_values_never_a_degenerate_one():
    """A LayerNorm weight of ones or a zero bias: a backward that forgets the weight passes
    on ones; the recorded spec must catch what a hand-written one does."""
    from gradverify.recording.draft import tensor_spec

    for constant, init in ((1.0, "positive"), (0.0, None), (-2.5, None)):
        factory: list[str] = []
        spec, note = tensor_spec(_weight(constant), [8], [], {}, "float32", True, factory,
                                 "weight")
        assert spec.get("init") == init and "sorted" not in spec and not factory, spec
        assert f"recorded constant {constant!r}" in note
    spec, _ = tensor_spec({**_weight(None), "dtype": "int64", "constant": 0, "min": 0, "max": 0},
                          [8], [], {}, "float32", True, [], "index")
    assert spec["init"] == "zeros"  # an integer constant (a mask, an index) keeps its value
