"""`mqlab serve` in a real headless Chromium: a real cluster with link proxies and orderly consumers,
a real serve process, and faults injected through the chaos runs' own NemesisRunner (so they are
journalled exactly as a run journals them); the page must show them as they happen, show each
node's state, and keep updating."""

from __future__ import annotations

import os
import random

import pytest
from support.browser import CHROMIUM, CHROMIUM_MISSING, chromium_page, serve_process
from support.timing import slack_ms

from chaos.nemesis import NemesisRunner
from chaos.nemesis_journal import nemesis_history_path, read_nemesis
from chaos.nemesis_ops import Kill, Partition, Pause
from harness import LocalCluster
from harness.spec import ClusterSpec
from nodes.client import Message, Producer
from nodes.common.clock import SYSTEM_CLOCK

pytestmark = [pytest.mark.cluster, pytest.mark.requires(CHROMIUM.exists(), CHROMIUM_MISSING)]

TOPIC, GROUP = "LiveTopic", "live_group"
TIME_SCALE = float(os.environ.get("MQLAB_TEST_TIME_SCALE", "0.05"))
MESSAGES = 40
# the page polls every second; a change must be on it within two polls and a loaded machine's delay
SHOWN_MS = slack_ms(2_000)
SCREENSHOT = os.environ.get("MQLAB_SERVE_SCREENSHOT")  # docs: where to save the page with faults active


@pytest.fixture
def served(tmp_path):
    """`mqlab serve --runs` and a browser page, started before the cluster (they load while it starts)."""
    with serve_process("--runs", str(tmp_path / "runs")) as server, chromium_page() as page:
        yield server, page


@pytest.fixture
def cluster(tmp_path):
    spec = ClusterSpec.default(time_scale=TIME_SCALE).with_consumers(
        2, group=GROUP, subscriptions={TOPIC: "*"}, orderly=True, consume_from_where="CONSUME_FROM_FIRST_OFFSET")
    with LocalCluster(spec, run_dir=tmp_path / "runs" / "live-run", links=True) as cl:
        with Producer(cl.namesrv_addr, timing=cl.timing, default_topic_queue_nums=4) as producer:
            for i in range(MESSAGES):
                producer.send_orderly(Message(TOPIC, f"m{i}".encode()), sharding_key=str(i % 4))
        yield cl
        assert not cl.unexpected_exits, f"nodes died unexpectedly: {cl.unexpected_exits}"


def node_row(node: str, *, fault: str | None = None, **exact: str) -> str:
    """The node's row with these attributes; `fault` is a substring (several faults can hold one node),
    "" for none."""
    selector = f'tr[data-node="{node}"]' + "".join(f'[data-{k}="{v}"]' for k, v in exact.items())
    if fault is not None:
        selector += f'[data-fault*="{fault}"]' if fault else '[data-fault=""]'
    return selector


def test_live_page_shows_nodes_lag_and_faults_as_they_happen(served, cluster):
    server, page = served
    page.goto(server.url())  # no ?run=: the page picks the live cluster it finds under --runs
    # live data: every node with its role, the group's lag per queue from the brokers
    for node, role in (("namesrv-0", "namesrv"), ("broker-a-0", "broker master"),
                       ("broker-a-1", "broker slave"), ("consumer-0", "consumer"), ("consumer-1", "consumer")):
        page.wait_for_selector(node_row(node, role=role, state="up"), timeout=SHOWN_MS * 2)
    lag_rows = f'.group[data-group="{GROUP}"] tr[data-queue^="{TOPIC}/broker-a/"]'
    page.wait_for_function(f"Array.from(document.querySelectorAll('{lag_rows}'))"
                           ".filter(r => /^[0-9]+$/.test(r.dataset.lag)).length === 4", timeout=SHOWN_MS * 2)
    assert page.inner_text('.topic[data-topic="LiveTopic"]').count("broker-a") >= 4

    with NemesisRunner(cluster, nemesis_history_path(cluster.run_dir), random.Random(1), SYSTEM_CLOCK,
                       topic=TOPIC, group=GROUP) as nemesis:
        isolated = nemesis.start(Partition("isolate", "consumer-0"))
        assert isolated.ok, isolated
        page.wait_for_selector('tr.active-fault[data-op="partition"][data-targets="consumer-0"]', timeout=SHOWN_MS)
        page.wait_for_selector('[data-link="consumer-0->broker-a-0"][data-mode="DROP"]', timeout=SHOWN_MS)
        page.wait_for_selector(node_row("consumer-0", state="up", fault="partitioned"), timeout=SHOWN_MS)

        killed = nemesis.start(Kill("consumer-1"))
        assert killed.ok, killed
        page.wait_for_selector(node_row("consumer-1", state="down", fault="killed"), timeout=SHOWN_MS)

        paused = nemesis.start(Pause("master"))
        assert paused.ok, paused
        page.wait_for_selector(node_row("broker-a-0", state="paused", fault="paused"), timeout=SHOWN_MS)
        # the paused master does not answer: said so, and the rest of the page stays
        page.wait_for_selector('tr[data-broker="broker-a/0"][data-answered="false"]', timeout=SHOWN_MS * 2)
        page.wait_for_selector('tr[data-broker="broker-a/1"][data-answered="true"]', timeout=SHOWN_MS)
        assert page.locator("#timeline .tl-row[data-open='true']").count() == 3
        if SCREENSHOT:
            page.screenshot(path=SCREENSHOT, full_page=True)

        seq = int(page.get_attribute("#last-update", "data-seq") or 0)
        answers_from = page.inner_text("#admin-age").split("(")[0]

        nemesis.recover_all()
        page.wait_for_function("document.querySelectorAll('tr.active-fault').length === 0", timeout=SHOWN_MS)
        assert page.locator("#timeline .tl-row[data-open='false']").count() == 3
        assert page.locator("[data-link]").count() == 0
        for node in ("broker-a-0", "consumer-1"):
            page.wait_for_selector(node_row(node, state="up", fault=""), timeout=SHOWN_MS)
    # the page kept polling all along: its stamp and the cluster's answers both moved on
    page.wait_for_function(f"Number(document.getElementById('last-update').dataset.seq) >= {seq + 2}",
                           timeout=SHOWN_MS)
    page.wait_for_function("document.getElementById('admin-age').textContent.split('(')[0] !== "
                           f"{answers_from!r}", timeout=SHOWN_MS)
    assert {r["op"] for r in read_nemesis(nemesis_history_path(cluster.run_dir))} >= {
        "partition", "kill", "pause", "heal", "restart", "resume"}
    assert page.locator("#fetch-error.hidden").count() == 1  # no failed poll is on show
