"""A property of the in-flight table, over random sequences of sends, pops, acks, changes of
invisible time and the passing of time (a FakeClock, revive after every step):

- a message is in flight at most once at any time;
- each hand-out's delivery attempt is the number of earlier hand-outs of that message + 1;
- the latest handle of a message acks OK while it is not expired (and again once acked); any
  older handle, or an expired one, is refused;
- nothing is lost: once time runs out every message not acked comes back, and all are acked.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nodes.broker.pop import PopCode, ReceiptHandle
from nodes.common import constants as c
from nodes.common.clock import FakeClock

from .rig import PopRig

G = "g"
INVISIBLE = st.sampled_from([100, 1_000])

operations = st.lists(st.one_of(
    st.tuples(st.just("send"), st.integers(0, 1)),
    st.tuples(st.just("pop"), st.integers(1, 3), INVISIBLE),
    st.tuples(st.just("ack"), st.integers(0, 50)),
    st.tuples(st.just("change"), st.integers(0, 50), st.sampled_from([0, 50, 2_000])),
    st.tuples(st.just("wait"), st.sampled_from([60, 600, 1_500])),
), min_size=1, max_size=25)


@dataclass
class Issued:
    msg_id: str
    handle: str

    @property
    def deadline_ms(self) -> int:
        return ReceiptHandle.parse(self.handle).deadline_wall_ms


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=operations)
@example(ops=[("send", 0), ("pop", 1, 100), ("change", 0, 2_000), ("ack", 0), ("ack", 1), ("ack", 1)])
@example(ops=[("send", 0), ("pop", 1, 100), ("wait", 600), ("ack", 0), ("pop", 1, 1_000), ("ack", 0), ("ack", 1)])
def test_the_in_flight_table_keeps_its_promises(ops):
    with tempfile.TemporaryDirectory() as root:
        clock = FakeClock()
        rig = PopRig(Path(root), clock=clock)
        rig.group(G, retry_max_times=100)
        rig.topic("T", queues=2)
        try:
            asyncio.run(_check(rig, clock, ops))
        finally:
            rig.close()


async def _check(rig: PopRig, clock: FakeClock, ops) -> None:
    engine = rig.engine
    engine.bind_loop()
    issued: list[Issued] = []
    latest: dict[str, str] = {}  # msg id -> its latest handle
    acked: set[str] = set()
    handouts: Counter[str] = Counter()
    sent: list[str] = []

    def check_in_flight_once() -> None:
        ids = [rig.store.lookup_message(e.phys_offset, e.size).msg_id for e in engine.state.inflight.values()]
        assert len(ids) == len(set(ids)), ids

    async def pop(max_nums: int, invisible_ms: int) -> None:
        popped = await engine.pop(group=G, topic="T", max_nums=max_nums, invisible_ms=invisible_ms)
        for message in popped.messages:
            assert message.msg_id not in acked
            handouts[message.msg_id] += 1
            assert message.delivery_attempt == handouts[message.msg_id]
            issued.append(Issued(message.msg_id, message.receipt_handle))
            latest[message.msg_id] = message.receipt_handle

    for op in ops:
        kind = op[0]
        if kind == "send":
            msg_id = f"M{len(sent)}"
            rig.put("T", op[1], UNIQ_KEY=msg_id)
            sent.append(msg_id)
        elif kind == "pop":
            await pop(op[1], op[2])
        elif kind in ("ack", "change") and issued:
            target = issued[op[1] % len(issued)]
            is_latest = latest[target.msg_id] == target.handle
            expired = target.deadline_ms <= clock.wall_ms()
            if kind == "ack":
                result = await engine.ack(G, "T", target.handle)
                if is_latest and not expired:
                    assert result.code is PopCode.OK, result
                    acked.add(target.msg_id)
                else:
                    assert result.code is PopCode.INVALID_RECEIPT_HANDLE, (result, is_latest, expired)
            else:
                changed = await engine.change_invisible(G, "T", target.handle, op[2])
                if is_latest and not expired and target.msg_id not in acked:
                    assert changed.code is PopCode.OK, changed
                    issued.append(Issued(target.msg_id, changed.receipt_handle))
                    latest[target.msg_id] = changed.receipt_handle
                else:  # older, expired, or settled
                    assert changed.code is PopCode.INVALID_RECEIPT_HANDLE, changed
        elif kind == "wait":
            clock.advance_ms(op[1])
            await engine.revive()
        check_in_flight_once()

    # the end: time passes, everything not acked comes back and is acked
    for _ in range(len(sent) + 2):
        clock.advance_ms(c.POP_REVIVE_INTERVAL_MS + 2_000)
        await engine.revive()
        await pop(32, 1_000)
        for msg_id, handle in list(latest.items()):
            if msg_id not in acked and ReceiptHandle.parse(handle).deadline_wall_ms > clock.wall_ms():
                assert (await engine.ack(G, "T", handle)).code is PopCode.OK
                acked.add(msg_id)
        check_in_flight_once()
    assert acked == set(sent)
    assert not engine.state.inflight
