"""A client's timing against the cluster's time scale (cluster_timing) and the margins behind its warning."""

from __future__ import annotations

import logging

from nodes.client.cluster_timing import timing_for_cluster
from nodes.common.config import Timing
from nodes.common.timing_margins import CHANNEL_EXPIRY, LOCK_LEASE, broken_margins


def test_no_timing_given_takes_the_clusters_and_a_given_one_is_kept(caplog):
    caplog.set_level(logging.INFO, logger="nodes.client.cluster_timing")
    assert timing_for_cluster("c", Timing(), given=False, scale=0.1) == Timing().scaled(0.1)
    assert timing_for_cluster("c", Timing(), given=False, scale=1.0) == Timing()
    assert timing_for_cluster("c", Timing(), given=False, scale=None) == Timing()  # no name server answered
    own = Timing().scaled(0.5)
    assert timing_for_cluster("c", own, given=True, scale=0.1) == own


def test_a_given_timing_warns_only_when_it_breaks_a_margin(caplog):
    caplog.set_level(logging.WARNING, logger="nodes.client.cluster_timing")
    timing_for_cluster("faster", Timing().scaled(0.01), given=True, scale=0.1)  # renews and beats more often: fine
    assert not caplog.records
    timing_for_cluster("slower", Timing(), given=True, scale=0.1)
    [warning] = caplog.records
    assert "lock lease 6 s on the brokers vs lock renewal every 20 s here: orderly locks will lapse" in \
        warning.getMessage()
    assert "silent-client expiry 12 s on the brokers vs a heartbeat every 30 s here" in warning.getMessage()


def test_broken_margins_name_each_timer_pair():
    assert broken_margins(broker_lock_lease_ms=60_000, consumer_channel_expiry_ms=120_000,
                          lock_renew_interval_ms=20_000, client_heartbeat_ms=30_000) == []
    broken = broken_margins(broker_lock_lease_ms=20_000, consumer_channel_expiry_ms=0,
                            lock_renew_interval_ms=20_000, client_heartbeat_ms=30_000)
    assert [(m.kind, m.broker_ms, m.client_ms) for m in broken] == [(LOCK_LEASE, 20_000, 20_000)]
    assert [m.kind for m in broken_margins(broker_lock_lease_ms=1, consumer_channel_expiry_ms=1,
                                           lock_renew_interval_ms=2, client_heartbeat_ms=2)] == \
        [LOCK_LEASE, CHANNEL_EXPIRY]
