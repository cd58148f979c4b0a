#!/usr/bin/env python3
"""Render the README's client compatibility table from the compatibility test results.

The tests in tests/compat write one JSON file per client into tests/compat/results/latest/ (git-ignored) as
they run: version, the API versions the server saw from that client (recorded by the proxy in front of the
test server), and pass / fail / n.a. / n.t. per scenario (tests/compat/compat_matrix.py). This script

  1. merges those into the committed tests/compat/results/compat.json (a client's scenarios from the latest
     run replace the committed ones; clients not run keep their committed results), unless --no-merge;
  2. renders the tables between `<!-- compat-table:start -->` and `<!-- compat-table:end -->` in README.md.

    .venv/bin/python -m pytest -q tests/compat && .venv/bin/python scripts/compat_table.py
    scripts/compat_table.py --check      # exit 1 if README.md is not what compat.json renders (no writes)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "tests" / "compat" / "results"
COMMITTED = RESULTS / "compat.json"
README = REPO / "README.md"
START, END = "<!-- compat-table:start -->", "<!-- compat-table:end -->"

sys.path.insert(0, str(REPO / "tests" / "compat"))
from compat_matrix import CLIENTS, SCENARIOS  # noqa: E402

# Columns of the API version table, in this order; other APIs a client used are listed after them.
API_ORDER = [
    "ApiVersions",
    "Metadata",
    "FindCoordinator",
    "JoinGroup",
    "SyncGroup",
    "Heartbeat",
    "LeaveGroup",
    "OffsetCommit",
    "OffsetFetch",
    "Fetch",
    "ListOffsets",
    "DescribeGroups",
    "ListGroups",
    "DeleteGroups",
    "OffsetDelete",
    "Produce",
    "CreateTopics",
    "InitProducerId",
]
CELL = {"pass": "pass", "fail": "**FAIL**", "n.a.": "n.a.", "n.t.": "n.t."}


def load_committed() -> dict:
    if COMMITTED.exists():
        return json.loads(COMMITTED.read_text())
    return {"clients": {}}


def merge(committed: dict, latest_dir: Path) -> dict:
    for path in sorted(latest_dir.glob("*.json")):
        new = json.loads(path.read_text())
        key = new["client"]
        old = committed["clients"].get(key, {})
        merged = dict(old)
        # A run that only marked scenarios n.a. (or n.t.) did not run the client: its version and date stay.
        ran = any(
            r["result"] in ("pass", "fail")
            for r in [*new.get("scenarios", {}).values(), *new.get("front", {}).values()]
        )
        kept = {"scenarios", "api_versions", "notes", "front"} | (set() if ran else {"recorded_at"})
        merged.update({k: v for k, v in new.items() if k not in kept and v not in (None, "")})
        merged["scenarios"] = {**old.get("scenarios", {}), **new.get("scenarios", {})}
        merged["front"] = {**old.get("front", {}), **new.get("front", {})}
        merged["api_versions"] = new.get("api_versions") or old.get("api_versions", {})
        merged["notes"] = list(dict.fromkeys([*new.get("notes", []), *old.get("notes", [])]))
        committed["clients"][key] = merged
    return committed


def versions_cell(api: str, versions: list[int]) -> str:
    if not versions:
        return ""
    if len(versions) == 1:
        return str(versions[0])
    if api == "ApiVersions":
        # KIP-511: a client sends its newest ApiVersions first; an UNSUPPORTED_VERSION answer makes it retry
        # with the version the answer names. The highest version seen is the refused try.
        return f"{versions[-2]} ({versions[-1]} refused)"
    return ",".join(str(v) for v in versions)


def front_cell(key: str, front: dict, footnote) -> str:
    """The same scenarios through a server in front of a Kafka cluster: how many passed of those that apply,
    and which failed (with the first failure's detail as a footnote)."""
    applicable = {s: r for s, r in front.items() if r["result"] in ("pass", "fail")}
    if not applicable:
        return "n.t."
    failed = [s for s in SCENARIOS if s in applicable and applicable[s]["result"] == "fail"]
    passed = len(applicable) - len(failed)
    if not failed:
        return f"pass ({passed}/{len(applicable)})"
    first = applicable[failed[0]]
    names = ", ".join(SCENARIOS[s] for s in failed)
    return f"**FAIL**: {names}" + footnote(f"{CLIENTS[key]['name']} through the front: {first['detail']}")


def render(data: dict) -> str:
    clients = [(k, data["clients"][k]) for k in CLIENTS if k in data["clients"]]
    notes: list[str] = []

    def footnote(text: str) -> str:
        if text not in notes:
            notes.append(text)
        return f"<sup>{notes.index(text) + 1}</sup>"

    lines = [
        "| client | version | from | " + " | ".join(SCENARIOS.values()) + " | through the front |",
        "|---|---|---|" + "---|" * (len(SCENARIOS) + 1),
    ]
    for key, e in clients:
        cells = []
        for s in SCENARIOS:
            r = e.get("scenarios", {}).get(s)
            if r is None:
                cells.append("n.t.")
                continue
            cell = CELL[r["result"]]
            if r.get("detail"):
                cell += footnote(f"{CLIENTS[key]['name']}: {r['detail']}")
            cells.append(cell)
        cells.append(front_cell(key, e.get("front", {}), footnote))
        lines.append(
            f"| {CLIENTS[key]['name']} | {e.get('version') or '?'} | {e.get('registry', '')} | "
            + " | ".join(cells)
            + " |"
        )
    out = lines + [""]
    if notes:
        out += [f"{i}. {n}" for i, n in enumerate(notes, 1)] + [""]

    used = {api for _k, e in clients for api in e.get("api_versions", {})}
    apis = [a for a in API_ORDER if a in used] + sorted(used - set(API_ORDER))
    out += [
        "API versions each client used (the request headers the server saw from its client.id):",
        "",
        "| client | " + " | ".join(apis) + " |",
        "|---|" + "---|" * len(apis),
    ]
    for key, e in clients:
        av = e.get("api_versions", {})
        out.append(
            f"| {CLIENTS[key]['name']} | " + " | ".join(versions_cell(a, av.get(a, [])) for a in apis) + " |"
        )
    extra = [f"- {CLIENTS[k]['name']}: {n}" for k, e in clients for n in e.get("notes", [])]
    if extra:
        out += ["", *extra]
    dates = sorted(e["recorded_at"] for _k, e in clients if e.get("recorded_at"))
    if dates:
        days = {d[:10] for d in dates}
        when = f"on {dates[0][:10]}" if len(days) == 1 else f"{dates[0][:10]} to {dates[-1][:10]}"
        out += [
            "",
            f"Results recorded {when} by `tests/compat` "
            "(`scripts/compat_table.py` renders this table from `tests/compat/results/compat.json`).",
        ]
    return "\n".join(out)


def replace_section(text: str, table: str) -> str:
    if START not in text or END not in text:
        raise SystemExit(f"README.md has no {START} ... {END} markers")
    head, rest = text.split(START, 1)
    _old, tail = rest.split(END, 1)
    return f"{head}{START}\n{table}\n{END}{tail}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-merge", action="store_true", help="render compat.json as committed")
    ap.add_argument("--latest", type=Path, default=RESULTS / "latest", help="results of the latest run")
    ap.add_argument("--check", action="store_true", help="exit 1 if README.md is out of date; write nothing")
    args = ap.parse_args()
    data = load_committed()
    if not args.no_merge and not args.check and args.latest.is_dir():
        data = merge(data, args.latest)
        COMMITTED.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    text = README.read_text()
    new = replace_section(text, render(data))
    if args.check:
        if new != text:
            print(
                "README.md's compatibility table is out of date: run scripts/compat_table.py", file=sys.stderr
            )
            return 1
        return 0
    if new != text:
        README.write_text(new)
    print(f"README.md: compatibility table for {len(data['clients'])} clients")
    return 0


if __name__ == "__main__":
    sys.exit(main())
