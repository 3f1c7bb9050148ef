"""Every broker request code with wrong extFields and bad bodies, property-tested against a running
broker: each request gets an answer with its opaque (never a closed connection: the frames are
well formed), a bad one a non-zero code, and a connection opened first keeps getting correct
answers afterwards."""

from __future__ import annotations

import json
import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.examples import examples
from support.inprocess import InProcessCluster

from nodes.remoting.command import RemotingCommand, RequestCode, decode, encode

CODES = [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE,
         RequestCode.PULL_MESSAGE, RequestCode.QUERY_CONSUMER_OFFSET, RequestCode.UPDATE_CONSUMER_OFFSET,
         RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, RequestCode.GET_MAX_OFFSET, RequestCode.GET_MIN_OFFSET,
         RequestCode.HEART_BEAT, RequestCode.UNREGISTER_CLIENT, RequestCode.CONSUMER_SEND_MSG_BACK,
         RequestCode.GET_CONSUMER_LIST_BY_GROUP, RequestCode.LOCK_BATCH_MQ, RequestCode.UNLOCK_BATCH_MQ,
         # the read-only operator requests (creating or deleting topics would change what the
         # healthy connection reads)
         RequestCode.GET_TOPIC_STATS_INFO, RequestCode.GET_CONSUME_STATS, RequestCode.GET_CONSUMER_CONNECTION_LIST,
         RequestCode.GET_BROKER_RUNTIME_INFO, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP]
FIELDS = ["topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "consumerGroup", "commitOffset", "offset",
          "group", "timestamp", "clientID", "batch", "b", "e", "f", "m", "suspendTimeoutMillis", "subVersion",
          "delayLevel", "properties"]
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                                       max_size=3), max_leaves=8)
BODIES = st.one_of(
    st.binary(max_size=64),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({}, optional={"clientID": JSON_VALUES, "consumerDataSet": JSON_VALUES,
                                        "producerDataSet": JSON_VALUES, "clientId": JSON_VALUES,
                                        "consumerGroup": JSON_VALUES, "mqSet": JSON_VALUES,
                                        "groupName": JSON_VALUES, "consumeMessageOrderly": JSON_VALUES,
                                        "retryMaxTimes": JSON_VALUES}
                          ).map(lambda v: json.dumps(v).encode()))
EXT = st.dictionaries(st.sampled_from(FIELDS), st.one_of(st.text(max_size=12), st.integers(-2**40, 2**40).map(str),
                                                          st.sampled_from(["", "-1", "1", "true", "RemotingBad"])),
                      max_size=8)


# every code's required fields, valid; each example overrides some of them, so the checks past
# "field missing" are reached too
BASELINE = {"topic": "RemotingBad", "queueId": "0", "consumerGroup": "G", "group": "G", "queueOffset": "0",
            "maxMsgNums": "4", "offset": "0", "commitOffset": "0", "timestamp": "0", "clientID": "c",
            "b": "RemotingBad", "e": "0", "subscription": "*"}


class Conn:
    def __init__(self, addr: str) -> None:
        host, _, port = addr.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.opaque = 0

    def call(self, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
        self.opaque += 1
        self.sock.sendall(encode(RemotingCommand(code=code, opaque=self.opaque, ext=ext, body=body)))
        (length,) = struct.unpack(">i", self._exactly(4))
        answer = decode(self._exactly(length))
        assert answer.is_response and answer.opaque == self.opaque, answer
        return answer

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            assert chunk, "the broker closed a connection that sent well-formed frames"
            data += chunk
        return data


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with InProcessCluster(tmp_path_factory.mktemp("bad-input")) as cluster:
        addr = cluster.call(lambda: cluster.broker.remoting_addr)
        healthy = Conn(addr)
        sent = healthy.call(RequestCode.SEND_MESSAGE, {"topic": "RemotingBad", "queueId": "0"}, b"kept")
        assert sent.code == 0, sent.remark
        yield cluster, addr, healthy
        healthy.sock.close()


def _healthy_still_answers(healthy: Conn) -> None:
    answer = healthy.call(RequestCode.PULL_MESSAGE, {
        "consumerGroup": "G", "topic": "RemotingBad", "queueId": "0", "queueOffset": "0", "maxMsgNums": "1",
        "sysFlag": "4", "subscription": "*"})
    assert answer.code == 0 and b"kept" in answer.body


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(code=st.sampled_from(CODES), overrides=EXT, dropped=st.sets(st.sampled_from(sorted(BASELINE))),
       body=BODIES)
def test_bad_fields_and_bodies_get_answers_and_the_broker_keeps_serving(broker, code, overrides, dropped, body):
    cluster, addr, healthy = broker
    ext = {k: v for k, v in BASELINE.items() if k not in dropped} | overrides
    conn = Conn(addr)
    try:
        # suspended pulls would wait their timeout: keep them short
        if code == RequestCode.PULL_MESSAGE:
            ext["suspendTimeoutMillis"] = "1"
        conn.call(code, ext, body)
        assert conn.call(999, {}).code == 3  # the same connection still answers
    finally:
        conn.sock.close()
    _healthy_still_answers(healthy)
    assert cluster.call(lambda: cluster.broker.lifecycle.state.name) == "RUNNING"
