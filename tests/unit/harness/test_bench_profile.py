"""`mqlab bench pull --profile`: py-spy's raw stacks read back and summarized per process."""

from __future__ import annotations

from collections import Counter

from harness.bench.profile import PROFILE_RATE_HZ, py_spy_missing, read_raw, summarize


def test_raw_stacks_are_read_without_line_numbers_and_summed(tmp_path):
    raw = tmp_path / "row.client0.raw.txt"
    raw.write_text("main (w.py:10);decode (d.py:5) 3\n"
                   "main (w.py:11);decode (d.py:7) 2\n"
                   "main (w.py:12) 5\n"
                   "garbage line\n")
    stacks = read_raw(raw)
    assert stacks == Counter({("main (w.py)", "decode (d.py)"): 5, ("main (w.py)",): 5})


def test_summary_gives_self_and_total_shares_and_microseconds_per_message():
    stacks = Counter({("main (w.py)", "decode (d.py)"): 3 * PROFILE_RATE_HZ // 10,
                      ("main (w.py)",): PROFILE_RATE_HZ // 10})
    text = summarize("client0", stacks, messages=1000)
    lines = text.splitlines()
    # 0.4 s of samples over 1000 messages = 400 us per message
    assert lines[0] == f"== client0: {4 * PROFILE_RATE_HZ // 10} samples = 400.0 us/msg holding the GIL"
    self_part = lines[lines.index(next(line for line in lines if "by self" in line)) + 1:]
    assert self_part[0].split() == ["75.0%", "300.00", "decode", "(d.py)"]
    total_at = lines.index(next(line for line in lines if "by total" in line))
    assert lines[total_at + 1].split() == ["100.0%", "400.00", "main", "(w.py)"]


def test_py_spy_is_installed_with_the_dev_extra():
    assert py_spy_missing() is None
