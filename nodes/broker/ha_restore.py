"""A master that lost its log tail takes it back from its slave, and holds writes meanwhile.

Owns: the write gate (sends and retries wait on it while a master that recovered from an
unclean shutdown, SYNC_MASTER or ASYNC_MASTER, waits, for a bounded time, for its slave), reading commitlog
bytes as whole checked records (what both sides send), and the master's half of the restore
dialog: collect the slave's bytes past the master's end, check every record, append them
in one go if the master took no write meanwhile.

After a power loss under ASYNC_FLUSH a master restarts without the bytes it had not fsync'd,
while its slave holds them (replication runs ahead of the disk). The slave's bytes below the
master's end agree (both logs were the same stream), so the master copies the rest back
before it writes anything after its own end.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from nodes.broker.ha_check import ChunkCheck, StoreErrors, check_chunk, whole_records_bytes
from nodes.store.message_store import MessageStore

if TYPE_CHECKING:
    from nodes.broker.ha_master import SlaveReport

log = logging.getLogger(__name__)

Req = TypeVar("Req")
Resp = TypeVar("Resp")


class WriteGate:
    """Open, or closed with a reason; writers wait while it is closed (loop-confined)."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self.reason = ""

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def close(self, reason: str) -> None:
        self.reason = reason
        self._open.clear()
        log.warning("writes held: %s", reason)

    def open(self, why: str) -> None:
        if not self._open.is_set():
            log.info("writes open: %s", why)
            self.reason = ""
            self._open.set()

    async def wait_open(self) -> None:
        await self._open.wait()

    async def open_after(self, wait_ms: int) -> None:
        """The bound on the wait: writes open `wait_ms` later whatever happened."""
        try:
            await asyncio.wait_for(self._open.wait(), wait_ms / 1000.0)
        except TimeoutError:
            self.open(f"no slave restored the tail within {wait_ms} ms")

    def guard(self, handler: Callable[[Req], Awaitable[Resp]]) -> Callable[[Req], Awaitable[Resp]]:
        """`handler`, called once the gate is open. A coroutine runs up to its first await at
        once, so the handler's store put follows the open check with nothing in between."""
        async def guarded(request: Req) -> Resp:
            while not self._open.is_set():
                await self._open.wait()
            return await handler(request)
        return guarded


def read_checked(store: MessageStore, phys_offset: int, max_bytes: int, segment_bytes: int) -> tuple[bytes, ChunkCheck]:
    """Whole records from `phys_offset` that pass every check (at least one record when the
    store holds it, however long), and how the walk ended."""
    data = store.read_commitlog(phys_offset, max_bytes)
    if not data:
        return b"", ChunkCheck(0)
    if phys_offset >= store.put_only_from_phys_offset:
        # Records this process encoded itself moments ago, in the segment it writes: reading
        # them back cannot find what the checks look for (they guard against bytes damaged on
        # disk or received raw), so only their framing is walked. The slave checks every record
        # it receives either way.
        whole_bytes = whole_records_bytes(data)
        if whole_bytes:
            return data[:whole_bytes], ChunkCheck(whole_bytes)
    check = check_chunk(data, phys_offset, segment_bytes)
    if check.valid_bytes == 0 and check.needed_bytes > len(data):
        data = store.read_commitlog(phys_offset, check.needed_bytes)
        check = check_chunk(data, phys_offset, segment_bytes)
        if check.valid_bytes == 0 and check.needed_bytes:
            return b"", ChunkCheck(0, phys_offset, f"a record of {check.needed_bytes} bytes runs past the log's end")
    return data[:check.valid_bytes], check


async def collect_restore(reports: AsyncIterator[SlaveReport], start: int, segment_bytes: int, timeout_s: float,
                          errors: StoreErrors) -> list[tuple[int, bytes]]:
    """The slave's bytes from `start`, as (phys_offset, data) pieces of checked records, up to
    its end marker (a report with no data at the next offset), its check failure, a bad record,
    or `timeout_s` of silence."""
    pieces: list[tuple[int, bytes]] = []
    expected = start
    iterator = aiter(reports)
    while True:
        try:
            report = await asyncio.wait_for(anext(iterator), timeout_s)
        except (TimeoutError, StopAsyncIteration):
            log.warning("restore from the slave ended early at phys offset %d", expected)
            return pieces
        if report.restore_check_failed:
            log.error("the slave's bytes below phys offset %d differ from this master's; nothing restored", start)
            return []
        data, at = report.data, report.data_phys_offset
        if not data:
            if at == expected:
                return pieces  # the end marker
            continue  # a heartbeat
        if at != expected:
            log.error("restore piece at %d, expected %d; stopping there", at, expected)
            return pieces
        check = check_chunk(data, at, segment_bytes)
        if check.valid_bytes:
            pieces.append((at, data[:check.valid_bytes]))
            expected += check.valid_bytes
        if check.valid_bytes < len(data):
            if check.bad_phys_offset is not None:
                errors.bad_record(check, data, at, "restore from the slave")
            return pieces


def apply_restore(store: MessageStore, start: int, pieces: list[tuple[int, bytes]]) -> int:
    """Append the pieces if the log still ends at `start` (no write landed meanwhile); returns
    the bytes appended. No await inside: nothing else writes in between."""
    if store.max_phys_offset != start:
        log.warning("restore abandoned: the log moved from %d to %d meanwhile", start, store.max_phys_offset)
        return 0
    appended = 0
    for at, data in pieces:
        store.append_commitlog(at, data)
        appended += len(data)
    return appended
