"""NodeProcess lifecycle against a stand-in child (no real nodes)."""

from __future__ import annotations

import json
import os
import signal
import time

import psutil
import pytest
from support.timing import within_s

from harness.errors import HarnessError, NodeStartError
from harness.pids import describe_exit_code, is_node_process
from harness.process import NodeProcess, NodeState
from harness.ready import Ready
from harness.waiting import wait_until
from nodes.common.config import NamesrvConfig, load_node_config


def test_start_stop_records_ready_and_clean_exit(make_node):
    node = make_node("ready")
    node.start()
    assert node.state is NodeState.RUNNING
    assert node.ready is not None and node.ready.port == node.port and node.ready.pid == node.pid
    assert node.addr == f"127.0.0.1:{node.port}"
    assert node.live_pids() == [node.pid]
    assert node.stop() == 0
    assert node.state is NodeState.STOPPED
    assert not node.alive
    assert node.live_pids() == []


def test_kill_then_restart_keeps_port_and_changes_pid(make_node):
    node = make_node("ready")
    node.start()
    first_pid, port = node.pid, node.port
    assert node.kill() == -signal.SIGKILL
    node.restart()
    assert node.state is NodeState.RUNNING
    assert node.port == port and node.pid != first_pid
    assert node.starts == 2
    node.restart(kill=True)
    assert node.starts == 3


def test_pause_stops_the_process_and_resume_continues_it(make_node):
    node = make_node("ready")
    node.start()
    node.pause()
    assert node.state is NodeState.PAUSED
    assert psutil.Process(node.pid).status() == psutil.STATUS_STOPPED
    node.resume()
    assert node.state is NodeState.RUNNING
    assert psutil.Process(node.pid).status() != psutil.STATUS_STOPPED


def test_stop_while_paused_still_exits_cleanly(make_node):
    node = make_node("ready")
    node.start()
    node.pause()
    assert node.stop() == 0


def test_unexpected_sigkill_is_recorded_with_log_tail(make_node):
    exits = []
    node = make_node("ready", on_unexpected_exit=exits.append)
    node.start()
    pid = node.pid
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: exits, 5_000, "the exit to be recorded")
    assert node.state is NodeState.EXITED
    [record] = exits
    assert record.node_id == "n-0" and record.pid == pid and record.exit_code == -signal.SIGKILL
    assert "killed by SIGKILL" in str(record)
    assert "standin n-0 mode ready" in record.log_tail
    node.restart()  # an exited node can be started again
    assert node.state is NodeState.RUNNING and len(exits) == 1


def test_node_exiting_by_itself_after_ready_is_recorded_with_code_70(make_node):
    exits = []
    node = make_node("exit-after-ready", on_unexpected_exit=exits.append)
    node.start()
    wait_until(lambda: exits, 5_000, "the exit to be recorded")
    assert exits[0].exit_code == 70
    assert "crash: broken invariant" in exits[0].exit_description
    assert "stand-in exits 70 after READY" in exits[0].log_tail


def test_requested_stops_are_not_recorded_as_unexpected(make_node):
    exits = []
    node = make_node("ready", on_unexpected_exit=exits.append)
    node.start()
    node.kill()
    node.start()
    node.stop()
    assert exits == []


def test_crash_before_ready_raises_node_start_error_with_exit_code_and_logs(make_node):
    exits = []
    node = make_node("crash", on_unexpected_exit=exits.append)
    with pytest.raises(NodeStartError) as info:
        node.start()
    err = info.value
    assert err.exit_code == 70 and err.node_id == "n-0"
    assert "exited before it was ready" in str(err)
    assert "stand-in crashing on purpose" in err.log_tail  # stderr.log
    assert "invariant broken" in err.log_tail  # node.log
    assert node.state is NodeState.FAILED
    assert exits == []


def test_config_error_exit_78_is_named(make_node):
    node = make_node("config-error")
    with pytest.raises(NodeStartError, match=r"code 78 \(bad config\)"):
        node.start()


def test_silent_node_times_out_and_is_killed(make_node):
    node = make_node("silent", start_budget_ms=400)
    with pytest.raises(NodeStartError, match="no READY line within 400 ms") as info:
        node.start()
    assert info.value.exit_code == -signal.SIGKILL
    assert node.live_pids() == []


def test_ready_on_the_wrong_port_is_a_start_error(make_node):
    node = make_node("bad-port")
    with pytest.raises(NodeStartError, match=f"expected n-0 on port {node.port}"):
        node.start()


def test_a_stop_that_ends_in_a_crash_is_recorded_as_unexpected(make_node):
    """SIGTERM asks for a clean stop; a node that exits 70 instead broke an invariant while
    shutting down, and the chaos checker's deaths check must hear of it like any crash."""
    exits = []
    node = make_node("crash-on-term", on_unexpected_exit=exits.append)
    node.start()
    assert node.stop() == 70
    assert [e.exit_code for e in exits] == [70]
    assert "crash: broken invariant" in exits[0].exit_description
    assert "stand-in exits 70 on SIGTERM" in exits[0].log_tail
    assert node.state is NodeState.STOPPED


def test_a_stop_escalated_to_sigkill_is_the_harness_s_doing_not_an_unexpected_exit(make_node):
    exits = []
    node = make_node("ignore-term", on_unexpected_exit=exits.append)
    node.start()
    assert node.stop(grace_ms=300) == -signal.SIGKILL
    assert exits == []


