"""Synthetic cluster histories in the trace format, for benchmarks and tests.

``generate`` writes a realistic history of a Volcano-scheduled cluster as trace lines
(``spec/trace-format.md``): nodes, queues, priority classes, CSINodes and HyperNodes first, then
weeks of batch jobs (a PodGroup and its pods each) that are bound, run, finish, get evicted and
are deleted, with node restarts, cordons and queue updates on the side. At the end about ``pods``
pods are live; ``churn`` x ``pods`` more came and went before.

The module is pure: no Kafka, no clock, no I/O but ``out.write``; all randomness comes from one
``random.Random(seed)``, so the same arguments always give the same bytes. The output streams: the
generator keeps per-node, per-job and per-pod bookkeeping, never the lines it wrote.

The scheduler side mirrors the fold (``cache-semantics.md``): the generator tracks every node's
idle resources exactly as the fold derives them (allocatable minus the requests of the tasks on
the node, placeholders of deleted nodes included) and only sends a BIND the fold admits, except
for a small, counted share of racing binds it rejects on purpose (a second replica binding a task
that is already Binding, a bind to a node the task does not fit or that is not stored).
"""

from __future__ import annotations

import copy
import heapq
import json
import math
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from random import Random
from typing import Any, BinaryIO

from strata.projector.fold.task import TaskStatus

__all__ = ["GenStats", "generate"]

SECOND = 1000  # the history's clock is virtual, in milliseconds
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR
HISTORY = 30 * DAY
EPOCH = date(2025, 3, 3)  # the history's first day (UTC): only for the timestamps written
MI = 1 << 20
GI = 1 << 30
GPU = "nvidia.com/gpu"
RACK_SIZE = 32  # nodes per rack; a small cluster gets at least three racks
TARGET_CPU_UTILISATION = 0.55

# pod states; those in _ON_NODE count on their node as the fold counts them
PENDING, BINDING, BOUND, RUNNING, EVICTING, TERMINATING, DONE, GONE = range(8)
_ON_NODE = frozenset({BINDING, BOUND, RUNNING, EVICTING, TERMINATING})
_FOLD_STATUS = {
    PENDING: TaskStatus.PENDING,
    BINDING: TaskStatus.BINDING,
    BOUND: TaskStatus.BOUND,
    RUNNING: TaskStatus.RUNNING,
    EVICTING: TaskStatus.RELEASING,
    TERMINATING: TaskStatus.RELEASING,
}

