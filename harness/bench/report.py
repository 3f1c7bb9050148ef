"""Presenting a benchmark run: rich tables and a PNG bar plot (matplotlib, Agg, imported lazily).

Owns how numbers look, nothing about how they were measured (`harness.bench.results`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

from harness.bench.results import REFERENCE_TITLES, BenchReport, client_kind, evaluate_targets

MATPLOTLIB_MISSING = ("the benchmark's plot needs matplotlib, which is not installed: "
                      "install the dev (or checker) extra, e.g. `pip install -e '.[dev]'`")


def require_matplotlib() -> Any:
    """The pyplot module on the Agg backend; ImportError with what to install if it is missing."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(MATPLOTLIB_MISSING) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _range(low: float, high: float) -> str:
    return f"{low / 1000:,.0f}k-{high / 1000:,.0f}k" if high >= 10_000 else f"{low:,.0f}-{high:,.0f}"


# a row's column shows the first of its kinds that was measured: a send's plain ratio is of the
# stream publish (the wire mqlab's send stream uses) when there is one; the mmap column is a
# consumer row's ratio of the scan (reading stored bytes) and a send row's of the append (storing
# them); a send's redis ratio is of the master with a replica (mqlab's master has its slave), and
# "redis wait" of that with WAIT 1 (a SYNC_MASTER's peer)
RATIO_COLUMNS = (("plain", ("plain-stream", "plain-stream-publish", "plain-unary")),
                 ("redis", ("redis-ack", "redis-xadd-replicated", "redis-xadd")), ("redis wait", ("redis-xadd-wait",)),
                 ("redis noack", ("redis-noack",)), ("tcp", ("tcp",)), ("mmap", ("mmap-scan", "mmap-append")))


def results_table(report: BenchReport) -> Table:
    if len(report.rounds) > 1:
        title = (f"mqlab, {len(report.rounds)} rounds (each row: its median round's median window; range: that "
                 "round's slowest-fastest window; ratio: the median of the rounds' ratios to their own references)")
    else:
        title = "mqlab (median window; range: slowest-fastest window; ratio: of the same-run reference)"
    table = Table(title=title)
    for col in ("case", "window", "msgs/s", "range", "MB/s", *(f"x {name}" for name, _ in RATIO_COLUMNS), "errors"):
        table.add_column(col, justify="left" if col == "case" else "right", no_wrap=col != "case")
    for case in report.results:
        m = case.measured
        ratios = report.ratios(case)
        cells = []
        for _, kinds in RATIO_COLUMNS:
            found = [ratios[k] for k in kinds if ratios.get(k) is not None]
            cells.append(_ratio(found[0]) if found else "-")
        table.add_row(case.label, str(case.window or "-"), f"{m.msgs_per_s:,.0f}", _range(*m.spread),
                      f"{m.mb_per_s:,.1f}", *cells, f"[red]{m.errors}[/]" if m.errors else "0")
    return table


CPU_PROCESSES = ("clients", "master", "slave")


def cpu_table(report: BenchReport) -> Table:
    """Where each case's cost is paid: CPU microseconds per message, by process."""
    table = Table(title="CPU per message (us, over the measuring windows)")
    table.add_column("case")
    for name in ("client processes", "master", "slave", "total"):
        table.add_column(name, justify="right", no_wrap=True)
    for case in report.results:
        cpu = case.cpu_us_per_msg
        cells = [f"{cpu[name]:,.1f}" if name in cpu else "-" for name in CPU_PROCESSES]
        total = f"{sum(cpu.values()):,.1f}" if cpu else "-"
        table.add_row(case.label, *cells, total)
    return table


def references_table(report: BenchReport) -> Table:
    table = Table(title=f"same-run references ({report.record_bytes}-byte records)")
    for col in ("reference", "batch", "window", "msgs/s", "range", "MB/s", "client us/msg", "server us/msg"):
        table.add_column(col, justify="left" if col == "reference" else "right", no_wrap=col != "reference")
    for ref in report.references.values():
        m = ref.measured
        cpu = ref.cpu_us_per_msg
        client = f"{cpu['clients']:,.1f}" if "clients" in cpu else "-"
        # a replicated reference's server is its master and replica together, as mqlab's brokers are
        server = f"{cpu['redis'] + cpu.get('redis-replica', 0.0):,.1f}" if "redis" in cpu else "-"
        table.add_row(f"{ref.kind}: {REFERENCE_TITLES.get(ref.kind, '')}", str(ref.batch or "-"), str(ref.window),
                      f"{m.msgs_per_s:,.0f}", _range(*m.spread), f"{m.mb_per_s:,.1f}", client, server)
    return table


def targets_table(report: BenchReport) -> Table:
    table = Table(title="targets")
    table.add_column("target")
    table.add_column("met", justify="center")
    table.add_column("this run" if len(report.rounds) <= 1 else f"this run ({len(report.rounds)} rounds)")
    for verdict in evaluate_targets(report):
        mark = {True: "[green]yes[/]", False: "[red]no[/]", None: "[yellow]n/a[/]"}[verdict.met]
        table.add_row(verdict.name, mark, verdict.detail)
    return table


def write_plot(report: BenchReport, path: Path) -> Path:
    """A log-scale bar per case and per reference (references hatched)."""
    plt = require_matplotlib()
    cases = report.results
    refs = list(report.references.values())
    labels = [c.label for c in cases] + [ref.key for ref in refs]
    rates = [c.measured.msgs_per_s for c in cases] + [ref.measured.msgs_per_s for ref in refs]
    lows = [c.measured.spread[0] for c in cases] + [ref.measured.spread[0] for ref in refs]
    highs = [c.measured.spread[1] for c in cases] + [ref.measured.spread[1] for ref in refs]
    colors = {"pull": "#4C72B0", "pull-loop": "#8172B2", "push": "#55A868", "send": "#C44E52"}
    real_client = "#937860"  # --clients rows
    fills = [colors.get(c.client, real_client if client_kind(c.client)[0] != "mqlab" else "#4C72B0")
             for c in cases] + [
        "#DD8452" if ref.kind.startswith("redis") else "#BBBBBB" for ref in refs]
    fig, ax = plt.subplots(figsize=(max(8.0, 0.45 * len(labels) + 3), 6))
    try:
        xs = list(range(len(labels)))
        errors = [[r - lo for r, lo in zip(rates, lows, strict=True)], [hi - r for r, hi in zip(rates, highs, strict=True)]]
        bars = ax.bar(xs, rates, color=fills, yerr=errors, capsize=2)
        for bar in list(bars)[len(cases):]:
            bar.set_hatch("//")
        ax.set_xticks(xs)
        ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("messages / s (median window, bars: slowest-fastest)")
        body = cases[0].body_bytes if cases else 0
        ax.set_title(f"mqlab bench pull: {body}-byte bodies, {report.machine.get('cpus', '?')} CPUs; "
                     "hatched: same-run references")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path
