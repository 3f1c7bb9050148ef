"""`mqlab serve`: the web view, on 127.0.0.1 only.

The socket is bound here before the server starts, so a port in use is one line saying what to
do, `--port 0` takes a free port, and the URL printed is the one that answers.
"""

from __future__ import annotations

import errno
import socket
from pathlib import Path
from typing import Annotated

import typer

from harness import terminal
from harness.run_dir import RUNS_DIR, read_cluster_json
from harness.terminal import CliError, RunDirOpt, cli_command

SERVE_HOST = "127.0.0.1"  # never another interface: the pages show pids, paths and addresses
SERVE_PORT_DEFAULT = 8470


@cli_command
def serve(
    runs: Annotated[Path, typer.Option("--runs", help="Where chaos runs, matrices and `mqlab up` clusters are "
                                       "(default: runs, where they are written by default).")] = RUNS_DIR,
    run_dir: RunDirOpt = None,
    port: Annotated[int, typer.Option("--port", help=f"Port on {SERVE_HOST} (0: any free one).")] = SERVE_PORT_DEFAULT,
) -> None:
    """A live web view of a running cluster (and of chaos runs in progress) and of past runs."""
    if run_dir is not None:
        read_cluster_json(run_dir)  # a wrong --run-dir is one line now, not a page of errors later
    if not 0 <= port <= 65535:
        raise CliError(f"--port must be 0..65535, got {port}")
    sock = _bind(port)
    # the web framework loads only here: other mqlab commands never pay for it
    import uvicorn

    from harness.serve.app import create_app

    app = create_app(runs.absolute(), run_dir.absolute() if run_dir is not None else None)
    url = f"http://{SERVE_HOST}:{sock.getsockname()[1]}/"
    terminal.console.print(f"mqlab serve: [bold]{url}[/] (runs under {runs.absolute()}"
                           + (f"; cluster in {run_dir.absolute()}" if run_dir is not None else "")
                           + "); Ctrl-C stops it", soft_wrap=True)
    terminal.console.file.flush()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


def _bind(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((SERVE_HOST, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise CliError(f"port {port} on {SERVE_HOST} is in use (another `mqlab serve`?): stop it or pass "
                           "--port P (--port 0 takes a free one)") from None
        raise
    sock.listen(128)
    sock.set_inheritable(True)
    return sock
