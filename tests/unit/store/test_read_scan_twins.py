"""The compiled read scan (nodes.store._read_scan) walks as read_scan.scan_units_python does:
the same units taken, the same stop, the same sizes, runs and newly checked ranges, for
ordinary, damaged, filtered, capped, split and unchecked layouts; and a pull gives the same
answer whichever walk runs under it."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.examples import examples
from support.leaks import assert_no_leaks
from support.twins import require_compiled, run_switched

from nodes.common import constants as c
from nodes.store.consume_queue import CQ_UNIT
from nodes.store.read_scan import PURE_PYTHON_ENV, compiled_scan, scan_units_python
from nodes.store.record import MessageToStore, encode_record

SEG_START = 1 << 20  # the segment's first phys offset


@pytest.fixture(scope="module")
def compiled():
    return require_compiled(compiled_scan, "read scan nodes.store._read_scan")


@dataclass
class Layout:
    segment: bytes  # the mapped segment's bytes (what a memoryview of the mapping shows)
    units: bytes


def _layout(bodies: list[bytes], gaps: list[int], tags: list[int], holes: set[int], damage: dict[int, int],
            bad_units: dict[int, int]) -> Layout:
    """Records back to back (with `gaps` bytes of other queues' data between some), a unit for
    each (a hole where `holes` says), bytes flipped at `damage` positions of the segment, and
    units whose size is off by `bad_units`."""
    segment, units, pos = bytearray(), bytearray(), 0
    for i, body in enumerate(bodies):
        segment += b"\xee" * gaps[i]
        pos = len(segment)
        record = encode_record(MessageToStore("ScanT", 2, body, properties={"TAGS": f"t{tags[i]}"}),
                               queue_offset=i, phys_offset=SEG_START + pos, store_timestamp_ms=1_700_000_000_000)
        segment += record
        if i in holes:
            units += CQ_UNIT.pack(0, c.CQ_HOLE_SIZE_MARK, 0)
        else:
            units += CQ_UNIT.pack(SEG_START + pos, len(record) + bad_units.get(i, 0), tags[i])
    for at, bit in damage.items():
        if segment:
            segment[at % len(segment)] ^= 1 << bit
    return Layout(bytes(segment), bytes(units))


@st.composite
def scans(draw):
    n = draw(st.integers(0, 12))
    bodies = [draw(st.binary(max_size=300)) for _ in range(n)]
    gaps = [draw(st.sampled_from([0, 0, 0, 16])) for _ in range(n)]
    tags = [draw(st.integers(0, 3)) for _ in range(n)]
    holes = set(draw(st.lists(st.integers(0, max(n - 1, 0)), max_size=2))) if n else set()
    damage = draw(st.dictionaries(st.integers(0, 1 << 16), st.integers(0, 7), max_size=2))
    bad_units = draw(st.dictionaries(st.integers(0, max(n - 1, 0)), st.sampled_from([-1, 1, -200]), max_size=1))
    layout = _layout(bodies, gaps, tags, holes, damage, bad_units)
    seg_len = len(layout.segment)
    written = draw(st.integers(0, seg_len)) if draw(st.booleans()) else seg_len
    known_checked = draw(st.booleans())
    known_lo = SEG_START + draw(st.integers(0, max(seg_len // 2, 0)))
    known_lo = SEG_START if draw(st.booleans()) else known_lo
    known_hi = draw(st.sampled_from([1 << 62, SEG_START + seg_len, SEG_START + seg_len // 2]))
    on_disk_below = draw(st.sampled_from([0, SEG_START + seg_len // 2]))
    count_max = draw(st.integers(1, 16))
    bytes_max = draw(st.sampled_from([1 << 20, 1000, 400]))
    tag_hashes = draw(st.none() | st.frozensets(st.integers(0, 3)))
    index = draw(st.integers(0, max(n, 0)))
    run = draw(st.sampled_from([(-1, -1), (0, 0), (5, 40)]))
    already = draw(st.integers(0, 2))  # records taken before this call
    return layout, dict(index=index, seg_written=SEG_START + written, known_checked=known_checked,
                        known_lo=known_lo, known_hi=known_hi, on_disk_below=on_disk_below, count_max=count_max,
                        bytes_max=bytes_max, tag_hashes=tag_hashes, run=run, already=already)


def _call(scan, layout: Layout, args: dict):
    sizes = [100] * args["already"]
    runs: list = []
    newly_checked = [(SEG_START - 10, SEG_START)] if args["already"] else []
    with memoryview(layout.segment) as view:
        step = scan(layout.units, args["index"], view, SEG_START, args["seg_written"], args["known_checked"],
                    args["known_lo"], args["known_hi"], args["on_disk_below"], args["count_max"], args["bytes_max"],
                    100 * args["already"], args["tag_hashes"], sizes, runs, args["run"][0], args["run"][1],
                    newly_checked)
        taken_runs = [(bytes(v[s:e]), s, e) for v, s, e in runs]
        runs.clear()
    return step, sizes, taken_runs, newly_checked


@settings(max_examples=examples(400), deadline=None)
@given(scans())
def test_the_compiled_scan_walks_as_the_python_one(compiled, case):
    layout, args = case
    assert _call(compiled, layout, args) == _call(scan_units_python, layout, args)


def test_an_ordinary_run_is_taken_whole_and_in_one_run(compiled):
    layout = _layout([b"a" * 100, b"b" * 100, b"c" * 100], [0, 0, 0], [1, 1, 1], set(), {}, {})
    args = dict(index=0, seg_written=SEG_START + len(layout.segment), known_checked=False, known_lo=0,
                known_hi=1 << 62, on_disk_below=0, count_max=32, bytes_max=1 << 20, tag_hashes=None, run=(-1, -1),
                already=0)
    for scan in (compiled, scan_units_python):
        step, sizes, runs, newly_checked = _call(scan, layout, args)
        assert step[0] == 3 and step[1] == len(layout.segment) and step[3:] == (0, len(layout.segment))
        assert runs == [] and len(sizes) == 3  # the current run is the caller's to close
        assert newly_checked == [(SEG_START, SEG_START + len(layout.segment))]


def test_a_damaged_record_stops_the_walk_before_it(compiled):
    layout = _layout([b"a" * 100, b"b" * 100, b"c" * 100], [0, 0, 0], [1, 1, 1], set(), {}, {})
    second = CQ_UNIT.unpack_from(layout.units, CQ_UNIT.size)[0] - SEG_START
    damaged = Layout(layout.segment[:second + 120] + b"X" + layout.segment[second + 121:], layout.units)
    args = dict(index=0, seg_written=SEG_START + len(layout.segment), known_checked=True, known_lo=0,
                known_hi=1 << 62, on_disk_below=0, count_max=32, bytes_max=1 << 20, tag_hashes=None, run=(-1, -1),
                already=0)
    for scan in (compiled, scan_units_python):
        step, sizes, _, newly_checked = _call(scan, damaged, args)
        assert step[0] == 1 and len(sizes) == 1 and newly_checked == []


def test_the_compiled_scan_leaks_nothing(compiled):
    layout = _layout([b"x" * 200] * 8, [0, 16] * 4, [1, 2] * 4, set(), {}, {})
    args = dict(index=0, seg_written=SEG_START + len(layout.segment), known_checked=False, known_lo=0,
                known_hi=1 << 62, on_disk_below=0, count_max=32, bytes_max=1 << 20, tag_hashes=frozenset({1, 2}),
                run=(-1, -1), already=0)

    def run(rounds: int) -> None:
        for _ in range(rounds):
            _call(compiled, layout, args)

    assert_no_leaks(run, [layout.segment, layout.units, args["tag_hashes"]])


def test_bad_arguments_raise_instead_of_reading_wild(compiled):
    with memoryview(b"") as view:
        with pytest.raises(TypeError):
            compiled(b"", 0, view, 0, 0, False, 0, 0, 0, 1, 1, 0, [1], [], [], -1, -1, [])  # tag_hashes a list
        with pytest.raises(ValueError):
            compiled(b"", -1, view, 0, 0, False, 0, 0, 0, 1, 1, 0, None, [], [], -1, -1, [])


@pytest.mark.parametrize("switch, expected", [(None, "compiled"), ("1", f"python ({PURE_PYTHON_ENV}=1)")])
def test_the_switch_picks_the_walk(switch, expected):
    assert run_switched(PURE_PYTHON_ENV, switch, "from nodes.store import read_scan; print(read_scan.SCAN)") == [
        expected]


def _pulls(store) -> list[tuple]:
    """Every pull a consumer of queues 0 and 1 would make, twice (a first read checks records in
    full, a re-read their bodies), unfiltered and filtered, as comparable tuples."""
    from nodes.store.record import tag_hash

    answers = []
    for _ in range(2):
        for queue_id in (0, 1):
            for tags in (None, frozenset({tag_hash("a")})):
                offset = 0
                while True:
                    r = store.get_messages("T", queue_id, offset, 7, tags)
                    answers.append((queue_id, tags, offset, r.status, r.next_begin_offset, r.record_data,
                                    tuple(r.record_sizes), r.records_bytes, r.backlog_bytes))
                    if r.next_begin_offset <= offset:
                        break
                    offset = r.next_begin_offset
    return answers


def test_a_store_answers_every_pull_the_same_with_either_walk(open_store, tmp_path, monkeypatch):
    from nodes.store import read_path

    from .conftest import put_many

    store = open_store(tmp_path / "store")
    for round_ in range(6):  # two queues interleaved: runs break where the other queue's records sit
        put_many(store, 9, queue_id=round_ % 2, tags="a" if round_ % 3 else "b", body_bytes=150 + round_)
    damaged_phys_offset = store.queue_unit("T", 0, 4)[0]
    with_compiled = None
    for walk in (read_path.scan_units, scan_units_python):
        monkeypatch.setattr(read_path, "scan_units", walk)
        store.close()
        segment = tmp_path / "store" / "commitlog" / f"{0:020d}"
        data = bytearray(segment.read_bytes())
        data[damaged_phys_offset + 100] ^= 0x40  # a body byte: the check fails, the record is stepped over
        segment.write_bytes(bytes(data))
        store = open_store(tmp_path / "store")
        answers = _pulls(store)
        data[damaged_phys_offset + 100] ^= 0x40
        store.close()
        segment.write_bytes(bytes(data))
        store = open_store(tmp_path / "store")
        if with_compiled is None:
            with_compiled = answers
    assert answers == with_compiled
    assert any(a[3].name == "FOUND" and a[6] for a in answers)
