"""The test suite's own mechanics (tests/conftest.py): the slowest tests start first."""
from __future__ import annotations

import pytest

from conftest import slow_first


def test_slow_items_go_first_each_group_in_its_order():
    assert slow_first([1, 20, 3, 40, 5, 60], lambda n: n >= 10) == [20, 40, 60, 1, 3, 5]
    assert slow_first([1, 2], lambda n: False) == [1, 2]
    assert slow_first([], lambda n: True) == []


def test_this_sessions_tests_marked_slow_come_first(request: pytest.FixtureRequest):
    slow = [item.get_closest_marker("slow") is not None for item in request.session.items]
    assert slow == sorted(slow, reverse=True)
