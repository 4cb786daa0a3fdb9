"""The Helm chart deploy/helm/strata: `helm lint`, `helm template` with the default values and with
a SASL_SSL + PostgreSQL values file, a server-side dry run of every rendered object against the
real kube-apiserver, and the rendered workloads run as local processes with their own
ServiceAccount tokens against the local stack, so that a wrong flag or variable in the chart fails.

Running a rendered pod here stands in for a kubelet: its command line and environment are the
rendering's, with the Secrets' values the test made, the downward API's pod name, ConfigMap and
Secret volumes as files, the ServiceAccount token from the TokenRequest API, and three substitutions
a node would not need: `strata` is the venv's, the in-cluster API server's name is the local
server's address, and the HTTP port is a free one on 127.0.0.1 instead of 0.0.0.0:8080.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from strata.dev.stack import volcano
from strata.dev.stack.helm import CHART, helm, lint, template
from strata.dev.stack.kafka import KafkaBroker
from strata.errors import StrataError
from strata.kubeapi import KubeApi
from strata.log.config import Settings
from strata.log.topics import drop_topics
from tests.conftest import TEST_PREFIX

SASL_VALUES = CHART / "ci" / "sasl-ssl-postgres-values.yaml"
VOLCANO_VALUES = CHART / "ci" / "volcano-values.yaml"
VOLCANO_CONF = "/etc/strata/volcano/scheduler.conf"
RBAC_DIR = CHART.parents[2] / "deploy" / "rbac"
STRATA = Path(sys.executable).parent / "strata"
WORKLOADS = ("Deployment", "StatefulSet")
LONG_RUNNING = {"ingest", "projector", "binder", "evictor", "scheduler"}
# the env names whose values are secrets: only ever from a Secret, never inline
SECRET_ENV = re.compile(r"PASSWORD|DB_URL|TOKEN")
FIELD_MANAGER = "strata-test-helm"
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.fixture(scope="session")
def helm_binary() -> Path:
    """helm from its Go module, built once into the cache (about 1.5 min when missing)."""
    return helm(log=lambda _msg: None)


def _unique(what: str) -> str:
    return f"test-helm-{what}-{uuid.uuid4().hex[:8]}"


def _kinds(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _component(doc: dict[str, Any]) -> str:
    return str(doc["metadata"]["labels"]["app.kubernetes.io/component"])


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    return dict(doc["spec"]["template"]["spec"])


def _container(doc: dict[str, Any]) -> dict[str, Any]:
    (container,) = _pod_spec(doc)["containers"]
    return dict(container)


def _by_component(docs: list[dict[str, Any]], kinds: tuple[str, ...] = WORKLOADS) -> dict[str, dict[str, Any]]:
    return {_component(d): d for d in docs if d["kind"] in kinds}


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def _flag(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


# ---------------------------------------------------------------------------------------------
# helm lint


def test_helm_lints_the_chart_with_every_values_file(helm_binary: Path):
    for values in ([], [SASL_VALUES], [VOLCANO_VALUES]):
        result = lint(values)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_helm_lint_fails_a_broken_chart(helm_binary: Path, tmp_path: Path):
    broken = tmp_path / "strata"
    shutil.copytree(CHART, broken)
    (broken / "templates" / "broken.yaml").write_text("{{ .Values.no.such.value }}\n")
    result = lint(chart=broken)
    assert result.returncode != 0
    assert "1 chart(s) failed" in result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------
# helm template: what matters in the two renderings


def test_default_rendering(helm_binary: Path):
    docs = template("rel", "strata")
    workloads = _by_component(docs)
    assert set(workloads) == {"ingest", "projector", "binder", "evictor"}  # the example scheduler is opt-in
    ingest = workloads["ingest"]
    assert ingest["kind"] == "Deployment" and ingest["spec"]["replicas"] == 1
    assert ingest["spec"]["strategy"] == {"type": "Recreate"}  # never two watchers
    assert {c: workloads[c]["spec"]["replicas"] for c in ("projector", "binder", "evictor")} == {
        "projector": 1,
        "binder": 2,
        "evictor": 1,
    }
    # SQLite checkpoints on the projector's own volume; no database URL anywhere
    (claim,) = workloads["projector"]["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "data" and claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert not any("STRATA_DB_URL" in _env(_container(w)) for w in workloads.values())
    _assert_common(docs)


def test_sasl_ssl_postgres_rendering(helm_binary: Path):
    docs = template("rel", "strata", [SASL_VALUES])
    workloads = _by_component(docs)
    replicas = {c: w["spec"]["replicas"] for c, w in workloads.items()}
    assert replicas == {"ingest": 1, "projector": 2, "binder": 3, "evictor": 2, "scheduler": 3}
    assert "volumeClaimTemplates" not in workloads["projector"]["spec"]  # PostgreSQL instead
    for component, workload in workloads.items():
        env = _env(_container(workload))
        db = env.get("STRATA_DB_URL")
        if component in ("projector", "binder", "evictor"):
            assert db == {
                "name": "STRATA_DB_URL",
                "valueFrom": {"secretKeyRef": {"name": "strata-postgres", "key": "STRATA_DB_URL"}},
            }
        else:
            assert db is None  # ingest and the scheduler keep no checkpoints
        assert env["STRATA_KAFKA_SSL_CA_LOCATION"]["value"] == "/etc/strata/kafka-tls/ca.pem"
        assert _flag(_container(workload)["args"], "-X") == "socket.keepalive.enable=true"
        mounts = {m["name"]: m for m in _container(workload)["volumeMounts"]}
        assert mounts["kafka-tls"] == {"name": "kafka-tls", "mountPath": "/etc/strata/kafka-tls", "readOnly": True}
        volumes = {v["name"]: v for v in _pod_spec(workload)["volumes"]}
        assert volumes["kafka-tls"]["secret"]["secretName"] == "strata-kafka-tls"
    scheduler = _container(workloads["scheduler"])
    assert scheduler["args"][0] == "schedule"  # the example scheduler unless engine says otherwise
    assert _flag(scheduler["args"], "--replica") == "$(POD_NAME)"  # a distinct, stable name per replica
    assert workloads["scheduler"]["kind"] == "StatefulSet"
    _assert_common(docs)


def test_volcano_rendering(helm_binary: Path):
    """engine: volcano runs `strata volcano` replicas with vc-scheduler's configuration mounted
    from a ConfigMap of the rendering, rolled by its checksum; the rest is the default rendering."""
    docs = template("rel", "strata", [VOLCANO_VALUES])
    workloads = _by_component(docs)
    assert set(workloads) == {"ingest", "projector", "binder", "evictor", "scheduler"}
    scheduler = workloads["scheduler"]
    args = _container(scheduler)["args"]
    assert args[0] == "volcano" and _flag(args, "--replica") == "$(POD_NAME)"
    assert _flag(args, "--scheduler-conf") == VOLCANO_CONF and _flag(args, "--schedule-period") == "500ms"
    assert scheduler["spec"]["replicas"] == 3 and scheduler["spec"]["podManagementPolicy"] == "Parallel"
    conf = _kinds(docs, "ConfigMap")["rel-strata-scheduler-conf"]["data"]["scheduler.conf"]
    assert yaml.safe_load(conf) == yaml.safe_load(
        yaml.safe_load(VOLCANO_VALUES.read_text())["scheduler"]["volcano"]["schedulerConf"]
    )
    mounts = {m["name"]: m for m in _container(scheduler)["volumeMounts"]}
    assert mounts["scheduler-conf"] == {"name": "scheduler-conf", "mountPath": "/etc/strata/volcano", "readOnly": True}
    volumes = {v["name"]: v for v in _pod_spec(scheduler)["volumes"]}
    assert volumes["scheduler-conf"]["configMap"] == {"name": "rel-strata-scheduler-conf"}
    checksum = scheduler["spec"]["template"]["metadata"]["annotations"]["checksum/scheduler-conf"]
    changed = template(
        "rel", "strata", [VOLCANO_VALUES], set_values=["scheduler.volcano.schedulerConf=actions: allocate"]
    )
    assert (
        _by_component(changed)["scheduler"]["spec"]["template"]["metadata"]["annotations"]["checksum/scheduler-conf"]
        != checksum
    )
    # Volcano's default configuration: no ConfigMap, no flag, no volume
    plain = template("rel", "strata", set_values=["scheduler.enabled=true", "scheduler.engine=volcano"])
    assert "rel-strata-scheduler-conf" not in _kinds(plain, "ConfigMap")
    plain_scheduler = _by_component(plain)["scheduler"]
    assert "--scheduler-conf" not in _container(plain_scheduler)["args"]
    assert "scheduler-conf" not in {v["name"] for v in _pod_spec(plain_scheduler)["volumes"]}
    # the volcano engine's own resources, from the peak measured at 5,000 nodes / 150,000 pods,
    # and the Go heap's soft limit below them; the example engine keeps the scheduler's
    container = _container(plain_scheduler)
    assert container["resources"] == {"requests": {"cpu": "1", "memory": "5Gi"}, "limits": {"memory": "6Gi"}}
    assert {"name": "GOMEMLIMIT", "value": "4GiB"} in container["env"]
    example = _container(_by_component(template("rel", "strata", set_values=["scheduler.enabled=true"]))["scheduler"])
    assert example["resources"] == {"requests": {"cpu": "250m", "memory": "512Mi"}}
    assert "GOMEMLIMIT" not in {e["name"] for e in example.get("env", [])}
    _assert_common(docs)
    _assert_common(plain)


def test_the_volcano_engine_takes_kafka_tls_as_the_others_do(helm_binary: Path):
    docs = template("rel", "strata", [SASL_VALUES], set_values=["scheduler.engine=volcano"])
    scheduler = _container(_by_component(docs)["scheduler"])
    assert scheduler["args"][0] == "volcano"
    assert _env(scheduler)["STRATA_KAFKA_SSL_CA_LOCATION"]["value"] == "/etc/strata/kafka-tls/ca.pem"
    _assert_common(docs)


def _assert_common(docs: list[dict[str, Any]]) -> None:
    assert not _kinds(docs, "Secret"), "the chart must not carry secrets: they are made before install"
    _assert_hook_job(docs)
    for workload in _by_component(docs).values():
        _assert_served_and_probed(workload)
        _assert_secrets_referenced(_container(workload))
        _assert_locked_down(workload)
    _assert_services_and_budgets(docs)
    _assert_rbac_as_shipped(docs)


def _assert_hook_job(docs: list[dict[str, Any]]) -> None:
    (job,) = _kinds(docs, "Job").values()
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    container = _container(job)
    assert container["command"] == ["strata"] and container["args"][:2] == ["topics", "create"]
    assert _pod_spec(job)["restartPolicy"] == "Never"
    assert _pod_spec(job)["automountServiceAccountToken"] is False  # it needs no API access
    _assert_secrets_referenced(container)


def _assert_served_and_probed(workload: dict[str, Any]) -> None:
    container = _container(workload)
    args = container["args"]
    assert container["command"] == ["strata"]
    assert _flag(args, "--http-port") == "8080" and _flag(args, "--http-host") == "0.0.0.0"
    assert container["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    annotations = workload["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/port"] == "8080"
    assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]
    image = container["image"]
    assert image == "strata:0.1.0", image  # the repository from values, no registry host


def _assert_secrets_referenced(container: dict[str, Any]) -> None:
    for entry in container.get("env", []):  # every entry: a later one of the same name would win
        if SECRET_ENV.search(entry["name"]):
            assert "value" not in entry and "secretKeyRef" in entry["valueFrom"], entry["name"]
    env = _env(container)
    assert env["STRATA_KAFKA_BOOTSTRAP"]["valueFrom"]["secretKeyRef"] == {
        "name": "strata-kafka",
        "key": "STRATA_KAFKA_BOOTSTRAP",
    }
    assert env["STRATA_KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]["optional"] is True


def _assert_locked_down(workload: dict[str, Any]) -> None:
    pod = _pod_spec(workload)
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    context = _container(workload)["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["mountPath"] for m in _container(workload)["volumeMounts"]}
    assert {"/var/lib/strata", "/tmp"} <= mounts  # the only writable places


def _assert_services_and_budgets(docs: list[dict[str, Any]]) -> None:
    workloads = _by_component(docs)
    services = _by_component(docs, ("Service",))
    budgets = _by_component(docs, ("PodDisruptionBudget",))
    assert set(services) == set(budgets) == set(workloads)
    for component, service in services.items():
        assert service["spec"]["ports"] == [
            {"name": "metrics", "port": 8080, "targetPort": "metrics", "protocol": "TCP"}
        ]
        assert service["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
        selector = workloads[component]["spec"]["selector"]["matchLabels"]
        assert service["spec"]["selector"] == selector == budgets[component]["spec"]["selector"]["matchLabels"]
        assert budgets[component]["spec"]["maxUnavailable"] == 1
        if workloads[component]["kind"] == "StatefulSet":
            assert workloads[component]["spec"]["serviceName"] == service["metadata"]["name"]


def _assert_rbac_as_shipped(docs: list[dict[str, Any]]) -> None:
    assert rbac_differences(docs) == []


def rbac_differences(docs: list[dict[str, Any]], shipped_dir: Path = RBAC_DIR) -> list[str]:
    """Each rendered ClusterRole against deploy/rbac/<component>.yaml's: what differs, and each
    rendered ServiceAccount that does not run a workload of that component."""
    differences = []
    roles = _by_component(docs, ("ClusterRole",))
    for component, role in roles.items():
        (shipped,) = [d for d in _load(shipped_dir / f"{component}.yaml") if d["kind"] == "ClusterRole"]
        if role["rules"] != shipped["rules"]:
            differences.append(f"{component}: {role['rules']} != {shipped['rules']}")
    accounts = {_pod_spec(w).get("serviceAccountName") for w in docs if w["kind"] in WORKLOADS}
    for name in _kinds(docs, "ServiceAccount"):
        if name not in accounts:
            differences.append(f"ServiceAccount {name} runs nothing")
    return differences


def _load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_the_values_schema_rejects_a_typo_and_a_wrong_mode(helm_binary: Path):
    wrong = {
        "schedulerName=volcano": "additional properties 'schedulerName' not allowed",
        "evictor.mode=delete": "value must be one of 'eviction', 'volcano'",
        "scheduler.engine=kube-batch": "value must be one of 'example', 'volcano'",
        "scheduler.volcano.schedulePeriod=5": "/scheduler/volcano/schedulePeriod",
        "topicPrefix=a/b": "/topicPrefix",
    }
    for setting, reason in wrong.items():
        with pytest.raises(StrataError, match=re.escape(reason)):
            template("rel", "strata", set_values=[setting])


def test_the_rendering_checks_fail_an_inline_secret(helm_binary: Path, tmp_path: Path):
    values = tmp_path / "inline.yaml"
    values.write_text(yaml.safe_dump({"extraEnv": [{"name": "STRATA_KAFKA_SASL_PASSWORD", "value": "inline"}]}))
    docs = template("rel", "strata", [values])
    with pytest.raises(AssertionError, match="STRATA_KAFKA_SASL_PASSWORD"):
        _assert_common(docs)


def test_the_rbac_comparison_sees_a_changed_rule(helm_binary: Path, tmp_path: Path):
    docs = template("rel", "strata", [SASL_VALUES])
    assert rbac_differences(docs) == []
    for path in RBAC_DIR.glob("*.yaml"):
        text = path.read_text()
        # what drift looks like: the shipped file grants a verb the chart does not
        (tmp_path / path.name).write_text(text.replace('verbs: ["', 'verbs: ["delete", "', 1))
    differences = rbac_differences(docs, tmp_path)
    assert {d.split(":")[0] for d in differences} == {"ingest", "binder", "evictor", "scheduler"}
    evictor_volcano = template("rel", "strata", set_values=["evictor.mode=volcano"])
    assert "evictor-volcano" in _by_component(evictor_volcano, ("ClusterRole",))
    assert "evictor" not in _by_component(evictor_volcano, ("ClusterRole",))


# ---------------------------------------------------------------------------------------------
# a server-side dry run of every object against the real kube-apiserver


@pytest.fixture(scope="module")
def dynamic(kubeconfig: str) -> Iterator[Any]:
    from kubernetes import config, dynamic

    api_client = config.new_client_from_config(config_file=kubeconfig)
    yield dynamic.DynamicClient(api_client)
    api_client.close()


def server_side_apply(dynamic: Any, doc: dict[str, Any], dry_run: bool = True) -> str | None:
    """Apply ``doc`` as `kubectl apply --server-side [--dry-run=server]` would: None when the
    server accepts it, else its one-line reason."""
    from kubernetes.dynamic.exceptions import DynamicApiError

    resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    try:
        dynamic.server_side_apply(
            resource,
            body=doc,
            namespace=doc["metadata"].get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
            dry_run="All" if dry_run else None,
        )
    except DynamicApiError as exc:
        return f"{doc['kind']} {doc['metadata']['name']}: {exc.status} {exc.summary()}"
    return None


@pytest.fixture
def namespace(kubeconfig: str) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards (and its finalizer with it: no controller runs)."""
    api = KubeApi(kubeconfig)
    name = _unique("ns")
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    api.call("DELETE", f"/api/v1/namespaces/{name}")
    current = api.call("GET", f"/api/v1/namespaces/{name}")
    if current.status == 200:
        current.body["spec"]["finalizers"] = []
        api.call("PUT", f"/api/v1/namespaces/{name}/finalize", current.body)


