"""The checks, in report order: name -> (definition, function(history, config) -> CheckResult)."""

from __future__ import annotations

from collections.abc import Callable

from chaos.checker.checks.availability import AVAILABILITY, check_availability
from chaos.checker.checks.content import INTEGRITY, REPLICATION, check_integrity, check_replication
from chaos.checker.checks.deaths import DEATHS, check_deaths
from chaos.checker.checks.disk import DISK_FULL, check_disk_full
from chaos.checker.checks.locks import LOCK, check_lock_exclusivity
from chaos.checker.checks.offsets import RESYNC, check_offset_resync
from chaos.checker.checks.order import ORDER, check_order
from chaos.checker.checks.pop import (
    POP_ACK,
    POP_FIFO,
    POP_REDELIVERY,
    check_pop_ack,
    check_pop_fifo,
    check_pop_redelivery,
)
from chaos.checker.checks.queue import (
    DUPLICATES,
    LOST,
    UNEXPECTED,
    check_duplicates,
    check_lost,
    check_unexpected,
)
from chaos.checker.checks.rebalance import REBALANCE, check_rebalance
from chaos.checker.checks.requests import REQUESTS, check_requests
from chaos.checker.checks.routing import ROUTING, check_read_routing
from chaos.checker.checks.store import DURABILITY, STORE_HEALTH, check_durability, check_store_health
from chaos.checker.checks.takeover import TAKEOVER, check_takeover
from chaos.checker.config import CheckerConfig
from chaos.checker.loader import History
from chaos.checker.verdict import CheckResult

CheckFn = Callable[[History, CheckerConfig], CheckResult]

CHECKS: dict[str, tuple[str, CheckFn]] = {
    "lost": (LOST, check_lost),
    "unexpected": (UNEXPECTED, check_unexpected),
    "duplicates": (DUPLICATES, check_duplicates),
    "order": (ORDER, check_order),
    "lock-exclusivity": (LOCK, check_lock_exclusivity),
    "takeover": (TAKEOVER, check_takeover),
    "offset-resync": (RESYNC, check_offset_resync),
    "read-routing": (ROUTING, check_read_routing),
    "integrity": (INTEGRITY, check_integrity),
    "replication": (REPLICATION, check_replication),
    "store-health": (STORE_HEALTH, check_store_health),
    "durability": (DURABILITY, check_durability),
    "availability": (AVAILABILITY, check_availability),
    "rebalance": (REBALANCE, check_rebalance),
    "deaths": (DEATHS, check_deaths),
    "disk-full": (DISK_FULL, check_disk_full),
    "pop-ack": (POP_ACK, check_pop_ack),
    "pop-redelivery": (POP_REDELIVERY, check_pop_redelivery),
    "pop-fifo": (POP_FIFO, check_pop_fifo),
    "requests": (REQUESTS, check_requests),
}

__all__ = ["CHECKS", "CheckFn", "check_availability", "check_deaths", "check_disk_full", "check_duplicates", "check_durability", "check_integrity", "check_lock_exclusivity",
           "check_lost", "check_offset_resync", "check_order", "check_pop_ack", "check_pop_fifo", "check_pop_redelivery", "check_read_routing", "check_rebalance", "check_replication", "check_requests",
           "check_store_health", "check_takeover", "check_unexpected"]
