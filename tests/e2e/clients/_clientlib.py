"""Shared plumbing for the e2e client scripts (each script runs in its own process).

Message files are JSON: a list of {"key": hex|null, "value": hex|null, "headers": [[name, hex|null], ...],
"timestamp": ms|null, "partition": int|null}. Results are JSON too, printed on stdout or written to --output.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def hx(data: bytes | bytearray | memoryview | None) -> str | None:
    return None if data is None else bytes(data).hex()


def unhx(text: str | None) -> bytes | None:
    return None if text is None else bytes.fromhex(text)


def norm_headers(headers: Any) -> list[list[Any]]:
    """Client header shapes (None, list or tuple of (str, bytes|None)) -> [[name, hex|null], ...]."""
    if not headers:
        return []
    return [[name if isinstance(name, str) else bytes(name).decode(), hx(value)] for name, value in headers]


def load_messages(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return json.load(f)


def write_json(path: str | None, data: Any) -> None:
    if path in (None, "-"):
        json.dump(data, sys.stdout)
        sys.stdout.write("\n")
        sys.stdout.flush()
    else:
        with open(path, "w") as f:
            json.dump(data, f)


def record(
    partition: int, offset: int, key: Any, value: Any, headers: Any, timestamp: int | None
) -> dict[str, Any]:
    return {
        "partition": partition,
        "offset": offset,
        "key": hx(key),
        "value": hx(value),
        "headers": norm_headers(headers),
        "timestamp": timestamp,
    }


def kv_pairs(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        name, _, value = item.partition("=")
        out[name] = value
    return out


def parser(description: str) -> tuple[argparse.ArgumentParser, Any]:
    p = argparse.ArgumentParser(description=description)
    sub = p.add_subparsers(dest="cmd", required=True)
    return p, sub


def add_common(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
    sp.add_argument("--bootstrap", required=True)
    sp.add_argument("--output", default="-")
    sp.add_argument("--timeout", type=float, default=30.0, help="overall deadline of the operation, seconds")
    sp.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="extra client config")
    return sp
