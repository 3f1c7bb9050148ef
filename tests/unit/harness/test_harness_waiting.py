"""wait_until: returns what it waited for; timeouts say what and what was seen last."""

from __future__ import annotations

import itertools

import pytest

from harness.waiting import WaitTimeout, wait_until


def test_returns_the_first_value_that_is_done():
    counter = itertools.count()
    assert wait_until(lambda: next(counter) >= 3 and "ready", 1_000, "the counter", interval_ms=1) == "ready"


def test_custom_done_predicate():
    values = iter([["a"], [], []])
    assert wait_until(lambda: next(values), 1_000, "no gaps", done=lambda gaps: not gaps, interval_ms=1) == []


def test_timeout_names_what_was_awaited_and_the_last_value():
    with pytest.raises(WaitTimeout) as info:
        wait_until(lambda: ["broker-a-0 not registered"], 50, "brokers to register", done=lambda g: not g)
    err = info.value
    assert isinstance(err, TimeoutError)
    assert "timed out after 50 ms waiting for brokers to register" in str(err)
    assert "last observed" in str(err) and "broker-a-0 not registered" in str(err)
    assert err.last == ["broker-a-0 not registered"] and err.polls >= 1


def test_ignored_exceptions_count_as_not_yet_and_are_reported():
    def observe():
        raise ConnectionError("namesrv-0 refused")

    with pytest.raises(WaitTimeout, match="ConnectionError: namesrv-0 refused"):
        wait_until(observe, 30, "the name server", ignore=(ConnectionError,))


def test_other_exceptions_propagate():
    def observe():
        raise KeyError("bug")

    with pytest.raises(KeyError):
        wait_until(observe, 1_000, "anything", ignore=(ConnectionError,))


def test_zero_budget_still_observes_once():
    calls = []
    assert wait_until(lambda: calls.append(1) or True, 0, "one look") is True
    with pytest.raises(WaitTimeout, match=r"\(1 polls\)"):
        wait_until(lambda: False, 0, "never")


def test_long_last_values_are_shortened():
    with pytest.raises(WaitTimeout) as info:
        wait_until(lambda: ["y" * 5_000], 0, "a long value", done=lambda v: False)
    assert len(str(info.value)) < 1_000
