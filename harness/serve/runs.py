"""Past and present runs under a runs dir: chaos runs, their verdicts and reports, matrix and
selftest indexes, and the clusters `mqlab up` left there.

What a run dir holds is docs/history.md's contract: `run.json` (suite, seed, time scale,
topology, client, exit code), `verdict.json` (`valid`: true, false or "unknown", `checks`:
name -> {valid, ...}), `report.html`, `cluster.json` (the nodes and their pids) and
`nemesis/nemesis.jsonl`. A matrix dir holds `matrix.json` and `index.html` beside one run dir
per cell; a selftest dir `selftest.json` beside its cases'. Anything unreadable is shown as such
(a run whose files are torn or half written is still listed), never an error of the listing.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.pids import is_node_process
from harness.run_dir import CLUSTER_JSON
from harness.serve.faults import NEMESIS_JSONL, read_history

RUN_JSON, VERDICT_JSON, REPORT_HTML = "run.json", "verdict.json", "report.html"
MATRIX_JSON, SELFTEST_JSON, INDEX_HTML = "matrix.json", "selftest.json", "index.html"
_STAMP_RE = re.compile(r"^(\d{8}T\d{6}Z)")
VERDICTS = ("valid", "INVALID", "unknown", "running", "not checked")


@dataclass
class RunRow:
    """One run dir as the runs page lists it; `id` is its path under the runs dir (URL-safe posix)."""

    id: str
    kind: str  # chaos | cluster
    verdict: str  # one of VERDICTS
    suite: str | None = None
    seed: int | None = None
    time_scale: float | None = None
    topology: str | None = None
    client: str | None = None
    mode: str | None = None
    failing_checks: list[str] = field(default_factory=list)
    exit_code: int | None = None
    error: str | None = None
    started: str | None = None  # UTC stamp from the dir's name, else its mtime, ISO 8601
    mtime: float = 0.0
    live: bool = False  # a node process of its cluster still runs
    faults: int | None = None  # fault actions the nemesis started (None: no nemesis history)
    parent: str | None = None  # the matrix or selftest dir it belongs to
    files: dict[str, str] = field(default_factory=dict)  # report / verdict / run -> path under the runs dir

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Collection:
    """A matrix or selftest dir: its index files and how many runs it holds."""

    id: str
    kind: str  # matrix | selftest
    runs: int
    exit_code: int | None
    started: str | None
    files: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunsListing:
    root: str
    runs: list[RunRow]
    collections: list[Collection]
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"root": self.root, "error": self.error, "runs": [r.to_json() for r in self.runs],
                "collections": [c.to_json() for c in self.collections]}


def read_json(path: Path) -> Any:
    """The file's JSON, or None when it is missing, torn or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def list_runs(root: Path) -> RunsListing:
    """Every run and collection under `root` (one level, and one more inside collections), newest first."""
    if not root.is_dir():
        return RunsListing(str(root), [], [], error=f"no runs dir {root}: `mqlab chaos run SUITE` writes its runs "
                           "there, or pass --runs DIR")
    runs: list[RunRow] = []
    collections: list[Collection] = []
    for entry in _subdirs(root):
        rel = entry.name
        marker = next((m for m in (MATRIX_JSON, SELFTEST_JSON) if (entry / m).is_file()), None)
        if marker is not None or not _is_run_dir(entry):
            children = [c for c in _subdirs(entry) if _is_run_dir(c)]
            if marker is None and not children:
                continue
            collection = _collection(entry, rel, marker, len(children))
            collections.append(collection)
            for child in children:
                row = read_run(child, f"{rel}/{child.name}", parent=rel)
                if not _STAMP_RE.match(child.name):  # a matrix cell is named by its cell: it ran in its matrix's time
                    row.started = collection.started
                runs.append(row)
        else:
            runs.append(read_run(entry, rel))
    runs.sort(key=lambda r: (r.started or "", r.mtime), reverse=True)
    collections.sort(key=lambda c: c.started or "", reverse=True)
    return RunsListing(str(root), runs, collections)


def _subdirs(path: Path) -> Iterator[Path]:
    """Directories in `path`, not following symlinks (`runs/latest` names a run listed anyway)."""
    try:
        entries = sorted(os.scandir(path), key=lambda e: e.name)
    except OSError:
        return
    for e in entries:
        if not e.name.startswith(".") and e.is_dir(follow_symlinks=False):
            yield Path(e.path)


def _is_run_dir(path: Path) -> bool:
    return any((path / name).is_file() for name in (RUN_JSON, CLUSTER_JSON, VERDICT_JSON))


def _started(path: Path, fallback_file: Path | None = None) -> tuple[str | None, float]:
    try:
        mtime = (fallback_file if fallback_file is not None and fallback_file.exists() else path).stat().st_mtime
    except OSError:
        mtime = 0.0
    m = _STAMP_RE.match(path.name)
    if m:
        s = m.group(1)
        return f"{s[0:4]}-{s[4:6]}-{s[6:8]}T{s[9:11]}:{s[11:13]}:{s[13:15]}Z", mtime
    return (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime)) if mtime else None), mtime


