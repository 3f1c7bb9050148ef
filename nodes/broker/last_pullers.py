"""Who pulled each queue last, per group (what RocketMQ's consumer stats show as a queue's
consumer): (group, topic, queue id) -> (client id, monotonic ms of the pull).

Filled by the pull path after a pull passed its checks (so only known topics and valid names
take an entry); read by the operator queries. A remoting pull names no client: the adapter
passes the one client heartbeating on its connection, or "" when there is not exactly one.
In memory only; a topic's entries go with the topic. Loop-confined.
"""

from __future__ import annotations

QueueKey = tuple[str, str, int]  # (group, topic, queue id)


class LastPullers:
    def __init__(self) -> None:
        self._last: dict[QueueKey, tuple[str, int]] = {}

    def record(self, group: str, topic: str, queue_id: int, client_id: str, now_ms: int) -> None:
        self._last[(group, topic, queue_id)] = (client_id, now_ms)

    def get(self, group: str, topic: str, queue_id: int) -> tuple[str, int] | None:
        """(client id, monotonic ms of its pull), or None when nobody pulled it here."""
        return self._last.get((group, topic, queue_id))

    def topics_of(self, group: str) -> set[str]:
        return {topic for g, topic, _ in self._last if g == group}

    def groups(self) -> set[str]:
        return {group for group, _, _ in self._last}

    def forget_topic(self, topic: str) -> None:
        for key in [key for key in self._last if key[1] == topic]:
            del self._last[key]
