"""Guards for the repository's own rules."""

import re
from pathlib import Path

import proto

REPO = Path(__file__).resolve().parents[3]


def test_proto_package_is_ours_not_proto_plus():
    # PyPI's proto-plus also installs a top-level `proto`; ours must win.
    assert Path(proto.__file__).resolve().parent == REPO / "proto"


def test_node_code_never_sleeps_on_a_literal():
    # Timers come from Timing so one knob scales them all; clock.py is the only sleeper.
    pattern = re.compile(r"(asyncio|time)\.sleep\(\s*(?!0\s*\))\d")
    offenders = [
        f"{path.relative_to(REPO)}:{n}"
        for path in (REPO / "nodes").rglob("*.py") if path.name != "clock.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not offenders, f"literal sleeps in node code: {offenders}"