@pytest.mark.kube
@pytest.mark.parametrize(
    "values", [[], [SASL_VALUES], [VOLCANO_VALUES]], ids=["default", "sasl-ssl-postgres", "volcano"]
)
def test_every_rendered_object_passes_a_server_side_dry_run(
    helm_binary: Path, dynamic: Any, namespace: str, values: list[Path]
):
    docs = template(_unique("rel"), namespace, values)
    assert len(docs) >= 20
    for doc in docs:
        # `helm template` leaves the namespace out of most objects; `helm install` sets it
        if dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).namespaced:
            doc["metadata"].setdefault("namespace", namespace)
    assert [r for r in (server_side_apply(dynamic, doc) for doc in docs) if r] == []


@pytest.mark.kube
def test_the_dry_run_rejects_a_broken_object(helm_binary: Path, dynamic: Any, namespace: str):
    docs = template(_unique("rel"), namespace)
    ingest = _by_component(docs)["ingest"]
    ingest["metadata"]["namespace"] = namespace
    assert server_side_apply(dynamic, ingest) is None
    ingest["spec"]["template"]["spec"]["containers"][0].pop("image")
    reason = server_side_apply(dynamic, ingest)
    assert reason is not None and "422" in reason and "image" in reason, reason


# ---------------------------------------------------------------------------------------------
# the rendered workloads, run as local processes with their ServiceAccount tokens

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


