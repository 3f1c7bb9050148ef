"""The transaction check (RocketMQ's TransactionalMessageCheckService): on the master, asks
the producers of half messages left open how their transactions ended.

Each pass takes the checks due (transaction.TransactionalMessages.due_checks: first after
`transaction_timeout_ms`, again every `transaction_check_interval_ms`, at most
TRANSACTION_CHECK_MAX, then discarded) and hands each to the check senders the transports
registered (a RocketMQ 5 client's Telemetry stream; a sender answers whether a producer was
there to ask). The producer answers with an end of source "check", which resolves the half
message like any other end. The service sleeps until the next check is due; a new half message
wakes it when it would be due sooner. The check counts and cursors are persisted after each
pass that changed them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from nodes.broker.transaction import CheckRequest, TransactionalMessages
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.errors import StoreError
from nodes.common.service import CrashHandler, Service

log = logging.getLogger(__name__)

# Sends one check to a producer; True when one was there to receive it.
CheckSender = Callable[[CheckRequest], bool]


class TransactionCheckService(Service):
    name = "transaction-check"
    expected_errors = (StoreError,)

    def __init__(self, txns: TransactionalMessages, clock: Clock, *, on_crash: CrashHandler | None = None) -> None:
        super().__init__(txns.timeout_ms, on_crash=on_crash, clock=clock)
        self._txns = txns
        self._clock = clock
        self._senders: list[CheckSender] = []
        self._next_pass_wall_ms = clock.wall_ms() + txns.timeout_ms
        self._persisted: tuple[int, int, int] = (-1, -1, -1)

    def add_sender(self, sender: CheckSender) -> None:
        self._senders.append(sender)

    def half_stored(self) -> None:
        """A half message was stored: wake the pass early if it falls due before the next one."""
        if self._clock.wall_ms() + self._txns.timeout_ms < self._next_pass_wall_ms:
            self.wakeup()

    def send_check(self, check: CheckRequest) -> bool:
        for sender in self._senders:
            try:
                if sender(check):
                    return True
            except Exception:  # one transport's failure must not stop the others or the pass
                log.exception("sending the check of %s failed", check.transaction_id)
        return False

    async def tick(self) -> None:
        now_ms = self._clock.wall_ms()
        checks, next_due_ms = self._txns.due_checks(now_ms)
        for check in checks:
            delivered = self.send_check(check)
            self._txns.journal_check(check, delivered)
            if not delivered:
                log.info("no producer of %s (group %r) to ask about half message %s (check %d)", check.real_topic,
                         check.group, check.record.msg_id, check.check_times)
        wait_ms = self._txns.timeout_ms if next_due_ms is None else next_due_ms - now_ms
        self.interval_ms = max(c.TIMING_FLOOR_MS, min(wait_ms, self._txns.check_interval_ms))
        self._next_pass_wall_ms = now_ms + self.interval_ms
        state = (self._txns.half_cursor, self._txns.op_cursor, self._txns.counts["checks"])
        if checks or state != self._persisted:
            snapshot = self._txns.snapshot()
            await asyncio.to_thread(self._txns.persist, snapshot)
            self._persisted = state

    async def on_stop(self) -> None:
        await asyncio.to_thread(self._txns.persist, self._txns.snapshot())
