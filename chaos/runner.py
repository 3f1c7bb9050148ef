"""One chaos run, start to verdict: fresh cluster, workload, seeded faults, heal, drain, check.

Phases (each shown live and recorded in `run.json`): start the cluster with link proxies,
create the topic, start the producer workload, warm up until consumers deliver, play the
seeded schedule (it ends with heal-and-recover),
stop sending, drain until every acknowledged send is delivered or the drain bound passes,
let offsets converge, stop everything, check.

Whatever happens — an exception, Ctrl-C, a failed start — every fault is undone, the
producer stops, and every node process is stopped and reaped before this returns: a run
never leaves a process or a port behind (`LocalCluster.close` raises if a pid survives).

The run dir holds: `run.json` (suite, seed, time scale, options, phases), `timing.json`,
`bounds.json` (the derived bounds table, also printed at the start), `schedule.json`
(replayable), `cluster.json`, one directory per node with its histories, `nemesis/`,
`processes/`, and after the check `verdict.json` and `report.html`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import random
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from chaos.bounds import (
    Bounds,
    check_ratios,
    derive_bounds,
    real_client_fault_phase_ms,
    real_client_fault_spacing_ms,
    real_client_run_ms,
)
from chaos.judge import CheckerProcess, judge
from chaos.nemesis import NemesisRunner
from chaos.progress import Progress, RunStatus
from chaos.readback import Replica, read_back
from chaos.real_clients import MQLAB, checks_added, checks_set_aside, is_mixed, real_client, spec_for, wire
from chaos.run_setup import create_topic, make_group_fifo
from chaos.schedule import Schedule, format_schedule, generate_schedule, play
from chaos.skew import unsafe_skews
from chaos.suites import GROUP, PRODUCER_NODE, QUEUES, TOPIC, Suite
from chaos.topology import place_schedule
from chaos.workload import DeliveryTally, ProducerWorkload, ProducerWorkloadConfig
from harness import LocalCluster
from harness.pids import signal_name
from harness.run_dir import make_run_dir
from harness.topology import DEFAULT_TOPOLOGY, broker_groups
from nodes.common import constants as c
from nodes.common.clock import SYSTEM_CLOCK

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from chaos.checker.pipeline import CheckOutput

EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_INTERRUPTED = 0, 1, 2, 130
RUN_JSON, TIMING_JSON, BOUNDS_JSON, SCHEDULE_JSON = "run.json", "timing.json", "bounds.json", "schedule.json"
PROCESSES_FILE = Path("processes") / "processes.jsonl"
CLIENT_LOG_NAME = "harness-clients.log"  # what the in-harness clients log
TICK_S = 0.25  # progress refresh
UNIT_TIME_SCALE = 1.0  # timer units are the ms of an unscaled run
DRAIN_STALLS_MAX = 10  # a drain that keeps delivering may take this many drain bounds


@dataclass(frozen=True)
class RunOptions:
    suite: Suite
    seed: int = 0
    time_scale: float = 0.05
    duration_s: float | None = None  # the fault phase; None: the suite's default
    out_dir: Path | None = None
    fault_switches: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # tests only
    check: bool = True
    report: bool = True
    spark_master: str | None = None
    spark: SparkSession | None = None  # reuse a running session (tests)
    checker: CheckerProcess | None = None  # judge in this kept checker process (matrix, selftest); None: a fresh one
    schedule_file: Path | None = None  # replay this schedule instead of drawing one
    mode: str | None = None  # durability mode (chaos.suites.MODES); None: the suite's default
    checks: tuple[str, ...] | None = None  # judge only these of the suite's checks (tests); None: all
    topology: str = DEFAULT_TOPOLOGY  # harness.topology.TOPOLOGIES
    client: str = MQLAB  # the consumers: mqlab's own, or a real RocketMQ client (chaos.real_clients)

    @property
    def checks_set_aside(self) -> dict[str, str]:
        """The suite's checks this run's consumers cannot feed, with why (chaos.real_clients)."""
        return checks_set_aside(self.suite.checks, self.client)

    @property
    def checks_added(self) -> tuple[str, ...]:
        """Checks this run's consumers bring beyond the suite's (a POP client's, chaos.real_clients)."""
        return checks_added(self.client, self.suite.orderly)

    @property
    def suite_check_names(self) -> tuple[str, ...]:
        """The suite's checks less those set aside, and those the consumers add: what a whole judgement
        of the run runs."""
        return tuple(n for n in self.suite.checks if n not in self.checks_set_aside) + self.checks_added

    @property
    def check_names(self) -> tuple[str, ...]:
        if self.checks is None:
            return self.suite_check_names
        known = (*self.suite.checks, *self.checks_added)
        unknown = sorted(set(self.checks) - set(known))
        if unknown:
            raise ValueError(f"suite {self.suite.name} has no check {', '.join(unknown)}; "
                             f"its checks are {', '.join(known)}")
        return self.checks

    @property
    def mode_name(self) -> str:
        return self.mode or self.suite.default_mode


@dataclass
class RunOutcome:
    run_dir: Path
    exit_code: int
    status: RunStatus
    check: CheckOutput | None = None
    error: str | None = None
    phases: dict[str, float] = field(default_factory=dict)


def bounds_table(bounds: Bounds, title: str) -> Table:
    table = Table(title=title)
    for col in ("bound", "ms", "formula"):
        table.add_column(col, justify="right" if col == "ms" else "left")
    for name, value_ms, formula in bounds.as_rows():
        table.add_row(name, f"{value_ms:,}", formula)
    return table


def run_spec(options: RunOptions, fault_switches: Mapping[str, tuple[str, ...]] | None = None) -> Any:
    """The suite's cluster; with a real client, at real scale with the client's timers."""
    spec = options.suite.spec(options.time_scale, fault_switches, mode=options.mode, topology=options.topology)
    client = real_client(options.client)
    if client is not None:
        client.check_suite(options.suite.name, options.suite.orderly, options.topology)
        spec = spec_for(spec, client)
    return spec


def plan(options: RunOptions) -> tuple[Schedule, Bounds]:
    """The schedule and bounds a run would use (also what `--dry-run` prints)."""
    suite = options.suite
    if options.topology not in suite.topologies:
        raise ValueError(f"suite {suite.name} runs on {', '.join(suite.topologies)} only, not {options.topology}")
    spec = run_spec(options)
    bounds = derive_bounds(spec.scaled_timing())
    if options.schedule_file is not None:
        schedule = Schedule.from_json(json.loads(Path(options.schedule_file).read_text()))
        return schedule, bounds
    if real_client(options.client) is not None:
        # real scale: timer units are the run's own ms; a short phase keeps the run to minutes
        phase_ms = round(options.duration_s * 1000) if options.duration_s is not None else \
            real_client_fault_phase_ms(bounds)
        return generate_schedule(suite, bounds, seed=options.seed, duration_ms=phase_ms,
                                 spacing_ms=real_client_fault_spacing_ms(bounds)), bounds
    # draws are made in timer units (the bounds at time scale 1): a seed is the same run at every scale
    unit_bounds = derive_bounds(suite.spec(UNIT_TIME_SCALE).scaled_timing())
    if options.duration_s is not None:
        duration_ms, unit_duration_ms = round(options.duration_s * 1000), None
    else:
        duration_ms, unit_duration_ms = suite.fault_phase_ms(bounds), suite.fault_phase_ms(unit_bounds)
    schedule = generate_schedule(suite, bounds, seed=options.seed, duration_ms=duration_ms, unit_bounds=unit_bounds,
                                 unit_duration_ms=unit_duration_ms, spacing_ms=suite.fault_spacing_ms(bounds),
                                 lead=suite.lead_for(options.mode_name))
    # several broker groups: each fault pinned to one, drawn from the seed (one group: unchanged)
    return place_schedule(schedule, broker_groups(spec), options.seed, len(spec.namesrv_nodes())), bounds


def show_plan(console: Console, options: RunOptions, schedule: Schedule, bounds: Bounds) -> None:
    """The derived bounds table, any broken timer ratio, and the schedule (also `--dry-run`'s output)."""
    spec = run_spec(options)
    console.print(bounds_table(bounds, f"derived bounds at time scale {spec.time_scale}"))
    for warning in check_ratios(spec.scaled_timing()):
        console.print(f"[yellow]warning:[/] {warning}")
    console.print(format_schedule(schedule))
    for expected in unsafe_skews((e.op for e in schedule.entries), bounds):
        console.print(f"[yellow]expected violation:[/] {expected}")
    if real_client(options.client) is not None:
        typical_ms, most_ms = real_client_run_ms(bounds, schedule.fault_phase_ms)
        who = f"the real {options.client.removesuffix('+' + MQLAB)} client" + \
            (" and mqlab's, in one group" if is_mixed(options.client) else "")
        console.print(f"[bold]consumers: {who}[/]; its timers cannot be scaled, so every "
                      f"timer runs at real scale: this run takes about {typical_ms / 60_000:.0f} min "
                      f"(at most {most_ms / 60_000:.0f} min)")


class ChaosRun:
    def __init__(self, options: RunOptions, console: Console | None = None) -> None:
        self.options = options
        self.suite = options.suite
        self.console = console or Console(highlight=False)
        self.status = RunStatus(suite=self.suite.name, seed=options.seed)
        self.phases: dict[str, float] = {}
        self._t0 = time.monotonic()
        self._interrupted = threading.Event()
        self._fault_phase_s: float | None = None
        self.run_dir = make_run_dir(options.out_dir if options.out_dir is not None else _default_out(options))

    # ---- the whole run ------------------------------------------------------------

    def execute(self) -> RunOutcome:
        unknown = sorted(set(self.options.fault_switches.get("producer", ())) - set(c.PRODUCER_FAULT_SWITCHES))
        if unknown:
            raise ValueError(f"unknown producer fault switches {unknown}; known: {', '.join(c.PRODUCER_FAULT_SWITCHES)}")
        schedule, bounds = plan(self.options)
        self._fault_phase_s = schedule.fault_phase_ms / 1000
        spec = run_spec(self.options, self.options.fault_switches)
        timing = spec.scaled_timing()
        self._write_plan(schedule, bounds, timing)
        show_plan(self.console, self.options, schedule, bounds)
        outcome = RunOutcome(self.run_dir, EXIT_UNKNOWN, self.status)
        with self._sigint_as_event():
            try:
                self._run_cluster(spec, schedule, bounds)
            except KeyboardInterrupt:
                self._interrupted.set()
            except Exception as exc:  # the run could not complete: report, never hide
                outcome.error = f"{type(exc).__name__}: {exc}"
        self._write_run_json(outcome)
        if self._interrupted.is_set():
            outcome.exit_code, outcome.error = EXIT_INTERRUPTED, outcome.error or "interrupted"
            return outcome
        if outcome.error is not None:
            self.console.print(f"[bold red]the run could not complete:[/] {outcome.error}")
            return outcome
        if self.options.check:
            outcome.check, outcome.error = self._check()
            outcome.exit_code = outcome.check.verdict.exit_code if outcome.check is not None else EXIT_UNKNOWN
        else:
            outcome.exit_code = EXIT_VALID
        outcome.phases = self.phases
        self._write_run_json(outcome)
        return outcome

    def _run_cluster(self, spec: Any, schedule: Schedule, bounds: Bounds) -> None:
        with _client_log(self.run_dir / CLIENT_LOG_NAME):
            self._run_cluster_logged(spec, schedule, bounds)

    def _run_cluster_logged(self, spec: Any, schedule: Schedule, bounds: Bounds) -> None:
        self._phase("starting cluster")
        cluster = LocalCluster(spec, run_dir=self.run_dir, links=True, start=False)
        producer: ProducerWorkload | None = None
        nemesis: NemesisRunner | None = None
        try:
            client = real_client(self.options.client)
            if client is not None:
                wire(cluster, client, group=GROUP, topic=TOPIC, orderly=self.suite.orderly,
                     consumer_options=self.suite.consumer_options, mixed=is_mixed(self.options.client))
            cluster.start()
            timing = cluster.timing
            if client is not None and client.pop and self.suite.orderly:
                # before the topic: a 5.x client learns the group's FIFO flag with its first settings,
                # and cannot start before the topic routes
                make_group_fifo(cluster, GROUP)
            create_topic(cluster, TOPIC, QUEUES, bounds)
            namesrv_addr = ";".join(cluster.namesrv_addrs)  # every name server, as RocketMQ's namesrvAddr
            consumers = [n.id for n in spec.consumer_nodes()]
            tally = DeliveryTally(self.run_dir, consumers)
            producer = ProducerWorkload(
                namesrv_addr, self.run_dir,
                ProducerWorkloadConfig(TOPIC, keys=self.suite.keys, rate_per_s=self.suite.rate_per_s,
                                       orderly=self.suite.producer_orderly, latency_fault_enable=(
                                           c.FAULT_PRODUCER_LATENCY_FAULT_OFF
                                           not in self.options.fault_switches.get("producer", ()))),
                timing=timing, node_id=PRODUCER_NODE, dial_overrides=cluster.client_dial_overrides(PRODUCER_NODE))
            nemesis = NemesisRunner(cluster, self.run_dir / "nemesis" / "nemesis.jsonl",
                                    random.Random(self.options.seed), SYSTEM_CLOCK, topic=TOPIC, group=GROUP)
            with Progress(self.console) as progress:
                refresh = self._refresher(progress, producer, tally, nemesis)
                self._phase("warm-up", refresh)
                producer.start()
                self._wait(lambda: tally.lines > 0, bounds.warmup_ms, refresh)
                self._phase("faults", refresh)
                play(schedule, nemesis, SYSTEM_CLOCK, self._interrupted, on_progress=refresh)
                if self._interrupted.is_set():
                    return
                self._phase("drain", refresh)
                producer.stop()
                self._drain(producer, tally, bounds, refresh)
                self._phase("converge", refresh)
                self._wait(lambda: False, bounds.converge_ms, refresh)
                self._phase("read-back", refresh)
                read_back([Replica(n.id, n.broker_name or "", n.broker_id or 0, cluster.node(n.id).describe)
                           for n in spec.broker_nodes()], namesrv_addr, (TOPIC, f"%RETRY%{GROUP}"),
                          self.run_dir, timing=timing, catch_up_ms=bounds.converge_ms)
                self._phase("stopping", refresh)
        finally:
            if nemesis is not None:
                with contextlib.suppress(Exception):
                    nemesis.recover_all()
            if producer is not None:
                with contextlib.suppress(Exception):
                    producer.stop()
            try:
                cluster.close(graceful=not self._interrupted.is_set())
            finally:
                self._write_processes(cluster)

    # ---- pieces ---------------------------------------------------------------------

    def _refresher(self, progress: Progress, producer: ProducerWorkload, tally: DeliveryTally,
                   nemesis: NemesisRunner) -> Any:
        def refresh(*_: object) -> None:
            tally.refresh()
            counts = producer.counts
            s = self.status
            s.sent, s.acked, s.failed, s.unknown = counts.invoked, counts.ok, counts.fail, counts.info
            s.delivered, s.missing = len(tally.delivered_ids), tally.missing(counts.acked_ids)
            s.active_faults = nemesis.active_faults()
            progress.update(s)
        return refresh

    def _wait(self, done: Any, budget_ms: int, refresh: Any) -> bool:
        deadline = time.monotonic() + budget_ms / 1000
        while not self._interrupted.is_set():
            refresh()
            if done():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._interrupted.wait(min(TICK_S, left))
        return False

    def _drain(self, producer: ProducerWorkload, tally: DeliveryTally, bounds: Bounds, refresh: Any) -> None:
        """Wait until every acknowledged send is delivered. The drain bound applies to a stall: as long
        as deliveries keep coming (a backlog built during the faults), waiting goes on, up to
        DRAIN_STALLS_MAX bounds in all; whatever is still missing then is for the checker to judge."""
        deadline = time.monotonic() + DRAIN_STALLS_MAX * bounds.drain_ms / 1000
        while not self._interrupted.is_set() and time.monotonic() < deadline:
            before = len(tally.delivered_ids)
            if self._wait(lambda: tally.missing(producer.counts.acked_ids) == 0, bounds.drain_ms, refresh):
                return
            if len(tally.delivered_ids) == before:
                return  # a whole drain bound without a new delivery: stalled

    def _phase(self, name: str, refresh: Any = None) -> None:
        self.phases[name] = round(time.monotonic() - self._t0, 3)
        self.status.phase = name
        if refresh is not None:
            refresh()

    def _check(self) -> tuple[CheckOutput | None, str | None]:
        """Judge the run: in a fresh process (never fork Java from this gRPC-using one), unless a
        test hands over its own session. Returns the check, or why there is none."""
        self._phase("checking")
        if self.options.spark is not None:
            from chaos.checker.pipeline import check_run

            return check_run(self.run_dir, spark=self.options.spark, spark_master=self.options.spark_master,
                             report=self.options.report, names=self.options.check_names), None
        self.console.print("checking the histories on Spark (in a checker process)…")
        if self.options.checker is not None:
            judged = self.options.checker.judge(self.run_dir, names=self.options.check_names,
                                                report=self.options.report)
        else:
            judged = judge(self.run_dir, names=self.options.check_names, spark_master=self.options.spark_master,
                           report=self.options.report)
        if judged.output is None:
            return None, f"{judged.error}; the run dir is kept: judge it with `mqlab chaos check {self.run_dir}`"
        return judged.output, None

    @contextlib.contextmanager
    def _sigint_as_event(self) -> Iterator[None]:
        """Ctrl-C ends the run in order (faults undone, nodes stopped) instead of unwinding mid-step."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.getsignal(signal.SIGINT)

        def on_sigint(*_: object) -> None:
            if self._interrupted.is_set():
                raise KeyboardInterrupt  # a second Ctrl-C: unwind now (the finally blocks still clean up)
            self._interrupted.set()

        signal.signal(signal.SIGINT, on_sigint)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    # ---- run dir files ----------------------------------------------------------------

    def _write_plan(self, schedule: Schedule, bounds: Bounds, timing: Any) -> None:
        (self.run_dir / TIMING_JSON).write_text(json.dumps(dataclasses.asdict(timing), indent=1))
        (self.run_dir / BOUNDS_JSON).write_text(json.dumps(bounds.to_json(), indent=1))
        (self.run_dir / SCHEDULE_JSON).write_text(json.dumps(schedule.to_json(), indent=1))
        self._write_run_json(None)

    def _write_run_json(self, outcome: RunOutcome | None) -> None:
        o = self.options
        data: dict[str, Any] = {
            "suite": self.suite.name, "seed": o.seed, "time_scale": o.time_scale, "mode": o.mode_name,
            "topology": o.topology,
            "duration_s": self._fault_phase_s,  # the fault phase (from --duration or the suite's timer units)
            "fault_phase": f"{self.suite.fault_phase_x:g} x {self.suite.fault_phase_of}",
            "fault_switches": {k: list(v) for k, v in o.fault_switches.items()},
            "checks": list(o.suite_check_names), "checks_set_aside": o.checks_set_aside,
            "checker": self._checker_overrides(), "phases_s": self.phases,
            "replay": f"mqlab chaos run {self.suite.name} --seed {o.seed} --time-scale {o.time_scale} "
                      f"--mode {o.mode_name}" + (f" --topology {o.topology}" if o.topology != DEFAULT_TOPOLOGY else "")
                      + (f" --client {o.client}" if o.client != MQLAB else ""),
            "client": o.client,
        }
        if outcome is not None:
            s = outcome.status
            data["counts"] = {"sent": s.sent, "acked": s.acked, "failed": s.failed, "unknown": s.unknown,
                              "delivered": s.delivered, "acked_not_delivered": s.missing}
            data["error"] = outcome.error
            data["exit_code"] = outcome.exit_code
        (self.run_dir / RUN_JSON).write_text(json.dumps(data, indent=1))

    def _checker_overrides(self) -> dict[str, Any]:
        overrides = dict(self.suite.checker)
        if self.options.client != MQLAB:
            overrides["real_client_findings"] = True  # the client's bugs are client findings
            real = real_client(self.options.client)
            if real is not None and real.pop:
                overrides["pop_consumers"] = True  # every POP client receives from every queue
                overrides["pop_revive_interval_ms"] = round(c.POP_REVIVE_INTERVAL_MS * self.options.time_scale)
        return overrides

    def _write_processes(self, cluster: LocalCluster) -> None:
        """Unexpected exits for the checker's timeline (the nemesis records the exits it caused)."""
        path = self.run_dir / PROCESSES_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        wall_minus_mono_ms = SYSTEM_CLOCK.wall_ms() - SYSTEM_CLOCK.monotonic_ms()
        with path.open("a", encoding="utf-8") as f:
            for e in cluster.unexpected_exits:
                f.write(json.dumps({"node": e.node_id, "event": "exit", "wall_ms": e.at_wall_ms,
                                    "mono_ms": e.at_wall_ms - wall_minus_mono_ms, "expected": False,
                                    "exit_code": e.exit_code, "signal": signal_name(e.exit_code),
                                    "pid": e.pid}) + "\n")


def _default_out(options: RunOptions) -> Path:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return Path("runs") / f"{stamp}-{options.suite.name}-s{options.seed}"


@contextlib.contextmanager
def _client_log(path: Path) -> Iterator[None]:
    """The run's in-harness clients (producer workload, read-back) log into the run dir, not the console.

    A broker group lost on purpose makes the producer warn about every failed attempt; on the
    console that buries the progress display, in the run dir it sits beside the nodes' logs."""
    logger = logging.getLogger("nodes")
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s"))
    old_level, old_propagate = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        logger.propagate = old_propagate
        handler.close()
