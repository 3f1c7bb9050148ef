"""Broker metadata in LMDB: topic configs, subscription groups, consumer offsets, delay
offsets and POP consumption's state, one named sub-DB each, JSON values under string keys.

Owns: the LMDB environment at `<store root>/metadata/` and the one thread every LMDB call
runs on (py-lmdb transactions must stay on the thread that opened them, so the API is
synchronous but each call is executed by a private single-worker executor). Does not know
what the values mean; the broker's managers do.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from nodes.common import constants as c
from nodes.common.errors import DataDirError, StoreError

log = logging.getLogger(__name__)

# pop_*: POP consumption's state (nodes/broker/pop/state.py), written only by a master;
# transactions: the transaction check's cursors and check counts (nodes/broker/transaction.py)
TABLES = ("topics", "subscription_groups", "consumer_offsets", "delay_offsets",
          "pop_offsets", "pop_inflight", "pop_orders", "pop_meta", "transactions")

T = TypeVar("T")


class MetadataStore:
    def __init__(self, directory: Path) -> None:
        """Open (creating) the environment at `directory`.

        Raises:
            DataDirError: LMDB cannot open it (not a directory, no permission, not LMDB).
        """
        self.directory = directory
        self._executor: ThreadPoolExecutor | None = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="store-metadata")
        try:
            self._env, self._dbs = self._call(self._open)
        except (lmdb.Error, OSError) as exc:
            self._shutdown_executor()
            raise DataDirError(f"cannot open the metadata store at {directory}: {exc}; "
                               "check the path and its permissions, or move it aside") from exc

    def _open(self) -> tuple[lmdb.Environment, dict[str, Any]]:
        self.directory.mkdir(parents=True, exist_ok=True)
        env = lmdb.open(str(self.directory), map_size=c.METADATA_MAP_SIZE_BYTES, max_dbs=len(TABLES), sync=True,
                        subdir=True)
        dbs = {table: env.open_db(table.encode()) for table in TABLES}
        return env, dbs

    def _call(self, fn: Callable[[], T]) -> T:
        if self._executor is None:
            raise StoreError(f"the metadata store at {self.directory} is closed")
        return self._executor.submit(fn).result()

    def _write(self, fn: Callable[[], None]) -> None:
        """Run a write transaction; LMDB refusing it (a full disk: MDB_MAP_FULL or ENOSPC from its
        writes) is a StoreError for the caller to answer or retry, never a dead broker.

        Raises:
            StoreError: the write did not happen; the table is as it was.
        """
        try:
            self._call(fn)
        except (lmdb.Error, OSError) as exc:
            raise StoreError(f"metadata write to {self.directory} failed ({exc}); if its disk is full, free "
                             "space there: the write is retried by whoever asked for it") from exc

    def _db(self, table: str) -> Any:
        try:
            return self._dbs[table]
        except KeyError:
            raise ValueError(f"unknown metadata table {table!r}; expected one of {TABLES}") from None

    def get_all(self, table: str) -> dict[str, Any]:
        db = self._db(table)

        def read() -> dict[str, Any]:
            with self._env.begin(db=db) as txn:
                return {key.decode(): json.loads(value) for key, value in txn.cursor()}
        return self._call(read)

    def put(self, table: str, key: str, value: Any) -> None:
        self.put_many(table, {key: value})

    def put_many(self, table: str, mapping: Mapping[str, Any]) -> None:
        db = self._db(table)
        encoded = [(key.encode(), json.dumps(value).encode()) for key, value in mapping.items()]

        def write() -> None:
            with self._env.begin(db=db, write=True) as txn:
                for key, value in encoded:
                    txn.put(key, value)
        self._write(write)

    def replace_all(self, table: str, mapping: Mapping[str, Any]) -> None:
        """Make the table hold exactly `mapping`, in one transaction (a replica's copy)."""
        db = self._db(table)
        encoded = [(key.encode(), json.dumps(value).encode()) for key, value in mapping.items()]

        def write() -> None:
            with self._env.begin(db=db, write=True) as txn:
                txn.drop(db, delete=False)
                for key, value in encoded:
                    txn.put(key, value)
        self._write(write)

    def write_batch(self, puts: Mapping[str, Mapping[str, Any]], deletes: Mapping[str, Iterable[str]]) -> None:
        """Deletes, then puts, over several tables in ONE transaction: all of it lands or none."""
        encoded_deletes = [(self._db(table), [key.encode() for key in keys]) for table, keys in deletes.items()]
        encoded_puts = [(self._db(table), [(key.encode(), json.dumps(value).encode()) for key, value in rows.items()])
                        for table, rows in puts.items()]

        def write() -> None:
            with self._env.begin(write=True) as txn:
                for db, keys in encoded_deletes:
                    for key in keys:
                        txn.delete(key, db=db)
                for db, rows in encoded_puts:
                    for key, value in rows:
                        txn.put(key, value, db=db)
        self._write(write)

    def delete(self, table: str, key: str) -> None:
        db = self._db(table)

        def write() -> None:
            with self._env.begin(db=db, write=True) as txn:
                txn.delete(key.encode())
        self._write(write)

    def close(self) -> None:
        if self._executor is None:
            return
        self._call(self._env.close)
        self._shutdown_executor()

    def _shutdown_executor(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
