"""Structured reports of store problems: the `store-error` and `store-recovered` events.

The store knows nothing of the broker; whoever opens it may pass a `Reporter`, a callable taking
one event dict (the broker passes its event log's `record`). Every problem the store finds in
its own files is reported through it as one `store-error` event of a `kind`:

  torn-tail       recovery cut a partial or garbled record at the commitlog tail
  cq-truncated    recovery dropped consume-queue units past the commitlog's end, or torn ones
  damaged-range   recovery kept the records behind a damaged range; the range is a hole
  bad-record      a record failed its checks when read for a pull or dispatched
  recovery-anomaly anything else a recovery did not expect

with `file` (relative to the store dir, or None), `phys_offset`, `bytes`, `topic`, `queue_id`,
`queue_offset` (None when not known) and `detail` (one sentence). Each open also reports one
`store-recovered` event. A `bad-record` is reported at most once per phys offset per process
(`BadRecordReporter`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from nodes.store.mapped_file import segment_name

log = logging.getLogger(__name__)

Reporter = Callable[[dict[str, Any]], None]

TORN_TAIL = "torn-tail"
CQ_TRUNCATED = "cq-truncated"
DAMAGED_RANGE = "damaged-range"
BAD_RECORD = "bad-record"
RECOVERY_ANOMALY = "recovery-anomaly"


def store_error(kind: str, detail: str, *, file: str | None = None, phys_offset: int | None = None,
                size_bytes: int | None = None, topic: str | None = None, queue_id: int | None = None,
                queue_offset: int | None = None) -> dict[str, Any]:
    return {"event": "store-error", "kind": kind, "file": file, "phys_offset": phys_offset, "bytes": size_bytes,
            "topic": topic, "queue_id": queue_id, "queue_offset": queue_offset, "detail": detail}


def commitlog_file(phys_offset: int, segment_bytes: int) -> str:
    """The segment holding `phys_offset`, relative to the store dir."""
    return f"commitlog/{segment_name(phys_offset - phys_offset % segment_bytes)}"


def consume_queue_dir(topic: str, queue_id: int) -> str:
    return f"consumequeue/{topic}/{queue_id}"


def safe_report(reporter: Reporter | None, event: dict[str, Any]) -> None:
    """Hand `event` to `reporter`; a failing reporter is logged, never allowed to break a read."""
    if reporter is None:
        return
    try:
        reporter(event)
    except Exception:  # the event log is a witness: losing one line must not fail the store
        log.exception("could not report a store event: %s", event)


class BadRecordReporter:
    """Reports each bad record once per phys offset (a consumer re-pulling it adds nothing)."""

    def __init__(self, segment_bytes: int) -> None:
        self.reporter: Reporter | None = None
        self.count = 0  # bad records found since the store opened (each once)
        self._segment_bytes = segment_bytes
        self._reported: set[int] = set()

    def report(self, phys_offset: int, size_bytes: int, detail: str, *, topic: str | None = None,
               queue_id: int | None = None, queue_offset: int | None = None) -> None:
        if phys_offset in self._reported:
            return
        self._reported.add(phys_offset)
        self.count += 1
        safe_report(self.reporter, store_error(
            BAD_RECORD, detail, file=commitlog_file(phys_offset, self._segment_bytes), phys_offset=phys_offset,
            size_bytes=size_bytes, topic=topic, queue_id=queue_id, queue_offset=queue_offset))


def recovery_events(report: Any, segment_bytes: int) -> list[dict[str, Any]]:
    """The events one recovery reports (a `recovery.RecoveryReport`): its store errors, then
    `store-recovered`."""
    events = []
    if report.torn_tail_phys_offset is not None:
        end = report.torn_tail_phys_offset
        events.append(store_error(
            TORN_TAIL, f"recovery cut {report.truncated_bytes} bytes of a partial or garbled record after the "
                       f"last valid record, at phys offset {end}",
            file=commitlog_file(end, segment_bytes), phys_offset=end, size_bytes=report.truncated_bytes))
    for cut in report.cq_truncations:
        events.append(store_error(
            CQ_TRUNCATED, f"recovery dropped {cut.units} units and {cut.bytes} bytes at the tail of consume queue "
                          f"{cut.topic}/{cut.queue_id}: torn, or pointing past the commitlog's end or at no record",
            file=consume_queue_dir(cut.topic, cut.queue_id), size_bytes=cut.bytes, topic=cut.topic,
            queue_id=cut.queue_id, queue_offset=cut.first_queue_offset))
    for start, end in report.damaged_ranges:
        events.append(store_error(
            DAMAGED_RANGE, f"recovery kept the records after damaged commitlog bytes [{start}, {end}); "
                           "the range is a hole",
            file=commitlog_file(start, segment_bytes), phys_offset=start, size_bytes=end - start))
    if report.redispatched_whole_log:
        events.append(store_error(
            RECOVERY_ANOMALY, "a consume queue lacked units the commitlog holds below the dispatch point; "
                              "recovery dispatched the whole commitlog again"))
    events.append({"event": "store-recovered", "clean": report.clean_shutdown,
                   "commitlog_max_phys_offset": report.commitlog_max_phys_offset,
                   "truncated_bytes": report.truncated_bytes, "damaged_ranges": len(report.damaged_ranges),
                   "cq_units_dropped": report.cq_units_dropped})
    return events
