"""POP consumption in the broker, as RocketMQ 5 does it: the engine behind a 5.x client's receive,
ack, change-invisible-duration and forward-to-DLQ, free of any transport.

- `engine.PopEngine`: pop / ack / change_invisible / forward_to_dlq (the API a transport
  calls; a departed 5.x client's hand-outs are released by the transport's auto-renew table,
  `nodes.broker.rmq5.renew`, through change_invisible, as RocketMQ's proxy does);
- `revive.PopReviveService`: moves expired, unacknowledged pops to the retry topic or the DLQ;
- `state`: pop offsets, the in-flight table and FIFO batches, persisted in the store's LMDB;
- `handle`: receipt handles; `values`: what the API answers.
"""

from nodes.broker.pop.engine import PopEngine
from nodes.broker.pop.revive import PopReviveService
from nodes.broker.pop.values import (
    AckResult,
    ChangeInvisibleRequest,
    ChangeInvisibleResult,
    PopAckRequest,
    PopCode,
    PoppedMessage,
    PopRequest,
    PopResult,
)
from nodes.common.receipt_handle import ReceiptHandle

__all__ = ["AckResult", "ChangeInvisibleRequest", "ChangeInvisibleResult", "PopAckRequest", "PopCode", "PopEngine",
           "PopRequest", "PopResult", "PopReviveService", "PoppedMessage", "ReceiptHandle"]
