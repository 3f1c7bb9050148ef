"""Delay levels (parsing, scaling), store-time conversion and ScheduleMessageService due logic."""

import asyncio
import shutil

import pytest

from nodes.broker.schedule import ScheduleMessageService, corrected_deliver_ms, is_due, real_message
from nodes.broker.slave_sync import DELAY_OFFSETS_TABLE
from nodes.common import constants as c
from nodes.common.config import Timing
from nodes.common.errors import ConfigError
from nodes.store.delay import DEFAULT_DELAY_LEVELS_MS, parse_delay_levels
from nodes.store.message_store import MessageStore
from nodes.store.record import MessageToStore, Record

from .conftest import DELAYS_MS, UNIT_MS

SCHEDULE = c.SCHEDULE_TOPIC


def service(broker, **kwargs) -> ScheduleMessageService:
    return ScheduleMessageService(broker.store, broker.clock, poll_ms=5, first_delay_ms=5, error_backoff_ms=50,
                                  persist_ms=kwargs.pop("persist_ms", 1_000), **kwargs)


# --- levels ------------------------------------------------------------------------------------


def test_default_table_has_rocketmqs_eighteen_levels():
    assert len(DEFAULT_DELAY_LEVELS_MS) == 18
    assert DEFAULT_DELAY_LEVELS_MS[:4] == (1_000, 5_000, 10_000, 30_000)
    assert DEFAULT_DELAY_LEVELS_MS[4] == 60_000 and DEFAULT_DELAY_LEVELS_MS[-1] == 2 * 3_600_000


def test_levels_are_multiples_of_the_scaled_unit():
    unit_ms = Timing().scaled(0.05).delay_level_unit_ms
    assert unit_ms == 50
    levels = parse_delay_levels(c.MESSAGE_DELAY_LEVEL, unit_ms)
    assert levels[:3] == (50, 250, 500) and levels[4] == 3_000 and levels[-1] == 360_000
    assert parse_delay_levels("2d 1s", 1) == (2 * 86_400, 1)


@pytest.mark.parametrize("spec", ["", "1x", "s", "1.5s", "-1s"])
def test_bad_level_tables_are_config_errors(spec):
    with pytest.raises(ConfigError):
        parse_delay_levels(spec, 1_000)


# --- conversion at store time --------------------------------------------------------------------


def test_delayed_message_waits_in_the_schedule_topic_with_its_deliver_time_as_tag_code(broker):
    offset = broker.put("T", 3, b"later", properties={c.PROPERTY_DELAY: "3", "TAGS": "a"})
    waiting = broker.store.lookup_message(offset)
    assert (waiting.topic, waiting.queue_id) == (SCHEDULE, 2)
    assert waiting.properties[c.PROPERTY_REAL_TOPIC] == "T"
    assert waiting.properties[c.PROPERTY_REAL_QUEUE_ID] == "3"
    assert broker.store.max_queue_offset("T", 3) == 0
    assert broker.tag_code(SCHEDULE, 2, 0) == waiting.store_timestamp_ms + 10 * UNIT_MS


def test_level_above_the_maximum_is_capped(broker):
    offset = broker.put(properties={c.PROPERTY_DELAY: "99"})
    waiting = broker.store.lookup_message(offset)
    assert waiting.queue_id == 17 and waiting.properties[c.PROPERTY_DELAY] == "18"


@pytest.mark.parametrize("delay", ["0", "-2", "soon"])
def test_no_positive_level_means_no_delay(broker, delay):
    offset = broker.put("T", 0, properties={c.PROPERTY_DELAY: delay})
    assert broker.store.lookup_message(offset).topic == "T"


def test_prepared_transactions_are_not_delayed_but_committed_ones_are(broker):
    assert broker.store.lookup_message(broker.put(properties={c.PROPERTY_DELAY: "1"}, sys_flag=0x04)).topic == "T"
    assert broker.store.lookup_message(broker.put(properties={c.PROPERTY_DELAY: "1"}, sys_flag=0x08)).topic == SCHEDULE


def test_a_batch_cannot_be_delayed(broker):
    msgs = [MessageToStore("T", 0, b"a", properties={c.PROPERTY_DELAY: "1"}), MessageToStore("T", 0, b"b")]
    assert broker.store.put_messages(msgs).status.name == "MESSAGE_ILLEGAL"


def test_tag_codes_survive_a_rebuild_of_the_consume_queues(broker, tmp_path):
    broker.put(properties={c.PROPERTY_DELAY: "2"})
    expected = broker.tag_code(SCHEDULE, 1, 0)
    broker.store.close()
    shutil.rmtree(broker.store.root / "consumequeue")
    (broker.store.root / "abort").write_bytes(b"")  # force the abnormal recovery that re-dispatches
    broker.store = MessageStore(broker.store.root, broker.store.config, clock=broker.clock,
                                delay_levels_ms=DELAYS_MS)
    broker.store.open()
    assert broker.tag_code(SCHEDULE, 1, 0) == expected


# --- due logic -------------------------------------------------------------------------------------


def test_corrected_deliver_time():
    assert corrected_deliver_ms(1_100, 1_000, 500) == 1_100
    assert corrected_deliver_ms(1_500, 1_000, 500) == 1_500
    assert corrected_deliver_ms(1_501, 1_000, 500) == 1_000  # further than one delay out: now
    assert not is_due(1_100, 1_000, 500) and is_due(1_000, 1_000, 500) and is_due(9_999, 1_000, 500)


