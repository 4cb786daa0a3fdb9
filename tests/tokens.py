"""A kubeconfig per component: its RBAC manifest (deploy/rbac/<component>.yaml) applied, a token of
its ServiceAccount from the TokenRequest API, the admin kubeconfig's server and CA."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from strata.devstack.apiserver import service_account_kubeconfig
from strata.kubeapi import KubeApi
from tests.manifests import apply, load

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "rbac"
COMPONENTS = ("ingest", "binder", "evictor", "evictor-volcano", "scheduler")


def apply_component(admin: KubeApi, component: str, docs: list[dict[str, Any]] | None = None) -> str:
    """Apply the component's manifest (or ``docs`` in its place); the ServiceAccount's name."""
    apply(admin, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "strata"}})
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
    return service_account_kubeconfig(Path(admin_kubeconfig), "strata", account, out)
