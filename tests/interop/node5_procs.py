"""Apache's RocketMQ 5 Node.js client as a child process for the interop tests: its driver
(`chaos/real_clients/node5/driver.js`) speaks the Python 5.x driver's JSON lines, so it runs
under the same `Py5Producer` wrapper; only the command line differs.

A missing node or package fails the test with the command that installs it: a skipped interop
test would count as passing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from interop.rmq5_procs import Py5Producer

REPO = Path(__file__).resolve().parents[2]
NODE5_DIR = REPO / "chaos" / "real_clients" / "node5"
NODE5_DRIVER = NODE5_DIR / "driver.js"
NODE5_PACKAGE = NODE5_DIR / "node_modules" / "rocketmq-client-nodejs" / "package.json"
NODE5_VERSION = "1.0.8"
INSTALL = "./scripts/bootstrap.sh from the repo root (scripts/test runs it too)"


def require_node5_client() -> str:
    """The node executable; fails (never skips) when node or rocketmq-client-nodejs is missing."""
    node = shutil.which("node")
    if node is None:
        pytest.fail(f"no node on PATH for the RocketMQ 5 Node.js client: apt-get install -y nodejs npm, "
                    f"then run {INSTALL}", pytrace=False)
    if not NODE5_PACKAGE.exists():
        pytest.fail(f"rocketmq-client-nodejs is not installed under {NODE5_DIR}: run {INSTALL}, or "
                    f"cd {NODE5_DIR} && npm ci", pytrace=False)
    version = json.loads(NODE5_PACKAGE.read_text())["version"]
    if version != NODE5_VERSION:
        pytest.fail(f"rocketmq-client-nodejs {version} is installed, the tests pin {NODE5_VERSION}: run {INSTALL}",
                    pytrace=False)
    return node


class Node5Client(Py5Producer):
    """One driver process holding one rocketmq-client-nodejs Producer, SimpleConsumer or PushConsumer.

    The client logs to $HOME/logs/rocketmq/rocketmq_client_nodejs.log (HOME: this client's directory),
    which a failure's story shows.
    """

    def _argv(self) -> list[str]:
        return [require_node5_client(), str(NODE5_DRIVER)]
