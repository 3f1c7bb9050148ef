"""The JSON bodies of the broker's remoting requests and answers, both directions.

Bodies are read leniently and written plainly: fastjson (and clients modelled on it) may
write integer map keys unquoted (`{0:"..."}`), which `json` refuses, so a body that does not
parse as it is gets its bare integer keys quoted and one more try. A heartbeat's consumer
enums arrive as Java ordinals from the C++ client and as names from ali-ons; `subVersion`
as a string or a number. Anything that still does not fit raises `BodyError`, which the
listener answers with an error (the connection stays).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from nodes.broker.consumers import ConsumerRegistration, Subscription
from nodes.broker.queue_locks import LockBatchRequest
from nodes.common import constants as c
from nodes.common.types import MessageQueue
from nodes.remoting.command import HeaderFieldError, json_int


class BodyError(HeaderFieldError):
    """A request body that is not the JSON its code needs."""


def loads(body: bytes) -> Any:
    """The body's JSON value; integer map keys may be unquoted."""
    try:
        text = body.decode()
    except UnicodeDecodeError as exc:
        raise BodyError(f"the body is not UTF-8: {exc}") from None
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return json.loads(quote_integer_keys(text))
    except ValueError as exc:
        raise BodyError(f"the body is not JSON: {exc}") from None


def dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def quote_integer_keys(text: str) -> str:
    """`{0:"a",1:"b"}` -> `{"0":"a","1":"b"}`; strings and values are left as they are."""
    out: list[str] = []
    i, n = 0, len(text)
    in_string = False
    while i < n:
        ch = text[i]
        out.append(ch)
        i += 1
        if in_string:
            if ch == "\\" and i < n:
                out.append(text[i])
                i += 1
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{,":
            j = i
            while j < n and text[j].isspace():
                j += 1
            k = j + 1 if j < n and text[j] == "-" else j
            while k < n and text[k].isdigit():
                k += 1
            m = k
            while m < n and text[m].isspace():
                m += 1
            if k > j and text[j:k] != "-" and m < n and text[m] == ":":
                out.append(f'{text[i:j]}"{text[j:k]}"')
                i = k
    return "".join(out)


# --- typed reads ------------------------------------------------------------------------------

def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BodyError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise BodyError(f"{what} must be a JSON array, got {type(value).__name__}")
    return value


def _str(obj: dict[str, Any], name: str, default: str | None = None) -> str:
    value = obj.get(name)
    if value is None:
        if default is None:
            raise BodyError(f"{name!r} is required in the body")
        return default
    if isinstance(value, (dict, list, bool)):
        raise BodyError(f"{name!r} must be a string, got {value!r}")
    return str(value)


def _int(obj: dict[str, Any], name: str, default: int | None = None) -> int:
    value = obj.get(name)
    if value is None or value == "":
        if default is None:
            raise BodyError(f"{name!r} is required in the body")
        return default
    try:
        return json_int(value, repr(name))
    except ValueError as exc:
        raise BodyError(str(exc)) from None


def _enum(obj: dict[str, Any], name: str, names: tuple[str, ...], default: str) -> str:
    """A Java enum written by ordinal (C++) or by name (ali-ons)."""
    value = obj.get(name)
    if value is None or value == "":
        return default
    if isinstance(value, str) and not value.isdigit():
        if value not in names:
            raise BodyError(f"{name!r} must be one of {names}, got {value!r}")
        return value
    ordinal = _int(obj, name)
    if not 0 <= ordinal < len(names):
        raise BodyError(f"{name!r} ordinal {ordinal} is outside 0..{len(names) - 1}")
    return names[ordinal]


# --- heartbeat --------------------------------------------------------------------------------

def heartbeat_from_body(body: bytes) -> tuple[str, tuple[ConsumerRegistration, ...]]:
    """HeartbeatData -> (clientID, one registration per consumer group). Producer groups are
    not registered anywhere (the broker only tracks consumers), so they are only checked."""
    data = _object(loads(body), "the heartbeat")
    client_id = _str(data, "clientID")
    registrations = []
    for entry in _list(data.get("consumerDataSet"), "consumerDataSet"):
        entry = _object(entry, "a consumerDataSet entry")
        subscriptions = tuple(
            Subscription(topic=_str(sub, "topic"), expression=_str(sub, "subString", "*"),
                         sub_version=_int(sub, "subVersion", 0))
            for sub in (_object(s, "a subscriptionDataSet entry")
                        for s in _list(entry.get("subscriptionDataSet"), "subscriptionDataSet")))
        registrations.append(ConsumerRegistration(
            group=_str(entry, "groupName"),
            consume_type=_enum(entry, "consumeType", c.REMOTING_CONSUME_TYPES, c.CONSUME_TYPE_PASSIVELY),
            message_model=_enum(entry, "messageModel", c.REMOTING_MESSAGE_MODELS, c.MESSAGE_MODEL_CLUSTERING),
            consume_from_where=_enum(entry, "consumeFromWhere", c.REMOTING_CONSUME_FROM_WHERE, ""),
            subscriptions=subscriptions))
    for entry in _list(data.get("producerDataSet"), "producerDataSet"):
        _object(entry, "a producerDataSet entry")
    return client_id, tuple(registrations)


# --- locks and consumer lists -----------------------------------------------------------------

def lock_batch_from_body(body: bytes) -> LockBatchRequest:
    """LockBatchRequestBody / UnlockBatchRequestBody: {"clientId","consumerGroup","mqSet":[...]}."""
    data = _object(loads(body), "the lock body")
    queues = tuple(MessageQueue(topic=_str(mq, "topic"), broker_name=_str(mq, "brokerName"),
                                queue_id=_int(mq, "queueId"))
                   for mq in (_object(q, "an mqSet entry") for q in _list(data.get("mqSet"), "mqSet")))
    return LockBatchRequest(consumer_group=_str(data, "consumerGroup", ""), client_id=_str(data, "clientId", ""),
                            queues=queues)


def mq_set_body(mqs: Iterable[MessageQueue]) -> bytes:
    """LockBatchResponseBody."""
    return dumps({"lockOKMQSet": [{"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}
                                  for mq in mqs]})


def consumer_list_body(client_ids: Iterable[str]) -> bytes:
    """GetConsumerListByGroupResponseBody."""
    return dumps({"consumerIdList": list(client_ids)})
