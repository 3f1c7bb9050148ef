"""The master side of replication (RocketMQ HAService / HAConnection / GroupTransferService).

Owns: one Replicate stream per connected slave — the divergence guard on the first report
(with its repairs: restore the master's lost tail from a slave ahead of it, or offer the
slave the common prefix to cut back to), commitlog chunks of checked records from the slave's
offset, heartbeats when idle, the slave's acked offsets — and the SYNC_MASTER wait for any
slave's ack. Does not own the slave side (ha_slave) or the bytes themselves (the store).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import itertools
import logging
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from nodes.broker.ack_waiters import AckWaiters
from nodes.broker.ha_check import StoreErrors, damaged_record_bytes
from nodes.broker.ha_restore import WriteGate, apply_restore, collect_restore, read_checked
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.config import BrokerConfig
from nodes.store.message_store import MessageStore
from nodes.store.record import peek_size_and_magic

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SlaveReport:
    """What a slave tells its master: how far its commitlog reaches. The first report of a
    stream also carries the CRC-32 of its tail [tail_check_from, max_phys_offset)."""

    max_phys_offset: int
    slave_node_id: str = ""
    broker_id: int = 0
    tail_check_from: int = 0
    tail_crc32: int = 0
    # restoring a master's tail: the slave's bytes from data_phys_offset (no data at the next
    # offset: the end of them), or its bytes below the master's end differ
    data_phys_offset: int = 0
    data: bytes = b""
    restore_check_failed: bool = False


class Refusal(enum.Enum):
    """Why a master refuses a slave (then ends the stream)."""

    SLAVE_AHEAD = "SLAVE_AHEAD"  # the slave holds bytes past the master's max offset
    SLAVE_DIVERGED = "SLAVE_DIVERGED"  # the slave's bytes differ from the master's at the same offsets
    NOT_MASTER = "NOT_MASTER"


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Commitlog bytes from `phys_offset` (none: a heartbeat), or a refusal.

    With a refusal, `truncate` offers the slave to cut its log to `offset` when its bytes
    [check_from, offset) have CRC-32 `check_crc32`; `restore` asks the slave for its bytes from
    `offset` under the same check (the master lost its tail).
    """

    phys_offset: int = 0
    data: bytes = b""
    master_max_phys_offset: int = 0
    refusal: Refusal | None = None
    remark: str = ""
    truncate: bool = False
    restore: bool = False
    offset: int = 0
    check_from: int = 0
    check_crc32: int = 0
    damaged: bool = False  # data is one record damaged on the master too (a hole both keep)


@dataclass
class SlaveConnection:
    conn_id: int
    slave_node_id: str
    broker_id: int
    request_offset: int
    acked_offset: int
    connected_at_ms: int
    last_report_ms: int
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)


