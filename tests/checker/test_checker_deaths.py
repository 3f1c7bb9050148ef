"""deaths: a node that ended by itself fails the run, whatever fault was active."""

from checker.builders import Run, config

from chaos.checker.checks import check_deaths


def test_no_exit_is_valid_and_nemesis_caused_exits_are_not_deaths(spark):
    run = Run().sends_for(0, 3).fault("kill", ["broker-a-0"], 200, 400).exit("broker-a-0", 200, expected=True)
    r = check_deaths(run.history(spark), config())
    assert r.valid is True, r.examples
    assert r.counts["unexplained_deaths"] == 0


def test_a_broker_dead_of_sigbus_under_a_full_disk_is_an_unexplained_death(spark):
    run = Run().sends_for(0, 3).fault("disk-fill", ["broker-a-0"], 150, 900).exit("broker-a-0", 300, code=-7)
    r = check_deaths(run.history(spark), config())
    assert r.valid is False
    assert r.counts["unexplained_deaths"] == 1 and r.counts["by_node"] == {"broker-a-0": 1}
    ex = r.examples[0]
    assert ex["how"] == "was killed by SIGBUS" and ex["faults_active"] == ["disk-fill broker-a-0"]
    assert "broker-a-0 was killed by SIGBUS" in r.reason


def test_a_crash_on_a_broken_invariant_is_a_death_too(spark):
    r = check_deaths(Run().sends_for(0, 3).exit("consumer-1", 250, code=70).history(spark), config())
    assert r.valid is False and "exited with code 70" in r.examples[0]["how"]
