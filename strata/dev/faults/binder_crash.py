"""Binder and evictor crash: SIGKILL `strata bind` and `strata evict` mid-batch, again and again.

What must hold, from the log, the pods and the API server's audit log (``api_writes``):

* every admitted BIND has its outcome, and its pod is bound where it was admitted; a
  BIND_SUCCEEDED names the node the pod is on; a BIND_FAILED for a pod that ended bound is wrong;
* every pod got exactly one Binding call at the API server, and every evicted pod one Eviction: a
  second call that reached the API is a duplicate, whatever it was answered (409 included);
* no task stays Binding, and every applied EVICT ends in EVICT_SUCCEEDED or EVICT_FAILED.

Repeated outcome records (an outcome is written at least once) are counted in the notes: harmless
by construction, see ``binder.worker``. Negative controls: a real second Binding call for one pod,
made on purpose, must be counted as a duplicate, and broken copies of the observation (an outcome
dropped, a pod bound elsewhere, a BIND_FAILED for a bound pod, an eviction repeated, a task left
Binding) must each be reported. Needs the local kube-apiserver (KUBECONFIG).
"""

from __future__ import annotations

import contextlib
import random
import subprocess
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from strata.dev.faults import FaultContext, FaultResult, Verdict
from strata.dev.faults.common import (
    STRATA,
    LogView,
    create_node,
    env_for,
    fresh_log,
    kill_after,
    pod_body,
    settled_writes,
    terminate,
    until,
)
from strata.errors import StrataError
from strata.kubeapi import ApiError, KubeApi
from strata.log.cachelog import CacheLogReader, CacheLogWriter
from strata.log.config import Settings
from strata.projector.fold.kinds import FoldConfig
from strata.projector.fold.state import CacheState
from strata.schemas import Bind, BindFailed, BindSucceeded, Evict, EvictFailed, EvictSucceeded

VOLCANO = "/apis/scheduling.volcano.sh/v1beta1"
NODES = 4


def run(ctx: FaultContext) -> FaultResult:
    if not ctx.settings.kubeconfig:
        raise StrataError("the binder-crash scenario needs a cluster: set KUBECONFIG (strata dev up exports it)")
    result = FaultResult("binder-crash")
    pods, kills = (60, 2) if ctx.quick else (400, 8)
    rng = random.Random(7)
    api = KubeApi(ctx.settings.kubeconfig)
    ns = f"faults-{uuid.uuid4().hex[:8]}"
    # short retry tiers, whose topics the binders check for at start
    with fresh_log(ctx.settings.with_(retry_delays_s=(1, 2)), "binder") as settings:
        env = env_for(settings, STRATA_DB_URL=f"sqlite:///{ctx.workdir / 'c.db'}")
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
            names = {uid: name for name, uid in uids.items()}
            seen = _observe(settings, config, placement, names, set(evicted), api, ns)
            result.count(check(seen))
            _controls(result, seen, settings, api, ns)
            result.notes.append(
                f"{len(seen.admitted)} binds, {len(evicted)} evictions, {seen.calls} API writes audited "
                f"({seen.retried} after a failed call); {seen.repeated_outcomes} outcome record(s) repeated (harmless)"
            )
        finally:
            log.close()
            _cleanup(api, ns)
    return result


def _crash_loop(
    result: FaultResult, ctx: FaultContext, rng: random.Random, argv: list[str], env: dict[str, str], kills: int
) -> None:
    for i in range(kills):
        alive, _ = kill_after(argv, env, rng.uniform(1.0, 2.5))
        result.runs += 1
        result.passed += 1 if alive else 0
        ctx.log(f"  {argv[1]} killed ({i + 1}/{kills})")


def _finish(argv: list[str], env: dict[str, str], done: Any) -> None:
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        _wait(done, 120, f"{argv[1]} to finish")
    finally:
        terminate(proc, 60)


@dataclass(frozen=True)
class Observed:
    """What the run left behind: the log folded, the pods as the API server has them, its audit."""

    placement: dict[str, str]  # pod uid -> the node its BIND named
    names: dict[str, str]  # pod uid -> pod name
    admitted: frozenset[str]  # uids whose BIND the fold admitted
    bind_outcomes: tuple[BindSucceeded | BindFailed, ...]
    evicted: frozenset[str]  # uids an EVICT was published for
    evict_outcomes: frozenset[str]
    bound: dict[str, str | None]  # pod uid -> its nodeName at the end
    writes: dict[tuple[str, str], tuple[int, ...]]  # (binding|eviction|delete, pod name) -> statuses
    binding: tuple[str, ...]  # tasks still Binding in the fold

    @property
    def calls(self) -> int:
        return sum(len(statuses) for statuses in self.writes.values())

    @property
    def retried(self) -> int:  # calls made after a failed one (a retry tier's), none after a success
        return sum(sum(1 for s in statuses[:-1] if s >= 300) for statuses in self.writes.values())

    @property
    def repeated_outcomes(self) -> int:
        return sum(n - 1 for n in Counter(o.pod for o in self.bind_outcomes).values() if n > 1)


