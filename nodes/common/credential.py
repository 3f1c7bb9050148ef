"""The cluster credential: a shared secret that the control plane's gRPC calls carry as metadata.

The harness generates one secret per cluster and writes it into every node's config file
(`cluster_credential`); it is never on a command line, in cluster.json, in a log or in
Admin.Describe. Calls that change who serves what require it: `Admin` (Describe, Shutdown),
the name server's `RegisterBroker`, `UnregisterBroker` and `WatchChannel`, and the
replication master's `Replicate` and `SyncMetadata`. Brokers send it to the name servers, a
slave to its master, the harness's AdminClient to every node. The data plane (sends, pulls,
offsets, heartbeats, routes) stays open, as RocketMQ's is without ACL.

A node started without a credential (an empty field, e.g. a config a test builds by hand)
checks nothing: it serves the control plane to anyone, as before. `mqlab up` and
`LocalCluster` always set one.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

import grpc

from nodes.common.reject_log import RejectLog

METADATA_KEY = "mqlab-cluster-credential"

log = logging.getLogger(__name__)


def call_metadata(credential: str) -> tuple[tuple[str, str], ...] | None:
    """The metadata a control-plane call carries (None when the cluster has no credential)."""
    return ((METADATA_KEY, credential),) if credential else None


class CredentialCheck:
    """The server side: compares a call's credential with the node's in constant time."""

    def __init__(self, credential: str) -> None:
        self._expected = credential.encode()
        self._rejects = RejectLog(log)

    @property
    def enabled(self) -> bool:
        return bool(self._expected)

    def allows(self, context: Any) -> bool:
        if not self._expected:
            return True
        for key, value in context.invocation_metadata() or ():
            if key == METADATA_KEY:
                given = value.encode() if isinstance(value, str) else bytes(value)
                return hmac.compare_digest(given, self._expected)
        return False

    async def require(self, context: Any, what: str) -> None:
        """Abort the call with UNAUTHENTICATED unless it carries the credential (one log line,
        rate-limited per peer)."""
        if self.allows(context):
            return
        self._rejects.reject(context.peer() or "", what, "no or a wrong cluster credential")
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, f"{what} needs the cluster credential")
