"""The seven kinds the cache reads, checked and reduced to what the fold needs.

Each ``*_view`` function takes a Kubernetes object (as parsed JSON) of an ADDED or MODIFIED
record, checks every field the spec types (cache-semantics.md, section 1), parses every quantity
the spec names, and returns an immutable view; a record that breaks a rule raises ``BadObject``.
JSON null is absent everywhere. Views keep only derived values, never the raw object.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from strata.projector.fold.resources import BadQuantity, Resources, exponent_of, parse_resources
from strata.projector.fold.task import TaskStatus

POD = ("v1", "Pod")
NODE = ("v1", "Node")
PODGROUP = ("scheduling.volcano.sh/v1beta1", "PodGroup")
QUEUE = ("scheduling.volcano.sh/v1beta1", "Queue")
PRIORITY_CLASS = ("scheduling.k8s.io/v1", "PriorityClass")
CSINODE = ("storage.k8s.io/v1", "CSINode")
HYPERNODE = ("topology.volcano.sh/v1alpha1", "HyperNode")
ORDER = (POD, NODE, PODGROUP, QUEUE, PRIORITY_CLASS, CSINODE, HYPERNODE)  # as ingest lists them
KINDS = frozenset(ORDER)
KIND_NAMES = tuple(kind for _, kind in ORDER)
NAMESPACED = frozenset({POD, PODGROUP})

GROUP_NAME = "scheduling.k8s.io/group-name"
TASK_PRIORITY = "volcano.sh/task-priority"
PREEMPTABLE = "volcano.sh/preemptable"
TASK_SPEC = "volcano.sh/task-spec"
REVOCABLE_ZONE = "volcano.sh/revocable-zone"
OVERSUB_CPU = "volcano.sh/oversubscription-cpu"
OVERSUB_MEMORY = "volcano.sh/oversubscription-memory"
INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
CSI_UNLIMITED = 2147483647
_GO_BOOL = {
    "1": True,
    "t": True,
    "T": True,
    "TRUE": True,
    "true": True,
    "True": True,
    "0": False,
    "f": False,
    "F": False,
    "FALSE": False,
    "false": False,
    "False": False,
}
_GO_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_OVERSUB = re.compile(r"(?P<sign>[+-]?)(?P<int>[0-9]+)?(?:\.(?P<frac>[0-9]*))?(?:[eE](?P<exp>[+-]?[0-9]+))?", re.ASCII)
_PHASES = {"Running", "Pending", "Succeeded", "Failed"}
_T = TypeVar("_T")


def known(kind: tuple[Any, Any]) -> bool:
    """Whether (apiVersion, kind) is one of KINDS; JSON objects or arrays there are not (a plain
    set lookup raised TypeError on such unhashable values, out of the fold)."""
    try:
        return kind in KINDS
    except TypeError:
        return False


class BadObject(ValueError):
    """An ADDED or MODIFIED object that breaks a rule of the spec: the record is bad."""


# ------------------------------------------------------------------------------------- checks
def _obj(parent: dict[str, Any], key: str, what: str) -> dict[str, Any] | None:
    value = parent.get(key)
    if value is None or type(value) is dict:
        return value
    raise BadObject(f"{what}.{key} is not an object")


def _arr(parent: dict[str, Any], key: str, what: str) -> list[Any]:
    value = parent.get(key)
    if value is None:
        return []
    if type(value) is list:
        return value
    raise BadObject(f"{what}.{key} is not an array")


def _typed(parent: dict[str, Any], key: str, what: str, kind: type[_T], noun: str) -> _T | None:
    value: _T | None = parent.get(key)  # parsed JSON: the test below makes the annotation true
    if value is None or type(value) is kind:  # `type is`, not isinstance: a bool is no integer here
        return value
    raise BadObject(f"{what}.{key} is not {noun}")


def _str(parent: dict[str, Any], key: str, what: str) -> str | None:
    return _typed(parent, key, what, str, "a string")


def _int(parent: dict[str, Any], key: str, what: str) -> int | None:
    return _typed(parent, key, what, int, "an integer")


def _bool(parent: dict[str, Any], key: str, what: str) -> bool | None:
    return _typed(parent, key, what, bool, "a boolean")


def _string_map(parent: dict[str, Any], key: str, what: str) -> dict[str, str]:
    """Labels or annotations: an object of strings; a null value is an absent entry."""
    value = parent.get(key)
    if not value:
        if value is None or type(value) is dict:
            return {}
        raise BadObject(f"{what}.{key} is not an object")
    if type(value) is not dict:
        raise BadObject(f"{what}.{key} is not an object")
    for v in value.values():
        if type(v) is not str:
            break
    else:
        return value
    for k, v in value.items():
        if v is not None and type(v) is not str:
            raise BadObject(f"{what}.{key}[{k!r}] is not a string")
    return {k: v for k, v in value.items() if v is not None}


def _resources(parent: dict[str, Any] | None, key: str, what: str) -> Resources:
    if parent is None:
        return {}
    value = parent.get(key)
    if value is None:
        return {}
    if type(value) is not dict:
        raise BadObject(f"{what}.{key} is not an object")
    try:
        return parse_resources(value)
    except BadQuantity as exc:
        raise BadObject(f"{what}.{key}: {exc}") from None


class Meta(NamedTuple):
    name: str
    namespace: str | None
    uid: str | None
    resource_version: str | None
    labels: dict[str, str]
    annotations: dict[str, str]
    deleting: bool  # deletionTimestamp is set (present and non-empty)


def metadata(obj: dict[str, Any]) -> Meta:
    meta = obj.get("metadata")
    if type(meta) is not dict:
        raise BadObject("metadata is not an object")
    get = meta.get
    name = get("name")
    ns = get("namespace")
    uid = get("uid")
    rv = get("resourceVersion")
    deletion = get("deletionTimestamp")
    if type(name) is not str or not (
        (ns is None or type(ns) is str)
        and (uid is None or type(uid) is str)
        and (rv is None or type(rv) is str)
        and (deletion is None or type(deletion) is str)
    ):  # one test on the common path; the slow path says which field
        if name is None:
            raise BadObject("metadata.name is missing")
        for field in ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp"):
            _str(meta, field, "metadata")
    labels = {} if get("labels") is None else _string_map(meta, "labels", "metadata")
    annotations = {} if get("annotations") is None else _string_map(meta, "annotations", "metadata")
    # positional: measurably faster than keywords
    return Meta(name, ns, uid, rv, labels, annotations, bool(deletion))


def go_bool(text: str) -> bool | None:
    return _GO_BOOL.get(text)


def go_int32(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 32), or None where it fails."""
    if not _GO_INT.fullmatch(text):
        return None
    # Leading zeros are fine in Go ("0000...05" is 5); exponent_of caps a value of more than 18
    # digits instead of converting it (int() refuses 4300), and a capped one is no int32 either.
    value = exponent_of(text)
    return value if INT32[0] <= value <= INT32[1] else None


