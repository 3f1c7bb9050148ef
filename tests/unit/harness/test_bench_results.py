"""The benchmark's numbers: windows, fractions of the same-run limits, targets, the JSON shape."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.bench.results import (
    BenchReport,
    CaseResult,
    Limits,
    Measured,
    StreamLimit,
    UnaryLimit,
    best_window,
    cpu_per_message,
    evaluate_targets,
    report_json,
)

ISSUE_RESULT_KEYS = ("client", "source", "batch", "body_bytes", "consumers", "msgs_per_s", "mb_per_s",
                     "fraction_of_grpc_limit")


def pull(source: str, batch: int, msgs: int, consumers: int = 1, mode: str = "") -> CaseResult:
    return CaseResult("pull", source, batch, 1024, consumers, Measured(msgs, msgs * 1024, 1.0), mode=mode, window=8)


def send(mode: str, msgs: int, batch: int = 1) -> CaseResult:
    return CaseResult("send", "master", batch, 1024, 1, Measured(msgs, msgs * 1024, 1.0), mode=mode)


def report_with(*cases: CaseResult) -> BenchReport:
    limits = Limits(grpc_stream={32: StreamLimit(32, 8, Measured(100_000, 0, 1.0)),
                                 1024: StreamLimit(1024, 8, Measured(200_000, 0, 1.0))},
                    grpc_unary={"batch": UnaryLimit("batch", 100, 1, Measured(80_000, 0, 1.0))},
                    mmap_scan=Measured(1_000_000, 0, 1.0), record_bytes=1190)
    return BenchReport(results=list(cases), limits=limits, machine={"cpus": 2})


def test_measured_rates():
    m = Measured(3_000, 3_000_000, 2.0)
    assert (m.msgs_per_s, m.mb_per_s) == (1_500.0, 1.5)
    assert Measured(5, 5, 0.0).msgs_per_s == 0.0


def test_best_window_sums_aligned_windows_across_workers_and_keeps_the_best():
    measured = best_window([([10, 40, 20], 0.5), ([30, 5, 20], 0.5)], body_bytes=100, errors=2)
    assert (measured.messages, measured.payload_bytes, measured.seconds, measured.errors) == (45, 4_500, 0.5, 2)
    assert measured.msgs_per_s == 90.0


def test_best_window_of_unaligned_parts_adds_up_over_the_longest():
    measured = best_window([([100], 2.0), ([50], 1.0)], body_bytes=10)
    assert (measured.messages, measured.seconds) == (150, 2.0)
    assert best_window([], body_bytes=10).messages == 0


def test_fractions_use_the_limit_of_the_same_batch_and_mode():
    report = report_with(pull("master", 32, 60_000), pull("master", 1024, 150_000), send("batch", 8_000, 100),
                         send("sync", 500), CaseResult("push", "master", 32, 1024, 1, Measured(10_000, 0, 1.0)))
    by_label = {c.label: c for c in report.results}
    assert report.fraction_of_grpc_limit(by_label["pull master b32 x1"]) == pytest.approx(0.6)
    assert report.fraction_of_grpc_limit(by_label["pull master b1024 x1"]) == pytest.approx(0.75)
    assert report.fraction_of_scan_limit(by_label["pull master b1024 x1"]) == pytest.approx(0.15)
    assert report.fraction_of_grpc_limit(by_label["push master"]) == pytest.approx(0.1)  # the push batch (32)
    assert report.fraction_of_grpc_limit(by_label["send batch b100"]) == pytest.approx(0.1)
    assert report.fraction_of_grpc_limit(by_label["send sync b1"]) is None  # its limit was not measured
    assert report.fraction_of_scan_limit(by_label["send sync b1"]) is None  # sends never read the commitlog


def test_targets_met_and_missed():
    report = report_with(pull("master", 32, 60_000), pull("master", 1024, 120_000), pull("slave", 32, 56_000),
                         pull("slave", 1024, 90_000), pull("slave", 1024, 1, mode="first-read"),
                         send("batch", 52_000, 100), send("async", 900))
    verdicts = {v.name: v for v in evaluate_targets(report)}
    assert verdicts["pull master b32 x1 >= 50% of gRPC limit"].met is True
    assert verdicts["pull master b1024 x1 >= 70% of gRPC limit"].met is False  # 60%
    assert verdicts["pull slave b32 x1 within 10% of master"].met is True  # 93%
    assert verdicts["pull slave b1024 x1 within 10% of master"].met is False  # 75%
    assert verdicts["one producer, send_batch or send_async >= 50,000 msgs/s"].met is True
    assert len(verdicts) == 5  # the first-read row is no slave target


def test_targets_not_measured_are_neither_met_nor_missed():
    verdicts = evaluate_targets(BenchReport())
    assert [v.met for v in verdicts] == [None, None, None]


def test_report_json_has_the_issue_shape():
    report = report_with(pull("master", 32, 60_000), pull("slave", 1024, 150_000, consumers=4),
                         send("async", 700))
    data = json.loads(json.dumps(report_json(report)))  # plain JSON types only
    assert {"results", "limits", "machine"} <= set(data)
    first = data["results"][0]
    assert list(first)[:len(ISSUE_RESULT_KEYS)] == list(ISSUE_RESULT_KEYS)
    assert first["client"] == "pull" and first["source"] == "master" and first["batch"] == 32
    assert (first["body_bytes"], first["consumers"], first["msgs_per_s"]) == (1024, 1, 60_000.0)
    assert first["mb_per_s"] == pytest.approx(61.44) and first["fraction_of_grpc_limit"] == 0.6
    assert data["results"][1]["consumers"] == 4 and data["results"][1]["source"] == "slave"
    assert data["results"][2]["client"] == "send" and data["results"][2]["mode"] == "async"
    assert data["results"][2]["fraction_of_grpc_limit"] is None
    limits = data["limits"]
    assert [s["batch"] for s in limits["grpc_stream"]] == [32, 1024]
    assert limits["grpc_stream"][0]["msgs_per_s"] == 100_000.0 and limits["mmap_scan"]["msgs_per_s"] == 1e6
    assert limits["grpc_unary"][0]["mode"] == "batch" and limits["record_bytes"] == 1190
    assert data["machine"] == {"cpus": 2}
    assert {t["name"] for t in data["targets"]} >= {"pull master b32 x1 >= 50% of gRPC limit"}


def test_case_labels():
    assert pull("slave", 1024, 1, consumers=4).label == "pull slave b1024 x4"
    assert pull("master", 1024, 1, mode="first-read").label == "pull master b1024 x1 (first-read)"
    assert send("batch", 1, 100).label == "send batch b100"


def test_cpu_per_message_divides_each_process_by_the_messages_and_leaves_unknowns_out():
    assert cpu_per_message({"clients": 0.5, "master": 1.25, "slave": None}, 25_000) == {"clients": 20.0,
                                                                                           "master": 50.0}
    assert cpu_per_message({"clients": 0.5}, 0) == {}


def test_a_case_reports_its_cpu_per_message_in_the_json():
    case = dataclasses.replace(send("batch", 20_000, 100), cpu_us_per_msg={"clients": 25.0, "master": 40.0})
    entry = report_json(report_with(case))["results"][0]
    assert entry["cpu_us_per_msg"] == {"clients": 25.0, "master": 40.0}
    assert report_json(report_with(send("batch", 1)))["results"][0]["cpu_us_per_msg"] == {}


def test_the_cpu_table_shows_each_process_and_the_total_and_a_dash_for_unknowns():
    from rich.console import Console

    from harness.bench.report import cpu_table

    known = dataclasses.replace(send("batch", 20_000, 100),
                                cpu_us_per_msg={"clients": 21.5, "master": 33.0, "slave": 22.5})
    console = Console(width=120, record=True)
    console.print(cpu_table(report_with(known, send("sync", 500))))
    rows = [line for line in console.export_text().splitlines() if "send" in line]
    assert [cell.strip() for cell in rows[0].split("│")[1:-1]] == ["send batch b100", "21.5", "33.0", "22.5", "77.0"]
    assert [cell.strip() for cell in rows[1].split("│")[1:-1]] == ["send sync b1", "-", "-", "-", "-"]
