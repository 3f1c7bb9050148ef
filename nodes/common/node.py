"""What every node process shares: the Admin servicer, health, and the app protocol.

A role (`namesrv`, `broker`) implements `NodeApp`; `nodes.__main__` runs it: it starts the
app, prints the READY line, waits for SIGTERM or Admin.Shutdown, and stops the app.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc.aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from nodes.common.credential import CredentialCheck
from proto import admin_pb2, admin_pb2_grpc


@dataclass
class NodeStatus:
    node_id: str
    role: str
    state: str
    status_line: str
    details: dict[str, Any] = field(default_factory=dict)


class NodeApp(Protocol):
    node_id: str
    role: str

    async def start(self) -> str:
        """Bind, recover, start services; return the bound 'host:port'."""

    async def stop(self) -> None: ...

    def status(self) -> NodeStatus: ...


class AdminServicer(admin_pb2_grpc.AdminServicer):
    """Both calls need the cluster credential (when the node has one)."""

    def __init__(self, app: NodeApp, shutdown_requested: asyncio.Event, credential: str = "") -> None:
        self._app = app
        self._shutdown_requested = shutdown_requested
        self._check = CredentialCheck(credential)

    async def Describe(self, request: admin_pb2.DescribeRequest, context: grpc.aio.ServicerContext
                       ) -> admin_pb2.DescribeResponse:
        await self._check.require(context, "Admin.Describe")
        s = self._app.status()
        return admin_pb2.DescribeResponse(node_id=s.node_id, role=s.role, state=s.state,
                                          status_line=s.status_line,
                                          details_json=json.dumps(s.details, sort_keys=True),
                                          pid=os.getpid())

    async def Shutdown(self, request: admin_pb2.ShutdownRequest, context: grpc.aio.ServicerContext
                       ) -> admin_pb2.ShutdownResponse:
        await self._check.require(context, "Admin.Shutdown")
        self._shutdown_requested.set()
        return admin_pb2.ShutdownResponse()


def add_control_plane(server: grpc.aio.Server, app: NodeApp, shutdown_requested: asyncio.Event,
                      credential: str = "") -> health.HealthServicer:
    """Admin (behind the cluster credential) + the standard health service (open); health
    turns SERVING once the app reports RUNNING."""
    admin_pb2_grpc.add_AdminServicer_to_server(AdminServicer(app, shutdown_requested, credential), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    return health_servicer


async def set_serving(health_servicer: health.HealthServicer, serving: bool) -> None:
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    await health_servicer.set("", status)


def warn_fault_switches(node_id: str, switches: Iterable[str], known: Mapping[str, str]) -> None:
    """Say loudly, once per switch at start, which correctness rule this node breaks on purpose."""
    for name in switches:
        logging.getLogger("nodes").warning("fault switch %s is ON: this node %s breaks rule: %s", name, node_id,
                                           known.get(name, "(unknown switch)"))


def crash_node(exc: BaseException) -> None:
    """A broken invariant of our own: log loudly and exit 70 without cleaning up.

    The abort file stays on disk on purpose, so the next start runs crash recovery.
    """
    import logging
    import sys

    from nodes.common.constants import EXIT_CRASH

    logging.getLogger("nodes").critical("crashing with exit %d: %r", EXIT_CRASH, exc, exc_info=exc)
    logging.shutdown()
    print(f"node crashed: {exc!r}; see node.log", file=sys.stderr, flush=True)
    os._exit(EXIT_CRASH)
