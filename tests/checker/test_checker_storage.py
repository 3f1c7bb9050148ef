"""integrity, replication, store-health and durability on hand-written histories, and lost's allowance."""

from dataclasses import replace

import pytest
from checker.builders import Run, config

from chaos.checker.checks import (
    check_durability,
    check_integrity,
    check_lost,
    check_replication,
    check_store_health,
)

ASYNC = {"broker-a-0": {"broker_name": "broker-a", "broker_id": 0, "broker_role": "ASYNC_MASTER",
                        "flush_disk_type": "ASYNC_FLUSH"},
         "broker-a-1": {"broker_name": "broker-a", "broker_id": 1, "broker_role": "SLAVE",
                        "flush_disk_type": "ASYNC_FLUSH"}}


def _modes(flush="ASYNC_FLUSH", role="ASYNC_MASTER"):
    return {**ASYNC, "broker-a-0": {**ASYNC["broker-a-0"], "flush_disk_type": flush, "broker_role": role}}


# ---- integrity ------------------------------------------------------------------------------

def test_integrity_passes_when_every_body_is_the_one_sent(spark):
    r = check_integrity(Run().sends_for(0, 3).consume(0, range(3), t0=200).history(spark), config())
    assert r.valid is True and r.counts["judged"] == 3 and r.counts["mismatched"] == 0


def test_integrity_fails_on_an_altered_body(spark):
    run = Run().sends_for(0, 3).consume(0, range(2), t0=200).deliver("q0-m2", 230, offset=2, crc=999)
    r = check_integrity(run.history(spark), config())
    assert r.valid is False and r.counts["mismatched"] == 1
    assert (r.examples[0]["msg_id"], r.examples[0]["sent_crc32"], r.examples[0]["got_crc32"]) == ("q0-m2", 2, 999)


def test_integrity_is_unknown_without_digests(spark):
    run = Run().sends_for(0, 2).deliver("q0-m0", 200, offset=0)
    assert check_integrity(run.history(spark), config()).valid == "unknown"


# ---- replication ----------------------------------------------------------------------------

def test_replication_passes_when_every_replica_holds_every_acked_message(spark):
    run = Run().sends_for(0, 3).read_back(0, 0, range(3)).read_back(1, 0, range(3))
    r = check_replication(run.history(spark), config())
    assert r.valid is True, r.examples
    assert r.counts["replica_reads_checked"] == 6


def test_replication_fails_on_a_replica_behind_missing_or_differing(spark):
    behind = Run().sends_for(0, 3).read_back(0, 0, range(3)).read_back(1, 0, range(2), caught_up=False)
    r = check_replication(behind.history(spark), config())
    assert r.valid is False and r.parts == {"caught up": False, "byte-identical": False}
    assert r.counts["by_problem"]["missing on replica"] == 1
    differs = Run().sends_for(0, 2).read_back(0, 0, range(2)).read_back(1, 0, range(2), crc=77)
    r = check_replication(differs.history(spark), config())
    assert r.parts == {"caught up": True, "byte-identical": False}
    assert r.counts["by_problem"]["body differs"] == 2  # both offsets: crc 77 is neither 0 nor 1


@pytest.mark.slow
def test_replication_excuses_what_a_storage_fault_may_lose_and_nothing_else(spark):
    """The slave kept a record the nemesis flipped on the master (which now reads it as a hole): that
    message is excused as `lost` and `durability` excuse it; another message missing is not."""
    run = Run().sends_for(0, 3).read_back(0, 0, [0, 1]).read_back(1, 0, range(3))
    run.corrupt("broker-a-0", 300, phys_offset=0, n=4, msg_ids=["q0-m2"])
    r = check_replication(run.history(spark), replace(config(), store_modes=ASYNC))
    assert r.valid is True, r.examples
    assert r.counts["by_problem"]["excused by a storage fault"] == 1
    unexcused = Run().sends_for(0, 3).read_back(0, 0, [0, 1]).read_back(1, 0, range(3))
    unexcused.corrupt("broker-a-0", 300, phys_offset=0, n=4, msg_ids=["q0-m1"])
    r = check_replication(unexcused.history(spark), replace(config(), store_modes=ASYNC))
    assert r.valid is False and r.counts["by_problem"]["missing on replica"] == 1
    served = Run().sends_for(0, 3).read_back(0, 0, range(3), crc=77).read_back(1, 0, range(3))
    served.corrupt("broker-a-0", 300, phys_offset=0, n=4, msg_ids=["q0-m2"])
    r = check_replication(served.history(spark), replace(config(), store_modes=ASYNC))
    assert r.valid is False and r.counts["by_problem"]["body differs"] == 3  # a damaged body is never excused


