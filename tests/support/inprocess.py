"""Nodes run inside the test process on a background event loop, over real gRPC.

Integration tests use this to reach broker behaviour quickly; the cluster tests start
real processes through the harness instead.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from nodes.broker.controller import BrokerController
from nodes.common.config import BrokerConfig, NamesrvConfig, StoreConfig, Timing
from nodes.namesrv.app import NamesrvApp

TEST_STORE = StoreConfig(commitlog_segment_bytes=4 * 1024 * 1024, message_body_bytes_max=1024 * 1024,
                         cq_units_per_file=1_000)


class InProcessCluster:
    """A name server and one master broker on loopback, each on its own port."""

    def __init__(self, root: Path, *, time_scale: float = 0.05, timing: Timing | None = None,
                 store: StoreConfig = TEST_STORE, **broker_options: Any) -> None:
        """`timing` (when given) replaces `Timing().scaled(time_scale)` for both nodes."""
        self.root = root
        self.timing = timing or Timing().scaled(time_scale)
        self._store = store
        self._broker_options = broker_options
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="inprocess-nodes", daemon=True)
        self._thread.start()
        self.namesrv: NamesrvApp | None = None
        self.broker: BrokerController | None = None
        self.namesrv_addr = ""
        self.broker_addr = ""
        self.broker_port = 0

    def run(self, coro: Coroutine[Any, Any, Any], timeout_s: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def call(self, fn: Any, *args: Any) -> Any:
        """Run a plain function on the nodes' event loop (their state is loop-owned)."""
        async def _call() -> Any:
            return fn(*args)
        return self.run(_call())

    def start(self) -> InProcessCluster:
        async def _new_event() -> asyncio.Event:
            return asyncio.Event()

        self.namesrv = NamesrvApp(NamesrvConfig(run_dir=str(self.root / "namesrv"), timing=self.timing),
                                  self.run(_new_event()))
        self.namesrv_addr = self.run(self.namesrv.start())
        self.start_broker()
        return self

    def start_broker(self) -> None:
        async def _new_event() -> asyncio.Event:
            return asyncio.Event()

        config = BrokerConfig(run_dir=str(self.root / "broker-a-0"), namesrv_addrs=(self.namesrv_addr,),
                              port=self.broker_port, timing=self.timing, store=self._store, **self._broker_options)
        self.broker = BrokerController(config, self.run(_new_event()))
        self.broker_addr = self.run(self.broker.start())
        self.broker_port = int(self.broker_addr.rpartition(":")[2])

    def stop_broker(self) -> None:
        if self.broker is not None:
            self.run(self.broker.stop())
            self.broker = None

    def close(self) -> None:
        self.stop_broker()
        if self.namesrv is not None:
            self.run(self.namesrv.stop())
            self.namesrv = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> InProcessCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
