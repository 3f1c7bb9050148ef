"""UNIQ_KEY generation: format, uniqueness and the fields in the prefix."""

from __future__ import annotations

import re
import threading
import time

from nodes.client.msg_id import UniqIdGenerator, default_generator, new_uniq_id

HEX32 = re.compile(r"^[0-9A-F]{32}$")


def test_format_is_32_upper_hex_with_ip_pid_salt_prefix():
    gen = UniqIdGenerator(ip="10.1.2.3", pid=0x12345, salt=0xDEADBEEF)
    uid = gen.next_id()
    assert HEX32.match(uid)
    assert uid.startswith("0A010203" + "2345" + "DEADBEEF")


def test_ids_are_unique_and_strictly_increasing_within_a_generator():
    gen = UniqIdGenerator(ip="10.0.0.1", pid=1, salt=1)
    ids = [gen.next_id() for _ in range(50_000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)


def test_ids_taken_in_bulk_continue_the_same_strictly_increasing_sequence():
    gen = UniqIdGenerator(ip="10.0.0.1", pid=1, salt=1)
    ids = [gen.next_id(), *gen.next_ids(1000), gen.next_id(), *gen.next_ids(3)]
    assert len(ids) == 1005 and all(HEX32.match(uid) for uid in ids)
    assert len(set(ids)) == len(ids) and ids == sorted(ids)
    assert gen.next_ids(0) == []


def test_a_bulk_take_across_the_48_bit_wrap_keeps_12_digits_and_wraps_to_zero():
    gen = UniqIdGenerator(ip="10.0.0.1", pid=1, salt=1)
    gen._last = (1 << 48) - 3  # the sequence is two ids short of wrapping (a long-lived client's fate)
    ids = gen.next_ids(4)
    assert all(HEX32.match(uid) for uid in ids)
    assert [uid[20:] for uid in ids] == ["FFFFFFFFFFFE", "FFFFFFFFFFFF", "000000000000", "000000000001"]
    # the next one goes on from the wrap, at least as far as the clock's floor (the ms since the
    # generator was made, << 16), which a loaded machine may have moved past 0 meanwhile
    before_ms = (time.monotonic_ns() - gen._start_ns) // 1_000_000
    following = int(gen.next_id()[20:], 16)
    after_ms = (time.monotonic_ns() - gen._start_ns) // 1_000_000
    assert following in {max(2, ms << 16) for ms in range(before_ms, after_ms + 1)}


def test_ids_unique_across_threads():
    gen = UniqIdGenerator(ip="10.0.0.1", pid=1, salt=1)
    out: list[list[str]] = [[] for _ in range(4)]

    def work(i: int) -> None:
        out[i].extend(gen.next_id() for _ in range(5_000))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_ids = [uid for chunk in out for uid in chunk]
    assert len(set(all_ids)) == 20_000


def test_generators_with_same_ip_and_pid_differ_by_salt():
    a = UniqIdGenerator(ip="10.0.0.1", pid=7)
    b = UniqIdGenerator(ip="10.0.0.1", pid=7)
    assert a.prefix != b.prefix  # random salts: a reused pid does not repeat ids


def test_default_generator_is_shared_and_well_formed(monkeypatch):
    monkeypatch.setattr("nodes.client.msg_id.local_ipv4", lambda: "10.0.0.9")
    monkeypatch.setattr("nodes.client.msg_id._default", None)
    assert default_generator() is default_generator()
    uid = new_uniq_id()
    assert HEX32.match(uid) and uid.startswith("0A000009")
