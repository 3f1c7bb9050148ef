import os

import pytest

from nodes.common.errors import DataDirError, StoreError
from nodes.store.mapped_file import MappedFile, MappedFileQueue, segment_name

SIZE = 64 * 1024


def test_mapped_file_is_created_at_full_size_and_appends(tmp_path):
    mapped = MappedFile(tmp_path / segment_name(0), 0, SIZE)
    assert os.path.getsize(mapped.path) == SIZE
    assert mapped.append(b"abc") == 0
    assert mapped.append(b"de") == 3
    assert mapped.read(1, 3) == b"bcd"
    assert (mapped.wrote_position, mapped.remaining_bytes) == (5, SIZE - 5)
    assert mapped.flush() == 5
    with pytest.raises(StoreError):
        mapped.append(bytes(SIZE))
    mapped.close()


def test_mapped_file_refuses_a_file_of_another_size(tmp_path):
    path = tmp_path / segment_name(0)
    path.write_bytes(b"x" * 100)
    with pytest.raises(DataDirError, match="segment size"):
        MappedFile(path, 0, SIZE)


def test_truncate_to_zeroes_the_tail_and_reports_discarded_bytes(tmp_path):
    mapped = MappedFile(tmp_path / segment_name(0), 0, SIZE)
    mapped.append(b"k" * 1000)
    mapped.buffer[40_000:40_010] = b"garbage!!!"  # junk far past the write position
    assert mapped.data_end() == 40_010
    assert mapped.truncate_to(500) == 40_010 - 500
    assert mapped.wrote_position == 500
    assert mapped.read(500, SIZE - 500) == bytes(SIZE - 500)
    assert mapped.read(0, 500) == b"k" * 500
    assert mapped.data_end() == 500
    mapped.close()


def test_find_skips_holes_and_finds_data(tmp_path):
    mapped = MappedFile(tmp_path / segment_name(0), 0, SIZE)
    mapped.buffer[50_000:50_004] = b"MAGI"
    assert mapped.find(b"MAGI", 0, SIZE) == 50_000
    assert mapped.find(b"MAGI", 50_001, SIZE) == -1
    assert mapped.find(b"MAGI", 0, 50_003) == -1
    mapped.close()


def test_queue_rolls_names_and_finds_segments(tmp_path):
    queue = MappedFileQueue(tmp_path / "q", SIZE)
    first = queue.writable_file()
    first.append(b"a" * 10)
    first.mark_full()
    second = queue.writable_file()
    assert second.start_offset == SIZE
    assert sorted(p.name for p in (tmp_path / "q").iterdir()) == ["0" * 20, f"{SIZE:020d}"]
    second.append(b"b" * 3)
    assert (queue.min_offset, queue.max_offset) == (0, SIZE + 3)
    assert queue.find(SIZE - 1) is first and queue.find(SIZE + 5) is second
    assert queue.find(2 * SIZE) is None
    queue.close()

    reloaded = MappedFileQueue(tmp_path / "q", SIZE)
    reloaded.load()
    assert [f.start_offset for f in reloaded.files] == [0, SIZE]
    assert reloaded.truncate_after(SIZE + 1) == 2  # "bb" discarded
    assert reloaded.max_offset == SIZE + 1
    assert reloaded.truncate_after(5) == 5 + 1  # "aaaaa" of the first segment, "b" of the second
    assert [f.start_offset for f in reloaded.files] == [0]
    assert not (tmp_path / "q" / f"{SIZE:020d}").exists()
    reloaded.close()


def test_queue_gaps_are_an_error_unless_allowed(tmp_path):
    directory = tmp_path / "q"
    directory.mkdir()
    for start in (0, 2 * SIZE):
        MappedFile(directory / segment_name(start), start, SIZE).close()
    with pytest.raises(DataDirError, match="missing"):
        MappedFileQueue(directory, SIZE).load()
    tolerant = MappedFileQueue(directory, SIZE, allow_gaps=True)
    tolerant.load()
    assert tolerant.find(SIZE + 1) is None
    assert tolerant.find(2 * SIZE + 1).start_offset == 2 * SIZE
    tolerant.close()


def test_queue_rejects_foreign_files(tmp_path):
    directory = tmp_path / "q"
    directory.mkdir()
    (directory / "notes.txt").write_text("hi")
    with pytest.raises(DataDirError, match="unexpected file"):
        MappedFileQueue(directory, SIZE).load()