def test_replication_is_unknown_without_a_read_back(spark):
    assert check_replication(Run().sends_for(0, 1).history(spark), config()).valid == "unknown"


# ---- store-health -----------------------------------------------------------------------------

def test_a_torn_tail_after_a_plain_kill_is_unexplained(spark):
    run = Run().sends_for(0, 2).fault("kill", ["broker-a-0"], 300, 400)
    run.store_error(401, "torn-tail").store_recovered(402)
    r = check_store_health(run.history(spark), config())
    assert r.valid is False and r.counts["unexplained"] == 1
    assert r.examples[0]["kind"] == "torn-tail" and r.examples[0]["after"] == "kill broker-a-0"


def test_a_torn_tail_after_a_power_loss_is_explained_and_shown(spark):
    run = Run().sends_for(0, 2).power_loss("broker-a-0", 300, 400, cqs={"Orders/0": (1, 2)})
    run.store_error(401, "torn-tail", phys_offset=1000, n=40).store_error(401, "cq-truncated", n=20)
    run.store_recovered(402, truncated=40)
    r = check_store_health(run.history(spark), config())
    assert r.valid is True and r.counts["explained"] == 2, r.examples
    row = r.measurements[0]
    assert (row["fault"], row["recovered_torn_tail_bytes"], row["recovered_torn_tail_phys_offset"],
            row["nemesis_torn_bytes"]) == ("power-loss broker-a-0", 40, 1000, 40)
    assert row["recovered_torn_tail_file"] == "commitlog/00000000000000000000"
    # long after the recovery (beyond A_h + S_s + slack) the power loss explains nothing more
    late = run.store_error(2_000, "bad-record")
    assert check_store_health(late.history(spark), config()).counts["unexplained"] == 1


def test_a_corrupted_record_explains_later_reads_of_it_only(spark):
    run = Run().sends_for(0, 2).corrupt("broker-a-0", 300, phys_offset=5000, n=8, msg_ids=["q0-m0"])
    run.fault("kill", ["broker-a-0"], 500, 600).store_recovered(601)
    run.store_error(3_000, "bad-record", phys_offset=5004, n=1)  # inside the flipped record
    assert check_store_health(run.history(spark), config()).valid is True
    run.store_error(3_100, "bad-record", phys_offset=9000, n=1)  # elsewhere
    assert check_store_health(run.history(spark), config()).counts["unexplained"] == 1


# ---- durability and lost ------------------------------------------------------------------------

def _power_lossed(flush="ASYNC_FLUSH", role="ASYNC_MASTER", status="SEND_OK"):
    # q0-m0..m4 acked at 100..104; the master loses power at 300 with queue 0 flushed up to 3 of 5
    run = Run()
    for i in range(5):
        run.send(f"q0-m{i}", 100 + i, offset=i, queue=0, crc=i, status=status)
    run.power_loss("broker-a-0", 300, 400, cqs={"Orders/0": (3, 5)}, flush=flush)
    run.consume(0, range(3), t0=200, orderly=False)
    return run, config(store_modes=_modes(flush, role))


@pytest.mark.slow
def test_async_modes_allow_the_unflushed_window(spark):
    run, cfg = _power_lossed()
    h = run.history(spark)
    d = check_durability(h, cfg)
    assert d.valid is True and (d.counts["allowed_loss"], d.counts["unallowed_loss"]) == (2, 0)
    assert d.counts["windows"][0]["window"] == [3, 5] and d.counts["mode"] == "ASYNC_FLUSH + ASYNC_MASTER"
    lost = check_lost(h, cfg)  # the same allowance: not failed twice
    assert lost.valid is True and (lost.counts["lost_allowed"], lost.counts["lost_unallowed"]) == (2, 0)


def test_a_loss_outside_the_window_fails_both(spark):
    run, cfg = _power_lossed()
    run.deliveries = [d for d in run.deliveries if d["msg_id"] != "q0-m1"]  # offset 1 was flushed
    h = run.history(spark)
    assert check_durability(h, cfg).counts["unallowed_loss"] == 1
    lost = check_lost(h, cfg)
    assert lost.valid is False and lost.counts["lost_unallowed"] == 1 and lost.examples[0]["msg_id"] == "q0-m1"