class ReplicationState:
    """Acked offsets of the connected slaves and the SYNC_MASTER waiters (loop-confined).

    `async_transfer_wait_ms` > 0 (an ASYNC_MASTER): new bytes wake the slaves' streams after
    that long rather than at once, so the appends of the window go out as one chunk."""

    def __init__(self, clock: Clock, *, async_transfer_wait_ms: int = 0) -> None:
        self._clock = clock
        self._transfer_wait_s = async_transfer_wait_ms / 1000.0
        self._wake_timer: asyncio.TimerHandle | None = None
        self.connections: dict[int, SlaveConnection] = {}
        self.push2slave_max_offset = 0  # the highest offset any slave acknowledged
        self.writes = WriteGate()  # closed while a master that lost its tail waits for its slave
        self._waiters = AckWaiters()  # SYNC_MASTER sends waiting for a slave's ack
        self._ids = itertools.count(1)

    def open(self, report: SlaveReport) -> SlaveConnection:
        now_ms = self._clock.monotonic_ms()
        conn = SlaveConnection(next(self._ids), report.slave_node_id, report.broker_id, report.max_phys_offset,
                               report.max_phys_offset, now_ms, now_ms)
        self.connections[conn.conn_id] = conn
        self.ack(conn, report.max_phys_offset)
        return conn

    def close(self, conn: SlaveConnection) -> None:
        self.connections.pop(conn.conn_id, None)

    def ack(self, conn: SlaveConnection, offset: int) -> None:
        conn.acked_offset = offset
        conn.last_report_ms = self._clock.monotonic_ms()
        if offset > self.push2slave_max_offset:
            self.push2slave_max_offset = offset
        self._waiters.acked(self.push2slave_max_offset)

    def log_grew(self) -> None:
        """New bytes to replicate (called on the loop). A SYNC_MASTER's senders wait for a slave,
        so its streams wake at once. An ASYNC_MASTER's answer does not wait, and RocketMQ's HA
        write service is woken only for SYNC_MASTER (idle, it looks again every 100 ms): waking
        after the transfer wait lets every append of the window share one chunk, one stream write
        on the master and one read, append and report on the slave, instead of one per send."""
        if self._transfer_wait_s <= 0:
            self._wake_streams()
        elif self._wake_timer is None:
            self._wake_timer = asyncio.get_running_loop().call_later(self._transfer_wait_s, self._wake_streams)

    @property
    def wake_pending(self) -> bool:
        """An ASYNC_MASTER's streams are due a wake: what is appended until then goes in one chunk."""
        return self._wake_timer is not None

    def _wake_streams(self) -> None:
        self._wake_timer = None
        for conn in self.connections.values():
            conn.wakeup.set()

    def is_slave_ok(self, master_put_offset: int, fall_behind_bytes_max: int) -> bool:
        """HAService#isSlaveOK: a slave is connected and not too far behind."""
        return bool(self.connections) and master_put_offset - self.push2slave_max_offset < fall_behind_bytes_max

    async def wait_acked(self, offset: int, timeout_ms: int) -> bool:
        """Wait until any slave acknowledged `offset`; False on timeout."""
        if self.push2slave_max_offset >= offset:
            return True
        return await self._waiters.wait(offset, timeout_ms / 1000.0)

    def describe(self) -> list[dict[str, object]]:
        return [{"slave": c.slave_node_id, "broker_id": c.broker_id, "acked_offset": c.acked_offset,
                 "request_offset": c.request_offset} for c in self.connections.values()]


def tail_check_range(max_phys_offset: int, segment_bytes: int, check_bytes: int) -> tuple[int, int]:
    """The bytes before `max_phys_offset` the divergence guard compares, inside one segment."""
    if max_phys_offset <= 0:
        return 0, 0
    segment_start = (max_phys_offset - 1) - (max_phys_offset - 1) % segment_bytes
    return max(segment_start, max_phys_offset - check_bytes), max_phys_offset


def crc32_of_range(store: MessageStore, start: int, end: int) -> int | None:
    """CRC-32 of commitlog bytes [start, end), or None when the store does not hold them all."""
    data = store.read_commitlog(start, end - start) if end > start else b""
    if len(data) != end - start:
        return None
    return zlib.crc32(data)


