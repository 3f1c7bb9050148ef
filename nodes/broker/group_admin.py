"""Subscription group admin (RocketMQ AdminBrokerProcessor#updateAndCreateSubscriptionGroup, what
`mqadmin updateSubGroup` sends): create a group or change the settings an operator owns.

Owns: the checks on an operator's group update and storing it. Two settings are offered, the
ones RocketMQ 5 consumers depend on: `consume_message_orderly` (`-o true`: the group pops FIFO,
and a 5.x consumer's settings say `fifo`) and `retry_max_times` (`-r`: a message is delivered
retry_max_times + 1 times before the DLQ). Masters only: a slave takes its master's groups at
its next metadata sync. A 5.x PushConsumer reads `fifo` once, from its first settings answer:
change the flag before its consumers start.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from nodes.broker.topics import SubscriptionGroupConfig, SubscriptionGroupManager
from nodes.common import constants as c
from nodes.common.codes import ResponseCode
from nodes.common.errors import StoreError
from nodes.common.names import group_problem


@dataclass(frozen=True, slots=True)
class UpdateGroupRequest:
    group: str
    consume_message_orderly: bool | None = None  # None: unchanged (False for a new group)
    retry_max_times: int | None = None  # None: unchanged (GROUP_RETRY_MAX_TIMES for a new group)


@dataclass(frozen=True, slots=True)
class UpdateGroupResponse:
    code: ResponseCode
    remark: str = ""
    config: SubscriptionGroupConfig | None = None  # the group as stored, when SUCCESS


class GroupAdminHandler:
    def __init__(self, groups: SubscriptionGroupManager, *, is_master: bool) -> None:
        self._groups = groups
        self._is_master = is_master

    def update_group(self, req: UpdateGroupRequest) -> UpdateGroupResponse:
        if not self._is_master:
            return UpdateGroupResponse(ResponseCode.NO_PERMISSION, "a slave takes its groups from its master: "
                                                                  "update the group on the master")
        if problem := group_problem(req.group):
            return UpdateGroupResponse(ResponseCode.INVALID_ARGUMENT, f"group {req.group!r}: {problem}")
        if req.retry_max_times is not None and not 0 <= req.retry_max_times <= c.GROUP_RETRY_MAX_TIMES_LIMIT:
            return UpdateGroupResponse(ResponseCode.INVALID_ARGUMENT,
                                       f"retry_max_times {req.retry_max_times} is outside "
                                       f"0..{c.GROUP_RETRY_MAX_TIMES_LIMIT}")
        config = self._groups.groups.get(req.group) or SubscriptionGroupConfig(req.group)
        changes: dict[str, object] = {}
        if req.consume_message_orderly is not None:
            changes["consume_message_orderly"] = req.consume_message_orderly
        if req.retry_max_times is not None:
            changes["retry_max_times"] = req.retry_max_times
        config = dataclasses.replace(config, **changes)
        try:
            self._groups.put(config)
        except StoreError as exc:
            return UpdateGroupResponse(ResponseCode.SYSTEM_ERROR, f"the group could not be written ({exc}); "
                                                                  "free disk space and try again")
        return UpdateGroupResponse(ResponseCode.SUCCESS, config=config)
