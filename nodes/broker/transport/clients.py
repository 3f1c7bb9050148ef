"""The broker's outbound gRPC: to the name servers (registration and channel), and from a
slave to its master (the Replicate stream and the metadata snapshot). gRPC failures become
MqError here (nodes.common.rpc.map_rpc_error); the decisions stay with the callers
(registrar, ha_slave, slave_sync)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterator

import grpc

from nodes.broker.ha_master import LogChunk, SlaveReport
from nodes.broker.registrar import BrokerIdentity, BrokerRegistration, RegisterResult
from nodes.broker.slave_sync import MetadataSnapshot
from nodes.broker.transport import convert
from nodes.common.config import BrokerConfig
from nodes.common.credential import call_metadata
from nodes.common.rpc import make_channel, map_rpc_error, timeout_s
from proto import namesrv_pb2_grpc, replication_pb2, replication_pb2_grpc


@contextlib.contextmanager
def _mapped_errors(what: str) -> Iterator[None]:
    """Raise a gRPC failure of the request `what` as our MqError."""
    try:
        yield
    except grpc.RpcError as exc:
        raise map_rpc_error(exc, what) from exc


class GrpcNamesrvApi:
    """One name server over one gRPC channel (registrations and the watched channel share it,
    so they share its connection and its link proxy)."""

    def __init__(self, addr: str, config: BrokerConfig) -> None:
        self.addr = addr
        self._stub = namesrv_pb2_grpc.NameServerStub(make_channel(addr, config.dial_overrides))
        self._metadata = call_metadata(config.cluster_credential)

    async def register(self, registration: BrokerRegistration, timeout_ms: int) -> RegisterResult:
        with _mapped_errors("register with name server"):
            answer = await self._stub.RegisterBroker(convert.registration_to_pb(registration),
                                                     timeout=timeout_s(timeout_ms), metadata=self._metadata)
        return convert.register_result_from_pb(answer)

    async def watch_channel(self, broker: BrokerIdentity, channel_token: str) -> AsyncGenerator[bool, None]:
        call = self._stub.WatchChannel(convert.watch_channel_to_pb(broker, channel_token), metadata=self._metadata)
        try:
            with _mapped_errors("name server channel"):
                async for event in call:
                    yield event.registered
        finally:
            call.cancel()

    async def unregister(self, broker: BrokerIdentity, timeout_ms: int) -> None:
        with _mapped_errors("unregister"):
            await self._stub.UnregisterBroker(convert.unregister_broker_to_pb(broker), timeout=timeout_s(timeout_ms),
                                              metadata=self._metadata)


class GrpcMasterLink:
    """A slave's requests to its master, each on a fresh channel to the address asked for."""

    def __init__(self, config: BrokerConfig) -> None:
        self._config = config
        self._metadata = call_metadata(config.cluster_credential)

    async def replicate(self, addr: str, reports: AsyncIterator[SlaveReport]) -> AsyncGenerator[LogChunk, None]:
        async def outgoing() -> AsyncIterator[replication_pb2.SlaveReport]:
            async for report in reports:
                yield convert.slave_report_to_pb(report)

        channel = make_channel(addr, self._config.dial_overrides)
        try:
            with _mapped_errors(f"replicate from {addr}"):
                async for chunk in replication_pb2_grpc.ReplicationStub(channel).Replicate(outgoing(), metadata=self._metadata):
                    yield convert.log_chunk_from_pb(chunk)
        finally:
            await channel.close()

    async def fetch_metadata(self, addr: str) -> MetadataSnapshot:
        channel = make_channel(addr, self._config.dial_overrides)
        try:
            with _mapped_errors(f"sync metadata from {addr}"):
                answer = await replication_pb2_grpc.ReplicationStub(channel).SyncMetadata(
                    replication_pb2.SyncMetadataRequest(), timeout=timeout_s(self._config.timing.rpc_timeout_ms),
                    metadata=self._metadata)
        finally:
            await channel.close()
        return convert.metadata_from_pb(answer)
