"""A client's timers against the cluster's time scale, learned from the name server at start.

The time scale is a cluster fact (the name server answers it in GetClusterInfo): a client built
with no `timing` takes the cluster's, RocketMQ's timers times the scale, so its lock renewals and
heartbeats keep inside the brokers' lease and silent-client expiry however fast the cluster's
clock runs (its start waits for the answer). A client given its own `timing` keeps it, and one
whose timers break a margin against the cluster's (nodes.common.timing_margins) logs one warning
saying which (asked in the background: its start does not wait). A name server that
does not answer leaves the timing as it is, with a warning (the client starts all the same).
"""

from __future__ import annotations

import logging

from nodes.client.rpc.api import ClientApi
from nodes.common.config import Timing
from nodes.common.errors import ConfigError, MqError
from nodes.common.timing_margins import broken_margins

log = logging.getLogger(__name__)


async def cluster_time_scale(api: ClientApi, namesrv_addrs: list[str], timeout_ms: int) -> float | None:
    """The first answering name server's time scale; None when none answered."""
    for addr in namesrv_addrs:
        try:
            return await api.cluster_time_scale(addr, timeout_ms)
        except MqError as err:
            log.info("time scale from %s: %s", addr, err)
    return None


def timing_for_cluster(name: str, timing: Timing, *, given: bool, scale: float | None) -> Timing:
    """The timing the client runs with: the cluster's when none was given, else the given one
    (warned about when it breaks a margin against the cluster's)."""
    if scale is None:
        log.warning("%s: no name server told the cluster's time scale; the client keeps %s timers", name,
                    "its given" if given else "RocketMQ's unscaled")
        return timing
    try:
        cluster = Timing().scaled(scale) if scale != 1 else Timing()
    except ConfigError as err:
        log.warning("%s: the cluster's time scale %g cannot scale a client's timers (%s); keeping them", name,
                    scale, err)
        return timing
    if not given:
        if scale != 1:
            log.info("%s: timers at the cluster's time scale %g (lock renewal every %d ms, heartbeat every %d ms)",
                     name, scale, cluster.lock_renew_interval_ms, cluster.client_heartbeat_ms)
        return cluster
    broken = broken_margins(broker_lock_lease_ms=cluster.broker_lock_lease_ms,
                            consumer_channel_expiry_ms=cluster.consumer_channel_expiry_ms,
                            lock_renew_interval_ms=timing.lock_renew_interval_ms,
                            client_heartbeat_ms=timing.client_heartbeat_ms)
    if broken:
        log.warning("%s: the cluster runs at time scale %g and this client's timing does not: %s (build the "
                    "client without `timing` to take the cluster's)", name, scale,
                    "; ".join(m.describe() for m in broken))
    return timing
