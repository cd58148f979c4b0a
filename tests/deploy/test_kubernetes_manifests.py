"""deploy/kubernetes/: every core object validates against the Kubernetes OpenAPI schemas bundled with the
kubernetes-validate package (offline, strict: unknown fields fail), the ServiceMonitor (a CRD) is checked by
hand, and the objects agree with each other and with the Dockerfile (ports, user, data directory, config
file)."""

from __future__ import annotations

import posixpath
import shlex
from pathlib import Path

import pytest

from coordinator.config import Config, ConfigError, read_properties

from .deploy_support import REPO, final_stage, one, parse_dockerfile

yaml = pytest.importorskip("yaml")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

K8S = REPO / "deploy" / "kubernetes"
# The oldest and newest Kubernetes minor versions the manifests are checked against.
KUBERNETES_VERSIONS = ("1.29.0", "1.33.0")
LABELS = {"app.kubernetes.io/name": "kafka-group-coordinator", "app.kubernetes.io/component": "coordinator"}


def _objects() -> list[tuple[str, dict]]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    objects = []
    for resource in kustomization["resources"]:
        path = K8S / resource
        assert path.is_file(), f"kustomization.yaml lists {resource}, which does not exist"
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                objects.append((resource, doc))
    return objects


OBJECTS = _objects()


def _by_kind(kind: str) -> list[dict]:
    return [doc for _, doc in OBJECTS if doc["kind"] == kind]


def _single(kind: str) -> dict:
    found = _by_kind(kind)
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def test_every_manifest_file_is_in_the_kustomization():
    listed = {resource for resource, _ in OBJECTS}
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk == listed


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    "resource,doc",
    [
        pytest.param(r, d, id=f"{r}:{d['kind']}/{d['metadata']['name']}")
        for r, d in OBJECTS
        if d["apiVersion"] != "monitoring.coreos.com/v1"
    ],
)
def test_core_objects_validate_against_kubernetes_schemas(resource, doc, version):
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        message = str(exc).split("\n\nFailed validating", 1)[0]
        name = f"{doc['kind']}/{doc['metadata']['name']}"
        pytest.fail(
            f"{resource} {name} is invalid for Kubernetes {version}: "
            f"{message} (at {list(getattr(exc, 'path', []))})",
            pytrace=False,
        )


def test_expected_objects_exist():
    kinds = sorted(doc["kind"] for _, doc in OBJECTS)
    assert kinds == sorted(
        ["ConfigMap", "Service", "Service", "StatefulSet", "PodDisruptionBudget", "ServiceMonitor"]
    )


def _services() -> tuple[dict, dict]:
    services = _by_kind("Service")
    headless = [s for s in services if s["spec"].get("clusterIP") == "None"]
    client = [s for s in services if s["spec"].get("clusterIP") != "None"]
    assert len(headless) == 1 and len(client) == 1
    return headless[0], client[0]


