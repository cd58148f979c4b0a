"""The `groups` command line (coordinator.admin.cli): parsing, request bodies, tables."""

from __future__ import annotations

import pytest

from coordinator.admin import cli
from coordinator.cli import _parser


def parse(*argv: str):
    return _parser().parse_args(["groups", *argv])


def test_admin_and_json_go_before_or_after_the_subcommand(monkeypatch):
    monkeypatch.delenv("KGC_ADMIN_URL", raising=False)
    args = parse("list")
    assert (args.admin, args.json) == (cli.DEFAULT_ADMIN_URL, False)
    args = parse("--admin", "http://h:1", "--json", "describe", "g")
    assert (args.admin, args.json, args.group) == ("http://h:1", True, "g")
    args = parse("timeline", "g", "--admin", "http://h:2", "--limit", "5")
    assert (args.admin, args.limit) == ("http://h:2", 5)


def test_the_serve_command_is_unchanged():
    args = _parser().parse_args(["serve", "--listen", "127.0.0.1:0", "--set", "a=b"])
    assert args.command == "serve" and args.listen == "127.0.0.1:0" and args.set == ["a=b"]


def test_reset_bodies():
    assert cli.reset_body(parse("reset-offsets", "g", "--to-earliest")) == {"dry_run": True, "to": "earliest"}
    assert cli.reset_body(
        parse("reset-offsets", "g", "--to-offset", "7", "--topic", "t:0,1", "--execute")
    ) == {"dry_run": False, "to": "offset", "offset": 7, "topics": ["t:0,1"]}
    body = cli.reset_body(parse("reset-offsets", "g", "--to-datetime", "2024-05-01T12:00:00Z"))
    assert body["timestamp_ms"] == 1714564800000
    with pytest.raises(cli.CliError):
        cli.reset_body(parse("reset-offsets", "g", "--to-datetime", "yesterday"))
    with pytest.raises(SystemExit):
        parse("reset-offsets", "g")  # one --to-... is required


def test_tables_are_aligned(capsys):
    import argparse

    data = {
        "groups": [
            {
                "group_id": "billing",
                "state": "Stable",
                "protocol_type": "consumer",
                "protocol": "range",
                "generation": 12,
                "members": 3,
                "lag": 1234,
                "uncommitted_partitions": 0,
            },
            {
                "group_id": "etl",
                "state": "Empty",
                "protocol_type": "",
                "protocol": "",
                "generation": 0,
                "members": 0,
                "lag": None,
                "uncommitted_partitions": 2,
            },
        ]
    }
    cli.emit(argparse.Namespace(json=False), data, lambda: cli.render_list(data))
    lines = [line.rstrip() for line in capsys.readouterr().out.splitlines() if line.strip()]
    header, _, first, second = lines
    assert header.split() == [
        "GROUP",
        "STATE",
        "TYPE",
        "PROTOCOL",
        "GENERATION",
        "MEMBERS",
        "LAG",
        "UNCOMMITTED",
    ]
    assert first.index("Stable") == second.index("Empty") == header.index("STATE")
    assert len(first) == len(second) == len(header)  # right-aligned numbers end under their headers
    assert second.split()[2:4] == ["-", "-"]


def test_short_member_ids_and_durations():
    assert cli.short_member("ck-a-0d1e2f3a-1111-2222-3333-444455556666") == "ck-a-0d1e2f3a…"
    assert cli.short_member("custom") == "custom" and cli.short_member(None) == "-"
    assert [cli.duration(v) for v in (None, 12, 4500, 125000)] == ["-", "12ms", "4.5s", "2m05s"]


def test_tables_align_columns_and_print_text_as_it_is(capsys):
    rows = [["consumer-1-7c1d2e3f… [billing-1]", 12, None], ["m2", 3456, "orders"]]
    cli.emit(
        parse("list"), None, lambda: ["Group g:", cli.table(["MEMBER", "LAG", "TOPIC"], rows, right=["LAG"])]
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Group g:"
    width = len("consumer-1-7c1d2e3f… [billing-1]")
    assert lines[1] == "MEMBER".ljust(width) + "    LAG   TOPIC"
    assert set(lines[2]) == {"\u2500"} and len(lines[2]) == len(lines[4])
    # Square brackets are text, not markup: a static member's instance id stays visible.
    assert lines[3] == "consumer-1-7c1d2e3f… [billing-1]     12   -"
    assert lines[4] == "m2".ljust(width) + "   3456   orders"
