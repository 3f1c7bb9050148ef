"""requests: the broker held to the answers its consumers' links journalled; each rule failing and passing."""

import pytest
from checker.builders import B, G, Run, T, config

from chaos.checker.checks import check_requests
from chaos.checker.pipeline import verdict_for


def _commit(run: Run, sent: int, answered: int | None, offset: int, **kw) -> Run:
    return run.request("offset-commit", sent, answered, queue_id=0, offset=offset, **kw)


def test_no_journal_steps_aside_and_leaves_the_verdict(spark):
    run = Run().stored(100, 5)
    h = run.history(spark)
    r = check_requests(h, config())
    assert r.set_aside and "links/requests.jsonl" in r.set_aside
    verdict = verdict_for(h, config(), [r])
    assert "requests" not in verdict.checks and "requests" in verdict.info["checks_set_aside"]


def test_commits_held_by_a_change_by_the_value_in_force_or_a_later_commit(spark):
    run = Run().stored(100, 5)
    _commit(run, 90, 110, 5)      # stored while it was there
    _commit(run, 200, 205, 5)     # the value already in force: nothing written, still held
    run.stored(298, 9)            # a later commit (a pull's) overtook it: RocketMQ keeps the last
    _commit(run, 300, 305, 8)
    _commit(run, 400, 420, 50, ok=False)  # refused: nothing to hold the broker to
    r = check_requests(run.history(spark), config())
    assert r.valid is True and r.parts["commits"] is True, r.examples
    assert r.parts["unlocks"] is None and r.parts["acks"] is None


def test_commit_answered_success_and_never_stored_fails(spark):
    run = Run().stored(100, 5)
    _commit(run, 90, 110, 5)
    _commit(run, 200, 210, 7)     # dropped: the broker still holds 5
    run.stored(500, 7)            # stored long after the answer: too late to be this commit
    r = check_requests(run.history(spark), config())
    assert r.valid is False and r.parts["commits"] is False
    assert r.counts["violations"]["commits"] == 1
    (ex,) = r.examples
    assert ex["offset"] == 7 and ex["stored_in_window"] == [5]


@pytest.mark.slow  # each rule passes and fails in the default run; the explanations and the loader in --full
def test_commit_on_another_broker_node_does_not_count(spark):
    run = Run().stored(100, 5, broker_id=1)  # the slave stored it; the master answered
    _commit(run, 90, 110, 5)
    r = check_requests(run.history(spark), config())
    assert r.parts["commits"] is False


@pytest.mark.slow  # each rule passes and fails in the default run; the explanations and the loader in --full
def test_commit_under_an_operators_reset_is_explained(spark):
    run = Run().stored(100, 5)
    run.stored(190, 2, source="reset")
    _commit(run, 200, 210, 7)  # an overtaken commit of before the reset: the broker kept the reset
    assert check_requests(run.history(spark), config()).parts["commits"] is True


def _unlock(run: Run, sent: int, answered: int, client: str = "c1") -> Run:
    return run.request("unlock", sent, answered, client=client, broker_name=B, queue_id=0)


def test_unlock_released_or_not_held_passes(spark):
    run = Run().lock(100, "granted", side="broker", lease=700)
    _unlock(run, 200, 210)
    run.lock(205, "released", side="broker")
    run.lock(300, "granted", client="c2", side="broker", lease=900)
    _unlock(run, 400, 405)  # c1 holds nothing: nothing to release
    r = check_requests(run.history(spark), config())
    assert r.valid is True and r.parts["unlocks"] is True, r.examples


def test_unlock_answered_success_with_the_lock_kept_fails(spark):
    run = Run().lock(100, "granted", side="broker", lease=700)
    _unlock(run, 200, 210)
    run.lock(300, "renewed", side="broker", lease=900)  # the entry was still there
    r = check_requests(run.history(spark), config())
    assert r.valid is False and r.parts["unlocks"] is False
    assert r.examples[0]["broker_last_action"] == "granted"


@pytest.mark.parametrize("asked_again", [True, False])
def test_a_grant_right_after_the_unlock_counts_against_it_only_if_the_client_did_not_ask_again(spark, asked_again):
    """c1 unlocks a queue it does not hold (nothing to release), then locks it again right after
    the answer, inside the clock slack (5 ms here): the grant is that request's. Without the
    request the same grant leaves the lock held past the unlock."""
    cfg = config()
    assert cfg.clock_slack_ms >= 3
    run = Run()
    _unlock(run, 200, 210)
    if asked_again:
        run.request("lock", 211, 214, broker_name=B, queue_id=0)
    run.lock(212, "granted", side="broker", lease=900)
    r = check_requests(run.history(spark), cfg)
    assert r.parts["unlocks"] is asked_again, r.examples


@pytest.mark.slow  # each rule passes and fails in the default run; the explanations and the loader in --full
def test_unlock_after_the_broker_restarted_holds_nothing(spark):
    run = Run().lock(100, "granted", side="broker", lease=700).store_recovered(150)  # killed and restarted
    _unlock(run, 200, 210)
    assert check_requests(run.history(spark), config()).parts["unlocks"] is True


def _ack(run: Run, sent: int, answered: int, offset: int, ok: bool = True) -> Run:
    return run.request("ack", sent, answered, ok=ok, broker_name=B, queue_topic=T, queue_id=1, queue_offset=offset,
                       handle_group=G, generation=1, receipt_handle=f"p1 n {B} {G} {T} 1 {offset} 0 0 0 1")


def _settle(run: Run, t: int, offset: int, event: str = "pop-ack") -> Run:
    return run.event(event, t, f"{B}-0", group=G, topic=T, queue_topic=T, broker_name=B, queue_id=1,
                     queue_offset=offset, status="ok" if event == "pop-ack" else None)


def test_acks_settled_now_or_before_pass(spark):
    run = Run()
    _ack(run, 100, 110, 3)
    _settle(run, 105, 3)
    _ack(run, 200, 210, 3)  # a repeated ack: the earlier settlement counts
    _settle(run, 250, 4, "pop-dlq")
    _ack(run, 240, 260, 4)
    _ack(run, 300, 310, 5, ok=False)  # refused (an expired handle): nothing to hold
    r = check_requests(run.history(spark), config())
    assert r.valid is True and r.parts["acks"] is True, r.examples


def test_ack_answered_ok_and_never_settled_fails(spark):
    run = Run()
    _ack(run, 100, 110, 3)
    _settle(run, 400, 3)  # settled later by another ack: too late for this answer
    r = check_requests(run.history(spark), config())
    assert r.valid is False and r.parts["acks"] is False


@pytest.mark.slow  # each rule passes and fails in the default run; the explanations and the loader in --full
def test_unanswered_requests_are_counted_not_failed(spark):
    run = Run().stored(100, 5)
    _commit(run, 90, 110, 5)
    _commit(run, 200, None, 9)  # the link was cut: never answered
    run.request("heartbeat", 300, None)
    r = check_requests(run.history(spark), config())
    assert r.valid is True
    assert r.counts["unanswered"] == {"offset-commit": 1, "heartbeat": 1}


@pytest.mark.slow  # each rule passes and fails in the default run; the explanations and the loader in --full
def test_written_run_dir_loads_the_journal(spark, tmp_path):
    from chaos.checker.loader import load_history

    run = Run().stored(100, 5)
    _commit(run, 200, 210, 7)
    h = load_history(spark, run.write(tmp_path / "run"))
    assert h.has("requests")
    assert check_requests(h, config()).parts["commits"] is False
