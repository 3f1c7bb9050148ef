"""`mqlab bench pull`: pull throughput against a fresh cluster, as fractions of same-run limits.

    runner     the run: cluster, preload, the case matrix, the client processes
    processes  the child processes (line protocol, stop and reap) and the brokers' CPU per case
    worker     one measured client process (pull, push, send, or a limit's bare gRPC client)
    real_clients  `--clients`: real RocketMQ clients' rows (cpp_worker.py, ons_worker.js, py5_worker.py run them)
    limits     the limits server (bare gRPC, no storage) and the raw mmap scan of the commitlog
    results    the numbers: fractions of the limits, the targets, the JSON shape
    report     rich tables and the PNG plot
    cli        the `mqlab bench` sub-app
"""
