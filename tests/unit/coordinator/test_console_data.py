"""What the web console reads (coordinator.admin.console over the /v1 API): the groups list's lag in seconds,
pause and rebalances in the last hour; the lag history per group and partition; the per-worker status (request
counts and latencies from the request histogram); and the pages themselves (escaping, security headers)."""

from __future__ import annotations

import math

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from coordinator.admin import console
from coordinator.admin.status import _quantile_bound, request_stats
from coordinator.observability.history import GroupHistory
from coordinator.observability.lag import WATCH_MS, LagHistory, OffsetHistory
from coordinator.observability.view import HOUR_MS, CoordinatorView
from coordinator.server.metrics import ServerMetrics

from .group.context import GroupTestContext
from .test_observability_collector import Clock, FakeDataPlane


class Wall:
    now_ms = 10 * HOUR_MS

    def __call__(self) -> int:
        return self.now_ms


def live_group() -> tuple[GroupTestContext, GroupHistory, CoordinatorView, Clock, Wall]:
    ctx = GroupTestContext()
    history = GroupHistory()
    ctx.shard.add_listener(history)
    result = ctx.two_members_stable("live")
    ctx.commit("live", {("foo", 0): 100, ("foo", 1): 40}, member_id=result.leader_id, generation_id=1)
    clock, wall = Clock(), Wall()
    dataplane = FakeDataPlane({("foo", 0): 100, ("foo", 1): 40})
    view = CoordinatorView(ctx.shard, dataplane, history, OffsetHistory(), monotonic=clock, wall_ms=wall)
    return ctx, history, view, clock, wall


def test_lag_history_follows_the_partitions_of_watched_groups_only():
    ctx, _, view, clock, wall = live_group()
    dataplane = view.dataplane
    view.sample()
    assert view.lag_history.series("live") == {}  # nobody looked: nothing is followed
    first = view.lag_history_json("live")  # the first look records a point at once
    assert [(s["topic"], s["partition"], len(s["points"])) for s in first] == [("foo", 0, 1), ("foo", 1, 1)]
    for step in range(1, 4):
        dataplane.ends[("foo", 0)] = 100 + 10 * step  # 10 records per sample, none consumed
        clock.now += 1
        wall.now_ms += 1000
        view.sample()
    series = view.lag_history_json("live")
    assert [lag for _, lag in series[0]["points"]] == [0, 10, 20, 30]
    assert [lag for _, lag in series[1]["points"]] == [0, 0, 0, 0]
    times = [t for t, _ in series[0]["points"]]
    assert times == sorted(times) and times[-1] == wall.now_ms

    wall.now_ms += WATCH_MS + 1  # nobody looked for longer than WATCH_MS: forgotten at the next sample
    view.sample()
    assert view.lag_history.series("live") == {} and view.lag_history.watched(wall.now_ms) == []
    assert view.lag_history_json("no-such-group") == []  # watched, but there is nothing to record


def test_lag_history_is_bounded_and_restarts_when_the_clock_goes_back():
    history = LagHistory(3)
    for t in range(5):
        history.record("g", "t", 0, t, t * 2)
    assert history.series("g") == {("t", 0): [(2, 4), (3, 6), (4, 8)]}  # bounded, oldest dropped
    history.record("g", "t", 0, 1, 1)  # the wall clock went back: start again rather than draw backwards
    assert history.series("g") == {("t", 0): [(1, 1)]}
    history.record("g", "u", 1, 5, 0)
    history.retain("g", [("u", 1)])  # offsets deleted: that series goes
    assert list(history.series("g")) == [("u", 1)]
    with pytest.raises(ValueError):
        LagHistory(1)


