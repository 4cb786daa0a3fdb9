"""Why a task is where it is, or why it waits: the facts of one snapshot in the words that
kube-scheduler and Volcano users already know (`strata why`, issue 15).

Pure, like the fold: a ``Snapshot``, the pod's tolerations and its BIND attempts in, an
``Explanation`` out; no clock, no I/O, every list in a fixed order.

- **Nodes**: each stored node is checked as kube-scheduler's filters would, stopping at the first
  that fails, in its default order: ``NodeUnschedulable``, then ``TaintToleration`` (NoSchedule
  and NoExecute taints), then the resources by the fold's own admission rule (cache-semantics.md
  section 6: every resource the task requests, cpu and memory always, against the node's idle).
  The reasons are counted and sorted as ``FitError.Error()`` does.
- **Gang**: Volcano's gang condition, ``"%v/%v tasks in gang unschedulable: %v"``, with
  ``JobInfo.FitError()``'s histogram of task statuses; it is a reason only when the gang cannot
  reach minMember from what is pending (each pending task that some node takes counting as bound).
- **Queue**: Volcano allocates only from a queue whose state is ``Open``.
- **Binds**: the BIND attempts for the task that the caller read from the audit index.

The fold does not keep a pod's tolerations (``PodView`` has none): the caller reads them from the
pod's object in the log (``tolerations_of``) and passes them, or passes None, and then taints
count as untolerated and the explanation says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from strata.projector.fold.kinds import PodView, Taint, node_allocatable
from strata.projector.fold.resources import nonzero, scale_of
from strata.projector.fold.snapshot import Snapshot
from strata.projector.fold.task import ALLOCATED, TaskStatus

# -------------------------------------------------------------------------- the reason codes
# Per node, as kube-scheduler's filters fail
INSUFFICIENT_RESOURCE = "InsufficientResource"
TOO_MANY_PODS = "TooManyPods"
NODE_UNSCHEDULABLE = "NodeUnschedulable"
UNTOLERATED_TAINT = "UntoleratedTaint"
# Per task or job, the first one that applies is the answer
NOT_FOUND = "NotFound"
NOT_IN_JOB = "NotInJob"
POD_GROUP_NOT_FOUND = "PodGroupNotFound"
QUEUE_NOT_FOUND = "QueueNotFound"
QUEUE_CLOSED = "QueueClosed"
QUEUE_NOT_OPEN = "QueueNotOpen"
NO_TASKS = "NoTasks"
UNSCHEDULABLE = "Unschedulable"
GANG_UNSCHEDULABLE = "GangUnschedulable"
PENDING = "Pending"
SCHEDULED = "Scheduled"
# A placed task's code is its status: Binding, Bound, Running, Releasing, Succeeded, Failed, Unknown

# kube-scheduler's words (pkg/scheduler/framework/plugins/...)
NO_NODES = "no nodes available to schedule pods"  # ErrNoNodesAvailable
UNSCHEDULABLE_TEXT = "node(s) were unschedulable"  # nodeunschedulable.ErrReasonUnschedulable
TOO_MANY_PODS_TEXT = "Too many pods"  # noderesources/fit.go, for the pods resource
# The taint a cordoned node's pod must tolerate (v1.TaintNodeUnschedulable, NoSchedule)
CORDON_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})  # DoNotScheduleTaintsFilterFunc
_ALWAYS_FIT = ("cpu", "memory")  # the fold checks them even when a task requests none
OPEN = "Open"
_CLOSED = frozenset({"Closed", "Closing"})
FITTING_SHOWN = 10  # names of nodes that fit, in an explanation (the count is always whole)
NAMES_SHOWN = 10  # task names per line of the table (the JSON has them all)
_NO_RESOURCES: dict[str, int] = {}


# ------------------------------------------------------------------------------- tolerations
class Toleration(NamedTuple):
    key: str
    operator: str
    value: str
    effect: str

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ``Toleration.ToleratesTaint``: an empty effect matches every effect, an
        empty key every key; ``Exists`` any value, ``Equal`` (or no operator) the same value.
        Other operators (the alpha ``Lt``/``Gt``, off by default) tolerate nothing."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator in ("", "Equal"):
            return self.value == taint.value
        return self.operator == "Exists"

    def to_json(self) -> dict[str, str]:
        return {"key": self.key, "operator": self.operator, "value": self.value, "effect": self.effect}


def tolerations_of(pod: Any) -> tuple[Toleration, ...]:
    """``spec.tolerations`` of a pod object (parsed JSON); a field of the wrong type reads as
    absent, as the fold reads nothing of tolerations and so never refused such a pod."""
    spec = pod.get("spec") if type(pod) is dict else None
    items = spec.get("tolerations") if type(spec) is dict else None
    if type(items) is not list:
        return ()
    return tuple(
        Toleration(_text(t, "key"), _text(t, "operator"), _text(t, "value"), _text(t, "effect"))
        for t in items
        if type(t) is dict
    )


def _text(item: dict[str, Any], key: str) -> str:
    value = item.get(key)
    return value if type(value) is str else ""


def _untolerated(taints: Iterable[Taint], tolerations: Sequence[Toleration]) -> Taint | None:
    """v1helper.FindMatchingUntoleratedTaint with the NoSchedule/NoExecute filter: the first."""
    for taint in taints:
        if taint.effect in _BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            return taint
    return None


# -------------------------------------------------------------------------------------- nodes
class NodeReason(NamedTuple):
    """One reason a node was filtered out: a stable code, kube-scheduler's words, and what it is about."""

    code: str
    text: str
    resource: str | None = None
    taint: Taint | None = None

    def to_json(self, count: int) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "reason": self.text, "count": count}
        if self.resource is not None:
            out["resource"] = self.resource
        if self.taint is not None:
            out["taint"] = {"key": self.taint.key, "value": self.taint.value, "effect": self.taint.effect}
        return out


