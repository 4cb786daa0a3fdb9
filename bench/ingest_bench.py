"""Benchmark: ingest against the local kube-apiserver.

    eval "$(.venv/bin/strata dev up --kube)"
    .venv/bin/python bench/ingest_bench.py [--nodes 5000] [--pods 50000] [--updates 1000]

1. Initial list: creates --nodes Nodes and --pods Pods through the API (not timed), then times
   `strata ingest`'s adapters from start to every kind SYNCED: objects/s.
2. End-to-end latency: with the adapters and a projector following the log, patches one pod
   --updates times and measures, per update, the time from the API write returning to the
   projector having applied that version (from then on every snapshot shows it). p50/p99.
Prints one JSON object; deletes what it created.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ingest import watch
from ingest.kube import KubeApi
from projector.state import CacheState
from schemas import WatchEvent
from strata.cachelog import CacheLogReader
from strata.config import settings_from
from strata.topics import ensure_topics


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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50_000)
    parser.add_argument("--updates", type=int, default=1000)
    args = parser.parse_args()

    settings = settings_from(topic_prefix=f"bench-ingest-{uuid.uuid4().hex[:6]}.")
    ensure_topics(settings)
    api = KubeApi(settings.kubeconfig)
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    status = {
        "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
        "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
    }
    nodes = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"{ns}-n{i}"}, "status": status}
        for i in range(args.nodes)
    ]
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"p{i}", "namespace": ns, "annotations": {"scheduling.k8s.io/group-name": "pg"}},
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
    t0 = time.perf_counter()
    ingest.start()
    while not ingest.synced():
        if ingest.errors:
            raise ingest.errors[0]
        time.sleep(0.01)
    list_s = time.perf_counter() - t0
    listed = sum(a.stats.published for a in ingest.adapters)

    applied: dict[str, float] = {}
    stop = threading.Event()
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
    deadline = time.monotonic() + 30
    while not set(written) <= set(applied) and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    ingest.close()
    latencies = sorted((applied[rv] - t) * 1000 for rv, t in written.items() if rv in applied)
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
                "latency_p50_ms": round(statistics.median(latencies), 1),
                "latency_p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 1),
                "latency_max_ms": round(latencies[-1], 1),
            },
            indent=2,
        )
    )
    # Figures first: deleting tens of thousands of objects can outlast the API server's 60 s limit.
    for path, query in (
        (f"/api/v1/namespaces/{ns}/pods", {}),
        ("/api/v1/nodes", {"labelSelector": "strata-bench=true"}),
    ):
        try:
            api.request("DELETE", path, None, timeout=300.0, **query)
        except Exception as exc:  # a benchmark's cleanup must not hide its figures
            print(f"cleanup of {path} failed: {exc}", file=sys.stderr)


if __name__ == "__main__":
    main()
