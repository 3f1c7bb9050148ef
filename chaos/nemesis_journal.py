"""The nemesis history, `<run_dir>/nemesis/nemesis.jsonl` (the contract is in `chaos.checker.schemas`).

Every action is two flushed lines: phase `start` before the harness call, phase `end` after it
returns, both with the resolved `targets`, the exact action in `detail`, the `fault_id` a fault
shares with its recovery, and `error` (also appended to `detail`) when it failed.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

log = logging.getLogger(__name__)

NEMESIS_NODE = "nemesis"


class Clock(Protocol):
    def monotonic_ms(self) -> int: ...
    def wall_ms(self) -> int: ...


def nemesis_history_path(run_dir: str | Path) -> Path:
    return Path(run_dir) / "nemesis" / "nemesis.jsonl"


class NemesisJournal:
    """Appends action lines to `path` (created with its directory). Not thread-safe: the runner
    serializes its actions."""

    def __init__(self, path: Path, clock: Clock) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        self._clock = clock

    def close(self) -> None:
        self._file.close()

    @contextlib.contextmanager
    def action(self, op: str, fault_id: str | None, targets: list[str], detail: str, *,
               symbol: str | None = None) -> Iterator[dict[str, Any]]:
        """Write the start line, run the body, write the end line (also when the body raises).

        The body may rewrite the yielded `detail` and set `error`; the end line carries both.
        """
        base: dict[str, Any] = {"op": op, "targets": list(targets), "fault_id": fault_id}
        if symbol is not None:
            base["symbol"] = symbol
        self._write({**base, "phase": "start", "detail": detail})
        result: dict[str, Any] = {"detail": detail, "error": None}
        try:
            yield result
        except BaseException as exc:
            result["error"] = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            end = {**base, "phase": "end", "detail": result["detail"]}
            if result["error"]:
                end.update(detail=f"{result['detail']}; error: {result['error']}", error=result["error"])
                log.warning("nemesis %s %s failed: %s", op, targets, result["error"])
            self._write(end)

    def _write(self, line: dict[str, Any]) -> None:
        row = {"node": NEMESIS_NODE, "wall_ms": self._clock.wall_ms(), "mono_ms": self._clock.monotonic_ms(),
               "event": "nemesis", **line}
        self._file.write(json.dumps(row, sort_keys=True) + "\n")
        self._file.flush()


def read_nemesis(path: str | Path) -> list[dict[str, Any]]:
    """The lines of a nemesis history (a torn last line is skipped)."""
    rows = []
    with contextlib.suppress(FileNotFoundError), Path(path).open(encoding="utf-8") as f:
        for line in f:
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return rows
