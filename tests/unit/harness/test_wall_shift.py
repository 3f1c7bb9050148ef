"""The wall-clock shift library (harness/_wall_shift.c) preloaded into a real Python process:
its wall clock moves by the file's seconds, its monotonic clock and its waits do not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.clockfault import WALL_SHIFT_REREAD_MS, find_wall_shift_library, wall_shift_env
from harness.errors import HarnessError
from nodes.common import constants as c


def _built() -> bool:
    try:
        find_wall_shift_library()
    except HarnessError:
        return False
    return True


REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.requires(_built(), "the wall-clock shift library (harness/_wall_shift.c) is not built: "
                                            "install gcc and run ./scripts/bootstrap.sh again")

# Prints, per line of stdin, the process's wall clock minus the kernel's real one (a raw syscall
# past the library) and how long a 50 ms time.sleep took on the monotonic clock.
PROBE = """
import json, sys, time
from nodes.common.clock import RealWallClock, wall_clock_shifted
real = RealWallClock()
print(json.dumps({"shifted": wall_clock_shifted()}), flush=True)
for line in sys.stdin:
    t0 = time.monotonic()
    time.sleep(0.05)
    slept_ms = (time.monotonic() - t0) * 1000
    shift_ms = time.time() * 1000 - real.wall_ms()
    print(json.dumps({"shift_ms": shift_ms, "slept_ms": slept_ms, "time_s": int(time.time()) - real.wall_ms() // 1000}),
          flush=True)
"""


class Probe:
    def __init__(self, run_dir: Path) -> None:
        env = wall_shift_env(run_dir, {**os.environ, "PYTHONPATH": str(REPO)})
        self.proc = subprocess.Popen([sys.executable, "-c", PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env)
        self.first = json.loads(self.proc.stdout.readline())

    def read(self) -> dict:
        self.proc.stdin.write("read\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        assert self.proc.wait(10) == 0


def _shift_after_reread(probe: Probe) -> dict:
    """What the probe reads once the library is due to read the file again (its first wall-clock
    read past the interval does)."""
    time.sleep(2 * WALL_SHIFT_REREAD_MS / 1000)
    return probe.read()


def test_the_wall_clock_follows_the_file_and_nothing_else_moves(tmp_path):
    probe = Probe(tmp_path)
    try:
        assert probe.first == {"shifted": True}
        assert (tmp_path / c.WALL_SHIFT_FILE).read_text() == "+0\n"  # created, no shift
        assert abs(probe.read()["shift_ms"]) < 50
        (tmp_path / c.WALL_SHIFT_FILE).write_text("+3600\n")
        got = _shift_after_reread(probe)
        assert abs(got["shift_ms"] - 3_600_000) < 50 and got["time_s"] in (3599, 3600, 3601)
        assert 45 <= got["slept_ms"] < 1_000  # time.sleep works and runs on the real monotonic clock
        (tmp_path / c.WALL_SHIFT_FILE).write_text("-6.500\n")
        assert abs(_shift_after_reread(probe)["shift_ms"] + 6_500) < 50
        # an unusable file keeps the shift last read
        (tmp_path / c.WALL_SHIFT_FILE).write_text("soon\n")
        assert abs(_shift_after_reread(probe)["shift_ms"] + 6_500) < 50
        (tmp_path / c.WALL_SHIFT_FILE).unlink()
        assert abs(_shift_after_reread(probe)["shift_ms"] + 6_500) < 50
    finally:
        probe.close()


def test_a_process_without_the_library_is_not_shifted(tmp_path):
    env = {**os.environ, c.WALL_SHIFT_FILE_ENV: str(tmp_path / "x.rc"),
           "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", "from nodes.common.clock import wall_clock_shifted as w; print(w())"],
                         env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"  # the file's variable alone does not make the history clock switch
