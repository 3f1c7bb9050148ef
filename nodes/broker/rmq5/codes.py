"""RocketMQ 5's status codes (the `Code` of every answer) and how mqlab's answer codes map to them.

The numbers are the protocol's. A 5.x client reads only these: OK and MULTIPLE_RESULTS succeed,
MESSAGE_NOT_FOUND counts as success, every other code raises (a producer retries every one but
TOO_MANY_REQUESTS, up to its attempts, with the same message id).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from nodes.common.codes import ResponseCode


class Rmq5Code(enum.IntEnum):
    OK = 20000
    MULTIPLE_RESULTS = 30000
    BAD_REQUEST = 40000
    ILLEGAL_TOPIC = 40002
    ILLEGAL_CONSUMER_GROUP = 40003
    ILLEGAL_MESSAGE_TAG = 40004
    ILLEGAL_MESSAGE_KEY = 40005
    ILLEGAL_MESSAGE_GROUP = 40006
    ILLEGAL_MESSAGE_PROPERTY_KEY = 40007
    INVALID_TRANSACTION_ID = 40008
    ILLEGAL_MESSAGE_ID = 40009
    ILLEGAL_FILTER_EXPRESSION = 40010
    ILLEGAL_INVISIBLE_TIME = 40011
    ILLEGAL_DELIVERY_TIME = 40012
    INVALID_RECEIPT_HANDLE = 40013
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE = 40014
    UNRECOGNIZED_CLIENT_TYPE = 40015
    CLIENT_ID_REQUIRED = 40017
    ILLEGAL_POLLING_TIME = 40018
    FORBIDDEN = 40300
    MESSAGE_NOT_FOUND = 40401
    TOPIC_NOT_FOUND = 40402
    CONSUMER_GROUP_NOT_FOUND = 40403
    MESSAGE_BODY_TOO_LARGE = 41301
    MESSAGE_BODY_EMPTY = 41302
    TOO_MANY_REQUESTS = 42900
    MESSAGE_PROPERTIES_TOO_LARGE = 43101
    INTERNAL_SERVER_ERROR = 50001
    HA_NOT_AVAILABLE = 50002
    NOT_IMPLEMENTED = 50100
    MASTER_PERSISTENCE_TIMEOUT = 50401
    SLAVE_PERSISTENCE_TIMEOUT = 50402
    UNSUPPORTED = 50500


@dataclass(frozen=True, slots=True)
class Status:
    code: Rmq5Code
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.code == Rmq5Code.OK


OK = Status(Rmq5Code.OK, "OK")

# As Apache's proxy maps a broker's send answers. The three "stored but not as durable as asked"
# codes are errors to a 5.x client, which sends again with the same message id: the copies share
# UNIQ_KEY, as they would behind the proxy.
_BY_RESPONSE: dict[ResponseCode, Rmq5Code] = {
    ResponseCode.SUCCESS: Rmq5Code.OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: Rmq5Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: Rmq5Code.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: Rmq5Code.HA_NOT_AVAILABLE,
    ResponseCode.SYSTEM_BUSY: Rmq5Code.TOO_MANY_REQUESTS,
    ResponseCode.TOPIC_NOT_EXIST: Rmq5Code.TOPIC_NOT_FOUND,
    ResponseCode.TOPIC_ROUTE_NOT_EXIST: Rmq5Code.TOPIC_NOT_FOUND,
    ResponseCode.MESSAGE_ILLEGAL: Rmq5Code.BAD_REQUEST,
    ResponseCode.INVALID_ARGUMENT: Rmq5Code.BAD_REQUEST,
    ResponseCode.NO_PERMISSION: Rmq5Code.FORBIDDEN,
}


def status_of(code: ResponseCode, remark: str = "") -> Status:
    """An mqlab answer as a 5.x status; anything unlisted is INTERNAL_SERVER_ERROR (the proxy's rule)."""
    return Status(_BY_RESPONSE.get(code, Rmq5Code.INTERNAL_SERVER_ERROR), remark or code.name)
