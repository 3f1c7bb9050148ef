"""A stand-in for `python -m nodes`, run by path in the harness's unit tests.

    standin_node.py MODE (--config FILE | --node-id ID --port PORT) [--run-dir DIR]

Modes:
  ready               print READY, sleep; SIGTERM -> exit 0
  grpc                serve Admin (and, as namesrv, a toy NameServer that brokers register
                      with), then READY; a broker registers with its namesrv first
  crash               write to node.log and stderr, exit 70 before READY
  config-error        exit 78 before READY
  silent              never print READY
  exit-after-ready    READY, then exit 70 a moment later
  ignore-term         READY, ignore SIGTERM
  crash-on-term       READY; SIGTERM -> exit 70 (a broken invariant while shutting down)
  bad-port            READY with the wrong port
  bad-remoting        READY announcing a remoting address other than the config's
  grandchild          spawn a sleeping grandchild, then READY
  stray               READY, then 2 MiB of stray stdout, then touch <run_dir>/stray-done
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode")
    parser.add_argument("--config")
    parser.add_argument("--node-id")
    parser.add_argument("--port", type=int)
    parser.add_argument("--run-dir", default=".")
    args = parser.parse_args()
    cfg: dict = {}
    if args.config:
        cfg = json.loads(Path(args.config).read_text())
    node_id = cfg.get("node_id", args.node_id)
    port = int(cfg.get("port", args.port or 0))
    role = cfg.get("role", "broker")
    run_dir = Path(cfg.get("run_dir", args.run_dir))
    run_dir.mkdir(parents=True, exist_ok=True)
    log = (run_dir / "node.log").open("a", buffering=1)
    log.write(f"standin {node_id} mode {args.mode} pid {os.getpid()}\n")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    remoting_port = int(cfg.get("remoting_port", 0))

    def ready(announced_port: int = port, announced_remoting_port: int = remoting_port) -> None:
        line = {"node_id": node_id, "role": role, "addr": f"127.0.0.1:{announced_port}",
                "port": announced_port, "pid": os.getpid()}
        if announced_remoting_port:  # as a real node with a remoting listener announces it
            line["remoting_addr"] = f"127.0.0.1:{announced_remoting_port}"
        print("READY " + json.dumps(line), flush=True)

    mode = args.mode
    if mode == "crash":
        log.write("invariant broken: the stand-in was told to crash\n")
        print("stand-in crashing on purpose", file=sys.stderr, flush=True)
        return 70
    if mode == "config-error":
        print("config error: stand-in config is bad", file=sys.stderr, flush=True)
        return 78
    if mode == "silent":
        stop.wait()
        return 0
    if mode == "bad-port":
        ready(port + 1)
    elif mode == "bad-remoting":
        ready(announced_remoting_port=remoting_port + 1)
    elif mode == "grandchild":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        ready()
    elif mode == "grpc":
        server = _serve_grpc(node_id, role, port, cfg)
        ready()
        stop.wait()
        server.stop(0)
        return 0
    else:
        ready()
    if mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(0.05)
    if mode == "exit-after-ready":
        time.sleep(0.2)
        log.write("giving up: exit 70\n")
        print("stand-in exits 70 after READY", file=sys.stderr, flush=True)
        return 70
    if mode == "stray":
        chunk = "x" * 1023 + "\n"
        for _ in range(2048):
            sys.stdout.write(chunk)
        sys.stdout.flush()
        (run_dir / "stray-done").touch()
    stop.wait()
    if mode == "crash-on-term":
        log.write("shutting down: broken invariant, exit 70\n")
        print("stand-in exits 70 on SIGTERM", file=sys.stderr, flush=True)
        return 70
    return 0


def _serve_grpc(node_id: str, role: str, port: int, cfg: dict):
    from concurrent import futures

    import grpc

    from proto import admin_pb2, admin_pb2_grpc, common_pb2, namesrv_pb2, namesrv_pb2_grpc

    class Admin(admin_pb2_grpc.AdminServicer):
        def Describe(self, request, context):
            return admin_pb2.DescribeResponse(
                node_id=node_id, role=role, state="RUNNING", status_line=f"{node_id} stand-in RUNNING",
                details_json=json.dumps({"standin": True}), pid=os.getpid())

    class NameServer(namesrv_pb2_grpc.NameServerServicer):
        def __init__(self) -> None:
            self.brokers: dict[tuple[str, int], str] = {}
            self.seen: dict[str, int] = {}

        def RegisterBroker(self, request, context):
            self.brokers[(request.broker_name, request.broker_id)] = request.broker_addr
            self.seen[request.broker_addr] = time.time_ns() // 1_000_000
            return namesrv_pb2.RegisterBrokerResponse(code=common_pb2.SUCCESS)

        def GetClusterInfo(self, request, context):
            datas = {}
            for (name, bid), addr in self.brokers.items():
                datas.setdefault(name, namesrv_pb2.BrokerData(cluster="DefaultCluster", broker_name=name))
                datas[name].broker_addrs[bid] = addr
            live = [namesrv_pb2.BrokerLiveInfo(broker_addr=a, last_update_timestamp_ms=t) for a, t in self.seen.items()]
            return namesrv_pb2.GetClusterInfoResponse(code=common_pb2.SUCCESS, brokers=list(datas.values()), live=live)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.so_reuseport", 0)])
    admin_pb2_grpc.add_AdminServicer_to_server(Admin(), server)
    if role == "namesrv":
        namesrv_pb2_grpc.add_NameServerServicer_to_server(NameServer(), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    if role == "broker":
        for addr in cfg.get("namesrv_addrs", []):
            with grpc.insecure_channel(addr) as channel:
                namesrv_pb2_grpc.NameServerStub(channel).RegisterBroker(namesrv_pb2.RegisterBrokerRequest(
                    broker_name=cfg["broker_name"], broker_id=cfg["broker_id"], broker_addr=f"127.0.0.1:{port}",
                    node_id=node_id), timeout=5)
    return server


if __name__ == "__main__":
    sys.exit(main())
