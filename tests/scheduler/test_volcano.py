"""Volcano's own actions and plugins as three active replicas on one cache log (issue 17, item 3),
against the real kube-apiserver and broker: `strata ingest` watches the cluster, `strata bind`
carries out what the fold admitted, three `strata volcano` replicas (the Go binary
strata-volcano, each with its sidecar) race for the same nodes; one is SIGKILLed mid-run.

The workload: 63 gangs / 417 pods of mixed sizes in two weighted queues: plain gangs, gangs with
a node selector, gangs that tolerate the tainted pool (and select it), gangs that can never fit
(a pod bigger than any node; a selector no node matches), and gangs whose minMember is below
their size."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from strata.errors import StrataError
from strata.kubeapi import KubeApi
from strata.log.cachelog import CacheLogReader
from strata.log.config import Settings
from strata.projector.fold.kinds import FoldConfig, node_allocatable
from strata.projector.fold.state import CacheState
from strata.projector.fold.task import ALLOCATED
from strata.schemas import Bind, BindFailed, BindGroup, BindSucceeded, GroupBind, WatchEvent
from strata.schemas.redaction import LAST_APPLIED, redact
from tests.cli.test_cli import STRATA
from tests.cli.test_log import env_of

pytestmark = [pytest.mark.kafka, pytest.mark.kube]
VOLCANO = "/apis/scheduling.volcano.sh/v1beta1"
PLAIN_NODES, TAINTED_NODES = 12, 4
TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
# Other runs' nodes share the API server: this test's nodes carry a taint and a label of its
# namespace, its pods tolerate the one and select the other, so neither side uses the other's.
OWN = "strata.test/ns"


def _go_missing() -> bool:
    from strata.dev.stack.build import GO_FALLBACK

    return shutil.which("go") is None and not GO_FALLBACK.exists() and not os.environ.get("STRATA_VOLCANO_BIN")


@pytest.fixture(scope="session")
def volcano_binary() -> str:
    """strata-volcano built from strata-volcano/ (cached by a hash of its sources)."""
    if _go_missing():
        pytest.skip("Go is needed to build strata-volcano")
    from strata.dev.stack.volcano import ensure

    return str(ensure(log=lambda line: print(line, file=sys.stderr)))


def _volcano_command() -> list[str]:
    """`strata volcano`, or the command itself where the CLI does not list it yet."""
    from strata.cli import main

    if "volcano" in main.commands:
        return [STRATA, "volcano"]
    return [sys.executable, "-c", "from strata.cli.volcano import volcano; volcano(prog_name='strata volcano')"]


# ------------------------------------------------------------------------------------ workload
def _gangs() -> list[dict[str, Any]]:
    """(name, size, minMember, queue, cpu, selector, tolerate, fits) of every gang."""
    gangs = []
    for i in range(40):  # 280 pods of 250m, anywhere untainted
        size = 5 + i % 5
        gangs.append(dict(name=f"plain{i}", size=size, min=size, cpu="250m", pool=None, tolerate=False, fits=True))
    for i in range(10):  # 60 pods of 250m, on pool a only; two take what they can beyond minMember
        gangs.append(
            dict(name=f"sel{i}", size=6, min=4 if i < 2 else 6, cpu="250m", pool="a", tolerate=False, fits=True)
        )
    for i in range(7):  # 56 pods of 500m on the tainted pool (32 cpu)
        gangs.append(dict(name=f"tol{i}", size=8, min=8, cpu="500m", pool="gpu", tolerate=True, fits=True))
    for i in range(4):  # 16 pods of 10 cpu: bigger than any node
        gangs.append(dict(name=f"big{i}", size=4, min=4, cpu="10", pool=None, tolerate=False, fits=False))
    for i in range(2):  # a selector no node matches
        gangs.append(dict(name=f"none{i}", size=3 - i, min=3 - i, cpu="250m", pool="none", tolerate=False, fits=False))
    # Volcano's proportion plugin caps a queue at its deserved share (water-filled by weight over
    # what its jobs request, the gangs that never fit included): qb (weight 3) deserves 96 of the
    # 128 cpu and its fitting gangs take 85; qa (weight 1) deserves 32 and its tainted-pool gangs
    # take 28. Were a queue's fitting gangs beyond its share, whether they all bound would depend
    # on the order in which the replicas saw the waves (a bound gang keeps its nodes).
    for g in gangs:
        g["queue"] = "qa" if g["name"].startswith("tol") or g["name"] in ("big1", "none1") else "qb"
    return gangs


GANGS = _gangs()
PODS = sum(g["size"] for g in GANGS)
assert len(GANGS) >= 60 and PODS >= 400


def _node_names(ns: str) -> list[str]:
    return [f"{ns}-a{i}" for i in range(PLAIN_NODES)] + [f"{ns}-g{i}" for i in range(TAINTED_NODES)]


@pytest.fixture
def cluster(kubeconfig: str, kafka: Settings) -> Iterator[tuple[Settings, KubeApi, str]]:
    api = KubeApi(kubeconfig)
    ns = f"tv-{uuid.uuid4().hex[:8]}"
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    yield kafka.with_(kubeconfig=kubeconfig), api, ns
    for name in _node_names(ns):
        api.request("DELETE", f"/api/v1/nodes/{name}")
    for q in ("qa", "qb"):
        api.request("DELETE", f"{VOLCANO}/queues/{ns}-{q}")
    api.request("DELETE", f"/api/v1/namespaces/{ns}/pods", gracePeriodSeconds=0)
    api.request("DELETE", f"{VOLCANO}/namespaces/{ns}/podgroups")  # no namespace controller runs here
    api.request("DELETE", f"/api/v1/namespaces/{ns}")


def _create_nodes_and_queues(api: KubeApi, ns: str) -> None:
    res = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    for name in _node_names(ns):
        tainted = name.startswith(f"{ns}-g")
        own = {"key": OWN, "value": ns, "effect": "NoSchedule"}
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"pool": "gpu" if tainted else "a", OWN: ns}},
            "spec": {"taints": [own, TAINT] if tainted else [own]},
            "status": {"capacity": res},
        }
        created = api.request("POST", "/api/v1/nodes", node)
        created["status"] = {"capacity": res, "allocatable": res, "conditions": [{"type": "Ready", "status": "True"}]}
        api.request("PUT", f"/api/v1/nodes/{name}/status", created)
    for q, weight in (("qa", 1), ("qb", 3)):
        queue = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": f"{ns}-{q}"},
            "spec": {"weight": weight, "reclaimable": True},
        }
        api.request("POST", f"{VOLCANO}/queues", queue)


WAVES = 6


def _create_gangs(api: KubeApi, ns: str, waves: Iterable[int]) -> None:
    """The gangs in waves while the replicas run, so that they see them together and race."""
    for w in waves:
        _create_wave(api, ns, w)
        time.sleep(0.5)


def _create_wave(api: KubeApi, ns: str, w: int) -> list[str]:
    """The PodGroups and pods of wave ``w``; the pods' names."""
    pods = []
    for g in GANGS[w::WAVES]:
        pg = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": g["name"], "namespace": ns},
            "spec": {"minMember": g["min"], "queue": f"{ns}-{g['queue']}"},
        }
        if g["name"] in USERS_FIELDS:
            pg = _with_users_fields(pg)
        api.request("POST", f"{VOLCANO}/namespaces/{ns}/podgroups", pg)
        pods += [_pod(ns, g, i) for i in range(g["size"])]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda p: api.request("POST", f"/api/v1/namespaces/{ns}/pods", p), pods))
    return [p["metadata"]["name"] for p in pods]


