"""The consumer process's listener: what it answers for each delivery, per `ConsumerConfig`.

Owns the workload rules (ack; fail or raise with a probability; fail chosen keys N times;
sleep per message) and the ack-index answer for a partly failed batch: the messages before
the first failure are acknowledged (`ctx.ack_index`), the rest are sent back. The orderly
listener answers the same rules with SUCCESS, or SUSPEND_CURRENT_QUEUE_A_MOMENT for the whole
call (an orderly listener cannot acknowledge part of a batch), and journals the call's
interval. Every answer is journalled before it is returned. Does not consume or commit
anything itself.
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable

from nodes.client import (
    ConsumeConcurrentlyContext,
    ConsumeConcurrentlyStatus,
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    MessageExt,
)
from nodes.common.clock import SYSTEM_CLOCK, Clock
from nodes.common.config import ConsumerConfig
from nodes.consumer.journal import DeliveryJournal

SUCCESS = ConsumeConcurrentlyStatus.CONSUME_SUCCESS.value
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER.value
EXCEPTION = "EXCEPTION"
ORDERLY_SUCCESS = ConsumeOrderlyStatus.SUCCESS.value
ORDERLY_SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT.value


_NEVER_SET = threading.Event()


def _work(seconds: float) -> None:
    """The listener's simulated work: a timed wait on an Event nobody sets (the monotonic clock,
    which no clock fault moves)."""
    _NEVER_SET.wait(seconds)


class WorkloadError(Exception):
    """Raised by the `raise` workload: the push consumer turns it into RECONSUME_LATER."""


class WorkloadListener:
    """`listener(msgs, ctx)` for `PushConsumer.register_listener`; thread-safe."""

    def __init__(self, config: ConsumerConfig, journal: DeliveryJournal, *,
                 sleep: Callable[[float], None] | None = None) -> None:
        self.config = config
        self.journal = journal
        self._sleep = sleep if sleep is not None else _work
        self._rng = random.Random(config.seed)
        self._fail_keys = frozenset(config.fail_keys)
        self._failures: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.results: Counter[str] = Counter()

    def _decide(self, msg: MessageExt) -> str:
        """The result for one message (caller holds the lock)."""
        workload = self.config.workload
        if workload in ("fail", "raise"):
            if self._rng.random() < self.config.fail_probability:
                return LATER if workload == "fail" else EXCEPTION
            return SUCCESS
        if workload == "fail_keys":
            keys = [k for k in (msg.keys or "").split() if k in self._fail_keys]
            if any(self._failures[k] < self.config.fail_times for k in keys):
                self._failures.update(keys)
                return LATER
        return SUCCESS

    def __call__(self, msgs: list[MessageExt], ctx: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        if self.config.sleep_ms > 0:
            self._sleep(self.config.sleep_ms * len(msgs) / 1000)
        with self._lock:
            decided = [self._decide(m) for m in msgs]
        if EXCEPTION in decided:
            results = [EXCEPTION] * len(msgs)  # the whole call fails
        else:
            first_fail = next((i for i, r in enumerate(decided) if r != SUCCESS), len(msgs))
            results = [SUCCESS if i < first_fail else LATER for i in range(len(msgs))]
        self.journal.record(msgs, ctx.message_queue, results)  # before the answer is acted on
        with self._lock:
            self.results.update(results)
        if results[0] == EXCEPTION:
            raise WorkloadError(f"workload 'raise' failed {len(msgs)} messages of {ctx.message_queue}")
        acked = results.count(SUCCESS)
        if acked == 0:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        if acked < len(msgs):
            ctx.ack_index = acked - 1
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


class OrderlyWorkloadListener(WorkloadListener):
    """`listener(msgs, ctx)` for `PushConsumer.register_orderly_listener`; thread-safe.

    `fail` / `fail_keys` answer SUSPEND_CURRENT_QUEUE_A_MOMENT for the whole call when any
    message fails; `raise` raises (the push consumer suspends the queue too).
    """

    def __init__(self, config: ConsumerConfig, journal: DeliveryJournal, *,
                 sleep: Callable[[float], None] | None = None, clock: Clock = SYSTEM_CLOCK,
                 ctx_start_on_clock: bool = True) -> None:
        """`ctx_start_on_clock`: the context's consume start is on `clock` (not so when the
        consumer runs on a skewed clock and `clock` is the journal's real one)."""
        super().__init__(config, journal, sleep=sleep)
        self._clock = clock
        self._ctx_start_on_clock = ctx_start_on_clock

    def __call__(self, msgs: list[MessageExt], ctx: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:  # type: ignore[override]
        ctx_start_ms = ctx.consume_start_mono_ms if self._ctx_start_on_clock else 0
        start_ms = ctx_start_ms or self._clock.monotonic_ms()
        if self.config.sleep_ms > 0:
            self._sleep(self.config.sleep_ms * len(msgs) / 1000)
        with self._lock:
            decided = [self._decide(m) for m in msgs]
        if EXCEPTION in decided:
            results = [EXCEPTION] * len(msgs)
        elif any(r != SUCCESS for r in decided):
            results = [ORDERLY_SUSPEND] * len(msgs)
        else:
            results = [ORDERLY_SUCCESS] * len(msgs)
        self.journal.record(msgs, ctx.message_queue, results, consume_start_mono_ms=start_ms,
                            consume_end_mono_ms=self._clock.monotonic_ms())
        with self._lock:
            self.results.update(results)
        if results[0] == EXCEPTION:
            raise WorkloadError(f"workload 'raise' failed {len(msgs)} messages of {ctx.message_queue}")
        return ConsumeOrderlyStatus(results[0])
