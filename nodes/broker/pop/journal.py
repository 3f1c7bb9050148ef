"""The POP engine's lines in the broker's events.jsonl (docs/history.md, "POP consumption"):
`pop`, `pop-ack`, `pop-change-invisible`, `pop-revive`, `pop-dlq`. Every line names the entry
(group, topic, queue topic, queue id, queue offset) and the handle generation it concerns;
deadlines are wall-clock ms (`*_wall_ms`), because they outlive the broker process."""

from __future__ import annotations

from typing import Any

from nodes.broker.pop.state import InFlight
from nodes.common.events import EventLog
from nodes.common.receipt_handle import ReceiptHandle


class PopJournal:
    def __init__(self, events: EventLog | None, broker_name: str) -> None:
        self._events = events
        self._broker_name = broker_name

    def _record(self, event: str, entry: InFlight, **fields: Any) -> None:
        if self._events is None:
            return
        self._events.record({
            "event": event, "side": "broker", "broker_name": self._broker_name, "group": entry.group,
            "topic": entry.topic, "queue_topic": entry.queue_topic, "queue_id": entry.queue_id,
            "queue_offset": entry.queue_offset, "generation": entry.generation, "fifo": entry.fifo, **fields})

    def popped(self, entry: InFlight, msg_id: str, *, attempt_id: str, repeat: bool) -> None:
        """A hand-out; `repeat`: a FIFO retry with the same attempt id got the same handle again."""
        self._record("pop", entry, msg_id=msg_id, phys_offset=entry.phys_offset, attempt=entry.attempt,
                     pop_wall_ms=entry.pop_wall_ms, invisible_ms=entry.invisible_ms,
                     deadline_wall_ms=entry.deadline_wall_ms, client_id=entry.client_id or None,
                     attempt_id=attempt_id or None, repeat=repeat)

    def acked(self, entry: InFlight, status: str, handle: ReceiptHandle) -> None:
        """`status`: ok (settled now). The handle the ack named is journalled beside the entry it
        settled: a checker holds the one against the other's history."""
        self._record("pop-ack", entry, status=status, deadline_wall_ms=entry.deadline_wall_ms,
                     handle_generation=handle.generation, handle_deadline_wall_ms=handle.deadline_wall_ms)

    def ack_refused(self, group: str, topic: str, queue_topic: str, queue_id: int, queue_offset: int,
                    generation: int, reason: str) -> None:
        if self._events is None:
            return
        self._events.record({
            "event": "pop-ack", "side": "broker", "broker_name": self._broker_name, "group": group, "topic": topic,
            "queue_topic": queue_topic, "queue_id": queue_id, "queue_offset": queue_offset,
            "generation": generation, "status": "invalid", "reason": reason})

    def changed(self, before: InFlight, after: InFlight, *, reason: str = "client") -> None:
        """`reason`: client (change_invisible, whoever asked: the client or its auto-renew)."""
        self._record("pop-change-invisible", before, new_generation=after.generation,
                     invisible_ms=after.invisible_ms, previous_deadline_wall_ms=before.deadline_wall_ms,
                     deadline_wall_ms=after.deadline_wall_ms, reason=reason)

    def revived(self, entry: InFlight, *, to_topic: str | None, to_queue_offset: int | None, in_place: bool,
                lost: bool = False) -> None:
        """An expired hand-out: copied to the retry topic, or (FIFO, `in_place`) handed out again
        from its own queue; `lost`: the message itself was gone (retention), nothing comes back."""
        self._record("pop-revive", entry, attempt=entry.attempt, deadline_wall_ms=entry.deadline_wall_ms,
                     to_topic=to_topic, to_queue_offset=to_queue_offset, in_place=in_place, lost=lost)

    def dead_lettered(self, entry: InFlight, *, reason: str, to_topic: str, to_queue_offset: int) -> None:
        """`reason`: max-attempts (the engine) or client (forward_to_dlq)."""
        self._record("pop-dlq", entry, attempt=entry.attempt, reason=reason, deadline_wall_ms=entry.deadline_wall_ms,
                     to_topic=to_topic, to_queue_offset=to_queue_offset)
