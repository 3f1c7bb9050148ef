"""The harness's errors. Each message says what went wrong and what to do next.

    HarnessError            misuse of the harness or an environment problem
    ├── SpecError           a cluster spec (TOML or code) that cannot be rendered
    ├── NodeStartError      a node exited or stayed silent before its READY line
    └── NamesrvUnreachable  a name server did not answer the harness's query
"""

from __future__ import annotations


class HarnessError(Exception):
    pass


class SpecError(HarnessError):
    pass


class NamesrvUnreachable(HarnessError):
    pass


class NodeStartError(HarnessError):
    """A node did not print READY in time. Carries the exit code and the log tail."""

    def __init__(self, message: str, *, node_id: str, exit_code: int | None, log_tail: str) -> None:
        self.node_id = node_id
        self.exit_code = exit_code
        self.log_tail = log_tail
        self.summary = message
        super().__init__(f"{message}\n{log_tail}" if log_tail else message)
