"""The benchmark's numbers: measured cases, same-run limits, fractions, targets, the JSON shape.

Pure: no processes, no clock. The runner fills a `BenchReport`; `report_json` renders the
benchmark's shape (`{"results": [...], "limits": {...}, "machine": {...}}`, plus the run's
parameters and the target verdicts), and `evaluate_targets` judges it.

Which limit a case is a fraction of:
    pull (batch B)      the bare gRPC stream at batch B (same window, one stream message per pull)
    push                the bare gRPC stream at the push consumer's pull batch (32)
    send (mode M)       bare gRPC unary calls of mode M's shape, same request bytes: sync one
                        message per call; batch `send_batch` messages per call; async the
                        batches send_async coalesces under load (its count and byte caps, 4 in flight)
A pull or push case is also a fraction of the raw mmap scan of the commitlog.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

PUSH_PULL_BATCH = 32  # PushConsumer's default pull_batch_size (DefaultMQPushConsumer.pullBatchSize)

# The targets (benchmark, not tests)
PULL_TARGET_FRACTION = {32: 0.5, 1024: 0.7}  # single PullConsumer from the master, of the gRPC limit
SLAVE_WITHIN_FRACTION = 0.10  # a slave within 10% of the master
SEND_TARGET_MSGS_PER_S = 50_000.0  # one producer, send_batch or send_async

DEFAULT_SEND_BATCH = 100  # messages per send_batch call
# send_async coalesces what is submitted while batches are in flight: a window of 1024 lets
# the batches grow to the producer's batch cap, where a call's fixed cost is spread thin.
DEFAULT_SEND_WINDOW = 1024


@dataclass(frozen=True)
class Measured:
    """What a worker (or the sum of a case's workers) counted over its measuring window."""

    messages: int
    payload_bytes: int
    seconds: float
    errors: int = 0

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0


def best_window(parts: Iterable[tuple[list[int], float]], body_bytes: int, errors: int = 0) -> Measured:
    """Workers that ran side by side, each with its messages per window (windows of the same
    length, started together): sum the i-th windows across workers and keep the best sum.

    Parts whose window lengths differ (one-pass reads, push) cannot be lined up: their
    messages add up over the longest of their durations.
    """
    parts = [(list(windows), seconds) for windows, seconds in parts]
    if not parts:
        return Measured(0, 0, 0.0, errors)
    lengths = {seconds for _, seconds in parts}
    counts = {len(windows) for windows, _ in parts}
    if len(lengths) == 1 and len(counts) == 1:
        sums = [sum(windows[i] for windows, _ in parts) for i in range(counts.pop())]
        best = max(sums) if sums else 0
        return Measured(best, best * body_bytes, lengths.pop(), errors)
    messages = sum(sum(windows) for windows, _ in parts)
    return Measured(messages, messages * body_bytes, max(lengths), errors)


@dataclass(frozen=True)
class CaseResult:
    """One row of the results table; `client` is pull, push or send."""

    client: str
    source: str  # master | slave
    batch: int
    body_bytes: int
    consumers: int
    measured: Measured
    mode: str = ""  # send: sync | batch | async; pull: "" or first-read (one pass, cold); push: ""
    window: int = 0  # pulls (or async sends) in flight per process
    # CPU microseconds per message over the measuring windows, by process ("clients" is the
    # case's worker processes together): where a message's cost is paid.
    cpu_us_per_msg: dict[str, float] = field(default_factory=dict)

    @property
    def label(self) -> str:
        if self.client == "send":
            return f"send {self.mode} b{self.batch}"
        if self.client == "push":
            return f"push {self.source}"
        suffix = f" ({self.mode})" if self.mode else ""
        return f"pull {self.source} b{self.batch} x{self.consumers}{suffix}"


def cpu_per_message(cpu_s_by_process: dict[str, float | None], messages: int) -> dict[str, float]:
    """CPU microseconds per message of each process, from its CPU seconds over the windows in
    which `messages` completed; a process whose CPU is unknown is left out."""
    if messages <= 0:
        return {}
    return {name: round(cpu_s * 1e6 / messages, 1) for name, cpu_s in cpu_s_by_process.items() if cpu_s is not None}


@dataclass(frozen=True)
class StreamLimit:
    batch: int
    window: int
    measured: Measured


@dataclass(frozen=True)
class UnaryLimit:
    mode: str  # sync | batch | async
    batch: int
    window: int
    measured: Measured


@dataclass
class Limits:
    grpc_stream: dict[int, StreamLimit] = field(default_factory=dict)  # by batch
    grpc_unary: dict[str, UnaryLimit] = field(default_factory=dict)  # by send mode
    mmap_scan: Measured | None = None
    record_bytes: int = 0  # mean commitlog record size the limits stream

    def grpc_limit_for(self, case: CaseResult) -> float | None:
        """msgs/s of the gRPC limit `case` is compared with, None if it was not measured."""
        if case.client == "send":
            unary = self.grpc_unary.get(case.mode)
            return unary.measured.msgs_per_s if unary else None
        batch = PUSH_PULL_BATCH if case.client == "push" else case.batch
        stream = self.grpc_stream.get(batch)
        return stream.measured.msgs_per_s if stream else None

    def scan_limit_for(self, case: CaseResult) -> float | None:
        if case.client == "send" or self.mmap_scan is None:
            return None
        return self.mmap_scan.msgs_per_s


def fraction(value: float, limit: float | None) -> float | None:
    if not limit:
        return None
    return value / limit


@dataclass
class BenchReport:
    results: list[CaseResult] = field(default_factory=list)
    limits: Limits = field(default_factory=Limits)
    machine: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)  # the parameters the run used
    problems: list[str] = field(default_factory=list)  # cases that failed or counted errors

    def fraction_of_grpc_limit(self, case: CaseResult) -> float | None:
        return fraction(case.measured.msgs_per_s, self.limits.grpc_limit_for(case))

    def fraction_of_scan_limit(self, case: CaseResult) -> float | None:
        return fraction(case.measured.msgs_per_s, self.limits.scan_limit_for(case))

    def find(self, client: str, source: str = "master", batch: int | None = None, consumers: int = 1,
             mode: str = "") -> CaseResult | None:
        for case in self.results:
            if (case.client == client and case.source == source and case.consumers == consumers
                    and (batch is None or case.batch == batch) and case.mode == mode):
                return case
        return None