def _container(sts: dict) -> dict:
    containers = sts["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_statefulset_shape():
    sts = _single("StatefulSet")
    spec = sts["spec"]
    headless, _ = _services()
    assert spec["replicas"] == 1
    assert spec["serviceName"] == headless["metadata"]["name"]
    assert spec["selector"]["matchLabels"] == LABELS
    assert LABELS.items() <= spec["template"]["metadata"]["labels"].items()
    pod = spec["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] >= 15
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = _container(sts)
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"kafka": 9092, "admin": 9464}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    claims = {c["metadata"]["name"]: c for c in spec["volumeClaimTemplates"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["data"] == "/var/lib/kgc" and "data" in claims
    assert claims["data"]["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_shutdown_timeout_fits_in_the_grace_period():
    sts = _single("StatefulSet")
    properties = _single("ConfigMap")["data"]["server.properties"]
    values = dict(line.split("=", 1) for line in properties.splitlines() if line and not line.startswith("#"))
    shutdown_ms = int(values.get("shutdown.timeout.ms", Config()["shutdown.timeout.ms"]))
    assert shutdown_ms / 1000 + 5 <= sts["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]


def test_config_file_is_mounted_where_kgc_config_points_and_is_valid(tmp_path: Path):
    sts = _single("StatefulSet")
    configmap = _single("ConfigMap")
    container = _container(sts)
    kgc_config = _env(container)["KGC_CONFIG"]
    directory, filename = posixpath.split(kgc_config)
    mount = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
    assert len(mount) == 1 and mount[0].get("readOnly") is True
    volume = [v for v in sts["spec"]["template"]["spec"]["volumes"] if v["name"] == mount[0]["name"]]
    assert volume[0]["configMap"]["name"] == configmap["metadata"]["name"]
    assert filename in configmap["data"]
    # The server accepts the file: every name is a known setting with a valid value.
    path = tmp_path / filename
    path.write_text(configmap["data"][filename])
    assert read_properties(str(path))
    try:
        Config.load(str(path), environ={})
    except ConfigError as exc:
        pytest.fail(f"the ConfigMap's {filename} is rejected by the server: {exc}", pytrace=False)


def test_env_vars_are_ones_the_server_reads():
    container = _container(_single("StatefulSet"))
    cli_source = (REPO / "coordinator" / "cli.py").read_text()
    from coordinator.config import ENV_PREFIX, SETTINGS

    setting_vars = {ENV_PREFIX + s.name.upper().replace(".", "_") for s in SETTINGS}
    for name in _env(container):
        if name.startswith("KGC_"):
            assert name in setting_vars or f'"{name}"' in cli_source, f"the server does not read {name}"


def test_services_select_the_pod_and_target_named_ports():
    sts = _single("StatefulSet")
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    container_ports = {p["name"] for p in _container(sts)["ports"]}
    headless, client = _services()
    assert headless["spec"].get("publishNotReadyAddresses") is True
    for service in (headless, client):
        assert service["spec"]["selector"].items() <= pod_labels.items()
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in container_ports
    client_ports = {p["name"]: p["port"] for p in client["spec"]["ports"]}
    assert client_ports == {"kafka": 9092, "metrics": 9464}
    advertised = _env(_container(sts))["KGC_ADVERTISED_LISTENER"]
    assert f".{headless['metadata']['name']}." in advertised and advertised.endswith(":9092")


def test_poddisruptionbudget_selects_the_pod():
    pdb = _single("PodDisruptionBudget")
    pod_labels = _single("StatefulSet")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert ("minAvailable" in pdb["spec"]) != ("maxUnavailable" in pdb["spec"])


def test_servicemonitor_structure():
    """A CRD: no bundled schema, so the fields the Prometheus Operator needs are checked here."""
    monitor = _single("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor) <= {"apiVersion", "kind", "metadata", "spec"}
    assert monitor["metadata"]["name"]
    spec = monitor["spec"]
    assert set(spec) <= {
        "selector",
        "endpoints",
        "namespaceSelector",
        "jobLabel",
        "targetLabels",
        "podTargetLabels",
        "sampleLimit",
    }
    _, client = _services()
    assert spec["selector"]["matchLabels"].items() <= client["metadata"]["labels"].items()
    assert spec["endpoints"], "a ServiceMonitor needs at least one endpoint"
    client_port_names = {p["name"] for p in client["spec"]["ports"]}
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= {
            "port",
            "path",
            "interval",
            "scrapeTimeout",
            "scheme",
            "honorLabels",
            "relabelings",
            "metricRelabelings",
        }
        assert endpoint["port"] in client_port_names
        assert endpoint.get("path", "/metrics") == "/metrics"
        for key in ("interval", "scrapeTimeout"):
            if key in endpoint:
                assert endpoint[key][-1] in "smh" and endpoint[key][:-1].isdigit()


def test_manifests_agree_with_the_dockerfile():
    stage = final_stage(parse_dockerfile())
    user = one(stage, "USER").args.split(":")
    pod = _single("StatefulSet")["spec"]["template"]["spec"]
    assert str(pod["securityContext"]["runAsUser"]) == user[0]
    volume = one(stage, "VOLUME").exec_form()
    container = _container(_single("StatefulSet"))
    data_mount = [m["mountPath"] for m in container["volumeMounts"] if m["name"] == "data"]
    assert data_mount == volume
    cmd = one(stage, "CMD").exec_form()
    assert container.get("args", cmd) == cmd, "the StatefulSet's args should match the image's CMD"
    assert "command" not in container, "keep the image's ENTRYPOINT"
    exposed = {int(p) for p in shlex.split(one(stage, "EXPOSE").args)}
    assert {p["containerPort"] for p in container["ports"]} == exposed
