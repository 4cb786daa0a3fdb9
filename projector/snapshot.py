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
        node_tasks: dict[str, list[str]] = {}
        node_releasing: dict[str, dict[str, int]] = {}
        job_tasks: dict[str, dict[str, Any]] = {key: {} for key in jobs_shown}
        job_allocated: dict[str, dict[str, int]] = {key: {} for key in jobs_shown}
        job_total: dict[str, dict[str, int]] = {key: {} for key in jobs_shown}
        for uid, t in self.tasks.items():
            if t.node and t.status not in OFF_NODE:
                node_tasks.setdefault(t.node, []).append(uid)
                if t.status == TaskStatus.RELEASING:
                    _accumulate(node_releasing.setdefault(t.node, {}), t.resreq)
            if t.job in job_tasks:
                job_tasks[t.job][uid] = {
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
                _accumulate(job_total[t.job], t.resreq)
                if t.status in ALLOCATED:
                    _accumulate(job_allocated[t.job], t.resreq)

        nodes = {}
        for name, n in self.nodes.items():
            csi = self.csinodes.get(name)
            allocatable = kinds.node_allocatable(n, csi)
            used = self.node_used.get(name) or {}
            idle = dict(allocatable)
            for k, v in used.items():
                idle[k] = idle.get(k, 0) - v
            nodes[name] = {
                "allocatable": nonzero(allocatable),
                "capability": nonzero(kinds.node_capability(n, csi)),
                "idle": nonzero(idle),
                "used": nonzero(used),
                "releasing": nonzero(node_releasing.get(name, {})),
                "pipelined": {},
                "tasks": sorted(node_tasks.get(name, [])),
                "unschedulable": n.unschedulable,
                "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in n.taints],
                "labels": dict(n.labels),
                "revocableZone": n.revocable_zone,
            }
        jobs = {
            key: {
                "name": pg.name,
                "namespace": pg.namespace,
                "podGroupUid": pg.uid,
                "queue": self.job_queue(pg),
                "minAvailable": pg.min_member,
                "taskMinAvailable": dict(pg.min_task_member),
                "podGroupPhase": pg.phase,
                "preemptable": pg.preemptable,
                "priority": self.job_priority(pg),
                "allocated": nonzero(job_allocated[key]),
                "totalRequest": nonzero(job_total[key]),
                "tasks": job_tasks[key],
            }
            for key, pg in jobs_shown.items()
        }
        queues = {
            name: {
                "weight": q.weight,
                "reclaimable": q.reclaimable,
                "state": q.state,
                "parent": q.parent,
                "priority": q.priority,
                "capability": nonzero(q.capability),
                "deserved": nonzero(q.deserved),
                "guarantee": nonzero(q.guarantee),
            }
            for name, q in self.queues.items()
        }
        entries = hypernode_entries(dict(self.hypernodes.items()), {n: v.labels for n, v in self.nodes.items()})
        by_tier: dict[str, list[str]] = {}
        for name, e in entries.items():
            by_tier.setdefault(str(e.tier), []).append(name)
        return {
            "version": self.version,
            "nodeList": self.node_list(),
            "nodes": nodes,
            "jobs": jobs,
            "queues": queues,
            "hyperNodes": {
                name: {
                    "tier": e.tier,
                    "tierName": e.tier_name,
                    "parent": e.parent,
                    "children": e.children,
                    "nodes": e.nodes,
                }
                for name, e in entries.items()
            },
            "hyperNodesByTier": {tier: sorted(names) for tier, names in by_tier.items()},
            "csiNodes": {name: dict(c.drivers) for name, c in self.csinodes.items()},
            "revocableNodes": sorted(name for name, n in self.nodes.items() if n.revocable_zone),
            "defaultPriority": self.default_priority,
        }


def _accumulate(total: dict[str, int], add: dict[str, int]) -> None:
    for k, v in add.items():
        total[k] = total.get(k, 0) + v


def canonical_bytes(value: Any) -> bytes:
    """The bytes the digest hashes (cache-semantics.md, section 8)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