@dataclass(frozen=True)
class TargetVerdict:
    name: str
    met: bool | None  # None: the run did not measure what the target needs
    detail: str


def evaluate_targets(report: BenchReport) -> list[TargetVerdict]:
    """The targets against this run's numbers."""
    verdicts: list[TargetVerdict] = []
    for batch, wanted in PULL_TARGET_FRACTION.items():
        name = f"pull master b{batch} x1 >= {wanted:.0%} of gRPC limit"
        case = report.find("pull", "master", batch)
        got = report.fraction_of_grpc_limit(case) if case else None
        if got is None:
            verdicts.append(TargetVerdict(name, None, "not measured"))
        else:
            verdicts.append(TargetVerdict(name, got >= wanted, f"{got:.0%} ({case.measured.msgs_per_s:,.0f} msgs/s)"))
    for case in report.results:
        if case.client != "pull" or case.source != "slave" or case.mode:
            continue
        master = report.find("pull", "master", case.batch, case.consumers)
        name = f"pull slave b{case.batch} x{case.consumers} within {SLAVE_WITHIN_FRACTION:.0%} of master"
        if master is None or not master.measured.msgs_per_s:
            verdicts.append(TargetVerdict(name, None, "master not measured"))
            continue
        ratio = case.measured.msgs_per_s / master.measured.msgs_per_s
        verdicts.append(TargetVerdict(name, ratio >= 1 - SLAVE_WITHIN_FRACTION, f"{ratio:.0%} of master"))
    sends = [c for c in report.results if c.client == "send" and c.mode in ("batch", "async")]
    name = f"one producer, send_batch or send_async >= {SEND_TARGET_MSGS_PER_S:,.0f} msgs/s"
    if not sends:
        verdicts.append(TargetVerdict(name, None, "not measured"))
    else:
        best = max(sends, key=lambda c: c.measured.msgs_per_s)
        verdicts.append(TargetVerdict(name, best.measured.msgs_per_s >= SEND_TARGET_MSGS_PER_S,
                                      f"best {best.label}: {best.measured.msgs_per_s:,.0f} msgs/s"))
    return verdicts


def _rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _measured_json(m: Measured) -> dict[str, Any]:
    return {"msgs_per_s": round(m.msgs_per_s, 1), "mb_per_s": round(m.mb_per_s, 3), "messages": m.messages,
            "seconds": round(m.seconds, 3)}


def result_json(report: BenchReport, case: CaseResult) -> dict[str, Any]:
    """One entry of "results": the documented keys first, then what tells the rows apart."""
    return {
        "client": case.client,
        "source": case.source,
        "batch": case.batch,
        "body_bytes": case.body_bytes,
        "consumers": case.consumers,
        "msgs_per_s": round(case.measured.msgs_per_s, 1),
        "mb_per_s": round(case.measured.mb_per_s, 3),
        "fraction_of_grpc_limit": _rounded(report.fraction_of_grpc_limit(case)),
        "fraction_of_scan_limit": _rounded(report.fraction_of_scan_limit(case)),
        "mode": case.mode or case.client,
        "window": case.window,
        "messages": case.measured.messages,
        "seconds": round(case.measured.seconds, 3),
        "errors": case.measured.errors,
        "cpu_us_per_msg": dict(case.cpu_us_per_msg),
    }


def report_json(report: BenchReport) -> dict[str, Any]:
    limits = report.limits
    return {
        "results": [result_json(report, case) for case in report.results],
        "limits": {
            "grpc_stream": [{"batch": s.batch, "window": s.window, **_measured_json(s.measured)}
                            for s in sorted(limits.grpc_stream.values(), key=lambda s: s.batch)],
            "grpc_unary": [{"mode": u.mode, "batch": u.batch, "window": u.window, **_measured_json(u.measured)}
                           for u in limits.grpc_unary.values()],
            "mmap_scan": _measured_json(limits.mmap_scan) if limits.mmap_scan else None,
            "record_bytes": limits.record_bytes,
        },
        "machine": dict(report.machine),
        "run": dict(report.run),
        "targets": [asdict(v) for v in evaluate_targets(report)],
        "problems": list(report.problems),
    }
