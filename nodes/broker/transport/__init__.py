"""The broker's gRPC adapters: servicers that decode protobuf into the handlers' plain
request values and encode their answers, and the broker's outbound gRPC clients."""
