"""The benchmark's numbers: median windows, ratios of the same-run references, targets, the JSON shape."""

from __future__ import annotations

import dataclasses
import json

import pytest

from harness.bench.results import (
    BenchReport,
    CaseResult,
    Measured,
    Reference,
    cpu_per_message,
    evaluate_targets,
    median_window,
    report_json,
)

RESULT_KEYS = ("client", "source", "batch", "body_bytes", "consumers", "msgs_per_s", "msgs_per_s_min",
               "msgs_per_s_max", "mb_per_s")


def pull(source: str, batch: int, msgs: int, consumers: int = 1, mode: str = "") -> CaseResult:
    return CaseResult("pull", source, batch, 1024, consumers, Measured(msgs, msgs * 1024, 1.0), mode=mode, window=8)


def send(mode: str, msgs: int, batch: int = 1, reference_batch: int = 0) -> CaseResult:
    return CaseResult("send", "master", batch, 1024, 1, Measured(msgs, msgs * 1024, 1.0), mode=mode,
                      reference_batch=reference_batch)


def ref(kind: str, batch: int, msgs: int) -> Reference:
    return Reference(kind, batch, 1, Measured(msgs, 0, 1.0))


def report_with(*cases: CaseResult, redis: bool = True) -> BenchReport:
    report = BenchReport(results=list(cases), record_bytes=1190, machine={"cpus": 2})
    for r in (ref("plain-stream", 32, 200_000), ref("plain-stream", 1024, 1_000_000), ref("tcp", 0, 2_000_000),
              ref("mmap-scan", 0, 4_000_000), ref("plain-unary", 32, 50_000), ref("plain-unary", 1024, 300_000),
              ref("plain-stream-publish", 32, 75_000), ref("plain-stream-publish", 1, 3_000),
              ref("mmap-append", 0, 450_000)):
        report.add_reference(r)
    if redis:
        for r in (ref("redis-ack", 32, 100_000), ref("redis-noack", 32, 150_000), ref("redis-ack", 1024, 250_000),
                  ref("redis-noack", 1024, 500_000), ref("redis-xadd", 32, 90_000), ref("redis-xadd", 1024, 140_000),
                  ref("redis-xadd-replicated", 32, 80_000), ref("redis-xadd-replicated", 1024, 130_000),
                  ref("redis-xadd-replicated", 1, 6_000), ref("redis-xadd-wait", 1, 3_000)):
            report.add_reference(r)
    return report


def test_measured_rates_and_spread():
    m = Measured(3_000, 3_000_000, 2.0)
    assert (m.msgs_per_s, m.mb_per_s) == (1_500.0, 1.5)
    assert m.spread == (1_500.0, 1_500.0)  # one window: no spread
    assert Measured(5, 5, 0.0).msgs_per_s == 0.0


def test_median_window_sums_aligned_windows_across_workers_and_keeps_the_median_with_the_spread():
    measured = median_window([([10, 40, 20], 0.5), ([30, 5, 20], 0.5)], body_bytes=100, errors=2)
    # sums 40, 45, 40: the median is 40, not the best 45
    assert (measured.messages, measured.payload_bytes, measured.seconds, measured.errors) == (40, 4000, 0.5, 2)
    assert measured.spread == (80.0, 90.0)
    even = median_window([([10, 40, 20, 30], 1.0)], body_bytes=1)
    assert even.messages == 20  # the lower middle of an even count: a window that happened


def test_median_window_of_unaligned_parts_adds_up_over_the_longest():
    measured = median_window([([100], 2.0), ([50], 1.0)], body_bytes=10)
    assert (measured.messages, measured.seconds) == (150, 2.0)
    assert median_window([], body_bytes=10).messages == 0


