"""Everything that runs inside a cluster process: name server, brokers, clients."""
