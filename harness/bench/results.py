"""The benchmark's numbers: measured cases, same-run references, ratios, targets, the JSON shape.

Pure: no processes, no clock. The runner fills a `BenchReport`; `report_json` renders it and
`evaluate_targets` judges it.

A case or reference counts its messages in back-to-back windows; the figure is the **median**
window (what a user sees most of the time), with the slowest and fastest window as its spread.

A run of several rounds (`--rounds`) measures the whole matrix again each round. A ratio
compares a case with a reference measured a minute or two earlier in the same round; the
machine's speed moves both together within a round and by tens of percent between rounds. So
with rounds every ratio, and every target, is the median of the per-round ratios (each round's
case over that round's reference), and a row's figure is its median round's.

Which references a case is a ratio of (all measured in the same run, same body size):
    consumer cases      (pull, pull-loop, push at pull batch B)
                        plain-stream bB (a bare grpc server stream of the same record bytes, the
                        client taking every message as bytes), redis-ack bB (XREADGROUP + XACK),
                        redis-noack bB (XREADGROUP NOACK), tcp (loopback socket), mmap-scan
    send cases          (send_batch bB; send_async: its coalesced batch; sync: b1)
                        plain-stream-publish bB (the same B bodies as one round trip at a time
                        on a bare grpc stream-stream call: the wire mqlab's send stream uses),
                        plain-unary bB (bare grpc unary calls carrying the same B bodies),
                        redis-xadd bB (pipelined XADD of B entries), redis-xadd-replicated bB
                        (the same to a master with a replica attached: mqlab's master has its
                        slave), redis-xadd-wait bB (that, then WAIT 1: answered once the replica
                        has it, as a SYNC_MASTER answers), mmap-append (records
                        copied into a fresh file through a shared mapping: storing each
                        message's bytes once, which the master and the slave each do)
    real clients' rows  (--clients; client "cpp-send", "ons-push"...) those of mqlab's row of the
                        same kind; they have no targets. The RocketMQ 5 client's SimpleConsumer
                        row ("py5-simple": receive of 32, an ack per message) is judged as a
                        consumer row of its batch, as mqlab's pull rows of batch 32 are
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

PUSH_PULL_BATCH = 32  # PushConsumer's default pull_batch_size (DefaultMQPushConsumer.pullBatchSize)
PULL_LOOP_BATCH = 32  # the plain PullConsumer.pull loop: max_nums of each call

# The targets (benchmark, not tests)
SLAVE_WITHIN_FRACTION = 0.10  # a slave within 10% of the master
ASYNC_OF_BEST_BATCH = 0.8  # send_async with a window, of the best send_batch
SYNC_OF_STREAM_PUBLISH = 0.8  # one-message sends, of the gRPC round trip that carries them
SYNC_OF_REPLICATED_XADD = 0.5  # one-message sends (mqlab's and the C++ client's), of one XADD at a time
SYNC_OF_XADD_WAIT = 0.8  # SYNC_MASTER one-message sends, of XADD + WAIT 1
BATCH_OF_REPLICATED_XADD = 1.0  # send_batch of B, of B XADDs pipelined to a replicated master

DEFAULT_SEND_BATCHES = (32, 1024)  # messages per send_batch call
# send_async coalesces what is submitted while batches are in flight: a window of 1024 lets
# the batches grow to the producer's batch cap, where a call's fixed cost is spread thin.
DEFAULT_SEND_WINDOW = 1024

CONSUMER_CLIENTS = ("pull", "pull-loop", "push")
# Real RocketMQ clients measured beside mqlab's own (`--clients`): a row's client is
# "<library>-<kind>", e.g. "cpp-send", "ons-push", "cpp-pull-loop", "py5-simple"; mqlab's own rows
# keep the bare kind.
REAL_CLIENTS = ("cpp", "ons", "py5")
REAL_CLIENT_TITLES = {"cpp": "Apache's C++ client 1.2.3 (PyPI rocketmq 0.4.4)", "ons": "ali-ons 3.12.0 (node)",
                      "py5": "Apache's Python client 5.1.2 (RocketMQ 5 gRPC, .venv-py5)"}
# Consumer kinds only a real client has: a RocketMQ 5 SimpleConsumer (receive a batch, ack each)
REAL_CONSUMER_KINDS = ("simple",)
CONSUMER_REFERENCES = ("plain-stream", "redis-ack", "redis-noack", "tcp", "mmap-scan")
SEND_REFERENCES = ("plain-stream-publish", "plain-unary", "redis-xadd", "redis-xadd-replicated", "redis-xadd-wait",
                   "mmap-append")
REFERENCE_TITLES = {
    "plain-stream": "plain grpc server stream of the record bytes, every message taken as bytes",
    "plain-unary": "plain grpc unary publish of the same bodies",
    "plain-stream-publish": "plain grpc stream publish of the same bodies, one round trip at a time",
    "grpc-stream": "mqlab's Pull stream shape, canned records, record count only (transport-only)",
    "tcp": "loopback TCP, one socket, record-sized units",
    "mmap-scan": "mmap scan of the master's commitlog, each record copied out",
    "mmap-append": "records appended into a fresh file through a shared mapping, 32 per copy",
    "redis-ack": "Redis Streams XREADGROUP + XACK",
    "redis-noack": "Redis Streams XREADGROUP NOACK",
    "redis-xadd": "Redis Streams pipelined XADD",
    "redis-xadd-replicated": "Redis Streams pipelined XADD, a replica attached (asynchronous, as ASYNC_MASTER)",
    "redis-xadd-wait": "Redis Streams pipelined XADD, then WAIT 1 (a replica has it, as SYNC_MASTER)",
}


@dataclass(frozen=True)
class Measured:
    """What a worker (or the sum of a case's workers) counted in its median window, with the
    slowest and fastest window's rates as its spread (None: a single window)."""

    messages: int
    payload_bytes: int
    seconds: float
    errors: int = 0
    low_msgs_per_s: float | None = None
    high_msgs_per_s: float | None = None

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    @property
    def spread(self) -> tuple[float, float]:
        """(slowest, fastest) window in msgs/s; the figure itself when there was one window."""
        rate = self.msgs_per_s
        return (rate if self.low_msgs_per_s is None else self.low_msgs_per_s,
                rate if self.high_msgs_per_s is None else self.high_msgs_per_s)


def client_kind(client: str) -> tuple[str, str]:
    """(library, kind) of a row's client: ("mqlab", "push"), ("cpp", "send"), ("ons", "push")."""
    library, sep, kind = client.partition("-")
    if sep and library in REAL_CLIENTS:
        return library, kind
    return "mqlab", client


def median_window(parts: Iterable[tuple[list[int], float]], body_bytes: int, errors: int = 0) -> Measured:
    """Workers that ran side by side, each with its messages per window (windows of the same
    length, started together): sum the i-th windows across workers and keep the median sum
    (the lower middle one of an even count, so it is a window that happened), with the
    slowest and fastest sums as the spread.

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
        seconds = lengths.pop()
        if not sums:
            return Measured(0, 0, seconds, errors)
        middle = statistics.median_low(sums)
        low = high = None
        if len(sums) > 1 and seconds > 0:
            low, high = min(sums) / seconds, max(sums) / seconds
        return Measured(middle, middle * body_bytes, seconds, errors, low, high)
    messages = sum(sum(windows) for windows, _ in parts)
    return Measured(messages, messages * body_bytes, max(lengths), errors)


@dataclass(frozen=True)
class CaseResult:
    """One row of the results table; `client` is pull, pull-loop, push or send (a real client's:
    "<library>-<kind>", see REAL_CLIENTS)."""

    client: str
    source: str  # master | slave
    batch: int
    body_bytes: int
    consumers: int
    measured: Measured
    mode: str = ""  # send: sync | batch | async; pull: "" or first-read (one pass, cold)
    window: int = 0  # pulls (or async sends) in flight per process
    # CPU microseconds per message over the measuring windows, by process ("clients" is the
    # case's worker processes together): where a message's cost is paid.
    cpu_us_per_msg: dict[str, float] = field(default_factory=dict)
    # send_async: the batch it coalesces into under load (what its references are measured at)
    reference_batch: int = 0

    @property
    def label(self) -> str:
        library, kind = client_kind(self.client)
        if library != "mqlab":
            return f"{library} " + dataclasses.replace(self, client=kind).label
        if self.client == "send":
            return f"send {self.mode} b{self.batch}"
        if self.client == "push":
            return f"push {self.source} b{self.batch}"
        if self.client == "pull-loop":
            return f"pull loop {self.source} b{self.batch}"
        if self.client == "simple":
            return f"simple {self.source} b{self.batch}"
        suffix = f" ({self.mode})" if self.mode else ""
        return f"pull {self.source} b{self.batch} x{self.consumers}{suffix}"


def cpu_per_message(cpu_s_by_process: dict[str, float | None], messages: int) -> dict[str, float]:
    """CPU microseconds per message of each process, from its CPU seconds over the windows in
    which `messages` completed; a process whose CPU is unknown is left out."""
    if messages <= 0:
        return {}
    return {name: round(cpu_s * 1e6 / messages, 1) for name, cpu_s in cpu_s_by_process.items() if cpu_s is not None}


@dataclass(frozen=True)
class Reference:
    """A same-run reference: `kind` (see REFERENCE_TITLES) at `batch` (0: none), `window` in flight."""

    kind: str
    batch: int
    window: int
    measured: Measured
    cpu_us_per_msg: dict[str, float] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return reference_key(self.kind, self.batch)


def reference_key(kind: str, batch: int = 0) -> str:
    return f"{kind} b{batch}" if batch else kind


def case_reference_keys(case: CaseResult) -> dict[str, str]:
    """The references `case` is a ratio of: {kind: reference key} (a real client's row: those
    of mqlab's row of the same kind)."""
    row_kind = client_kind(case.client)[1]
    if row_kind == "send":
        kinds, batch = SEND_REFERENCES, case.reference_batch or case.batch
    elif row_kind in CONSUMER_CLIENTS or row_kind in REAL_CONSUMER_KINDS:
        kinds, batch = CONSUMER_REFERENCES, case.batch
    else:
        return {}
    # the physical ceilings (tcp, the mmap scan and append) are measured once, not per batch
    return {kind: reference_key(kind, batch if kind.startswith(("plain", "redis")) else 0) for kind in kinds}


@dataclass
class BenchReport:
    results: list[CaseResult] = field(default_factory=list)
    references: dict[str, Reference] = field(default_factory=dict)  # by key
    record_bytes: int = 0  # mean commitlog record size (what the plain stream carries)
    machine: dict[str, Any] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)  # the parameters the run used
    problems: list[str] = field(default_factory=list)  # cases that failed or counted errors
    rounds: list[BenchReport] = field(default_factory=list)  # each round's own report (--rounds > 1)

    def add_reference(self, ref: Reference) -> None:
        self.references[ref.key] = ref

    def ratios(self, case: CaseResult) -> dict[str, float | None]:
        """msgs/s of `case` over each of its references' ({kind: ratio}; None: not measured);
        with rounds, the median of the ratios of the rounds that measured both."""
        if len(self.rounds) > 1:
            per_round = [r.ratios(found) for r in self.rounds if (found := r.find_label(case.label)) is not None]
            return {kind: median_ratio([ratios.get(kind) for ratios in per_round])
                    for kind in case_reference_keys(case)}
        out: dict[str, float | None] = {}
        for kind, key in case_reference_keys(case).items():
            ref = self.references.get(key)
            rate = ref.measured.msgs_per_s if ref is not None else 0.0
            out[kind] = case.measured.msgs_per_s / rate if rate else None
        return out

    def find_label(self, label: str) -> CaseResult | None:
        return next((case for case in self.results if case.label == label), None)

    def find(self, client: str, source: str = "master", batch: int | None = None, consumers: int = 1,
             mode: str = "") -> CaseResult | None:
        for case in self.results:
            if (case.client == client and case.source == source and case.consumers == consumers
                    and (batch is None or case.batch == batch) and case.mode == mode):
                return case
        return None


def median_ratio(values: Iterable[float | None]) -> float | None:
    """The median of the measured values (the lower middle one of an even count, so it is a
    round that happened); None when none was measured."""
    measured = [v for v in values if v is not None]
    return statistics.median_low(measured) if measured else None


@dataclass(frozen=True)
class TargetVerdict:
    name: str
    met: bool | None  # None: the run did not measure what the target needs
    detail: str
    ratio: float | None = None  # what was judged (a share for "within" targets)
    wanted: float | None = None  # the least ratio that meets the target
    round_ratios: tuple[float | None, ...] = ()  # with rounds: each round's ratio, in order
    share: bool = False  # the ratio reads as a percentage (a slave's share of its master's rate)
    every_round: bool = False  # with rounds: met only when every round's ratio is (not their median)

    def ratio_text(self, ratio: float) -> str:
        return f"{ratio:.0%}" if self.share else f"{ratio:.2f}x"


def _ratio_verdict(report: BenchReport, name: str, case: CaseResult | None, kind: str,
                   wanted: float) -> TargetVerdict:
    if case is None:
        return TargetVerdict(name, None, "case not measured", wanted=wanted)
    got = report.ratios(case).get(kind)
    if got is None:
        hint = " (add --peers redis)" if kind.startswith("redis") else ""
        return TargetVerdict(name, None, f"{kind} not measured{hint}", wanted=wanted)
    ref = report.references[case_reference_keys(case)[kind]]
    return TargetVerdict(name, got >= wanted, f"{got:.2f}x ({case.measured.msgs_per_s:,.0f} vs "
                                              f"{ref.measured.msgs_per_s:,.0f} msgs/s)", got, wanted)


def evaluate_targets(report: BenchReport) -> list[TargetVerdict]:
    """The targets against this run's numbers (1 KiB bodies, one consumer or producer); with
    rounds, each target on the median of its per-round ratios (or on every round's)."""
    mode = report.run.get("mode", "async")
    if len(report.rounds) > 1:
        return _median_verdicts([_evaluate_round(r, mode) for r in report.rounds])
    return _evaluate_round(report, mode)


def _median_verdicts(per_round: list[list[TargetVerdict]]) -> list[TargetVerdict]:
    """One verdict per target named in any round: met when the median of the rounds' ratios is."""
    by_name: dict[str, list[TargetVerdict | None]] = {}
    for i, verdicts in enumerate(per_round):
        for verdict in verdicts:
            by_name.setdefault(verdict.name, [None] * len(per_round))[i] = verdict
    out: list[TargetVerdict] = []
    for verdicts in by_name.values():
        some = next(v for v in verdicts if v is not None)
        ratios = tuple(v.ratio if v is not None else None for v in verdicts)
        got = median_ratio(ratios)
        if got is None or some.wanted is None:
            out.append(dataclasses.replace(some, met=None, detail=f"{some.detail} (in every round)", ratio=None,
                                           round_ratios=ratios))
            continue
        each = " / ".join("-" if r is None else some.ratio_text(r) for r in ratios)
        if some.every_round:
            lowest = min(r for r in ratios if r is not None)
            met = None not in ratios and lowest >= some.wanted
            out.append(dataclasses.replace(some, met=met, ratio=lowest, round_ratios=ratios,
                                           detail=f"{some.ratio_text(lowest)}: the lowest of the rounds' {each}"))
            continue
        out.append(dataclasses.replace(some, met=got >= some.wanted, ratio=got, round_ratios=ratios,
                                       detail=f"{some.ratio_text(got)}: median of the rounds' {each}"))
    return out


def _evaluate_round(report: BenchReport, mode: str = "async") -> list[TargetVerdict]:
    """One round's verdicts. `mode` "sync-master": a send is answered once the slave has it, so
    its Redis peer is XADD + WAIT 1, and the unreplicated gRPC round trip is no floor of it."""
    verdicts: list[TargetVerdict] = []
    batches = sorted({c.batch for c in report.results if c.client == "pull" and not c.mode}) or [32, 1024]
    for batch in batches:
        case = report.find("pull", "master", batch)
        verdicts.append(_ratio_verdict(report, f"pull master b{batch} x1 >= 1.0x redis-ack b{batch}",
                                       case, "redis-ack", 1.0))
        plain = 0.5 if batch <= 32 else 0.4
        verdicts.append(_ratio_verdict(report, f"pull master b{batch} x1 >= {plain:.1f}x plain-stream b{batch}",
                                       case, "plain-stream", plain))
    for case in report.results:
        if case.client != "pull" or case.source != "slave" or case.mode:
            continue
        master = report.find("pull", "master", case.batch, case.consumers)
        name = f"pull slave b{case.batch} x{case.consumers} within {SLAVE_WITHIN_FRACTION:.0%} of master"
        wanted = 1 - SLAVE_WITHIN_FRACTION
        if master is None or not master.measured.msgs_per_s:
            verdicts.append(TargetVerdict(name, None, "master not measured", wanted=wanted, share=True))
            continue
        ratio = case.measured.msgs_per_s / master.measured.msgs_per_s
        verdicts.append(TargetVerdict(name, ratio >= wanted, f"{ratio:.0%} of master", ratio, wanted, share=True))
    verdicts.append(dataclasses.replace(
        _ratio_verdict(report, f"push b{PUSH_PULL_BATCH} >= 1.0x redis-ack b{PUSH_PULL_BATCH} in every round",
                       report.find("push", "master"), "redis-ack", 1.0), every_round=True))
    verdicts.append(_ratio_verdict(report, f"pull loop b{PULL_LOOP_BATCH} >= 0.5x redis-ack b{PULL_LOOP_BATCH}",
                                   report.find("pull-loop", "master"), "redis-ack", 0.5))
    replicated = "redis-xadd-wait" if mode == "sync-master" else "redis-xadd-replicated"
    sync_case = report.find("send", mode="sync")
    if mode == "sync-master":
        verdicts.append(_ratio_verdict(report, f"send sync b1 >= {SYNC_OF_XADD_WAIT:.1f}x redis-xadd-wait b1",
                                       sync_case, "redis-xadd-wait", SYNC_OF_XADD_WAIT))
    else:
        verdicts.append(_ratio_verdict(
            report, f"send sync b1 >= {SYNC_OF_STREAM_PUBLISH:.1f}x plain-stream-publish b1",
            sync_case, "plain-stream-publish", SYNC_OF_STREAM_PUBLISH))
        verdicts.append(_ratio_verdict(
            report, f"send sync b1 >= {SYNC_OF_REPLICATED_XADD:.1f}x redis-xadd-replicated b1",
            sync_case, "redis-xadd-replicated", SYNC_OF_REPLICATED_XADD))
    cpp_sync = report.find("cpp-send", mode="sync")
    if cpp_sync is not None:  # with --clients cpp
        verdicts.append(_ratio_verdict(report, f"cpp send sync b1 >= {SYNC_OF_REPLICATED_XADD:.1f}x {replicated} b1",
                                       cpp_sync, replicated, SYNC_OF_REPLICATED_XADD))
    batch_sends = [c for c in report.results if c.client == "send" and c.mode == "batch"]
    for case in batch_sends:
        verdicts.append(_ratio_verdict(
            report, f"send_batch b{case.batch} >= {BATCH_OF_REPLICATED_XADD:.1f}x {replicated} b{case.batch}",
            case, replicated, BATCH_OF_REPLICATED_XADD))
    name = f"send_async >= {ASYNC_OF_BEST_BATCH:.1f}x the best send_batch"
    async_case = report.find("send", mode="async")
    if async_case is None or not batch_sends:
        verdicts.append(TargetVerdict(name, None, "not measured", wanted=ASYNC_OF_BEST_BATCH))
    else:
        best = max(batch_sends, key=lambda c: c.measured.msgs_per_s)
        ratio = async_case.measured.msgs_per_s / best.measured.msgs_per_s if best.measured.msgs_per_s else 0.0
        verdicts.append(TargetVerdict(name, ratio >= ASYNC_OF_BEST_BATCH,
                                      f"{ratio:.2f}x ({async_case.measured.msgs_per_s:,.0f} vs {best.label} "
                                      f"{best.measured.msgs_per_s:,.0f} msgs/s)", ratio, ASYNC_OF_BEST_BATCH))
    return verdicts


def combine_rounds(rounds: list[BenchReport]) -> BenchReport:
    """The report of a run of several rounds: each row and reference from its median round (by
    msgs/s), rows in the order they were first measured (a first read is measured in the first
    round only), ratios and targets from `rounds` (kept on the report). Machine, run and
    problems are the caller's to set."""
    labels = list(dict.fromkeys(case.label for r in rounds for case in r.results))
    keys = list(dict.fromkeys(key for r in rounds for key in r.references))
    combined = BenchReport(record_bytes=next((r.record_bytes for r in rounds if r.record_bytes), 0),
                           rounds=list(rounds))
    for label in labels:
        found = [case for r in rounds if (case := r.find_label(label)) is not None]
        combined.results.append(_median_of(found, lambda case: case.measured.msgs_per_s))
    for key in keys:
        refs = [r.references[key] for r in rounds if key in r.references]
        combined.add_reference(_median_of(refs, lambda ref: ref.measured.msgs_per_s))
    return combined


def _median_of(items: list[Any], rate: Any) -> Any:
    ordered = sorted(items, key=rate)
    return ordered[(len(ordered) - 1) // 2]  # the lower middle one, as median_low


def _rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def _measured_json(m: Measured) -> dict[str, Any]:
    low, high = m.spread
    return {"msgs_per_s": round(m.msgs_per_s, 1), "msgs_per_s_min": round(low, 1), "msgs_per_s_max": round(high, 1),
            "mb_per_s": round(m.mb_per_s, 3), "messages": m.messages, "seconds": round(m.seconds, 3),
            "errors": m.errors}


def result_json(report: BenchReport, case: CaseResult) -> dict[str, Any]:
    """One entry of "results": what tells the rows apart, the median and spread, the ratios."""
    return {
        "client": case.client,
        "source": case.source,
        "batch": case.batch,
        "body_bytes": case.body_bytes,
        "consumers": case.consumers,
        **_measured_json(case.measured),
        "ratios": {kind: _rounded(value) for kind, value in report.ratios(case).items()},
        "mode": case.mode or client_kind(case.client)[1],
        "window": case.window,
        "cpu_us_per_msg": dict(case.cpu_us_per_msg),
        "library": client_kind(case.client)[0],  # mqlab, or the real client (--clients)
    }


def report_json(report: BenchReport) -> dict[str, Any]:
    rounds = [{"results": [result_json(r, case) for case in r.results],
               "references": [_reference_json(ref) for ref in r.references.values()],
               "targets": [asdict(v) for v in _evaluate_round(r)], "problems": list(r.problems)}
              for r in report.rounds] if len(report.rounds) > 1 else []
    return {
        "results": [result_json(report, case) for case in report.results],
        "references": [_reference_json(ref) for ref in report.references.values()],
        "record_bytes": report.record_bytes,
        "machine": dict(report.machine),
        "run": dict(report.run),
        "targets": [asdict(v) for v in evaluate_targets(report)],
        "problems": list(report.problems),
        "rounds": rounds,
    }


def _reference_json(ref: Reference) -> dict[str, Any]:
    return {"kind": ref.kind, "batch": ref.batch, "window": ref.window, **_measured_json(ref.measured),
            "cpu_us_per_msg": dict(ref.cpu_us_per_msg)}