# ---------------------------------------------------------------------------------------- pod
class PodView(NamedTuple):
    namespace: str
    name: str
    uid: str
    accepted: bool
    job: str | None
    status: TaskStatus
    node: str
    priority: int
    preemptable: bool
    role: str
    resreq: Resources
    best_effort: bool


_PENDING = TaskStatus.PENDING  # an enum member's lookup through its class costs as much as a call
_BOUND = TaskStatus.BOUND
_RUNNING = TaskStatus.RUNNING
_RELEASING = TaskStatus.RELEASING
_SUCCEEDED = TaskStatus.SUCCEEDED
_FAILED = TaskStatus.FAILED
_UNKNOWN = TaskStatus.UNKNOWN
_NO_STRINGS: dict[str, str] = {}  # absent labels or annotations; only read
_new_tuple = tuple.__new__  # a NamedTuple's own __new__ is a Python function around this call


def _pod_meta(obj: dict[str, Any]) -> tuple[str, str, str, dict[str, str], dict[str, str], bool]:
    """(name, namespace, uid, labels, annotations, deleting) of a pod; ``metadata``'s checks.

    The common case, every field of its type and every label and annotation a string, is
    tested inline; anything else goes through ``metadata``, which says what is wrong.
    """
    meta = obj.get("metadata")
    if type(meta) is dict:
        get = meta.get
        name = get("name")
        ns = get("namespace")
        uid = get("uid")
        rv = get("resourceVersion")
        deletion = get("deletionTimestamp")
        labels = get("labels")
        annotations = get("annotations")
        if (
            type(name) is str
            and type(ns) is str
            and type(uid) is str
            and (rv is None or type(rv) is str)
            and (deletion is None or type(deletion) is str)
        ):
            if labels is None:
                labels = _NO_STRINGS
            elif type(labels) is dict:
                for v in labels.values():
                    if type(v) is not str:
                        labels = None
                        break
            else:
                labels = None
            if annotations is None:
                annotations = _NO_STRINGS
            elif type(annotations) is dict:
                for v in annotations.values():
                    if type(v) is not str:
                        annotations = None
                        break
            else:
                annotations = None
            if labels is not None and annotations is not None:
                return name, ns, uid, labels, annotations, bool(deletion)
    m = metadata(obj)
    if m.namespace is None:
        raise BadObject("metadata.namespace is missing")
    if m.uid is None:
        raise BadObject("metadata.uid is missing")
    return m.name, m.namespace, m.uid, m.labels, m.annotations, m.deleting