_CORDONED = (NodeReason(NODE_UNSCHEDULABLE, UNSCHEDULABLE_TEXT),)


def _resource_reason(name: str) -> NodeReason:
    if name == "pods":
        return NodeReason(TOO_MANY_PODS, TOO_MANY_PODS_TEXT, resource=name)
    return NodeReason(INSUFFICIENT_RESOURCE, f"Insufficient {name}", resource=name)


def _taint_reason(taint: Taint) -> NodeReason:
    # tainttoleration's "node(s) had untolerated taint {%s: %s}" names key and value, not the effect
    return NodeReason(UNTOLERATED_TAINT, f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}", taint=taint)


def fit_order(resreq: Mapping[str, int]) -> list[str]:
    """The resources the fold checks, in its order: cpu, memory, then the task's others by name."""
    return [*_ALWAYS_FIT, *sorted(k for k in resreq if k not in _ALWAYS_FIT)]


@dataclass(frozen=True)
class NodeFit:
    """How the stored nodes take one request: how many fit, and why the others do not."""

    total: int
    fit: int
    reasons: tuple[tuple[NodeReason, int], ...]  # in the histogram's order
    fitting: tuple[str, ...]  # the first FITTING_SHOWN names of nodes that fit, sorted
    request: tuple[tuple[str, int], ...]  # the task's non-zero requests, by name (hashable: a job's
    # tasks are grouped by their answer)

    @property
    def message(self) -> str:
        """FitError.Error()'s sentence: "0/5 nodes are available: 3 Insufficient cpu, 2 ...".
        kube-scheduler writes it only when no node fits (always "0/"); here the first number
        is the count of nodes that fit, whatever it is."""
        if not self.total:
            return NO_NODES
        head = f"{self.fit}/{self.total} nodes are available"
        if not self.reasons:
            return head + "."
        return f"{head}: {', '.join(f'{n} {r.text}' for r, n in self.reasons)}."

    def to_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "fit": self.fit,
            "message": self.message,
            "reasons": [r.to_json(n) for r, n in self.reasons],
            "fitting": list(self.fitting),
            "request": dict(self.request),
        }


def node_fit(snapshot: Snapshot, resreq: Mapping[str, int], tolerations: Sequence[Toleration]) -> NodeFit:
    """One pass over the stored nodes, each checked as ``_verdicts`` says."""
    counts: dict[NodeReason, int] = {}
    fitting: list[str] = []
    total = 0
    for name, reasons in _verdicts(snapshot, resreq, tolerations):
        total += 1
        if not reasons:
            fitting.append(name)
        for reason in reasons:
            counts[reason] = counts.get(reason, 0) + 1
    request = tuple(sorted(nonzero(resreq).items()))
    return NodeFit(total, len(fitting), _histogram(counts), tuple(sorted(fitting)[:FITTING_SHOWN]), request)


