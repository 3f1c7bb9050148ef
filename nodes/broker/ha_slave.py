"""The slave side of replication (RocketMQ HAService.HAClient).

Owns: finding the master (config, or the name server's register result), the Replicate
stream, checking every record the master sends and appending the good ones at the slave's
own offset, acking them, and reconnecting with bounded, jittered backoff. A refusal by the
master's divergence guard is kept and reported; a refused slave applies nothing, so its
consume queues stay consistent with its own commitlog, unless the master offers a common
prefix whose CRC the slave's own bytes match: then the slave cuts its log back to it and
copies again. A master that lost its tail may ask for the slave's bytes past its end (after
the same CRC check); the slave sends them as checked records. The stream itself is the
transport's (`Replicate`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import random
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from nodes.broker.ha_check import StoreErrors, check_chunk
from nodes.broker.ha_master import LogChunk, SlaveReport, crc32_of_range, tail_check_range
from nodes.broker.ha_restore import read_checked
from nodes.broker.ha_truncate import truncate_replica
from nodes.common import constants as c
from nodes.common.clock import Clock
from nodes.common.config import BrokerConfig
from nodes.common.errors import MqError, StoreError
from nodes.store.message_store import MessageStore

log = logging.getLogger(__name__)

# Opens a Replicate stream to the master at the address: the slave's reports go out, the
# master's chunks come back. Raises MqError when the stream breaks.
Replicate = Callable[[str, AsyncIterator[SlaveReport]], AsyncGenerator[LogChunk, None]]


class HaClientState(enum.Enum):
    NO_MASTER = "NO_MASTER"
    CONNECTING = "CONNECTING"
    STREAMING = "STREAMING"
    REFUSED = "REFUSED"
    STOPPED = "STOPPED"


class HaClient:
    """Keeps this slave's commitlog following its master's."""

    def __init__(self, config: BrokerConfig, store: MessageStore, master_addr: Callable[[], str], clock: Clock,
                 replicate: Replicate, rng: random.Random | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 errors: StoreErrors | None = None) -> None:
        self._config = config
        self._replicate = replicate
        self._store = store
        self._master_addr = master_addr
        self._clock = clock
        self._rng = rng or random.Random()
        self._on_event = on_event or (lambda _event: None)
        self.state = HaClientState.NO_MASTER
        self.connected_to = ""
        self.refusal = ""
        self.refusal_remark = ""
        self.bytes_received = 0
        self.chunks_received = 0  # chunks that carried records (heartbeats not counted)
        self.connects = 0
        self.master_max_phys_offset = 0
        self.truncated_bytes = 0
        self.restore_sent_bytes = 0
        self._segment_bytes = config.store.commitlog_segment_bytes
        self._errors = errors or StoreErrors(self._on_event, self._segment_bytes)
        self._retry_now = False  # the log was just cut back: connect again without backing off
        self._last_master_addr = ""
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ha-client")

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.state = HaClientState.STOPPED

    def describe(self) -> dict[str, Any]:
        return {"state": self.state.value, "master": self.connected_to, "refusal": self.refusal,
                "refusal_remark": self.refusal_remark, "bytes_received": self.bytes_received,
                "chunks_received": self.chunks_received,
                "connects": self.connects, "max_phys_offset": self._store.max_phys_offset,
                "master_max_phys_offset": self.master_max_phys_offset, "truncated_bytes": self.truncated_bytes,
                "restore_sent_bytes": self.restore_sent_bytes}

    async def _run(self) -> None:
        timing = self._config.timing
        backoff_ms = timing.ha_reconnect_min_ms
        while not self._stopping.is_set():
            # The last known master until the name server names another (RocketMQ's HAClient
            # keeps its master address likewise): a restarted master comes back on it, and the
            # slave's next registration may be a while.
            addr = self._config.ha_master_addr or self._master_addr() or self._last_master_addr
            self._last_master_addr = addr
            if not addr:
                self.state = HaClientState.NO_MASTER
            else:
                try:
                    streamed = await self._stream(addr)
                    if streamed:
                        backoff_ms = timing.ha_reconnect_min_ms
                except (MqError, StoreError, TimeoutError) as exc:
                    log.warning("replication from %s broke: %s", addr, exc)
            if self._retry_now:
                self._retry_now = False
                backoff_ms = timing.ha_reconnect_min_ms
            # Bounded, jittered, doubling: a flapping master is not hammered in lock step.
            delay_ms = backoff_ms * (c.HA_RECONNECT_JITTER_MAX - 1 + self._rng.random())
            backoff_ms = min(backoff_ms * 2, timing.ha_reconnect_max_ms)
            try:
                await asyncio.wait_for(self._stopping.wait(), delay_ms / 1000.0)
            except TimeoutError:
                pass

    def _report(self, first: bool = False) -> SlaveReport:
        max_offset = self._store.max_phys_offset
        if first and max_offset > 0:
            start, end = tail_check_range(max_offset, self._config.store.commitlog_segment_bytes,
                                          c.HA_TAIL_CHECK_BYTES)
            return SlaveReport(max_offset, self._config.node_id, self._config.broker_id, tail_check_from=start,
                               tail_crc32=crc32_of_range(self._store, start, end) or 0)
        return SlaveReport(max_offset, self._config.node_id, self._config.broker_id)

    async def _stream(self, addr: str) -> bool:
        """One connection; returns whether any data or heartbeat arrived."""
        if self.state is not HaClientState.REFUSED:  # a refusal stays visible while we retry
            self.state = HaClientState.CONNECTING
        # Reports coalesce: appending a chunk only asks for one, and the writer builds it from
        # the store when the stream is ready to send, so chunks that land while a report is on
        # its way are acked by the next one (RocketMQ's HAClient likewise reports once per
        # socket read, after every frame it read). The offset in a report is never stale.
        report_wanted = asyncio.Event()
        ended = False
        pending: deque[SlaveReport] = deque()  # restore pieces, sent before any other report

        async def outgoing() -> AsyncIterator[SlaveReport]:
            yield self._report(first=True)
            while True:
                await report_wanted.wait()
                report_wanted.clear()
                if ended:
                    return
                while pending:
                    yield pending.popleft()
                yield self._report()

        async def heartbeat() -> None:
            while True:
                await asyncio.sleep(self._config.timing.ha_heartbeat_ms / 1000.0)
                report_wanted.set()

        received_any = False
        beats = asyncio.create_task(heartbeat(), name="ha-client-heartbeat")
        chunks = self._replicate(addr, outgoing())
        try:
            housekeeping_s = self._config.timing.ha_housekeeping_ms / 1000.0
            # Checked per chunk, not only left to cancellation: on Python 3.11 wait_for can
            # swallow a cancel that lands as a chunk arrives, and a slave catching up always has
            # the next chunk ready, so stop() would wait for this loop forever.
            while not self._stopping.is_set():
                try:
                    chunk = await asyncio.wait_for(anext(chunks), housekeeping_s)
                except StopAsyncIteration:
                    return received_any
                if chunk.refusal is not None:
                    self._refused(addr, chunk)
                    return received_any
                if not received_any:
                    received_any = True
                    self.connects += 1
                    self.connected_to = addr
                    self.refusal = self.refusal_remark = ""
                    self.state = HaClientState.STREAMING
                    self._on_event({"event": "ha-connected", "master": addr,
                                    "max_phys_offset": self._store.max_phys_offset})
                self.master_max_phys_offset = chunk.master_max_phys_offset
                if chunk.restore:
                    pending.extend(self._restore_reports(addr, chunk))
                    report_wanted.set()
                    continue
                if not chunk.data:
                    continue  # heartbeat
                if chunk.phys_offset != self._store.max_phys_offset:
                    log.error("master sent bytes at %d but this slave ends at %d; reconnecting",
                              chunk.phys_offset, self._store.max_phys_offset)
                    return received_any
                if not self._append_checked(chunk):
                    return received_any
                report_wanted.set()
            return received_any
        finally:
            ended = True
            report_wanted.set()
            beats.cancel()
            await chunks.aclose()
            if self.state is HaClientState.STREAMING:
                self.state = HaClientState.CONNECTING

    def _append_checked(self, chunk: LogChunk) -> bool:
        """Append the chunk's whole, valid records; False (reconnect) when anything is left over:
        a bad record is never appended, and a master sends whole records only. The one exception
        is a record the master flags as damaged on its side too, with a valid record after it:
        appended as it is, the same hole in both logs."""
        self.chunks_received += 1
        check = check_chunk(chunk.data, chunk.phys_offset, self._segment_bytes)
        if chunk.damaged and check.bad_phys_offset == chunk.phys_offset and check.valid_bytes == 0:
            self._errors.bad_record(check, chunk.data, chunk.phys_offset,
                                    "replicated as a hole: the record is damaged on the master too")
            self._store.append_commitlog(chunk.phys_offset, chunk.data)
            self.bytes_received += len(chunk.data)
            return True
        if check.valid_bytes:
            self._store.append_commitlog(chunk.phys_offset, chunk.data[:check.valid_bytes], check.records)
            self.bytes_received += check.valid_bytes
        if check.valid_bytes == len(chunk.data):
            return True
        if check.bad_phys_offset is not None:
            self._errors.bad_record(check, chunk.data, chunk.phys_offset, "replicated from the master")
            log.error("master sent a bad record at %d (%s); reconnecting", check.bad_phys_offset, check.reason)
        else:
            log.error("master's chunk at %d ends inside a record; reconnecting", chunk.phys_offset)
        return False

    def _own_bytes_match(self, chunk: LogChunk) -> bool:
        """Whether this slave's bytes [check_from, offset) have the CRC the master sent."""
        if chunk.offset > self._store.max_phys_offset:
            return False
        if chunk.offset == 0:
            return True
        return crc32_of_range(self._store, chunk.check_from, chunk.offset) == chunk.check_crc32

    def _restore_reports(self, addr: str, chunk: LogChunk) -> list[SlaveReport]:
        """The master lost its tail: this slave's checked records from `chunk.offset`, then an end
        marker (no data at the next offset); or that our bytes below it differ."""
        own_max = self._store.max_phys_offset
        report = SlaveReport(own_max, self._config.node_id, self._config.broker_id)
        if not self._own_bytes_match(chunk):
            log.error("master %s asks for this slave's bytes from %d, but the bytes below differ", addr, chunk.offset)
            return [dataclasses.replace(report, restore_check_failed=True)]
        pieces, at = [], chunk.offset
        while at < own_max:
            data, check = read_checked(self._store, at, self._config.ha_transfer_batch_bytes, self._segment_bytes)
            if data:
                pieces.append(dataclasses.replace(report, data_phys_offset=at, data=data))
                at += len(data)
            if check.bad_phys_offset is not None:
                self._errors.bad_record(check, self._store.read_commitlog(at, self._config.ha_transfer_batch_bytes),
                                        at, "restoring the master's tail")
                break
            if not data:
                break
        self.restore_sent_bytes += at - chunk.offset
        log.warning("restoring master %s: sending [%d, %d)", addr, chunk.offset, at)
        return [*pieces, dataclasses.replace(report, data_phys_offset=at)]

    def _truncate_if_offered(self, addr: str, chunk: LogChunk) -> bool:
        """Cut this log back to the master's offer when our bytes below it match."""
        own_max = self._store.max_phys_offset
        if not chunk.truncate or not 0 < chunk.offset < own_max or not self._own_bytes_match(chunk):
            return False
        dropped = truncate_replica(self._store, chunk.offset)
        self.truncated_bytes += dropped
        self._retry_now = True
        self._errors.replica_refused(chunk.offset, own_max - chunk.offset,
                                     f"master {addr} refused this slave ({chunk.refusal.name if chunk.refusal else '-'}); "
                                     f"log cut from {own_max} back to {chunk.offset}, the bytes both hold")
        return True

    def _refused(self, addr: str, chunk: LogChunk) -> None:
        assert chunk.refusal is not None
        if self._truncate_if_offered(addr, chunk):
            self.refusal, self.refusal_remark = chunk.refusal.name, chunk.remark
            return
        self.state = HaClientState.REFUSED
        self.refusal = chunk.refusal.name
        self.refusal_remark = chunk.remark
        self.connected_to = addr
        log.error("master %s refused this slave (%s): %s; applying nothing until an operator repairs the log",
                  addr, self.refusal, chunk.remark)
        self._on_event({"event": "ha-refused", "master": addr, "refusal": self.refusal, "remark": chunk.remark,
                        "max_phys_offset": self._store.max_phys_offset})
