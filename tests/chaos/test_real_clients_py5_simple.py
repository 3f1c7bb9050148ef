"""`--client py5-simple`: Apache's RocketMQ 5 Python client as SimpleConsumer loops (a fixed
invisible time, no renewal), with a client-ack line per ack in the consumer's events.jsonl.

The wiring, the plan and the wrapper's handle and status parsing are fast. The real processes run
at the interop time scale (0.05: RocketMQ's 10 s invisible floor is 0.5 s, so a 1 s invisible time
is accepted and an expired hand-out is revived within a second) with the two broker timers a real
client must outlive at their real length, and are slow like py5's real-process tests.
"""

from __future__ import annotations

import importlib
import signal
import socket
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from interop.mqlab_side import REAL_CLIENT_TIMING, TIME_SCALE

from chaos.bounds import REAL_CLIENT_TIMERS_MS
from chaos.real_clients import CLIENTS, wire
from chaos.runner import RunOptions, plan
from chaos.suites import GROUP, SUITES, TOPIC
from chaos.workload import ProducerWorkload
from harness import LocalCluster
from harness.spec import ClusterSpec
from nodes.broker.rmq5.codes import Rmq5Code
from nodes.common.receipt_handle import ReceiptHandle
from nodes.consumer.journal import read_journal
from tests.support import journals
from tests.support.real_client_runs import start_with_workload

PY5_SIMPLE = CLIENTS["py5-simple"]
WRAPPER_DIR = Path(PY5_SIMPLE.script).parent
FIRST_ACK_BUDGET_S = 60.0  # startup retries until the topic routes, then the first receive
ACKS_WANTED = 60
INVISIBLE_MS = 1_000  # the smallest whole second; the floor at this time scale is 0.5 s
PAUSE_S = 3.0  # past the invisible time and the revive pass that follows it
REDELIVERY_BUDGET_S = 30.0


@pytest.fixture
def wrapper_modules(monkeypatch):
    """The wrapper's own modules, imported as the script imports them (from its directory)."""
    monkeypatch.syspath_prepend(str(WRAPPER_DIR))
    return importlib.import_module("py5_history"), importlib.import_module("py5_simple")


# ---- wiring ------------------------------------------------------------------------------------

def test_a_py5_simple_run_is_planned_with_py5s_timers():
    assert REAL_CLIENT_TIMERS_MS["py5-simple"] == REAL_CLIENT_TIMERS_MS["py5"]
    _, simple = plan(RunOptions(SUITES["failover"], seed=1, time_scale=1.0, client="py5-simple"))
    _, push = plan(RunOptions(SUITES["failover"], seed=1, time_scale=1.0, client="py5"))
    assert simple == push


def test_wiring_runs_the_py5_wrapper_in_simple_mode(tmp_path):
    PY5_SIMPLE.check_installed()  # the same venv as py5
    spec = SUITES["offset-resync"].spec(1.0)
    cluster = LocalCluster(spec, run_dir=tmp_path / "run", links=True, start=False)
    try:
        simple = wire(cluster, PY5_SIMPLE, group=GROUP, topic=TOPIC, orderly=False,
                      consumer_options={"sleep_ms": 3, "consume_thread_min": 2})
        push = wire(cluster, CLIENTS["py5"], group=GROUP, topic=TOPIC, orderly=False, consumer_options={})
        assert sorted(simple) == sorted(push) and simple
        for node, argv in simple.items():
            assert argv[1] == push[node][1] and argv[1].endswith("py5/consumer.py")
            assert argv[-2:] == ["--mode", "simple"] and "--mode" not in push[node]
            assert argv[argv.index("--threads") + 1] == "2" and argv[argv.index("--sleep-ms") + 1] == "3"
            assert argv[argv.index("--endpoints") + 1] == push[node][push[node].index("--endpoints") + 1]
    finally:
        cluster.close()


# ---- the wrapper's parsing ---------------------------------------------------------------------

