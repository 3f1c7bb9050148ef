"""Which real RocketMQ clients the benchmark pins, and what to install when one is missing.

Shared by the options check (before a run starts) and the workers' commands."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import shutil
import sys
from pathlib import Path

from harness.bench.results import REAL_CLIENTS

# The pinned ali-ons install the bootstrap makes (shared with the chaos runs' real consumers)
ONS_MODULES = Path(__file__).resolve().parents[2] / "chaos" / "real_clients" / "js" / "node_modules"
CPP_VERSION = "0.4.4"
ONS_VERSION = "3.12.0"
BOOTSTRAP = "./scripts/bootstrap.sh (./scripts/mqlab runs it)"


def client_missing(name: str) -> str | None:
    """Why real client `name` cannot run here (with what to install), None if it can."""
    if name not in REAL_CLIENTS:
        return f"unknown client {name!r}: --clients takes {', '.join(REAL_CLIENTS)}"
    if name == "cpp":
        if importlib.util.find_spec("rocketmq") is None:
            return (f"--clients cpp needs Apache's C++ RocketMQ client, not installed in {sys.prefix}: run "
                    f"{BOOTSTRAP}, or {sys.executable} -m pip install rocketmq=={CPP_VERSION}")
        try:
            version = importlib.metadata.version("rocketmq")
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        if version != CPP_VERSION:
            return f"--clients cpp: rocketmq {version} is installed, the benchmark pins {CPP_VERSION}: run {BOOTSTRAP}"
        return None
    if shutil.which("node") is None:
        return f"--clients ons needs node on PATH: apt-get install -y nodejs npm, then run {BOOTSTRAP}"
    package = ONS_MODULES / "ali-ons" / "package.json"
    if not package.exists():
        return (f"--clients ons needs ali-ons {ONS_VERSION} under {ONS_MODULES.parent}: run {BOOTSTRAP}, "
                f"or cd {ONS_MODULES.parent} && npm ci")
    version = json.loads(package.read_text()).get("version")
    if version != ONS_VERSION:
        return f"--clients ons: ali-ons {version} is installed, the benchmark pins {ONS_VERSION}: run {BOOTSTRAP}"
    return None