@pytest.mark.slow
def test_sync_flush_and_sync_master_promise_no_loss(spark):
    for flush, role in (("SYNC_FLUSH", "ASYNC_MASTER"), ("ASYNC_FLUSH", "SYNC_MASTER")):
        run, cfg = _power_lossed(flush, role)
        d = check_durability(run.history(spark), cfg)
        assert d.valid is False and d.counts["unallowed_loss"] == 2, (flush, role)
    # a send whose slave never confirmed is stored on the master only: SYNC_MASTER allows its loss
    run, cfg = _power_lossed("ASYNC_FLUSH", "SYNC_MASTER", status="SLAVE_NOT_AVAILABLE")
    assert check_durability(run.history(spark), cfg).counts["allowed_loss"] == 2


@pytest.mark.slow
def test_a_corrupted_records_messages_are_allowed_loss(spark):
    run = Run().sends_for(0, 3).consume(0, range(2), t0=200, orderly=False)
    run.corrupt("broker-a-0", 300, phys_offset=0, n=4, msg_ids=["q0-m2"])
    cfg = replace(config(), store_modes=ASYNC)
    h = run.history(spark)
    d = check_durability(h, cfg)
    assert d.valid is True and d.counts["allowed_loss"] == 1
    assert d.examples[0]["allowed_by"] == "corrupt broker-a-0"
    assert check_lost(h, cfg).valid is True


def test_durability_is_unknown_without_storage_faults(spark):
    run = Run().sends_for(0, 1).consume(0, range(1), t0=200)
    assert check_durability(run.history(spark), config()).valid == "unknown"


# ---- store-health across a broker group ---------------------------------------------------------

def test_a_master_power_loss_explains_the_slaves_refusals(spark):
    run = Run().sends_for(0, 2).power_loss("broker-a-0", 300, 400, cqs={"Orders/0": (1, 2)})
    run.store_recovered(402, truncated=40).store_recovered(60, node="broker-a-1")
    run.store_error(450, "replica-refused", node="broker-a-1", phys_offset=1000, n=500)
    r = check_store_health(run.history(spark), config())
    assert r.valid is True and r.counts["explained"] == 1, r.examples
    # a slave's power loss explains nothing on its master, nor another group's master on this slave
    other = Run().sends_for(0, 2).power_loss("broker-a-1", 300, 400, cqs={})
    other.store_recovered(402, node="broker-a-1").store_recovered(60)
    other.store_error(450, "replica-refused", node="broker-a-0")
    assert check_store_health(other.history(spark), config()).counts["unexplained"] == 1
    other = Run().sends_for(0, 2).power_loss("broker-b-0", 300, 400, cqs={})
    other.store_recovered(402, node="broker-b-0").store_error(450, "replica-refused", node="broker-a-1")
    assert check_store_health(other.history(spark), config()).counts["unexplained"] == 1


def test_the_first_refusal_after_a_master_power_loss_is_explained_however_late(spark):
    # the slave reaches the master again only 2 s after the master's recovery (its registration was
    # retried): that first refusal is the power loss's divergence; a second one, later still, is not
    run = Run().sends_for(0, 2).power_loss("broker-a-0", 300, 400, cqs={"Orders/0": (1, 2)})
    run.store_recovered(402, truncated=40).store_recovered(60, node="broker-a-1")
    run.store_error(2400, "replica-refused", node="broker-a-0", phys_offset=1000, n=500)
    run.store_error(2401, "replica-refused", node="broker-a-1", phys_offset=1000, n=500)
    r = check_store_health(run.history(spark), config())
    assert r.valid is True and r.counts["explained"] == 2, r.examples
    run.store_error(4000, "replica-refused", node="broker-a-1", phys_offset=1000, n=500)
    assert check_store_health(run.history(spark), config()).counts["unexplained"] == 1


def test_a_master_corruption_explains_the_slaves_reads_of_that_record(spark):
    run = Run().sends_for(0, 2).corrupt("broker-a-0", 300, phys_offset=5000, n=8, msg_ids=["q0-m0"])
    run.store_recovered(60).store_recovered(60, node="broker-a-1")
    run.store_error(3_000, "bad-record", node="broker-a-1", phys_offset=5002, n=1)
    run.store_error(3_000, "damaged-range", node="broker-a-1", phys_offset=4990, n=20)
    r = check_store_health(run.history(spark), config())
    assert r.valid is True and r.counts["explained"] == 2, r.examples
    run.store_error(3_100, "bad-record", node="broker-a-1", phys_offset=9000, n=1)  # elsewhere
    assert check_store_health(run.history(spark), config()).counts["unexplained"] == 1


