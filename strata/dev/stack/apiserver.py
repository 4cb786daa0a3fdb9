"""A real kube-apiserver on https://127.0.0.1:16443, backed by the local etcd; no other control-plane
component runs (no controller-manager, no scheduler, no kubelet).

Built from Go modules by ``strata.dev.stack.build``. Everything else lives under ``<data dir>/kube``:
a local CA and the certificates it signs (``pki/``, made once with the openssl command), the
service-account signing key, the admin kubeconfig (``kubeconfig``: CA and a client certificate of
the group ``system:masters``, embedded) and the server's output (``server.log``). Authorization is
RBAC, as in a real cluster. Strata's CustomResourceDefinitions (``strata/dev/stack/crds/``) are
applied with the Kubernetes Python client once the server is ready.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

from strata.dev.stack import build, etcd, process
from strata.dev.stack.pki import LocalCA
from strata.errors import StrataError

Log = Callable[[str], None]
CRDS = files("strata.dev.stack") / "crds"
CLUSTER = "strata-local"
ADMIN = "strata-admin"
SERVICE_CIDR = "10.0.0.0/24"
SERVICE_IP = "10.0.0.1"  # the first address of SERVICE_CIDR: the `kubernetes` Service's
# No controller runs, so the admission plugins that rely on one are off (as in Kubernetes'
# scheduler_perf): ServiceAccount would wait for a token controller; TaintNodesByCondition would
# give every new Node a not-ready taint that only the node-lifecycle controller removes; Priority
# would reject pods whose priorityClassName names a class nobody created.
DISABLED_ADMISSION = ("ServiceAccount", "TaintNodesByCondition", "Priority")
# The audit log records the writes the binder and the evictor make, one event per request as it
# completed (whatever the answer), so a duplicate is counted where it happens: at the API server.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Metadata",
            "verbs": ["create"],
            "resources": [{"group": "", "resources": ["pods/binding", "pods/eviction", "bindings"]}],
        },
        {"level": "Metadata", "verbs": ["delete"], "resources": [{"group": "", "resources": ["pods"]}]},
        {"level": "None"},
    ],
}


@dataclass(frozen=True)
class KubeAPIServer(process.LocalServer):
    HOME = "kube"
    WHAT = "kube-apiserver"
    UP_TIMEOUT_S = 120.0
    port: int = 16443
    etcd_url: str = "http://127.0.0.1:12379"

    @property
    def pki(self) -> Path:
        return self.home / "pki"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.home / "kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.home / "audit" / "audit.log"

    def audit_events(self) -> Iterator[dict[str, Any]]:
        """The audit log's events (``AUDIT_POLICY``), its rotated files first, oldest to newest."""
        for path in [*sorted(self.audit_log.parent.glob("audit-*.log")), self.audit_log]:
            if path.exists():
                with path.open() as f:
                    for line in f:
                        if line.strip():
                            yield json.loads(line)

    def _get(self, path: str) -> tuple[int, bytes]:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(self.pki / "admin.crt", self.pki / "admin.key")
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=5, context=ctx) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def ready(self) -> bool:
        if not process.port_open(self.port):
            return False
        try:
            return self._get("/readyz") == (200, b"ok")
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False

    @property
    def signature(self) -> process.Signature:
        return process.Signature("kube-apiserver", str(self.pki / "apiserver.crt"))

    @staticmethod
    def _configuration(version: str, flags: list[str], audit_policy: str) -> str:
        # what it runs, not where this machine caches the binary (a stable digest everywhere)
        return process.configuration_of([version, *flags], audit_policy)

    def running_config(self, argv: list[str]) -> str:
        try:
            audit_policy = (self.home / "audit-policy.yaml").read_text()
        except OSError:
            return ""
        version = Path(argv[0]).name.removeprefix(f"{build.KUBE_APISERVER.name}-")
        return self._configuration(version, argv[1:], audit_policy)

    def _up(self, log: Log, timeout_s: float) -> str:
        """Start kube-apiserver (building it first if need be), or reuse the running one; says which.

        etcd must run at ``etcd_url``. Writes the admin kubeconfig; does not apply the CRDs
        (``apply_crds`` does)."""
        version = build.KUBE_APISERVER.version
        config = self._configuration(version, self._flags(), yaml.safe_dump(AUDIT_POLICY, sort_keys=False))
        state = self.running(log)
        restarted = False
        if state is not None:
            if state.port != self.port:
                raise StrataError(f"a kube-apiserver of this data directory already runs on port {state.port}")
            if state.config == config:
                process.wait_until(self.ready, "kube-apiserver", timeout_s, state, self.log_path)
                self._write_kubeconfig()
                return f"kube-apiserver {version} already running (pid {state.pid}) at {self.url}"
            # started otherwise (an older Strata, other flags): restart it alone (etcd keeps the data)
            log(f"kube-apiserver (pid {state.pid}) runs with another configuration than this version's: restarting it")
            self.down()
            restarted = True
        self.check_ports_free()
        if not etcd.healthy(self.etcd_url):
            raise StrataError(f"kube-apiserver needs etcd, which does not answer at {self.etcd_url}")
        exe = build.ensure(build.KUBE_APISERVER, log)
        self._ensure_pki(log)
        self._write_audit_policy()
        started = time.monotonic()
        state = process.start(
            [str(exe), *self._flags()],
            self.log_path,
            self.state_path,
            marker=self.signature.marker,
            port=self.port,
            cwd=self.home,
            config=config,
        )
        process.wait_until(self.ready, "kube-apiserver", timeout_s, state, self.log_path)
        self._write_kubeconfig()
        took = time.monotonic() - started
        how = "restarted with a new configuration" if restarted else "started"
        return f"kube-apiserver {version} {how} in {took:.1f} s (pid {state.pid}) at {self.url}"

    def _flags(self) -> list[str]:
        pki = self.pki
        return [
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",  # no default route needed to pick one
            f"--secure-port={self.port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--service-account-issuer={self.url}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            # tokens (TokenRequest) are for this server: their audience is its URL, as the issuer
            f"--api-audiences={self.url}",
            "--authorization-mode=RBAC",
            f"--disable-admission-plugins={','.join(DISABLED_ADMISSION)}",
            "--allow-privileged=true",
            # the `kubernetes` Service's endpoints would be 127.0.0.1, which Endpoints reject (loopback):
            # without this the server logs that failure every few seconds; nothing here needs them
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            f"--audit-policy-file={self.home / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-maxsize=100",  # MB, then rotated: audit-<time>.log beside it
            "--audit-log-maxbackup=3",
            # On SIGTERM the server waits for open watches (ingest's) to end by themselves, which
            # they do not: `down` then killed it after 30 s, each restart of the watch-gaps
            # scenario and every `strata dev down` under a running ingest. With a grace period
            # it closes them (the clients reconnect) and exits in about that long.
            "--shutdown-watch-termination-grace-period=2s",
        ]

    def _write_audit_policy(self) -> None:
        self.audit_log.parent.mkdir(parents=True, exist_ok=True)
        (self.home / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY, sort_keys=False))

    def _ensure_pki(self, log: Log) -> None:
        """A CA, the serving certificate, the admin's client certificate and the service-account key, once."""
        names = ("ca.crt", "apiserver.crt", "admin.crt", "sa.key", "sa.pub")
        if all((self.pki / name).exists() for name in names):
            return
        log(f"making a local CA and certificates for kube-apiserver in {self.pki}")
        shutil.rmtree(self.pki, ignore_errors=True)
        self.pki.mkdir(parents=True)
        self.pki.chmod(0o700)
        ca = LocalCA(self.pki, "ca.crt", "/CN=strata-local-ca", "the local kube-apiserver's certificates")
        ca.create()
        sans = ",".join(
            [
                "IP:127.0.0.1",
                f"IP:{SERVICE_IP}",
                "DNS:localhost",
                "DNS:kubernetes",
                "DNS:kubernetes.default",
                "DNS:kubernetes.default.svc",
                "DNS:kubernetes.default.svc.cluster.local",
            ]
        )
        ca.sign("apiserver", "/CN=kube-apiserver", "serverAuth", sans)
        # the group system:masters is bound to cluster-admin by RBAC's bootstrap policy
        ca.sign("admin", f"/O=system:masters/CN={ADMIN}", "clientAuth")
        ca.run("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key")
        ca.run("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub")
        for key in self.pki.glob("*.key"):
            key.chmod(0o600)

    def _write_kubeconfig(self) -> None:
        def b64(name: str) -> str:
            return base64.b64encode((self.pki / name).read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": CLUSTER, "cluster": {"server": self.url, "certificate-authority-data": b64("ca.crt")}}
            ],
            "users": [
                {
                    "name": ADMIN,
                    "user": {"client-certificate-data": b64("admin.crt"), "client-key-data": b64("admin.key")},
                }
            ],
            "contexts": [{"name": CLUSTER, "context": {"cluster": CLUSTER, "user": ADMIN}}],
            "current-context": CLUSTER,
        }
        text = yaml.safe_dump(config, sort_keys=False)
        if not self.kubeconfig.exists() or self.kubeconfig.read_text() != text:
            tmp = self.kubeconfig.with_suffix(".tmp")
            tmp.write_text(text)
            tmp.chmod(0o600)  # it holds the admin's key
            tmp.rename(self.kubeconfig)


