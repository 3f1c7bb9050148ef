"""Request checks every broker handler shares, whatever transport carried the request.

Owns: which topic and group names a request may carry (nodes.common.names), what a client may
put in a send (no system topic, at most BATCH_MESSAGES_MAX messages, well-formed delay and
REAL_* properties), and which committed offsets are acceptable (a known topic and queue, 0 up
to the queue's max offset). Each check returns a `Refusal` (code and remark) or None, so a
handler calls it in one line and answers with its own response type.

Why here and not in the adapters: names and offsets enter through gRPC and the RocketMQ
remoting listener alike; checking in the transport-free handlers covers both.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import NamedTuple, Protocol

from nodes.common import constants as c
from nodes.common.codes import ResponseCode
from nodes.common.names import group_problem, is_send_forbidden, topic_problem
from nodes.common.reject_log import RejectLog
from nodes.store.message_batch import ENTRY_BYTES_MIN, ENTRY_HEAD
from nodes.store.record_batch import ScannedBatch

log = logging.getLogger(__name__)
_refused_commits = RejectLog(log)
# the properties `properties_refusal` checks, as their names stand in a raw properties text
_CHECKED_PROPERTIES = (c.PROPERTY_DELAY, c.PROPERTY_REAL_TOPIC, c.PROPERTY_REAL_QUEUE_ID,
                       c.PROPERTY_TRANSACTION_PREPARED)
_CHECKED_NAMES = tuple(f"{name}{c.PROPERTY_NAME_SEPARATOR}".encode() for name in _CHECKED_PROPERTIES)


class Refusal(NamedTuple):
    code: ResponseCode
    remark: str


class _Topics(Protocol):
    def get(self, topic: str) -> object | None: ...


class _Queues(Protocol):
    def max_queue_offset(self, topic: str, queue_id: int) -> int: ...


def names_refusal(*, topic: str | None = None, group: str | None = None,
                  code: ResponseCode = ResponseCode.INVALID_ARGUMENT) -> Refusal | None:
    """A bad topic or group name (RocketMQ's characters and lengths); None when both are fine."""
    problem = (topic_problem(topic) if topic is not None else None) or (
        group_problem(group) if group is not None else None)
    return Refusal(code, problem) if problem is not None else None


def heartbeat_refusal(consumers: Iterable[object]) -> Refusal | None:
    """Every group of a heartbeat and every topic it subscribes to must be a valid name."""
    for reg in consumers:
        refusal = names_refusal(group=getattr(reg, "group", ""))
        for subscription in getattr(reg, "subscriptions", ()):
            refusal = refusal or names_refusal(topic=getattr(subscription, "topic", ""))
        if refusal is not None:
            return refusal
    return None


def queues_refusal(queues: Iterable[object]) -> Refusal | None:
    """The queues of a lock request: topic names and queue ids in range."""
    for mq in queues:
        refusal = names_refusal(topic=getattr(mq, "topic", ""))
        if refusal is not None:
            return refusal
        queue_id = getattr(mq, "queue_id", -1)
        if not 0 <= queue_id < c.QUEUE_NUMS_MAX:
            return Refusal(ResponseCode.INVALID_ARGUMENT, f"queue id {queue_id} is outside [0, {c.QUEUE_NUMS_MAX})")
    return None


def send_refusal(topic: str, message_count: int, batch_body: bytes) -> Refusal | None:
    """The checks before a send's messages are decoded: the topic's name, a system topic
    (RocketMQ's msgCheck answers NO_PERMISSION), and the batch's size in messages — counted by
    walking the frame lengths only, so a huge batch costs no more than BATCH_MESSAGES_MAX steps."""
    problem = topic_problem(topic)
    if problem is not None:
        return Refusal(ResponseCode.MESSAGE_ILLEGAL, problem)
    if topic == c.AUTO_CREATE_TOPIC_KEY:
        return Refusal(ResponseCode.MESSAGE_ILLEGAL, f"{topic} is the auto-create template; send elsewhere")
    if is_send_forbidden(topic):
        return Refusal(ResponseCode.NO_PERMISSION, f"sending to the system topic {topic} is forbidden")
    count = batch_entries_upto(batch_body, c.BATCH_MESSAGES_MAX + 1) if batch_body else message_count
    if count > c.BATCH_MESSAGES_MAX:
        return Refusal(ResponseCode.MESSAGE_ILLEGAL,
                       f"a send carries at most {c.BATCH_MESSAGES_MAX} messages; split the batch")
    return None


def batch_entries_upto(batch_body: bytes, limit: int) -> int:
    """How many entries a batch body frames, counting stops at `limit` (framing errors are the
    decoder's to report: a bad length just ends the count)."""
    pos, end, count = 0, len(batch_body), 0
    unpack = ENTRY_HEAD.unpack_from
    while pos + ENTRY_BYTES_MIN <= end and count < limit:
        total_size = unpack(batch_body, pos)[0]
        if total_size < ENTRY_BYTES_MIN:
            break
        pos += total_size
        count += 1
    return count


def properties_refusal(messages: Sequence[tuple[bytes, int, dict[str, str], int]], *,
                       batch: bool = False) -> Refusal | None:
    """The delay and REAL_* properties a client set: DELAY an integer, REAL_TOPIC a topic name,
    REAL_QID a queue id. (The store overwrites REAL_* when it parks a delayed message; these
    keep what a client writes readable as the broker's own properties.) A transactional message
    in a batch (RocketMQ's producer refuses to build one): each half message is ended alone."""
    for i, (_body, _flag, properties, _born_ms) in enumerate(messages):
        if not any(name in properties for name in _CHECKED_PROPERTIES):
            continue  # the common case
        problem = _property_problem(properties)
        if batch and properties.get(c.PROPERTY_TRANSACTION_PREPARED) == "true":
            problem = "a batch cannot carry transactional messages; send each in its own transaction"
        if problem is not None:
            return Refusal(ResponseCode.MESSAGE_ILLEGAL, f"message {i}: {problem}")
    return None


def scanned_needs_property_checks(scanned: ScannedBatch) -> bool:
    """Whether an entry of a batch body the store could write as it is (`scan_batch_body`)
    names a property `properties_refusal` checks: the send then decodes the batch so the check
    runs. A match on the raw text, so a name that only ends so (`MY_DELAY`) also goes that way:
    slower, with the same outcome."""
    properties = scanned.properties  # every entry's text joined: a name is in it iff in an entry's
    return any(name in properties for name in _CHECKED_NAMES)


def _property_problem(properties: dict[str, str]) -> str | None:
    delay = properties.get(c.PROPERTY_DELAY)
    if delay is not None and not _is_int(delay):
        return f"{c.PROPERTY_DELAY} must be a delay level (an integer), got {delay[:40]!r}"
    real_topic = properties.get(c.PROPERTY_REAL_TOPIC)
    if real_topic is not None:
        problem = topic_problem(real_topic)
        if problem is not None:
            return f"{c.PROPERTY_REAL_TOPIC}: {problem}"
        if is_send_forbidden(real_topic):
            return f"{c.PROPERTY_REAL_TOPIC} names the system topic {real_topic}"
    real_qid = properties.get(c.PROPERTY_REAL_QUEUE_ID)
    if real_qid is not None and not (_is_int(real_qid) and 0 <= int(real_qid) < c.QUEUE_NUMS_MAX):
        return f"{c.PROPERTY_REAL_QUEUE_ID} must be a queue id in 0..{c.QUEUE_NUMS_MAX - 1}, got {real_qid[:40]!r}"
    return None


def _is_int(text: str) -> bool:
    # ASCII digits only: str.isdigit() also takes '²', which int() refuses
    digits = text.strip().lstrip("+-")
    return digits.isascii() and digits.isdigit() and len(text) <= 20


def offset_refusal(topics: _Topics, queues: _Queues, *, group: str, topic: str, queue_id: int,
                   queue_offset: int) -> Refusal | None:
    """A committed offset the broker refuses to store: bad names, an unknown topic, a queue
    outside the topic, a negative offset or one beyond the queue's max offset (the next offset
    a message would get: a consumer that read everything commits exactly that)."""
    refusal = names_refusal(topic=topic, group=group)
    if refusal is not None:
        return refusal
    if queue_offset < 0:
        return Refusal(ResponseCode.INVALID_ARGUMENT, f"offset must be >= 0, got {queue_offset}")
    config = topics.get(topic)
    if config is None:
        return Refusal(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic!r} does not exist here")
    queue_nums = max(getattr(config, "read_queue_nums", 0), getattr(config, "write_queue_nums", 0))
    if not 0 <= queue_id < queue_nums:
        return Refusal(ResponseCode.INVALID_ARGUMENT, f"queue id {queue_id} is outside [0, {queue_nums}) of {topic}")
    max_offset = queues.max_queue_offset(topic, queue_id)
    if queue_offset > max_offset:
        return Refusal(ResponseCode.INVALID_ARGUMENT,
                       f"offset {queue_offset} is beyond the max offset {max_offset} of {topic} queue {queue_id}")
    return None


def commit_allowed(topics: _Topics, queues: _Queues, group: str, topic: str, queue_id: int, queue_offset: int) -> bool:
    """Whether a pull's piggy-backed commit may be stored; a refused one is skipped (the pull
    itself is answered as usual) and logged, one line per group and interval."""
    refusal = offset_refusal(topics, queues, group=group, topic=topic, queue_id=queue_id, queue_offset=queue_offset)
    if refusal is None:
        return True
    _refused_commits.reject(f"group {group[:80]}", "a piggy-backed commit", refusal.remark)
    return False