def pod_view(obj: dict[str, Any], scheduler_names: frozenset[str]) -> PodView:
    name, namespace, uid, labels, annotations, deleting = _pod_meta(obj)
    spec = obj.get("spec")
    status = obj.get("status")
    if spec is None:
        spec = {}
    elif type(spec) is not dict:
        raise BadObject("pod.spec is not an object")
    if status is None:
        status = {}
    elif type(status) is not dict:
        raise BadObject("pod.status is not an object")
    scheduler = spec.get("schedulerName")
    node = spec.get("nodeName")
    phase = status.get("phase")
    priority = spec.get("priority")
    if not (
        (scheduler is None or type(scheduler) is str)
        and (node is None or type(node) is str)
        and (phase is None or type(phase) is str)
        and (priority is None or type(priority) is int)
    ):  # the slow path names the field
        _str(spec, "schedulerName", "spec")
        _str(spec, "nodeName", "spec")
        _str(status, "phase", "status")
        _int(spec, "priority", "spec")
    if node is None:
        node = ""
    if priority is not None and not INT32[0] <= priority <= INT32[1]:
        raise BadObject("spec.priority is out of int32 range")
    resreq, best_effort = _request_of(spec)

    group = annotations.get(GROUP_NAME)
    task_status: TaskStatus
    if phase == "Running":
        task_status = _RELEASING if deleting else _RUNNING
    elif phase == "Pending":
        task_status = _RELEASING if deleting else (_BOUND if node else _PENDING)
    elif phase == "Succeeded":
        task_status = _SUCCEEDED
    elif phase == "Failed":
        task_status = _FAILED
    else:
        task_status = _UNKNOWN
    if priority is None:
        priority = 1
    if annotations:
        annotated = annotations.get(TASK_PRIORITY)
        if annotated is not None:
            parsed = go_int32(annotated)
            if parsed is not None:
                priority = parsed
    if PREEMPTABLE in annotations:
        preemptable = go_bool(annotations[PREEMPTABLE]) or False
    elif PREEMPTABLE in labels:
        preemptable = go_bool(labels[PREEMPTABLE]) or False
    else:
        preemptable = True
    role = annotations.get(TASK_SPEC) or labels.get(TASK_SPEC) or ""
    return _new_tuple(  # in field order: this runs once per pod event
        PodView,
        (
            namespace,
            name,
            uid,
            (scheduler in scheduler_names) or bool(node),
            f"{namespace}/{group}" if group else None,
            task_status,
            node,
            priority,
            preemptable,
            role,
            resreq,
            best_effort,
        ),
    )


_STATUS = PodView._fields.index("status")
_NODE = PodView._fields.index("node")
if _NODE != _STATUS + 1:  # overlaid() replaces the two as one slice
    raise ImportError("PodView's status and node fields are no longer neighbours")


def overlaid(task: PodView, status: TaskStatus, node: str) -> PodView:
    """``task._replace(status=status, node=node)``: what a BIND or an EVICT lays over a task.

    A NamedTuple's ``_replace`` takes keywords and goes through ``_make``: 1.1 us, 7 % of the
    fold's own time (parsing aside) on a trace where every fourth record is a BIND.
    """
    return _new_tuple(PodView, (*task[:_STATUS], status, node, *task[_NODE + 1 :]))