class ReplicationMaster:
    """Serves Replicate streams on the master.

    `recovered_max_phys_offset` / `clean_start`: where the log ended after this start's
    recovery and whether the last shutdown was clean. Below `agreed_max_phys_offset` the
    master's bytes are those every slave received before (its recovered log, and whatever it
    restored from a slave since): the common prefix a diverged slave may cut back to.
    """

    def __init__(self, config: BrokerConfig, store: MessageStore, state: ReplicationState, clock: Clock, *,
                 errors: StoreErrors | None = None, clean_start: bool = True,
                 recovered_max_phys_offset: int | None = None) -> None:
        self._config = config
        self._store = store
        self.state = state
        self._clock = clock
        self._segment_bytes = config.store.commitlog_segment_bytes
        self._errors = errors or StoreErrors(lambda _event: None, self._segment_bytes)
        self.clean_start = clean_start
        # None: a clean start lost nothing, every byte of this log is agreed
        self.agreed_max_phys_offset: int | None = None if clean_start else (
            store.max_phys_offset if recovered_max_phys_offset is None else recovered_max_phys_offset)
        self.restored_bytes = 0
        # FAULT SWITCH replica-skip-chunk: [start, end) of the record never sent (the first one at or
        # after REPLICA_SKIP_CHUNK_AT_PHYS_OFFSET: the same one after every restart)
        self._skip_chunk = c.FAULT_REPLICA_SKIP_CHUNK in config.fault_switches
        self._skipped: tuple[int, int] | None = None

    def refusal_for(self, report: SlaveReport) -> tuple[Refusal, str] | None:
        """The divergence guard (beyond RocketMQ): refuse a slave ahead of or unlike the master."""
        master_max = self._store.max_phys_offset
        if report.max_phys_offset > master_max:
            return (Refusal.SLAVE_AHEAD,
                    f"slave {report.slave_node_id} holds up to {report.max_phys_offset}, past the master's "
                    f"{master_max}: its log has bytes the master does not")
        if report.max_phys_offset > 0:
            start, end = report.tail_check_from, report.max_phys_offset
            ours = crc32_of_range(self._store, start, end)
            if ours is None or ours != report.tail_crc32:
                return (Refusal.SLAVE_DIVERGED,
                        f"slave {report.slave_node_id} bytes [{start}, {end}) differ from the master's")
        return None

    def _can_restore(self, report: SlaveReport) -> bool:
        """The master lost its tail (unclean start), wrote nothing since, and the slave is ahead."""
        master_max = self._store.max_phys_offset
        return (not self.clean_start and 0 < master_max == self.agreed_max_phys_offset
                and report.max_phys_offset > master_max)

    def _checked_offer(self, phys_offset: int, **kind: bool) -> LogChunk:
        """A truncate or restore chunk at `phys_offset` with the CRC of the master's bytes below it."""
        start, end = tail_check_range(phys_offset, self._segment_bytes, c.HA_TAIL_CHECK_BYTES)
        return LogChunk(offset=phys_offset, check_from=start, check_crc32=crc32_of_range(self._store, start, end) or 0,
                        master_max_phys_offset=self._store.max_phys_offset, **kind)

    async def _restore(self, first: SlaveReport, reports: AsyncIterator[SlaveReport]) -> AsyncIterator[LogChunk]:
        """Ask the slave for its bytes past the master's end; append them if nothing moved."""
        start = self._store.max_phys_offset
        log.warning("slave %s holds up to %d, past this master's recovered end %d: restoring the tail from it",
                    first.slave_node_id, first.max_phys_offset, start)
        yield self._checked_offer(start, restore=True)
        pieces = await collect_restore(reports, start, self._segment_bytes,
                                       self._config.timing.ha_housekeeping_ms / 1000.0, self._errors)
        appended = apply_restore(self._store, start, pieces)
        if appended:
            self.agreed_max_phys_offset = start + appended
            self.restored_bytes += appended
            self.state.log_grew()
            log.warning("restored [%d, %d) from slave %s", start, start + appended, first.slave_node_id)
            self._errors.note({"event": "ha-restored", "slave": first.slave_node_id, "from_phys_offset": start,
                               "bytes": appended})

    def _refuse(self, report: SlaveReport, refusal: Refusal, remark: str) -> LogChunk:
        """The refusal chunk; one replica-refused event. A master that lost its tail (unclean
        start) also offers the cut back to the prefix both logs hold: the slave's bytes past it
        are ones the master lost and has since written over, or still lacks. A master that
        started clean offers nothing (its log may be a replaced, empty disk: never cut a slave
        to match that)."""
        master_max = self._store.max_phys_offset
        log.error("refusing replication: %s", remark)
        cut_to = 0
        if self.agreed_max_phys_offset is not None:
            cut_to = min(report.max_phys_offset, master_max, self.agreed_max_phys_offset)
        if 0 < cut_to < report.max_phys_offset:
            chunk = self._checked_offer(cut_to, truncate=True)
            remark += f"; offered to cut the slave back to {cut_to}"
            self._errors.replica_refused(cut_to, report.max_phys_offset - cut_to, f"{refusal.name}: {remark}")
        else:
            chunk = LogChunk(master_max_phys_offset=master_max)
            self._errors.replica_refused(report.max_phys_offset, 0, f"{refusal.name}: {remark}")
        return dataclasses.replace(chunk, refusal=refusal, remark=remark)

    async def serve(self, request_iterator: AsyncIterator[SlaveReport]) -> AsyncIterator[LogChunk]:
        """One slave's stream: its reports in, chunks out. The reports end when its stream does."""
        reports = aiter(request_iterator)
        try:
            first = await anext(reports)
        except StopAsyncIteration:
            return
        if self._can_restore(first):
            async for chunk in self._restore(first, reports):
                yield chunk
        refusal = self.refusal_for(first)
        if refusal is not None:
            yield self._refuse(first, *refusal)
            self.state.writes.open(f"slave {first.slave_node_id} refused")
            return
        self.state.writes.open(f"slave {first.slave_node_id} agrees with this master")
        conn = self.state.open(first)
        # A new slave starts at the master's oldest retained byte (RocketMQ: its newest file).
        next_offset = first.max_phys_offset or self._store.min_phys_offset
        if self._skipped is not None and self._skipped[0] <= next_offset < self._skipped[1]:
            next_offset = self._skipped[1]  # FAULT SWITCH replica-skip-chunk: "the slave has it already"
        log.info("slave %s connected at offset %d (master max %d)", first.slave_node_id, next_offset,
                 self._store.max_phys_offset)
        reader = asyncio.create_task(self._read_reports(reports, conn), name=f"replication-reports-{conn.conn_id}")
        batch_bytes = self._config.ha_transfer_batch_bytes
        heartbeat_s = self._config.timing.ha_heartbeat_ms / 1000.0
        try:
            while not reader.done():
                conn.wakeup.clear()
                end_at_read = self._store.max_phys_offset
                data, check = read_checked(self._store, next_offset, batch_bytes, self._segment_bytes)
                if check.bad_phys_offset is not None and not data:
                    raw = self._store.read_commitlog(next_offset, batch_bytes + self._config.store.message_body_bytes_max)
                    self._errors.bad_record(check, raw, next_offset, "replication read on the master")
                    hole_bytes = damaged_record_bytes(raw, next_offset, self._segment_bytes)
                    if hole_bytes:
                        # Checked past it: a valid record follows, so this is a hole in the log,
                        # not its end. The slave keeps the same hole (its readers step over it as
                        # ours do); without this it would stop here for good.
                        yield LogChunk(phys_offset=next_offset, data=raw[:hole_bytes], damaged=True,
                                       master_max_phys_offset=self._store.max_phys_offset)
                        next_offset += hole_bytes
                        continue
                    # Nothing valid after it: never past it; the slave waits here.
                if data:
                    if self._skip_chunk:
                        data, next_offset = self._skip_one_record(data, next_offset)
                    if data:
                        yield LogChunk(phys_offset=next_offset, data=data,
                                       master_max_phys_offset=self._store.max_phys_offset)
                        next_offset += len(data)
                    if next_offset < end_at_read:
                        continue  # cut at the batch size or a segment's end: the rest at once
                    if self._store.max_phys_offset > next_offset and not self.state.wake_pending:
                        continue
                    # Caught up: what came in while the chunk went out waits for the wake that
                    # is due (ASYNC_MASTER). Without this a steady stream of one-message sends,
                    # each arriving while the last chunk was written, went out one chunk (and
                    # one slave append and report) per message.
                try:
                    await asyncio.wait_for(conn.wakeup.wait(), heartbeat_s)
                except TimeoutError:
                    yield LogChunk(phys_offset=next_offset, master_max_phys_offset=self._store.max_phys_offset)
        finally:
            reader.cancel()
            self.state.close(conn)
            log.info("slave %s disconnected (acked %d)", conn.slave_node_id, conn.acked_offset)

    def _skip_one_record(self, data: bytes, at: int) -> tuple[bytes, int]:
        """FAULT SWITCH replica-skip-chunk (breaks "replicas converge"): the chunk stops before the
        skipped record, and a chunk that would start on it starts after it instead."""
        if self._skipped is None:
            pos = 0
            while pos < len(data) and at + pos < c.REPLICA_SKIP_CHUNK_AT_PHYS_OFFSET:
                pos += peek_size_and_magic(data, pos)[0]
            if pos < len(data):
                self._skipped = (at + pos, at + pos + peek_size_and_magic(data, pos)[0])
                log.warning("fault switch replica-skip-chunk: the record at [%d, %d) is never replicated", *self._skipped)
        if self._skipped is None or not at <= self._skipped[0] < at + len(data):
            return data, at
        if at == self._skipped[0]:  # "the slave has it already": move on past it
            return b"", self._skipped[1]
        return data[:self._skipped[0] - at], at

    async def _read_reports(self, reports: AsyncIterator[SlaveReport], conn: SlaveConnection) -> None:
        housekeeping_s = self._config.timing.ha_housekeeping_ms / 1000.0
        try:
            while True:
                report = await asyncio.wait_for(anext(reports), housekeeping_s)
                if report.data:
                    continue  # a restore piece sent after the master stopped collecting
                if report.max_phys_offset > self._store.max_phys_offset:
                    # RocketMQ #3016: an ack past our end is nonsense; drop the connection.
                    log.error("slave %s acked %d past the master's max %d; closing", conn.slave_node_id,
                              report.max_phys_offset, self._store.max_phys_offset)
                    return
                self.state.ack(conn, report.max_phys_offset)
        except TimeoutError:
            log.warning("slave %s silent for %.1f s; closing its stream", conn.slave_node_id, housekeeping_s)
        except (StopAsyncIteration, asyncio.CancelledError):
            pass
        finally:
            conn.wakeup.set()