# PodGroups that carry what a user's `kubectl apply` leaves (the last-applied annotation, which
# the log's redacted copy lacks) and a spec field Volcano v1.10's types do not know: the
# replicas' status writes must keep both.
USERS_FIELDS = ("plain0", "tol0")
FUTURE_FIELD = "strataFutureField"


def _with_users_fields(pg: dict[str, Any]) -> dict[str, Any]:
    applied = json.dumps(pg, sort_keys=True)
    return {
        **pg,
        "metadata": {**pg["metadata"], "annotations": {LAST_APPLIED: applied}},
        "spec": {**pg["spec"], FUTURE_FIELD: {"kept": True}},
    }


def _lost_users_fields(pg: dict[str, Any]) -> list[str]:
    """What a write took away of the user's fields (none: both kept)."""
    lost = []
    if LAST_APPLIED not in (pg["metadata"].get("annotations") or {}):
        lost.append(f"the {LAST_APPLIED} annotation")
    if pg["spec"].get(FUTURE_FIELD) != {"kept": True}:
        lost.append(f"spec.{FUTURE_FIELD}")
    return lost


def _race(settings: Settings, api: KubeApi, ns: str, w: int, binaries: list[int]) -> None:
    """Wave ``w`` while the replicas' binaries are stopped, then all of them resumed at once:
    each resumes into a cycle at once (its period has passed) from its sidecar's snapshot,
    which holds the whole wave by then, so they schedule the same gangs from the same version
    and all but the first to publish must lose. Left to their periods, whether two replicas
    ever raced depended on how their cycles' phases fell (one CI run in several saw none)."""
    stopped: list[int] = []
    try:
        for pid in binaries:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        names = set(_create_wave(api, ns, w))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            logged = {
                json.loads(e.record.object)["metadata"]["name"]
                for e in CacheLogReader(settings).read()
                if isinstance(e.record, WatchEvent) and e.record.kind == "Pod" and e.record.namespace == ns
            }
            if names <= logged:
                break
            time.sleep(0.3)
        assert names <= logged, f"the ingest did not publish {sorted(names - logged)[:5]}"
        time.sleep(1.0)  # the sidecars fold what the log carries within milliseconds
    finally:
        for pid in stopped:  # each, whatever another's fate: a stopped binary would hang its stop
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def _pod(ns: str, g: dict[str, Any], i: int) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": ns,  # only this test's pods are the cache's
        "containers": [
            {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": g["cpu"], "memory": "64Mi"}}}
        ],
        "nodeSelector": {OWN: ns},
        "tolerations": [{"key": OWN, "operator": "Equal", "value": ns, "effect": "NoSchedule"}],
    }
    if g["pool"]:
        spec["nodeSelector"]["pool"] = g["pool"]
    if g["tolerate"]:
        spec["tolerations"].append({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{g['name']}-p{i}",
            "namespace": ns,
            "labels": {"gang": g["name"]},
            "annotations": {"scheduling.k8s.io/group-name": g["name"]},
        },
        "spec": spec,
    }


