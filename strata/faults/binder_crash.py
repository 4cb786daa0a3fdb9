"""Binder and evictor crash: SIGKILL `strata bind` and `strata evict` mid-batch, again and again.

What must hold: every admitted BIND ends bound exactly once where it was admitted (or in
BIND_FAILED), no task stays Binding, no pod is bound elsewhere (a duplicate that reached the API
server would show there), and every applied EVICT ends in EVICT_SUCCEEDED or EVICT_FAILED.
Needs the local kube-apiserver (KUBECONFIG).
"""

from __future__ import annotations

import contextlib
import random
import signal
import subprocess
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ingest.kube import ApiError, KubeApi
from projector.state import CacheState, FoldConfig
from schemas import Bind, BindFailed, BindSucceeded, Evict, EvictFailed, EvictSucceeded
from strata.cachelog import CacheLogReader, CacheLogWriter
from strata.config import Settings
from strata.errors import StrataError
from strata.faults import FaultContext, FaultResult
from strata.faults.common import STRATA, LogView, env_for, fresh_log, terminate, until

VOLCANO = "/apis/scheduling.volcano.sh/v1beta1"
GROUP = "scheduling.k8s.io/group-name"
NODES = 4


def run(ctx: FaultContext) -> FaultResult:
    if not ctx.settings.kubeconfig:
        raise StrataError("the binder-crash scenario needs a cluster: set KUBECONFIG (strata dev up exports it)")
    result = FaultResult("binder-crash")
    pods, kills = (60, 2) if ctx.quick else (400, 8)
    rng = random.Random(7)
    api = KubeApi(ctx.settings.kubeconfig)
    ns = f"faults-{uuid.uuid4().hex[:8]}"
    with fresh_log(ctx.settings, "binder") as settings:
        env = env_for(settings, STRATA_DB_URL=f"sqlite:///{ctx.workdir / 'c.db'}", STRATA_RETRY_DELAYS="1,2")
        fold = ["--scheduler-name", ns]
        config = FoldConfig(scheduler_names=(ns,))
        log = LogView(CacheLogReader(settings), config)  # the log as it grows, read once
        try:
            uids = _cluster(api, ns, pods)
            ingest = subprocess.Popen(
                [STRATA, "ingest", "--kinds", "Pod,Node,PodGroup"], env=env, stderr=subprocess.PIPE, text=True
            )
            try:
                assert ingest.stderr is not None
                if not ingest.stderr.readline().startswith("synced:"):
                    raise StrataError("ingest did not sync")
                _wait(lambda: len(log.refresh().state.tasks) >= pods, 60, "pods in the log")
                writer = CacheLogWriter(settings)
                placement = {uid: f"{ns}-n{i % NODES}" for i, uid in enumerate(sorted(uids.values()))}
                for uid, node in placement.items():
                    writer.append(Bind(pod=uid, node=node, replica="faults"))
                writer.flush()
                _crash_loop(result, ctx, rng, [STRATA, "bind", "--instance", f"{ns}-b", *fold], env, kills)
                # done once every BIND has its outcome in the log, not once the API has every pod bound:
                # a batch whose transaction aborted as the last binder stopped is redone only by a
                # later binder, so stopping at "all bound" could leave outcomes unwritten
                _finish(
                    [STRATA, "bind", "--instance", f"{ns}-b", *fold],
                    env,
                    lambda: _all_bound(api, ns, pods) and _outcomes(log, (BindSucceeded, BindFailed)) >= set(placement),
                )
                bound = {p["metadata"]["uid"]: p["spec"].get("nodeName") for p in _list(api, ns)}
                result.duplicates += sum(1 for uid, node in placement.items() if bound.get(uid) not in (node, None))
                # evict half of them, with the evictor killed the same way
                evicted = sorted(placement)[: pods // 2]
                for uid in evicted:
                    writer.append(Evict(pod=uid, reason="faults", replica="faults"))
                writer.flush()
                _crash_loop(result, ctx, rng, [STRATA, "evict", "--instance", f"{ns}-e", *fold], env, kills)
                _finish(
                    [STRATA, "evict", "--instance", f"{ns}-e", *fold],
                    env,
                    lambda: _outcomes(log, (EvictSucceeded, EvictFailed)) >= set(evicted),
                )
                # the binds' watch events reach the log after the API has them: wait for them
                _wait(lambda: not _binding(log.refresh().state), 60, "the binds' watch events in the log")
            finally:
                terminate(ingest, 60)
            _check(result, settings, config, placement, set(evicted))
        finally:
            log.close()
            _cleanup(api, ns)
    return result


def _crash_loop(
    result: FaultResult, ctx: FaultContext, rng: random.Random, argv: list[str], env: dict[str, str], kills: int
) -> None:
    for i in range(kills):
        proc = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        time.sleep(rng.uniform(1.0, 2.5))
        alive = proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        result.runs += 1
        result.passed += 1 if alive else 0
        ctx.log(f"  {argv[1]} killed ({i + 1}/{kills})")


def _finish(argv: list[str], env: dict[str, str], done: Any) -> None:
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        _wait(done, 120, f"{argv[1]} to finish")
    finally:
        terminate(proc, 60)


def _check(
    result: FaultResult, settings: Settings, config: FoldConfig, placement: dict[str, str], evicted: set[str]
) -> None:
    state = CacheState(config)
    admitted: dict[str, int] = {}
    outcomes: Counter[str] = Counter()
    evict_outcomes: set[str] = set()
    for entry in CacheLogReader(settings).read():
        outcome = state.apply(entry.record)
        record = entry.record
        if isinstance(record, Bind) and outcome.result == "applied":
            admitted[record.pod] = entry.offset
        elif isinstance(record, (BindSucceeded, BindFailed)):
            outcomes[record.pod] += 1
        elif isinstance(record, (EvictSucceeded, EvictFailed)):
            evict_outcomes.add(record.pod)
    missing = [uid for uid in admitted if not outcomes[uid]]
    binding = _binding(state)
    result.records_lost += len(missing) + len(binding) + len(evicted - evict_outcomes)
    if len(admitted) != len(placement):
        result.notes.append(f"{len(admitted)} of {len(placement)} BINDs admitted")
    repeated = sum(n - 1 for n in outcomes.values() if n > 1)
    result.notes.append(f"{len(admitted)} binds, {len(evicted)} evictions; {repeated} outcome(s) repeated (harmless)")


def _binding(state: CacheState) -> list[str]:
    return [uid for uid, t in state.tasks.items() if t.status == "Binding"]


def _outcomes(log: LogView, kinds: tuple[type, ...]) -> set[str]:
    return {record.pod for record in log.of(*kinds)}


def _wait(done: Any, timeout_s: float, what: str) -> None:
    if not until(done, timeout_s, every_s=0.5):
        raise StrataError(f"timed out waiting for {what}")


def _list(api: KubeApi, ns: str) -> list[dict[str, Any]]:
    return api.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]


