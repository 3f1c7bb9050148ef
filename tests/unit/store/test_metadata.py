import threading

import pytest

from nodes.common.errors import DataDirError, StoreError
from nodes.store.metadata import MetadataStore


def test_round_trip_and_reopen(tmp_path):
    store = MetadataStore(tmp_path / "metadata")
    store.put("topics", "T", {"read_queue_nums": 8, "perm": 6})
    store.put_many("consumer_offsets", {"g@T@0": 10, "g@T@1": 12})
    store.put("delay_offsets", "3", 99)
    store.put("subscription_groups", "g", {"consume_enable": True})
    store.close()

    reopened = MetadataStore(tmp_path / "metadata")
    assert reopened.get_all("topics") == {"T": {"read_queue_nums": 8, "perm": 6}}
    assert reopened.get_all("consumer_offsets") == {"g@T@0": 10, "g@T@1": 12}
    assert reopened.get_all("delay_offsets") == {"3": 99}
    assert reopened.get_all("subscription_groups") == {"g": {"consume_enable": True}}
    reopened.delete("consumer_offsets", "g@T@0")
    reopened.delete("consumer_offsets", "absent")
    assert reopened.get_all("consumer_offsets") == {"g@T@1": 12}
    reopened.close()


def test_replace_all_leaves_exactly_the_new_mapping(tmp_path):
    store = MetadataStore(tmp_path / "metadata")
    store.put_many("topics", {"A": 1, "B": 2})
    store.replace_all("topics", {"B": 3, "C": 4})
    assert store.get_all("topics") == {"B": 3, "C": 4}
    store.replace_all("topics", {})
    assert store.get_all("topics") == {}
    store.close()


def test_calls_from_many_threads_are_serialised_on_one(tmp_path):
    store = MetadataStore(tmp_path / "metadata")

    def writer(n: int) -> None:
        for i in range(20):
            store.put("consumer_offsets", f"g{n}@T@{i}", i)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(store.get_all("consumer_offsets")) == 80
    store.close()


def test_unknown_table_and_closed_store(tmp_path):
    store = MetadataStore(tmp_path / "metadata")
    with pytest.raises(ValueError, match="unknown metadata table"):
        store.get_all("nope")
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        store.put("topics", "T", 1)


def test_unusable_directory_is_a_data_dir_error(tmp_path):
    (tmp_path / "metadata").write_text("not a directory")
    with pytest.raises(DataDirError):
        MetadataStore(tmp_path / "metadata")