# ------------------------------------------------------------------------------------ processes
class Proc:
    """A started command whose stderr is collected by a thread (so it never blocks on a full pipe)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.popen = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._drain, daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        assert self.popen.stderr is not None
        for line in self.popen.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, pattern: str, timeout_s: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                m = re.search(pattern, line)
                if m:
                    return m
            if self.popen.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no line matching {pattern!r}; stderr:\n" + "\n".join(self.lines[-40:]))

    def stop(self, timeout_s: float = 60) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self._thread.join(timeout=5)
        return self.popen.returncode

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


class Recorder:
    """An HTTP endpoint that records every request and answers 503: a kubeconfig pointing at it
    shows whether a process talks to the API through that configuration."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _any(self) -> None:
                recorder.requests.append(f"{self.command} {self.path}")
                body = b'{"kind":"Status","apiVersion":"v1","status":"Failure","code":503}'
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any  # noqa: N815 (http.server names)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def kubeconfig(self, path: Path) -> str:
        server = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "r", "cluster": {"server": server}}],
                    "users": [{"name": "r", "user": {"token": "recorded"}}],
                    "contexts": [{"name": "r", "context": {"cluster": "r", "user": "r"}}],
                    "current-context": "r",
                }
            )
        )
        return str(path)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# ------------------------------------------------------------------------------------ checks
