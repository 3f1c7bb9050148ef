"""A seed matrix: suites x seeds x time scales (x durability modes x topologies x clients), one run
after another.

Each cell is one whole chaos run in its own run dir under the matrix dir; its row in the summary
is read back from that run dir (`run.json`, `verdict.json`, the nemesis history), so a row says
what the run itself recorded. A seed is the same run at every time scale (the schedule is drawn
in timer units), so a seed whose verdict differs between scales is flagged: one of the two runs
saw something the other did not, or a check's timing is wrong.

    cells = plan_cells(["failover"], seeds=[1, 2, 3], time_scales=[0.05, 0.1])
    result = run_matrix(cells, out_dir, run_one)        # run_one: (Cell, Path) -> exit code
    print(result.exit_code)

Each row also carries its run's coverage (`verdict.json` `coverage`: path -> count) and the paths
its suite claims; `unreached_claims` lists, per suite, the claimed paths no judged run of the
matrix reached.

Exit code: 1 if any run is invalid (or, with `require_coverage`, a suite's claimed path was
reached by none of its runs), else 2 if any run could not run or be judged, else 0 (130 when
interrupted, with the rows so far written).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chaos.checker.verdict import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID
from chaos.real_clients.wiring import MQLAB
from chaos.schedule import FAULT_OPS

if TYPE_CHECKING:
    from chaos.judge import CheckerProcess

EXIT_INTERRUPTED = 130
MATRIX_JSON = "matrix.json"
# the durability modes of a run (flush x replication); a suite that judges durability runs once per mode
DURABILITY_MODES = ("async", "sync-flush", "sync-master", "sync")
PER_MODE_SUITES = ("durability",)


@dataclass(frozen=True)
class Cell:
    suite: str
    seed: int
    time_scale: float
    mode: str | None = None  # a durability mode, for suites run once per mode
    topology: str = "single"  # harness.topology.TOPOLOGIES
    client: str = MQLAB  # the consumers: mqlab's own or a real client (chaos.real_clients)

    @property
    def name(self) -> str:
        return (f"{self.suite}-s{self.seed}-x{self.time_scale:g}" + (f"-{self.mode}" if self.mode else "")
                + (f"-{self.topology}" if self.topology != "single" else "")
                + (f"-{self.client}" if self.client != MQLAB else ""))


@dataclass
class Row:
    """One run's line in the summary."""

    suite: str
    seed: int
    time_scale: float
    mode: str | None
    run_dir: str
    exit_code: int
    verdict: str  # valid | INVALID | unknown | not run
    failing_checks: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    faults_injected: int | None = None
    acked: int | None = None
    allowed_loss: int | None = None
    unallowed_loss: int | None = None
    error: str | None = None
    report: str | None = None  # report.html relative to the matrix dir
    topology: str = "single"
    client: str = MQLAB
    coverage: dict[str, int] | None = None  # path -> count, from verdict.json (None: not counted)
    claims: list[str] = field(default_factory=list)  # the paths the run's suite claims


@dataclass
class MatrixResult:
    rows: list[Row]
    scale_disagreements: list[dict[str, Any]]
    interrupted: bool = False
    require_coverage: bool = False  # a claimed path no run reached makes the matrix exit 1

    @property
    def unreached_claims(self) -> dict[str, list[str]]:
        return unreached_claims(self.rows)

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        if any(r.verdict == "INVALID" for r in self.rows):
            return EXIT_INVALID
        if self.require_coverage and self.unreached_claims:
            return EXIT_INVALID
        if any(r.verdict != "valid" for r in self.rows):
            return EXIT_UNKNOWN
        return EXIT_VALID

    def to_json(self) -> dict[str, Any]:
        return {"exit_code": self.exit_code, "interrupted": self.interrupted,
                "runs": [asdict(r) for r in self.rows], "scale_disagreements": self.scale_disagreements,
                "unreached_claims": self.unreached_claims, "require_coverage": self.require_coverage}


RunOne = Callable[[Cell, Path], int]  # runs one cell into the given run dir; returns the run's exit code