# request key -> (the pod's resource request, whether it is BestEffort)
_requests: dict[tuple[Any, ...], tuple[Resources, bool]] = {}
_REQUESTS_MAX = 1 << 16


def pod_request(spec: dict[str, Any]) -> Resources:
    """GetPodResourceRequest (cache-semantics.md 3.1), every quantity checked."""
    return _request_of(spec)[0]


def _request_of(spec: dict[str, Any]) -> tuple[Resources, bool]:
    """The pod's request and whether it is BestEffort (no resource but pods requested).

    Pods of one job template share their containers' requests, so results are memoized by what
    they depend on (``_request_key``); a result is shared and must never be mutated.
    """
    key = _request_key(spec)
    if key is not None:
        try:
            # Only keys of string quantities are stored, and no other JSON value equals a
            # string: a hit is a pod whose quantities are those strings.
            hit = _requests.get(key)
        except TypeError:  # an object or array as a quantity: unhashable
            key = hit = None
        if hit is not None:
            return hit
    result = _pod_request(spec)
    found = result, not any(v for k, v in result.items() if k != "pods")
    if key is not None and _string_quantities(key):
        if len(_requests) >= _REQUESTS_MAX:
            _requests.clear()
        _requests[key] = found
    return found


def _request_key(spec: dict[str, Any]) -> tuple[Any, ...] | None:
    """What ``_pod_request(spec)`` depends on, for the plain shape of a spec (containers and init
    containers with requests objects; no pod-level resources or overhead); None for any other."""
    if spec.get("resources") is not None or spec.get("overhead") is not None:
        return None
    containers = spec.get("containers")
    if type(containers) is list and len(containers) == 1 and spec.get("initContainers") is None:
        # The commonest pod, keyed by its requests' items alone: a tuple of (name, quantity)
        # pairs, which no key of the general shape below equals (their parts are tuples).
        c = containers[0]
        if type(c) is dict:
            resources = c.get("resources")
            values = None if resources is None else resources.get("requests") if type(resources) is dict else False
            if values is None:
                return ()
            if type(values) is dict:
                return tuple(values.items())
        return None
    if containers is None:
        containers = ()
    elif type(containers) is not list:
        return None
    requests: list[tuple[tuple[str, Any], ...]] = []
    for c in containers:
        if type(c) is not dict:
            return None
        resources = c.get("resources")
        values = None if resources is None else resources.get("requests") if type(resources) is dict else False
        if values is None:
            requests.append(())
        elif type(values) is dict:
            requests.append(tuple(values.items()))
        else:
            return None
    inits = spec.get("initContainers")
    if inits is None:
        return (tuple(requests),)
    if type(inits) is not list:
        return None
    init_requests = []
    for c in inits:
        if type(c) is not dict:
            return None
        resources = c.get("resources")
        values = None if resources is None else resources.get("requests") if type(resources) is dict else False
        if values is None:
            values = {}
        elif type(values) is not dict:
            return None
        init_requests.append((c.get("restartPolicy") == "Always", tuple(values.items())))
    return tuple(requests), tuple(init_requests)


def _string_quantities(key: tuple[Any, ...]) -> bool:
    """Whether every quantity in a request key (of either shape) is a string."""
    for part in key:
        if type(part) is tuple:
            if len(part) == 2 and type(part[0]) is str:  # (name, quantity)
                if type(part[1]) is not str:
                    return False
            elif not _string_quantities(part):
                return False
        # else: an init container's restartPolicy flag
    return True


def _pod_request(spec: dict[str, Any]) -> Resources:
    result: Resources = {}
    for c in _arr(spec, "containers", "spec"):
        req = _container_request(c, "spec.containers")
        if not result:
            result = dict(req)
        else:
            for k, v in req.items():
                result[k] = result.get(k, 0) + v
    if spec.get("initContainers") is not None:
        _add_init_containers(spec, result)
    result["pods"] = result.get("pods", 0) + 1
    if spec.get("resources") is not None:
        pod_level = _resources(_obj(spec, "resources", "spec"), "requests", "spec.resources")
        for k, v in pod_level.items():
            if k == "cpu" or k == "memory" or k.startswith("hugepages-"):
                result[k] = v
    if spec.get("overhead") is not None:
        for k, v in _resources(spec, "overhead", "spec").items():
            result[k] = result.get(k, 0) + v
    return result


