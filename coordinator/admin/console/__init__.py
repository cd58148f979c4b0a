"""The web console (/ui on the admin listener): pages that show groups, a group and the coordinator, live.

    GET /ui                    groups: state, protocol, members, lag and lag in seconds, rebalances in the last
                               hour, paused; filter, sort, live refresh
    GET /ui/groups/{group}     a group: members and assignments, lag per partition with its recent history as a
                               chart, the rebalance timeline on a time axis, pause and resume (by topic too),
                               offset reset with a dry-run preview
    GET /ui/coordinator        shards and their state, request rates and latencies, the group log, the data plane,
                               the workers
    GET /ui/static/{file}      the page's script and style sheet (served from this package)

Each page is a small HTML document; console.js fills it from the /v1 JSON API the CLI uses (with several
workers, worker 0's API already merges and relays), and redraws it every few seconds. The console's writes are
the API's writes, so they need what the API needs: the admin token (typed into the page, kept in the tab's
sessionStorage and sent as `Authorization: Bearer`) or the client certificate the browser presents. No build
step, no external fonts, scripts or CDNs: a strict Content-Security-Policy allows only this listener's own files.
"""

from __future__ import annotations

import html
import importlib.resources
import urllib.parse

from aiohttp import web

STATIC = {
    "console.js": "text/javascript",
    "console.css": "text/css",
}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def add_routes(app: web.Application) -> None:
    app.router.add_get("/ui", groups_page)
    app.router.add_get("/ui/", _to_groups)
    app.router.add_get("/ui/groups/{group}", group_page)
    app.router.add_get("/ui/coordinator", coordinator_page)
    app.router.add_get("/ui/static/{name}", static_file)


async def _to_groups(request: web.Request) -> web.Response:
    raise web.HTTPFound("/ui")


async def groups_page(request: web.Request) -> web.Response:
    return _page("groups", "Consumer groups")


async def group_page(request: web.Request) -> web.Response:
    group_id = urllib.parse.unquote(request.match_info["group"])
    return _page("group", f"Group {group_id}", group_id)


async def coordinator_page(request: web.Request) -> web.Response:
    return _page("coordinator", "Coordinator")


async def static_file(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    content_type = STATIC.get(name)
    if content_type is None:
        raise web.HTTPNotFound()
    body = importlib.resources.files(__package__).joinpath("static", name).read_bytes()
    return web.Response(
        body=body,
        content_type=content_type,
        charset="utf-8",
        headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"},
    )


def render_page(page: str, title: str, group_id: str | None = None) -> str:
    """The HTML of one console page: navigation, the tools (live refresh, admin token) and an empty main
    section that console.js fills."""
    current_attr = ' aria-current="page"'
    nav = "".join(
        f'<a href="{href}"{current_attr if current else ""}>{label}</a>'
        for href, label, current in (
            ("/ui", "Groups", page in ("groups", "group")),
            ("/ui/coordinator", "Coordinator", page == "coordinator"),
        )
    )
    group_attr = f' data-group="{html.escape(group_id)}"' if group_id is not None else ""
    return f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)} · Kafka group coordinator</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/ui/static/console.css">
</head>
<body data-page="{page}"{group_attr}>
<a class="skip" href="#main">Skip to content</a>
<header class="top">
  <span class="brand">Kafka group coordinator</span>
  <nav aria-label="Console">{nav}</nav>
  <div class="tools">
    <label class="live"><input type="checkbox" id="live" checked> Live refresh</label>
    <span id="updated" class="muted" aria-live="off"></span>
    <form id="token-form" class="token">
      <label for="token">Admin token</label>
      <input type="password" id="token" autocomplete="off" placeholder="for pause, resume, reset">
      <button type="submit">Use</button>
    </form>
  </div>
</header>
<main id="main" tabindex="-1">
  <h1 id="title">{html.escape(title)}</h1>
  <p id="status" role="status" aria-live="polite"></p>
  <div id="app" aria-busy="true"><p class="muted">Loading…</p></div>
  <noscript><p>This console needs JavaScript. The same data is in the JSON API under /v1.</p></noscript>
</main>
<script type="module" src="/ui/static/console.js"></script>
</body>
</html>
"""


def _page(page: str, title: str, group_id: str | None = None) -> web.Response:
    return web.Response(
        text=render_page(page, title, group_id),
        content_type="text/html",
        charset="utf-8",
        headers=SECURITY_HEADERS,
    )
