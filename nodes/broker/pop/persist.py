"""Writing POP state changes to the store's LMDB, in order, several callers per transaction.

A pop answers only after its offsets and in-flight entries are on disk: a broker killed right
after answering still knows what it handed out, so it neither hands the messages out again at
once nor forgets to revive them. Callers on the event loop hand their `Delta` to `commit` and
await it; while one transaction is being written the next deltas gather and go in the
following one, merged in the order they were made (a group commit: one fsync for many pops).
"""

from __future__ import annotations

import asyncio
import logging

from nodes.broker.pop.state import Delta
from nodes.store.metadata import MetadataStore

log = logging.getLogger(__name__)


class StateWriter:
    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata
        self._pending: list[tuple[Delta, asyncio.Future[None]]] = []
        self._writing = False
        self._task: asyncio.Task[None] | None = None
        self.transactions = 0

    async def commit(self, delta: Delta) -> None:
        """Raises:
            StoreError: the metadata write failed (a full disk); the delta is not on disk.
        """
        if not delta:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((delta, future))
        if not self._writing:
            self._writing = True
            self._task = asyncio.create_task(self._drain(), name="pop-state-write")
        await future

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                merged = Delta()
                for delta, _ in batch:
                    merged.merge(delta)
                try:
                    await asyncio.to_thread(self._metadata.write_batch, merged.puts,
                                            {t: sorted(keys) for t, keys in merged.deletes.items()})
                except Exception as exc:  # every waiter learns it; the next batch tries again
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                self.transactions += 1
                for _, future in batch:
                    if not future.done():
                        future.set_result(None)
        finally:
            self._writing = False
