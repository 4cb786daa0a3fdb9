"""What the operator scenarios share (rolling-restart, binder-broker-loss, retry-repause): a namespace
of pods on the local API server, `strata` processes stopped and started as Kubernetes does, and
what the command side left in the log and its topics."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from strata.dev.faults import Verdict
from strata.dev.faults.common import STRATA, LogView, create_node, pod_body, until
from strata.errors import StrataError
from strata.kubeapi import ApiError, KubeApi
from strata.log.cachelog import CacheLogReader, offset_of, producer_config, record_key, where
from strata.log.config import Settings
from strata.log.topics import TopicNames
from strata.projector.fold.kinds import FoldConfig
from strata.projector.fold.state import CacheState
from strata.schemas import (
    Bind,
    BindFailed,
    BindGroup,
    BindSucceeded,
    CodecError,
    Evict,
    EvictFailed,
    EvictSucceeded,
    LogRecord,
    decode,
    encode,
)

VOLCANO = "/apis/scheduling.volcano.sh/v1beta1"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
DENIED = "denied-"  # pods whose Binding an admission policy refuses: a genuine terminal failure
GRACE_S = 30.0  # a pod's default terminationGracePeriodSeconds: SIGKILL after it
Outcome = BindSucceeded | BindFailed | EvictSucceeded | EvictFailed


# ----------------------------------------------------------------------------------- the cluster
@dataclass
class Namespace:
    """A namespace of the local API server with Ready nodes and a Queue, all deleted by ``cleanup``."""

    api: KubeApi
    name: str
    nodes: int
    _groups: set[str] = field(default_factory=set)

    @classmethod
    def create(cls, api: KubeApi, nodes: int) -> Namespace:
        ns = cls(api, f"faults-{uuid.uuid4().hex[:8]}", nodes)
        api.request(
            "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns.name}}
        )
        for i in range(nodes):
            create_node(api, ns.node(i))
        queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": ns.name}}
        api.request("POST", f"{VOLCANO}/queues", {**queue, "spec": {}})
        return ns

    def node(self, i: int) -> str:
        return f"{self.name}-n{i % self.nodes}"

    def gang(self, group: str, names: list[str], min_member: int | None = None) -> dict[str, str]:
        """A PodGroup of these pods (minMember: all of them unless given) and its pods: name -> uid."""
        pg = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": group, "namespace": self.name},
            "spec": {"minMember": len(names) if min_member is None else min_member, "queue": self.name},
        }
        self.api.request("POST", f"{VOLCANO}/namespaces/{self.name}/podgroups", pg)
        self._groups.add(group)

        def create(name: str) -> tuple[str, str]:
            body = pod_body(self.name, name, group, scheduler=self.name)
            created = self.api.request("POST", f"/api/v1/namespaces/{self.name}/pods", body)
            return name, created["metadata"]["uid"]

        with ThreadPoolExecutor(4) as pool:
            return dict(pool.map(create, names))

    def singles(self, names: list[str], per_group: int = 10) -> dict[str, str]:
        """Pods in PodGroups of ``per_group`` with minMember 1 (each may be bound alone): name -> uid."""
        uids: dict[str, str] = {}
        for g in range(0, len(names), per_group):
            uids.update(self.gang(f"s{g // per_group}", names[g : g + per_group], min_member=1))
        return uids

    def pods(self) -> dict[str, dict[str, Any]]:
        """The namespace's pods now, by uid."""
        items = self.api.request("GET", f"/api/v1/namespaces/{self.name}/pods")["items"]
        return {p["metadata"]["uid"]: p for p in items}

    def bound(self) -> dict[str, str | None]:
        return {uid: p["spec"].get("nodeName") for uid, p in self.pods().items()}

    def deny_bindings(self) -> None:
        """A ValidatingAdmissionPolicy refusing to bind pods named ``denied-*`` (403/422, terminal)."""
        rule = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods/binding"]}
        validation = {"expression": f"!object.metadata.name.startsWith('{DENIED}')", "message": "denied by policy"}
        self.api.request(
            "POST",
            f"{ADMISSION}/validatingadmissionpolicies",
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": self.name},
                "spec": {
                    "failurePolicy": "Fail",
                    "matchConstraints": {"resourceRules": [rule]},
                    "validations": [validation],
                },
            },
        )
        self.api.request(
            "POST",
            f"{ADMISSION}/validatingadmissionpolicybindings",
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": self.name},
                "spec": {"policyName": self.name, "validationActions": ["Deny"], "matchResources": self._selector()},
            },
        )
        probe = self.gang(f"{DENIED}probe", [f"{DENIED}probe"])[f"{DENIED}probe"]
        # the server compiles a new policy within a moment: wait for it to refuse
        self._wait_binding(f"{DENIED}probe", probe, lambda status: status in (403, 422), "the policy to refuse")

    def fail_bindings(self) -> None:
        """A webhook on this namespace's bindings whose server is not there: every Binding answers
        500, a transient failure that the retry tiers take."""
        webhook = {
            "name": f"{self.name}.strata.faults",
            "clientConfig": {"url": "https://127.0.0.1:9/validate"},  # the discard port: nobody listens
            "rules": [
                {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods/binding"]}
            ],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 2,
            "namespaceSelector": self._selector()["namespaceSelector"],
        }
        body = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.name},
            "webhooks": [webhook],
        }
        self.api.request("POST", f"{ADMISSION}/validatingwebhookconfigurations", body)
        self._probe_binding(lambda status: status == 500, "the webhook to fail bindings")

    def allow_bindings(self) -> None:
        """The failing webhook gone, and bindings answered again."""
        self.api.call("DELETE", f"{ADMISSION}/validatingwebhookconfigurations/{self.name}")
        self._probe_binding(lambda status: status < 300, "bindings to work again")

    def _probe_binding(self, ok: Callable[[int], bool], what: str) -> None:
        name = f"probe-{uuid.uuid4().hex[:6]}"
        uid = self.gang(name, [name])[name]
        self._wait_binding(name, uid, ok, what)

    def _wait_binding(self, name: str, uid: str, ok: Callable[[int], bool], what: str) -> None:
        """A dry-run Binding until ``ok`` of its status (the probe pod is no command's: its audited
        calls are no one's duplicates)."""
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node(0)},
        }
        path = f"/api/v1/namespaces/{self.name}/pods/{name}/binding"
        if not until(lambda: ok(self.api.call("POST", path, body, dryRun="All").status), 30, every_s=0.3):
            raise StrataError(f"timed out waiting for {what}")

    def _selector(self) -> dict[str, Any]:
        return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.name}}}

    def cleanup(self) -> None:
        calls: list[Callable[[], Any]] = [
            lambda: self.api.request("DELETE", f"{ADMISSION}/validatingwebhookconfigurations/{self.name}"),
            lambda: self.api.request("DELETE", f"{ADMISSION}/validatingadmissionpolicybindings/{self.name}"),
            lambda: self.api.request("DELETE", f"{ADMISSION}/validatingadmissionpolicies/{self.name}"),
            lambda: self.api.request("DELETE", f"/api/v1/namespaces/{self.name}/pods", gracePeriodSeconds=0),
            lambda: self.api.request("DELETE", f"{VOLCANO}/namespaces/{self.name}/podgroups"),
            lambda: self.api.request("DELETE", f"{VOLCANO}/queues/{self.name}"),
            *(lambda i=i: self.api.request("DELETE", f"/api/v1/nodes/{self.node(i)}") for i in range(self.nodes)),
            lambda: self.api.request("DELETE", f"/api/v1/namespaces/{self.name}"),
        ]
        for call in calls:
            with contextlib.suppress(ApiError):
                call()


