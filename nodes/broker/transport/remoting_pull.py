"""PULL_MESSAGE (11) -> the pull handler, one `PullSession` per remoting connection.

The header's sysFlag bits become the request's flags (1 commit the piggy-backed offset,
2 long-poll, 4 the pull carries its subscription). A pull the handler parks with the hold
service answers later through the session's `respond`; the request's own task awaits that
answer, matched by a per-connection request id, so the listener writes it with the
request's opaque. When the connection closes, its held pulls are dropped and the waiting
tasks cancelled.

The body is the commitlog records exactly as the store returns them (RocketMQ's layout).
A FOUND answer with no records would make the C++ client throw, so it goes out as
PULL_RETRY_IMMEDIATELY.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

from nodes.broker.pull import PullAnswer, PullRequest, PullSession
from nodes.broker.transport import remoting_codes
from nodes.common import constants as c
from nodes.common.codes import ResponseCode
from nodes.remoting.command import RemotingCommand

OpenPullSession = Callable[[Callable[[PullAnswer], None]], PullSession]


def pull_request_from_command(cmd: RemotingCommand, request_id: int, client_id: str = "") -> PullRequest:
    sys_flag = cmd.ext_int("sysFlag", 0)
    commit = bool(sys_flag & c.REMOTING_PULL_FLAG_COMMIT_OFFSET)
    commit_offset = cmd.ext_int("commitOffset", -1)
    return PullRequest(
        consumer_group=cmd.ext_str("consumerGroup"), topic=cmd.ext_str("topic"), queue_id=cmd.ext_int("queueId"),
        queue_offset=cmd.ext_int("queueOffset"), max_msg_nums=cmd.ext_int("maxMsgNums"), request_id=request_id,
        suspend=bool(sys_flag & c.REMOTING_PULL_FLAG_SUSPEND),
        suspend_timeout_ms=cmd.ext_int("suspendTimeoutMillis", 0),
        # a commit flag with no offset to commit (-1) commits nothing
        commit_offset=commit and commit_offset >= 0, commit_offset_value=max(commit_offset, 0),
        has_subscription=bool(sys_flag & c.REMOTING_PULL_FLAG_SUBSCRIPTION),
        subscription_expression=cmd.ext_str("subscription", ""), sub_version=cmd.ext_int("subVersion", 0),
        client_id=client_id)


def pull_answer(cmd: RemotingCommand, answer: PullAnswer) -> RemotingCommand:
    code, remark, body = answer.code, answer.remark, answer.records
    if code == ResponseCode.SUCCESS and not body:
        code, remark = ResponseCode.PULL_RETRY_IMMEDIATELY, f"{remark}: no record to return"
    ext = {"suggestWhichBrokerId": answer.suggest_which_broker_id, "nextBeginOffset": answer.next_begin_offset,
           "minOffset": answer.min_offset, "maxOffset": answer.max_offset}
    return remoting_codes.answer(cmd, code, remark, ext, body if code == ResponseCode.SUCCESS else b"")


class RemotingPullSession:
    """The pulls of one remoting connection. Loop-confined."""

    def __init__(self, open_session: OpenPullSession) -> None:
        self._waiting: dict[int, asyncio.Future[PullAnswer]] = {}
        self._request_ids = itertools.count(1)
        self._session = open_session(self._respond)

    def _respond(self, answer: PullAnswer) -> None:
        waiter = self._waiting.pop(answer.request_id, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    async def pull(self, cmd: RemotingCommand, client_id: str = "") -> RemotingCommand:
        """`client_id`: the connection's one heartbeating client (recorded with a piggy-backed commit)."""
        request_id = next(self._request_ids)
        request = pull_request_from_command(cmd, request_id, client_id)
        # registered before the handler runs, in case the hold service answers at once
        waiter = self._waiting[request_id] = asyncio.get_running_loop().create_future()
        try:
            answer = self._session.handle(request)
            if answer is None:
                answer = await waiter
        finally:
            self._waiting.pop(request_id, None)
        return pull_answer(cmd, answer)

    def held(self) -> int:
        return self._session.held()

    def close(self) -> int:
        """Drop the held pulls and wake their tasks with a cancellation; returns how many were held."""
        dropped = self._session.close()
        for waiter in self._waiting.values():
            waiter.cancel()
        self._waiting.clear()
        return dropped