def parse_seeds(text: str) -> list[int]:
    """'1-10', '1,3,5', '1-3,7' -> the seeds in order, each once."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        lo, sep, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"seeds are numbers or ranges like 1-10, got {part!r}") from None
        if last < first:
            raise ValueError(f"seed range {part!r} runs backwards")
        seeds += [s for s in range(first, last + 1) if s not in seeds]
    if not seeds:
        raise ValueError("no seeds given")
    return seeds


def parse_scales(text: str) -> list[float]:
    try:
        scales = [float(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ValueError(f"time scales are numbers like 0.05,0.1, got {text!r}") from None
    if not scales or any(s <= 0 for s in scales):
        raise ValueError(f"time scales must be positive, got {text!r}")
    return scales


def plan_cells(suites: Sequence[str], seeds: Sequence[int], time_scales: Sequence[float]) -> list[Cell]:
    """Suites x seeds x scales in that nesting order; a per-mode suite once per durability mode."""
    cells = []
    for suite in suites:
        modes: Sequence[str | None] = DURABILITY_MODES if suite in PER_MODE_SUITES else (None,)
        for seed in seeds:
            for scale in time_scales:
                cells += [Cell(suite, seed, scale, mode) for mode in modes]
    return cells


def with_topologies(cells: Sequence[Cell], topologies: Sequence[str]) -> list[Cell]:
    """Every cell once per topology its suite runs on (a suite's `topologies`); ValueError for an
    unknown topology or when no cell is left."""
    from dataclasses import replace

    from chaos.suites import suite
    from harness.topology import TOPOLOGIES

    unknown = [t for t in topologies if t not in TOPOLOGIES]
    if unknown or not topologies:
        raise ValueError(f"topologies are {', '.join(TOPOLOGIES)}, got {', '.join(topologies) or 'none'}")
    out = [replace(cell, topology=t) for cell in cells for t in topologies if t in suite(cell.suite).topologies]
    if not out:
        raise ValueError(f"no chosen suite runs on {', '.join(topologies)}")
    return out


def with_clients(cells: Sequence[Cell], clients: Sequence[str]) -> tuple[list[Cell], list[str]]:
    """Every cell once per client that can run its suite, and a line per (suite, client) left out
    saying why. A real client runs at real scale (its timers cannot be scaled), so its cells of one
    seed at several time scales are one cell. ValueError for an unknown client or when no cell is left."""
    from dataclasses import replace

    from chaos.bounds import REAL_CLIENT_TIME_SCALE
    from chaos.real_clients import RealClientError, client_for_suite, real_client
    from chaos.suites import suite

    if not clients:
        raise ValueError("no client given")
    for client in clients:
        try:
            real_client(client)
        except RealClientError as exc:  # an unknown name: nothing to run with it
            raise ValueError(str(exc)) from None
    out: list[Cell] = []
    left_out: list[str] = []
    for client in clients:
        for cell in cells:
            try:
                real = client_for_suite(client, suite(cell.suite), cell.topology)
            except RealClientError as exc:  # this client cannot run this suite: say why, run the rest
                line = f"{cell.suite} ({cell.topology}) with {client}: {exc}"
                if line not in left_out:
                    left_out.append(line)
                continue
            moved = replace(cell, client=client) if real is None else \
                replace(cell, client=client, time_scale=REAL_CLIENT_TIME_SCALE)
            if moved not in out:
                out.append(moved)
    if not out:
        raise ValueError(f"no chosen suite can run with {', '.join(clients)}")
    return out, left_out


def run_matrix(cells: Sequence[Cell], out_dir: Path, run_one: RunOne,
               on_row: Callable[[Cell, Row | None], object] | None = None, *,
               require_coverage: bool = False) -> MatrixResult:
    """Run every cell one after another, read its row back, and write matrix.json after each run
    (a matrix stopped half way still has its summary). `on_row(cell, None)` is called before a run.
    `require_coverage`: a claimed path that no run of its suite reached makes the exit code 1."""
    out_dir.mkdir(parents=True, exist_ok=True)
    result = MatrixResult(rows=[], scale_disagreements=[], require_coverage=require_coverage)
    for cell in cells:
        if on_row is not None:
            on_row(cell, None)
        run_dir = out_dir / cell.name
        started = time.monotonic()
        try:
            exit_code = run_one(cell, run_dir)
        except KeyboardInterrupt:
            result.interrupted = True
            break
        except Exception as exc:  # one broken run is a row, not the end of the matrix
            exit_code, error = EXIT_UNKNOWN, f"{type(exc).__name__}: {exc}"
        else:
            error = None
        row = read_row(cell, run_dir, out_dir, exit_code, time.monotonic() - started, error)
        result.rows.append(row)
        result.scale_disagreements = scale_disagreements(result.rows)
        write_json(result, out_dir)
        if on_row is not None:
            on_row(cell, row)
        if exit_code == EXIT_INTERRUPTED:
            result.interrupted = True
            break
    write_json(result, out_dir)
    return result


def write_json(result: MatrixResult, out_dir: Path) -> Path:
    path = out_dir / MATRIX_JSON
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result.to_json(), indent=1) + "\n")
    tmp.replace(path)
    return path


def chaos_run_one(*, spark_master: str | None = None, duration_s: float | None = None,
                  fault_switches: Callable[[Cell], dict[str, tuple[str, ...]]] | None = None,
                  checker: CheckerProcess | None = None) -> RunOne:
    """The real run of a cell: `ChaosRun` into the run dir, its live output in `<run dir>/run.log`
    (the matrix owns the terminal). `fault_switches(cell)` turns switches on (selftest); `checker`
    judges every run in one kept checker process (else each run starts its own)."""

    def run_one(cell: Cell, run_dir: Path) -> int:
        from rich.console import Console

        from chaos.runner import ChaosRun, RunOptions
        from chaos.suites import suite

        chosen = suite(cell.suite)
        extra: dict[str, Any] = {}
        if cell.mode is not None:
            if "mode" not in RunOptions.__dataclass_fields__:
                raise ValueError(f"this build has no durability modes; cannot run {cell.name}")
            extra["mode"] = cell.mode
        run_dir.mkdir(parents=True, exist_ok=True)
        with (run_dir / "run.log").open("w", encoding="utf-8") as log:
            console = Console(file=log, highlight=False, width=160)
            options = RunOptions(chosen, seed=cell.seed, time_scale=cell.time_scale, duration_s=duration_s,
                                 out_dir=run_dir, spark_master=spark_master,
                                 fault_switches=fault_switches(cell) if fault_switches else {},
                                 topology=cell.topology, client=cell.client, checker=checker, **extra)
            return ChaosRun(options, console).execute().exit_code

    return run_one


# ---- reading a run dir back ------------------------------------------------------------------


def read_row(cell: Cell, run_dir: Path, out_dir: Path, exit_code: int, duration_s: float,
             error: str | None = None) -> Row:
    run = _read_json(run_dir / "run.json") or {}
    verdict = _read_json(run_dir / "verdict.json")
    row = Row(cell.suite, cell.seed, cell.time_scale, cell.mode, _rel(run_dir, out_dir), exit_code,
              verdict="not run", duration_s=round(duration_s, 1), error=error or run.get("error"),
              topology=cell.topology, client=cell.client)
    if verdict is not None:
        row.verdict = {True: "valid", False: "INVALID"}.get(verdict.get("valid"), "unknown")  # type: ignore[call-overload]
        checks = verdict.get("checks") or {}
        row.failing_checks = sorted(n for n, c in checks.items() if isinstance(c, dict) and c.get("valid") is False)
        row.allowed_loss, row.unallowed_loss = _losses(verdict)
        counts = verdict.get("coverage")
        if isinstance(counts, dict):
            row.coverage = {str(k): int(v) for k, v in counts.items() if isinstance(v, int)}
        row.claims = [str(c) for c in verdict.get("coverage_claims") or ()]
    counts = run.get("counts") or {}
    row.acked = counts.get("acked")
    row.faults_injected = count_faults(run_dir)
    report = run_dir / "report.html"
    if report.is_file():
        row.report = _rel(report, out_dir)
    return row


def count_faults(run_dir: Path) -> int | None:
    """Faults the nemesis injected without error (its `end` lines of fault ops)."""
    path = run_dir / "nemesis" / "nemesis.jsonl"
    if not path.is_file():
        return None
    n = 0
    for line in path.read_text(errors="replace").splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill of the runner
        if e.get("phase") == "end" and e.get("op") in FAULT_OPS and not e.get("error"):
            n += 1
    return n


def _losses(verdict: dict[str, Any]) -> tuple[int | None, int | None]:
    """(allowed, unallowed) acknowledged-but-lost messages as the `lost` check split them by what
    the run's storage faults allow (its `lost_allowed` / `lost_unallowed` counts), else every loss
    is unallowed."""
    lost = (verdict.get("checks") or {}).get("lost")
    if not isinstance(lost, dict):
        return None, None
    counts = lost.get("counts") or {}
    if "lost_unallowed" in counts or "lost_allowed" in counts:
        return counts.get("lost_allowed"), counts.get("lost_unallowed")
    return (0, counts["lost"]) if isinstance(counts.get("lost"), int) else (None, None)


def unreached_claims(rows: Iterable[Row]) -> dict[str, list[str]]:
    """Per suite, the claimed paths that no run of it counted (in claim order). Only runs whose
    coverage was counted take part; a suite none of whose runs was counted is left out (it has
    nothing to show either way: its runs' own errors say why). Claims are asked only of runs with
    mqlab's own consumers: most paths are counted from their journals (pull routes, rebalances),
    which a real RocketMQ client does not write; a real client's run still counts what it reached."""
    claims: dict[str, list[str]] = {}
    reached: dict[str, set[str]] = {}
    for r in rows:
        if r.coverage is None:
            continue
        for c in r.claims if r.client == MQLAB else ():
            if c not in claims.setdefault(r.suite, []):
                claims[r.suite].append(c)
        reached.setdefault(r.suite, set()).update(p for p, n in r.coverage.items() if n > 0)
    out = {suite: [c for c in cs if c not in reached.get(suite, set())] for suite, cs in claims.items()}
    return {suite: cs for suite, cs in out.items() if cs}


def scale_disagreements(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """Seeds (per suite and mode) whose judged verdicts differ between time scales."""
    by_seed: dict[tuple[str, int, str | None, str, str], dict[float, str]] = {}
    for r in rows:
        if r.verdict in ("valid", "INVALID"):
            by_seed.setdefault((r.suite, r.seed, r.mode, r.topology, r.client), {})[r.time_scale] = r.verdict
    return [{"suite": s, "seed": seed, "mode": mode, "topology": topo, "client": client,
             "verdicts": {f"{k:g}": v for k, v in sorted(v.items())}}
            for (s, seed, mode, topo, client), v in by_seed.items() if len(set(v.values())) > 1]


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _rel(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base.resolve()))
    except ValueError:
        return str(path)
