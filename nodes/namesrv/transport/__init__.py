"""The name server's gRPC adapter: the NameServer servicer and its protobuf converters."""
