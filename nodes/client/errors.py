"""Client-only additions to the error tree in `nodes.common.errors`.

These live here because `nodes/common` belongs to another owner; they are candidates to move
into `nodes/common/errors.py` (the tree drawn there is the one they extend):

    ClientError
    ├── InvalidArgumentError        a bad argument (also a ValueError), found before anything is sent
    └── ClientStateError            the client is not started, or already shut down
    TransportError
    ├── BrokerNotFoundError         no address for a broker name in the current route (RocketMQ's
    │                               MQClientException "The broker[...] not exist"): retriable
    └── RequestTimeoutError
        └── OutcomeUnknownError     a request with side effects failed after it may have reached
                                    the peer (reset, GOAWAY, cancelled...): `indeterminate`
"""

from __future__ import annotations

from nodes.common.errors import ClientError, RequestTimeoutError, TransportError


class InvalidArgumentError(ClientError, ValueError):
    """A caller passed an argument the client refuses; the message says what to change."""


class ClientStateError(ClientError):
    """The client is not in a state that allows the call (not started, or shut down)."""


class BrokerNotFoundError(TransportError):
    """The route names no reachable address for this broker; refreshing the route may help."""


class OutcomeUnknownError(RequestTimeoutError):
    """The request may have been applied although no answer came (not only by a deadline).

    A subclass of RequestTimeoutError so that code treating timeouts as "unknown outcome"
    treats these the same way; `indeterminate` is what to branch on.
    """
