"""Storage faults done to a store directory from outside the broker: what a power loss leaves
(`power_loss`) and a record damaged on disk (`corrupt_sealed_record`). Chaos nemeses and tests
call them; `python -m nodes.store.faults power-loss|corrupt STORE_DIR --seed N` does the same
by hand and prints the JSON.

A SIGKILL loses nothing the process wrote: the page cache keeps it. A power loss also loses the
page cache: every byte written after the last fsync that returned is gone, and the write that
was in flight may have reached the disk in part. `power_loss` reproduces that on the files of a
dead broker, using the positions the store recorded after each fsync (`flushed.json`):

  * commitlog: every byte after the flushed phys offset becomes zero (files keep their size,
    as preallocated segments do), then a torn record sits at the new tail: a plausible header
    (record magic, a size running past what is there) followed by random bytes;
  * consume queues: every unit after the queue's flushed offset becomes zero; files created
    after it are gone; one queue gets a torn unit (a partial, garbled one) at its new tail.

`corrupt_sealed_record` flips bytes inside the body of one record of a sealed segment (any but
the newest), with pwrite, so a running broker's mapping sees the change at once.

Both are deterministic for a seeded `random.Random` and the same files.
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nodes.common import constants as c
from nodes.store.record import (
    HEADER,
    RECORD_BYTES_MIN,
    RecordKind,
    check_at,
    decode_record,
    peek_size_and_magic,
)

_ZERO_CHUNK_BYTES = 1024 * 1024
_UNIT = c.CQ_UNIT_SIZE_BYTES
_TORN_RECORD_BYTES_MAX = 4096  # how much of a torn record reached the disk, at most


def read_flushed(store_dir: Path) -> dict[str, Any]:
    """The store's flushed positions; all zero when it never recorded any."""
    path = Path(store_dir) / c.FLUSHED_POSITIONS_FILE
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {"commitlog": 0, "consume_queues": {}}
    return {"commitlog": int(data.get("commitlog", 0)), "consume_queues": dict(data.get("consume_queues", {}))}


def power_loss(store_dir: Path, rng: random.Random) -> dict[str, Any]:
    """Drop every byte written after the store's last fsync and leave a torn record and a torn
    consume-queue unit at the new tails. The broker owning `store_dir` must be dead.

    Returns {"commitlog": {"flushed_phys_offset", "written_phys_offset", "torn_bytes"},
             "consume_queues": {"<topic>/<queue_id>": {"flushed_queue_offset", "written_queue_offset"}}}.
    """
    store_dir = Path(store_dir)
    flushed = read_flushed(store_dir)
    commitlog = _power_loss_commitlog(store_dir / "commitlog", flushed["commitlog"], rng)
    queues: dict[str, dict[str, int]] = {}
    torn_candidates: list[tuple[Path, int]] = []
    for key, queue_dir in _queue_dirs(store_dir / "consumequeue"):
        flushed_queue_offset = int(flushed["consume_queues"].get(key, 0))
        written, tail_file = _power_loss_queue(queue_dir, flushed_queue_offset)
        queues[key] = {"flushed_queue_offset": flushed_queue_offset, "written_queue_offset": written}
        if tail_file is not None:
            torn_candidates.append((tail_file, flushed_queue_offset * _UNIT))
    if torn_candidates:
        path, byte_offset = rng.choice(torn_candidates)
        _write_torn_unit(path, byte_offset, flushed["commitlog"], rng)
    return {"commitlog": commitlog, "consume_queues": queues}


def corrupt_sealed_record(store_dir: Path, rng: random.Random) -> dict[str, Any] | None:
    """Flip a few bytes inside the body of one valid record of a sealed commitlog segment (safe
    while the broker runs: sealed segments are never written again). None when no sealed
    segment holds a valid record yet.

    Returns {"file", "phys_offset", "bytes", "topic", "queue_id", "queue_offset", "msg_ids"}.
    """
    store_dir = Path(store_dir)
    segments = _segments(store_dir / "commitlog")
    sealed = segments[:-1]
    rng.shuffle(sealed)
    for start, path in sealed:
        with path.open("r+b") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            positions = list(_record_positions(mm, start))
            while positions:
                position = positions.pop(rng.randrange(len(positions)))
                if check_at(mm, position, base_phys_offset=start)[0] is not RecordKind.RECORD:
                    continue  # damaged already: pick another
                record = decode_record(mm, position, check_crc=False)
                if not record.body:
                    continue
                flips = min(len(record.body), rng.randint(1, 4))
                body_positions = sorted(rng.sample(range(len(record.body)), flips))
                for body_position in body_positions:
                    at = position + HEADER.size + body_position
                    os.pwrite(f.fileno(), bytes([mm[at] ^ rng.randint(1, 255)]), at)
                return {"file": f"commitlog/{path.name}", "phys_offset": start + position, "bytes": flips,
                        "topic": record.topic, "queue_id": record.queue_id, "queue_offset": record.queue_offset,
                        "msg_ids": [record.msg_id]}
    return None