def test_ratios_use_the_references_of_the_same_batch():
    push = CaseResult("push", "master", 32, 1024, 1, Measured(50_000, 0, 1.0))
    report = report_with(pull("master", 32, 120_000), pull("master", 1024, 300_000), send("batch", 45_000, 32),
                         send("async", 70_000, 1, reference_batch=1024), push)
    by_label = {c.label: c for c in report.results}
    r32 = report.ratios(by_label["pull master b32 x1"])
    assert r32["plain-stream"] == pytest.approx(0.6) and r32["redis-ack"] == pytest.approx(1.2)
    assert r32["redis-noack"] == pytest.approx(0.8) and r32["tcp"] == pytest.approx(0.06)
    assert r32["mmap-scan"] == pytest.approx(0.03)
    assert report.ratios(by_label["pull master b1024 x1"])["plain-stream"] == pytest.approx(0.3)
    assert report.ratios(by_label["push master b32"])["redis-ack"] == pytest.approx(0.5)
    assert report.ratios(by_label["send batch b32"]) == {"plain-stream-publish": pytest.approx(0.6),
                                                         "plain-unary": pytest.approx(0.9),
                                                         "redis-xadd": pytest.approx(0.5),
                                                         "redis-xadd-replicated": pytest.approx(45 / 80),
                                                         "redis-xadd-wait": None,  # measured at b1 only
                                                         "mmap-append": pytest.approx(0.1)}
    assert report.ratios(by_label["send async b1"])["mmap-append"] == pytest.approx(70_000 / 450_000)  # no batch
    assert report.ratios(send("sync", 1_500))["plain-stream-publish"] == pytest.approx(0.5)
    assert report.ratios(send("sync", 1_500))["redis-xadd-wait"] == pytest.approx(0.5)
    assert report.ratios(by_label["send async b1"])["redis-xadd"] == pytest.approx(0.5)  # its coalesced batch
    assert report.ratios(send("sync", 500))["plain-unary"] is None  # b1 was not measured


def test_targets_met_and_missed():
    loop = CaseResult("pull-loop", "master", 32, 1024, 1, Measured(60_000, 0, 1.0))
    push = CaseResult("push", "master", 32, 1024, 1, Measured(40_000, 0, 1.0))
    report = report_with(pull("master", 32, 120_000), pull("master", 1024, 300_000), pull("slave", 32, 110_000),
                         pull("slave", 1024, 200_000), pull("slave", 1024, 1, mode="first-read"), loop, push,
                         send("batch", 100_000, 32), send("batch", 120_000, 1024),
                         send("async", 90_000, 1, reference_batch=1024), send("sync", 2_700))
    verdicts = {v.name: v for v in evaluate_targets(report)}
    assert verdicts["pull master b32 x1 >= 1.0x redis-ack b32"].met is True  # 1.2x
    assert verdicts["pull master b32 x1 >= 0.5x plain-stream b32"].met is True  # 0.6x
    assert verdicts["pull master b1024 x1 >= 1.0x redis-ack b1024"].met is True  # 1.2x
    assert verdicts["pull master b1024 x1 >= 0.4x plain-stream b1024"].met is False  # 0.3x
    assert verdicts["pull slave b32 x1 within 10% of master"].met is True  # 92%
    assert verdicts["pull slave b1024 x1 within 10% of master"].met is False  # 67%
    assert verdicts["push b32 >= 1.0x redis-ack b32 in every round"].met is False  # 0.4x
    assert verdicts["pull loop b32 >= 0.5x redis-ack b32"].met is True  # 0.6x
    assert verdicts["send sync b1 >= 0.8x plain-stream-publish b1"].met is True  # 0.9x
    assert verdicts["send sync b1 >= 0.5x redis-xadd-replicated b1"].met is False  # 0.45x
    assert verdicts["send_batch b32 >= 1.0x redis-xadd-replicated b32"].met is True  # 1.25x
    assert verdicts["send_batch b1024 >= 1.0x redis-xadd-replicated b1024"].met is False  # 0.92x
    assert verdicts["send_async >= 0.8x the best send_batch"].met is False  # 0.75x
    assert len(verdicts) == 13  # the first-read row is no slave target; no C++ client row, no C++ target


