"""Store invariants a chaos run or a test can ask a live broker to check.

`verify_consume_queues`: every consume-queue unit (holes aside) points at a valid commitlog
record of the same topic and queue id whose stored queue offset is the unit's index. A
slave built from replicated bytes must pass this as its master does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nodes.store.consume_queue import CQ_UNIT, is_hole
from nodes.store.message_store import MessageStore

EXAMPLES_MAX = 20


@dataclass
class VerifyReport:
    units_checked: int = 0
    invalid_units: int = 0
    examples: list[str] = field(default_factory=list)

    def bad(self, text: str) -> None:
        self.invalid_units += 1
        if len(self.examples) < EXAMPLES_MAX:
            self.examples.append(text)


def verify_consume_queues(store: MessageStore) -> VerifyReport:
    report = VerifyReport()
    for topic in store.topics():
        for queue_id in store.queue_ids(topic):
            queue = store._files.consume_queues.get((topic, queue_id))  # same package: the store owns its queues
            if queue is None:
                continue
            queue_offset = queue.min_queue_offset
            while queue_offset < queue.max_queue_offset:
                units = queue.read_units(queue_offset)
                if not units:
                    report.bad(f"{topic}/{queue_id}@{queue_offset}: consume queue file missing")
                    queue_offset = queue.next_file_start(queue_offset)
                    continue
                for (phys_offset, size, _tag_hash) in CQ_UNIT.iter_unpack(units):
                    if queue_offset >= queue.max_queue_offset:
                        break
                    if not is_hole(phys_offset, size):
                        report.units_checked += 1
                        record = store.lookup_message(phys_offset, size)
                        where = f"{topic}/{queue_id}@{queue_offset} -> phys {phys_offset}"
                        if record is None:
                            report.bad(f"{where}: no valid record there")
                        elif (record.topic, record.queue_id, record.queue_offset) != (topic, queue_id, queue_offset):
                            report.bad(f"{where}: record is {record.topic}/{record.queue_id}@{record.queue_offset}")
                    queue_offset += 1
    return report