# --- commitlog ---------------------------------------------------------------------------------

def _segments(directory: Path) -> list[tuple[int, Path]]:
    if not directory.is_dir():
        return []
    return sorted((int(p.name), p) for p in directory.iterdir()
                  if len(p.name) == c.SEGMENT_NAME_DIGITS and p.name.isdigit())


def _power_loss_commitlog(directory: Path, flushed_phys_offset: int, rng: random.Random) -> dict[str, int]:
    segments = _segments(directory)
    written = _valid_end(segments, flushed_phys_offset)
    torn_size = _record_size_at(segments, flushed_phys_offset) if written > flushed_phys_offset else None
    for start, path in segments:
        size = path.stat().st_size
        if start + size > flushed_phys_offset:
            _zero_from(path, max(0, flushed_phys_offset - start))
    torn_bytes = _write_torn_record(segments, flushed_phys_offset, torn_size, rng)
    return {"flushed_phys_offset": flushed_phys_offset, "written_phys_offset": written, "torn_bytes": torn_bytes}


def _segment_at(segments: list[tuple[int, Path]], phys_offset: int) -> tuple[int, Path, int] | None:
    for start, path in segments:
        size = path.stat().st_size
        if start <= phys_offset < start + size:
            return start, path, size
    return None


def _valid_end(segments: list[tuple[int, Path]], phys_offset: int) -> int:
    """The end of the valid records (and blank markers) from `phys_offset` on: what the page
    cache held."""
    position = phys_offset
    while True:
        found = _segment_at(segments, position)
        if found is None:
            return position
        start, path, _size = found
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            while True:
                kind, size = check_at(mm, position - start, base_phys_offset=start)
                if kind is RecordKind.RECORD:
                    position += size
                elif kind is RecordKind.BLANK:
                    position = start + len(mm)
                    break
                else:
                    return position


def _record_size_at(segments: list[tuple[int, Path]], phys_offset: int) -> int | None:
    found = _segment_at(segments, phys_offset)
    if found is None:
        return None
    start, path, _size = found
    with path.open("rb") as f:
        head = os.pread(f.fileno(), 8, phys_offset - start)
    size, magic = peek_size_and_magic(head, 0) if len(head) == 8 else (0, 0)
    return size if magic == c.RECORD_MAGIC else None


def _write_torn_record(segments: list[tuple[int, Path]], phys_offset: int, size: int | None,
                       rng: random.Random) -> int:
    """Write the start of a record at `phys_offset`: its size (the record that was being
    written, or a made-up one) and magic, then random bytes, ending before the size does."""
    found = _segment_at(segments, phys_offset)
    if found is None:
        return 0
    start, path, segment_size = found
    room = segment_size - (phys_offset - start)
    if room < RECORD_BYTES_MIN + 16:
        return 0
    if size is None or not RECORD_BYTES_MIN < size <= room:
        size = rng.randint(RECORD_BYTES_MIN + 16, min(room, 2 * _TORN_RECORD_BYTES_MAX))
    torn_bytes = rng.randint(12, min(size - 1, _TORN_RECORD_BYTES_MAX))
    # ends in a non-zero byte, so the torn bytes are exactly what a reader finds there
    data = _record_head(size) + rng.randbytes(torn_bytes - 9) + bytes([rng.randint(1, 255)])
    with path.open("r+b") as f:
        os.pwrite(f.fileno(), data, phys_offset - start)
    return torn_bytes


def _record_head(size: int) -> bytes:
    """The first 8 bytes of a record of `size` bytes: its size and the record magic."""
    return size.to_bytes(4, "big", signed=True) + c.RECORD_MAGIC.to_bytes(4, "big")


