"""Benchmark: ingest against the local kube-apiserver.

    eval "$(.venv/bin/strata dev up --kube)"
    .venv/bin/python bench/ingest_bench.py [--nodes 5000] [--pods 50000] [--updates 1000]

1. Initial list: creates --nodes Nodes and --pods Pods through the API (not timed), then times
   `strata ingest`'s adapters from start to every kind SYNCED: objects/s.
2. End-to-end latency: with the adapters and a projector following the log, patches one pod
   --updates times and measures, per update, the time from the API write returning to the
   projector having applied that version (from then on every snapshot shows it). p50/p99 of
   the updates the projector applied within 30 s of the last write; ``updates_never_seen``
   counts the others, which the percentiles leave out (a figure to read with them).
Prints one JSON object; deletes what it created, figures first.

Everything it creates carries the label ``strata-bench=true`` (its Nodes, its namespace and its
Pods), and its topics its own prefix; at the end it deletes them by that label (a collection
delete first, then one by one what that left: deleting 5,000 Nodes can outlast the API server's
60 s limit). At the start it warns about labelled leftovers of an earlier run (one that was
killed) and deletes them: the adapters would list them too.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from strata.ingest import watch
from strata.kubeapi import ApiError, KubeApi
from strata.log.cachelog import CacheLogReader
from strata.log.config import Settings, settings_from
from strata.log.topics import drop_topics, ensure_topics
from strata.projector.fold.state import CacheState
from strata.schemas import WatchEvent

LABEL = {"strata-bench": "true"}
SELECTOR = "strata-bench=true"
SEEN_WITHIN_S = 30.0
OLD_NODE_NAME = re.compile(r"bench-[0-9a-f]{6}-n[0-9]+")
DELETE_NOW = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}


def _create(api: KubeApi, path: str, objects: list[dict[str, Any]]) -> None:
    # Two writers: a 2-core machine runs etcd, the API server and this benchmark; more writers
    # only make the API server time requests out.
    def post(obj: dict[str, Any]) -> None:
        for attempt in range(5):
            try:
                api.request("POST", path, obj, timeout=60.0)
                return
            except Exception:
                if attempt == 4:
                    raise
                time.sleep(1.0)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(post, objects))


def _names(api: KubeApi, path: str) -> list[str]:
    """The names of the labelled objects of a collection, page by page."""
    names: list[str] = []
    token = None
    while True:
        page = api.request("GET", path, None, timeout=60.0, labelSelector=SELECTOR, limit=500, **{"continue": token})
        names += [item["metadata"]["name"] for item in page.get("items") or ()]
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return names


def _delete_labelled(api: KubeApi, path: str) -> int:
    """Delete the labelled objects of a collection; the number left (0 when all are gone).

    A collection delete first; one of thousands of objects can outlast the API server's 60 s
    request limit (it then answers an error and has deleted only part), so whatever is left
    is deleted one by one, four at a time."""
    try:
        api.request("DELETE", path, DELETE_NOW, timeout=120.0, labelSelector=SELECTOR)
    except Exception as exc:
        print(f"collection delete of {path} did not finish ({exc}); deleting one by one", file=sys.stderr)

    def delete(name: str) -> None:
        try:
            api.request("DELETE", f"{path}/{name}", DELETE_NOW, timeout=60.0)
        except ApiError as exc:
            if exc.status != 404:
                raise

    for _ in range(3):
        left = _names(api, path)
        if not left:
            return 0
        with ThreadPoolExecutor(4) as pool:
            for name, error in zip(left, pool.map(_attempt(delete), left), strict=True):
                if error is not None:
                    print(f"cannot delete {path}/{name}: {error}", file=sys.stderr)
    return len(_names(api, path))


def _attempt(fn: Any) -> Any:
    def run(arg: Any) -> BaseException | None:
        try:
            fn(arg)
        except Exception as exc:
            return exc
        return None

    return run


def _delete_namespace(api: KubeApi, ns: str) -> None:
    """Delete the namespace, its Pods first. No namespace controller runs beside the local API
    server, so a namespace would stay Terminating: once it holds no Pod, finalize it ourselves."""
    left = _delete_labelled(api, f"/api/v1/namespaces/{ns}/pods")
    if left:
        raise RuntimeError(f"{left} pods of namespace {ns} are left")
    try:
        api.request("DELETE", f"/api/v1/namespaces/{ns}", DELETE_NOW, timeout=60.0)
    except ApiError as exc:
        if exc.status == 404:
            return
        raise
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            obj = api.request("GET", f"/api/v1/namespaces/{ns}")
        except ApiError as exc:
            if exc.status == 404:
                return  # a namespace controller finished it
            raise
        time.sleep(0.5)
    obj["spec"]["finalizers"] = []
    api.request("PUT", f"/api/v1/namespaces/{ns}/finalize", obj, timeout=60.0)


def _cleanup(api: KubeApi) -> list[str]:
    """Delete everything labelled strata-bench=true: the namespaces (with their Pods), then the
    Nodes. What is left, as messages (empty when all is gone)."""
    problems = []
    for ns in _names(api, "/api/v1/namespaces"):
        try:
            _delete_namespace(api, ns)
        except Exception as exc:
            problems.append(f"namespace {ns}: {exc}")
    try:
        left = _delete_labelled(api, "/api/v1/nodes")
        if left:
            problems.append(f"{left} labelled nodes are left")
    except Exception as exc:
        problems.append(f"nodes: {exc}")
    return problems


def _unlabelled_bench_nodes(api: KubeApi) -> int:
    count = 0
    token = None
    while True:
        page = api.request("GET", "/api/v1/nodes", None, timeout=60.0, limit=500, **{"continue": token})
        for item in page.get("items") or ():
            meta = item["metadata"]
            if OLD_NODE_NAME.fullmatch(meta["name"]) and (meta.get("labels") or {}).get("strata-bench") != "true":
                count += 1
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return count


def _remove_leftovers(api: KubeApi) -> None:
    unlabelled = _unlabelled_bench_nodes(api)
    if unlabelled:
        print(
            f"warning: {unlabelled} nodes are named like those of a run from before the label "
            f"(bench-xxxxxx-nN) but lack {SELECTOR}; they are not deleted, and the adapters list them too",
            file=sys.stderr,
        )
    nodes = len(_names(api, "/api/v1/nodes"))
    namespaces = _names(api, "/api/v1/namespaces")
    if not nodes and not namespaces:
        return
    print(
        f"warning: an earlier run left {nodes} nodes and {len(namespaces)} namespaces labelled {SELECTOR} "
        "behind; deleting them first (the adapters would list them too)",
        file=sys.stderr,
    )
    problems = _cleanup(api)
    if problems:
        raise SystemExit(f"cannot delete the leftovers of an earlier run: {'; '.join(problems)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--updates", type=int, default=1000)
    args = parser.parse_args()

    settings = settings_from(topic_prefix=f"bench-ingest-{uuid.uuid4().hex[:6]}.")
    api = KubeApi(settings.kubeconfig)
    _remove_leftovers(api)
    ensure_topics(settings)
    try:
        _run(args, settings, api)
    finally:
        # Figures first (printed by _run): deleting tens of thousands of objects takes a while.
        problems = _cleanup(api)
        try:
            drop_topics(settings)
        except Exception as exc:
            problems.append(f"topics {settings.topic_prefix}*: {exc}")
        for problem in problems:  # a benchmark's cleanup must not hide its figures
            print(f"cleanup: {problem}", file=sys.stderr)


def _run(args: argparse.Namespace, settings: Settings, api: KubeApi) -> None:
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    api.request(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": LABEL}},
    )
    status = {
        "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
        "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
    }
    nodes = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"{ns}-n{i}", "labels": LABEL}, "status": status}
        for i in range(args.nodes)
    ]
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"p{i}",
                "namespace": ns,
                "labels": LABEL,
                "annotations": {"scheduling.k8s.io/group-name": "pg"},
            },
            "spec": {
                "schedulerName": "volcano",
                "containers": [
                    {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
                ],
            },
        }
        for i in range(args.pods)
    ]
    t0 = time.perf_counter()
    _create(api, "/api/v1/nodes", nodes)
    _create(api, f"/api/v1/namespaces/{ns}/pods", pods)
    create_s = time.perf_counter() - t0

    ingest = watch.Ingest(settings)
    stop = threading.Event()
    try:
        t0 = time.perf_counter()
        ingest.start()
        while not ingest.synced():
            if ingest.errors:
                raise ingest.errors[0]
            time.sleep(0.01)
        list_s = time.perf_counter() - t0
        listed = sum(a.stats.published for a in ingest.adapters)

        applied: dict[str, float] = {}
        reader = CacheLogReader(settings)

        folded = [0]

        def follow() -> None:
            state = CacheState()
            for entry in reader.follow(0, stop, tick_s=0.05):
                if entry is None:
                    continue
                state.apply(entry.record)
                folded[0] = entry.offset + 1
                r = entry.record
                if isinstance(r, WatchEvent) and r.namespace == ns and r.name == "p0" and r.resource_version:
                    applied[r.resource_version] = time.perf_counter()

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        # measure the steady state: let the follower fold the initial list first
        end = reader.end_offset()
        while folded[0] < end:
            time.sleep(0.05)
        written: dict[str, float] = {}
        for i in range(args.updates):
            obj = api.request("PATCH", f"/api/v1/namespaces/{ns}/pods/p0", {"metadata": {"labels": {"n": str(i)}}})
            written[obj["metadata"]["resourceVersion"]] = time.perf_counter()
            time.sleep(0.005)
        deadline = time.monotonic() + SEEN_WITHIN_S
        while not set(written) <= set(applied) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        stop.set()
        ingest.close()
    latencies = sorted((applied[rv] - t) * 1000 for rv, t in written.items() if rv in applied)

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value, 1)

    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "pods": args.pods,
                "create_objects_per_s": round((args.nodes + args.pods) / create_s),
                "initial_list_objects": listed,
                "initial_list_s": round(list_s, 2),
                "initial_list_objects_per_s": round(listed / list_s),
                "updates": args.updates,
                "updates_seen": len(latencies),
                # not applied within SEEN_WITHIN_S of the last write: not in the percentiles below
                "updates_never_seen": len(written) - len(latencies),
                "latency_p50_ms": ms(statistics.median(latencies)) if latencies else None,
                "latency_p99_ms": ms(latencies[max(int(len(latencies) * 0.99) - 1, 0)]) if latencies else None,
                "latency_max_ms": ms(latencies[-1]) if latencies else None,
            },
            indent=2,
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