# (cpu millicores, weight) of a task's main container; memory is 1, 2 or 4 GiB per core
_CPU = ((100, 10), (250, 15), (500, 25), (1000, 25), (2000, 15), (4000, 8), (8000, 2))
_MEM_PER_CORE = ((1, 3), (2, 5), (4, 2))
# job sizes: (low, high, weight)
_SIZES = ((1, 1, 35), (2, 4, 30), (5, 16, 20), (17, 64, 12), (65, 256, 3))
# (job kind, task name, image, name stems, may use GPUs)
_KINDS = (
    ("train", "worker", "ml/pytorch-trainer:2.4.1", ("resnet50", "bert-base", "llama-ft", "vit-l16", "wav2vec"), True),
    ("etl", "executor", "data/spark-runner:3.5.2", ("daily-agg", "sessionize", "dedup", "backfill"), False),
    ("sim", "worker", "hpc/mpi-sim:1.9.3", ("cfd", "md-run", "monte-carlo", "weather"), False),
    ("infer", "batch", "ml/batch-infer:0.18.0", ("embed", "rerank", "transcribe", "classify"), True),
    ("hpo", "trial", "ml/katib-trial:0.17.0", ("lr-sweep", "nas", "bayes-opt"), False),
    ("render", "frame", "media/blender-worker:4.2.1", ("shot", "preview", "final"), False),
)
_KIND_WEIGHTS = (30, 25, 12, 13, 10, 10)
_GPUS = (1, 1, 1, 2, 2, 4, 8)  # GPUs per pod of a GPU job
_QUEUE_NAMES = (
    "default",
    "research",
    "prod-batch",
    "analytics",
    "vision",
    "nlp",
    "speech",
    "recsys",
    "ads",
    "search",
    "finance",
    "genomics",
    "robotics",
    "simulation",
    "platform",
    "data-eng",
    "mlops",
    "security",
    "media",
    "web",
)
# (name, value, globalDefault, weight of jobs using it); weight 0: never named by a job
_PRIORITY_CLASSES = (
    ("batch-low", 100, False, 20),
    ("batch-normal", 1000, True, 25),
    ("batch-high", 10000, False, 20),
    ("production-critical", 100000, False, 5),
    ("system-cluster-critical", 2000000000, False, 0),
    ("system-node-critical", 2000001000, False, 0),
)
_NO_CLASS_WEIGHT = 30  # jobs naming no class: the globalDefault's value applies
_DEFAULT_PRIORITY = 1000
_UNIT_CORES = (2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
_BIND_FAIL_REASONS = (
    'pods "{}" is forbidden: node not ready',
    "context deadline exceeded",
    "etcdserver: request timed out",
    "Operation cannot be fulfilled on pods: the object has been modified",
)
_EVICT_REASONS = ("preempt", "reclaim", "shuffle", "rescheduling")


@dataclass
class GenStats:
    """What ``generate`` wrote. Live pods are those stored at the end and not terminated."""

    records: int = 0  # lines written
    bytes: int = 0
    by_type: dict[str, int] = field(default_factory=dict)  # ADDED, MODIFIED, DELETED, BIND, ...
    by_kind: dict[str, int] = field(default_factory=dict)  # watch events per object kind
    nodes: int = 0  # Node objects stored at the end
    queues: int = 0  # Queue objects stored at the end
    jobs_created: int = 0  # PodGroups created
    jobs_live: int = 0  # PodGroups stored at the end
    pods_created: int = 0
    pods_deleted: int = 0
    live_pods: int = 0
    live_by_status: dict[str, int] = field(default_factory=dict)  # task status the fold derives for them
    binds: int = 0  # BIND records
    binds_admitted: int = 0  # BINDs the fold admits
    binds_rejected: int = 0  # racing BINDs the fold rejects (the only records it rejects)
    bind_failures: int = 0  # BIND_FAILED records
    evictions: int = 0  # EVICT records
    evict_failures: int = 0  # EVICT_FAILED records
    node_restarts: int = 0  # nodes deleted and added again
    history_seconds: int = HISTORY // SECOND


# ----------------------------------------------------------------------------------- bookkeeping
class _Node:
    __slots__ = (
        "alloc",
        "cidr",
        "cordoned",
        "cpu",
        "csi",
        "gpu",
        "idx",
        "ip",
        "ipn",
        "mem",
        "name",
        "obj",
        "pods",
        "rack",
        "stored",
    )

    def __init__(self, name: str, idx: int, rack: int) -> None:
        self.name = name
        self.idx = idx
        self.rack = rack
        self.stored = False
        self.cordoned = False
        self.obj: dict[str, Any] = {}
        self.csi: dict[str, Any] | None = None
        self.ip = f"10.{16 + idx // 65536}.{idx // 256 % 256}.{idx % 256}"
        self.cidr = f"10.{128 + idx // 256 % 128}.{idx % 256}."
        self.ipn = 0
        # idle resources as the fold computes them: allocatable minus the tasks on the node
        self.cpu = self.mem = self.pods = self.gpu = 0
        self.alloc = (0, 0, 0, 0)


class _Task:
    """One task (role) of a job: the pod template its pods share, pre-rendered."""

    __slots__ = ("count", "cpu", "gpu", "mem", "meta", "name", "spec")

    def __init__(self, name: str, count: int, cpu: int, mem: int, gpu: int) -> None:
        self.name = name
        self.count = count
        self.cpu = cpu  # the pod's resreq as the fold derives it: millicores, bytes, GPU x 1000
        self.mem = mem
        self.gpu = gpu
        self.meta = ""  # metadata after the deletionTimestamp, up to the task index's value
        self.spec = ""  # the spec's body without braces and nodeName


class _Job:
    __slots__ = (
        "active",
        "completing",
        "deadline",
        "failed",
        "min_member",
        "name",
        "ns",
        "pg",
        "pg_head",
        "pg_tail",
        "phase",
        "pods",
        "rack",
        "replica",
        "run",
        "running",
        "seq",
        "succeeded",
        "survivor",
        "tasks",
    )
    # set by _Generator.arrive, which draws them in the order the seed's bytes depend on
    survivor: bool
    run: int
    deadline: int
    ns: str
    seq: int
    name: str
    pg: str
    replica: str
    rack: int | None
    min_member: int
    pg_head: str
    pg_tail: str

    def __init__(self) -> None:
        self.pods: list[_Pod] = []
        self.tasks: list[_Task] = []
        self.running = 0
        self.active = 0  # pods neither terminated nor deleted for good
        self.succeeded = 0
        self.failed = 0
        self.completing = False
        self.phase = "Pending"


class _Pod:
    __slots__ = (
        "created",
        "ended",
        "finish_at",
        "gen",
        "index",
        "ip",
        "job",
        "name",
        "node",
        "start",
        "state",
        "task",
        "tries",
        "uid",
    )

    def __init__(self, job: _Job, task: _Task, index: int, uid: str, created: str) -> None:
        self.job = job
        self.task = task
        self.index = index
        self.name = f"{job.name}-{task.name}-{index}"
        self.uid = uid
        self.created = created
        self.state = PENDING
        self.gen = 0
        self.node: _Node | None = None
        self.tries = 0
        self.ip = ""
        self.start = ""
        self.finish_at = 0
        self.ended = ""


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _cpu_q(millis: int) -> str:
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def _mem_q(size: int) -> str:
    if size % GI == 0:
        return f"{size // GI}Gi"
    if size % MI == 0:
        return f"{size // MI}Mi"
    return f"{size // 1024}Ki" if size % 1024 == 0 else str(size)


def _mean_size(cap: int) -> float:
    """The mean size of a job of at most ``cap`` pods."""
    total = sum(w * sum(min(k, cap) for k in range(low, high + 1)) / (high - low + 1) for low, high, w in _SIZES)
    return total / sum(w for _, _, w in _SIZES)


def _weighted(rng: Random, table: tuple[tuple[Any, ...], ...]) -> tuple[Any, ...]:
    total = sum(row[-1] for row in table)
    x = rng.random() * total
    for row in table:
        x -= row[-1]
        if x < 0:
            return row
    return table[-1]


# ------------------------------------------------------------------------------------ generator
class _Generator:
    def __init__(self, out: BinaryIO, nodes: int, pods: int, queues: int, churn: float, seed: int, replicas: int):
        self.out = out
        self.rng = Random(seed)
        self.n_nodes = nodes
        self.n_pods = pods
        self.n_queues = queues
        self.churn = churn
        self.replicas = [f"scheduler-{i}" for i in range(replicas)]
        self.stats = GenStats()
        self.counts: dict[tuple[str, str], int] = {}
        self.buf: list[str] = []
        self.rv = 4_000_000 + self.rng.randrange(1_000_000)
        self.now = 0
        self.heap: list[tuple[int, int, Any, Any, int]] = []
        self.seq = 0
        self.days: dict[int, str] = {}
        self.jobs: dict[int, _Job] = {}  # the jobs whose PodGroup is stored, by arrival
        self.queue_objs: dict[str, dict[str, Any]] = {}
        self.queue_ns: dict[str, list[str]] = {}
        self.job_seq = 0

    # -------------------------------------------------------------------------------- output
    def write(self, line: str, rtype: str, kind: str) -> None:
        self.buf.append(line)
        key = (rtype, kind)
        self.counts[key] = self.counts.get(key, 0) + 1
        if len(self.buf) >= 4096:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            data = "".join(self.buf).encode()
            self.out.write(data)
            self.stats.bytes += len(data)
            self.stats.records += len(self.buf)
            self.buf = []

    def watch(self, op: str, kind: str, obj: str) -> None:
        self.write(f'{{"type":"{op}","object":{obj}}}\n', op, kind)

    def sched(self, rtype: str, fields: str) -> None:
        self.write(f'{{"type":"{rtype}",{fields}}}\n', rtype, "")

    def next_rv(self) -> str:
        self.rv += 1 + (self.rv & 3)
        return str(self.rv)

    def ts(self, t: int | None = None) -> str:
        s = (self.now if t is None else t) // SECOND
        d, r = divmod(s, 86400)
        day = self.days.get(d)
        if day is None:
            day = self.days[d] = (EPOCH + timedelta(days=d)).isoformat()
        return f"{day}T{r // 3600:02d}:{r // 60 % 60:02d}:{r % 60:02d}Z"

    def uid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    # -------------------------------------------------------------------------------- events
    def at(self, t: int, fn: Any, arg: Any = None, gen: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, fn, arg, gen))

    def run(self) -> GenStats:
        self.setup_cluster()
        self.plan_jobs()
        self.plan_churn()
        heap = self.heap
        while heap:
            t, _, fn, arg, gen = heapq.heappop(heap)
            if t > HISTORY:
                break
            self.now = t
            fn(arg, gen)
        self.flush()
        self.finish_stats()
        return self.stats

    # ------------------------------------------------------------------------------- cluster
    def setup_cluster(self) -> None:
        self.setup_priority_classes()
        self.setup_queues()
        self.setup_nodes()
        for kind in ("PodGroup", "Pod"):
            self.sched("SYNCED", f'"kind":"{kind}"')
        # the share of GPU-capable jobs that use GPUs: about half of the GPUs busy at the end
        gpus = 8 * len(self.gpu_nodes)
        self.max_gpu_pods = max(1, gpus // 16)  # a GPU job uses at most 1/16 of the GPUs (or one pod)
        cap = max(1, self.n_pods // 10)
        per_job = sum(g * _mean_size(min(cap, max(1, self.max_gpu_pods // g))) for g in _GPUS) / len(_GPUS)
        capable = sum(w for k, w in zip(_KINDS, _KIND_WEIGHTS, strict=True) if k[4]) / sum(_KIND_WEIGHTS)
        jobs = max(1, self.n_pods) / _mean_size(cap)
        self.p_gpu_job = min(0.3, 0.5 * gpus / (jobs * capable * per_job)) if gpus else 0.0
        rows = [(n, v, w) for n, v, _, w in _PRIORITY_CLASSES if w]
        self.pc_rows = (*rows, (None, _DEFAULT_PRIORITY, _NO_CLASS_WEIGHT))

    def setup_priority_classes(self) -> None:
        for name, value, default, _ in _PRIORITY_CLASSES:
            obj = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {
                    "name": name,
                    "uid": self.uid(),
                    "resourceVersion": self.next_rv(),
                    "creationTimestamp": "2024-11-04T09:12:44Z",
                },
                "value": value,
                "globalDefault": default,
                "preemptionPolicy": "PreemptLowerPriority",
                "description": f"{name} workloads",
            }
            self.watch("ADDED", "PriorityClass", _dumps(obj))
        self.sched("SYNCED", '"kind":"PriorityClass"')

    def setup_queues(self) -> None:
        rng = self.rng
        names = list(_QUEUE_NAMES[: self.n_queues])
        names += [f"team-{i:03d}" for i in range(len(names), self.n_queues)]
        self.queue_names = names
        self.queue_weights = []
        for i, name in enumerate(names):
            weight = 1 if name == "default" else rng.randint(1, 10)
            spec: dict[str, Any] = {"weight": weight, "reclaimable": name != "prod-batch"}
            if i % 4 == 1:
                spec["capability"] = {
                    "cpu": str(rng.choice((500, 1000, 2000, 5000))),
                    "memory": f"{rng.choice((2, 4, 8, 16))}Ti",
                }
            if i % 7 == 2:
                spec["guarantee"] = {"resource": {"cpu": "64", "memory": "256Gi"}}
            if i >= 10 and i % 3 == 0:
                spec["parent"] = names[i % 10] if names[i % 10] != "default" else "research"
            obj = self.queue_object(name, spec, "2024-11-04T09:20:03Z")
            obj["status"]["reservation"] = {}
            self.queue_objs[name] = obj
            self.queue_weights.append(weight + 2)
            self.queue_ns[name] = ["default", "batch-jobs"] if name == "default" else [name, f"{name}-dev"]
            self.watch("ADDED", "Queue", _dumps(obj))
        self.sched("SYNCED", '"kind":"Queue"')

    def setup_nodes(self) -> None:
        rng = self.rng
        n = self.n_nodes
        n_gpu = round(n * 0.04) if n >= 20 else 0
        n_infra = n // 100 if n >= 50 else 0
        self.rack_size = min(RACK_SIZE, max(4, math.ceil(n / 3)))
        racks = math.ceil(n / self.rack_size)
        width = max(3, len(str(racks - 1)))
        self.all_nodes: list[_Node] = []
        for i in range(n):
            rack, slot = divmod(i, self.rack_size)
            self.all_nodes.append(_Node(f"node-r{rack:0{width}d}-{slot:02d}", i, rack))
        self.gpu_nodes = self.all_nodes[n - n_gpu :]
        self.normal_nodes = self.all_nodes[n_infra : n - n_gpu]
        self.rack_nodes: dict[int, list[_Node]] = {}
        for node in self.normal_nodes:
            self.rack_nodes.setdefault(node.rack, []).append(node)
        zones = max(1, min(4, racks))
        self.zone_names = [f"region-1{'abcd'[z]}" for z in range(zones)]

        # size the nodes so the live pods (plus those coming and going) fill about 55% of the cpu
        mean_cpu = sum(c * w for c, w in _CPU) / sum(w for _, w in _CPU) + 0.2 * 50
        peak = self.n_pods * (1 + 0.08 * min(self.churn, 1.0)) / max(1, len(self.normal_nodes))
        need = peak * mean_cpu / 1000 / TARGET_CPU_UTILISATION / 1.5
        unit = next((u for u in _UNIT_CORES if u >= need), 64 * math.ceil(need / 64))
        max_pods = max(110, 10 * math.ceil(peak * 3 / 10))

        revocable = set()
        if n >= 20:
            revocable = {node.idx for node in rng.sample(self.normal_nodes, max(1, n // 20))}
        for node in self.all_nodes:
            role = "infra" if node.idx < n_infra else "gpu" if node.idx >= n - n_gpu else "worker"
            if role == "worker" and node.idx in revocable:
                role = "revocable"
            self.build_node(node, role, unit, max_pods, width)
            node.cpu, node.mem, node.pods, node.gpu = node.alloc
            self.add_node(node, "2024-11-04T08:00:00Z")
        self.sched("SYNCED", '"kind":"Node"')

        # a few CSINodes: EBS with a volume limit, NFS without one
        n_csi = min(64, max(1, n // 100))
        for node in self.all_nodes[n_infra : n_infra + n_csi]:
            drivers: list[dict[str, Any]] = [
                {
                    "name": "ebs.csi.aws.com",
                    "nodeID": f"i-{node.idx:017x}",
                    "topologyKeys": ["topology.ebs.csi.aws.com/zone"],
                    "allocatable": {"count": 25},
                }
            ]
            if node.idx % 2:
                drivers.append({"name": "nfs.csi.k8s.io", "nodeID": node.name, "topologyKeys": None})
            node.csi = {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "CSINode",
                "metadata": {"name": node.name, "uid": "", "resourceVersion": ""},
                "spec": {"drivers": drivers},
            }
            self.add_csinode(node)
        self.sched("SYNCED", '"kind":"CSINode"')
        self.setup_hypernodes(racks, width, zones)

    def build_node(self, node: _Node, role: str, unit: int, max_pods: int, width: int) -> None:
        """The Node object of ``node`` (infra, gpu, worker or revocable), and its allocatable as the fold reads it."""
        rng = self.rng
        zone = self.zone_names[node.rack % len(self.zone_names)]
        if role == "infra":
            cores, per_core, family = 16, 4, "m6i"
        elif role == "gpu":
            cores, per_core, family = 96, 10, "p5"
        else:
            cores = int(unit * rng.choice((1, 1.5, 1.5, 2)))
            per_core, family = (8, "r6i") if rng.random() < 0.25 else (4, "m6i")
        labels = {
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": node.name,
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": f"{family}.{cores // 4}xlarge",
            "topology.kubernetes.io/region": "region-1",
            "topology.kubernetes.io/zone": zone,
            "topology.kubernetes.io/rack": f"r{node.rack:0{width}d}",
        }
        annotations = {
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        }
        taints = []
        cap_cpu = cores * 1000
        alloc_cpu = cap_cpu - (100 + 10 * cores)
        cap_ki = cores * per_core * 1048576 - rng.randrange(60000, 400000)
        alloc_ki = cap_ki - 1048576 - cores * 8192
        capacity = {
            "cpu": str(cores),
            "ephemeral-storage": "524275692Ki",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "memory": f"{cap_ki}Ki",
            "pods": str(max_pods),
        }
        allocatable = {
            "cpu": f"{alloc_cpu}m",
            "ephemeral-storage": "483173420134",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "memory": f"{alloc_ki}Ki",
            "pods": str(max_pods),
        }
        gpu = 0
        if role == "infra":
            labels["node-role.kubernetes.io/infra"] = ""
            taints.append({"key": "dedicated", "value": "infra", "effect": "NoSchedule"})
        elif role == "gpu":
            gpu = 8000
            capacity[GPU] = allocatable[GPU] = "8"
            labels["nvidia.com/gpu.present"] = "true"
            labels["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
            taints.append({"key": GPU, "value": "present", "effect": "NoSchedule"})
        elif role == "revocable":
            labels["volcano.sh/revocable-zone"] = "rz1"
            if node.idx % 2 == 0:
                labels["volcano.sh/oversubscription"] = "true"
                annotations["volcano.sh/oversubscription-cpu"] = "4000"
                annotations["volcano.sh/oversubscription-memory"] = str(8 * GI)
                alloc_cpu += 4000
                alloc_ki += 8 * GI // 1024
        spec: dict[str, Any] = {"podCIDR": f"{node.cidr}0/24", "providerID": f"metal://{zone}/{node.name}"}
        if taints:
            spec["taints"] = taints
        node.obj = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": node.name,
                "uid": "",
                "resourceVersion": "",
                "creationTimestamp": "",
                "labels": labels,
                "annotations": annotations,
            },
            "spec": spec,
            "status": {
                "capacity": capacity,
                "allocatable": allocatable,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                    }
                ],
                "addresses": [
                    {"type": "InternalIP", "address": node.ip},
                    {"type": "Hostname", "address": node.name},
                ],
                "nodeInfo": {
                    "architecture": "amd64",
                    "containerRuntimeVersion": "containerd://1.7.24",
                    "kubeletVersion": "v1.31.4",
                    "operatingSystem": "linux",
                    "osImage": "Ubuntu 22.04.5 LTS",
                },
            },
        }
        node.alloc = (alloc_cpu, alloc_ki * 1024, max_pods, gpu)

    def add_node(self, node: _Node, created: str) -> None:
        meta = node.obj["metadata"]
        meta["uid"] = self.uid()
        meta["resourceVersion"] = self.next_rv()
        meta["creationTimestamp"] = created
        node.stored = True
        self.watch("ADDED", "Node", _dumps(node.obj))

    def add_csinode(self, node: _Node) -> None:
        assert node.csi is not None
        node.csi["metadata"]["uid"] = self.uid()
        node.csi["metadata"]["resourceVersion"] = self.next_rv()
        self.watch("ADDED", "CSINode", _dumps(node.csi))

    def setup_hypernodes(self, racks: int, width: int, zones: int) -> None:
        """Tier 1: a HyperNode per rack (exact, regex or label members); tier 2: zones; tier 3: spine."""

        def hypernode(name: str, tier: int, tier_name: str, members: list[dict[str, Any]]) -> None:
            obj = {
                "apiVersion": "topology.volcano.sh/v1alpha1",
                "kind": "HyperNode",
                "metadata": {
                    "name": name,
                    "uid": self.uid(),
                    "resourceVersion": self.next_rv(),
                    "creationTimestamp": "2024-11-04T08:30:00Z",
                },
                "spec": {"tier": tier, "tierName": tier_name, "members": members},
            }
            self.watch("ADDED", "HyperNode", _dumps(obj))

        by_zone: list[list[str]] = [[] for _ in range(zones)]
        for rack in range(racks):
            label = f"r{rack:0{width}d}"
            if rack % 3 == 0:
                members = [
                    {"type": "Node", "selector": {"exactMatch": {"name": node.name}}}
                    for node in self.all_nodes[rack * self.rack_size : (rack + 1) * self.rack_size]
                ]
            elif rack % 3 == 1:
                members = [{"type": "Node", "selector": {"regexMatch": {"pattern": f"^node-{label}-"}}}]
            else:
                members = [
                    {
                        "type": "Node",
                        "selector": {"labelMatch": {"matchLabels": {"topology.kubernetes.io/rack": label}}},
                    }
                ]
            hypernode(f"rack-{label}", 1, "rack", members)
            by_zone[rack % zones].append(f"rack-{label}")
        for z, names in enumerate(by_zone):
            members = [{"type": "HyperNode", "selector": {"exactMatch": {"name": name}}} for name in names]
            hypernode(f"zone-{self.zone_names[z]}", 2, "zone", members)
        members = [{"type": "HyperNode", "selector": {"exactMatch": {"name": f"zone-{z}"}}} for z in self.zone_names]
        hypernode("spine-0", 3, "spine", members)
        self.sched("SYNCED", '"kind":"HyperNode"')

    # ---------------------------------------------------------------------------------- plans
    def plan_jobs(self) -> None:
        """Job arrivals: survivors (live at the end) over the whole history, transients before."""
        rng = self.rng
        cap = max(1, self.n_pods // 10)
        left = self.n_pods
        while left > 0:
            size, kind, gpus = self.job_shape(min(left, cap))
            left -= size
            # a few arrive in the last half minute: the history ends with some still being scheduled
            t = (
                HISTORY - 10 * SECOND - int(rng.random() * 20 * SECOND)
                if rng.random() < 0.02
                else int(rng.random() * HISTORY)
            )
            self.at(t, self.arrive, (True, size, 0, kind, gpus))
        # transient jobs: on average 3% of the history long (shorter when churn is high)
        mean_run = 0.03 * HISTORY / max(1.0, self.churn)
        left = round(self.churn * self.n_pods)
        while left > 0:
            size, kind, gpus = self.job_shape(min(left, cap))
            left -= size
            run = int(mean_run * math.exp(rng.uniform(-3.0, 1.1)) / 0.72)
            span = int(run * 1.2) + 3 * HOUR + 20 * MINUTE
            self.at(int(rng.random() * max(MINUTE, HISTORY - span)), self.arrive, (False, size, run, kind, gpus))

    def job_shape(self, cap: int) -> tuple[int, int, int]:
        """(pods, kind index, GPUs per pod) of a job of at most ``cap`` pods."""
        rng = self.rng
        low, high, _ = _weighted(rng, _SIZES)
        size = min(cap, rng.randint(low, high))
        kind = rng.choices(range(len(_KINDS)), _KIND_WEIGHTS)[0]
        gpus = 0
        if _KINDS[kind][4] and self.gpu_nodes and rng.random() < self.p_gpu_job:
            gpus = rng.choice(_GPUS)
            size = min(size, max(1, self.max_gpu_pods // gpus))
        return size, kind, gpus

    def plan_churn(self) -> None:
        rng = self.rng
        # node restarts: deleted, then added again (their pods' usage stays counted meanwhile)
        n_restart = max(1, self.n_nodes // 500) if self.n_nodes >= 5 else 0
        self.restart_nodes = rng.sample(self.all_nodes, n_restart)
        for node in self.restart_nodes:
            self.at(int(HISTORY * rng.uniform(0.05, 0.95)), self.node_down, node)
        n_cordon = max(1, self.n_nodes // 1000) if self.n_nodes >= 10 else 0
        for node in rng.sample(self.normal_nodes, min(n_cordon, len(self.normal_nodes))):
            self.at(int(HISTORY * rng.uniform(0.05, 0.9)), self.cordon, node)
        for name in self.queue_names:
            for _ in range(rng.randint(2, 5)):
                self.at(int(HISTORY * rng.random()), self.queue_update, name)
        self.at(int(HISTORY * rng.uniform(0.2, 0.4)), self.adhoc_queue, "adhoc-experiments")

    # ------------------------------------------------------------------------------ churn events
    def node_down(self, node: _Node, _gen: int) -> None:
        node.obj["metadata"]["resourceVersion"] = self.next_rv()
        node.obj["status"]["conditions"][0].update(
            status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status."
        )
        self.watch("MODIFIED", "Node", _dumps(node.obj))
        node.obj["metadata"]["resourceVersion"] = self.next_rv()
        self.watch("DELETED", "Node", _dumps(node.obj))
        if node.csi is not None:
            self.watch("DELETED", "CSINode", _dumps(node.csi))
        node.stored = False
        self.stats.node_restarts += 1
        self.at(self.now + self.rng.randint(2 * MINUTE, 30 * MINUTE), self.node_up, node)

    def node_up(self, node: _Node, _gen: int) -> None:
        node.obj["status"]["conditions"][0].update(
            status="True", reason="KubeletReady", message="kubelet is posting ready status"
        )
        self.add_node(node, self.ts())
        if node.csi is not None:
            self.add_csinode(node)

    def cordon(self, node: _Node, _gen: int) -> None:
        spec = node.obj["spec"]
        node.cordoned = not node.cordoned
        if node.cordoned:
            spec["unschedulable"] = True
            spec["taints"] = [
                *spec.get("taints", []),
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": self.ts()},
            ]
            self.at(self.now + self.rng.randint(HOUR, 8 * HOUR), self.cordon, node)
        else:
            spec.pop("unschedulable", None)
            spec["taints"] = [t for t in spec["taints"] if t["key"] != "node.kubernetes.io/unschedulable"]
            if not spec["taints"]:
                del spec["taints"]
        if node.stored:
            node.obj["metadata"]["resourceVersion"] = self.next_rv()
            self.watch("MODIFIED", "Node", _dumps(node.obj))

    def queue_update(self, name: str, _gen: int) -> None:
        obj = self.queue_objs[name]
        spec = obj["spec"]
        spec["weight"] = self.rng.choice([w for w in range(1, 11) if w != spec["weight"]])
        if "capability" in spec and self.rng.random() < 0.3:
            spec["capability"]["cpu"] = str(self.rng.choice((500, 1000, 2000, 5000)))
        obj["metadata"]["resourceVersion"] = self.next_rv()
        obj["metadata"]["generation"] += 1
        self.watch("MODIFIED", "Queue", _dumps(obj))

    def queue_object(self, name: str, spec: dict[str, Any], created: str) -> dict[str, Any]:
        return {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {
                "name": name,
                "uid": self.uid(),
                "resourceVersion": self.next_rv(),
                "generation": 1,
                "creationTimestamp": created,
            },
            "spec": spec,
            "status": {"state": "Open"},
        }

    def adhoc_queue(self, name: str, _gen: int) -> None:
        obj = self.queue_object(name, {"weight": 1, "reclaimable": True}, self.ts())
        self.watch("ADDED", "Queue", _dumps(obj))
        obj["status"]["state"] = "Closed"
        obj["metadata"]["resourceVersion"] = self.next_rv()
        self.at(self.now + 2 * DAY, self.close_adhoc, obj)

    def close_adhoc(self, obj: dict[str, Any], _gen: int) -> None:
        self.watch("MODIFIED", "Queue", _dumps(obj))
        self.watch("DELETED", "Queue", _dumps(obj))

    # ---------------------------------------------------------------------------------- jobs
    def arrive(self, plan: tuple[bool, int, int, int, int], _gen: int) -> None:
        survivor, size, run, kind_i, gpus = plan
        rng = self.rng
        job = _Job()
        job.survivor = survivor
        job.run = run
        job.deadline = self.now + int(run * 1.2) + 3 * HOUR
        queue = rng.choices(self.queue_names, self.queue_weights)[0]
        job.ns = rng.choice(self.queue_ns[queue])
        kind, task_name, image, stems, _ = _KINDS[kind_i]
        self.job_seq += 1
        job.seq = self.job_seq
        job.name = f"{kind}-{rng.choice(stems)}-{job.seq:06d}"
        job_uid = self.uid()
        job.pg = f"{job.name}-{job_uid}"  # as Volcano's job controller names it
        job.replica = self.replicas[int(rng.random() * len(self.replicas))]
        job.rack = self.normal_nodes[int(rng.random() * len(self.normal_nodes))].rack if size > 1 else None
        pc, priority, _ = _weighted(rng, self.pc_rows)
        preemptable = {"batch-low": "true", "production-critical": "false"}.get(pc or "")
        owner = _dumps(
            [
                {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "name": job.name,
                    "uid": job_uid,
                    "controller": True,
                }
            ]
        )
        # one or two tasks (roles) per job
        if kind == "sim" and size >= 3:
            roles = [("launcher", 1, False), ("worker", size - 1, True)]
        elif kind == "train" and size >= 4 and rng.random() < 0.3:
            ps = 1 + (size >= 16)
            roles = [("ps", ps, False), ("worker", size - ps, True)]
        else:
            roles = [(task_name, size, True)]
        main_cpu = _weighted(rng, _CPU)[0]
        per_core = _weighted(rng, _MEM_PER_CORE)[0]
        main = (main_cpu, max(128 * MI, main_cpu * per_core * GI // 1000 // MI * MI), 0)
        if gpus:
            main = (6000 * gpus, 48 * GI * gpus, 1000 * gpus)
        sidecar = rng.random() < 0.2
        init = rng.random() < 0.25
        min_cpu = min_mem = 0
        for role, count, heavy in roles:
            cpu, mem, gpu = main if heavy else (500, GI, 0)
            task = self.make_task(job, role, count, image, (cpu, mem, gpu), sidecar, init, (pc, priority))
            labels = {"volcano.sh/job-name": job.name}
            annotations = {"scheduling.k8s.io/group-name": job.pg, "volcano.sh/task-spec": role}
            if preemptable is not None:
                annotations["volcano.sh/preemptable"] = preemptable
            task.meta = (
                f'"labels":{_dumps(labels)},"ownerReferences":{owner},'
                f'"annotations":{_dumps(annotations)[:-1]},"volcano.sh/task-index":"'
            )
            job.tasks.append(task)
            min_cpu += task.cpu * count
            min_mem += task.mem * count

        job.min_member = size if rng.random() < 0.8 else max(1, size // 2)
        pg_spec: dict[str, Any] = {
            "minMember": job.min_member,
            "minTaskMember": {t.name: t.count if job.min_member == size else 1 for t in job.tasks},
            "queue": queue,
            "minResources": {"cpu": _cpu_q(min_cpu), "memory": _mem_q(min_mem)},
        }
        if pc is not None:
            pg_spec["priorityClassName"] = pc
        pg_ann = {} if preemptable is None else {"volcano.sh/preemptable": preemptable}
        job.pg_head = (
            f'{{"apiVersion":"scheduling.volcano.sh/v1beta1","kind":"PodGroup","metadata":'
            f'{{"name":"{job.pg}","namespace":"{job.ns}","uid":"{self.uid()}","resourceVersion":"'
        )
        job.pg_tail = (
            f'","generation":1,"creationTimestamp":"{self.ts()}","annotations":{_dumps(pg_ann)},'
            f'"ownerReferences":{owner}}},"spec":{_dumps(pg_spec)},"status":'
        )
        self.stats.jobs_created += 1
        self.jobs[job.seq] = job
        self.pg_event("ADDED", job, '{"phase":"Pending"}')
        self.at(self.now + rng.randint(SECOND // 2, 5 * SECOND), self.inqueue, job)
        if not survivor:
            self.at(job.deadline, self.deadline, job)

    def make_task(
        self,
        job: _Job,
        role: str,
        count: int,
        image: str,
        request: tuple[int, int, int],
        sidecar: bool,
        init: bool,
        priority: tuple[str | None, int],
    ) -> _Task:
        """A task's pod template, and its resreq computed as the fold does (cache-semantics.md 3.1)."""
        cpu, mem, gpu = request
        requests = {"cpu": _cpu_q(cpu), "memory": _mem_q(mem)}
        if gpu:
            requests[GPU] = str(gpu // 1000)
        env = [{"name": "OMP_NUM_THREADS", "value": str(max(1, cpu // 1000))}]
        containers = [{"name": role, "image": image, "env": env, "resources": {"requests": requests}}]
        if sidecar:
            containers.append(
                {
                    "name": "log-agent",
                    "image": "infra/fluent-bit:3.1.9",
                    "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
                }
            )
            cpu += 50
            mem += 64 * MI
        spec: dict[str, Any] = {"schedulerName": "volcano"}
        if priority[0] is not None:
            spec["priorityClassName"] = priority[0]
        spec["priority"] = priority[1]  # set by the API server's admission from the class
        spec["restartPolicy"] = "OnFailure"
        if init:  # an init container: the pod requests the larger of it and the containers' sum
            icpu, imem = 500, 512 * MI
            spec["initContainers"] = [
                {
                    "name": "fetch-data",
                    "image": "infra/data-fetch:0.9",
                    "resources": {"requests": {"cpu": _cpu_q(icpu), "memory": _mem_q(imem)}},
                }
            ]
            cpu, mem = max(cpu, icpu), max(mem, imem)
        spec["containers"] = containers
        if gpu:
            spec["tolerations"] = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
        task = _Task(role, count, cpu, mem, gpu)
        task.spec = _dumps(spec)[1:-1]
        return task

    def pg_event(self, op: str, job: _Job, status: str) -> None:
        self.watch(op, "PodGroup", f"{job.pg_head}{self.next_rv()}{job.pg_tail}{status}}}")

    def inqueue(self, job: _Job, _gen: int) -> None:
        job.phase = "Inqueue"
        self.pg_event(
            "MODIFIED",
            job,
            f'{{"phase":"Inqueue","conditions":[{{"type":"Scheduled","status":"False",'
            f'"lastTransitionTime":"{self.ts()}","reason":"NotEnoughResources"}}]}}',
        )
        session = self.now + self.rng.randint(SECOND, 3 * SECOND)
        i = 0
        for task in job.tasks:
            for index in range(task.count):
                pod = self.new_pod(job, task, index)
                self.at(session + 7 * i, self.bind, pod, pod.gen)
                i += 1

    def new_pod(self, job: _Job, task: _Task, index: int) -> _Pod:
        pod = _Pod(job, task, index, self.uid(), self.ts())
        job.pods.append(pod)
        job.active += 1
        self.stats.pods_created += 1
        self.pod_event("ADDED", pod, '{"phase":"Pending","qosClass":"Burstable"}')
        return pod

    def pod_event(self, op: str, pod: _Pod, status: str, node: _Node | None = None, deleting: bool = False) -> None:
        task = pod.task
        deletion = f'"deletionTimestamp":"{self.ts()}","deletionGracePeriodSeconds":30,' if deleting else ""
        node_name = f'"nodeName":"{node.name}",' if node is not None else ""
        self.watch(
            op,
            "Pod",
            f'{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{pod.name}","namespace":"{pod.job.ns}",'
            f'"uid":"{pod.uid}","resourceVersion":"{self.next_rv()}","creationTimestamp":"{pod.created}",'
            f'{deletion}{task.meta}{pod.index}"}}}},"spec":{{{node_name}{task.spec}}},"status":{status}}}',
        )

    def running_status(self, pod: _Pod) -> str:
        assert pod.node is not None
        return (
            f'{{"phase":"Running","hostIP":"{pod.node.ip}","podIP":"{pod.ip}","startTime":"{pod.start}",'
            f'"containerStatuses":[{{"name":"{pod.task.name}","state":{{"running":{{"startedAt":"{pod.start}"}}}},'
            f'"ready":true,"restartCount":0}}],"qosClass":"Burstable"}}'
        )

    def ended_status(self, pod: _Pod, phase: str) -> str:
        assert pod.node is not None
        code, reason = (0, "Completed") if phase == "Succeeded" else (1, "Error")
        return (
            f'{{"phase":"{phase}","hostIP":"{pod.node.ip}","podIP":"{pod.ip}","startTime":"{pod.start}",'
            f'"containerStatuses":[{{"name":"{pod.task.name}","state":{{"terminated":{{"exitCode":{code},'
            f'"reason":"{reason}","startedAt":"{pod.start}","finishedAt":"{self.ts()}"}}}},"ready":false,'
            f'"restartCount":0}}],"qosClass":"Burstable"}}'
        )

    # ---------------------------------------------------------------------------- scheduling
    def fits(self, node: _Node, task: _Task) -> bool:
        """The fold's BIND fit check (cache-semantics.md, section 6, rule 4) on tracked idle."""
        return node.cpu >= task.cpu and node.mem >= task.mem and node.pods >= 1 and node.gpu >= task.gpu

    def place(self, pod: _Pod) -> _Node | None:
        rng = self.rng
        task = pod.task
        if task.gpu:
            pool = self.gpu_nodes
        else:
            pool = self.normal_nodes
            if pod.job.rack is not None:  # gangs prefer one rack (the HyperNode of tier 1)
                local = self.rack_nodes[pod.job.rack]
                for _ in range(3):
                    node = local[int(rng.random() * len(local))]
                    if node.stored and not node.cordoned and self.fits(node, task):
                        return node
        if not pool:
            return None
        for _ in range(12):
            node = pool[int(rng.random() * len(pool))]
            if node.stored and not node.cordoned and self.fits(node, task):
                return node
        return None

    def use(self, node: _Node, task: _Task, sign: int) -> None:
        node.cpu -= sign * task.cpu
        node.mem -= sign * task.mem
        node.pods -= sign
        node.gpu -= sign * task.gpu

    def bind(self, pod: _Pod, gen: int) -> None:
        if pod.state != PENDING or pod.gen != gen:
            return
        rng = self.rng
        job = pod.job
        node = self.place(pod)
        if node is None:
            pod.tries += 1
            if pod.tries < 14:
                delay = min(10 * MINUTE, 15 * SECOND << min(pod.tries, 6))
                self.at(self.now + delay + rng.randint(0, 5 * SECOND), self.bind, pod, pod.gen)
            return
        if rng.random() < 0.012:
            self.racing_bind(pod)
        self.sched("BIND", f'"pod":"{pod.uid}","node":"{node.name}","replica":"{job.replica}"')
        self.stats.binds += 1
        self.stats.binds_admitted += 1
        self.use(node, pod.task, 1)
        pod.node = node
        pod.state = BINDING
        pod.gen += 1
        if len(self.replicas) > 1 and rng.random() < 0.015:
            # another replica, working from a stale snapshot, binds the same task: rejected (not Pending)
            other = self.replicas[
                (self.replicas.index(job.replica) + 1 + int(rng.random() * (len(self.replicas) - 1)))
                % len(self.replicas)
            ]
            rival = self.normal_nodes[int(rng.random() * len(self.normal_nodes))] if self.normal_nodes else node
            self.sched("BIND", f'"pod":"{pod.uid}","node":"{rival.name}","replica":"{other}"')
            self.stats.binds += 1
            self.stats.binds_rejected += 1
        if rng.random() < 0.02:
            self.at(self.now + rng.randint(50, 3 * SECOND), self.bind_failed, pod, pod.gen)
        else:
            self.at(self.now + rng.randint(10, SECOND), self.bind_succeeded, pod, pod.gen)

    def racing_bind(self, pod: _Pod) -> None:
        """A replica binds to a node the task does not fit on, or that is gone: the fold rejects it."""
        rng = self.rng
        down = [n for n in self.restart_nodes if not n.stored]
        target = None
        if down and rng.random() < 0.5:
            target = down[0]
        else:
            for _ in range(8):
                node = self.all_nodes[int(rng.random() * len(self.all_nodes))]
                if node.stored and not self.fits(node, pod.task):
                    target = node
                    break
        if target is None:
            return
        other = self.replicas[int(rng.random() * len(self.replicas))]
        self.sched("BIND", f'"pod":"{pod.uid}","node":"{target.name}","replica":"{other}"')
        self.stats.binds += 1
        self.stats.binds_rejected += 1

    def bind_failed(self, pod: _Pod, gen: int) -> None:
        if pod.state != BINDING or pod.gen != gen:
            return
        assert pod.node is not None
        reason = self.rng.choice(_BIND_FAIL_REASONS).format(pod.name)
        self.sched("BIND_FAILED", f'"pod":"{pod.uid}","reason":{_dumps(reason)}')
        self.stats.bind_failures += 1
        self.use(pod.node, pod.task, -1)
        pod.node = None
        pod.state = PENDING
        pod.gen += 1
        self.at(self.now + self.rng.randint(2 * SECOND, 30 * SECOND), self.bind, pod, pod.gen)

    def bind_succeeded(self, pod: _Pod, gen: int) -> None:
        if pod.state != BINDING or pod.gen != gen:
            return
        node = pod.node
        assert node is not None
        self.sched("BIND_SUCCEEDED", f'"pod":"{pod.uid}","node":"{node.name}"')
        pod.gen += 1
        if self.rng.random() < 0.3:  # the API server's update with the node name, before the kubelet starts it
            pod.state = BOUND
            self.pod_event(
                "MODIFIED",
                pod,
                f'{{"phase":"Pending","conditions":[{{"type":"PodScheduled","status":'
                f'"True","lastTransitionTime":"{self.ts()}"}}],"qosClass":"Burstable"}}',
                node,
            )
            delay = self.rng.randint(2 * SECOND, 40 * SECOND)
        else:
            delay = self.rng.randint(SECOND, 15 * SECOND)
        self.at(self.now + delay, self.start, pod, pod.gen)

    def start(self, pod: _Pod, gen: int) -> None:
        if pod.state not in (BINDING, BOUND) or pod.gen != gen:
            return
        rng = self.rng
        node = pod.node
        assert node is not None
        node.ipn = node.ipn % 253 + 1
        pod.ip = f"{node.cidr}{node.ipn}"
        pod.start = self.ts()
        pod.state = RUNNING
        pod.gen += 1
        self.pod_event("MODIFIED", pod, self.running_status(pod), node)
        job = pod.job
        job.running += 1
        if job.phase != "Running" and job.running >= job.min_member:
            job.phase = "Running"
            self.pg_event("MODIFIED", job, f'{{"phase":"Running","running":{job.running}}}')
        if job.survivor:
            if rng.random() < 0.012:
                self.at(self.now + int(rng.random() * (HISTORY - self.now)) + 1, self.evict, pod, pod.gen)
            return
        finish = self.now + int(job.run * rng.uniform(0.9, 1.1))
        if finish > job.deadline - MINUTE:
            finish = max(self.now + rng.randint(SECOND, MINUTE), job.deadline - MINUTE)
        pod.finish_at = finish
        if rng.random() < 0.008:
            self.at(self.now + int(rng.random() * (finish - self.now)), self.evict, pod, pod.gen)
        self.at(finish, self.finish, pod, pod.gen)

    def finish(self, pod: _Pod, gen: int) -> None:
        if pod.state != RUNNING or pod.gen != gen:
            return
        assert pod.node is not None
        job = pod.job
        phase = "Succeeded" if self.rng.random() < 0.95 else "Failed"
        pod.ended = self.ended_status(pod, phase)  # the status its DELETED record repeats
        self.pod_event("MODIFIED", pod, pod.ended, pod.node)
        self.use(pod.node, pod.task, -1)
        pod.state = DONE
        pod.gen += 1
        job.running -= 1
        if phase == "Succeeded":
            job.succeeded += 1
        else:
            job.failed += 1
        job.active -= 1
        self.job_settled(job)

    def job_settled(self, job: _Job) -> None:
        if job.survivor or job.active or job.completing:
            return
        job.completing = True
        job.phase = "Completed"
        self.pg_event("MODIFIED", job, f'{{"phase":"Completed","succeeded":{job.succeeded},"failed":{job.failed}}}')
        self.at(self.now + self.rng.randint(MINUTE, HOUR), self.cleanup, job)

    def deadline(self, job: _Job, _gen: int) -> None:
        """A transient job still unfinished is terminated: its remaining pods are deleted."""
        if job.completing:
            return
        for pod in job.pods:
            if pod.state in (DONE, GONE):
                continue
            self.delete_pod(pod, deleting=True)
            job.active -= 1
        job.running = 0
        self.job_settled(job)

    def cleanup(self, job: _Job, _gen: int) -> None:
        for pod in job.pods:
            if pod.state != GONE:
                self.delete_pod(pod)
        self.pg_event("DELETED", job, f'{{"phase":"{job.phase}"}}')
        del self.jobs[job.seq]

    def delete_pod(self, pod: _Pod, deleting: bool = False) -> None:
        node = pod.node
        if pod.state == RUNNING or pod.state == TERMINATING or pod.state == EVICTING:
            status = self.running_status(pod)
        elif pod.state == DONE:
            status = pod.ended
        elif pod.state == BOUND:
            status = '{"phase":"Pending","qosClass":"Burstable"}'
        else:  # Pending, or Binding: the stored pod has no node name yet
            status = '{"phase":"Pending","qosClass":"Burstable"}'
            node = None
        self.pod_event("DELETED", pod, status, node, deleting or pod.state == TERMINATING)
        if pod.state in _ON_NODE:
            assert pod.node is not None
            self.use(pod.node, pod.task, -1)
        pod.state = GONE
        pod.gen += 1
        self.stats.pods_deleted += 1

    # ------------------------------------------------------------------------------- eviction
    def evict(self, pod: _Pod, gen: int) -> None:
        if pod.state != RUNNING or pod.gen != gen:
            return
        rng = self.rng
        replica = self.replicas[int(rng.random() * len(self.replicas))]
        self.sched("EVICT", f'"pod":"{pod.uid}","reason":"{rng.choice(_EVICT_REASONS)}","replica":"{replica}"')
        self.stats.evictions += 1
        pod.state = EVICTING
        pod.gen += 1
        if rng.random() < 0.85:
            self.at(self.now + rng.randint(50, 2 * SECOND), self.evict_succeeded, pod, pod.gen)
        else:
            self.at(self.now + rng.randint(SECOND, 20 * SECOND), self.evict_failed, pod, pod.gen)

    def evict_succeeded(self, pod: _Pod, gen: int) -> None:
        if pod.state != EVICTING or pod.gen != gen:
            return
        self.sched("EVICT_SUCCEEDED", f'"pod":"{pod.uid}"')
        pod.state = TERMINATING
        pod.gen += 1
        self.pod_event("MODIFIED", pod, self.running_status(pod), pod.node, deleting=True)
        self.at(self.now + self.rng.randint(SECOND, 30 * SECOND), self.evicted, pod, pod.gen)

    def evicted(self, pod: _Pod, gen: int) -> None:
        if pod.state != TERMINATING or pod.gen != gen:
            return
        job = pod.job
        self.delete_pod(pod, deleting=True)
        job.running -= 1
        if job.survivor or self.now < job.deadline - 10 * MINUTE:  # the job controller recreates the pod
            job.active -= 1
            fresh = self.new_pod(job, pod.task, pod.index)
            self.at(self.now + self.rng.randint(SECOND, 5 * SECOND), self.bind, fresh, fresh.gen)
        else:
            job.active -= 1
            self.job_settled(job)

    def evict_failed(self, pod: _Pod, gen: int) -> None:
        if pod.state != EVICTING or pod.gen != gen:
            return
        self.sched("EVICT_FAILED", f'"pod":"{pod.uid}","reason":"the pod is protected by a PodDisruptionBudget"')
        self.stats.evict_failures += 1
        pod.state = RUNNING
        pod.gen += 1
        if not pod.job.survivor:
            self.at(max(self.now + SECOND, pod.finish_at), self.finish, pod, pod.gen)

    # ---------------------------------------------------------------------------------- stats
    def finish_stats(self) -> None:
        stats = self.stats
        by_type: dict[str, int] = {}
        by_kind: dict[str, int] = {}
        for (rtype, kind), n in sorted(self.counts.items()):
            by_type[rtype] = by_type.get(rtype, 0) + n
            if kind:
                by_kind[kind] = by_kind.get(kind, 0) + n
        stats.by_type = by_type
        stats.by_kind = by_kind
        stats.nodes = sum(1 for n in self.all_nodes if n.stored)
        stats.queues = len(self.queue_names)
        stats.jobs_live = len(self.jobs)
        live: dict[str, int] = {status: 0 for status in dict.fromkeys(_FOLD_STATUS.values())}
        for job in self.jobs.values():
            for pod in job.pods:
                if pod.state != DONE and pod.state != GONE:
                    live[_FOLD_STATUS[pod.state]] += 1
        stats.live_by_status = live
        stats.live_pods = sum(live.values())


def generate(
    out: BinaryIO,
    *,
    nodes: int = 5000,
    pods: int = 150_000,
    queues: int = 20,
    churn: float = 1.0,
    seed: int = 1,
    replicas: int = 3,
) -> GenStats:
    """Write a synthetic cluster history to ``out`` as trace lines; the same arguments give the same bytes.

    ``nodes`` Nodes (a few GPU, infra-tainted, revocable-zone and oversubscribed ones among them),
    ``queues`` Queues (``default`` first), and jobs whose pods number about ``pods`` live at the end,
    while ``churn`` x ``pods`` more pods are created and deleted during the 30 days of history.
    ``replicas`` scheduler replicas (``scheduler-<i>``) send the BIND and EVICT records.
    """
    if nodes < 1:
        raise ValueError("nodes must be at least 1")
    if pods < 0:
        raise ValueError("pods must not be negative")
    if queues < 1:
        raise ValueError("queues must be at least 1")
    if not churn >= 0 or math.isinf(churn):
        raise ValueError("churn must be a finite number >= 0")
    if replicas < 1:
        raise ValueError("replicas must be at least 1")
    return _Generator(out, nodes, pods, queues, churn, seed, replicas).run()


def cycle_lines(trace: Path, tasks: Mapping[str, Any], pods: int) -> list[bytes]:
    """Trace lines of the history's own kind of traffic that its final state applies, and applies
    again and again: for ``pods`` Running tasks spread over ``tasks`` (a snapshot's or state's),
    each pod's lifecycle as the history writes it (DELETED, ADDED as Pending, BIND to its node,
    BIND_SUCCEEDED, MODIFIED as Running there). A pass leaves every task as it found it, so a
    benchmark can replay them round and round at a steady state size."""
    eligible = sorted(uid for uid, t in tasks.items() if t.status == TaskStatus.RUNNING and t.node and t.job)
    if len(eligible) < pods:
        raise ValueError(f"the history leaves {len(eligible)} Running tasks, not the {pods} asked for")
    step = len(eligible) / pods
    chosen = {eligible[int(i * step)] for i in range(pods)}
    last: dict[str, bytes] = {}  # the raw line of each chosen pod's last watch event
    uid_of = re.compile(rb'"kind":"Pod","metadata":\{[^{}]*?"uid":"([^"]+)"')
    with open(trace, "rb", buffering=1 << 20) as f:
        for line in f:
            found = uid_of.search(line) if b'"kind":"Pod"' in line else None
            if found is not None and found.group(1).decode() in chosen:
                last[found.group(1).decode()] = line
    if len(last) != len(chosen):
        raise ValueError(f"no watch event found for {len(chosen) - len(last)} of the chosen tasks' pods")
    lines: list[bytes] = []
    for uid in sorted(chosen):
        event = json.loads(last[uid])
        running = event["object"]
        node = tasks[uid].node
        if event["type"] == "DELETED" or running["status"].get("phase") != "Running":
            raise ValueError(f"the last event of task {uid} does not show it Running")
        pending = copy.deepcopy(running)
        del pending["spec"]["nodeName"]
        pending["status"] = {"phase": "Pending", "qosClass": running["status"].get("qosClass", "Burstable")}
        for value in (
            {"type": "DELETED", "object": running},
            {"type": "ADDED", "object": pending},
            {"type": "BIND", "pod": uid, "node": node},
            {"type": "BIND_SUCCEEDED", "pod": uid, "node": node},
            {"type": "MODIFIED", "object": running},
        ):
            lines.append(json.dumps(value, separators=(",", ":")).encode())
    return lines
