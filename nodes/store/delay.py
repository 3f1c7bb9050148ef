"""Delayed messages at store time (RocketMQ CommitLog#asyncPutMessage and
#checkMessageAndReturnSize), pure.

Owns: parsing the delay-level table, turning a message with a `DELAY` level into one for
`SCHEDULE_TOPIC_XXXX` queue `level - 1` (the real topic and queue saved as properties), and
the consume-queue tag code of a schedule-topic record: its deliver timestamp. Does not own
delivering them when due (the broker's ScheduleMessageService does) or any I/O.

Level delays are multiples of one unit (`Timing.delay_level_unit_ms`, 1000 ms unscaled), so
a scaled node waits scaled delays; master and slave must agree on the table, since each
derives its own consume queues from the same commitlog.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from nodes.common import constants as c
from nodes.common.errors import ConfigError
from nodes.store.record import MessageToStore, Record

_UNIT_FACTORS = {"s": 1, "m": 60, "h": 60 * 60, "d": 24 * 60 * 60}
_TOKEN_RE = re.compile(r"^(\d+)([smhd])$")


def parse_delay_levels(spec: str, unit_ms: int) -> tuple[int, ...]:
    """The delay of every level in ms: level `i + 1` is token `i` of `spec` ("1s 5s ... 2h").

    Raises:
        ConfigError: a token is not a count followed by one of s, m, h, d, or the table is empty.
    """
    if unit_ms <= 0:
        raise ConfigError(f"the delay level unit must be a positive number of ms, got {unit_ms}")
    delays = []
    for token in spec.split():
        match = _TOKEN_RE.match(token)
        if match is None:
            raise ConfigError(f"delay level {token!r} in {spec!r} is not a count followed by s, m, h or d")
        delays.append(int(match.group(1)) * _UNIT_FACTORS[match.group(2)] * unit_ms)
    if not delays:
        raise ConfigError(f"the delay level table {spec!r} is empty")
    return tuple(delays)


DEFAULT_DELAY_LEVELS_MS = parse_delay_levels(c.MESSAGE_DELAY_LEVEL, c.DELAY_LEVEL_UNIT_MS)


def delay_level_of(properties: Mapping[str, str]) -> int:
    """The `DELAY` property as a level; 0 (no delay) when absent or not a number."""
    try:
        return int(properties.get(c.PROPERTY_DELAY, "0"))
    except ValueError:
        return 0


def wants_delay(msg: MessageToStore) -> bool:
    """Non-transactional and committed messages with a positive level are delayed."""
    if c.PROPERTY_DELAY not in msg.properties:  # the common case, on every put
        return False
    transaction_type = msg.sys_flag & c.SYS_FLAG_TRANSACTION_MASK
    return transaction_type in (0, c.SYS_FLAG_TRANSACTION_COMMIT) and delay_level_of(msg.properties) > 0


def to_schedule_topic(msg: MessageToStore, level_count: int) -> MessageToStore:
    """The message as stored while it waits: topic SCHEDULE_TOPIC_XXXX, queue `level - 1`.

    A level above the table is capped to the last level (and the property rewritten), the
    original topic and queue go into REAL_TOPIC and REAL_QID. The caller checked `wants_delay`.
    """
    level = min(delay_level_of(msg.properties), level_count)
    properties = dict(msg.properties)
    properties[c.PROPERTY_DELAY] = str(level)
    properties[c.PROPERTY_REAL_TOPIC] = msg.topic
    properties[c.PROPERTY_REAL_QUEUE_ID] = str(msg.queue_id)
    return dataclasses.replace(msg, topic=c.SCHEDULE_TOPIC, queue_id=level - 1, properties=properties)


def deliver_timestamp_ms(level: int, store_timestamp_ms: int, delays_ms: Sequence[int]) -> int:
    """computeDeliverTimestamp: store time + the level's delay (one unit for an unknown level)."""
    if 1 <= level <= len(delays_ms):
        return store_timestamp_ms + delays_ms[level - 1]
    return store_timestamp_ms + c.DELAY_LEVEL_UNIT_MS


def schedule_tag_code(record: Record, delays_ms: Sequence[int]) -> int | None:
    """The consume-queue tag code of a waiting delayed record (its deliver timestamp), or None
    for any other record (which keeps its tag hash)."""
    return schedule_tag_code_of(record.topic, record.properties, record.store_timestamp_ms, delays_ms)


def schedule_tag_code_of(topic: str, properties: Mapping[str, str], store_timestamp_ms: int,
                         delays_ms: Sequence[int]) -> int | None:
    """`schedule_tag_code` from a record's parts (the write path has them before any record)."""
    if topic != c.SCHEDULE_TOPIC:
        return None
    level = min(delay_level_of(properties), len(delays_ms))
    if level <= 0:
        return None
    return deliver_timestamp_ms(level, store_timestamp_ms, delays_ms)
