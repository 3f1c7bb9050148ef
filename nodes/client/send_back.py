"""Sending a failed message back: the broker's retry path, or the internal producer's.

Owns RocketMQ's `DefaultMQPushConsumerImpl#sendMessageBack`: ConsumerSendMsgBack
to the master of the message's broker (the broker re-reads the original by commitlog offset,
re-queues it on `%RETRY%<group>` with the next delay level, or dead-letters it); if that
fails, a copy sent to `%RETRY%<group>` by an internal producer (`retry_message`), which
dead-letters one attempt earlier (RECONSUME_TIME = times + 1). Does not
decide *which* messages go back (the consume service does).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nodes.client.consume_orderly import orderly_send_back_message
from nodes.client.consumer_state import retry_topic
from nodes.client.producer import Producer
from nodes.common import constants as c
from nodes.common.errors import BrokerNotFoundError, MqError
from nodes.common.types import Message, MessageExt

if TYPE_CHECKING:
    from nodes.client.instance import ClientInstance

log = logging.getLogger(__name__)

PROPERTY_TRANSACTION_PREPARED = "TRAN_MSG"  # MessageConst: cleared on a fallback send-back


def retry_message(msg: MessageExt, group: str, max_reconsume_times: int) -> Message:
    """The copy the send-back fallback sends to `%RETRY%<group>`.

    Same body, flag and properties, plus ORIGIN_MESSAGE_ID (kept if set), RETRY_TOPIC,
    RECONSUME_TIME = reconsume_times + 1, MAX_RECONSUME_TIMES, and delay level 3 + reconsume_times.
    """
    props = dict(msg.properties)
    if not props.get(c.PROPERTY_ORIGIN_MESSAGE_ID):
        props[c.PROPERTY_ORIGIN_MESSAGE_ID] = msg.msg_id
    props[c.PROPERTY_RETRY_TOPIC] = msg.topic
    props[c.PROPERTY_RECONSUME_TIME] = str(msg.reconsume_times + 1)
    props[c.PROPERTY_MAX_RECONSUME_TIMES] = str(max_reconsume_times)
    props.pop(PROPERTY_TRANSACTION_PREPARED, None)
    props[c.PROPERTY_DELAY] = str(c.RETRY_DELAY_LEVEL_BASE + msg.reconsume_times)
    return Message(retry_topic(group), bytes(msg.body), properties=props, flag=msg.flag)


class MessageSender:
    """`send_back(msg, delay_level, broker_name) -> bool` for one consumer group. Loop-confined.

    The internal producer (group CLIENT_INNER_PRODUCER) is started on first use; `close()`
    shuts it down (call it off the loop: the producer has its own loop thread).
    """

    def __init__(self, instance: ClientInstance, group: str, *, max_reconsume_times: int,
                 on_event: Callable[[dict[str, Any]], None] | None = None) -> None:
        self._instance = instance
        self.group = group
        self.max_reconsume_times = max_reconsume_times
        self._on_event = on_event
        self._producer: Producer | None = None
        self._producer_lock = asyncio.Lock()

    async def send_back(self, msg: MessageExt, delay_level: int, broker_name: str) -> bool:
        """Re-queue `msg` for a later retry; False only when the broker and the producer both fail."""
        addr = self._instance.routes.find_broker_address_in_publish(broker_name) if broker_name else None
        try:
            if addr is None:
                raise BrokerNotFoundError(f"broker {broker_name} has no master in the route")
            await self._instance.api.send_back(addr, self.group, msg, delay_level=delay_level,
                                               max_reconsume_times=self.max_reconsume_times,
                                               timeout_ms=c.CONSUMER_SEND_BACK_TIMEOUT_MS)
        except MqError as err:
            log.warning("send back of %s via %s failed (%s); sending it to %s with the internal producer",
                        msg.msg_id, broker_name, err, retry_topic(self.group))
        else:
            self._emit(msg, "broker", True, addr=addr, delay_level=delay_level)
            return True
        try:
            producer = await self._inner_producer()
            await asyncio.to_thread(producer.send, retry_message(msg, self.group, self.max_reconsume_times))
        except MqError as err:
            log.warning("send back of %s by the internal producer failed too: %s", msg.msg_id, err)
            self._emit(msg, "producer", False, error=str(err))
            return False
        self._emit(msg, "producer", True)
        return True

    async def dead_letter_orderly(self, msg: MessageExt) -> bool:
        """Orderly sendMessageBack: the internal producer sends the message to `%RETRY%<group>` at its
        limit, and the broker dead-letters it. False if the send failed."""
        copy = orderly_send_back_message(msg, self.group, self.max_reconsume_times)
        try:
            producer = await self._inner_producer()
            await asyncio.to_thread(producer.send, copy)
        except MqError as err:
            log.warning("dead-lettering %s of %s failed: %s", msg.msg_id, self.group, err)
            self._emit(msg, "producer", False, orderly=True, error=str(err))
            return False
        self._emit(msg, "producer", True, orderly=True)
        return True

    async def _inner_producer(self) -> Producer:
        async with self._producer_lock:
            if self._producer is None:
                producer = Producer(";".join(self._instance.namesrv_addrs), c.CLIENT_INNER_PRODUCER_GROUP,
                                    timing=self._instance.timing, dial_overrides=self._instance.dial_overrides)
                await asyncio.to_thread(producer.start)
                self._producer = producer
            return self._producer

    def close(self) -> None:
        if self._producer is not None:
            self._producer.shutdown()
            self._producer = None

    def _emit(self, msg: MessageExt, via: str, ok: bool, **extra: Any) -> None:
        if self._on_event is not None:
            self._on_event({"event": "send-back", "group": self.group, "msg_id": msg.msg_id, "via": via,
                            "reconsume_times": msg.reconsume_times, "ok": ok, **extra})
