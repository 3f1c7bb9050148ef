"""One log line per rejected request, at most one per peer per interval.

A client's mistake is worth one line without a traceback (it is not the node's fault); a
flood of them from one peer (one connection: address and port) must not grow the log without
bound, so lines from the same peer within `interval_ms` are counted instead and the count
rides on that peer's next line.
"""

from __future__ import annotations

import logging
import time

from nodes.common import constants as c

_PEERS_MAX = 4096  # remembered peers; a flood from many ports starts the table over


class RejectLog:
    def __init__(self, logger: logging.Logger, interval_ms: int = c.REJECT_LOG_INTERVAL_MS) -> None:
        self._log = logger
        self._interval_ms = interval_ms
        self._last_ms: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self.rejected = 0

    def reject(self, peer: str, what: str, reason: object) -> None:
        """Note one rejected request from `peer`; logs a WARNING line unless one went out for
        this peer within the interval."""
        self.rejected += 1
        now_ms = time.monotonic() * 1000
        last_ms = self._last_ms.get(peer)
        if last_ms is not None and now_ms - last_ms < self._interval_ms:
            self._suppressed[peer] = self._suppressed.get(peer, 0) + 1
            return
        if len(self._last_ms) >= _PEERS_MAX:
            self._last_ms.clear()
            self._suppressed.clear()
        self._last_ms[peer] = now_ms
        more = self._suppressed.pop(peer, 0)
        suffix = f" (and {more} more rejected from this peer since the last line)" if more else ""
        self._log.warning("rejected %s from %s: %s%s", what, peer or "an unknown peer", _short(reason), suffix)


def _short(reason: object) -> str:
    text = str(reason) or type(reason).__name__
    return text if len(text) <= 300 else text[:300] + "..."
