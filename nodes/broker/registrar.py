"""Registration with the name servers (RocketMQ BrokerOuterAPI#registerBrokerAll and the
broker's side of the channel the name server watches).

Owns: registering with every name server in parallel, the per-process channel token, keeping
one channel open to each name server, re-registering with backoff after a channel ends, and
unregistering on stop. The requests go through a `NamesrvApi` per name server, which the
transport provides.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import AsyncGenerator, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from nodes.broker.topics import TopicConfigManager
from nodes.common.clock import SYSTEM_CLOCK, Clock
from nodes.common.codes import ResponseCode
from nodes.common.config import BrokerConfig
from nodes.common.errors import MqError
from nodes.common.service import CrashHandler, Service
from nodes.common.types import TopicConfig

log = logging.getLogger(__name__)


# Re-registering after a lost channel starts at this fraction of the registration interval
# (500 ms unscaled) and doubles up to the interval itself, so it never waits longer than the
# periodic registration would and scales with the rest of Timing.
_REREGISTER_FIRST_DIVISOR = 60


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """REGISTER_BROKER as this broker sends it; `channel_token` names this process's current
    channel to one name server."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_server_addr: str
    topic_configs: tuple[TopicConfig, ...]
    data_version: tuple[int, int]
    node_id: str
    channel_token: str = ""
    remoting_addr: str = ""  # "host:port" of this broker's RocketMQ remoting listener, if any
    rocketmq5_addr: str = ""  # "host:port" of this broker's RocketMQ 5 gRPC endpoint, if any


@dataclass(frozen=True, slots=True)
class RegisterResult:
    code: ResponseCode
    remark: str = ""
    master_addr: str = ""


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    """Names this broker in UNREGISTER_BROKER and on its channel."""

    cluster_name: str
    broker_name: str
    broker_id: int
    broker_addr: str


class NamesrvApi(Protocol):
    """One name server, as the registrar talks to it. Every method raises MqError when the
    request cannot be made or its answer is lost."""

    addr: str

    async def register(self, registration: BrokerRegistration, timeout_ms: int) -> RegisterResult: ...

    def watch_channel(self, broker: BrokerIdentity, channel_token: str) -> AsyncGenerator[bool, None]:
        """The channel: yields once it is open (whether the token's registration is live),
        then nothing until it ends."""
        ...

    async def unregister(self, broker: BrokerIdentity, timeout_ms: int) -> None: ...


@dataclass
class _NamesrvLink:
    """One name server as this broker sees it: its API, and the channel (WatchChannel stream)."""

    api: NamesrvApi
    process_token: str
    # Bumped whenever the channel ends: the next registration carries a new token, so the old
    # channel's late end at the name server cannot remove the new registration.
    generation: int = 0
    # Set by a successful registration carrying the current token; the channel opens after it.
    registered: asyncio.Event = field(default_factory=asyncio.Event)
    channel_open: bool = False
    opened: asyncio.Event = field(default_factory=asyncio.Event)  # set while the channel is open
    reregistering: bool = False
    channels_lost: int = 0
    task: asyncio.Task[None] | None = None

    @property
    def addr(self) -> str:
        return self.api.addr

    @property
    def token(self) -> str:
        return f"{self.process_token}-{self.generation}"


