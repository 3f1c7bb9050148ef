"""Topic and group names as RocketMQ accepts them (Validators, TopicValidator), for every role.

A name a client gives enters the broker and the name server through gRPC and the remoting
listener alike; the transport-free handlers ask here, so both transports refuse the same
names with the same words. Each check returns the problem as a sentence, or None when the
name is fine: callers turn it into their own answer code.

Why a validated name matters beyond tidiness: names are parts of keys (committed offsets,
locks, routes) and of file paths (consume queues), and a system topic is the broker's own
state (delayed messages wait in `SCHEDULE_TOPIC_XXXX`).
"""

from __future__ import annotations

import re

from nodes.common import constants as c

_NAME_RE = re.compile(c.TOPIC_NAME_PATTERN)
_VALID_TOPICS: set[str] = set()  # names already checked: a send checks its topic every time
_VALID_GROUPS: set[str] = set()
_VALID_CACHE_MAX = 4096  # a client inventing names cannot grow the caches without bound


def _name_problem(kind: str, name: object, chars_max: int) -> str | None:
    if not isinstance(name, str) or not name:
        return f"{kind} name is empty"
    if len(name) > chars_max:
        return f"{kind} name is longer than {chars_max} characters: {name[:40]!r}..."
    if not _NAME_RE.match(name):
        return f"{kind} name {name[:80]!r} has characters outside [%|a-zA-Z0-9_-]"
    return None


def topic_problem(topic: str) -> str | None:
    """Why `topic` is not a topic name (Validators#checkTopic: [%|a-zA-Z0-9_-], 1..127), or None."""
    if topic in _VALID_TOPICS:
        return None
    problem = _name_problem("topic", topic, c.TOPIC_NAME_BYTES_MAX)
    if problem is None:
        _remember(_VALID_TOPICS, topic)
    return problem


def group_problem(group: str) -> str | None:
    """Why `group` is not a group name (Validators#checkGroup: [%|a-zA-Z0-9_-], 1..255), or None."""
    if group in _VALID_GROUPS:
        return None
    problem = _name_problem("group", group, c.GROUP_NAME_CHARS_MAX)
    if problem is None:
        _remember(_VALID_GROUPS, group)
    return problem


def is_send_forbidden(topic: str) -> bool:
    """A system topic only the broker writes (TopicValidator#isNotAllowedSendTopic, plus every
    `RMQ_SYS_` topic but the trace topic)."""
    if topic in c.SEND_FORBIDDEN_TOPICS:
        return True
    return topic.upper().startswith(c.SYSTEM_TOPIC_PREFIX) and topic != c.TRACE_TOPIC


def send_topic_problem(topic: str) -> str | None:
    """Why a client may not send to `topic`: a bad name, the auto-create template or a system
    topic; None when it may."""
    problem = topic_problem(topic)
    if problem is not None:
        return problem
    if topic == c.AUTO_CREATE_TOPIC_KEY:
        return f"{topic} is the auto-create template; send elsewhere"
    if is_send_forbidden(topic):
        return f"sending to the system topic {topic} is forbidden"
    return None


def _remember(cache: set[str], name: str) -> None:
    if len(cache) >= _VALID_CACHE_MAX:
        cache.clear()
    cache.add(name)
