"""The admin HTTP listener (--admin-listen) answers health, readiness and Prometheus metrics."""

from __future__ import annotations

import urllib.request

import pytest

pytestmark = pytest.mark.e2e


def get(url: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()


def test_health_ready_and_metrics(server):
    assert get(server.admin_url + "/healthz")[0] == 200
    assert get(server.admin_url + "/readyz")[0] == 200
    status, ctype, body = get(server.admin_url + "/metrics")
    assert status == 200
    assert ctype.startswith("text/plain"), ctype
    assert "# TYPE " in body and "# HELP " in body, body[:500]
