"""POP state outlives a SIGKILL: a child process pops, acks one message and kills itself; the
store reopened (crash recovery) still knows what is in flight, hands none of it out early,
accepts the old handles, and revives what expired."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nodes.broker.pop import PopCode
from tests.support.timing import slack_ms

from .rig import REVIVE_MS, PopRig

G = "g"
SHORT_MS = 300
_CHILD = """
import asyncio, json, os, signal, sys
from pathlib import Path
from tests.unit.broker.pop.rig import PopRig

rig = PopRig(Path(sys.argv[1]))

async def main():
    long = await rig.engine.pop(group="g", topic="L", max_nums=32, invisible_ms=600_000)
    short = await rig.engine.pop(group="g", topic="S", max_nums=32, invisible_ms=int(sys.argv[2]))
    acked = await rig.engine.ack("g", "L", long.messages[0].receipt_handle)
    assert acked.code.name == "OK", acked
    return {"long": [m.receipt_handle for m in long.messages], "short": [m.receipt_handle for m in short.messages]}

handles = rig.run(main, revive=False)
print(json.dumps(handles), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_in_flight_state_survives_a_sigkill(tmp_path: Path):
    rig = PopRig(tmp_path)
    rig.topic("L")
    rig.topic("S")
    rig.group(G)
    for body in (b"l0", b"l1", b"l2"):
        rig.put("L", 0, body)
    rig.put("S", 0, b"s0")
    rig.close()

    root = Path(__file__).resolve().parents[4]
    child = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), str(SHORT_MS)], capture_output=True,
                           text=True, timeout=60, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert child.returncode == -9, child.stderr
    handles = json.loads(child.stdout.splitlines()[-1])
    assert len(handles["long"]) == 3 and len(handles["short"]) == 1

    rig.open()  # crash recovery, then the engine loads its state
    try:
        assert len(rig.engine.state.inflight) == 3  # two of L (one was acked), one of S
        assert rig.engine.state.offsets[(G, "L", 0)] == 3

        async def after_restart():
            early = await rig.engine.pop(group=G, topic="L", max_nums=32, invisible_ms=60_000)
            assert early.code is PopCode.NOT_FOUND  # nothing handed out again before its deadline
            acks = [(await rig.engine.ack(G, "L", h)).code for h in handles["long"]]
            back = await rig.engine.pop(group=G, topic="S", max_nums=1, invisible_ms=60_000,
                                        poll_timeout_ms=SHORT_MS + REVIVE_MS + slack_ms())
            return acks, back

        acks, back = rig.run(after_restart)
        assert acks == [PopCode.OK] * 3  # the one acked before the kill too: acks are idempotent
        assert back.code is PopCode.OK and back.messages[0].body == b"s0" and back.messages[0].delivery_attempt == 2
        assert not [e for e in rig.engine.state.inflight.values() if e.queue_topic == "L"]
    finally:
        rig.close()
