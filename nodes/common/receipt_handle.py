"""Receipt handles: the opaque string a pop hands out with each message and takes back in ack,
change-invisible and forward-to-DLQ.

Like RocketMQ's (space-separated fields: start offset, pop time, invisible time, revive queue,
topic kind, broker, queue, queue offset, commitlog offset) ours names everything needed to find
the in-flight entry and to tell a stale handle from a current one, and nothing a client must
understand:

    p1 <kind> <broker> <group> <queue topic> <queue id> <queue offset> <phys offset>
       <pop wall ms> <invisible ms> <generation>

`kind` is n (the topic's own queue), r (the group's pop retry topic) or f (FIFO). Names are
RocketMQ names ([%|a-zA-Z0-9_-]), so a space never occurs inside a field; the string is ASCII
and survives any transport unchanged. The generation is unique per hand-out of one entry: a
change of invisible time or a redelivery gives a new one, which is how an old handle is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from nodes.common import constants as c

_KINDS = (c.POP_NORMAL_KIND, c.POP_RETRY_KIND, c.POP_FIFO_KIND)
_FIELDS = 12


class MalformedHandle(ValueError):
    """The string is no receipt handle of ours."""


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    kind: str
    broker_name: str
    group: str
    queue_topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    pop_wall_ms: int
    invisible_ms: int
    generation: int

    @property
    def deadline_wall_ms(self) -> int:
        return self.pop_wall_ms + self.invisible_ms

    @property
    def fifo(self) -> bool:
        return self.kind == c.POP_FIFO_KIND

    def encode(self) -> str:
        return " ".join((c.POP_HANDLE_VERSION, self.kind, self.broker_name, self.group, self.queue_topic,
                         str(self.queue_id), str(self.queue_offset), str(self.phys_offset), str(self.pop_wall_ms),
                         str(self.invisible_ms), str(self.generation)))

    @classmethod
    def parse(cls, text: str) -> ReceiptHandle:
        """Raises:
            MalformedHandle: not a handle this broker wrote (wrong shape, version or numbers).
        """
        parts = text.split(" ") if isinstance(text, str) else []
        if len(parts) != _FIELDS - 1 or parts[0] != c.POP_HANDLE_VERSION or parts[1] not in _KINDS:
            raise MalformedHandle(f"not a receipt handle of this broker: {str(text)[:80]!r}; pass the handle "
                                  "a receive answered, unchanged")
        try:
            numbers = [int(p) for p in parts[5:]]
        except ValueError:
            raise MalformedHandle(f"receipt handle with a non-numeric field: {text[:80]!r}") from None
        if any(n < 0 for n in numbers) or not all(parts[2:5]):
            raise MalformedHandle(f"receipt handle with an empty or negative field: {text[:80]!r}")
        queue_id, queue_offset, phys_offset, pop_wall_ms, invisible_ms, generation = numbers
        return cls(parts[1], parts[2], parts[3], parts[4], queue_id, queue_offset, phys_offset, pop_wall_ms,
                   invisible_ms, generation)
