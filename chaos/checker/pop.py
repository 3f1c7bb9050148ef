"""What a broker's POP events (docs/history.md) say about messages consumers never journalled.

A POP hand-out the consumer never got (its receive answer lost to a partition or a paused
process) stays invisible until its deadline; a 5.x PushConsumer's receive asks for auto-renew,
so the broker keeps renewing it for the client while that client lives, up to RocketMQ's
renew limit (3 h), as Apache's proxy does. At the end of a run such a message is neither
consumed nor lost: it is in flight, and comes back once the client goes or the limit passes.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from chaos.checker.loader import History

ENTRY = ("group", "broker_name", "queue_topic", "queue_id", "queue_offset")  # one hand-out's place
_SETTLED = ("pop-revive", "pop-dlq")
_DEADLINES = ("pop", "pop-change-invisible")


def in_flight_at_end(h: History) -> DataFrame:
    """group, msg_id, client_id (the last one it was handed to), renewals, deadline_s_after_end:
    messages handed out by POP and neither acked, revived nor dead-lettered, whose last invisible
    deadline (its renewals' included) lies after the run's last recorded moment."""
    if not h.has("events"):
        return h.spark.createDataFrame([], "group STRING, msg_id STRING, client_id STRING, renewals LONG, "
                                           "deadline_s_after_end DOUBLE")
    ev = h.ev.filter(F.col("event").startswith("pop"))
    pops = ev.filter(F.col("event") == "pop").select(*ENTRY, "msg_id", "client_id", "mono_ms")
    acked = ev.filter((F.col("event") == "pop-ack") & (F.col("status") == "ok")).select(*ENTRY)
    settled = ev.filter(F.col("event").isin(*_SETTLED)).select(*ENTRY)
    # a deadline in the broker's monotonic time, from the same line's wall and monotonic stamps
    deadlines = ev.filter(F.col("event").isin(*_DEADLINES) & F.col("deadline_wall_ms").isNotNull()).groupBy(*ENTRY).agg(
        F.max(F.col("deadline_wall_ms") - F.col("wall_ms") + F.col("mono_ms")).alias("deadline_mono_ms"),
        F.sum(F.when(F.col("event") == "pop-change-invisible", 1).otherwise(0)).alias("renewals"))
    last_pop = pops.groupBy(*ENTRY).agg(F.max_by("msg_id", "mono_ms").alias("msg_id"),
                                        F.max_by("client_id", "mono_ms").alias("client_id"))
    open_ = last_pop.join(acked, list(ENTRY), "left_anti").join(settled, list(ENTRY), "left_anti")
    return (open_.join(deadlines, list(ENTRY)).filter(F.col("deadline_mono_ms") > F.lit(h.t_end))
            .select("group", "msg_id", "client_id", "renewals",
                    F.round((F.col("deadline_mono_ms") - F.lit(h.t_end)) / 1000, 3).alias("deadline_s_after_end")))
