"""Master -> slave metadata copies (RocketMQ SlaveSynchronize) and the Replication servicer.

The slave copies, every `slave_sync_interval_ms` while it knows its master: topic configs
(whole table when the data version differs), consumer offsets (the master's table
overwrites, so offsets committed to the slave during a master outage roll back when the
master returns — RocketMQ's behaviour, apache/rocketmq#2513), delay offsets, subscription
groups. There is no slave -> master path.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio

from nodes.broker.ha_master import ReplicationMaster
from nodes.broker.offsets import ConsumerOffsetTable
from nodes.broker.topics import SubscriptionGroupManager, TopicConfigManager
from nodes.common import wire
from nodes.common.config import BrokerConfig
from nodes.common.rpc import make_channel, map_rpc_error, timeout_s
from nodes.common.service import Service
from nodes.store.message_store import MessageStore
from nodes.store.verify import verify_consume_queues
from proto import common_pb2, replication_pb2, replication_pb2_grpc

log = logging.getLogger(__name__)

DELAY_OFFSETS_TABLE = "delay_offsets"
_DIGEST_READ_BYTES = 1024 * 1024


class ReplicationServicer(replication_pb2_grpc.ReplicationServicer):
    def __init__(self, *, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, offsets: ConsumerOffsetTable,
                 master: ReplicationMaster | None) -> None:
        self._config = config
        self._store = store
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._master = master

    async def Replicate(self, request_iterator: AsyncIterator[replication_pb2.SlaveReport],
                        context: grpc.aio.ServicerContext) -> AsyncIterator[replication_pb2.LogChunk]:
        if self._master is None:
            yield replication_pb2.LogChunk(refusal=replication_pb2.NOT_MASTER,
                                           remark=f"{self._config.node_id} is not a master")
            return
        async for chunk in self._master.serve(request_iterator, context):
            yield chunk

    async def SyncMetadata(self, request: replication_pb2.SyncMetadataRequest,
                           context: grpc.aio.ServicerContext) -> replication_pb2.SyncMetadataResponse:
        version = self._topics.data_version
        return replication_pb2.SyncMetadataResponse(
            code=common_pb2.SUCCESS,
            topic_configs=[wire.topic_config_to_pb(t) for t in self._topics.all()],
            topics_data_version=f"{version[0]}:{version[1]}",
            consumer_offsets_json=json.dumps(self._offsets.snapshot()),
            subscription_groups_json=json.dumps(self._groups.snapshot()),
            delay_offsets_json=json.dumps(self._store.metadata.get_all(DELAY_OFFSETS_TABLE)))

    async def Digest(self, request: replication_pb2.DigestRequest,
                     context: grpc.aio.ServicerContext) -> replication_pb2.DigestResponse:
        start = max(request.from_phys_offset, self._store.min_phys_offset)
        end = request.to_phys_offset or self._store.max_phys_offset
        if end > self._store.max_phys_offset or start > end:
            return replication_pb2.DigestResponse(
                code=common_pb2.INVALID_ARGUMENT,
                remark=f"range [{start}, {end}) is outside this commitlog [{self._store.min_phys_offset}, "
                       f"{self._store.max_phys_offset})")
        digest = hashlib.sha256()
        position = start
        while position < end:
            data = self._store.read_commitlog(position, min(_DIGEST_READ_BYTES, end - position))
            if not data:
                break
            digest.update(data)
            position += len(data)
            await asyncio.sleep(0)  # a long digest must not starve the node's other work
        return replication_pb2.DigestResponse(code=common_pb2.SUCCESS, from_phys_offset=start,
                                              to_phys_offset=position, sha256=digest.hexdigest())

    async def VerifyStore(self, request: replication_pb2.VerifyStoreRequest,
                          context: grpc.aio.ServicerContext) -> replication_pb2.VerifyStoreResponse:
        report = verify_consume_queues(self._store)
        return replication_pb2.VerifyStoreResponse(units_checked=report.units_checked,
                                                   invalid_units=report.invalid_units,
                                                   examples=report.examples[:20])


class SlaveSyncService(Service):
    """SlaveSynchronize#syncAll on a timer, while the master's address is known."""

    name = "slave-sync"

    def __init__(self, *, config: BrokerConfig, store: MessageStore, topics: TopicConfigManager,
                 groups: SubscriptionGroupManager, offsets: ConsumerOffsetTable, master_addr: Callable[[], str],
                 on_crash: Callable[[BaseException], None]) -> None:
        super().__init__(config.timing.slave_sync_interval_ms, on_crash=on_crash,
                         initial_delay_ms=config.timing.slave_sync_first_ms)
        self._config = config
        self._store = store
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._master_addr = master_addr
        self.syncs = 0
        self.last_synced_from = ""

    async def tick(self) -> None:
        addr = self._config.ha_master_addr or self._master_addr()
        if not addr:
            return
        channel = make_channel(addr, self._config.dial_overrides)
        try:
            resp = await replication_pb2_grpc.ReplicationStub(channel).SyncMetadata(
                replication_pb2.SyncMetadataRequest(), timeout=timeout_s(self._config.timing.rpc_timeout_ms))
        except grpc.RpcError as exc:
            raise map_rpc_error(exc, f"sync metadata from {addr}") from exc
        finally:
            await channel.close()
        self.apply(resp)
        self.syncs += 1
        self.last_synced_from = addr

    def apply(self, resp: replication_pb2.SyncMetadataResponse) -> None:
        millis, _, counter = resp.topics_data_version.partition(":")
        version = (int(millis or 0), int(counter or 0))
        if self._topics.replace_all([wire.topic_config_from_pb(t) for t in resp.topic_configs], version):
            log.info("slave took the master's topic table (version %s)", version)
        self._offsets.put_all(json.loads(resp.consumer_offsets_json or "{}"))
        self._groups.replace_all(json.loads(resp.subscription_groups_json or "{}"))
        delay_offsets: dict[str, Any] = json.loads(resp.delay_offsets_json or "{}")
        if delay_offsets:
            self._store.metadata.replace_all(DELAY_OFFSETS_TABLE, delay_offsets)
