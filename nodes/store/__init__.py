"""nodes.store: the broker's message store (no networking; see DESIGN §3).

record (commitlog record codec, also used by clients) · mapped_file (segments) · commitlog ·
consume_queue · dispatch (reput) · recovery · checkpoint · metadata (LMDB) · message_store
(the facade the broker uses).
"""
