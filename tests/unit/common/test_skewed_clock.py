"""SkewedClock (rate, continuity, steps, sleeps at the rate) and its control file (nodes.common.clock_control)."""

from __future__ import annotations

import asyncio
import logging
import os
import time

import pytest

from nodes.common import constants as c
from nodes.common.clock import SYSTEM_CLOCK, ClockSetting, SkewedClock, real_mono_converter
from nodes.common.clock_control import ClockControl, node_clocks, parse_control, render_control
from nodes.common.config import BrokerConfig
from nodes.common.service import Service


def real_ms() -> float:
    return time.monotonic_ns() / 1e6


def test_rate_one_reads_the_real_clocks():
    # each reading lies between real readings taken on both sides of it (whole ms, ±1 for rounding), so a
    # preemption between the reads cannot fail it; an offset or a rate does
    clock = SkewedClock()
    before, reading, after = real_ms(), clock.monotonic_ms(), real_ms()
    assert before - 1 <= reading <= after + 1
    wall_before, wall_reading, wall_after = time.time_ns() // 1_000_000, clock.wall_ms(), time.time_ns() // 1_000_000
    assert wall_before - 1 <= wall_reading <= wall_after + 1


def bracketed(clock: SkewedClock) -> tuple[float, int, float]:
    """(real before, the clock's reading, real after): a preemption between two reads cannot fake
    a rate error, since the clock's real instant lies between the two real ones."""
    before = real_ms()
    reading = clock.monotonic_ms()
    return before, reading, real_ms()


def assert_rate(clock: SkewedClock, start: tuple[float, int, float], end: tuple[float, int, float],
                rate: float) -> None:
    """The clock advanced `rate` times the real time between its two readings (1 ms rounding each)."""
    shortest, longest = end[0] - start[2], end[2] - start[0]
    assert rate * shortest - 2 <= end[1] - start[1] <= rate * longest + 2, (start, end, rate)


def test_the_clock_runs_at_its_rate():
    clock = SkewedClock(ClockSetting(3.0))
    start = bracketed(clock)
    real0 = real_ms()
    time.sleep(0.2)
    assert_rate(clock, start, bracketed(clock), 3.0)
    # the wall clock drifts by the same amount
    assert clock.wall_ms() - time.time_ns() // 1_000_000 == pytest.approx(2.0 * (real_ms() - real0), abs=5)


def test_a_rate_change_never_makes_the_clock_jump():
    # After 50 ms at x5 the clock is 200 ms ahead of real time: a change that stepped back to
    # "real" (or forward) would move it by about that much. Continuous, it moves by what the
    # real time between the two readings explains at x5; a reading pair the scheduler stretched
    # past 1 ms (a loaded machine) is taken again, so that bound stays tight.
    for _ in range(50):
        clock = SkewedClock(ClockSetting(5.0))
        time.sleep(0.05)
        real_before_ms = real_ms()
        before = clock.monotonic_ms()
        clock.set(ClockSetting(0.5))
        after = clock.monotonic_ms()
        real_elapsed_ms = real_ms() - real_before_ms
        if real_elapsed_ms <= 1.0:
            break
    assert 0 <= after - before <= 5.0 * real_elapsed_ms + 2, (after - before, real_elapsed_ms)
    start = bracketed(clock)
    time.sleep(0.1)
    assert_rate(clock, start, bracketed(clock), 0.5)


def test_an_offset_steps_the_monotonic_clock_only():
    clock = SkewedClock()
    assert clock.set(ClockSetting(1.0, 5_000)) == ClockSetting()
    assert clock.monotonic_ms() - real_ms() == pytest.approx(5_000, abs=2)
    assert clock.wall_ms() - time.time_ns() // 1_000_000 == pytest.approx(0, abs=2)
    clock.set(ClockSetting(1.0, -1_000))  # a step back by 6 s
    assert clock.monotonic_ms() - real_ms() == pytest.approx(-1_000, abs=2)


def test_a_reading_converts_to_one_real_time_while_the_rate_holds():
    # two events naming the same lease end must carry the same real time, whenever each converts it
    for setting in (ClockSetting(), ClockSetting(1.0, 3_600_000), ClockSetting(2.0, -500), ClockSetting(0.5)):
        clock = SkewedClock(setting)
        to_real = real_mono_converter(clock)
        for reading_ms in range(clock.monotonic_ms(), clock.monotonic_ms() + 2_000, 7):
            first = to_real(reading_ms)
            time.sleep(0.0001)
            assert to_real(reading_ms) == first
        now_ms = clock.monotonic_ms()
        assert to_real(now_ms + 1_000) == pytest.approx(real_ms() + 1_000 / setting.rate, abs=3)
    # at rate 1 and no step a reading is the real time itself, to the ms
    clock = SkewedClock()
    to_real = real_mono_converter(clock)
    assert all(to_real(ms) == ms for ms in range(10_000_000, 10_002_000))
    assert real_mono_converter(SYSTEM_CLOCK) is None


@pytest.mark.parametrize("bad", [ClockSetting(0.0), ClockSetting(-1.0), ClockSetting(float("nan")),
                                 ClockSetting(1e9), ClockSetting(1.0, 1.5), ClockSetting(True)])  # type: ignore[arg-type]
def test_unusable_settings_are_refused(bad):
    with pytest.raises(ValueError):
        SkewedClock(bad)


