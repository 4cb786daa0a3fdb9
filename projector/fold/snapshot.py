"""Snapshot: the cache at one version, immutable, taken in O(1).

It holds frozen views of the fold's maps (shared with the state until the state next writes to
a shard); the canonical JSON of ``spec/snapshot.schema.json`` is rendered from them on demand
and cached, and the digest is the SHA-256 of its canonical bytes.

The canonical bytes are assembled from one fragment per node and per job (their canonical JSON),
which is what costs: 150k tasks take seconds. A snapshot may carry ``Fragments`` rendered for an
earlier snapshot of the same fold (a checkpoint keeps them): then only the nodes and jobs whose
objects differ are rendered again. The maps share every shard the fold has not written to since,
so finding what differs costs what changed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from json.encoder import encode_basestring  # the C function json.dumps(ensure_ascii=False) uses
from typing import Any, TypedDict

from strata.projector.fold import kinds
from strata.projector.fold.cowmap import FrozenMap
from strata.projector.fold.hypernodes import hypernode_entries
from strata.projector.fold.resources import nonzero
from strata.projector.fold.task import ALLOCATED, OFF_NODE, TaskStatus
from strata.schemas.objectjson import SortedJson


@dataclass(frozen=True, eq=False)
class Fragments:
    """The canonical JSON of each node's and each shown job's entry in ``snapshot``."""

    snapshot: Snapshot
    nodes: dict[str, str]
    jobs: dict[str, str]
    hypernodes: dict[str, str]  # "hyperNodes" and "hyperNodesByTier"


class _Rendered(TypedDict, total=False):
    """What a snapshot has rendered so far (each is rendered once, on demand)."""

    json: dict[str, Any]
    fragments: Fragments
    bytes: bytes
    digest: str


@dataclass(frozen=True, eq=False)
class Snapshot:
    version: int
    config: kinds.FoldConfig
    tasks: FrozenMap[str, kinds.PodView]
    node_used: FrozenMap[str, dict[str, int]]
    nodes: FrozenMap[str, kinds.NodeView]
    node_seq: FrozenMap[str, int]
    csinodes: FrozenMap[str, kinds.CSINodeView]
    podgroups: FrozenMap[str, kinds.PodGroupView]
    queues: FrozenMap[str, kinds.QueueView]
    priority_classes: FrozenMap[str, kinds.PriorityClassView]
    default_priority: int
    hypernodes: FrozenMap[str, kinds.HyperNodeView]
    base: Fragments | None = field(default=None, repr=False)  # rendered for an earlier version
    _rendered: _Rendered = field(default_factory=_Rendered, repr=False)

    def node_list(self) -> list[str]:
        return sorted(self.nodes.keys(), key=self.node_seq.__getitem__)

    def job_queue(self, pg: kinds.PodGroupView) -> str:
        return pg.queue or self.config.default_queue

    def job_priority(self, pg: kinds.PodGroupView) -> int:
        if pg.priority_class is not None:
            pc = self.priority_classes.get(pg.priority_class)
            if pc is not None:
                return pc.value
        return self.default_priority

    # -------------------------------------------------------------------------- canonical form
    def to_json(self) -> dict[str, Any]:
        """The canonical snapshot (spec/snapshot.schema.json) as plain JSON values."""
        if "json" not in self._rendered:
            self._rendered["json"] = self._render()
        return self._rendered["json"]

    def canonical_bytes(self) -> bytes:
        """``canonical_bytes(self.to_json())``, assembled from fragments (section 8's bytes)."""
        if "bytes" not in self._rendered:
            self._rendered["bytes"] = "".join(self._pieces()).encode("utf-8")
        return self._rendered["bytes"]

    def digest(self) -> str:
        """The SHA-256 of the canonical bytes, hashed piece by piece: at 150k tasks the bytes are
        60 MB, which a digest alone need not hold."""
        if "digest" not in self._rendered:
            if "bytes" in self._rendered:
                self._rendered["digest"] = hashlib.sha256(self._rendered["bytes"]).hexdigest()
            else:
                sha = hashlib.sha256()
                for piece in self._pieces():
                    sha.update(piece.encode("utf-8"))
                self._rendered["digest"] = sha.hexdigest()
        return self._rendered["digest"]

    def _pieces(self) -> Iterator[str]:
        """The canonical JSON in pieces that join to it (the top level's keys sorted)."""
        fragments = self.fragments()
        parts = {key: _dumps(value) for key, value in self._small_parts().items()}
        parts.update(fragments.hypernodes)
        members = {"nodes": fragments.nodes, "jobs": fragments.jobs}
        yield "{"
        for i, key in enumerate(sorted([*parts, *members])):
            yield f"{',' if i else ''}{encode_basestring(key)}:"
            if key not in members:
                yield parts[key]
                continue
            frags = members[key]  # _object's text, in pieces
            yield "{"
            for j, name in enumerate(sorted(frags)):
                yield f"{',' if j else ''}{encode_basestring(name)}:"
                yield frags[name]
            yield "}"
        yield "}"

    def fragments(self) -> Fragments:
        """Each node's and shown job's canonical JSON; with a ``base``, only what changed is rendered."""
        if "fragments" not in self._rendered:
            self._rendered["fragments"] = self._render_fragments()
        return self._rendered["fragments"]

    def _render_fragments(self) -> Fragments:
        jobs_shown = self._jobs_shown()
        base = self.base
        hypernodes: dict[str, str] | None = None
        nodes: dict[str, str] = {}
        jobs: dict[str, str] = {}
        node_need: set[str] | None = None
        if base is not None and base.snapshot.config == self.config:
            dirty_nodes, dirty_jobs, labels_changed = self._dirty_since(base.snapshot)
            if not labels_changed and not any(_changed(base.snapshot.hypernodes, self.hypernodes)):
                hypernodes = base.hypernodes
            nodes = {name: f for name, f in base.nodes.items() if name in self.nodes and name not in dirty_nodes}
            node_need = {name for name in dirty_nodes if name in self.nodes}
            if self._jobs_render_alike(base.snapshot):  # else every job's priority may differ
                jobs = {key: f for key, f in base.jobs.items() if key in jobs_shown and key not in dirty_jobs}
        job_need = {key: pg for key, pg in jobs_shown.items() if key not in jobs}
        sums = _TaskSums(job_need, node_need)
        if node_need is None:
            for uid, t in self.tasks.items():
                sums.add(uid, t)
        elif node_need or job_need:
            for uid, t in self.tasks.items():
                if t.job in job_need:
                    sums.add(uid, t)
                elif t.node in node_need:  # most tasks of a changed node are of an unchanged job
                    sums.add_to_node(uid, t)
        for name in self.nodes.keys() if node_need is None else node_need:
            nodes[name] = _dumps(self._node_entry(name, self.nodes[name], sums))
        for key, pg in job_need.items():
            jobs[key] = _dumps(self._job_entry(key, pg, sums))
        if hypernodes is None:
            hypernodes = {key: _dumps(value) for key, value in self._hypernode_parts().items()}
        return Fragments(self, nodes, jobs, hypernodes)

    def _jobs_shown(self) -> dict[str, kinds.PodGroupView]:
        return {key: pg for key, pg in self.podgroups.items() if self.job_queue(pg) in self.queues}

    def _jobs_render_alike(self, other: Snapshot) -> bool:
        """Whether every job's entry depends on the same settings in ``other`` (its priority does)."""
        return other.default_priority == self.default_priority and not any(
            _changed(other.priority_classes, self.priority_classes)
        )

    def _dirty_since(self, other: Snapshot) -> tuple[set[str], set[str], bool]:
        """The nodes and jobs whose entries may differ from ``other``'s, and whether the labels of
        any node did (which the hypernodes' members select by)."""
        nodes = set(_changed(other.nodes, self.nodes))
        labels_changed = any(
            (old := other.nodes.get(name)) is None or (new := self.nodes.get(name)) is None or old.labels != new.labels
            for name in nodes
        )
        jobs: set[str] = set()
        for m in ("csinodes", "node_used"):
            nodes.update(_changed(getattr(other, m), getattr(self, m)))
        jobs.update(_changed(other.podgroups, self.podgroups))
        for uid in _changed(other.tasks, self.tasks):
            for t in (other.tasks.get(uid), self.tasks.get(uid)):
                if t is not None:
                    nodes.add(t.node)
                    if t.job is not None:
                        jobs.add(t.job)
        return nodes, jobs, labels_changed

    def _render(self) -> dict[str, Any]:
        jobs_shown = self._jobs_shown()
        sums = _TaskSums(jobs_shown)
        for uid, t in self.tasks.items():
            sums.add(uid, t)
        return {
            **self._small_parts(),
            **self._hypernode_parts(),
            "nodes": {name: self._node_entry(name, n, sums) for name, n in self.nodes.items()},
            "jobs": {key: self._job_entry(key, pg, sums) for key, pg in jobs_shown.items()},
        }

    def _small_parts(self) -> dict[str, Any]:
        """Every part of the canonical snapshot but the nodes, the jobs and the hypernodes."""
        return {
            "version": self.version,
            "nodeList": self.node_list(),
            "queues": {name: _queue_entry(q) for name, q in self.queues.items()},
            "csiNodes": {name: dict(c.drivers) for name, c in self.csinodes.items()},
            "revocableNodes": sorted(name for name, n in self.nodes.items() if n.revocable_zone),
            "defaultPriority": self.default_priority,
        }

    def _hypernode_parts(self) -> dict[str, Any]:
        """The hypernodes and their tiers: matching every member selector against every node's
        labels, which costs more than all the rest of the small parts together."""
        hypernodes = hypernode_entries(dict(self.hypernodes.items()), {n: v.labels for n, v in self.nodes.items()})
        by_tier: dict[str, list[str]] = {}
        for name, e in hypernodes.items():
            by_tier.setdefault(str(e.tier), []).append(name)
        return {
            "hyperNodes": {
                name: {
                    "tier": e.tier,
                    "tierName": e.tier_name,
                    "parent": e.parent,
                    "children": e.children,
                    "nodes": e.nodes,
                }
                for name, e in hypernodes.items()
            },
            "hyperNodesByTier": {tier: sorted(names) for tier, names in by_tier.items()},
        }

    def _node_entry(self, name: str, n: kinds.NodeView, sums: _TaskSums) -> dict[str, Any]:
        csi = self.csinodes.get(name)
        allocatable = kinds.node_allocatable(n, csi)
        used = self.node_used.get(name) or {}
        idle = dict(allocatable)
        for k, v in used.items():
            idle[k] = idle.get(k, 0) - v
        return {
            "allocatable": nonzero(allocatable),
            "capability": nonzero(kinds.node_capability(n, csi)),
            "idle": nonzero(idle),
            "used": nonzero(used),
            "releasing": nonzero(sums.node_releasing.get(name, {})),
            "pipelined": {},
            "tasks": sorted(sums.node_tasks.get(name, [])),
            "unschedulable": n.unschedulable,
            "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in n.taints],
            "labels": dict(n.labels),
            "revocableZone": n.revocable_zone,
        }

    def _job_entry(self, key: str, pg: kinds.PodGroupView, sums: _TaskSums) -> dict[str, Any]:
        return {
            "name": pg.name,
            "namespace": pg.namespace,
            "podGroupUid": pg.uid,
            "queue": self.job_queue(pg),
            "minAvailable": pg.min_member,
            "taskMinAvailable": dict(pg.min_task_member),
            "podGroupPhase": pg.phase,
            "preemptable": pg.preemptable,
            "priority": self.job_priority(pg),
            "allocated": nonzero(sums.job_allocated[key]),
            "totalRequest": nonzero(sums.job_total[key]),
            "tasks": sums.job_tasks[key],
        }


def _queue_entry(q: kinds.QueueView) -> dict[str, Any]:
    return {
        "weight": q.weight,
        "reclaimable": q.reclaimable,
        "state": q.state,
        "parent": q.parent,
        "priority": q.priority,
        "capability": nonzero(q.capability),
        "deserved": nonzero(q.deserved),
        "guarantee": nonzero(q.guarantee),
    }


class _TaskSums:
    """What the tasks add up to per node (its tasks, what is releasing) and per job (its tasks,
    their requests, what is allocated): one pass over the tasks for the whole rendering, for the
    given jobs and nodes (all nodes without ``nodes``)."""

    def __init__(self, jobs: dict[str, kinds.PodGroupView], nodes: set[str] | None = None) -> None:
        self.nodes = nodes
        self.node_tasks: dict[str, list[str]] = {}
        self.node_releasing: dict[str, dict[str, int]] = {}
        self.job_tasks: dict[str, dict[str, Any]] = {key: {} for key in jobs}
        self.job_allocated: dict[str, dict[str, int]] = {key: {} for key in jobs}
        self.job_total: dict[str, dict[str, int]] = {key: {} for key in jobs}

    def add_to_node(self, uid: str, t: kinds.PodView) -> None:
        """The task's share of its node's entry alone."""
        node, status = t.node, t.status
        if node and status not in OFF_NODE and (self.nodes is None or node in self.nodes):
            self.node_tasks.setdefault(node, []).append(uid)
            if status == TaskStatus.RELEASING:
                _accumulate(self.node_releasing.setdefault(node, {}), t.resreq)

    def add(self, uid: str, t: kinds.PodView) -> None:
        """The task's share of its node's and its job's entries."""
        # once per task of a rendering: locals, and a request copied in C unless a zero is dropped
        self.add_to_node(uid, t)
        job = t.job
        if job is None or (tasks := self.job_tasks.get(job)) is None:
            return
        resreq, status = t.resreq, t.status
        tasks[uid] = {
            "uid": uid,
            "name": t.name,
            "namespace": t.namespace,
            "node": t.node,
            "status": status,
            "priority": t.priority,
            "resreq": dict(resreq) if all(resreq.values()) else nonzero(resreq),
            "preemptable": t.preemptable,
            "bestEffort": t.best_effort,
            "role": t.role,
        }
        _accumulate(self.job_total[job], resreq)
        if status in ALLOCATED:
            _accumulate(self.job_allocated[job], resreq)


def _accumulate(total: dict[str, int], add: dict[str, int]) -> None:
    for k, v in add.items():
        total[k] = total.get(k, 0) + v


def canonical_bytes(value: Any) -> bytes:
    """The bytes the digest hashes (cache-semantics.md, section 8)."""
    return _dumps(value).encode("utf-8")


# The canonical JSON (section 8): no NumberLiteral hook, a snapshot holds none.
# tests/fold/test_snapshot_fastjson.py holds _dumps to _dumps_stdlib, character for character.
_CANONICAL = SortedJson()
_dumps_stdlib = _CANONICAL.stdlib
_dumps = _CANONICAL.text


def _object(members: dict[str, str]) -> str:
    """A JSON object of members already in canonical JSON, as ``_dumps`` would write it."""
    return "{" + ",".join(f"{encode_basestring(k)}:{members[k]}" for k in sorted(members)) + "}"


def _changed(old: FrozenMap[str, Any], new: FrozenMap[str, Any]) -> Iterator[str]:
    """Keys stored in ``new`` with another object than in ``old``, or in one of them only. A shard
    the fold has not written to since ``old`` is the very same dict: skipped whole."""
    for a, b in zip(old.shards(), new.shards(), strict=True):
        if a is b:
            continue
        for key, value in b.items():
            if a.get(key) is not value:
                yield key
        yield from a.keys() - b.keys()