def _collection(path: Path, rel: str, marker: str | None, children: int) -> Collection:
    data = read_json(path / marker) if marker else None
    exit_code = data.get("exit_code") if isinstance(data, dict) else None
    files = {name.split(".")[0]: f"{rel}/{name}" for name in (INDEX_HTML, MATRIX_JSON, SELFTEST_JSON)
             if (path / name).is_file()}
    kind = "selftest" if marker == SELFTEST_JSON or path.name.endswith("-selftest") else "matrix"
    started, _ = _started(path)
    return Collection(rel, kind, children, exit_code if isinstance(exit_code, int) else None, started, files)


def read_run(path: Path, rel: str, *, parent: str | None = None) -> RunRow:
    run = read_json(path / RUN_JSON)
    run = run if isinstance(run, dict) else {}
    verdict = read_json(path / VERDICT_JSON)
    started, mtime = _started(path, path / RUN_JSON)
    chaos = (path / RUN_JSON).exists() or verdict is not None  # a torn run.json is still a chaos run's
    row = RunRow(rel, "chaos" if chaos else "cluster", "not checked", started=started,
                 mtime=mtime, parent=parent)
    row.suite = _str(run.get("suite")) or (_str(verdict.get("suite")) if isinstance(verdict, dict) else None)
    row.seed = _int(run.get("seed"))
    if row.seed is None and isinstance(verdict, dict):
        row.seed = _int(verdict.get("seed"))
    scale = run.get("time_scale")
    row.time_scale = float(scale) if isinstance(scale, int | float) and not isinstance(scale, bool) else None
    row.topology, row.client, row.mode = _str(run.get("topology")), _str(run.get("client")), _str(run.get("mode"))
    row.exit_code, row.error = _int(run.get("exit_code")), _str(run.get("error"))
    row.live = cluster_is_live(path)
    if isinstance(verdict, dict):
        row.verdict = {True: "valid", False: "INVALID"}.get(verdict.get("valid"), "unknown")  # type: ignore[call-overload]
        checks = verdict.get("checks")
        if isinstance(checks, Mapping):
            row.failing_checks = sorted(str(n) for n, c in checks.items()
                                        if isinstance(c, Mapping) and c.get("valid") is False)
    elif verdict is None and (path / VERDICT_JSON).exists():
        row.verdict = "unknown"  # torn or unreadable verdict
    elif row.live:
        row.verdict = "running"
    row.faults = count_faults(path / NEMESIS_JSONL)
    row.files = {name.split(".")[0]: f"{rel}/{name}" for name in (REPORT_HTML, VERDICT_JSON, RUN_JSON, CLUSTER_JSON)
                 if (path / name).is_file()}
    return row


_fault_counts: dict[Path, tuple[tuple[int, int], int]] = {}  # nemesis.jsonl -> ((size, mtime_ns), faults)
_fault_counts_lock = threading.Lock()


def count_faults(path: Path) -> int | None:
    """Faults the nemesis started (None without a nemesis history); a file is read again only when it
    changed, so listing many finished runs every few seconds reads each history once."""
    try:
        stat = path.stat()
    except OSError:
        return None
    key = (stat.st_size, stat.st_mtime_ns)
    with _fault_counts_lock:
        cached = _fault_counts.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    count = len(read_history(path).windows)
    with _fault_counts_lock:
        _fault_counts[path] = (key, count)
    return count


def cluster_is_live(path: Path) -> bool:
    """Does a node process named in the dir's cluster.json still run?"""
    data = read_json(path / CLUSTER_JSON)
    nodes = data.get("nodes") if isinstance(data, dict) else None
    if not isinstance(nodes, list):
        return False
    return any(isinstance(n, dict) and isinstance(n.get("pid"), int) and isinstance(n.get("run_dir"), str)
               and is_node_process(n["pid"], n["run_dir"]) for n in nodes)


def filter_runs(rows: list[RunRow], params: Mapping[str, str]) -> list[RunRow]:
    """The rows matching every filter given: `suite`, `verdict`, `client`, `kind`, `parent` (exact,
    case-insensitive), `seed` (a number), `q` (text in the id, suite, seed, failing checks or error)."""
    exact = {k: params[k].strip().lower() for k in ("suite", "verdict", "client", "kind", "parent")
             if params.get(k, "").strip()}
    seed = params.get("seed", "").strip()
    text = params.get("q", "").strip().lower()
    out = []
    for r in rows:
        values = {"suite": r.suite, "verdict": r.verdict, "client": r.client or ("mqlab" if r.kind == "chaos" else None),
                  "kind": r.kind, "parent": r.parent}
        if any((values[k] or "").lower() != v for k, v in exact.items()):
            continue
        if seed and str(r.seed) != seed:
            continue
        if text and not any(text in (s or "").lower() for s in (r.id, r.suite, str(r.seed), r.error,
                                                                 " ".join(r.failing_checks))):
            continue
        out.append(r)
    return out


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None
