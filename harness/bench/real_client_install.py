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
REPO = Path(__file__).resolve().parents[2]
ONS_MODULES = REPO / "chaos" / "real_clients" / "js" / "node_modules"
# Apache's RocketMQ 5 Python client lives in a venv of its own: its package `rocketmq` is also
# the C++ binding's name in mqlab's venv (the bootstrap makes it from chaos/real_clients/py5)
PY5_VENV = REPO / ".venv-py5"
PY5_DISTRIBUTION = "rocketmq-python-client"
CPP_VERSION = "0.4.4"
ONS_VERSION = "3.12.0"
PY5_VERSION = "5.1.2"
BOOTSTRAP = "./scripts/bootstrap.sh (./scripts/mqlab runs it)"


def client_missing(name: str) -> str | None:
    """Why real client `name` cannot run here (with what to install), None if it can."""
    if name not in REAL_CLIENTS:
        return f"unknown client {name!r}: --clients takes {', '.join(REAL_CLIENTS)}"
    if name == "py5":
        return _py5_missing()
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


def py5_python() -> Path:
    return PY5_VENV / "bin" / "python"


def _py5_missing() -> str | None:
    """The 5.x client's venv and its pinned version, read from the venv's installed metadata
    (no process started: the venv's python cannot import mqlab)."""
    if not py5_python().exists():
        return (f"--clients py5 needs Apache's RocketMQ 5 Python client in {PY5_VENV}, which does not exist: "
                f"run {BOOTSTRAP}")
    paths = [str(p) for p in sorted(PY5_VENV.glob("lib/python*/site-packages"))]
    versions = {dist.version for dist in importlib.metadata.distributions(path=paths)
                if (dist.metadata["Name"] or "").lower() == PY5_DISTRIBUTION}
    if not versions:
        return f"--clients py5: {PY5_DISTRIBUTION} is not installed in {PY5_VENV}: run {BOOTSTRAP}"
    if versions != {PY5_VERSION}:
        return (f"--clients py5: {PY5_DISTRIBUTION} {', '.join(sorted(versions))} is installed in {PY5_VENV}, "
                f"the benchmark pins {PY5_VERSION}: run {BOOTSTRAP}")
    return None
