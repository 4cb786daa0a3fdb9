"""Benchmark: pods bound per second by Volcano's own actions and plugins as 1, 2 and 3 active
replicas (`strata volcano`) on one cache log, beside the API server's raw Binding ceiling and the
example gang scheduler (`strata schedule`), on the same workload against the local kube-apiserver.

    eval "$(.venv/bin/strata dev up --kube)"
    .venv/bin/python bench/volcano_bench.py [--gangs 250] [--size 8] [--nodes 20] [--replicas 1,2,3]
                                            [--raw] [--example]

Per run: a fresh topic prefix and namespace, N nodes (32 cpu each, tainted and labelled for this
run only), G gangs of S pods (minMember S, 100m each, alternately in two queues of weights 1 and
3; all fit), created through the API before anything schedules (not timed). Then the processes
of a deployment, each its own process: `strata ingest`, `strata bind`, and the replicas, started
together; each replica waits until its cache is synced, then they race.

- pods/s: P / (last pod seen bound via the API - Kafka timestamp of the first BIND_GROUP or BIND)
- rejected: the fraction of BIND_GROUPs (BINDs for the example scheduler) the fold rejected
- admitting: Kafka timestamp of the last admitted record - of the first (the schedulers' side
  alone, before the binder; 0 when one cycle published every group in one batch), and replica
  r0's cycles that published binds, with the first one's length (`-v=1` lines)
- nodes used, and the busiest node's cpu share: how the replicas placed the pods; pods on other
  runs' nodes (the example scheduler reads neither node selectors nor tolerations, and the local
  API server is shared)
- raw: P pending pods bound by POSTing Bindings from 32 threads, no scheduler (bind_bench.py --raw)
Prints one JSON line per run.

--scale: one strata-volcano replica beside Volcano's own vc-scheduler v1.10.0 (built by
strata/dev/stack/vcscheduler.py), on the same API server, objects and configuration:

    .venv/bin/python bench/volcano_bench.py --scale --json [--nodes 1000] [--pods 30000] [--pending P/10]
                                            [--arrivals 1000] [--period 1s] [--order strata_volcano,vc_scheduler]

Setup (not timed): in a namespace of the run, N nodes (32 cpu, 256Gi, 500 pods; Ready; tainted and
labelled for the run, so no other run's pod lands there), two queues (weights 1 and 3) and the
run's default queue (both schedulers' --default-queue; vc-scheduler creates a missing one, which on
a shared API server would be everybody's), and the
running load: P - pending pods in gangs of --size with their PodGroups, each pod placed at creation
(spec.nodeName; no kubelet runs, so they stay in phase Pending, which Volcano counts as Bound:
allocated on the node), each PodGroup created with the status Volcano gives a placed gang (Running,
a Scheduled condition), so neither scheduler has a reason to write it. One scheduler configuration
file (Volcano's default: enqueue, allocate, backfill; priority, gang, conformance / overcommit, drf,
predicates, proportion, nodeorder) is given to both (`strata volcano --scheduler-conf`,
vc-scheduler `--scheduler-conf`), with the same --schedule-period and the run's scheduler name.

Then each scheduler in turn, never both at once. Fairness: before each one, the pending and
arrival gangs of the last are deleted and the pending gangs created anew (same names, same
queues, the same pods), and every load PodGroup a scheduler wrote is put back to its settled
status, so each starts from the same objects; the other one's processes are gone by then (for
strata-volcano: `strata ingest`, `strata bind`, the replica; they would take CPU from
vc-scheduler on this shared 2-core machine). strata-volcano's deployment is prepared before its
clock starts, as vc-scheduler's API server is: `strata ingest` has the cluster in a fresh log,
`strata bind` runs, and `strata project --stop-at-end` has written a checkpoint (a deployment's
projector does; --no-checkpoint: the sidecar folds the log from its start). Then, for each:

- cold_start_to_first_bind_s: from starting the process (`strata volcano --replica r0`: sidecar
  and binary; vc-scheduler: informers and all) to the first pending pod seen on a node by a
  watch of this script's
- pods_per_s: pending pods / (last pending pod seen bound - first one); pods_per_s_from_start
  counts from the process's start
- cycle_p50_s, cycle_p99_s: every cycle from the start to the end of the run (busy, idle and the
  arrivals); cycles_until_all_bound. strata-volcano: its `-v=1` line per cycle ("cycle at version
  N: X ms"); vc-scheduler: its volcano_e2e_scheduling_latency_milliseconds histogram (OpenSession,
  the actions, CloseSession) polled every 0.1 s, each new observation from the sum and count
- cycle_idle_p50_s, cycle_idle_p99_s: --idle-cycles cycles once every pending pod is bound and
  --settle-cycles more have passed (the statuses of the gangs just bound are written in those)
- idle_api_writes: POST, PUT, PATCH and DELETE requests the scheduler sent during those idle
  cycles. strata-volcano's API client only writes (its reads come from the log), so its
  --kubeconfig points at a counting proxy in this script that forwards to the API server;
  vc-scheduler's own client-go counter (rest_client_requests_total on its /metrics) counts its
  requests. The API server's own counters would count every other user of the shared server too.
  strata-volcano's Bindings are the binder's, not counted; idle, the binder has nothing to do.
- cycle_after_arrivals_s: --arrivals new pods in gangs (pods first, their PodGroups last, so they
  arrive within a second); the longest cycle that ended after the first of those PodGroups was
  created and began before the last arrival was seen bound
- rss_peak_mb: VmHWM of the processes, read while they run: the sidecar (the `strata volcano`
  process) plus the strata-volcano binary; vc-scheduler's one process. MiB.

Prints the JSON object (with --json only it, on stdout; the target lines go to stderr) with the
ratios strata-volcano / vc-scheduler and one PASS/FAIL line per target of issue 47, whose
reference is vc-scheduler's figure or the target's, never strata-volcano's. Both schedulers see the
whole shared API server, as they would a cluster: Volcano schedules every PodGroup whose queue
exists, so another run's Volcano scheduler (a test's strata-volcano replicas) writes this run's
PodGroups and events, and each of these two writes theirs. Runs on a quiet API server are the
clean ones; idle_api_writes_not_this_run (strata-volcano's, from the proxy's paths) says how
many of its idle writes went elsewhere; vc-scheduler's counter cannot tell.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import math
import os
import re
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from strata.dev.faults.common import STRATA, env_for, terminate, until
from strata.kubeapi import KubeApi, _lines
from strata.log.cachelog import CacheLogReader
from strata.log.config import Settings, settings_from
from strata.log.topics import drop_topics, ensure_topics
from strata.projector.fold.kinds import FoldConfig
from strata.projector.fold.state import CacheState
from strata.schemas import Bind, BindGroup

sys.path.insert(0, str(Path(__file__).parent))
from bind_bench import raw  # a sibling script, not a package

VOLCANO = "/apis/scheduling.volcano.sh/v1beta1"
OWN = "strata.bench/run"
CPU_PER_NODE = 32


def _volcano_command() -> list[str]:
    from strata.cli import main

    if "volcano" in main.commands:
        return [STRATA, "volcano"]
    return [sys.executable, "-c", "from strata.cli.volcano import volcano; volcano(prog_name='strata volcano')"]


def _setup(api: KubeApi, run: str, nodes: int, gangs: int, size: int) -> list[str]:
    names = [f"{run}-n{i}" for i in range(nodes)]
    res = {"cpu": str(CPU_PER_NODE), "memory": "128Gi", "pods": "500"}
    for name in names:
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {OWN: run}},
            "spec": {"taints": [{"key": OWN, "value": run, "effect": "NoSchedule"}]},
            "status": {"capacity": res},
        }
        created = api.request("POST", "/api/v1/nodes", node)
        created["status"] = {"capacity": res, "allocatable": res, "conditions": [{"type": "Ready", "status": "True"}]}
        api.request("PUT", f"/api/v1/nodes/{name}/status", created)
    for q, weight in (("qa", 1), ("qb", 3)):
        body = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": f"{run}-{q}"}}
        api.request("POST", f"{VOLCANO}/queues", {**body, "spec": {"weight": weight, "reclaimable": True}})
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": run}})
    pods = []
    for g in range(gangs):
        queue = f"{run}-{'qa' if g % 2 == 0 else 'qb'}"
        pg = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": f"g{g}", "namespace": run},
            "spec": {"minMember": size, "queue": queue},
        }
        api.request("POST", f"{VOLCANO}/namespaces/{run}/podgroups", pg)
        for i in range(size):
            pods.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"g{g}-p{i}",
                        "namespace": run,
                        "annotations": {"scheduling.k8s.io/group-name": f"g{g}"},
                    },
                    "spec": {
                        "schedulerName": run,
                        "nodeSelector": {OWN: run},
                        "tolerations": [{"key": OWN, "operator": "Equal", "value": run, "effect": "NoSchedule"}],
                        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
                    },
                }
            )
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda p: api.request("POST", f"/api/v1/namespaces/{run}/pods", p), pods))
    return names


def _teardown(api: KubeApi, run: str, nodes: list[str]) -> None:
    api.call("DELETE", f"/api/v1/namespaces/{run}/pods", gracePeriodSeconds=0)
    api.call("DELETE", f"{VOLCANO}/namespaces/{run}/podgroups")  # no namespace controller runs here
    api.call("DELETE", f"/api/v1/namespaces/{run}")
    for q in ("qa", "qb"):
        api.call("DELETE", f"{VOLCANO}/queues/{run}-{q}")
    for name in nodes:
        api.call("DELETE", f"/api/v1/nodes/{name}")


def _log_figures(settings: Settings, run: str) -> dict[str, Any]:
    """The first bind record's and the last admitted one's Kafka timestamps, and the fold's verdicts."""
    state = CacheState(FoldConfig(scheduler_names=(run,)))
    first_ms = last_admitted_ms = None
    verdicts: Counter[str] = Counter()
    for entry in CacheLogReader(settings).read():
        outcome = state.apply(entry.record)
        if isinstance(entry.record, (Bind, BindGroup)):
            first_ms = entry.timestamp_ms if first_ms is None else first_ms
            verdicts[outcome.result] += 1
            if outcome.result == "applied":
                last_admitted_ms = entry.timestamp_ms
    total = sum(verdicts.values())
    return {
        "first_bind_ms": first_ms,
        "last_admitted_ms": last_admitted_ms,
        "records": total,
        "rejected": round(verdicts["rejected"] / total, 3) if total else None,
    }


