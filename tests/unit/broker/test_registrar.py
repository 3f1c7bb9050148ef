"""Registration with the name servers, driven through a fake NamesrvApi: no gRPC."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest

from nodes.broker.registrar import BrokerIdentity, BrokerRegistration, NamesrvRegistrar, RegisterResult
from nodes.broker.topics import TopicConfigManager
from nodes.common.codes import ResponseCode
from nodes.common.config import BrokerConfig
from nodes.common.errors import TransportError
from nodes.store.metadata import MetadataStore


class FakeNamesrv:
    def __init__(self, addr: str, master_addr: str = "", down: bool = False) -> None:
        self.addr = addr
        self.master_addr = master_addr
        self.down = down
        self.tokens: list[str] = []
        self.remoting_addrs: list[str] = []
        self.channel_end = asyncio.Event()
        self.unregistered = 0

    async def register(self, registration: BrokerRegistration, timeout_ms: int) -> RegisterResult:
        if self.down:
            raise TransportError(f"{self.addr} unavailable")
        self.tokens.append(registration.channel_token)
        self.remoting_addrs.append(registration.remoting_addr)
        return RegisterResult(ResponseCode.SUCCESS, master_addr=self.master_addr)

    async def watch_channel(self, broker: BrokerIdentity, channel_token: str) -> AsyncGenerator[bool, None]:
        yield True
        await self.channel_end.wait()
        self.channel_end.clear()

    async def unregister(self, broker: BrokerIdentity, timeout_ms: int) -> None:
        self.unregistered += 1


@pytest.fixture
def topics(tmp_path: Path) -> TopicConfigManager:
    return TopicConfigManager(MetadataStore(tmp_path / "md"), auto_create_enable=True, default_queue_nums=8, now_ms=0)


def _config() -> BrokerConfig:
    config = BrokerConfig(namesrv_addrs=("n1:1", "n2:1"), broker_id=1)
    # re-registration backoff starts at 1/60 of the interval: 10 ms here
    return dataclasses.replace(config, timing=dataclasses.replace(config.timing, register_interval_ms=600))


def test_registers_everywhere_and_learns_the_master(topics):
    n1, n2 = FakeNamesrv("n1:1"), FakeNamesrv("n2:1", master_addr="m:1", down=True)
    registrar = NamesrvRegistrar(_config(), topics, [n1, n2])
    asyncio.run(registrar.register_all())  # one name server down is not a failure
    assert registrar.registered_ok == 1 and registrar.master_addr == ""
    n2.down = False
    asyncio.run(registrar.register_all())
    assert registrar.master_addr == "m:1" and len(n1.tokens) == 2


def test_fails_only_when_every_name_server_fails(topics):
    registrar = NamesrvRegistrar(_config(), topics, [FakeNamesrv("n1:1", down=True), FakeNamesrv("n2:1", down=True)])
    with pytest.raises(TransportError):
        asyncio.run(registrar.register_all())


def test_a_lost_channel_re_registers_with_a_new_token(topics):
    n1 = FakeNamesrv("n1:1")

    async def scenario() -> list[dict]:
        registrar = NamesrvRegistrar(_config(), topics, [n1])
        await registrar.register_all()
        registrar.start_channels()
        for _ in range(100):
            if registrar.describe()[0]["channel_open"]:
                break
            await asyncio.sleep(0.005)
        n1.channel_end.set()  # the name server ends the channel
        for _ in range(200):
            if len(n1.tokens) >= 2 and registrar.describe()[0]["channel_open"]:
                break
            await asyncio.sleep(0.005)
        described = registrar.describe()
        await registrar.unregister_all()
        return described

    [link] = asyncio.run(scenario())
    assert link["channels_lost"] == 1 and link["channel_open"]
    assert len(set(n1.tokens)) == 2 and n1.tokens[-1] == link["token"]
    assert n1.unregistered == 1


def test_registrations_carry_the_remoting_address_the_controller_hands_over(topics):
    n1 = FakeNamesrv("n1:1")
    config = dataclasses.replace(_config(), listen_host="127.0.0.1", remoting_port=20911)
    registrar = NamesrvRegistrar(config, topics, [n1])
    asyncio.run(registrar.register_all())  # before the listener is bound: the configured port
    registrar.remoting_addr = "127.0.0.1:30911"  # the port the listener actually bound
    asyncio.run(registrar.register_all())
    no_listener = NamesrvRegistrar(dataclasses.replace(config, remoting_port=0), topics, [n1])
    asyncio.run(no_listener.register_all())
    assert n1.remoting_addrs == ["127.0.0.1:20911", "127.0.0.1:30911", ""]


class SlowChannelNamesrv(FakeNamesrv):
    """Its channel opens only when `open_channel` is set (or never)."""

    def __init__(self, addr: str) -> None:
        super().__init__(addr)
        self.open_channel = asyncio.Event()

    async def watch_channel(self, broker: BrokerIdentity, channel_token: str) -> AsyncGenerator[bool, None]:
        await self.open_channel.wait()
        yield True
        await self.channel_end.wait()


def test_ready_waits_until_every_registered_name_server_watches_the_channel(topics):
    slow, down = SlowChannelNamesrv("n1:1"), FakeNamesrv("n2:1", down=True)

    async def scenario() -> tuple[bool, bool, bool]:
        registrar = NamesrvRegistrar(_config(), topics, [slow, down])
        await registrar.register_all()  # n2 is down: only n1 took the registration
        registrar.start_channels()
        waiting = asyncio.create_task(registrar.wait_channels_open(5_000))
        await asyncio.sleep(0.05)
        done_before_open = waiting.done()
        slow.open_channel.set()
        opened = await waiting
        never = SlowChannelNamesrv("n3:1")
        other = NamesrvRegistrar(_config(), topics, [never])
        await other.register_all()
        other.start_channels()
        timed_out = await other.wait_channels_open(50)
        for r in (registrar, other):
            await r.unregister_all()
        return done_before_open, opened, timed_out

    done_before_open, opened, timed_out = asyncio.run(scenario())
    assert not done_before_open  # registered, but not yet watched: not ready
    assert opened is True
    assert timed_out is False  # a channel that never opens ends the wait at its bound, not never
