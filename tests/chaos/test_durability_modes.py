"""Durability modes: every broker's flush type and the masters' role per `--mode`, the mode in the
plan, the CLI and `chaos list`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from chaos.cli import EXIT_UNKNOWN, app
from chaos.runner import RunOptions
from chaos.suites import DEFAULT_MODE, MODES, SUITES


@pytest.mark.parametrize("name", list(MODES))
def test_a_mode_sets_every_broker(name):
    spec = SUITES["durability"].spec(0.05, mode=name)
    brokers = spec.broker_nodes()
    assert len(brokers) == 2
    for node in brokers:
        options = spec.effective_options(node)
        assert options["store"]["flush_disk_type"] == MODES[name].flush_disk_type
        assert options["store"]["commitlog_segment_bytes"] == 256 * 1024  # the suite's own options stay
        assert options["broker_role"] == MODES[name].broker_role


def test_modes_are_flush_times_replication_and_default_to_async():
    assert {(m.flush_disk_type, m.broker_role) for m in MODES.values()} == {
        (f, r) for f in ("ASYNC_FLUSH", "SYNC_FLUSH") for r in ("ASYNC_MASTER", "SYNC_MASTER")}
    assert DEFAULT_MODE == "async" and SUITES["durability"].default_mode == "async"
    assert RunOptions(SUITES["failover"]).mode_name == "async"
    assert RunOptions(SUITES["failover"], mode="sync").mode_name == "sync"


def test_the_cli_takes_a_mode_and_refuses_an_unknown_one():
    cli = CliRunner()
    assert cli.invoke(app, ["run", "durability", "--seed", "2", "--mode", "sync-flush", "--dry-run"]).exit_code == 0
    bad = cli.invoke(app, ["run", "durability", "--mode", "fsync-everything", "--dry-run"])
    assert bad.exit_code == EXIT_UNKNOWN and "sync-master" in bad.output
    listing = cli.invoke(app, ["list"])
    assert listing.exit_code == 0 and "SYNC_FLUSH" in listing.output and "durability" in listing.output
