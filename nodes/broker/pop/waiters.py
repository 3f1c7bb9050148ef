"""Long-polling pops (RocketMQ PopLongPollingService): pops that found nothing wait here, per
queue topic, until a message arrives for one of their topics, a FIFO queue of theirs becomes
unblocked, or their poll time is over.

The store's arrival listener may call `notify_arrival` from any thread; everything else runs on
the event loop. A pop registers before it awaits and after it looked, with no await in between,
so an arrival is never missed.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable


class PopWaiters:
    def __init__(self) -> None:
        self._by_topic: dict[str, set[asyncio.Future[None]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread_id = 0
        self.woken = 0

    def bind_loop(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread_id = threading.get_ident()

    def count(self) -> int:
        """Waiting pops (one may wait on several topics)."""
        return len(set().union(*self._by_topic.values())) if self._by_topic else 0

    def has_waiters(self, topic: str) -> bool:
        return bool(self._by_topic.get(topic))

    async def wait(self, topics: Iterable[str], timeout_ms: int) -> None:
        """Until a wake-up for one of `topics` or `timeout_ms`, whichever is first."""
        topics = tuple(topics)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for topic in topics:
            self._by_topic.setdefault(topic, set()).add(future)
        try:
            await asyncio.wait_for(future, timeout_ms / 1000.0)
        except TimeoutError:
            pass
        finally:
            for topic in topics:
                waiting = self._by_topic.get(topic)
                if waiting is not None:
                    waiting.discard(future)
                    if not waiting:
                        del self._by_topic[topic]

    def wake(self, topic: str) -> None:
        for future in self._by_topic.pop(topic, ()):
            if not future.done():
                future.set_result(None)
                self.woken += 1

    def notify_arrival(self, topic: str, *_: object) -> None:
        """The store's arrival listener (topic, queue id, max queue offset, tag hash, ...)."""
        if self._loop is None or threading.get_ident() == self._loop_thread_id:
            if topic in self._by_topic:
                self.wake(topic)
        else:
            self._loop.call_soon_threadsafe(self.wake, topic)
