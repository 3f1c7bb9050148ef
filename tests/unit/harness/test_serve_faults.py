"""Fault windows read from a growing nemesis.jsonl (docs/history.md's contract): opened at a fault's
start, closed at its recovery's end, every partition closed by a heal without a fault id, instant
and failed faults closed at once, torn and rewritten files handled."""

from __future__ import annotations

import json
from pathlib import Path

from harness.serve.faults import RECOVERY_OPS, FaultTail

ISOLATE = "isolate consumer-0 DROP: 2 links (consumer-0->broker-a-0, broker-a-0->consumer-0)"


def line(op: str, phase: str, fault_id: str | None, targets: list[str], wall_ms: int, detail: str = "",
         error: str | None = None) -> str:
    row = {"node": "nemesis", "event": "nemesis", "op": op, "phase": phase, "fault_id": fault_id, "targets": targets,
           "wall_ms": wall_ms, "mono_ms": wall_ms, "detail": detail}
    if error:
        row["error"] = error
    return json.dumps(row, sort_keys=True) + "\n"


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text)


def test_windows_follow_the_file_as_it_grows(tmp_path):
    path = tmp_path / "nemesis.jsonl"
    tail = FaultTail(path)
    assert tail.poll().windows == {}  # no file yet: no faults
    append(path, line("kill", "start", "f1-kill", ["consumer-1"], 100, "SIGKILL pid 7 (consumer-1)"))
    [w] = tail.poll().open_windows()
    assert (w.op, w.state, w.targets) == ("kill", "starting", ["consumer-1"])
    assert tail.poll().node_states() == {"consumer-1": "killed"}
    append(path, line("kill", "end", "f1-kill", ["consumer-1"], 105) + line("partition", "start", "f2-partition",
                                                                            ["consumer-0"], 200, ISOLATE)[:40])
    history = tail.poll()  # the partition's start line is torn: not read until it is whole
    assert [(w.fault_id, w.state) for w in history.open_windows()] == [("f1-kill", "active")]
    append(path, line("partition", "start", "f2-partition", ["consumer-0"], 200, ISOLATE)[40:]
           + line("partition", "end", "f2-partition", ["consumer-0"], 202, ISOLATE))
    history = tail.poll()
    assert history.cut_links() == {"consumer-0->broker-a-0": "DROP", "broker-a-0->consumer-0": "DROP"}
    assert history.node_states() == {"consumer-1": "killed", "consumer-0": "partitioned"}
    append(path, line("restart", "start", "f1-kill", ["consumer-1"], 300, "restart consumer-1"))
    recovering = tail.poll().windows["f1-kill"]
    assert recovering.state == "recovering" and recovering.open
    append(path, line("restart", "end", "f1-kill", ["consumer-1"], 340, "restart consumer-1; now pid 9 (consumer-1)")
           + line("heal", "start", None, [], 400, "open every link") + line("heal", "end", None, [], 401))
    history = tail.poll()
    assert {k: (w.state, w.start_wall_ms, w.end_wall_ms) for k, w in history.windows.items()} == {
        "f1-kill": ("over", 100, 340), "f2-partition": ("over", 200, 401)}
    assert history.open_windows() == [] and history.cut_links() == {} and history.bad_lines == 0
    assert len(history.actions) == 8


def test_failed_instant_and_garbled_lines(tmp_path):
    path = tmp_path / "nemesis.jsonl"
    append(path, line("pause", "start", "f1-pause", ["broker-a-0"], 10)
           + line("pause", "end", "f1-pause", ["broker-a-0"], 11, error="broker-a-0: not running")
           + line("corrupt", "start", "f2-corrupt", ["broker-a-1"], 20) + line("corrupt", "end", "f2-corrupt",
                                                                                ["broker-a-1"], 21, '{"file": "x"}')
           + "not json\n" + json.dumps({"op": "kill"}) + "\n"
           + line("stop", "start", "f3-stop", ["consumer-0", "consumer-1"], 30)
           + line("stop", "end", "f3-stop", ["consumer-0", "consumer-1"], 31, error="consumer-1: gone"))
    tail = FaultTail(path)
    history = tail.poll()
    assert {k: (w.state, w.end_wall_ms) for k, w in history.windows.items()} == {
        "f1-pause": ("failed", 11), "f2-corrupt": ("over", 21), "f3-stop": ("active", None)}
    assert history.bad_lines == 2
    assert history.node_states() == {"consumer-0": "stopped", "consumer-1": "stopped"}
    path.write_text(line("kill", "start", "f1-kill", ["consumer-0"], 50))  # a new run in the same dir
    assert list(tail.poll().windows) == ["f1-kill"]


def test_the_recovery_ops_are_the_nemesis_history_contract():
    # the live view reads what chaos.nemesis writes (and the checker reads): harness may not import
    # chaos, so its copy is held to the writer's here
    from chaos.checker.faults import RECOVERY
    from chaos.nemesis_ops import RECOVERY_OP

    assert RECOVERY_OPS == RECOVERY_OP == RECOVERY
