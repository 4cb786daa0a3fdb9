"""The fold: Volcano's SchedulerCache as a pure function of the cache log.

``CacheState.apply`` takes one record and changes the state by it alone, in time that does not
depend on the cluster's size; ``snapshot()`` freezes the state in O(1). Nothing here reads a
clock, does I/O or depends on hash order (cache-semantics.md is the contract).

A task's status (``task.TaskStatus``) moves as the state machine drawn on the ``Cache``
interface (``strata.scheduler.interface``) says: a pod's watch event derives it (Pending, Bound,
Running, ...); an admitted BIND lays Binding over it and an applied EVICT Releasing, until
BIND_FAILED or EVICT_FAILED reverts that very overlay or the pod's next event derives the task
again. A Binding, Bound or Running task ignores an update that only lacks the node name (Volcano
PR #1857).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from strata.errors import GapError
from strata.projector.fold import kinds
from strata.projector.fold.cowmap import CowMap
from strata.projector.fold.kinds import BadObject, PodView, node_allocatable
from strata.projector.fold.kinds import FoldConfig as FoldConfig  # re-exported: the fold's settings
from strata.projector.fold.layered import Layered
from strata.projector.fold.snapshot import Fragments, Snapshot
from strata.projector.fold.statedigest import StateDigest
from strata.projector.fold.task import ALLOCATED, OFF_NODE, TaskStatus
from strata.schemas import (
    BadRecord,
    Bind,
    BindFailed,
    BindGroup,
    BindSucceeded,
    Evict,
    EvictFailed,
    EvictSucceeded,
    LogRecord,
    Synced,
    WatchEvent,
    objectjson,
)

BINDING = TaskStatus.BINDING
RELEASING = TaskStatus.RELEASING
PENDING = TaskStatus.PENDING
_ALWAYS_FIT = ("cpu", "memory")  # checked even when a task requests none (section 6)


def _fit_order(resreq: dict[str, int]) -> list[str]:
    """cpu, memory, then the task's other resources by name."""
    return [*_ALWAYS_FIT, *sorted(k for k in resreq if k not in _ALWAYS_FIT)]


class Outcome(NamedTuple):
    result: str  # applied | ignored | rejected | bad
    reason: str = ""


APPLIED = Outcome("applied")
IGNORED = Outcome("ignored")


_LAYERED = ("pods", "pod_uids")  # the plain dicts as large as the pods, written by pod records