def _all_bound(api: KubeApi, ns: str, pods: int) -> bool:
    return sum(1 for p in _list(api, ns) if p["spec"].get("nodeName")) >= pods


def _cluster(api: KubeApi, ns: str, pods: int) -> dict[str, str]:
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    res = {"cpu": "64", "memory": "256Gi", "pods": "500"}
    for i in range(NODES):
        node = api.request(
            "POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"{ns}-n{i}"}}
        )
        node["status"] = {"capacity": res, "allocatable": res, "conditions": [{"type": "Ready", "status": "True"}]}
        api.request("PUT", f"/api/v1/nodes/{ns}-n{i}/status", node)
    groups = max(1, pods // 10)
    for g in range(groups):
        pg = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": f"g{g}", "namespace": ns},
            "spec": {"minMember": 1},
        }
        api.request("POST", f"{VOLCANO}/namespaces/{ns}/podgroups", pg)

    def create(i: int) -> tuple[str, str]:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"p{i}",
                "namespace": ns,
                "annotations": {"scheduling.k8s.io/group-name": f"g{i % groups}"},
            },
            "spec": {
                "schedulerName": ns,
                "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
            },
        }
        created = api.request("POST", f"/api/v1/namespaces/{ns}/pods", pod)
        return created["metadata"]["name"], created["metadata"]["uid"]

    with ThreadPoolExecutor(4) as pool:
        return dict(pool.map(create, range(pods)))


def _cleanup(api: KubeApi, ns: str) -> None:
    for call in (
        lambda: api.request("DELETE", f"/api/v1/namespaces/{ns}/pods", gracePeriodSeconds=0),
        lambda: api.request("DELETE", f"{VOLCANO}/namespaces/{ns}/podgroups"),
        *(lambda i=i: api.request("DELETE", f"/api/v1/nodes/{ns}-n{i}") for i in range(NODES)),
        lambda: api.request("DELETE", f"/api/v1/namespaces/{ns}"),
    ):
        with contextlib.suppress(ApiError):
            call()
