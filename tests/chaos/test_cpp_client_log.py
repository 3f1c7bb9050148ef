"""The C++ consumer's wrapper reads one rebalance step from the client's own log: a dropped pull
request resumed with its old cache (`queue-resumed`), which the checker needs to explain the
redeliveries it causes."""

from __future__ import annotations

import argparse
import json
import os
import time

from chaos.real_clients import cpp_consumer as wrapper

RESUME = ("[2026-Nov-29 21:01:53.087962](info):after resume the pull handle of this pullRequest, its mq is:"
          "MessageQueue [topic=ChaosTopic, brokerName=broker-a, queueId=3], its offset is:1591"
          "[updateRequestTableInRebalance:506]")
OTHER = ("[2026-Nov-29 21:01:53.087936](info):pullRequest with mq :MessageQueue [topic=ChaosTopic, "
         "brokerName=broker-a, queueId=3] set pullMsgEvent[addPullMsgEvent:267]")


def test_a_resume_line_is_read_with_its_queue_offset_and_local_time():
    fields = wrapper.parse_resume(RESUME)
    expected_wall_ms = int(time.mktime((2026, 11, 29, 21, 1, 53, 0, 0, -1))) * 1000 + 87
    assert fields == {"topic": "ChaosTopic", "broker_name": "broker-a", "queue_id": 3, "queue_offset": 1591,
                      "written_wall_ms": expected_wall_ms}
    assert wrapper.parse_resume(OTHER) is None
    assert wrapper.parse_resume(RESUME.replace("queueId=3", "queueId=x")) is None


def test_the_watch_journals_each_resume_once_and_waits_for_a_half_written_line(tmp_path):
    log = tmp_path / "logs" / "rocketmq-cpp" / f"{os.getpid()}_rocketmq-cpp.log.0"
    log.parent.mkdir(parents=True)
    (tmp_path / "logs" / "rocketmq-cpp" / "1_rocketmq-cpp.log.0").write_text(RESUME + "\n")  # another process's
    args = argparse.Namespace(node_id="consumer-1", group="G", run_dir=tmp_path)
    events = wrapper.Journal(tmp_path / "events.jsonl")
    watch = wrapper.ResumeWatch(args, "77-127.0.0.1@consumer-1", events)
    half = len(RESUME) // 2
    log.write_text(OTHER + "\n" + RESUME[:half])
    watch.poll()
    assert not (tmp_path / "events.jsonl").read_text()
    with log.open("a") as f:
        f.write(RESUME[half:] + "\n" + OTHER + "\n")
    watch.poll()
    watch.poll()
    events.close()
    [record] = [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    assert {k: record[k] for k in ("event", "node", "side", "group", "client_id", "topic", "broker_name",
                                   "queue_id", "queue_offset")} == {
        "event": "queue-resumed", "node": "consumer-1", "side": "client", "group": "G",
        "client_id": "77-127.0.0.1@consumer-1", "topic": "ChaosTopic", "broker_name": "broker-a",
        "queue_id": 3, "queue_offset": 1591}
    assert record["wall_ms"] == wrapper.parse_resume(RESUME)["written_wall_ms"]
    # the monotonic stamp moved back with the wall one: the line's own time, not the read's
    now_gap_ms = time.time_ns() // 1_000_000 - time.monotonic_ns() // 1_000_000
    assert abs((record["wall_ms"] - record["mono_ms"]) - now_gap_ms) < 1_000
