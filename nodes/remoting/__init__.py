"""RocketMQ's 4.x remoting protocol: the frame codec and the TCP listener the name server and the
brokers serve it on, beside gRPC. Knows no role: each node brings an adapter over its own handlers."""