def _add_init_containers(spec: dict[str, Any], result: Resources) -> None:
    restartable: Resources = {}
    init_max: Resources = {}
    for ic in _arr(spec, "initContainers", "spec"):
        req = _container_request(ic, "spec.initContainers")
        if ic.get("restartPolicy") == "Always":  # a sidecar runs beside the main containers
            for k, v in req.items():
                result[k] = result.get(k, 0) + v
                restartable[k] = restartable.get(k, 0) + v
            candidate = restartable
        else:
            candidate = dict(req)
            for k, v in restartable.items():
                candidate[k] = candidate.get(k, 0) + v
        for k, v in candidate.items():
            if k not in init_max or v > init_max[k]:
                init_max[k] = v
    for k, v in init_max.items():
        if k not in result or v > result[k]:
            result[k] = v


def _container_request(container: Any, what: str) -> Resources:
    if type(container) is dict:  # the common case first: resources.requests an object
        resources = container.get("resources")
        if type(resources) is dict:
            requests = resources.get("requests")
            if type(requests) is dict:
                try:
                    return parse_resources(requests)
                except BadQuantity as exc:
                    raise BadObject(f"{what}.resources.requests: {exc}") from None
    if type(container) is not dict:
        raise BadObject(f"{what} holds an element that is not an object")
    return _resources(_obj(container, "resources", what), "requests", f"{what}.resources")


# --------------------------------------------------------------------------------------- node
class Taint(NamedTuple):
    key: str
    value: str
    effect: str


class NodeView(NamedTuple):
    name: str
    allocatable: Resources
    capacity: Resources
    oversub_cpu: int
    oversub_memory: int
    unschedulable: bool
    taints: tuple[Taint, ...]
    labels: dict[str, str]
    revocable_zone: str


def node_view(obj: dict[str, Any]) -> NodeView:
    meta = metadata(obj)
    spec = _obj(obj, "spec", "node") or {}
    status = _obj(obj, "status", "node") or {}
    unschedulable = _bool(spec, "unschedulable", "spec") or False
    taints = []
    for t in _arr(spec, "taints", "spec"):
        if type(t) is not dict:
            raise BadObject("spec.taints holds an element that is not an object")
        taints.append(
            Taint(_str(t, "key", "taint") or "", _str(t, "value", "taint") or "", _str(t, "effect", "taint") or "")
        )
    return NodeView(
        name=meta.name,
        allocatable=_resources(status, "allocatable", "status"),
        capacity=_resources(status, "capacity", "status"),
        oversub_cpu=oversubscription(meta.annotations.get(OVERSUB_CPU)),
        oversub_memory=oversubscription(meta.annotations.get(OVERSUB_MEMORY)),
        unschedulable=unschedulable,
        taints=tuple(taints),
        labels=meta.labels,
        revocable_zone=meta.labels.get(REVOCABLE_ZONE) or "",
    )


def oversubscription(text: str | None) -> int:
    """ceil(v) of an oversubscription annotation, 0 when it does not match or fit an int64."""
    if text is None:
        return 0
    m = _OVERSUB.fullmatch(text)
    if m is None or (m["int"] is None and not m["frac"]):
        return 0
    frac = m["frac"] or ""
    digits = ((m["int"] or "") + frac).lstrip("0")
    if not digits:
        return 0
    exponent = exponent_of(m["exp"] or "0") - len(frac)  # capped: int() fails on 4300+ digits
    if len(digits) - 1 + exponent > 19:
        return 0
    if len(digits) + exponent < -2:
        magnitude = 1  # 0 < v < 1: ceil is 1 (or 0 for a negative v)
        return 0 if m["sign"] == "-" else magnitude
    if exponent >= 0:
        value = int(digits) * 10**exponent  # at most 20 digits here
        value = -value if m["sign"] == "-" else value
    else:
        # The digits can be many ("1" * 5000 + "e-4990") and int() refuses more than 4300 with a
        # ValueError that crashed the fold: split at the decimal point instead. The whole part
        # has at most 20 digits here; ceil adds one for a non-zero fraction.
        cut = len(digits) + exponent
        whole = int(digits[:cut]) if cut > 0 else 0
        fraction = digits[max(cut, 0) :].strip("0") != ""
        # ceil of a negative value truncates toward zero
        value = -whole if m["sign"] == "-" else whole + fraction
    return value if INT64[0] <= value <= INT64[1] else 0


