"""`consumer.py --mode simple`: receive-and-consume loops over Apache's 5.x SimpleConsumer, with a
client-side ack journal.

Each of `--threads` loops receives up to `--batch` messages with a fixed invisible time (the
client's long poll holds a receive that finds nothing), then for each message in turn: journals
the delivery, sleeps `--sleep-ms`, acks it, and writes the ack's outcome as one `client-ack` line
in events.jsonl once the broker answered (or the call failed). Nothing renews a hand-out: a loop
paused past the invisible time acks handles the broker has let expire, and the broker must refuse
them (INVALID_RECEIPT_HANDLE) and deliver the message again. A failed ack is not retried, as an
application that logs and goes on: the message comes back after its invisible time. A failed
receive is retried after RECEIVE_RETRY_S.

A graceful stop receives nothing new, lets every loop finish and ack the batch it holds (for up to
STOP_DRAIN_S), then the caller shuts the client down: a receive still in its long poll is cut by
the shutdown, and what such a receive hands out after the drain is left to come back after its
invisible time (never journalled: the application never saw it).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from py5_history import Journal, ack_handle_fields, event, mono_ms, msg_id, record

RECEIVE_RETRY_S = 1.0  # as the PushConsumer's own receive retry (REAL_CLIENT_TIMERS_MS W_p)
# the harness SIGKILLs a node 10 s (NODE_STOP_GRACE_MS) after its SIGTERM: the drain ends well
# before, so the shutdown and consumer-stop still come
STOP_DRAIN_S = 6.0


def log(text: str) -> None:
    sys.stderr.write(f"{time.strftime('%H:%M:%S')} {text}\n")
    sys.stderr.flush()


def ack_status(exc: BaseException, code_name: Callable[[int], str]) -> str:
    """The status of a failed ack: the RocketMQ code the broker answered (INVALID_RECEIPT_HANDLE for
    an expired or superseded handle), `grpc-<status>` for a call that failed in transport, else the
    exception's class (the client refused before sending, e.g. IllegalStateException after shutdown)."""
    code = getattr(exc, "code", None)
    if isinstance(code, int) and not isinstance(code, bool):  # ClientException: the answer's Status.code
        try:
            return code_name(code)
        except ValueError:
            return str(code)
    if callable(code):  # grpc.RpcError: code() is its StatusCode
        try:
            return f"grpc-{code().name}"
        except Exception:
            pass
    return type(exc).__name__


class SimpleLoops:
    """`threads` receive-and-consume loops over one started SimpleConsumer."""

    def __init__(self, args: argparse.Namespace, consumer: Any, client_id: str, journal: Journal, events: Journal,
                 stop: threading.Event, code_name: Callable[[int], str]) -> None:
        self._args = args
        self._consumer = consumer
        self._client_id = client_id
        self._journal = journal
        self._events = events
        self._stop = stop
        self._code_name = code_name
        self._invisible_s = args.invisible_ms // 1000  # the client sends whole seconds
        self._gate = threading.Condition()
        self._busy = 0  # loops between a receive's answer and their batch's last ack
        self._closing = False
        self.results: dict[str, int] = {}
        self._threads = [threading.Thread(target=self._loop, name=f"simple-consume-{i}", daemon=True)
                         for i in range(args.threads)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def drain(self) -> None:
        """After `stop`: wait until no loop holds a batch (at most STOP_DRAIN_S), then close the gate
        so that a receive answered later hands nothing to the application."""
        deadline = time.monotonic() + STOP_DRAIN_S
        with self._gate:
            while self._busy and time.monotonic() < deadline:
                self._gate.wait(timeout=max(0.0, deadline - time.monotonic()))
            if self._busy:
                log(f"{self._busy} loops still consuming {STOP_DRAIN_S:g} s after the stop: their acks after the "
                    "shutdown fail")
            self._closing = True

    def join(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            if thread.ident is not None:  # never started when the stop came during the client's startup
                thread.join(timeout=max(0.0, deadline - time.monotonic()))

    def _count(self, key: str) -> None:
        with self._gate:
            self.results[key] = self.results.get(key, 0) + 1

    def _loop(self) -> None:
        args = self._args
        while not self._stop.is_set():
            try:
                batch = self._consumer.receive(args.batch, self._invisible_s)
            except Exception as exc:
                if self._stop.is_set():
                    break
                log(f"receive failed, retrying in {RECEIVE_RETRY_S:g} s: {exc!r}")
                self._stop.wait(RECEIVE_RETRY_S)
                continue
            with self._gate:
                if self._closing:
                    if batch:
                        log(f"{len(batch)} messages received after the stop's drain: not consumed, they come back "
                            "after their invisible time")
                    return
                self._busy += 1
            try:
                for msg in batch:
                    self._consume(msg)
            finally:
                with self._gate:
                    self._busy -= 1
                    self._gate.notify_all()

    def _consume(self, msg: Any) -> None:
        args = self._args
        try:
            self._journal.write([record(args, self._client_id, msg, "CONSUME_SUCCESS")])
        except Exception as exc:  # journalling failed: leave it to come back rather than ack it unseen
            log(f"journal error, message left unacked: {exc!r}")
            return
        self._count("CONSUME_SUCCESS")
        if args.sleep_ms:
            time.sleep(args.sleep_ms / 1000)
        handle = msg.receipt_handle  # the handle the ack sends (the client never changes it here)
        sent_mono_ms = mono_ms()
        status, error = "ok", None
        try:
            self._consumer.ack(msg)
        except Exception as exc:
            status, error = ack_status(exc, self._code_name), f"{type(exc).__name__}: {exc}"
        self._count(f"ack-{status}")
        self._events.write([event(args, "client-ack", group=args.group, client_id=self._client_id,
                                  msg_id=msg_id(msg), **ack_handle_fields(handle), status=status, error=error,
                                  sent_mono_ms=sent_mono_ms)])
