"""deploy/kubernetes/front/ and deploy/front/compose.yaml (the server in front of an existing cluster): the
Kubernetes objects validate against the bundled schemas; three instances, each advertising its own pod, one at a
time disrupted; and every broker port the server opens (the --listen port + 1 + node id) is published by the
container, the Services and the compose file alike."""

from __future__ import annotations

import pytest

from .deploy_support import REPO

yaml = pytest.importorskip("yaml")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

FRONT = REPO / "deploy" / "kubernetes" / "front"
COMPOSE = REPO / "deploy" / "front" / "compose.yaml"
BROKER_PORTS = {9092 + 1 + node for node in (1, 2, 3)}


def _objects() -> list[dict]:
    kustomization = yaml.safe_load((FRONT / "kustomization.yaml").read_text())
    return [
        doc for r in kustomization["resources"] for doc in yaml.safe_load_all((FRONT / r).read_text()) if doc
    ]


@pytest.mark.parametrize("version", ("1.29.0", "1.33.0"))
def test_front_objects_validate(version):
    for doc in _objects():
        kubernetes_validate.validate(doc, version, strict=True)


def test_broker_ports_are_published_everywhere():
    objects = _objects()
    (instances,) = [doc for doc in objects if doc["kind"] == "StatefulSet"]
    assert instances["spec"]["replicas"] == 3
    container = instances["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KGC_LISTEN"] == "0.0.0.0:9092" and env["KGC_UPSTREAM_BOOTSTRAP_SERVERS"]
    assert env["KGC_ADVERTISED_LISTENER"].startswith("$(POD_NAME).") and env["KGC_COORDINATOR_INSTANCE_ID"]
    assert {p["containerPort"] for p in container["ports"]} >= BROKER_PORTS | {9092, 9464}
    services = [doc for doc in objects if doc["kind"] == "Service"]
    assert instances["spec"]["serviceName"] in {s["metadata"]["name"] for s in services}
    for service in services:
        assert {p["port"] for p in service["spec"]["ports"]} >= BROKER_PORTS | {9092}
    (budget,) = [doc for doc in objects if doc["kind"] == "PodDisruptionBudget"]
    assert budget["spec"]["maxUnavailable"] == 1
    service = yaml.safe_load(COMPOSE.read_text())["services"]["coordinator"]
    published = set()
    for mapping in service["ports"]:
        host = str(mapping).split(":", 1)[0]
        low, _, high = host.partition("-")
        published |= set(range(int(low), int(high or low) + 1))
    assert published >= BROKER_PORTS | {9092, 9464}
    assert "KGC_UPSTREAM_BOOTSTRAP_SERVERS" in service["environment"]
