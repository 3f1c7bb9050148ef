"""What gRPC's own logger may put in a node's log.

grpc.aio's server finishes a stream by sending its status; when the client has gone in the
meantime (it cancelled, or read one answer and dropped the call) that send fails with
`ExecuteBatchError`. gRPC ignores the error when it has already seen the client close, but the
two race, and on the losing side it logs "Unexpected [ExecuteBatchError] raised by servicer
method" with a full traceback. Nothing is lost (the peer is gone; there is no one left to
answer), so a node logs it as one INFO line without a traceback: a traceback in a node's log
stays a sign of the node's own fault.
"""

from __future__ import annotations

import logging

from grpc._cython.cygrpc import ExecuteBatchError

GRPC_SERVER_LOGGER = "grpc._cython.cygrpc"


class PeerGoneFilter(logging.Filter):
    """Rewrites gRPC's "unexpected ExecuteBatchError" record as one INFO line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, ExecuteBatchError):
            return True
        message = record.getMessage()
        method = message.rpartition("servicer method [")[2].rstrip("]") if "servicer method [" in message else "a call"
        record.msg = "a client went away before %s sent its status (grpc ExecuteBatchError); nothing to answer"
        record.args = (method,)
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.exc_info, record.exc_text = None, None
        return True


def install_peer_gone_filter() -> None:
    logger = logging.getLogger(GRPC_SERVER_LOGGER)
    if not any(isinstance(f, PeerGoneFilter) for f in logger.filters):
        logger.addFilter(PeerGoneFilter())
