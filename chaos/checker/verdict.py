"""Three-valued results and the verdict file.

`valid` is True, False or "unknown"; composing takes the worst (False > "unknown" > True).
A check whose inputs are absent answers "unknown" with a reason; a check that raises is
turned into "unknown" with the error by `check_safe`, so one broken check never hides the
others. Exit codes: 0 valid, 1 invalid, 2 unknown or could not run.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Valid = bool | Literal["unknown"]
UNKNOWN: Literal["unknown"] = "unknown"

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_UNKNOWN = 2

_RANK = {True: 0, UNKNOWN: 1, False: 2}


def worst(values: Iterable[Valid]) -> Valid:
    """False > "unknown" > True; an empty input is "unknown" (nothing was shown valid)."""
    result: Valid | None = None
    for v in values:
        if result is None or _RANK[v] > _RANK[result]:
            result = v
    return UNKNOWN if result is None else result


def combine_parts(parts: Mapping[str, Valid | None]) -> Valid:
    """A check made of sub-checks: False if any failed, True if any ran and all passed,
    "unknown" if none could run (None = skipped for missing inputs)."""
    ran = [v for v in parts.values() if v is not None]
    if any(v is False for v in ran):
        return False
    if not ran:
        return UNKNOWN
    return UNKNOWN if any(v == UNKNOWN for v in ran) else True


@dataclass
class CheckResult:
    name: str
    valid: Valid
    definition: str
    counts: dict[str, Any] = field(default_factory=dict)
    examples: list[dict[str, Any]] = field(default_factory=list)
    reason: str | None = None  # why "unknown", or a one-line summary of what failed
    parts: dict[str, Valid | None] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # sub-check -> missing input
    measurements: list[dict[str, Any]] = field(default_factory=list)  # e.g. takeover latencies
    error: str | None = None
    seconds: float = 0.0
    # a check that has nothing of this run to judge (its history is one the run never wrote) steps
    # aside: it leaves the verdict and is listed, with this reason, beside it (`checks_set_aside`)
    set_aside: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"valid": self.valid, "definition": self.definition, "counts": self.counts}
        if self.reason:
            out["reason"] = self.reason
        if self.parts:
            out["parts"] = self.parts
        if self.skipped:
            out["skipped"] = self.skipped
        out["examples"] = self.examples
        if self.measurements:
            out["measurements"] = self.measurements
        if self.error:
            out["error"] = self.error
        out["seconds"] = round(self.seconds, 3)
        return jsonable(out)


def unknown(name: str, definition: str, reason: str) -> CheckResult:
    return CheckResult(name=name, valid=UNKNOWN, definition=definition, reason=reason)


def set_aside(name: str, definition: str, reason: str) -> CheckResult:
    """A check stepping aside for this run (see `CheckResult.set_aside`): no part of the verdict."""
    return CheckResult(name=name, valid=True, definition=definition, reason=reason, set_aside=reason)


def check_safe(name: str, definition: str, fn: Callable[[], CheckResult]) -> CheckResult:
    """Run one check; an exception becomes {"valid": "unknown", "error": ...}."""
    try:
        return fn()
    except Exception as exc:  # a broken check must not hide the others
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        if os.environ.get("MQLAB_DEBUG"):
            detail += "\n" + traceback.format_exc()
        return CheckResult(name=name, valid=UNKNOWN, definition=definition, reason="the check raised",
                           error=detail[:4000])


@dataclass
class Verdict:
    valid: Valid
    checks: dict[str, CheckResult]
    suite: str | None = None
    seed: int | None = None
    run_dir: str | None = None
    info: dict[str, Any] = field(default_factory=dict)  # inputs, bounds, timings

    @classmethod
    def of(cls, checks: Iterable[CheckResult], **kwargs: Any) -> Verdict:
        by_name = {c.name: c for c in checks if c.set_aside is None}
        return cls(valid=worst(c.valid for c in by_name.values()), checks=by_name, **kwargs)

    @property
    def exit_code(self) -> int:
        return {True: EXIT_VALID, False: EXIT_INVALID}.get(self.valid, EXIT_UNKNOWN)  # type: ignore[call-overload]

    def to_json(self) -> dict[str, Any]:
        return jsonable({
            "valid": self.valid, "suite": self.suite, "seed": self.seed, "run_dir": self.run_dir,
            "checked_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "checks": {name: c.to_json() for name, c in self.checks.items()},
            **self.info,
        })

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2, sort_keys=False) + "\n")
        tmp.replace(path)
        return path


def jsonable(value: Any) -> Any:
    """Spark rows, numpy scalars, datetimes and NaN -> plain JSON values."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if hasattr(value, "asDict"):
        return jsonable(value.asDict(recursive=True))
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalar
        return jsonable(value.item())
    return str(value)
