"""Benchmark: binds per second and BIND-to-bound latency against the local kube-apiserver.

    eval "$(.venv/bin/strata dev up)"
    .venv/bin/python bench/bind_bench.py [--pods 2000] [--nodes 4] [--workers 1,2,4] [--threads 32]

Per worker count: a fresh topic prefix, P fresh pending pods (created through the API, not timed),
then the processes of a deployment: `strata ingest --kinds Pod,Node` (the watch adapters) and
`strata bind --workers N` (dispatcher, command workers, retry tiers), each its own process as in
production (one process for all would share one GIL). One warm-up BIND, timed out of the figures,
proves the pipeline live; then P admitted BINDs are published at once, and a watch on the pods'
namespace notes when each pod's event with spec.nodeName arrives.

- binds/s: P / (last pod seen bound - Kafka timestamp of the first BIND)
- latency: per pod, watch arrival - its BIND's Kafka timestamp (LogAppendTime); p50, p99
Prints one JSON line per worker count.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from strata.dev.faults.common import STRATA, env_for, terminate, until
from strata.kubeapi import KubeApi, Resource
from strata.log.cachelog import CacheLogReader, CacheLogWriter
from strata.log.config import settings_from
from strata.log.topics import drop_topics, ensure_topics
from strata.schemas import Bind, BindSucceeded


def _pod(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": {"scheduling.k8s.io/group-name": "pg"}},
        "spec": {
            "schedulerName": "volcano",
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}],
        },
    }


def _node(name: str) -> dict[str, Any]:
    alloc = {"cpu": "1000", "memory": "4Ti", "pods": "100000"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {"allocatable": alloc}}


def _strata(settings: Any, log: Path, *args: str) -> subprocess.Popen[bytes]:
    """A `strata` process of this deployment; its stderr goes to ``log`` (a pipe left unread fills)."""
    with log.open("wb") as err:
        return subprocess.Popen([STRATA, *args], env=env_for(settings), stderr=err, stdout=subprocess.DEVNULL)


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


def run(api: KubeApi, base: Any, ns: str, nodes: list[str], pods: int, workers: int, threads: int) -> dict[str, Any]:
    settings = base.with_(topic_prefix=f"bench-bind-{uuid.uuid4().hex[:6]}.")
    ensure_topics(settings)
    names = [f"w{workers}-{i:05d}" for i in range(pods)]
    warm = f"w{workers}-warm"
    with ThreadPoolExecutor(4) as pool:
        created = list(
            pool.map(lambda n: api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, n)), [*names, warm])
        )
    uids = {p["metadata"]["uid"]: p["metadata"]["name"] for p in created}
    warm_uid = next(u for u, n in uids.items() if n == warm)
    del uids[warm_uid]
    logs = Path(tempfile.mkdtemp(prefix="bind-bench-"))
    ingest = _strata(settings, logs / "ingest.log", "ingest", "--kinds", "Pod,Node")
    binder = _strata(
        settings, logs / "bind.log", "bind", "--workers", str(workers), "--threads", str(threads), "--instance", "bench"
    )
    bound_at: dict[str, float] = {}
    stop = threading.Event()
    try:
        until(lambda: "synced:" in (logs / "ingest.log").read_text() or ingest.poll() is not None, 120)
        if "synced:" not in (logs / "ingest.log").read_text():
            raise SystemExit(f"strata ingest did not sync: {(logs / 'ingest.log').read_text()[-500:]}")
        writer = CacheLogWriter(settings)
        writer.append(Bind(pod=warm_uid, node=nodes[0], replica="bench"))
        writer.flush()
        path = f"/api/v1/namespaces/{ns}/pods/{warm}"

        def warm_bound() -> bool:
            return bool(api.request("GET", path)["spec"].get("nodeName"))

        until(lambda: warm_bound() or binder.poll() is not None, 120)  # dispatcher and workers are live
        if not warm_bound():
            raise SystemExit(f"strata bind did not bind the warm-up pod: {(logs / 'bind.log').read_text()[-500:]}")

        resource = Resource("Pod", "v1", f"/api/v1/namespaces/{ns}/pods")
        rv = api.request("GET", resource.path, limit=1)["metadata"]["resourceVersion"]  # before any BIND

        def follow() -> None:
            for event in api.watch(resource, rv, 300, 60.0):
                obj = event.get("object") or {}
                name = (obj.get("metadata") or {}).get("name")
                if (obj.get("spec") or {}).get("nodeName") and name not in bound_at:
                    bound_at[name] = time.time()
                if stop.is_set() or (len(bound_at) >= len(names) and all(n in bound_at for n in names)):
                    return

        watcher = threading.Thread(target=follow, daemon=True)
        watcher.start()
        time.sleep(0.5)
        start = CacheLogReader(settings).end_offset()
        for i, uid in enumerate(uids):
            writer.append(Bind(pod=uid, node=nodes[i % len(nodes)], replica="bench"))
        writer.flush()
        deadline = time.time() + 600
        while not all(n in bound_at for n in names) and time.time() < deadline:
            time.sleep(0.1)
        stop.set()
        bind_ts: dict[str, float] = {}
        succeeded = 0
        # follow, not read(): read() waits for the high watermark, which a log ending with a
        # transaction marker never delivers
        reader = CacheLogReader(settings)
        for entry in reader.follow(start, stop=threading.Event(), tick_s=0.5):
            if entry is None:
                break
            if isinstance(entry.record, Bind) and entry.record.pod in uids:
                bind_ts[uids[entry.record.pod]] = entry.timestamp_ms / 1000
            elif isinstance(entry.record, BindSucceeded) and entry.record.pod in uids:
                succeeded += 1
        if not bind_ts or not bound_at:
            raise SystemExit(f"nothing bound in 600 s: {(logs / 'bind.log').read_text()[-500:]}")
        first = min(bind_ts.values())
        last = max(bound_at[n] for n in names if n in bound_at)
        latencies = [(bound_at[n] - bind_ts[n]) * 1000 for n in names if n in bound_at and n in bind_ts]
        return {
            "workers": workers,
            "threads": threads,
            "pods": pods,
            "bound": sum(1 for n in names if n in bound_at),
            "bind_succeeded_records_seen": succeeded,
            "binds_per_s": round(len(latencies) / (last - first), 1),
            "latency_ms_p50": round(_pct(latencies, 50), 1),
            "latency_ms_p99": round(_pct(latencies, 99), 1),
            "seconds": round(last - first, 2),
        }
    finally:
        stop.set()
        terminate(binder, 60)
        terminate(ingest, 60)
        drop_topics(settings)
        shutil.rmtree(logs, ignore_errors=True)


def raw(api: KubeApi, ns: str, nodes: list[str], pods: int, threads: int) -> dict[str, Any]:
    """The ceiling without Strata: P pending pods bound by POSTing Bindings from ``threads`` threads."""
    names = [f"raw-{i:05d}" for i in range(pods)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda n: api.request("POST", f"/api/v1/namespaces/{ns}/pods", _pod(ns, n)), names))

    def bind(i: int) -> None:
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": names[i], "namespace": ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": nodes[i % len(nodes)]},
        }
        answer = api.call("POST", f"/api/v1/namespaces/{ns}/pods/{names[i]}/binding", binding, timeout=30.0)
        if answer.status not in (200, 201):
            raise SystemExit(f"binding refused: {answer.status} {answer.message}")

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(bind, range(pods)))
    seconds = time.perf_counter() - started
    return {"raw": True, "threads": threads, "pods": pods, "binds_per_s": round(pods / seconds, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--raw", action="store_true", help="also the API server's ceiling: Bindings POSTed directly")
    args = parser.parse_args()
    base = settings_from()
    api = KubeApi(base.kubeconfig, pool_size=8)
    ns = f"bench-bind-{uuid.uuid4().hex[:6]}"
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    nodes = [f"{ns}-n{i}" for i in range(args.nodes)]
    for name in nodes:
        api.request("POST", "/api/v1/nodes", _node(name))
    try:
        if args.raw:
            direct = KubeApi(base.kubeconfig, pool_size=args.threads)
            print(json.dumps(raw(direct, ns, nodes, args.pods, args.threads)), flush=True)
        for workers in (int(w) for w in args.workers.split(",")):
            print(json.dumps(run(api, base, ns, nodes, args.pods, workers, args.threads)), flush=True)
    finally:
        api.call("DELETE", f"/api/v1/namespaces/{ns}/pods", gracePeriodSeconds=0)
        api.call("DELETE", f"/api/v1/namespaces/{ns}")
        for name in nodes:
            api.call("DELETE", f"/api/v1/nodes/{name}")


if __name__ == "__main__":
    main()
