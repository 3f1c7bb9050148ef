"""The mqlab error tree. Expected outcomes (send/pull statuses) are enums, not exceptions.

    MqError
    ├── ConfigError                 unusable config: the node exits 78
    ├── InvariantViolation          our own broken invariant: the node exits 70
    ├── StoreError                  the message store cannot do what was asked
    │   ├── CorruptRecordError      a record failed its magic/size/CRC checks
    │   ├── DiskFullError           a store file could not be allocated (ENOSPC): refuse, retry later
    │   └── DataDirError            the data dir is missing, unreadable or not ours
    ├── ClientError                 a caller's mistake found before anything was sent
    │   ├── InvalidMessageError     bad topic name, empty or oversize body
    │   ├── InvalidArgumentError    a bad argument (also a ValueError)
    │   └── ClientStateError        the client is not started, or already shut down
    ├── RemoteError                 a peer answered with a non-success code: `answered`
    │   (subclasses per code; `retriable` / `refresh_route` drive client policy)
    └── TransportError              the peer could not be reached or did not answer: retriable
        ├── BrokerNotFoundError     no address for a broker name in the current route
        └── RequestTimeoutError     the deadline passed; the outcome is unknown: `indeterminate`
            └── OutcomeUnknownError a request with side effects failed after it may have
                                    reached the peer (reset, GOAWAY, cancelled...)

The attributes, not the classes, are the policy:
  * `retriable`      another attempt (on another broker, or later) may succeed;
  * `refresh_route`  the route may be stale: refresh it before the next attempt;
  * `indeterminate`  the request may have taken effect although the caller saw an error;
  * `answered`       a peer answered (a refusal); false for every failure to get an answer.
Client code branches on them, never on lists of classes or code names.
"""

from __future__ import annotations

from typing import ClassVar

from nodes.common.codes import ResponseCode


class MqError(Exception):
    retriable: ClassVar[bool] = False
    refresh_route: ClassVar[bool] = False
    # Whether the request may have taken effect although the caller saw an error.
    indeterminate: ClassVar[bool] = False
    # Whether a peer answered (a refusal): the request arrived and was not applied.
    answered: ClassVar[bool] = False


class ConfigError(MqError):
    pass


class InvariantViolation(MqError):
    pass


class StoreError(MqError):
    pass


class CorruptRecordError(StoreError):
    pass


class DiskFullError(StoreError):
    """A store file could not be allocated: its filesystem is full (ENOSPC). Nothing was written;
    the caller refuses the write (or retries it later) and the store stays up."""


class DataDirError(StoreError):
    pass


class ClientError(MqError):
    pass


class InvalidMessageError(ClientError):
    pass


class InvalidArgumentError(ClientError, ValueError):
    """A caller passed an argument the client refuses; the message says what to change."""


class ClientStateError(ClientError):
    """The client is not in a state that allows the call (not started, or shut down)."""


class RemoteError(MqError):
    """A peer answered with `code` (a RocketMQ ResponseCode name) and `remark`."""

    code: ClassVar[str] = "SYSTEM_ERROR"
    answered = True

    def __init__(self, remark: str = "", *, code: str | None = None) -> None:
        self.remark = remark
        if code is not None:
            self.code = code  # type: ignore[misc]
        # the number too: RocketMQ's tools and logs name codes by number (14, not its name)
        number = ResponseCode.__members__.get(self.code)
        named = f"{self.code} (code {int(number)})" if number is not None else self.code
        super().__init__(f"{named}: {remark}" if remark else named)


class SystemError_(RemoteError):
    code = "SYSTEM_ERROR"
    retriable = True


class TopicNotExistError(RemoteError):
    code = "TOPIC_NOT_EXIST"
    retriable = True
    refresh_route = True


class ServiceNotAvailableError(RemoteError):
    code = "SERVICE_NOT_AVAILABLE"
    retriable = True
    refresh_route = True


class NoPermissionError(RemoteError):
    code = "NO_PERMISSION"
    retriable = True
    refresh_route = True


class MessageIllegalError(RemoteError):
    code = "MESSAGE_ILLEGAL"


class SubscriptionGroupNotExistError(RemoteError):
    code = "SUBSCRIPTION_GROUP_NOT_EXIST"


class SubscriptionNotExistError(RemoteError):
    code = "SUBSCRIPTION_NOT_EXIST"


class QueryNotFoundError(RemoteError):
    code = "QUERY_NOT_FOUND"


class RouteNotFoundError(RemoteError):
    code = "TOPIC_ROUTE_NOT_EXIST"
    refresh_route = True


class TransportError(MqError):
    retriable = True
    refresh_route = True


class BrokerNotFoundError(TransportError):
    """The route names no reachable address for this broker; refreshing the route may help."""


class RequestTimeoutError(TransportError):
    indeterminate = True


class OutcomeUnknownError(RequestTimeoutError):
    """The request may have been applied although no answer came (not only by a deadline).

    A subclass of RequestTimeoutError so that code treating timeouts as "unknown outcome"
    treats these the same way; `indeterminate` is what to branch on.
    """


_BY_CODE: dict[str, type[RemoteError]] = {}


def _register(cls: type[RemoteError]) -> None:
    for sub in cls.__subclasses__():
        _BY_CODE.setdefault(sub.code, sub)
        _register(sub)


_register(RemoteError)


def for_code(code: str, remark: str = "") -> RemoteError:
    """The exception for a non-success response code."""
    cls = _BY_CODE.get(code)
    if cls is None:
        return RemoteError(remark, code=code)
    return cls(remark)
