"""ConsumerState: what one push consumer subscribes to, which queues it owns, and whether it may consume them.

Like aiokafka's SubscriptionState, the one object that knows the subscriptions (RocketMQ's
subscriptionInner, CLUSTERING adds `%RETRY%<group>`), the queue table (message queue ->
ProcessQueue, RocketMQ's processQueueTable) and the orderly lock-validity rule. Rebalance
changes the table; the pull service, the consume services, the lock service and the facade
ask it and keep no copies. Does no I/O. Loop-confined (the client instance's loop).

The lock-validity rule (`lock_valid`): BROADCASTING needs no lock; otherwise a queue's lock is
valid while it is `locked` and its believed lease (`client_lock_lease_ms` from the lock
request's send time) has not run out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from nodes.client.process_queue import ProcessQueue
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.types import MessageModel, MessageQueue

SUBSCRIBE_ALL = "*"


def retry_topic(group: str) -> str:
    """`%RETRY%<group>`: where a CLUSTERING group's sent-back messages come back from."""
    return c.RETRY_GROUP_TOPIC_PREFIX + group


@dataclass(slots=True)
class SubscriptionData:
    """One topic of the consumer's subscription (RocketMQ SubscriptionData, tag mode only)."""

    topic: str
    expression: str = SUBSCRIBE_ALL
    sub_version: int = 0


class ConsumerState:
    """Subscriptions, owned queues and lock validity of one push consumer.

    Args:
        group: the consumer group.
        message_model: CLUSTERING (locks and the retry topic) or BROADCASTING.
        clock: sub versions (wall ms) and lock leases (monotonic ms).
        client_lock_lease_ms: how long a granted queue lock is trusted.
        orderly: an orderly consumer: in CLUSTERING only queues with a valid lock have their
            offsets persisted.
    """

    def __init__(self, *, group: str, message_model: MessageModel, clock: Clock, client_lock_lease_ms: int,
                 orderly: bool = False) -> None:
        self.group = group
        self.message_model = message_model
        self.clock = clock
        self.client_lock_lease_ms = client_lock_lease_ms
        self.orderly = orderly
        self.subscriptions: dict[str, SubscriptionData] = {}
        self.process_queue_table: dict[MessageQueue, ProcessQueue] = {}

    # --- subscriptions ---------------------------------------------------------------------
    def subscribe(self, topic: str, expression: str) -> None:
        self.subscriptions[topic] = SubscriptionData(topic, expression or SUBSCRIBE_ALL, self.clock.wall_ms())

    def copy_subscription(self, user_subscriptions: Mapping[str, str]) -> None:
        """The user's topics, plus `%RETRY%<group>` with `*` in CLUSTERING (copySubscription)."""
        for topic, expression in user_subscriptions.items():
            self.subscribe(topic, expression)
        if self.message_model is MessageModel.CLUSTERING:
            self.subscribe(retry_topic(self.group), SUBSCRIBE_ALL)

    def topics(self) -> list[str]:
        """The subscribed topics, the retry topic included."""
        return list(self.subscriptions)

    def renew_sub_version(self, topic: str) -> None:
        """messageQueueChanged: a new sub version, so the brokers take the next heartbeat's copy."""
        subscription = self.subscriptions.get(topic)
        if subscription is not None:
            subscription.sub_version = self.clock.wall_ms()

    # --- the queue table -------------------------------------------------------------------
    def owned_queues(self) -> list[MessageQueue]:
        """The queues held now (not dropped), sorted."""
        return sorted(mq for mq, pq in self.process_queue_table.items() if not pq.dropped)

    def queues_of(self, topic: str) -> list[MessageQueue]:
        """The table's queues of `topic` (dropped ones still in it included), sorted."""
        return sorted(mq for mq in self.process_queue_table if mq.topic == topic)

    # --- locks -----------------------------------------------------------------------------
    def lock_valid(self, pq: ProcessQueue, now_ms: int | None = None) -> bool:
        """Whether `pq` may be consumed under its lock: always in BROADCASTING; otherwise locked
        and its believed lease not run out."""
        if self.message_model is MessageModel.BROADCASTING:
            return True
        if not pq.locked:
            return False
        if now_ms is None:
            now_ms = self.clock.monotonic_ms()
        return now_ms - pq.last_lock_timestamp_ms <= self.client_lock_lease_ms

    def queues_to_persist(self) -> list[MessageQueue]:
        """persistAllConsumerOffset's queues: every owned one; beyond RocketMQ, an orderly consumer
        leaves out queues whose lock is not valid (a resumed consumer must not rewind the offset
        another consumer is moving meanwhile)."""
        if not self.orderly:
            return list(self.process_queue_table)
        now_ms = self.clock.monotonic_ms()
        return [mq for mq, pq in self.process_queue_table.items() if self.lock_valid(pq, now_ms)]

    def may_commit(self, mq: MessageQueue) -> bool:
        """Whether this consumer may send `mq`'s offset to a broker now (persist or piggy-back).

        Beyond RocketMQ: an orderly consumer commits only a queue whose lock is valid at this
        moment, on the clock read now. A consumer resumed from a long pause has overdue timers
        that fire before the lock service learns the lock is gone; a check made before an await
        (a route lookup, a start-offset query) may be stale by the length of the pause. Once the
        lock is valid again the queue commits again. A queue not in the table is not this
        check's business (the store forgets it)."""
        if not self.orderly:
            return True
        pq = self.process_queue_table.get(mq)
        return pq is None or self.lock_valid(pq)
