"""The interop drivers themselves: a missing client fails the test with its install command (never
a skip), and a driver facing no name server reports it and exits on its own."""

from __future__ import annotations

import importlib.util
import socket

import pytest

from interop import procs
from interop.procs import Clients

NO_SERVER_BUDGET_S = 30.0  # a send against a closed port fails at connect; the bound is the drivers' own


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_a_missing_cpp_client_fails_with_the_install_command(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "rocketmq" else
                        real_find_spec(name, *a))
    with pytest.raises(pytest.fail.Exception, match=r"not installed.*scripts/bootstrap\.sh.*rocketmq==0\.4\.4"):
        procs.require_cpp_client()


def test_a_missing_ali_ons_fails_with_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setattr(procs, "ONS_PACKAGE", tmp_path / "js" / "node_modules" / "ali-ons" / "package.json")
    with pytest.raises(pytest.fail.Exception, match=r"ali-ons is not installed.*scripts/bootstrap\.sh.*npm ci"):
        procs.require_ons_client()


def test_missing_node_fails_with_the_install_command(monkeypatch):
    monkeypatch.setattr(procs.shutil, "which", lambda name: None)
    with pytest.raises(pytest.fail.Exception, match=r"no node on PATH.*apt-get install -y nodejs npm"):
        procs.require_ons_client()


def test_the_pinned_clients_are_installed():
    procs.require_cpp_client()
    procs.require_ons_client()
    assert (procs.ONS_PACKAGE.parents[2] / "package-lock.json").exists()


@pytest.mark.parametrize("kind", ["cpp", "ons"])
def test_a_producer_with_no_name_server_reports_the_failure_and_exits(tmp_path, kind):
    clients = Clients(tmp_path)
    try:
        start = clients.cpp if kind == "cpp" else clients.ons
        plan = [{"send": "sync", "topic": "Nowhere", "body": "lost"}]
        proc = start("produce", _closed_port(), group="PG_nowhere", plan=plan, max_s=10)
        events = proc.finish(NO_SERVER_BUDGET_S)
    finally:
        clients.close()
    assert events[0]["event"] == "started"
    assert not [e for e in events if e["event"] == "sent"]
    errors = [e for e in events if e["event"] == "error"]
    assert any(e.get("body") == "lost" for e in errors), events
