"""Wiring a cluster's node-to-node traffic through link proxies (see `netproxy`).

Every node that dials others (brokers, consumers, in-harness clients) gets `dial_overrides`
mapping each name server's and broker's address to the proxy of its own directed link.
Name servers dial nobody. The harness's Admin calls go direct: the control plane is never
faulted.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.netproxy import LinkMode, NetProxy, complete_grudge, isolate
from harness.toxics import Toxic

log = logging.getLogger(__name__)

DIALED_ROLES = frozenset({"namesrv", "broker"})  # what other processes connect to


class ClusterLinks:
    def __init__(self, rng: random.Random | None = None, journal_path: Path | None = None) -> None:
        self.proxy = NetProxy(rng, journal_path)
        self._members: set[str] = set()

    def overrides_for(self, src: str, peers: Mapping[str, str], journal_to: Iterable[str] = ()) -> dict[str, str]:
        """Create the links `src -> peer` (peer id -> address) and return src's dial overrides; the
        links to the peers of `journal_to` journal their requests (`harness.request_journal`)."""
        journalled = set(journal_to) if self.proxy.journal is not None else set()
        overrides = {}
        existing = set(self.proxy.links())
        for dst, addr in sorted(peers.items()):
            if dst == src:
                continue
            if (src, dst) in existing:
                port = self.proxy.port_of(src, dst)
            else:
                port = self.proxy.add_link(src, dst, addr)
            if dst in journalled:
                self.proxy.journal_link(src, dst)
            overrides[addr] = f"127.0.0.1:{port}"
        self._members |= {src, *peers}
        return overrides

    def partition(self, components: Iterable[Iterable[str]], mode: LinkMode | str = LinkMode.DROP) -> list[str]:
        """Cut every link between different components; nodes named nowhere are untouched."""
        return self.proxy.cut(sorted(complete_grudge([set(c) for c in components])), mode)

    def isolate(self, node_id: str, mode: LinkMode | str = LinkMode.DROP) -> list[str]:
        return self.proxy.cut(sorted(isolate(node_id, self._members)), mode)

    def cut(self, src: str, dst: str, mode: LinkMode | str = LinkMode.DROP,
            backward: LinkMode | str | None = None) -> None:
        """One directed link; `backward` set alone to OPEN gives a one-way partition."""
        if (src, dst) not in set(self.proxy.links()):
            raise KeyError(f"no link {src}->{dst}; links are {', '.join(f'{a}->{b}' for a, b in self.proxy.links())}")
        self.proxy.set_link(src, dst, mode, backward)

    def heal(self) -> None:
        """Every link's modes back to OPEN; toxics stay (see `clear_toxics`)."""
        self.proxy.heal()

    def add_toxic(self, src: str, dst: str, toxic: Toxic | Mapping[str, Any], direction: str = "both", *,
                  rng: random.Random | None = None) -> str:
        """A toxic on one directed link (see `NetProxy.add_toxic`); returns its id."""
        return self.proxy.add_toxic(src, dst, toxic, direction, rng=rng)

    def remove_toxic(self, src: str, dst: str, toxic_id: str) -> None:
        self.proxy.remove_toxic(src, dst, toxic_id)

    def clear_toxics(self, src: str | None = None, dst: str | None = None) -> list[str]:
        return self.proxy.clear_toxics(src, dst)

    def toxics(self) -> list[dict[str, Any]]:
        return self.proxy.toxics()

    def close(self) -> None:
        self.proxy.close()