def probes(names: Iterable[str]) -> set[str]:
    """The pods made only to see whether an admission rule is in force (no command names them)."""
    return {n for n in names if n.startswith("probe-") or n == f"{DENIED}probe"}


# ---------------------------------------------------------------------------------- processes
@dataclass(frozen=True)
class Stopped:
    """How one process ended: its exit code, how long SIGTERM took, whether it had to be killed."""

    name: str
    code: int | None
    seconds: float
    killed: bool = False

    @property
    def clean(self) -> bool:
        return self.code == 0 and not self.killed


class Process:
    """A `strata` process whose stderr lines are kept, each with when it came (epoch seconds)."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], keep: Path | None = None) -> None:
        self.name = name
        self.args = args
        self.lines: list[tuple[float, str]] = []
        self.keep = keep  # a directory for its stderr, to read after a failed run
        self.proc = subprocess.Popen(
            [STRATA, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        out = (self.keep / f"{self.name}-{self.proc.pid}.log").open("a") if self.keep else None
        for line in self.proc.stderr:
            self.lines.append((time.time(), line.rstrip("\n")))
            if out is not None:
                out.write(f"{time.strftime('%H:%M:%S', time.localtime(self.lines[-1][0]))} {line}")
                out.flush()
        if out is not None:
            out.close()

    def said(self, text: str) -> bool:
        return any(text in line for _, line in list(self.lines))

    def wait_for(self, text: str, timeout_s: float = 60.0) -> None:
        """Until a line holds ``text``; a process that ends first, or the timeout, is an error."""
        if not until(lambda: self.said(text) or self.proc.poll() is not None, timeout_s, every_s=0.1):
            raise StrataError(f"{self.name}: no {text!r} after {timeout_s:g} s")
        if not self.said(text):
            self._reader.join(5)
            raise StrataError(f"{self.name} ended ({self.proc.returncode}): {self.tail()}")

    def tail(self, n: int = 3) -> str:
        return " | ".join(line for _, line in self.lines[-n:])[-400:]

    def stop(self, grace_s: float = GRACE_S) -> Stopped:
        """SIGTERM, as the kubelet sends it; SIGKILL after the grace period, as it does too."""
        started = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        killed = False
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            killed = True
        self._reader.join(10)
        return Stopped(self.name, self.proc.returncode, time.monotonic() - started, killed)


def start_all(
    specs: list[tuple[str, list[str], str]], env: dict[str, str], keep: Path | None = None, timeout_s: float = 90.0
) -> list[Process]:
    """Start processes (name, arguments, the line that says it is up) at once, then wait for each."""
    procs = [Process(name, args, env, keep) for name, args, _ in specs]
    for proc, (_, _, ready) in zip(procs, specs, strict=True):
        proc.wait_for(ready, timeout_s)
    return procs


def stop_all(procs: list[Process], grace_s: float = GRACE_S) -> tuple[Stopped, ...]:
    """SIGTERM to all at once, as a namespace's pods are stopped; each waited for."""
    if not procs:
        return ()
    with ThreadPoolExecutor(len(procs)) as pool:
        return tuple(pool.map(lambda p: p.stop(grace_s), procs))


