"""Guards for the repository's own rules."""

import re
from pathlib import Path

import proto

REPO = Path(__file__).resolve().parents[3]


def test_proto_package_is_ours_not_proto_plus():
    # PyPI's proto-plus also installs a top-level `proto`; ours must win.
    assert Path(proto.__file__).resolve().parent == REPO / "proto"


def test_node_code_never_sleeps_on_a_literal():
    # Timers come from Timing so one knob scales them all; clock.py is the only sleeper.
    pattern = re.compile(r"(asyncio|time)\.sleep\(\s*(?!0\s*\))\d")
    offenders = [
        f"{path.relative_to(REPO)}:{n}"
        for path in (REPO / "nodes").rglob("*.py") if path.name != "clock.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not offenders, f"literal sleeps in node code: {offenders}"


def _contract_sources(name_prefix: str) -> set[str]:
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts = [c for c in config["tool"]["importlinter"]["contracts"] if c["name"].startswith(name_prefix)]
    assert len(contracts) == 1, f"expected one import-linter contract named {name_prefix!r}..."
    return set(contracts[0]["source_modules"])


def _modules_under(package_dir: Path, *, leave_out: set[str]) -> set[str]:
    dotted = ".".join(package_dir.relative_to(REPO).parts)
    return {f"{dotted}.{path.stem}" for path in package_dir.glob("*.py")
            if path.stem != "__init__" and path.stem not in leave_out}


def test_every_broker_and_name_server_module_but_the_wiring_is_held_to_no_transport():
    # The contracts list the handling modules one by one (import-linter cannot say "all but
    # transport/"), so a new handling module must be added there or it escapes the rule.
    broker = _modules_under(REPO / "nodes" / "broker", leave_out={"controller"})
    assert broker <= _contract_sources("Broker request handling knows no transport")
    namesrv = _modules_under(REPO / "nodes" / "namesrv", leave_out={"app"})
    assert namesrv <= _contract_sources("Name-server request handling knows no transport")
