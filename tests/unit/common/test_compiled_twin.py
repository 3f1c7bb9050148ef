"""load_twin: which of a compiled twin and its Python reference a module runs, and why."""

from __future__ import annotations

import importlib

import pytest

from nodes.common.compiled_twin import load_twin

ENV = "MQLAB_PURE_PYTHON_TEST_TWIN"


def test_the_twin_runs_when_it_loads(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert load_twin(lambda: len, "counter", ENV) == (len, "compiled")


def test_the_switch_forces_python_without_loading_anything(monkeypatch):
    monkeypatch.setenv(ENV, "1")

    def load():
        raise AssertionError("loaded although the switch said python")

    assert load_twin(load, "counter", ENV) == (None, f"python ({ENV}=1)")


def test_a_missing_extension_or_a_refused_layout_falls_back_to_python_and_says_why(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    twin, word = load_twin(lambda: importlib.import_module("nodes.store._no_such_twin"), "counter", ENV)
    assert twin is None and word.startswith("python (the compiled counter is not built: No module named")

    def refuse():
        raise ValueError("header format >iI is not the layout compiled in")

    assert load_twin(refuse, "counter", ENV) == (
        None, "python (the compiled counter refused this layout: header format >iI is not the layout compiled in)")


def test_any_other_failure_of_the_twin_is_not_hidden(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)

    def broken():
        raise RuntimeError("a bug in the loader")

    with pytest.raises(RuntimeError, match="a bug in the loader"):
        load_twin(broken, "counter", ENV)