# ----------------------------------------------------------------------------- the cache log
class Writer:
    """The scenario's own writer of BINDs and EVICTs, standing in for a scheduler replica: the
    same idempotent acks=all producer as ``CacheLogWriter``'s, but a delivery reported without an
    offset (a batch the broker already had, sent again after the cluster came back) counts as
    delivered, so what the scenario sees is the binders' and evictors' doing, not its own."""

    def __init__(self, settings: Settings) -> None:
        self.topic = TopicNames(settings.topic_prefix).cache_log
        self._producer = Producer(producer_config(settings))
        self.errors: list[str] = []
        self.delivered = 0
        self.without_offset = 0

    def append(self, record: LogRecord) -> None:
        while True:
            try:
                self._producer.produce(self.topic, encode(record), key=record_key(record), on_delivery=self._report)
                break
            except BufferError:
                self._producer.poll(0.1)
        self._producer.poll(0)

    def _report(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors.append(err.str())
        else:
            self.delivered += 1
            self.without_offset += msg.offset() is None

    def flush(self, timeout_s: float = 300.0) -> None:
        left = self._producer.flush(timeout_s)
        if left or self.errors:
            raise StrataError(f"{left} undelivered; {self.errors[:1]}")


@dataclass(frozen=True)
class CommandLog:
    """The cache log read to its end and folded: which commands the fold let through, and the
    outcomes the binders and evictors wrote back."""

    admitted: dict[str, str]  # pod uid -> the node of its admitted BIND
    evicted: frozenset[str]  # pod uids of applied EVICTs
    outcomes: tuple[Outcome, ...]  # in log order
    state: CacheState
    end: int  # the log's end offset: the version of the fold
    digests: dict[int, str] = field(default_factory=dict)  # version -> the fold's digest there, as asked

    def count(self, kind: type) -> Counter[str]:
        return Counter(o.pod for o in self.outcomes if isinstance(o, kind))

    def binding(self) -> list[str]:
        return [uid for uid, t in self.state.tasks.items() if t.status == "Binding"]


def read_commands(
    settings: Settings, config: FoldConfig, digests_at: set[int] | None = None, timeout_s: float = 60.0
) -> CommandLog:
    """The log folded offline, in this process: the reference a projector's checkpoints must equal
    at each version of ``digests_at``."""
    state = CacheState(config)
    admitted: dict[str, str] = {}
    evicted: set[str] = set()
    outcomes: list[Outcome] = []
    wanted = digests_at or set()
    digests = {0: state.snapshot().digest()} if 0 in wanted else {}
    for entry in CacheLogReader(settings).read(timeout_s=timeout_s):
        record: LogRecord = entry.record
        applied = state.apply(record).result == "applied"
        if state.version in wanted:
            digests[state.version] = state.snapshot().digest()
        if applied and isinstance(record, Bind):
            admitted[record.pod] = record.node
        elif applied and isinstance(record, BindGroup):  # a gang's binds, admitted all or none
            admitted.update((b.pod, b.node) for b in record.binds)
        elif applied and isinstance(record, Evict):
            evicted.add(record.pod)
        elif isinstance(record, (BindSucceeded, BindFailed, EvictSucceeded, EvictFailed)):
            outcomes.append(record)
    return CommandLog(admitted, frozenset(evicted), tuple(outcomes), state, state.version, digests)


def per_pod(verdict: Verdict, found: Verdict) -> None:
    """Add one pod's findings to ``verdict``: a pod lost counts once, however many ways it shows."""
    verdict.lost += min(1, found.lost)
    verdict.duplicates += found.duplicates
    verdict.mismatches += found.mismatches
    verdict.problems += found.problems


def in_log(log: LogView, uids: Iterable[str]) -> bool:
    """Whether the log (read on to its end now) has a task for each of these pods."""
    tasks = log.refresh().state.tasks
    return all(uid in tasks for uid in uids)


def read_topic(settings: Settings, topic: str, timeout_s: float = 30.0) -> list[Message]:
    """Every committed message of a topic (all partitions), read to its end as of now."""
    consumer = Consumer(
        settings.client_config(
            **{
                "group.id": f"{settings.topic_prefix}faults-reader",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )
    )
    try:
        partitions = consumer.list_topics(topic, timeout=timeout_s).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: list[Message] = []
        left = {p for p, end in ends.items() if end > 0}
        deadline = time.monotonic() + timeout_s
        while left and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:  # transaction markers end some partitions
                        left.discard(where(msg)[1])
                    continue
                out.append(msg)
                if offset_of(msg) + 1 >= ends[where(msg)[1]]:
                    left.discard(where(msg)[1])
        return out
    finally:
        consumer.close()


@dataclass(frozen=True)
class DeadLetter:
    pod: str  # the command's pod uid ("" when the message is no command)
    reason: str  # strata.reason: terminal | exhausted | malformed


def dead_letters(settings: Settings, topic: str) -> tuple[DeadLetter, ...]:
    out = []
    for msg in read_topic(settings, topic):
        reason = dict(msg.headers() or []).get("strata.reason") or b""
        try:
            pod = getattr(decode(msg.value() or b""), "pod_uid", "")
        except CodecError:
            pod = ""
        out.append(DeadLetter(pod, reason.decode() if isinstance(reason, bytes) else str(reason)))
    return tuple(out)
