"""Answer codes: one member per wire code, RocketMQ's numbers, and the gRPC table by name."""

from nodes.common.codes import ResponseCode
from nodes.common.grpc_adapter import CODE_TO_PB, code_from_pb
from proto import common_pb2


def test_every_wire_code_has_a_member_and_converts_both_ways():
    for name, value in common_pb2.Code.items():
        code = ResponseCode[name]
        assert CODE_TO_PB[code] == value and code_from_pb(value) is code


def test_rocketmq_numbers():
    assert (ResponseCode.SUCCESS, ResponseCode.SYSTEM_ERROR, ResponseCode.SLAVE_NOT_AVAILABLE,
            ResponseCode.FLUSH_SLAVE_TIMEOUT, ResponseCode.TOPIC_NOT_EXIST, ResponseCode.PULL_NOT_FOUND,
            ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_OFFSET_MOVED,
            ResponseCode.QUERY_NOT_FOUND) == (0, 1, 11, 12, 17, 19, 20, 21, 22)
    assert ResponseCode.REQUEST_CODE_NOT_SUPPORTED == 3
    assert all(code >= 1000 for code in (ResponseCode.INVALID_ARGUMENT, ResponseCode.TOPIC_ROUTE_NOT_EXIST))


def test_a_code_the_wire_lacks_goes_out_as_system_error_and_an_unknown_one_reads_as_it():
    assert CODE_TO_PB[ResponseCode.REQUEST_CODE_NOT_SUPPORTED] == common_pb2.SYSTEM_ERROR
    assert code_from_pb(9999) is ResponseCode.SYSTEM_ERROR
