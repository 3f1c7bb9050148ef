"""The history contract: what every process of a chaos run writes, as explicit Spark schemas.

A run dir holds one directory per process, `<run_dir>/<node_id>/`, each with JSONL files
(one JSON object per line, flushed line by line; a torn last line after a SIGKILL is
skipped). Parquet files with the same columns (`sends.parquet`, ...; a file or a directory)
are read too, and files directly in `<run_dir>` count as well. The checker never infers a
schema: a field missing from a line is null, a field of the wrong type is null, unknown
fields are ignored. Every line carries:

    node      STRING  node id of the process that wrote it (default: its directory name)
    wall_ms   LONG    wall clock, ms since the epoch (display only)
    mono_ms   LONG    CLOCK_MONOTONIC in ms; the checker's timeline (system-wide on one host)
    event     STRING  what the line is

`sends.jsonl` (producer workload), `event` = `send`, Jepsen-style: one `invoke` per attempt,
then one `ok` / `fail` / `info` (outcome unknown) per attempt, joined by `op_id`:

    type STRING (invoke|ok|fail|info), op_id STRING, msg_id STRING (UNIQ_KEY, known at invoke),
    topic STRING, sharding_key STRING, seq LONG (per-key sequence number), body_crc32 LONG
    (zlib.crc32 of the body sent, also carried as the message property BODY_CRC32),
    status STRING (ok: SEND_OK | FLUSH_DISK_TIMEOUT | FLUSH_SLAVE_TIMEOUT | SLAVE_NOT_AVAILABLE;
    fail / info: error text), queue_id INT, queue_offset LONG, broker_name STRING

`deliveries.jsonl` (consumer; written and flushed *before* the listener's answer is acted
on), `event` = `deliver`, one line per message handed to the listener:

    group STRING, client_id STRING, msg_id STRING, topic STRING (the original topic, also for
    retries), broker_name STRING, queue_id INT, queue_offset LONG (of the queue it was pulled
    from: a retry queue for reconsume_times > 0 in concurrent mode), reconsume_times INT,
    sharding_key STRING, seq LONG, result STRING (CONSUME_SUCCESS | RECONSUME_LATER | SUCCESS |
    SUSPEND_CURRENT_QUEUE_A_MOMENT | COMMIT | ROLLBACK | exception text), orderly BOOLEAN,
    consume_start_mono_ms LONG, consume_end_mono_ms LONG (orderly: the listener call's interval;
    a batch shares one interval), body_crc32 LONG (zlib.crc32 of the body handed to the listener)

`events.jsonl` (consumers and brokers), one wide schema; `side` (client|broker) defaults to
the node's role (cluster.json, else a node id starting with "broker"). Per-queue events name
the queue by `topic`, `broker_name` (a broker's own events may omit it: it is the node id
without its `-<broker id>` suffix) and `queue_id`; `queue` (RocketMQ's MessageQueue string)
is accepted instead.

    pull-route       client: group, client_id, topic, broker_name, queue_id, queue_offset,
                     requested_broker_id (the node the client asked for), broker_id (the node
                     that answered), commit_flag, suggest_which_broker_id, status (FOUND |
                     NO_NEW_MSG | NO_MATCHED_MSG | OFFSET_ILLEGAL), next_begin_offset,
                     sent_mono_ms (when the request left; the line is written at the answer)
    pull-suggestion  broker, whenever its suggestion for (group, topic, queue) changes:
                     answering_broker_id, suggest_which_broker_id, backlog_bytes,
                     memory_budget_bytes, queue_offset, store_status
    offset-commit    client: group, client_id, topic, broker_name, queue_id, offset,
                     target_broker_id (or broker_id), ok, decided_mono_ms (when it was
                     decided and sent; the line is written at the answer); broker: the value it stored, with
                     `source` (client | slave-sync | reset: an operator's reset by time, a
                     deliberate rewind | load: what a starting broker read from disk) and
                     optionally client_id
    lock             client or broker: group, client_id (the holder / requester), topic,
                     broker_name, queue_id, action (requested|granted|denied|renewed|expired|
                     released|lost), lease_end_mono_ms (client: the deadline it believes;
                     broker: the lease it granted)
    offset-reset     client, a reset a push consumer applied (shown, not checked): group,
                     client_id, topic, reset_timestamp_ms, queues as lists of [broker_name,
                     queue_id, offset before, reset offset]
    rebalance        client: group, client_id, topic, before / after / removed as lists of
                     [broker_name, queue_id], reason (`lock-regained`: an orderly queue re-opened
                     after its lock came back; it is in removed and in after)
    route            client, whenever a subscribed topic's route changes (and the route known at
                     start): group, client_id, topic, queues (the route's readable queues as
                     [broker_name, queue_id]), namesrv (the name server that answered). Runs from
                     before it have none: the rebalance check answers unknown for them
    store-error      broker, one per store problem found: kind (torn-tail | cq-truncated |
                     damaged-range | bad-record | replica-refused | recovery-anomaly), file (relative
                     to the store dir, or null), phys_offset, bytes (affected or dropped), topic,
                     queue_id, queue_offset (null when not known), detail (one sentence)
    store-recovered  broker, once per start: clean (the last shutdown was clean),
                     commitlog_max_phys_offset, truncated_bytes, damaged_ranges, cq_units_dropped
    consumer-start / consumer-stopping / consumer-stop
                     client (the consumer process): group, client_id; `consumer-stopping` is
                     written when a graceful stop begins, before the client unregisters
    queue-resumed    client (Apache's C++ client, read from its own log): group, client_id, topic,
                     broker_name, queue_id, queue_offset (the offset it resumed at): a queue given
                     back to the client while its dropped pull request was still in the client's
                     table; the client consumes what that request had cached before the drop again
    ha-connected / ha-refused, consumer-join / consumer-leave: shown, not checked

`nemesis.jsonl` (harness), `event` = `nemesis`: `op` (kill|stop|pause|resume|partition|heal|
restart), `phase` (start|end: the harness action's invocation and completion), `targets`
(node ids), `detail` (text or JSON), optional `fault_id`. A fault window opens at a fault op's
start and closes at the end of its recovery: kill|stop → restart, pause → resume,
partition → heal (an untargeted heal heals every partition); `stop` is a graceful SIGTERM.
Unrecovered faults last to the end of the history. Storage faults: `power-loss` on a broker
(SIGKILL, then every byte after the last fsync dropped and a torn record left at the tail; recovered
by `restart`, a window like a kill's) whose end line's `detail` is JSON {"store": {"commitlog":
{"flushed_phys_offset", "written_phys_offset", "torn_bytes"}, "consume_queues": {"<topic>/<queue_id>":
{"flushed_queue_offset", "written_queue_offset"}}}, "flush_disk_type"}; `corrupt` (instant, no
recovery: bytes flipped inside a record of a sealed segment) whose end `detail` is JSON {"file",
"phys_offset", "bytes", "topic", "queue_id", "queue_offset", "msg_ids"}.

`processes.jsonl` (harness), `event` = `exit` (or `start`): `node` is the process that
exited, `expected` BOOLEAN, `exit_code` INT, optional `signal`, `pid`.

`readback/readback.jsonl` (the runner's end-of-run read-back, after the drain): per replica
(`node` = the broker node id) `event` = `readback`, one line per message read back: broker_name,
replica_id INT, topic, queue_id, queue_offset, msg_id, body_crc32; and one `replica-state` line:
broker_name, replica_id, max_phys_offset, master_max_phys_offset, caught_up BOOLEAN. Its times
do not extend the history's span.

`links/requests.jsonl` (the harness's link proxies, `node` = `links`; absent for runs before it):
one `request` line per entry of a request that matters as it passed a consumer's link to a broker,
and one `answer` line per entry when its answer passed back: link, src, dst, conn, protocol
(remoting|grpc), kind (offset-commit|lock|unlock|heartbeat|unregister|ack|change-invisible|
forward-dlq|client-termination), code (remoting) or method (gRPC), request_id (opaque / stream id),
entry, the request's fields (group, client_id, topic, broker_name, queue_id, offset, commit_seq;
message_id, receipt_handle and its fields handle_group, queue_topic, queue_offset, generation;
invisible_ms), and on answers sent_mono_ms, answered_mono_ms, response_code, grpc_status, status,
ok, locked (lock entries), remark.

Optional run-level files: `<run_dir>/bounds.json` (the bounds the run was planned with,
`chaos.bounds`; the checker judges with them), `<run_dir>/timing.json` (the run's Timing, field ->
ms; else a node's `config.json` "timing"; used when bounds.json is absent), each broker's
`<node>/config.json` (`store.flush_disk_type`, `broker_role`: the run's durability mode),
`<run_dir>/run.json` (`suite`, `seed`, `checker`: overrides of
CheckerConfig fields), `<run_dir>/cluster.json` (node roles).
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

_COMMON: list[tuple[str, DataType]] = [
    ("node", StringType()),
    ("wall_ms", LongType()),
    ("mono_ms", LongType()),
    ("event", StringType()),
]


def _schema(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, dtype, nullable=True) for name, dtype in (*_COMMON, *fields)])


_QUEUE_LIST = ArrayType(ArrayType(StringType()))

SENDS = _schema(
    ("type", StringType()),
    ("op_id", StringType()),
    ("msg_id", StringType()),
    ("topic", StringType()),
    ("sharding_key", StringType()),
    ("seq", LongType()),
    ("status", StringType()),
    ("queue_id", IntegerType()),
    ("queue_offset", LongType()),
    ("broker_name", StringType()),
    ("body_crc32", LongType()),
    ("attempts", IntegerType()),  # optional: the producer's attempts for this send (coverage only)
)

DELIVERIES = _schema(
    ("group", StringType()),
    ("client_id", StringType()),
    ("msg_id", StringType()),
    ("topic", StringType()),
    ("broker_name", StringType()),
    ("queue_id", IntegerType()),
    ("queue_offset", LongType()),
    ("reconsume_times", IntegerType()),
    ("sharding_key", StringType()),
    ("seq", LongType()),
    ("result", StringType()),
    ("orderly", BooleanType()),
    ("consume_start_mono_ms", LongType()),
    ("consume_end_mono_ms", LongType()),
    ("body_crc32", LongType()),
    # a POP consumer's: the queue the message was popped from (the topic's own, or the group's pop
    # retry topic) and the delivery attempt
    ("queue_topic", StringType()),
    ("delivery_attempt", IntegerType()),
)

EVENTS = _schema(
    ("side", StringType()),
    ("group", StringType()),
    ("client_id", StringType()),
    ("topic", StringType()),
    ("broker_name", StringType()),
    ("queue_id", IntegerType()),
    ("queue", StringType()),
    # pull-route
    ("requested_broker_id", IntegerType()),
    ("broker_id", IntegerType()),
    ("commit_flag", BooleanType()),
    ("suggest_which_broker_id", IntegerType()),
    ("queue_offset", LongType()),
    ("next_begin_offset", LongType()),
    ("sent_mono_ms", LongType()),
    ("status", StringType()),
    # pull-suggestion
    ("answering_broker_id", IntegerType()),
    ("backlog_bytes", LongType()),
    ("memory_budget_bytes", LongType()),
    ("store_status", StringType()),
    # offset-commit
    ("offset", LongType()),
    ("target_broker_id", IntegerType()),
    ("ok", BooleanType()),
    ("decided_mono_ms", LongType()),
    ("source", StringType()),
    ("error", StringType()),
    # offset-reset (client)
    ("reset_timestamp_ms", LongType()),
    # lock
    ("action", StringType()),
    ("lease_end_mono_ms", LongType()),
    # rebalance
    ("before", _QUEUE_LIST),
    ("after", _QUEUE_LIST),
    ("removed", _QUEUE_LIST),
    ("reason", StringType()),
    # consumer-ids (also rebalance: the group's members the client allocated over)
    ("cids", ArrayType(StringType())),
    # route
    ("queues", _QUEUE_LIST),
    ("namesrv", StringType()),
    # ha-connected / ha-refused
    ("master", StringType()),
    ("refusal", StringType()),
    # store-error / store-recovered
    ("kind", StringType()),
    ("file", StringType()),
    ("phys_offset", LongType()),
    ("bytes", LongType()),
    ("detail", StringType()),
    ("clean", BooleanType()),
    ("commitlog_max_phys_offset", LongType()),
    ("truncated_bytes", LongType()),
    ("damaged_ranges", IntegerType()),
    ("cq_units_dropped", LongType()),
    # disk-guard (state on|off) and clock (rate): counted by the coverage table only
    ("state", StringType()),
    ("rate", DoubleType()),
    # pop, pop-ack, pop-change-invisible, pop-revive, pop-dlq (a broker's POP hand-outs), client-ack
    # (a RocketMQ 5 SimpleConsumer's ack and its answer)
    ("msg_id", StringType()),
    ("queue_topic", StringType()),
    ("deadline_wall_ms", LongType()),
    ("generation", LongType()),
    ("new_generation", LongType()),
    ("handle_generation", LongType()),
    ("handle_deadline_wall_ms", LongType()),
    ("attempt", IntegerType()),
    ("fifo", BooleanType()),
    ("repeat", BooleanType()),
    ("in_place", BooleanType()),
    ("lost", BooleanType()),
    ("attempt_id", StringType()),
    ("pop_wall_ms", LongType()),
    ("invisible_ms", LongType()),
)

NEMESIS = _schema(
    ("op", StringType()),
    ("phase", StringType()),
    ("targets", ArrayType(StringType())),
    ("detail", StringType()),
    ("fault_id", StringType()),
)

PROCESSES = _schema(
    ("expected", BooleanType()),
    ("exit_code", IntegerType()),
    ("signal", StringType()),
    ("pid", LongType()),
)

READBACK = _schema(
    ("broker_name", StringType()),
    ("replica_id", IntegerType()),
    ("topic", StringType()),
    ("queue_id", IntegerType()),
    ("queue_offset", LongType()),
    ("msg_id", StringType()),
    ("body_crc32", LongType()),
    ("max_phys_offset", LongType()),
    ("master_max_phys_offset", LongType()),
    ("caught_up", BooleanType()),
)

# the link proxies' request journal (harness.request_journal): `links/requests.jsonl`
REQUESTS = _schema(
    ("link", StringType()),
    ("src", StringType()),
    ("dst", StringType()),
    ("conn", IntegerType()),
    ("protocol", StringType()),
    ("kind", StringType()),
    ("code", IntegerType()),
    ("method", StringType()),
    ("request_id", LongType()),
    ("entry", IntegerType()),
    ("oneway", BooleanType()),
    ("group", StringType()),
    ("client_id", StringType()),
    ("topic", StringType()),
    ("broker_name", StringType()),
    ("queue_id", IntegerType()),
    ("offset", LongType()),
    ("commit_seq", LongType()),
    ("message_id", StringType()),
    ("receipt_handle", StringType()),
    ("handle_group", StringType()),
    ("queue_topic", StringType()),
    ("queue_offset", LongType()),
    ("generation", LongType()),
    ("invisible_ms", LongType()),
    ("sent_mono_ms", LongType()),
    ("answered_mono_ms", LongType()),
    ("response_code", IntegerType()),
    ("grpc_status", IntegerType()),
    ("grpc_message", StringType()),
    ("status", StringType()),
    ("ok", BooleanType()),
    ("locked", BooleanType()),
    ("remark", StringType()),
)

# history kind -> (file stem, schema); `<stem>.jsonl` and `<stem>.parquet` are read
KINDS: dict[str, tuple[str, StructType]] = {
    "sends": ("sends", SENDS),
    "deliveries": ("deliveries", DELIVERIES),
    "events": ("events", EVENTS),
    "nemesis": ("nemesis", NEMESIS),
    "processes": ("processes", PROCESSES),
    "readback": ("readback", READBACK),
    "requests": ("requests", REQUESTS),
}
# kinds written after the run proper: they do not stretch the history's time span
AFTER_RUN_KINDS = ("readback",)

# send statuses that mean "stored" (RocketMQ stores the message in all four)
ACKED_STATUSES = ("SEND_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE")
# listener answers that consume a message (concurrent and orderly)
SUCCESS_RESULTS = ("CONSUME_SUCCESS", "SUCCESS", "COMMIT")
LOCK_HELD_ACTIONS = ("granted", "renewed")
LOCK_GONE_ACTIONS = ("expired", "released", "lost", "denied")
# the POP lines (a master's pop* events, a SimpleConsumer's client-ack) and the fields the POP checks read
POP_EVENTS = ("pop", "pop-ack", "pop-change-invisible", "pop-revive", "pop-dlq")
CLIENT_ACK = "client-ack"
POP_LINE_COLUMNS = ("event", "node", "mono_ms", "wall_ms", "group", "topic", "broker_name", "queue_topic", "queue_id",
                    "queue_offset", "generation", "new_generation", "handle_generation", "handle_deadline_wall_ms",
                    "deadline_wall_ms", "msg_id", "attempt", "fifo", "repeat", "in_place", "lost", "status", "reason",
                    "client_id", "pop_wall_ms", "attempt_id", "sent_mono_ms")
