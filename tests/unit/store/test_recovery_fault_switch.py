"""Fault switch recovery-trust-checkpoint: a crash recovery that trusts the checkpoint loses the
acknowledged messages written after it; the real recovery keeps them."""

import dataclasses

from .conftest import SMALL, crash_copy
from .test_recovery import QUEUES, assert_holds, drain, fill


def test_trusting_the_checkpoint_loses_acked_messages_after_it(open_store, clock, tmp_path):
    store = open_store()
    flushed = fill(store, clock, rounds=60)
    store.flush()  # the checkpoint now covers every record so far
    clock.advance_ms(1_000)
    later = fill(store, clock, rounds=40)  # acknowledged (PUT_OK) after the checkpoint
    everything = {q: flushed[q] + later[q] for q in QUEUES}

    honest = open_store(crash_copy(store, tmp_path / "honest"))
    assert_holds(honest, everything)

    broken = open_store(crash_copy(store, tmp_path / "broken"),
                        config=dataclasses.replace(SMALL, recovery_trust_checkpoint=True))
    assert not broken._recovery.clean_shutdown and broken._recovery.truncated_bytes > 0
    assert_holds(broken, flushed)  # consume queues cut with the commitlog: nothing points past it
    assert all(len(drain(broken, *q)) == len(flushed[q]) < len(everything[q]) for q in QUEUES)
    assert broken.max_phys_offset < store.max_phys_offset


def test_the_switch_changes_nothing_after_a_clean_shutdown(open_store, clock, tmp_path):
    store = open_store()
    expected = fill(store, clock, rounds=40)
    store.close()
    reopened = open_store(store.root, config=dataclasses.replace(SMALL, recovery_trust_checkpoint=True))
    assert reopened._recovery.clean_shutdown
    assert_holds(reopened, expected)
