"""Record checks on replicated commitlog bytes, and the store-error events they raise.

Owns: walking a chunk of raw commitlog bytes record by record (every check a recovery applies:
magic, size inside its segment, the record's own PHYSICALOFFSET, CRC; a blank marker must end
its segment), so that neither a master nor a slave ever passes on bytes past a bad record, and
the `store-error` lines (kind bad-record, replica-refused) replication writes to the broker's
event log, at most one bad-record line per phys offset per process.

`check_chunk` and `whole_records_bytes` run their compiled walks (`nodes.store._record_check`,
built by the install when a C compiler is there) and otherwise the Python walks
`check_chunk_python` and `whole_records_bytes_python`, which are the reference: both give the
same results (a ChunkCheck's records and reason texts included), and the unit tests run both.
`MQLAB_PURE_PYTHON_CHECK=1` in the environment (read at import) forces the Python walks.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nodes.common import constants as c
from nodes.common.compiled_twin import load_twin
from nodes.store.mapped_file import segment_name
from nodes.store.record import (
    HEADER,
    RECORD_BYTES_MIN,
    SIZE_AND_MAGIC,
    CheckedRecord,
    compiled_rules_layout,
    index_fields,
    peek_size_and_magic,
)

StoreEvent = Callable[[dict[str, Any]], None]
ReportBad = Callable[..., None]  # (phys_offset, size_bytes, detail, *, queue_id, queue_offset)


@dataclass(frozen=True, slots=True)
class ChunkCheck:
    """How much of a chunk holds whole records that pass every check."""

    valid_bytes: int
    bad_phys_offset: int | None = None  # the first bytes that failed a check
    reason: str = ""
    needed_bytes: int = 0  # > 0: the chunk ends inside a record (or blank) this long, read more
    # what the walk read of each record in the valid bytes, so a slave's dispatch needs no second pass
    records: list[CheckedRecord] = field(default_factory=list, compare=False, repr=False)


PURE_PYTHON_ENV = "MQLAB_PURE_PYTHON_CHECK"  # "1": check with the Python walk even when compiled

# (data, phys_offset, segment_bytes) -> (valid_bytes, bad_phys_offset, reason, needed_bytes, records)
CompiledCheck = Callable[[Any, int, int], tuple[int, int | None, str, int, list[CheckedRecord]]]


def _record_check_module() -> Any:
    """nodes.store._record_check, initialised with the record layout and constants.

    Raises:
        ImportError: the extension was not built (no C compiler when the project was installed).
        ValueError: the extension was written for another record layout than record.HEADER.
    """
    # by its full name, as pull_decode loads its decoder: a missing module says "No module named ..."
    _record_check = importlib.import_module("nodes.store._record_check")
    # the C side reads the header at fixed positions and refuses a layout it was not written for
    _record_check.init(*compiled_rules_layout())
    return _record_check


def compiled_checker() -> CompiledCheck:
    """The compiled walk, initialised with the record layout and constants (whatever the
    environment says). It takes any contiguous buffer, a segment size > 0 and a phys offset
    that keeps `phys_offset + len(data)` within 64 bits, and raises otherwise.

    Raises:
        ImportError: the extension was not built (no C compiler when the project was installed).
        ValueError: the extension was written for another record layout than record.HEADER.
    """
    return _record_check_module().check_chunk


def compiled_framing_walk() -> Callable[[Any], int]:
    """The compiled `whole_records_bytes`, initialised as `compiled_checker` is: `(data)`, any
    bytes-like data (anything else raises TypeError).

    Raises:
        ImportError: the extension was not built.
        ValueError: the extension was written for another record layout than record.HEADER.
    """
    return _record_check_module().whole_records_bytes


check_chunk_compiled, CHECKER = load_twin(compiled_checker, "check", PURE_PYTHON_ENV)
whole_records_bytes_compiled, FRAMING_WALK = load_twin(compiled_framing_walk, "framing walk", PURE_PYTHON_ENV)


def check_chunk(data: bytes, phys_offset: int, segment_bytes: int) -> ChunkCheck:
    """Walk `data` (commitlog bytes starting at `phys_offset`) over whole, valid records (see
    check_chunk_python); the compiled walk when it is built (it raises ValueError for a
    segment size that is not positive, where the Python walk divides by zero)."""
    if check_chunk_compiled is not None:
        return ChunkCheck(*check_chunk_compiled(data, phys_offset, segment_bytes))
    return check_chunk_python(data, phys_offset, segment_bytes)


def check_chunk_python(data: bytes, phys_offset: int, segment_bytes: int) -> ChunkCheck:
    """Walk `data` (commitlog bytes starting at `phys_offset`) over whole, valid records."""
    view = memoryview(data)
    pos, end = 0, len(data)
    records: list[CheckedRecord] = []
    while pos < end:
        at = phys_offset + pos
        segment_end = at - at % segment_bytes + segment_bytes
        if end - pos < c.END_FILE_MIN_BLANK_BYTES:
            return ChunkCheck(pos, needed_bytes=c.END_FILE_MIN_BLANK_BYTES, records=records)
        size, magic = peek_size_and_magic(view, pos)
        if magic == c.BLANK_MAGIC:
            if at + size != segment_end:
                return ChunkCheck(pos, at, f"a blank marker of {size} bytes does not end its segment", records=records)
        elif magic != c.RECORD_MAGIC:
            return ChunkCheck(pos, at, f"no record magic (0x{magic:08x})", records=records)
        elif size < RECORD_BYTES_MIN or at + size > segment_end:
            return ChunkCheck(pos, at, f"a record size of {size} bytes does not fit its segment", records=records)
        if pos + size > end:
            return ChunkCheck(pos, needed_bytes=size, records=records)
        if magic == c.RECORD_MAGIC:
            fields = index_fields(view, pos, pos + size, at)
            if fields is None:
                return ChunkCheck(pos, at, "the record fails its checks (layout, own phys offset or CRC)",
                                  records=records)
            records.append((at, *fields))
        pos += size
    return ChunkCheck(end, records=records)


def whole_records_bytes(data: bytes) -> int:
    """How many bytes of `data` are whole records by their framing alone (size and magic), for
    bytes known to be sound; 0 when the first one is not a whole record (then check_chunk says
    what it is: a blank marker, a longer record, damage). `whole_records_bytes_python`,
    compiled when built."""
    if whole_records_bytes_compiled is not None:
        return whole_records_bytes_compiled(data)
    return whole_records_bytes_python(data)


def whole_records_bytes_python(data: bytes) -> int:
    """`whole_records_bytes` in Python: the reference the compiled walk is tested against."""
    unpack_frame = SIZE_AND_MAGIC.unpack_from
    pos, end = 0, len(data)
    record_magic = c.RECORD_MAGIC
    while end - pos >= SIZE_AND_MAGIC.size:
        size, magic = unpack_frame(data, pos)
        if magic != record_magic or size < RECORD_BYTES_MIN or pos + size > end:
            break
        pos += size
    return pos


def damaged_record_bytes(data: bytes, phys_offset: int, segment_bytes: int) -> int:
    """When `data` starts with one damaged record whose size field still holds and that a valid
    record or blank follows (or that ends its segment): that record's size; else 0 (the bytes
    may be a torn tail or garbage of unknown length, never to be passed on)."""
    if len(data) < c.END_FILE_MIN_BLANK_BYTES:
        return 0
    size, magic = peek_size_and_magic(data, 0)
    segment_end = phys_offset - phys_offset % segment_bytes + segment_bytes
    if magic != c.RECORD_MAGIC or size < RECORD_BYTES_MIN or phys_offset + size > segment_end or size > len(data):
        return 0
    if phys_offset + size == segment_end:
        return size
    after = check_chunk(data[size:], phys_offset + size, segment_bytes)
    return size if after.valid_bytes > 0 else 0


def record_location(data: bytes, pos: int) -> tuple[int | None, int | None]:
    """(queue id, queue offset) a damaged record's header claims, when a header is there at all
    (the fields may be as damaged as the rest; they only help a reader find the record)."""
    if len(data) - pos < HEADER.size or peek_size_and_magic(data, pos)[1] != c.RECORD_MAGIC:
        return None, None
    header = HEADER.unpack_from(data, pos)
    return int(header[3]), int(header[5])


class StoreErrors:
    """Writes `store-error` events; a bad record is reported once per phys offset."""

    def __init__(self, record: StoreEvent, segment_bytes: int, report_bad: ReportBad | None = None) -> None:
        """`report_bad`: the store's own once-per-phys-offset bad-record reporter, so a record a
        pull and replication both trip over is one line (None: this object dedupes alone)."""
        self._record = record
        self._segment_bytes = segment_bytes
        self._bad_seen: set[int] = set()
        self._report_bad = report_bad

    def note(self, event: dict[str, Any]) -> None:
        """Any other replication event (not a store error) into the same log."""
        self._record(event)

    def _file(self, phys_offset: int) -> str:
        return f"commitlog/{segment_name(phys_offset - phys_offset % self._segment_bytes)}"

    def bad_record(self, check: ChunkCheck, data: bytes, data_phys_offset: int, where: str) -> None:
        assert check.bad_phys_offset is not None
        at = check.bad_phys_offset
        if at in self._bad_seen:
            return
        self._bad_seen.add(at)
        queue_id, queue_offset = record_location(data, at - data_phys_offset)
        size_bytes = len(data) - (at - data_phys_offset)
        if self._report_bad is not None:
            self._report_bad(at, size_bytes, f"{where}: {check.reason}", queue_id=queue_id, queue_offset=queue_offset)
            return
        self._record({"event": "store-error", "kind": "bad-record", "file": self._file(at), "phys_offset": at,
                      "bytes": size_bytes, "topic": None, "queue_id": queue_id, "queue_offset": queue_offset,
                      "detail": f"{where}: {check.reason}"})

    def replica_refused(self, phys_offset: int, dropped_bytes: int, detail: str) -> None:
        self._record({"event": "store-error", "kind": "replica-refused", "file": self._file(phys_offset),
                      "phys_offset": phys_offset, "bytes": dropped_bytes, "topic": None, "queue_id": None,
                      "queue_offset": None, "detail": detail})