def test_sync_master_sends_are_judged_against_xadd_then_wait_and_the_cpp_client_when_measured():
    cpp = CaseResult("cpp-send", "master", 1, 1024, 1, Measured(3_300, 0, 1.0), mode="sync", window=1)
    report = report_with(send("sync", 2_700), cpp)
    report.run = {"mode": "sync-master"}
    verdicts = {v.name: v for v in evaluate_targets(report)}
    assert verdicts["send sync b1 >= 0.8x redis-xadd-wait b1"].met is True  # 0.9x
    assert verdicts["cpp send sync b1 >= 0.5x redis-xadd-wait b1"].met is True  # 1.1x
    assert not any("plain-stream-publish b1" in name for name in verdicts)  # no floor of a SYNC_MASTER send
    report.run = {"mode": "async"}
    verdicts = {v.name: v for v in evaluate_targets(report)}
    assert verdicts["cpp send sync b1 >= 0.5x redis-xadd-replicated b1"].met is True  # 0.55x


def test_targets_without_redis_or_cases_are_not_judged_and_say_why():
    verdicts = {v.name: v for v in evaluate_targets(report_with(pull("master", 32, 120_000), redis=False))}
    missing = verdicts["pull master b32 x1 >= 1.0x redis-ack b32"]
    assert missing.met is None and "--peers redis" in missing.detail
    assert verdicts["pull master b32 x1 >= 0.5x plain-stream b32"].met is True
    assert all(v.met is None for v in evaluate_targets(BenchReport()))


def test_report_json_shape():
    report = report_with(pull("master", 32, 60_000), pull("slave", 1024, 150_000, consumers=4), send("async", 700))
    data = json.loads(json.dumps(report_json(report)))  # plain JSON types only
    assert {"results", "references", "record_bytes", "machine", "targets", "problems"} <= set(data)
    first = data["results"][0]
    assert list(first)[:len(RESULT_KEYS)] == list(RESULT_KEYS)
    assert (first["client"], first["source"], first["batch"], first["msgs_per_s"]) == ("pull", "master", 32, 60_000.0)
    assert first["mb_per_s"] == pytest.approx(61.44) and first["ratios"]["plain-stream"] == 0.3
    assert data["results"][1]["consumers"] == 4 and data["results"][2]["mode"] == "async"
    kinds = {(r["kind"], r["batch"]) for r in data["references"]}
    assert {("plain-stream", 32), ("redis-ack", 1024), ("tcp", 0), ("mmap-scan", 0)} <= kinds
    assert data["machine"] == {"cpus": 2} and data["record_bytes"] == 1190


def test_case_labels():
    assert pull("slave", 1024, 1, consumers=4).label == "pull slave b1024 x4"
    assert pull("master", 1024, 1, mode="first-read").label == "pull master b1024 x1 (first-read)"
    assert send("batch", 1, 100).label == "send batch b100"
    assert CaseResult("pull-loop", "master", 32, 1024, 1, Measured(1, 1, 1.0)).label == "pull loop master b32"


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


def test_the_results_table_shows_the_median_the_range_and_the_ratios():
    from rich.console import Console

    from harness.bench.report import results_table

    case = CaseResult("pull", "master", 32, 1024, 1, Measured(120_000, 0, 1.0, 0, 100_000.0, 130_000.0))
    console = Console(width=200, record=True)
    console.print(results_table(report_with(case)))
    row = next(line for line in console.export_text().splitlines() if "pull master" in line)
    cells = [cell.strip() for cell in row.split("│")[1:-1]]
    assert cells[2:6] == ["120,000", "100k-130k", "0.0", "0.60x"]
    assert cells[6:10] == ["1.20x", "-", "0.80x", "0.06x"]  # redis, redis wait (a send's), noack, tcp


def test_a_send_rows_plain_column_is_the_stream_publish_it_rides_on():
    from rich.console import Console

    from harness.bench.report import results_table

    console = Console(width=200, record=True)
    console.print(results_table(report_with(send("batch", 45_000, 32), send("batch", 150_000, 1024))))
    plain = {line.split("│")[1].strip(): line.split("│")[6].strip()
             for line in console.export_text().splitlines() if "send batch" in line}
    # b32 has a stream publish reference (0.6x of it; of the unary call it would be 0.9x), b1024 only the unary one
    assert plain == {"send batch b32": "0.60x", "send batch b1024": "0.50x"}