def test_stop_escalates_to_sigkill_when_sigterm_is_ignored(make_node):
    node = make_node("ignore-term")
    node.start()
    started = time.monotonic()
    assert node.stop(grace_ms=300) == -signal.SIGKILL
    # SIGKILL right after the grace, not after some later timeout of its own
    assert time.monotonic() - started < within_s(300)


def test_kill_reaches_grandchildren_in_the_session(make_node):
    node = make_node("grandchild")
    node.start()
    wait_until(lambda: len(node.live_pids()) == 2, 5_000, "the grandchild to appear")
    node.kill()
    wait_until(lambda: node.live_pids() == [], 5_000, "the session to be empty")


def test_close_leaves_no_live_pids(make_node):
    node = make_node("grandchild")
    node.start()
    wait_until(lambda: len(node.live_pids()) == 2, 5_000, "the grandchild to appear")
    node.close()
    assert node.live_pids() == []


def test_stray_stdout_after_ready_never_blocks_the_node(make_node):
    node = make_node("stray")
    node.start()
    wait_until(lambda: (node.run_dir / "stray-done").exists(), 10_000, "2 MiB of stray stdout to be drained")
    assert node.state is NodeState.RUNNING
    wait_until(lambda: node.stdout_log.stat().st_size > 2 * 1024 * 1024, 5_000, "stdout.log to hold the output")


def test_methods_assert_the_state_they_need(make_node):
    node = make_node("ready")
    with pytest.raises(HarnessError, match="cannot pause n-0: it is NEW"):
        node.pause()
    node.start()
    with pytest.raises(HarnessError, match="cannot resume n-0: it is RUNNING"):
        node.resume()
    with pytest.raises(HarnessError, match="cannot start n-0: it is RUNNING"):
        node.start()
    node.stop()
    with pytest.raises(HarnessError, match="cannot kill n-0: it is STOPPED"):
        node.kill()


def test_detached_node_reads_ready_from_a_file_and_survives_release(tmp_path, ports, standin_cmd):
    port = ports.allocate(1)[0]
    run_dir = tmp_path / "d-0"
    node = NodeProcess("d-0", "broker", run_dir, port=port, detached=True,
                       argv=standin_cmd("ready", node_id="d-0", port=port, run_dir=run_dir))
    node.start()
    try:
        assert "READY" in node.stdout_log.read_text()
        node.release()
        assert psutil.Process(node.pid).is_running()
        assert is_node_process(node.pid, run_dir)  # cwd is the run dir
    finally:
        node.kill()


def test_start_writes_a_loadable_config(tmp_path, ports, standin_cmd):
    port = ports.allocate(1)[0]
    cfg = NamesrvConfig(node_id="namesrv-0", port=port, run_dir=str(tmp_path / "namesrv-0"))
    node = NodeProcess("namesrv-0", "namesrv", tmp_path / "namesrv-0", config=cfg,
                       argv=standin_cmd("ready", config=tmp_path / "namesrv-0" / "config.json"))
    try:
        node.start()
        assert node.port == port
        role, loaded = load_node_config(node.config_path)
        assert role == "namesrv" and loaded == cfg
    finally:
        node.close()


def test_ready_parse_accepts_the_contract_line_and_rejects_others():
    line = 'READY {"node_id": "broker-a-0", "role": "broker", "addr": "127.0.0.1:20001", "port": 20001, "pid": 7}'
    ready = Ready.parse(line)
    assert (ready.node_id, ready.role, ready.addr, ready.port, ready.pid) == (
        "broker-a-0", "broker", "127.0.0.1:20001", 20001, 7)
    with pytest.raises(ValueError, match="not a READY line"):
        Ready.parse("hello")
    with pytest.raises(ValueError, match="lacks"):
        Ready.parse("READY " + json.dumps({"node_id": "x"}))


@pytest.mark.parametrize(("code", "text"), [
    (0, "exited with code 0 (clean stop)"),
    (70, "exited with code 70 (crash: broken invariant)"),
    (78, "exited with code 78 (bad config)"),
    (3, "exited with code 3"),
    (-9, "was killed by SIGKILL"),
    (None, "is still running"),
])
def test_exit_codes_are_described(code, text):
    assert describe_exit_code(code) == text


@pytest.mark.parametrize("ending", ["raise RuntimeError('harness crashed')", "raise SystemExit(3)"])
def test_nodes_die_with_the_harness_process_that_forgot_them(tmp_path, ports, standin_cmd, ending):
    import subprocess
    import sys
    from pathlib import Path

    from harness.pids import pid_alive, wait_gone

    port = ports.allocate(1)[0]
    argv = standin_cmd("grandchild", node_id="o-0", port=port, run_dir=tmp_path / "o-0")
    repo = str(Path(__file__).resolve().parents[3])
    code = (f"import sys; sys.path.insert(0, {repo!r})\n"
            "from harness.process import NodeProcess\n"
            f"p = NodeProcess('o-0', 'broker', {str(tmp_path / 'o-0')!r}, port={port}, argv={argv!r})\n"
            "p.start()\n"
            "print(p.pid, flush=True)\n"
            f"{ending}\n")
    harness_proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert harness_proc.returncode != 0
    pid = int(harness_proc.stdout.split()[0])
    assert wait_gone([pid], 5_000) == []
    assert not pid_alive(pid)
