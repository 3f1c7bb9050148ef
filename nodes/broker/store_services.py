"""The broker's timers over its store's disk: the disk check and the retention pass (RocketMQ's
diskCheckScheduledExecutorService and cleanFilesPeriodically). The rules themselves are the
store's (disk_guard.py, retention.py); these only run them on the broker's event loop, where
every store read runs too, so a retention pass never unmaps a segment under a read.
"""

from __future__ import annotations

from nodes.common.clock import Clock
from nodes.common.config import Timing
from nodes.common.errors import StoreError, TransportError
from nodes.common.service import CrashHandler, Service
from nodes.store.message_store import MessageStore


class DiskCheckService(Service):
    """Every disk_check_interval_ms (the first after disk_check_first_ms): measure, flip the
    disk-full flag, retry a dispatch a full disk stopped."""

    name = "disk-check"
    expected_errors = (TransportError, StoreError, OSError)

    def __init__(self, store: MessageStore, timing: Timing, on_crash: CrashHandler) -> None:
        super().__init__(timing.disk_check_interval_ms, on_crash=on_crash, initial_delay_ms=timing.disk_check_first_ms)
        self._store = store

    async def tick(self) -> None:
        self._store.check_disk()


class CleanService(Service):
    """Every clean_resource_interval_ms (the first after clean_first_delay_ms): one retention pass."""

    name = "store-clean"
    expected_errors = (TransportError, StoreError, OSError)

    def __init__(self, store: MessageStore, timing: Timing, clock: Clock, on_crash: CrashHandler) -> None:
        super().__init__(timing.clean_resource_interval_ms, on_crash=on_crash,
                         initial_delay_ms=timing.clean_first_delay_ms)
        self._store = store
        self._clock = clock
        self._reserved_ms = timing.file_reserved_time_ms
        self.deleted = 0

    async def tick(self) -> None:
        self.deleted += len(self._store.clean_files(self._clock.wall_ms(), self._reserved_ms))