def crd_manifests() -> list[dict[str, Any]]:
    """Strata's CustomResourceDefinitions, as shipped in ``strata/dev/stack/crds``."""
    docs = []
    for path in sorted(CRDS.iterdir(), key=lambda p: p.name):
        if path.name.endswith((".yaml", ".yml", ".json")):
            docs.append(yaml.safe_load(path.read_text()))
    return docs


def apply_crds(kubeconfig: Path, timeout_s: float = 60.0) -> list[str]:
    """Create (or update) Strata's CRDs with the Kubernetes Python client; wait until each is Established."""
    from kubernetes import client, config
    from kubernetes.client.rest import ApiException

    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        ext = client.ApiextensionsV1Api(api_client)
        names = []
        for body in crd_manifests():
            name = body["metadata"]["name"]
            try:
                _raw(ext.create_custom_resource_definition, body)
            except ApiException as e:
                if e.status != 409:
                    raise StrataError(f"creating the CRD {name} failed: {e.status} {e.reason}") from None
                current = json.loads(_raw(ext.read_custom_resource_definition, name).data)
                body = {
                    **body,
                    "metadata": {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]},
                }
                _raw(ext.replace_custom_resource_definition, name, body)
            names.append(name)
        deadline = time.monotonic() + timeout_s
        for name in names:
            while not _established(json.loads(_raw(ext.read_custom_resource_definition, name).data)):
                if time.monotonic() > deadline:
                    raise StrataError(f"the CRD {name} is not Established after {timeout_s:g} s")
                time.sleep(0.1)
        return names
    finally:
        api_client.close()


