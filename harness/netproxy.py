"""Link proxies: one TCP proxy per directed node-to-node link, so partitions need no root.

Node X reaches node Y through the proxy of link X->Y (X's config maps Y's address to the
proxy's port with `dial_overrides`). Each link has a mode per direction of its bytes:

    OPEN    forward bytes
    DROP    blackhole: accept and read, forward nothing, close nothing (callers hit deadlines)
    REJECT  refuse new connections and reset live ones at once

`forward` is X->Y (requests), `backward` is Y->X (responses); setting only one gives a
one-way partition. Changing a link's mode applies to its live connections too, so a
long-lived replication or pull stream is cut like a new connection would be.

Toxics (`harness.toxics`: latency, bandwidth, slicer, stall, reset, loss-like) sit on a
direction beside its mode; a mode other than OPEN wins over them (a DROP link drops whatever
toxics it has). `heal()` resets modes only; toxics are cleared with `clear_toxics()`.

A link may also journal the requests that matter on it and their answers (`journal_link`,
`harness.request_journal`): the cluster does so for every consumer's link to a broker.

Everything runs on one asyncio loop in a harness thread; the public API is synchronous and
thread-safe. The harness's own control plane (Admin calls) never goes through a proxy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import random
import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.link_proxy import LinkMode, LinkProxy, LinkStats
from harness.request_journal import RequestJournal
from harness.toxics import ActiveToxic, Toxic, as_toxic, directions_of, toxic_to_dict

__all__ = ["LinkMode", "LinkProxy", "LinkStats", "NetProxy", "complete_grudge", "isolate"]

log = logging.getLogger(__name__)


class NetProxy:
    """All link proxies of a cluster, on one harness-owned event loop thread."""

    def __init__(self, rng: random.Random | None = None, journal_path: Path | None = None) -> None:
        # each toxic draws (jitter, loss, slice sizes) from its own Random seeded from this one
        self._rng = rng if rng is not None else random.Random()
        self._toxic_ids = itertools.count(1)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mqlab-netproxy", daemon=True)
        self._thread.start()
        self._links: dict[tuple[str, str], LinkProxy] = {}
        self._lock = threading.Lock()
        self.on_change: Callable[[dict[str, Any]], None] | None = None
        # the links' request journal (harness.request_journal), for the links `journal_link` names
        self.journal = RequestJournal(journal_path) if journal_path is not None else None

    def _call(self, coro: Coroutine[Any, Any, Any], timeout_s: float = 10.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def _read(self, collect: Callable[[], Any]) -> Any:
        """Run a read-only snapshot on the loop (consistent with it); after close(), directly."""
        if self._loop.is_closed():
            return collect()
        return self._call(self._async(collect))

    def add_link(self, src: str, dst: str, target_addr: str, port: int = 0) -> int:
        """Create the proxy of `src -> dst`; returns its local port (dial it instead of target)."""
        link = LinkProxy(src, dst, target_addr)
        bound = self._call(link.start(port))
        with self._lock:
            self._links[(src, dst)] = link
        return bound

    def journal_link(self, src: str, dst: str) -> None:
        """Journal the requests that matter on `src -> dst` and their answers (new connections)."""
        if self.journal is None:
            raise ValueError("this NetProxy has no request journal: give it a journal_path")
        link = self._link(src, dst)
        journal = self.journal

        async def apply() -> None:
            link.journal = journal

        self._call(apply())

    def retarget(self, src: str, dst: str, target_addr: str,
                 backward_filter: Callable[..., Callable[[bytes], bytes]] | None = None) -> None:
        """Point the proxy of `src -> dst` at another address of dst (new connections only), with an
        optional per-connection filter of the backward bytes. A real-client consumer dials its peers'
        RocketMQ remoting listeners instead of their gRPC ports."""
        link = self._links[(src, dst)]

        async def apply() -> None:
            link.target_addr = target_addr
            link.backward_filter = backward_filter

        self._call(apply())

    def port_of(self, src: str, dst: str) -> int:
        return self._links[(src, dst)].port

    def links(self) -> list[tuple[str, str]]:
        return sorted(self._links)

    def set_link(self, src: str, dst: str, forward: LinkMode | str,
                 backward: LinkMode | str | None = None) -> None:
        """Set one directed link; `backward` defaults to the same mode as `forward`."""
        fwd = LinkMode(forward)
        back = LinkMode(backward) if backward is not None else fwd
        link = self._link(src, dst)

        async def apply() -> None:
            link.set_mode(fwd, back)

        self._call(apply())
        log.info("link %s: forward %s, backward %s", link.name, fwd.value, back.value)
        self._report({"link": link.name, "forward": fwd.value, "backward": back.value})

    def _report(self, change: dict[str, Any]) -> None:
        if self.on_change is not None:
            self.on_change(change)

    def _link(self, src: str, dst: str) -> LinkProxy:
        try:
            return self._links[(src, dst)]
        except KeyError:
            names = ", ".join(f"{a}->{b}" for a, b in self.links())
            raise KeyError(f"no link {src}->{dst}; links are {names}") from None

    # ---- toxics (see harness.toxics) ------------------------------------------------------

    def add_toxic(self, src: str, dst: str, toxic: Toxic | Mapping[str, Any], direction: str = "both", *,
                  rng: random.Random | None = None) -> str:
        """Put a toxic (or its dict) on link `src -> dst`, on live and new connections at once.

        `direction`: "forward" (src->dst requests), "backward" (answers) or "both". `rng` feeds
        its draws; by default a Random seeded from the proxy's. Returns the toxic's id."""
        toxic = as_toxic(toxic)
        directions = directions_of(direction)
        link = self._link(src, dst)
        toxic_id = f"{toxic.kind}-{next(self._toxic_ids)}"
        draws = rng if rng is not None else random.Random(self._rng.getrandbits(64))

        async def apply() -> None:
            link.add_toxic(ActiveToxic(toxic_id, toxic, directions, draws, self._loop.time()))

        self._call(apply())
        log.info("link %s: toxic %s on %s: %s", link.name, toxic_id, direction, toxic_to_dict(toxic))
        self._report({"link": link.name, "change": "toxic-added", "toxic_id": toxic_id, "direction": direction,
                      "toxic": toxic_to_dict(toxic)})
        return toxic_id

    def remove_toxic(self, src: str, dst: str, toxic_id: str) -> None:
        """Take a toxic off: held chunks leave on their schedule, a stall resumes the same bytes."""
        link = self._link(src, dst)
        if not self._call(self._async(link.remove_toxic, toxic_id)):
            raise KeyError(f"no toxic {toxic_id} on {link.name}; in force there: {sorted(link.toxics) or 'none'}")
        log.info("link %s: toxic %s removed", link.name, toxic_id)
        self._report({"link": link.name, "change": "toxic-removed", "toxic_id": toxic_id})

    def clear_toxics(self, src: str | None = None, dst: str | None = None) -> list[str]:
        """Remove every toxic, or those of links from `src` and/or to `dst`; returns their ids."""
        removed = []
        for toxic in self.toxics():
            a, _, b = toxic["link"].partition("->")
            if src in (None, a) and dst in (None, b):
                self.remove_toxic(a, b, toxic["toxic_id"])
                removed.append(toxic["toxic_id"])
        return removed

    def toxics(self) -> list[dict[str, Any]]:
        """The toxics in force: `{"link", "toxic_id", "direction", "kind", <parameters>}` each."""
        def collect() -> list[dict[str, Any]]:
            return [{"link": link.name, **active.describe()}
                    for link in self._links.values() for active in link.toxics.values()]

        return self._read(collect)  # type: ignore[no-any-return]

    @staticmethod
    async def _async(fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    def cut(self, pairs: Iterable[tuple[str, str]], mode: LinkMode | str = LinkMode.DROP) -> list[str]:
        """Cut every listed directed link that exists; returns the names of the links cut."""
        cut = []
        for src, dst in pairs:
            if (src, dst) in self._links:
                self.set_link(src, dst, mode)
                cut.append(f"{src}->{dst}")
        return cut

    def heal(self) -> None:
        """Every link's modes back to OPEN. Toxics stay: whoever added them removes them."""
        for src, dst in self.links():
            link = self._links[(src, dst)]
            if link.forward is not LinkMode.OPEN or link.backward is not LinkMode.OPEN:
                self.set_link(src, dst, LinkMode.OPEN)

    def stats(self) -> dict[str, dict[str, Any]]:
        """Per link: modes, byte counts, the longest hold, and under "toxics" every toxic the link
        ever had (parameters, `active`, and what it did: `ToxicStats`)."""
        def collect() -> dict[str, dict[str, Any]]:
            return {link.name: {"forward": link.forward.value, "backward": link.backward.value,
                                **dataclasses.asdict(link.stats),
                                "toxics": {tid: {**a.describe(), "active": not a.removed,
                                                 **dataclasses.asdict(a.stats)}
                                           for tid, a in link.applied.items()}}
                    for link in self._links.values()}

        return self._read(collect)  # type: ignore[no-any-return]

    def close(self) -> None:
        async def close_all() -> None:
            for link in list(self._links.values()):
                await link.close()
            if self.journal is not None:
                self.journal.close()

        try:
            self._call(close_all())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()


# --- grudges (Jepsen nemesis.clj style): which directed links a partition cuts ----------------


def complete_grudge(components: list[set[str]]) -> set[tuple[str, str]]:
    """Every directed link between different components."""
    cut = set()
    for comp in components:
        others = set().union(*(c for c in components if c is not comp))
        cut |= {(a, b) for a in comp for b in others}
    return cut


def isolate(node: str, everyone: Iterable[str]) -> set[tuple[str, str]]:
    """Both directions between `node` and everyone else."""
    return complete_grudge([{node}, set(everyone) - {node}])
