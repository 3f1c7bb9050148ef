"""Answer codes of broker and name-server requests, independent of any transport.

Member names are those of the wire enum `Code` (proto/common.proto), so a transport adapter
converts by name. Values are RocketMQ's `ResponseCode` numbers wherever RocketMQ has the code,
so the RocketMQ remoting adapter can write them unchanged.
"""

from __future__ import annotations

import enum

# Codes RocketMQ lacks get numbers from here up: RocketMQ's own codes stay below 1000 (its
# largest, the ACL and transaction codes, are in the 200s), so ours can never collide with one.
_MQLAB_ONLY_BASE = 1000


class ResponseCode(enum.IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    CONSUMER_NOT_ONLINE = 206
    # mqlab only. The wire enum's zero value: never answered, present so every wire code has a member.
    CODE_UNSPECIFIED = _MQLAB_ONLY_BASE
    # mqlab only: RocketMQ's name server answers TOPIC_NOT_EXIST for a topic with no route; our
    # clients tell "no live broker serves it" apart from a broker's "no such topic".
    TOPIC_ROUTE_NOT_EXIST = _MQLAB_ONLY_BASE + 1
    # mqlab only: RocketMQ answers a malformed request with SYSTEM_ERROR or a code of the
    # specific check; we say plainly that the request itself was wrong.
    INVALID_ARGUMENT = _MQLAB_ONLY_BASE + 2