def _fits(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    selector = pod["spec"].get("nodeSelector") or {}
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        return False
    tolerations = pod["spec"].get("tolerations") or []
    for taint in node["spec"].get("taints") or []:
        if taint["effect"] in ("NoSchedule", "NoExecute") and not any(
            t.get("key") == taint["key"] and t.get("value") == taint.get("value") for t in tolerations
        ):
            return False
    return True


def _pods_by_gang(api: KubeApi, ns: str) -> dict[str, list[dict[str, Any]]]:
    by_gang: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for p in api.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]:
        by_gang[p["metadata"]["labels"]["gang"]].append(p)
    return by_gang


def _quiet(api: KubeApi, ns: str) -> list[str]:
    """What is not yet as it must end: fitting gangs wholly bound, the others not at all, and
    every PodGroup's phase telling which."""
    problems = []
    by_gang = _pods_by_gang(api, ns)
    phases = {
        pg["metadata"]["name"]: (pg.get("status") or {}).get("phase")
        for pg in api.request("GET", f"{VOLCANO}/namespaces/{ns}/podgroups")["items"]
    }
    for g in GANGS:
        bound = sum(1 for p in by_gang[g["name"]] if p["spec"].get("nodeName"))
        if g["fits"] and bound != g["size"]:
            problems.append(f"{g['name']}: {bound} of {g['size']} bound")
        if g["fits"] and phases.get(g["name"]) != "Running":
            problems.append(f"{g['name']}: phase {phases.get(g['name'])}, all bound")
        if not g["fits"] and phases.get(g["name"]) == "Running":
            problems.append(f"{g['name']}: Running with nothing bound")
    return problems


@dataclass
class LogFacts:
    admitted: Counter[str] = field(default_factory=Counter)  # pod uid -> admitted binds
    succeeded: Counter[str] = field(default_factory=Counter)  # pod uid -> BIND_SUCCEEDED
    groups: Counter[str] = field(default_factory=Counter)  # BIND_GROUP verdicts
    rejected_jobs: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))  # job -> losers
    placed: dict[str, str] = field(default_factory=dict)  # pod uid -> node admitted
    problems: list[str] = field(default_factory=list)


def _replay(records: Iterable[Any], ns: str) -> LogFacts:
    """Fold the log as every reader does, and note what the replicas asked and what the fold did;
    after every record, no node the replicas bind onto is over its allocatable."""
    state = CacheState(FoldConfig(scheduler_names=(ns,)))
    facts = LogFacts()
    for offset, record in enumerate(records):
        before = {b.pod: state.tasks.get(b.pod) for b in record.binds} if isinstance(record, BindGroup) else {}
        outcome = state.apply(record)
        if isinstance(record, Bind):
            facts.problems.append(f"offset {offset}: a BIND (strata-volcano publishes BIND_GROUPs)")
        if isinstance(record, BindFailed):
            facts.problems.append(f"offset {offset}: the binder failed: {record.reason}")
        if isinstance(record, BindGroup):
            facts.groups[outcome.result] += 1
            if outcome.result == "applied":
                for b in record.binds:
                    facts.admitted[b.pod] += 1
                    facts.placed[b.pod] = b.node
            else:
                for task in before.values():
                    if task is not None and task.job:
                        facts.rejected_jobs[task.job].add(record.replica or "")
        elif isinstance(record, BindSucceeded):
            facts.succeeded[record.pod] += 1
        elif isinstance(record, WatchEvent) and record.kind == "PodGroup" and record.op != "DELETED":
            pg = json.loads(record.object)
            mine = pg["metadata"].get("namespace") == ns  # other runs share the API server
            if mine and (pg.get("status") or {}).get("phase") == "Running":  # only on admitted binds
                job = f"{pg['metadata']['namespace']}/{pg['metadata']['name']}"
                allocated = sum(1 for t in state.tasks.values() if t.job == job and t.status in ALLOCATED)
                if allocated < pg["spec"].get("minMember", 1):
                    facts.problems.append(f"offset {offset}: PodGroup {job} Running with {allocated} allocated")
        for name in sorted(set(facts.placed.values())):
            used = state.node_used.get(name) or {}
            allocatable = node_allocatable(state.nodes[name], None)
            over = {k: v for k, v in used.items() if v > allocatable.get(k, 0)}
            if over:
                facts.problems.append(f"offset {offset}: node {name} over its allocatable: {over}")
    return facts


