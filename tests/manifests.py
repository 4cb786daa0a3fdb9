"""Apply the manifests Strata ships (deploy/) to the test cluster, as `kubectl apply` would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from strata.kubeapi import ApiError, KubeApi

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
