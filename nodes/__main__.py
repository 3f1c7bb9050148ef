"""`python -m nodes <role> --config FILE`: run one cluster node.

Logs go to `<run_dir>/node.log`. When the node serves, exactly one line is printed on
stdout: `READY {"node_id": ..., "role": ..., "addr": ..., "port": ..., "pid": ...}`, plus
`"remoting_addr"` for a node whose RocketMQ remoting listener is bound (name server, broker) and
`"rocketmq5_addr"` for a broker (its RocketMQ 5 gRPC endpoint).
Exit codes: 0 after a clean stop (SIGTERM or Admin.Shutdown), 70 when the node breaks one
of its own invariants, 78 when the config cannot be used.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from nodes.common.allocator import tune_allocator
from nodes.common.clock_control import NodeClocks, node_clocks
from nodes.common.config import load_node_config
from nodes.common.constants import EXIT_CONFIG, EXIT_OK
from nodes.common.errors import ConfigError, DataDirError
from nodes.common.grpc_log import install_peer_gone_filter
from nodes.common.node import crash_node

ROLES = ("namesrv", "broker", "consumer")


class _NodeIdFilter(logging.Filter):
    def __init__(self, node_id: str) -> None:
        super().__init__()
        self.node_id = node_id

    def filter(self, record: logging.LogRecord) -> bool:
        record.node_id = self.node_id
        return True


def _setup_logging(run_dir: Path, node_id: str) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(run_dir / "node.log")
    handler.addFilter(_NodeIdFilter(node_id))
    handler.setFormatter(logging.Formatter("%(asctime)s %(node_id)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(os.environ.get("MQLAB_LOG_LEVEL", "INFO"))
    logging.getLogger("grpc").setLevel(logging.WARNING)
    install_peer_gone_filter()


def _make_app(role: str, config: Any, shutdown_requested: asyncio.Event, clocks: NodeClocks) -> Any:
    if role == "namesrv":
        from nodes.namesrv.app import NamesrvApp

        return NamesrvApp(config, shutdown_requested, clocks.timers, clocks.history)
    if role == "consumer":
        from nodes.consumer.app import ConsumerApp

        return ConsumerApp(config, shutdown_requested, clocks.timers, clocks.history)
    from nodes.broker.controller import BrokerController

    return BrokerController(config, shutdown_requested, clocks.timers, clocks.history)


async def _run(role: str, config: Any) -> int:
    loop = asyncio.get_running_loop()
    shutdown_requested = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, shutdown_requested.set)
    loop.set_exception_handler(lambda _loop, ctx: logging.getLogger("nodes").error(
        "unhandled in event loop: %s", ctx.get("message"), exc_info=ctx.get("exception")))

    clocks = node_clocks(config)
    app = _make_app(role, config, shutdown_requested, clocks)
    if clocks.control is not None:
        clocks.control.set_sink(app.events.record)
        clocks.control.start()
    addr = await app.start()
    port = addr.rpartition(":")[2]
    ready = {"node_id": app.node_id, "role": role, "addr": addr, "port": int(port), "pid": os.getpid()}
    remoting_addr = getattr(app, "remoting_addr", "")  # nodes with a RocketMQ remoting listener
    if remoting_addr:
        ready["remoting_addr"] = remoting_addr
    rocketmq5_addr = getattr(app, "rocketmq5_addr", "")  # brokers: the RocketMQ 5 gRPC endpoint
    if rocketmq5_addr:
        ready["rocketmq5_addr"] = rocketmq5_addr
    print("READY " + json.dumps(ready), flush=True)
    logging.getLogger("nodes").info("READY %s", ready)
    await shutdown_requested.wait()
    logging.getLogger("nodes").info("stopping on request")
    if clocks.control is not None:
        await clocks.control.stop()  # before the app closes the event log it records to
    await app.stop()
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nodes", description="Run one mqlab cluster node.")
    parser.add_argument("role", choices=ROLES)
    parser.add_argument("--config", required=True, type=Path, help="node config JSON written by the harness")
    args = parser.parse_args(argv)
    try:
        role, config = load_node_config(args.config)
        if role != args.role:
            raise ConfigError(f"{args.config} is a {role} config, but the node was started as {args.role}")
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    _setup_logging(Path(config.run_dir), config.node_id)
    logging.getLogger("nodes").info("allocator: %s", tune_allocator())
    try:
        return asyncio.run(_run(role, config))
    except (ConfigError, DataDirError) as exc:
        logging.getLogger("nodes").error("cannot start: %s", exc)
        print(f"cannot start: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return EXIT_OK
    except BaseException as exc:
        crash_node(exc)
        return 70  # not reached


if __name__ == "__main__":
    sys.exit(main())
