"""The rbac scenario: each component with its own ServiceAccount token, bound by the RBAC manifest
Strata ships (deploy/rbac/), against the local kube-apiserver (RBAC on, tokens from TokenRequest).

`strata ingest`, `strata bind` and `strata evict` run as subprocesses with their own kubeconfig; a
scheduler replica's status writes and events (``StatusUpdater``, ``ApiEventRecorder``) run here.
Each does its job, and each is refused (403) what belongs to another. Every check is one run.
The evictor runs twice: in its default mode (eviction) with deploy/rbac/evictor.yaml, then in
volcano mode with deploy/rbac/evictor-volcano.yaml (its own ServiceAccount, the delete rights).

The scenario needs a checkout of Strata (deploy/rbac, which the wheel lacks) and the kube-apiserver
of `strata dev up --kube` (or the cluster of the settings' kubeconfig, where it may create
ServiceAccounts, ClusterRoles and bindings). Tokens are never printed; the kubeconfigs holding them
are 0600 files under the work directory, and no subprocess's output may contain them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from strata.dev.faults import FaultContext, FaultResult, Verdict
from strata.dev.faults.common import STRATA, LogView, env_for, pod_body, terminate, until
from strata.dev.stack.manifests import COMPONENTS, DEPLOY, component_kubeconfig
from strata.errors import StrataError
from strata.kubeapi import ApiError, KubeApi
from strata.log.cachelog import CacheLogReader, CacheLogWriter
from strata.log.topics import drop_topics, ensure_topics
from strata.schemas import Bind, BindSucceeded, Evict, EvictSucceeded, Synced

KINDS = {"Pod", "Node", "PodGroup", "Queue", "PriorityClass", "CSINode", "HyperNode"}
VOLCANO = "/apis/scheduling.volcano.sh/v1beta1"
WAIT_S = 60.0


def run(ctx: FaultContext) -> FaultResult:
    if not DEPLOY.is_dir():
        raise StrataError(f"the rbac scenario needs a checkout of Strata (deploy/rbac); {DEPLOY.parents[1]} is none")
    admin = ctx.settings.kubeconfig or os.environ.get("KUBECONFIG")
    if not admin:
        raise StrataError("the rbac scenario needs the admin kubeconfig (--kubeconfig or KUBECONFIG)")
    scenario = _Scenario(ctx, admin)
    try:
        scenario.run()
    finally:
        scenario.cleanup()
    return scenario.result


def _until(probe: Callable[[], Any], timeout_s: float = WAIT_S) -> bool:
    return until(probe, timeout_s, tolerate=(ApiError,))


class _Scenario:
    def __init__(self, ctx: FaultContext, admin_kubeconfig: str) -> None:
        self.ctx = ctx
        self.result = FaultResult("rbac")
        self.admin_path = admin_kubeconfig
        self.admin = KubeApi(admin_kubeconfig)
        tag = uuid.uuid4().hex[:8]
        self.tag = tag
        self.settings = ctx.settings.with_(
            topic_prefix=f"faults-rbac-{tag}.",
            command_partitions=2,
            retry_delays_s=(1, 2),
            data_dir=ctx.workdir / "data",
            kubeconfig=admin_kubeconfig,
            db_url=None,
        )
        self.ns = f"rbac-{tag}"
        self.node = f"rbac-{tag}-n1"
        self.queue = f"rbac-{tag}-q"
        self.kubeconfigs: dict[str, Path] = {}
        self.outputs: dict[str, Path] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.uids: dict[str, str] = {}
        self.log: LogView | None = None
        self.topics = False

    # ------------------------------------------------------------------------------ checks
    def expect(self, ok: bool, note: str) -> bool:
        self.result.runs += 1
        if ok:
            self.result.passed += 1
        else:
            self.result.notes.append(note)
            self.ctx.log(f"rbac: FAILED: {note}")
        return ok

    def refused(self, who: str, what: str, method: str, path: str, body: Any = None) -> None:
        verdict = _refusal(KubeApi(str(self.kubeconfigs[who])), method, path, body)
        self.expect(verdict.clean, f"{who}: {what} {'; '.join(verdict.problems)}")

    def allowed(self, who: str, what: str, action: Callable[[], Any]) -> None:
        try:
            action()
        except ApiError as exc:
            self.expect(False, f"{who}: {what} was refused (HTTP {exc.status}: {exc.detail[:120]})")
            return
        self.expect(True, "")

    def granted(self, who: str, path: str) -> None:
        """Until the component's token may GET ``path`` (a fresh binding takes the authorizer a moment)."""
        api = KubeApi(str(self.kubeconfigs[who]))
        if not _until(lambda: api.call("GET", path, timeout=10.0).status == 200, 15.0):
            self.expect(False, f"{who}: GET {path} still refused 15 s after its RBAC was applied")

    # ------------------------------------------------------------------------------ setup
    def run(self) -> None:
        self.ctx.workdir.mkdir(parents=True, exist_ok=True)
        (self.ctx.workdir / "data").mkdir(exist_ok=True)
        for component in COMPONENTS:
            self.kubeconfigs[component] = component_kubeconfig(
                self.admin_path, component, self.ctx.workdir / f"{component}.kubeconfig"
            )
        for name, path in self.kubeconfigs.items():
            mode = path.stat().st_mode & 0o777
            self.expect(mode == 0o600, f"{name}: its kubeconfig has mode {mode:o}, not 600")
        ensure_topics(self.settings)
        self.topics = True
        self._objects()
        self.log = LogView(CacheLogReader(self.settings))
        self.ingest()
        self.binder()
        self.evictor()
        self.replica()
        self._stop("ingest")
        self._no_token_in_outputs()

    def _objects(self) -> None:
        api = self.admin
        api.request(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.ns}}
        )
        capacity = {"cpu": "32", "memory": "256Gi", "pods": "110"}
        api.request(
            "POST",
            "/api/v1/nodes",
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": self.node},
                "status": {
                    "capacity": capacity,
                    "allocatable": capacity,
                    "conditions": [{"type": "Ready", "status": "True"}],
                },
            },
        )
        api.request(
            "POST",
            f"{VOLCANO}/queues",
            {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": self.queue}},
        )
        api.request(
            "POST",
            f"{VOLCANO}/namespaces/{self.ns}/podgroups",
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "pg", "namespace": self.ns},
                "spec": {"minMember": 1, "queue": self.queue},
            },
        )
        # b1 waits to be bound; e1 and v1 run on the node (no kubelet: their status says so)
        for name in ("b1", "e1", "v1"):
            body = pod_body(self.ns, name, "pg")
            if name != "b1":
                body["spec"]["nodeName"] = self.node
            pod = api.request("POST", f"/api/v1/namespaces/{self.ns}/pods", body)
            self.uids[name] = pod["metadata"]["uid"]
            if name != "b1":
                running = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
                api.request("PATCH", f"/api/v1/namespaces/{self.ns}/pods/{name}/status", {"status": running})

    # ------------------------------------------------------------------------------ processes
    def _start(self, name: str, kubeconfig: str, *args: str) -> None:
        env = env_for(self.settings, KUBECONFIG=str(self.kubeconfigs[kubeconfig]))
        env.pop("STRATA_DB_URL", None)  # checkpoints in SQLite under the work directory
        out = self.ctx.workdir / f"{name}.out"
        self.outputs[name] = out
        with out.open("wb") as f:
            self.procs[name] = subprocess.Popen([STRATA, *args], env=env, stdout=f, stderr=subprocess.STDOUT)

    def _stop(self, name: str) -> None:
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        terminate(proc)
        tail = self.outputs[name].read_text(errors="replace").strip().splitlines()[-1:] or [""]
        self.expect(proc.returncode == 0, f"{name}: exited {proc.returncode}: {tail[0][:200]}")

    def _log(self) -> LogView:
        if self.log is None:
            raise StrataError("the rbac scenario's phases run after its log view is open")
        return self.log

    def _alive(self, name: str) -> bool:
        return self.procs[name].poll() is None

    def _no_token_in_outputs(self) -> None:
        tokens = []
        for path in self.kubeconfigs.values():
            tokens.append(yaml.safe_load(path.read_text())["users"][0]["user"]["token"])
        for name, out in self.outputs.items():
            self.expect(_holds_none(out.read_bytes(), tokens).clean, f"{name}: its output holds a token")
        # negative controls: the same checks on outcomes known to be wrong
        self.result.control("a token in an output", _holds_none(f"token: {tokens[0]}".encode(), tokens))
        self.result.control("an allowed request taken for refused", _refusal(self.admin, "GET", "/api/v1/nodes"))

    # ------------------------------------------------------------------------------ phases
    def ingest(self) -> None:
        self.ctx.log("rbac: strata ingest with the strata-ingest token")
        log = self._log()
        self.granted("ingest", "/api/v1/pods?limit=1")
        self._start("ingest", "ingest", "ingest")
        synced = _until(lambda: {r.kind for r in log.of(Synced)} >= KINDS or not self._alive("ingest"))
        synced = synced and self._alive("ingest")
        self.expect(synced, f"ingest: not SYNCED on all seven kinds: {sorted({r.kind for r in log.of(Synced)})}")
        want = {"b1": "Pending", "e1": "Running", "v1": "Running"}
        _until(lambda: log.tasks(self.ns) == want and f"{self.ns}/pg" in log.state.podgroups, 30.0)
        tasks = log.tasks(self.ns)
        self.result.records_lost += len(set(want) - set(tasks))
        self.expect(tasks == want, f"ingest: the fold's tasks are {tasks}, not {want}")
        ns = f"/api/v1/namespaces/{self.ns}"
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"containers": []}}
        self.refused("ingest", "creating a pod", "POST", f"{ns}/pods", pod)
        self.refused("ingest", "binding a pod", "POST", f"{ns}/pods/b1/binding", self._binding("b1"))
        self.refused("ingest", "evicting a pod", "POST", f"{ns}/pods/e1/eviction", self._eviction("e1"))
        self.refused("ingest", "reading secrets", "GET", f"{ns}/secrets")

    def binder(self) -> None:
        self.ctx.log("rbac: strata bind with the strata-binder token")
        log = self._log()
        ns = f"/api/v1/namespaces/{self.ns}"
        self.granted("binder", f"{ns}/pods/b1")
        writer = CacheLogWriter(self.settings)
        writer.append(Bind(pod=self.uids["b1"], node=self.node, replica="faults-rbac"))
        writer.flush()
        self._start("bind", "binder", "bind", "--workers", "1", "--threads", "2", "--instance", f"rbac-{self.tag}-b")

        def bound() -> bool:
            node = self.admin.request("GET", f"{ns}/pods/b1")["spec"].get("nodeName")
            return node == self.node and any(r.pod == self.uids["b1"] for r in log.of(BindSucceeded))

        self.expect(_until(bound), "binder: b1 was not bound (nodeName and BIND_SUCCEEDED)")
        succeeded = [r for r in log.of(BindSucceeded) if r.pod == self.uids["b1"]]
        self.result.duplicates += max(0, len(succeeded) - 1)
        self.refused("binder", "deleting a pod", "DELETE", f"{ns}/pods/b1")
        self.refused("binder", "evicting a pod", "POST", f"{ns}/pods/e1/eviction", self._eviction("e1"))
        self.refused("binder", "updating a PodGroup", "PUT", f"{VOLCANO}/namespaces/{self.ns}/podgroups/pg", self._pg())
        self.refused("binder", "listing secrets", "GET", f"{ns}/secrets")
        self._stop("bind")

    def evictor(self) -> None:
        log = self._log()
        ns = f"/api/v1/namespaces/{self.ns}"
        for who, mode, pod in (("evictor", "eviction", "e1"), ("evictor-volcano", "volcano", "v1")):
            self.ctx.log(f"rbac: strata evict --mode {mode} with the {who} token")
            self.granted(who, f"{ns}/pods/{pod}")
            writer = CacheLogWriter(self.settings)
            writer.append(Evict(pod=self.uids[pod], reason="faults-rbac", replica="faults-rbac"))
            writer.flush()
            name = f"evict-{mode}"
            self._start(name, who, "evict", "--mode", mode, "--workers", "1", "--threads", "2",
                        "--instance", f"rbac-{self.tag}-{mode}")  # fmt: skip

            def evicted(pod: str = pod) -> bool:
                if not any(r.pod == self.uids[pod] for r in log.of(EvictSucceeded)):
                    return False
                answer = self.admin.call("GET", f"{ns}/pods/{pod}")
                return answer.status == 404 or bool(answer.body["metadata"].get("deletionTimestamp"))

            self.expect(_until(evicted), f"{who}: {pod} was not evicted (EVICT_SUCCEEDED and a deleted pod)")
            succeeded = [r for r in log.of(EvictSucceeded) if r.pod == self.uids[pod]]
            self.result.duplicates += max(0, len(succeeded) - 1)
            self.refused(who, "binding a pod", "POST", f"{ns}/pods/b1/binding", self._binding("b1"))
            self.refused(who, "updating a PodGroup", "PUT", f"{VOLCANO}/namespaces/{self.ns}/podgroups/pg", self._pg())
            self.refused(who, "updating a pod", "PUT", f"{ns}/pods/b1", self.admin.request("GET", f"{ns}/pods/b1"))
            self.refused(who, "listing secrets", "GET", f"{ns}/secrets")
            if mode == "eviction":  # the volcano-only rights are not there
                self.refused(who, "deleting a pod", "DELETE", f"{ns}/pods/b1")
                self.refused(who, "patching a pod's status", "PATCH", f"{ns}/pods/b1/status", {"status": {}})
            self._stop(name)

    def replica(self) -> None:
        from strata.scheduler.event_recorder import ApiEventRecorder
        from strata.scheduler.interface import JobStatus, QueueStatus
        from strata.scheduler.status_updater import StatusUpdater

        self.ctx.log("rbac: a replica's status writes and events with the strata-scheduler token")
        self.granted("scheduler", f"{VOLCANO}/namespaces/{self.ns}/podgroups/pg")
        api = KubeApi(str(self.kubeconfigs["scheduler"]))
        updater = StatusUpdater(api)
        self.allowed(
            "scheduler",
            "updating a PodGroup's status",
            lambda: updater.update_pod_group(JobStatus(self.ns, "pg", "Running", running=1)),
        )
        pg = self.admin.request("GET", f"{VOLCANO}/namespaces/{self.ns}/podgroups/pg")
        self.expect(pg.get("status", {}).get("phase") == "Running", "scheduler: the PodGroup's phase is not Running")
        self.allowed(
            "scheduler",
            "updating a Queue's status",
            lambda: updater.update_queue_status(QueueStatus(self.queue, running=1)),
        )
        queue = self.admin.request("GET", f"{VOLCANO}/queues/{self.queue}")
        self.expect(queue.get("status", {}).get("running") == 1, "scheduler: the Queue's status was not written")
        recorder = ApiEventRecorder(api, "strata-scheduler", "faults-rbac")
        self.allowed("scheduler", "creating an Event", lambda: recorder.event(pg, "Normal", "Running", "faults-rbac"))
        ns = f"/api/v1/namespaces/{self.ns}"
        self.refused("scheduler", "binding a pod", "POST", f"{ns}/pods/b1/binding", self._binding("b1"))
        self.refused("scheduler", "evicting a pod", "POST", f"{ns}/pods/b1/eviction", self._eviction("b1"))
        self.refused("scheduler", "listing pods", "GET", f"{ns}/pods")
        self.refused("scheduler", "reading secrets", "GET", f"{ns}/secrets")

    # ------------------------------------------------------------------------------ bodies
    def _binding(self, pod: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod, "namespace": self.ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node},
        }

    def _eviction(self, pod: str) -> dict[str, Any]:
        return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": self.ns}}

    def _pg(self) -> dict[str, Any]:
        return self.admin.request("GET", f"{VOLCANO}/namespaces/{self.ns}/podgroups/pg")

    # ------------------------------------------------------------------------------ cleanup
    def cleanup(self) -> None:
        for name in list(self.procs):
            proc = self.procs.pop(name)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if self.log is not None:
            self.log.close()
        api = self.admin
        ns = f"/api/v1/namespaces/{self.ns}"
        deletions: tuple[tuple[str, str, dict[str, Any]], ...] = (
            ("DELETE", f"{ns}/pods", {"gracePeriodSeconds": 0}),
            ("DELETE", f"{VOLCANO}/namespaces/{self.ns}/podgroups/pg", {}),
            ("DELETE", f"{ns}/events", {}),
            ("DELETE", f"/api/v1/nodes/{self.node}", {}),
            ("DELETE", f"{VOLCANO}/queues/{self.queue}", {}),
        )
        for method, path, query in deletions:
            with contextlib.suppress(Exception):
                api.call(method, path, **query)
        with contextlib.suppress(Exception):
            # no namespace controller runs: without its finalizer gone the namespace stays Terminating
            api.call("DELETE", ns)
            current = api.request("GET", ns)
            current["spec"]["finalizers"] = []
            api.call("PUT", f"{ns}/finalize", current)
        for kubeconfig in self.kubeconfigs.values():
            kubeconfig.unlink(missing_ok=True)  # the tokens expire in an hour; nothing keeps them longer
        if self.topics:
            drop_topics(self.settings)


def _refusal(api: KubeApi, method: str, path: str, body: Any = None) -> Verdict:
    """Clean when the API server refused the request (403)."""
    answer = api.call(method, path, body, timeout=10.0)
    return Verdict() if answer.status == 403 else Verdict(problems=[f"was not refused (HTTP {answer.status})"])


def _holds_none(text: bytes, secrets: list[str]) -> Verdict:
    return Verdict(problems=["holds a token"]) if any(t.encode() in text for t in secrets) else Verdict()
