#!/usr/bin/env python
"""What the message index costs the store's write path, in CPU µs per message.

    .venv/bin/python scripts/bench_store_index.py [--messages 100000] [--batch 1024] [--profile FILE]

Puts `--messages` records of 1 KiB bodies, each with one key (KEYS) and a client id (UNIQ_KEY)
as a producer sets them, through the store's write path (append, dispatch into the consume
queue, and the message index when on), in batches of `--batch`: once as a producer's batch
body (`put_scanned`, the broker's send_batch path) and once as decoded messages
(`put_messages`, a single send when --batch is 1), each with the index off and on, each in a
fresh store under a temporary directory (sparse segments: no preallocation in the timing).
Prints process CPU µs per message (and wall µs) for every case and the index's share. With
--profile, writes cProfile stats of the index-on scanned case to FILE. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import tempfile
import time
from pathlib import Path

from nodes.common.config import StoreConfig
from nodes.store.message_batch import encode_entry
from nodes.store.message_store import MessageStore
from nodes.store.record import MessageToStore
from nodes.store.record_batch import scan_batch_body

HOSTS = {"born_host": ("10.1.2.3", 5555), "store_host": ("127.0.0.1", 10911)}
BODY = bytes(1024)


def _properties(i: int) -> dict[str, str]:
    return {"KEYS": f"order-{i}", "UNIQ_KEY": f"7F0000010001{i:020X}", "WAIT": "true"}


def run_case(root: Path, *, index: bool, scanned: bool, messages: int, batch: int,
             profile: cProfile.Profile | None = None) -> tuple[float, float]:
    """(CPU µs per message, wall µs per message) of putting `messages` in batches of `batch`."""
    config = StoreConfig(message_index_enable=index, sparse_segments=True)
    store = MessageStore(root, config)
    store.open()
    try:
        calls = []
        for start in range(0, messages, batch):
            count = min(batch, messages - start)
            if scanned:
                blob = b"".join(encode_entry(BODY, 0, _properties(start + i)) for i in range(count))
                calls.append(scan_batch_body(blob, config.message_body_bytes_max))
            else:
                calls.append([MessageToStore(topic="Bench", queue_id=start // batch % 8, body=BODY,
                                             properties=_properties(start + i), **HOSTS) for i in range(count)])
        if profile is not None:
            profile.enable()
        cpu, wall = time.process_time(), time.perf_counter()
        for n, call in enumerate(calls):
            if scanned:
                result = store.put_scanned(call, topic="Bench", queue_id=n % 8, born_timestamp_ms=1, **HOSTS)
            else:
                result = store.put_messages(call)
            if result.status.name != "PUT_OK":
                raise SystemExit(f"put failed: {result.status.name} {result.remark}")
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        if profile is not None:
            profile.disable()
        if index and store.index.describe()["entries"] != 2 * messages:
            raise SystemExit(f"the index holds {store.index.describe()['entries']} entries, not {2 * messages}")
    finally:
        store.close()
    return cpu / messages * 1e6, wall / messages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the fastest counts")
    parser.add_argument("--profile", type=Path, help="cProfile stats of the index-on scanned case")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}, {args.messages} messages of 1 KiB, batch {args.batch}")
    results: dict[tuple[bool, bool], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        for repeat in range(args.repeat):
            for scanned in (True, False):
                for index in (False, True):
                    profile = (cProfile.Profile() if args.profile is not None and index and scanned and repeat == 0
                               else None)
                    root = Path(tmp) / f"{repeat}-{scanned}-{index}"
                    got = run_case(root, index=index, scanned=scanned, messages=args.messages, batch=args.batch,
                                   profile=profile)
                    best = results.get((scanned, index))
                    results[(scanned, index)] = got if best is None or got[0] < best[0] else best
                    if profile is not None:
                        profile.dump_stats(args.profile)
    for scanned in (True, False):
        off, on = results[(scanned, False)], results[(scanned, True)]
        path = "put_scanned (batch body)" if scanned else "put_messages"
        print(f"{path:26} index off {off[0]:6.2f} µs/msg CPU ({off[1]:6.2f} wall)   "
              f"index on {on[0]:6.2f} ({on[1]:6.2f})   index costs {on[0] - off[0]:5.2f} µs/msg")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