def _violations(
    facts: LogFacts, by_gang: dict[str, list[dict[str, Any]]], nodes: dict[str, Any], gangs: list[dict[str, Any]]
) -> list[str]:
    """Everything that breaks the issue's promises, in words (none: all kept)."""
    problems = list(facts.problems)
    problems += [f"pod {uid} admitted {n} times" for uid, n in facts.admitted.items() if n > 1]
    problems += [f"pod {uid} bound {n} times" for uid, n in facts.succeeded.items() if n > 1]
    for pods in by_gang.values():
        for p in pods:
            name, uid, node = p["metadata"]["name"], p["metadata"]["uid"], p["spec"].get("nodeName")
            if node and facts.placed.get(uid) != node:
                problems.append(f"{name} bound to {node}, admitted to {facts.placed.get(uid)}")
            elif node and node not in nodes:
                problems.append(f"{name} on another run's node {node}")
            elif node and not _fits(p, nodes[node]):
                problems.append(f"{name} on {node}, which its selector or the node's taints forbid")
            elif not node and uid in facts.placed:
                problems.append(f"{name} admitted to {facts.placed[uid]} but never bound")
    for g in gangs:
        bound = sum(1 for p in by_gang[g["name"]] if p["spec"].get("nodeName"))
        if 0 < bound < g["min"]:
            problems.append(f"gang {g['name']} partly bound: {bound} < minMember {g['min']}")
        if bound != (g["size"] if g["fits"] else 0):
            problems.append(f"gang {g['name']}: {bound} of {g['size']} bound, {'fits' if g['fits'] else 'cannot fit'}")
    return problems


def _node(name: str, cpu: str, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    res = {"cpu": cpu, "memory": "1Gi", "pods": "10"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"pool": "a"}},
        "spec": {"taints": taints or []},
        "status": {"capacity": res, "allocatable": res},
    }


def _watch(obj: dict[str, Any]) -> WatchEvent:
    meta = obj["metadata"]
    return WatchEvent(
        op="ADDED",
        api_version=obj["apiVersion"],
        kind=obj["kind"],
        name=meta["name"],
        namespace=meta.get("namespace"),
        uid=meta.get("uid"),
        source="test",
        object=json.dumps(obj).encode(),
    )


