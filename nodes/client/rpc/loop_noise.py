"""The client's event loops drop grpc.aio's poller noise (see `nodes.common.rpc.ignore_grpc_poller_noise`):
the one piece of that gRPC plumbing the client outside this package needs."""

from __future__ import annotations

import asyncio

from nodes.common.rpc import ignore_grpc_poller_noise


def quiet_grpc_poller_noise(loop: asyncio.AbstractEventLoop) -> None:
    loop.set_exception_handler(ignore_grpc_poller_noise)
