"""mqlab's answer codes as a remoting answer writes them.

`ResponseCode` values are RocketMQ's numbers wherever RocketMQ has the code; the few mqlab-only
codes (1000 and up) mean nothing to a RocketMQ client, so they go out as SYSTEM_ERROR, their
remark naming the mqlab code (what a Java broker answers a malformed request with).
"""

from __future__ import annotations

from nodes.common.codes import ResponseCode
from nodes.remoting.command import RemotingCommand

_MQLAB_ONLY = frozenset(code for code in ResponseCode if code >= ResponseCode.CODE_UNSPECIFIED)


def answer(cmd: RemotingCommand, code: ResponseCode, remark: str = "", ext: dict[str, object] | None = None,
           body: bytes = b"") -> RemotingCommand:
    """`cmd`'s answer with `code` written as a RocketMQ client can read it."""
    if code in _MQLAB_ONLY:
        return cmd.answer(ResponseCode.SYSTEM_ERROR, f"{code.name}: {remark}", ext, body)
    return cmd.answer(int(code), remark or None, ext, body)
