"""Fixtures shared by every test directory."""

from __future__ import annotations

import os
import tempfile

import pytest
from hypothesis import settings
from support.examples import examples

# property tests without a count of their own: Hypothesis' 100 in the full run, fewer by default.
# No per-example deadline: on two shared cores one example of a fast property can take longer
# than Hypothesis' 200 ms while another process has the CPU, and these tests judge behaviour,
# not speed (speed lives in the benchmark).
settings.register_profile("mqlab", max_examples=examples(100), deadline=None)
settings.load_profile("mqlab")

# Each node a test starts is a fresh interpreter importing the node package. With bytecode writing
# off (PYTHONDONTWRITEBYTECODE, set in some containers) every one of them compiles those modules
# from source again: about 0.1-0.2 s of CPU per process, and a default run starts hundreds on a
# machine whose CPU is its limit. A bytecode cache outside the tree keeps the tree as clean as that
# setting intends; set here, before xdist starts its workers, every process of the run inherits it.
if os.environ.get("PYTHONDONTWRITEBYTECODE"):
    del os.environ["PYTHONDONTWRITEBYTECODE"]
    os.environ.setdefault("PYTHONPYCACHEPREFIX", os.path.join(tempfile.gettempdir(), "mqlab-test-pycache"))


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession per pytest process; mark its users `spark`.

    A missing Java fails the run: a skipped checker test would count as passing.
    """
    from chaos.checker.session import SparkUnavailable, java_executable, make_spark

    if java_executable() is None:
        pytest.fail("no java on PATH: apt-get install -y openjdk-17-jre-headless")
    try:
        session = make_spark("local[2]", app_name="mqlab-tests", small_input=True)
    except SparkUnavailable as exc:
        pytest.fail(str(exc))
    yield session
    session.stop()


def pytest_collection_modifyitems(config, items):
    """Spark tests that also start a cluster (whole chaos runs) go last: `scripts/test` runs the
    Spark tests beside the other tests, and the checker tests, which start no process, then
    overlap those, while the chaos runs find the machine quieter."""
    items.sort(key=lambda item: item.get_closest_marker("spark") is not None
               and item.get_closest_marker("cluster") is not None)


def pytest_runtest_setup(item):
    """A test marked `requires(ok, what)` fails when `ok` is false, saying `what`: a test this
    machine cannot run is a failure to fix (root, a package the bootstrap installs), never a skip
    counted as passing."""
    for mark in item.iter_markers("requires"):
        ok, what = mark.args
        if not ok:
            pytest.fail(f"this machine cannot run this test: {what}", pytrace=False)
