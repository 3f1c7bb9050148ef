"""The live view of a chaos run: phase, active faults, sent / acknowledged / delivered counts.

Owns only rendering; the runner feeds it a `RunStatus` snapshot. Without a terminal (tests,
CI logs) it prints one plain line per phase change instead of redrawing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.console import Console
from rich.live import Live
from rich.table import Table


@dataclass
class RunStatus:
    suite: str
    seed: int
    phase: str = "starting"
    elapsed_s: float = 0.0
    active_faults: list[str] = field(default_factory=list)
    last_op: str = ""
    sent: int = 0
    acked: int = 0
    failed: int = 0
    unknown: int = 0
    delivered: int = 0
    missing: int = 0


class Progress:
    def __init__(self, console: Console, *, live: bool | None = None) -> None:
        self._console = console
        self._live_enabled = console.is_terminal if live is None else live
        self._live: Live | None = None
        self._last_phase = ""
        self._started = time.monotonic()

    def __enter__(self) -> Progress:
        if self._live_enabled:
            self._live = Live(console=self._console, refresh_per_second=4, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def update(self, status: RunStatus) -> None:
        status.elapsed_s = time.monotonic() - self._started
        if self._live is not None:
            self._live.update(self._table(status))
        elif status.phase != self._last_phase:
            self._console.print(f"[{status.elapsed_s:6.1f}s] {status.phase}: sent {status.sent}, "
                                f"acked {status.acked}, delivered {status.delivered}")
        self._last_phase = status.phase

    @staticmethod
    def _table(s: RunStatus) -> Table:
        table = Table(title=f"chaos {s.suite} (seed {s.seed}) — {s.elapsed_s:.0f} s", show_header=False)
        table.add_column("what", style="bold")
        table.add_column("value")
        table.add_row("phase", s.phase)
        table.add_row("active faults", ", ".join(s.active_faults) or "none")
        table.add_row("last op", s.last_op or "-")
        table.add_row("sent", f"{s.sent} (acked {s.acked}, failed {s.failed}, unknown {s.unknown})")
        table.add_row("delivered", f"{s.delivered} distinct ids; acked not yet delivered: {s.missing}")
        return table