class PodFailed(AssertionError):
    """A rendered pod that exited, or was not live and ready in time."""


@dataclass
class Cluster:
    """What the pods of one rendering get from the cluster: the Secrets the test made, the
    rendered ConfigMaps, ServiceAccount tokens, and the API server in place of the in-cluster one."""

    namespace: str
    server: str
    ca: str
    in_cluster_server: str
    secrets: dict[str, dict[str, str]]
    config_maps: dict[str, dict[str, str]]
    tokens: dict[str, str] = field(default_factory=dict)

    def secret_values(self) -> list[str]:
        """The tokens, and the Secrets' values under secret names (a password, a database URL)."""
        values = [v for data in self.secrets.values() for k, v in data.items() if SECRET_ENV.search(k)]
        return [*values, *self.tokens.values()]


@dataclass
class LocalPod:
    name: str
    argv: list[str]
    env: dict[str, str]
    probes: dict[str, str]  # livenessProbe / readinessProbe -> URL
    directory: Path
    secrets: list[str]  # never shown: output() puts <secret> in their place
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with (self.directory / "output").open("wb") as out:
            self.process = subprocess.Popen(
                self.argv, env=self.env, cwd=self.directory / "cwd", stdout=out, stderr=subprocess.STDOUT
            )

    def output(self, raw: bool = False) -> str:
        text = (self.directory / "output").read_text(errors="replace")
        for secret in [] if raw else self.secrets:
            text = text.replace(secret, "<secret>")
        return text

    def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM, as the kubelet sends; the exit code, or SIGKILL's (-9) when it did not stop in time."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGQUIT)  # every thread's stack into its output (strata.cli.run)
            time.sleep(2)
            self.process.kill()
            return self.process.wait()

    def wrote_outside_its_volumes(self) -> list[str]:
        """What a read-only root filesystem would have refused: files in its cwd or home."""
        return [str(p) for d in ("cwd", "home") for p in (self.directory / d).rglob("*")]


