"""`strata verify --against-cluster`: does the cache the log gives agree with the cluster now?

The log's side is the snapshot at the log's end (from the newest checkpoint plus the tail). The
cluster's side is a fresh LIST of the seven kinds folded into an empty cache as ADDED events.
Scheduler overlays have no counterpart in the API: a task still Binding in the log shows up as a
difference until its BIND_SUCCEEDED pod update arrives, which is what an operator wants to see.
"""

from __future__ import annotations

from typing import Any

from strata.kubeapi import RESOURCES, KubeApi
from strata.projector.fold.state import CacheState, FoldConfig

_IGNORED = {"version"}  # the cluster's fold has its own record count


def cluster_snapshot(api: KubeApi, fold: FoldConfig) -> dict[str, Any]:
    state = CacheState(fold)
    for resource in RESOURCES.values():
        token = None
        while True:
            page = api.list_page(resource, 500, token)
            for item in page.get("items") or []:
                state.apply_watch("ADDED", {"apiVersion": resource.api_version, "kind": resource.kind, **item})
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
    return state.snapshot().to_json()


def differences(log: dict[str, Any], cluster: dict[str, Any]) -> list[str]:
    """Every place where the two canonical snapshots differ, as `path: log X, cluster Y`."""
    out: list[str] = []
    for key in sorted(set(log) | set(cluster)):
        if key in _IGNORED:
            continue
        a, b = log.get(key), cluster.get(key)
        if key == "nodeList":  # the order is the order of first storage, which a LIST does not know
            a, b = sorted(a or []), sorted(b or [])
        _diff(key, a, b, out)
    return out


def _diff(path: str, a: Any, b: Any, out: list[str]) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            where = f"{path}.{key}"
            if key not in b:
                out.append(f"{where}: only in the log")
            elif key not in a:
                out.append(f"{where}: only in the cluster")
            else:
                _diff(where, a[key], b[key], out)
    elif a != b:
        out.append(f"{path}: log {_short(a)}, cluster {_short(b)}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