def any_fit(snapshot: Snapshot, resreq: Mapping[str, int], tolerations: Sequence[Toleration]) -> bool:
    """Whether some stored node takes the request: ``node_fit(...).fit > 0``, stopping at the first."""
    return any(not reasons for _name, reasons in _verdicts(snapshot, resreq, tolerations))


def _verdicts(
    snapshot: Snapshot, resreq: Mapping[str, int], tolerations: Sequence[Toleration]
) -> Iterator[tuple[str, Sequence[NodeReason]]]:
    """Each stored node with why it does not take the request (nothing when it does): the first
    filter that fails, as kube-scheduler's framework stops at it; the resource filter names every
    resource short. The loop is the cost of an explanation (5,000 nodes), so it reads plain dicts
    (not the snapshot's sharded maps, one Python call per lookup) and builds each reason once."""
    order = [(k, resreq.get(k, 0), _resource_reason(k)) for k in fit_order(resreq)]
    cordon_ok = any(t.tolerates(CORDON_TAINT) for t in tolerations)
    csinodes = dict(snapshot.csinodes.items())
    used_by_node = dict(snapshot.node_used.items())
    tainted: dict[Taint, Sequence[NodeReason]] = {}
    for shard in snapshot.nodes.shards():
        for name, node in shard.items():
            if node.unschedulable and not cordon_ok:
                yield name, _CORDONED
                continue
            taint = _untolerated(node.taints, tolerations) if node.taints else None
            if taint is not None:
                yield name, tainted.get(taint) or tainted.setdefault(taint, (_taint_reason(taint),))
                continue
            allocatable = node_allocatable(node, csinodes.get(name))
            used = used_by_node.get(name) or _NO_RESOURCES
            yield name, [reason for k, want, reason in order if want > allocatable.get(k, 0) - used.get(k, 0)]


def _histogram(counts: Mapping[NodeReason, int]) -> tuple[tuple[NodeReason, int], ...]:
    """sortReasonsHistogram: "<count> <reason>" strings as Go's sort.Strings orders them, by bytes;
    Python's code point order is the same for UTF-8."""
    return tuple(sorted(counts.items(), key=lambda item: f"{item[1]} {item[0].text}"))


# --------------------------------------------------------------------------------------- gang
@dataclass(frozen=True)
class Gang:
    """A job's tasks against its PodGroup's minMember, as Volcano's JobInfo counts them."""

    job: str
    min_member: int
    tasks: int
    ready: int  # ReadyTaskNum: Bound, Binding, Running, Succeeded
    allocated: int  # Binding, Bound, Running: what the job's `allocated` sums
    pending: int
    pending_best_effort: int
    statuses: tuple[tuple[str, int], ...]  # status -> tasks, by status name
    phase: str  # the PodGroup's status.phase

    @property
    def satisfied(self) -> bool:
        """JobInfo.IsReady: ready tasks, and pending best-effort ones, reach minMember."""
        return self.ready + self.pending_best_effort >= self.min_member

    @property
    def message(self) -> str:
        """The gang plugin's condition message, without the parts only a scheduling session
        knows (its per-task reasons and the first task's fit error)."""
        counts = [f"{n} {status}" for status, n in self.statuses]
        counts.append(f"{self.min_member} minAvailable")
        state = "pod group is ready" if self.satisfied else "pod group is not ready"
        detail = f"{state}, {', '.join(sorted(counts))}"
        if self.satisfied:
            return f"tasks in gang are ready to be scheduled: {detail}"
        return f"{self.min_member - self.ready}/{self.tasks} tasks in gang unschedulable: {detail}"

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "minMember": self.min_member,
            "tasks": self.tasks,
            "ready": self.ready,
            "allocated": self.allocated,
            "pending": self.pending,
            "statuses": dict(self.statuses),
            "podGroupPhase": self.phase,
            "satisfied": self.satisfied,
            "message": self.message,
        }


_READY = frozenset({TaskStatus.BOUND, TaskStatus.BINDING, TaskStatus.RUNNING, TaskStatus.SUCCEEDED})


