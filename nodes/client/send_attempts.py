"""SendAttempts: the state of one send's attempts, sendDefaultImpl's loop without its I/O.

Owns which queue each attempt goes to (the first where the caller says, then round robin, a
retry preferring another broker, or the latency-fault table's choice), how many attempts are
left within the send timeout, which failures are tried again (`retries_send`) and the error a
send that never succeeded reports (indeterminate once any attempt may have been stored).

Does not send: an attempt is made by whoever holds the attempts, the producer's loop coroutine
or, for the first attempt of a synchronous send, the calling thread (`Producer.send`); the
attempts pass from one to the other as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NoReturn

from nodes.client.latency_fault import LatencyFaultTable
from nodes.client.queue_selector import QueueSelector
from nodes.common.clock import Clock, Deadline
from nodes.common.errors import MqError, OutcomeUnknownError, TransportError
from nodes.common.types import MessageQueue

log = logging.getLogger(__name__)


def retries_send(err: MqError, *, asynchronous: bool) -> bool:
    """Whether a failed send attempt is tried again (on another broker), from the error alone.

    sendDefaultImpl retries every failure to get an answer and the broker refusals marked
    `retriable` (TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE, SYSTEM_ERROR, NO_PERMISSION); any other
    refusal is raised at once. sendMessageAsync retries only failures to get an answer, never
    a refusal (`answered`).
    """
    return err.retriable and not (asynchronous and err.answered)


def final_error(err: MqError, maybe_stored: bool, what: str) -> MqError:
    """The error a failed send reports: indeterminate if any attempt may have been stored."""
    if maybe_stored and not err.indeterminate:
        return OutcomeUnknownError(
            f"{what}: an earlier attempt may have been stored, so the outcome is unknown; last error: {err}")
    return err


class SendAttempts:
    """Up to `tries` attempts of one send before `deadline`.

    Args:
        what: the send, for errors and logs.
        first_queue: where the first attempt goes if the publish list still holds it.
        asynchronous: the async path's retry rule (`retries_send`).
        latency_faults: the producer's fault table when sendLatencyFaultEnable is on.
    """

    __slots__ = ("_asynchronous", "_clock", "_first_queue", "_latency_faults", "_selector", "_tries",
                 "began_ms", "deadline", "last_broker", "last_error", "last_queue", "made", "maybe_stored", "what")

    def __init__(self, what: str, tries: int, deadline: Deadline, selector: QueueSelector, clock: Clock, *,
                 first_queue: MessageQueue | None = None, asynchronous: bool = False,
                 latency_faults: LatencyFaultTable | None = None) -> None:
        self.what = what
        self.deadline = deadline
        self._tries = tries
        self._selector = selector
        self._clock = clock
        self._first_queue = first_queue
        self._asynchronous = asynchronous
        self._latency_faults = latency_faults
        self.made = 0
        self.began_ms = 0
        self.last_queue: MessageQueue | None = None
        self.last_broker: str | None = None
        self.last_error: MqError | None = None
        self.maybe_stored = False

    def next_queue(self, queues: Sequence[MessageQueue]) -> MessageQueue | None:
        """The queue of the next attempt, counted as made from now; None when no attempt is left
        (all made, or the send timeout passed)."""
        if self.made >= self._tries or self.deadline.expired():
            return None
        if self.made == 0 and self._first_queue is not None and self._first_queue in queues:
            mq = self._first_queue
        elif self._latency_faults is not None:
            mq = self._selector.select_available(queues, self._latency_faults, self._clock.monotonic_ms())
        else:
            mq = self._selector.select(queues, self.last_broker)
        self.made += 1
        self.last_queue = mq
        self.last_broker = mq.broker_name
        self.began_ms = self._clock.monotonic_ms()
        return mq

    def succeeded(self) -> None:
        """updateFaultItem after an answered attempt (when latency fault is on)."""
        self._note_latency(isolation=False)

    def failed(self, err: MqError) -> None:
        """Record the attempt's failure; raise the send's error at once if it is not tried again.

        Raises:
            MqError: `err` (or, if an earlier attempt may have been stored, OutcomeUnknownError).
        """
        self._note_latency(isolation=True)  # a failure isolates the broker
        if not retries_send(err, asynchronous=self._asynchronous):
            final = final_error(err, self.maybe_stored, self.what)
            if final is err:
                raise err
            raise final from err
        self.last_error = err
        self.maybe_stored = self.maybe_stored or err.indeterminate
        log.warning("%s: attempt %d to %s failed: %s", self.what, self.made, self.last_queue, err)

    def raise_exhausted(self, send_timeout_ms: int) -> NoReturn:
        """Raise the error of a send whose attempts are all made (or whose timeout passed)
        without success."""
        last = self.last_error
        if last is None:
            raise TransportError(f"{self.what}: the {send_timeout_ms} ms send timeout passed before "
                                 "the first attempt; nothing was sent")
        final = final_error(last, self.maybe_stored, self.what)
        if final is last:
            raise last
        raise final from last

    def _note_latency(self, *, isolation: bool) -> None:
        if self._latency_faults is not None and self.last_broker is not None:
            now_ms = self._clock.monotonic_ms()
            self._latency_faults.update(self.last_broker, now_ms - self.began_ms, isolation=isolation, now_ms=now_ms)
