"""The pull request and answer values: what a transport adapter builds and gets back from the
pull path. Apart from `pull` so the hold service can name them without importing the pull path."""

from __future__ import annotations

from dataclasses import dataclass

from nodes.common.codes import ResponseCode


@dataclass(frozen=True, slots=True)
class PullRequest:
    """PULL_MESSAGE, with RocketMQ's flags spelled out (suspend, commit, subscription)."""

    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    request_id: int = 0
    suspend: bool = False
    suspend_timeout_ms: int = 0
    commit_offset: bool = False
    commit_offset_value: int = 0
    has_subscription: bool = False
    subscription_expression: str = ""
    sub_version: int = 0
    client_id: str = ""
    commit_seq: int = 0


@dataclass(frozen=True, slots=True)
class PullAnswer:
    """The answer to one pull: on SUCCESS `records` holds `record_count` whole commitlog
    records back to back (one copy out of the store)."""

    request_id: int
    code: ResponseCode
    remark: str = ""
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    suggest_which_broker_id: int = 0
    record_count: int = 0
    records: bytes = b""
