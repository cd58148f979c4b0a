"""The web console (/ui) in a real headless Chromium (Debian's `chromium`, driven by Playwright) against a real
server (two workers on this machine, so the pages also go through worker 0's relay) with a live group of stock
confluent-kafka consumers in their own processes.

Shown: the groups page lists the group live; the rebalance timeline shows the rebalance a member's LeaveGroup
caused, with reason `leave` and the member that went out; the Pause button (pressed from the keyboard) stops
consumption, records produced meanwhile show up as lag in the chart, and Resume gets them consumed exactly once;
the coordinator page shows every worker's shards and request rates. No page logs a script error. Screenshots of
each page are kept in $KGC_ARTIFACTS_DIR (default test-artifacts/) under console/.
"""

from __future__ import annotations

import os
import shutil
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.members import (
    Member,
    Members,
    admin_http,
    check_exactly_once,
    consumed_all,
    create_topic,
    produce_batch,
    wait_for,
)
from tests.support.server import REPO

pytestmark = pytest.mark.e2e

PARTITIONS = 3
CLIENT = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
    "partition.assignment.strategy": "range",
}
SERVER = {"metrics.lag.sample.interval.ms": 200}
QUIET_S = 3.0  # paused records would have been fetched by then (the members poll every 0.2 s)
ARTIFACTS = Path(os.environ.get("KGC_ARTIFACTS_DIR", REPO / "test-artifacts")) / "console"


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_path()
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("no chromium on PATH: scripts/install-system-deps.sh installs it")
        pytest.skip("no chromium on PATH (scripts/install-system-deps.sh installs it)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--disable-gpu"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))

    def on_console(msg: Any) -> None:
        # An answer with an error status (a 404 the page expects, a refused write) is logged by the browser as a
        # failed resource load: the page handles those; anything else logged as an error is a defect.
        if msg.type == "error" and not msg.text.startswith("Failed to load resource"):
            errors.append(f"console: {msg.text}")

    page.on("console", on_console)
    yield page
    context.close()
    assert not errors, errors


def screenshot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def start_member(members: Members, server: Any, name: str, group: str, topic: str) -> Member:
    return members.start("ck", name, server, group, topic, client_id=name, settings=CLIENT, max_runtime=200)


def records_after(members: list[Member], placed: dict[tuple[int, int], str]) -> set[str]:
    keys = set(placed.values())
    return {k for m in members for _p, _o, k in m.records() if k in keys}


def test_console_follows_a_live_group(members, server_factory, tmp_path, page):
    server = server_factory(SERVER)
    group, topic = "console-shop", "console-orders"
    create_topic(server, topic, PARTITIONS)
    ms = [start_member(members, server, f"shop-{i}", group, topic) for i in range(2)]
    batch1 = produce_batch(server, topic, 60, 71, tmp_path)
    wait_for(lambda: consumed_all(ms, batch1), 60, "batch 1 consumed", members.describe)

    # The groups page: the group with its two members, live (no reload of the page).
    page.goto(server.admin_url + "/ui")
    row = page.locator(f'tr[data-group="{group}"]')
    row.get_by_text("Stable").wait_for()
    wait_for(lambda: row.locator("td").nth(3).inner_text() == "2", 30, "two members on the groups page")
    assert "consumer / range" in row.inner_text()
    screenshot(page, "groups")

    # A member leaves: the timeline shows the rebalance with reason `leave` and who went out.
    page.locator(f'a:text-is("{group}")').click()
    page.wait_for_url(f"**/ui/groups/{group}")
    page.locator('#timeline-chart g.rebalance[data-reason="new_member"]').first.wait_for()
    everyone = list(ms)
    leaving = ms.pop(0)
    assert leaving.close() == 0
    page.locator('#timeline-chart g.rebalance[data-reason="leave"][data-outcome="stable"]').wait_for()
    leave_row = page.locator("#timeline table tbody tr", has_text="leave").first
    assert "(left)" in leave_row.inner_text(), leave_row.inner_text()
    page.locator("#group-state", has_text="Stable").wait_for()
    screenshot(page, "group-timeline")

    # Pause from the keyboard: focus the button, press Enter; the page says when it is in effect.
    page.get_by_role("button", name="Pause", exact=True).focus()
    page.keyboard.press("Enter")
    page.locator("#status", has_text="Paused the group: in effect").wait_for(timeout=45_000)
    status, data = admin_http(server, "GET", f"/v1/groups/{group}")
    assert status == 200 and data["paused"]["group"] is True, data
    page.locator("#group-paused", has_text="whole group").wait_for()

    # Records produced while paused are not consumed, and the lag chart follows them.
    before = len(ms[0].records())
    batch2 = produce_batch(server, topic, 45, 72, tmp_path)
    chart = page.locator("#lag-chart")
    wait_for(
        lambda: chart.get_attribute("data-latest-total") == "45",
        30,
        "the lag chart to show the 45 paused records",
        lambda: str(chart.get_attribute("data-latest-total")),
    )
    time.sleep(QUIET_S)
    assert not records_after(ms, batch2), "records produced while paused were consumed"
    assert len(ms[0].records()) == before
    assert int(chart.get_attribute("data-points")) > 3
    screenshot(page, "group-paused")

    # Resume: everything produced meanwhile is consumed exactly once, and the chart comes back to 0.
    page.get_by_role("button", name="Resume", exact=True).click()
    page.locator("#status", has_text="Resumed the group: in effect").wait_for(timeout=45_000)
    wait_for(lambda: consumed_all(ms, batch2), 60, "batch 2 consumed after resume", members.describe)
    check_exactly_once(everyone, batch1 | batch2)
    wait_for(
        lambda: chart.get_attribute("data-latest-total") == "0",
        30,
        "the lag chart back at 0",
        lambda: str(chart.get_attribute("data-latest-total")),
    )

    # The coordinator page: every worker with its shards and the requests it answers (rates after a refresh).
    page.get_by_role("link", name="Coordinator").click()
    page.wait_for_url("**/ui/coordinator")
    workers = page.locator("section.worker")
    workers.first.wait_for()
    assert workers.count() == server.workers
    status, data = admin_http(server, "GET", "/v1/coordinator")
    assert status == 200 and len(data["workers"]) == server.workers
    shard_count = sum(len(w["shards"]) for w in data["workers"])
    assert page.locator("ul.shards li").count() == shard_count
    assert page.locator("ul.shards li.shard-active").count() == shard_count
    heartbeat = page.locator("section.worker tr", has_text="Heartbeat").first
    wait_for(
        lambda: heartbeat.locator("td").nth(2).inner_text() not in ("…", ""),
        30,
        "a Heartbeat rate on the coordinator page",
    )
    screenshot(page, "coordinator")


