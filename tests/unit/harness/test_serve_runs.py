"""`mqlab serve`'s runs listing over HTTP (Starlette's test client on the real app): run dirs written
in the documented formats (run.json, verdict.json, report.html, nemesis.jsonl, cluster.json,
matrix.json), its filters, the files it serves, and a live run found by its node process."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path

import pytest
from rich.console import Console
from starlette.testclient import TestClient
from typer.testing import CliRunner

from harness import cli, terminal
from harness.serve.app import create_app

MATRIX = "20261103T090000Z-matrix"
RUNNING = "20261105T120000Z-lock-takeover-s9"
CLOSED_PORT_ADDR = "127.0.0.1:1"  # nothing listens: the name server of a cluster that is gone


def write_run(path: Path, *, suite: str, seed: int, verdict: object | None, failing: tuple[str, ...] = (),
              client: str = "mqlab", report: bool = True, faults: int = 0) -> Path:
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps({
        "suite": suite, "seed": seed, "time_scale": 0.05, "mode": "async", "topology": "single", "client": client,
        "exit_code": {True: 0, False: 1}.get(verdict, 2)}))  # type: ignore[call-overload]
    if verdict is not None:
        checks = {"order": {"valid": True}, **{name: {"valid": False, "count": 3} for name in failing}}
        (path / "verdict.json").write_text(json.dumps({"valid": verdict, "suite": suite, "seed": seed, "checks": checks}))
    if report:
        (path / "report.html").write_text(f"<html><body>report of {suite} seed {seed}</body></html>")
    if faults:
        lines = []
        for i in range(1, faults + 1):
            base = {"node": "nemesis", "event": "nemesis", "fault_id": f"f{i}-kill", "targets": [f"consumer-{i}"],
                    "mono_ms": 1000 * i}
            lines += [{**base, "op": "kill", "phase": "start", "detail": "SIGKILL", "wall_ms": 10_000 * i},
                      {**base, "op": "kill", "phase": "end", "detail": "SIGKILL", "wall_ms": 10_000 * i + 5}]
        (path / "nemesis").mkdir()
        (path / "nemesis" / "nemesis.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "runs"
    write_run(root / "20261101T100000Z-lock-takeover-s1", suite="lock-takeover", seed=1, verdict=True, faults=2)
    write_run(root / "20261102T100000Z-offset-resync-s7", suite="offset-resync", seed=7, verdict=False,
              failing=("offsets",), client="ons")
    matrix = root / MATRIX
    write_run(matrix / "lock-takeover-s2-x0.05", suite="lock-takeover", seed=2, verdict="unknown")
    write_run(matrix / "read-routing-s2-x0.05", suite="read-routing", seed=2, verdict=None, report=False)
    (matrix / "matrix.json").write_text(json.dumps({"exit_code": 2, "runs": []}))
    (matrix / "index.html").write_text('<a href="lock-takeover-s2-x0.05/report.html">run</a>')
    up = root / "20261104T080000Z-4242"  # what `mqlab up` leaves: cluster.json, its nodes stopped
    up.mkdir()
    (up / "cluster.json").write_text(json.dumps({"namesrv": CLOSED_PORT_ADDR, "time_scale": 1.0, "nodes": [
        {"id": "namesrv-0", "role": "namesrv", "addr": CLOSED_PORT_ADDR, "pid": None, "run_dir": str(up / "namesrv-0")}]}))
    torn = root / "20261106T000000Z-durability-s3"
    torn.mkdir()
    (torn / "run.json").write_text('{"suite": "durabil')  # a run killed while it wrote
    (root / "latest").symlink_to(up.name)
    return root


@pytest.fixture
def running(runs):
    """A chaos run in progress: its cluster.json names a live process whose cwd is that node's run dir
    (how the harness tells its nodes from a reused pid) and its nemesis has a fault open."""
    path = write_run(runs / RUNNING, suite="lock-takeover", seed=9, verdict=None, report=False)
    node_dir = path / "consumer-0"
    node_dir.mkdir()
    proc = subprocess.Popen(["sleep", "60"], cwd=node_dir)
    try:
        (path / "cluster.json").write_text(json.dumps({"namesrv": CLOSED_PORT_ADDR, "time_scale": 0.05, "nodes": [
            {"id": "consumer-0", "role": "consumer", "addr": "127.0.0.1:2", "pid": proc.pid, "run_dir": str(node_dir)},
            {"id": "consumer-1", "role": "consumer", "addr": "127.0.0.1:3", "pid": None,
             "run_dir": str(path / "consumer-1")}]}))
        (path / "nemesis").mkdir()
        (path / "nemesis" / "nemesis.jsonl").write_text(json.dumps({
            "node": "nemesis", "event": "nemesis", "op": "partition", "phase": "start", "fault_id": "f1-partition",
            "targets": ["consumer-0"], "wall_ms": 5, "mono_ms": 5,
            "detail": "isolate consumer-0 DROP: 2 links (consumer-0->broker-a-0, broker-a-0->consumer-0)"}) + "\n")
        yield path
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def client(runs):
    with TestClient(create_app(runs)) as c:
        yield c


def ids(http: TestClient, **params: str) -> list[str]:
    resp = http.get("/api/runs", params=params)
    assert resp.status_code == 200
    return [r["id"] for r in resp.json()["runs"]]


def test_every_run_is_listed_newest_first_with_its_verdict_and_files(client):
    body = client.get("/api/runs").json()
    rows = {r["id"]: r for r in body["runs"]}
    order = list(rows)  # `latest` (a link) is not a run of its own
    assert order[:2] + order[4:] == ["20261106T000000Z-durability-s3", "20261104T080000Z-4242",
                                     "20261102T100000Z-offset-resync-s7", "20261101T100000Z-lock-takeover-s1"]
    assert set(order[2:4]) == {f"{MATRIX}/lock-takeover-s2-x0.05", f"{MATRIX}/read-routing-s2-x0.05"}  # in its time
    first = rows["20261101T100000Z-lock-takeover-s1"]
    assert (first["kind"], first["verdict"], first["suite"], first["seed"], first["faults"]) == (
        "chaos", "valid", "lock-takeover", 1, 2)
    assert first["files"]["report"] == "20261101T100000Z-lock-takeover-s1/report.html"
    assert first["started"] == "2026-11-01T10:00:00Z"
    invalid = rows["20261102T100000Z-offset-resync-s7"]
    assert (invalid["verdict"], invalid["failing_checks"], invalid["client"]) == ("INVALID", ["offsets"], "ons")
    assert rows[f"{MATRIX}/lock-takeover-s2-x0.05"]["verdict"] == "unknown"
    assert rows[f"{MATRIX}/read-routing-s2-x0.05"]["verdict"] == "not checked"
    assert rows[f"{MATRIX}/read-routing-s2-x0.05"]["parent"] == MATRIX
    assert rows["20261104T080000Z-4242"]["kind"] == "cluster" and not rows["20261104T080000Z-4242"]["live"]
    assert rows["20261106T000000Z-durability-s3"]["suite"] is None  # torn run.json: listed, nothing invented
    assert body["collections"] == [{"id": MATRIX, "kind": "matrix", "runs": 2, "exit_code": 2,
                                    "started": "2026-11-03T09:00:00Z",
                                    "files": {"index": f"{MATRIX}/index.html", "matrix": f"{MATRIX}/matrix.json"}}]
    assert body["facets"] == {"suite": ["lock-takeover", "offset-resync", "read-routing"],
                              "client": ["mqlab", "ons"], "verdict": ["valid", "INVALID", "unknown", "not checked"]}


def test_filters_narrow_the_listing(client):
    assert ids(client, suite="lock-takeover") == [f"{MATRIX}/lock-takeover-s2-x0.05", "20261101T100000Z-lock-takeover-s1"]
    assert ids(client, suite="lock-takeover", verdict="unknown") == [f"{MATRIX}/lock-takeover-s2-x0.05"]
    assert ids(client, verdict="invalid") == ["20261102T100000Z-offset-resync-s7"]  # case does not matter
    assert ids(client, client="ons") == ["20261102T100000Z-offset-resync-s7"]
    assert ids(client, client="mqlab", verdict="valid") == ["20261101T100000Z-lock-takeover-s1"]
    assert sorted(ids(client, seed="2")) == [f"{MATRIX}/lock-takeover-s2-x0.05", f"{MATRIX}/read-routing-s2-x0.05"]
    assert ids(client, q="OFFSETS") == ["20261102T100000Z-offset-resync-s7"]  # a failing check's name
    assert ids(client, parent=MATRIX, suite="read-routing") == [f"{MATRIX}/read-routing-s2-x0.05"]
    assert ids(client, kind="cluster") == ["20261104T080000Z-4242"]
    assert ids(client, suite="no-such-suite") == []
    assert client.get("/api/runs", params={"verdict": "valid"}).json()["total"] == 6  # before filtering


def test_reports_verdicts_and_indexes_are_served_and_nothing_outside_the_runs_dir(client, runs):
    report = client.get("/files/20261101T100000Z-lock-takeover-s1/report.html")
    assert report.status_code == 200 and "report of lock-takeover seed 1" in report.text
    verdict = client.get("/files/20261102T100000Z-offset-resync-s7/verdict.json").json()
    assert verdict["valid"] is False
    index = client.get(f"/files/{MATRIX}/")
    assert index.status_code == 200 and "lock-takeover-s2-x0.05/report.html" in index.text
    (runs.parent / "secret.txt").write_text("outside")
    for path in ("/files/../secret.txt", "/files/%2e%2e/secret.txt", "/files/no-such-run/report.html"):
        resp = client.get(path)
        assert resp.status_code == 404 and "outside" not in resp.text, path
    assert "runs page" in client.get("/files/no-such-run/report.html").json()["error"]
    pages = [client.get(p) for p in ("/", "/runs", "/static/live.js", "/static/runs.js", "/static/style.css")]
    assert all(p.status_code == 200 for p in pages)


def test_a_run_in_progress_is_live_and_a_gone_name_server_breaks_nothing(running, client):
    row = next(r for r in client.get("/api/runs").json()["runs"] if r["id"] == RUNNING)
    assert (row["live"], row["verdict"]) == (True, "running")
    assert client.get("/api/clusters").json()["live"] == [
        {"id": RUNNING, "suite": "lock-takeover", "seed": 9, "kind": "chaos"}]
    snap = client.get("/api/live", params={"run": RUNNING}).json()
    states = {p["id"]: (p["state"], p["fault"]) for p in snap["processes"]}
    assert states == {"consumer-0": ("up", "partitioned"), "consumer-1": ("down", None)}
    assert snap["faults"]["cut_links"] == {"consumer-0->broker-a-0": "DROP", "broker-a-0->consumer-0": "DROP"}
    assert [w["state"] for w in snap["faults"]["active"]] == ["starting"]
    deadline = time.monotonic() + 10
    while snap["admin"].get("collected_wall_ms") is None and time.monotonic() < deadline:
        time.sleep(0.1)
        snap = client.get("/api/live", params={"run": RUNNING}).json()
    assert snap["admin"]["namesrv"]["ok"] is False and "did not answer" in snap["admin"]["namesrv"]["error"]
    assert snap["admin"]["topics"] == [] and snap["admin"]["brokers"] == []
    missing = client.get("/api/live", params={"run": "../elsewhere"})
    assert missing.status_code == 404 and "runs page" in missing.json()["error"]
    assert "no cluster picked" in client.get("/api/live").json()["error"]


def test_serve_refuses_a_taken_port_and_a_run_dir_without_a_cluster(tmp_path, monkeypatch):
    monkeypatch.setattr(terminal, "console", Console(width=250, highlight=False))
    monkeypatch.setattr(terminal, "err_console", Console(width=250, highlight=False, stderr=True))
    runner = CliRunner()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = runner.invoke(cli.app, ["serve", "--runs", str(tmp_path), "--port", str(taken.getsockname()[1])])
    assert result.exit_code == 2 and "is in use" in result.output and "--port 0" in result.output
    result = runner.invoke(cli.app, ["serve", "--run-dir", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "no cluster.json in" in result.output
    assert "Traceback" not in result.output


def test_run_dir_names_the_cluster_a_page_watches_by_default(running, runs):
    with TestClient(create_app(runs, running)) as http:
        snap = http.get("/api/live").json()
        assert (snap["run"], snap["run_dir"]) == ("", str(running))
        assert [p["id"] for p in snap["processes"]] == ["consumer-0", "consumer-1"]
        assert snap["run_info"]["suite"] == "lock-takeover"
        assert http.get("/api/clusters").json()["run_dir"] == {"id": "", "run_dir": str(running)}
