"""Watch gaps: the API server restarts under a running `strata ingest`, etcd is compacted, and the
ingest process is paused past the watch history while the cluster changes.

The churn changes only what the snapshot shows: volcano pods of a real Queue and PodGroup created,
some bound to nodes and some deleted, the PodGroup's minMember, node labels, PodGroups and nodes
created and deleted. What must hold:

* while ingest is paused and the cluster has changed, `strata verify --against-cluster` reports
  differences, and each changed object (its uid, ``ns/group`` or node name) is named in one: the
  negative control, a log that skipped these watch events, which the check must see;
* after each fault (API server restart; pause past the watch history + compaction + restart, so
  the adapters get a 410 and relist) it finds no difference once ingest has caught up.

Needs the local stack's etcd and kube-apiserver (it restarts the API server: run it alone).
"""

from __future__ import annotations

import base64
import contextlib
import json
import signal
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

from strata.dev.faults import FaultContext, FaultResult, Verdict
from strata.dev.faults.common import STRATA, create_node, env_for, fresh_log, pod_body, strata, terminate
from strata.errors import StrataError
from strata.kubeapi import ApiError, KubeApi

VOLCANO = "/apis/scheduling.volcano.sh/v1beta1"
NODES = 3


def run(ctx: FaultContext) -> FaultResult:
    from strata.dev.stack import Stack

    if not ctx.settings.kubeconfig:
        raise StrataError("the watch-gaps scenario needs the local cluster: set KUBECONFIG (strata dev up exports it)")
    stack = Stack(Path(ctx.settings.data_dir))
    result = FaultResult("watch-gaps")
    cluster = _Cluster(KubeApi(ctx.settings.kubeconfig), f"faults-{uuid.uuid4().hex[:8]}")
    with fresh_log(ctx.settings, "watch") as settings:
        env = env_for(settings, STRATA_DB_URL=f"sqlite:///{ctx.workdir / 'c.db'}")
        cluster.setup()
        ingest = subprocess.Popen([STRATA, "ingest"], env=env, stderr=subprocess.PIPE, text=True)
        try:
            assert ingest.stderr is not None
            if not ingest.stderr.readline().startswith("synced:"):
                raise StrataError("ingest did not sync")
            cluster.churn(10)
            _verified(result, env, "start")

            ctx.log("  the API server restarts under the watches (connections drop mid-stream)")
            stack.apiserver.down()
            stack.apiserver.up(log=lambda _m: None)
            cluster.churn(10)
            _verified(result, env, "API server restart")

            ctx.log("  ingest paused; the cluster changes; etcd compacted; the API server restarts")
            ingest.send_signal(signal.SIGSTOP)
            changed = cluster.churn(30)
            paused = _verify(env)
            # the checker on a log known to lack these changes: it must report them, each of them
            result.control("watch events skipped while ingest is paused", Verdict(lost=len(paused)))
            result.count(seen_all(paused, changed))
            result.notes.append(f"while paused, verify reported {len(paused)} difference(s) for {len(changed)} changes")
            _compact(stack.etcd.url)
            stack.apiserver.down()  # its new watch cache starts after the paused adapter's version
            stack.apiserver.up(log=lambda _m: None)
            cluster.churn(5)
            ingest.send_signal(signal.SIGCONT)
            _verified(result, env, "pause past the watch history + compaction")
        finally:
            ingest.send_signal(signal.SIGCONT)
            terminate(ingest, 120)
            cluster.cleanup()
    return result


def seen_all(found: list[str], changed: set[str]) -> Verdict:
    """Whether the differences found in a log known to lack ``changed`` name each of them."""
    unseen = sorted(key for key in changed if not any(key in line for line in found))
    verdict = Verdict(lost=len(unseen))
    if unseen:
        verdict.problem(f"{len(unseen)} change(s) not reported, e.g. {unseen[:3]}")
    return verdict