def one_run(api: KubeApi, base: Settings, args: argparse.Namespace, replicas: int, example: bool) -> dict[str, Any]:
    run = f"vb-{uuid.uuid4().hex[:6]}"
    settings = base.with_(topic_prefix=f"bench-volcano-{run}.")
    ensure_topics(settings)
    nodes = _setup(api, run, args.nodes, args.gangs, args.size)
    pods = args.gangs * args.size
    logs = Path(tempfile.mkdtemp(prefix="volcano-bench-"))
    env = env_for(settings, STRATA_DB_URL=f"sqlite:///{logs / 'c.db'}")
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with (logs / f"{name}.log").open("wb") as err:
            proc = subprocess.Popen(argv, env=env, stderr=err, stdout=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    fold = ["--scheduler-name", run]
    try:
        start("ingest", [STRATA, "ingest"])
        start("bind", [STRATA, "bind", *fold])
        if not until(lambda: "synced:" in (logs / "ingest.log").read_text(), 120):
            raise SystemExit(f"ingest did not sync; see {logs}")
        for r in range(replicas):
            if example:
                start(f"r{r}", [STRATA, "schedule", "--replica", f"r{r}", "--idle-wait", "0.2", *fold])
            else:
                start(
                    f"r{r}",
                    [*_volcano_command(), "--replica", f"r{r}", "--schedule-period", "200ms", *fold, "--", "-v=1"],
                )

        def bound() -> list[dict[str, Any]]:
            items = api.request("GET", f"/api/v1/namespaces/{run}/pods")["items"]
            return [p for p in items if p["spec"].get("nodeName")]

        done = until(lambda: len(bound()) == pods, args.timeout, every_s=0.1)
        last_seen = time.time()
        placed = bound()
        if not done:
            raise SystemExit(f"{len(placed)} of {pods} pods bound in {args.timeout} s; see {logs}")
    finally:
        for proc in reversed(procs):
            terminate(proc)
    figures = _log_figures(settings, run)
    per_node = Counter(p["spec"]["nodeName"] for p in placed)
    own = {n: per_node.get(n, 0) for n in nodes}
    busiest = max(own.values()) * 0.1 / CPU_PER_NODE
    seconds = last_seen - figures["first_bind_ms"] / 1000
    admitting = (figures["last_admitted_ms"] - figures["first_bind_ms"]) / 1000
    cycles = [
        (float(m.group(1)), int(m.group(2)))
        for m in re.finditer(r"cycle at version \d+: (\d+) ms .*; (\d+) BIND_GROUPs", (logs / "r0.log").read_text())
    ]
    busy = [c for c in cycles if c[1] > 0]
    _teardown(api, run, nodes)
    drop_topics(settings)
    return {
        "scheduler": "example" if example else "volcano",
        "replicas": replicas,
        "pods": pods,
        "gangs": args.gangs,
        "pods_per_s": round(pods / seconds, 1),
        "seconds": round(seconds, 2),
        "admitting_s": round(admitting, 3),  # first bind record to the last admitted one
        "r0_cycles_with_binds": len(busy),
        "r0_first_such_cycle_ms": busy[0][0] if busy else None,
        "bind_records": figures["records"],
        "rejected": figures["rejected"],
        "nodes_used": sum(1 for v in own.values() if v),
        "busiest_node_cpu": round(busiest, 3),
        "pods_on_other_runs_nodes": sum(v for n, v in per_node.items() if n not in own),
    }


# ---------------------------------------------------------------------------------------------
# --scale: strata-volcano and vc-scheduler side by side on the same objects (issue 47, item 5)

ROLE = "strata.bench/role"
# Volcano's default configuration (vc-scheduler's, and strata-volcano's without --scheduler-conf),
# written to a file and given to both schedulers
SCHEDULER_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
  - name: predicates
  - name: proportion
  - name: nodeorder
"""
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
GiB_MB = 1024  # rss figures are MiB (VmHWM's kB / 1024); the 1.5 GB target is 1536 of them
TARGETS = {  # the figures of issue 47 (5,000 nodes / 150,000 pods for the first three)
    "cycle_idle_p50_s": 1.0,
    "idle_api_writes": 0,
    "cycle_after_arrivals_s": 2.0,
    "rss_peak_mb": 1.5 * GiB_MB,
    "cycle_ratio": 0.5,  # strata-volcano / vc-scheduler, at most
    "pods_per_s_ratio": 1.0,  # at least
    "cold_start_ratio": 0.25,  # at most
}


def _pool(fn: Callable[[Any], Any], items: list[Any], threads: int = 8) -> list[Any]:
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, items))


def _pod(run: str, name: str, group: str, role: str, node: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": run,
        "nodeSelector": {OWN: run},
        "tolerations": [{"key": OWN, "operator": "Equal", "value": run, "effect": "NoSchedule"}],
        "containers": [
            {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
        ],
    }
    if node:
        spec["nodeName"] = node  # running load: placed at creation, no scheduler involved
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": run,
            "labels": {ROLE: role},
            "annotations": {"scheduling.k8s.io/group-name": group},
        },
        "spec": spec,
    }


def _podgroup(run: str, name: str, size: int, queue: str, role: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": run, "labels": {ROLE: role}},
        "spec": {"minMember": size, "queue": f"{run}-{queue}"},
    }


def _settled(pg: dict[str, Any]) -> dict[str, Any]:
    """A load PodGroup with the status Volcano's jobStatus and gang plugin give a gang whose pods
    are all on nodes (Running, none of its pods in phase Running: no kubelet runs here, and a
    Scheduled condition), so that neither scheduler has a reason to write it."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    pg["status"] = {
        "phase": "Running",
        "conditions": [
            {
                "type": "Scheduled",
                "status": "True",
                "lastTransitionTime": now,
                "transitionID": "bench",
                "reason": "tasks in gang are ready to be scheduled",
            }
        ],
    }
    return pg


