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
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from strata.dev.faults.common import STRATA, env_for, terminate, until
from strata.kubeapi import KubeApi
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gangs", type=int, default=250)
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--replicas", default="1,2,3")
    parser.add_argument("--raw", action="store_true", help="also the API server's ceiling: Bindings POSTed directly")
    parser.add_argument(
        "--example",
        action="store_true",
        help="also one replica of the example scheduler (it reads no node selector or toleration: on a shared "
        "API server it binds onto other runs' nodes; use an API server of your own)",
    )
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()
    base = settings_from()
    api = KubeApi(base.kubeconfig, pool_size=8)
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
