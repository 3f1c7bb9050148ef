"""Starts and observes mqlab clusters: specs, ports, node processes, LocalCluster, the CLI.

Never imports the insides of nodes (store, broker, namesrv); it talks to them through
their processes, their config files and gRPC.
"""

from harness.cluster import LocalCluster
from harness.errors import HarnessError, NodeStartError, SpecError
from harness.exits import UnexpectedExit
from harness.process import NodeProcess, NodeState
from harness.spec import ClusterSpec, NodeSpec
from harness.waiting import WaitTimeout, wait_until

__all__ = [
    "ClusterSpec",
    "HarnessError",
    "LocalCluster",
    "NodeProcess",
    "NodeSpec",
    "NodeStartError",
    "NodeState",
    "SpecError",
    "UnexpectedExit",
    "WaitTimeout",
    "wait_until",
]