def test_a_bad_record_after_a_power_loss_recovery_is_unexplained(spark):
    # the recovery must cut the torn tail: a bad record read after it, even at once, is kept garbage
    run = Run().sends_for(0, 2).power_loss("broker-a-0", 300, 400, cqs={"Orders/0": (1, 2)})
    run.store_error(401, "torn-tail").store_recovered(402, truncated=40)
    run.store_error(420, "bad-record", phys_offset=1000, n=40)
    r = check_store_health(run.history(spark), config())
    assert r.valid is False and r.counts["unexplained"] == 1 and r.examples[0]["kind"] == "bad-record"


def _offsets_reused(flush="ASYNC_FLUSH", role="ASYNC_MASTER", status="SEND_OK"):
    # the recovered master hands offsets 3 and 4 (cut by the power loss) to new messages n3, n4,
    # which a consumer whose committed offset had passed them skips; n5 (offset 5) is consumed
    run, cfg = _power_lossed(flush, role, status)
    for i in (3, 4, 5):
        run.send(f"q0-n{i}", 500 + i, offset=i, queue=0, crc=i)
    run.deliver("q0-n5", 600, offset=5, crc=5)
    return run, cfg


@pytest.mark.slow
def test_offsets_reused_after_an_async_power_loss_are_allowed_loss(spark):
    run, cfg = _offsets_reused()
    h = run.history(spark)
    d = check_durability(h, cfg)
    assert d.valid is True, d.examples
    assert (d.counts["allowed_loss"], d.counts["unallowed_loss"], d.counts["reused_offsets"]) == (4, 0, 2)
    lost = check_lost(h, cfg)
    assert lost.valid is True and (lost.counts["lost_allowed"], lost.counts["lost_reused_offsets"]) == (4, 2)
    # a new message acknowledged after the power loss outside the cut window is a real loss
    run.send("q0-n6", 510, offset=6, queue=0, crc=6)
    lost = check_lost(run.history(spark), cfg)
    assert lost.valid is False and lost.counts["lost_unallowed"] == 1 and lost.examples[0]["msg_id"] == "q0-n6"


@pytest.mark.slow
def test_offsets_reused_are_not_allowed_when_the_mode_kept_every_acknowledged_message(spark):
    for flush, role in (("SYNC_FLUSH", "ASYNC_MASTER"), ("ASYNC_FLUSH", "SYNC_MASTER")):
        run, cfg = _offsets_reused(flush, role)
        lost = check_lost(run.history(spark), cfg)
        assert lost.counts["lost_reused_offsets"] == 0 and lost.counts["lost_unallowed"] >= 2, (flush, role)
    # SYNC_MASTER without a live slave: the cut window held sends no slave confirmed
    run, cfg = _offsets_reused("ASYNC_FLUSH", "SYNC_MASTER", status="SLAVE_NOT_AVAILABLE")
    d = check_durability(run.history(spark), cfg)
    assert d.valid is True and d.counts["reused_offsets"] == 2, d.examples


# ---- a rack's power loss: master and slave at once, no replica to give the cut tail back ---------

def _rack_power_lossed(flush="ASYNC_FLUSH", role="ASYNC_MASTER", status="SEND_OK"):
    # q0-m0..m4 acked at 100..104 and consumed; master and slave lose power at 300, the master's
    # queue 0 flushed up to 3 of 5; the read-back finds offsets 0..2 only (3 and 4 were cut)
    run = Run()
    for i in range(5):
        run.send(f"q0-m{i}", 100 + i, offset=i, queue=0, crc=i, status=status)
    run.consume(0, range(5), t0=200, orderly=False)
    run.rack_power_loss(300, 400, cqs={"Orders/0": (3, 5)}, flush=flush)
    run.read_back(0, 0, range(3)).read_back(1, 0, range(3))
    return run, config(store_modes=_modes(flush, role))


def test_the_rack_power_loss_detail_is_read_per_node(spark):
    run, _ = _rack_power_lossed()
    faults = run.history(spark).storage_faults
    assert [(f.node, f.start_ms) for f in faults] == [("broker-a-0", 300), ("broker-a-1", 300)]
    assert faults[0].detail["store"]["consume_queues"] == {
        "Orders/0": {"flushed_queue_offset": 3, "written_queue_offset": 5}}
    assert faults[1].detail["store"]["consume_queues"] == {}


