"""docs/chaos.md shows what the code does: the seed schedules are what `mqlab chaos run SUITE --seed N
--dry-run` prints, and the selftest table lists every case."""

from __future__ import annotations

import re
from pathlib import Path

from chaos.runner import RunOptions, plan
from chaos.schedule import format_schedule
from chaos.selftest_cases import SELFTEST_CASES
from chaos.suites import SUITES

DOC = Path(__file__).resolve().parents[2] / "docs" / "chaos.md"
_BLOCK = re.compile(r"\$ mqlab chaos run (\S+)(?: --topology (\S+))? --seed (\d+) --dry-run\n(schedule \(.*?)(?=\n\n|\n```)",
                    re.S)


def test_the_schedules_in_the_docs_are_the_ones_the_code_draws():
    blocks = _BLOCK.findall(DOC.read_text())
    assert len(blocks) >= len(SUITES) - 1, "docs/chaos.md shows a seed-1 schedule per suite"
    for suite, topology, seed, shown in blocks:
        schedule, _ = plan(RunOptions(SUITES[suite], seed=int(seed), topology=topology or "single"))
        assert shown.strip() == format_schedule(schedule).strip(), f"docs/chaos.md: {suite} seed {seed}"


def test_the_selftest_table_in_the_docs_lists_every_case_with_its_check():
    text = DOC.read_text()
    table = text[text.index("| suite | switch (node) | what it breaks | check that must fail |"):]
    table = table[:table.index("\n\n")]
    rows = set()
    for line in table.splitlines()[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        suite = cells[0].split("`")[1]
        switch = cells[1].split("`")[1]
        rows.add((suite, switch, cells[3].strip("`")))
    assert rows == {(case.suite, case.switch, case.check) for case in SELFTEST_CASES}
