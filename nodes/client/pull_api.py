"""The client half of a pull (RocketMQ `PullAPIWrapper`).

Owns: choosing the broker address for a queue (the per-queue memory of the broker's
`suggest_which_broker_id`), the commit flag of a pull (cleared for a slave), the pull's
routing event, and handing the pull to `ClientApi.pull` (which reads the answer's code and
records, `pull_decode`). Does not own pull scheduling, flow control or offsets (consumer
facades do).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nodes.client.pull_decode import parse_subscription
from nodes.client.routes import FoundBroker
from nodes.client.rpc.api import process_pull_response
from nodes.common import constants as c
from nodes.common.types import MessageQueue, PullResult

if TYPE_CHECKING:
    from nodes.client.instance import ClientInstance
    from nodes.client.sync_call import Settle


class PullApi:
    """PullAPIWrapper: routes a pull to the suggested broker and interprets the answer.

    Loop-confined (runs on the `ClientInstance` loop), except `pull_blocking`, which runs in
    its caller's thread: it reads the route cache and writes one entry of the suggestion table
    (each one dict operation, atomic under the GIL), and hands its routing event to the loop.
    """

    def __init__(self, instance: ClientInstance, group: str,
                 on_routing_event: Callable[[dict[str, Any]], None] | None = None, *, client_id: str = "",
                 ignore_pull_suggestion: bool = False) -> None:
        self._instance = instance
        self.group = group
        self.client_id = client_id  # names the puller in routing events ("" for a bare PullConsumer)
        # Test-only fault switch `ignore-pull-suggestion` (constants.FAULT_IGNORE_PULL_SUGGESTION).
        self.ignore_pull_suggestion = ignore_pull_suggestion
        self._pull_from_which_node: dict[MessageQueue, int] = {}
        # Every routing decision (asked-for broker, answering broker, suggestion) for the checker.
        self.on_routing_event = on_routing_event
        # Beyond RocketMQ: pull every queue from this broker id, ignoring the suggestions (the
        # benchmark reads a slave this way); None follows them as RocketMQ does.
        self.pinned_broker_id: int | None = None

    def recalculate_pull_from_which_node(self, mq: MessageQueue) -> int:
        if self.pinned_broker_id is not None:
            return self.pinned_broker_id
        if self.ignore_pull_suggestion:
            # FAULT SWITCH ignore-pull-suggestion: breaks the cold-read redirect (RocketMQ 4.9,
            # rule R2): the broker's suggest_which_broker_id is dropped and every pull asks the master.
            return c.MASTER_ID
        return self._pull_from_which_node.get(mq, c.MASTER_ID)

    def next_commit_seq(self) -> int:
        return self._instance.next_commit_seq()

    def update_pull_from_which_node(self, mq: MessageQueue, broker_id: int) -> None:
        self._pull_from_which_node[mq] = broker_id

    def _request(self, found: FoundBroker, expression: str, mq: MessageQueue, queue_offset: int, max_nums: int, *,
                 suspend: bool, suspend_timeout_ms: int, commit_offset_value: int | None, commit_seq: int,
                 post_subscription: bool, sub_version: int) -> tuple[dict[str, Any], bool]:
        """The PullRequest fields (without request id) of one pull to `found`, and its commit flag."""
        # FLAG_COMMIT_OFFSET is set iff the value is > 0, and cleared when pulling from a slave.
        commit = commit_offset_value is not None and commit_offset_value > 0 and not found.slave
        return {
            "consumer_group": self.group,
            "topic": mq.topic,
            "queue_id": mq.queue_id,
            "queue_offset": queue_offset,
            "max_msg_nums": max_nums,
            "suspend": suspend,
            "suspend_timeout_ms": suspend_timeout_ms,
            "commit_offset": commit,
            "commit_offset_value": commit_offset_value if commit else 0,
            "client_id": self.client_id,  # names the puller to the broker (its consume stats), and orders a commit
            "commit_seq": commit_seq if commit else 0,
            # A pull consumer always posts its subscription; a push consumer only with
            # postSubscriptionWhenPull (the broker then uses the group's registered one).
            "has_subscription": post_subscription,
            "subscription_expression": expression if post_subscription else "",
            "sub_version": sub_version,  # the broker answers SUBSCRIPTION_NOT_LATEST if its copy is older
        }, commit

    def _answered(self, mq: MessageQueue, queue_offset: int, requested_id: int, found: FoundBroker, commit: bool,
                  result: PullResult, sent_mono_ms: int, *,
                  tell: Callable[[Callable[[dict[str, Any]], None], dict[str, Any]], None] | None = None
                  ) -> PullResult:
        """processPullResult's routing half: remember the suggestion, tell the routing listener
        (through `tell(listener, event)` when given: from another thread than the loop's)."""
        result.requested_broker_id = requested_id
        result.broker_id = found.broker_id
        self.update_pull_from_which_node(mq, result.suggest_which_broker_id)
        if self.on_routing_event is not None:
            event = {
                "event": "pull-route", "group": self.group, "client_id": self.client_id or None,
                "topic": mq.topic, "broker_name": mq.broker_name,
                "queue_id": mq.queue_id, "queue_offset": queue_offset, "requested_broker_id": requested_id,
                "broker_id": found.broker_id, "addr": found.addr, "commit_flag": commit,
                "status": result.status.value, "suggest_which_broker_id": result.suggest_which_broker_id,
                "next_begin_offset": result.next_begin_offset, "sent_mono_ms": sent_mono_ms}
            if tell is None:
                self.on_routing_event(event)
            else:
                tell(self.on_routing_event, event)
        return result

    async def pull_kernel(self, mq: MessageQueue, expression: str, queue_offset: int, max_nums: int, *,
                          suspend: bool, suspend_timeout_ms: int, timeout_ms: int,
                          commit_offset_value: int | None = None, commit_seq: int = 0,
                          post_subscription: bool = True,
                          sub_version: int = 0, lazy: bool = False) -> PullResult:
        """pullKernelImpl + processPullResult for one queue (`lazy`: see `api.process_pull_response`).

        Raises:
            RouteNotFoundError: the topic has no route.
            BrokerNotFoundError: no address for the queue's broker, even after a route refresh.
            TransportError / RequestTimeoutError: the pull got no answer.
            RemoteError: the broker answered with a code that is not a pull outcome.
        """
        routes = self._instance.routes
        if routes.route(mq.topic) is None:
            await routes.ensure_route(mq.topic)
        requested_id = self.recalculate_pull_from_which_node(mq)
        found = await routes.subscribe_address(mq.topic, mq.broker_name, requested_id, False)
        fields, commit = self._request(found, expression, mq, queue_offset, max_nums, suspend=suspend,
                                       suspend_timeout_ms=suspend_timeout_ms, commit_offset_value=commit_offset_value,
                                       commit_seq=commit_seq, post_subscription=post_subscription,
                                       sub_version=sub_version)
        sent_mono_ms = time.monotonic_ns() // 1_000_000  # the events' clock (CLOCK_MONOTONIC)
        result = await self._instance.api.pull(found.addr, mq, fields, timeout_ms, tags=parse_subscription(expression),
                                               lazy=lazy)
        return self._answered(mq, queue_offset, requested_id, found, commit, result, sent_mono_ms)

    def _cached_broker(self, mq: MessageQueue) -> tuple[int, FoundBroker | None]:
        """(the broker id to ask, its address) from the route cache alone; the address is None
        when the topic's route or the broker is not cached."""
        routes = self._instance.routes
        requested_id = self.recalculate_pull_from_which_node(mq)
        if routes.route(mq.topic) is None:
            return requested_id, None
        return requested_id, routes.find_broker_address_in_subscribe(mq.broker_name, requested_id, False)

    def pull_blocking(self, mq: MessageQueue, expression: str, queue_offset: int, max_nums: int, *,
                      timeout_ms: int) -> PullResult | None:
        """`pull_kernel` (no hold, no commit, records decoded on first use) in the caller's thread
        over `ClientApi.blocking_pulls`; None when the queue's route or broker address is not
        cached (the loop's path fetches them). Same answers, same errors.
        """
        requested_id, found = self._cached_broker(mq)
        if found is None:
            return None
        fields, commit = self._request(found, expression, mq, queue_offset, max_nums, suspend=False,
                                       suspend_timeout_ms=0, commit_offset_value=None, commit_seq=0,
                                       post_subscription=True, sub_version=0)
        sent_mono_ms = time.monotonic_ns() // 1_000_000  # the events' clock (CLOCK_MONOTONIC)
        response = self._instance.api.blocking_pulls.pull(found.addr, fields, timeout_ms)
        return self._answered(mq, queue_offset, requested_id, found, commit,
                              process_pull_response(response, mq, parse_subscription(expression), lazy=True),
                              sent_mono_ms, tell=self._instance.call_in_loop)

    def start_pull(self, settle: Settle, mq: MessageQueue, expression: str, queue_offset: int, max_nums: int, *,
                   suspend: bool, suspend_timeout_ms: int, timeout_ms: int, lazy: bool = False) -> None:
        """`pull_kernel` (without a commit) for a caller thread that waits (`ClientInstance.run_started`):
        begun in a loop callback and finished by `settle(result, error)` from the stream's reader,
        in the turn that read the answer, so no task or future stands between the two. When the
        queue's route or broker address is not cached it runs `pull_kernel` as a task instead
        (it fetches them); `settle` then gets that task's outcome. Same answers, same errors.
        """
        requested_id, found = self._cached_broker(mq)
        if found is None:
            task = asyncio.get_running_loop().create_task(self.pull_kernel(
                mq, expression, queue_offset, max_nums, suspend=suspend, suspend_timeout_ms=suspend_timeout_ms,
                timeout_ms=timeout_ms, lazy=lazy))
            task.add_done_callback(lambda done: _settle_from_task(settle, done))
            return
        fields, commit = self._request(found, expression, mq, queue_offset, max_nums, suspend=suspend,
                                       suspend_timeout_ms=suspend_timeout_ms, commit_offset_value=None, commit_seq=0,
                                       post_subscription=True, sub_version=0)
        tags = parse_subscription(expression)
        sent_mono_ms = time.monotonic_ns() // 1_000_000  # the events' clock (CLOCK_MONOTONIC)

        def answered(response: Any, error: BaseException | None) -> None:  # a PullResponse
            if error is not None:
                settle(None, error)
                return
            try:
                result = self._answered(mq, queue_offset, requested_id, found, commit,
                                        process_pull_response(response, mq, tags, lazy=lazy), sent_mono_ms)
            except Exception as exc:  # e.g. RemoteError: a code that is no pull outcome
                settle(None, exc)
                return
            settle(result, None)

        self._instance.api.pull_stream(found.addr).send(fields, timeout_ms, answered)


def _settle_from_task(settle: Settle, task: asyncio.Task[PullResult]) -> None:
    if task.cancelled():
        settle(None, asyncio.CancelledError())
    elif (error := task.exception()) is not None:
        settle(None, error)
    else:
        settle(task.result(), None)
