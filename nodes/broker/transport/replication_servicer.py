"""The Replication gRPC servicer: the master's side of a slave's Replicate stream, the
metadata snapshot slaves copy, and the store checks. Decode, call, encode."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc.aio

from nodes.broker.ha_master import SlaveReport
from nodes.broker.request_table import RequestKind, RequestTable
from nodes.broker.transport import convert
from nodes.common.credential import CredentialCheck
from nodes.common.grpc_adapter import answers_errors
from proto import replication_pb2, replication_pb2_grpc


async def _reports(request_iterator: AsyncIterator[replication_pb2.SlaveReport]) -> AsyncIterator[SlaveReport]:
    """The slave's reports; a broken stream ends them like a closed one."""
    try:
        async for pb in request_iterator:
            yield convert.slave_report_from_pb(pb)
    except grpc.aio.AioRpcError:
        return


class ReplicationServicer(replication_pb2_grpc.ReplicationServicer):
    """Replicate and SyncMetadata serve the whole log and the metadata and count a slave's acks:
    they need the cluster credential (when the broker has one). Digest and VerifyStore are
    read-only checks and stay open."""

    def __init__(self, table: RequestTable, credential: str = "") -> None:
        self._check = CredentialCheck(credential)
        self._replicate = table[RequestKind.REPLICATE]
        self._sync_metadata = table[RequestKind.SYNC_METADATA]
        self._digest = table[RequestKind.DIGEST]
        self._verify_store = table[RequestKind.VERIFY_STORE]

    async def Replicate(self, request_iterator: AsyncIterator[replication_pb2.SlaveReport],
                        context: grpc.aio.ServicerContext) -> AsyncIterator[replication_pb2.LogChunk]:
        await self._check.require(context, "Replicate")
        async for chunk in self._replicate(_reports(request_iterator)):
            yield convert.log_chunk_to_pb(chunk)

    @answers_errors(replication_pb2.SyncMetadataResponse, "sync metadata")
    async def SyncMetadata(self, request: replication_pb2.SyncMetadataRequest,
                           context: grpc.aio.ServicerContext) -> replication_pb2.SyncMetadataResponse:
        await self._check.require(context, "SyncMetadata")
        return convert.metadata_to_pb(self._sync_metadata())

    @answers_errors(replication_pb2.DigestResponse, "digest")
    async def Digest(self, request: replication_pb2.DigestRequest,
                     context: grpc.aio.ServicerContext) -> replication_pb2.DigestResponse:
        return convert.digest_to_pb(await self._digest(convert.digest_from_pb(request)))

    async def VerifyStore(self, request: replication_pb2.VerifyStoreRequest,
                          context: grpc.aio.ServicerContext) -> replication_pb2.VerifyStoreResponse:
        return convert.verify_to_pb(self._verify_store())
