"""Fixtures for store tests: small segments so roll-over happens, a fake clock, crash copies."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodes.common.clock import FakeClock
from nodes.common.config import StoreConfig
from nodes.store.message_store import MessageStore
from nodes.store.record import MessageToStore

SEGMENT_BYTES = 64 * 1024
SMALL = StoreConfig(commitlog_segment_bytes=SEGMENT_BYTES, cq_units_per_file=16, message_body_bytes_max=16 * 1024,
                    memory_budget_bytes=1 << 40)


def msg(topic: str = "T", queue_id: int = 0, body: bytes = b"hello", **kwargs) -> MessageToStore:
    return MessageToStore(topic=topic, queue_id=queue_id, body=body, **kwargs)


def crash_copy(store: MessageStore, dest: Path) -> Path:
    """What a SIGKILL leaves behind: the files as they are now (page cache included), abort
    file present, nothing flushed or closed. LMDB's lock file is per process and not copied."""
    shutil.copytree(store.root, dest, ignore=shutil.ignore_patterns("lock.mdb"))
    return dest


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_store(tmp_path: Path, clock: FakeClock) -> Iterator[Callable[..., MessageStore]]:
    """open_store(root=None, config=SMALL, **kwargs) -> an open MessageStore, closed at teardown."""
    opened: list[MessageStore] = []

    def factory(root: Path | None = None, config: StoreConfig = SMALL, **kwargs) -> MessageStore:
        store = MessageStore(root or tmp_path / "store", config, clock=kwargs.pop("clock", clock), **kwargs)
        store.open()
        opened.append(store)
        return store

    yield factory
    for store in opened:
        store.close()


def put_many(store: MessageStore, count: int, *, topic: str = "T", queue_id: int = 0, body_bytes: int = 100,
             tags: str | None = None, clock: FakeClock | None = None) -> list:
    """Put `count` single messages; bodies are distinct so tests can tell them apart."""
    results = []
    for i in range(count):
        properties = {"TAGS": tags} if tags else {}
        body = f"{topic}-{queue_id}-{i}:".encode().ljust(body_bytes, b".")
        result = store.put_messages([msg(topic, queue_id, body, properties=properties)])
        assert result.status.name == "PUT_OK", result
        results += result.appended
        if clock is not None:
            clock.advance_ms(10)
    return results
