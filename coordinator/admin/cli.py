"""`kafka-group-coordinator groups ...`: the admin /v1 API from a terminal.

    groups list [--state S]                              every group: state, protocol, members, lag
    groups describe GROUP                                members, assignment, offsets and lag
    groups timeline GROUP [--limit N]                    the last rebalances and why they happened
    groups reset-offsets GROUP (--to-earliest | --to-latest | --to-datetime ISO | --to-timestamp MS |
                                --to-offset N) [--topic T[:P,P]]... [--execute]
    groups delete GROUP
    groups pause GROUP [--topic T]... [--no-wait]        withhold the group's (or these topics') partitions,
                                                         returning once every member has synced that
    groups resume GROUP [--topic T]... [--no-wait]       hand them out again
    groups settings GROUP [--set NAME=VALUE]... [--unset NAME]...
                                                         per-group settings (group.expansion.timeout.ms,
                                                         group.static.registration.timeout.ms)

`--admin URL` (default $KGC_ADMIN_URL, else http://127.0.0.1:9464) names the server's admin listener; `--json`
prints the API's JSON instead of tables. Like Kafka's kafka-consumer-groups, reset-offsets only shows what it
would do unless given --execute. pause and resume wait until every member has synced the change (--no-wait: until
it is recorded). Exit status: 0 done, 1 the server refused (the reason is printed), 2 bad usage or the server
cannot be reached, 3 a pause or resume not yet in effect after --timeout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from typing import Any

DEFAULT_ADMIN_URL = "http://127.0.0.1:9464"
TIMEOUT_S = 30.0


class CliError(Exception):
    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def add_parser(sub: Any) -> None:
    """Add `groups` and its subcommands to the top-level subparsers."""

    def options(admin_default: Any, json_default: Any) -> argparse.ArgumentParser:
        # --admin and --json go before or after the subcommand; the subcommand's copies default to SUPPRESS so
        # they do not overwrite what was given before it (argparse shares a parent's actions, hence two copies).
        parser = argparse.ArgumentParser(add_help=False)
        parser.add_argument(
            "--admin",
            default=admin_default,
            help=f"admin listener URL (default: $KGC_ADMIN_URL or {DEFAULT_ADMIN_URL})",
        )
        parser.add_argument(
            "--json", action="store_true", default=json_default, help="print the API's JSON instead of tables"
        )
        return parser

    common = options(argparse.SUPPRESS, argparse.SUPPRESS)
    admin_url = os.environ.get("KGC_ADMIN_URL", DEFAULT_ADMIN_URL)
    groups = sub.add_parser(
        "groups", parents=[options(admin_url, False)], help="inspect and manage consumer groups"
    )
    actions = groups.add_subparsers(dest="action", required=True)
    listing = actions.add_parser("list", parents=[common], help="list groups")
    listing.add_argument("--state", help="only groups in these states (comma-separated)")
    describe = actions.add_parser("describe", parents=[common], help="describe a group")
    describe.add_argument("group")
    timeline = actions.add_parser("timeline", parents=[common], help="a group's last rebalances")
    timeline.add_argument("group")
    timeline.add_argument("--limit", type=int, default=None, help="how many (default: all kept)")
    reset = actions.add_parser("reset-offsets", parents=[common], help="reset the offsets of an Empty group")
    reset.add_argument("group")
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-datetime", metavar="ISO", help="e.g. 2024-05-01T12:00:00Z (local time if no zone)")
    to.add_argument("--to-timestamp", metavar="MS", type=int, help="milliseconds since the epoch")
    to.add_argument("--to-offset", metavar="N", type=int)
    reset.add_argument(
        "--topic",
        action="append",
        metavar="T[:P,P]",
        help="topic, or topic:partitions (repeatable; default: the topics the group committed)",
    )
    reset.add_argument("--execute", action="store_true", help="write the offsets (default: only show them)")
    delete = actions.add_parser("delete", parents=[common], help="delete an Empty group and its offsets")
    delete.add_argument("group")
    for name, text in (
        ("pause", "pause a consumer group, or some of its topics, from the coordinator"),
        ("resume", "resume a paused group, or some of its topics"),
    ):
        action = actions.add_parser(name, parents=[common], help=text)
        action.add_argument("group")
        action.add_argument(
            "--topic",
            action="append",
            metavar="T",
            help="only this topic (repeatable; default: the whole group)",
        )
        action.add_argument(
            "--no-wait",
            action="store_true",
            help="return once the change is recorded, not once every member has synced it",
        )
        action.add_argument(
            "--timeout",
            type=float,
            default=30.0,
            metavar="SECONDS",
            help="how long to wait for every member to sync the change (default 30); exit 3 if they have not",
        )
    group_settings = actions.add_parser(
        "settings", parents=[common], help="show or change a group's own settings"
    )
    group_settings.add_argument("group")
    group_settings.add_argument(
        "--set",
        dest="set_values",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a per-group setting (repeatable)",
    )
    group_settings.add_argument(
        "--unset",
        action="append",
        default=[],
        metavar="NAME",
        help="drop the group's own value: the server's applies again (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    client = AdminClient(args.admin)
    try:
        if args.action == "list":
            query = {"state": args.state} if args.state else None
            data = client.get("/v1/groups", query)
            emit(args, data, lambda: render_list(data))
        elif args.action == "describe":
            data = client.get(f"/v1/groups/{quote(args.group)}")
            emit(args, data, lambda: render_describe(data))
        elif args.action == "timeline":
            data = client.get(
                f"/v1/groups/{quote(args.group)}/timeline", {"limit": str(args.limit)} if args.limit else None
            )
            emit(args, data, lambda: render_timeline(data))
        elif args.action == "reset-offsets":
            body = reset_body(args)
            data = client.post(f"/v1/groups/{quote(args.group)}/reset-offsets", body)
            emit(args, data, lambda: render_reset(data))
        elif args.action == "delete":
            data = client.delete(f"/v1/groups/{quote(args.group)}")
            emit(args, data, lambda: [f"Deleted group {data['group_id']}."])
        elif args.action in ("pause", "resume"):
            body = {"topics": list(args.topic)} if args.topic else {}
            if args.timeout < 0:
                raise CliError("--timeout must be >= 0", 2)
            query = {"wait": "false"} if args.no_wait else {"timeout_ms": str(round(args.timeout * 1000))}
            data = client.post(
                f"/v1/groups/{quote(args.group)}/{args.action}",
                body,
                query,
                waits_s=0 if args.no_wait else args.timeout,
            )
            emit(args, data, lambda: render_pause(data))
            if data.get("in_effect") is False and not args.no_wait:
                return 3
        elif args.action == "settings":
            changes = settings_body(args)
            if changes:
                data = client.put(f"/v1/groups/{quote(args.group)}/settings", changes)
            else:
                data = client.get(f"/v1/groups/{quote(args.group)}")
            emit(args, data, lambda: render_settings(data))
    except CliError as exc:
        print(f"kafka-group-coordinator: {exc}", file=sys.stderr)
        return exc.status
    return 0


def quote(group: str) -> str:
    return urllib.parse.quote(group, safe="")


def settings_body(args: argparse.Namespace) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    for item in args.set_values:
        name, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            changes[name.strip()] = int(value)
        except ValueError:
            raise CliError(f"--set: expected NAME=INTEGER, got {item!r}", 2) from None
    for name in args.unset:
        changes[name.strip()] = None
    return changes


def reset_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {"dry_run": not args.execute}
    if args.topic:
        body["topics"] = list(args.topic)
    if args.to_earliest:
        body["to"] = "earliest"
    elif args.to_latest:
        body["to"] = "latest"
    elif args.to_offset is not None:
        body.update(to="offset", offset=args.to_offset)
    elif args.to_timestamp is not None:
        body.update(to="timestamp", timestamp_ms=args.to_timestamp)
    else:
        try:
            when = datetime.datetime.fromisoformat(args.to_datetime.replace("Z", "+00:00"))
        except ValueError:
            raise CliError(f"--to-datetime: not an ISO 8601 date and time: {args.to_datetime!r}", 2) from None
        if when.tzinfo is None:
            when = when.astimezone()
        body.update(to="timestamp", timestamp_ms=int(when.timestamp() * 1000))
    return body


class AdminClient:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    def get(self, path: str, query: dict[str, str] | None = None) -> Any:
        if query:
            path += "?" + urllib.parse.urlencode(query)
        return self._call("GET", path)

    def post(self, path: str, body: Any, query: dict[str, str] | None = None, waits_s: float = 0) -> Any:
        if query:
            path += "?" + urllib.parse.urlencode(query)
        return self._call("POST", path, body, TIMEOUT_S + waits_s)

    def put(self, path: str, body: Any) -> Any:
        return self._call("PUT", path, body)

    def delete(self, path: str) -> Any:
        return self._call("DELETE", path)

    def _call(self, method: str, path: str, body: Any = None, timeout_s: float = TIMEOUT_S) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.base_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return json.load(response)
        except urllib.error.HTTPError as exc:
            with exc:
                try:
                    error = json.load(exc)
                except ValueError:
                    raise CliError(f"{method} {path}: HTTP {exc.code} {exc.reason}") from None
            raise CliError(f"{error.get('message', '')} ({error.get('error', exc.code)})") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise CliError(f"cannot reach the admin listener at {self.base_url}: {reason}", 2) from None


# -- rendering -----------------------------------------------------------------------------------------------


def emit(args: argparse.Namespace, data: Any, render: Any) -> None:
    if args.json:
        print(json.dumps(data, indent=2))
        return
    bold = sys.stdout.isatty()
    for block in render():
        print(block.render(bold) if isinstance(block, Table) else block)


class Table:
    """Columns under a ruled header, `right` ones right-aligned; text is printed as it is (no markup)."""

    GAP = "   "

    def __init__(
        self, columns: Iterable[str], rows: Iterable[Iterable[Any]], right: Iterable[str] = ()
    ) -> None:
        self.columns = list(columns)
        self.rows = [["-" if v is None or v == "" else str(v) for v in row] for row in rows]
        self.right = set(right)

    def render(self, bold: bool = False) -> str:
        widths = [max([len(c), *(len(row[i]) for row in self.rows)]) for i, c in enumerate(self.columns)]

        def line(cells: list[str]) -> str:
            return self.GAP.join(
                cell.rjust(w) if column in self.right else cell.ljust(w)
                for cell, w, column in zip(cells, widths, self.columns, strict=True)
            ).rstrip()

        header = line(self.columns)
        if bold:
            header = f"\x1b[1m{header}\x1b[0m"
        rule = "\u2500" * (sum(widths) + len(self.GAP) * (len(widths) - 1))
        return "\n".join([header, rule, *(line(row) for row in self.rows)])


def table(columns: Iterable[str], rows: Iterable[Iterable[Any]], right: Iterable[str] = ()) -> Table:
    return Table(columns, rows, right)


_MEMBER_ID = re.compile(r"^(?P<prefix>.*)-(?P<uuid>[0-9a-f]{8})(-[0-9a-f]{4}){3}-[0-9a-f]{12}$")


def short_member(member_id: str | None) -> str:
    """`client-7c1d…` for the usual `CLIENTID-UUID` member ids."""
    if not member_id:
        return "-"
    match = _MEMBER_ID.match(member_id)
    return f"{match['prefix']}-{match['uuid']}…" if match else member_id


def who(member: dict[str, Any] | None) -> str:
    if member is None:
        return "-"
    name = short_member(member.get("member_id"))
    if member.get("group_instance_id"):
        name += f" [{member['group_instance_id']}]"
    return name


def duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m{seconds:02d}s"


def when(iso: str | None) -> str:
    if not iso:
        return "-"
    return iso.replace("+00:00", "Z").replace("T", " ")


def render_list(data: dict[str, Any]) -> list[Any]:
    rows = [
        (
            g["group_id"],
            g["state"],
            g["protocol_type"],
            g["protocol"],
            g["generation"],
            g["members"],
            g["lag"],
            g["uncommitted_partitions"],
        )
        for g in data["groups"]
    ]
    if not rows:
        return ["No groups."]
    return [
        table(
            ["GROUP", "STATE", "TYPE", "PROTOCOL", "GENERATION", "MEMBERS", "LAG", "UNCOMMITTED"],
            rows,
            right=["GENERATION", "MEMBERS", "LAG", "UNCOMMITTED"],
        )
    ]


def _assignment(member: dict[str, Any]) -> str:
    if member["assignment"] is None:
        return f"({member['assignment_bytes']} bytes)" if member["assignment_bytes"] else "-"
    parts = (f"{a['topic']}:{','.join(map(str, a['partitions']))}" for a in member["assignment"])
    return " ".join(parts) or "-"


def render_describe(data: dict[str, Any]) -> list[Any]:
    last = data.get("last_rebalance")
    last_text = "-"
    if last:
        last_text = (
            f"generation {last['generation'] if last['generation'] is not None else '-'}, "
            f"{last['reason']}, {last['outcome']}, {duration(last['duration_ms'])}, "
            f"at {when(last['started_at'])}"
        )
    lag = data["lag"]
    header = [
        f"Group {data['group_id']}: {data['state']}, generation {data['generation']}, "
        f"protocol {data['protocol_type'] or '-'}/{data['protocol'] or '-'}, "
        f"{len(data['members'])} members, lag {lag if lag is not None else '-'}",
        f"Leader: {short_member(data['leader'])}",
        f"Last rebalance: {last_text}",
        f"Paused: {paused_text(data['paused'])}",
        "",
    ]
    blocks: list[Any] = list(header)
    if data["members"]:
        blocks.append(
            table(
                ["MEMBER", "INSTANCE", "CLIENT-ID", "HOST", "SESSION", "REBALANCE", "ASSIGNMENT"],
                [
                    (
                        short_member(m["member_id"]) + (" *" if m["leader"] else ""),
                        m["group_instance_id"],
                        m["client_id"],
                        m["client_host"],
                        duration(m["session_timeout_ms"]),
                        duration(m["rebalance_timeout_ms"]),
                        _assignment(m),
                    )
                    for m in data["members"]
                ],
                right=["SESSION", "REBALANCE"],
            )
        )
        blocks.append("")
    if data["offsets"]:
        blocks.append(
            table(
                ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "LAG-SECONDS", "CONSUMER"],
                [
                    (
                        o["topic"],
                        o["partition"],
                        o["committed_offset"],
                        o["log_end_offset"],
                        o["lag"],
                        f"{o['lag_seconds']:.1f}" if o["lag_seconds"] is not None else None,
                        short_member(o["member_id"]) if o["member_id"] else None,
                    )
                    for o in data["offsets"]
                ],
                right=["PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "LAG-SECONDS"],
            )
        )
    uncommitted = {t: n for t, n in data["uncommitted_partitions"].items() if n}
    if uncommitted:
        blocks.append(
            "Partitions without a committed offset: "
            + ", ".join(f"{t} ({n})" for t, n in sorted(uncommitted.items()))
        )
    return blocks


def render_pause(data: dict[str, Any]) -> list[Any]:
    lines = [data["message"] + ".", f"Paused: {paused_text(data['paused'])}"]
    if "in_effect" not in data:  # --no-wait
        return lines
    seconds = data["waited_ms"] / 1000
    if data["in_effect"]:
        if data["state"] == "Dead" or not data.get("members_synced"):
            lines.append(f"In effect: the group has no members (waited {seconds:.1f}s).")
        else:
            synced = data["members_synced"]
            lines.append(
                f"In effect: {synced} member{'s' if synced != 1 else ''} synced generation "
                f"{data['generation']} (waited {seconds:.1f}s)."
            )
    else:
        pending = ", ".join(short_member(m) for m in data["pending_members"]) or "-"
        lines.append(
            f"Not in effect after {seconds:.1f}s: the group is {data['state']} (generation "
            f"{data['generation']}); still to sync it: {pending}."
        )
    return lines


def paused_text(paused: Any) -> str:
    """`the whole group`, `the whole group but audit`, `orders, payments` or `-` (also reads the older list
    form)."""
    if isinstance(paused, dict):
        if paused.get("group"):
            resumed = paused.get("resumed_topics")
            return "the whole group" + (f" but {', '.join(resumed)}" if resumed else "")
        return ", ".join(paused.get("topics") or ()) or "-"
    return ", ".join(paused or ()) or "-"


def render_settings(data: dict[str, Any]) -> list[Any]:
    own = data.get("settings") or {}
    effective = data.get("effective_settings") or {}
    rows = [(name, value, "group" if name in own else "server") for name, value in sorted(effective.items())]
    return [f"Group {data['group_id']}:", table(["SETTING", "VALUE", "FROM"], rows, right=["VALUE"])]


def _members(members: list[dict[str, Any]], with_cause: bool = False) -> str:
    names = []
    for m in members:
        name = who(m)
        if with_cause and m.get("cause"):
            name += f" ({m['cause']})"
        names.append(name)
    return ", ".join(names) or "-"


def render_timeline(data: dict[str, Any]) -> list[Any]:
    rebalances = data["rebalances"]
    title = f"Group {data['group_id']}: {data['state']}, generation {data['generation']}"
    if not rebalances:
        return [title, "No rebalances recorded since the server started."]
    rows = []
    for r in rebalances:
        took = r["duration_ms"] if r["outcome"] != "in_progress" else r.get("elapsed_ms")
        rows.append(
            (
                r["generation"] if r["generation"] is not None else "-",
                when(r["started_at"]),
                duration(took),
                r["reason"],
                who(r["triggered_by"]),
                r["client_reason"],
                _members(r["members_in"]),
                _members(r["members_out"], with_cause=True),
                r["outcome"],
            )
        )
    columns = [
        "GEN",
        "STARTED",
        "DURATION",
        "REASON",
        "TRIGGERED-BY",
        "CLIENT-REASON",
        "IN",
        "OUT",
        "OUTCOME",
    ]
    return [title, "", table(columns, rows, right=["GEN", "DURATION"])]


def render_reset(data: dict[str, Any]) -> list[Any]:
    blocks: list[Any] = [
        table(
            ["TOPIC", "PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET"],
            [(o["topic"], o["partition"], o["previous"], o["offset"]) for o in data["offsets"]],
            right=["PARTITION", "PREVIOUS-OFFSET", "NEW-OFFSET"],
        )
    ]
    if data["dry_run"]:
        blocks.append("Dry run: nothing was written. Add --execute to reset the offsets.")
    else:
        blocks.append(f"Offsets of group {data['group_id']} reset ({data['to']}).")
    return blocks
