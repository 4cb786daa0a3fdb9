"""Snapshot: the cache at one version, immutable, taken in O(1).

It holds frozen views of the fold's maps (shared with the state until the state next writes to
a shard); the canonical JSON of ``spec/snapshot.schema.json`` is rendered from them on demand
and cached, and the digest is the SHA-256 of its canonical bytes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, TypedDict

from strata.projector import kinds
from strata.projector.cowmap import FrozenMap
from strata.projector.hypernodes import hypernode_entries
from strata.projector.resources import nonzero
from strata.projector.task import ALLOCATED, OFF_NODE, TaskStatus


class _Rendered(TypedDict, total=False):
    """What a snapshot has rendered so far (each is rendered once, on demand)."""

    json: dict[str, Any]
    bytes: bytes


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
        if "bytes" not in self._rendered:
            self._rendered["bytes"] = canonical_bytes(self.to_json())
        return self._rendered["bytes"]

    def digest(self) -> str:
        return hashlib.sha256(self.canonical_bytes()).hexdigest()

    def _render(self) -> dict[str, Any]:
        jobs_shown = {key: pg for key, pg in self.podgroups.items() if self.job_queue(pg) in self.queues}
        sums = _TaskSums(jobs_shown)
        for uid, t in self.tasks.items():
            sums.add(uid, t)
        hypernodes = hypernode_entries(dict(self.hypernodes.items()), {n: v.labels for n, v in self.nodes.items()})
        by_tier: dict[str, list[str]] = {}
        for name, e in hypernodes.items():
            by_tier.setdefault(str(e.tier), []).append(name)
        return {
            "version": self.version,
            "nodeList": self.node_list(),
            "nodes": {name: self._node_entry(name, n, sums) for name, n in self.nodes.items()},
            "jobs": {key: self._job_entry(key, pg, sums) for key, pg in jobs_shown.items()},
            "queues": {name: _queue_entry(q) for name, q in self.queues.items()},
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
            "csiNodes": {name: dict(c.drivers) for name, c in self.csinodes.items()},
            "revocableNodes": sorted(name for name, n in self.nodes.items() if n.revocable_zone),
            "defaultPriority": self.default_priority,
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
    """What the tasks add up to per node (its tasks, what is releasing) and per shown job (its
    tasks, their requests, what is allocated): one pass over the tasks for the whole rendering."""

    def __init__(self, jobs_shown: dict[str, kinds.PodGroupView]) -> None:
        self.node_tasks: dict[str, list[str]] = {}
        self.node_releasing: dict[str, dict[str, int]] = {}
        self.job_tasks: dict[str, dict[str, Any]] = {key: {} for key in jobs_shown}
        self.job_allocated: dict[str, dict[str, int]] = {key: {} for key in jobs_shown}
        self.job_total: dict[str, dict[str, int]] = {key: {} for key in jobs_shown}

    def add(self, uid: str, t: kinds.PodView) -> None:
        if t.node and t.status not in OFF_NODE:
            self.node_tasks.setdefault(t.node, []).append(uid)
            if t.status == TaskStatus.RELEASING:
                _accumulate(self.node_releasing.setdefault(t.node, {}), t.resreq)
        if t.job in self.job_tasks:
            self.job_tasks[t.job][uid] = {
                "uid": uid,
                "name": t.name,
                "namespace": t.namespace,
                "node": t.node,
                "status": t.status,
                "priority": t.priority,
                "resreq": nonzero(t.resreq),
                "preemptable": t.preemptable,
                "bestEffort": t.best_effort,
                "role": t.role,
            }
            _accumulate(self.job_total[t.job], t.resreq)
            if t.status in ALLOCATED:
                _accumulate(self.job_allocated[t.job], t.resreq)


def _accumulate(total: dict[str, int], add: dict[str, int]) -> None:
    for k, v in add.items():
        total[k] = total.get(k, 0) + v


def canonical_bytes(value: Any) -> bytes:
    """The bytes the digest hashes (cache-semantics.md, section 8)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
