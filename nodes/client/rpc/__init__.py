"""The client's RPC layer: the only client code that knows gRPC and the protobuf messages.

    api.ClientApi          every broker and name-server call (RocketMQ's MQClientAPIImpl):
                           plain values in, plain values or project errors out
    api.rpc_error          the one mapping of a gRPC failure to the error tree
    pull_stream.PullStream pipelined pulls over one bidirectional call per broker
    send_wire              a send's request shape and the offsets read back from its answer

Everything above this package (producer, consumers, their services) calls `ClientApi` and
branches on the errors' attributes (`retriable`, `refresh_route`, `indeterminate`).
"""