def test_a_client_ack_line_reads_the_broker_handle_it_acks(wrapper_modules):
    history, _ = wrapper_modules
    handle = ReceiptHandle("r", "broker-b", GROUP, f"%RETRY%{GROUP}_{TOPIC}", 3, 41, 123_456, 1_700_000_000_000,
                           15_000, 7)
    assert history.ack_handle_fields(handle.encode()) == {
        "broker_name": "broker-b", "queue_topic": f"%RETRY%{GROUP}_{TOPIC}", "queue_id": 3, "queue_offset": 41,
        "generation": 7, "deadline_wall_ms": handle.deadline_wall_ms}
    assert history.handle_fields(handle.encode())["commitlog_offset"] == 123_456
    assert set(history.ack_handle_fields("someone else's handle").values()) == {None}


def test_an_ack_refusal_is_named_by_its_code_a_transport_failure_by_its_grpc_status(wrapper_modules):
    _, simple = wrapper_modules

    class Refused(Exception):  # the client's ClientException: the answer's Status.code
        code = Rmq5Code.INVALID_RECEIPT_HANDLE.value

    class Cut(Exception):  # a grpc.RpcError: code() is its StatusCode
        def code(self):
            import grpc
            return grpc.StatusCode.DEADLINE_EXCEEDED

    def name(code: int) -> str:
        return Rmq5Code(code).name

    assert simple.ack_status(Refused(), name) == "INVALID_RECEIPT_HANDLE"
    assert simple.ack_status(Cut(), name) == "grpc-DEADLINE_EXCEEDED"
    assert simple.ack_status(RuntimeError("not running"), name) == "RuntimeError"


# ---- real processes ----------------------------------------------------------------------------

def _cluster(tmp_path: Path) -> LocalCluster:
    spec = ClusterSpec(time_scale=TIME_SCALE, timing=REAL_CLIENT_TIMING).with_consumers(
        1, group=GROUP, subscriptions={TOPIC: "*"})
    return LocalCluster(spec, run_dir=tmp_path / "run", links=True, start=False)


def _start(cluster: LocalCluster) -> ProducerWorkload:
    return start_with_workload(cluster, "failover", "py5-simple", rate_per_s=40)



def _events(run_dir: Path, name: str) -> list[dict]:
    return [e for e in read_journal(run_dir / "consumer-0" / "events.jsonl") if e.get("event") == name]



def _where(line: dict) -> tuple:
    return line["msg_id"], line["broker_name"], line["queue_topic"], line["queue_id"], line["queue_offset"]


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_a_py5_simple_consumer_acks_every_message_it_consumes_and_journals_each_ack(tmp_path):
    cluster = _cluster(tmp_path)
    producer = None
    try:
        wire(cluster, PY5_SIMPLE, group=GROUP, topic=TOPIC, orderly=False, consumer_options={})
        producer = _start(cluster)
        run_dir = cluster.run_dir
        journals.wait_until(f"{ACKS_WANTED} client acks", FIRST_ACK_BUDGET_S,
              lambda: len(_events(run_dir, "client-ack")) >= ACKS_WANTED)
        producer.stop()
        producer = None
        assert cluster.stop("consumer-0") == 0  # graceful: the batches in hand are acked first
        deliveries, acks = journals.deliveries(run_dir), _events(run_dir, "client-ack")
        (start,), (stop,) = _events(run_dir, "consumer-start"), _events(run_dir, "consumer-stop")
        assert (start["client"], start["mode"], start["invisible_ms"]) == ("py5-simple", "simple", 15_000)
        assert {a["status"] for a in acks} == {"ok"} and all(a["error"] is None for a in acks)
        # one ack per delivery, of the hand-out that delivery came from
        assert Counter(map(_where, acks)) == Counter(map(_where, deliveries))
        assert all(d["broker_name"] == "broker-a" and d["delivery_attempt"] >= 1 for d in deliveries)
        first_seen = {}
        for d in deliveries:
            first_seen.setdefault(_where(d), d["mono_ms"])
        for a in acks:
            assert first_seen[_where(a)] <= a["sent_mono_ms"] <= a["mono_ms"]
            assert a["wall_ms"] < a["deadline_wall_ms"], a  # answered within its 15 s invisible time
            assert isinstance(a["generation"], int) and a["client_id"] == start["client_id"] == a["client_id"]
            assert (a["side"], a["node"], a["group"]) == ("client", "consumer-0", GROUP)
        assert stop["results"] == {"CONSUME_SUCCESS": len(deliveries), "ack-ok": len(acks)}
    finally:
        if producer is not None:
            producer.stop()
        cluster.close()


