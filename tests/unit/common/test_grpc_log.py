"""gRPC's "unexpected ExecuteBatchError" (a client gone while its stream finished) becomes one
INFO line in a node's log; every other record of gRPC's logger passes untouched."""

from __future__ import annotations

import io
import logging

import pytest
from grpc._cython.cygrpc import ExecuteBatchError

from nodes.common.grpc_log import GRPC_SERVER_LOGGER, PeerGoneFilter


@pytest.fixture
def grpc_logger():
    logger = logging.getLogger(GRPC_SERVER_LOGGER + ".under_test")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.addFilter(PeerGoneFilter())
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)
    logger.filters.clear()


def _raise_and_log(logger: logging.Logger, exc: Exception) -> None:
    try:
        raise exc
    except Exception:
        logger.exception("Unexpected [%s] raised by servicer method [%s]", type(exc).__name__,
                         "/mqlab.v1.Broker/Pull")


def test_a_failed_status_send_is_one_info_line(grpc_logger):
    logger, stream = grpc_logger
    _raise_and_log(logger, ExecuteBatchError("Failed \"execute_batch\": (SendStatusFromServerOperation,)"))
    lines = stream.getvalue().splitlines()
    assert lines == ["INFO a client went away before /mqlab.v1.Broker/Pull sent its status (grpc "
                     "ExecuteBatchError); nothing to answer"]


def test_any_other_error_keeps_its_traceback(grpc_logger):
    logger, stream = grpc_logger
    _raise_and_log(logger, RuntimeError("a servicer's own bug"))
    text = stream.getvalue()
    assert text.startswith("ERROR Unexpected [RuntimeError]") and "Traceback" in text and "a servicer's own bug" in text


def test_a_nodes_log_gets_the_line_from_grpcs_own_logger(tmp_path):
    from nodes.__main__ import _setup_logging

    root = logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    try:
        _setup_logging(tmp_path, "broker-x-0")
        _raise_and_log(logging.getLogger(GRPC_SERVER_LOGGER), ExecuteBatchError("Failed \"execute_batch\""))
        for handler in root.handlers:
            handler.flush()
        text = (tmp_path / "node.log").read_text()
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)
        logging.getLogger(GRPC_SERVER_LOGGER).filters.clear()
    assert "broker-x-0 INFO grpc._cython.cygrpc: a client went away before /mqlab.v1.Broker/Pull" in text
    assert "Traceback" not in text
