"""The slave side of replication (RocketMQ HAService.HAClient).

Owns: finding the master (config, or the name server's register result), the Replicate
stream, appending the master's commitlog bytes at the slave's own offset, acking them, and
reconnecting with bounded, jittered backoff. A refusal by the master's divergence guard is
kept and reported; a refused slave applies nothing, so its consume queues stay consistent
with its own commitlog. The stream itself is the transport's (`Replicate`).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import random
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from nodes.broker.ha_master import LogChunk, SlaveReport, crc32_of_range, tail_check_range
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
                 on_event: Callable[[dict[str, Any]], None] | None = None) -> None:
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
        self.connects = 0
        self.master_max_phys_offset = 0
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
                "connects": self.connects, "max_phys_offset": self._store.max_phys_offset,
                "master_max_phys_offset": self.master_max_phys_offset}

    async def _run(self) -> None:
        timing = self._config.timing
        backoff_ms = timing.ha_reconnect_min_ms
        while not self._stopping.is_set():
            addr = self._config.ha_master_addr or self._master_addr()
            if not addr:
                self.state = HaClientState.NO_MASTER
            else:
                try:
                    streamed = await self._stream(addr)
                    if streamed:
                        backoff_ms = timing.ha_reconnect_min_ms
                except (MqError, StoreError, TimeoutError) as exc:
                    log.warning("replication from %s broke: %s", addr, exc)
            # Bounded, jittered, doubling: a flapping master is not hammered in lock step.
            delay_ms = backoff_ms * (0.5 + self._rng.random())
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

        async def outgoing() -> AsyncIterator[SlaveReport]:
            yield self._report(first=True)
            while True:
                await report_wanted.wait()
                report_wanted.clear()
                if ended:
                    return
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
                if not chunk.data:
                    continue  # heartbeat
                if chunk.phys_offset != self._store.max_phys_offset:
                    log.error("master sent bytes at %d but this slave ends at %d; reconnecting",
                              chunk.phys_offset, self._store.max_phys_offset)
                    return received_any
                self._store.append_commitlog(chunk.phys_offset, chunk.data)
                self.bytes_received += len(chunk.data)
                report_wanted.set()
            return received_any
        finally:
            ended = True
            report_wanted.set()
            beats.cancel()
            await chunks.aclose()
            if self.state is HaClientState.STREAMING:
                self.state = HaClientState.CONNECTING

    def _refused(self, addr: str, chunk: LogChunk) -> None:
        assert chunk.refusal is not None
        self.state = HaClientState.REFUSED
        self.refusal = chunk.refusal.name
        self.refusal_remark = chunk.remark
        self.connected_to = addr
        log.error("master %s refused this slave (%s): %s; applying nothing until an operator repairs the log",
                  addr, self.refusal, chunk.remark)
        self._on_event({"event": "ha-refused", "master": addr, "refusal": self.refusal, "remark": chunk.remark,
                        "max_phys_offset": self._store.max_phys_offset})