def gang_of(key: str, min_member: int, phase: str, tasks: Sequence[PodView]) -> Gang:
    statuses: dict[str, int] = {}
    for t in tasks:
        status = str(t.status)  # the status's name: a TaskStatus is a StrEnum
        statuses[status] = statuses.get(status, 0) + 1
    pending = [t for t in tasks if t.status == TaskStatus.PENDING]
    return Gang(
        job=key,
        min_member=min_member,
        tasks=len(tasks),
        ready=sum(1 for t in tasks if t.status in _READY),
        allocated=sum(1 for t in tasks if t.status in ALLOCATED),
        pending=len(pending),
        pending_best_effort=sum(1 for t in pending if t.best_effort),
        statuses=tuple(sorted(statuses.items())),
        phase=phase,
    )


# ---------------------------------------------------------------------------------- the rest
@dataclass(frozen=True)
class Queue:
    name: str
    stored: bool
    state: str  # status.state ("" when unset)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "stored": self.stored, "state": self.state}


@dataclass(frozen=True)
class BindAttempt:
    """A BIND (or a BIND_GROUP's bind) of the task, as the audit index recorded the fold's verdict."""

    offset: int
    node: str
    replica: str | None
    verdict: str  # admitted | rejected
    reason: str | None  # the fold's reason for a rejection

    def to_json(self) -> dict[str, Any]:
        return {
            "offset": self.offset,
            "node": self.node,
            "replica": self.replica,
            "verdict": self.verdict,
            "reason": self.reason,
        }

    def line(self) -> str:
        by = f" by {self.replica}" if self.replica else ""
        why = f": {self.reason}" if self.reason else ""
        return f"offset {self.offset}: BIND to {self.node}{by}: {self.verdict}{why}"


@dataclass(frozen=True)
class Reason:
    code: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


@dataclass(frozen=True)
class TaskWhy:
    """One task's answer: its state, the reasons in order (the first is the answer), the nodes."""

    uid: str
    namespace: str
    name: str
    status: str
    node: str
    job: str | None
    reasons: tuple[Reason, ...]
    nodes: NodeFit | None  # a Pending task's
    binds: tuple[BindAttempt, ...]
    tolerations: tuple[Toleration, ...] | None  # None: not known to the caller

    def summary(self) -> dict[str, Any]:
        return {"uid": self.uid, "status": self.status, "node": self.node, "job": self.job}


@dataclass(frozen=True)
class Explanation:
    """`strata why`'s answer for a pod or a job at one version."""

    kind: str  # pod | job
    namespace: str
    name: str
    version: int
    reasons: tuple[Reason, ...]  # the first is the answer
    tasks: tuple[TaskWhy, ...]  # a pod's one (or none); a job's, by name
    gang: Gang | None
    queue: Queue | None

    @property
    def reason(self) -> Reason:
        return self.reasons[0]

    def to_json(self) -> dict[str, Any]:
        """The `-o json` shape (docs/why.md)."""
        out: dict[str, Any] = {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "version": self.version,
            "reason": self.reason.code,
            "message": self.reason.message,
            "reasons": [r.to_json() for r in self.reasons],
            "gang": self.gang.to_json() if self.gang else None,
            "queue": self.queue.to_json() if self.queue else None,
        }
        if self.kind == "pod":
            out.update(_pod_json(self.tasks[0] if self.tasks else None))
        else:
            out["tasks"] = [_task_json(t) for t in self.tasks]
            out["nodes"] = [{**fit.to_json(), "tasks": names} for fit, names in _distinct_fits(self.tasks)]
        return out

    def lines(self) -> list[str]:
        """The table form: what a person reads."""
        head = f"{self.kind} {self.namespace}/{self.name} at version {self.version}"
        if self.kind == "pod" and self.tasks:
            t = self.tasks[0]
            head += f": {t.status}" + (f" on {t.node}" if t.node else "")
        out = [head, *(f"  {r.code}: {r.message}" for r in self.reasons)]
        if self.kind == "pod" and self.tasks:
            out += _task_lines(self.tasks[0])
        elif self.kind == "job":
            out += _job_lines(self.tasks)
        if self.gang is not None:
            out.append(_gang_line(self.gang))
        if self.queue is not None:
            out.append(f"queue: {self.queue.name} ({_queue_words(self.queue)})")
        return out


