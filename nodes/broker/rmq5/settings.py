"""The server's half of a client's settings: what a Telemetry settings answer merges into the
client's own (a producer's body limit and retries, a consumer's long polling, batch, FIFO flag
and redelivery backoff). Values are RocketMQ's defaults unless mqlab's config says otherwise."""

from __future__ import annotations

from dataclasses import dataclass

from nodes.common import constants as c


@dataclass(frozen=True, slots=True)
class ServerSettings:
    # producers: a 0 body limit makes the client refuse every send, so it is always set
    max_body_bytes: int
    validate_message_type: bool = True
    producer_max_attempts: int = c.RMQ5_PRODUCER_MAX_ATTEMPTS
    producer_backoff_initial_ms: int = c.RMQ5_PRODUCER_BACKOFF_INITIAL_MS
    producer_backoff_max_ms: int = c.RMQ5_PRODUCER_BACKOFF_MAX_MS
    producer_backoff_multiplier: float = c.RMQ5_PRODUCER_BACKOFF_MULTIPLIER
    # consumers
    long_polling_timeout_ms: int = c.RMQ5_LONG_POLLING_TIMEOUT_MS
    receive_batch_size: int = c.RMQ5_RECEIVE_BATCH_MAX
    fifo: bool = False
    consumer_max_attempts: int = c.GROUP_RETRY_MAX_TIMES + 1
    consumer_backoff_ms: tuple[int, ...] = c.RMQ5_CONSUMER_BACKOFF_MS