def _raw(method: Callable[..., object], *args: Any) -> Any:
    """``method`` of the generated client, given plain JSON bodies; its answer unparsed (urllib3's
    response). The client's models reject some valid CRD statuses, and nothing here needs them: the
    models its signatures name are neither what it is given here nor what it returns."""
    return method(*args, _preload_content=False)


def _established(crd: dict[str, Any]) -> bool:
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def service_account_kubeconfig(
    admin_kubeconfig: Path,
    namespace: str,
    account: str,
    out: Path,
    expiration_s: int = 3600,
    audiences: list[str] | None = None,
) -> Path:
    """A kubeconfig for the ServiceAccount ``namespace/account``: the admin kubeconfig's server and
    CA, and as its user a token from the TokenRequest API (no controller runs here to make token
    Secrets), for ``audiences`` (default: the server's own, ``--api-audiences``). Written with mode
    0600 from the start; the token is never logged."""
    from kubernetes import client, config

    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    context = next(c["context"] for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    api_client = config.new_client_from_config(config_file=str(admin_kubeconfig))
    try:
        request: dict[str, Any] = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_s},
        }
        if audiences is not None:
            request["spec"]["audiences"] = audiences
        answer = _raw(client.CoreV1Api(api_client).create_namespaced_service_account_token, account, namespace, request)
        token = json.loads(answer.data)["status"]["token"]
    finally:
        api_client.close()
    user = f"system:serviceaccount:{namespace}:{account}"
    config_ = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": account, "context": {"cluster": cluster["name"], "user": user}}],
        "current-context": account,
    }
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.unlink(missing_ok=True)
    # created 0600: the token is never readable by others, not even for a moment
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config_, f, sort_keys=False)
    tmp.rename(out)
    return out