def _pod_json(task: TaskWhy | None) -> dict[str, Any]:
    if task is None:
        return {"task": None, "nodes": None, "tolerations": None, "binds": []}
    return {
        "task": task.summary(),
        "nodes": task.nodes.to_json() if task.nodes else None,
        "tolerations": None if task.tolerations is None else [t.to_json() for t in task.tolerations],
        "binds": [b.to_json() for b in task.binds],
    }


def _task_json(task: TaskWhy) -> dict[str, Any]:
    return {
        "name": task.name,
        **task.summary(),
        "reason": task.reasons[0].code,
        "message": task.reasons[0].message,
        "binds": [b.to_json() for b in task.binds],
    }


def _distinct_fits(tasks: Iterable[TaskWhy]) -> list[tuple[NodeFit, list[str]]]:
    """The pending tasks' node checks, one per distinct answer, with the tasks it answers."""
    found: dict[NodeFit, list[str]] = {}
    for t in tasks:
        if t.nodes is not None:
            found.setdefault(t.nodes, []).append(t.name)
    return list(found.items())  # tasks come by name: the first task's answer first


def _task_lines(task: TaskWhy) -> list[str]:
    out: list[str] = []
    if task.nodes is not None:
        out += _fit_lines(task.nodes)
        if task.tolerations is None and any(r.code == UNTOLERATED_TAINT for r, _ in task.nodes.reasons):
            out.append("  (the pod's tolerations are unknown here: every NoSchedule/NoExecute taint counts)")
    out.append(f"binds: {len(task.binds)}")
    out += [f"  {b.line()}" for b in task.binds]
    return out


def _fit_lines(fit: NodeFit) -> list[str]:
    request = " ".join(f"{k}={quantity(k, v)}" for k, v in fit.request)
    out = [f"nodes: {fit.fit} of {fit.total} fit the request ({request or 'nothing'})"]
    out += [f"  {n:>6}  {r.text}  [{r.code}]" for r, n in fit.reasons]
    if fit.fitting:
        more = ", ..." if fit.fit > len(fit.fitting) else ""
        out.append(f"  fit: {', '.join(fit.fitting)}{more}")
    return out


_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def quantity(name: str, value: int) -> str:
    """A stored amount as Kubernetes would write it: cpu ``500m`` or ``2``, memory ``4Gi``."""
    if scale_of(name) == 1000:
        return f"{value // 1000}" if value % 1000 == 0 else f"{value}m"
    for suffix, unit in _BINARY if name == "memory" else ():
        if value and value % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)


def _job_lines(tasks: Sequence[TaskWhy]) -> list[str]:
    out = [f"tasks: {len(tasks)}"]
    for t in tasks:
        where = f" on {t.node}" if t.node else ""
        binds = f", {len(t.binds)} bind attempt(s)" if t.binds else ""
        out.append(f"  {t.name}: {t.status}{where}{binds}: {t.reasons[0].code}")
    for fit, names in _distinct_fits(tasks):
        out.append(f"pending {_some(names)}:")
        out += [f"  {line}" for line in _fit_lines(fit)]
    return out


def _some(names: Sequence[str]) -> str:
    """At most NAMES_SHOWN names, then how many more."""
    rest = len(names) - NAMES_SHOWN
    return ", ".join(names[:NAMES_SHOWN]) + (f" and {rest} more" if rest > 0 else "")


def _gang_line(gang: Gang) -> str:
    return (
        f"gang: job {gang.job}, minMember {gang.min_member}: {gang.ready} ready, {gang.allocated} allocated, "
        f"{gang.pending} pending of {gang.tasks} task(s); PodGroup phase {gang.phase or '(none)'}"
    )


def _queue_words(queue: Queue) -> str:
    if not queue.stored:
        return "not in the cache"
    return queue.state or "no state"


# ------------------------------------------------------------------------------ the answers
def find_task(snapshot: Snapshot, namespace: str, name: str) -> PodView | None:
    """The task of pod namespace/name (the snapshot keys tasks by uid: one pass over them)."""
    return next((t for t in _scan(snapshot, "namespace", namespace) if t.name == name), None)