def check(seen: Observed) -> Verdict:
    verdict = Verdict(lost=len(seen.binding) + len(seen.evicted - seen.evict_outcomes))
    if len(seen.admitted) != len(seen.placement):
        verdict.problem(f"{len(seen.admitted)} of {len(seen.placement)} BINDs admitted")
    succeeded: dict[str, set[str]] = {}
    failed = {o.pod for o in seen.bind_outcomes if isinstance(o, BindFailed)}
    for o in seen.bind_outcomes:
        if isinstance(o, BindSucceeded):
            succeeded.setdefault(o.pod, set()).add(o.node)
    for uid in sorted(seen.admitted):
        name, node = seen.names.get(uid, uid), seen.bound.get(uid)
        if uid not in succeeded and uid not in failed:
            verdict.lost += 1
            verdict.problem(f"{name}: admitted BIND without an outcome")
        if uid not in seen.bound and uid in seen.evicted:  # evicted and gone: bound once, as it should
            repeated_calls(verdict, seen.writes.get(("binding", name), ()), name, "Binding", True)
            continue
        if node is None and uid not in failed:
            verdict.lost += 1
            verdict.problem(f"{name}: admitted, never bound")
        if node is not None and node != seen.placement[uid]:
            verdict.mismatches += 1
            verdict.problem(f"{name}: bound to {node}, admitted on {seen.placement[uid]}")
        if node is not None and succeeded.get(uid, {node}) != {node}:
            verdict.mismatches += 1
            verdict.problem(f"{name}: BIND_SUCCEEDED names {sorted(succeeded[uid])}, the pod is on {node}")
        if node is not None and uid in failed:
            verdict.mismatches += 1
            verdict.problem(f"{name}: BIND_FAILED, yet the pod is bound to {node}")
        repeated_calls(verdict, seen.writes.get(("binding", name), ()), name, "Binding", node is not None)
    for uid in sorted(seen.evicted):
        name = seen.names.get(uid, uid)
        calls = seen.writes.get(("eviction", name), ()) + seen.writes.get(("delete", name), ())
        repeated_calls(verdict, calls, name, "Eviction", True)
    return verdict


def repeated_calls(verdict: Verdict, statuses: tuple[int, ...], name: str, what: str, expected: bool) -> None:
    """Every call after the one that took effect is a duplicate, whatever its answer. The call that
    took effect is the first answered with success, or the one before a 409 (a 504 can take
    effect); a retry after a failed call that did nothing (a 504, then 201) is no duplicate."""
    if not statuses:
        if expected:  # the audit log would not show a duplicate either
            verdict.problem(f"{name}: no {what} call in the API server's audit log")
        return
    took = next((i for i, status in enumerate(statuses) if status < 300 or status == 409), len(statuses) - 1)
    if statuses[took] == 409 and took > 0 and _ambiguous(statuses[took - 1]):
        took -= 1
    again = len(statuses) - 1 - took
    if again:
        verdict.duplicates += again
        verdict.problem(f"{name}: {what} called again after it took effect: {list(statuses)}")


def _ambiguous(status: int) -> bool:
    """An answer after which the write may have taken effect all the same (a timeout, a 5xx)."""
    return status >= 500 or status in (0, 408)


def _observe(
    settings: Settings,
    config: FoldConfig,
    placement: dict[str, str],
    names: dict[str, str],
    evicted: set[str],
    api: KubeApi,
    ns: str,
) -> Observed:
    state = CacheState(config)
    admitted: set[str] = set()
    outcomes: list[BindSucceeded | BindFailed] = []
    evict_outcomes: set[str] = set()
    for entry in CacheLogReader(settings).read():
        record = entry.record
        if state.apply(record).result == "applied" and isinstance(record, Bind):
            admitted.add(record.pod)
        elif isinstance(record, (BindSucceeded, BindFailed)):
            outcomes.append(record)
        elif isinstance(record, (EvictSucceeded, EvictFailed)):
            evict_outcomes.add(record.pod)
    return Observed(
        placement=placement,
        names=names,
        admitted=frozenset(admitted),
        bind_outcomes=tuple(outcomes),
        evicted=frozenset(evicted),
        evict_outcomes=frozenset(evict_outcomes),
        bound={p["metadata"]["uid"]: p["spec"].get("nodeName") for p in _list(api, ns)},
        writes=settled_writes(settings, ns),
        binding=tuple(_binding(state)),
    )


def _controls(result: FaultResult, seen: Observed, settings: Settings, api: KubeApi, ns: str) -> None:
    """The checker on broken outcomes: one made for real at the API server, the rest on copies."""
    bound = sorted(uid for uid, node in seen.bound.items() if node and uid in seen.admitted)
    if not bound:
        result.control("a real second Binding call", Verdict())  # nothing to break: the control fails
        return
    uid = bound[0]
    name, node = seen.names[uid], seen.bound[uid]
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    api.call("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding, timeout=10.0)  # 409: bound already
    result.control("a real second Binding call", check(replace(seen, writes=settled_writes(settings, ns))))
    other = next(n for n in sorted(set(seen.placement.values())) if n != node)
    dropped = tuple(o for o in seen.bind_outcomes if o.pod != uid)
    writes = dict(seen.writes)
    evicted = sorted(seen.evicted)
    if evicted:
        key = ("eviction", seen.names[evicted[0]])
        writes[key] = (*writes.get(key, ()), 429)  # even refused, a second call after success
    for what, broken in (
        ("a bind outcome dropped", replace(seen, bind_outcomes=dropped)),
        ("a pod bound elsewhere", replace(seen, bound={**seen.bound, uid: other})),
        ("a BIND_FAILED for a bound pod", replace(seen, bind_outcomes=(*seen.bind_outcomes, BindFailed(pod=uid)))),
        ("an eviction repeated", replace(seen, writes=writes)),
        ("a task left Binding", replace(seen, binding=(uid,))),
    ):
        result.control(what, check(broken))


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
    for i in range(NODES):
        create_node(api, f"{ns}-n{i}")
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
        created = api.request("POST", f"/api/v1/namespaces/{ns}/pods", pod_body(ns, f"p{i}", f"g{i % groups}", ns))
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
