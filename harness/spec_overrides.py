"""A cluster spec's config overrides: checked against the nodes' config dataclasses (known
settings, their types, the ones the harness owns), nested tables built and merged. Pure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from harness.errors import SpecError
from nodes.common.config import StoreConfig

# Config fields the harness fills in itself; overriding them would break the cluster's wiring.
HARNESS_OWNED: dict[str, str] = {
    "node_id": "it is the node's id",
    "listen_host": "nodes listen on 127.0.0.1",
    "port": "ports are allocated by the harness",
    "remoting_port": "remoting ports are allocated by the harness",
    "rocketmq5_port": "RocketMQ 5 endpoint ports are allocated by the harness",
    "run_dir": "run dirs are laid out by the harness",
    "namesrv_addrs": "they are derived from the namesrv nodes",
    "dial_overrides": "link proxies are set up by the harness",
    "cluster_name": "set cluster_name at the top level of the spec",
    "broker_name": "set broker_name in the node's [[nodes]] entry",
    "broker_id": "set broker_id in the node's [[nodes]] entry",
    "timing": "timing is cluster-wide: put it in the top-level [timing] table",
}
NESTED: dict[str, type] = {"store": StoreConfig}


def check_options(cls: type, options: Mapping[str, Any], where: str) -> None:
    if not isinstance(options, Mapping):
        raise SpecError(f"{where} must be a table of config overrides")
    defaults = {f.name: f for f in fields(cls)}
    for name, value in options.items():
        if name in HARNESS_OWNED and name in defaults:
            raise SpecError(f"{where}: {name!r} cannot be overridden ({HARNESS_OWNED[name]})")
        if name not in defaults:
            raise SpecError(f"{where}: unknown setting {name!r} for a {cls.__name__}; "
                            f"known settings: {', '.join(sorted(set(defaults) - set(HARNESS_OWNED)))}")
        if name in NESTED:
            check_options(NESTED[name], value, f"{where[:-1]}.{name}]")
            continue
        _check_type(cls, name, value, where)


def _check_type(cls: type, name: str, value: Any, where: str) -> None:
    default = getattr(cls(), name)
    ok: bool
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    elif isinstance(default, tuple):
        ok = isinstance(value, list | tuple)
    else:
        ok = isinstance(value, type(default))
    if not ok:
        raise SpecError(f"{where}: {name} must be a {type(default).__name__}, got {value!r}")


def nested_config(name: str, value: Mapping[str, Any]) -> Any:
    return dataclasses.replace(NESTED[name](), **dict(value))


def deep_merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