def test_the_checks_can_fail() -> None:
    """Each promise the replicas test checks is broken here on purpose, and each is caught."""
    g = dict(name="g", size=2, min=2, cpu="1", pool=None, tolerate=False, fits=True)
    pods = [_pod("ns", g, i) for i in range(2)]
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"u{i}"
        p["status"] = {"phase": "Pending"}  # what the API server sets
    tainted = _node("n1", "1", [TAINT])
    pg = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ns"},
        "spec": {"minMember": 2, "queue": "q"},
    }
    squatter = {**_pod("ns", g, 9), "metadata": {"name": "x", "namespace": "ns", "uid": "ux"}}
    squatter["spec"] = {**squatter["spec"], "nodeName": "n1"}
    records = [
        _watch(tainted),
        _watch(pg),
        *(_watch(p) for p in pods),
        BindGroup((GroupBind("u0", "n1", MappingProxyType({})),), replica="r1"),
        BindGroup((GroupBind("u0", "n1", MappingProxyType({})),), replica="r2"),  # rejected: not Pending
        Bind(pod="u1", node="n1", replica="r3", extensions={}),
        _watch(squatter),  # a pod someone else put on the node: over its 1 cpu
        BindSucceeded(pod="u0", node="n1", bind_offset=4),
        BindSucceeded(pod="u0", node="n1", bind_offset=4),
        _watch({**pg, "status": {"phase": "Running"}}),  # a gang of 2 reported Running with 1 bound
    ]
    facts = _replay(records, "ns")
    assert facts.groups == Counter({"applied": 1, "rejected": 1})
    assert facts.rejected_jobs == {"ns/g": {"r2"}}
    pods[0]["spec"]["nodeName"] = "n1"
    problems = _violations(facts, {"g": pods}, {"n1": tainted}, [g])
    expected = [
        "PodGroup ns/g Running with 1 allocated",
        "a BIND (strata-volcano",
        "node n1 over its allocatable",
        "pod u0 bound 2 times",
        "g-p0 on n1, which its selector or the node's taints forbid",
        "gang g partly bound: 1 < minMember 2",
        "gang g: 1 of 2 bound, fits",
    ]
    for words in expected:
        assert any(words in line for line in problems), (words, problems)
    pods[0]["spec"]["nodeName"] = "n2"
    problems = _violations(facts, {"g": pods}, {"n1": tainted, "n2": _node("n2", "1")}, [g])
    assert any("g-p0 bound to n2, admitted to n1" in line for line in problems), problems
    pods[0]["spec"]["nodeName"] = None
    problems = _violations(facts, {"g": pods}, {"n1": tainted}, [g])
    assert any("g-p0 admitted to n1 but never bound" in line for line in problems), problems
    facts.admitted["u0"] += 1
    assert any("pod u0 admitted 2 times" in line for line in _violations(facts, {"g": pods}, {}, [g]))


