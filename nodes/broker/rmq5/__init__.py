"""RocketMQ 5's MessagingService as plain handlers (no transport): what the official 5.x clients
ask a broker for — routes, assignments, heartbeats, settings, sends — answered over the same
send path and name rules as mqlab's other transports. The gRPC servicer that carries them is
`nodes/broker/transport/rmq5_servicer.py`."""