@pytest.mark.slow
@pytest.mark.cluster
@pytest.mark.timeout(300)
def test_a_paused_py5_simple_consumers_late_ack_is_refused_and_the_message_delivered_again(tmp_path):
    cluster = _cluster(tmp_path)
    producer = None
    try:
        # one loop, two messages a receive, 200 ms each: a batch takes 0.4 s of its 1 s invisible time
        commands = wire(cluster, PY5_SIMPLE, group=GROUP, topic=TOPIC, orderly=False,
                        consumer_options={"sleep_ms": 200, "consume_thread_min": 1})
        node = cluster.node("consumer-0")
        node.set_command([*commands["consumer-0"], "--invisible-ms", str(INVISIBLE_MS), "--batch", "2"])
        producer = _start(cluster)
        run_dir = cluster.run_dir
        journals.wait_until("client ack", FIRST_ACK_BUDGET_S, lambda: _events(run_dir, "client-ack"))
        seen = len(journals.deliveries(run_dir))
        journals.wait_until("new delivery", 10, lambda: len(journals.deliveries(run_dir)) > seen)
        cluster.pause("consumer-0")  # mid-batch: the message just journalled waits for its ack
        paused_at = journals.deliveries(run_dir)[seen:]
        time.sleep(PAUSE_S)
        cluster.resume("consumer-0")

        def refused_and_back() -> tuple[dict, dict] | None:
            deliveries = journals.deliveries(run_dir)
            for ack in _events(run_dir, "client-ack"):
                if ack["status"] != "INVALID_RECEIPT_HANDLE":
                    continue
                first = next(d for d in deliveries if _where(d) == _where(ack))
                again = [d for d in deliveries if d["msg_id"] == ack["msg_id"] and d["mono_ms"] > ack["mono_ms"]
                         and d["delivery_attempt"] > first["delivery_attempt"]]
                if again:
                    return ack, again[0]
            return None
        journals.wait_until("refused late ack and its message's redelivery", REDELIVERY_BUDGET_S, refused_and_back)
        ack, again = refused_and_back()
        assert ack["msg_id"] in {d["msg_id"] for d in paused_at}, (ack, paused_at)
        assert ack["wall_ms"] > ack["deadline_wall_ms"] and ack["error"].startswith("BadRequestException: 40013")
        assert again["queue_topic"] == f"%RETRY%{GROUP}_{TOPIC}" and again["pop_kind"] == "r"
        # the redelivered message is acked with its new handle
        journals.wait_until("ack of the redelivery", REDELIVERY_BUDGET_S, lambda: any(
            a["status"] == "ok" and _where(a) == _where(again) for a in _events(run_dir, "client-ack")))
    finally:
        if producer is not None:
            producer.stop()
        cluster.close()


def test_a_py5_simple_consumer_stopped_while_its_client_starts_exits_cleanly(tmp_path):
    # nothing listens on the endpoint: the client's startup fails and is retried until the SIGTERM
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{unused.getsockname()[1]}"
    argv = [PY5_SIMPLE.check_installed(), str(PY5_SIMPLE.script), "--endpoints", endpoint, "--group", GROUP,
            "--topic", TOPIC, "--node-id", "consumer-0", "--port", "1", "--run-dir", str(tmp_path),
            "--sharding-key-property", "K", "--seq-property", "S", "--timeout-s", "1", *PY5_SIMPLE.extra_args]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().startswith("READY ")
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=20)
        assert proc.returncode == 0, stderr
    finally:
        proc.kill()
    events = read_journal(tmp_path / "events.jsonl")
    assert [e["event"] for e in events] == ["consumer-start", "consumer-stop"], stderr
    assert events[-1]["results"] == {}
