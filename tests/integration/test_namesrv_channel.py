"""A broker's WatchChannel stream against a real name server (and a real broker) in one process.

The end of the stream is the broker's channel closing: the name server drops the route at
once, unless the registration has moved on to a newer token, and never on its own shutdown.
"""

import asyncio
import dataclasses
from pathlib import Path

import grpc.aio
from support.inprocess import TEST_STORE
from support.timing import within_s

from nodes.broker.controller import BrokerController
from nodes.common.config import BrokerConfig, NamesrvConfig, Timing
from nodes.namesrv.app import NamesrvApp
from proto import common_pb2, namesrv_pb2, namesrv_pb2_grpc

TIMING = Timing().scaled(0.05)
# Expiry cannot act within any wait of these tests: whatever removes a route here is its channel.
NO_EXPIRY = dataclasses.replace(TIMING, broker_expiry_ms=3_600_000, broker_expiry_scan_ms=600_000)
BROKER_ADDR = "127.0.0.1:1"  # a registration only; nothing dials it


async def _namesrv(root: Path, port: int = 0, timing: Timing = TIMING) -> NamesrvApp:
    app = NamesrvApp(NamesrvConfig(run_dir=str(root / "namesrv"), port=port, timing=timing), asyncio.Event())
    await app.start()
    return app


async def _register(stub, token: str) -> None:
    answer = await stub.RegisterBroker(namesrv_pb2.RegisterBrokerRequest(
        cluster_name="C", broker_name="broker-a", broker_id=0, broker_addr=BROKER_ADDR,
        topic_configs=[common_pb2.TopicConfig(topic="T", read_queue_nums=4, write_queue_nums=4, perm=6)],
        data_version=namesrv_pb2.DataVersion(timestamp_ms=1, counter=0), channel_token=token), timeout=5)
    assert answer.code == common_pb2.SUCCESS


async def _open_channel(stub, token: str):
    call = stub.WatchChannel(namesrv_pb2.WatchChannelRequest(
        cluster_name="C", broker_name="broker-a", broker_id=0, broker_addr=BROKER_ADDR, channel_token=token))
    event = await call.read()
    return call, event


async def _broker_connection(app: NamesrvApp, token: str):
    """A broker's side: its own connection, a registration with `token`, its channel open on it.
    Returns (connection, the channel's first event)."""
    connection = grpc.aio.insecure_channel(app.addr)
    stub = namesrv_pb2_grpc.NameServerStub(connection)
    await _register(stub, token)
    _, event = await _open_channel(stub, token)
    return connection, event


async def _until(predicate, budget_s: float, what: str) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not predicate():
        assert loop.time() - start < budget_s, f"timed out after {budget_s:.1f} s waiting for {what}"
        await asyncio.sleep(0.01)
    return loop.time() - start


def test_closing_the_connection_removes_the_route_at_once(tmp_path):
    async def run():
        # an hour of expiry: a route that goes within the wait went with its channel
        app = await _namesrv(tmp_path, timing=NO_EXPIRY)
        try:
            channel, event = await _broker_connection(app, "p1-0")
            assert event.registered
            assert app.table.route("T") is not None
            await channel.close()  # the broker's connection goes away
            await _until(lambda: BROKER_ADDR not in app.table.live, within_s(), "the route to go with the channel")
            assert app.table.route("T") is None
        finally:
            await app.stop()
    asyncio.run(run())


def test_late_end_of_an_old_channel_keeps_the_new_registration(tmp_path):
    async def run():
        app = await _namesrv(tmp_path, timing=NO_EXPIRY)
        try:
            old, _ = await _broker_connection(app, "old-0")
            # a process restarted at the same address registers with its own token first
            new, event = await _broker_connection(app, "new-0")
            assert event.registered
            await old.close()
            await _until(lambda: app.status().details["open_channels"] == 1, within_s(), "the old channel's end")
            assert app.table.live[BROKER_ADDR].channel_token == "new-0"
            assert app.table.route("T") is not None
            await new.close()
            await _until(lambda: BROKER_ADDR not in app.table.live, within_s(), "the new channel's end")
        finally:
            await app.stop()
    asyncio.run(run())


def test_name_server_shutdown_is_not_a_broker_channel_close(tmp_path):
    async def run():
        app = await _namesrv(tmp_path)
        channel, _ = await _broker_connection(app, "p1-0")
        await app.stop()
        assert BROKER_ADDR in app.table.live
        await channel.close()
    asyncio.run(run())


def test_broker_reopens_its_channel_with_a_new_token_after_a_name_server_restart(tmp_path):
    async def run():
        app = await _namesrv(tmp_path)
        port = int(app.addr.rpartition(":")[2])
        broker = BrokerController(BrokerConfig(run_dir=str(tmp_path / "broker"), namesrv_addrs=(app.addr,),
                                               timing=TIMING, store=TEST_STORE), asyncio.Event())
        await broker.start()
        try:
            def channel_state():
                return broker.registrar.describe()[0]

            await _until(lambda: channel_state()["channel_open"], within_s(), "the broker's channel")
            first_token = channel_state()["token"]
            assert app.table.live[broker.addr].channel_token == first_token
            await app.stop()
            app = await _namesrv(tmp_path, port)
            # re-registration retries back off up to the registration interval, never beyond
            await _until(lambda: channel_state()["channel_open"] and broker.addr in app.table.live,
                         within_s(2 * TIMING.register_interval_ms),
                         "the broker to register again and reopen its channel")
            token = channel_state()["token"]
            assert token != first_token and app.table.live[broker.addr].channel_token == token
            assert app.status().details["open_channels"] == 1
            await broker.stop()
            # unregistered first, then the channel closed: nothing left, nothing to remove
            assert broker.addr not in app.table.live
            await _until(lambda: app.status().details["open_channels"] == 0, within_s(), "the channel to close")
        finally:
            if broker.lifecycle.state.name == "RUNNING":
                await broker.stop()
            await app.stop()
    asyncio.run(run())