class NamesrvRegistrar:
    """Registers this broker with every name server (in parallel), keeps one channel open to
    each, and unregisters on stop.

    The channel shares its name server's connection with the registrations (and their link
    proxy): when this process dies or the connection is reset, the channel ends and the name
    server drops this broker's route at once (RocketMQ's onChannelDestroy). No keepalive runs on
    it (see nodes.common.rpc): a silent partition must stay silent and leave the broker to the
    name server's expiry, as in RocketMQ.
    """

    def __init__(self, config: BrokerConfig, topics: TopicConfigManager, apis: Iterable[NamesrvApi],
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._config = config
        self._topics = topics
        self._clock = clock
        # Made at process start: names this broker process at the name servers.
        process_token = uuid.uuid4().hex[:16]
        self._links = [_NamesrvLink(api, process_token) for api in apis]
        self._stopping = False
        self.broker_addr = ""
        # The remoting listener's bound address, set by whoever started the listener; until
        # then the configured port stands for it (the harness fixes one per node).
        self.remoting_addr = ""
        self.rocketmq5_addr = ""  # the RocketMQ 5 endpoint's bound address, set the same way
        self.master_addr = ""
        self.registered_ok = 0

    async def register_all(self, links: list[_NamesrvLink] | None = None) -> None:
        """RegisterBroker with every name server (or only `links`), in parallel."""
        links = self._links if links is None else links
        request = BrokerRegistration(
            cluster_name=self._config.cluster_name, broker_name=self._config.broker_name,
            broker_id=self._config.broker_id, broker_addr=self.broker_addr, ha_server_addr=self.broker_addr,
            topic_configs=tuple(self._topics.all()), data_version=self._topics.data_version,
            node_id=self._config.node_id, remoting_addr=self.advertised_remoting_addr,
            rocketmq5_addr=self.rocketmq5_addr or (f"{self._config.listen_host}:{self._config.rocketmq5_port}"
                                                   if self._config.rocketmq5_port else ""))
        results = await asyncio.gather(*(self._register_one(link, request) for link in links),
                                       return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        answers = [r for r in results if isinstance(r, RegisterResult) and r.code == ResponseCode.SUCCESS]
        self.registered_ok += len(answers)
        if answers:
            # A slave's master is known only while a name server says one is registered.
            master_addr = next((r.master_addr for r in answers if r.master_addr), "")
            if master_addr != self.master_addr:
                log.info("master address: %r -> %r", self.master_addr, master_addr)
            self.master_addr = master_addr
        if failures and len(failures) == len(results):
            raise failures[0]

    @property
    def advertised_remoting_addr(self) -> str:
        """What the name servers are told: the listener's bound address when it was handed
        over, else the configured port (0: no address, so remoting routes leave this broker out)."""
        if self.remoting_addr:
            return self.remoting_addr
        if self._config.remoting_port:
            return f"{self._config.listen_host}:{self._config.remoting_port}"
        return ""

    async def _register_one(self, link: _NamesrvLink, request: BrokerRegistration) -> RegisterResult:
        token = link.token
        answer = await link.api.register(dataclasses.replace(request, channel_token=token),
                                         self._config.timing.register_timeout_ms)
        # A registration sent before the channel ended carries the old token: it does not count.
        if answer.code == ResponseCode.SUCCESS and token == link.token:
            link.registered.set()
        return answer

    def start_channels(self) -> None:
        for link in self._links:
            link.task = asyncio.create_task(self._keep_channel(link), name=f"namesrv-channel {link.addr}")

    async def _keep_channel(self, link: _NamesrvLink) -> None:
        """Hold the channel to one name server open; after it ends, re-register and open a new one."""
        timing = self._config.timing
        first_ms = max(1, timing.register_interval_ms // _REREGISTER_FIRST_DIVISOR)
        backoff_ms = first_ms
        while not self._stopping:
            await link.registered.wait()
            if self._stopping:
                return
            opened_ms = self._clock.monotonic_ms()
            reason = await self._hold_channel(link)
            if self._stopping:
                return
            # A channel that lived a registration interval was healthy: start the backoff afresh.
            # One that dies young (a flapping link) keeps doubling it.
            if self._clock.monotonic_ms() - opened_ms >= timing.register_interval_ms:
                backoff_ms = first_ms
            link.generation += 1
            link.registered.clear()
            link.channels_lost += 1
            log.warning("channel to name server %s closed (%s); re-registering with token %s",
                        link.addr, reason, link.token)
            link.reregistering = True
            try:
                while not link.registered.is_set() and not self._stopping:
                    await asyncio.sleep(backoff_ms / 1000)
                    backoff_ms = min(backoff_ms * 2, timing.register_interval_ms)
                    try:
                        await self.register_all([link])  # only this name server lost its channel
                    except Exception as exc:  # the name server may be down; keep trying, never crash
                        log.info("re-registration with name server %s failed: %s", link.addr, exc)
            finally:
                link.reregistering = False

    async def _hold_channel(self, link: _NamesrvLink) -> str:
        """Open the WatchChannel stream and wait for its end; returns why it ended."""
        # No deadline: the stream lives as long as this process and the connection do.
        events = link.api.watch_channel(self._identity(), link.token)
        try:
            async for registered in events:
                if not link.channel_open:
                    log.info("channel to name server %s open (token %s, registered=%s)",
                             link.addr, link.token, registered)
                link.channel_open = True
                link.opened.set()
            return "ended by the name server"
        except MqError as exc:
            return str(exc)
        except Exception as exc:  # a broken stream must never take the broker down
            log.warning("channel to name server %s failed unexpectedly", link.addr, exc_info=True)
            return repr(exc)
        finally:
            link.channel_open = False
            link.opened.clear()
            await events.aclose()

    async def wait_channels_open(self, timeout_ms: int) -> bool:
        """Wait until every name server that took the registration holds this process's channel
        open (False: not within `timeout_ms`). A registration is only watched once its channel
        is open: a process that dies in between is removed by expiry alone (X_b), not at once.
        RocketMQ registers over the very connection the name server watches, so it has no such
        gap; the broker announces itself ready only after it, so a harness (or a nemesis) acting
        on readiness never lands in it."""
        waiting = [link.opened.wait() for link in self._links if link.registered.is_set()]
        if not waiting:
            return True
        try:
            await asyncio.wait_for(asyncio.gather(*waiting), timeout_ms / 1000)
        except TimeoutError:
            log.warning("a name server channel did not open within %d ms of the registration; "
                        "until it does, only expiry removes this broker there", timeout_ms)
            return False
        return True

    def _identity(self) -> BrokerIdentity:
        return BrokerIdentity(cluster_name=self._config.cluster_name, broker_name=self._config.broker_name,
                              broker_id=self._config.broker_id, broker_addr=self.broker_addr)

    async def unregister_all(self) -> None:
        """A clean stop: unregister everywhere, then close the channels (their late end finds
        nothing to remove)."""
        self._stopping = True
        # A re-registration in flight could land after the unregister: cancel those first.
        await self._cancel(link for link in self._links if link.reregistering)
        for link in self._links:
            try:
                await link.api.unregister(self._identity(), self._config.timing.rpc_timeout_ms)
            except MqError as exc:
                log.warning("unregister failed: %s", exc)
        await self._cancel(self._links)

    @staticmethod
    async def _cancel(links: Iterable[_NamesrvLink]) -> None:
        tasks = [link.task for link in links if link.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def describe(self) -> list[dict[str, Any]]:
        return [{"addr": link.addr, "token": link.token, "channel_open": link.channel_open,
                 "channels_lost": link.channels_lost}
                for link in self._links]


class RegistrationService(Service):
    name = "namesrv-registration"

    def __init__(self, registrar: NamesrvRegistrar, interval_ms: int, on_crash: CrashHandler) -> None:
        super().__init__(interval_ms, on_crash=on_crash)
        self._registrar = registrar

    async def tick(self) -> None:
        await self._registrar.register_all()
