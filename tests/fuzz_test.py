"""The spec loader never fails with anything but a SpecError (exit 3), whatever the YAML."""
from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gradverify.errors import SpecError
from gradverify.spec.file import load_text
from gradverify.specmodel import CASE_KEYS, INITS, SPEC_KEYS, TENSOR_KEYS, Spec

KEYS = st.sampled_from(SPEC_KEYS + CASE_KEYS + TENSOR_KEYS + ("tuple", "list", "x", "N"))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**20),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                    st.sampled_from(["float32", "int64", "N", "m:F", *INITS]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.one_of(KEYS, st.text(max_size=6)), inner,
                                                 max_size=5)), max_leaves=25)
SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def _load(text: str) -> None:
    try:
        specs = load_text(text, "fuzz.yaml")
    except SpecError as exc:
        assert str(exc).startswith("fuzz.yaml")
        return
    assert specs and all(isinstance(s, Spec) for s in specs)


@SETTINGS
@given(VALUES)
def test_arbitrary_documents(document):
    _load(yaml.safe_dump(document))


@pytest.mark.slow
@SETTINGS
@given(st.dictionaries(st.sampled_from(SPEC_KEYS), VALUES, min_size=1),
       st.lists(st.dictionaries(st.sampled_from(CASE_KEYS), VALUES), min_size=1, max_size=3))
def test_spec_shaped_documents(top, cases):
    _load(yaml.safe_dump({**top, "cases": cases}))


@SETTINGS
@given(st.text(max_size=200))
def test_arbitrary_text(text):
    _load(text)


def test_deep_nesting_is_a_spec_error():
    deep = "target: m:F\ncases:\n  - args: [{values: " + "[" * 5000 + "1" + "]" * 5000 + "}]\n"
    with pytest.raises(SpecError, match="nested too deeply"):
        load_text(deep, "fuzz.yaml")
