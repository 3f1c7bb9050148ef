"""A push consumer records every pull's routing (the read-routing check needs consecutive pulls)."""

from __future__ import annotations

from typing import Any

from nodes.client import PushConsumer


def pull(offset: int, *, answered: int = 0, suggest: int = 0) -> dict[str, Any]:
    return {"event": "pull-route", "topic": "T", "broker_name": "broker-a", "queue_id": 0, "queue_offset": offset,
            "requested_broker_id": 0, "broker_id": answered, "addr": f"a{answered}", "commit_flag": answered == 0,
            "suggest_which_broker_id": suggest, "next_begin_offset": offset + 10}


def test_records_every_pull():
    recorded: list[dict[str, Any]] = []
    consumer = PushConsumer("127.0.0.1:1", "g", on_event=recorded.append)
    for event in (pull(0), pull(10), pull(20), pull(30, suggest=1), pull(40, answered=1, suggest=1),
                  pull(50, answered=1, suggest=1)):
        consumer._routing_event(event)
    assert [e["queue_offset"] for e in recorded] == [0, 10, 20, 30, 40, 50]
    assert [e["broker_id"] for e in recorded] == [0, 0, 0, 0, 1, 1]