def _gangs(run: str, prefix: str, role: str, pods: int, size: int) -> tuple[list[Any], list[Any]]:
    groups, members = [], []
    for g in range((pods + size - 1) // size):
        n = min(size, pods - g * size)
        groups.append(_podgroup(run, f"{prefix}{g}", n, "qa" if g % 2 == 0 else "qb", role))
        members += [_pod(run, f"{prefix}{g}-p{i}", f"{prefix}{g}", role) for i in range(n)]
    return groups, members


def _scale_setup(api: KubeApi, run: str, args: argparse.Namespace) -> dict[str, str]:
    """Nodes, queues, the namespace and the running load; the load PodGroups' resourceVersions."""
    names = [f"{run}-n{i}" for i in range(args.nodes)]
    res = {"cpu": str(CPU_PER_NODE), "memory": "256Gi", "pods": "500"}

    def node(name: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {OWN: run}},
            "spec": {"taints": [{"key": OWN, "value": run, "effect": "NoSchedule"}]},
        }
        created = api.request("POST", "/api/v1/nodes", body)
        created["status"] = {"capacity": res, "allocatable": res, "conditions": [{"type": "Ready", "status": "True"}]}
        api.request("PUT", f"/api/v1/nodes/{name}/status", created)

    _pool(node, names)
    # "default": both schedulers' --default-queue (vc-scheduler creates its default queue when it is
    # missing, and that on a shared API server would be everyone's); no PodGroup here is in it
    for q, weight in (("qa", 1), ("qb", 3), ("default", 1)):
        body = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": f"{run}-{q}"}}
        api.request("POST", f"{VOLCANO}/queues", {**body, "spec": {"weight": weight, "reclaimable": True}})
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": run}})
    load = args.pods - args.pending
    groups, members = [], []
    for g in range((load + args.size - 1) // args.size):
        n = min(args.size, load - g * args.size)
        groups.append(_podgroup(run, f"l{g}", n, "qa" if g % 2 == 0 else "qb", "load"))
        for i in range(n):
            at = names[(g * args.size + i) % len(names)]
            members.append(_pod(run, f"l{g}-p{i}", f"l{g}", "load", node=at))
    pgs = f"{VOLCANO}/namespaces/{run}/podgroups"
    settled = _pool(lambda pg: api.request("POST", pgs, _settled(pg)), groups)  # status is no subresource
    _pool(lambda p: api.request("POST", f"/api/v1/namespaces/{run}/pods", p), members)
    return {pg["metadata"]["name"]: pg["metadata"]["resourceVersion"] for pg in settled}


def _create_gangs(api: KubeApi, run: str, prefix: str, role: str, pods: int, size: int) -> tuple[float, float]:
    """Pods first, then their PodGroups: a pod without its PodGroup is in no job, so the gangs
    arrive with the PodGroups, within a second or so. When the first and the last PodGroup
    were created."""
    groups, members = _gangs(run, prefix, role, pods, size)
    _pool(lambda p: api.request("POST", f"/api/v1/namespaces/{run}/pods", p), members)
    first = time.time()
    _pool(lambda pg: api.request("POST", f"{VOLCANO}/namespaces/{run}/podgroups", pg), groups)
    return first, time.time()


def _reset(api: KubeApi, run: str, settled: dict[str, str]) -> int:
    """Back to the state after setup: the pending and arrival gangs deleted (the caller creates
    the pending ones anew), every load PodGroup a scheduler wrote put back to its settled status.
    The number of load PodGroups put back."""
    for role in ("pending", "arrival"):
        selector = f"{ROLE}={role}"
        api.call("DELETE", f"/api/v1/namespaces/{run}/pods", gracePeriodSeconds=0, labelSelector=selector)
        api.call("DELETE", f"{VOLCANO}/namespaces/{run}/podgroups", labelSelector=selector)

    def gone() -> bool:
        selector = f"{ROLE} in (pending,arrival)"
        pods = api.request("GET", f"/api/v1/namespaces/{run}/pods", labelSelector=selector, limit=1)["items"]
        pgs = api.request("GET", f"{VOLCANO}/namespaces/{run}/podgroups", labelSelector=selector, limit=1)["items"]
        return not pods and not pgs

    if not until(gone, 120, every_s=0.5):
        raise SystemExit("the pending gangs of the last run are not gone")
    pgs = f"{VOLCANO}/namespaces/{run}/podgroups"
    items = api.request("GET", pgs, labelSelector=f"{ROLE}=load")["items"]
    changed = [pg for pg in items if settled.get(pg["metadata"]["name"]) != pg["metadata"]["resourceVersion"]]

    def put_back(pg: dict[str, Any]) -> None:
        after = api.request("PUT", f"{pgs}/{pg['metadata']['name']}", _settled(pg))
        settled[pg["metadata"]["name"]] = after["metadata"]["resourceVersion"]

    _pool(put_back, changed)
    return len(changed)


class BoundWatch(threading.Thread):
    """Watches the run's pending and arrival pods; the time each was first seen on a node."""

    def __init__(self, api: KubeApi, run: str) -> None:
        super().__init__(daemon=True)
        self.api, self.path = api, f"/api/v1/namespaces/{run}/pods"
        self.selector = f"{ROLE} in (pending,arrival)"
        self.bound: dict[str, tuple[str, float]] = {}  # uid -> (role, first seen bound)
        self.stop = threading.Event()
        self.synced = threading.Event()

    def _see(self, pod: dict[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if pod["spec"].get("nodeName") and uid not in self.bound:
            self.bound[uid] = (pod["metadata"]["labels"].get(ROLE, ""), time.time())

    def times(self, role: str) -> list[float]:
        return sorted(t for r, t in list(self.bound.values()) if r == role)

    def run(self) -> None:
        while not self.stop.is_set():
            listed = self.api.request("GET", self.path, labelSelector=self.selector)
            for pod in listed["items"]:
                self._see(pod)
            self.synced.set()
            version = listed["metadata"]["resourceVersion"]
            query = {"watch": "true", "labelSelector": self.selector, "resourceVersion": version}
            try:
                response = self.api._request(self.path, {**query, "timeoutSeconds": 60}, (10.0, 90.0))
                for line in _lines(response.response):
                    if self.stop.is_set():
                        return
                    if line.strip():
                        event = json.loads(line)
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self._see(event["object"])
            except Exception as exc:  # a broken stream: list and watch again
                print(f"watch: {exc}; again", file=sys.stderr)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client closing a kept-alive connection
            super().handle_error(request, client_address)


class WriteCounter:
    """A plain-HTTP proxy in front of the API server that counts what passes by method.

    strata-volcano's API client only writes (statuses, events; its reads come from the log), so
    putting this between it and the API server costs it a local hop on writes and nothing else;
    other users of the shared API server are not counted, as its own /metrics would count them."""

    def __init__(self, api: KubeApi, run: str) -> None:
        conf = api.client.configuration
        upstream = urlsplit(conf.host)
        ctx = ssl.create_default_context(cafile=conf.ssl_ca_cert)
        if conf.cert_file:
            ctx.load_cert_chain(conf.cert_file, conf.key_file)
        self.counts: Counter[str] = Counter()  # by method
        self.writes_by_resource: Counter[str] = Counter()  # "METHOD resource[/subresource]"
        lock = threading.Lock()
        local = threading.local()
        counter = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                with lock:
                    counter.counts[self.command] += 1
                    if self.command in WRITE_METHODS:
                        own = f"/namespaces/{run}/" in self.path or f"/queues/{run}-" in self.path
                        key = f"{self.command} {_resource(self.path)}{'' if own else ' (not this run)'}"
                        counter.writes_by_resource[key] += 1
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                for attempt in (0, 1):
                    conn = getattr(local, "conn", None)
                    if conn is None:
                        conn = local.conn = http.client.HTTPSConnection(
                            upstream.hostname, upstream.port, context=ctx, timeout=60
                        )
                    try:
                        conn.request(self.command, self.path, body=body, headers=headers)
                        answer = conn.getresponse()
                        data = answer.read()
                        break
                    except (OSError, http.client.HTTPException):
                        conn.close()
                        local.conn = None
                        if attempt:
                            raise
                self.send_response(answer.status)
                for k, v in answer.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward  # noqa: N815 (the base class's names)

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def kubeconfig(self, path: Path) -> Path:
        url = f"http://127.0.0.1:{self.server.server_address[1]}"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "counted", "cluster": {"server": url}}],
                    "users": [{"name": "counted", "user": {}}],
                    "contexts": [{"name": "counted", "context": {"cluster": "counted", "user": "counted"}}],
                    "current-context": "counted",
                }
            )
        )
        return path

    def writes(self) -> int:
        return sum(self.counts[m] for m in WRITE_METHODS)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Cycles(threading.Thread):
    """Each scheduling cycle's length as it ends: (time seen, seconds, binds published or None)."""

    def __init__(self, read: Callable[[], list[tuple[float, int | None]]]) -> None:
        super().__init__(daemon=True)
        self.read = read
        self.seen: list[tuple[float, float, int | None]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(0.1):
            try:
                now = time.time()
                self.seen += [(now, s, b) for s, b in self.read()]
            except OSError:
                pass  # not up yet

    def between(self, start: float, end: float) -> list[float]:
        return [s for t, s, _ in self.seen if start <= t <= end]

    def count_after(self, start: float) -> int:
        return sum(1 for t, _, _ in self.seen if t > start)


def _resource(path: str) -> str:
    """/api/v1/namespaces/NS/pods/NAME/status -> pods/status; /apis/G/V/queues/NAME -> queues."""
    parts = urlsplit(path).path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    return "/".join(rest[:1] + rest[2:3])


def _strata_cycles(log: Path) -> Callable[[], list[tuple[float, int | None]]]:
    """strata-volcano's `-v=1` lines: 'cycle at version N: X ms (...); K BIND_GROUPs, ...', and the
    cycles whose session would have repeated the last one ('...: left out', no BIND_GROUP): a
    cycle of the loop all the same, every --schedule-period, and what an idle cycle costs."""
    pattern = re.compile(rb"cycle at version \d+: (\d+) ms (?:.*; (\d+) BIND_GROUPs|.*: left out)")
    offset = 0

    def read() -> list[tuple[float, int | None]]:
        nonlocal offset
        with log.open("rb") as f:
            f.seek(offset)
            data = f.read()
        whole = data.rfind(b"\n") + 1
        offset += whole
        return [(int(m.group(1)) / 1000, int(m.group(2) or 0)) for m in pattern.finditer(data[:whole])]

    return read


def _metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("volcano_e2e_scheduling_latency_milliseconds_"):
            name, _, value = line.partition(" ")
            found[name] = float(value)
        elif line.startswith("rest_client_requests_total{"):
            m = re.search(r'method="(\w+)"', line)
            if m:
                found[f"rest:{m.group(1)}"] = found.get(f"rest:{m.group(1)}", 0.0) + float(line.rsplit(" ", 1)[1])
    return found


def _vc_cycles(url: str) -> Callable[[], list[tuple[float, int | None]]]:
    """vc-scheduler's e2e histogram: each new observation's milliseconds, from its sum and count
    (polled every 0.1 s; two cycles ending within one poll count as two of their mean)."""
    last = (0.0, 0.0)

    def read() -> list[tuple[float, int | None]]:
        nonlocal last
        m = _metrics(url)
        count = m.get("volcano_e2e_scheduling_latency_milliseconds_count", 0.0)
        total = m.get("volcano_e2e_scheduling_latency_milliseconds_sum", 0.0)
        new = int(count - last[0])
        out: list[tuple[float, int | None]] = [((total - last[1]) / new / 1000, None)] * new if new > 0 else []
        last = (count, total)
        return out

    return read


def _hwm_kb(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _children(pid: int) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    return []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 3)


def _measure(
    api: KubeApi,
    run: str,
    args: argparse.Namespace,
    started: float,
    cycles: Cycles,
    writes: Callable[[], int],
    by_resource: Callable[[], dict[str, int]] | None,  # writes by resource, where the counter knows them
    pids: Callable[[], list[int]],
    alive: Callable[[], bool],
) -> dict[str, Any]:
    """The common part of one scheduler's run, once it has started at ``started``."""
    watch = BoundWatch(api, run)
    watch.start()
    watch.synced.wait(60)
    cycles.start()
    hwm: dict[int, int] = {}

    def sample() -> None:
        for pid in pids():
            hwm[pid] = max(hwm.get(pid, 0), _hwm_kb(pid))

    def wait_bound(role: str, n: int, what: str) -> None:
        deadline = time.monotonic() + args.timeout
        while len(watch.times(role)) < n:
            if not alive():
                raise SystemExit(f"the scheduler exited while {what}")
            if time.monotonic() > deadline:
                raise SystemExit(f"{len(watch.times(role))} of {n} {what} pods bound in {args.timeout} s")
            sample()
            time.sleep(0.2)

    try:
        wait_bound("pending", args.pending, "pending")
        bound = watch.times("pending")
        all_bound = bound[-1]
        # idle: nothing pending; skip the cycles that still write the gangs' statuses
        settle = cycles.count_after(all_bound)
        if not until(lambda: cycles.count_after(all_bound) >= settle + args.settle_cycles, args.timeout):
            raise SystemExit("no cycles after the pending pods were bound")
        idle_start, writes_before = time.time(), writes()
        by_resource_before = by_resource() if by_resource else {}
        if not until(lambda: cycles.count_after(idle_start) >= args.idle_cycles, args.timeout):
            raise SystemExit("too few idle cycles")
        idle_end, idle_writes = time.time(), writes() - writes_before
        idle_by_resource = Counter(by_resource() if by_resource else {})
        idle_by_resource.subtract(by_resource_before)
        sample()
        idle = cycles.between(idle_start, idle_end)
        # arrivals: new gangs, their PodGroups created last so that they arrive within a second
        arrival_start, arrived = _create_gangs(api, run, "a", "arrival", args.arrivals, args.size)
        wait_bound("arrival", args.arrivals, "arrival")
        arrivals_bound = watch.times("arrival")[-1]
        until(lambda: cycles.count_after(arrivals_bound) >= 1, 60)  # the cycle that bound the last one ended
        sample()
        # the cycles that ended after the first PodGroup arrived and began before the last pod was bound
        after = [s for t, s, _ in cycles.seen if t >= arrival_start and t - s <= arrivals_bound]
        ended = time.time()
    finally:
        watch.stop.set()
        cycles.stop.set()
    everything = cycles.between(started, ended)
    busy = cycles.between(started, all_bound + 0.15)  # a cycle is seen up to one poll (0.1 s) after it ended
    return {
        "pods_per_s": round(args.pending / max(all_bound - bound[0], 1e-3), 1),
        "pods_per_s_from_start": round(args.pending / (all_bound - started), 1),
        "bind_span_s": round(all_bound - bound[0], 3),
        "cold_start_to_first_bind_s": round(bound[0] - started, 2),
        "cycle_p50_s": _pct(everything, 0.5),
        "cycle_p99_s": _pct(everything, 0.99),
        "cycles": len(everything),
        "cycles_s": [round(s, 3) for s in everything],
        "cycles_until_all_bound": [round(s, 3) for s in busy],
        "cycle_idle_p50_s": _pct(idle, 0.5),
        "cycle_idle_p99_s": _pct(idle, 0.99),
        "idle_cycles": len(idle),
        "idle_api_writes": idle_writes,
        "idle_api_writes_per_cycle": round(idle_writes / len(idle), 2) if idle else None,
        "idle_api_writes_by_resource": {k: v for k, v in idle_by_resource.items() if v},
        # to objects of other users of the shared API server (Volcano schedules every PodGroup
        # whose queue exists); None where the counter cannot tell (vc-scheduler's)
        "idle_api_writes_not_this_run": sum(v for k, v in idle_by_resource.items() if k.endswith("(not this run)"))
        if by_resource
        else None,
        "arrivals": args.arrivals,
        "arrivals_created_s": round(arrived - arrival_start, 2),  # the PodGroups, the pods before them
        "arrivals_bound_s": round(arrivals_bound - arrived, 2),
        "cycle_after_arrivals_s": round(max(after), 3) if after else None,
        "cycles_after_arrivals": [round(s, 3) for s in after],
        "rss_peak_mb": round(sum(hwm.values()) / 1024, 1),
        "rss_peak_mb_by_process": [round(v / 1024, 1) for v in hwm.values()],  # the sidecar first
        "api_writes": writes(),
    }


def _run_strata(api: KubeApi, base: Settings, run: str, conf: Path, args: argparse.Namespace) -> dict[str, Any]:
    settings = base.with_(topic_prefix=f"bench-volcano-{run}.")
    ensure_topics(settings)
    logs = Path(tempfile.mkdtemp(prefix=f"volcano-scale-{run}-strata-"))
    env = env_for(settings, STRATA_DB_URL=f"sqlite:///{logs / 'c.db'}")
    procs: list[subprocess.Popen[bytes]] = []
    counter = WriteCounter(api, run)

    def start(name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        with (logs / f"{name}.log").open("wb") as err:
            proc = subprocess.Popen(argv, env=env, stderr=err, stdout=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    fold = ["--scheduler-name", run, "--default-queue", f"{run}-default"]
    try:
        # the deployment around the replica, not timed: the cluster in the log, the binder, and a
        # checkpoint of the log's fold (the projector's), which a replica's sidecar starts from
        began = time.time()
        start("ingest", [STRATA, "ingest"])
        if not until(lambda: "synced:" in (logs / "ingest.log").read_text(), args.timeout):
            raise SystemExit(f"ingest did not sync; see {logs}")
        synced = time.time()
        start("bind", [STRATA, "bind", *fold])
        if args.checkpoint:
            project = [STRATA, "project", "--stop-at-end", "--no-audit", "--replica", "bench", *fold]
            with (logs / "project.log").open("wb") as err:
                subprocess.run(project, env=env, check=True, stdout=subprocess.DEVNULL, stderr=err)
        print(f"strata-volcano: logs in {logs}", file=sys.stderr)
        started = time.time()
        replica = start(
            "r0",
            [
                *_volcano_command(),
                "--replica",
                "r0",
                "--scheduler-conf",
                str(conf),
                "--schedule-period",
                args.period,
                "--kubeconfig",
                str(counter.kubeconfig(logs / "counted.kubeconfig")),
                *fold,
                "--",
                "-v=1",
            ],
        )
        result = _measure(
            api,
            run,
            args,
            started,
            Cycles(_strata_cycles(logs / "r0.log")),
            counter.writes,
            lambda: dict(counter.writes_by_resource),
            lambda: [replica.pid, *_children(replica.pid)],
            lambda: replica.poll() is None,
        )
        result["api_writes_by_method"] = dict(counter.counts)
        result["api_writes_by_resource"] = dict(counter.writes_by_resource)
        result["ingest_synced_s"] = round(synced - began, 1)  # not part of the cold start
        result["checkpoint_s"] = round(started - synced, 1) if args.checkpoint else None  # nor this
        result["logs"] = str(logs)
        return result
    finally:
        for proc in reversed(procs):
            terminate(proc)
        counter.close()
        drop_topics(settings)


def _run_vc(api: KubeApi, base: Settings, run: str, conf: Path, args: argparse.Namespace) -> dict[str, Any]:
    from strata.dev.stack.vcscheduler import ensure

    binary = ensure(log=lambda line: print(line, file=sys.stderr))
    logs = Path(tempfile.mkdtemp(prefix=f"volcano-scale-{run}-vc-"))
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    argv = [
        str(binary),
        f"--kubeconfig={base.kubeconfig}",
        f"--scheduler-name={run}",
        f"--default-queue={run}-default",
        f"--scheduler-conf={conf}",
        f"--schedule-period={args.period}",
        "--leader-elect=false",
        "--enable-metrics=true",
        f"--listen-address=127.0.0.1:{port}",
        f"--healthz-address=127.0.0.1:{_free_port()}",
        "--feature-gates=ResourceTopology=false",  # no Numatopology CRD on this API server
        "--cache-dumper=false",
        "-v=1",
    ]
    print(f"vc-scheduler: logs in {logs}", file=sys.stderr)
    started = time.time()
    with (logs / "vc-scheduler.log").open("wb") as err:
        proc = subprocess.Popen(argv, stderr=err, stdout=subprocess.DEVNULL)

    def writes() -> int:
        with contextlib.suppress(OSError):
            m = _metrics(url)
            return int(sum(m.get(f"rest:{v}", 0.0) for v in WRITE_METHODS))
        return 0

    try:
        # its client's counter has no resource label: the idle writes by resource stay empty
        cycles = Cycles(_vc_cycles(url))
        alive = lambda: proc.poll() is None  # noqa: E731
        result = _measure(api, run, args, started, cycles, writes, None, lambda: [proc.pid], alive)
        result["api_writes_by_method"] = {
            k.removeprefix("rest:"): int(v) for k, v in _metrics(url).items() if k.startswith("rest:")
        }
        result["logs"] = str(logs)
        return result
    finally:
        terminate(proc)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def _verdicts(out: dict[str, Any]) -> list[str]:
    """One line per target: the figure, the reference (the target, or vc-scheduler's), pass/fail."""
    s, r = out["strata_volcano"], out["ratios"]
    scale = f"at {out['nodes']} nodes / {out['pods']} pods (the target is for 5000 / 150000)"
    rows = [
        ("idle cycle p50 <= 1 s " + scale, s.get("cycle_idle_p50_s"), "<=", TARGETS["cycle_idle_p50_s"]),
        ("idle API writes == 0 " + scale, s.get("idle_api_writes"), "==", TARGETS["idle_api_writes"]),
        ("cycle after arrivals <= 2 s", s.get("cycle_after_arrivals_s"), "<=", TARGETS["cycle_after_arrivals_s"]),
        ("replica peak RSS <= 1536 MiB", s.get("rss_peak_mb"), "<=", TARGETS["rss_peak_mb"]),
        ("cycle p50 / vc-scheduler's <= 0.5", r["cycle_p50"], "<=", TARGETS["cycle_ratio"]),
        ("idle cycle p50 / vc-scheduler's <= 0.5", r["cycle_idle_p50"], "<=", TARGETS["cycle_ratio"]),
        ("pods/s / vc-scheduler's >= 1.0", r["pods_per_s"], ">=", TARGETS["pods_per_s_ratio"]),
        ("cold start / vc-scheduler's <= 0.25", r["cold_start_to_first_bind"], "<=", TARGETS["cold_start_ratio"]),
    ]
    lines = []
    for what, value, op, ref in rows:
        if value is None:
            verdict = "UNMEASURED"
        else:
            ok = value <= ref if op == "<=" else value >= ref if op == ">=" else value == ref
            verdict = "PASS" if ok else "FAIL"
        lines.append(f"{verdict}: {what}: {value} (reference {ref})")
    return lines


def scale(api: KubeApi, base: Settings, args: argparse.Namespace) -> dict[str, Any]:
    run = f"vs-{uuid.uuid4().hex[:6]}"
    work = Path(tempfile.mkdtemp(prefix=f"volcano-scale-{run}-"))
    conf = work / "scheduler.conf"
    conf.write_text(SCHEDULER_CONF)
    began = time.time()
    print(f"{run}: creating {args.nodes} nodes, {args.pods - args.pending} running pods", file=sys.stderr)
    out: dict[str, Any] = {"nodes": args.nodes, "pods": args.pods, "pending": args.pending, "size": args.size}
    nodes = [f"{run}-n{i}" for i in range(args.nodes)]
    try:
        settled = _scale_setup(api, run, args)
        out["setup_s"] = round(time.time() - began, 1)
        for which in args.order.split(","):
            put_back = _reset(api, run, settled)
            print(f"{run}: {which}: {args.pending} pending pods; {put_back} load PodGroups put back", file=sys.stderr)
            _create_gangs(api, run, "p", "pending", args.pending, args.size)
            runner = _run_strata if which == "strata_volcano" else _run_vc
            out[which] = runner(api, base, run, conf, args)
            out[which]["load_podgroups_put_back"] = put_back
            print(f"{run}: {which}: {json.dumps(out[which])}", file=sys.stderr)
    finally:
        api.call("DELETE", f"/api/v1/namespaces/{run}/pods", gracePeriodSeconds=0)
        api.call("DELETE", f"/api/v1/namespaces/{run}/events")  # the schedulers'
        _teardown(api, run, [])
        api.call("DELETE", f"{VOLCANO}/queues/{run}-default")
        # no namespace controller runs here: empty, the namespace is finalized by hand
        ns = api.call("GET", f"/api/v1/namespaces/{run}").body
        if ns and not api.request("GET", f"/api/v1/namespaces/{run}/pods", limit=1)["items"]:
            api.call("PUT", f"/api/v1/namespaces/{run}/finalize", {**ns, "spec": {"finalizers": []}})
        _pool(lambda name: api.call("DELETE", f"/api/v1/nodes/{name}"), nodes)  # those never made: 404
    s, v = out["strata_volcano"], out["vc_scheduler"]
    for key in ("cycle_idle_p50_s", "cycle_idle_p99_s", "cycle_after_arrivals_s", "rss_peak_mb", "idle_api_writes"):
        out[key] = s[key]
    out["ratios"] = {  # strata-volcano / vc-scheduler
        "cycle_p50": _ratio(s["cycle_p50_s"], v["cycle_p50_s"]),
        "cycle_idle_p50": _ratio(s["cycle_idle_p50_s"], v["cycle_idle_p50_s"]),
        "cycle_after_arrivals": _ratio(s["cycle_after_arrivals_s"], v["cycle_after_arrivals_s"]),
        "pods_per_s": _ratio(s["pods_per_s"], v["pods_per_s"]),
        "cold_start_to_first_bind": _ratio(s["cold_start_to_first_bind_s"], v["cold_start_to_first_bind_s"]),
        "rss_peak_mb": _ratio(s["rss_peak_mb"], v["rss_peak_mb"]),
    }
    out["targets"] = _verdicts(out)
    out["period"] = args.period
    out["checkpoint"] = args.checkpoint
    out["date"] = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gangs", type=int, default=250)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--nodes", type=int, help="default: 20; with --scale 1000")
    parser.add_argument("--replicas", default="1,2,3")
    parser.add_argument("--raw", action="store_true", help="also the API server's ceiling: Bindings POSTed directly")
    parser.add_argument(
        "--example",
        action="store_true",
        help="also one replica of the example scheduler (it reads no node selector or toleration: on a shared "
        "API server it binds onto other runs' nodes; use an API server of your own)",
    )
    parser.add_argument("--timeout", type=float, default=300.0)
    scaled = parser.add_argument_group("--scale: strata-volcano beside vc-scheduler on the same objects")
    scaled.add_argument("--scale", action="store_true", help="run strata-volcano and vc-scheduler side by side")
    scaled.add_argument("--json", action="store_true", help="print only the JSON object on stdout")
    scaled.add_argument("--pods", type=int, default=30000, help="pods in all, the running load and the pending")
    scaled.add_argument("--pending", type=int, help="pods in pending gangs (default: a tenth of --pods)")
    scaled.add_argument("--arrivals", type=int, default=1000, help="pods that arrive once everything is bound")
    scaled.add_argument("--period", default="1s", help="both schedulers' --schedule-period")
    scaled.add_argument("--idle-cycles", type=int, default=10, help="idle cycles to time")
    scaled.add_argument("--settle-cycles", type=int, default=3, help="cycles skipped after the last bind")
    scaled.add_argument("--order", default="strata_volcano,vc_scheduler")
    scaled.add_argument(
        "--no-checkpoint",
        dest="checkpoint",
        action="store_false",
        help="start strata-volcano's sidecar from the log's beginning, not from a projector's checkpoint",
    )
    args = parser.parse_args()
    base = settings_from()
    api = KubeApi(base.kubeconfig, pool_size=8)
    if args.scale:
        args.nodes = args.nodes or 1000
        args.pending = args.pods // 10 if args.pending is None else args.pending
        if "STRATA_VOLCANO_BIN" not in os.environ:
            from strata.dev.stack.volcano import ensure

            os.environ["STRATA_VOLCANO_BIN"] = str(ensure(log=lambda line: print(line, file=sys.stderr)))
        out = scale(api, base, args)
        if not args.json:
            print("\n".join(out["targets"]))
        else:
            print("\n".join(out["targets"]), file=sys.stderr)
        print(json.dumps(out), flush=True)
        return
    args.nodes = args.nodes or 20
    if "STRATA_VOLCANO_BIN" not in os.environ:
        from strata.dev.stack.volcano import ensure

        os.environ["STRATA_VOLCANO_BIN"] = str(ensure(log=lambda line: print(line, file=sys.stderr)))
    if args.raw:
        run = f"vb-{uuid.uuid4().hex[:6]}"
        nodes = [f"{run}-n{i}" for i in range(args.nodes)]
        api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": run}})
        for name in nodes:
            node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
            api.request("POST", "/api/v1/nodes", {**node, "status": {"allocatable": {"cpu": "1000", "pods": "100000"}}})
        try:
            direct = KubeApi(base.kubeconfig, pool_size=32)
            print(json.dumps(raw(direct, run, nodes, args.gangs * args.size, 32)), flush=True)
        finally:
            _teardown(api, run, nodes)
    for n in (int(r) for r in args.replicas.split(",") if r):
        print(json.dumps(one_run(api, base, args, n, example=False)), flush=True)
    if args.example:
        print(json.dumps(one_run(api, base, args, 1, example=True)), flush=True)


if __name__ == "__main__":
    main()
