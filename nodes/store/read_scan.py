"""The common case of a pull's scan loop: `scan_units`, compiled when built.

`read_path.StoreReader._scan` hands the run of ordinary units to `scan_units` and keeps every
other case (holes, a segment change, a batch that is full or on disk, a record outside the
known-checked extent it passed, a damaged record, a tag mismatch before the first record) in
its own loop, which takes that one unit by the same rules and calls again. `scan_units_python`
is the reference; `nodes.store._read_scan` (C) walks the same way and the unit tests hold the
two to the same answers. `MQLAB_PURE_PYTHON_READ=1` in the environment (read at import) scans
with the Python walk even when the compiled one is built.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from nodes.common import constants as c
from nodes.common.compiled_twin import load_twin
from nodes.store.consume_queue import CQ_UNIT
from nodes.store.read_check import body_checks, record_checks
from nodes.store.record import RECORD_BYTES_MIN, compiled_rules_layout

PURE_PYTHON_ENV = "MQLAB_PURE_PYTHON_READ"  # "1": scan with the Python walk even when compiled

_UNIT = CQ_UNIT.size
_HOLE_SIZE = c.CQ_HOLE_SIZE_MARK

# (index, records_bytes, last phys offset taken or None, run_start, run_end)
ScanStep = tuple[int, int, int | None, int, int]


def scan_units_python(units: bytes, index: int, view: memoryview, seg_start: int, seg_written: int,
                      known_checked: bool, known_lo: int, known_hi: int, on_disk_below: int, count_max: int,
                      bytes_max: int, records_bytes: int, tag_hashes: frozenset[int] | None, sizes: list[int],
                      runs: list[tuple[memoryview, int, int]], run_start: int, run_end: int,
                      newly_checked: list[tuple[int, int]]) -> ScanStep:
    """Take units from `index` while each is the common case (see the module docstring).

    `view` maps the segment [seg_start, seg_written); [known_lo, known_hi) is all checked
    (`known_checked`) or none of it is. A taken record's size goes to `sizes`, its bytes extend
    the current run [run_start, run_end) of `view` (-1, -1: none) or start a new one, the
    finished run going to `runs` as (view, start, end); a record checked in full goes to
    `newly_checked`. Returns the index of the first unit not taken, the records' bytes so far,
    the phys offset of the last unit taken (None if none) and the current run.
    """
    unit_count = len(units) // _UNIT
    last_phys_offset: int | None = None
    view_bytes = len(view)
    while index < unit_count:
        phys_offset, size, tag_hash = CQ_UNIT.unpack_from(units, index * _UNIT)
        if size == _HOLE_SIZE and phys_offset == 0:
            break
        if sizes and (phys_offset < on_disk_below or len(sizes) >= count_max or records_bytes + size > bytes_max):
            break
        if tag_hashes is not None and tag_hash not in tag_hashes:
            if not sizes:
                break
            last_phys_offset = phys_offset
            index += 1
            continue
        end_phys_offset = phys_offset + size
        if (size < RECORD_BYTES_MIN or phys_offset < seg_start or end_phys_offset > seg_written
                or not known_lo <= phys_offset < known_hi or end_phys_offset - seg_start > view_bytes):
            break
        pos = phys_offset - seg_start
        if known_checked and end_phys_offset <= known_hi:
            if not body_checks(view, pos, size, phys_offset):
                break
        else:
            if not record_checks(view, pos, size, phys_offset):
                break
            if newly_checked and newly_checked[-1][1] == phys_offset:
                newly_checked[-1] = (newly_checked[-1][0], end_phys_offset)
            else:
                newly_checked.append((phys_offset, end_phys_offset))
        if run_start >= 0 and run_end == pos:
            run_end = pos + size
        else:
            if run_start >= 0:
                runs.append((view, run_start, run_end))
            run_start, run_end = pos, pos + size
        sizes.append(size)
        records_bytes += size
        last_phys_offset = phys_offset
        index += 1
    return index, records_bytes, last_phys_offset, run_start, run_end


def compiled_scan() -> Callable[..., ScanStep]:
    """The compiled `scan_units`, initialised with the record layout and constants (whatever
    the environment says).

    Raises:
        ImportError: the extension was not built (no C compiler when the project was installed).
        ValueError: the extension was written for another record or unit layout.
    """
    # by its full name, as the other twins load: a missing module says "No module named ..."
    module: Any = importlib.import_module("nodes.store._read_scan")
    module.init(*compiled_rules_layout(), CQ_UNIT.format, CQ_UNIT.size, _HOLE_SIZE)
    return module.scan_units


scan_units_compiled, SCAN = load_twin(compiled_scan, "read scan", PURE_PYTHON_ENV)
scan_units: Callable[..., ScanStep] = scan_units_compiled or scan_units_python
