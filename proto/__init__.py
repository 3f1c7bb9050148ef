"""Generated gRPC code: edit the *.proto files and run scripts/gen_proto.py; never edit *_pb2*.py."""