def job_tasks(snapshot: Snapshot, key: str) -> list[PodView]:
    """The tasks of job ``key`` ("namespace/podgroup"), by name (one pass over every task)."""
    return _by_name(_scan(snapshot, "job", key))


def tasks_of(snapshot: Snapshot, key: str, uids: Iterable[str]) -> list[PodView]:
    """The tasks of job ``key`` among ``uids`` (a superset that the audit index names), by name:
    a lookup per uid instead of a pass over every task."""
    found = {u: t for u in uids if (t := snapshot.tasks.get(u)) is not None and t.job == key}
    return _by_name(found.values())


def _scan(snapshot: Snapshot, field: str, value: str) -> list[PodView]:
    """The tasks whose ``field`` is ``value``: the only pass over all of them (150,000 at scale),
    so it reads the shards directly, without a generator's step per task."""
    at = PodView._fields.index(field)
    return [t for shard in snapshot.tasks.shards() for t in shard.values() if t[at] == value]


def _by_name(tasks: Iterable[PodView]) -> list[PodView]:
    return sorted(tasks, key=lambda t: (t.name, t.uid))


def why_pod(
    snapshot: Snapshot,
    namespace: str,
    name: str,
    binds: Sequence[BindAttempt],
    *,
    uid: str | None = None,
    tolerations: Sequence[Toleration] | None = None,
    job_uids: Iterable[str] | None = None,
) -> Explanation:
    """Why pod namespace/name is in its state at the snapshot's version.

    ``tolerations`` are the pod's (None: unknown); its pending siblings, which decide whether its
    gang can complete, are judged with them too (a job's pods usually share one template;
    ``why_job`` takes each pod's own). ``uid`` (the pod's) and ``job_uids`` (a superset of its
    job's tasks' uids), when the caller knows them from the audit index, spare the pass over
    every task; without them one pass over the tasks finds both."""
    task, siblings = _locate(snapshot, namespace, name, uid, job_uids)
    if task is None:
        return _not_found("pod", snapshot, namespace, name)
    context = _JobContext.of(snapshot, task.job, siblings)
    fits = _Fits(snapshot, lambda _task: tolerations)
    answer = _task_why(task, context, binds, fits)
    return Explanation("pod", namespace, name, snapshot.version, answer.reasons, (answer,), context.gang, context.queue)


def why_job(
    snapshot: Snapshot,
    namespace: str,
    name: str,
    binds_by_pod: Mapping[str, Sequence[BindAttempt]],
    *,
    tolerations: Mapping[str, Sequence[Toleration]] | None = None,
    job_uids: Iterable[str] | None = None,
) -> Explanation:
    """Why job namespace/name (its PodGroup) is in its state, over all its tasks. ``binds_by_pod``
    and ``tolerations`` are keyed by task uid (a task missing from ``tolerations``, or None, has
    unknown tolerations); ``job_uids`` as for ``why_pod``."""
    key = f"{namespace}/{name}"
    tasks = job_tasks(snapshot, key) if job_uids is None else tasks_of(snapshot, key, job_uids)
    context = _JobContext.of(snapshot, key, tasks)
    if context.gang is None and not context.tasks:
        return _not_found("job", snapshot, namespace, name)
    known = tolerations or {}
    fits = _Fits(snapshot, lambda t: known.get(t.uid))
    answers = tuple(_task_why(t, context, binds_by_pod.get(t.uid, ()), fits) for t in context.tasks)
    reasons = _job_reasons(context, answers, fits)
    return Explanation("job", namespace, name, snapshot.version, reasons, answers, context.gang, context.queue)


def _locate(
    snapshot: Snapshot, namespace: str, name: str, uid: str | None, job_uids: Iterable[str] | None
) -> tuple[PodView | None, list[PodView]]:
    """The pod's task and its job's tasks, with as few passes over all tasks as the hints allow."""
    task = snapshot.tasks.get(uid) if uid else None
    if task is None or (task.namespace, task.name) != (namespace, name):  # no hint, or a stale one
        mine = _scan(snapshot, "namespace", namespace)  # a job's tasks share its namespace
        task = next((t for t in mine if t.name == name), None)
        job = task.job if task is not None else None
        return task, _by_name(t for t in mine if job is not None and t.job == job)
    if task.job is None:
        return task, []
    if job_uids is None:
        return task, job_tasks(snapshot, task.job)
    return task, tasks_of(snapshot, task.job, [*job_uids, task.uid])


