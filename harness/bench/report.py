"""Presenting a benchmark run: rich tables and a PNG bar plot (matplotlib, Agg, imported lazily).

Owns how numbers look, nothing about how they were measured (`harness.bench.results`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.table import Table

from harness.bench.results import BenchReport, evaluate_targets

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


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def results_table(report: BenchReport) -> Table:
    table = Table(title="results (MB/s of message bodies)")
    for col in ("case", "window", "msgs/s", "MB/s", "of gRPC", "of scan", "errors"):
        table.add_column(col, justify="left" if col == "case" else "right", no_wrap=col != "case")
    for case in report.results:
        m = case.measured
        table.add_row(case.label, str(case.window or "-"), f"{m.msgs_per_s:,.0f}", f"{m.mb_per_s:,.1f}",
                      _pct(report.fraction_of_grpc_limit(case)), _pct(report.fraction_of_scan_limit(case)),
                      f"[red]{m.errors}[/]" if m.errors else "0")
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


def limits_table(report: BenchReport) -> Table:
    limits = report.limits
    table = Table(title=f"same-run limits ({limits.record_bytes}-byte records)")
    for col in ("limit", "batch", "window", "msgs/s", "MB/s"):
        table.add_column(col, justify="left" if col == "limit" else "right", no_wrap=col != "limit")
    for stream in sorted(limits.grpc_stream.values(), key=lambda s: s.batch):
        m = stream.measured
        table.add_row("gRPC stream (Pull)", str(stream.batch), str(stream.window), f"{m.msgs_per_s:,.0f}",
                      f"{m.mb_per_s:,.1f}")
    for unary in limits.grpc_unary.values():
        m = unary.measured
        table.add_row(f"gRPC unary ({unary.mode})", str(unary.batch), str(unary.window), f"{m.msgs_per_s:,.0f}",
                      f"{m.mb_per_s:,.1f}")
    if limits.mmap_scan is not None:
        m = limits.mmap_scan
        table.add_row("mmap scan (commitlog)", "-", "-", f"{m.msgs_per_s:,.0f}", f"{m.mb_per_s:,.1f}")
    return table


def targets_table(report: BenchReport) -> Table:
    table = Table(title="targets")
    table.add_column("target")
    table.add_column("met", justify="center")
    table.add_column("this run")
    for verdict in evaluate_targets(report):
        mark = {True: "[green]yes[/]", False: "[red]no[/]", None: "[yellow]n/a[/]"}[verdict.met]
        table.add_row(verdict.name, mark, verdict.detail)
    return table


def write_plot(report: BenchReport, path: Path) -> Path:
    """A log-scale bar per case, its gRPC limit drawn over it, the mmap scan as a line."""
    plt = require_matplotlib()
    cases = report.results
    fig, ax = plt.subplots(figsize=(max(8.0, 0.9 * len(cases) + 3), 5.5))
    try:
        colors = {"pull": "#4C72B0", "push": "#55A868", "send": "#C44E52"}
        xs = range(len(cases))
        ax.bar(list(xs), [c.measured.msgs_per_s for c in cases], color=[colors[c.client] for c in cases])
        labelled = False
        for x, case in zip(xs, cases, strict=True):
            limit = report.limits.grpc_limit_for(case)
            if limit:
                ax.hlines(limit, x - 0.4, x + 0.4, colors="black", linestyles="--",
                          label=None if labelled else "bare gRPC limit of the case")
                labelled = True
        if report.limits.mmap_scan is not None:
            ax.axhline(report.limits.mmap_scan.msgs_per_s, color="grey", linestyle=":", label="raw mmap scan")
        ax.set_xticks(list(xs))
        ax.set_xticklabels([c.label for c in cases], rotation=35, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("messages / s")
        body = cases[0].body_bytes if cases else 0
        ax.set_title(f"mqlab bench pull: {body}-byte bodies, {report.machine.get('cpus', '?')} CPUs")
        if labelled or report.limits.mmap_scan is not None:
            ax.legend(loc="upper right", fontsize=8)
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path
