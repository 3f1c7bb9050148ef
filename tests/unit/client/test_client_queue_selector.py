"""Queue selection: round robin with broker avoidance, and the sharding-key hash."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodes.client.queue_selector import QueueSelector, java_string_hash, select_by_hash
from nodes.common.types import MessageQueue
from nodes.store.record import tag_hash

A = [MessageQueue("T", "broker-a", i) for i in range(3)]
B = [MessageQueue("T", "broker-b", i) for i in range(2)]


@pytest.mark.parametrize(("text", "expected"), [
    ("", 0),
    ("a", 97),
    ("hello", 99162322),
    ("Aa", 2112),
    ("BB", 2112),  # the classic collision
    ("polygenelubricants", -2147483648),  # hashes to Integer.MIN_VALUE
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # outside the BMP: two UTF-16 surrogates
])
def test_java_string_hash_known_values(text, expected):
    assert java_string_hash(text) == expected


@given(st.text(max_size=40))
def test_java_string_hash_agrees_with_store_tag_hash(text):
    assert java_string_hash(text) == (tag_hash(text) if text else 0)


def test_select_by_hash_uses_str_of_key_and_java_remainder():
    queues = A + B  # 5 queues
    assert select_by_hash(queues, "hello") == queues[99162322 % 5]
    assert select_by_hash(queues, 97) == select_by_hash(queues, "97")
    h = java_string_hash("polygenelubricants")
    assert select_by_hash(queues, "polygenelubricants") == queues[abs(int(math.fmod(h, 5)))]


@given(st.text(max_size=20), st.integers(min_value=1, max_value=64))
def test_select_by_hash_matches_java_abs_of_remainder(key, n):
    queues = [MessageQueue("T", "b", i) for i in range(n)]
    java_rem = int(math.fmod(java_string_hash(key), n))  # Java's % keeps the dividend's sign
    assert select_by_hash(queues, key).queue_id == abs(java_rem)


def test_select_by_hash_refuses_empty_list():
    with pytest.raises(ValueError):
        select_by_hash([], "k")


def test_round_robin_starts_at_random_index_and_walks_the_list():
    start = random.Random(7).getrandbits(31)
    selector = QueueSelector(random.Random(7))
    queues = A + B
    picked = [selector.select(queues) for _ in range(10)]
    assert picked == [queues[(start + k) % 5] for k in range(1, 11)]


def test_round_robin_index_wraps_to_non_negative():
    selector = QueueSelector(random.Random(0))
    selector._index = 0x7FFFFFFF
    assert selector.next_index() == 0
    assert selector.next_index() == 1


def test_retry_prefers_another_broker():
    selector = QueueSelector(random.Random(3))
    queues = A + B
    for _ in range(20):
        assert selector.select(queues, last_broker_name="broker-a").broker_name == "broker-b"
        assert selector.select(queues, last_broker_name="broker-b").broker_name == "broker-a"


def test_retry_with_a_single_broker_falls_back_to_round_robin():
    selector = QueueSelector(random.Random(5))
    seen = {selector.select(A, last_broker_name="broker-a").queue_id for _ in range(9)}
    assert seen == {0, 1, 2}


def test_select_refuses_empty_list():
    with pytest.raises(ValueError):
        QueueSelector().select([])
