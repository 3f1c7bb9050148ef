"""The pull's in-place record check against record.check_at, and the memory of checked records."""

from __future__ import annotations

import random

from nodes.store.read_check import CheckedExtents, body_checks, record_checks
from nodes.store.record import MessageToStore, RecordKind, check_at, encode_record


def _record(phys_offset: int = 4096, body: bytes = b"hello body", **props: str) -> bytes:
    msg = MessageToStore("Topic", 3, body, properties={"TAGS": "a", **props})
    return encode_record(msg, queue_offset=7, phys_offset=phys_offset, store_timestamp_ms=1_700_000_000_000)


def _fast(data: bytes, size: int, phys_offset: int) -> bool:
    with memoryview(data) as view:
        return record_checks(view, 0, size, phys_offset)


def _slow(data: bytes, size: int, phys_offset: int) -> bool:
    return check_at(data[:size], 0, base_phys_offset=phys_offset) == (RecordKind.RECORD, size)


def test_fast_check_accepts_good_records():
    for body in (b"", b"x", b"y" * 3000):
        data = _record(body=body, KEYS="k1 k2")
        assert _fast(data, len(data), 4096) and _slow(data, len(data), 4096)


def test_fast_check_is_never_looser_than_check_at():
    rng = random.Random(8)
    data = _record(body=bytes(range(256)) * 2)
    size = len(data)
    cases = [(data, size, 4096), (data, size, 4097), (data, size - 1, 4096), (data + b"\0", size + 1, 4096)]
    for position in range(size):  # every byte flipped once, some bits at random
        damaged = bytearray(data)
        damaged[position] ^= 1 << rng.randrange(8)
        cases.append((bytes(damaged), size, 4096))
    for damaged, claimed_size, phys_offset in cases:
        if _fast(damaged, claimed_size, phys_offset):
            assert _slow(damaged, claimed_size, phys_offset)
    assert sum(_fast(*case) for case in cases) == 1  # only the undamaged record passes


def test_checked_extents_merge_and_answer_for_ranges():
    extents = CheckedExtents(extents_max=10)
    assert extents.around(50) == (False, 0, 1 << 62)
    extents.add(100, 200)
    extents.add(300, 400)
    assert extents.around(150) == (True, 100, 200)
    assert extents.around(250) == (False, 200, 300)
    assert extents.around(50) == (False, 0, 100)
    extents.add(200, 300)  # bridges the two
    assert len(extents) == 1 and extents.around(399) == (True, 100, 400)
    extents.add(50, 120)
    extents.add(390, 500)
    assert len(extents) == 1 and extents.around(60) == (True, 50, 500)


def test_checked_extents_forget_everything_past_their_bound():
    extents = CheckedExtents(extents_max=3)
    for start in range(0, 400, 100):
        extents.add(start, start + 10)
    assert len(extents) == 0 and extents.around(5)[0] is False


def test_the_re_check_catches_every_flip_in_the_body_and_framing():
    data = _record(body=bytes(range(256)) * 2)
    size = len(data)
    body_end = 88 + 512
    guarded = [*range(0, 12), *range(28, 36), *range(84, body_end)]  # size, magic, body CRC, own offset, body
    for position in guarded:
        damaged = bytearray(data)
        damaged[position] ^= 0x10
        with memoryview(bytes(damaged)) as view:
            assert not body_checks(view, 0, size, 4096), position
    with memoryview(data) as view:
        assert body_checks(view, 0, size, 4096) and not body_checks(view, 0, size, 4097)
