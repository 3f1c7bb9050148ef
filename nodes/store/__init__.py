"""nodes.store: the broker's message store (no networking).

record (commitlog record codec, also used by clients) · mapped_file (segments) · commitlog ·
consume_queue · dispatch (reput) · recovery · checkpoint · metadata (LMDB) · store_files (the
directory's layout, open, flush, close) · write_path (put) · read_path (get, offset queries) ·
read_check (the pull's in-place record check) · message_store (the facade the broker uses).
"""