class _Cluster:
    """A Queue, a PodGroup and nodes of their own, and a churn of what the snapshot shows."""

    def __init__(self, api: KubeApi, ns: str) -> None:
        self.api = api
        self.ns = ns
        self.queue = f"{ns}-q"
        self.counter = iter(range(1_000_000))
        self.bound: list[str] = []  # pods bound to a node, oldest first
        self.uids: dict[str, str] = {}
        self.extra: list[tuple[str, str]] = []  # (kind, name) of the group and node made last

    def setup(self) -> None:
        self.api.request(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}}
        )
        queue = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": self.queue},
            "spec": {"weight": 1},
        }
        self.api.request("POST", f"{VOLCANO}/queues", queue)
        self._group("g")
        for i in range(NODES):
            create_node(self.api, f"{self.ns}-n{i}")

    def _group(self, name: str, min_member: int = 1) -> None:
        pg = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": self.ns},
            "spec": {"minMember": min_member, "queue": self.queue},
        }
        self.api.request("POST", f"{VOLCANO}/namespaces/{self.ns}/podgroups", pg)

    def churn(self, n: int) -> set[str]:
        """``n`` rounds of changes; returns the snapshot keys they touch (uids, ns/group, node names)."""
        ns, changed = self.ns, set()
        pods = f"/api/v1/namespaces/{ns}/pods"
        for _ in range(n):
            i = next(self.counter)
            created = self.api.request("POST", pods, pod_body(ns, f"p{i}", "g"))
            self.uids[f"p{i}"] = created["metadata"]["uid"]
            changed.add(self.uids[f"p{i}"])
            if i % 2 == 0:  # bound: the task moves onto a node
                node = f"{ns}-n{i % NODES}"
                binding = {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": f"p{i}"},
                    "target": {"kind": "Node", "name": node},
                }
                self.api.request("POST", f"{pods}/p{i}/binding", binding)
                self.bound.append(f"p{i}")
            if i % 4 == 1 and self.bound:  # a bound pod deleted: off its node and out of its job
                gone = self.bound.pop(0)
                self.api.request("DELETE", f"{pods}/{gone}", gracePeriodSeconds=0)
                changed ^= {self.uids[gone]}  # made and deleted in one churn: no trace to see
            if i % 4 == 2:  # the gang's size
                self.api.request(
                    "PATCH",
                    f"{VOLCANO}/namespaces/{ns}/podgroups/g",
                    {"spec": {"minMember": i}},
                    content_type="application/merge-patch+json",
                )
                changed.add(f"{ns}/g")
            if i % 4 == 3:  # a node's labels
                node = f"{ns}-n{i % NODES}"
                self.api.request("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": {"v": str(i)}}})
                changed.add(node)
        # one PodGroup and one node made, the ones of the last round deleted
        for kind, name in self.extra:
            self._delete(kind, name)
            changed.add(f"{ns}/{name}" if kind == "podgroup" else name)
        tag = next(self.counter)
        self._group(f"x{tag}")
        create_node(self.api, f"{ns}-x{tag}")
        self.extra = [("podgroup", f"x{tag}"), ("node", f"{ns}-x{tag}")]
        changed |= {f"{ns}/x{tag}", f"{ns}-x{tag}"}
        return changed

    def _delete(self, kind: str, name: str) -> None:
        path = f"{VOLCANO}/namespaces/{self.ns}/podgroups/{name}" if kind == "podgroup" else f"/api/v1/nodes/{name}"
        self.api.request("DELETE", path)

    def _nodes(self) -> list[str]:
        return [f"{self.ns}-n{i}" for i in range(NODES)] + [name for kind, name in self.extra if kind == "node"]

    def cleanup(self) -> None:
        ns = self.ns
        for call in (
            lambda: self.api.request("DELETE", f"/api/v1/namespaces/{ns}/pods", gracePeriodSeconds=0),
            lambda: self.api.request("DELETE", f"{VOLCANO}/namespaces/{ns}/podgroups"),
            *(lambda n=n: self.api.request("DELETE", f"/api/v1/nodes/{n}") for n in self._nodes()),
            lambda: self.api.request("DELETE", f"{VOLCANO}/queues/{self.queue}"),
            lambda: self.api.request("DELETE", f"/api/v1/namespaces/{ns}"),
        ):
            with contextlib.suppress(ApiError):
                call()


def _verify(env: dict[str, str]) -> list[str]:
    out = strata("verify", "--against-cluster", env=env)
    if out.returncode not in (0, 1):
        raise StrataError(f"strata verify failed: {out.stderr.strip()[-300:]}")
    return [line for line in out.stdout.splitlines() if line.strip()]


def _verified(result: FaultResult, env: dict[str, str], what: str, timeout_s: float = 90.0) -> None:
    """Run `strata verify --against-cluster` until it finds no difference (the adapters catch up)."""
    deadline = time.monotonic() + timeout_s
    while found := _verify(env):
        if time.monotonic() > deadline:
            verdict = Verdict(lost=len(found), mismatches=1)
            result.count(verdict.problem(f"{what}: {len(found)} difference(s), e.g. {found[:1]}"))
            return
        time.sleep(2.0)
    result.count(Verdict())


def _compact(etcd_url: str) -> None:
    """Compact etcd at its current revision (the v3 JSON gateway; no etcdctl needed)."""
    key = base64.b64encode(b"/").decode()
    revision = int(_post(etcd_url, "/v3/kv/range", {"key": key, "limit": 1})["header"]["revision"])
    _post(etcd_url, "/v3/kv/compaction", {"revision": revision, "physical": True})


def _post(base: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())