def _not_found(kind: str, snapshot: Snapshot, namespace: str, name: str) -> Explanation:
    if kind == "pod":
        message = (
            f"no task of pod {namespace}/{name} in the cache at version {snapshot.version}: the pod is not stored, "
            "or its scheduler is not one the cache accepts and it names no node"
        )
    else:
        message = f"neither PodGroup {namespace}/{name} nor a task of it is in the cache at version {snapshot.version}"
    return Explanation(kind, namespace, name, snapshot.version, (Reason(NOT_FOUND, message),), (), None, None)


class _Fits:
    """Node checks of pending tasks, one pass over the nodes per distinct request and tolerations:
    the tasks of one template share it."""

    def __init__(self, snapshot: Snapshot, tolerations: Callable[[PodView], Sequence[Toleration] | None]) -> None:
        self.snapshot = snapshot
        self.tolerations = tolerations
        self._done: dict[tuple[Any, ...], NodeFit] = {}
        self._somewhere: dict[tuple[Any, ...], bool] = {}

    def of(self, task: PodView) -> NodeFit:
        key = self._key(task)
        if key not in self._done:
            self._done[key] = node_fit(self.snapshot, task.resreq, key[1])
        return self._done[key]

    def fits_somewhere(self, task: PodView) -> bool:
        """Whether some node takes the task: stops at the first that does, unless the whole pass
        is done already."""
        key = self._key(task)
        done = self._done.get(key)
        if done is not None:
            return done.fit > 0
        if key not in self._somewhere:
            self._somewhere[key] = any_fit(self.snapshot, task.resreq, key[1])
        return self._somewhere[key]

    def _key(self, task: PodView) -> tuple[tuple[tuple[str, int], ...], tuple[Toleration, ...]]:
        known = self.tolerations(task)
        return tuple(sorted(task.resreq.items())), () if known is None else tuple(known)


@dataclass(frozen=True)
class _JobContext:
    """What the snapshot says about a task's job: its tasks, its gang (when its PodGroup is
    stored) and its queue; computed once for all the tasks of a job."""

    key: str | None
    tasks: tuple[PodView, ...]
    gang: Gang | None
    queue: Queue | None

    @classmethod
    def of(cls, snapshot: Snapshot, key: str | None, job_tasks: Sequence[PodView]) -> _JobContext:
        if key is None:
            return cls(None, (), None, None)
        tasks = tuple(job_tasks)
        pg = snapshot.podgroups.get(key)
        if pg is None:
            return cls(key, tasks, None, None)
        queue_name = snapshot.job_queue(pg)
        stored = snapshot.queues.get(queue_name)
        queue = Queue(queue_name, stored is not None, stored.state if stored is not None else "")
        return cls(key, tasks, gang_of(key, pg.min_member, pg.phase, tasks), queue)

    def gang_blocked(self, fits: _Fits) -> bool:
        """The gang is not ready and cannot become ready from what is pending: even if every
        pending task some node could take were bound, minMember would not be reached."""
        gang = self.gang
        if gang is None or gang.satisfied:
            return False
        could = gang.ready
        for t in self.tasks:
            if could >= gang.min_member:
                return False
            if t.status == TaskStatus.PENDING and fits.fits_somewhere(t):
                could += 1
        return could < gang.min_member


def _task_why(task: PodView, context: _JobContext, binds: Sequence[BindAttempt], fits: _Fits) -> TaskWhy:
    binds = tuple(sorted(binds, key=lambda b: b.offset))
    nodes = None
    if task.status == TaskStatus.PENDING:
        nodes = fits.of(task)
        reasons = _pending_reasons(task, context, nodes, fits)
    else:
        reasons = (_placed_reason(task, binds),)
    known = fits.tolerations(task)
    return TaskWhy(
        task.uid,
        task.namespace,
        task.name,
        str(task.status),
        task.node,
        task.job,
        reasons,
        nodes,
        binds,
        None if known is None else tuple(known),
    )


