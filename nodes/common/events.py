"""A node's event history: one JSON object per line in `<run_dir>/events.jsonl`.

Brokers record read-routing decisions, replication connects and refusals; the chaos
checker reads these files. Each line is flushed to the OS as it is written, so a SIGKILL
loses nothing already recorded (the page cache survives a process kill).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from nodes.common.clock import SYSTEM_CLOCK, Clock


class EventLog:
    def __init__(self, path: Path | None, node_id: str, clock: Clock = SYSTEM_CLOCK) -> None:
        self.node_id = node_id
        self._clock = clock
        self._lock = threading.Lock()
        self._file = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("a", encoding="utf-8")

    def record(self, event: dict[str, Any]) -> None:
        if self._file is None:
            return
        line = json.dumps({"node": self.node_id, "wall_ms": self._clock.wall_ms(),
                           "mono_ms": self._clock.monotonic_ms(), **event}, separators=(",", ":"))
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None