def local_pod(doc: dict[str, Any], cluster: Cluster, root: Path) -> LocalPod:
    """The first pod of ``doc`` (a Deployment, StatefulSet or Job) as a process of this machine."""
    suffix = "0" if doc["kind"] == "StatefulSet" else "local"
    name = f"{doc['metadata']['name']}-{suffix}"
    directory = root / name
    for sub in ("cwd", "volumes"):
        (directory / sub).mkdir(parents=True)
    container = _container(doc)
    mounts = _mounts(doc, cluster, directory)
    env = _resolve_env(container.get("env", []), cluster, name, mounts)
    env |= {"PATH": os.environ["PATH"], "HOME": str(directory / "home")}
    if container.get("args", [None])[0] == "volcano":
        env[volcano.BINARY_ENV] = str(volcano.ensure(log=lambda _msg: None))  # what the image's ENV names
    args = [_expand(_localize(arg, mounts), env) for arg in container["command"] + container.get("args", [])]
    assert args[0] == "strata", args
    probes: dict[str, str] = {}
    if "--http-port" in args:
        args, port = _local_http(args, container)
        for kind in ("livenessProbe", "readinessProbe"):
            get = container[kind]["httpGet"]
            assert get["port"] == "metrics", get
            probes[kind] = f"http://127.0.0.1:{port}{get['path']}"
    return LocalPod(name, [str(STRATA), *args[1:]], env, probes, directory, cluster.secret_values())