# ----------------------------------------------------------------------------------- podgroup
class PodGroupView(NamedTuple):
    namespace: str
    name: str
    uid: str
    resource_version: str | None
    queue: str | None
    min_member: int
    min_task_member: dict[str, int]
    phase: str
    preemptable: bool
    priority_class: str | None


def podgroup_view(obj: dict[str, Any]) -> PodGroupView:
    meta = metadata(obj)
    if meta.namespace is None:
        raise BadObject("metadata.namespace is missing")
    spec = _obj(obj, "spec", "podgroup") or {}
    status = _obj(obj, "status", "podgroup") or {}
    min_task = _obj(spec, "minTaskMember", "spec") or {}
    min_task_member = {}
    for k, v in min_task.items():
        if v is None:
            continue
        if type(v) is not int:
            raise BadObject("spec.minTaskMember holds a value that is not an integer")
        min_task_member[k] = v
    if PREEMPTABLE in meta.annotations:
        preemptable = go_bool(meta.annotations[PREEMPTABLE]) or False
    else:
        preemptable = go_bool(meta.labels.get(PREEMPTABLE, "")) or False
    return PodGroupView(
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid or "",
        resource_version=meta.resource_version,
        queue=_str(spec, "queue", "spec") or None,
        min_member=_int(spec, "minMember", "spec") or 0,
        min_task_member=min_task_member,
        phase=_str(status, "phase", "status") or "",
        preemptable=preemptable,
        priority_class=_str(spec, "priorityClassName", "spec"),
    )


# -------------------------------------------------------------------------------------- queue
class QueueView(NamedTuple):
    name: str
    resource_version: str | None
    weight: int
    reclaimable: bool
    state: str
    parent: str
    priority: int
    capability: Resources
    deserved: Resources
    guarantee: Resources


def queue_view(obj: dict[str, Any]) -> QueueView:
    meta = metadata(obj)
    spec = _obj(obj, "spec", "queue") or {}
    status = _obj(obj, "status", "queue") or {}
    reclaimable = _bool(spec, "reclaimable", "spec")
    guarantee = _obj(spec, "guarantee", "spec")
    return QueueView(
        name=meta.name,
        resource_version=meta.resource_version,
        weight=_int(spec, "weight", "spec") or 0,
        reclaimable=True if reclaimable is None else reclaimable,
        state=_str(status, "state", "status") or "",
        parent=_str(spec, "parent", "spec") or "",
        priority=_int(spec, "priority", "spec") or 0,
        capability=_resources(spec, "capability", "spec"),
        deserved=_resources(spec, "deserved", "spec"),
        guarantee=_resources(guarantee, "resource", "spec.guarantee"),
    )


# ------------------------------------------------------------------------------ priorityclass
class PriorityClassView(NamedTuple):
    name: str
    value: int
    global_default: bool


def priority_class_view(obj: dict[str, Any]) -> PriorityClassView:
    meta = metadata(obj)
    return PriorityClassView(
        meta.name, _int(obj, "value", "priorityclass") or 0, _bool(obj, "globalDefault", "priorityclass") or False
    )


# ------------------------------------------------------------------------------------ csinode
class CSINodeView(NamedTuple):
    name: str
    drivers: dict[str, bool]  # driver name -> whether allocatable.count is set
    scalars: Resources  # attachable-volumes-csi-<driver> -> count


def csinode_view(obj: dict[str, Any]) -> CSINodeView:
    meta = metadata(obj)
    spec = _obj(obj, "spec", "csinode") or {}
    drivers: dict[str, bool] = {}
    scalars: Resources = {}
    for d in _arr(spec, "drivers", "spec"):
        if type(d) is not dict:
            raise BadObject("spec.drivers holds an element that is not an object")
        name = _str(d, "name", "driver")
        allocatable = d.get("allocatable")
        count = None
        if type(allocatable) is dict:
            count = _int(allocatable, "count", "driver.allocatable")
            if count is not None and count < 0:
                raise BadObject("driver.allocatable.count is negative")
        elif allocatable is not None:
            raise BadObject("driver.allocatable is not an object")
        if name:
            drivers[name] = count is not None
            scalars["attachable-volumes-csi-" + name.replace("/", "-")] = CSI_UNLIMITED if count is None else count
    return CSINodeView(meta.name, drivers, scalars)


