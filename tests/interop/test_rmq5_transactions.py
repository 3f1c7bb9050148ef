"""Transactions driven by Apache's RocketMQ 5 Python client (5.1.2, its own venv and process):
commit, rollback, the broker's check answered by the client's checker, and a master SIGKILLed
between a half message and its commit. What reaches consumers is read with mqlab's
PullConsumer; what the broker did, from its events.jsonl."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness import LocalCluster
from interop.mqlab_side import interop_spec, read_topic, read_until, start_cluster
from interop.rmq5_procs import Py5Producer
from interop.test_rmq5_clients import make_topic

pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("rmq5-transactions")]

MASTER = "broker-a-0"


class Py5TxnProducer(Py5Producer):
    """The driver's producer with its transaction commands."""

    def begin(self, endpoints: str, topics: list[str], answer: str = "COMMIT") -> dict[str, Any]:
        return self.call(op="start", endpoints=endpoints, topics=topics, answer=answer)

    def txn_send(self, topic: str, body: str, end: str, **fields: Any) -> dict[str, Any]:
        sent = self.call(op="txn_send", topic=topic, body=body, end=end, **fields)
        assert sent["event"] == "txn-sent", sent
        return sent

    def checks(self) -> list[dict[str, Any]]:
        return self.call(op="checks")["checks"]


@pytest.fixture
def txn_producer(shared_cluster: LocalCluster, tmp_path: Path) -> Iterator[Py5TxnProducer]:
    client = Py5TxnProducer(tmp_path, "py5-txn")
    try:
        yield client
        client.shutdown()
    finally:
        client.close()


def journal(cluster: LocalCluster, event: str, node_id: str = MASTER) -> list[dict[str, Any]]:
    path = Path(cluster.run_dir) / node_id / "events.jsonl"
    return [e for e in map(json.loads, path.read_text().splitlines()) if e["event"] == event]


def wait_for(what: str, probe: Callable[[], Any], budget_s: float = 15.0) -> Any:
    deadline = time.monotonic() + budget_s
    while not (found := probe()):
        assert time.monotonic() < deadline, f"no {what} within {budget_s:.0f} s"
        time.sleep(0.1)
    return found


def test_commit_delivers_once_with_body_keys_and_id_and_rollback_never(shared_cluster: LocalCluster,
                                                                       txn_producer: Py5TxnProducer) -> None:
    make_topic(shared_cluster, "R5Txn", 2, message_type="TRANSACTION")
    txn_producer.begin(shared_cluster.rocketmq5_endpoints, ["R5Txn"])
    committed = txn_producer.txn_send("R5Txn", "pay-1", "commit", tag="TagT", keys=["order-1", "shared"],
                                      properties={"amount": "10"})
    rolled_back = txn_producer.txn_send("R5Txn", "pay-2", "rollback")
    assert committed["end_error"] is None and rolled_back["end_error"] is None, (committed, rolled_back)
    assert committed["transaction_id"] and committed["transaction_id"] != rolled_back["transaction_id"]

    [m] = read_until(shared_cluster, "R5Txn", "r5-txn-reader", 1, 10)
    assert m.body == b"pay-1" and m.properties["UNIQ_KEY"] == committed["message_id"]
    assert m.tags == "TagT" and set(m.keys.split()) == {"order-1", "shared"} and m.properties["amount"] == "10"
    assert not {"TRAN_MSG", "REAL_TOPIC", "REAL_QID"} & m.properties.keys()
    time.sleep(1.0)  # several check timeouts (0.3 s scaled): nothing else may surface
    assert [x.body for x in read_topic(shared_cluster, "R5Txn", "r5-txn-reader-2")] == [b"pay-1"]
    ends = {e["uniq_key"]: e for e in journal(shared_cluster, "txn-end")}
    assert (ends[committed["message_id"]]["resolution"], ends[committed["message_id"]]["source"]) == ("COMMIT",
                                                                                                      "client")
    assert ends[rolled_back["message_id"]]["resolution"] == "ROLLBACK"
    assert {e["uniq_key"] for e in journal(shared_cluster, "txn-half")} >= set(ends)
    assert txn_producer.checks() == []  # both ended before their first check was due


