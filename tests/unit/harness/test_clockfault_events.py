"""How the harness waits for a node to apply a clock fault: it reads only the events the node
wrote after the fault began, and a line still being written is read again at the next poll."""

from __future__ import annotations

import json

from harness.clockfault import _byte_size, _clock_events


def _line(event: dict) -> str:
    return json.dumps(event, separators=(",", ":")) + "\n"


def test_only_clock_events_written_after_the_start_are_read(tmp_path):
    path = tmp_path / "events.jsonl"
    assert _byte_size(path) == 0 and _clock_events(path, 0) == []
    path.write_text(_line({"event": "clock", "rate": 1.0}) + _line({"event": "lock", "queue_id": 1}))
    start = _byte_size(path)
    assert _clock_events(path, start) == []
    with path.open("a") as f:
        f.write(_line({"event": "lock", "queue_id": 2}) + _line({"event": "clock", "rate": 2.0}))
        f.write('{"event":"clock","rate":3')  # the node is still writing this line
    assert _clock_events(path, start) == [{"event": "clock", "rate": 2.0}]
    with path.open("a") as f:
        f.write('.0}\n')
    assert [e["rate"] for e in _clock_events(path, start)] == [2.0, 3.0]
