"""deploy/compose.yaml: the services, their volumes and mounts (every bind-mounted file exists), the settings
the coordinator gets, Grafana's provisioning, and the sample clients (they compile)."""

from __future__ import annotations

import ast
import json

import pytest

from coordinator.config import ENV_PREFIX, SETTINGS, Config

from .deploy_support import REPO, final_stage, one, parse_dockerfile

yaml = pytest.importorskip("yaml")

DEPLOY = REPO / "deploy"
COMPOSE_FILE = DEPLOY / "compose.yaml"
COMPOSE = yaml.safe_load(COMPOSE_FILE.read_text())
SERVICES = COMPOSE["services"]


def _mounts(service: dict) -> list[tuple[str, str, str]]:
    """(source, target, mode) of the short-syntax volume entries."""
    mounts = []
    for entry in service.get("volumes", []):
        assert isinstance(entry, str), "use the short volume syntax (SOURCE:TARGET[:MODE])"
        parts = entry.split(":")
        source, target, mode = parts[0], parts[1], parts[2] if len(parts) > 2 else "rw"
        mounts.append((source, target, mode))
    return mounts


def _bind(source: str) -> bool:
    return source.startswith((".", "/"))


def test_services():
    assert set(SERVICES) == {"coordinator", "prometheus", "grafana", "producer", "consumer"}


def test_coordinator_builds_the_image_and_keeps_data_on_a_named_volume():
    coordinator = SERVICES["coordinator"]
    context = (DEPLOY / coordinator["build"]["context"]).resolve()
    assert context == REPO
    assert (context / coordinator["build"].get("dockerfile", "Dockerfile")).is_file()
    ports = {p.split(":")[-1] for p in coordinator["ports"]}
    assert {"9092", "9464"} <= ports
    stage = final_stage(parse_dockerfile())
    volume = one(stage, "VOLUME").exec_form()[0]
    named = [(s, t) for s, t, _ in _mounts(coordinator) if not _bind(s)]
    assert named and named[0][1] == volume and named[0][0] in COMPOSE["volumes"]


def test_coordinator_environment_is_valid_configuration():
    coordinator = SERVICES["coordinator"]
    env = {k: str(v) for k, v in coordinator["environment"].items()}
    known = {ENV_PREFIX + s.name.upper().replace(".", "_") for s in SETTINGS} | {
        "KGC_LISTEN",
        "KGC_ADVERTISED_LISTENER",
        "KGC_DATA_DIR",
        "KGC_ADMIN_LISTEN",
        "KGC_CONFIG",
        "KGC_LOG_LEVEL",
    }
    for name in env:
        assert name in known, f"the server does not read {name}"
    # KGC_CONFIG points at a mounted file; the file plus the variables make a configuration the server takes.
    mounted = {t: s for s, t, _ in _mounts(coordinator)}
    assert env["KGC_CONFIG"] in mounted
    properties = (DEPLOY / mounted[env["KGC_CONFIG"]]).resolve()
    Config.load(str(properties), environ=env)


def test_every_bind_mount_exists_and_named_volumes_are_declared():
    for name, service in SERVICES.items():
        for source, target, mode in _mounts(service):
            if _bind(source):
                assert (DEPLOY / source).exists(), f"{name}: {source} (mounted at {target}) does not exist"
                assert mode == "ro", f"{name}: mount {source} read-only"
            else:
                assert source in COMPOSE.get("volumes", {}), f"{name}: volume {source} is not declared"


def test_prometheus_gets_the_repository_config_and_reaches_the_coordinator():
    prometheus = SERVICES["prometheus"]
    mounts = {t: s for s, t, _ in _mounts(prometheus)}
    config_target = next(a.split("=", 1)[1] for a in prometheus["command"] if a.startswith("--config.file="))
    assert (DEPLOY / mounts[config_target]).resolve() == DEPLOY / "prometheus.yml"
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    config_dir = config_target.rsplit("/", 1)[0]
    for rule_file in config.get("rule_files", []):
        assert f"{config_dir}/{rule_file}" in mounts, f"rule file {rule_file} is not next to the config"
    targets = [t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    if any(t.startswith("localhost:") for t in targets):
        assert prometheus.get("network_mode") == "service:coordinator"
        assert any(p.split(":")[-1] == "9090" for p in SERVICES["coordinator"]["ports"])


def test_grafana_provisions_the_datasource_and_the_dashboard():
    grafana = SERVICES["grafana"]
    mounts = {t: (DEPLOY / s).resolve() for s, t, _ in _mounts(grafana) if _bind(s)}
    datasources = mounts["/etc/grafana/provisioning/datasources"]
    dashboards = mounts["/etc/grafana/provisioning/dashboards"]
    sources = [
        d for f in sorted(datasources.glob("*.yaml")) for d in yaml.safe_load(f.read_text())["datasources"]
    ]
    assert [d["type"] for d in sources] == ["prometheus"] and sources[0]["isDefault"] is True
    assert sources[0]["url"].split("//")[1].split(":")[0] == "coordinator"
    providers = [
        p for f in sorted(dashboards.glob("*.yaml")) for p in yaml.safe_load(f.read_text())["providers"]
    ]
    assert len(providers) == 1
    path = providers[0]["options"]["path"]
    json_mounts = [src for target, src in mounts.items() if target.startswith(path + "/")]
    assert json_mounts, f"no dashboard mounted under {path}"
    for src in json_mounts:
        assert json.loads(src.read_text())["uid"]


@pytest.mark.parametrize("name", ["producer", "consumer"])
def test_sample_clients(name: str):
    service = SERVICES[name]
    assert service["image"] == "python:3.11-slim"
    assert service["depends_on"]["coordinator"]["condition"] == "service_healthy"
    assert service["environment"]["BOOTSTRAP"] == "coordinator:9092"
    mounts = {t: (DEPLOY / s).resolve() for s, t, _ in _mounts(service)}
    command = " ".join(service["command"])
    assert "confluent-kafka" in command
    script = next(word for word in command.split() if word.endswith(".py"))
    directory, filename = script.rsplit("/", 1)
    path = mounts[directory] / filename
    tree = ast.parse(path.read_text(), filename=str(path))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "confluent_kafka" in imported