def test_an_unended_transaction_is_checked_until_the_checker_commits(shared_cluster: LocalCluster,
                                                                     txn_producer: Py5TxnProducer) -> None:
    make_topic(shared_cluster, "R5TxnCheck", 1, message_type="TRANSACTION")
    txn_producer.begin(shared_cluster.rocketmq5_endpoints, ["R5TxnCheck"], answer="UNKNOWN")
    open_one = txn_producer.txn_send("R5TxnCheck", "orphan-1", "none", keys=["k-orphan"])
    doomed = txn_producer.txn_send("R5TxnCheck", "orphan-2", "none")
    first = wait_for("first check", lambda: [c for c in txn_producer.checks() if c["body"] == "orphan-1"])
    assert first[0]["message_id"] == open_one["message_id"] and first[0]["topic"] == "R5TxnCheck"
    assert first[0]["at"] - open_one["sent_at"] >= 0.25  # not before the (scaled 0.3 s) timeout
    assert read_topic(shared_cluster, "R5TxnCheck", "r5-check-reader-0") == []  # UNKNOWN ends nothing

    # the next checks come one (scaled 3 s) check interval later; now the checker commits both
    txn_producer.call(op="answer", answer="COMMIT")
    wait_for("second check", lambda: len([c for c in txn_producer.checks() if c["body"] == "orphan-1"]) >= 2)
    by_body = {m.body: m for m in read_until(shared_cluster, "R5TxnCheck", "r5-check-reader", 2, 10)}
    assert by_body[b"orphan-1"].properties["UNIQ_KEY"] == open_one["message_id"]
    assert by_body[b"orphan-1"].keys == "k-orphan"
    checks = [c for c in txn_producer.checks() if c["body"] == "orphan-1"]
    assert checks[1]["at"] - checks[0]["at"] >= 2.5, checks
    for sent in (open_one, doomed):
        end = wait_for("the checked end", lambda sent=sent: [e for e in journal(shared_cluster, "txn-end")
                                                              if e["uniq_key"] == sent["message_id"]])
        assert (end[0]["resolution"], end[0]["source"]) == ("COMMIT", "check")
    sent_checks = [e for e in journal(shared_cluster, "txn-check") if e["uniq_key"] == open_one["message_id"]]
    assert [e["check_times"] for e in sent_checks] == [1, 2] and all(e["delivered"] for e in sent_checks)
    time.sleep(1.0)
    assert sorted(x.body for x in read_topic(shared_cluster, "R5TxnCheck", "r5-check-reader-2")) == [
        b"orphan-1", b"orphan-2"]  # each once
    assert len([c for c in txn_producer.checks() if c["body"] == "orphan-1"]) == 2  # resolved: asked no more


def test_a_checker_rollback_is_never_delivered(shared_cluster: LocalCluster, txn_producer: Py5TxnProducer) -> None:
    make_topic(shared_cluster, "R5TxnCheckRb", 1, message_type="TRANSACTION")
    txn_producer.begin(shared_cluster.rocketmq5_endpoints, ["R5TxnCheckRb"], answer="ROLLBACK")
    sent = txn_producer.txn_send("R5TxnCheckRb", "orphan-rb", "none")
    end = wait_for("the checked rollback", lambda: [e for e in journal(shared_cluster, "txn-end")
                                                     if e["uniq_key"] == sent["message_id"]])
    assert (end[0]["resolution"], end[0]["source"]) == ("ROLLBACK", "check")
    time.sleep(1.0)
    assert read_topic(shared_cluster, "R5TxnCheckRb", "r5-rb-reader") == []
    assert len(txn_producer.checks()) == 1  # resolved: never asked again


@pytest.mark.slow
def test_a_master_killed_between_send_and_commit_commits_after_its_restart(tmp_path: Path) -> None:
    cluster = start_cluster(interop_spec(), tmp_path / "run")
    client = Py5TxnProducer(tmp_path, "py5-txn-kill")
    try:
        make_topic(cluster, "R5TxnKill", 1, message_type="TRANSACTION")
        # the checker answers UNKNOWN: only the producer's own commit may end it
        client.begin(cluster.rocketmq5_endpoints, ["R5TxnKill"], answer="UNKNOWN")
        sent = client.txn_send("R5TxnKill", "survivor", "none")
        rolled = client.txn_send("R5TxnKill", "gone", "none")
        cluster.restart(MASTER, kill=True)
        cluster.wait_until_routable("R5TxnKill")
        # the open half messages came back with the store: the check finds them again
        wait_for("a check after the restart", lambda: [e for e in journal(cluster, "txn-check")
                                                        if e["uniq_key"] == sent["message_id"]], 30)
        assert read_topic(cluster, "R5TxnKill", "r5-kill-reader-0") == []
        # the restarted master holds writes until its slave could give a lost tail back: the
        # client's end (3 s deadline) may time out meanwhile, and is sent again
        for ref, how in ((sent["ref"], "commit"), (rolled["ref"], "rollback")):
            deadline = time.monotonic() + 30
            while (ended := client.call(op="end", ref=ref, end=how))["end_error"] is not None:
                assert time.monotonic() < deadline, ended
                time.sleep(0.5)
        [m] = read_until(cluster, "R5TxnKill", "r5-kill-reader", 1, 30)
        assert m.body == b"survivor" and m.properties["UNIQ_KEY"] == sent["message_id"]
        time.sleep(1.0)
        assert [x.body for x in read_topic(cluster, "R5TxnKill", "r5-kill-reader-2")] == [b"survivor"]
        ends = [(e["uniq_key"], e["resolution"]) for e in journal(cluster, "txn-end") if "repeat_of" not in e]
        assert ends == [(sent["message_id"], "COMMIT"), (rolled["message_id"], "ROLLBACK")]
        client.shutdown()
        assert not cluster.unexpected_exits, cluster.unexpected_exits
    finally:
        client.close()
        cluster.close()