def test_groups_list_has_lag_seconds_pause_and_rebalances_in_the_last_hour():
    ctx, history, view, clock, wall = live_group()
    offsets = view.offset_history
    for t in range(0, 11):
        offsets.record("foo", 0, 100 + 15 * t, float(t))  # 15 records/s from offset 100
    view.dataplane.ends[("foo", 0)] = 250
    clock.now = 10.0
    wall.now_ms = max(r.started_wall_ms for r in history.timeline("live")) + 1000
    [entry] = view.list_json()
    assert entry["group_id"] == "live" and entry["members"] == 2 and entry["lag"] == 150
    assert entry["lag_seconds"] == pytest.approx(10.0 - 1 / 15, abs=1e-3)  # offset 100 was appended at 1/15 s
    assert entry["paused"] is None
    assert entry["rebalances_last_hour"] == len(history.timeline("live")) >= 1
    assert entry["last_rebalance_reason"] == "new_member"

    wall.now_ms += HOUR_MS + 1  # an hour later those rebalances no longer count
    assert view.list_json()[0]["rebalances_last_hour"] == 0
    assert history.rebalances_since("no-such-group", 0) == 0

    ctx.apply(ctx.shard.pause_group(ctx.token("pause"), "live", ["foo"]))
    [entry] = view.list_json()
    assert entry["paused"] == {"group": False, "topics": ["foo"]}


def test_request_stats_per_api_with_errors_mean_and_p99_bound():
    metrics = ServerMetrics()
    for _ in range(98):
        metrics.observe_request(12, 4, {"error_code": 0}, 0.0004)  # Heartbeat
    metrics.observe_request(12, 4, {"error_code": 27}, 0.0004)
    metrics.observe_request(12, 4, {"error_code": 0}, 0.2)
    metrics.observe_request(8, 9, {"error_code": 0}, 0.002)  # OffsetCommit
    stats = {s["api"]: s for s in request_stats(metrics)}
    assert set(stats) == {"Heartbeat", "OffsetCommit"}
    heartbeat = stats["Heartbeat"]
    assert heartbeat["count"] == 100 and heartbeat["errors"] == 1
    assert heartbeat["mean_ms"] == pytest.approx((99 * 0.4 + 200) / 100, abs=1e-3)
    assert heartbeat["p99_ms"] is not None and heartbeat["p99_ms"] <= 1.0  # 99 of 100 answered within 0.4 ms
    assert stats["OffsetCommit"]["count"] == 1 and stats["OffsetCommit"]["errors"] == 0

    assert _quantile_bound({}, 0.99) is None
    assert _quantile_bound({0.001: 0.0, math.inf: 0.0}, 0.99) is None
    assert _quantile_bound({0.001: 1.0, 0.01: 2.0, math.inf: 3.0}, 0.99) is None  # beyond the last bound


def test_pages_escape_the_group_id_and_send_a_strict_content_security_policy():
    text = console.render_page("group", 'Group <b>"x"</b>', '<script>alert(1)</script>"')
    assert "<script>alert" not in text and "&lt;script&gt;" in text and 'data-group="&lt;script' in text
    assert '<script type="module" src="/ui/static/console.js"></script>' in text
    assert 'aria-current="page"' in text and text.count("aria-current") == 1


async def test_console_routes_serve_pages_and_only_their_own_static_files():
    app = web.Application()
    console.add_routes(app)
    async with TestClient(TestServer(app)) as client:
        page = await client.get("/ui/groups/a%2Fb")
        assert page.status == 200 and page.content_type == "text/html"
        assert "script-src 'self'" in page.headers["Content-Security-Policy"]
        assert 'data-group="a/b"' in await page.text()
        script = await client.get("/ui/static/console.js")
        assert script.status == 200 and script.content_type == "text/javascript"
        assert "function groupsPage" in await script.text()
        assert (await client.get("/ui/static/console.css")).status == 200
        assert (await client.get("/ui/static/..%2F__init__.py")).status == 404
        assert (await client.get("/ui/static/other.js")).status == 404
        redirect = await client.get("/ui/", allow_redirects=False)
        assert redirect.status == 302 and redirect.headers["Location"] == "/ui"
        coordinator = await client.get("/ui/coordinator")
        assert 'data-page="coordinator"' in await coordinator.text()
