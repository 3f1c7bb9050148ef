"""The two pull-record decoders for tests: the compiled one and the Python loop it mirrors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from nodes.client import pull_decode
from support.twins import require_compiled

DECODERS = ("compiled", "python")


def compiled_decode() -> Callable[..., list[Any]]:
    """The compiled decoder with decode_messages' keywords; fails (never skips) when it is not built."""
    compiled = require_compiled(pull_decode.compiled_decoder, "record decoder nodes.client._record_decode")

    def decode(records: bytes, *, broker_name: str, min_offset: int, max_offset: int,
               tags: frozenset[str] | None) -> list[Any]:
        return compiled(records, broker_name, min_offset, max_offset, tags)

    return decode


def decoder(name: str) -> Callable[..., list[Any]]:
    """One of DECODERS by name."""
    return compiled_decode() if name == "compiled" else pull_decode.decode_messages_python
