"""A real Prometheus (Debian's `prometheus` package, see scripts/install-system-deps.sh) scrapes /metrics every
second, and PromQL through its HTTP API returns the lag of a real group; `promtool check metrics` finds no
problem in the exposition. Missing binaries fail the test: they are part of the project's declared setup."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from obs_support import get_json, metrics_text, produce, wait_until

from tests.support.server import REPO

pytestmark = pytest.mark.e2e

TOPIC, GROUP = "obs-prom", "obs-prom-group"


def need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(
            f"{tool} is not installed: run scripts/install-system-deps.sh (Debian's prometheus package)",
            pytrace=False,
        )
    return path


_LISTENING_ON = re.compile(r'msg="Listening on" address=127\.0\.0\.1:(\d+)')


class Prometheus:
    """Prometheus on 127.0.0.1:0: it picks a free port and logs it ("Listening on"), so no port is chosen here and
    bound later by someone else."""

    def __init__(self, base: Path, target: str) -> None:
        self.base = base
        self._port: int | None = None
        config = base / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: kgc\n    static_configs:\n"
            f"      - targets: ['{target}']\n"
        )
        (base / "data").mkdir()
        self.log = base / "prometheus.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    need("prometheus"),
                    f"--config.file={config}",
                    f"--storage.tsdb.path={base / 'data'}",
                    "--web.listen-address=127.0.0.1:0",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=base,
            )

    @property
    def port(self) -> int:
        """The port it listens on, once its log says so (up to 60 s)."""
        deadline = time.monotonic() + 60
        while self._port is None:
            found = _LISTENING_ON.search(self.log.read_text(errors="replace"))
            if found:
                self._port = int(found[1])
            elif self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"Prometheus did not start listening:\n{self.output()}", pytrace=False)
            else:
                time.sleep(0.05)
        return self._port

    def query_strict(self, promql: str) -> dict:
        """The whole answer; an invalid expression fails the test with Prometheus's error."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return json.load(resp)
        except urllib.error.HTTPError as exc:
            with exc:
                pytest.fail(f"Prometheus refused {promql!r}: {exc.read().decode()}", pytrace=False)

    def query(self, promql: str) -> list[dict]:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                body = json.load(resp)
        except OSError:
            return []
        assert body["status"] == "success", body
        return body["data"]["result"]

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator:
    started: list[Prometheus] = []

    def start(target: str) -> Prometheus:
        prom = Prometheus(tmp_path, target)
        started.append(prom)
        return prom

    yield start
    for prom in started:
        prom.stop()


def test_prometheus_scrapes_lag_and_promtool_accepts_the_exposition(
    server_factory, members, prometheus_factory
):
    need("prometheus")
    promtool = need("promtool")
    server = server_factory({"metrics.lag.sample.interval.ms": 200})
    ends = produce(server, TOPIC, 2, 10)
    member = members.start("prom-a", server, GROUP, TOPIC, "--quota", "7")
    wait_until(
        lambda: member.events("commit") and member.events("commit")[-1]["processed"] == 7,
        60,
        "the member to commit 7 records",
        members.describe,
    )
    member.close()
    committed = member.committed()
    expected = {str(p): float(ends[p] - o) for p, o in committed.items()}

    prom = prometheus_factory(server.admin_url.removeprefix("http://"))

    def scraped() -> dict[str, float] | None:
        result = prom.query(f'kafka_consumergroup_lag{{consumergroup="{GROUP}",topic="{TOPIC}"}}')
        got = {r["metric"]["partition"]: float(r["value"][1]) for r in result}
        return got if got == expected else None

    wait_until(scraped, 60, f"Prometheus to return lag {expected}", prom.output)
    total = prom.query(f'sum(kafka_consumergroup_lag_sum{{consumergroup="{GROUP}"}})')
    assert float(total[0]["value"][1]) == sum(expected.values())
    up = prom.query('up{job="kgc"}')
    assert up and up[0]["value"][1] == "1", up
    status, _ = get_json(server, f"/v1/groups/{GROUP}")
    assert status == 200

    check = subprocess.run(
        [promtool, "check", "metrics"], input=metrics_text(server).encode(), capture_output=True, timeout=30
    )
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), (
        check.returncode,
        check.stdout.decode(),
        check.stderr.decode(),
    )

    # The shipped scrape config and alert rules are valid, and every dashboard and alert expression runs.
    deploy = REPO / "deploy"
    config = subprocess.run(
        [promtool, "check", "config", str(deploy / "prometheus.yml")], capture_output=True, timeout=30
    )
    assert config.returncode == 0, config.stdout.decode() + config.stderr.decode()
    dashboard = json.loads((deploy / "grafana" / "kafka-group-coordinator.json").read_text())
    expressions = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", ())]
    rules = (deploy / "prometheus-rules.yml").read_text()
    expressions += [line.split("expr:", 1)[1].strip() for line in rules.splitlines() if "expr:" in line]
    assert len(expressions) > 20
    for expr in expressions:
        promql = expr.replace("$__rate_interval", "1m").replace("$group", ".*")
        assert prom.query_strict(promql)["status"] == "success", promql
    lag_panel = prom.query_strict(
        f'sum by (consumergroup, topic) (kafka_consumergroup_lag_sum{{consumergroup=~"{GROUP}"}})'
    )
    assert float(lag_panel["data"]["result"][0]["value"][1]) == sum(expected.values())
