"""Named cluster topologies: the node sets `mqlab up --topology` and chaos runs start.

    single   namesrv-0; broker group broker-a (master broker-a-0, slave broker-a-1)
    2x2      namesrv-0, namesrv-1; broker groups broker-a and broker-b, each a master (-0)
             and a slave (-1): the smallest production-shaped cluster, where a client holds
             both name-server addresses and a topic's queues live on two groups

Every broker registers with every name server; every client is given every name server
(RocketMQ's `;`-separated namesrvAddr), so losing one name server loses no route.
"""

from __future__ import annotations

from harness.errors import SpecError
from harness.spec import DEFAULT_NODES, ClusterSpec, NodeSpec

SINGLE, TWO_BY_TWO = "single", "2x2"
DEFAULT_TOPOLOGY = SINGLE


def _group(broker_name: str, replicas: int = 2) -> tuple[NodeSpec, ...]:
    return tuple(NodeSpec(f"{broker_name}-{i}", "broker", broker_name=broker_name, broker_id=i)
                 for i in range(replicas))


TOPOLOGIES: dict[str, tuple[NodeSpec, ...]] = {
    SINGLE: DEFAULT_NODES,
    TWO_BY_TWO: (NodeSpec("namesrv-0", "namesrv"), NodeSpec("namesrv-1", "namesrv"),
                 *_group("broker-a"), *_group("broker-b")),
}


def topology_nodes(name: str) -> tuple[NodeSpec, ...]:
    try:
        return TOPOLOGIES[name]
    except KeyError:
        raise SpecError(f"no topology {name!r}; topologies are {', '.join(TOPOLOGIES)}") from None


def topology_spec(name: str = DEFAULT_TOPOLOGY, *, time_scale: float = 1.0) -> ClusterSpec:
    """The cluster spec of a named topology (no consumers; add them with `with_consumers`)."""
    return ClusterSpec(nodes=topology_nodes(name), time_scale=time_scale)


def broker_groups(spec: ClusterSpec) -> list[str]:
    """The spec's broker group names, in declaration order."""
    return list(dict.fromkeys(n.broker_name or "" for n in spec.broker_nodes()))
