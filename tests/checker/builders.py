"""Hand-written histories for the checker tests: a tiny builder that writes what the processes would.

Times are CLOCK_MONOTONIC ms. The timing below is RocketMQ's scaled by 1/100, so bounds are
small numbers: L_b 600, L_c 300, R_l = R_b 200, W_p 10, P_c 50, X_c 1200, N_r 300.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.checker.config import CheckerConfig
from chaos.checker.loader import History, history_from_rows

TIMING = {
    "broker_lock_lease_ms": 600, "client_lock_lease_ms": 300, "lock_renew_interval_ms": 200,
    "rebalance_interval_ms": 200, "pull_delay_when_exception_ms": 10, "consumer_offset_persist_ms": 50,
    "slave_sync_interval_ms": 100, "client_heartbeat_ms": 300, "consumer_channel_expiry_ms": 1200,
    "client_housekeeping_ms": 100, "route_poll_ms": 300, "broker_expiry_ms": 1200, "broker_expiry_scan_ms": 100,
    "register_interval_ms": 300, "unlock_delay_ms": 200,
}
T = "Orders"
B = "broker-a"
G = "G"
MASTER = "broker-a-0"
POP_WALL0 = 1_700_000_000_000  # the wall clock at mono 0 (every line's wall_ms is this + mono_ms)


def config(**overrides: Any) -> CheckerConfig:
    return CheckerConfig(timing=TIMING, timing_origin="test", slack_ms=20, slack_ratio=0.1, clock_slack_ms=5,
                         **overrides)


@dataclass
class Run:
    sends: list[dict[str, Any]] = field(default_factory=list)
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    nemesis: list[dict[str, Any]] = field(default_factory=list)
    processes: list[dict[str, Any]] = field(default_factory=list)
    readback: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)  # the link proxies' journal

    # ---- producer ---------------------------------------------------------------------------

    def send(self, msg_id: str, t: int, *, offset: int, queue: int = 0, key: str | None = None, seq: int | None = None,
             outcome: str = "ok", status: str = "SEND_OK", topic: str = T, node: str = "producer-0",
             crc: int | None = None) -> Run:
        common = {"node": node, "event": "send", "msg_id": msg_id, "topic": topic, "sharding_key": key, "seq": seq,
                  "op_id": f"op-{msg_id}", "body_crc32": crc}
        self.sends.append({**common, "mono_ms": t, "wall_ms": 1_700_000_000_000 + t, "type": "invoke"})
        done = {**common, "mono_ms": t + 2, "wall_ms": 1_700_000_000_002 + t, "type": outcome,
                "status": status if outcome == "ok" else "timeout"}
        if outcome == "ok":
            done.update(queue_id=queue, queue_offset=offset, broker_name=B)
        self.sends.append(done)
        return self

    def sends_for(self, queue: int, n: int, *, t0: int = 100, key: str | None = None, first: int = 0) -> Run:
        for i in range(first, first + n):
            self.send(f"q{queue}-m{i}", t0 + i, offset=i, queue=queue, key=key or f"k{queue}", seq=i, crc=i)
        return self

    # ---- consumer ---------------------------------------------------------------------------

    def deliver(self, msg_id: str, t: int, *, offset: int, queue: int = 0, client: str = "c1", node: str | None = None,
                group: str = G, result: str = "CONSUME_SUCCESS", orderly: bool = False, dur: int = 4,
                key: str | None = None, seq: int | None = None, reconsume: int = 0, topic: str = T,
                crc: int | None = None) -> Run:
        self.deliveries.append({
            "node": node or f"consumer-{client[1:]}", "event": "deliver", "mono_ms": t, "wall_ms": 1_700_000_000_000 + t, "group": group,
            "client_id": client, "msg_id": msg_id, "topic": topic, "broker_name": B, "queue_id": queue,
            "queue_offset": offset, "reconsume_times": reconsume, "sharding_key": key, "seq": seq, "result": result,
            "orderly": orderly, "consume_start_mono_ms": t if orderly else None,
            "consume_end_mono_ms": t + dur if orderly else None, "body_crc32": crc})
        return self

    def consume(self, queue: int, offsets: range, *, t0: int, step: int = 10, client: str = "c1",
                orderly: bool = True, key: str | None = None, **kw: Any) -> Run:
        """Deliveries of `sends_for`'s messages; each body's digest is what was sent (its offset)."""
        for j, off in enumerate(offsets):
            self.deliver(f"q{queue}-m{off}", t0 + j * step, offset=off, queue=queue, client=client, orderly=orderly,
                         key=key or f"k{queue}", seq=off, **{"crc": off, **kw})
        return self

    def event(self, event: str, t: int, node: str, **fields: Any) -> Run:
        self.events.append({"node": node, "mono_ms": t, "wall_ms": 1_700_000_000_000 + t, "event": event, **fields})
        return self

    def commit(self, t: int, offset: int, *, queue: int = 0, client: str = "c1", target: int = 0, group: str = G,
               decided: int | None = None) -> Run:
        return self.event("offset-commit", t, f"consumer-{client[1:]}", group=group, client_id=client, topic=T,
                          broker_name=B, queue_id=queue, offset=offset, target_broker_id=target, ok=True,
                          decided_mono_ms=decided)

    def request(self, kind: str, sent: int, answered: int | None, *, ok: bool = True, client: str = "c1",
                broker_id: int = 0, request_id: int | None = None, **fields: Any) -> Run:
        """A request journalled on `consumer-N -> broker-a-<id>` at `sent`, its answer at `answered`
        (None: never answered)."""
        dst = f"{B}-{broker_id}"
        rid = request_id if request_id is not None else len(self.requests) + 1
        common = {"node": "links", "link": f"consumer-{client[1:]}->{dst}", "src": f"consumer-{client[1:]}",
                  "dst": dst, "conn": 1, "protocol": "grpc", "kind": kind, "request_id": rid, "entry": 0,
                  "group": G, "client_id": client, "topic": T, **fields}
        self.requests.append({**common, "event": "request", "mono_ms": sent, "wall_ms": 1_700_000_000_000 + sent})
        if answered is not None:
            self.requests.append({**common, "event": "answer", "mono_ms": answered,
                                  "wall_ms": 1_700_000_000_000 + answered, "sent_mono_ms": sent,
                                  "answered_mono_ms": answered, "ok": ok, "grpc_status": 0})
        return self

    def stored(self, t: int, offset: int, *, broker_id: int = 0, queue: int = 0, source: str = "client") -> Run:
        return self.event("offset-commit", t, f"{B}-{broker_id}", group=G, topic=T, queue_id=queue, offset=offset,
                          source=source)

    def lock(self, t: int, action: str, *, client: str = "c1", queue: int = 0, lease: int | None = None,
             side: str = "client", reason: str | None = None) -> Run:
        node = f"consumer-{client[1:]}" if side == "client" else f"{B}-0"
        extra = {"reason": reason} if reason is not None else {}
        return self.event("lock", t, node, group=G, client_id=client, topic=T, broker_name=B, queue_id=queue,
                          action=action, lease_end_mono_ms=lease, side=side, **extra)

    def pull(self, t: int, *, offset: int, requested: int = 0, answered: int = 0, suggest: int = 0,
             next_offset: int | None = None, status: str = "FOUND", commit: bool = False, client: str = "c1",
             queue: int = 0, sent: int | None = None, topic: str = T) -> Run:
        """A pull answered at `t` (sent at `sent`, default `t`)."""
        return self.event("pull-route", t, f"consumer-{client[1:]}", group=G, client_id=client, topic=topic,
                          broker_name=B, queue_id=queue, queue_offset=offset, requested_broker_id=requested,
                          broker_id=answered, suggest_which_broker_id=suggest, status=status,
                          next_begin_offset=next_offset if next_offset is not None else offset + 1, commit_flag=commit,
                          sent_mono_ms=sent)

    def route(self, t: int, queues: list[tuple[str, int]], *, client: str = "c1", ns: str = "127.0.0.1:9876") -> Run:
        """A consumer's route of T changed to `queues` ([broker, queue id]), as name server `ns` said."""
        return self.event("route", t, f"consumer-{client[1:]}", group=G, client_id=client, topic=T,
                          queues=[[b, str(q)] for b, q in queues], namesrv=ns)

    def owns(self, t: int, queues: list[tuple[str, int]], *, client: str = "c1", reason: str = "queues-changed") -> Run:
        """A consumer's rebalance left it owning `queues` of T."""
        return self.event("rebalance", t, f"consumer-{client[1:]}", group=G, client_id=client, topic=T,
                          after=[[b, str(q)] for b, q in queues], reason=reason)

    # ---- harness ----------------------------------------------------------------------------

    def fault(self, op: str, targets: list[str], start: int, end: int | None = None) -> Run:
        recovery = {"kill": "restart", "stop": "restart", "pause": "resume", "partition": "heal",
                    "link-toxic": "remove-toxic", "clock": "clock-reset", "starve": "unstarve",
                    "disk-fill": "free-disk"}[op]
        self.nemesis += [{"node": "harness", "event": "nemesis", "mono_ms": start, "op": op, "phase": "start", "targets": targets},
                         {"node": "harness", "event": "nemesis", "mono_ms": start + 1, "op": op, "phase": "end", "targets": targets}]
        if end is not None:
            self.nemesis += [{"node": "harness", "event": "nemesis", "mono_ms": end - 1, "op": recovery, "phase": "start", "targets": targets},
                             {"node": "harness", "event": "nemesis", "mono_ms": end, "op": recovery, "phase": "end", "targets": targets}]
        return self

    def power_loss(self, node: str, start: int, restart: int | None, *, cqs: dict[str, tuple[int, int]],
                   flush: str = "ASYNC_FLUSH", torn_bytes: int = 40) -> Run:
        """A power loss (the nemesis's store detail: per queue [flushed, written)), then a restart."""
        detail = {"store": {"commitlog": {"flushed_phys_offset": 1000, "written_phys_offset": 1500,
                                          "torn_bytes": torn_bytes},
                            "consume_queues": {k: {"flushed_queue_offset": a, "written_queue_offset": b}
                                               for k, (a, b) in cqs.items()}}, "flush_disk_type": flush}
        self.nemesis += [{"node": "harness", "event": "nemesis", "mono_ms": start, "op": "power-loss", "phase": "start",
                          "targets": [node]},
                         {"node": "harness", "event": "nemesis", "mono_ms": start + 2, "op": "power-loss",
                          "phase": "end", "targets": [node], "detail": json.dumps(detail)}]
        if restart is not None:
            self.nemesis += [{"node": "harness", "event": "nemesis", "mono_ms": restart - 1, "op": "restart",
                              "phase": "start", "targets": [node]},
                             {"node": "harness", "event": "nemesis", "mono_ms": restart, "op": "restart",
                              "phase": "end", "targets": [node]}]
        return self

    def rack_power_loss(self, start: int, restart: int | None, *, cqs: dict[str, tuple[int, int]],
                        flush: str = "ASYNC_FLUSH", nodes: tuple[str, ...] = (f"{B}-0", f"{B}-1")) -> Run:
        """One power loss of several nodes at once (each node's store detail under "nodes"; the
        master's queues cut to [flushed, written), the others' empty), then one restart."""
        per_node = {node: {"store": {"commitlog": {"flushed_phys_offset": 1000, "written_phys_offset": 1500,
                                                   "torn_bytes": 40},
                                     "consume_queues": {k: {"flushed_queue_offset": a, "written_queue_offset": b}
                                                        for k, (a, b) in (cqs if i == 0 else {}).items()}},
                           "flush_disk_type": flush} for i, node in enumerate(nodes)}
        targets = list(nodes)
        self.nemesis += [{"node": "harness", "event": "nemesis", "mono_ms": start, "op": "power-loss", "phase": "start",
                          "targets": targets},
                         {"node": "harness", "event": "nemesis", "mono_ms": start + 2, "op": "power-loss",
                          "phase": "end", "targets": targets, "detail": json.dumps({"nodes": per_node})}]
        if restart is not None:
            self.nemesis += [{"node": "harness", "event": "nemesis", "mono_ms": restart - 1, "op": "restart",
                              "phase": "start", "targets": targets},
                             {"node": "harness", "event": "nemesis", "mono_ms": restart, "op": "restart",
                              "phase": "end", "targets": targets}]
        return self

    def corrupt(self, node: str, t: int, *, phys_offset: int, n: int, msg_ids: list[str]) -> Run:
        detail = {"file": "commitlog/00000000000000000000", "phys_offset": phys_offset, "bytes": n, "topic": T,
                  "queue_id": 0, "queue_offset": 0, "msg_ids": msg_ids}
        self.nemesis += [{"node": "harness", "event": "nemesis", "mono_ms": t, "op": "corrupt", "phase": "start",
                          "targets": [node]},
                         {"node": "harness", "event": "nemesis", "mono_ms": t + 1, "op": "corrupt", "phase": "end",
                          "targets": [node], "detail": json.dumps(detail)}]
        return self

    def store_error(self, t: int, kind: str, *, node: str = "broker-a-0", phys_offset: int = 1000,
                    n: int = 40) -> Run:
        return self.event("store-error", t, node, kind=kind, file="commitlog/00000000000000000000",
                          phys_offset=phys_offset, bytes=n, detail=f"{kind} at {phys_offset}")

    def store_recovered(self, t: int, *, node: str = "broker-a-0", clean: bool = False, truncated: int = 0) -> Run:
        return self.event("store-recovered", t, node, clean=clean, commitlog_max_phys_offset=1000,
                          truncated_bytes=truncated, damaged_ranges=0, cq_units_dropped=0)

    def read_back(self, replica_id: int, queue: int, offsets: range, *, crc: int | None = None,
                  caught_up: bool = True) -> Run:
        """What the end-of-run read-back found on one replica (msg ids as `sends_for` names them)."""
        node = f"{B}-{replica_id}"
        if not any(r["node"] == node and r["event"] == "replica-state" for r in self.readback):
            self.readback.append({"node": node, "event": "replica-state", "mono_ms": 99_000, "broker_name": B,
                                  "replica_id": replica_id, "max_phys_offset": 1000 if caught_up else 500,
                                  "master_max_phys_offset": 1000, "caught_up": caught_up})
        for off in offsets:
            self.readback.append({"node": node, "event": "readback", "mono_ms": 99_001, "broker_name": B,
                                  "replica_id": replica_id, "topic": T, "queue_id": queue, "queue_offset": off,
                                  "msg_id": f"q{queue}-m{off}", "body_crc32": crc if crc is not None else off})
        return self

    def exit(self, node: str, t: int, *, expected: bool = False, code: int = -9) -> Run:
        self.processes.append({"node": node, "event": "exit", "mono_ms": t, "expected": expected, "exit_code": code})
        return self

    # ---- POP (a master's pop* lines, a SimpleConsumer's client-ack): deadlines in mono ms -----

    def _pop_event(self, event: str, t: int, offset: int, generation: int, **fields: Any) -> Run:
        fields = {"group": G, "queue_topic": T, **fields}
        self.event(event, t, MASTER, side="broker", topic=T, broker_name=B, queue_id=0, queue_offset=offset,
                   generation=generation, **fields)
        return self

    def pop(self, t: int, offset: int, generation: int, deadline: int, *, client: str = "c1", fifo: bool = False,
            attempt: int = 1, batch_t: int | None = None, group: str = G) -> Run:
        return self._pop_event("pop", t, offset, generation, msg_id=f"m{offset}", client_id=client, fifo=fifo,
                               attempt=attempt, repeat=False, pop_wall_ms=POP_WALL0 + (batch_t or t),
                               deadline_wall_ms=POP_WALL0 + deadline, group=group)

    def pop_ack(self, t: int, offset: int, generation: int, *, handle: int | None = None,
                handle_deadline: int | None = None, fifo: bool = False, group: str = G) -> Run:
        return self._pop_event("pop-ack", t, offset, generation, status="ok", fifo=fifo, group=group,
                               handle_generation=generation if handle is None else handle,
                               handle_deadline_wall_ms=None if handle_deadline is None else POP_WALL0 + handle_deadline)

    def pop_change(self, t: int, offset: int, generation: int, new_generation: int, deadline: int) -> Run:
        return self._pop_event("pop-change-invisible", t, offset, generation, new_generation=new_generation,
                               deadline_wall_ms=POP_WALL0 + deadline, reason="client")

    def pop_revive(self, t: int, offset: int, generation: int, deadline: int, *, in_place: bool = False,
                   fifo: bool = False, group: str = G) -> Run:
        return self._pop_event("pop-revive", t, offset, generation, deadline_wall_ms=POP_WALL0 + deadline,
                               attempt=1, in_place=in_place, lost=False, fifo=fifo, group=group)

    def client_ack(self, sent: int, answered: int, offset: int, generation: int, deadline: int,
                   status: str = "ok") -> Run:
        self.event("client-ack", answered, "consumer-0", side="client", group=G, client_id="c1", msg_id=f"m{offset}",
                   broker_name=B, queue_topic=T, queue_id=0, queue_offset=offset, generation=generation,
                   deadline_wall_ms=POP_WALL0 + deadline, status=status, sent_mono_ms=sent)
        return self

    def ends_at(self, t: int) -> Run:
        self.event("consumer-stop", t, "consumer-0", side="client", group=G, client_id="c1")
        return self

    # ---- output -----------------------------------------------------------------------------

    def history(self, spark: Any, *, absent: tuple[str, ...] = ()) -> History:
        kinds = {k: (None if k in absent else getattr(self, k))
                 for k in ("sends", "deliveries", "events", "nemesis", "processes")}
        if self.readback and "readback" not in absent:
            kinds["readback"] = self.readback
        if self.requests and "requests" not in absent:
            kinds["requests"] = self.requests
        return history_from_rows(spark, **kinds)

    def write(self, run_dir: Path, *, timing: bool = True) -> Path:
        """Write the histories as each process would: <run_dir>/<node>/<kind>.jsonl."""
        run_dir.mkdir(parents=True, exist_ok=True)
        for kind in ("sends", "deliveries", "events", "nemesis", "processes", "readback", "requests"):
            for r in getattr(self, kind):
                node = "readback" if kind == "readback" else r.get("node") or "harness"
                path = run_dir / node / f"{kind}.jsonl"
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a") as f:
                    f.write(json.dumps(r) + "\n")
        # the chaos runner always writes the unexpected exits, an empty file when there were none
        (run_dir / "processes").mkdir(exist_ok=True)
        (run_dir / "processes" / "processes.jsonl").touch()
        if timing:
            (run_dir / "timing.json").write_text(json.dumps(TIMING))
        (run_dir / "run.json").write_text(json.dumps({"suite": "unit", "seed": 7}))
        return run_dir