def _record_positions(mm: mmap.mmap, start: int) -> Iterator[int]:
    """Positions of what look like records in a segment, hopping by their sizes (no CRC)."""
    position = 0
    while position + RECORD_BYTES_MIN <= len(mm):
        size, magic = peek_size_and_magic(mm, position)
        if magic != c.RECORD_MAGIC or not RECORD_BYTES_MIN <= size <= len(mm) - position:
            return
        if HEADER.unpack_from(mm, position)[6] == start + position:
            yield position
        position += size


def _zero_from(path: Path, position: int) -> None:
    """Zero every non-zero byte of `path` from `position` on, keeping the file's size."""
    with path.open("r+b") as f:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        for extent_start, extent_end in _data_extents(fd, position, size):
            at = extent_start
            while at < extent_end:
                stop = min(extent_end, at + _ZERO_CHUNK_BYTES)
                chunk = os.pread(fd, stop - at, at)
                if chunk.count(0) != len(chunk):
                    os.pwrite(fd, bytes(len(chunk)), at)
                at = stop


def _data_extents(fd: int, start: int, end: int) -> list[tuple[int, int]]:
    """The allocated ranges of a sparse file within [start, end) (all of it without SEEK_DATA)."""
    extents = []
    position = start
    try:
        while position < end:
            try:
                data_start = os.lseek(fd, position, os.SEEK_DATA)
            except OSError:
                break  # ENXIO: no data after position
            if data_start >= end:
                break
            data_stop = min(end, os.lseek(fd, data_start, os.SEEK_HOLE))
            extents.append((data_start, data_stop))
            position = data_stop
    except AttributeError:
        return [(start, end)]
    return extents


# --- consume queues ----------------------------------------------------------------------------

def _queue_dirs(root: Path) -> Iterator[tuple[str, Path]]:
    if not root.is_dir():
        return
    for topic_dir in sorted(root.iterdir()):
        if not topic_dir.is_dir():
            continue
        for queue_dir in sorted(topic_dir.iterdir(), key=lambda p: (len(p.name), p.name)):
            if queue_dir.is_dir() and queue_dir.name.isdigit():
                yield f"{topic_dir.name}/{queue_dir.name}", queue_dir


def _power_loss_queue(directory: Path, flushed_queue_offset: int) -> tuple[int, Path | None]:
    """Zero the queue after its flushed offset and delete files that start past it; returns
    (the queue offset the page cache had written to, the file now ending the queue or None)."""
    files = _segments(directory)
    cut = flushed_queue_offset * _UNIT
    written = flushed_queue_offset
    tail_file = None
    for start, path in files:
        size = path.stat().st_size
        if start + size <= cut:
            continue
        written = max(written, (start + _written_units_bytes(path, max(0, cut - start))) // _UNIT)
        if start > cut:
            path.unlink()
        else:
            _zero_from(path, cut - start)
            tail_file = path
    return written, tail_file


def _written_units_bytes(path: Path, position: int) -> int:
    """The position after the last unit written at or after `position` (units are never zero)."""
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        while position + _UNIT <= len(mm) and mm[position:position + _UNIT].count(0) != _UNIT:
            position += _UNIT
    return position


def _write_torn_unit(path: Path, byte_offset: int, flushed_phys_offset: int, rng: random.Random) -> None:
    """A partial unit: a phys offset that could be real, then some random bytes."""
    start = int(path.name)
    phys_offset = rng.randrange(max(1, flushed_phys_offset))
    data = (phys_offset.to_bytes(8, "big") + rng.randbytes(_UNIT - 8))[:rng.randint(9, _UNIT - 1)]
    with path.open("r+b") as f:
        os.pwrite(f.fileno(), data, byte_offset - start)


# --- command line ------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodes.store.faults",
                                     description="Do a storage fault to a store directory and print what was done.")
    parser.add_argument("fault", choices=("power-loss", "corrupt"),
                        help="power-loss: the broker must be stopped; corrupt: safe while it runs")
    parser.add_argument("store_dir", type=Path, help="a broker's store directory (<run dir>/<node>/store)")
    parser.add_argument("--seed", type=int, default=0, help="the same seed does the same thing to the same files")
    args = parser.parse_args(argv)
    if not (args.store_dir / "commitlog").is_dir():
        print(f"{args.store_dir} holds no commitlog/ directory: not a store directory", file=sys.stderr)
        return 2
    rng = random.Random(args.seed)
    if args.fault == "power-loss":
        result: dict[str, Any] | None = power_loss(args.store_dir, rng)
    else:
        result = corrupt_sealed_record(args.store_dir, rng)
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