def test_sleep_lasts_ms_over_rate_real_ms():
    clock = SkewedClock(ClockSetting(4.0))

    async def sleep() -> float:
        start = real_ms()
        await clock.sleep_ms(400)
        return real_ms() - start

    took = asyncio.run(sleep())
    assert 95 <= took <= 160  # 400 / 4


def test_a_sleeper_is_replanned_when_the_rate_changes():
    clock = SkewedClock(ClockSetting(1.0))

    async def run() -> float:
        start = real_ms()
        loop = asyncio.get_running_loop()
        loop.call_later(0.1, clock.set, ClockSetting(10.0))  # 100 fake ms gone, 900 left: 90 real ms
        await clock.sleep_ms(1_000)
        return real_ms() - start

    took = asyncio.run(run())
    assert 180 <= took <= 300, took  # not the 1 000 ms it was planned as


def test_a_skewed_clock_paces_service_intervals_and_the_system_one_does_not():
    ticks: list[float] = []

    class Ticker(Service):
        name = "ticker"

        async def tick(self) -> None:
            ticks.append(real_ms())

    async def run(clock) -> list[float]:
        ticks.clear()
        service = Ticker(200, clock=clock, initial_delay_ms=0)
        service.start()
        await asyncio.sleep(0.45)
        await service.stop()
        return list(ticks)

    fast = asyncio.run(run(SkewedClock(ClockSetting(4.0))))  # every 50 real ms
    normal = asyncio.run(run(SYSTEM_CLOCK))  # every 200 real ms
    assert len(fast) >= 6
    assert len(normal) <= 3


# --- the control file --------------------------------------------------------------------------

def test_parse_control():
    assert parse_control('{"rate": 2.5}') == ClockSetting(2.5, 0)
    assert parse_control('{"rate": 1, "offset_ms": -300}') == ClockSetting(1.0, -300)
    assert parse_control("{}") == ClockSetting()
    assert parse_control(render_control(ClockSetting(0.25, 7))) == ClockSetting(0.25, 7)
    for bad in ('{"rate": 2', "[2.0]", '{"rate": "fast"}', '{"rate": 0}', '{"speed": 2}', '{"offset_ms": 1.5}'):
        with pytest.raises(ValueError):
            parse_control(bad)


def write(path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_control_applies_the_file_and_records_each_change(tmp_path):
    clock = SkewedClock()
    events: list[dict] = []
    control = ClockControl(clock, tmp_path, SYSTEM_CLOCK, sink=events.append)
    assert not control.poll()  # no file: the default setting, nothing to record
    write(tmp_path / c.CLOCK_CONTROL_FILE, '{"rate": 2.0, "offset_ms": 100}')
    assert control.poll()
    assert clock.setting == ClockSetting(2.0, 100)
    assert not control.poll()  # unchanged file: not read again
    (event,) = events
    assert event["event"] == "clock" and event["cause"] == "control"
    assert (event["rate"], event["offset_ms"], event["wall_offset_ms"]) == (2.0, 100, 0)
    assert abs(event["clock_mono_ms"] - clock.monotonic_ms()) < 50
    (tmp_path / c.CLOCK_CONTROL_FILE).unlink()  # removed: back to the default
    assert control.poll()
    assert clock.setting == ClockSetting()


def test_a_torn_or_garbage_file_is_ignored_with_a_log_line(tmp_path, caplog):
    clock = SkewedClock()
    events: list[dict] = []
    control = ClockControl(clock, tmp_path, SYSTEM_CLOCK, sink=events.append)
    write(tmp_path / c.CLOCK_CONTROL_FILE, '{"rate": 3.0}')
    control.poll()
    caplog.set_level(logging.WARNING, logger="nodes.common.clock_control")
    for garbage in ('{"rate": 0.5, "offs', "\x00\x00\x00", '{"rate": -2}'):
        write(tmp_path / c.CLOCK_CONTROL_FILE, garbage)
        assert not control.poll()
        assert clock.setting == ClockSetting(3.0)  # kept
    assert control.ignored == 3
    ignored = [r for r in caplog.records if "ignored" in r.getMessage()]
    assert len(ignored) == 3 and "clock.json" in ignored[0].getMessage()
    assert len(events) == 1  # only the good change


def test_control_loop_polls_on_the_running_loop(tmp_path):
    clock = SkewedClock()
    events: list[dict] = []

    async def run() -> None:
        control = ClockControl(clock, tmp_path, SYSTEM_CLOCK, sink=events.append)
        control.start()
        write(tmp_path / c.CLOCK_CONTROL_FILE, '{"rate": 1.5}')
        await asyncio.sleep(c.CLOCK_CONTROL_POLL_MS * 3 / 1000)
        await control.stop()

    asyncio.run(run())
    assert [e["cause"] for e in events] == ["start", "control"]
    assert clock.setting.rate == 1.5


def test_only_a_node_with_clock_control_gets_a_skewed_clock(tmp_path):
    plain = node_clocks(BrokerConfig(run_dir=str(tmp_path), namesrv_addrs=("x:1",)))
    assert plain.timers is SYSTEM_CLOCK and plain.control is None
    controlled = node_clocks(BrokerConfig(run_dir=str(tmp_path), namesrv_addrs=("x:1",), clock_control="rate"))
    assert isinstance(controlled.timers, SkewedClock) and controlled.control is not None
    assert controlled.history is SYSTEM_CLOCK  # no wall-clock shift in this process: the system clock is real
