"""CLI output piped into a file keeps wide tables whole; a terminal or COLUMNS sets the width."""

from __future__ import annotations

import os
import subprocess
import sys

from harness.terminal import PIPED_WIDTH_COLUMNS, make_console


def test_a_console_not_on_a_terminal_is_wide_unless_columns_says_otherwise(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert make_console().width == PIPED_WIDTH_COLUMNS  # pytest captures stdout: not a terminal
    monkeypatch.setenv("COLUMNS", "90")
    assert make_console().width == 90


def test_chaos_list_piped_into_a_file_is_not_cut_to_80_columns():
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    out = subprocess.run([sys.executable, "-m", "harness.cli", "chaos", "list"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    widest = max(len(line) for line in out.stdout.splitlines())
    assert 80 < widest <= PIPED_WIDTH_COLUMNS
    assert "producer-latency-fault-off" in out.stdout  # a name that an 80-column table cut short