# ---------------------------------------------------------------------------------- hypernode
_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
Requirements = tuple[tuple[str, str, tuple[str, ...]], ...]


class Member(NamedTuple):
    type: str  # Node or HyperNode
    exact: str | None
    regex: str | None
    labels: Requirements | None  # a labelMatch as requirements; None when absent or matching nothing


class HyperNodeView(NamedTuple):
    name: str
    tier: int
    tier_name: str
    members: tuple[Member, ...]


def label_requirements(selector: Any) -> Requirements | None:
    """A labelMatch as (key, operator, values) requirements; None when it matches nothing."""
    if type(selector) is not dict:
        return None
    requirements: list[tuple[str, str, tuple[str, ...]]] = []
    labels = selector.get("matchLabels")
    expressions = selector.get("matchExpressions")
    if labels is not None:
        if type(labels) is not dict:
            return None
        for k, v in labels.items():
            if type(v) is not str:
                return None
            requirements.append((k, "In", (v,)))
    if expressions is not None:
        if type(expressions) is not list:
            return None
        for e in expressions:
            if type(e) is not dict:
                return None
            key, op, values = e.get("key"), e.get("operator"), e.get("values")
            # `type(op)` first: an operator that is an object or array is unhashable (TypeError)
            if type(key) is not str or type(op) is not str or op not in _OPERATORS:
                return None
            values = [] if values is None else values
            if type(values) is not list or any(type(v) is not str for v in values):
                return None
            if (op in ("In", "NotIn")) != bool(values):
                return None  # In/NotIn need values; Exists/DoesNotExist take none
            requirements.append((key, op, tuple(values)))
    return tuple(requirements) or None


def hypernode_view(obj: dict[str, Any]) -> HyperNodeView:
    meta = metadata(obj)
    spec = _obj(obj, "spec", "hypernode") or {}
    members = []
    for m in _arr(spec, "members", "spec"):
        if type(m) is not dict:
            raise BadObject("spec.members holds an element that is not an object")
        member_type = m.get("type")
        selector = m.get("selector")
        selector = selector if type(selector) is dict else {}
        exact = selector.get("exactMatch")
        regex = selector.get("regexMatch")
        exact_name = exact.get("name") if type(exact) is dict else None
        pattern = regex.get("pattern") if type(regex) is dict else None
        members.append(
            Member(
                type=member_type if type(member_type) is str else "",
                exact=exact_name if type(exact_name) is str and exact_name else None,
                regex=pattern if type(pattern) is str and pattern else None,
                labels=label_requirements(selector.get("labelMatch")),
            )
        )
    return HyperNodeView(
        meta.name, _int(spec, "tier", "spec") or 0, _str(spec, "tierName", "spec") or "", tuple(members)
    )


# --------------------------------------------------------------------- the fold's settings
@dataclass(frozen=True)
class FoldConfig:
    scheduler_names: tuple[str, ...] = ("volcano",)
    default_queue: str = "default"

    @property
    def identity(self) -> str:
        """What a checkpoint must match to be reused: the fold's result depends on it."""
        return f"schedulerNames={','.join(sorted(set(self.scheduler_names)))};defaultQueue={self.default_queue}"


# ------------------------------------------------------------------------ a node's resources
def node_allocatable(node: NodeView, csi: CSINodeView | None) -> dict[str, int]:
    return _node_resources(node.allocatable, node, csi)


def node_capability(node: NodeView, csi: CSINodeView | None) -> dict[str, int]:
    return _node_resources(node.capacity, node, csi)


def _node_resources(base: dict[str, int], node: NodeView, csi: CSINodeView | None) -> dict[str, int]:
    """The node's resources as the scheduler sees them: shared with the view when nothing adds
    to them (every BIND reads them), so never to be mutated, as no resource map is."""
    if csi is None and not node.oversub_cpu and not node.oversub_memory:
        return base
    out = dict(base)
    if csi is not None:
        out.update(csi.scalars)  # CSI counts replace what the Node's status says
    if node.oversub_cpu:
        out["cpu"] = out.get("cpu", 0) + node.oversub_cpu
    if node.oversub_memory:
        out["memory"] = out.get("memory", 0) + node.oversub_memory
    return out