def clean_orderly_run() -> Run:
    """Two queues, ten messages each, consumed in order by c1 under its locks, offsets committed."""
    r = Run().sends_for(0, 10).sends_for(1, 10)
    r.route(100, [(B, 0), (B, 1)]).owns(140, [(B, 0), (B, 1)])
    for q in (0, 1):
        r.lock(150, "granted", queue=q, lease=750, side="broker")
        r.lock(151, "granted", queue=q, lease=451)
        r.consume(q, range(10), t0=200)
        r.commit(320, 10, queue=q)
        # the commit as its link saw it, answered after the master stored it
        r.request("offset-commit", 317, 321, queue_id=q, offset=10).stored(319, 10, queue=q)
        r.pull(190, offset=0, next_offset=10, queue=q)
        r.pull(300, offset=10, next_offset=10, status="NO_NEW_MSG", queue=q)
        r.read_back(0, q, range(10)).read_back(1, q, range(10))
    # both brokers started clean; the slave had a record flipped that nothing acknowledged lived in
    r.store_recovered(60).store_recovered(60, node="broker-a-1")
    r.corrupt("broker-a-1", 310, phys_offset=0, n=4, msg_ids=[])
    # a RocketMQ 5 FIFO group's two batches of queue 0, one after the other, and a concurrent 5.x
    # group's hand-out revived in time (their own groups: the 4.x checks never see them)
    r.pop(200, 0, 1, 400, fifo=True, group="PF").pop(200, 1, 2, 400, fifo=True, group="PF")
    r.pop_ack(250, 0, 1, fifo=True, group="PF").pop_ack(251, 1, 2, fifo=True, group="PF")
    r.pop(260, 2, 3, 500, fifo=True, group="PF").pop_ack(270, 2, 3, fifo=True, group="PF")
    r.pop(200, 0, 4, 300, group="PC").pop_revive(310, 0, 4, 300, group="PC")
    return r