@pytest.mark.slow
def test_sync_flush_fails_an_acknowledged_message_cut_by_a_rack_power_loss_even_if_consumed(spark):
    """What answering before the fsync looks like: consumers read the messages, the power loss
    took them from every replica's disk, the read-back finds neither."""
    run, cfg = _rack_power_lossed("SYNC_FLUSH")
    h = run.history(spark)
    d = check_durability(h, cfg)
    assert d.valid is False and d.counts["unallowed_loss"] == 2 and d.counts["read_back_judged"] is True
    assert sorted(e["msg_id"] for e in d.examples if e["anomaly"] == "unallowed loss") == ["q0-m3", "q0-m4"]
    # a send whose flush timed out may go
    run, cfg = _rack_power_lossed("SYNC_FLUSH", status="FLUSH_DISK_TIMEOUT")
    d = check_durability(run.history(spark), cfg)
    assert d.valid is True and d.counts["allowed_loss"] == 2, d.examples
    # with every acknowledged message read back, nothing is lost
    run, cfg = _rack_power_lossed("SYNC_FLUSH")
    run.read_back(0, 0, range(3, 5))
    d = check_durability(run.history(spark), cfg)
    assert d.valid is True and d.counts["lost"] == 0, d.examples


def test_the_read_back_judges_no_offset_below_what_it_read(spark):
    run, cfg = _rack_power_lossed("SYNC_FLUSH")
    run.readback = [r for r in run.readback if r.get("queue_offset") is None or r["queue_offset"] >= 1]
    run.read_back(0, 0, range(3, 5))  # offset 0 was retired: not read back, not judged
    d = check_durability(run.history(spark), cfg)
    assert d.valid is True and d.counts["lost"] == 0, d.examples


@pytest.mark.slow
def test_sync_master_allows_the_unflushed_window_when_the_slave_lost_power_too(spark):
    run, cfg = _rack_power_lossed("ASYNC_FLUSH", "SYNC_MASTER")
    d = check_durability(run.history(spark), cfg)
    assert d.valid is True and (d.counts["allowed_loss"], d.counts["unallowed_loss"]) == (2, 0), d.examples
    # the master alone: its slave held every acknowledged message
    alone = Run()
    for i in range(5):
        alone.send(f"q0-m{i}", 100 + i, offset=i, queue=0, crc=i)
    alone.consume(0, range(5), t0=200, orderly=False)
    alone.power_loss("broker-a-0", 300, 400, cqs={"Orders/0": (3, 5)})
    alone.read_back(0, 0, range(3)).read_back(1, 0, range(3))
    d = check_durability(alone.history(spark), cfg)
    assert d.valid is False and d.counts["unallowed_loss"] == 2
    # the slave still down from its own earlier power loss when the master's began: as a rack's
    alone.power_loss("broker-a-1", 250, 500, cqs={})
    d = check_durability(alone.history(spark), cfg)
    assert d.valid is True and d.counts["allowed_loss"] == 2, d.examples


@pytest.mark.slow
def test_sync_flush_allows_reused_offsets_after_a_rack_power_loss_only(spark):
    # the cut held unacknowledged records consumers had read: new messages n3, n4 at their offsets
    # are skipped; SEND_OK m3, m4 were fsync'd (read back), so nothing acknowledged was cut
    run, cfg = _rack_power_lossed("SYNC_FLUSH")
    for i in (3, 4):
        run.send(f"q0-n{i}", 500 + i, offset=i, queue=0, crc=i)
    run.readback = [r for r in run.readback if r["event"] == "replica-state"]
    for replica in (0, 1):
        run.read_back(replica, 0, range(3))
        run.readback += [{"node": f"broker-a-{replica}", "event": "readback", "mono_ms": 99_001,
                          "broker_name": "broker-a", "replica_id": replica, "topic": "Orders", "queue_id": 0,
                          "queue_offset": i, "msg_id": f"q0-n{i}", "body_crc32": i} for i in (3, 4)]
    run.sends = [x for x in run.sends if x["msg_id"] not in ("q0-m3", "q0-m4")]  # never acknowledged
    h = run.history(spark)
    d = check_durability(h, cfg)
    assert d.valid is True and d.counts["reused_offsets"] == 2, d.examples
    assert check_lost(h, cfg).valid is True
    # a master-only power loss under SYNC_FLUSH: the slave gave the cut back, no offset is reused
    alone, _ = _offsets_reused("SYNC_FLUSH")
    assert check_lost(alone.history(spark), cfg).counts["lost_reused_offsets"] == 0
