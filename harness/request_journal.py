"""The request journal of a cluster's link proxies: `<run dir>/links/requests.jsonl`.

A real client's own journal shows what its callbacks saw; a request the broker dropped looks
there like one never sent. The proxy of a consumer's link to a broker sees both: it records each
request that matters as it passes (`event` `request`) and, when the answer passes back, the same
fields again with the answer (`event` `answer`). Which requests, and their fields, are the taps'
(`harness.request_tap`); docs/history.md has the table.

Loop-confined (the link proxies' loop). Lines are buffered and written on a short timer
(`REQUEST_JOURNAL_FLUSH_MS`) and at close: a journal must not slow the proxy it rides on, and
it lives in the harness process, which a chaos run never kills.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from nodes.common import constants as c

JOURNAL_NODE = "links"  # the `node` of every line: the harness's link proxies
JOURNAL_DIR = "links"
JOURNAL_FILE = "requests.jsonl"


def journal_path(run_dir: Path) -> Path:
    return run_dir / JOURNAL_DIR / JOURNAL_FILE


class RequestJournal:
    def __init__(self, path: Path, flush_ms: int = c.REQUEST_JOURNAL_FLUSH_MS) -> None:
        self.path = path
        self._flush_s = flush_ms / 1000
        self._lines: list[str] = []
        self._timer: asyncio.TimerHandle | None = None
        self._file: Any = None
        self.lines_written = 0

    def record(self, event: str, fields: dict[str, Any]) -> None:
        """One line: the common fields, then `fields` (the tap's)."""
        line = {"node": JOURNAL_NODE, "wall_ms": time.time_ns() // 1_000_000,
                "mono_ms": time.monotonic_ns() // 1_000_000, "event": event, **fields}
        self._lines.append(json.dumps(line, separators=(",", ":")))
        if self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # used outside the proxies' loop (a test): write at once
                self.flush()
                return
            self._timer = loop.call_later(self._flush_s, self.flush)

    def flush(self) -> None:
        self._timer = None
        if not self._lines:
            return
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        lines, self._lines = self._lines, []
        self._file.write("\n".join(lines) + "\n")
        self._file.flush()
        self.lines_written += len(lines)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None
