"""The master side of replication (RocketMQ HAService / HAConnection / GroupTransferService).

Owns: one Replicate stream per connected slave — the divergence guard on the first report,
commitlog chunks from the slave's offset, heartbeats when idle, the slave's acked offsets —
and the SYNC_MASTER wait for any slave's ack. Does not own the slave side (ha_slave) or the
bytes themselves (the store).
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import logging
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from nodes.common.clock import Clock
from nodes.common.config import BrokerConfig
from nodes.store.message_store import MessageStore

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


class Refusal(enum.Enum):
    """Why a master refuses a slave (then ends the stream)."""

    SLAVE_AHEAD = "SLAVE_AHEAD"  # the slave holds bytes past the master's max offset
    SLAVE_DIVERGED = "SLAVE_DIVERGED"  # the slave's bytes differ from the master's at the same offsets
    NOT_MASTER = "NOT_MASTER"


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Commitlog bytes from `phys_offset` (none: a heartbeat), or a refusal."""

    phys_offset: int = 0
    data: bytes = b""
    master_max_phys_offset: int = 0
    refusal: Refusal | None = None
    remark: str = ""


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
    """Acked offsets of the connected slaves and the SYNC_MASTER waiters (loop-confined)."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.connections: dict[int, SlaveConnection] = {}
        self.push2slave_max_offset = 0  # the highest offset any slave acknowledged
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
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
        if self._waiters:
            done = [(t, f) for t, f in self._waiters if t <= self.push2slave_max_offset]
            self._waiters = [(t, f) for t, f in self._waiters if t > self.push2slave_max_offset]
            for _, fut in done:
                if not fut.done():
                    fut.set_result(None)

    def log_grew(self) -> None:
        for conn in self.connections.values():
            conn.wakeup.set()

    def is_slave_ok(self, master_put_offset: int, fall_behind_bytes_max: int) -> bool:
        """HAService#isSlaveOK: a slave is connected and not too far behind."""
        return bool(self.connections) and master_put_offset - self.push2slave_max_offset < fall_behind_bytes_max

    async def wait_acked(self, offset: int, timeout_ms: int) -> bool:
        """Wait until any slave acknowledged `offset`; False on timeout."""
        if self.push2slave_max_offset >= offset:
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, fut))
        try:
            await asyncio.wait_for(fut, timeout_ms / 1000.0)
            return True
        except TimeoutError:
            self._waiters = [(t, f) for t, f in self._waiters if f is not fut]
            return False

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
    """Serves Replicate streams on the master."""

    def __init__(self, config: BrokerConfig, store: MessageStore, state: ReplicationState, clock: Clock) -> None:
        self._config = config
        self._store = store
        self.state = state
        self._clock = clock

    def refusal_for(self, report: SlaveReport) -> tuple[Refusal, str] | None:
        """The divergence guard (beyond RocketMQ): refuse a slave ahead of or unlike the master."""
        master_max = self._store.max_phys_offset
        if report.max_phys_offset > master_max:
            return (Refusal.SLAVE_AHEAD,
                    f"slave {report.slave_node_id} holds up to {report.max_phys_offset}, past the master's "
                    f"{master_max}: its log has bytes the master never wrote")
        if report.max_phys_offset > 0:
            start, end = report.tail_check_from, report.max_phys_offset
            ours = crc32_of_range(self._store, start, end)
            if ours is None or ours != report.tail_crc32:
                return (Refusal.SLAVE_DIVERGED,
                        f"slave {report.slave_node_id} bytes [{start}, {end}) differ from the master's")
        return None

    async def serve(self, request_iterator: AsyncIterator[SlaveReport]) -> AsyncIterator[LogChunk]:
        """One slave's stream: its reports in, chunks out. The reports end when its stream does."""
        try:
            first = await anext(aiter(request_iterator))
        except StopAsyncIteration:
            return
        refusal = self.refusal_for(first)
        if refusal is not None:
            log.error("refusing replication: %s", refusal[1])
            yield LogChunk(refusal=refusal[0], remark=refusal[1],
                                           master_max_phys_offset=self._store.max_phys_offset)
            return
        conn = self.state.open(first)
        # A new slave starts at the master's oldest retained byte (RocketMQ: its newest file).
        next_offset = first.max_phys_offset or self._store.min_phys_offset
        log.info("slave %s connected at offset %d (master max %d)", first.slave_node_id, next_offset,
                 self._store.max_phys_offset)
        reader = asyncio.create_task(self._read_reports(request_iterator, conn),
                                     name=f"replication-reports-{conn.conn_id}")
        batch_bytes = self._config.ha_transfer_batch_bytes
        heartbeat_s = self._config.timing.ha_heartbeat_ms / 1000.0
        try:
            while not reader.done():
                conn.wakeup.clear()
                data = self._store.read_commitlog(next_offset, batch_bytes)
                if data:
                    yield LogChunk(phys_offset=next_offset, data=data,
                                                   master_max_phys_offset=self._store.max_phys_offset)
                    next_offset += len(data)
                    continue
                try:
                    await asyncio.wait_for(conn.wakeup.wait(), heartbeat_s)
                except TimeoutError:
                    yield LogChunk(phys_offset=next_offset,
                                                   master_max_phys_offset=self._store.max_phys_offset)
        finally:
            reader.cancel()
            self.state.close(conn)
            log.info("slave %s disconnected (acked %d)", conn.slave_node_id, conn.acked_offset)

    async def _read_reports(self, request_iterator: AsyncIterator[SlaveReport],
                            conn: SlaveConnection) -> None:
        housekeeping_s = self._config.timing.ha_housekeeping_ms / 1000.0
        iterator = aiter(request_iterator)
        try:
            while True:
                report = await asyncio.wait_for(anext(iterator), housekeeping_s)
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
