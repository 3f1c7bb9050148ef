"""The margins a client's timers must keep inside the brokers': a client renews its orderly locks
more often than the brokers' lock lease runs out, and heartbeats more often than the brokers drop
a silent client. Time-scaling one side and not the other breaks them.

Shared by the harness (a RocketMQ client's fixed timers against a scaled cluster) and mqlab's
clients (their timers against the cluster's time scale, learned at start).
"""

from __future__ import annotations

from dataclasses import dataclass

LOCK_LEASE = "lock-lease"
CHANNEL_EXPIRY = "channel-expiry"


@dataclass(frozen=True, slots=True)
class BrokenMargin:
    kind: str  # LOCK_LEASE or CHANNEL_EXPIRY
    broker_ms: int  # the brokers' lock lease, or their silent-client expiry
    client_ms: int  # the client's lock renewal, or heartbeat, interval

    def describe(self) -> str:
        """One phrase for a client's log: the two timers and what breaks."""
        if self.kind == LOCK_LEASE:
            return (f"lock lease {self.broker_ms / 1000:g} s on the brokers vs lock renewal every "
                    f"{self.client_ms / 1000:g} s here: orderly locks will lapse between renewals")
        return (f"silent-client expiry {self.broker_ms / 1000:g} s on the brokers vs a heartbeat every "
                f"{self.client_ms / 1000:g} s here: the client will drop out of its groups between heartbeats")


def broken_margins(*, broker_lock_lease_ms: int, consumer_channel_expiry_ms: int, lock_renew_interval_ms: int,
                   client_heartbeat_ms: int) -> list[BrokenMargin]:
    """The margins the client's intervals break against the brokers' timers (a broker timer 0 or
    less is unknown and breaks nothing)."""
    broken = []
    if 0 < broker_lock_lease_ms <= lock_renew_interval_ms:
        broken.append(BrokenMargin(LOCK_LEASE, broker_lock_lease_ms, lock_renew_interval_ms))
    if 0 < consumer_channel_expiry_ms <= client_heartbeat_ms:
        broken.append(BrokenMargin(CHANNEL_EXPIRY, consumer_channel_expiry_ms, client_heartbeat_ms))
    return broken
