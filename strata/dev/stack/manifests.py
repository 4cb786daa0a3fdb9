"""The RBAC manifests Strata ships (deploy/rbac/), applied as `kubectl apply` would, and a kubeconfig
per component: its manifest applied, a token of its ServiceAccount from the TokenRequest API, the
admin kubeconfig's server and CA. The rbac fault scenario and the tests use them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from strata.dev.stack.apiserver import service_account_kubeconfig
from strata.kubeapi import ApiError, KubeApi

# deploy/ is not in the wheel (it holds only strata/): the manifests are read from a checkout
DEPLOY = Path(__file__).resolve().parents[3] / "deploy" / "rbac"
COMPONENTS = ("ingest", "binder", "evictor", "evictor-volcano", "scheduler")
NAMESPACE = "strata"

RBAC = "/apis/rbac.authorization.k8s.io/v1"
_COLLECTIONS = {
    "Namespace": "/api/v1/namespaces",
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "ClusterRole": f"{RBAC}/clusterroles",
    "ClusterRoleBinding": f"{RBAC}/clusterrolebindings",
    "Role": f"{RBAC}/namespaces/{{ns}}/roles",
    "RoleBinding": f"{RBAC}/namespaces/{{ns}}/rolebindings",
}


def load(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def apply(api: KubeApi, doc: dict[str, Any]) -> None:
    """Create the object, or replace it when it exists."""
    collection = _COLLECTIONS[doc["kind"]].format(ns=doc["metadata"].get("namespace", ""))
    try:
        api.request("POST", collection, doc)
    except ApiError as exc:
        if exc.status != 409:
            raise
        if doc["kind"] in ("Namespace", "ServiceAccount"):
            return  # nothing in them to update
        path = f"{collection}/{doc['metadata']['name']}"
        current = api.request("GET", path)
        api.request("PUT", path, {**doc, "metadata": {**doc["metadata"], **_version(current)}})


def _version(obj: dict[str, Any]) -> dict[str, str]:
    return {"resourceVersion": obj["metadata"]["resourceVersion"]}


def apply_component(admin: KubeApi, component: str, docs: list[dict[str, Any]] | None = None) -> str:
    """Apply the component's manifest (or ``docs`` in its place); the ServiceAccount's name."""
    apply(admin, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    docs = load(DEPLOY / f"{component}.yaml") if docs is None else docs
    for doc in docs:
        apply(admin, doc)
    (account,) = [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"]
    return account


def component_kubeconfig(
    admin_kubeconfig: str | Path, component: str, out: Path, docs: list[dict[str, Any]] | None = None
) -> Path:
    """Apply the component's RBAC, then write ``out`` (0600): a kubeconfig whose user is its token."""
    account = apply_component(KubeApi(str(admin_kubeconfig)), component, docs)
    return service_account_kubeconfig(Path(admin_kubeconfig), NAMESPACE, account, out)