def test_console_filters_sorts_and_needs_the_admin_token_to_write(server_factory, page):
    # Security on (an authorizer), so the API's writes need the token; ANONYMOUS may do anything over Kafka.
    token = "s3cret"
    server = server_factory(
        {
            **SERVER,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
            "admin.auth.token": token,
        }
    )
    topic = "console-ledger"
    create_topic(server, topic, 2)
    names = ["alpha", "beta/with slash", "gamma"]
    for name in names:  # Empty groups with commits, made by the API's offset reset
        path = f"/v1/groups/{urllib.parse.quote(name, safe='')}/reset-offsets"
        status, data = admin_http(server, "POST", path, {"to": "earliest", "topics": [topic]}, token=token)
        assert status == 200, data

    page.goto(server.admin_url + "/ui")
    assert page.title().startswith("Consumer groups")
    # Keyboard: the skip link is the first stop, then the navigation.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Groups"
    count = page.locator("#group-count")
    count.get_by_text("3 of 3 groups").wait_for()
    rows = page.locator("tbody tr[data-group]")
    assert [rows.nth(i).get_attribute("data-group") for i in range(3)] == names
    page.get_by_role("button", name="Group", exact=True).click()  # sorted by group already: now descending
    assert page.locator("th[aria-sort=descending]").inner_text().startswith("Group")
    assert [rows.nth(i).get_attribute("data-group") for i in range(3)] == names[::-1]
    page.fill("#filter", "with slash")
    count.get_by_text("1 of 3 groups").wait_for()
    page.fill("#filter", "ledger")  # a topic matches too
    count.get_by_text("3 of 3 groups").wait_for()

    # A group id with a slash has its page; a write without the token is refused with a clear message.
    page.locator('a:text-is("beta/with slash")').click()
    page.locator("#group-state", has_text="Empty").wait_for()
    page.get_by_role("button", name="Pause", exact=True).click()
    page.locator("#status.error").wait_for()
    assert "admin token" in page.locator("#status").inner_text()

    # With the token the same page previews and applies an offset reset.
    page.fill("#token", token)
    page.get_by_role("button", name="Use", exact=True).click()
    page.select_option("#reset-to", "latest")
    page.get_by_role("button", name="Preview").click()
    page.get_by_text("Dry run: 2 partitions would move to latest").wait_for()
    page.get_by_role("button", name="Apply reset").click()
    page.locator("#status", has_text="Reset 2 partitions of beta/with slash to latest").wait_for()
    # Pause one topic (the scope select), then the whole group.
    page.select_option("#scope", topic)
    page.get_by_role("button", name="Pause", exact=True).click()
    page.locator("#status", has_text=f"Paused topic {topic}").wait_for()
    status, data = admin_http(server, "GET", "/v1/groups/beta%2Fwith%20slash")
    assert status == 200 and data["paused"] == {"group": False, "topics": [topic]}, data
    page.select_option("#scope", "")
    page.get_by_role("button", name="Pause", exact=True).click()
    page.locator("#status", has_text="Paused the group").wait_for()
    status, data = admin_http(server, "GET", "/v1/groups/beta%2Fwith%20slash")
    assert status == 200 and data["paused"]["group"] is True, data
    screenshot(page, "group-empty")

    page.goto(server.admin_url + "/ui/groups/no%2Fsuch")
    page.get_by_text("Group no/such does not exist").wait_for()