def _pending_reasons(task: PodView, context: _JobContext, nodes: NodeFit, fits: _Fits) -> tuple[Reason, ...]:
    """Every reason that holds for a Pending task, the one a user must act on first first."""
    reasons = _job_blockers(task.job, context)
    if nodes.fit == 0:
        reasons.append(Reason(UNSCHEDULABLE, nodes.message))
    if context.gang is not None and context.gang_blocked(fits):
        reasons.append(Reason(GANG_UNSCHEDULABLE, context.gang.message))
    if not reasons:
        reasons.append(Reason(PENDING, _waiting(f"{nodes.fit}/{nodes.total} nodes fit the task", "it", context.gang)))
    return tuple(reasons)


def _waiting(what: str, them: str, gang: Gang | None) -> str:
    """A Pending answer: nothing stands in the way but the scheduler (and the rest of the gang)."""
    message = f"{what}; no scheduler replica has bound {them} yet"
    if gang is not None and not gang.satisfied:
        message += (
            f"; its gang needs {gang.min_member - gang.ready} more bound task(s) to reach minMember {gang.min_member}"
        )
    return message


def _job_blockers(job: str | None, context: _JobContext) -> list[Reason]:
    """What keeps every task of the job from being bound, whatever the nodes have room for."""
    if job is None:
        return [
            Reason(
                NOT_IN_JOB,
                "the pod has no scheduling.k8s.io/group-name annotation: the cache admits a BIND only for a task "
                "of a job",
            )
        ]
    if context.gang is None:
        return [Reason(POD_GROUP_NOT_FOUND, f"PodGroup {job} is not in the cache")]
    queue = context.queue
    assert queue is not None  # a stored PodGroup always names a queue (its own or the default)
    if not queue.stored:
        return [Reason(QUEUE_NOT_FOUND, f"queue {queue.name} of job {job} is not in the cache")]
    if queue.state in _CLOSED:
        return [Reason(QUEUE_CLOSED, f"queue {queue.name} is {queue.state}: Volcano allocates only from an Open queue")]
    if queue.state != OPEN:
        state = queue.state or "no state"
        return [Reason(QUEUE_NOT_OPEN, f"queue {queue.name} has {state}: Volcano allocates only from an Open queue")]
    return []


def _placed_reason(task: PodView, binds: Sequence[BindAttempt]) -> Reason:
    where = f" on node {task.node}" if task.node else ""
    if task.status == TaskStatus.BINDING:
        admitted = [b for b in binds if b.verdict == "admitted" and b.node == task.node]
        by = f" at offset {admitted[-1].offset}" if admitted else ""
        return Reason(
            str(task.status), f"a BIND to node {task.node} was admitted{by}; the binder has not bound the pod yet"
        )
    words = {
        TaskStatus.BOUND: f"the pod is bound{where}",
        TaskStatus.RUNNING: f"the pod is running{where}",
        TaskStatus.RELEASING: f"the pod is releasing its resources{where} (evicted or being deleted)",
        TaskStatus.SUCCEEDED: f"the pod has succeeded{where}",
        TaskStatus.FAILED: f"the pod has failed{where}",
    }
    return Reason(str(task.status), words.get(task.status, f"the pod's phase is not one the cache knows{where}"))


def _job_reasons(context: _JobContext, answers: Sequence[TaskWhy], fits: _Fits) -> tuple[Reason, ...]:
    reasons = _job_blockers(context.key, context)
    pending = [a for a in answers if a.status == TaskStatus.PENDING]
    stuck = [a for a in pending if a.nodes is not None and a.nodes.fit == 0]
    if stuck and stuck[0].nodes is not None:
        message = f"{len(stuck)}/{len(pending)} pending task(s) fit no node; {stuck[0].name}: {stuck[0].nodes.message}"
        reasons.append(Reason(UNSCHEDULABLE, message))
    gang = context.gang
    if gang is not None and not answers:
        reasons.append(Reason(NO_TASKS, f"the PodGroup has no pods in the cache (minMember {gang.min_member})"))
    elif gang is not None and context.gang_blocked(fits):
        reasons.append(Reason(GANG_UNSCHEDULABLE, gang.message))
    if not reasons and pending:
        reasons.append(Reason(PENDING, _waiting(f"{len(pending)} pending task(s) fit a node", "them", gang)))
    if not reasons:
        reasons.append(Reason(SCHEDULED, gang.message if gang is not None else "every task is placed"))
    return tuple(reasons)