def test_a_message_is_delivered_only_once_due(broker):
    broker.put("Real", 2, b"x", properties={c.PROPERTY_DELAY: "3", "KEYS": "k"}, reconsume_times=4)
    schedule = service(broker)
    delay_ms = DELAYS_MS[2]
    broker.clock.advance_ms(delay_ms - 1)
    outcome = schedule.deliver_level(3, broker.clock.wall_ms())
    assert outcome.delivered == 0 and outcome.waiting_for_ms == broker.clock.wall_ms() + 1
    assert schedule.offsets[3] == 0 and broker.store.max_queue_offset("Real", 2) == 0
    broker.clock.advance_ms(1)
    outcome = schedule.deliver_level(3, broker.clock.wall_ms())
    assert outcome.delivered == 1 and schedule.offsets[3] == 1
    [real] = broker.records("Real", 2)
    assert real.reconsume_times == 4 and real.body == b"x"
    assert c.PROPERTY_DELAY not in real.properties
    assert real.properties[c.PROPERTY_REAL_TOPIC] == "Real" and real.properties["KEYS"] == "k"
    assert schedule.deliver_level(3, broker.clock.wall_ms()).delivered == 0  # nothing twice


def test_delivery_is_in_order_and_stops_at_the_first_not_due(broker):
    broker.put("R", 0, b"1", properties={c.PROPERTY_DELAY: "1"})
    broker.clock.advance_ms(5)
    broker.put("R", 0, b"2", properties={c.PROPERTY_DELAY: "1"})
    schedule = service(broker)
    broker.clock.advance_ms(DELAYS_MS[0] - 5)
    assert schedule.deliver_level(1, broker.clock.wall_ms()).delivered == 1
    broker.clock.advance_ms(5)
    assert schedule.deliver_level(1, broker.clock.wall_ms()).delivered == 1
    assert [r.body for r in broker.records("R")] == [b"1", b"2"]


def test_a_failed_put_keeps_the_cursor(broker):
    broker.put("R", 0, b"1", properties={c.PROPERTY_DELAY: "1"})
    schedule = service(broker)
    broker.clock.advance_ms(DELAYS_MS[0])
    broker.store.is_slave = True  # puts now fail
    outcome = schedule.deliver_level(1, broker.clock.wall_ms())
    assert outcome.failed and schedule.offsets[1] == 0
    broker.store.is_slave = False
    assert schedule.deliver_level(1, broker.clock.wall_ms()).delivered == 1


def test_a_record_without_a_real_topic_is_skipped(broker):
    # no DELAY (so the store keeps it as is) and no REAL_TOPIC: nowhere to deliver it
    broker.store.put_messages([MessageToStore(SCHEDULE, 0, b"?")])
    schedule = service(broker)
    broker.clock.advance_ms(DELAYS_MS[0])
    outcome = schedule.deliver_level(1, broker.clock.wall_ms())
    assert (outcome.delivered, outcome.skipped, schedule.offsets[1]) == (0, 1, 1)


def test_real_message_drops_only_delay():
    record = Record(0, 0, 0, 3, 0, 0, 0, 11, ("127.0.0.1", 1), 12, ("127.0.0.1", 2), 2, 0, b"b", SCHEDULE,
                    {c.PROPERTY_DELAY: "1", c.PROPERTY_REAL_TOPIC: "X", c.PROPERTY_REAL_QUEUE_ID: "4", "a": "b"})
    msg = real_message(record)
    assert (msg.topic, msg.queue_id, msg.flag, msg.reconsume_times, msg.born_timestamp_ms) == ("X", 4, 3, 2, 11)
    assert msg.properties == {c.PROPERTY_REAL_TOPIC: "X", c.PROPERTY_REAL_QUEUE_ID: "4", "a": "b"}


def test_cursors_are_persisted_and_loaded(broker):
    broker.put("R", 0, b"1", properties={c.PROPERTY_DELAY: "2"})
    schedule = service(broker)
    broker.clock.advance_ms(DELAYS_MS[1])
    schedule.deliver_level(2, broker.clock.wall_ms())
    schedule.persist()
    assert broker.store.metadata.get_all(DELAY_OFFSETS_TABLE)["2"] == 1
    again = service(broker)
    assert again.offsets[2] == 1
    assert again.deliver_level(2, broker.clock.wall_ms()).delivered == 0
    assert len(broker.records("R")) == 1


def test_the_service_delivers_due_messages_and_persists_on_stop(broker):
    broker.put("R", 0, b"1", properties={c.PROPERTY_DELAY: "1"})
    puts = []
    broker.clock.advance_ms(DELAYS_MS[0])

    async def run() -> None:
        schedule = service(broker, on_put=lambda: puts.append(1))
        schedule.start()
        for _ in range(400):
            if broker.store.max_queue_offset("R", 0):
                break
            await asyncio.sleep(0.005)
        await schedule.stop()

    asyncio.run(run())
    assert len(broker.records("R")) == 1 and puts
    assert broker.store.metadata.get_all(DELAY_OFFSETS_TABLE)["1"] == 1
