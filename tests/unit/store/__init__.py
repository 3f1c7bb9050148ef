"""Unit tests of nodes.store: real files under tmp_path, small segments, no sockets."""
