"""Topic configs and subscription groups a broker holds (RocketMQ TopicConfigManager and
SubscriptionGroupManager), kept in memory and persisted through the store's metadata.

Owns: which topics and groups exist here, their auto-creation rules and the data version
the name server uses to notice changes. Does not own queue contents (the store does).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from nodes.common import constants as c
from nodes.common.errors import InvalidMessageError, StoreError
from nodes.common.types import TopicConfig, validate_topic

log = logging.getLogger(__name__)

TOPICS_TABLE = "topics"
GROUPS_TABLE = "subscription_groups"


class MetadataTable:
    """The slice of the store's metadata API these managers use (an LMDB sub-DB)."""

    def get_all(self, table: str) -> dict[str, Any]: ...
    def put(self, table: str, key: str, value: Any) -> None: ...
    def delete(self, table: str, key: str) -> None: ...


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = c.GROUP_RETRY_QUEUE_NUMS
    retry_max_times: int = c.GROUP_RETRY_MAX_TIMES
    broker_id: int = c.MASTER_ID
    which_broker_when_consume_slowly: int = c.GROUP_WHICH_BROKER_WHEN_CONSUME_SLOWLY
    notify_consumer_ids_changed_enable: bool = True
    # consumeMessageOrderly: the group pops FIFO (one unacked batch per queue at a time, redelivered in place)
    consume_message_orderly: bool = False


class TopicConfigManager:
    def __init__(self, metadata: MetadataTable, *, auto_create_enable: bool,
                 default_queue_nums: int, now_ms: int) -> None:
        self._metadata = metadata
        self.auto_create_enable = auto_create_enable
        self._default_queue_nums = default_queue_nums
        self.topics: dict[str, TopicConfig] = {
            name: TopicConfig(**value) for name, value in metadata.get_all(TOPICS_TABLE).items()}
        self.data_version = (now_ms, 0)
        if auto_create_enable and c.AUTO_CREATE_TOPIC_KEY not in self.topics:
            # RocketMQ registers the template topic so producers can find auto-creating brokers;
            # INHERIT marks it as a template, not a topic to consume.
            self.put(TopicConfig(c.AUTO_CREATE_TOPIC_KEY, default_queue_nums, default_queue_nums,
                                 c.PERM_DEFAULT | c.PERM_INHERIT), now_ms)
        elif not auto_create_enable and c.AUTO_CREATE_TOPIC_KEY in self.topics:
            self.remove(c.AUTO_CREATE_TOPIC_KEY, now_ms)

    def get(self, topic: str) -> TopicConfig | None:
        return self.topics.get(topic)

    def put(self, config: TopicConfig, now_ms: int) -> None:
        self.topics[config.topic] = config
        self._metadata.put(TOPICS_TABLE, config.topic, dataclasses.asdict(config))
        self._bump(now_ms)

    def remove(self, topic: str, now_ms: int) -> None:
        self.topics.pop(topic, None)
        self._metadata.delete(TOPICS_TABLE, topic)
        self._bump(now_ms)

    def _bump(self, now_ms: int) -> None:
        self.data_version = (now_ms, self.data_version[1] + 1)

    def create_in_send(self, topic: str, client_default_queue_nums: int, now_ms: int) -> TopicConfig | None:
        """RocketMQ createTopicInSendMessageMethod: None when auto-creation is off."""
        if not self.auto_create_enable:
            return None
        validate_topic(topic)
        if topic == c.AUTO_CREATE_TOPIC_KEY:
            raise InvalidMessageError(f"{topic} is the auto-create template, not a topic")
        asked = client_default_queue_nums if client_default_queue_nums > 0 else c.PRODUCER_DEFAULT_TOPIC_QUEUE_NUMS
        queue_nums = max(1, min(asked, self._default_queue_nums))
        config = TopicConfig(topic, queue_nums, queue_nums, c.PERM_DEFAULT)
        self.put(config, now_ms)
        log.info("auto-created topic %s with %d queues", topic, queue_nums)
        return config

    def all(self) -> list[TopicConfig]:
        return list(self.topics.values())

    def replace_all(self, configs: list[TopicConfig], data_version: tuple[int, int]) -> bool:
        """A slave takes the master's whole table when its data version differs."""
        if data_version == self.data_version:
            return False
        incoming = {cfg.topic: cfg for cfg in configs}
        for topic in set(self.topics) - set(incoming):
            self._metadata.delete(TOPICS_TABLE, topic)
        for cfg in incoming.values():
            if self.topics.get(cfg.topic) != cfg:
                self._metadata.put(TOPICS_TABLE, cfg.topic, dataclasses.asdict(cfg))
        self.topics = incoming
        self.data_version = data_version
        return True


class SubscriptionGroupManager:
    def __init__(self, metadata: MetadataTable, *, auto_create_enable: bool) -> None:
        self._metadata = metadata
        self.auto_create_enable = auto_create_enable
        self.groups: dict[str, SubscriptionGroupConfig] = {
            name: SubscriptionGroupConfig(**value) for name, value in metadata.get_all(GROUPS_TABLE).items()}
        self._unwritten: set[str] = set()  # auto-created groups a full disk kept from being written

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group config, auto-created when the broker allows it (the default).

        An auto-created group is used at once even when it cannot be written yet (a full disk):
        a consumer's pulls must go on while writes are refused, as RocketMQ's in-memory table
        does; the write is tried again at the group's next lookup."""
        config = self.groups.get(group)
        if config is None and self.auto_create_enable and group:
            config = SubscriptionGroupConfig(group)
            self.groups[group] = config
            self._unwritten.add(group)
            log.info("auto-created subscription group %s", group)
        if config is not None and group in self._unwritten:
            try:
                self._metadata.put(GROUPS_TABLE, group, dataclasses.asdict(config))
                self._unwritten.discard(group)
            except StoreError as exc:
                log.warning("subscription group %s is in use but not written yet: %s", group, exc)
        return config

    def put(self, config: SubscriptionGroupConfig) -> None:
        self.groups[config.group_name] = config
        self._metadata.put(GROUPS_TABLE, config.group_name, dataclasses.asdict(config))

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return {name: dataclasses.asdict(cfg) for name, cfg in self.groups.items()}

    def replace_all(self, groups: dict[str, dict[str, Any]]) -> None:
        """A slave takes the master's groups (SlaveSynchronize#syncSubscriptionGroupConfig)."""
        for name, value in groups.items():
            config = SubscriptionGroupConfig(**value)
            if self.groups.get(name) != config:
                self.put(config)
