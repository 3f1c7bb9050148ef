"""The broker's POP events (pop, pop-ack, pop-change-invisible, pop-revive, pop-dlq) in a run
dir leave every check of the clean history valid: the checker reads them with its wide events
schema and no check mistakes them for its own events."""

import json

import pytest
from checker.builders import POP_WALL0, clean_orderly_run

from chaos.checker.loader import load_history
from chaos.checker.pipeline import check_run
from nodes.broker.pop import PopCode
from tests.unit.broker.pop.rig import PopRig

POP_EVENTS = ("pop", "pop-ack", "pop-change-invisible", "pop-revive", "pop-dlq")
REAL_GROUPS = ("pop-g", "pop-h")  # the engine's lines below (the clean run has POP lines of its own)


def _real_pop_lines(root):
    """The lines a broker's POP engine journals for one message of each fate."""
    rig = PopRig(root)
    rig.topic("PopTopic")
    rig.group("pop-g", retry_max_times=0)  # one attempt: an expired hand-out goes to the DLQ
    rig.group("pop-h")
    for body in (b"acked", b"changed", b"revived", b"dead"):
        rig.put("PopTopic", 0, body)

    async def scenario():
        popped = await rig.engine.pop(group="pop-h", topic="PopTopic", max_nums=3, invisible_ms=60_000)
        acked, changed, revived = popped.messages
        assert (await rig.engine.ack("pop-h", "PopTopic", acked.receipt_handle)).code is PopCode.OK
        assert (await rig.engine.ack("pop-h", "PopTopic", "p1 n broker-a pop-h PopTopic 0 0 0 1 1 999")).code \
            is PopCode.INVALID_RECEIPT_HANDLE
        assert (await rig.engine.change_invisible("pop-h", "PopTopic", changed.receipt_handle, 60_000)).code \
            is PopCode.OK
        assert (await rig.engine.change_invisible("pop-h", "PopTopic", revived.receipt_handle, 0)).code is PopCode.OK
        await rig.engine.revive()
        dead = await rig.engine.pop(group="pop-g", topic="PopTopic", max_nums=1, invisible_ms=60_000)
        assert (await rig.engine.change_invisible("pop-g", "PopTopic", dead.messages[0].receipt_handle, 0)).code \
            is PopCode.OK
        await rig.engine.revive()
    try:
        rig.run(scenario, revive=False)
    finally:
        rig.close()
    return [json.loads(line) for line in (root / "events.jsonl").read_text().splitlines()]


def _run_with_pop_events(tmp_path):
    lines = _real_pop_lines(tmp_path / "broker")
    assert {line["event"] for line in lines} == set(POP_EVENTS)
    run = clean_orderly_run()
    for i, line in enumerate(lines):  # on the synthetic run's timeline, between its sends and the end
        # the line's own wall times (its deadlines) move with it, so each keeps its distance to its stamp
        shift_ms = POP_WALL0 + 210 + i - line["wall_ms"]
        fields = {k: v + shift_ms if k.endswith("_wall_ms") and v is not None else v for k, v in line.items()
                  if k not in ("node", "mono_ms", "wall_ms", "event")}
        run.event(line["event"], 210 + i, "broker-a-0", **fields)
    return run.write(tmp_path / "run"), len(lines)


def test_the_loader_reads_pop_events_with_their_queue_fields(spark, tmp_path):
    run_dir, count = _run_with_pop_events(tmp_path)
    history = load_history(spark, run_dir)
    assert history.stats["unreadable_lines"]["events"] == 0
    pops = [row for row in history.events.filter(history.events.event.startswith("pop")).collect()
            if row["group"] in REAL_GROUPS]
    assert len(pops) == count
    assert all(row["queue_id"] == 0 and row["queue_offset"] is not None and row["group"] for row in pops)


@pytest.mark.slow  # a whole check of the clean history: minutes on a loaded machine
def test_pop_events_leave_every_check_of_the_clean_history_valid(spark, tmp_path):
    run_dir, _ = _run_with_pop_events(tmp_path)
    output = check_run(run_dir, spark=spark)
    invalid = {name: (check.reason, check.error) for name, check in output.verdict.checks.items()
               if check.valid is not True}
    assert not invalid
    assert output.verdict.exit_code == 0