def test_three_volcano_replicas_on_one_log(
    cluster: tuple[Settings, KubeApi, str], volcano_binary: str, tmp_path: Path
) -> None:
    settings, api, ns = cluster
    _create_nodes_and_queues(api, ns)
    env = {
        **os.environ,
        **env_of(settings),
        "KUBECONFIG": settings.kubeconfig or "",
        "STRATA_DB_URL": f"sqlite:///{tmp_path / 'c.db'}",
        "STRATA_DIGEST_EVERY": "150",
        "STRATA_VOLCANO_BIN": volcano_binary,
    }
    fold = ["--scheduler-name", ns]
    volcano = _volcano_command()
    # replica r3's process environment points KUBECONFIG at one recorder (the vGPU package's
    # init() reads it) and its --kubeconfig at another: the first must see nothing, the second
    # sees the replica's status writes (so a recorder does catch what the process sends)
    env_recorder, flag_recorder = Recorder(), Recorder()
    r3_env = {**env, "KUBECONFIG": env_recorder.kubeconfig(tmp_path / "env.kubeconfig")}
    started = time.monotonic()
    ingest = Proc([STRATA, "ingest"], env)
    binder = Proc([STRATA, "bind", *fold], env)
    replicas: dict[str, Proc] = {}
    try:
        ingest.wait_line(r"^synced:", 60)
        common = [*fold, "--schedule-period", "200ms"]
        replicas["r1"] = Proc([*volcano, "--replica", "r1", "--http-port", "0", *common], env)
        replicas["r2"] = Proc([*volcano, "--replica", "r2", *common], env)
        replicas["r3"] = Proc(
            [
                *volcano,
                "--replica",
                "r3",
                "--kubeconfig",
                flag_recorder.kubeconfig(tmp_path / "flag.kubeconfig"),
                *common,
            ],
            r3_env,
        )
        # r1's probes and Volcano's own metrics
        address = replicas["r1"].wait_line(r"strata-volcano: http://(\S+)/readyz", 60).group(1)
        for r in replicas.values():
            r.wait_line(r"synced at version", 60)
        with urllib.request.urlopen(f"http://{address}/readyz", timeout=5) as resp:
            assert resp.status == 200
        with urllib.request.urlopen(f"http://{address}/healthz", timeout=5) as resp:
            assert resp.status == 200
        creator = threading.Thread(target=_create_gangs, args=(api, ns, range(WAVES - 1)), daemon=True)
        creator.start()

        # SIGKILL r2 once the replicas are binding
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            bound = sum(1 for ps in _pods_by_gang(api, ns).values() for p in ps if p["spec"].get("nodeName"))
            if bound >= 100:
                break
            time.sleep(0.2)
        assert bound >= 100, "no binding started:\n" + replicas["r1"].stderr[-3000:]
        go_children = _children(replicas["r2"].popen.pid)
        assert go_children, "r2 runs its strata-volcano binary as a child"
        replicas["r2"].popen.send_signal(signal.SIGKILL)
        replicas["r2"].popen.wait(timeout=10)
        killed_at = bound

        creator.join(timeout=120)
        assert not creator.is_alive(), "the waves before the held one are still being created"
        survivors = [pid for name in ("r1", "r3") for pid in _children(replicas[name].popen.pid)]
        assert len(survivors) == 2, survivors
        _race(settings, api, ns, WAVES - 1, survivors)
        deadline = time.monotonic() + 120
        while (problems := _quiet(api, ns)) and time.monotonic() < deadline:
            time.sleep(1)
        assert problems == [], problems
        # the replicas wrote these PodGroups' statuses (Running) and kept the user's fields
        for name in USERS_FIELDS:
            pg = api.request("GET", f"{VOLCANO}/namespaces/{ns}/podgroups/{name}")
            assert pg["status"]["phase"] == "Running" and _lost_users_fields(pg) == [], (name, pg)
        # the killed replica's binary does not outlive its sidecar
        assert not any(_alive(pid) for pid in go_children), "r2's strata-volcano outlived its sidecar"
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as resp:
            metrics = resp.read().decode()
        assert "volcano_e2e_scheduling_latency_milliseconds" in metrics  # Volcano's own
        # strata-volcano's own (a replica that lost every race has no admitted group to count)
        assert "strata_volcano_snapshot_seconds_count" in metrics
        time.sleep(2)  # let the last binds' watch events reach the log
    finally:
        codes = {name: r.stop() for name, r in replicas.items()}
        binder_code, ingest_code = binder.stop(), ingest.stop()
        env_recorder.close()
        flag_recorder.close()
    elapsed = time.monotonic() - started
    assert codes["r1"] == 0 and codes["r3"] == 0, (codes, replicas["r1"].stderr[-2000:], replicas["r3"].stderr[-2000:])
    assert codes["r2"] == -signal.SIGKILL
    assert binder_code == 0 and ingest_code == 0, (binder.stderr[-2000:], ingest.stderr[-2000:])
    # device sharing's init() built a client from KUBECONFIG and never used it
    assert env_recorder.requests == [], env_recorder.requests[:5]
    assert flag_recorder.requests, "r3's status writes go where --kubeconfig says"

    # ---------------------------------------------------------------- the log, record by record
    facts = _replay((e.record for e in CacheLogReader(settings).read()), ns)
    by_gang = _pods_by_gang(api, ns)
    nodes = {n: api.request("GET", f"/api/v1/nodes/{n}") for n in _node_names(ns)}
    assert sum(len(ps) for ps in by_gang.values()) == PODS
    assert _violations(facts, by_gang, nodes, GANGS) == []
    assert facts.groups["rejected"] > 0, "racing replicas must have lost some BIND_GROUPs"
    held = {f"{ns}/{g['name']}" for g in GANGS[WAVES - 1 :: WAVES] if g["fits"]}
    assert held & set(facts.rejected_jobs), "the replicas resumed together lost no BIND_GROUP of the held wave"
    rejected_jobs = facts.rejected_jobs
    groups = facts.groups

    # every replica's digest (its sidecar's fold) equal at every version two of them reported
    out = subprocess.run([STRATA, "verify", "--replicas"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    compared = re.search(r"0 divergent version\(s\) among (\d+) compared, from (\d+) reader", out.stderr)
    assert compared and int(compared.group(1)) > 0 and int(compared.group(2)) >= 3, out.stderr

    # the story of a job whose group a replica lost
    job, losers = sorted(rejected_jobs.items())[0]
    out = subprocess.run([STRATA, "story", "job", job, *fold], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "rejected, none placed" in out.stdout, out.stdout
    assert any(f"by replica {r}" in out.stdout for r in losers), out.stdout
    print(
        f"{PODS} pods / {len(GANGS)} gangs in {elapsed:.0f} s; r2 killed at {killed_at} bound; "
        f"BIND_GROUPs {dict(groups)}; {len(rejected_jobs)} jobs with a lost group"
    )


def test_a_write_of_the_logs_copy_loses_the_users_fields(kubeconfig: str) -> None:
    """The check of the replicas test can fail: the old status write (the whole PodGroup as the
    log carries it, redacted, through Volcano v1.10's types, which drop what they do not know,
    put back under the live resourceVersion) loses both fields, and the check says so."""
    api = KubeApi(kubeconfig)
    ns = f"tw-{uuid.uuid4().hex[:8]}"
    api.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        pg = _with_users_fields(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "g", "namespace": ns},
                "spec": {"minMember": 1, "queue": "default"},
            }
        )
        created = api.request("POST", f"{VOLCANO}/namespaces/{ns}/podgroups", pg)
        assert _lost_users_fields(created) == []
        logged = redact(created)
        known = ("minMember", "minTaskMember", "queue", "priorityClassName", "minResources")
        logged["spec"] = {k: v for k, v in logged["spec"].items() if k in known}
        logged["status"] = {"phase": "Running", "running": 1}
        written = api.request("PUT", f"{VOLCANO}/namespaces/{ns}/podgroups/g", logged)
        assert written["status"]["phase"] == "Running"
        assert _lost_users_fields(written) == [f"the {LAST_APPLIED} annotation", f"spec.{FUTURE_FIELD}"]
    finally:
        api.request("DELETE", f"{VOLCANO}/namespaces/{ns}/podgroups/g")
        api.request("DELETE", f"/api/v1/namespaces/{ns}")


def test_the_binary_gets_kafka_security_by_environment() -> None:
    """`strata volcano` hands the Go binary the Kafka security settings (the environment's and
    -X flags') as STRATA_KAFKA_* variables, never as arguments; a TLS or SASL property the binary
    would ignore is refused rather than silently dropped."""
    from strata.cli.volcano import binary_env
    from strata.log.config import settings_from

    environ = {"STRATA_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "STRATA_KAFKA_SASL_PASSWORD": "secret"}
    flags = (
        "sasl.mechanism=SCRAM-SHA-512",
        "sasl.username=u",
        "ssl.ca.location=/ca.pem",
        "socket.keepalive.enable=true",
    )
    env = binary_env(settings_from(kafka_properties=flags, environ=environ))
    assert {k: v for k, v in env.items() if k.startswith("STRATA_KAFKA_")}.items() >= {
        "STRATA_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "STRATA_KAFKA_SASL_MECHANISMS": "SCRAM-SHA-512",
        "STRATA_KAFKA_SASL_USERNAME": "u",
        "STRATA_KAFKA_SASL_PASSWORD": "secret",
        "STRATA_KAFKA_SSL_CA_LOCATION": "/ca.pem",
    }.items()
    assert "STRATA_KAFKA_SOCKET_KEEPALIVE_ENABLE" not in env  # the sidecar's, not a security setting
    with pytest.raises(
        StrataError, match=re.escape("does not take the Kafka property ssl.endpoint.identification.algorithm")
    ):
        binary_env(settings_from(kafka_properties=("ssl.endpoint.identification.algorithm=none",), environ={}))