class CacheState:
    """The mutable working state of the fold. Snapshots of it are immutable."""

    def __init__(self, config: FoldConfig | None = None) -> None:
        self.config = config or FoldConfig()
        self._scheduler_names = frozenset(self.config.scheduler_names)
        self.version = 0
        # Plain dicts where no snapshot looks: only what a Snapshot holds pays for copy-on-write.
        # the latest stored pod, derived; ``Layered`` once the state has been forked (``fork``)
        self.pods: dict[tuple[str, str], PodView] | Layered[tuple[str, str], PodView] = {}
        self.pod_uids: dict[str, tuple[str, str]] | Layered[str, tuple[str, str]] = {}
        # uid -> (Binding | Releasing, offset of the BIND or EVICT that laid it)
        self.overlays: dict[str, tuple[str, int]] = {}
        self.tasks: CowMap[str, PodView] = CowMap()  # the effective task of each accepted pod
        self.node_used: CowMap[str, dict[str, int]] = CowMap()
        self.nodes: CowMap[str, kinds.NodeView] = CowMap()
        self.node_seq: CowMap[str, int] = CowMap()
        self.next_node_seq = 0
        self.csinodes: CowMap[str, kinds.CSINodeView] = CowMap()
        self.podgroups: CowMap[str, kinds.PodGroupView] = CowMap()
        self.queues: CowMap[str, kinds.QueueView] = CowMap()
        self.priority_classes: CowMap[str, kinds.PriorityClassView] = CowMap()
        self.default_priority = 0
        self.hypernodes: CowMap[str, kinds.HyperNodeView] = CowMap()
        self.synced: set[str] = set()  # kinds a watch adapter has listed in full; not in the snapshot
        self.last_object: Any = None  # the parsed object of the last watch event ``apply`` saw
        self.hashes = StateDigest()  # the stored objects' hashes, for ``state_digest``
        self.rendered: Fragments | None = None  # an earlier snapshot's fragments (a checkpoint's), to render from

    # ------------------------------------------------------------------------------ records
    def apply_at(self, offset: int, record: LogRecord) -> Outcome:
        """Apply the record read at ``offset`` of the cache log: it must be the next one (the
        version is the count of records applied, so a snapshot's version is its offset + 1)."""
        if offset != self.version:  # the check inline: a call per record less
            self.expect_offset(offset)
        return self.apply(record)

    def bind_at(self, offset: int, pod: str, node: str) -> Outcome:
        """``apply_at`` of a BIND given its pod and node: all the fold reads of one."""
        if offset != self.version:
            self.expect_offset(offset)
        return self.bind(pod, node)

    def succeeded_at(self, offset: int, _pod: str) -> Outcome:
        """``apply_at`` of a BIND_SUCCEEDED given its pod: a version, no change."""
        if offset != self.version:
            self.expect_offset(offset)
        return self.informational()

    def apply_object_at(self, offset: int, op: str, raw: bytes) -> Outcome:
        """``apply_at`` of a WatchEvent given its op and its object's bytes: all the fold reads of
        one, for a reader that does not build the record."""
        if offset != self.version:
            self.expect_offset(offset)
        return self.apply_object(op, raw)

    def apply_object(self, op: str, raw: bytes) -> Outcome:
        """A WatchEvent's op and the JSON bytes of its object."""
        try:
            obj = objectjson.loads(raw)
        except ValueError as exc:
            self.version += 1
            self.last_object = None
            return Outcome("bad", f"object is not JSON: {exc}")
        self.last_object = obj  # for observers of the fold (the audit index): parsed once
        return self.apply_watch(op, obj)

    def expect_offset(self, offset: int) -> None:
        """Raise ``GapError`` unless ``offset`` is the one this state applies next."""
        if offset != self.version:
            raise GapError(
                f"the record at offset {offset} follows {self.version} records; the cache log must have no gaps "
                "(a transactional producer or compaction leaves some) so that a snapshot's version is its offset + 1"
            )

    def apply(self, record: LogRecord) -> Outcome:
        """Apply one record of the cache log (a trace's next line; the log's through ``apply_at``)."""
        if isinstance(record, WatchEvent):
            return self.apply_object(record.op, record.object)
        if isinstance(record, Bind):
            return self.bind(record.pod, record.node)
        if isinstance(record, (BindSucceeded, EvictSucceeded)):  # as common as BIND: tested early
            return self.informational()
        if isinstance(record, BindGroup):
            return self.bind_group([(b.pod, b.node) for b in record.binds])
        if isinstance(record, BindFailed):
            return self.bind_failed(record.pod, record.bind_offset)
        if isinstance(record, Evict):
            return self.evict(record.pod)
        if isinstance(record, EvictFailed):
            return self.evict_failed(record.pod, record.evict_offset)
        if isinstance(record, Synced):
            return self.mark_synced(record.kind)
        if isinstance(record, BadRecord):
            return self.apply_bad(record.error)
        return self.apply_bad(f"unknown record {type(record).__name__}")

    # The scheduler records, one method each (AddBindTask's BIND, Evict's EVICT, their failures).
    def bind(self, pod: str, node: str) -> Outcome:
        self.version += 1
        return self._bind(pod, node)

    def bind_group(self, binds: Sequence[tuple[str, str]]) -> Outcome:
        """BIND_GROUP: every (pod, node) checked as a BIND against what the earlier ones left;
        all admitted, or the first refusal rejects the record and nothing changes."""
        self.version += 1
        taken: dict[str, dict[str, int]] = {}  # node -> what the group's earlier binds take of it
        placed: set[str] = set()  # pods the group has bound so far: their task would be Binding
        for i, (pod, node) in enumerate(binds):
            refusal = self._bind_refusal(pod, node, taken.get(node), pod in placed)
            if refusal is not None:
                return Outcome("rejected", f"{refusal} (bind {i + 1} of {len(binds)}, pod {pod})")
            placed.add(pod)
            took = taken.setdefault(node, {})
            for k, v in self.tasks[pod].resreq.items():
                took[k] = took.get(k, 0) + v
        for pod, node in binds:
            self._overlay_binding(pod, node)
        return APPLIED

    def bind_failed(self, pod: str, bind_offset: int | None = None) -> Outcome:
        self.version += 1
        return self._revert(pod, BINDING, bind_offset)

    def evict(self, pod: str) -> Outcome:
        self.version += 1
        return self._evict(pod)

    def evict_failed(self, pod: str, evict_offset: int | None = None) -> Outcome:
        self.version += 1
        return self._revert(pod, RELEASING, evict_offset)

    def mark_synced(self, kind: str) -> Outcome:
        """SYNCED: a version, no change to the snapshot; a replica's wait_for_cache_sync reads it."""
        self.synced.add(kind)
        return self.informational()

    def informational(self) -> Outcome:
        """SYNCED, BIND_SUCCEEDED, EVICT_SUCCEEDED: a version, no change."""
        self.version += 1
        return IGNORED

    def apply_bad(self, error: str) -> Outcome:
        """A record that is not one: it takes a version and nothing else."""
        self.version += 1
        return Outcome("bad", error)

    def apply_watch(self, op: str, obj: Any, kind: tuple[Any, Any] | None = None) -> Outcome:
        """Apply a watch event whose object is parsed JSON (``schemas.objectjson``).

        ``kind`` is the object's (apiVersion, kind) when the caller already looked it up.
        """
        self.version += 1
        if type(obj) is not dict:
            return Outcome("bad", "object is not a JSON object")
        if kind is None:
            kind = (obj.get("apiVersion"), obj.get("kind"))
        if not kinds.known(kind):
            return IGNORED
        try:
            if op == "DELETED":
                return self._delete(kind, obj)
            return self._upsert(kind, obj)
        except BadObject as exc:
            return Outcome("bad", str(exc))

    def _upsert(self, kind: tuple[str, str], obj: dict[str, Any]) -> Outcome:
        if kind == kinds.POD:
            return self._upsert_pod(kinds.pod_view(obj, self._scheduler_names))
        if kind == kinds.NODE:
            node = kinds.node_view(obj)
            if node.name not in self.nodes:
                self.node_seq[node.name] = self.next_node_seq
                self.next_node_seq += 1
            self.nodes[node.name] = node
        elif kind == kinds.PODGROUP:
            podgroup = kinds.podgroup_view(obj)
            key = f"{podgroup.namespace}/{podgroup.name}"
            stored_podgroup = self.podgroups.get(key)
            if stored_podgroup is not None and stored_podgroup.resource_version == podgroup.resource_version:
                return Outcome("ignored", "resourceVersion unchanged")
            self.podgroups[key] = podgroup
        elif kind == kinds.QUEUE:
            queue = kinds.queue_view(obj)
            stored_queue = self.queues.get(queue.name)
            if stored_queue is not None and stored_queue.resource_version == queue.resource_version:
                return Outcome("ignored", "resourceVersion unchanged")
            self.queues[queue.name] = queue
        elif kind == kinds.PRIORITY_CLASS:
            priority_class = kinds.priority_class_view(obj)
            self._delete_priority_class(priority_class.name)
            self.priority_classes[priority_class.name] = priority_class
            if priority_class.global_default:
                self.default_priority = priority_class.value
        elif kind == kinds.CSINODE:
            csinode = kinds.csinode_view(obj)
            self.csinodes[csinode.name] = csinode
        else:
            hypernode = kinds.hypernode_view(obj)
            self.hypernodes[hypernode.name] = hypernode
        return APPLIED

    def _delete(self, kind: tuple[str, str], obj: dict[str, Any]) -> Outcome:
        meta = obj.get("metadata")
        if type(meta) is not dict:
            return Outcome("bad", "metadata.name is missing")
        name = meta.get("name")
        if type(name) is not str:
            return Outcome("bad", "metadata.name is missing")
        if kind in kinds.NAMESPACED:
            namespace = meta.get("namespace")
            if type(namespace) is not str:
                return Outcome("bad", "metadata.namespace is missing")
            if kind == kinds.POD:
                if meta.get("uid") is None:
                    return Outcome("bad", "metadata.uid is missing")
                return self._delete_pod((namespace, name))
            return APPLIED if self.podgroups.pop(f"{namespace}/{name}") is not None else IGNORED
        if kind == kinds.NODE:
            if self.nodes.pop(name) is None:
                return IGNORED
            self.node_seq.pop(name)
        elif kind == kinds.QUEUE:
            return APPLIED if self.queues.pop(name) is not None else IGNORED
        elif kind == kinds.PRIORITY_CLASS:
            return APPLIED if self._delete_priority_class(name) else IGNORED
        elif kind == kinds.CSINODE:
            return APPLIED if self.csinodes.pop(name) is not None else IGNORED
        else:
            return APPLIED if self.hypernodes.pop(name) is not None else IGNORED
        return APPLIED

    def _delete_priority_class(self, name: str) -> bool:
        stored = self.priority_classes.pop(name)
        if stored is not None and stored.global_default:
            self.default_priority = 0
        return stored is not None

    # ---------------------------------------------------------------------------------- pods
    def _upsert_pod(self, pod: PodView) -> Outcome:
        key = (pod.namespace, pod.name)
        holder = self.pod_uids.get(pod.uid)
        if holder is not None and holder != key:
            return Outcome("bad", f"uid {pod.uid} belongs to pod {holder[0]}/{holder[1]}")
        stored = self.pods.get(key)
        if stored is not None and stored.uid != pod.uid:
            self._drop_task(stored.uid)  # a new pod under an old name: the old uid addresses nothing
            del self.pod_uids[stored.uid]
        self.pods[key] = pod
        if stored is None or stored.uid != pod.uid:
            self.pod_uids[pod.uid] = key
        current = self.tasks.get(pod.uid)
        if not pod.accepted:
            if current is not None:
                self._drop_task(pod.uid)
            return APPLIED
        if current is not None and current.status in ALLOCATED and not pod.node and pod.job == current.job:
            return Outcome("applied", "task kept: an update without the node name (Volcano PR #1857)")
        self._set_task(pod.uid, current, pod)
        self.overlays.pop(pod.uid, None)
        return APPLIED

    def _delete_pod(self, key: tuple[str, str]) -> Outcome:
        stored = self.pods.pop(key, None)
        if stored is None:
            return IGNORED
        del self.pod_uids[stored.uid]
        self._drop_task(stored.uid)
        return APPLIED

    def _drop_task(self, uid: str) -> None:
        task = self.tasks.pop(uid)
        self.overlays.pop(uid, None)
        if task is not None and task.node and task.status not in OFF_NODE:
            self._add_used(task.node, task.resreq, -1)

    def _set_task(self, uid: str, old: PodView | None, new: PodView) -> None:
        counts = new.node and new.status not in OFF_NODE
        if old is not None and old.node and old.status not in OFF_NODE:
            # Binding -> Running on the same node is the common move: its usage does not change.
            if not (counts and old.node == new.node and old.resreq == new.resreq):
                self._add_used(old.node, old.resreq, -1)
                if counts:
                    self._add_used(new.node, new.resreq, 1)
        elif counts:
            self._add_used(new.node, new.resreq, 1)
        self.tasks[uid] = new

    def _add_used(self, node: str, resreq: dict[str, int], sign: int) -> None:
        used = dict(self.node_used.get(node) or {})
        for k, v in resreq.items():
            used[k] = used.get(k, 0) + sign * v
        self.node_used[node] = used

    # ----------------------------------------------------------------------------- scheduler
    def _bind(self, uid: str, node: str) -> Outcome:
        refusal = self._bind_refusal(uid, node)
        if refusal is not None:
            return Outcome("rejected", refusal)
        self._overlay_binding(uid, node)
        return APPLIED

    def _bind_refusal(
        self, uid: str, node: str, taken: dict[str, int] | None = None, binding: bool = False
    ) -> str | None:
        """Why a BIND of ``uid`` to ``node`` is rejected (section 6's checks in order), or None.
        ``taken``: what earlier binds of the same group take of the node; ``binding``: the group
        has bound this pod already."""
        task = self.tasks.get(uid)
        if task is None or task.job is None:
            return "no task of a job has this uid"
        status = BINDING if binding else task.status
        if status != PENDING:
            return f"task is {status}, not Pending"
        stored = self.nodes.get(node)
        if stored is None:
            return f"node {node} is not stored"
        allocatable = node_allocatable(stored, self.csinodes.get(node))
        used = self.node_used.get(node) or {}
        taken = taken or {}
        # In a fixed order, so that the reason names the same resource in every replica (a set's
        # order follows the process's string hashing).
        for k in _fit_order(task.resreq):
            if task.resreq.get(k, 0) > allocatable.get(k, 0) - used.get(k, 0) - taken.get(k, 0):
                return f"{k} does not fit on node {node}"
        return None

    def _overlay_binding(self, uid: str, node: str) -> None:
        task = self.tasks[uid]
        self._set_task(uid, task, kinds.overlaid(task, BINDING, node))
        self.overlays[uid] = (BINDING, self.version - 1)

    def _evict(self, uid: str) -> Outcome:
        task = self.tasks.get(uid)
        if task is None:
            return Outcome("rejected", "no task has this uid")
        if task.job is None or task.job not in self.podgroups:
            return Outcome("rejected", "the task's PodGroup is not stored")
        if not task.node:
            return Outcome("rejected", "the task is on no node")
        self._set_task(uid, task, kinds.overlaid(task, RELEASING, task.node))
        self.overlays[uid] = (RELEASING, self.version - 1)
        return APPLIED

    def _revert(self, uid: str, overlay: str, origin: int | None) -> Outcome:
        laid = self.overlays.get(uid)
        if laid is None or laid[0] != overlay:
            return Outcome("ignored", f"task is not under a {overlay} overlay")
        # A failure that names its BIND/EVICT reverts only the overlay that record laid: a binder
        # that writes its outcome again after a crash, or late, cannot undo a newer bind.
        if origin is not None and laid[1] != origin:
            return Outcome("ignored", f"the {overlay} overlay was laid at offset {laid[1]}, not {origin}")
        pod = self.pods[self.pod_uids[uid]]
        self._set_task(uid, self.tasks.get(uid), pod)
        del self.overlays[uid]
        return APPLIED

    # ----------------------------------------------------------------------------- snapshot
    def state_digest(self) -> str:
        """The digest readers compare to find divergence (``statedigest``): O(changed since the
        last one), where the snapshot's canonical digest renders everything."""
        return self.hashes.hexdigest(self)

    def fork(self) -> CacheState:
        """A state that folds on from this version independently of this one (a reader of past
        versions keeps such anchors): the maps shared shard by shard, the pods' dicts layered
        over a shared base (both states write their own layer from now on), the other plain
        dicts copied. Generic over the attributes, so that one added to the state is carried over."""
        twin = CacheState.__new__(CacheState)
        for name, value in list(vars(self).items()):
            if isinstance(value, CowMap):
                value = value.fork()
            elif name in _LAYERED:
                kept, value = Layered.fork_of(value)
                setattr(self, name, kept)
            elif isinstance(value, (dict, set)):
                value = value.copy()
            elif isinstance(value, StateDigest):
                value = StateDigest()  # hashed anew if the fork ever reports one
            elif name == "rendered":
                value = None  # an old snapshot's fragments would pin its shards
            setattr(twin, name, value)
        return twin

    def compact(self) -> None:
        """Merge a fork's layered dicts into new bases where their writes have grown large: for
        a state kept to be forked many times, so that its forks do not each pay for it."""
        for name in _LAYERED:
            value = getattr(self, name)
            if isinstance(value, Layered):
                value.compact()

    def snapshot(self, base: Fragments | None = None) -> Snapshot:
        """The state as of now, immutable, in O(1); rendered from ``base`` (an earlier snapshot's
        fragments, a previous checkpoint's) where nothing changed, else from ``rendered``."""
        return Snapshot(
            version=self.version,
            config=self.config,
            tasks=self.tasks.freeze(),
            node_used=self.node_used.freeze(),
            nodes=self.nodes.freeze(),
            node_seq=self.node_seq.freeze(),
            csinodes=self.csinodes.freeze(),
            podgroups=self.podgroups.freeze(),
            queues=self.queues.freeze(),
            priority_classes=self.priority_classes.freeze(),
            default_priority=self.default_priority,
            hypernodes=self.hypernodes.freeze(),
            base=self.rendered if base is None else base,
        )
