"""The compiled modules: optional twins of Python code paths, each giving the same results faster.

- nodes/client/_record_decode.c: pulled records to messages (twin of nodes/client/pull_decode.py's
  Python loop).
- nodes/store/_record_check.c: the replicated-chunk record check (twin of
  nodes/broker/ha_check.py's Python walk); links zlib for the record CRC.
- nodes/store/_record_encode.c: a scanned batch body encoded into commitlog records (twin of
  nodes/store/record_batch.py's Python loop); links zlib for the record CRC.
- nodes/store/_batch_body.c: the producer's batch body scanned on the master (_batch_scan.c, twin
  of nodes/store/record_batch.py's Python scan) and encoded on the producer (_batch_encode.c, twin
  of nodes/store/message_batch.py's Python encoder); their entry layout is _batch_entry.h.
- nodes/store/_read_scan.c: the common case of a pull's scan loop (twin of
  nodes/store/read_scan.py's Python walk); links zlib for the CRCs. It shares a record's
  framing-and-CRC rules with _record_check.c (nodes/store/_record_rules.h).

- harness/_wall_shift.c: not a module but the preload library that shifts a node's wall clock
  (harness/clockfault.py); built here only to reuse the compiler run.

Everything else about the project is in pyproject.toml. Every extension is optional: without a
C compiler (or zlib's header) the install still succeeds and the Python code paths run, slower.
"""

from setuptools import Extension, setup

# big-endian field helpers every codec includes (a change rebuilds them all)
BYTE_ORDER = ["nodes/common/_byte_order.h"]
# a commitlog record's header layout, for every codec that reads or writes records
RECORD_LAYOUT = [*BYTE_ORDER, "nodes/common/_record_layout.h"]
# a record's framing-and-CRC rules, shared by the replica check and the read scan
RECORD_RULES = [*RECORD_LAYOUT, "nodes/store/_record_rules.h"]

setup(ext_modules=[
    Extension("nodes.client._record_decode", ["nodes/client/_record_decode.c"], optional=True, depends=RECORD_LAYOUT),
    Extension("nodes.store._record_check", ["nodes/store/_record_check.c"], libraries=["z"], optional=True,
              depends=RECORD_RULES),
    Extension("nodes.store._read_scan", ["nodes/store/_read_scan.c"], libraries=["z"], optional=True,
              depends=RECORD_RULES),
    Extension("nodes.store._record_encode", ["nodes/store/_record_encode.c"], libraries=["z"], optional=True,
              depends=RECORD_LAYOUT),
    Extension("nodes.store._batch_body", ["nodes/store/_batch_body.c", "nodes/store/_batch_scan.c",
                                          "nodes/store/_batch_encode.c"],
              optional=True, depends=[*BYTE_ORDER, "nodes/store/_batch_entry.h"]),
    Extension("harness._wall_shift", ["harness/_wall_shift.c"], libraries=["dl"], optional=True),
])