def _local_http(args: list[str], container: dict[str, Any]) -> tuple[list[str], int]:
    """The chart's 0.0.0.0:<metrics port> as a free port on 127.0.0.1 (several pods share this host)."""
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == "metrics"]
    assert _flag(args, "--http-port") == str(port)
    free = _free_port()
    args = list(args)
    args[args.index("--http-port") + 1] = str(free)
    args[args.index("--http-host") + 1] = "127.0.0.1"
    return args, free


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in args and env values: defined variables only, $$ for $."""
    return _VAR.sub(lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def _localize(text: str, mounts: dict[str, Path]) -> str:
    """Paths under a mount as they are here, in one pass (the local directories are under /tmp,
    itself a mount)."""
    if not mounts:
        return text
    paths = "|".join(re.escape(path) for path in sorted(mounts, key=len, reverse=True))
    return re.sub(rf"(?<![\w/.-])(?:{paths})(?=/|$|[^\w.-])", lambda m: str(mounts[m.group(0)]), text)


def _mounts(doc: dict[str, Any], cluster: Cluster, directory: Path) -> dict[str, Path]:
    """Each volume mount as a directory here, filled as the kubelet would fill it."""
    spec = _pod_spec(doc)
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    claims = {t["metadata"]["name"] for t in doc["spec"].get("volumeClaimTemplates", [])}
    mounts = {m["mountPath"]: directory / "volumes" / m["name"] for m in _container(doc).get("volumeMounts", [])}
    files: dict[Path, str] = {}
    for mount in _container(doc).get("volumeMounts", []):
        volume = volumes.get(mount["name"])
        local = mounts[mount["mountPath"]]
        if volume is None:
            assert mount["name"] in claims, f"{doc['metadata']['name']}: no volume {mount['name']}"
        elif "configMap" in volume:
            data = cluster.config_maps[volume["configMap"]["name"]]
            files |= {local / key: value for key, value in data.items()}
        elif "secret" in volume:
            data = cluster.secrets[volume["secret"]["secretName"]]
            files |= {local / key: value for key, value in data.items()}
        else:
            assert volume.keys() == {"name", "emptyDir"}, f"not emulated here: {volume}"
        local.mkdir(parents=True)
    account = spec.get("serviceAccountName")
    if spec.get("automountServiceAccountToken") and account:
        mounts[SA_MOUNT] = directory / "serviceaccount"
        mounts[SA_MOUNT].mkdir()
        token = cluster.tokens[account]
        files |= {mounts[SA_MOUNT] / "token": token, mounts[SA_MOUNT] / "ca.crt": cluster.ca}
        files[mounts[SA_MOUNT] / "namespace"] = cluster.namespace
    for path, text in files.items():
        # the in-cluster names of files and of the API server, as this machine has them
        local_text = _localize(text, mounts).replace(cluster.in_cluster_server, cluster.server)
        path.write_text(local_text)
        path.chmod(0o600)
    return mounts


def _resolve_env(entries: list[dict[str, Any]], cluster: Cluster, pod: str, mounts: dict[str, Path]) -> dict[str, str]:
    env: dict[str, str] = {}
    fields = {"metadata.name": pod, "metadata.namespace": cluster.namespace}
    for entry in entries:
        source = entry.get("valueFrom")
        if source is None:
            value = _expand(_localize(entry.get("value", ""), mounts), env)
        elif "fieldRef" in source:
            value = fields[source["fieldRef"]["fieldPath"]]
        else:
            ref = source["secretKeyRef"]
            data = cluster.secrets.get(ref["name"], {})
            if ref["key"] not in data:
                # a pod with a required key missing does not start
                assert ref.get("optional"), f"{pod}: Secret {ref['name']} lacks the required key {ref['key']}"
                continue
            value = data[ref["key"]]
        env[entry["name"]] = value
    return env


def _probe(url: str) -> tuple[int | None, str]:
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status, answer.read().decode(errors="replace").strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace").strip()
    except OSError as exc:
        return None, str(exc)


def run_until_ready(pods: list[LocalPod], timeout_s: float = 90) -> None:
    """Start ``pods``; return once each one's liveness and readiness probes answer 200.
    PodFailed when one exits first, or when the time is up (with each one's last answers)."""
    for pod in pods:
        pod.start()
    deadline = time.monotonic() + timeout_s
    last: dict[str, str] = {}
    while time.monotonic() < deadline:
        waiting = []
        for pod in pods:
            assert pod.process is not None
            if pod.process.poll() is not None:
                raise PodFailed(f"{pod.name} exited with {pod.process.returncode}: {pod.output()[-1500:]}")
            answers = {kind: _probe(url) for kind, url in pod.probes.items()}
            last[pod.name] = str(answers)
            if any(status != 200 for status, _ in answers.values()):
                waiting.append(pod.name)
        if not waiting:
            return
        time.sleep(0.5)
    raise PodFailed(f"not live and ready in {timeout_s:.0f} s: {[last[name] for name in waiting]}")


def _stop_all(pods: list[LocalPod]) -> dict[str, int]:
    for pod in pods:
        if pod.process is not None and pod.process.poll() is None:
            pod.process.send_signal(signal.SIGTERM)
    return {pod.name: pod.stop() for pod in pods if pod.process is not None}


@dataclass
class Deployment:
    """A rendering's ServiceAccounts and RBAC applied for real, and the cluster its pods see."""

    docs: list[dict[str, Any]]
    cluster: Cluster
    root: Path


@pytest.fixture
def deploy(kubeconfig: str, dynamic: Any, namespace: str, tmp_path: Path) -> Iterator[Any]:
    applied: list[dict[str, Any]] = []

    def make(docs: list[dict[str, Any]], secrets: dict[str, dict[str, str]]) -> Deployment:
        admin = yaml.safe_load(Path(kubeconfig).read_text())
        (cluster_entry,) = [c["cluster"] for c in admin["clusters"]]
        (config_map,) = [cm for name, cm in _kinds(docs, "ConfigMap").items() if name.endswith("-kubeconfig")]
        cluster = Cluster(
            namespace=namespace,
            server=cluster_entry["server"],
            ca=base64.b64decode(cluster_entry["certificate-authority-data"]).decode(),
            in_cluster_server=yaml.safe_load(config_map["data"]["kubeconfig"])["clusters"][0]["cluster"]["server"],
            secrets=secrets,
            config_maps={name: cm["data"] for name, cm in _kinds(docs, "ConfigMap").items()},
        )
        api = KubeApi(kubeconfig)
        for doc in docs:
            if doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
                assert server_side_apply(dynamic, doc, dry_run=False) is None
                applied.append(doc)
        for name in _kinds(docs, "ServiceAccount"):
            request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
            answer = api.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", request)
            cluster.tokens[name] = answer["status"]["token"]
        return Deployment(docs, cluster, tmp_path / "pods")

    yield make
    for tokens in tmp_path.glob("*/*/serviceaccount"):
        shutil.rmtree(tokens)  # the tokens die with their ServiceAccounts below; their files go now
    for doc in reversed(applied):
        resource = dynamic.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        resource_namespace = doc["metadata"].get("namespace") if resource.namespaced else None
        dynamic.delete(resource, name=doc["metadata"]["name"], namespace=resource_namespace)


def _run_values(tmp_path: Path, prefix: str, extra: dict[str, Any] | None = None) -> Path:
    """What the test changes for the local single broker and the shared API server: its own
    topics, replication 1, and a scheduler name of its own, so that its scheduler and binder leave
    alone the pods that other tests have on the same API server."""
    values = {
        "topicPrefix": prefix,
        "schedulerNames": [prefix.rstrip(".")],
        "kafka": {"replicationFactor": 1, "minInsyncReplicas": 1, "commandPartitions": 2},
        **(extra or {}),
    }
    path = tmp_path / f"run-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def _topics_job(deployment: Deployment) -> None:
    (job,) = _kinds(deployment.docs, "Job").values()
    pod = local_pod(job, deployment.cluster, deployment.root)
    pod.start()
    assert pod.process is not None
    try:
        code = pod.process.wait(60)
    except subprocess.TimeoutExpired:
        code = pod.stop()
    assert code == 0, pod.output()


def _run_workloads(deployment: Deployment, secrets: list[str]) -> None:
    """The hook Job, then every workload until live and ready, then SIGTERM: clean exits, nothing
    written outside the volumes, no secret in any output."""
    _topics_job(deployment)
    workloads = [d for d in deployment.docs if d["kind"] in WORKLOADS]
    pods = [local_pod(doc, deployment.cluster, deployment.root) for doc in workloads]
    assert {len(pod.probes) for pod in pods} == {2}
    try:
        run_until_ready(pods)
    finally:
        codes = _stop_all(pods)
    assert {pod.name: printed(pod, secrets) for pod in pods} == {pod.name: 0 for pod in pods}
    assert codes == {pod.name: 0 for pod in pods}, {pod.name: pod.output()[-800:] for pod in pods}
    for pod in pods:
        assert pod.wrote_outside_its_volumes() == [], pod.name


def printed(pod: LocalPod, secrets: list[str]) -> int:
    """How many of ``secrets`` the pod's output holds (the count only: never show them)."""
    output = pod.output(raw=True)
    return sum(secret in output for secret in secrets)


@pytest.mark.kafka
@pytest.mark.kube
def test_the_default_rendering_runs_and_a_wrong_flag_fails(
    helm_binary: Path, broker: Settings, deploy: Any, namespace: str, tmp_path: Path
):
    prefix = f"{TEST_PREFIX}helm-{uuid.uuid4().hex[:10]}."
    release = _unique("rel")
    docs = template(release, namespace, [_run_values(tmp_path, prefix)])
    deployment = deploy(docs, {"strata-kafka": {"STRATA_KAFKA_BOOTSTRAP": broker.bootstrap}})
    try:
        _run_workloads(deployment, deployment.cluster.secret_values())
        _the_checks_fail_a_wrong_rendering(deployment, release, prefix, tmp_path)
    finally:
        drop_topics(broker.with_(topic_prefix=prefix))


@pytest.mark.kafka
@pytest.mark.kube
@pytest.mark.postgres
def test_the_sasl_ssl_postgres_rendering_runs(
    helm_binary: Path, broker: Settings, deploy: Any, namespace: str, postgres_database: str, tmp_path: Path
):
    local = KafkaBroker(broker.data_dir, int(broker.bootstrap.rsplit(":", 1)[-1]))
    if not local.running():
        pytest.skip("the broker is not the local stack's: no SASL_SSL listener to reach")
    secure = local.secure_env()  # a secret: the password is in it
    ca_path = Path(secure.pop("STRATA_KAFKA_SSL_CA_LOCATION"))  # the chart names the mounted file instead
    prefix = f"{TEST_PREFIX}helm-{uuid.uuid4().hex[:10]}."
    # its scheduler replicas are Volcano's: the Go binary over SASL_SSL with the mounted CA
    volcano_engine = {"scheduler": {"engine": "volcano"}}
    docs = template(_unique("rel"), namespace, [SASL_VALUES, _run_values(tmp_path, prefix, volcano_engine)])
    assert _container(_by_component(docs)["scheduler"])["args"][0] == "volcano"
    secrets = {
        "strata-kafka": secure,
        "strata-kafka-tls": {"ca.pem": ca_path.read_text()},
        "strata-postgres": {"STRATA_DB_URL": postgres_database},
    }
    deployment = deploy(docs, secrets)
    try:
        assert secure["STRATA_KAFKA_SASL_PASSWORD"] in deployment.cluster.secret_values()
        _run_workloads(deployment, deployment.cluster.secret_values())
    finally:
        drop_topics(broker.with_(topic_prefix=prefix))


@pytest.mark.kafka
@pytest.mark.kube
def test_the_volcano_rendering_runs(helm_binary: Path, broker: Settings, deploy: Any, namespace: str, tmp_path: Path):
    """A `strata volcano` replica as rendered (the StatefulSet's first; vc-scheduler's
    configuration from the ConfigMap, the binary the image's ENV names) beside the other
    workloads: all live and ready (a replica is ready only once its cache is built), then a clean
    stop."""
    prefix = f"{TEST_PREFIX}helm-{uuid.uuid4().hex[:10]}."
    docs = template(_unique("rel"), namespace, [VOLCANO_VALUES, _run_values(tmp_path, prefix)])
    deployment = deploy(docs, {"strata-kafka": {"STRATA_KAFKA_BOOTSTRAP": broker.bootstrap}})
    try:
        _run_workloads(deployment, deployment.cluster.secret_values())
        # the mounted configuration, not Volcano's default (which has overcommit and no binpack)
        plugins = "plugins priority, gang, conformance, drf, predicates, proportion, nodeorder, binpack;"
        (replica,) = [p for p in deployment.root.iterdir() if "-scheduler-" in p.name]
        assert plugins in (replica / "output").read_text(errors="replace")
    finally:
        drop_topics(broker.with_(topic_prefix=prefix))


def _the_checks_fail_a_wrong_rendering(deployment: Deployment, release: str, prefix: str, tmp_path: Path) -> None:
    """The same checks on a rendering gone wrong: a binder with an argument the CLI does not know
    fails to start; a projector whose data directory is relative writes outside its volumes."""
    wrong_values = {
        "binder": {"extraArgs": ["--no-such"]},
        "projector": {"extraEnv": [{"name": "STRATA_DATA_DIR", "value": "state"}]},  # the last one wins
    }
    wrong = _by_component(
        template(release, deployment.cluster.namespace, [_run_values(tmp_path, prefix, wrong_values)])
    )
    binder = local_pod(wrong["binder"], deployment.cluster, tmp_path / "wrong")
    with pytest.raises(PodFailed, match="No such option '--no-such'"):
        run_until_ready([binder], timeout_s=30)
    assert printed(binder, ["--no-such"]) == 1  # what a secret in the output would look like
    binder.secrets.append("--no-such")
    assert "--no-such" not in binder.output() and "<secret>" in binder.output()
    projector = local_pod(wrong["projector"], deployment.cluster, tmp_path / "wrong")
    try:
        run_until_ready([projector])
    finally:
        assert _stop_all([projector]) == {projector.name: 0}
    assert projector.wrote_outside_its_volumes() != []  # a read-only root filesystem would refuse it
